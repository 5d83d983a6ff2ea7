"""The picklable pieces of the test pipelines: datasets, transforms, augmentations.

They live apart from ``harness.py`` so that a worker process (``worker_mode="process"``)
unpickling them imports only this small module (numpy and the package), not pytest and
Hypothesis: the process-mode contract tests start many short-lived workers. ``harness``
re-exports every name.
"""

from __future__ import annotations

import os
import random
import time

import numpy as np

import onemodel_cy as om


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


# --------------------------------------------------------------------------- datasets

class PyDataset:
    """A plain Python dataset (the loader's generic path) wrapping a built-in one."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def get_sample(self, index):
        return self.inner.get_sample(index)


class SleepyDataset(PyDataset):
    """Sleeps a seeded pseudo-random 0-3 ms per read so builds finish out of order."""

    def __init__(self, inner, seed):
        super().__init__(inner)
        self.seed = seed

    def get_sample(self, index):
        time.sleep(random.Random(self.seed * 1_000_003 + index).random() * 0.003)
        return self.inner.get_sample(index)


class SlowReads(PyDataset):
    """Sleeps ``delay`` seconds in every read (a slow Python stage, for the profile's figures)."""

    def __init__(self, inner, delay):
        super().__init__(inner)
        self.delay = delay

    def get_sample(self, index):
        time.sleep(self.delay)
        return self.inner.get_sample(index)


class GatedDataset(PyDataset):
    """Reads of indices >= ``from_index`` wait (up to 30 s) until the file ``gate`` exists: a
    consumer stays inside ``next()`` while a test acts (threads and processes alike)."""

    def __init__(self, inner, gate, from_index):
        super().__init__(inner)
        self.gate, self.from_index = gate, from_index

    def get_sample(self, index):
        deadline = time.monotonic() + 30
        while index >= self.from_index and not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.005)
        return self.inner.get_sample(index)


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


class GarbageAt:
    """A transform that returns a str instead of a Sample for the sample whose generator
    starts at ``target_state`` (after ``delay`` seconds); a class, so that it pickles."""

    def __init__(self, target_state, delay):
        self.target_state = target_state
        self.delay = delay

    def __call__(self, sample, rng):
        if rng.state == self.target_state:
            time.sleep(self.delay)
            return "garbage"
        return sample


# --------------------------------------------------------------------------- for the process-worker tests

class RampDataset:
    """Sample i is 1 x height x (1 + i) (value i): with a sequential sampler every batch is
    larger than the one before, so a stream's ring must grow at every step."""

    def __init__(self, count, height=2):
        self.count = count
        self.height = height

    def __len__(self):
        return self.count

    def get_sample(self, index):
        image = np.full((1, self.height, 1 + index), float(index), dtype=np.float32)
        return om.Sample(image, np.array([index % 7], dtype=np.int32), index % 10)


class DyingDataset(PyDataset):
    """Ends its own process at ``bad_index``: ``how`` is "exit" (os._exit(3)), "kill"
    (SIGKILL to itself) or "segfault" (a read of address 0)."""

    def __init__(self, inner, bad_index, how):
        super().__init__(inner)
        self.bad_index = bad_index
        self.how = how

    def get_sample(self, index):
        if index == self.bad_index:
            import os
            import signal
            if self.how == "exit":
                os._exit(3)
            if self.how == "kill":
                os.kill(os.getpid(), signal.SIGKILL)
            import ctypes
            ctypes.string_at(0)
        return self.inner.get_sample(index)


class StuckDataset(PyDataset):
    """Sleeps ``seconds`` in the read of ``slow_index`` (a worker stuck in user code)."""

    def __init__(self, inner, slow_index, seconds):
        super().__init__(inner)
        self.slow_index = slow_index
        self.seconds = seconds

    def get_sample(self, index):
        if index == self.slow_index:
            time.sleep(self.seconds)
        return self.inner.get_sample(index)


class TwoPartError(Exception):
    """An exception whose pickle does not load back (its __init__ takes two arguments)."""

    def __init__(self, what, where):
        super().__init__(f"{what} at {where}")


class TwoPartFailing(PyDataset):
    def __init__(self, inner, bad_index):
        super().__init__(inner)
        self.bad_index = bad_index

    def get_sample(self, index):
        if index == self.bad_index:
            raise TwoPartError("broken read", index)
        return self.inner.get_sample(index)


class LockedDataset(PyDataset):
    """Holds a lock: it cannot be pickled."""

    def __init__(self, inner):
        super().__init__(inner)
        import threading
        self.lock = threading.Lock()


def _refuse_to_load(what):
    raise DatasetBroke(f"{what} cannot be loaded in this process")


class UnloadableDataset(PyDataset):
    """Pickles, but its pickle raises when loaded (in a worker process)."""

    def __reduce__(self):
        return _refuse_to_load, ("UnloadableDataset",)


class PythonSampler(om.Sampler):
    """A built-in sampler's batches through a sampler written in Python (whose index range the
    loader cannot know when it is built, so it checks each batch's indices instead)."""

    def __init__(self, inner):
        self.inner = inner
        self.batch_size = inner.batch_size
        self.steps_per_epoch = inner.steps_per_epoch

    def indices(self, epoch, step):
        return self.inner.indices(epoch, step)
