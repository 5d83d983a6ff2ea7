"""The loader test harness: what the §1 tests (``test_s1_loader.py``) build on.

It offers:

* ``Pipe``, one pipeline configuration buildable both as the package's ``DataLoader`` and
  as the oracle ``reference.batch``, and the Hypothesis strategy ``pipes`` that draws them
  (samplers, transforms and augmentations written once for both sides, ``PyDataset`` for
  the loader's generic dataset path);
* stream driving that turns a hang into a failure: ``drain`` / ``drain_ok`` consume a
  stream on a helper thread and fail after ``STALL`` seconds without a batch;
* byte comparisons: ``assert_same``, ``assert_meta``, ``assert_stream_is_batch_at``,
  ``assert_ranks_compose``;
* worker-thread checks: ``live_workers``, ``assert_no_workers``, ``assert_parked``,
  ``finish`` (the end-of-test check for either ``persistent_workers`` mode),
  ``wait_for_workers`` and
  the autouse fixture ``_guard`` (a test module enables it by importing it), which fails a
  test that leaves worker threads behind and dumps stacks if a test hangs outright;
* instrumented datasets and builds: ``SleepyDataset`` (random read times),
  ``FailingDataset`` / ``DatasetBroke`` and ``_failing_case`` (an error at a chosen step),
  ``RingProbe`` (window and slot discipline), ``RecordingBuilds`` (which steps were started
  and built);
* the shared constants and strategies (``WORKERS``, ``PREFETCH``, ``SEEDS``, ``examples``,
  ``NO_SHRINK``);
* both worker modes: ``MODES`` and ``in_mode(mode, workers)`` give a loader's worker
  arguments for threads or processes; ``live_workers`` lists worker threads and worker
  processes alike, so every leak check covers both.
"""

from __future__ import annotations

import faulthandler
import functools
import gc
import multiprocessing
import os
import queue
import random
import sys
import threading
import time
import traceback
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import Phase, settings, strategies as st

import onemodel_cy as om
from onemodel_cy.collate.pipeline import Pipeline
import pipeline_parts
import reference as R
# The picklable datasets and transforms (re-exported: the tests import them from here).
from pipeline_parts import (  # noqa: F401
    DatasetBroke, FailingDataset, GarbageAt, PyDataset, PythonSampler, SleepyDataset, _crop, _shift, crop_om,
    py_augmentation, shift_om)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
M64 = (1 << 64) - 1
FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")
WORKER_PREFIX = "onemodel_cy-worker"
STALL = 6.0                      # seconds without a batch that count as a hang
SAFETY_NET = 150                 # seconds: a test stuck outside drain() dumps its stacks and exits

WORKERS = st.sampled_from([0, 1, 2, 4, 8])
PERSISTENT = st.booleans()       # DataLoader(persistent_workers=...)
PREFETCH = st.integers(1, 8)
SEEDS = st.one_of(st.integers(0, M64), st.sampled_from([0, 1, M64, -1]))
_EXAMPLES = settings.default.max_examples


def examples(fraction):
    """A share of the active profile's example count (the heavy properties run fewer)."""
    return max(5, int(_EXAMPLES * fraction))


# Exception properties: a hang costs STALL seconds per example, so do not shrink a hang.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


# Both kinds of workers run the same contract. Process mode caps the drawn worker count:
# the machine the suite runs on has few cores, and processes, unlike threads, each cost one.
MODES = ("thread", "process")
PROCESS_WORKERS_MAX = 3


def in_mode(mode, workers):
    """The DataLoader worker arguments for ``workers`` workers of kind ``mode``."""
    if mode == "process":
        workers = min(workers, PROCESS_WORKERS_MAX)
    return dict(workers=workers, worker_mode=mode)


# ------------------------------------------------------------ worker threads, stream driving, byte comparisons

def live_workers():
    """Worker threads and worker processes (both are named with WORKER_PREFIX) still running."""
    threads = [t for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX) and t.is_alive()]
    processes = [p for p in multiprocessing.active_children() if p.name.startswith(WORKER_PREFIX)]
    return threads + processes


