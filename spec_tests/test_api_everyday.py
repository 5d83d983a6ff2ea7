"""Everyday expectations of a loader user (issue 10): lengths for progress bars, a stuck worker
reported where people see it, error notes that say where a batch failed, a sampler that does
not fit its dataset refused up front.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

import onemodel_cy as om
from harness import _guard  # noqa: F401  (autouse: no worker thread may outlive a test)
from harness import ROOT, DatasetBroke, FailingDataset, Pipe, PyDataset, assert_no_workers, drain


# --------------------------------------------------------------------------- len(stream)

@pytest.mark.parametrize("workers", [0, 2])
def test_a_bounded_stream_has_a_length_counting_down(workers):
    """§1 streams, for progress bars (tqdm reads len()): a stream with a stop step has
    len() = the batches still to come, stop_g - next_g, which falls as batches are taken and
    is 0 once the stream is closed; an endless stream has no length (TypeError), and either is
    truthy whatever its length."""
    loader = Pipe(sampler="shuffled", batch_size=2, count=20).loader(workers=workers)
    with loader.iter(3, 10) as stream:
        assert len(stream) == 7
        next(stream)
        next(stream)
        assert len(stream) == 5
        assert len(list(stream)) == 5 and len(stream) == 0
    with loader.iter(3, 10) as stream:
        pass
    assert len(stream) == 0 and bool(stream)
    with loader.iter(0) as endless:
        with pytest.raises(TypeError, match="endless"):
            len(endless)
        assert bool(endless)


# --------------------------------------------------------------------------- a worker stuck after close()

class _Blocking(PyDataset):
    """get_sample blocks on one index until released (a read hung on a network drive)."""

    def __init__(self, inner, index):
        super().__init__(inner)
        self.index = index
        self.entered = threading.Event()
        self.release = threading.Event()

    def get_sample(self, index):
        if index == self.index:
            self.entered.set()
            self.release.wait(30)
        return self.inner.get_sample(index)


@pytest.mark.parametrize("persistent", [False, True])
def test_a_worker_stuck_after_close_is_reported_by_a_visible_warning(persistent):
    """§1 shutdown: the close that ends the workers (the stream's, or with persistent workers
    the loader's, since the stream's close parks them) waits join_timeout seconds (a
    documented DataLoader parameter) for workers to finish their builds; one still inside
    get_sample then is reported with a StuckWorkerWarning, a UserWarning (shown by Python's
    default filters, unlike a ResourceWarning) naming the timeout, and close() returns
    instead of hanging."""
    assert issubclass(om.StuckWorkerWarning, UserWarning)
    assert not issubclass(om.StuckWorkerWarning, ResourceWarning)
    pipe = Pipe(sampler="sequential", batch_size=1, count=20)
    dataset = _Blocking(pipe.base_dataset(), index=3)
    loader = om.DataLoader(dataset, pipe.om_sampler(), pipe.collator(), seed=0, workers=2, prefetch=4,
                           join_timeout=0.2, persistent_workers=persistent)
    stream = loader.iter(0)
    next(stream)
    assert dataset.entered.wait(10), "no worker reached the blocking read"
    try:
        if persistent:
            stream.close()          # parks the workers, the stuck one included
        with pytest.warns(om.StuckWorkerWarning, match=r"0\.2 s after close\(\).*join_timeout"):
            (loader if persistent else stream).close()
    finally:
        dataset.release.set()
    for thread in threading.enumerate():
        if thread.name.startswith("onemodel_cy-worker"):
            thread.join(10)
    assert_no_workers("after the stuck read returned")


def test_join_timeout_is_checked():
    """The exception rule (_validate): join_timeout of the wrong kind is a TypeError; a
    negative, NaN or infinite one is a ValueError."""
    pipe = Pipe()
    for bad, kind in (("1", TypeError), (True, TypeError), (-1, ValueError), (float("nan"), ValueError),
                      (float("inf"), ValueError)):
        with pytest.raises(kind, match="join_timeout"):
            pipe.loader(join_timeout=bad)
    assert pipe.loader(join_timeout=0).join_timeout == 0.0


_STUCK_CHILD = textwrap.dedent("""
    import threading
    import onemodel_cy as om

    class Blocking:
        def __init__(self, inner):
            self.inner, self.entered, self.release = inner, threading.Event(), threading.Event()
        def __len__(self):
            return len(self.inner)
        def get_sample(self, index):
            if index == 2:
                self.entered.set()
                self.release.wait(30)
            return self.inner.get_sample(index)

    dataset = Blocking(om.SyntheticLineImages(8, 2, 1, 4, seed=0))
    loader = om.DataLoader(dataset, om.SequentialSampler(8, 1), om.ImageBatchCollator(), seed=0,
                           workers=2, join_timeout=0.1)
    stream = loader.iter(0)
    next(stream)
    dataset.entered.wait(10)
    stream.close()          # parks the workers (persistent_workers): the loader's close ends them
    loader.close()
    dataset.release.set()
    print("closed")
