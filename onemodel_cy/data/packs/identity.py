"""What identifies a container's file (``containers.py``) to a sharded pack's task: the
client records it for each file a partition reads when it plans the pack
(``Container.identity``), and the task, on an engine's worker or later in this process,
reads it again and refuses another file (``sharded.ShardJob.check_container``), so that
the plan's texts are never paired with another file's images.

Read without decoding an image, and from the file's content, not its time: a copy of the
source on a worker's machine is the same source. Per format (docs/packed-format.md,
"Writing a sharded pack"): an LMDB's data file size, record count, last transaction and
page, and the digest of the partition's labels; a Parquet file's size, row count, the
digest of its footer and of the partition's texts (and keys); a tar's size and the digest
of the partition's image member headers.
"""
from __future__ import annotations

import hashlib
import os

from onemodel_cy.data.packs.format import PackError


def planned_file(paths, index, identify, *more) -> tuple:
    """``(file, identity)`` of the container's ``index``-th file, or where a worker finds
    fewer files (a folder's), ``(None, {"files": count})``."""
    if index >= len(paths):
        return None, {"files": len(paths)}
    return paths[index], identify(paths[index], *more)


def value_digest(digest, value) -> None:
    """One value (bytes, or None: missing) into ``digest``, its length first, so that no two
    lists of values give the same stream."""
    if value is None:
        digest.update(b"\xff" * 8)
    else:
        value = bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else repr(value).encode()
        digest.update(len(value).to_bytes(8, "little") + value)


def parquet_footer(path: str) -> dict:
    import pyarrow.parquet as pq        # the caller (ParquetSource) has checked it is installed
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(max(size - 8, 0))
        tail = f.read(8)
        length = int.from_bytes(tail[:4], "little")
        if size < 12 or tail[4:] != b"PAR1" or length > size - 12:
            raise PackError(f"{path}: not a Parquet file ({size} bytes, no footer)")
        f.seek(size - 8 - length)
        footer = hashlib.sha256(f.read(length)).hexdigest()
    try:
        rows = pq.read_metadata(path).num_rows
    except Exception as error:          # pyarrow's ArrowInvalid / OSError for a damaged footer
        raise PackError(f"{path}: not a readable Parquet file ({error})") from None
    return {"bytes": size, "rows": rows, "footer sha256": footer[:16]}


def member_headers(path: str, offsets) -> dict:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        for offset in offsets:
            f.seek(offset - 512)
            digest.update(f.read(512))
    return {"bytes": size, "member headers sha256": digest.hexdigest()[:16]}
