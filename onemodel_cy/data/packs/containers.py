"""The pack writer's containers: the files OCR line datasets come in, each read with its own
library (``docs/guide.md``, "Other sources: LMDB, Parquet, WebDataset").

- ``LmdbSource``: an LMDB as deep-text-recognition-benchmark and PaddleOCR write it
  (``num-samples``, ``image-%09d``, ``label-%09d``, from 1), read with ``lmdb`` (the
  ``lmdb`` extra);
- ``ParquetSource``: Parquet files, as Hugging Face datasets store them (an image column of
  encoded bytes, or of ``{"bytes", "path"}`` structs, and a text column), read with
  ``pyarrow`` (the ``parquet`` extra);
- ``WebDatasetSource``: WebDataset tar shards (``key.png`` or ``key.jpg`` beside
  ``key.txt``), read with the standard ``tarfile``.

A container is only a reader: ``records()`` gives every record's ``(position, key,
locator, text)`` (the texts read and checked first, so the vocabulary is fixed before any
image is decoded), and ``images(entries)`` the encoded bytes of the records asked for, in
order. ``sources.py`` decodes and fits them, and encodes the texts, as it does a folder's,
into the one writer. A container holds only paths and options: it pickles to a shard task.
Anything wrong in the files is a ``PackError`` naming the file and the record.
"""
from __future__ import annotations

import copy
import glob
import hashlib
import os

from onemodel_cy.data.packs.format import PackError
from onemodel_cy.data.packs.identity import member_headers, parquet_footer, planned_file, value_digest

__all__ = ["Container", "LmdbSource", "ParquetSource", "WebDatasetSource", "FORMATS"]


class Container:
    """The base of the three containers (``pack`` and ``pack_sharded`` take any of them)."""
    format = None

    def records(self) -> list:
        raise NotImplementedError

    def images(self, entries):
        raise NotImplementedError

    def where(self, entry) -> str:
        """Where the record ``(position, key, locator, text)`` is, for an error."""
        return f"{self.path}, record {entry[0]} (key {entry[1]!r})"

    def identity(self, entries, planned: bool = False) -> list:
        """``[(file, {what: value})]``, in order, for the files the records ``entries`` are
        read from: what identifies each, read without decoding an image. The client records
        it when it plans a sharded pack; the shard task reads it again where it runs and
        refuses another file (``sharded.ShardJob.check_container``). ``planned``: the digest
        of the records' texts is taken from ``entries`` (what the plan read), not the file,
        so a file replaced while the plan reads it is refused too."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.path!r})"

    def absolute(self) -> "Container":
        """A copy whose path (or paths) are absolute: what an engine's worker is given, so
        that it reads the files the client named whatever its working folder."""
        resolved = copy.copy(self)
        resolved.path = ([os.path.abspath(os.fspath(p)) for p in self.path] if isinstance(self.path, (list, tuple))
                         else os.path.abspath(os.fspath(self.path)))
        return resolved


def needs(module: str, extra: str, what: str):
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(f"reading {what} needs {module.split('.')[0]}: pip install -e '.[{extra}]' "
                          f"(in a checkout)") from None


def text_of(data, where: str) -> str:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise PackError(f"{where}: the label is {type(data).__name__}, not text")
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as error:
        raise PackError(f"{where}: the label is not UTF-8 text (byte {bytes(data)[error.start]:#04x} at "
                        f"position {error.start})") from None


def files_of(path, suffix: str, what: str) -> list:
    """A file, a folder's ``*suffix`` files in name order, or a list of files."""
    if isinstance(path, (list, tuple)):
        paths = [os.fspath(p) for p in path]
    else:
        path = os.fspath(path)
        paths = sorted(glob.glob(os.path.join(glob.escape(path), f"*{suffix}"))) if os.path.isdir(path) else [path]
    if not paths:
        raise PackError(f"{path}: no {suffix} file in this folder ({what})")
    for p in paths:
        if not os.path.isfile(p):
            raise PackError(f"{p}: no such file ({what})")
        if os.path.getsize(p) == 0:
            raise PackError(f"{p}: the file is empty ({what})")
    return paths


# ---------------------------------------------------------------- LMDB

