"""Remote packs (issue 25, parts 3 and 4): ``PackedImageDataset("https://host/pack", ...)``.

A pack (or a sharded pack) at a URL that fsspec reads (``http://``, ``https://``, ``s3://``
with s3fs, any fsspec protocol) gets a copy in a local cache folder, opened there as any
pack: the fetch step, the packed lane and worker processes then read a local file, with
the local pack's bytes. The copy is whole (every file the manifest lists, each checked
against the manifest's size and SHA-256 while it is written: a short or changed file is a
``PackError`` naming its URL, and nothing of it stays in the cache), or *exact*: every
file but the pixels, which ``exact.py`` fetches sample by sample as the loader needs
them (a pack recording ``sample_sha256``, on an asynchronous filesystem, unless
``verify="full"``). Where each lies in the cache, and how the cache stays within its
bound, is ``cache.py``'s. ``storage_options`` go to fsspec as they are (an S3 endpoint,
credentials).

Every request (a manifest, or a range of at most ``CHUNK`` bytes of an array file) is cut
after ``timeout`` seconds and tried up to ``attempts`` times, waiting ``backoff`` seconds
before the second try and twice as long before each next one: an HTTP 5xx, a dropped
connection, a short answer and a stall are each retried, then reported as a ``PackError``
naming the file's URL, the last failure and the number of attempts. A missing file is
reported at once. A range is written only once all its bytes have arrived, and a store
that answers a range with more bytes than asked for (the whole file: it ignores byte
ranges) is refused at once (``check_range``). No answer is read further than it may be
long: a range's bytes and one more, a manifest's ``MANIFEST_BYTES`` and one more (an
http(s) answer is read from its stream, so a server that ignores ranges costs one byte
more than asked, never the whole file; other stores are asked for those byte ranges).
Requests run at most ``OPENING`` at once, fewer near the open-file limit (``at_once``:
each may hold a socket and a file), so a pack of more shards than the limit opens.

A URL's credentials (``https://user:password@host/...``, the values of its query) are
shown in no message: every URL a message names goes through ``redact``.
"""
from __future__ import annotations

import asyncio
import errno
import hashlib
import math
import os
import random
import re
import resource
import shutil
from collections.abc import Mapping
from typing import NamedTuple

from onemodel_cy.data.packs import cache as _cache
from onemodel_cy.data.packs.format import MANIFEST, MANIFEST_BYTES, SHARDED_FORMAT, PackError, parse_manifest

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
URL_IN_TEXT = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+")
OPENING = 64                 # requests at once while a pack is opened (fewer near the open-file limit: at_once)
# Bytes per request at most, a whole file's range or a run of samples (exact.py; a sample
# larger than this is one request): a few requests per file, little memory, a short retry.
CHUNK = 4 << 20
MAX_WAIT = 60.0              # seconds: the doubling wait stops growing here, so many attempts stay bounded
OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)    # this process's limit, the system's
JITTER = random.Random()     # its own: the waits draw nothing from a caller's seeded `random`


class Retry(NamedTuple):
    """How one request is retried (``retry=`` of ``PackedImageDataset``, checked by ``retry_policy``)."""
    attempts: int = 5        # tries of one request, the first one included
    timeout: float = 30.0    # seconds one request may take before it is cut
    backoff: float = 0.5     # seconds before the second try, doubled before each next one (up to MAX_WAIT)


LIMITS = {"attempts": (1, 100), "timeout": (0.001, 3600.0), "backoff": (0.0, MAX_WAIT)}


def retry_policy(retry) -> Retry:
    """``retry`` (None, or a dict of some of ``attempts``, ``timeout``, ``backoff``) checked."""
    if retry is None:
        return Retry()
    if not isinstance(retry, Mapping):
        raise TypeError(f"retry must be None or a dict with keys among {', '.join(Retry._fields)}, received "
                        f"{type(retry).__name__} {retry!r}")
    unknown = [key for key in retry if key not in Retry._fields]
    if unknown:
        raise ValueError(f"retry: unknown key(s) {', '.join(map(repr, unknown))}; allowed: "
                         f"{', '.join(Retry._fields)}")
    for key, value in retry.items():
        low, high = LIMITS[key]
        kinds = (int,) if key == "attempts" else (int, float)
        if isinstance(value, bool) or not isinstance(value, kinds):
            raise TypeError(f"retry[{key!r}] must be {'an integer' if key == 'attempts' else 'a number'} in "
                            f"[{low}, {high}], received {type(value).__name__} {value!r}")
        if not (math.isfinite(value) and low <= value <= high):
            raise ValueError(f"retry[{key!r}] must be in [{low}, {high}], received {value!r}")
    return Retry(**retry)


