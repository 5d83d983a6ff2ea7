"""A remote pack fetched sample by sample (issue 25, part 3): exactly the samples a loader
is about to read, each checked against its SHA-256 before anything reads it.

A pack whose manifest (every shard's, for a sharded pack) lists ``sample_sha256`` and that
lies behind an asynchronous fsspec filesystem (``http(s)://``, ``s3://``, ...) is cached as
an *exact* folder (``remote.fetch``; its layout is ``cache.py``'s): every file fetched
whole but the pixels, and each ``pixels.npy`` a sparse file of its full size holding only
its header, beside ``present``, one byte per sample (1 once the sample's bytes are in
place). The dataset maps that folder as any pack; :class:`RemoteSamples` fills it:

- ``ensure(indices)`` (the fetch step, before it reads a batch's pixels; ``get_sample``)
  returns once every one of those samples is present: the missing ones are fetched now,
  their byte ranges sorted and coalesced per shard file (samples at most ``GAP`` bytes
  apart share a request of at most ``CHUNK`` bytes; a sample larger than that is fetched
  ``CHUNK`` bytes at a time, hashed as it comes), the requests in parallel. A failure
  raises a ``PackError`` there, so the loader reports it at the step that needed it. A
  thread under a bound (``data/waits.py``: the loader's consumer under its ``timeout``, a
  worker thread whose engine may close) stops waiting when the bound says so; the fetch
  goes on and fills the cache.
- ``ahead(indices)`` (the stream, for the coming steps) starts the same fetch without
  waiting: what it brings is in place when the step is built; what it could not bring
  the step's own ``ensure`` asks for again.
- ``fill()`` (``fetch="background"``) fetches every other sample too, in large requests,
  beside what the steps ask for.

Every request runs on fsspec's event loop (its own thread: nothing here starts one), cut
at the retry policy's timeout and retried as ``remote.request_async`` says. A sample
is written into the sparse file only after its bytes hash to its recorded SHA-256, and
marked present only after all of it is written; only the sample's own bytes are written,
never the gap bytes a coalesced request brought along. The files are shared: worker
processes reopen the same folder, so a sample one process fetched is present for all of
them. ``claims`` holds the process id fetching each sample: the others wait for it rather
than ask for it too, for as long as one request may take, unless that process has ended
(a claim of a process that is gone is ignored). At worst two processes write the same
checked bytes twice.
"""
from __future__ import annotations

import asyncio
import collections
import hashlib
import os
import threading
import weakref

import numpy as np

from onemodel_cy.data import waits
from onemodel_cy.data.packs.cache import PRESENT, alive, open_maps
from onemodel_cy.data.packs.format import SHARDED_FORMAT, PackError, read_manifest
from onemodel_cy.data.packs.remote import (CHUNK, OUT_OF_DESCRIPTORS, at_once, check_range, out_of_descriptors, redact,
                                           request_async)

POLL = 0.002                # seconds between two looks at samples another process is fetching
GAP = 64 << 10              # bytes between two samples that one request still spans
FILL_CHUNK = 16 << 20       # the same for fill(): fewer, larger requests (a store may cost per request)
REQUESTS = 64               # requests in flight per process
PENDING = 64                # read-ahead fetches waiting per process; more are not queued
FILLING = 4                 # background requests at once (fetch="background")
KEEP_OPEN = 256             # shard files kept open at most (fewer near the open-file limit)


