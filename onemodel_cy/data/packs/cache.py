"""The local cache of packs read from a URL: its folders, an exact folder's maps, its bound.

The one home of the cache's layout (``remote.py`` writes it, ``exact.py`` and the reader
read it). A pack fetched from a URL lies in the cache folder under its manifest's SHA-256,
so a pack replaced at its URL gets another folder and is never mixed with the old one:

- ``<sha256>``: a whole copy, every file of the pack checked and in place;
- ``<sha256>-exact``: an *exact* folder, every file of the pack but the pixels, each
  ``pixels.npy`` a sparse file holding only its header, filled sample by sample
  (``exact.py``), beside two maps of one entry per sample (the global index, through
  every shard), which are not part of the format:
  ``present`` (uint8: ``PRESENT`` once all of the sample's bytes are in place, ``MISSING``
  before) and ``claims`` (int32: the id of the process fetching the sample, 0 for none).
  The maps are written whole with ordinary writes before they are mapped (and a map a
  former version left sparse is reserved with ``posix_fallocate``), so a store through
  the mapping never needs a block the disk may not have (a full disk is an ``OSError``
  naming the file, never a SIGBUS).

Each folder the cache makes holds the file ``MARK``: eviction removes only folders named
as above that hold it (a ``cache=`` folder shared with anything else loses nothing else).
A fetch under way lies in ``.fetch-<pid>-<hex>`` (``new_partial``), renamed to its name
once complete; a folder being removed is first renamed to such a name. One whose process
is gone (a fetch killed midway) is reclaimed by the next fetch's ``make_room`` once nothing
in it changed for ``STALE`` seconds, and counted against the bound until then.

A folder is served only once ``complete`` finds it whole (its manifest hashes to its
name, every file it lists is in place at its recorded size, an exact folder's maps are
there at theirs); one that is not is removed and fetched again. Nothing is created or
touched before a complete copy is looked for: a read-only cache that holds one serves it
(``cached``), its maps mapped read-only.
"""
from __future__ import annotations

import errno
import os
import re
import secrets
import shutil
import time

import numpy as np

from onemodel_cy.data.packs.format import MANIFEST, SHARDED_FORMAT, PackError, open_manifest

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "onemodel_cy", "packs")
DEFAULT_CACHE_BYTES = 64 << 30
EXACT = "-exact"             # the name of an exact folder: the manifest's SHA-256 and this
PRESENT_MAP = "present"      # an exact folder's map of fetched samples
CLAIMS_MAP = "claims"        # ... and of the process fetching each
MAPS = ((PRESENT_MAP, np.uint8), (CLAIMS_MAP, np.int32))
MISSING, PRESENT = 0, 1      # a sample's byte in `present`
MARK = ".onemodel-cy-cache"  # in every folder the cache made: eviction touches no other
PACK_NAME = re.compile(r"[0-9a-f]{64}(-exact)?")
PARTIAL_NAME = re.compile(r"\.fetch-([0-9]+)-[0-9a-f]{8}")
STALE = 300.0                # seconds a dead process's partial folder must be quiet before it is reclaimed
READ_ONLY = (errno.EROFS, errno.EACCES, errno.EPERM)
FULL = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)    # a disk (or a quota, a file-size limit) that is full
ZEROS = 1 << 20              # bytes of zeros per write of a new map


def checked(cache, cache_bytes) -> tuple[str, int]:
    """``(folder, limit)``: the cache folder (``DEFAULT_CACHE`` for None), absolute, and its
    bound in bytes (``DEFAULT_CACHE_BYTES`` for None)."""
    folder = os.path.abspath(os.fspath(cache if cache is not None else DEFAULT_CACHE))
    limit = DEFAULT_CACHE_BYTES if cache_bytes is None else cache_bytes
    if type(limit) is not int or limit < 1:
        raise ValueError(f"cache_bytes must be a positive number of bytes, received {cache_bytes!r}")
    return folder, limit


def absolute(cache):
    """``cache=`` as a dataset keeps it (and a pickled copy reopens it): None, or the
    folder made absolute now, so that an ``os.chdir`` afterwards, or a worker process
    started elsewhere, uses the same cache."""
    return None if cache is None else os.path.abspath(os.fspath(cache))


def folder_of(cache: str, digest: str, exact: bool) -> str:
    """The folder in ``cache`` of the pack whose manifest has SHA-256 ``digest``."""
    return os.path.join(cache, digest + EXACT if exact else digest)