class LmdbSource(Container):
    """An LMDB of line images: ``count_key`` holds the number of records n (decimal text);
    record i (``first`` .. ``first + n - 1``) is the encoded image at ``image_key % i`` and its
    UTF-8 text at ``label_key % i``. The defaults are deep-text-recognition-benchmark's and
    PaddleOCR's layout. ``path`` is the LMDB's folder (``data.mdb``) or its file. A record's
    key in the pack is its image key (``image-000000001``), its label its position (0-based)."""
    format = "lmdb"

    def __init__(self, path, *, image_key: str = "image-%09d", label_key: str = "label-%09d",
                 count_key: str = "num-samples", first: int = 1):
        self.path = os.fspath(path)
        self.image_key, self.label_key, self.count_key, self.first = image_key, label_key, count_key, first
        for name, pattern in (("image_key", image_key), ("label_key", label_key)):
            try:
                pattern % 1
            except (TypeError, ValueError):
                raise ValueError(f"{name} must hold one %d-style field for the record number, received "
                                 f"{pattern!r}") from None

    def data_file(self) -> str:
        return os.path.join(self.path, "data.mdb") if os.path.isdir(self.path) else self.path

    def open(self):
        lmdb = needs("lmdb", "lmdb", "an LMDB")
        data = self.data_file()
        if not os.path.isfile(data):
            raise PackError(f"{self.path}: no LMDB here ({data} is not a file)")
        if os.path.getsize(data) == 0:
            raise PackError(f"{data}: the file is empty (not an LMDB)")
        try:
            env = lmdb.open(self.path, readonly=True, lock=False, readahead=False, meminit=False,
                            subdir=os.path.isdir(self.path), max_readers=512)
        except lmdb.Error as error:
            raise PackError(f"{self.path}: not a readable LMDB ({error})") from None
        # LMDB maps the file: a page past its end would be a SIGBUS, not an error. A file
        # shorter than the pages its last commit names is refused before any is read.
        need = (env.info()["last_pgno"] + 1) * env.stat()["psize"]
        if os.path.getsize(data) < need:
            env.close()
            raise PackError(f"{data}: truncated: {os.path.getsize(data)} bytes, its last commit needs {need}")
        return env

    def records(self) -> list:
        lmdb = needs("lmdb", "lmdb", "an LMDB")
        entries = []
        try:
            return self.read_records(entries)
        except lmdb.Error as error:         # a damaged page: LMDB's own check (MDB_CORRUPTED, ...)
            raise PackError(f"{self.where((len(entries), self.image_key % (self.first + len(entries))))}: "
                            f"unreadable ({type(error).__name__}: {error})") from None

    def read_records(self, entries) -> list:
        env = self.open()
        try:
            with env.begin(buffers=True) as txn:
                raw = txn.get(self.count_key.encode())
                if raw is None:
                    raise PackError(f"{self.path}: no {self.count_key!r} key (the number of records); pass "
                                    f"count_key= / --count-key for another layout")
                try:
                    count = int(bytes(raw).decode("ascii").strip())
                except (UnicodeDecodeError, ValueError):
                    raise PackError(f"{self.path}: {self.count_key!r} holds {bytes(raw)[:40]!r}, not a "
                                    f"number") from None
                for position in range(count):
                    i = self.first + position
                    image, label = self.image_key % i, self.label_key % i
                    where = self.where((position, image))
                    data = txn.get(label.encode())
                    if data is None:
                        raise PackError(f"{where}: no key {label!r}")
                    if txn.get(image.encode()) is None:
                        raise PackError(f"{where}: no key {image!r}")
                    entries.append((position, image, image, text_of(data, where)))
                return entries
        finally:
            env.close()

    def identity(self, entries, planned: bool = False) -> list:
        # The meta page's last transaction and last page are LMDB's own record of the commit
        # read; with the data file's size and the record count, another LMDB at this path
        # (or this one written again) differs in at least one of them, but not always (the
        # same records in another order fill the same pages): so also the digest of the
        # labels of these records, what the plan read, one lookup each. Not the file's time:
        # a copy of the LMDB on a worker's machine is the same LMDB.
        lmdb = needs("lmdb", "lmdb", "an LMDB")
        env = self.open()
        texts = hashlib.sha256()
        try:
            info = env.info()
            with env.begin(buffers=True) as txn:
                raw = txn.get(self.count_key.encode())
                raw = None if raw is None else bytes(raw)
                for entry in entries:
                    value_digest(texts, entry[3].encode() if planned else
                                 txn.get((self.label_key % (self.first + entry[0])).encode()))
        except lmdb.Error as error:
            raise PackError(f"{self.path}: unreadable ({type(error).__name__}: {error})") from None
        finally:
            env.close()
        count = None if raw is None else raw.decode("ascii", "replace").strip()
        data = self.data_file()
        return [(data, {"bytes": os.path.getsize(data), self.count_key: count, "last transaction": info["last_txnid"],
                        "last page": info["last_pgno"], "labels sha256": texts.hexdigest()[:16]})]

    def images(self, entries):
        env = self.open()
        try:
            with env.begin() as txn:
                for position, key, image, _ in entries:
                    data = txn.get(image.encode())
                    if data is None:
                        raise PackError(f"{self.where((position, key))}: no key {image!r}")
                    yield data
        finally:
            env.close()