def assert_no_workers(what="after close"):
    alive = live_workers()
    assert not alive, f"{what}: worker threads still running: {[t.name for t in alive]}"


def assert_parked(loader, what="after close"):
    """Every live worker is one of ``loader``'s parked engine, waiting for a step to claim
    (``engine.idle()``: a thread in ``claim``'s condition wait, asleep in the packed lane's,
    a process asleep on its task board: no build in progress, no CPU used)."""
    engine = loader._idle_engine
    alive = live_workers()
    if engine is None:
        assert not alive, f"{what}: workers run but the loader keeps none: {[t.name for t in alive]}"
        return
    mine = {id(t) for t in engine.threads}
    assert {id(t) for t in alive} <= mine, f"{what}: workers of no parked engine: {[t.name for t in alive]}"
    deadline = time.monotonic() + STALL
    while not engine.idle():     # a build started before the park may still be finishing
        busy = [t.name for t in alive]
        assert time.monotonic() < deadline, f"{what}: parked workers still busy after {STALL} s: {busy}"
        time.sleep(0.005)


def finish(loader, what="after close"):
    """End of a test's streams: with ``persistent_workers`` the workers are parked in the
    loader and ``loader.close()`` ends them; without, none is left already."""
    if loader.persistent_workers:
        assert_parked(loader, what)
        loader.close()
    assert_no_workers(what)


@pytest.fixture(autouse=True)
def _guard():
    """Per test: fail on leaked worker threads; dump stacks and exit if a test hangs outright."""
    before = {t.ident for t in live_workers()}
    faulthandler.dump_traceback_later(SAFETY_NET, exit=True)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
    gc.collect()
    leaked = [t.name for t in live_workers() if t.ident not in before]
    assert not leaked, f"worker threads outlived the test: {leaked}"


class Stalled(AssertionError):
    pass


def drain(stream, count=None, *, before=None, after=None, stall=STALL):
    """Take batches from ``stream`` on a helper thread until it ends, raises, or ``count`` are taken.

    Returns ``(batches, error)``: ``error`` is what ``next()`` raised (``None`` when the stream
    ended or ``count`` was reached). ``before(next_g)`` / ``after(batch)`` run on the
    consuming thread around every ``next()``. No batch for ``stall`` seconds closes the stream
    and raises :class:`Stalled`.
    """
    box = queue.Queue()

    def consume():
        try:
            taken = 0
            while count is None or taken < count:
                if before is not None:
                    before(stream.next_g)
                try:
                    batch = next(stream)
                except StopIteration:
                    break
                if after is not None:
                    after(batch)
                box.put(("batch", batch))
                taken += 1
            box.put(("end", None))
        except BaseException as error:  # handed to the test
            box.put(("error", error))

    thread = threading.Thread(target=consume, name="test-consumer", daemon=True)
    thread.start()
    batches = []
    while True:
        try:
            kind, item = box.get(timeout=stall)
        except queue.Empty:
            stacks = "".join(
                f"\n--- {t.name}\n" + "".join(traceback.format_stack(sys._current_frames()[t.ident]))
                for t in threading.enumerate() if t.ident in sys._current_frames()
                and (t.name.startswith(WORKER_PREFIX) or t is thread))
            stream.close()
            thread.join(stall)
            raise Stalled(f"the stream delivered nothing for {stall} s after {len(batches)} batches "
                          f"(next_g={stream.next_g}): it hangs. Stacks:{stacks}") from None
        if kind == "batch":
            batches.append(item)
            continue
        thread.join()
        return batches, item


def drain_ok(stream, count=None, **kw):
    batches, error = drain(stream, count, **kw)
    if error is not None:
        raise error
    return batches


