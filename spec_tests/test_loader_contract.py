"""§1 The loader contract: the batch at global step g depends on (seed, g) and nothing else.

Every stream below is compared byte for byte with ``loader.batch_at(g)`` (the same pipeline
built on the calling thread, no ring) and, for a few sampled steps, with ``reference.batch``
(the pure-Python transcription of the text). The things the text says a batch must NOT
depend on are drawn by Hypothesis: the worker count, the prefetch depth, timing, the order
in which steps were built, and where a run was interrupted and resumed.

Hangs are failures, not stuck runs: streams are consumed through ``drain``, which closes a
stream that delivers nothing for ``STALL`` seconds and fails the test.
"""

from __future__ import annotations

import faulthandler
import functools
import gc
import json
import os
import queue
import random
import subprocess
import sys
import textwrap
import threading
import time
import traceback
from dataclasses import dataclass, replace

import numpy as np
import pytest
from hypothesis import Phase, given, settings, strategies as st

import onemodel_cy as om
import onemodel_cy.loader as om_loader
import reference as R

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
M64 = (1 << 64) - 1
FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")
WORKER_PREFIX = "onemodel_cy-worker"
STALL = 6.0                      # seconds without a batch that count as a hang
SAFETY_NET = 150                 # seconds: a test stuck outside drain() dumps its stacks and exits

WORKERS = st.sampled_from([0, 1, 2, 4, 8])
PREFETCH = st.integers(1, 8)
SEEDS = st.one_of(st.integers(0, M64), st.sampled_from([0, 1, M64, -1]))
_EXAMPLES = settings.default.max_examples


def examples(fraction):
    """A share of the active profile's example count (the heavy properties run fewer)."""
    return max(5, int(_EXAMPLES * fraction))


# Exception properties: a hang costs STALL seconds per example, so do not shrink a hang.
NO_SHRINK = (Phase.explicit, Phase.reuse, Phase.generate)


# --------------------------------------------------------------------------- harness

def live_workers():
    return [t for t in threading.enumerate() if t.name.startswith(WORKER_PREFIX) and t.is_alive()]


def assert_no_workers(what="after close"):
    alive = live_workers()
    assert not alive, f"{what}: worker threads still running: {[t.name for t in alive]}"


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

def _crop(sample, rng):
    """Keep a random prefix of the columns: changes the width (the transform's job, D17)."""
    image, target, label = sample
    keep = 1 + rng.next_int(image.shape[2])
    return np.ascontiguousarray(image[:, :, :keep]), target, label


def _shift(sample, rng):
    """A new image (pixels + one draw), the target reversed and the label moved."""
    image, target, label = sample
    v = np.float32(rng.next_single())
    return (np.add(image, v, dtype=np.float32), np.asarray(target, dtype=np.int32)[::-1].copy(),
            (int(label) + rng.next_int(5)) % 10)


def crop_om(sample, rng):
    return om.Sample(*_crop(sample, rng))


def shift_om(sample, rng):
    return om.Sample(*_shift(sample, rng))


def py_augmentation(image, rng):
    """A Python in-place augmentation: scale everything, darken column 0."""
    image *= np.float32(rng.next_single())
    image[:, :, 0] -= np.float32(rng.next_single())


TRANSFORMS = {None: (None, None), "crop": (crop_om, _crop), "shift": (shift_om, _shift)}
AUGMENTATIONS = {
    None: (None, None),
    "gain_offset": (om.GainOffset(0.3, 0.25), R.gain_offset(0.3, 0.25)),
    "gaussian_noise": (om.GaussianNoise(0.1), R.gaussian_noise(0.1)),
    "python": (py_augmentation, py_augmentation),
}


class PyDataset:
    """A plain Python dataset (the loader's generic path) wrapping a built-in one."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def get_sample(self, index):
        return self.inner.get_sample(index)


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


# --------------------------------------------------------------------------- the pure function

@given(pipe=pipes(), workers=WORKERS, prefetch=PREFETCH, data=st.data())
def test_stream_equals_batch_at_and_reference(pipe, workers, prefetch, data):
    """A batch is a pure function of (seed, global step): whatever the worker count and prefetch
    depth, with any sampler, transform or augmentation, on the fast and the generic dataset
    path, the stream yields at each step exactly the bytes built for that step alone, and those
    are the reference's bytes; steps come in order, epoch = g div S and step = g mod S."""
    loader = pipe.loader(workers=workers, prefetch=prefetch)
    S = loader.steps_per_epoch
    start = data.draw(st.integers(0, 2 * S), label="start")
    length = data.draw(st.integers(1, 16), label="length")
    steps = range(start, start + length)
    with loader.iter(start, start + length) as stream:
        batches = drain_ok(stream)
        assert stream.next_g == start + length
        with pytest.raises(StopIteration):
            next(stream)
    assert_stream_is_batch_at(batches, loader, steps, f"{workers} workers, prefetch {prefetch}")
    for g in data.draw(st.lists(st.sampled_from(steps), min_size=1, max_size=2, unique=True), label="ref"):
        assert_same(batches[g - start], pipe.ref_batch(g), f"step {g} vs reference.batch")
    assert_no_workers()


class SleepyDataset(PyDataset):
    """Sleeps a seeded pseudo-random 0-3 ms per read so builds finish out of order."""

    def __init__(self, inner, seed):
        super().__init__(inner)
        self.seed = seed

    def get_sample(self, index):
        time.sleep(random.Random(self.seed * 1_000_003 + index).random() * 0.003)
        return self.inner.get_sample(index)


@settings(max_examples=examples(0.5))
@given(pipe=pipes(generic=True, max_batch=4), workers=st.sampled_from([2, 4, 8]), prefetch=PREFETCH,
       delay_seed=st.integers(0, 2 ** 32), data=st.data())
def test_timing_changes_nothing(pipe, workers, prefetch, delay_seed, data):
    """Timing is not an input: a dataset that takes a random time per read, so that workers
    finish steps out of order, still gives the consumer every step in order with the bytes of
    the step built alone."""
    loader = pipe.loader(workers=workers, prefetch=prefetch, dataset=SleepyDataset(pipe.base_dataset(), delay_seed))
    start = data.draw(st.integers(0, 2 * loader.steps_per_epoch), label="start")
    with loader.iter(start, start + 10) as stream:
        batches = drain_ok(stream)
    assert_stream_is_batch_at(batches, pipe.loader(), range(start, start + 10), "sleepy dataset")


