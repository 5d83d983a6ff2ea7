"""§1 with the packed lane: worker threads that never take the GIL give the 0-worker stream.

A loader in thread mode whose dataset has a packed view, with no transform and no Python
augmentation, runs its workers in the packed lane (``workers/lane.pyx``): the consumer prepares
each step (indices, slot table, layout, block) and the workers fill the block. The
stream must stay the 0-worker stream byte for byte, at every position and after every
reposition, with the ring's window (§1) and the pool's promise (§5) kept; errors arrive
at their step as on the other routes. The contract suite (``test_s1_loader.py``)
runs through the lane too, since its pipelines read ``SyntheticLineImages``.
"""
from __future__ import annotations

import os
import tempfile
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import onemodel_cy as om
from onemodel_cy.workers.lane import LaneEngine
from onemodel_cy.workers.threads import ThreadEngine
from harness import assert_no_workers, batch_bits, wrap_build
from pipeline_parts import PyDataset


pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py


def stream_bits(batch):
    """A batch's raw bits and the step it says it is."""
    return batch_bits(batch) + (batch.epoch, batch.step, batch.global_step)


def write_pack(folder, kind, n, seed):
    rng = np.random.default_rng(seed)
    items = []
    for i in range(n):
        width = int(rng.integers(1, 70))
        shape = (5, width) if kind == "gray8" else (5, width, 3)
        items.append((rng.integers(0, 256, shape, dtype=np.uint8), rng.integers(0, 9, int(rng.integers(0, 5))),
                      i % 7))
    path = os.path.join(folder, f"{kind}-{n}-{seed}")
    om.pack(items, path, progress=False)
    return om.PackedImageDataset(path, 0.5, 0.25)


class EveryOtherSampler(om.Sampler):
    """A Python sampler (the lane asks it for indices like any other)."""
    batch_size = 6
    steps_per_epoch = 5

    def __init__(self, n):
        self.n = n

    def indices(self, epoch, step):
        return np.array([(epoch * 7 + step * 6 + 2 * i) % self.n for i in range(6)], dtype=np.int64)