# ---------------------------------------------------------------- Parquet

class ParquetSource(Container):
    """Parquet files of line images, as Hugging Face datasets store them: ``image_column``
    holds the encoded image, as bytes or as a ``{"bytes": ..., "path": ...}`` struct (the
    ``Image`` feature), ``text_column`` the text (a string, or UTF-8 bytes). ``path`` is a
    file, a folder (its ``*.parquet`` files in name order: a dataset's split) or a list of
    files. A row's key in the pack is its ``key_column`` (a string column), by default its
    row number across the files; its label is its row number (0-based)."""
    format = "parquet"

    def __init__(self, path, *, image_column: str = "image", text_column: str = "text", key_column: str = None):
        self.path = path if isinstance(path, (list, tuple)) else os.fspath(path)
        self.image_column, self.text_column, self.key_column = image_column, text_column, key_column

    def files(self) -> list:
        pq = needs("pyarrow.parquet", "parquet", "Parquet")
        opened = []
        for path in files_of(self.path, ".parquet", "Parquet"):
            try:
                file = pq.ParquetFile(path)
            except Exception as error:          # pyarrow's ArrowInvalid / OSError for a damaged file
                raise PackError(f"{path}: not a readable Parquet file ({error})") from None
            schema = file.schema_arrow
            for option, column in (("image_column", self.image_column), ("text_column", self.text_column),
                                   ("key_column", self.key_column)):
                if column is not None and schema.get_field_index(column) < 0:
                    raise PackError(f"{path}: no column {column!r} (its columns: {', '.join(schema.names)}); "
                                    f"pass {option}= / --{option.replace('_', '-')} to name another")
            opened.append((path, file))
        return opened

    def rows(self, path, file, columns, row_groups=None):
        """``(row in file, {column: value})`` of ``columns``, batch by batch."""
        row = 0 if row_groups is None else sum(file.metadata.row_group(g).num_rows for g in range(row_groups[0]))
        try:
            for batch in file.iter_batches(batch_size=256, columns=columns, row_groups=row_groups):
                for values in batch.to_pylist():
                    yield row, values
                    row += 1
        except PackError:
            raise
        except Exception as error:
            raise PackError(f"{path}: unreadable after row {row} ({type(error).__name__}: {error})") from None

    def records(self) -> list:
        entries, position = [], 0
        columns = [self.text_column] + ([self.key_column] if self.key_column is not None else [])
        for index, (path, file) in enumerate(self.files()):
            for row, values in self.rows(path, file, columns):
                key = str(position) if self.key_column is None else values[self.key_column]
                where = f"{path}, row {row}"
                if not isinstance(key, str):
                    raise PackError(f"{where}: the key ({self.key_column!r}) is {key!r}, not a string")
                text = values[self.text_column]
                entries.append((position, key, (index, row), text if isinstance(text, str) else
                                text_of(text, where + f" (key {key!r}), column {self.text_column!r}")))
                position += 1
        return entries

    def images(self, entries):
        files = self.files()
        for index, (path, file) in enumerate(files):
            wanted = [e for e in entries if e[2][0] == index]
            if not wanted:
                continue
            rows = self.rows(path, file, [self.image_column], row_groups(file, wanted))
            for position, key, (_, want), _ in wanted:
                for row, values in rows:
                    if row == want:
                        break
                yield self.image_bytes(values[self.image_column], f"{path}, row {row} (key {key!r})")

    def identity(self, entries, planned: bool = False) -> list:
        # A Parquet file's footer (its Thrift FileMetaData) records every row group's and
        # column chunk's offset, size and statistics: its digest, with the file's size and
        # row count, tells another file from this one without reading a row; the digest of
        # these rows' texts (and keys), what the plan read, tells the same rows in another
        # order too (whose compressed chunks may be of the same size).
        paths = files_of(self.path, ".parquet", "Parquet")
        return [planned_file(paths, index, self.file_identity, [e for e in entries if e[2][0] == index], planned)
                for index in sorted({e[2][0] for e in entries})]

    def file_identity(self, path, wanted, planned) -> dict:
        pq = needs("pyarrow.parquet", "parquet", "Parquet")
        identity = parquet_footer(path)
        texts = hashlib.sha256()
        for values in (self.planned_texts(wanted) if planned else self.found_texts(pq, path, wanted)):
            value_digest(texts, values)
        identity["texts sha256"] = texts.hexdigest()[:16]
        return identity

    def planned_texts(self, wanted):
        """The text (and key) of each record of ``wanted``, as UTF-8, as the plan read them."""
        for _, key, _, text in wanted:
            yield text.encode()
            if self.key_column is not None:
                yield key.encode()

    def found_texts(self, pq, path, wanted):
        """``planned_texts`` read from the file at ``path`` (None where a row or value is missing)."""
        try:
            file = pq.ParquetFile(path)
        except Exception as error:          # pyarrow's ArrowInvalid / OSError for a damaged file
            raise PackError(f"{path}: not a readable Parquet file ({error})") from None
        columns = [self.text_column] + ([self.key_column] if self.key_column is not None else [])
        rows = self.rows(path, file, columns, row_groups(file, wanted))
        for _, _, (_, want), _ in wanted:
            for row, values in rows:
                if row == want:
                    break
            else:
                values = {}         # fewer rows here than the plan read
            for column in columns:
                value = values.get(column)
                yield value.encode() if isinstance(value, str) else value

    def where(self, entry) -> str:
        index, row = entry[2]
        path = self.path[index] if isinstance(self.path, (list, tuple)) else (
            files_of(self.path, ".parquet", "Parquet")[index] if os.path.isdir(self.path) else self.path)
        return f"{path}, row {row} (key {entry[1]!r})"

    def image_bytes(self, value, where: str) -> bytes:
        if isinstance(value, dict):             # the Hugging Face Image feature: {"bytes", "path"}
            data = value.get("bytes")
            if data is None:
                raise PackError(f"{where}: the image has no bytes (path {value.get('path')!r} only: the "
                                f"dataset refers to files outside it; load it with its images embedded)")
            value = data
        if not isinstance(value, bytes):
            raise PackError(f"{where}: column {self.image_column!r} holds {type(value).__name__}, not the "
                            f"encoded image's bytes")
        return value


