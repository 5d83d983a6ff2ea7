"""§1 The loader contract: the batch at global step g depends on (seed, g) and nothing else.

Every stream below is compared byte for byte with ``loader.batch_at(g)`` (the same pipeline
built on the calling thread, no ring) and, for a few sampled steps, with ``reference.batch``
(the pure-Python transcription of the text). The things the text says a batch must NOT
depend on are drawn by Hypothesis: the worker count, the prefetch depth, timing, the order
in which steps were built, and where a run was interrupted and resumed.

Hangs are failures, not stuck runs: streams are consumed through ``drain``, which closes a
stream that delivers nothing for ``STALL`` seconds and fails the test. The pipelines, the
stream drivers and the thread checks live in ``harness.py``.
"""

from __future__ import annotations

import gc
import json
import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import onemodel_cy as om
import onemodel_cy.loader as om_loader
from harness import _guard  # noqa: F401  (autouse: no worker thread may outlive a test)
from harness import (
    MODES, in_mode, M64, NO_SHRINK, PREFETCH, ROOT, WORKER_PREFIX, WORKERS, DatasetBroke, FailingDataset, Pipe,
    PyDataset, RecordingBuilds, RingProbe, SleepyDataset, _failing_case, _small_loader,
    PERSISTENT, _worker_idents, assert_meta, assert_no_workers, assert_parked, assert_ranks_compose, assert_same,
    finish,
    assert_stream_is_batch_at, drain, drain_ok, examples, live_workers, pipes, wait_for_workers, wrap_build)


# --------------------------------------------------------------------------- the pure function

@pytest.mark.parametrize("mode", MODES)
@given(pipe=pipes(), workers=WORKERS, prefetch=PREFETCH, persistent=PERSISTENT, data=st.data())
def test_stream_equals_batch_at_and_reference(mode, pipe, workers, prefetch, persistent, data):
    """§1 (the pure function), D12, D17: whatever the worker count and prefetch depth, with
    any sampler, transform or augmentation, on the fast and the generic dataset path, with
    workers kept by the loader or not, each step of the stream carries exactly the bytes of
    that step built on its own (batch_at) and the oracle's bytes; only the seed and g decide
    them. Steps arrive in order, with epoch = g div S and step = g mod S. The same for worker
    threads and worker processes."""
    loader = pipe.loader(prefetch=prefetch, persistent_workers=persistent, **in_mode(mode, workers))
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
    finish(loader)


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=examples(0.5))
@given(pipe=pipes(generic=True, max_batch=4), workers=st.sampled_from([2, 4, 8]), prefetch=PREFETCH,
       delay_seed=st.integers(0, 2 ** 32), data=st.data())
def test_timing_changes_nothing(mode, pipe, workers, prefetch, delay_seed, data):
    """§1 (timing is not an input): reads that take a random time, so that the workers finish
    steps out of order, still give the consumer every step in order, each with the bytes of the
    step built on its own."""
    loader = pipe.loader(prefetch=prefetch, dataset=SleepyDataset(pipe.base_dataset(), delay_seed),
                         **in_mode(mode, workers))
    start = data.draw(st.integers(0, 2 * loader.steps_per_epoch), label="start")
    with loader.iter(start, start + 10) as stream:
        batches = drain_ok(stream)
    assert_stream_is_batch_at(batches, pipe.loader(), range(start, start + 10), "sleepy dataset")


def test_out_of_order_completion_is_delivered_in_order():
    """§1 (delivery in step order): the workers may complete steps in any order (here the first
    step of every group of four sleeps longest); the consumer still receives them by step, each
    equal to the step built on its own."""
    pipe = Pipe(sampler="sequential", batch_size=1, count=40)
    base = pipe.base_dataset()

    class Reversing(PyDataset):
        def get_sample(self, index):
            time.sleep(0.004 * (4 - index % 4))
            return self.inner.get_sample(index)

    loader = pipe.loader(workers=4, prefetch=4, dataset=Reversing(base))
    finished = []

    def recording(g, workspace, build):
        batch = build(g, workspace)
        finished.append(g)
        return batch

    wrap_build(loader, recording)
    with loader.iter(0, 24) as stream:
        batches = drain_ok(stream)
    assert finished != sorted(finished), "the workers never finished out of order: the test proves nothing"
    assert_stream_is_batch_at(batches, pipe.loader(), range(24), "reversed completion")