def assert_same(actual, expected, what):
    """Byte equality of the six batch arrays (dtype, shape and bits)."""
    if isinstance(actual, om.ImageBatch):
        actual = actual.as_dict()
    if isinstance(expected, om.ImageBatch):
        expected = expected.as_dict()
    for name in FIELDS:
        a, e = np.asarray(actual[name]), np.asarray(expected[name])
        assert a.dtype == e.dtype, f"{what}: {name} dtype {a.dtype} != {e.dtype}"
        assert a.shape == e.shape, f"{what}: {name} shape {a.shape} != {e.shape}"
        if a.tobytes() != e.tobytes():
            bad = np.argwhere(a.view(np.uint8).reshape(a.shape + (-1,)) != e.view(np.uint8).reshape(
                e.shape + (-1,)))[:3] if a.size else []
            raise AssertionError(f"{what}: {name} differs (first differing positions {bad.tolist()})")


def assert_meta(batch, g, steps_per_epoch):
    assert batch.global_step == g, f"expected global step {g}, received {batch.global_step}"
    assert (batch.epoch, batch.step) == divmod(g, steps_per_epoch)


def assert_stream_is_batch_at(batches, loader, steps, what):
    S = loader.steps_per_epoch
    got = [b.global_step for b in batches]
    assert got == list(steps), f"{what}: steps delivered {got}, expected {list(steps)}"
    for b, g in zip(batches, steps):
        assert_meta(b, g, S)
        assert_same(b, loader.batch_at(g), f"{what}: step {g} vs batch_at({g})")


# --------------------------------------------------------------------------- transforms and augmentations
# Written once for both sides: the package hands them a Sample and a SampleRng, the
# reference a (image, target, label) triple and its own SampleRng.

TRANSFORMS = {None: (None, None), "crop": (crop_om, _crop), "shift": (shift_om, _shift)}
AUGMENTATIONS = {
    None: (None, None),
    "gain_offset": (om.GainOffset(0.3, 0.25), R.gain_offset(0.3, 0.25)),
    "gaussian_noise": (om.GaussianNoise(0.1), R.gaussian_noise(0.1)),
    "python": (py_augmentation, py_augmentation),
}


# ------------------------------------------------------------ pipelines: the package side and the reference side

@functools.lru_cache(maxsize=4096)
def _ref_sample(i, height, min_width, max_width, channels, seed):
    image, target, label = R.synthetic_sample(i, height, min_width, max_width, channels, seed)
    image.flags.writeable = False
    target.flags.writeable = False
    return image, target, label


@dataclass(frozen=True)
class Pipe:
    """One pipeline configuration, buildable both as the package and as the reference."""
    count: int = 40
    height: int = 3
    min_width: int = 1
    max_width: int = 12
    channels: int = 1
    ds_seed: int = 7
    sampler: str = "shuffled"
    batch_size: int = 4
    drop_last: bool = True
    sampler_seed: int = 11
    pool_batches: int = 2
    mix_steps: int = 5
    mix_sources: tuple = ((0, 20, 1.0), (20, 20, 2.0))
    seed: int = 5
    width_multiple: int = 1
    pad_value: float = 0.0
    augmentation: object = None
    transform: object = None
    generic: bool = False

    # the package side
    def base_dataset(self):
        return om.SyntheticLineImages(self.count, self.height, self.min_width, self.max_width,
                                      self.channels, self.ds_seed)

    def dataset(self):
        ds = self.base_dataset()
        return PyDataset(ds) if self.generic else ds

    def om_sampler(self):
        if self.sampler == "sequential":
            return om.SequentialSampler(self.count, self.batch_size, self.drop_last)
        if self.sampler == "shuffled":
            return om.ShuffledSampler(self.count, self.batch_size, self.sampler_seed, self.drop_last)
        if self.sampler == "mixing":
            return om.MixingSampler(list(self.mix_sources), self.batch_size, self.mix_steps, self.sampler_seed)
        return om.BucketedSampler(self.base_dataset().widths, self.batch_size, self.pool_batches,
                                  self.sampler_seed)

    def collator(self):
        return om.ImageBatchCollator(self.width_multiple, self.pad_value, AUGMENTATIONS[self.augmentation][0])

    def loader(self, workers=0, prefetch=2, rank=0, world_size=1, dataset=None, **kw):
        kw.setdefault("worker_mode", "thread")      # the tests of threads; in_mode() names either kind
        return om.DataLoader(self.dataset() if dataset is None else dataset, self.om_sampler(),
                             self.collator(), seed=self.seed, workers=workers, prefetch=prefetch,
                             transform=TRANSFORMS[self.transform][0], rank=rank, world_size=world_size, **kw)

    # the reference side
    def ref_sample(self, i):
        return _ref_sample(i, self.height, self.min_width, self.max_width, self.channels, self.ds_seed)

    def ref_sampler(self):
        if self.sampler == "sequential":
            return R.SequentialSampler(self.count, self.batch_size, self.drop_last)
        if self.sampler == "shuffled":
            return R.ShuffledSampler(self.count, self.batch_size, self.sampler_seed, self.drop_last)
        if self.sampler == "mixing":
            return R.MixingSampler(list(self.mix_sources), self.batch_size, self.mix_steps, self.sampler_seed)
        lengths = [self.ref_sample(i)[0].shape[2] for i in range(self.count)]
        return R.BucketedSampler(lengths, self.batch_size, self.pool_batches, self.sampler_seed)

    def ref_batch(self, g, rank=0, world_size=1):
        return R.batch(self.ref_sample, self.ref_sampler(), self.seed, g, self.width_multiple, self.pad_value,
                       AUGMENTATIONS[self.augmentation][1], TRANSFORMS[self.transform][1], rank, world_size)


