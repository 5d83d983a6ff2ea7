"""Soak and fault test of the loader's streams (§1), run with ``-m soak``.

Eight workers build tens of thousands of steps of a Python dataset and transform that raise
and sleep at deterministic pseudo-random points; streams are closed at random points and
resumed from ``next_g``. The loader's promise under all of that: every delivered batch is
``batch_at(g)`` byte for byte, an error arrives at its own step (every step before it is
delivered, then the error, then nothing), no worker thread outlives ``close()``, and resident
memory stays flat.

``ONEMODEL_CY_SOAK_STEPS`` sets the number of steps (default 30,000).
"""
from __future__ import annotations

import os
import random
import threading
import time

import pytest

import onemodel_cy as om

pytestmark = pytest.mark.soak

STEPS = int(os.environ.get("ONEMODEL_CY_SOAK_STEPS", "30000"))
FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")
WORKERS, PREFETCH, BATCH, COUNT = 8, 4, 8, 4096
GROWTH_LIMIT = 1 << 20          # bytes of resident memory per 1,000 steps, after warm-up


class FaultDataset:
    """SyntheticLineImages behind a Python ``get_sample`` that raises for a fixed pseudo-random
    set of indices and sleeps briefly for another, so workers finish out of order."""

    def __init__(self, inner, seed):
        self.inner = inner
        rng = random.Random(seed)
        self.failing = frozenset(rng.sample(range(len(inner)), 3))
        self.sleeping = frozenset(rng.sample(range(len(inner)), 200))

    def __len__(self):
        return len(self.inner)

    def get_sample(self, index):
        if index in self.failing:
            raise KeyError(f"dataset fault at index {index}")
        if index in self.sleeping:
            time.sleep(0.0005)
        return self.inner.get_sample(index)


def faulty_transform(sample, rng):
    """Raises where the per-slot key (§2, stream 0) falls in a fixed residue class: a
    deterministic function of (seed, epoch, step, slot), independent of the dataset faults."""
    if rng.state % 7919 == 0:
        raise ArithmeticError(f"transform fault at key {rng.state}")
    return sample


def worker_threads():
    return [t for t in threading.enumerate() if t.name.startswith("onemodel_cy-worker-")]


def resident_bytes():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def expected_at(loader, g):
    """``("batch", arrays)`` or ``("error", (type, message))``: what step ``g`` must deliver."""
    try:
        batch = loader.batch_at(g)
    except Exception as exc:   # noqa: BLE001  (the faults are the point)
        return "error", (type(exc), str(exc))
    with batch:
        return "batch", {name: getattr(batch, name).copy() for name in FIELDS}


def check_delivered(batch, expected, g):
    kind, want = expected
    assert kind == "batch", f"step {g} delivered a batch, batch_at({g}) raises {want}"
    assert batch.global_step == g
    for name in FIELDS:
        got = getattr(batch, name)
        assert got.dtype == want[name].dtype and got.shape == want[name].shape, (g, name)
        assert got.tobytes() == want[name].tobytes(), f"step {g}: {name} differs from batch_at({g})"


def run_segment(loader, start, length, stop):
    """One stream from ``start``: take up to ``length`` steps, checking each; returns
    (next step to resume from, steps delivered, errors met)."""
    stream = loader.iter(start, stop)
    delivered = errors = 0
    g = start
    try:
        while g < stop and delivered < length:
            expected = expected_at(loader, g)
            try:
                batch = next(stream)
            except StopIteration:
                raise AssertionError(f"stream ended before step {g} (stop {stop})") from None
            except Exception as exc:   # noqa: BLE001
                assert expected[0] == "error", f"step {g} raised {exc!r}, batch_at({g}) builds a batch"
                assert (type(exc), str(exc)) == expected[1], (g, exc, expected[1])
                # After the error the stream delivers nothing more.
                with pytest.raises(StopIteration):
                    next(stream)
                assert stream.next_g == g, "next_g moved past the failed step"
                return g + 1, delivered, 1
            with batch:
                check_delivered(batch, expected, g)
            delivered += 1
            g += 1
            assert stream.next_g == g
        return stream.next_g, delivered, errors
    finally:
        stream.close()
        if loader.persistent_workers:   # parked in the loader for the next segment: one set at most
            assert len(worker_threads()) <= WORKERS, f"threads pile up: {worker_threads()}"
        else:
            assert not worker_threads(), f"threads left after close(): {worker_threads()}"


def test_soak_faults_resume_threads_and_memory():
    """§1 under load and faults: the stream is batch_at(g) at every step whatever the
    timing, errors arrive at their step, close() parks the workers (persistent_workers) or
    ends them (not), loader.close() ends them all, memory stays flat."""
    inner = om.SyntheticLineImages(COUNT, height=8, min_width=8, max_width=40, seed=11)
    dataset = FaultDataset(inner, seed=5)
    sampler = om.ShuffledSampler(COUNT, BATCH, seed=3)
    collator = om.ImageBatchCollator(width_multiple=8, augmentation=om.GaussianNoise(0.1))
    loader = om.DataLoader(dataset, sampler, collator, seed=2024, workers=WORKERS, prefetch=PREFETCH,
                           transform=faulty_transform)
    cuts = random.Random(99)
    modes = random.Random(7)        # persistent_workers, drawn per segment
    warmup = STEPS // 5
    g = delivered = errors = segments = 0
    rss_warm = None
    started = time.monotonic()
    while g < STEPS:
        if rss_warm is None and g >= warmup:
            rss_warm, g_warm = resident_bytes(), g
        loader.persistent_workers = modes.random() < 0.5
        g, n, e = run_segment(loader, g, cuts.randint(1, max(1, min(3000, STEPS // 10))), STEPS)
        delivered, errors, segments = delivered + n, errors + e, segments + 1
    elapsed = time.monotonic() - started
    growth = (resident_bytes() - rss_warm) * 1000 / max(1, STEPS - g_warm)
    print(f"\nsoak: {STEPS} steps, {delivered} batches, {errors} errors at their step, {segments} streams, "
          f"{elapsed:.1f} s, resident growth {growth / 1024:.1f} KiB per 1,000 steps after warm-up "
          f"({resident_bytes() / 2**20:.1f} MiB resident)")
    loader.close()
    assert not worker_threads(), f"threads left after loader.close(): {worker_threads()}"
    assert delivered + errors == STEPS
    assert errors >= 1, "no fault was met: the test would not see a misplaced error"
    assert segments > 2
    assert growth < GROWTH_LIMIT, f"resident memory grows {growth / 1024:.0f} KiB per 1,000 steps"
