"""§1 ``worker_mode="auto"`` (the default): threads for a GIL-free pipeline, processes for
Python stages, threads and a one-line warning where processes cannot run; a main module
that worker processes cannot import (``python - <<EOF``) is one clear error in
``worker_mode="process"``. The stream is the same in every mode (``batch_at``).

Before: the default was threads, the right choice for packs but 1x for a Python transform
(processes gave 1.9x), and a process start from stdin failed with "every worker process
ended before building global step 1".
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy import augment as A
from pipeline_parts import PyDataset, crop_om

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

CHECKOUT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")


def small_pack(tmp_path):
    lines = om.SyntheticLineImages(48, height=16, min_width=16, max_width=64, seed=3)
    items = [(lines.get_sample(i).image[0].round().clip(0, 255).astype(np.uint8), [1 + i % 5], i)
             for i in range(len(lines))]
    return om.PackedImageDataset(om.pack(items, str(tmp_path / "p"), progress=False).path, mean=128.0, std=64.0)


def loader_of(dataset, transform=None, **kw):
    sampler = om.ShuffledSampler(len(dataset), batch_size=8, seed=1)
    return om.DataLoader(dataset, sampler, om.ImageBatchCollator(width_multiple=4), seed=7,
                         **{"workers": 2, "transform": transform, **kw})


def chosen(loader):
    """(the mode chosen, the warnings its choice gave)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        mode = loader.worker_mode
    return mode, [str(w.message) for w in caught]


def assert_stream_is_batch_at(loader, steps=5):
    with loader, loader.iter(0, steps) as stream:
        got = [{f: getattr(b, f).copy() for f in FIELDS} for b in stream]
    assert len(got) == steps
    for g, batch in enumerate(got):
        expected = loader.batch_at(g)
        for f in FIELDS:
            assert np.array_equal(batch[f], getattr(expected, f)), (g, f)


def test_auto_is_the_default_and_says_what_it_chose(tmp_path):
    loader = loader_of(small_pack(tmp_path))
    assert loader.worker_mode_setting == "auto"
    assert loader.worker_mode == "thread"
    assert "worker_mode='auto' (thread)" in repr(loader)
    loader.worker_mode = "process"          # an explicit choice is kept as given
    assert loader.worker_mode == loader.worker_mode_setting == "process"
    assert "worker_mode='process'" in repr(loader)
    with pytest.raises(ValueError, match=r"\('auto', 'thread', 'process'\)"):
        loader.worker_mode = "threads"


@pytest.mark.parametrize("transform", [None, "built-in"])
def test_a_pack_runs_on_threads(tmp_path, transform):
    """A pack with no transform or a built-in one splits: the packed lane's threads."""
    loader = loader_of(small_pack(tmp_path), A.text_lines() if transform else None)
    assert loader._pipeline.splits() and loader._pipeline.python_stages() == ()
    assert chosen(loader) == ("thread", [])
    assert_stream_is_batch_at(loader)


def test_a_python_transform_runs_on_processes(tmp_path):
    loader = loader_of(small_pack(tmp_path), crop_om)
    assert loader._pipeline.python_stages() == ("transform",)
    assert chosen(loader) == ("process", [])
    with loader, loader.iter(0, 2) as stream:
        next(stream)
        assert type(stream._engine).__name__ == "ProcessEngine"
    assert_stream_is_batch_at(loader)


def test_a_python_dataset_runs_on_processes():
    loader = loader_of(PyDataset(om.SyntheticLineImages(40, height=16, min_width=16, max_width=64, seed=2)))
    assert loader._pipeline.python_stages() == ("dataset",)
    assert chosen(loader) == ("process", [])
    assert_stream_is_batch_at(loader)


def test_a_transform_that_does_not_pickle_runs_on_threads_with_a_warning(tmp_path):
    loader = loader_of(small_pack(tmp_path), lambda sample, rng: crop_om(sample, rng))
    loader.workers = 0
    assert chosen(loader) == ("thread", [])         # no workers: nothing to warn about yet
    loader.workers = 2
    mode, said = chosen(loader)
    assert mode == "thread"
    assert len(said) == 1 and "\n" not in said[0]
    assert "worker_mode='auto' runs threads, not processes" in said[0]
    assert "the transform" in said[0] and "<lambda>" in said[0] and "cannot be pickled" in said[0]
    assert "worker_mode='thread'" in said[0]        # how to silence it
    assert chosen(loader) == ("thread", [])         # chosen once
    assert_stream_is_batch_at(loader)
    loader.worker_mode = "thread"
    assert chosen(loader) == ("thread", [])


# A script fed on standard input: its __main__ is '<stdin>', which no worker process can import.
STDIN_SCRIPT = textwrap.dedent("""
    import warnings
    import onemodel_cy as om

    def keep(sample, rng):
        return sample

    dataset = om.SyntheticLineImages(32, height=16, min_width=16, max_width=48, seed=0)
    sampler = om.ShuffledSampler(32, batch_size=8, seed=0)
    auto = om.DataLoader(dataset, sampler, om.ImageBatchCollator(), seed=0, workers=2, transform=keep)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        print("auto:", auto.worker_mode, len(list(auto.iter(0, 3))), "|", str(caught[0].message))
    auto.close()
    loader = om.DataLoader(dataset, sampler, om.ImageBatchCollator(), seed=0, workers=2, transform=keep,
                           worker_mode="process")
    for batch in loader.iter(0, 3):
        pass
""")


def test_a_stdin_main_is_one_clear_error_for_processes_and_threads_for_auto():
    env = dict(os.environ, PYTHONPATH=CHECKOUT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    run = subprocess.run([sys.executable, "-"], input=STDIN_SCRIPT, capture_output=True, text=True, timeout=120,
                         cwd=CHECKOUT, env=env)
    assert run.returncode == 1, run.stdout + run.stderr
    auto = run.stdout.strip()
    assert auto.startswith("auto: thread 3 |") and "__main__ here is '<stdin>'" in auto, auto
    last = run.stderr.strip().splitlines()[-1]
    assert last.startswith("RuntimeError: worker_mode='process' cannot start worker processes"), run.stderr
    assert "'<stdin>'" in last and "python script.py" in last and "worker_mode='thread'" in last
    assert "every worker process ended" not in run.stderr


UNGUARDED_SCRIPT = textwrap.dedent("""
    import warnings
    import onemodel_cy as om
    from pipeline_parts import crop_om

    dataset = om.SyntheticLineImages(32, height=16, min_width=16, max_width=48, seed=0)
    loader = om.DataLoader(dataset, om.ShuffledSampler(32, batch_size=8, seed=0), om.ImageBatchCollator(),
                           seed=0, workers=2, transform=crop_om)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        print(loader.worker_mode, len(list(loader.iter(0, 3))), "|", str(caught[0].message))
""")


def test_a_script_without_the_main_guard_runs_auto_on_threads(tmp_path):
    """A worker process would import the script and run its loader again: threads, with the reason."""
    script = tmp_path / "train.py"
    script.write_text(UNGUARDED_SCRIPT)
    guarded = tmp_path / "guarded.py"
    guarded.write_text("if __name__ == '__main__':\n"
                       + textwrap.indent(UNGUARDED_SCRIPT.replace("caught[0].message", "caught"), "    "))
    spec_tests = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([CHECKOUT, spec_tests, os.environ.get("PYTHONPATH", "")]))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.startswith("thread 3 |") and "outside `if __name__ ==" in run.stdout, run.stdout
    run = subprocess.run([sys.executable, str(guarded)], capture_output=True, text=True, timeout=120, env=env)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == "process 3 | []", run.stdout