""")


def test_the_stuck_worker_warning_is_shown_under_default_filters():
    """§1 shutdown, as a user meets it: a plain `python script.py` (default warning filters, no
    -W option) prints the stuck-worker warning on stderr."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, "-c", _STUCK_CHILD], capture_output=True, text=True, timeout=60,
                         env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert "closed" in run.stdout
    assert "StuckWorkerWarning" in run.stderr and "join_timeout" in run.stderr, run.stderr


# --------------------------------------------------------------------------- error notes

class AugmentationBroke(Exception):
    pass


def _note(error):
    notes = [n for n in getattr(error, "__notes__", []) if n.startswith("onemodel_cy:")]
    assert len(notes) == 1, f"expected one onemodel_cy note, received {getattr(error, '__notes__', None)}"
    return notes[0]


@pytest.mark.parametrize("workers", [0, 2])
def test_an_augmentation_error_gets_the_same_note_as_a_dataset_error(workers):
    """§1 (errors at their step): an exception raised by a Python augmentation carries the note
    a get_sample exception carries: 'while building global step g (epoch e, step s), slot k,
    dataset index i', naming the very slot and index; it reaches the consumer at its step."""
    pipe = Pipe(sampler="shuffled", batch_size=4, count=40)
    sampler = pipe.om_sampler()
    S = sampler.steps_per_epoch
    g, slot = S + 2, 3
    epoch, step = divmod(g, S)
    bad_index = int(sampler.indices(epoch, step)[slot])
    target_state = om.derive(pipe.seed, epoch, step, slot, om.STREAM_AUGMENTATION)

    def augmentation(image, rng):
        if rng.state == target_state:
            raise AugmentationBroke("gain out of range")

    loader = om.DataLoader(PyDataset(pipe.base_dataset()), sampler, om.ImageBatchCollator(augmentation=augmentation),
                           seed=pipe.seed, workers=workers)
    batches, error = drain(loader.iter(0, g + 3))
    assert [b.global_step for b in batches] == list(range(g))
    assert isinstance(error, AugmentationBroke)
    expected = (f"onemodel_cy: while building global step {g} (epoch {epoch}, step {step}), slot {slot}, "
                f"dataset index {bad_index}")
    assert _note(error) == expected

    dataset_loader = om.DataLoader(FailingDataset(pipe.base_dataset(), bad_index), sampler, om.ImageBatchCollator(),
                                   seed=pipe.seed, workers=workers)
    _, dataset_error = drain(dataset_loader.iter(g, g + 1))
    assert isinstance(dataset_error, DatasetBroke)
    assert _note(dataset_error) == expected, "the two notes differ in form"


