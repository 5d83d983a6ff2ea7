"""Remote packs, a start (issue 25, part 3): ``PackedImageDataset("https://host/pack", ...)``.

A pack (or a sharded pack) at a URL that fsspec reads (``http://``, ``https://``, ``s3://``
with s3fs, any fsspec protocol) is fetched into a local cache folder and opened there as
any pack: the fetch step, the packed lane and worker processes then read a local file,
with the local pack's bytes. What is fetched is exactly what the manifest lists, each file
checked against the manifest's size and SHA-256 while it is written (a short or changed
file is a ``PackError`` naming its URL, and nothing of it stays in the cache), and a
cached pack is named by its manifest's SHA-256: a pack replaced at the URL is fetched
again, never mixed with the old one.

The cache is bounded: before a pack is fetched, the packs least recently opened are
removed until it fits in ``cache_bytes`` (a process still mapping a removed pack keeps
reading its unlinked files). This start fetches a whole pack (each shard of a sharded pack
whole) before the first batch; fetching exactly the samples of the coming steps, ranges
coalesced per shard, is the rest of part 3.
"""
from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil

from onemodel_cy.data.packfmt import MANIFEST, SHARDED_FORMAT, PackError, open_manifest

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
DEFAULT_CACHE = os.path.join(os.path.expanduser("~"), ".cache", "onemodel_cy", "packs")
DEFAULT_CACHE_BYTES = 64 << 30
CHUNK = 4 << 20              # bytes per read from the store: a few requests per file, little memory


def is_url(path) -> bool:
    return isinstance(path, str) and URL.match(path) is not None


def fetch(url: str, cache=None, cache_bytes=None) -> str:
    """The local folder of the pack at ``url``, in ``cache`` (fetched now unless it is there)."""
    try:
        import fsspec
    except ImportError:
        raise ImportError(f"reading a pack from {url} needs fsspec (and aiohttp for http(s), s3fs for s3): pip "
                          f"install 'onemodel-cy[remote]'") from None
    cache = os.path.abspath(os.fspath(cache if cache is not None else DEFAULT_CACHE))
    limit = DEFAULT_CACHE_BYTES if cache_bytes is None else cache_bytes
    if type(limit) is not int or limit < 1:
        raise ValueError(f"cache_bytes must be a positive number of bytes, received {cache_bytes!r}")
    fs, root = fsspec.core.url_to_fs(url)
    root = root.rstrip("/")
    os.makedirs(cache, exist_ok=True)
    partial = os.path.join(cache, f".fetch-{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(partial)
    try:
        manifest, digest = fetch_manifest(fs, root, url, partial)
        local = os.path.join(cache, digest)
        if os.path.isdir(local):
            os.utime(local)             # recently opened: evicted last
            return local
        files = listed_files(fs, root, url, partial, manifest)
        need = folder_bytes(partial) + sum(size for _, size, _ in files)     # the manifests, then the arrays
        make_room(cache, need, limit, url)
        for name, size, sha256 in files:
            fetch_file(fs, f"{root}/{name}", f"{url.rstrip('/')}/{name}", os.path.join(partial, name), size, sha256)
        try:
            os.rename(partial, local)   # onto an existing folder it fails: another process fetched it first
        except OSError:
            if not os.path.isdir(local):
                raise
        return local
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def fetch_manifest(fs, root: str, url: str, folder: str) -> tuple[dict, str]:
    """The manifest at ``root`` written into ``folder`` and checked by the reader's own rules."""
    try:
        data = fs.cat_file(f"{root}/{MANIFEST}")
    except FileNotFoundError:
        raise PackError(f"{url.rstrip('/')}/{MANIFEST}: missing; {url} is not a pack") from None
    with open(os.path.join(folder, MANIFEST), "wb") as f:
        f.write(data)
    try:
        return open_manifest(folder)
    except PackError as error:
        raise PackError(f"{url}: {error}") from None


def listed_files(fs, root: str, url: str, partial: str, manifest: dict) -> list:
    """``(relative path, bytes, sha256)`` of every array file the manifest lists; for a
    sharded pack each shard's manifest is fetched now (checked against its recorded SHA-256)
    and its arrays listed."""
    if manifest["format"] != SHARDED_FORMAT:
        return [(entry["file"], entry["bytes"], entry["sha256"]) for entry in manifest["arrays"].values()]
    files = []
    for entry in manifest["shards"]:
        os.mkdir(os.path.join(partial, entry["name"]))
        inner, digest = fetch_manifest(fs, f"{root}/{entry['name']}", f"{url.rstrip('/')}/{entry['name']}",
                                       os.path.join(partial, entry["name"]))
        if digest != entry["manifest_sha256"] or inner["format"] == SHARDED_FORMAT:
            raise PackError(f"{url.rstrip('/')}/{entry['name']}/{MANIFEST}: SHA-256 {digest}, the pack's manifest "
                            f"records {entry['manifest_sha256']} (the shard was replaced or changed)")
        files += [(f"{entry['name']}/{a['file']}", a["bytes"], a["sha256"]) for a in inner["arrays"].values()]
    return files


def fetch_file(fs, remote: str, url: str, path: str, size: int, sha256: str) -> None:
    """One file, streamed to ``path`` and checked: exactly ``size`` bytes of SHA-256 ``sha256``."""
    digest, written = hashlib.sha256(), 0
    try:
        with fs.open(remote, "rb", block_size=CHUNK) as source, open(path, "wb") as out:
            while written <= size:
                block = source.read(min(CHUNK, size + 1 - written))
                if not block:
                    break
                digest.update(block)
                out.write(block)
                written += len(block)
    except FileNotFoundError:
        raise PackError(f"{url}: missing (the manifest lists it)") from None
    if written != size:
        raise PackError(f"{url}: holds {'more than ' if written > size else ''}{written} bytes, the manifest records "
                        f"{size} (truncated, or replaced after the pack was written)")
    if digest.hexdigest() != sha256:
        raise PackError(f"{url}: SHA-256 differs from the manifest's {sha256!r} (the file was changed after "
                        f"packing)")


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
