"""Concern: interop with torch, under §5 (zero-copy views of pooled memory) and §1 (ranks).

A batch's arrays are views of one pooled block. A tensor made from them must share that
memory (no copy), and the pool must not hand the block to another batch while the tensor
lives. Under ``torchrun`` every rank loads only its share, and the shares side by side are
the global batch (``examples/torchrun_ranks.py``, run here on CPU with gloo).

torch is a test dependency (the ``torch`` extra, pinned ``torch==2.13.0``, which CI
installs): a missing torch is a collection error here, never a skip.
"""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import numpy as np
import pytest

try:
    import torch
except ImportError as exc:  # loud on purpose: these tests must run in CI
    raise ImportError("spec_tests/test_api_torch.py needs torch; install the test extras with "
                      "`pip install -e '.[test,torch]'` (torch==2.13.0)") from exc

import onemodel_cy as om
from onemodel_cy import interop
from onemodel_cy.conformance.codec import BATCH_FIELDS as FIELDS

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
EXAMPLE = os.path.join(ROOT, "examples", "torchrun_ranks.py")


def make_loader(workers=0, prefetch=2, augmentation=None):
    dataset = om.SyntheticLineImages(64, height=4, min_width=3, max_width=20, seed=3)
    sampler = om.ShuffledSampler(len(dataset), 8, seed=1)
    collator = om.ImageBatchCollator(width_multiple=4, pad_value=-1.0,
                                     augmentation=augmentation or om.GainOffset())
    return om.DataLoader(dataset, sampler, collator, seed=7, workers=workers, prefetch=prefetch)


def address(array):
    return array.__array_interface__["data"][0]


def block_range(batch):
    """[lowest, highest) byte addresses covered by the batch's six arrays (one pooled block)."""
    arrays = [getattr(batch, name) for name in FIELDS]
    return (min(address(a) for a in arrays),
            max(address(a) + a.nbytes for a in arrays))


def overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1]


def test_from_numpy_shares_the_batch_memory():
    """Concern: interop with torch (§5: zero-copy views). torch.from_numpy on a batch's
    arrays copies nothing: the tensor and the array are the same memory, and a write through
    either is seen by the other."""
    loader = make_loader(workers=2)
    with loader.iter(3, 5) as stream:
        for batch in stream:
            for name in FIELDS:
                array = getattr(batch, name)
                tensor = torch.from_numpy(array)
                assert tensor.data_ptr() == address(array), f"{name}: torch.from_numpy copied"
                assert tensor.dtype == (torch.float32 if name == "images" else torch.int32)
                assert tuple(tensor.shape) == array.shape
                if array.size:
                    flat = tensor.reshape(-1)
                    flat[0] = 77
                    assert array.reshape(-1)[0] == 77, f"{name}: a write to the tensor is not seen by the batch"
                    array.reshape(-1)[-1] = 55
                    assert int(flat[-1]) == 55, f"{name}: a write to the batch is not seen by the tensor"


def test_a_block_is_not_reused_while_a_tensor_holds_it():
    """Concern: interop with torch (§5: held memory is never reused). A tensor keeps the
    batch's pooled block alive: after batch.close(), many more batches of the same size never
    land in that memory and the tensor's bytes do not change; once the tensor is gone the pool
    recycles the block."""
    loader = make_loader()
    batch = loader.batch_at(5)
    tensor = torch.from_numpy(batch.images)
    snapshot = tensor.clone()
    held = block_range(batch)
    batch.close()
    del batch
    gc.collect()
    for _ in range(40):
        other = loader.batch_at(5)            # same shape: same size class of the pool
        assert not overlaps(block_range(other), held), "a live tensor's memory was handed to a new batch"
        other.close()
        del other
    assert torch.equal(tensor.view(torch.int32), snapshot.view(torch.int32)), "the tensor's bytes changed"

    start = held[0]
    del tensor
    gc.collect()
    first, second = loader.batch_at(5), loader.batch_at(5)
    assert start in (block_range(first)[0], block_range(second)[0]), (
        "after the tensor was dropped the pool did not recycle its block (the check above proves nothing)")