# ---------------------------------------------------------------- WebDataset tars

class WebDatasetSource(Container):
    """WebDataset tar shards: a record is the consecutive files sharing a key (the path up
    to the first dot of the file name, as WebDataset splits it), with one image (the first
    of ``image_extensions`` present) and its UTF-8 text (``text_extension``; one final line
    end is not part of the text); other files of a record are ignored. ``path`` is a
    ``.tar`` file, a folder (its ``*.tar`` files in name order) or a list of files;
    uncompressed tars, as WebDataset writes them. A record's key in the pack is its
    WebDataset key, its label its position (0-based) across the shards."""
    format = "webdataset"

    def __init__(self, path, *, image_extensions=("png", "jpg", "jpeg"), text_extension: str = "txt"):
        self.path = path if isinstance(path, (list, tuple)) else os.fspath(path)
        if isinstance(image_extensions, str):
            image_extensions = (image_extensions,)
        self.image_extensions = tuple(e.lower().lstrip(".") for e in image_extensions)
        self.text_extension = text_extension.lower().lstrip(".")

    def groups(self, path):
        """``(key, {extension: TarInfo}, open tar)`` per record of one tar, in order."""
        import tarfile
        try:
            tar = tarfile.open(path, "r:")
        except tarfile.TarError as error:
            raise PackError(f"{path}: not an uncompressed tar file ({error})") from None
        key, members, last, end = None, {}, None, 0
        try:
            while True:
                try:
                    info = tar.next()
                except (tarfile.TarError, EOFError, OSError) as error:
                    raise PackError(f"{path}: truncated or damaged after the member {last!r} ({error})") from None
                if info is None:
                    break
                last, end = info.name, info.offset_data + -(-info.size // 512) * 512
                if not info.isfile():
                    continue
                if info.offset_data + info.size > os.path.getsize(path):
                    raise PackError(f"{path}: truncated in the member {info.name!r}")
                folder, _, name = info.name.rpartition("/")
                if name.startswith("__") or "." not in name:     # WebDataset's metadata, or no extension
                    continue
                stem, _, extension = name.partition(".")
                current = f"{folder}/{stem}" if folder else stem
                if current != key and key is not None:
                    yield key, members, tar
                    members = {}
                key = current
                members[extension.lower()] = info
            # tarfile ends quietly at a damaged header or at the end of the file: a tar that
            # stops without its end-of-archive block (512 zero bytes) was cut short.
            tar.fileobj.seek(end)
            if tar.fileobj.read(512) != bytes(512):
                raise PackError(f"{path}: truncated or damaged after the member {last!r} (no end-of-archive "
                                f"block where the next header should be)")
            if key is not None:
                yield key, members, tar
        finally:
            tar.close()

    def records(self) -> list:
        entries = []
        for index, path in enumerate(files_of(self.path, ".tar", "WebDataset")):
            for key, members, tar in self.groups(path):
                where = self.where((len(entries), key), path)
                try:
                    key.encode("utf-8")
                except UnicodeEncodeError:
                    raise PackError(f"{where}: the file names are not UTF-8; a pack's keys are text") from None
                text = members.get(self.text_extension)
                if text is None:
                    raise PackError(f"{where}: no .{self.text_extension} file (the record has "
                                    f"{', '.join('.' + e for e in members)})")
                image = next((members[e] for e in self.image_extensions if e in members), None)
                if image is None:
                    raise PackError(f"{where}: no image ({', '.join('.' + e for e in self.image_extensions)}; the "
                                    f"record has {', '.join('.' + e for e in members)})")
                data = self.read(path, tar.fileobj, text.offset_data, text.size, where)
                text = text_of(data, where)
                text = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
                entries.append((len(entries), key, (index, image.offset_data, image.size), text))
        return entries

    def images(self, entries):
        paths = files_of(self.path, ".tar", "WebDataset")
        opened = {}
        try:
            for position, key, (index, offset, size), _ in entries:
                if index not in opened:
                    opened[index] = open(paths[index], "rb")
                yield self.read(paths[index], opened[index], offset, size, self.where((position, key), paths[index]))
        finally:
            for f in opened.values():
                f.close()

    def identity(self, entries, planned: bool = False) -> list:
        # A tar's size moves in steps of 10 KiB (its records), so it says little. What this
        # partition reads is each record's image member at the offset the plan found: the
        # 512-byte header just before it is tar's own record of that member (its name, size,
        # time and checksum), so the digest of those headers, with the file's size, tells
        # another tar (or another member at that offset) from this one, at one small read
        # per record, beside the image read anyway.
        paths = files_of(self.path, ".tar", "WebDataset")
        identity = []
        for index in sorted({e[2][0] for e in entries}):
            offsets = [offset for _, _, (i, offset, _), _ in entries if i == index]
            identity.append(planned_file(paths, index, member_headers, offsets))
        return identity

    @staticmethod
    def read(path, f, offset, size, where) -> bytes:
        f.seek(offset)
        data = f.read(size)
        if len(data) != size:
            raise PackError(f"{where}: truncated ({len(data)} of {size} bytes)")
        return data

    def where(self, entry, path=None) -> str:
        if path is None:
            path = files_of(self.path, ".tar", "WebDataset")[entry[2][0]]
        return f"{path}, record {entry[0]} (key {entry[1]!r})"


def row_groups(file, wanted) -> list:
    """The row groups of a Parquet ``file`` that hold the rows of ``wanted`` (records of it, in order)."""
    first, last = wanted[0][2][1], wanted[-1][2][1]
    groups, start = [], 0
    for g in range(file.metadata.num_row_groups):
        end = start + file.metadata.row_group(g).num_rows
        if start <= last and first < end:
            groups.append(g)
        start = end
    return groups


FORMATS = {"lmdb": LmdbSource, "parquet": ParquetSource, "webdataset": WebDatasetSource}