SAMPLER_KINDS = ("sequential", "shuffled", "mixing", "bucketed")


@st.composite
def pipes(draw, kinds=SAMPLER_KINDS, full_batches=False, generic=None, transform=True, max_batch=8):
    count = draw(st.integers(24, 60))
    min_width = draw(st.integers(1, 12))
    kind = draw(st.sampled_from(kinds))
    batch_size = draw(st.integers(1, max_batch))
    drop_last = True if (full_batches or kind in ("mixing", "bucketed")) else draw(st.booleans())
    cuts = sorted(draw(st.lists(st.integers(1, count - 1), max_size=2, unique=True)))
    bounds = [0, *cuts, count]
    shares = [draw(st.sampled_from([0.0, 0.5, 1.0, 2.5])) for _ in range(len(bounds) - 1)]
    if not any(shares):
        shares[-1] = 1.0
    sources = tuple((bounds[k], bounds[k + 1] - bounds[k], shares[k]) for k in range(len(shares)))
    return Pipe(
        count=count, height=draw(st.integers(2, 4)), min_width=min_width,
        max_width=draw(st.integers(min_width, 12)), channels=draw(st.integers(1, 2)),
        ds_seed=draw(st.integers(0, M64)), sampler=kind, batch_size=batch_size, drop_last=drop_last,
        sampler_seed=draw(SEEDS), pool_batches=draw(st.integers(1, 4)), mix_steps=draw(st.integers(1, 6)),
        mix_sources=sources, seed=draw(SEEDS), width_multiple=draw(st.integers(1, 5)),
        pad_value=draw(st.sampled_from([0.0, -1.0, 0.5, 3.25])),
        augmentation=draw(st.sampled_from(list(AUGMENTATIONS))),
        transform=draw(st.sampled_from(list(TRANSFORMS))) if transform else None,
        generic=draw(st.booleans()) if generic is None else generic,
    )


# --------------------------------------------------------------------------- instrumented datasets and builds