def is_url(path) -> bool:
    return isinstance(path, str) and URL.match(path) is not None


def redact(text: str) -> str:
    """``text`` (a URL, or a message naming URLs) with every URL in it shown without its
    credentials: its user and password (``https://user:pass@host/`` -> ``https://***@host/``)
    and the value of each query parameter (``?token=abc`` -> ``?token=***``). The one way a
    URL is shown: in every message, repr and fingerprint (none of which names a URL else)."""
    return URL_IN_TEXT.sub(redact_one, str(text))


def redact_one(match) -> str:
    scheme, _, rest = match.group(0).partition("://")
    cut = min([i for i in (rest.find("/"), rest.find("?"), rest.find("#")) if i >= 0], default=len(rest))
    authority, tail = rest[:cut], rest[cut:]
    if "@" in authority:
        authority = "***@" + authority.rpartition("@")[2]
    path, question, query = tail.partition("?")
    if question:
        query = re.sub(r"=[^&#]*", "=***", query)
    return f"{scheme}://{authority}{path}{question}{query}"


def fetch(url: str, cache=None, cache_bytes=None, storage_options=None, retry=None, whole=False,
          expected=None) -> str:
    """The local folder of the pack at ``url``, in ``cache``: fetched now unless it is there,
    whole, or (unless ``whole``) as an exact folder (``exact.py``) when the store is
    asynchronous and the pack records each sample's SHA-256. With ``expected`` (a worker
    reopening a pickled copy), a pack whose manifest is not that one is refused from its
    manifest, before anything else is fetched."""
    try:
        import fsspec
    except ImportError:
        raise ImportError(f"reading a pack from {redact(url)} needs fsspec (and aiohttp for http(s), s3fs for s3): pip "
                          f"install 'onemodel-cy[remote]'") from None
    cache, limit = _cache.checked(cache, cache_bytes)
    if storage_options is not None and not (isinstance(storage_options, Mapping)
                                            and all(isinstance(key, str) for key in storage_options)):
        raise TypeError(f"storage_options must be None or a dict of fsspec options (str keys), received "
                        f"{type(storage_options).__name__} {storage_options!r}")
    from fsspec.asyn import sync
    policy = retry_policy(retry)
    try:
        fs, root = fsspec.core.url_to_fs(url, **(storage_options or {}))
        # One coroutine on fsspec's loop: the files of a pack (and the shards' manifests) are
        # asked for together, so a distant store costs a few round trips, not one per file.
        # `url` from here on is what messages show: the requests go to `root`.
        return sync(loop_of(fs), copy, fs, root.rstrip("/"), redact(url), cache, limit, policy,
                    not whole and getattr(fs, "async_impl", False), expected)
    except OSError as error:      # before the manifest was read (copy names the shards after)
        if error.errno in OUT_OF_DESCRIPTORS:
            raise out_of_descriptors(redact(url), None, error) from None
        raise


async def copy(fs, root: str, url: str, cache: str, limit: int, retry: Retry, exact: bool, expected=None) -> str:
    """``fetch`` once its arguments are checked: the pack's local folder. Nothing is written
    into the cache before a complete copy is looked for (a read-only cache serves one)."""
    data, manifest, digest = await fetch_manifest(fs, root, url, retry)
    if expected is not None and digest != expected:
        raise PackError(f"{url} was replaced since it was opened: manifest SHA-256 {digest}, expected {expected}; "
                        f"open it again")
    try:
        return await copy_into(fs, root, url, cache, limit, retry, exact, data, manifest, digest)
    except OSError as error:
        if error.errno in OUT_OF_DESCRIPTORS:
            raise out_of_descriptors(url, shard_count(manifest), error) from None
        raise