# --------------------------------------------------------------------------- resume

@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=examples(0.6))
@given(pipe=pipes(), w1=WORKERS, p1=PREFETCH, w2=WORKERS, p2=PREFETCH, data=st.data())
def test_resume_from_any_step(mode, pipe, w1, p1, w2, p2, data):
    """§1 (resume): where a run was cut does not matter: a stream started at k, with any worker
    count, gives the same batches as a run from step 0 gives from k onwards, across epoch
    boundaries; so does a run stopped after k batches and restarted from its next_g. In process
    mode the resumed streams run on worker processes, the first on threads (a run may switch)."""
    loader = pipe.loader(workers=w1, prefetch=p1)
    S = loader.steps_per_epoch
    end = data.draw(st.integers(1, 3 * S + 2), label="end")
    k = data.draw(st.integers(0, end), label="k")
    with loader.iter(0, end) as stream:
        whole = drain_ok(stream)
    assert [b.global_step for b in whole] == list(range(end))
    with pipe.loader(prefetch=p2, **in_mode(mode, w2)).iter(start_g=k, stop_g=end) as stream:
        tail = drain_ok(stream)
    assert [b.global_step for b in tail] == list(range(k, end))
    for b, a in zip(tail, whole[k:]):
        assert_same(b, a, f"resumed at {k}: step {b.global_step}")

    with loader.iter(0, end) as first:
        head = drain_ok(first, k)
        resume_at = first.next_g
    assert resume_at == k
    with pipe.loader(prefetch=p2, **in_mode(mode, w2)).iter(start_g=resume_at, stop_g=end) as second:
        rest = drain_ok(second)
    assert [b.global_step for b in head + rest] == list(range(end))
    for b, a in zip(head + rest, whole):
        assert_same(b, a, f"stopped after {k} batches and resumed: step {b.global_step}")


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=examples(0.5))
@given(pipe=pipes(), w1=WORKERS, p1=PREFETCH, w2=WORKERS, p2=PREFETCH, data=st.data())
def test_resume_through_state_dict(mode, pipe, w1, p1, w2, p2, data):
    """§1 (resume), Concern: resume checks (fingerprint). state_dict() is the whole resume
    state and survives JSON: a fresh loader of the same pipeline, at any worker count and
    prefetch, carries on exactly where the saved stream stood; a pipeline with another seed
    refuses the state. In process mode the saving stream runs on worker processes."""
    loader = pipe.loader(prefetch=p1, **in_mode(mode, w1))
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
    """§1 (resume), Concern: resume across processes. Interrupted runs restart in a new process:
    a state saved by one process is taken by a fresh one that builds the same pipeline (same
    code, a Python augmentation and a callable-object transform), which goes on at the saved
    step with the same bytes."""
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


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=examples(0.6), phases=NO_SHRINK)
@given(kind=st.sampled_from(["dataset", "transform", "index_fast", "index_generic"]),
       pipe=pipes(kinds=("sequential", "shuffled"), full_batches=True, transform=False),
       workers=WORKERS, prefetch=PREFETCH, delay=st.sampled_from([0.0, 0.0, 0.01]), data=st.data())