def test_tensors_kept_from_a_running_stream_stay_intact():
    """Concern: interop with torch (§5 under §1 workers). Tensors taken from a stream
    with worker threads stay valid and unchanged while the stream keeps building (and
    recycling) later batches."""
    loader = make_loader(workers=4, prefetch=4)
    kept = []
    with loader.iter(0, 40) as stream:
        for batch in stream:
            if batch.global_step % 5 == 0:
                t = torch.from_numpy(batch.images)
                kept.append((batch.global_step, t, t.clone()))
            batch.close()
    for g, tensor, snapshot in kept:
        assert torch.equal(tensor.view(torch.int32), snapshot.view(torch.int32)), f"step {g} was overwritten"
        expected = loader.batch_at(g).images
        assert tensor.numpy().tobytes() == expected.tobytes()


def test_interop_to_torch_shares_memory():
    """Concern: interop with torch (§5: zero-copy views). interop.to_torch gives the six arrays
    as tensors over the same memory (no copy) that stay valid after the batch is closed and more
    batches are built."""
    loader = make_loader()
    batch = loader.batch_at(9)
    arrays = {name: np.array(getattr(batch, name)) for name in FIELDS}
    tensors = interop.to_torch(batch, pin_memory=False)
    assert set(tensors) == set(FIELDS)
    for name in FIELDS:
        t = tensors[name]
        assert isinstance(t, torch.Tensor)
        assert t.data_ptr() == address(getattr(batch, name)), f"{name}: to_torch copied"
        assert t.dtype == (torch.float32 if name == "images" else torch.int32)
        assert t.numpy().tobytes() == arrays[name].tobytes()
    batch.close()
    del batch
    for _ in range(10):
        loader.batch_at(9).close()
    for name in FIELDS:
        assert tensors[name].numpy().tobytes() == arrays[name].tobytes(), f"{name} changed after close"


def test_interop_pin_memory_only_where_cuda_exists():
    """Concern: interop with torch (pinned memory). pin_memory=True pins the tensors where CUDA
    exists; where it does not, it warns (a UserWarning, shown by default, as torch's own
    DataLoader does) and goes on with unpinned tensors that share the batch's memory (issue 10
    changed this from an error)."""
    batch = make_loader().batch_at(2)
    if torch.cuda.is_available():
        tensors = interop.to_torch(batch, pin_memory=True)
        for name in FIELDS:
            assert tensors[name].is_pinned(), name
            assert tensors[name].numpy().tobytes() == getattr(batch, name).tobytes()
    else:
        with pytest.warns(UserWarning, match="CUDA is not available"):
            tensors = interop.to_torch(batch, pin_memory=True)
        for name in FIELDS:
            array = getattr(batch, name)
            assert not tensors[name].is_pinned(), name
            assert tensors[name].data_ptr() == array.ctypes.data, f"{name} was copied"
            assert tensors[name].numpy().tobytes() == array.tobytes()


def _torchrun(*extra, timeout=120):
    env = dict(os.environ, OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    return subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--standalone",
                           EXAMPLE, *extra], capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)


def test_torchrun_ranks_example_matches_the_global_batch():
    """Concern: interop with torch (§1: ranks). Under torchrun (2 CPU processes, gloo) each
    rank loads only its share of each batch, and the shares gathered side by side equal the
    batch built in one process with world size 1."""
    run = _torchrun()
    assert run.returncode == 0, f"torchrun failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
    assert "torchrun_ranks: OK: world size 2" in run.stdout, run.stdout


