"""§1 the DataLoader: thread workers, a prefetch ring, ordered delivery, resume, ranks.

The loader's threads are created in one place, ``BatchStream._restart``. Workers only
decide *when* a step is built, never *what* it contains: a batch is a function of the
global step alone, so the stream is the same for any number of workers, any prefetch
depth, any timing and any resume point.

Ring discipline (§1): step ``g`` lives in slot ``g % prefetch``. A worker claims steps in
increasing order while holding ``claim_lock``, and before taking step ``g`` it must
acquire the slot's ``free`` lock, which the consumer releases only after taking step
``g - prefetch``. Hence a step is claimed only when ``g < next_to_take + prefetch`` and
two live steps never share a slot. The consumer waits on the slot's ``ready`` lock,
which the worker releases once the batch (or the exception) is in the slot.

All waits are bounded (``_POLL`` seconds) and re-check whether the stream was closed,
so nothing blocks forever; worker threads are daemons, joined on close.
"""
from __future__ import annotations

import atexit
import operator
import sys
import threading
import time
import warnings
import weakref

import numpy as np

from onemodel_cy._batch import ImageBatch
from onemodel_cy._collate import ImageBatchCollator, Workspace
from onemodel_cy._fetch import build_batch
from onemodel_cy._pacing import Pacing
from onemodel_cy._samplers import Sampler

__all__ = ["DataLoader", "BatchStream", "threads_available"]

_POLL = 0.05            # seconds between checks of a closed stream while waiting
_JOIN_TIMEOUT = 10.0    # seconds, in all, to wait for workers finishing the batches they build
_MASK64 = (1 << 64) - 1


def threads_available() -> bool:
    """False where the platform cannot start threads (browser WebAssembly, WASI)."""
    return sys.platform not in ("emscripten", "wasi")


def _integer(value, name, minimum=None):
    try:
        if isinstance(value, bool):
            raise TypeError
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, received {value!r} of type "
                        f"{type(value).__name__}") from None
    if minimum is not None and v < minimum:
        raise ValueError(f"{name} must be an integer >= {minimum}, received {v}")
    return v


def _stable_name(obj) -> str:
    """``repr(obj)``, unless it holds a memory address; then the object's (or its type's) qualified name."""
    text = repr(obj)
    if " at 0x" not in text:
        return text
    named = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(named, '__module__', '?')}.{named.__qualname__}"