def test_out_of_order_completion_is_delivered_in_order():
    """Workers may finish steps in any order (here step g sleeps longest in each window); the
    consumer still receives them in step order, each equal to the step built alone."""
    pipe = Pipe(sampler="sequential", batch_size=1, count=40)
    base = pipe.base_dataset()

    class Reversing(PyDataset):
        def get_sample(self, index):
            time.sleep(0.004 * (4 - index % 4))
            return self.inner.get_sample(index)

    loader = pipe.loader(workers=4, prefetch=4, dataset=Reversing(base))
    finished = []
    build = loader._build

    def recording(g, workspace):
        batch = build(g, workspace)
        finished.append(g)
        return batch

    loader._build = recording
    with loader.iter(0, 24) as stream:
        batches = drain_ok(stream)
    assert finished != sorted(finished), "the workers never finished out of order: the test proves nothing"
    assert_stream_is_batch_at(batches, pipe.loader(), range(24), "reversed completion")


# --------------------------------------------------------------------------- resume

@settings(max_examples=examples(0.6))
@given(pipe=pipes(), w1=WORKERS, p1=PREFETCH, w2=WORKERS, p2=PREFETCH, data=st.data())
def test_resume_from_any_step(pipe, w1, p1, w2, p2, data):
    """Interrupting and resuming changes nothing: a stream started at k (any worker count)
    yields exactly what an uninterrupted run from step 0 yields from k on, across epoch
    boundaries; so does a run stopped after j batches and resumed from its next_g."""
    loader = pipe.loader(workers=w1, prefetch=p1)
    S = loader.steps_per_epoch
    end = data.draw(st.integers(1, 3 * S + 2), label="end")
    k = data.draw(st.integers(0, end), label="k")
    with loader.iter(0, end) as stream:
        whole = drain_ok(stream)
    assert [b.global_step for b in whole] == list(range(end))
    with pipe.loader(workers=w2, prefetch=p2).iter(start_g=k, stop_g=end) as stream:
        tail = drain_ok(stream)
    assert [b.global_step for b in tail] == list(range(k, end))
    for b, a in zip(tail, whole[k:]):
        assert_same(b, a, f"resumed at {k}: step {b.global_step}")

    with loader.iter(0, end) as first:
        head = drain_ok(first, k)
        resume_at = first.next_g
    assert resume_at == k
    with pipe.loader(workers=w2, prefetch=p2).iter(start_g=resume_at, stop_g=end) as second:
        rest = drain_ok(second)
    assert [b.global_step for b in head + rest] == list(range(end))
    for b, a in zip(head + rest, whole):
        assert_same(b, a, f"stopped after {k} batches and resumed: step {b.global_step}")


@settings(max_examples=examples(0.5))
@given(pipe=pipes(), w1=WORKERS, p1=PREFETCH, w2=WORKERS, p2=PREFETCH, data=st.data())
def test_resume_through_state_dict(pipe, w1, p1, w2, p2, data):
    """The whole resume state is what state_dict() returns (JSON-safe): a new loader of the same
    pipeline, with any worker count and prefetch, continues exactly where the saved stream was;
    a state saved by a pipeline with another seed is refused."""
    loader = pipe.loader(workers=w1, prefetch=p1)
    S = loader.steps_per_epoch
    end = data.draw(st.integers(1, 3 * S + 2), label="end")
    j = data.draw(st.integers(0, end), label="j")
    reference_run = [loader.batch_at(g) for g in range(end)]
    with loader.iter(0, end) as first:
        head = drain_ok(first, j)
        state = json.loads(json.dumps(first.state_dict()))
    with pipe.loader(workers=w2, prefetch=p2).iter(0, end) as second:
        second.load_state_dict(state)
        assert second.next_g == j
        rest = drain_ok(second)
    assert [b.global_step for b in head + rest] == list(range(end))
    for b, a in zip(head + rest, reference_run):
        assert_same(b, a, f"state_dict resume after {j}: step {b.global_step}")

    other = replace(pipe, seed=(pipe.seed + 1) & M64)
    with other.loader(workers=w2, prefetch=p2).iter() as foreign:
        with pytest.raises(ValueError):
            foreign.load_state_dict(state)


_RESUME_CHILD = textwrap.dedent("""
    import hashlib, json, sys
    import numpy as np
    import onemodel_cy as om

    def augment(image, rng):
        image *= np.float32(rng.next_single())

    class Flip:
        def __call__(self, sample, rng):
            image, target, label = sample
            return om.Sample(np.ascontiguousarray(image[:, :, ::-1]), target, label)

    loader = om.DataLoader(om.SyntheticLineImages(40, 3, 1, 12), om.ShuffledSampler(40, 4, 3),
                           om.ImageBatchCollator(augmentation=augment), seed=9, workers=2,
                           transform=Flip())
    with loader.iter() as stream:
        if sys.argv[1] == "save":
            for _ in range(3):
                next(stream)
            print(json.dumps(stream.state_dict()))
            with loader.batch_at(3) as expected:
                print(hashlib.sha256(expected.images.tobytes()).hexdigest())
        else:
            stream.load_state_dict(json.loads(sys.stdin.read()))
            batch = next(stream)
            print(batch.global_step, hashlib.sha256(batch.images.tobytes()).hexdigest())
""")


