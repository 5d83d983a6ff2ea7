"""§1 the DataLoader: configuration, ranks, ``batch_at``, the stateful path and checkpoints.

``DataLoader`` checks the configuration and holds the pure function, its
:class:`~onemodel_cy.collate.pipeline.Pipeline`: ``pipeline.build(g, workspace)`` builds global
step ``g``. The streams live in :mod:`onemodel_cy.stream`, their workers in
:mod:`onemodel_cy.workers`. Workers only decide *when* a step is built, never *what* it
contains, so the stream is the same for any number of workers, any prefetch depth, any
timing and any resume point.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterator, Optional

if TYPE_CHECKING:
    from onemodel_cy.data.datasets import Sample
    from onemodel_cy.core.rng import SampleRng

from onemodel_cy.collate.batch import ImageBatch
from onemodel_cy.collate.collator import ImageBatchCollator
from onemodel_cy.collate.pacing import Pacing
from onemodel_cy.collate.pipeline import Pipeline
from onemodel_cy.collate.profile import StageClock
from onemodel_cy.core.samplers import Sampler, SequentialSampler, ShuffledSampler
from onemodel_cy.core.tablesamplers import BucketedSampler, MixingSampler
from onemodel_cy.core.validate import G_END, check_global_step, check_integer, check_seconds
from onemodel_cy.profile import LoaderProfile
from onemodel_cy.stream import BatchStream
from onemodel_cy.workers.protocol import DEFAULT_JOIN_TIMEOUT, MAX_PREFETCH, MAX_WORKERS
from onemodel_cy.workers.choice import choose_worker_mode, warn_choice
from onemodel_cy.workers.registry import close_engines

__all__ = ["DataLoader", "threads_available"]

_MASK64 = (1 << 64) - 1


def threads_available() -> bool:
    """False where the platform cannot start threads (browser WebAssembly, WASI)."""
    return sys.platform not in ("emscripten", "wasi")


class _Setting:
    """A loader setting that may change between streams, checked by ``check(value, name)``
    each time it is set (at construction too)."""

    def __init__(self, check):
        self.check = check

    def __set_name__(self, owner, name):
        self.name, self.slot = name, "_" + name

    def __get__(self, loader, owner=None):
        return self if loader is None else getattr(loader, self.slot)

    def __set__(self, loader, value):
        setattr(loader, self.slot, self.check(value, self.name))


def _check_bool(value, name):
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be True or False, received {value!r}")
    return value


def _check_worker_mode(mode, name):
    modes = DataLoader.WORKER_MODES
    if not isinstance(mode, str):
        raise TypeError(f"{name} must be a str, one of {modes}, received {type(mode).__name__}")
    if mode not in modes:
        raise ValueError(f"{name} must be one of {modes}, received {mode!r}")
    return mode


def _stable_name(obj) -> str:
    """``repr(obj)``, unless it holds a memory address; then the object's (or its type's) qualified name."""
    text = repr(obj)
    if " at 0x" not in text:
        return text
    named = obj if hasattr(obj, "__qualname__") else type(obj)
    return f"{getattr(named, '__module__', '?')}.{named.__qualname__}"


def _identity(obj) -> str:
    """What names ``obj`` in a fingerprint: ``obj.fingerprint()`` where its type defines one
    (a pack names its content, not its path), else its stable name."""
    if getattr(type(obj), "fingerprint", None) is None:
        return _stable_name(obj)
    text = obj.fingerprint()
    if not isinstance(text, str):
        raise TypeError(f"{type(obj).__qualname__}.fingerprint() must return a str, received "
                        f"{type(text).__name__}")
    return text


def _index_bound(sampler) -> Optional[int]:
    """One past the largest dataset index ``sampler`` can produce; None where that is not
    known before it runs (a sampler written in Python)."""
    kind = type(sampler)
    if kind in (SequentialSampler, ShuffledSampler, BucketedSampler):
        return sampler.n
    if kind is MixingSampler:
        return max(start + size for start, size, share in sampler.sources if share > 0 and size > 0)
    return None


class DataLoader:
    """Feeds ``ImageBatch``es in global step order; batch ``g`` is a pure function of (seed, g) (§1).

    Parameters
    ----------
    dataset : object with ``__len__`` and thread-safe ``get_sample(i) -> Sample``
        An :class:`ArrayImageDataset` (or :class:`SyntheticLineImages`, a
        :class:`PackedImageDataset`) without a transform, or with a built-in one
        (``onemodel_cy.augment``), takes the fast path: whole batches gathered and
        augmented without the GIL.
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
        The longest wait for one batch before ``TimeoutError`` (as in PyTorch's
        ``DataLoader``): for a worker to build it, and (at any number of workers) for the
        samples of a pack at a URL that the consumer fetches for a step it builds or
        prepares itself (docs/packed-format.md). By default the consumer waits while a
        worker is alive, and for samples as long as the fetch's ``retry`` lets it.
    persistent_workers : bool, default True
        Worker threads belong to the loader: a stream that closes parks them for the next
        one, which then starts without starting threads (PyTorch's option of the same name,
        here the default and for every stream). False: each stream starts its own threads
        and ends them when it closes.
    join_timeout : float, default 10.0
        How long, in all, closing a stream (or the loader) waits for its workers to finish
        the batch each is building. A worker still inside ``get_sample``, the transform or
        the augmentation after that is left to end by itself (it is a daemon thread) and
        reported with a :class:`StuckWorkerWarning`, which Python shows by default.
    worker_mode : {"auto", "thread", "process"}, default "auto"
        What the ``workers`` are: threads, or processes for a dataset or transform that is
        mostly Python (see docs/workers.md). ``"auto"`` chooses from the pipeline: threads
        when it runs without the GIL (a packed view with no transform or a built-in one),
        processes when it has Python stages (your ``get_sample``, transform or
        augmentation) and they can run there, else threads with a one-line warning saying
        why; ``loader.worker_mode`` then reads as the mode chosen. The stream is the same
        whatever the mode.

    Notes
    -----
    ``dataset``, ``sampler``, ``collator``, ``seed``, ``transform``, ``rank`` and
    ``world_size`` are read-only: the batches are a function of them. ``workers``,
    ``prefetch``, ``timeout``, ``join_timeout``, ``persistent_workers`` and ``worker_mode``
    may be changed between streams.

    A built-in sampler that can produce a dataset index past ``len(dataset)`` is refused
    here, with a ``ValueError``; the indices of a sampler written in Python are checked as
    each batch is built (an ``IndexError`` noting the step, slot and index).

    Checkpoints (§1 resume) follow torchdata's ``StatefulDataLoader``: ``for batch in
    loader`` is the stateful path. The loader keeps its position, the global step the next
    pass starts at: ``state_dict()`` saves it, ``load_state_dict()`` restores it (after
    checking the pipeline), and a pass left midway (``break``) is resumed, not restarted,
    by the next pass. See :meth:`state_dict`. A stream closed from
    another thread (``stream.close()``, ``loader.close()``) ends as if it had run out:
    the loop over it stops without an error; compare ``stream.next_g`` with the step you
    expected to tell the two apart.

    With workers (and ``persistent_workers``), the threads live until ``close()`` (or
    leaving ``with loader:``), or until the loader is collected; between streams they wait
    without using the CPU. A pass of ``for batch in loader`` that ends goes on prefetching
    the next epoch's first steps, so an epoch boundary costs nothing; a stream from
    ``iter()`` that closes builds nothing more, and one resuming where it stopped takes
    what was built for it. A stream ending in an error ends its threads.
    """

    _idle_engine = None     # the worker engine a closed stream left parked (persistent_workers)

    def __init__(self, dataset: Any, sampler: Sampler, collator: ImageBatchCollator, *, seed: int,
                 workers: int = 0, prefetch: int = 2,
                 transform: Optional[Callable[["Sample", "SampleRng"], "Sample"]] = None,
                 rank: int = 0, world_size: int = 1, timeout: Optional[float] = None,
                 join_timeout: float = DEFAULT_JOIN_TIMEOUT, persistent_workers: bool = True,
                 worker_mode: str = "auto") -> None:
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
        seed = check_integer(seed, "seed") & _MASK64     # D3: any integer, mod 2**64
        self.workers, self.prefetch = workers, prefetch       # checked by the settings (below)
        self._world_size = check_integer(world_size, "world_size", 1)
        self._rank = check_integer(rank, "rank", 0)
        if self.rank >= self.world_size:
            raise ValueError(f"rank must lie in [0, world_size) = [0, {self.world_size}), received {self.rank}")
        batch_size = sampler.batch_size
        if batch_size % self.world_size:
            raise ValueError(f"batch_size ({batch_size}) must be divisible by world_size ({self.world_size})")
        self.timeout, self.join_timeout, self.persistent_workers = timeout, join_timeout, persistent_workers
        bound = _index_bound(sampler)
        if bound is not None and bound > len(dataset):
            raise ValueError(f"{sampler!r} can produce dataset indices up to {bound - 1}, past the end of "
                             f"{_stable_name(dataset)} ({len(dataset)} samples, indices [0, {len(dataset)}))")
        self.worker_mode = worker_mode      # checked by the setting (below)
        share = batch_size // self.world_size
        # A short last batch (drop_last=False) is shared by slot range as it stands. If the
        # last rank's range lay past its end, that rank would receive nothing: every rank
        # refuses alike, so that no rank starts while another cannot.
        last = sampler.batch_length(sampler.steps_per_epoch - 1)
        if last <= (self.world_size - 1) * share:
            raise ValueError(f"the last batch of each epoch of {sampler!r} holds {last} samples, too few to "
                             f"give each of {self.world_size} ranks a share of {share}; use drop_last=True")
        # What the batches are a function of, built by every route (collate/pipeline.pyx), and
        # the one home of those parts: read-only, so that batches built ahead by kept workers
        # stay the batches of this configuration.
        self._pipeline = Pipeline(dataset, sampler, collator, seed, transform, self.rank * share,
                                  (self.rank + 1) * share)
        # The workers' shared baton for the Python parts of a batch (see collate/pacing.pyx).
        self.pacing = Pacing()
        self._clock = StageClock()     # where the time went (profile())
        self._restored = False  # _next_g came from load_state_dict and no pass has used it yet
        self._next_g = 0       # the stateful path's position: where the next `for batch in loader` starts

    dataset = property(lambda self: self._pipeline.dataset, doc="The dataset (read-only).")
    sampler = property(lambda self: self._pipeline.sampler, doc="The sampler (read-only).")
    collator = property(lambda self: self._pipeline.collator, doc="The collator (read-only).")
    seed = property(lambda self: self._pipeline.seed, doc="The loader's seed, mod 2**64 (read-only).")
    transform = property(lambda self: self._pipeline.transform, doc="The transform (read-only).")
    rank = property(lambda self: self._rank, doc="This process's rank (read-only).")
    world_size = property(lambda self: self._world_size, doc="The number of ranks (read-only).")

    # -- the pure function -------------------------------------------------------------

    @property
    def steps_per_epoch(self) -> int:
        return self.sampler.steps_per_epoch

    def __len__(self) -> int:
        return self.sampler.steps_per_epoch

    def batch_at(self, g: int) -> ImageBatch:
        """Build global step ``g`` on the calling thread (what every stream yields at ``g``)."""
        g = check_global_step(g, "g")
        return self._pipeline.build(g, self._pipeline.workspace(self.pacing))

    def profile(self, reset: bool = False) -> LoaderProfile:
        """Where this loader's time went in this process, since it was made or since the
        last ``profile(reset=True)``: the consumer building batches itself or waiting for
        workers, the Python stages (``get_sample``, transform, Python augmentation) and the
        copies (``LoaderProfile`` says what each figure covers). Always measured; cheap to
        call, say once per epoch or logging interval. ``reset=True`` starts the next
        figures from now, after reading these. ``print(loader.profile())`` shows them, with
        advice when the Python stages bound thread workers (then use
        ``worker_mode="process"``)."""
        figures = LoaderProfile.read(self._clock, self._stream_workers(), self.worker_mode)
        if reset:
            self._clock.reset()
        return figures

    # -- streams -------------------------------------------------------------------------

    def iter(self, start_g: int = 0, stop_g: Optional[int] = None, *,
             state: Optional[Dict[str, Any]] = None) -> "BatchStream":
        """A stream of global steps ``[start_g, stop_g)`` (endless if ``stop_g`` is None).

        Parameters
        ----------
        start_g : int, default 0
            The first global step. A bare integer names a step, not a pipeline: it is not
            checked against anything (§1: a loader started at step k yields what an
            uninterrupted run yields from k on, whatever that run was).
        stop_g : int, optional
        state : dict, optional
            A checkpoint, from ``state_dict()`` of a stream or of a loader: the stream starts
            at its ``next_g`` after the same pipeline check as ``load_state_dict`` (a state
            saved by a different pipeline is refused with ``ValueError``). This is the way to
            resume a checkpoint; it excludes ``start_g``.
        """
        if state is not None:
            if start_g != 0:
                raise TypeError("DataLoader.iter() takes a start step from start_g or from state, not both")
            start_g = self._checked_next_g(state)
            if stop_g is not None and check_global_step(stop_g, "stop_g", end_ok=True) < start_g:
                raise ValueError(f"the state's next_g {start_g} lies beyond stop_g {stop_g}")
        return BatchStream(self, start_g, stop_g)

    def __iter__(self) -> Iterator[ImageBatch]:
        """The rest of the current epoch, from the loader's position (``state_dict()["next_g"]``).

        Each batch moves the position on as it is handed out, so a pass left midway
        (``break``, an exception, ``close()`` from another thread) is resumed by the next
        pass at the first step it did not hand out; a completed pass leaves the position at
        the next epoch's first step.

        A completed pass leaves its workers to the loader, prefetching on: the next pass
        takes over its ring, batches built ahead included. A pass left early (``break``)
        parks them (``persistent_workers``), with what they built for its next steps; one
        ended by an exception ends them.
        """
        return self._pass(self._next_g)     # the position when iter() is called, as in PyTorch

    def _pass(self, start):
        S = self.steps_per_epoch
        stream = BatchStream(self, start, min((start // S + 1) * S, G_END), _epoch_pass=True)
        try:
            for batch in stream:
                # Before the batch is handed out: a checkpoint taken in the loop body must
                # count it as consumed (torchdata's convention).
                self._next_g = batch.global_step + 1
                self._restored = False
                yield batch
        finally:
            stream.close()

    @property
    def epoch(self) -> int:
        """The epoch the next ``for batch in loader`` runs (in): ``next_g // steps_per_epoch``."""
        return self._next_g // self.steps_per_epoch

    @epoch.setter
    def epoch(self, epoch: int) -> None:
        self.set_epoch(epoch)

    def set_epoch(self, epoch: int) -> None:
        """Choose the epoch the next ``for batch in loader`` runs: it starts at that epoch's
        first step, unless the loader already stands inside ``epoch`` (after
        ``load_state_dict`` or a pass left midway), where its position is kept, so that the
        usual ``for epoch in range(loader.epoch, E): loader.set_epoch(epoch); for batch in
        loader`` loop resumes a mid-epoch checkpoint instead of restarting its epoch.

        A position restored by ``load_state_dict`` and not yet used is never discarded
        without a word: ``set_epoch`` of another epoch then raises ``ValueError`` (the epoch
        loop started elsewhere than ``loader.epoch``, and would replay or skip batches).
        Once a pass has handed out a batch, ``set_epoch`` moves the loader freely."""
        epoch = check_integer(epoch, "epoch", 0)
        S = self.steps_per_epoch
        if epoch * S >= G_END:
            raise ValueError(f"epoch {epoch} starts at global step {epoch * S}, past the "
                             f"last one, 2**63 - 1 (global steps are [0, 2**63))")
        if epoch == self.epoch:
            return
        if self._restored:
            raise ValueError(f"set_epoch({epoch}) would discard the position load_state_dict restored: global "
                             f"step {self._next_g} (epoch {self.epoch}, step {self._next_g % S} of {S}). Start "
                             f"the epoch loop at loader.epoch (for epoch in range(loader.epoch, EPOCHS)), or "
                             f"load a state saved at epoch {epoch}")
        self._next_g = epoch * S

    # -- checkpoints -----------------------------------------------------------------------

    def state_dict(self) -> Dict[str, Any]:
        """The stateful path's checkpoint: a JSON-able dict.

        ``"next_g"`` is the global step the next ``for batch in loader`` starts at (counting
        every batch handed out so far, the one being used in the loop body included);
        ``"fingerprint"`` names the pipeline (see :meth:`fingerprint`); ``"world_size"``
        and ``"rank"`` record who saved it, for information. A stream's ``state_dict()``
        has the same form: either kind loads into either kind, and into ``iter(state=...)``.
        """
        return self._state(self._next_g)

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Move the stateful path to ``state["next_g"]``, after checking that ``state`` was
        saved by this pipeline (``ValueError`` otherwise; ``TypeError`` for something that is
        not such a dict). The next ``for batch in loader`` runs from there to the end of its
        epoch.

        Elastic resume: the global batch at ``g`` does not depend on the world size, the
        worker count or the prefetch depth, so a state saved at another ``world_size`` (and
        rank), or with other ``workers`` / ``prefetch``, is accepted, and the ranks of the
        new world receive their shares of the very global batches the old one would have
        received. What must match is the pipeline: sampler (global batch size included),
        dataset type and size, collator, seed, transform.
        """
        self._next_g = self._checked_next_g(state)
        self._restored = True       # until a pass hands out a batch (set_epoch)

    def _state(self, next_g: int) -> Dict[str, Any]:
        return {"next_g": next_g, "fingerprint": self.fingerprint(), "world_size": self.world_size,
                "rank": self.rank}

    def _checked_next_g(self, state) -> int:
        """``state``'s next global step, once ``state`` is known to belong to this pipeline."""
        if not isinstance(state, dict) or "next_g" not in state:
            raise TypeError(f"state must be a dict from state_dict(), with the key 'next_g', received {state!r}")
        saved = state.get("fingerprint")
        if saved is not None:
            if not isinstance(saved, str):
                raise TypeError(f"state['fingerprint'] must be a str, received {type(saved).__name__}")
            current = self.fingerprint()
            if saved != current:
                raise ValueError(f"refusing to resume: the state was saved by a different pipeline\n"
                                 f"  saved:   {saved}\n  current: {current}")
        return check_global_step(state["next_g"], "next_g", end_ok=True)

    def close(self) -> None:
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

    # -- workers -----------------------------------------------------------------------------
    # Settings a stream reads when it starts, changeable between streams: each is checked
    # whenever it is set, so a value no engine can serve is refused at the assignment.

    workers = _Setting(lambda value, name: check_integer(value, name, 0, MAX_WORKERS))
    prefetch = _Setting(lambda value, name: check_integer(value, name, 1, MAX_PREFETCH))
    timeout = _Setting(lambda value, name: check_seconds(value, name, none_ok=True, zero_ok=False))
    join_timeout = _Setting(lambda value, name: check_seconds(value, name, none_ok=False, zero_ok=True))
    persistent_workers = _Setting(_check_bool)
    WORKER_MODES = ("auto", "thread", "process")

    @property
    def worker_mode(self) -> str:
        """What a stream's workers are: ``"thread"`` or ``"process"``. Set to ``"auto"`` (the
        default), it reads as the mode chosen for this pipeline (``workers/choice.py``:
        threads for a GIL-free pipeline, processes for Python stages where they can run,
        else threads and a one-line warning), chosen when first needed and kept until
        ``worker_mode`` is set again; ``worker_mode_setting`` keeps what was set."""
        mode = self._worker_mode
        if mode == "auto":
            if self._auto_mode is None:
                self._auto_mode, self._auto_warning = choose_worker_mode(self._pipeline)
            if self._auto_warning is not None and self._stream_workers():     # said once, when it matters
                warning, self._auto_warning = self._auto_warning, None
                warn_choice(warning)
            mode = self._auto_mode
        return mode

    @worker_mode.setter
    def worker_mode(self, mode: str) -> None:
        self._worker_mode = _check_worker_mode(mode, "worker_mode")
        self._auto_mode = self._auto_warning = None

    @property
    def worker_mode_setting(self) -> str:
        """``worker_mode`` as set: ``"auto"``, ``"thread"`` or ``"process"``."""
        return self._worker_mode

    def _stream_workers(self) -> int:
        """The worker count a stream runs with: 0 where threads are unavailable."""
        return self.workers if threads_available() else 0

    def fingerprint(self) -> str:
        """The pipeline's configuration (sampler, dataset type and size, collator, seed,
        transform), to refuse resuming into a different one. It leaves out what the global
        batches do not depend on: rank, world size, workers, prefetch (elastic resume).

        The dataset, the augmentation and the transform are named by their own
        ``fingerprint()`` where their type defines one (a method returning a str): a
        ``PackedImageDataset`` gives its content (the manifest's SHA-256) and its mean and
        std, never its path, so the same pack opened anywhere resumes and another pack at
        the same path is refused. Otherwise by their ``repr``, stable across processes:
        one that shows a memory address is replaced by module and qualified name. Nothing
        else hashes a dataset's contents or a bucketed sampler's lengths.
        """
        c = self.collator
        return (f"{self.sampler!r}|{_identity(self.dataset)}[{len(self.dataset)}]|"
                f"width_multiple={c.width_multiple},pad_value={c.pad_value!r},"
                f"augmentation={_identity(c.augmentation)}|seed={self.seed}|"
                f"transform={_identity(self.transform)}")

    def __getstate__(self):
        """A loader pickles (to a process started with spawn or forkserver) without its
        workers, which belong to this process: the copy starts its own when it first
        streams. Its position and settings go with it."""
        state = self.__dict__.copy()
        state.pop("_idle_engine", None)
        state["_auto_mode"] = state["_auto_warning"] = None      # chosen again where the copy runs
        return state

    def __repr__(self):
        return (f"DataLoader(dataset={self.dataset!r}, sampler={self.sampler!r}, collator={self.collator!r}, "
                f"seed={self.seed}, workers={self.workers}, prefetch={self.prefetch}, "
                f"transform={self.transform!r}, rank={self.rank}, world_size={self.world_size}, "
                f"timeout={self.timeout}, join_timeout={self.join_timeout}, "
                f"persistent_workers={self.persistent_workers}, worker_mode={self._mode_text()})")

    def _mode_text(self) -> str:
        """``worker_mode`` in the repr: the mode, or ``'auto'`` and the mode it chose."""
        if self._worker_mode != "auto":
            return repr(self._worker_mode)
        return f"'auto' ({self.worker_mode})"