def test_an_augmentation_error_in_collate_names_epoch_step_slot_and_index():
    """§4 collate on its own (no global step): the augmentation's exception is noted with the
    epoch, the step, the global slot (first_slot + j) and the dataset index."""
    ds = om.SyntheticLineImages(8, 2, 1, 4, seed=0)

    def augmentation(image, rng):
        if rng.state == om.derive(1, 2, 3, 6, om.STREAM_AUGMENTATION):
            raise AugmentationBroke("no")

    collator = om.ImageBatchCollator(augmentation=augmentation)
    samples = [ds.get_sample(i) for i in (5, 6, 7)]
    with pytest.raises(AugmentationBroke) as info:
        collator.collate(samples, np.array([5, 6, 7]), 1, 2, 3, first_slot=4)
    assert _note(info.value) == "onemodel_cy: while building epoch 2, step 3, slot 6, dataset index 7"


# --------------------------------------------------------------------------- a sampler past the dataset's end

@pytest.mark.parametrize("make", [
    lambda n: om.SequentialSampler(n + 1, 2),
    lambda n: om.ShuffledSampler(n + 5, 2, seed=1),
    lambda n: om.BucketedSampler(np.arange(1, n + 2), 2, pool_batches=2, seed=1),
    lambda n: om.MixingSampler([(0, n - 4, 1.0), (n - 4, 5, 1.0)], 2, steps_per_epoch=3, seed=1),
])
def test_a_sampler_reaching_past_the_dataset_is_refused_when_the_loader_is_built(make):
    """§3/§1 configuration: a built-in sampler whose indices can reach len(dataset) or beyond is
    refused by DataLoader() itself (ValueError naming the sampler and the dataset's size), not
    at the first batch that happens to draw such an index."""
    ds = om.SyntheticLineImages(20, 2, 1, 4, seed=0)
    with pytest.raises(ValueError, match=r"past the end of .*20 samples"):
        om.DataLoader(ds, make(20), om.ImageBatchCollator(), seed=0)


def test_samplers_that_fit_are_accepted_and_python_samplers_are_checked_per_batch():
    """§3/§1: samplers exactly the dataset's size, and a mixing source past the end whose share
    is 0 (it is never drawn), are accepted; a sampler written in Python, whose range is unknown
    in advance, is accepted and its bad index is an IndexError at the step that draws it."""
    ds = om.SyntheticLineImages(20, 2, 1, 4, seed=0)
    for sampler in (om.SequentialSampler(20, 2), om.ShuffledSampler(20, 2, seed=1),
                    om.BucketedSampler(np.arange(1, 21), 2, pool_batches=2, seed=1),
                    om.MixingSampler([(0, 20, 1.0), (20, 50, 0.0)], 2, steps_per_epoch=3, seed=1)):
        om.DataLoader(ds, sampler, om.ImageBatchCollator(), seed=0).batch_at(0).close()

    class Walk(om.Sampler):
        batch_size, steps_per_epoch = 2, 12

        def indices(self, epoch, step):
            return [2 * step, 2 * step + 1]

    loader = om.DataLoader(ds, Walk(), om.ImageBatchCollator(), seed=0)
    loader.batch_at(9).close()
    with pytest.raises(IndexError) as info:
        loader.batch_at(10)
    assert "slot 0" in str(info.value) and "received 20" in str(info.value)
    assert re.search(r"while building global step 10 ", _note(info.value)), info.value.__notes__


def test_timeout_is_checked():
    """The exception rule (_validate): a timeout of the wrong kind (a str, a bool) is a
    TypeError; zero, negative, NaN or infinite is a ValueError; None means no timeout."""
    pipe = Pipe()
    for bad, kind in (("x", TypeError), (True, TypeError), (0, ValueError), (-1.5, ValueError),
                      (float("nan"), ValueError), (float("inf"), ValueError)):
        with pytest.raises(kind, match="timeout"):
            pipe.loader(timeout=bad)
    assert pipe.loader(timeout=None).timeout is None
    assert pipe.loader(timeout=0.5).timeout == 0.5
