"""§1 the DataLoader: thread workers, a prefetch ring, ordered delivery, resume, ranks.

``DataLoader`` holds the configuration and the pure function: ``_build(g, workspace)``
builds global step ``g``. The streams, their worker threads and the prefetch ring live
in :mod:`onemodel_cy._stream`. Workers only decide *when* a step is built, never *what*
it contains, so the stream is the same for any number of workers, any prefetch depth,
any timing and any resume point.
"""
from __future__ import annotations

import sys
import warnings

from onemodel_cy._batch import ImageBatch
from onemodel_cy._collate import ImageBatchCollator, Workspace
from onemodel_cy._fetch import build_batch
from onemodel_cy._pacing import Pacing
from onemodel_cy._samplers import Sampler
from onemodel_cy._stream import BatchStream, close_engines
from onemodel_cy._validate import check_integer

__all__ = ["DataLoader", "BatchStream", "threads_available"]

_MASK64 = (1 << 64) - 1


def threads_available() -> bool:
    """False where the platform cannot start threads (browser WebAssembly, WASI)."""
    return sys.platform not in ("emscripten", "wasi")


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
    worker_mode : {"thread", "process"}, default "thread"
        What the ``workers`` are: threads, or processes for a dataset or transform that is
        mostly Python (see docs/workers.md). The stream is the same either way.

    Notes
    -----
    ``dataset``, ``sampler``, ``collator``, ``seed``, ``transform``, ``rank`` and
    ``world_size`` are read-only: the batches are a function of them. ``workers``,
    ``prefetch``, ``timeout`` and ``worker_mode`` may be changed between streams. A stream
    closed from another thread (``stream.close()``, ``loader.close()``) ends as if it had run out:
    the loop over it stops without an error; compare ``stream.next_g`` with the step you
    expected to tell the two apart.

    With workers, ``for batch in loader`` keeps its worker threads between passes (as
    PyTorch's ``persistent_workers=True``) and they go on prefetching the next epoch's
    first steps, so an epoch boundary costs nothing. Those threads live until
    ``close()`` (or leaving ``with loader:``), or until the loader is collected. Streams
    from ``iter()`` end their own threads when closed.
    """

    _idle_engine = None     # the worker engine a completed `for batch in loader` pass left behind

    def __init__(self, dataset, sampler, collator, *, seed, workers=0, prefetch=2, transform=None,
                 rank=0, world_size=1, timeout=None, worker_mode="thread"):
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
        # What the bytes depend on is read-only (below): batches built ahead by kept
        # workers must stay the batches of this configuration.
        self._dataset = dataset
        self._sampler = sampler
        self._collator = collator
        self._seed = check_integer(seed, "seed") & _MASK64     # D3: any integer, mod 2**64
        self.workers = check_integer(workers, "workers", 0)
        self.prefetch = check_integer(prefetch, "prefetch", 1)
        self._transform = transform
        self._world_size = check_integer(world_size, "world_size", 1)
        self._rank = check_integer(rank, "rank", 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must lie in [0, world_size) = [0, {self.world_size}), received {self.rank}")
        batch_size = sampler.batch_size
        if batch_size % self.world_size:
            raise ValueError(f"batch_size ({batch_size}) must be divisible by world_size ({self.world_size})")
        if timeout is not None and not (isinstance(timeout, (int, float)) and timeout > 0):
            raise ValueError(f"timeout must be a positive number of seconds or None, received {timeout!r}")
        self.timeout = timeout
        self.worker_mode = worker_mode      # validated by the property (process workers, below)
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

    dataset = property(lambda self: self._dataset, doc="The dataset (read-only).")
    sampler = property(lambda self: self._sampler, doc="The sampler (read-only).")
    collator = property(lambda self: self._collator, doc="The collator (read-only).")
    seed = property(lambda self: self._seed, doc="The loader's seed, mod 2**64 (read-only).")
    transform = property(lambda self: self._transform, doc="The transform (read-only).")
    rank = property(lambda self: self._rank, doc="This process's rank (read-only).")
    world_size = property(lambda self: self._world_size, doc="The number of ranks (read-only).")

    # -- the pure function -------------------------------------------------------------

    @property
    def steps_per_epoch(self) -> int:
        return self.sampler.steps_per_epoch

    def __len__(self):
        return self.sampler.steps_per_epoch

    def batch_at(self, g) -> ImageBatch:
        """Build global step ``g`` on the calling thread (what every stream yields at ``g``)."""
        g = check_integer(g, "g", 0)
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

    def iter(self, start_g=0, stop_g=None, **deprecated) -> "BatchStream":
        """A stream of global steps ``[start_g, stop_g)`` (endless if ``stop_g`` is None).

        Resume a run with ``loader.iter(start_g=stream.next_g)``. (``start_step`` and
        ``stop_step`` are the deprecated names of the two arguments.)
        """
        unknown = set(deprecated) - {"start_step", "stop_step"}
        if unknown:
            raise TypeError(f"DataLoader.iter() got unexpected keyword arguments {sorted(unknown)}")
        if deprecated:
            warnings.warn(f"DataLoader.iter({', '.join(sorted(deprecated))}) is deprecated: use start_g and "
                          f"stop_g (global steps)", DeprecationWarning, stacklevel=2)
        if ("start_step" in deprecated and start_g != 0) or ("stop_step" in deprecated and stop_g is not None):
            raise TypeError("DataLoader.iter() got a global step under both its name and its deprecated name")
        start_g = deprecated.get("start_step", start_g)
        stop_g = deprecated.get("stop_step", stop_g)
        return BatchStream(self, start_g, stop_g)

    def __iter__(self):
        """One epoch, ``self.epoch``; a completed pass moves on to the next epoch.

        A completed pass leaves its workers to the loader, prefetching on: the next pass
        takes over its ring, batches built ahead included. A pass left early (``break``,
        an exception) ends its workers.
        """
        epoch = self.epoch
        S = self.steps_per_epoch
        stream = BatchStream(self, epoch * S, (epoch + 1) * S, _persistent=True)
        try:
            yield from stream
        finally:
            stream.close()
        if stream.next_g == stream.stop_g:    # not when closed from elsewhere midway
            self.epoch = epoch + 1

    def set_epoch(self, epoch):
        """Choose the epoch the next ``for batch in loader`` runs."""
        self.epoch = check_integer(epoch, "epoch", 0)

    def close(self):
        """End every worker thread of this loader: those kept between passes of
        ``for batch in loader`` and those of its open streams (which then stop). The loader
        stays usable; a later stream starts new threads."""
        close_engines(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        engine = self.__dict__.get("_idle_engine")
        if engine is not None:
            try:
                engine.shutdown()
            except Exception:
                pass

    # -- process workers (onemodel_cy._procs) ---------------------------------------------

    WORKER_MODES = ("thread", "process")

    @property
    def worker_mode(self) -> str:
        """``"thread"`` or ``"process"``: what a stream's workers are (changeable between streams)."""
        return self._worker_mode

    @worker_mode.setter
    def worker_mode(self, mode):
        if not isinstance(mode, str):
            raise TypeError(f"worker_mode must be a str, one of {self.WORKER_MODES}, received {type(mode).__name__}")
        if mode not in self.WORKER_MODES:
            raise ValueError(f"worker_mode must be one of {self.WORKER_MODES}, received {mode!r}")
        self._worker_mode = mode

    def _stream_workers(self) -> int:
        """The worker count a stream runs with: 0 where threads are unavailable."""
        return self.workers if threads_available() else 0

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
                f"timeout={self.timeout}, worker_mode={self.worker_mode!r})")