def test_an_error_is_delivered_at_its_step_then_the_stream_ends(mode, kind, pipe, workers, prefetch, delay, data):
    """§1 (errors): a failure while building step g (the dataset raising its own exception
    type, a transform returning something other than a Sample, an index the dataset refuses)
    reaches the consumer only once it gets to g, after every earlier step, as the original
    exception (its type, and for a dataset error the dataset's frame in the traceback, which a
    worker process sends as text); after it the stream is over and no worker remains."""
    S = pipe.om_sampler().steps_per_epoch
    g = data.draw(st.integers(0, S - 1), label="g")
    slot = data.draw(st.integers(0, pipe.batch_size - 1), label="slot")
    loader, expected, check, g = _failing_case(kind, pipe, g, slot, delay, workers, prefetch, mode)
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


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workers,prefetch", [(2, 1), (3, 2), (8, 4)])
def test_an_error_with_a_full_window_does_not_hang(workers, prefetch, mode):
    """§1 (errors), Concern: no hang. The worker of the failing step must still hand over its
    error while every other slot of the window is occupied and another worker already waits for
    the failing step's slot: the consumer receives the error at g instead of hanging."""
    pipe = Pipe(sampler="sequential", batch_size=1, count=40)
    g = 13
    loader = pipe.loader(prefetch=prefetch, dataset=FailingDataset(pipe.base_dataset(), g, delay=0.05),
                         **in_mode(mode, workers))
    stream = loader.iter()
    batches, error = drain(stream, stall=3.0)
    assert [b.global_step for b in batches] == list(range(g))
    assert isinstance(error, DatasetBroke), f"expected DatasetBroke at step {g}, received {error!r}"
    assert_no_workers("after the error")


# --------------------------------------------------------------------------- ring discipline


@pytest.mark.parametrize("workers", [0, 1, 2, 8])
@pytest.mark.parametrize("prefetch", [1, 2, 5])
def test_ring_window_and_slots(workers, prefetch):
    """§1 (the ring): no worker starts step g unless g is below the next step to take plus
    prefetch, so two live steps never sit in the same slot g mod prefetch; and the workers do
    fill the window (a slow consumer finds it full)."""
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

@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=examples(0.5))
@given(pipe=pipes(transform=False), prefetch=PREFETCH, data=st.data())
def test_close_mid_stream_ends_every_worker(mode, pipe, prefetch, data):
    """Concern: worker threads end (no leak). Without persistent workers, close() at any
    point, while 8 workers are busy filling the window, ends and joins every worker (thread
    or process); the stream is then over, and a second close() does no harm."""
    loader = pipe.loader(prefetch=prefetch, persistent_workers=False, **in_mode(mode, 8))
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


@pytest.mark.parametrize("mode", MODES)
def test_break_inside_with_ends_the_workers(mode):
    """Concern: worker threads end (no leak). Without persistent workers, leaving a
    `with loader.iter()` block by `break` closes the stream and its workers (threads or
    processes)."""
    loader = Pipe().loader(prefetch=4, persistent_workers=False, **in_mode(mode, 8))
    with loader.iter() as stream:
        for batch in stream:
            if batch.global_step == 5:
                break
        assert live_workers(), "the stream should still be running inside the block"
    assert_no_workers("after leaving the with block")
    assert stream.closed