def _failing_case(kind, pipe, g, slot, delay, workers, prefetch, mode="thread"):
    """(loader, expected exception type, check(error), failing step) for a failure at step g, slot.

    With process workers the dataset's frame is checked in the traceback text the error
    carries from the worker (a traceback object does not cross processes)."""
    base = pipe.base_dataset()
    sampler = pipe.om_sampler()
    ring = dict(prefetch=prefetch, **in_mode(mode, workers))
    if kind == "dataset":
        bad = int(sampler.indices(0, g)[slot])
        loader = pipe.loader(dataset=FailingDataset(base, bad, delay), **ring)

        def check(error):
            frames = traceback.extract_tb(error.__traceback__)
            in_frames = any(f.name == "get_sample" and f.filename == pipeline_parts.__file__ for f in frames)
            text = "\n".join(getattr(error, "__notes__", []))
            in_text = f'File "{pipeline_parts.__file__}"' in text and "in get_sample" in text
            found = in_frames or (mode == "process" and in_text)   # a step built on the consumer has frames
            assert found, ("the delivered traceback lost the dataset's frame:\n"
                           + "".join(traceback.format_tb(error.__traceback__)) + text)
            assert f"cannot read sample {bad}" in str(error)
        return loader, DatasetBroke, check, g

    if kind == "transform":
        garbage = GarbageAt(om.derive(pipe.seed, 0, g, slot, 0), delay)
        loader = om.DataLoader(base, sampler, pipe.collator(), seed=pipe.seed, transform=garbage,
                               **{"worker_mode": "thread", **ring})

        def check(error):
            message = str(error)
            assert f"step {g}" in message and f"slot {slot}" in message, message
        return loader, TypeError, check, g

    # an index the dataset rejects: a sequential walk past the end of a shorter dataset. The
    # walk is a Python sampler, whose range the loader cannot know when it is built (a
    # built-in sampler reaching past the dataset is refused then: issue 10).
    full = PythonSampler(om.SequentialSampler(pipe.count, pipe.batch_size))
    short_length = full.steps_per_epoch * pipe.batch_size - 1 - slot
    short = om.SyntheticLineImages(short_length, pipe.height, pipe.min_width, pipe.max_width,
                                   pipe.channels, pipe.ds_seed)
    loader = om.DataLoader(PyDataset(short) if kind == "index_generic" else short, full, pipe.collator(),
                           seed=pipe.seed, **{"worker_mode": "thread", **ring})
    return loader, IndexError, lambda error: None, short_length // pipe.batch_size


def batch_bits(batch):
    """Every array of a batch as raw bits (NaN-safe, -0.0 distinct from 0.0)."""
    return (np.asarray(batch.images).view(np.uint32).tobytes(), np.asarray(batch.widths).tobytes(),
            np.asarray(batch.targets).tobytes(), np.asarray(batch.target_lengths).tobytes(),
            np.asarray(batch.labels).tobytes(), np.asarray(batch.indices).tobytes())


class RingProbe:
    """Records, when each build starts, where the consumer is; flags window and slot violations.

    The consumer's position is exact between two ``next()`` calls; inside ``next()`` for step t
    the ring may already have handed t over, so t + 1 is then also a legal position.
    """

    def __init__(self, loader, start, seed):
        self.prefetch = loader.prefetch
        self.lock = threading.Lock()
        self.received = start         # steps < received have reached the consumer
        self.inside_next = False
        self.live = set()             # builds started and not yet received by the consumer
        self.violations = []
        self.max_ahead = -1
        self.rng = random.Random(seed)

        def probed(g, workspace, build):
            with self.lock:
                slack = 1 if self.inside_next else 0
                if not g < self.received + self.prefetch + slack:
                    self.violations.append(f"step {g} built while the consumer was at {self.received}"
                                           f"{' (inside next)' if slack else ''}, prefetch {self.prefetch}")
                for h in self.live:
                    same_slot = h % self.prefetch == g % self.prefetch
                    handed_over = slack and h == self.received
                    if same_slot and not handed_over:
                        self.violations.append(f"step {g} built into slot {g % self.prefetch} while step {h} "
                                               f"still lives there")
                self.live.add(g)
                self.max_ahead = max(self.max_ahead, g - self.received)
                pause = self.rng.random() * 0.002
            time.sleep(pause)
            return build(g, workspace)

        wrap_build(loader, probed)

    def before(self, step):
        with self.lock:
            self.inside_next = True

    def after(self, batch):
        with self.lock:
            self.live.discard(batch.global_step)
            self.received = batch.global_step + 1
            self.inside_next = False
        time.sleep(0.004)   # a slow consumer: the workers fill the window