def test_torchrun_ranks_example_detects_a_mismatch():
    """Concern: interop with torch (§1: ranks). The example's check can fail: a rank built
    with another seed makes it exit non-zero."""
    run = _torchrun("--perturb-rank", "1", "--steps", "2")
    assert run.returncode != 0, f"a perturbed rank went unnoticed:\n{run.stdout[-3000:]}"
    assert "MISMATCH" in run.stdout + run.stderr


def test_torchrun_ranks_example_resumes_elastically(tmp_path):
    """Concern: interop with torch (§1 ranks, issue 10 elastic resume). Four torchrun ranks
    check their shares for 4 steps and save rank 0's checkpoint; two ranks resume from it at
    the saved step, and their shares are again exactly the global batches an uninterrupted
    world-size-1 run builds."""
    state = tmp_path / "ranks.json"

    def torchrun(nproc, *extra):
        env = dict(os.environ, OMP_NUM_THREADS="1",
                   PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
        run = subprocess.run([sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={nproc}",
                              "--standalone", EXAMPLE, "--workers", "1", *extra], capture_output=True, text=True,
                             timeout=180, env=env, cwd=ROOT)
        assert run.returncode == 0, f"torchrun failed ({run.returncode}):\n{run.stdout[-3000:]}\n{run.stderr[-5000:]}"
        return run.stdout

    saved = torchrun(4, "--steps", "4", "--save-state", str(state))
    assert "OK: world size 4, steps 8..11" in saved, saved
    resumed = torchrun(2, "--steps", "10", "--resume", str(state))
    assert "resumed at step 12 from a state saved at world size 4" in resumed, resumed
    assert "OK: world size 2, steps 12..21" in resumed, resumed


def test_torch_dataset_feeds_a_torch_dataloader_with_the_exact_stream_and_its_checkpoint():
    """Concern: a PyTorch-shaped entry point. ``torch.utils.data.DataLoader(torch_dataset(loader),
    batch_size=None)``: each pass is one epoch of the loader, every tensor the bytes of
    ``batch_at(g)``; its ``state_dict`` taken mid-epoch resumes, in a new loader and a new
    torch DataLoader, at the next step (the rest of that epoch, then the next)."""
    loader = make_loader(workers=2)
    check = make_loader()
    S = loader.steps_per_epoch
    wrapped = interop.torch_dataset(loader)
    assert isinstance(wrapped, torch.utils.data.IterableDataset) and len(wrapped) == S
    feed = torch.utils.data.DataLoader(wrapped, batch_size=None)
    seen = []
    for epoch in range(2):
        for item in feed:
            g = item["global_step"]
            assert item["epoch"] == g // S == epoch and item["step"] == g % S
            expected = check.batch_at(g)
            for name in FIELDS:
                assert isinstance(item[name], torch.Tensor)
                assert item[name].numpy().tobytes() == getattr(expected, name).tobytes(), (g, name)
            seen.append(g)
    assert seen == list(range(2 * S))
    # A checkpoint mid-epoch: three batches into the third epoch.
    for k, item in enumerate(feed):
        if k == 2:
            state = wrapped.state_dict()
            break
    loader.close()
    assert state["next_g"] == 2 * S + 3
    resumed_loader = make_loader(workers=2)
    resumed = interop.torch_dataset(resumed_loader)
    resumed.load_state_dict(state)
    assert len(resumed) == S - 3
    rest = [item["global_step"] for item in torch.utils.data.DataLoader(resumed, batch_size=None)]
    assert rest == list(range(2 * S + 3, 3 * S))
    resumed.set_epoch(4)
    assert [item["global_step"] for item in resumed][:2] == [4 * S, 4 * S + 1]
    resumed_loader.close()


def test_torch_dataset_refuses_torch_workers():
    """Iterated by torch's worker processes, each would replay the whole stream: refused,
    naming num_workers=0."""
    loader = make_loader()
    feed = torch.utils.data.DataLoader(interop.torch_dataset(loader), batch_size=None, num_workers=1,
                                       multiprocessing_context="spawn")
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(iter(feed))