@pytest.mark.parametrize("mode", MODES)
def test_dropped_stream_ends_its_workers(mode):
    """Concern: worker threads end (no leak). Without persistent workers, a stream dropped
    without close() (and collected) takes its workers (threads or processes) with it; so does
    leaving a bare `for` loop over loader.iter() or over the loader by `break`."""
    loader = Pipe().loader(prefetch=3, persistent_workers=False, **in_mode(mode, 8))
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
    """§1, Concern: worker threads end (no leak), under stress. Without persistent workers,
    thousands of small steps with 8 workers, closed at random points, finish quickly, leave no
    thread behind and never mix up a batch."""
    rng = random.Random(20261130)
    pipe = Pipe(count=64, batch_size=2, sampler="shuffled")
    loader = pipe.loader(workers=8, prefetch=8, persistent_workers=False)
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


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=examples(0.5))
@given(pipe=pipes(full_batches=True), workers=WORKERS, prefetch=PREFETCH, data=st.data())
def test_ranks_side_by_side_are_the_global_batch(mode, pipe, workers, prefetch, data):
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
            with pipe.loader(prefetch=prefetch, rank=r, world_size=w, **in_mode(mode, workers)).iter(
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
    """D14 (ranks share the global batch), Concern: argument checks. A rank outside
    [0, world_size) is a ValueError naming the rank."""
    pipe = Pipe(batch_size=4)
    with pytest.raises(ValueError, match="rank"):
        pipe.loader(rank=rank, world_size=world_size)


@pytest.mark.parametrize("batch_size,world_size", [(6, 4), (3, 2), (5, 4)])
def test_batch_size_not_divisible_by_world_size_is_refused(batch_size, world_size):
    """D14 (ranks), Concern: argument checks. Every rank loads B/w samples of the global batch,
    so a B that w does not divide is a ValueError naming both."""
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
    """Concern: argument checks (the package's exception rule). A dataset lacking get_sample or
    __len__, a prefetch depth under 1, a negative worker count, a seed that is not an integer or
    a transform that cannot be called is refused with an error naming the argument."""
    pipe = Pipe()
    args = dict(dataset=pipe.dataset(), seed=pipe.seed, workers=0, prefetch=2, transform=None)
    args.update(change)
    dataset, seed = args.pop("dataset"), args.pop("seed")
    with pytest.raises(error, match=word):
        om.DataLoader(dataset, pipe.om_sampler(), pipe.collator(), seed=seed, **args)


@pytest.mark.parametrize("start,stop,error", [(-1, None, ValueError), (1.0, None, TypeError),
                                              ("0", None, TypeError), (5, 3, ValueError)])
def test_bad_stream_bounds_are_refused(start, stop, error):
    """§1 (global steps), Concern: argument checks. A step is an integer >= 0 and a stream
    cannot stop before it starts; batch_at refuses the same bad starts."""
    loader = Pipe().loader(workers=2)
    with pytest.raises(error):
        loader.iter(start, stop)
    if stop is None:
        with pytest.raises(error):
            loader.batch_at(start)


@pytest.mark.parametrize("how", ["patched_function", "emscripten", "wasi"])
def test_without_threads_the_loader_runs_as_zero_workers(how, monkeypatch):
    """§1 (platforms without threads): when threads cannot be started, the loader quietly falls
    back to 0 workers, however many were asked for, and the batches are unchanged."""
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

@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("workers", [0, 3])
def test_iterating_the_loader_gives_one_epoch_per_pass(workers, mode):
    """§1 (epoch = g div S): `for batch in loader` runs one epoch (steps_per_epoch batches,
    epoch e covering global steps [e*S, (e+1)*S)); the next pass runs the next epoch;
    set_epoch chooses one. Kept worker processes serve the passes as kept threads do."""
    pipe = Pipe(sampler="bucketed", batch_size=4, augmentation="gain_offset")
    loader = pipe.loader(prefetch=3, **in_mode(mode, workers))
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


@pytest.mark.parametrize("persistent", [False, True])
def test_close_from_another_thread_ends_a_waiting_consumer(persistent):
    """§1 shutdown: a consumer blocked waiting for a batch (or building its first one) while
    another thread closes the stream sees the stream end (StopIteration) or receives that
    batch, not a spurious error; no worker remains (or, with persistent workers, they are
    parked, a next stream there is served, and loader.close() ends them)."""
    release = threading.Event()

    class Slow(PyDataset):
        def get_sample(self, index):
            release.wait(5)
            return self.inner.get_sample(index)

    ds = om.SyntheticLineImages(16, 3, 1, 9, seed=4)
    loader = om.DataLoader(Slow(ds), om.SequentialSampler(16, 4), om.ImageBatchCollator(), seed=1, workers=2,
                           persistent_workers=persistent)
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
    if persistent:
        with loader.iter(0, 2) as again:
            batches, error = drain(again, stall=3.0)
        assert error is None and [b.global_step for b in batches] == [0, 1], (batches, error)
        finish(loader)
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
    """D14 (ranks), D8: when the short last batch of a non-drop-last sampler cannot give every
    rank a share, every rank refuses alike, so no rank starts while another cannot."""
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
    """§1 (concurrent dataset reads), Concern: no hang. The Python-stage baton only orders
    the workers' Python work; it never makes one worker wait for another's get_sample (a
    dataset blocked in I/O must not stall the rest). Here every get_sample of the first steps
    waits until both workers are inside get_sample together: that succeeds only if neither is
    held back."""
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


# --------------------------------------------------------------------------- epochs: a persistent engine



# --------------------------------------------------------------------------- persistent workers: parked between streams

@settings(max_examples=examples(0.5))
@given(pipe=pipes(transform=False), workers=st.sampled_from([1, 2, 4]), prefetch=PREFETCH, data=st.data())
def test_a_closed_stream_parks_its_workers_for_the_next(pipe, workers, prefetch, data):
    """§1 with persistent workers (the default): closing a stream from iter() at any point
    parks its threads in the loader (waiting, no build in progress); the next stream, at the
    step where it stopped or anywhere else, runs on those same threads and yields exactly
    batch_at's bytes; loader.close() ends them."""
    loader = pipe.loader(workers=workers, prefetch=prefetch)
    check = pipe.loader()
    start = data.draw(st.integers(0, 2 * loader.steps_per_epoch), label="start")
    taken = data.draw(st.integers(0, 12), label="taken")
    elsewhere = data.draw(st.integers(0, 3 * loader.steps_per_epoch), label="elsewhere")
    stream = loader.iter(start)
    batches = drain_ok(stream, taken)
    stream.close()
    assert_parked(loader, "after close")
    engine = loader._idle_engine
    assert engine is not None and len(engine.threads) == workers
    for at in (start + taken, elsewhere):
        with loader.iter(at, at + 5) as again:
            more = drain_ok(again)
        assert_stream_is_batch_at(more, check, range(at, at + 5), f"stream at {at} on parked workers")
        assert_parked(loader, f"after the stream at {at}")
        assert loader._idle_engine is engine, "the parked engine (and its threads) was not reused"
    assert_stream_is_batch_at(batches, check, range(start, start + taken), "before close")
    finish(loader)


def test_short_fresh_streams_start_no_threads():
    """§1 start-up with persistent workers: a training loop that opens many short streams one
    after the other (evaluation, resumes) starts the worker threads once; every later stream
    runs on them. Breaking out of a stream, dropping it, or breaking out of a pass over the
    loader parks them too; dropping the loader ends them."""
    pipe = Pipe(count=40, batch_size=2, sampler="shuffled")
    loader = pipe.loader(workers=3, prefetch=3)
    check = pipe.loader()
    with loader.iter(0, 4) as stream:
        drain_ok(stream)
    idents = wait_for_workers(3)
    g = 4
    for k in (1, 2, 7, 3):
        with loader.iter(g, g + k) as stream:
            assert_stream_is_batch_at(drain_ok(stream), check, range(g, g + k), f"stream at {g}")
        assert _worker_idents() == idents, f"the stream at {g} started threads"
        g += k
    stream = loader.iter(g)
    next(stream)
    del stream
    gc.collect()
    assert_parked(loader, "after dropping a stream")
    for batch in loader:
        if batch.step == 1:
            break
    del batch
    gc.collect()
    assert_parked(loader, "after breaking out of a pass")
    assert _worker_idents() == idents
    del loader
    gc.collect()
    assert_no_workers("after dropping the loader")


def test_a_stream_closed_before_its_first_batch_leaves_no_hole():
    """§1 no hang: a stream on parked workers whose first step the consumer would build
    itself, closed before asking for it, does not leave that step unclaimed: the next stream
    there receives it (with batch_at's bytes) instead of waiting for ever."""
    pipe = Pipe(count=24, batch_size=2)
    loader = pipe.loader(workers=2, prefetch=2)
    check = pipe.loader()
    for at in (0, 5, 5, 9):
        loader.iter(at, at + 3).close()
        with loader.iter(at, at + 3) as stream:
            batches, error = drain(stream, stall=3.0)
        assert error is None, error
        assert_stream_is_batch_at(batches, check, range(at, at + 3), f"stream at {at}")
    finish(loader)


def test_stress_many_short_streams_on_parked_workers():
    """§1, Concern: no thread pile-up, under stress. With persistent workers, streams started
    and closed at random points, with the prefetch depth changing between them, never leave
    more than one engine's threads alive (a prefetch change ends the parked engine) and never
    mix up a batch."""
    rng = random.Random(20261201)
    pipe = Pipe(count=64, batch_size=2, sampler="shuffled")
    loader = pipe.loader(workers=8, prefetch=8)
    check = pipe.loader()
    for round_ in range(30):
        loader.prefetch = rng.choice([1, 2, 3, 8])
        start = rng.randrange(0, 200)
        stream = loader.iter(start)
        batches = drain_ok(stream, rng.randrange(0, 100))
        stream.close()
        assert_parked(loader, f"round {round_}")
        assert len(live_workers()) <= 8, f"round {round_}: {len(live_workers())} worker threads"
        assert [b.global_step for b in batches] == list(range(start, start + len(batches)))
        for b in batches[::37]:
            assert_same(b, check.batch_at(b.global_step), f"round {round_}, step {b.global_step}")
    finish(loader)


def test_a_stream_at_zero_workers_ends_the_parked_threads():
    """§1 worker count: workers may change between streams; a stream run at 0 workers (the
    consumer builds every step) ends the threads a previous stream parked, and yields
    batch_at's bytes."""
    pipe = Pipe(count=24, batch_size=2)
    loader = pipe.loader(workers=2, prefetch=2)
    with loader.iter(0, 3) as stream:
        drain_ok(stream)
    assert_parked(loader)
    loader.workers = 0
    with loader.iter(3, 6) as stream:
        batches = drain_ok(stream)
    assert_no_workers("after a stream at 0 workers")
    assert_stream_is_batch_at(batches, pipe.loader(), range(3, 6), "at 0 workers")


@pytest.mark.parametrize("persistent", [False, True])
def test_close_from_another_thread_wakes_a_consumer_waiting_on_the_workers(persistent):
    """§1 shutdown, no hang: a consumer waiting inside the ring for a step the workers are
    still building, while another thread closes the stream, sees the stream end or receives
    that step; it is not left waiting (with persistent workers the engine it waits on is not
    parked for another stream: it is ended)."""
    release = threading.Event()

    class SlowAfterFirst(PyDataset):
        def get_sample(self, index):
            if index >= 4:
                release.wait(5)
            return self.inner.get_sample(index)

    ds = om.SyntheticLineImages(16, 3, 1, 9, seed=4)
    loader = om.DataLoader(SlowAfterFirst(ds), om.SequentialSampler(16, 4), om.ImageBatchCollator(), seed=1,
                           workers=2, persistent_workers=persistent)
    stream = loader.iter()
    assert next(stream).global_step == 0          # built by the consumer; steps 1.. wait in workers
    outcome = []
    consumer = threading.Thread(target=lambda: outcome.append(next(stream, "ended")))
    consumer.start()
    time.sleep(0.2)
    closer = threading.Thread(target=stream.close)     # joins workers still inside get_sample
    closer.start()
    consumer.join(3)
    alive = consumer.is_alive()
    release.set()
    consumer.join(10)
    closer.join(10)
    assert not alive, "the consumer was left waiting after close()"
    assert outcome == ["ended"] or outcome[0].global_step == 1, outcome
    finish(loader)


def test_persistent_workers_must_be_a_bool():
    """§1 arguments: persistent_workers is True or False; anything else is a TypeError naming it."""
    with pytest.raises(TypeError, match="persistent_workers"):
        Pipe().loader(workers=2, persistent_workers=1)

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
    builders = {}       # g -> the thread that built it last

    def recording(g, workspace, build):
        builders[g] = threading.get_ident()
        return build(g, workspace)

    wrap_build(loader, recording)
    check = pipe.loader()
    S = loader.steps_per_epoch
    list(loader)
    idents = wait_for_workers(2)
    for epoch in (6, 2, 3):
        loader.set_epoch(epoch)
        batches = list(loader)
        assert_stream_is_batch_at(batches, check, range(epoch * S, (epoch + 1) * S), f"set_epoch({epoch})")
        assert _worker_idents() == idents, "a reset started new threads"
    # a stream from iter() takes the kept workers too (its steps are built on those threads,
    # but for its first, which the consumer builds itself at a new position rather than wait);
    # when it closes they are parked again, until loader.close()
    with loader.iter(S + 1, S + 5) as stream:
        batches = drain_ok(stream, 4)
    by_workers = {builders[g] for g in range(S + 2, S + 5)}
    assert by_workers <= idents, "the iter() stream did not run on the kept workers"
    assert builders[S + 1] not in idents, "the first step at a new position is the consumer's"
    assert_stream_is_batch_at(batches, check, range(S + 1, S + 5), "iter() on the kept workers")
    assert _worker_idents() == idents, "the iter() stream's close did not give the workers back"
    finish(loader, "after the iter() stream that took the kept workers closed")


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
    """Concern: worker threads end (no leak). A loader whose passes kept their workers ends them
    when it is dropped and collected (the threads hold it only weakly), by reference counting or
    by the cycle collector."""
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
    loader = Pipe(count=48, batch_size=2).loader(workers=4, prefetch=2, persistent_workers=False)
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
    loader.persistent_workers = True     # now the loader keeps a completed pass's workers
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


def test_the_global_step_has_one_name():
    """§1 resume, naming: the global step is ``g`` in the API (``iter(start_g, stop_g)``,
    ``stream.next_g``, ``state_dict()["next_g"]``). The pre-release names (``start_step``,
    ``stop_step``, ``next_step``, a state's ``"next_step"``) are gone (CHANGELOG.md): using
    one is an error, never a silent start at step 0."""
    ds = om.SyntheticLineImages(16, height=2, min_width=2, max_width=5, seed=1)
    loader = om.DataLoader(ds, om.ShuffledSampler(16, 4, seed=2), om.ImageBatchCollator(), seed=0)
    with loader.iter(start_g=5, stop_g=7) as stream:
        assert next(stream).global_step == 5
        assert stream.next_g == 6
        assert not hasattr(stream, "next_step")
        state = stream.state_dict()
    assert state["next_g"] == 6
    for old in ({"start_step": 5}, {"stop_step": 7}, {"start": 3}):
        with pytest.raises(TypeError, match="unexpected keyword"):
            loader.iter(**old)
    with loader.iter(0) as resumed, pytest.raises(TypeError, match="next_g"):
        resumed.load_state_dict({"next_step": 6, "fingerprint": state["fingerprint"]})


@pytest.mark.parametrize("kind", ["thread", "lane", "process"])
@pytest.mark.parametrize("offset", [4, 2, 1])
def test_every_engine_serves_the_steps_next_to_the_largest_int64(kind, offset):
    """§1: a global step is any integer >= 0; 0 workers build steps up to 2**63 - 1, and so
    must every engine, whose window counts past its start without wrapping (an outside
    review found the thread and process engines waiting for ever there)."""
    ds = om.SyntheticLineImages(16, height=2, min_width=2, max_width=4, seed=1)
    dataset = PyDataset(ds) if kind == "thread" else ds
    loader = om.DataLoader(dataset, om.SequentialSampler(16, 4), om.ImageBatchCollator(), seed=5, workers=2,
                           prefetch=4, timeout=20, worker_mode="process" if kind == "process" else "thread")
    start = 2**63 - offset
    steps = list(range(start, start + min(offset, 2)))
    try:
        with loader.iter(start, start + len(steps)) as stream:
            batches = drain_ok(stream)
        assert [b.global_step for b in batches] == steps
        assert_stream_is_batch_at(batches, loader, steps, f"{kind} at 2**63 - {offset}")
    finally:
        loader.close()


def test_importing_the_package_needs_no_process_machinery():
    """§1 (engines): the process engine (multiprocessing, sockets with descriptors, shared
    memory) is loaded when a loader first asks for worker processes, so a platform without
    them still runs 0 workers and threads."""
    code = textwrap.dedent("""
        import socket, sys
        del socket.CMSG_SPACE       # as where sockets carry no descriptors
        import onemodel_cy as om
        ds = om.SyntheticLineImages(8, 2, 1, 3, seed=1)
        loader = om.DataLoader(ds, om.SequentialSampler(8, 2), om.ImageBatchCollator(), seed=0, workers=2)
        with loader.iter(0, 4) as stream:
            assert [b.global_step for b in stream] == [0, 1, 2, 3]
        loader.close()
        print(sorted(m for m in sys.modules if m.startswith("onemodel_cy.workers.proc")))
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr[-600:]
    assert run.stdout.strip() == "[]", run.stdout
