"""Hand batches to PyTorch and to JAX without copying.

``torch.from_numpy`` keeps a reference to the array it wraps, and the array keeps the
batch's pooled block alive, so a tensor made here stays valid after ``batch.close()``
and its memory is recycled only once the tensor is gone (§5). The same holds for the JAX
arrays of :func:`to_jax`: DLPack's capsule holds the NumPy array, and the JAX buffer holds
the capsule until it is deleted.

The tensor and array types are annotated ``Any`` so that type-checking code that imports
this module does not make the checker read all of torch or JAX.
"""
from __future__ import annotations

import warnings
from typing import Any, Dict

from onemodel_cy.collate.batch import FIELDS, ImageBatch

__all__ = ["to_torch", "to_jax"]


def to_torch(batch: ImageBatch, *, pin_memory: bool = False, device: Any = None,
             non_blocking: bool = True) -> Dict[str, Any]:
    """The batch's six arrays as a dict of ``torch.Tensor``.

    Parameters
    ----------
    batch : ImageBatch
    pin_memory : bool, default False
        Copy into page-locked memory, for asynchronous host-to-device transfer. Where
        CUDA is not available this warns (a ``UserWarning``, as PyTorch's ``DataLoader``
        does) and goes on without pinning: the tensors then share the batch's memory.
    device : torch.device or str, optional
        Move the tensors there (``non_blocking`` when pinned).
    non_blocking : bool, default True
        Passed to ``Tensor.to`` for pinned tensors.

    Without ``pin_memory`` and ``device`` the tensors share the batch's memory (no copy).
    """
    import torch

    tensors = {name: torch.from_numpy(getattr(batch, name)) for name in FIELDS}
    pinned = False
    if pin_memory:
        if torch.cuda.is_available():
            tensors = {name: t.pin_memory() for name, t in tensors.items()}
            pinned = True
        else:
            warnings.warn("to_torch(pin_memory=True): CUDA is not available here, so the tensors are not "
                          "pinned; they share the batch's memory", UserWarning, stacklevel=2)
    if device is not None:
        tensors = {name: t.to(device, non_blocking=non_blocking and pinned) for name, t in tensors.items()}
    return tensors


def to_jax(batch: ImageBatch, *, device: Any = None) -> Dict[str, Any]:
    """The batch's six arrays as a dict of ``jax.Array``, without a copy where JAX allows.

    Parameters
    ----------
    batch : ImageBatch
    device : jax.Device or jax.sharding.Sharding, optional
        Put the arrays there with ``jax.device_put`` (a transfer, so a copy).

    Each array goes through DLPack (``jax.dlpack.from_dlpack``), which on JAX's CPU
    backend wraps the batch's own memory (the pool's blocks are 64-byte aligned, as XLA
    wants). An array DLPack cannot export (one made read-only: NumPy exports none through
    the DLPack version JAX asks for) is copied with ``jnp.array`` instead. JAX arrays are immutable by contract:
    do not write to the batch's arrays while the JAX arrays made from them are in use.
    """
    import jax
    import jax.numpy as jnp

    arrays = {name: _jax_view(getattr(batch, name), jax, jnp) for name in FIELDS}
    if device is not None:
        arrays = {name: jax.device_put(a, device) for name, a in arrays.items()}
    return arrays


def _jax_view(array, jax, jnp):
    """``array`` as a JAX array sharing its memory, or a copy where DLPack refuses it."""
    try:
        return jax.dlpack.from_dlpack(array)
    except BufferError:     # NumPy exports no read-only array through the DLPack version JAX asks for
        return jnp.array(array)