async def copy_into(fs, root: str, url: str, cache: str, limit: int, retry: Retry, exact: bool, data: bytes,
                    manifest: dict, digest: str) -> str:
    """``copy`` once the manifest is read and checked (``data``, ``manifest``, ``digest``)."""
    local = _cache.cached(cache, digest, exact)
    if local is not None:
        return local
    partial = _cache.new_partial(cache)
    # Each request may hold a socket and a file: no more at once than the descriptors left allow.
    gate = asyncio.Semaphore(at_once(OPENING))
    try:
        write_into(partial, MANIFEST, data)
        files = await listed_files(fs, root, url, partial, manifest, retry, gate)
        pixels = [name for name, _, _ in files if os.path.basename(name) == "pixels.npy"]
        exact = exact and len(pixels) == sum(os.path.basename(name) == "sample_sha256.npy" for name, _, _ in files)
        local = _cache.folder_of(cache, digest, exact)
        # The manifests, the arrays, and an exact folder's maps (written after): all of it is the cache's.
        need = (_cache.folder_bytes(partial) + sum(size for _, size, _ in files)
                + (_cache.maps_bytes(manifest["count"]) if exact else 0))
        _cache.make_room(cache, need, limit, url, partial)
        base = url.rstrip("/")
        await gather_all(bounded(gate, fetch_header(fs, f"{root}/{name}", f"{base}/{name}",
                                                    os.path.join(partial, name), size, retry)
                                 if exact and name in pixels else
                                 fetch_file(fs, f"{root}/{name}", f"{base}/{name}", os.path.join(partial, name),
                                            size, sha256, retry))
                         for name, size, sha256 in files)
        if exact:
            _cache.make_maps(partial, manifest["count"])
        return _cache.publish(partial, local)
    finally:
        shutil.rmtree(partial, ignore_errors=True)


def write_into(folder: str, name: str, data: bytes) -> None:
    path = os.path.join(folder, name)
    with _cache.named(path), open(path, "wb") as f:
        f.write(data)


async def bounded(gate, coroutine):
    async with gate:
        return await coroutine