class DataLoader:
    """Feeds ``ImageBatch``es in global step order; batch ``g`` is a pure function of (seed, g) (§1).

    Parameters
    ----------
    dataset : object with ``__len__`` and thread-safe ``get_sample(i) -> Sample``
        An :class:`ArrayImageDataset` (or :class:`SyntheticLineImages`) without a transform
        takes the fast path: whole batches gathered without the GIL.
    sampler : Sampler
        One of the §3 samplers; ``steps_per_epoch`` defines epochs.
    collator : ImageBatchCollator
    seed : int
        Drives the transform (stream 0) and the augmentation (stream 1) (D12).
    workers : int, default 0
        Worker threads; 0 builds on the consumer's thread. Where threads are unavailable
        it is treated as 0.
    prefetch : int, default 2
        Ring depth: how many steps may be built ahead of the consumer.
    transform : callable, optional
        ``transform(sample, rng) -> Sample`` with ``rng = SampleRng(derive(seed, epoch, step, slot, 0))``.
    rank, world_size : int
        Rank ``r`` of ``w`` receives slots ``[r*B/w, (r+1)*B/w)`` of every global batch,
        with global slot numbers in every ``derive``; ``B`` must be divisible by ``w``.
    timeout : float, optional
        With workers, the longest wait for one batch before ``TimeoutError`` (as in
        PyTorch's ``DataLoader``); by default the consumer waits while a worker is alive.
    """

    def __init__(self, dataset, sampler, collator, *, seed, workers=0, prefetch=2, transform=None,
                 rank=0, world_size=1, timeout=None):
        if not callable(getattr(dataset, "get_sample", None)) or not hasattr(dataset, "__len__"):
            raise TypeError(f"dataset must provide __len__ and get_sample(index), received "
                            f"{type(dataset).__name__}")
        if not isinstance(sampler, Sampler):
            raise TypeError(f"sampler must be a onemodel_cy sampler (SequentialSampler, ShuffledSampler, "
                            f"MixingSampler, BucketedSampler), received {type(sampler).__name__}")
        if not isinstance(collator, ImageBatchCollator):
            raise TypeError(f"collator must be an ImageBatchCollator, received {type(collator).__name__}")
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable as transform(sample, rng) or None, "
                            f"received {type(transform).__name__}")
        self.dataset = dataset
        self.sampler = sampler
        self.collator = collator
        self.seed = _integer(seed, "seed") & _MASK64     # D3: any integer, mod 2**64
        self.workers = _integer(workers, "workers", 0)
        self.prefetch = _integer(prefetch, "prefetch", 1)
        self.transform = transform
        self.world_size = _integer(world_size, "world_size", 1)
        self.rank = _integer(rank, "rank", 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must lie in [0, world_size) = [0, {self.world_size}), received {self.rank}")
        batch_size = sampler.batch_size
        if batch_size % self.world_size:
            raise ValueError(f"batch_size ({batch_size}) must be divisible by world_size ({self.world_size})")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds or None, received {timeout!r}")
        self.timeout = timeout
        share = batch_size // self.world_size
        self._slots = (self.rank * share, (self.rank + 1) * share)
        # A short last batch (drop_last=False) is shared by slot range as it stands. If the
        # last rank's range lay past its end, that rank would receive nothing: every rank
        # refuses alike, so that no rank starts while another cannot.
        last = sampler.batch_length(sampler.steps_per_epoch - 1)
        if last <= (self.world_size - 1) * share:
            raise ValueError(f"the last batch of each epoch of {sampler!r} holds {last} samples, too few to "
                             f"give each of {self.world_size} ranks a share of {share}; use drop_last=True")
        # The workers' shared baton for the Python parts of a batch (see _pacing.pyx).
        self.pacing = Pacing()
        self.epoch = 0

    # -- the pure function -------------------------------------------------------------

    @property
    def steps_per_epoch(self) -> int:
        return self.sampler.steps_per_epoch

    def __len__(self):
        return self.sampler.steps_per_epoch

    def batch_at(self, g) -> ImageBatch:
        """Build global step ``g`` on the calling thread (what every stream yields at ``g``)."""
        g = _integer(g, "g", 0)
        return self._build(g, self._workspace())

    def _workspace(self) -> Workspace:
        """A building thread's own workspace (§5: reused from batch to batch)."""
        return Workspace(self.sampler.batch_size, self.pacing)

    def _build(self, g, workspace):
        """Global step ``g``: the sampler's indices, then this rank's slots fetched and collated."""
        epoch, step = divmod(g, self.sampler.steps_per_epoch)
        count = self.sampler.indices_into(epoch, step, workspace.indices)
        lo, hi = self._slots
        return build_batch(self.collator, self.dataset, workspace.indices, self.seed, epoch, step,
                           start=lo, stop=min(hi, count), transform=self.transform, global_step=g,
                           workspace=workspace)

    # -- streams -------------------------------------------------------------------------

    def iter(self, start_step=0, stop_step=None) -> "BatchStream":
        """A stream of global steps ``[start_step, stop_step)`` (endless if ``stop_step`` is None).

        Resume a run with ``loader.iter(start_step=stream.next_step)``.
        """
        return BatchStream(self, start_step, stop_step)

    def __iter__(self):
        """One epoch, ``self.epoch``; a completed pass moves on to the next epoch."""
        epoch = self.epoch
        S = self.steps_per_epoch
        with self.iter(epoch * S, (epoch + 1) * S) as stream:
            yield from stream
        self.epoch = epoch + 1

    def set_epoch(self, epoch):
        """Choose the epoch the next ``for batch in loader`` runs."""
        self.epoch = _integer(epoch, "epoch", 0)

    def fingerprint(self) -> str:
        """The pipeline's configuration (sampler, dataset type and size, collator, seed,
        transform, rank), to refuse resuming into a different one. It does not hash the
        dataset's contents or a bucketed sampler's lengths.

        Stable across processes: objects whose ``repr`` shows a memory address are named
        by module and qualified name instead.
        """
        c = self.collator
        return (f"{self.sampler!r}|{_stable_name(self.dataset)}[{len(self.dataset)}]|"
                f"width_multiple={c.width_multiple},pad_value={c.pad_value!r},"
                f"augmentation={_stable_name(c.augmentation)}|seed={self.seed}|"
                f"transform={_stable_name(self.transform)}|rank={self.rank}/{self.world_size}")

    def __repr__(self):
        return (f"DataLoader(dataset={self.dataset!r}, sampler={self.sampler!r}, collator={self.collator!r}, "
                f"seed={self.seed}, workers={self.workers}, prefetch={self.prefetch}, "
                f"transform={self.transform!r}, rank={self.rank}, world_size={self.world_size}, "
                f"timeout={self.timeout})")


class _Slot:
    __slots__ = ("ready", "free", "step", "batch", "error")

    def __init__(self):
        self.ready = threading.Lock()
        self.ready.acquire()          # released by the worker that fills the slot
        self.free = threading.Lock()  # held by the worker that owns the slot's next step
        self.step = -1
        self.batch = None
        self.error = None


class _Ring:
    """State shared by a stream's workers. Workers never refer to the stream itself,
    so a dropped stream is collected and its ``__del__`` shuts them down."""

    def __init__(self, prefetch, start, stop, pool, workers):
        self.slots = [_Slot() for _ in range(prefetch)]
        self.pool = pool
        self.window = prefetch + workers + 1   # batches alive at once: slots, one per worker, the consumer's
        self.reserved = 0                      # largest batch size (bytes) the pool holds a window of
        self.reserve_lock = threading.Lock()
        self.claim_lock = threading.Lock()
        self.next_claim = start
        self.limit = stop              # claim nothing at or beyond (None: endless)
        self.closed = False

    def reserve_window(self, nbytes):
        """Have the pool hold the whole window at the largest batch size seen; smaller
        batches borrow those blocks, so steady state never misses, whatever the widths.
        (Done by the worker that built the batch, so the consumer allocates nothing.)"""
        with self.reserve_lock:
            if nbytes <= self.reserved:
                return
            self.reserved = nbytes
            try:
                self.pool.reserve(nbytes, self.window)
            except MemoryError:
                pass    # only a head start: rent allocates what it must

    def wait(self, lock) -> bool:
        """Acquire ``lock``, giving up (False) once the ring is closed."""
        while not lock.acquire(True, _POLL):
            if self.closed:
                return False
        if self.closed:
            lock.release()
            return False
        return True


_live_rings: "weakref.WeakSet[_Ring]" = weakref.WeakSet()


@atexit.register
def _close_all_rings():
    for ring in list(_live_rings):
        ring.closed = True


def _work(ring, build, workspace):
    """A worker: claim the next step inside the window, build it, leave it in its slot."""
    prefetch = len(ring.slots)
    while True:
        if not ring.wait(ring.claim_lock):
            return
        try:
            g = ring.next_claim
            if ring.limit is not None and g >= ring.limit:
                return
            slot = ring.slots[g % prefetch]
            if not ring.wait(slot.free):
                return
            ring.next_claim = g + 1
        finally:
            ring.claim_lock.release()
        try:
            batch, error = build(g, workspace), None
            if batch.nbytes > ring.reserved:
                ring.reserve_window(batch.nbytes)
        except BaseException as exc:  # delivered to the consumer at step g
            batch, error = None, exc
            # Claim nothing more. Not under claim_lock: its holder may be waiting for a
            # slot that frees only once the consumer has taken this very step.
            limit = ring.limit
            ring.limit = g + 1 if limit is None else min(limit, g + 1)
        slot.step, slot.batch, slot.error = g, batch, error
        slot.ready.release()


class BatchStream:
    """Batches of global steps ``[start_step, stop_step)`` in order; an iterator and a context manager.

    ``next_step`` is the step the next ``next()`` returns: pass it to
    ``loader.iter(start_step=...)`` to resume. ``close()`` (also on leaving ``with``, or
    when the stream is dropped) ends every worker thread.
    """

    def __init__(self, loader: DataLoader, start_step=0, stop_step=None):
        self.loader = loader
        start = _integer(start_step, "start_step", 0)
        stop = None if stop_step is None else _integer(stop_step, "stop_step", start)
        self.stop_step = stop
        self._threads = []
        self._ring = None
        self._closed = False
        self._restart(start)

    def _restart(self, start):
        self._shutdown()
        self._closed = False
        self.next_step = start
        loader = self.loader
        workers = loader.workers if threads_available() else 0
        self._workspace = loader._workspace()
        if workers == 0:
            return
        ring = _Ring(loader.prefetch, start, self.stop_step, loader.collator.pool, workers)
        _live_rings.add(ring)
        self._ring = ring
        for k in range(workers):
            thread = threading.Thread(target=_work, name=f"onemodel_cy-worker-{k}",
                                      args=(ring, loader._build, loader._workspace()),
                                      daemon=True)
            thread.start()
            self._threads.append(thread)

    def __iter__(self):
        return self

    def __next__(self) -> ImageBatch:
        g = self.next_step
        if self._closed or (self.stop_step is not None and g >= self.stop_step):
            self.close()
            raise StopIteration
        try:
            if self._ring is None:
                batch = self.loader._build(g, self._workspace)
            else:
                batch = self._take(g)
        except BaseException:
            self.close()
            raise
        self.next_step = g + 1
        return batch

    def _take(self, g):
        ring = self._ring
        slot = ring.slots[g % len(ring.slots)]
        waited = 0.0
        while not slot.ready.acquire(True, _POLL):
            waited += _POLL
            if ring.closed:             # closed from another thread while we waited
                raise StopIteration
            if not any(thread.is_alive() for thread in self._threads):
                if slot.ready.acquire(False):   # the last worker filled it just before ending
                    break
                raise RuntimeError(f"every worker thread ended before building step {g}")
            if self.loader.timeout is not None and waited >= self.loader.timeout:
                raise TimeoutError(f"no batch for step {g} after {self.loader.timeout} s "
                                   f"(DataLoader timeout)")
        batch, error = slot.batch, slot.error
        slot.batch = slot.error = None
        if slot.step != g:  # the ring discipline makes this impossible; fail loudly if broken
            raise RuntimeError(f"ring slot holds step {slot.step}, expected {g}")
        slot.free.release()
        if error is not None:
            raise error
        return batch

    def _shutdown(self):
        ring, self._ring = self._ring, None
        if ring is not None:
            ring.closed = True
        threads, self._threads = self._threads, []
        current = threading.current_thread()
        deadline = time.monotonic() + _JOIN_TIMEOUT
        for thread in threads:
            if thread is not current:
                thread.join(max(0.0, deadline - time.monotonic()))
        stuck = [t.name for t in threads if t.is_alive() and t is not current]
        if stuck:
            warnings.warn(f"onemodel_cy: {stuck} still inside dataset/transform code {_JOIN_TIMEOUT} s after "
                          f"close(); they end when that call returns (daemon threads)", ResourceWarning,
                          stacklevel=3)

    def close(self):
        """Stop the stream: end and join its worker threads (idempotent)."""
        self._closed = True
        self._shutdown()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def state_dict(self) -> dict:
        """The whole resume state: the next step, and the pipeline it belongs to."""
        return {"next_step": self.next_step, "fingerprint": self.loader.fingerprint()}

    def load_state_dict(self, state: dict):
        """Continue from ``state["next_step"]``; refuses a state saved by a different pipeline."""
        if not isinstance(state, dict) or "next_step" not in state:
            raise TypeError(f"state must be a dict from state_dict(), received {state!r}")
        fingerprint = state.get("fingerprint")
        if fingerprint is not None and fingerprint != self.loader.fingerprint():
            raise ValueError(f"refusing to resume: the state was saved by a different pipeline\n"
                             f"  saved:   {fingerprint}\n  current: {self.loader.fingerprint()}")
        start = _integer(state["next_step"], "next_step", 0)
        if self.stop_step is not None and start > self.stop_step:
            raise ValueError(f"next_step {start} lies beyond this stream's stop_step {self.stop_step}")
        self._restart(start)

    def __repr__(self):
        return (f"BatchStream(next_step={self.next_step}, stop_step={self.stop_step}, "
                f"workers={len(self._threads)}, closed={self._closed})")
