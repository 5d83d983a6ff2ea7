"""Concern: ``DataLoader.profile()``, where a stream's time went (issue 26); no spec section.

The figures are checked for consistency only, never against a duration a busy machine
could miss: non-negative, the consumer's parts within the wall time, the Python stages
within the consumer's building at 0 workers, and lower bounds that sleeping guarantees
(a read that sleeps ``d`` seconds takes at least ``d``). Speed lives in the benchmarks.
"""

from __future__ import annotations

import pickle

import pytest

import onemodel_cy as om
from harness import _guard  # noqa: F401  (autouse: no worker may outlive a test)
from pipeline_parts import PyDataset, SlowReads, py_augmentation

FIELDS = ("wall_s", "build_s", "wait_s", "get_sample_s", "transform_s", "augmentation_s", "copy_s")
DELAY = 0.002


def _loader(dataset=None, augmentation=None, transform=None, workers=0, **kw):
    ds = om.SyntheticLineImages(64, 4, 3, 17, seed=3) if dataset is None else dataset
    return om.DataLoader(ds, om.ShuffledSampler(len(ds), 4, seed=1),
                         om.ImageBatchCollator(2, augmentation=augmentation), seed=7, workers=workers,
                         transform=transform, **kw)


def _take(loader, start, n):
    with loader.iter(start, start + n) as stream:
        for batch in stream:
            batch.close()


def _consistent(p):
    for name in FIELDS:
        assert getattr(p, name) >= 0, (name, p)
    assert p.build_s + p.wait_s <= p.wall_s
    assert p.other_s == pytest.approx(p.wall_s - p.build_s - p.wait_s, abs=1e-9)
    assert p.python_s == pytest.approx(p.get_sample_s + p.transform_s + p.augmentation_s)


def test_the_fast_path_at_0_workers_spends_its_building_in_the_copies_and_runs_no_python():
    loader = _loader(augmentation=om.GainOffset())
    _take(loader, 0, 5)
    p = loader.profile()
    _consistent(p)
    assert p.batches == 5 and p.workers == 0 and p.worker_mode == "thread"
    assert p.wait_s == 0 and p.python_s == 0
    assert 0 < p.copy_s <= p.build_s
    assert p.advice is None


def test_python_stages_at_0_workers_lie_within_the_consumer_building():
    def transform(sample, rng):
        return sample
    loader = _loader(SlowReads(_loader().dataset, DELAY), augmentation=py_augmentation, transform=transform)
    _take(loader, 0, 3)
    p = loader.profile()
    _consistent(p)
    assert p.batches == 3 and p.wait_s == 0
    assert p.get_sample_s >= 3 * 4 * DELAY         # 12 reads that each slept DELAY
    assert p.transform_s > 0 and p.augmentation_s > 0 and p.copy_s > 0
    assert p.python_s + p.copy_s <= p.build_s


@pytest.mark.parametrize("mode", ["thread", "process"])
def test_slow_workers_show_as_the_consumer_waiting(mode):
    loader = _loader(SlowReads(PyDataset(om.SyntheticLineImages(64, 4, 3, 17, seed=3)), DELAY), workers=2,
                     worker_mode=mode, prefetch=2)
    _take(loader, 0, 8)
    p = loader.profile()
    loader.close()
    _consistent(p)
    assert p.batches == 8 and p.workers == 2 and p.worker_mode == mode
    assert p.wait_s > 0
    if mode == "thread":    # the reads ran on this process's threads: all 32 are counted
        assert p.get_sample_s >= 8 * 4 * DELAY
    else:                   # worker processes keep theirs; at most the consumer's first step is here
        assert p.get_sample_s <= p.build_s


def test_reset_starts_the_figures_afresh_and_returns_the_old_ones():
    loader = _loader(augmentation=om.GainOffset())
    _take(loader, 0, 4)
    before = loader.profile(reset=True)
    after = loader.profile()
    assert before.batches == 4 and after.batches == 0
    assert after.build_s == after.copy_s == 0 and after.wall_s <= before.wall_s + after.wall_s
    _take(loader, 4, 2)
    assert loader.profile().batches == 2


def test_a_pickled_loader_starts_its_own_figures():
    loader = _loader(augmentation=om.GainOffset())
    _take(loader, 0, 3)
    copy = pickle.loads(pickle.dumps(loader))
    assert copy.profile().batches == 0 and loader.profile().batches == 3


def _figures(**kw):
    base = dict(wall_s=10.0, batches=100, build_s=0.0, wait_s=8.0, get_sample_s=6.0, transform_s=0.0,
                augmentation_s=3.0, copy_s=2.0, workers=2, worker_mode="thread")
    return om.LoaderProfile(**{**base, **kw})


def test_the_advice_names_process_workers_when_python_stages_bound_thread_workers():
    assert 'worker_mode="process"' in _figures().advice
    assert 'worker_mode="process"' in str(_figures())
    assert _figures(worker_mode="process").advice is None            # already processes
    assert "not the worker processes'" in str(_figures(worker_mode="process"))
    assert _figures(get_sample_s=1.0, augmentation_s=0.5).advice is None  # mostly copies
    assert _figures(wait_s=1.0).advice is None                       # the training loop is the bound


def test_the_figures_log_as_a_flat_dict():
    d = _figures().as_dict()
    assert d["python_s"] == 9.0 and d["other_s"] == 2.0 and d["batches"] == 100
    assert set(FIELDS) <= set(d)
