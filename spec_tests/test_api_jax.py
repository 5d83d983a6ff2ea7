"""Concern: interop with JAX, under §5 (zero-copy views of pooled memory).

``onemodel_cy.interop.to_jax`` hands a batch's six arrays to JAX through DLPack. On the CPU
the JAX arrays must be the batch's own memory (no copy), keep its pooled block from being
recycled while they live, and carry exactly the batch's values; an array DLPack cannot
export is copied instead. ``examples/train_step_jax.py`` trains on the CPU through it.

jax is a test dependency (the ``jax`` extra, which CI installs): a missing jax is a
collection error here, never a skip.
"""

from __future__ import annotations

import gc
import os
import re
import subprocess
import sys

import numpy as np

try:
    import jax
    import jax.numpy as jnp
except ImportError as exc:  # loud on purpose: these tests must run in CI
    raise ImportError("spec_tests/test_api_jax.py needs jax; install the extras with "
                      "`pip install -e '.[test,torch,jax]'`") from exc

import onemodel_cy as om
from onemodel_cy.collate.batch import FIELDS
from onemodel_cy.interop import to_jax
from harness import _guard  # noqa: F401  (autouse: no worker thread may outlive a test)
from harness import ROOT

EXAMPLE = os.path.join(ROOT, "examples", "train_step_jax.py")


def make_loader(workers=0):
    dataset = om.SyntheticLineImages(64, height=4, min_width=3, max_width=19, seed=3)
    collator = om.ImageBatchCollator(width_multiple=4, augmentation=om.GainOffset(0.2, 0.1))
    return om.DataLoader(dataset, om.ShuffledSampler(64, 8, seed=4), collator, seed=5, workers=workers)


def test_to_jax_shares_the_batch_memory_with_its_values():
    """§5, interop: every one of the six JAX arrays is a view of the batch's pooled memory on
    JAX's CPU device (the same address), with the batch's dtype, shape and bytes."""
    with make_loader(workers=2).iter(3, 6) as stream:
        for batch in stream:
            arrays = to_jax(batch)
            assert set(arrays) == set(FIELDS)
            for name in FIELDS:
                mine, theirs = getattr(batch, name), arrays[name]
                assert isinstance(theirs, jax.Array)
                assert theirs.unsafe_buffer_pointer() == mine.ctypes.data, f"{name} was copied"
                assert theirs.dtype == mine.dtype and theirs.shape == mine.shape, name
                assert np.asarray(theirs).tobytes() == mine.tobytes(), name
            assert list(arrays["images"].devices())[0].platform == "cpu"


def test_jax_arrays_outlive_the_batch_and_hold_its_block():
    """§5 (memory returned only once nothing refers to it): after batch.close() the JAX arrays
    keep their values while the pool serves many more batches, the block stays in use until
    the arrays are gone, and then returns to the pool."""
    loader = make_loader()
    pool = loader.collator.pool
    batch = loader.batch_at(0)
    expected = {name: getattr(batch, name).copy() for name in FIELDS}
    arrays = to_jax(batch)
    batch.close()
    del batch
    gc.collect()
    for g in range(1, 30):
        with loader.batch_at(g):
            pass
    assert pool.stats()["blocks_in_use"] == 1, pool.stats()
    for name in FIELDS:
        assert np.asarray(arrays[name]).tobytes() == expected[name].tobytes(), f"{name} changed after close"
    del arrays
    gc.collect()
    assert pool.stats()["blocks_in_use"] == 0, pool.stats()


def test_an_array_dlpack_cannot_export_is_copied():
    """Interop: a read-only array (NumPy exports none through DLPack) is copied with
    jnp.array: the JAX array has the values at another address; the others stay views."""
    batch = make_loader().batch_at(2)
    batch.images.flags.writeable = False
    assert not batch.images.flags.writeable, "the batch hands out a new array each time: the test is moot"
    arrays = to_jax(batch)
    assert arrays["images"].unsafe_buffer_pointer() != batch.images.ctypes.data
    assert np.asarray(arrays["images"]).tobytes() == batch.images.tobytes()
    assert arrays["widths"].unsafe_buffer_pointer() == batch.widths.ctypes.data


def test_to_jax_device_puts_the_arrays_there():
    """Interop: device= places the arrays with jax.device_put (here the CPU device, the only
    one CI has), values unchanged, and they feed jax.numpy directly."""
    batch = make_loader().batch_at(1)
    device = jax.devices("cpu")[0]
    arrays = to_jax(batch, device=device)
    for name in FIELDS:
        assert list(arrays[name].devices()) == [device]
        assert np.asarray(arrays[name]).tobytes() == getattr(batch, name).tobytes()
    doubled = np.asarray(jnp.multiply(arrays["images"], 2.0))      # exact in float32
    assert doubled.tobytes() == (batch.images * np.float32(2.0)).tobytes()


def test_the_jax_training_example_learns_without_copies():
    """Interop (examples/train_step_jax.py): a jitted SGD step fed by the loader (2 workers)
    through to_jax learns its learnable data set on the CPU (loss falls, held-out accuracy at
    least 0.9 after 120 steps) with no batch copied on its way to JAX."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, EXAMPLE, "--steps", "120"], capture_output=True, text=True,
                         timeout=300, env=env, cwd=ROOT)
    assert run.returncode == 0, f"{run.stdout[-2000:]}\n{run.stderr[-3000:]}"
    found = re.search(r"loss ([\d.]+) -> ([\d.]+), held-out accuracy ([\d.]+), .* (\d+) batches copied", run.stdout)
    assert found, run.stdout
    first, last, accuracy, copied = float(found[1]), float(found[2]), float(found[3]), int(found[4])
    assert last < first / 4 and accuracy >= 0.9 and copied == 0, run.stdout