class RemoteSamples:
    """The missing samples of an exact folder (``folder``), fetched from ``url``."""

    def __init__(self, folder: str, url: str, storage_options, retry):
        self.folder, self.url = folder, url.rstrip("/")
        shown = redact(self.url)        # what messages name: without the URL's credentials
        self.storage_options, self.retry = dict(storage_options or {}), retry
        manifest = read_manifest(folder)
        names = [entry["name"] for entry in manifest["shards"]] if manifest["format"] == SHARDED_FORMAT else [""]
        starts, lengths, files, digests = [], [], [], []
        self.files = []                 # per shard: (path in the store, URL as shown, local pixels.npy)
        for k, name in enumerate(names):
            shard = os.path.join(folder, name) if name else folder
            pixels = np.load(os.path.join(shard, "pixels.npy"), mmap_mode="r")
            offsets = np.load(os.path.join(shard, "pixel_offsets.npy"))
            shapes = np.load(os.path.join(shard, "shapes.npy"))
            starts.append(pixels.offset + offsets * pixels.itemsize)
            lengths.append(shapes.prod(axis=1) * pixels.itemsize)
            files.append(np.full(offsets.shape[0], k, dtype=np.int32))
            digest = np.load(os.path.join(shard, "sample_sha256.npy"), mmap_mode="r")
            # A mapping keeps a descriptor: one shard's stays mapped, many shards' are read
            # (they are joined into one array below in any case).
            digests.append(digest if len(names) == 1 else np.array(digest))
            del pixels, digest
            where = f"{name}/pixels.npy" if name else "pixels.npy"
            self.files.append((where, f"{shown}/{where}", os.path.join(shard, "pixels.npy")))
        self.start, self.length = np.concatenate(starts), np.concatenate(lengths)
        self.file = np.concatenate(files)
        self.digests = digests[0] if len(digests) == 1 else np.concatenate(digests)
        self.first = np.cumsum([0] + [d.shape[0] for d in digests])     # each shard's first global index
        # `claims`: the process fetching each sample (0: none): the others wait for it rather
        # than ask for it too, unless that process has ended (a crash, a worker stopped mid-fetch).
        self.present, self.claims = open_maps(folder, self.start.shape[0])
        # A read-only cache (its maps mapped read-only) serves the samples it holds, and no other.
        self.writable = bool(self.present.flags.writeable)
        self._out = ShardFiles([local for _, _, local in self.files], at_once(KEEP_OPEN), shown) \
            if self.writable else None
        self._finalizer = weakref.finalize(self, ShardFiles.close_all, self._out)
        self._pid = None
        self._lock = threading.Lock()
        self._filling = None        # fill()'s future, in the process that started it
        self.requests = self.bytes_fetched = self.fill_failures = 0
        self.fill_error = None      # the last failure of fill() (its steps' fetches report their own)

    # ------------------------------------------------------------ per process

    def _connect(self):
        """fsspec's filesystem and this process's bookkeeping (again after a fork)."""
        if self._pid == os.getpid():
            return
        with self._lock:        # worker threads' first fetches may come together
            if self._pid == os.getpid():
                return
            import fsspec
            self.fs, root = fsspec.core.url_to_fs(self.url, **self.storage_options)
            self.root = root.rstrip("/")
            self._inflight = {}         # sample -> future of the request bringing it (loop thread only)
            self._gate = None           # the loop's semaphore, made on the loop
            self._pending = []
            self._filling = None if self._pid is not None else self._filling    # a parent's, after a fork
            self.requests = self.bytes_fetched = 0      # this process's, since it first fetched
            self._pid = os.getpid()

    def missing(self, indices) -> np.ndarray:
        """The distinct samples of ``indices`` not yet present (an index out of range is
        left to the fetch step, which refuses it naming the step)."""
        indices = np.asarray(indices, dtype=np.int64)
        indices = indices[(indices >= 0) & (indices < self.present.shape[0])]
        return np.unique(indices[self.present[indices] != PRESENT])

    def ensure(self, indices) -> None:
        """Return once every sample of ``indices`` is present (fetching what is missing)."""
        wanted = self.missing(indices)
        if wanted.size:
            if not self.writable:
                raise PackError(f"{self.folder}: the cache is read-only and sample {int(wanted[0])} (of {wanted.size} "
                                f"asked for) is not in it; open the pack with a writable cache=")
            self._connect()
            bound = waits.current()
            if bound is None:
                from fsspec.asyn import sync
                sync(self.fs.loop, self._bring, wanted)
                return
            # A consumer under the loader's timeout, or a worker thread whose engine may
            # close: the wait ends then; the fetch goes on and fills the cache meanwhile.
            future = asyncio.run_coroutine_threadsafe(self._bring(wanted), self.fs.loop)
            bound.wait(future, f"{wanted.size} sample{'s' if wanted.size > 1 else ''} of {redact(self.url)} (the "
                               f"first: sample {int(wanted[0])}) had not arrived yet; they are still being fetched")

    def ahead(self, indices) -> None:
        """Start fetching what is missing of ``indices``; do not wait. Not while ``fill``
        runs: it brings them in large requests, which small ones ahead of it only delay
        (a store serves a request at a time per connection, and many cost per request)."""
        if self._filling is not None and not self._filling.done():
            return
        wanted = self.missing(indices)
        if not wanted.size or not self.writable:
            return
        self._connect()
        self._pending = [f for f in self._pending if not f.done()]
        if len(self._pending) < PENDING:
            future = asyncio.run_coroutine_threadsafe(self._bring(wanted), self.fs.loop)
            future.add_done_callback(forget)
            self._pending.append(future)

    def fill(self) -> None:
        """Start fetching every sample still missing, in the background (``fetch="background"``):
        shard by shard in offset order, ``FILLING`` requests of about ``FILL_CHUNK`` bytes at once,
        beside what the steps ask for. A request that fails is counted (``fill_failures``,
        ``fill_error``) and passed over: the steps that need its samples ask for them again,
        and report their own failure. Ends when every request was made, or when this object
        is collected."""
        if not self.writable:
            return
        self._connect()
        order = np.lexsort((self.start, self.file))
        per_request = max(1, FILL_CHUNK // max(1, int(self.length.mean())))
        # The coroutine holds this object only while a request of it runs: dropped, it is collected.
        future = asyncio.run_coroutine_threadsafe(fill_all(weakref.ref(self), order, per_request), self.fs.loop)
        future.add_done_callback(forget)
        weakref.finalize(self, future.cancel)
        self._filling = future

    def cancel(self) -> None:
        """Drop the read-ahead still queued (a stream that ends)."""
        if self._pid == os.getpid():
            for future in self._pending:
                future.cancel()
            self._pending = []

    # ------------------------------------------------------------ on fsspec's loop

    async def _bring(self, wanted: np.ndarray, limit: int = CHUNK) -> None:
        """Return once every sample of ``wanted`` is present, or raise the failure of this
        call's own fetch. A sample another fetch of this process is bringing is waited
        for, one another live process claimed too (for as long as one request may take);
        what they did not bring (they failed, were cancelled, or ended) is fetched here."""
        loop = asyncio.get_running_loop()
        patience = loop.time() + self.retry.timeout
        pid = os.getpid()
        while True:
            waits, todo, claimed, living = [], [], [], {}
            for i in wanted.tolist():
                if self.present[i] == PRESENT:
                    continue
                future = self._inflight.get(i)
                owner = int(self.claims[i])
                if future is not None:
                    waits.append(future)
                elif owner not in (0, pid) and loop.time() < patience and alive(owner, living):
                    claimed.append(i)
                else:
                    todo.append(i)
            if not todo and not waits and not claimed:
                return
            if todo:
                await self._fetch(todo, limit)
            for future in waits:
                # Shielded: this call being cancelled (a read-ahead dropped) must not cancel
                # the fetch's future, which other calls wait on too. Its failure is its
                # caller's; what it left missing is fetched next round.
                await asyncio.shield(future)
            if claimed and not todo and not waits:
                await asyncio.sleep(POLL)

    async def _fetch(self, todo: list, limit: int) -> None:
        loop = asyncio.get_running_loop()
        mine = {i: loop.create_future() for i in todo}
        self._inflight.update(mine)
        pid = os.getpid()
        self.claims[todo] = pid             # the other processes wait for these rather than fetch them too
        failure = None
        try:
            if self._gate is None:      # each request holds a socket: fewer near the open-file limit
                self._gate = asyncio.Semaphore(at_once(REQUESTS))
            results = await asyncio.gather(*(self._request(*r) for r in self.plan(todo, limit)),
                                           return_exceptions=True)
            failure = next((r for r in results if isinstance(r, BaseException)), None)
        finally:
            for i, future in mine.items():
                if self.claims[i] == pid:
                    self.claims[i] = 0          # brought, or not (failed, cancelled): anyone may ask again
                if self._inflight.get(i) is future:
                    del self._inflight[i]
                if not future.done():
                    future.set_result(None)
        if failure is not None:
            raise failure

    def plan(self, todo: list, limit: int = CHUNK) -> list:
        """``(file, start, end, samples)`` requests covering ``todo``: per shard file, by
        offset, neighbours at most ``GAP`` bytes apart merged up to ``limit`` bytes."""
        order = sorted(todo, key=lambda i: (int(self.file[i]), int(self.start[i])))
        requests = []
        for i in order:
            k, start = int(self.file[i]), int(self.start[i])
            end = start + int(self.length[i])
            if requests:
                last = requests[-1]
                if last[0] == k and start - last[2] <= GAP and max(end, last[2]) - last[1] <= limit:
                    last[2] = max(end, last[2])
                    last[3].append(i)
                    continue
            requests.append([k, start, end, [i]])
        return requests

    async def _ask(self, k: int, start: int, end: int) -> bytes:
        """Bytes ``start`` to ``end`` (excluded) of shard file ``k``: exactly those, or an error."""
        where, url, _ = self.files[k]
        try:
            async with self._gate:
                block = await request_async(self.fs, f"{self.root}/{where}", url, self.retry, start, end,
                                            end - start)
        except (FileNotFoundError, PermissionError) as error:
            raise PackError(f"{url}: {'missing' if isinstance(error, FileNotFoundError) else 'refused'} "
                            f"(the manifest lists it; the pack was removed or changed at its URL)") from None
        except OSError as error:
            if error.errno in OUT_OF_DESCRIPTORS:
                raise out_of_descriptors(redact(self.url), len(self.files), error) from None
            raise
        self.requests += 1
        self.bytes_fetched += len(block)
        check_range(url, block, start, end)     # at least end - start bytes came (request_async)
        return block

    async def _request(self, k: int, start: int, end: int, samples: list) -> None:
        if len(samples) == 1 and end - start > CHUNK:
            return await self._request_large(k, start, end, samples[0])
        block = await self._ask(k, start, end)
        view, failure = memoryview(block), None
        for i in samples:           # each good sample kept, the first bad one raised after
            lo = int(self.start[i]) - start
            data = view[lo:lo + int(self.length[i])]
            if hashlib.sha256(data).digest() != self.digests[i].tobytes():
                failure = failure or self.mismatch(k, start + lo, start + lo + len(data), i)
                continue
            write_all(self._out.fd(k), data, start + lo, self.files[k][2], i - int(self.first[k]))
            self.present[i] = PRESENT  # after all its bytes: a reader that sees it reads them
        if failure is not None:
            raise failure

    async def _request_large(self, k: int, start: int, end: int, i: int) -> None:
        """Sample ``i``, larger than one request (``CHUNK``): fetched ``CHUNK`` bytes at a time,
        each piece hashed and written as it comes, so memory holds one piece, not the
        sample (the manifest may record a sample of any size the cache's bound allows).
        It is marked present only if the whole of it hashes to its SHA-256; until then it
        is missing (its bytes in the file are read by no one, and fetched again)."""
        local = self.files[k][2]
        digest = hashlib.sha256()
        for lo in range(start, end, CHUNK):
            block = await self._ask(k, lo, min(lo + CHUNK, end))
            digest.update(block)
            write_all(self._out.fd(k), block, lo, local, i - int(self.first[k]))
            del block           # let go before the next piece arrives
        if digest.digest() != self.digests[i].tobytes():
            raise self.mismatch(k, start, end, i)
        self.present[i] = PRESENT

    def mismatch(self, k: int, start: int, end: int, i: int) -> PackError:
        """Sample ``i``'s bytes ``start`` to ``end`` (excluded) of shard file ``k`` are not its SHA-256's."""
        return PackError(f"{self.files[k][1]} (bytes {start}-{end - 1}): sample {i - int(self.first[k])} of this file "
                         f"does not hash to its SHA-256 in sample_sha256.npy (the file was replaced or changed after "
                         f"packing)")


async def fill_all(ref, order: np.ndarray, per_request: int) -> None:
    """``RemoteSamples.fill``'s work, on fsspec's loop: ``order``'s samples, ``per_request``
    at a time, by ``FILLING`` workers; ``ref`` is a weak reference to the fetcher."""
    slices = iter(range(0, order.shape[0], per_request))

    async def worker():
        for first in slices:
            remote = ref()
            if remote is None:
                return
            try:
                await remote._bring(remote.missing(order[first:first + per_request]), FILL_CHUNK)
            except Exception as error:
                remote.fill_failures += 1
                remote.fill_error = f"{type(error).__name__}: {error}"
            del remote
    await asyncio.gather(*(worker() for _ in range(FILLING)))


def write_all(fd: int, data, offset: int, path: str, sample: int) -> None:
    """``data`` at ``offset`` of the file ``fd``, every byte (a write may take only part)."""
    view = memoryview(data)
    try:
        while view.nbytes:
            written = os.pwrite(fd, view, offset)
            view, offset = view[written:], offset + written
    except OSError as error:
        raise OSError(error.errno, f"{path}: cannot write sample {sample} of this file into the cache "
                                   f"({error.strerror})") from None


def forget(future) -> None:
    """A read-ahead's outcome: a failure is the step's to report (its ``ensure`` asks again).
    Its traceback is let go, which would keep the fetcher (and its files) alive."""
    if not future.cancelled() and future.exception() is not None:
        future.exception().__traceback__ = None


class ShardFiles:
    """The shards' local ``pixels.npy`` files, open for writing (on fsspec's loop only).

    A pack of ``keep`` shards or fewer has every file opened now: a cache that evicts the
    folder meanwhile unlinks its files, and what is open stays writable (as its mapping
    stays readable). A forked child shares them. With more shards than that (``keep`` is
    what the open-file limit leaves, ``remote.at_once``), at most ``keep`` are open at once,
    the least recently written closed first, and a file opened again must be the one the
    dataset mapped (the same device and inode as now): one the cache removed meanwhile is a
    ``PackError`` saying so, never a write into another copy.
    """

    def __init__(self, paths: list, keep: int, url: str):
        self.paths, self.keep, self.url = paths, keep, url
        self.open = collections.OrderedDict()       # shard -> descriptor, least recently written first
        self.identity = None
        if len(paths) <= keep:
            try:
                for k, path in enumerate(paths):
                    self.open[k] = os.open(path, os.O_WRONLY)
            except BaseException as error:
                ShardFiles.close_all(self)      # none of those opened is left open
                if isinstance(error, FileNotFoundError):
                    raise PackError(f"{path}: removed from the cache (to make room for another pack) while the "
                                    f"pack was being opened; open {url} again") from None
                raise
        else:
            self.identity = [(info.st_dev, info.st_ino) for info in map(os.stat, paths)]

    def fd(self, k: int) -> int:
        """Shard ``k``'s descriptor, opened now if it is not open."""
        fd = self.open.get(k)
        if fd is not None:
            self.open.move_to_end(k)
            return fd
        while len(self.open) >= self.keep:
            os.close(self.open.popitem(last=False)[1])
        path = self.paths[k]
        try:
            fd = os.open(path, os.O_WRONLY)
        except FileNotFoundError:
            raise self.removed(path) from None
        except OSError as error:
            if error.errno in OUT_OF_DESCRIPTORS:
                raise out_of_descriptors(self.url, len(self.paths), error) from None
            raise
        info = os.fstat(fd)
        if (info.st_dev, info.st_ino) != self.identity[k]:
            os.close(fd)
            raise self.removed(path)
        self.open[k] = fd
        return fd

    def removed(self, path: str) -> PackError:
        return PackError(f"{path}: removed from the cache (to make room for another pack) while this dataset was "
                         f"fetching into it, and only {self.keep} of its {len(self.paths)} shard files could be kept "
                         f"open (the open-file limit); open {self.url} again")

    @staticmethod
    def close_all(files) -> None:
        if files is None:
            return
        while files.open:
            try:
                os.close(files.open.popitem()[1])
            except OSError:
                pass

