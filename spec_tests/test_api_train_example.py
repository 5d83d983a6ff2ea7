"""Concern: training example; §1 (batch g is a pure function of (seed, g)).

``examples/train_ctc_torch.py`` trains a CRNN with CTC on SyntheticTextLines, fed by the
loader's worker threads. Stopped after step k and resumed from its ``torch.save``
checkpoint in a new process, it must give, after k, exactly the losses of the
uninterrupted run: the model, optimizer, schedule and loader state are all in the
checkpoint, and every batch after k is the same bytes. A short version runs here.
"""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest

try:
    import torch
except ImportError as exc:  # loud on purpose: these tests must run in CI (the torch extra)
    raise ImportError("spec_tests/test_api_train_example.py needs torch; install the test extras with "
                      "`pip install -e '.[test,torch]'` (torch==2.13.0)") from exc

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(ROOT, "examples", "train_ctc_torch.py")
SHORT = ["--steps", "24", "--train-size", "512", "--eval-size", "100", "--eval-every", "0", "--threads", "1",
         "--workers", "2", "--batch-size", "16"]
STOP = 11


def _example():
    spec = importlib.util.spec_from_file_location("train_ctc_torch", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _run(args, cwd):
    """The example in a new Python process (the package imported from this checkout)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, EXAMPLE, *SHORT, *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(process):
    out, _ = process.communicate(timeout=300)
    assert process.returncode == 0, out
    return out


def _losses(path):
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    return doc["first_g"], doc["losses"]


def _uninterrupted_here(path):
    """The uninterrupted run in this process, leaving torch's global settings as they were."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    rng = torch.get_rng_state()
    try:
        _example().main([*SHORT, "--losses-out", str(path)])
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)
        torch.set_rng_state(rng)


def test_resumed_run_repeats_the_uninterrupted_losses_bit_for_bit(tmp_path):
    """Concern: training example, resume (§1). Steps 0..23 uninterrupted, against steps
    0..10 in one process and 11..23 resumed from its checkpoint in another: the losses of
    11..23 are equal as float bits (float.hex), those of 0..10 as well, and the loss falls."""
    stopped = _run(["--stop-at", str(STOP), "--checkpoint", "ck.pt", "--losses-out", "first.json"], tmp_path)
    _uninterrupted_here(tmp_path / "full.json")       # meanwhile (two busy processes at most)
    _finish(stopped)
    out = _finish(_run(["--resume", "ck.pt", "--losses-out", "rest.json"], tmp_path))
    assert f"13 steps ({STOP}..23)" in out
    g0, full = _losses(tmp_path / "full.json")
    g1, first = _losses(tmp_path / "first.json")
    g2, rest = _losses(tmp_path / "rest.json")
    assert (g0, g1, g2) == (0, 0, STOP) and len(full) == 24
    assert first == full[:STOP]
    assert rest == full[STOP:]
    values = [float.fromhex(v) for v in full]
    assert len(set(values)) == len(values) and max(values[:4]) > max(values[-4:])


def test_the_checkpoint_holds_the_loader_state(tmp_path):
    """Concern: training example, checkpoint contents. The checkpoint is one torch.save
    file with the model, optimizer, schedule, the loader's resume state (its next global
    step and its pipeline fingerprint) and the vocabulary's symbols (issue 38, item 2); a
    changed pipeline refuses it, and so does a resume on other data (here: a pack of another
    vocabulary), naming what the checkpoint was trained on."""
    import onemodel_cy as om
    _finish(_run(["--stop-at", "3", "--checkpoint", "ck.pt"], tmp_path))
    ckpt = torch.load(tmp_path / "ck.pt", weights_only=False)
    assert {"model", "optimizer", "schedule", "loader"} <= set(ckpt)
    assert ckpt["loader"]["next_g"] == 3 and "SyntheticTextLines" in ckpt["loader"]["fingerprint"]
    assert ckpt["vocabulary"] == "0123456789"
    example = _example()
    loader = example.make_loader(example.make_dataset(512, 0), 8, 0, workers=0)    # batch size 8, not 16
    with pytest.raises(ValueError, match="different pipeline"):
        example.resume_stream(loader, ckpt["loader"], 10)
    lines = om.SyntheticTextLines(64, height=20, max_length=5, num_symbols=6, seed=3)
    other = om.pack(lines, str(tmp_path / "six.pack"), vocabulary=lines.vocabulary, progress=False).path
    refused = _run(["--resume", "ck.pt", "--train-pack", other], tmp_path)
    text, _ = refused.communicate(timeout=300)
    assert refused.returncode != 0 and "refusing to resume ck.pt: its train data was" in text, text
    assert "the built-in lines: SyntheticTextLines(" in text and "six.pack" in text, text


