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

Folders whose name starts with a dot are a fetch still under way (``remote.py``). The cache
is bounded: before a pack is fetched, the packs least recently opened are removed until it
fits in ``cache_bytes`` (a process still mapping a removed pack keeps reading its unlinked
files).
"""
from __future__ import annotations

import os
import shutil

import numpy as np

from onemodel_cy.data.packs.format import PackError

DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "onemodel_cy", "packs")
DEFAULT_CACHE_BYTES = 64 << 30
EXACT = "-exact"             # the name of an exact folder: the manifest's SHA-256 and this
PRESENT_MAP = "present"      # an exact folder's map of fetched samples
CLAIMS_MAP = "claims"        # ... and of the process fetching each
MAPS = ((PRESENT_MAP, np.uint8), (CLAIMS_MAP, np.int32))
MISSING, PRESENT = 0, 1      # a sample's byte in `present`


def checked(cache, cache_bytes) -> tuple[str, int]:
    """``(folder, limit)``: the cache folder (``DEFAULT_CACHE`` for None), absolute, and its
    bound in bytes (``DEFAULT_CACHE_BYTES`` for None)."""
    folder = os.path.abspath(os.fspath(cache if cache is not None else DEFAULT_CACHE))
    limit = DEFAULT_CACHE_BYTES if cache_bytes is None else cache_bytes
    if type(limit) is not int or limit < 1:
        raise ValueError(f"cache_bytes must be a positive number of bytes, received {cache_bytes!r}")
    return folder, limit


def folder_of(cache: str, digest: str, exact: bool) -> str:
    """The folder in ``cache`` of the pack whose manifest has SHA-256 ``digest``."""
    return os.path.join(cache, digest + EXACT if exact else digest)


def cached(cache: str, digest: str, exact: bool) -> str | None:
    """The folder in ``cache`` that serves the pack of manifest SHA-256 ``digest``, or None:
    a whole copy serves either way, an exact folder only when ``exact`` is asked for. The
    folder found is marked recently opened (evicted last)."""
    for local in (folder_of(cache, digest, False), folder_of(cache, digest, True)):
        if os.path.isdir(local) and (exact or not local.endswith(EXACT)):
            os.utime(local)
            return local
    return None


def make_maps(folder: str, count: int) -> None:
    """An exact folder's maps for ``count`` samples: none present yet, none claimed."""
    for name, dtype in MAPS:
        with open(os.path.join(folder, name), "wb") as f:
            f.truncate(count * np.dtype(dtype).itemsize)


def open_maps(folder: str, count: int) -> tuple[np.memmap, np.memmap]:
    """``(present, claims)`` of the exact folder ``folder``, mapped writable (shared with
    every process that maps them), each checked to hold ``count`` entries."""
    present, claims = (np.memmap(os.path.join(folder, name), dtype=dtype, mode="r+") for name, dtype in MAPS)
    if not present.shape[0] == claims.shape[0] == count:
        raise PackError(f"{folder}: {PRESENT_MAP} and {CLAIMS_MAP} hold {present.shape[0]} and "
                        f"{claims.shape[0]} entries for {count} samples (a damaged cache "
                        f"folder: remove it)")
    return present, claims


def is_exact(folder: str) -> bool:
    """Whether the cache folder ``folder`` is an exact folder (its name says; its maps must be there)."""
    named = folder.endswith(EXACT)
    if named and not all(os.path.isfile(os.path.join(folder, name)) for name, _ in MAPS):
        raise PackError(f"{folder}: an exact cache folder without its {PRESENT_MAP} and {CLAIMS_MAP} (removed "
                        f"meanwhile, or damaged): open the URL again")
    return named


def refuse_as_local(folder: str) -> None:
    """An exact folder named as a local pack is refused: not all of its samples are there."""
    if os.path.exists(os.path.join(folder, PRESENT_MAP)):
        raise PackError(f"{folder}: the cache of a pack at a URL whose samples are fetched as they are "
                        f"needed (not all are here): open the URL (PackedImageDataset(url, cache=...))")


def make_room(cache: str, need: int, limit: int, url: str) -> None:
    """Remove cached packs, least recently opened first, until ``need`` more bytes fit in
    ``limit``; a pack larger than the limit is refused before anything is fetched."""
    if need > limit:
        raise PackError(f"{url}: the pack holds {need} bytes, more than the cache's limit of {limit} bytes "
                        f"(cache_bytes)")
    entries = []
    for name in os.listdir(cache):
        path = os.path.join(cache, name)
        if not name.startswith(".") and os.path.isdir(path):
            entries.append((os.path.getmtime(path), folder_bytes(path), path))
    used = sum(size for _, size, _ in entries)
    for _, size, path in sorted(entries):
        if used + need <= limit:
            break
        shutil.rmtree(path, ignore_errors=True)
        used -= size


def folder_bytes(folder: str) -> int:
    return sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files)