async def gather_all(coroutines) -> list:
    """Run ``coroutines`` together; the first failure (in their order) is raised once all
    have ended, so that none is still writing into a folder being removed."""
    results = await asyncio.gather(*coroutines, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
    return results


async def fetch_header(fs, remote: str, url: str, path: str, size: int, retry: Retry) -> None:
    """An exact folder's ``pixels.npy``: the file's ``.npy`` header, then nothing (a sparse
    file of the manifest's ``size``, filled sample by sample). The reader checks the header
    against the manifest when it opens the folder."""
    probe = min(size, 4096)
    try:
        head = await request_async(fs, remote, url, retry, 0, probe, least=probe)
        check_range(url, head, 0, probe)        # the whole file: each sample's request would be too
        if head[:8] != b"\x93NUMPY\x01\x00" or len(head) < 10:
            raise PackError(f"{url}: does not start as a .npy version 1.0 file (received {head[:10]!r})")
        length = 10 + int.from_bytes(head[8:10], "little")
        if length > size:
            raise PackError(f"{url}: its header claims {length} bytes, the file holds {size}")
        if length > len(head):
            head = await request_async(fs, remote, url, retry, 0, length, least=length)
    except FileNotFoundError:
        raise PackError(f"{url}: missing (the manifest lists it)") from None
    with _cache.named(path), open(path, "wb") as f:
        f.write(head[:length])
        f.truncate(size)


async def fetch_manifest(fs, root: str, url: str, retry: Retry) -> tuple[bytes, dict, str]:
    """``(bytes, manifest, sha256)`` of the manifest at ``root``, read up to
    ``MANIFEST_BYTES`` and one more, checked by the reader's own rules (``parse_manifest``:
    every name it gives, every size). Nothing is written."""
    where = f"{url.rstrip('/')}/{MANIFEST}"
    try:
        data = await request_async(fs, f"{root}/{MANIFEST}", where, retry, most=MANIFEST_BYTES)
    except FileNotFoundError:
        raise PackError(f"{where}: missing; {url} is not a pack") from None
    return (data, *parse_manifest(data, where))


async def listed_files(fs, root: str, url: str, partial: str, manifest: dict, retry: Retry, gate) -> list:
    """``(relative path, bytes, sha256)`` of every array file the manifest lists; for a
    sharded pack each shard's manifest is fetched now (checked against its recorded SHA-256;
    as many at once as ``gate`` lets through) and its arrays listed."""
    if manifest["format"] != SHARDED_FORMAT:
        return [(entry["file"], entry["bytes"], entry["sha256"]) for entry in manifest["arrays"].values()]
    base = url.rstrip("/")
    inners = await gather_all(bounded(gate, fetch_manifest(fs, f"{root}/{entry['name']}", f"{base}/{entry['name']}",
                                                           retry))
                              for entry in manifest["shards"])
    files = []
    for entry, (data, inner, digest) in zip(manifest["shards"], inners):
        if digest != entry["manifest_sha256"] or inner["format"] == SHARDED_FORMAT:
            raise PackError(f"{base}/{entry['name']}/{MANIFEST}: SHA-256 {digest}, the pack's manifest records "
                            f"{entry['manifest_sha256']} (the shard was replaced or changed)")
        folder = os.path.join(partial, entry["name"])
        with _cache.named(folder):
            os.mkdir(folder)
        write_into(folder, MANIFEST, data)
        files += [(f"{entry['name']}/{a['file']}", a["bytes"], a["sha256"]) for a in inner["arrays"].values()]
    return files


async def fetch_file(fs, remote: str, url: str, path: str, size: int, sha256: str, retry: Retry) -> None:
    """One file, fetched range by range into ``path`` and checked: exactly ``size`` bytes of
    SHA-256 ``sha256``."""
    digest = hashlib.sha256()
    try:
        with _cache.named(path), open(path, "wb") as out:
            for start in range(0, size, CHUNK):
                # The last range asks for one byte past the manifest's size: a file grown since is found.
                end = size + 1 if start + CHUNK >= size else start + CHUNK
                block = await request_async(fs, remote, url, retry, start, end, least=min(end, size) - start)
                check_range(url, block, start, end)
                if start + len(block) > size:
                    raise PackError(f"{url}: holds more than {size} bytes, the manifest records {size} (replaced "
                                    f"after the pack was written)")
                digest.update(block)
                out.write(block)
    except FileNotFoundError:
        raise PackError(f"{url}: missing (the manifest lists it)") from None
    if digest.hexdigest() != sha256:
        raise PackError(f"{url}: SHA-256 differs from the manifest's {sha256!r} (the file was changed after "
                        f"packing)")


def check_range(url: str, block: bytes, start: int, end: int) -> None:
    """A store that ignores byte ranges answers a range with more bytes than asked for (the
    whole file): refused, not retried (every request would bring the whole file again).
    ``read`` read at most one byte more than asked for: the rest was never read."""
    if len(block) > end - start:
        raise PackError(f"{url}: answered more than the {end - start} bytes of a request for bytes "
                        f"{start}-{end - 1}; the server must serve byte ranges (HTTP Range requests)")


def loop_of(fs):
    """The event loop ``fs``'s requests run on: its own (fsspec's) for an asynchronous
    filesystem; fsspec's shared loop otherwise, where a synchronous read blocks it meanwhile
    (one retry loop for both, and no event loop of the caller's thread to collide with)."""
    from fsspec.asyn import get_loop
    return fs.loop if getattr(fs, "async_impl", False) else get_loop()


async def request_async(fs, remote: str, url: str, retry: Retry, start=None, end=None, least=0,
                        most=None) -> bytes:
    """Bytes ``start`` to ``end`` (excluded) of ``remote`` (all of it when both are None, up
    to ``most`` bytes and one more), at least ``least`` of them, never more than
    ``end - start`` (or ``most``) and one: each try cut after ``retry.timeout`` seconds, the
    waits between tries as ``pause`` says. A missing file or a refusal
    (``FileNotFoundError``, ``PermissionError``, an HTTP 4xx but 408 and 429) is final:
    asking again changes nothing."""
    most = end - start if most is None else most
    for attempt in range(1, retry.attempts + 1):
        if attempt > 1:
            await asyncio.sleep(pause(retry, attempt))
        try:
            data = await read(fs, remote, start, end, retry.timeout, most)
        except (FileNotFoundError, PermissionError):
            raise
        except Exception as error:     # what a store's client raises differs by protocol (aiohttp, botocore, ...)
            if isinstance(error, OSError) and error.errno in OUT_OF_DESCRIPTORS:
                raise           # no socket to be had: the caller names the limit (asking again changes nothing)
            if isinstance(error, (TimeoutError, asyncio.TimeoutError)):
                problem = f"no complete answer within {retry.timeout} s (timeout)"
            else:
                problem = redact(f"{type(error).__name__}: {error}")
            status = getattr(error, "status", None)
            if type(status) is int and 400 <= status < 500 and status not in (408, 429):
                where = "" if start is None else f" (bytes {start}-{end - 1})"
                raise PackError(f"{url}{where}: refused, the answer: {problem}") from None
            continue
        if len(data) >= least:
            return data
        problem = (f"answered {len(data)} of the {least} bytes from byte {start} (a short answer, or the file is "
                   f"shorter than the manifest records)")
    where = "" if start is None else f" (bytes {start}-{end - 1})"
    raise PackError(f"{url}{where}: gave up after {retry.attempts} attempt{'s' if retry.attempts > 1 else ''}, "
                    f"the last: {problem}")


def at_once(most: int) -> int:
    """How many requests may run at once, ``most`` at most: a quarter of the file
    descriptors this process has left (each request may hold a socket and a file; the rest
    stays for the program), one at least. So a pack of more shards than the open-file limit
    is fetched all the same, fewer files at a time."""
    used, limit = descriptors()
    if limit == resource.RLIM_INFINITY:
        return most
    spare = limit - (limit // 2 if used is None else used)
    return max(1, min(most, spare // 4))


def descriptors() -> tuple:
    """``(open, limit)``: the files this process has open now (None where ``/proc/self/fd``
    does not tell), and its soft open-file limit (``RLIMIT_NOFILE``)."""
    try:
        used = len(os.listdir("/proc/self/fd")) - 1     # less the one listing the folder
    except OSError:
        used = None
    return used, resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def shard_count(manifest: dict) -> int:
    """How many shards the pack of ``manifest`` (a checked manifest) has: 1 for a plain pack."""
    return len(manifest["shards"]) if manifest["format"] == SHARDED_FORMAT else 1


def out_of_descriptors(where: str, shards, error: OSError) -> PackError:
    """What running out of file descriptors opening the pack at ``where`` (a URL or a
    folder) says: the limit, the files open and the number of shards (None: its manifest
    was not read yet)."""
    used, limit = descriptors()
    shown = "unlimited" if limit == resource.RLIM_INFINITY else limit
    pack = ("before its manifest was read" if shards is None else
            f"with {shards} shard{'s' if shards > 1 else ''}")
    return PackError(f"{where}: out of file descriptors ({error.strerror}) {pack}: the open-file limit "
                     f"(RLIMIT_NOFILE) is {shown}"
                     f"{'' if used is None else f', {used} open'}; raise it (ulimit -n, resource.setrlimit)")


def pause(retry: Retry, attempt: int) -> float:
    """Seconds to wait before try ``attempt`` (2 or more): ``backoff``, doubled for each try
    since, at most ``MAX_WAIT``; jittered down to half of that, so that the ranks a failing
    server turned away do not all come back at once."""
    return min(retry.backoff * 2 ** (attempt - 2), MAX_WAIT) * JITTER.uniform(0.5, 1.0)


async def read(fs, remote: str, start, end, timeout: float, most: int) -> bytes:
    """One request, of at most ``most`` bytes and one more. fsspec's asynchronous
    filesystems (http(s), s3, gcs, ...) run it on fsspec's event loop, where the timeout
    cancels it (its connection closed: no thread or socket is left waiting); a synchronous
    filesystem is read as it is, under its own timeouts. An http(s) answer is read from its
    stream, ``most`` bytes and one at most (``read_http``); any other store is asked for
    those bytes only (a range starting at ``start``, or at 0)."""
    if getattr(fs, "async_impl", False) and is_http(fs):
        return await asyncio.wait_for(read_http(fs, remote, start, end, most), timeout)
    if start is None:
        start, end = 0, most + 1
    if getattr(fs, "async_impl", False):
        return await asyncio.wait_for(fs._cat_file(remote, start=start, end=end), timeout)
    return fs.cat_file(remote, start=start, end=end)


def is_http(fs) -> bool:
    protocol = getattr(fs, "protocol", ())
    return any(p in ("http", "https") for p in ((protocol,) if isinstance(protocol, str) else protocol))


async def read_http(fs, url: str, start, end, most: int) -> bytes:
    """Bytes ``start`` to ``end`` (excluded) of ``url`` (the whole file when both are None)
    through ``fs``'s session (its options and headers, as fsspec's own ``_cat_file`` asks),
    read from the answer's stream until ``most`` bytes and one have come: a server that
    ignores ``Range`` sends the whole file, of which no more is read (the connection is
    closed, not reused)."""
    options = dict(fs.kwargs)
    headers = dict(options.pop("headers", None) or {})
    if start is not None:
        headers["Range"] = f"bytes={start}-{end - 1}"
    session = await fs.set_session()
    async with session.get(fs.encode_url(url), headers=headers, **options) as answer:
        if answer.status >= 400:
            fs._raise_not_found_for_status(answer, url)
        parts, got = [], 0
        while got <= most:
            part = await answer.content.read(most + 1 - got)
            if not part:
                break
            parts.append(part)
            got += len(part)
    return b"".join(parts)