def cached(cache: str, digest: str, exact: bool) -> str | None:
    """The folder in ``cache`` that serves the pack of manifest SHA-256 ``digest``, or None:
    a whole copy serves either way, an exact folder only when ``exact`` is asked for. Only
    a complete folder serves; one that is not (a file or a map removed, a file cut short)
    is removed (fetched again by the caller). The folder found is marked recently opened
    (evicted last) where the cache is writable; nothing is written where it is not."""
    for local in (folder_of(cache, digest, False), folder_of(cache, digest, True)):
        if not (os.path.isdir(local) and (exact or not local.endswith(EXACT))):
            continue
        problem = complete(local, digest)
        if problem is None:
            try:
                os.utime(local)
                if not os.path.exists(os.path.join(local, MARK)):
                    mark(local)         # a folder an earlier version made (its name and manifest say so)
            except OSError as error:
                if error.errno not in READ_ONLY:
                    raise
            return local
        try:
            discard(cache, local)
        except OSError as error:
            raise PackError(f"{local}: a damaged cache folder ({problem}) that cannot be removed ({error}): "
                            f"remove it, or open the pack with another cache=") from None
    return None


def complete(folder: str, digest: str) -> str | None:
    """None when the cache folder ``folder`` holds the whole pack of manifest SHA-256
    ``digest`` (its manifest, each shard's, every array file at the size its manifest
    records, an exact folder's maps at theirs); else what is wrong. Sizes only: the
    contents were checked when they were fetched, and the reader checks the index."""
    try:
        manifest, found = open_manifest(folder)
        if found != digest:
            return f"its {MANIFEST} has SHA-256 {found}"
        shards = [(folder, manifest)]
        if manifest["format"] == SHARDED_FORMAT:
            shards = []
            for entry in manifest["shards"]:
                inner, found = open_manifest(os.path.join(folder, entry["name"]))
                if found != entry["manifest_sha256"]:
                    return f"{entry['name']}/{MANIFEST} has SHA-256 {found}"
                shards.append((os.path.join(folder, entry["name"]), inner))
    except PackError as error:
        return str(error)
    for shard, inner in shards:
        for entry in inner["arrays"].values():
            path = os.path.join(shard, entry["file"])
            if not os.path.isfile(path) or os.path.getsize(path) != entry["bytes"]:
                return f"{path} is missing or not of its {entry['bytes']} bytes"
    if folder.endswith(EXACT):
        for name, dtype in MAPS:
            path, size = os.path.join(folder, name), manifest["count"] * np.dtype(dtype).itemsize
            if not os.path.isfile(path) or os.path.getsize(path) != size:
                return f"its {name} map is missing or not of its {size} bytes"
    return None


def mark(folder: str) -> None:
    """``folder`` marked as the cache's own (an empty file: it counts no byte against the bound)."""
    with named(os.path.join(folder, MARK)), open(os.path.join(folder, MARK), "w"):
        pass


def new_partial(cache: str) -> str:
    """A new folder ``.fetch-<pid>-<hex>`` in ``cache`` (made now, with the cache folder),
    marked as the cache's: where a fetch writes until its pack is complete."""
    with named(cache):
        os.makedirs(cache, exist_ok=True)
    partial = os.path.join(cache, f".fetch-{os.getpid()}-{secrets.token_hex(4)}")
    with named(partial):
        os.mkdir(partial)
    mark(partial)
    return partial


def publish(partial: str, local: str) -> str:
    """The complete folder ``partial`` renamed to ``local``; if another process published it
    first, theirs serves (``partial`` is the caller's to remove)."""
    try:
        os.rename(partial, local)   # onto an existing folder it fails: another process fetched it first
    except OSError:
        if not os.path.isdir(local):
            raise
    return local


def discard(cache: str, folder: str) -> None:
    """Remove the cache folder ``folder``: renamed first to a partial name of this process
    (a removal cut short leaves a partial folder, reclaimed later, never half a pack under
    a pack's name), then removed. Gone already (another process removed it): nothing."""
    doomed = os.path.join(cache, f".fetch-{os.getpid()}-{secrets.token_hex(4)}")
    try:
        os.rename(folder, doomed)
    except FileNotFoundError:
        return
    shutil.rmtree(doomed, ignore_errors=True)


class named:
    """A context in which a full disk's ``OSError`` that names no file (``ENOSPC``,
    ``EDQUOT``, ``EFBIG``) is raised again naming ``path``."""

    def __init__(self, path: str):
        self.path = path

    def __enter__(self):
        return self

    def __exit__(self, kind, error, traceback):
        if isinstance(error, OSError) and error.filename is None and error.errno in FULL:
            raise OSError(error.errno, f"{error.strerror} (writing the pack cache)", self.path) from None
        return False


def maps_bytes(count: int) -> int:
    """The bytes of an exact folder's maps for ``count`` samples (counted against the bound)."""
    return sum(count * np.dtype(dtype).itemsize for _, dtype in MAPS)


def make_maps(folder: str, count: int) -> None:
    """An exact folder's maps for ``count`` samples: none present yet, none claimed. Written
    with ordinary writes (every block allocated now: a full disk fails here, naming the
    file, not later in a store through the mapping)."""
    for name, dtype in MAPS:
        path = os.path.join(folder, name)
        size = count * np.dtype(dtype).itemsize
        with named(path), open(path, "wb") as f:
            zeros = bytes(min(size, ZEROS))
            for start in range(0, size, ZEROS):
                f.write(zeros[:min(ZEROS, size - start)])