def test_state_dict_resumes_in_a_fresh_process():
    """Resume is for interrupted runs, which restart in a new process: a state saved by one
    process is accepted by a fresh process that builds the same pipeline (the same code, with a
    Python augmentation and a callable-object transform), and it continues at the saved step
    with the same bytes."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))

    def run(mode, stdin=None):
        return subprocess.run([sys.executable, "-c", _RESUME_CHILD, mode], input=stdin, capture_output=True,
                              text=True, timeout=60, env=env, cwd=ROOT)

    saved = run("save")
    assert saved.returncode == 0, saved.stderr
    state, expected_digest = saved.stdout.splitlines()
    resumed = run("load", state)
    assert resumed.returncode == 0, f"a fresh process refused the saved state:\n{resumed.stderr[-2500:]}"
    step, digest = resumed.stdout.split()
    assert step == "3"
    assert digest == expected_digest      # the very batch the first process would have built


# --------------------------------------------------------------------------- exceptions

class DatasetBroke(Exception):
    """The custom error a dataset raises in these tests."""


class FailingDataset(PyDataset):
    def __init__(self, inner, bad_index, delay=0.0):
        super().__init__(inner)
        self.bad_index = bad_index
        self.delay = delay

    def get_sample(self, index):
        if index == self.bad_index:
            time.sleep(self.delay)
            raise DatasetBroke(f"cannot read sample {index}")
        return self.inner.get_sample(index)


def _failing_case(kind, pipe, g, slot, delay, workers, prefetch):
    """(loader, expected exception type, check(error), failing step) for a failure at step g, slot."""
    base = pipe.base_dataset()
    sampler = pipe.om_sampler()
    ring = dict(workers=workers, prefetch=prefetch)
    if kind == "dataset":
        bad = int(sampler.indices(0, g)[slot])
        loader = pipe.loader(dataset=FailingDataset(base, bad, delay), **ring)

        def check(error):
            frames = traceback.extract_tb(error.__traceback__)
            assert any(f.name == "get_sample" and f.filename == __file__ for f in frames), (
                "the delivered traceback lost the dataset's frame:\n"
                + "".join(traceback.format_tb(error.__traceback__)))
            assert f"cannot read sample {bad}" in str(error)
        return loader, DatasetBroke, check, g

    if kind == "transform":
        target_state = om.derive(pipe.seed, 0, g, slot, 0)

        def garbage(sample, rng):
            if rng.state == target_state:
                time.sleep(delay)
                return "garbage"
            return sample

        loader = om.DataLoader(base, sampler, pipe.collator(), seed=pipe.seed, transform=garbage, **ring)

        def check(error):
            message = str(error)
            assert f"step {g}" in message and f"slot {slot}" in message, message
        return loader, TypeError, check, g

    # an index the dataset rejects: a sequential sampler walks past the end of a shorter dataset
    full = om.SequentialSampler(pipe.count, pipe.batch_size)
    short_length = full.steps_per_epoch * pipe.batch_size - 1 - slot
    short = om.SyntheticLineImages(short_length, pipe.height, pipe.min_width, pipe.max_width,
                                   pipe.channels, pipe.ds_seed)
    loader = om.DataLoader(PyDataset(short) if kind == "index_generic" else short, full, pipe.collator(),
                           seed=pipe.seed, **ring)
    return loader, IndexError, lambda error: None, short_length // pipe.batch_size


@settings(max_examples=examples(0.6), phases=NO_SHRINK)
@given(kind=st.sampled_from(["dataset", "transform", "index_fast", "index_generic"]),
       pipe=pipes(kinds=("sequential", "shuffled"), full_batches=True, transform=False),
       workers=WORKERS, prefetch=PREFETCH, delay=st.sampled_from([0.0, 0.0, 0.01]), data=st.data())
def test_an_error_is_delivered_at_its_step_then_the_stream_ends(kind, pipe, workers, prefetch, delay, data):
    """A failure while building step g (a dataset raising its own exception type, a transform
    returning something that is not a Sample, an index the dataset refuses) reaches the consumer
    when it reaches g, after every earlier step: the original exception (type, and for a
    dataset error the dataset's own frame in the traceback); then the stream is over and no
    worker thread is left."""
    S = pipe.om_sampler().steps_per_epoch
    g = data.draw(st.integers(0, S - 1), label="g")
    slot = data.draw(st.integers(0, pipe.batch_size - 1), label="slot")
    loader, expected, check, g = _failing_case(kind, pipe, g, slot, delay, workers, prefetch)
    stream = loader.iter()
    batches, error = drain(stream, count=g + 8)
    assert [b.global_step for b in batches] == list(range(g)), "the steps before the failing one must all arrive"
    for b in batches:
        assert_same(b, loader.batch_at(b.global_step), f"step {b.global_step} before the failure")
    assert isinstance(error, expected), f"expected {expected.__name__} at step {g}, received {error!r}"
    check(error)
    assert stream.next_g == g
    with pytest.raises(StopIteration):
        next(stream)
    assert stream.closed
    assert_no_workers("after the error")


@pytest.mark.parametrize("workers,prefetch", [(2, 1), (3, 2), (8, 4)])
def test_an_error_with_a_full_window_does_not_hang(workers, prefetch):
    """The failing step's worker must still hand its error over when every other slot of the
    window is taken and another worker is already waiting for the slot of the failing step:
    the consumer gets the error at g; the stream must not hang."""
    pipe = Pipe(sampler="sequential", batch_size=1, count=40)
    g = 13
    loader = pipe.loader(workers=workers, prefetch=prefetch,
                         dataset=FailingDataset(pipe.base_dataset(), g, delay=0.05))
    stream = loader.iter()
    batches, error = drain(stream, stall=3.0)
    assert [b.global_step for b in batches] == list(range(g))
    assert isinstance(error, DatasetBroke), f"expected DatasetBroke at step {g}, received {error!r}"
    assert_no_workers("after the error")


# --------------------------------------------------------------------------- ring discipline

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
        build = loader._build

        def probed(g, workspace):
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

        loader._build = probed

    def before(self, step):
        with self.lock:
            self.inside_next = True

    def after(self, batch):
        with self.lock:
            self.live.discard(batch.global_step)
            self.received = batch.global_step + 1
            self.inside_next = False
        time.sleep(0.004)   # a slow consumer: the workers fill the window


@pytest.mark.parametrize("workers", [0, 1, 2, 8])
@pytest.mark.parametrize("prefetch", [1, 2, 5])
def test_ring_window_and_slots(workers, prefetch):
    """Workers build at most prefetch steps ahead: step g is started only while
    g < next-to-take + prefetch, so two live steps never share the ring slot g mod prefetch;
    and they do use the window (a slow consumer finds it full)."""
    pipe = Pipe(sampler="shuffled", batch_size=3, count=45, augmentation="gain_offset")
    loader = pipe.loader(workers=workers, prefetch=prefetch)
    probe = RingProbe(loader, start=4, seed=workers * 10 + prefetch)
    with loader.iter(4, 34) as stream:
        batches = drain_ok(stream, before=probe.before, after=probe.after)
    assert not probe.violations, "\n".join(probe.violations[:10])
    assert [b.global_step for b in batches] == list(range(4, 34))
    if workers:
        assert probe.max_ahead >= prefetch - 1, (
            f"the workers never filled the window (at most {probe.max_ahead} steps ahead, prefetch {prefetch})")
    else:
        assert probe.max_ahead == 0, "with 0 workers nothing may be built ahead of the consumer"
    assert_stream_is_batch_at(batches, pipe.loader(), range(4, 34), "probed ring")


# --------------------------------------------------------------------------- shutdown

@settings(max_examples=examples(0.5))
@given(pipe=pipes(transform=False), prefetch=PREFETCH, data=st.data())
def test_close_mid_stream_ends_every_worker(pipe, prefetch, data):
    """close() at any point, with 8 workers busy filling the window, ends and joins every worker
    thread; the stream is then over, and closing again is harmless."""
    loader = pipe.loader(workers=8, prefetch=prefetch)
    start = data.draw(st.integers(0, 2 * loader.steps_per_epoch), label="start")
    taken = data.draw(st.integers(0, 20), label="taken")
    stream = loader.iter(start)
    batches = drain_ok(stream, taken)
    stream.close()
    assert_no_workers()
    assert stream.closed
    with pytest.raises(StopIteration):
        next(stream)
    stream.close()
    assert_stream_is_batch_at(batches, loader, range(start, start + taken), "before close")


def test_break_inside_with_ends_the_workers():
    """Leaving a `with loader.iter()` block by `break` closes the stream and its workers."""
    loader = Pipe().loader(workers=8, prefetch=4)
    with loader.iter() as stream:
        for batch in stream:
            if batch.global_step == 5:
                break
        assert live_workers(), "the stream should still be running inside the block"
    assert_no_workers("after leaving the with block")
    assert stream.closed


def test_dropped_stream_ends_its_workers():
    """A stream dropped without close() (and collected) takes its worker threads with it; so
    does leaving a bare `for` loop over loader.iter() or over the loader by `break`."""
    loader = Pipe().loader(workers=8, prefetch=3)
    stream = loader.iter(7)
    next(stream), next(stream)
    assert live_workers()
    del stream
    gc.collect()
    assert_no_workers("after dropping the stream")

    for batch in loader.iter(3):
        if batch.global_step == 6:
            break
    del batch
    gc.collect()
    assert_no_workers("after breaking out of a bare for loop")

    for batch in loader:
        if batch.step == 2:
            break
    del batch
    gc.collect()
    assert_no_workers("after breaking out of a for loop over the loader")


def test_stress_many_short_streams_closed_at_random_points():
    """Thousands of small steps with 8 workers, closed at random points, finish quickly, leave no
    thread behind and never mix up a batch."""
    rng = random.Random(20261130)
    pipe = Pipe(count=64, batch_size=2, sampler="shuffled")
    loader = pipe.loader(workers=8, prefetch=8)
    check = pipe.loader()
    t0 = time.monotonic()
    total = 0
    for round_ in range(30):
        loader.prefetch = rng.choice([1, 2, 3, 8])
        start = rng.randrange(0, 200)
        stream = loader.iter(start)
        batches = drain_ok(stream, rng.randrange(0, 300))
        stream.close()
        assert_no_workers(f"round {round_}")
        assert [b.global_step for b in batches] == list(range(start, start + len(batches)))
        for b in batches[::37]:
            assert_same(b, check.batch_at(b.global_step), f"round {round_}, step {b.global_step}")
        total += len(batches)
    elapsed = time.monotonic() - t0
    assert total > 2000
    assert elapsed < 60, f"{total} steps in 30 streams took {elapsed:.1f} s"


# --------------------------------------------------------------------------- ranks

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


@settings(max_examples=examples(0.5))
@given(pipe=pipes(full_batches=True), workers=WORKERS, prefetch=PREFETCH, data=st.data())
def test_ranks_side_by_side_are_the_global_batch(pipe, workers, prefetch, data):
    """Rank r of w loads slots [r*B/w, (r+1)*B/w) of the global batch, keyed by global slot
    numbers (D14): for w = 1, 2, 4 the ranks' batches put side by side are the global batch,
    and each equals the reference's rank share; a batch size w does not divide is refused."""
    whole_loader = pipe.loader()
    S = whole_loader.steps_per_epoch
    start = data.draw(st.integers(0, 2 * S), label="start")
    steps = range(start, start + data.draw(st.integers(1, 5), label="length"))
    wholes = [whole_loader.batch_at(g).as_dict() for g in steps]
    for w in (1, 2, 4):
        if pipe.batch_size % w:
            with pytest.raises(ValueError):
                pipe.loader(rank=0, world_size=w)
            continue
        per_rank = []
        for r in range(w):
            with pipe.loader(workers=workers, prefetch=prefetch, rank=r, world_size=w).iter(
                    steps.start, steps.stop) as stream:
                per_rank.append(drain_ok(stream))
        for k, g in enumerate(steps):
            parts = [per_rank[r][k] for r in range(w)]
            for part in parts:
                assert_meta(part, g, S)
            assert_ranks_compose([p.as_dict() for p in parts], wholes[k], pipe.width_multiple, pipe.pad_value,
                                 f"world size {w}, step {g}")
        g = data.draw(st.sampled_from(steps), label=f"g_ref_{w}")
        r = data.draw(st.integers(0, w - 1), label=f"rank_ref_{w}")
        assert_same(per_rank[r][g - steps.start], pipe.ref_batch(g, r, w), f"rank {r}/{w}, step {g} vs reference")


@pytest.mark.parametrize("rank,world_size", [(2, 2), (4, 4), (-1, 2), (5, 1)])
def test_rank_out_of_range_is_refused(rank, world_size):
    """A rank outside [0, world_size) is a ValueError naming the rank."""
    pipe = Pipe(batch_size=4)
    with pytest.raises(ValueError, match="rank"):
        pipe.loader(rank=rank, world_size=world_size)


@pytest.mark.parametrize("batch_size,world_size", [(6, 4), (3, 2), (5, 4)])
def test_batch_size_not_divisible_by_world_size_is_refused(batch_size, world_size):
    """Each rank loads B/w samples, so B not divisible by w is a ValueError naming both."""
    with pytest.raises(ValueError, match=str(world_size)):
        Pipe(batch_size=batch_size).loader(rank=0, world_size=world_size)


# --------------------------------------------------------------------------- bad input

class NoGetSample:
    def __len__(self):
        return 3


class NoLen:
    def get_sample(self, index):
        raise AssertionError("never called")


@pytest.mark.parametrize("change,error,word", [
    (dict(dataset=NoGetSample()), TypeError, "get_sample"),
    (dict(dataset=NoLen()), TypeError, "__len__"),
    (dict(dataset=object()), TypeError, "dataset"),
    (dict(prefetch=0), ValueError, "prefetch"),
    (dict(prefetch=-3), ValueError, "prefetch"),
    (dict(prefetch=2.0), TypeError, "prefetch"),
    (dict(workers=-1), ValueError, "workers"),
    (dict(workers=1.5), TypeError, "workers"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(seed="3"), TypeError, "seed"),
    (dict(seed=None), TypeError, "seed"),
    (dict(transform=42), TypeError, "transform"),
])
def test_bad_loader_arguments_are_refused(change, error, word):
    """A dataset without get_sample or __len__, a prefetch depth below 1, a negative worker count,
    a seed that is not an integer (or a non-callable transform) is refused with an error that
    names the argument."""
    pipe = Pipe()
    args = dict(dataset=pipe.dataset(), seed=pipe.seed, workers=0, prefetch=2, transform=None)
    args.update(change)
    dataset, seed = args.pop("dataset"), args.pop("seed")
    with pytest.raises(error, match=word):
        om.DataLoader(dataset, pipe.om_sampler(), pipe.collator(), seed=seed, **args)


@pytest.mark.parametrize("start,stop,error", [(-1, None, ValueError), (1.0, None, TypeError),
                                              ("0", None, TypeError), (5, 3, ValueError)])
def test_bad_stream_bounds_are_refused(start, stop, error):
    """Steps are non-negative integers and a stream cannot stop before it starts."""
    loader = Pipe().loader(workers=2)
    with pytest.raises(error):
        loader.iter(start, stop)
    if stop is None:
        with pytest.raises(error):
            loader.batch_at(start)


@pytest.mark.parametrize("how", ["patched_function", "emscripten", "wasi"])
def test_without_threads_the_loader_runs_as_zero_workers(how, monkeypatch):
    """Where threads cannot be started the loader silently runs as 0 workers, whatever workers
    says, and yields the same batches."""
    pipe = Pipe(transform="shift", augmentation="python", generic=True)
    loader = pipe.loader(workers=4, prefetch=3)
    expected = [loader.batch_at(g) for g in range(8, 20)]
    if how == "patched_function":
        monkeypatch.setattr(om_loader, "threads_available", lambda: False)
    else:
        monkeypatch.setattr(sys, "platform", how)
        assert om.threads_available() is False
    seen_threads = []
    with loader.iter(8, 20) as stream:
        batches = []
        for batch in stream:
            seen_threads.extend(t.name for t in live_workers())
            batches.append(batch)
    assert not seen_threads, f"threads started although the platform has none: {seen_threads}"
    assert len(batches) == len(expected)
    for b, e in zip(batches, expected):
        assert_same(b, e, f"step {b.global_step} without threads")


# --------------------------------------------------------------------------- iterating the loader

@pytest.mark.parametrize("workers", [0, 3])
def test_iterating_the_loader_gives_one_epoch_per_pass(workers):
    """`for batch in loader` runs one epoch (steps_per_epoch batches, epoch e covering global
    steps [e*S, (e+1)*S)); the next pass runs the next epoch; set_epoch chooses one."""
    pipe = Pipe(sampler="bucketed", batch_size=4, augmentation="gain_offset")
    loader = pipe.loader(workers=workers, prefetch=3)
    S = loader.steps_per_epoch
    assert len(loader) == S
    check = pipe.loader()
    for epoch in range(3):
        batches = list(loader)
        assert_stream_is_batch_at(batches, check, range(epoch * S, (epoch + 1) * S), f"pass {epoch}")
        assert {b.epoch for b in batches} == {epoch}
    loader.set_epoch(7)
    batches = list(loader)
    assert_stream_is_batch_at(batches, check, range(7 * S, 8 * S), "after set_epoch(7)")
    loader.close()      # the loader keeps a completed pass's workers until closed
    assert_no_workers()


# --------------------------------------------------------------------------- review findings

def _small_loader(**kw):
    ds = om.SyntheticLineImages(48, 3, 1, 9, seed=4)
    kw.setdefault("seed", 5)
    return om.DataLoader(ds, om.ShuffledSampler(48, 4, 2), om.ImageBatchCollator(augmentation=om.GainOffset()),
                         **kw)


def test_close_from_another_thread_ends_a_waiting_consumer():
    """§1 shutdown: a consumer blocked waiting for a batch while another thread closes the
    stream sees the stream end (StopIteration), not a spurious error, and no worker remains."""
    release = threading.Event()

    class Slow(PyDataset):
        def get_sample(self, index):
            release.wait(5)
            return self.inner.get_sample(index)

    ds = om.SyntheticLineImages(16, 3, 1, 9, seed=4)
    loader = om.DataLoader(Slow(ds), om.SequentialSampler(16, 4), om.ImageBatchCollator(), seed=1, workers=2)
    stream = loader.iter()
    outcome = []
    consumer = threading.Thread(target=lambda: outcome.append(next(stream, "ended")))
    consumer.start()
    time.sleep(0.2)
    closer = threading.Thread(target=stream.close)
    closer.start()
    release.set()
    consumer.join(10)
    closer.join(10)
    assert outcome == ["ended"] or isinstance(outcome[0], om.ImageBatch)
    assert not [t for t in threading.enumerate() if t.name.startswith("onemodel_cy-worker")]


def test_subclass_overriding_get_sample_is_called():
    """§1: the batch is built from what the dataset's get_sample returns; a subclass of the
    in-memory dataset that overrides it is honoured, not bypassed by the fast path."""
    base = om.SyntheticLineImages(8, 2, 3, 3, seed=1)

    class Zeroed(om.ArrayImageDataset):
        def get_sample(self, index):
            s = base.get_sample(index)
            return om.Sample(np.zeros_like(s.image), s.target, s.label)

    images = [base.get_sample(i).image for i in range(8)]
    ds = Zeroed(images, [base.get_sample(i).target for i in range(8)], [0] * 8)
    loader = om.DataLoader(ds, om.SequentialSampler(8, 4), om.ImageBatchCollator(), seed=0)
    with loader.batch_at(0) as b:
        assert not b.images.any()


def test_every_rank_refuses_a_short_last_batch_it_cannot_share():
    """Ranks: when the last batch is too short to give every rank a share, every rank
    refuses alike (so no rank starts while another cannot)."""
    sampler = om.SequentialSampler(37, 6, drop_last=False)     # last batch holds 1
    ds = om.SyntheticLineImages(37, 2, 1, 4, seed=1)
    for rank in (0, 1):
        with pytest.raises(ValueError, match="last batch"):
            om.DataLoader(ds, sampler, om.ImageBatchCollator(), seed=0, rank=rank, world_size=2)


def test_any_integer_seed_is_reduced_mod_2_64():
    """D3: the loader's seed, like every seed, is taken mod 2^64."""
    a = _small_loader(seed=-(2**64) + 5)
    b = _small_loader(seed=5)
    with a.batch_at(3) as x, b.batch_at(3) as y:
        assert np.array_equal(x.images, y.images)


@pytest.mark.parametrize("augmentation", [None, "python"])
def test_workers_can_all_be_inside_get_sample_at_once(augmentation):
    """The Python-stage baton only orders the workers' Python work; it never makes one
    worker wait for another's get_sample (a dataset blocked in I/O must not stall the
    rest). Here every get_sample of the first steps waits until both workers are inside
    get_sample together: that succeeds only if neither is held back."""
    meeting = threading.Barrier(2, timeout=20)
    lock = threading.Lock()
    calls = []

    class Rendezvous(PyDataset):
        def get_sample(self, index):
            with lock:
                calls.append(index)
                waits = len(calls) <= 4        # the first four calls meet in two pairs
            if waits:
                meeting.wait()
            return self.inner.get_sample(index)

    aug = (lambda image, rng: None) if augmentation else None
    ds = om.SyntheticLineImages(32, 4, 2, 6, seed=3)
    loader = om.DataLoader(Rendezvous(ds), om.SequentialSampler(32, 1), om.ImageBatchCollator(augmentation=aug),
                           seed=0, workers=2, prefetch=4)
    with loader.iter(0, 8) as stream:
        got = [b.indices.tolist() for b in stream]
    assert got == [[k] for k in range(8)]


@given(widths=st.lists(st.integers(1, 400), min_size=8, max_size=24), batch=st.integers(1, 4),
       workers=st.integers(0, 2), prefetch=st.integers(1, 3))
@settings(max_examples=examples(0.3), deadline=None)
def test_no_pool_miss_once_the_widest_batch_was_seen(widths, batch, workers, prefetch):
    """§5 steady state when batch widths vary (hence batch sizes and pool size classes):
    after the first epoch, which holds the batch padded to the widest image, the pool
    never misses again, at any worker count or prefetch depth."""
    widths = widths[:len(widths) // batch * batch]      # every epoch holds every image
    images = [np.full((1, 3, w), w, np.float32) for w in widths]
    ds = om.ArrayImageDataset(images, [[1, 2]] * len(widths), [0] * len(widths))
    loader = om.DataLoader(ds, om.ShuffledSampler(len(widths), batch, seed=1), om.ImageBatchCollator(),
                           seed=0, workers=workers, prefetch=prefetch)
    pool = loader.collator.pool
    epoch = loader.steps_per_epoch
    with loader.iter(0, 3 * epoch) as stream:
        for _ in range(epoch):
            next(stream).close()
        misses = pool.stats()["misses"]
        for b in stream:
            b.close()
    assert pool.stats()["misses"] == misses


@pytest.mark.parametrize("workers", [0, 2])
def test_steady_state_allocates_little_on_the_consumer(workers):
    """§5 at the loader: after warm-up, taking the next batch allocates far less than a
    batch on the consuming thread (counted per thread), and the pool never misses."""
    from onemodel_cy.testing import _alloccount
    _alloccount.install()
    ds = om.SyntheticLineImages(64, 32, 200, 256, seed=4)      # a batch of 16 is ~512 KiB
    loader = om.DataLoader(ds, om.ShuffledSampler(64, 16, 2), om.ImageBatchCollator(4, augmentation=om.GainOffset()),
                           seed=5, workers=workers, prefetch=3)
    pool = loader.collator.pool
    with loader.iter(0, 200) as stream:
        for _ in range(60):
            next(stream).close()
        misses = pool.stats()["misses"]
        before, _ = _alloccount.thread_allocated()
        for batch in stream:
            batch.close()
        after, _ = _alloccount.thread_allocated()
    per_batch = (after - before) / 140
    assert per_batch < 2048, per_batch
    assert pool.stats()["misses"] == misses


# --------------------------------------------------------------------------- epochs: a persistent engine

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


class RecordingBuilds:
    """Wraps ``loader._build``: records every step started and every step built; the build
    of step ``fail_at`` raises DatasetBroke."""

    def __init__(self, loader, fail_at=None):
        self.started = []
        self.built = []
        self.lock = threading.Lock()
        build = loader._build

        def recording(g, workspace):
            with self.lock:
                self.started.append(g)
            if g == fail_at:
                raise DatasetBroke(f"cannot build step {g}")
            batch = build(g, workspace)
            with self.lock:
                self.built.append(g)
            return batch

        loader._build = recording

    def wait_for(self, steps, seconds=5.0, attempted=False):
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            with self.lock:
                if set(steps) <= set(self.started if attempted else self.built):
                    return True
            time.sleep(0.002)
        return False


@pytest.mark.parametrize("workers,prefetch", [(1, 1), (2, 3), (4, 8)])
def test_epoch_passes_keep_their_workers_and_equal_batch_at(workers, prefetch):
    """§1 with persistent workers: `for batch in loader` pass after pass yields epoch e's steps
    [e*S, (e+1)*S) with the bytes of batch_at, while the same worker threads serve every pass
    (no thread is started across epoch boundaries); loader.close() ends them."""
    pipe = Pipe(sampler="shuffled", batch_size=3, count=30, augmentation="gain_offset")
    loader = pipe.loader(workers=workers, prefetch=prefetch)
    check = pipe.loader()
    S = loader.steps_per_epoch
    idents = None
    threads_before = None
    for epoch in range(4):
        batches = list(loader)
        assert_stream_is_batch_at(batches, check, range(epoch * S, (epoch + 1) * S), f"pass {epoch}")
        if idents is None:
            idents, threads_before = wait_for_workers(workers), len(threading.enumerate())
        assert _worker_idents() == idents, f"pass {epoch} ran on new worker threads"
        assert len(threading.enumerate()) == threads_before
    loader.close()
    assert_no_workers("after loader.close()")
    batches = list(loader)          # a closed loader still works: new threads
    assert_stream_is_batch_at(batches, check, range(4 * S, 5 * S), "pass after close")
    with loader:
        pass
    assert_no_workers("after leaving `with loader:`")


def test_the_next_epoch_is_prefetched_across_the_boundary():
    """§1 prefetch at an epoch boundary: once a pass ends, its workers go on building the next
    epoch's first prefetch steps, and the next pass takes those very batches (every step is
    built once in all, none discarded and rebuilt); the ring never drains at the boundary."""
    pipe = Pipe(sampler="shuffled", batch_size=2, count=24)
    loader = pipe.loader(workers=2, prefetch=4)
    check = pipe.loader()
    S = loader.steps_per_epoch
    builds = RecordingBuilds(loader)
    for epoch in range(3):
        batches = list(loader)
        assert_stream_is_batch_at(batches, check, range(epoch * S, (epoch + 1) * S), f"pass {epoch}")
        nxt = (epoch + 1) * S
        assert builds.wait_for(range(nxt, nxt + 4)), (
            f"after pass {epoch} the workers did not prefetch steps {nxt}..{nxt + 3}: built {builds.built}")
    with builds.lock:
        built = list(builds.built)
    assert sorted(built) == sorted(set(built)), f"steps built twice (prefetched batches were discarded): {built}"
    assert set(built) == set(range(3 * S + 4))
    loader.close()


def test_set_epoch_elsewhere_resets_the_engine_on_the_same_threads():
    """§1: a pass that does not start where the kept workers stand (set_epoch to another epoch,
    or a stream from iter() elsewhere) discards what they prefetched and starts at its own
    step, with the same threads, and yields exactly batch_at's bytes."""
    pipe = Pipe(sampler="bucketed", batch_size=3, count=36, augmentation="python")
    loader = pipe.loader(workers=2, prefetch=5)
    check = pipe.loader()
    S = loader.steps_per_epoch
    list(loader)
    idents = wait_for_workers(2)
    for epoch in (6, 2, 3):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert_stream_is_batch_at(batches, check, range(epoch * S, (epoch + 1) * S), f"set_epoch({epoch})")
        assert _worker_idents() == idents, "a reset started new threads"
    # a stream from iter() takes the kept workers too (its steps are built on those threads);
    # when it closes they end (iter()'s contract)
    builders = set()
    build = loader._build

    def recording(g, workspace):
        builders.add(threading.get_ident())
        return build(g, workspace)

    loader._build = recording
    with loader.iter(S + 1, S + 4) as stream:
        batches = drain_ok(stream, 3)
    assert builders and builders <= idents, "the iter() stream did not run on the kept workers"
    assert_stream_is_batch_at(batches, check, range(S + 1, S + 4), "iter() on the kept workers")
    assert_no_workers("after the iter() stream that took the kept workers closed")


def test_an_error_prefetched_past_the_epoch_end_surfaces_only_at_its_step():
    """§1 errors with persistent workers: a build that fails in the region prefetched beyond a
    pass's last step does not reach that pass; the pass that does reach the step receives the
    error there (after every earlier step), then its workers end; a pass elsewhere never sees it."""
    pipe = Pipe(sampler="shuffled", batch_size=2, count=24)
    S = pipe.om_sampler().steps_per_epoch
    bad_step = S + 1                                   # epoch 1, step 1
    loader = pipe.loader(workers=2, prefetch=4)
    check = pipe.loader()
    builds = RecordingBuilds(loader, fail_at=bad_step)
    batches = list(loader)                              # epoch 0: clean
    assert_stream_is_batch_at(batches, check, range(S), "epoch 0")
    assert builds.wait_for([bad_step], attempted=True), "the workers never built ahead into epoch 1"
    loader.set_epoch(3)                                 # elsewhere: the pending error is dropped
    assert_stream_is_batch_at(list(loader), check, range(3 * S, 4 * S), "epoch 3")
    loader.set_epoch(1)
    seen = []
    with pytest.raises(DatasetBroke):
        for batch in loader:
            seen.append(batch)
    assert [b.global_step for b in seen] == [S]
    assert loader.epoch == 1, "an epoch cut short by an error must not count as done"
    assert_no_workers("after the error")


def test_an_error_left_prefetched_is_delivered_by_the_adopting_pass():
    """§1: the error of a step the kept workers built ahead (here the next epoch's first step)
    is delivered by the next pass at that step, not earlier and not lost."""
    pipe = Pipe(sampler="shuffled", batch_size=2, count=24)
    S = pipe.om_sampler().steps_per_epoch
    loader = pipe.loader(workers=2, prefetch=3)
    builds = RecordingBuilds(loader, fail_at=S)
    list(loader)
    assert builds.wait_for([S], attempted=True), "the workers never built ahead into epoch 1"
    iterator = iter(loader)
    with pytest.raises(DatasetBroke, match=f"step {S}"):
        next(iterator)
    assert builds.started.count(S) == 1, "the error was not the one built ahead"
    assert_no_workers("after the error")


def test_two_streams_alive_at_once_each_get_their_own_workers():
    """§1: two passes over one loader (and an iter() stream) open at the same time, consumed
    interleaved, each yield their own steps with batch_at's bytes; afterwards the loader keeps
    one set of workers at most, and close() ends it."""
    pipe = Pipe(sampler="shuffled", batch_size=2, count=20)
    loader = pipe.loader(workers=2, prefetch=3)
    check = pipe.loader()
    S = loader.steps_per_epoch
    list(loader)                                        # workers kept, standing at step S
    first, second = iter(loader), iter(loader)
    third = loader.iter(4 * S)          # endless: its workers live until it is closed
    got = {0: [], 1: [], 2: []}
    for _ in range(S):
        for k, it in enumerate((first, second, third)):
            got[k].append(next(it))
    wait_for_workers(6)
    for k in range(3):
        start = 4 * S if k == 2 else S
        assert_stream_is_batch_at(got[k], check, range(start, start + S), f"stream {k}")
    for it in (first, second):
        assert next(it, None) is None
    third.close()
    assert len(live_workers()) == 2, "one set of workers is kept, the others end"
    loader.close()
    assert_no_workers()


def test_a_dropped_loader_takes_its_kept_workers_with_it():
    """No leak: a loader whose passes kept their workers ends them when it is dropped and
    collected (the threads hold it only weakly), by reference counting or by the cycle
    collector."""
    for cyclic in (False, True):
        loader = Pipe().loader(workers=3, prefetch=4)
        list(loader)
        wait_for_workers(3)
        if cyclic:
            loader.myself = loader
        del loader
        deadline = time.monotonic() + 2
        while live_workers() and time.monotonic() < deadline:
            if cyclic:      # a worker may hold the loader during a build: collect again after
                gc.collect()
            time.sleep(0.01)
        assert_no_workers(f"after dropping the loader ({'cycle' if cyclic else 'refcount'})")


def test_close_wakes_idle_workers_at_once():
    """§1 shutdown without polling: closing a stream whose workers wait for room in a full
    window (or the loader's kept workers) returns in a few milliseconds; a waiting worker is
    woken, it does not notice the close only at its next poll."""
    loader = Pipe(count=48, batch_size=2).loader(workers=4, prefetch=2)
    durations = []
    for _ in range(5):
        stream = loader.iter(0)
        next(stream)
        time.sleep(0.05)                  # the window fills; every worker waits
        t = time.perf_counter()
        stream.close()
        durations.append(time.perf_counter() - t)
        assert_no_workers()
    assert sorted(durations)[2] < 0.01, f"close() took {durations} s"
    for _ in range(5):
        list(loader)
        time.sleep(0.05)
        t = time.perf_counter()
        loader.close()
        durations.append(time.perf_counter() - t)
        assert_no_workers()
    assert sorted(durations[5:])[2] < 0.01, f"loader.close() took {durations[5:]} s"


def test_timeout_bounds_the_wait_for_a_batch():
    """§1 timeout (as PyTorch's DataLoader): with workers, a batch that does not arrive within
    `timeout` seconds raises TimeoutError naming the step; the stream then ends its workers."""
    release = threading.Event()

    class Stuck(PyDataset):
        def get_sample(self, index):
            if index == 5:
                release.wait(10)
            return self.inner.get_sample(index)

    ds = om.SyntheticLineImages(16, 3, 1, 9, seed=4)
    loader = om.DataLoader(Stuck(ds), om.SequentialSampler(16, 1), om.ImageBatchCollator(), seed=1,
                           workers=2, prefetch=2, timeout=0.2)
    stream = loader.iter()
    steps = [next(stream).global_step for _ in range(5)]
    # Step 5 arrives after 0.6 s: without the timeout, next() would simply return it. (The
    # stream's close after the TimeoutError joins the worker, hence waits for that build.)
    threading.Timer(0.6, release.set).start()
    t = time.monotonic()
    with pytest.raises(TimeoutError, match="step 5"):
        next(stream)
    waited = time.monotonic() - t
    assert steps == [0, 1, 2, 3, 4] and waited < 5, waited
    assert stream.closed
    assert_no_workers("after the timeout")


def test_workers_that_cannot_start_are_reported_not_waited_for(monkeypatch):
    """§1 no hang: when the platform refuses to start the worker threads ("can't start new
    thread"), the consumer still receives the stream's first step (it builds that one itself
    while workers start), then a RuntimeError instead of waiting forever; nothing is left."""
    start = threading.Thread.start

    def refuse(self):
        if self.name.startswith(WORKER_PREFIX):
            raise RuntimeError("can't start new thread")
        return start(self)

    monkeypatch.setattr(threading.Thread, "start", refuse)
    loader = Pipe().loader(workers=2, prefetch=2)
    stream = loader.iter(3, 9)
    batches, error = drain(stream, stall=3.0)
    assert [b.global_step for b in batches] == [3]
    assert isinstance(error, RuntimeError) and "worker" in str(error), error
    assert_no_workers()


def test_loader_close_during_a_pass_ends_it_without_counting_the_epoch():
    """§1 shutdown: loader.close() from another thread while a pass runs ends that pass (its
    loop simply stops, as a stream closed from elsewhere does), ends every worker, and the
    epoch cut short is not counted as done."""
    pipe = Pipe(sampler="shuffled", batch_size=2, count=40)
    loader = pipe.loader(workers=2, prefetch=2)
    S = loader.steps_per_epoch
    seen = []
    for batch in loader:
        seen.append(batch.global_step)
        if len(seen) == 3:
            closer = threading.Thread(target=loader.close)
            closer.start()
            closer.join(10)
    assert seen[:3] == [0, 1, 2] and len(seen) < S, seen
    assert loader.epoch == 0
    assert_no_workers("after loader.close() during a pass")


def test_the_old_global_step_names_still_work_and_warn():
    """§1 resume, naming: the global step is ``g`` in the API (``iter(start_g, stop_g)``,
    ``stream.next_g``, ``state_dict()["next_g"]``). The names used before (``start_step``,
    ``stop_step``, ``next_step``) still work with a DeprecationWarning, and a state saved
    with ``"next_step"`` resumes at the same global step."""
    ds = om.SyntheticLineImages(16, height=2, min_width=2, max_width=5, seed=1)
    loader = om.DataLoader(ds, om.ShuffledSampler(16, 4, seed=2), om.ImageBatchCollator(), seed=0)
    with pytest.warns(DeprecationWarning, match="start_g"):
        stream = loader.iter(start_step=5, stop_step=7)
    with stream:
        assert next(stream).global_step == 5
        with pytest.warns(DeprecationWarning, match="next_g"):
            assert stream.next_step == 6
        state = stream.state_dict()
    assert state["next_g"] == 6
    with loader.iter(0) as resumed:
        resumed.load_state_dict({"next_step": 6, "fingerprint": state["fingerprint"]})
        assert next(resumed).global_step == 6
    with pytest.raises(TypeError, match="unexpected"):
        loader.iter(start=3)