def test_the_example_trains_from_packs_with_shared_ids(tmp_path):
    """Concern: training example on real use's path: folder -> pack -> train. Train and test
    packs (the test pack written with the train pack's vocabulary) train the same model for
    a few steps and print a decoded line; a test pack whose ids differ is refused, naming
    --vocabulary-from."""
    import numpy as np
    import onemodel_cy as om
    lines = om.SyntheticTextLines(96, height=20, max_length=5, seed=3)
    test_lines = om.SyntheticTextLines(24, height=20, max_length=5, num_symbols=6, seed=4)
    train = om.pack(lines, str(tmp_path / "train.pack"), vocabulary=lines.vocabulary, progress=False).path
    test = om.pack(test_lines, str(tmp_path / "test.pack"), vocabulary=om.PackedImageDataset(train).vocabulary,
                   progress=False).path
    out = _finish(_run(["--train-pack", train, "--test-pack", test, "--steps", "6"], tmp_path))
    assert "6 steps (0..5)" in out and "held-out CER" in out and "on 24 lines; first line" in out, out
    first = om.PackedImageDataset(test).decode(test_lines.get_sample(0).target)
    assert f"first line {first!r} read as" in out, out
    other = om.pack([(np.zeros((20, 9), np.uint8), [1, 2], 0)], str(tmp_path / "other.pack"), vocabulary="xy",
                    progress=False).path
    refused = _run(["--train-pack", train, "--test-pack", other], tmp_path)
    text, _ = refused.communicate(timeout=300)
    assert refused.returncode != 0 and "--vocabulary-from" in text, text


def _run_alone(args, cwd):
    """The example in a new process with ``args`` only (no SHORT): what a user types."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    return subprocess.Popen([sys.executable, EXAMPLE, *args], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _tiny_packs(folder):
    """A train pack of 256 lines and a test pack of 32 (the train pack's ids), 20 pixels high."""
    import onemodel_cy as om
    lines = om.SyntheticTextLines(256, height=20, max_length=5, seed=5)
    test_lines = om.SyntheticTextLines(32, height=20, max_length=5, seed=6)
    train = om.pack(lines, str(folder / "train.pack"), vocabulary=lines.vocabulary, progress=False).path
    test = om.pack(test_lines, str(folder / "test.pack"), vocabulary=om.PackedImageDataset(train).vocabulary,
                   progress=False).path
    return train, test


PACK_RUN = ["--steps", "20", "--batch-size", "16", "--threads", "1", "--workers", "2", "--eval-every", "0"]


def test_resume_alone_goes_on_bit_for_bit_from_packs(tmp_path):
    """Concern: training example, the checkpoint knows its run (issue 37). Trained from packs,
    with the defaults (width buckets, the text_lines() augmentation), stopped after step 7:
    ``--resume ck.pt`` and nothing else gives steps 7..19 with the uninterrupted run's losses
    as float bits, the loss falls, and the padding of the bucketed batches is printed. The
    checkpoint records the settings, the model's configuration and each pack by content
    (with its path as a hint)."""
    train, test = _tiny_packs(tmp_path)
    packs = ["--train-pack", train, "--test-pack", test]
    stopped = _run_alone([*packs, *PACK_RUN, "--stop-at", "7", "--checkpoint", "ck.pt"], tmp_path)
    full = _finish(_run_alone([*packs, *PACK_RUN, "--losses-out", "full.json"], tmp_path))
    _finish(stopped)
    rest = _finish(_run_alone(["--resume", "ck.pt", "--losses-out", "rest.json"], tmp_path))
    assert "13 steps (7..19)" in rest and "bucketed batches" in full and "padding" in full, rest
    assert "augment True" in full
    g0, whole = _losses(tmp_path / "full.json")
    g1, tail = _losses(tmp_path / "rest.json")
    assert (g0, g1) == (0, 7) and tail == whole[7:]
    values = [float.fromhex(v) for v in whole]
    assert max(values[:4]) > max(values[-4:])
    ckpt = torch.load(tmp_path / "ck.pt", weights_only=False)
    import onemodel_cy as om
    assert ckpt["data"]["train"]["fingerprint"] == om.PackedImageDataset(train).fingerprint()    # float32: as stored
    assert ckpt["data"]["train"]["path"] == train and ckpt["data"]["test"]["path"] == test
    assert ckpt["settings"]["steps"] == 20 and ckpt["settings"]["augment"] is True
    assert ckpt["model_config"]["classes"] == 11 and ckpt["model_config"]["height"] == 20


def test_a_checkpoint_refuses_other_packs_and_other_settings(tmp_path):
    """Concern: training example, the checkpoint knows its data (issue 37). Resumed with
    another train pack, the run is refused with a message naming both packs (the recorded
    one's path and fingerprint, the given one's); a setting given anew that differs from
    the recorded one is refused naming the option and both values. A moved pack (same
    content, another path) resumes."""
    train, test = _tiny_packs(tmp_path)
    _finish(_run_alone(["--train-pack", train, "--test-pack", test, *PACK_RUN, "--stop-at", "3",
                        "--checkpoint", "ck.pt"], tmp_path))
    import onemodel_cy as om
    other = om.pack(om.SyntheticTextLines(64, height=20, max_length=5, seed=9), str(tmp_path / "other.pack"),
                    vocabulary=om.PackedImageDataset(train).vocabulary, progress=False).path
    refused = _run_alone(["--resume", "ck.pt", "--train-pack", other], tmp_path)
    text, _ = refused.communicate(timeout=300)
    assert refused.returncode != 0 and "refusing to resume" in text, text
    assert train in text and other in text, text
    assert om.PackedImageDataset(train).manifest_sha256 in text and om.PackedImageDataset(other).manifest_sha256 in text
    changed = _run_alone(["--resume", "ck.pt", "--batch-size", "8"], tmp_path)
    text, _ = changed.communicate(timeout=300)
    assert changed.returncode != 0 and "--batch-size 16" in text and "--batch-size 8" in text, text
    os.rename(train, tmp_path / "moved.pack")
    moved = _finish(_run_alone(["--resume", "ck.pt", "--train-pack", str(tmp_path / "moved.pack"),
                                "--stop-at", "5"], tmp_path))
    assert "2 steps (3..4)" in moved, moved