def open_maps(folder: str, count: int) -> tuple[np.memmap, np.memmap]:
    """``(present, claims)`` of the exact folder ``folder``, each checked to hold ``count``
    entries: mapped writable (shared with every process that maps them), their blocks
    reserved first (a map an earlier version left sparse); mapped read-only where the cache
    is read-only (the arrays are then not writeable: nothing can be fetched into it)."""
    maps = []
    for name, dtype in MAPS:
        path = os.path.join(folder, name)
        size = count * np.dtype(dtype).itemsize
        try:
            fd = os.open(path, os.O_RDWR)
        except OSError as error:
            if error.errno not in READ_ONLY:
                raise
            fd = None
        try:
            actual = os.path.getsize(path)
            if actual != size:
                raise PackError(f"{folder}: its {name} map holds {actual} bytes for {count} samples of "
                                f"{np.dtype(dtype).itemsize} (a damaged cache folder: open the URL again, which "
                                f"replaces it)")
            if fd is not None and size:
                reserve(fd, path, size)
        finally:
            if fd is not None:
                os.close(fd)
        maps.append(np.memmap(path, dtype=dtype, mode="r+" if fd is not None else "r", shape=(count,))
                    if count else np.zeros(0, dtype))
    return maps[0], maps[1]


def reserve(fd: int, path: str, size: int) -> None:
    """Every block of the file ``fd`` (``size`` bytes) allocated, so that no store through a
    mapping of it faults on a full disk; a full disk is an ``OSError`` naming ``path``."""
    try:
        os.posix_fallocate(fd, 0, size)
    except OSError as error:
        if error.errno in (errno.EOPNOTSUPP, errno.EINVAL):     # a file system without it: written whole instead
            return
        raise OSError(error.errno, f"{error.strerror} (reserving the blocks of an exact cache map)", path) from None


def is_exact(folder: str) -> bool:
    """Whether the cache folder ``folder`` is an exact folder (its name says; its maps must be there)."""
    named = folder.endswith(EXACT)
    if named and not all(os.path.isfile(os.path.join(folder, name)) for name, _ in MAPS):
        raise PackError(f"{folder}: an exact cache folder without its {PRESENT_MAP} and {CLAIMS_MAP} (removed "
                        f"meanwhile, or damaged): open the URL again")
    return named


def refuse_as_local(folder: str) -> None:
    """An exact folder named as a local pack is refused: not all of its samples are there."""
    if os.path.isfile(os.path.join(folder, PRESENT_MAP)):     # a folder of that name is a shard (refused after)
        raise PackError(f"{folder}: the cache of a pack at a URL whose samples are fetched as they are "
                        f"needed (not all are here): open the URL (PackedImageDataset(url, cache=...))")


def make_room(cache: str, need: int, limit: int, url: str, partial: str) -> None:
    """Remove cached packs, least recently opened first, until ``need`` more bytes fit in
    ``limit``; a pack larger than the limit is refused before anything is fetched. Only the
    cache's own folders are counted and removed (``MARK``): the partial folders of other
    fetches under way are counted, those of processes that are gone (and quiet for
    ``STALE`` seconds) removed first; ``partial`` (the caller's, in ``need``) is left."""
    if need > limit:
        raise PackError(f"{url}: the pack holds {need} bytes, more than the cache's limit of {limit} bytes "
                        f"(cache_bytes)")
    entries, used, living = [], 0, {}
    for name in os.listdir(cache):
        path = os.path.join(cache, name)
        if path == partial or not os.path.isdir(path) or os.path.islink(path):
            continue
        fetching = PARTIAL_NAME.fullmatch(name)
        if fetching is None and not PACK_NAME.fullmatch(name):
            continue
        if not (os.path.exists(os.path.join(path, MARK)) or (fetching is not None and not os.listdir(path))):
            continue                # not the cache's (or a pack folder of an earlier version: left as it is)
        size = folder_bytes(path)
        if fetching is None:
            entries.append((os.path.getmtime(path), size, path))
        elif alive(int(fetching.group(1)), living) or time.time() - last_change(path) < STALE:
            used += size            # a fetch under way: not ours to remove
            continue
        else:
            shutil.rmtree(path, ignore_errors=True)     # a fetch whose process is gone
            continue
        used += size
    for _, size, path in sorted(entries):
        if used + need <= limit:
            break
        discard(cache, path)
        used -= size


def alive(pid: int, known: dict) -> bool:
    """Whether process ``pid`` still runs (``known`` caches the answers of one look)."""
    if pid not in known:
        try:
            os.kill(pid, 0)
            known[pid] = True
        except ProcessLookupError:
            known[pid] = False
        except OSError:             # another user's process: it runs
            known[pid] = True
    return known[pid]


def last_change(folder: str) -> float:
    """The latest modification time of ``folder`` and of anything in it."""
    latest = os.path.getmtime(folder)
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            try:
                latest = max(latest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                pass
    return latest


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files)