# --------------------------------------------------------------------------- ranks, small loaders, kept workers

def assert_ranks_compose(parts, whole, width_multiple, pad_value, what):
    """The ranks' batches side by side equal the global batch (images over real widths)."""
    for name in ("widths", "target_lengths", "labels", "indices", "targets"):
        joined = np.concatenate([np.asarray(p[name]) for p in parts])
        assert joined.dtype == whole[name].dtype and joined.tobytes() == np.asarray(whole[name]).tobytes(), (
            f"{what}: {name} concatenated over ranks {joined.tolist()} != global {np.asarray(whole[name]).tolist()}")
    pad_bits = np.float32(pad_value).view(np.uint32)
    slot = 0
    for r, part in enumerate(parts):
        images, widths = np.asarray(part["images"]), np.asarray(part["widths"])
        assert images.shape[1:3] == whole["images"].shape[1:3]
        wp = -(-int(widths.max()) // width_multiple) * width_multiple
        assert images.shape[3] == wp, f"{what}: rank {r} pads to {images.shape[3]}, its widest image needs {wp}"
        for j, w in enumerate(widths):
            assert images[j, :, :, :w].tobytes() == whole["images"][slot, :, :, :w].tobytes(), (
                f"{what}: rank {r} sample {j} differs from global slot {slot}")
            assert (images[j, :, :, w:].view(np.uint32) == pad_bits).all(), f"{what}: rank {r} padding"
            slot += 1
    assert slot == len(whole["widths"])


def _small_loader(**kw):
    ds = om.SyntheticLineImages(48, 3, 1, 9, seed=4)
    kw.setdefault("seed", 5)
    return om.DataLoader(ds, om.ShuffledSampler(48, 4, 2), om.ImageBatchCollator(augmentation=om.GainOffset()),
                         **kw)


def _worker_idents():
    return {t.ident for t in live_workers()}


def wait_for_workers(count, seconds=5.0):
    """The live worker threads once there are ``count`` (each worker starts the next one,
    so the last may start a little after the first batches arrive)."""
    deadline = time.monotonic() + seconds
    while len(live_workers()) != count and time.monotonic() < deadline:
        time.sleep(0.002)
    alive = live_workers()
    assert len(alive) == count, f"expected {count} worker threads, found {[t.name for t in alive]}"
    return {t.ident for t in alive}


class _WrappedPipeline(Pipeline):
    """A loader's pipeline whose ``build`` runs inside ``around(g, workspace, build)``. It
    does not split, so every engine calls its ``build`` (the packed lane would not)."""

    def __init__(self, base, around):
        super().__init__(base.dataset, base.sampler, base.collator, base.seed, base.transform, base.lo, base.hi)
        self.around = around

    def build(self, g, workspace):
        return self.around(g, workspace, super().build)

    def splits(self):
        return False


def wrap_build(loader, around):
    """Every build of ``loader``'s streams from now on runs inside ``around(g, workspace, build)``
    (thread workers, or 0 workers; a worker process would pickle the pipeline without it)."""
    loader._pipeline = _WrappedPipeline(loader._pipeline, around)


class RecordingBuilds:
    """Wraps the loader's builds: records every step started and every step built; the build
    of step ``fail_at`` raises DatasetBroke."""

    def __init__(self, loader, fail_at=None):
        self.started = []
        self.built = []
        self.lock = threading.Lock()

        def recording(g, workspace, build):
            with self.lock:
                self.started.append(g)
            if g == fail_at:
                raise DatasetBroke(f"cannot build step {g}")
            batch = build(g, workspace)
            with self.lock:
                self.built.append(g)
            return batch

        wrap_build(loader, recording)

    def wait_for(self, steps, seconds=5.0, attempted=False):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if set(steps) <= set(self.started if attempted else self.built):
                    return True
            time.sleep(0.002)
        return False