def sampler_of(name, n, batch, world_size=1):
    if name == "shuffled":
        # A short last batch is shared by slot range: with two ranks it may hold too few
        # samples for the second (the loader refuses that), so ranks take drop_last.
        return om.ShuffledSampler(n, batch, 3, drop_last=world_size > 1)
    if name == "sequential":
        return om.SequentialSampler(n, batch)
    if name == "mixing":
        return om.MixingSampler([(0, n // 2, 1.0), (n // 2, n - n // 2, 2.0)], batch, 4, 9)
    return EveryOtherSampler(n)


AUGMENTATIONS = {"none": None, "gain_offset": om.GainOffset(0.3, 0.2), "noise": om.GaussianNoise(0.1)}


def loader_of(dataset, sampler_name, batch, workers, prefetch, aug, multiple, **kw):
    return om.DataLoader(dataset, sampler_of(sampler_name, len(dataset), batch, kw.get("world_size", 1)),
                         om.ImageBatchCollator(multiple, -1.0, AUGMENTATIONS[aug]), seed=12,
                         workers=workers, prefetch=prefetch, **{"worker_mode": "thread", **kw})


class OwnGetSample(om.PackedImageDataset):
    """Its get_sample is what the loader must call: the packed view refuses to serve."""

    def get_sample(self, i):
        sample = super().get_sample(i)
        return om.Sample(sample.image * np.float32(2.0), sample.target, sample.label)


def test_the_lane_serves_only_loaders_whose_every_build_can_take_it(tmp_path):
    """§1 (engines): packed view, thread mode, no transform, no Python augmentation (the
    pipeline ``splits()``): the lane; otherwise the thread engine, with the same stream."""
    ds = write_pack(str(tmp_path), "gray8", 30, 1)
    cases = {
        "lane": (loader_of(ds, "shuffled", 4, 2, 3, "gain_offset", 1), LaneEngine),
        "transform": (loader_of(ds, "shuffled", 4, 2, 3, "none", 1, transform=lambda s, rng: s), ThreadEngine),
        "python augmentation": (om.DataLoader(ds, om.ShuffledSampler(30, 4, 3),
                                              om.ImageBatchCollator(augmentation=lambda image, rng: None),
                                              seed=12, workers=2, worker_mode="thread"), ThreadEngine),
        "no packed view": (loader_of(PyDataset(ds), "shuffled", 4, 2, 3, "none", 1), ThreadEngine),
    }
    cases["a subclass with its own get_sample"] = (loader_of(OwnGetSample(ds.path, 0.5, 0.25), "shuffled", 4, 2, 3,
                                                             "none", 1), ThreadEngine)
    replaced = loader_of(ds, "shuffled", 4, 2, 3, "none", 1)
    wrap_build(replaced, lambda g, workspace, build: build(g, workspace))
    cases["a pipeline that does not split"] = (replaced, ThreadEngine)
    for name, (loader, engine_type) in cases.items():
        reference = om.DataLoader(loader.dataset, loader.sampler, loader.collator, seed=12, workers=0,
                                  transform=loader.transform)
        with loader.iter(0, 12) as stream:
            got = [stream_bits(b) for b in stream]
            assert type(stream._engine if stream._engine is not None else loader._idle_engine) is engine_type \
                or type(loader._idle_engine) is engine_type, name
        assert got == [stream_bits(reference.batch_at(g)) for g in range(12)], name
        loader.close()
    assert_no_workers()


@settings(max_examples=25, deadline=None)
@given(kind=st.sampled_from(["gray8", "rgb8", "synthetic", "array"]),
       sampler=st.sampled_from(["shuffled", "sequential", "mixing", "python"]),
       batch=st.integers(1, 9), workers=st.integers(1, 3), prefetch=st.integers(1, 5),
       aug=st.sampled_from(sorted(AUGMENTATIONS)), multiple=st.sampled_from([1, 4, 8]),
       world=st.sampled_from([(0, 1), (1, 2)]), seed=st.integers(0, 2**31), data=st.data())
def test_lane_streams_equal_the_zero_worker_stream(kind, sampler, batch, workers, prefetch, aug, multiple,
                                                   world, seed, data):
    """§1: the stream is a function of g alone, whatever the workers, the prefetch depth or
    where each stream starts and stops: streams of a lane at random positions (adopted,
    repositioned, resumed mid-stream) give ``batch_at`` of a 0-worker loader."""
    rank, world_size = world
    if sampler == "python":
        batch = 6
    if batch % world_size:
        batch *= world_size
    with tempfile.TemporaryDirectory() as folder:
        if kind in ("gray8", "rgb8"):
            ds = write_pack(folder, kind, 40, seed)
        elif kind == "synthetic":
            ds = om.SyntheticLineImages(40, 4, 1, 30, 1, seed)
        else:
            rng = np.random.default_rng(seed)
            images = [rng.standard_normal((2, 3, int(rng.integers(1, 20)))).astype(np.float32) for _ in range(40)]
            ds = om.ArrayImageDataset(images, [[i % 5] for i in range(40)], list(range(40)))
        loader = loader_of(ds, sampler, batch, workers, prefetch, aug, multiple, rank=rank, world_size=world_size)
        reference = loader_of(ds, sampler, batch, 0, prefetch, aug, multiple, rank=rank, world_size=world_size)
        for _ in range(data.draw(st.integers(1, 4), "streams")):
            start = data.draw(st.integers(0, 25), "start")
            stop = start + data.draw(st.integers(1, 12), "length")
            with loader.iter(start, stop) as stream:
                assert type(stream._engine) is LaneEngine
                taken = data.draw(st.integers(0, stop - start), "taken before a resume")
                got = [stream_bits(next(stream)) for _ in range(taken)]
                resume = data.draw(st.integers(start, stop), "resume at")
                stream.load_state_dict(loader._state(resume))
                got += [stream_bits(b) for b in stream]
            expected = [stream_bits(reference.batch_at(g)) for g in range(start, start + taken)]
            expected += [stream_bits(reference.batch_at(g)) for g in range(resume, stop)]
            assert got == expected
        loader.close()
    assert_no_workers()


@pytest.mark.parametrize("workers", [1, 2, 4])
@pytest.mark.parametrize("prefetch", [1, 2, 5])
def test_lane_keeps_the_window_and_fills_it(workers, prefetch):
    """§1 (the ring): the lane posts step g only while g is below the next step to take
    plus prefetch (one step per slot g mod prefetch), and its workers fill the window
    while the consumer is busy."""
    ds = om.SyntheticLineImages(60, 4, 1, 30, 1, 3)
    loader = loader_of(ds, "shuffled", 3, workers, prefetch, "gain_offset", 1)
    reference = loader_of(ds, "shuffled", 3, 0, prefetch, "gain_offset", 1)
    filled = 0
    with loader.iter(0, 30) as stream:
        for g in range(30):
            batch = next(stream)
            assert stream_bits(batch) == stream_bits(reference.batch_at(g))
            time.sleep(0.003)       # a slow consumer
            slots, next_take = stream._engine.ring()
            assert next_take == g + 1
            live = [(step, state) for step, state in slots if state != "empty"]
            for step, state in live:
                assert next_take <= step < next_take + prefetch, f"step {step} posted at {next_take}"
            if len(live) == min(prefetch, 30 - next_take) and all(state == "done" for _, state in live):
                filled += 1
    assert filled >= 20, f"the workers filled the window after only {filled} of 30 batches"
    loader.close()
    assert_no_workers()


class Boom(BaseException):
    """Not an Exception: the thread engine delivers it at its step all the same."""


class FailsAt(om.Sampler):
    """A Python sampler whose step ``bad`` fails in the way ``how`` names."""
    batch_size = 4
    steps_per_epoch = 10

    def __init__(self, n, bad, how):
        self.n, self.bad, self.how = n, bad, how

    def indices(self, epoch, step):
        if step == self.bad and self.how == "raises":
            raise Boom(f"step {step}")
        return np.array([self.n + 5 if step == self.bad and self.how == "index" and i == 2
                         else (step * 4 + i) % self.n for i in range(4)], dtype=np.int64)

    def indices_into(self, epoch, step, out):
        count = super().indices_into(epoch, step, out)
        return True if step == self.bad and self.how == "bool count" else count


def first_error(stream):
    """The steps a stream gives before its error, and the error."""
    steps = []
    try:
        for batch in stream:
            steps.append(batch.global_step)
    except BaseException as error:
        return steps, error
    return steps, None


@pytest.mark.parametrize("how", ["index", "raises", "bool count"])
@pytest.mark.parametrize("prefetch", [1, 3, 6])
def test_lane_error_arrives_at_its_step(how, prefetch):
    """§1 (errors): a step whose build fails is delivered, as the exception the 0-worker
    route raises (type, message, notes), after every step before it; then the stream is
    over and no worker is left."""
    ds = om.SyntheticLineImages(20, 4, 1, 30, 1, 3)
    loader = om.DataLoader(ds, FailsAt(20, 5, how), om.ImageBatchCollator(), seed=1, workers=2, prefetch=prefetch,
                           persistent_workers=False)
    reference = om.DataLoader(ds, FailsAt(20, 5, how), om.ImageBatchCollator(), seed=1)
    expected_steps, expected = first_error(reference.iter(0, 10))
    stream = loader.iter(0, 10)
    steps, error = first_error(stream)
    assert expected_steps == steps == [0, 1, 2, 3, 4]
    assert type(error) is type(expected) and str(error) == str(expected)
    assert getattr(error, "__notes__", None) == getattr(expected, "__notes__", None)
    with pytest.raises(StopIteration):
        next(stream)
    assert_no_workers("after the error")


def test_a_pending_error_waits_for_its_step_across_streams():
    """§1 (errors, resume): a step that failed while prefetched is raised when a later
    stream reaches it, and a stream elsewhere does not see it."""
    ds = om.SyntheticLineImages(20, 4, 1, 30, 1, 3)
    loader = om.DataLoader(ds, FailsAt(20, 5, "index"), om.ImageBatchCollator(), seed=1, workers=2, prefetch=4)
    with loader.iter(0, 5) as stream:
        assert [b.global_step for b in stream] == [0, 1, 2, 3, 4]
    with pytest.raises(IndexError):
        next(loader.iter(5, 10))
    with loader.iter(0, 3) as stream:
        assert [b.global_step for b in stream] == [0, 1, 2]
    loader.close()
    assert_no_workers()


def wait_for_state(stream, g, state, seconds=10.0):
    """Wait until the lane's slot of step g is in ``state`` (a fill of milliseconds is seen)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if (g, state) in stream._engine.ring()[0]:
            return
    raise AssertionError(f"step {g} never was {state!r}: {stream._engine.ring()}")


class NarrowFirst(om.Sampler):
    """Step 0 takes the 8 narrowest images, every other step the 8 widest."""
    batch_size = 8
    steps_per_epoch = 4

    def __init__(self, dataset):
        widths = [dataset.get_sample(i).image.shape[2] for i in range(len(dataset))]
        self.order = np.argsort(widths, kind="stable")

    def indices(self, epoch, step):
        return np.array(self.order[:8] if step == 0 else self.order[-8:], dtype=np.int64)


@pytest.mark.parametrize("prefetch", [1, 3])
def test_lane_timeout(prefetch):
    """§1 (DataLoader timeout): a step a worker is filling, not done within ``timeout``
    seconds, raises TimeoutError naming the step; a consumer with a timeout does not fill
    the later steps posted meanwhile (that would wait past it)."""
    ds = om.SyntheticLineImages(64, 64, 1, 6000, 3, 2)
    # Step 0 is built at once by the consumer; step 1 takes a worker milliseconds.
    loader = om.DataLoader(ds, NarrowFirst(ds), om.ImageBatchCollator(8, -1.0, om.GaussianNoise(0.1)), seed=12,
                           workers=1, prefetch=prefetch, timeout=1e-5, persistent_workers=False)
    with loader.iter(0, 4) as stream:
        next(stream)                # built by the consumer while the worker starts
        wait_for_state(stream, 1, "building")
        with pytest.raises(TimeoutError, match="no batch for step 1 after 1e-05 s"):
            next(stream)
    assert_no_workers()


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="needs sched_setaffinity (Linux)")
@pytest.mark.parametrize("workers", [1, 2])
def test_on_one_core_the_consumer_fills_the_steps_no_worker_took(workers):
    """§1 (the bytes do not depend on who builds a step): with every thread on one core,
    a worker rarely runs before the consumer comes for a posted step, and the consumer
    fills such a step itself instead of waiting for a worker to get the core. The stream
    is still the 0-worker stream, step for step."""
    ds = om.SyntheticLineImages(100, 8, 20, 120, 1, 5)
    reference = loader_of(ds, "shuffled", 6, 0, 3, "gain_offset", 8)
    cores = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(cores)})       # this thread, and the workers it starts
    try:
        loader = loader_of(ds, "shuffled", 6, workers, 3, "gain_offset", 8)
        with loader.iter(0, 80) as stream:
            engine = stream._engine
            assert isinstance(engine, LaneEngine)
            for g, batch in enumerate(stream):
                assert stream_bits(batch) == stream_bits(reference.batch_at(g)), f"step {g}"
        loader.close()
    finally:
        os.sched_setaffinity(0, cores)
    assert engine.consumer_fills > 0, "the consumer waited for every step on one core"
    assert_no_workers()


def test_lane_repositions_while_filling_without_handing_out_a_reused_block():
    """§5: streams cut short at random while the workers fill wide batches never hand
    out a block a held batch still uses, and every block comes back to the pool."""
    ds = om.SyntheticLineImages(200, 16, 200, 400, 1, 5)
    loader = loader_of(ds, "shuffled", 32, 2, 4, "noise", 8)
    reference = loader_of(ds, "shuffled", 32, 0, 4, "noise", 8)
    rng = np.random.default_rng(0)
    held = []
    for _ in range(40):
        start = int(rng.integers(0, 50))
        with loader.iter(start) as stream:
            for g in range(start, start + int(rng.integers(1, 4))):
                batch = next(stream)
                held.append((g, batch))
        held = held[-6:]
        addresses = [b.images.__array_interface__["data"][0] for _, b in held]
        assert len(set(addresses)) == len(addresses), "two held batches share a block"
        for g, batch in held:
            assert stream_bits(batch) == stream_bits(reference.batch_at(g)), f"held batch of step {g} changed"
    del held, batch
    loader.close()
    assert loader.collator.pool.stats()["blocks_in_use"] == 0
    assert_no_workers()


def test_close_from_another_thread_wakes_a_consumer_waiting_on_the_lane():
    """§1 (lifetimes): ``loader.close()`` from another thread, while the consumer waits
    for a step being filled, ends the stream (a batch already built, or StopIteration)
    and every worker, without a hang."""
    ds = om.SyntheticLineImages(64, 32, 1500, 2000, 3, 2)      # fills of milliseconds
    loader = loader_of(ds, "shuffled", 64, 1, 2, "noise", 8)
    stream = loader.iter()
    next(stream)
    closer = threading.Timer(0.001, loader.close)
    closer.start()
    start = time.monotonic()
    with pytest.raises(StopIteration):
        for _ in range(1000):
            next(stream)
    assert time.monotonic() - start < 10
    closer.join()
    assert_no_workers()


def test_a_block_being_filled_is_never_rented_again():
    """§5 (memory safety): a stream that stops while the workers are filling its next
    batches gives those blocks back to the pool only once the fills are done: the next
    stream, which rents them at once for its own steps, gets exactly its own bytes."""
    ds = om.SyntheticLineImages(64, 16, 900, 1000, 1, 8)        # batches of 4 MiB: fills of milliseconds
    loader = loader_of(ds, "shuffled", 64, 2, 3, "none", 8)
    reference = loader_of(ds, "shuffled", 64, 0, 3, "none", 8)
    expected = {g: stream_bits(reference.batch_at(g)) for g in range(0, 60, 3)}
    for start in range(0, 60, 3):
        with loader.iter(start) as stream:      # the next iter() repositions: the ring is emptied at once
            batch = next(stream)
        assert stream_bits(batch) == expected[start], f"step {start} was written by another step's fill"
        del batch
    loader.close()
    assert_no_workers()
