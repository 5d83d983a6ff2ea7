"""Hand batches to PyTorch without copying.

``torch.from_numpy`` keeps a reference to the array it wraps, and the array keeps the
batch's pooled block alive, so a tensor made here stays valid after ``batch.close()``
and its memory is recycled only once the tensor is gone (§5).
"""
from __future__ import annotations

from onemodel_cy._batch import FIELDS


def to_torch(batch, *, pin_memory=False, device=None, non_blocking=True):
    """The batch's six arrays as a dict of ``torch.Tensor``.

    Parameters
    ----------
    batch : ImageBatch
    pin_memory : bool, default False
        Copy into page-locked memory (only meaningful where CUDA exists; an error otherwise),
        for asynchronous host-to-device transfer.
    device : torch.device or str, optional
        Move the tensors there (``non_blocking`` when pinned).

    Without ``pin_memory`` and ``device`` the tensors share the batch's memory (no copy).
    """
    import torch

    tensors = {name: torch.from_numpy(getattr(batch, name)) for name in FIELDS}
    if pin_memory:
        if not torch.cuda.is_available():
            raise RuntimeError("pin_memory=True needs CUDA, and torch.cuda.is_available() is False here")
        tensors = {name: t.pin_memory() for name, t in tensors.items()}
    if device is not None:
        tensors = {name: t.to(device, non_blocking=non_blocking and pin_memory) for name, t in tensors.items()}
    return tensors
