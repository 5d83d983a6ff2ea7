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

import functools
import warnings
from typing import Any, Dict

from onemodel_cy.collate.batch import FIELDS, ImageBatch

__all__ = ["to_torch", "to_jax", "torch_dataset"]


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


def torch_dataset(loader: Any, *, pin_memory: bool = False, device: Any = None) -> Any:
    """``loader`` as a ``torch.utils.data.IterableDataset``, for code that expects PyTorch's
    ``DataLoader`` (a Lightning ``LightningDataModule.train_dataloader``, a trainer that
    wraps what it is given): ``torch.utils.data.DataLoader(torch_dataset(loader),
    batch_size=None)``.

    Each iteration is one pass of ``for batch in loader`` (the stateful path: one epoch, or
    the rest of it after a resume), each item the batch as :func:`to_torch` gives it, plus
    its ``"global_step"``, ``"epoch"`` and ``"step"``. The stream is the loader's, byte for
    byte. ``state_dict()`` / ``load_state_dict()`` / ``set_epoch()`` are the loader's (the
    ``Stateful`` convention of torchdata), so a checkpoint of the wrapper resumes exactly.

    The loader's own workers build the batches: give torch's ``DataLoader`` no workers
    (``num_workers=0``, its default) and no batching (``batch_size=None``). Iterated in one
    of torch's worker processes it raises ``RuntimeError``: each worker would replay the
    whole stream.
    """
    return _torch_dataset_class()(loader, pin_memory, device)


def _rebuilt_torch_dataset(loader, pin_memory, device):
    return torch_dataset(loader, pin_memory=pin_memory, device=device)


@functools.lru_cache(maxsize=None)
def _torch_dataset_class():
    """The IterableDataset subclass, made when first asked for (torch is an optional extra)."""
    import torch.utils.data

    class LoaderDataset(torch.utils.data.IterableDataset):
        def __init__(self, loader, pin_memory, device):
            self.loader, self.pin_memory, self.device = loader, pin_memory, device

        def __iter__(self):
            if torch.utils.data.get_worker_info() is not None:
                raise RuntimeError("torch_dataset(loader) iterated in a torch DataLoader worker process: give "
                                   "torch's DataLoader num_workers=0 (each of its workers would replay the whole "
                                   "stream); the onemodel_cy DataLoader's own workers= build the batches")
            for batch in self.loader:
                with batch:
                    item = to_torch(batch, pin_memory=self.pin_memory, device=self.device)
                    item.update(global_step=batch.global_step, epoch=batch.epoch, step=batch.step)
                yield item

        def __len__(self):
            """Batches of the next pass (the rest of the epoch the loader stands in)."""
            S = self.loader.steps_per_epoch
            return S - self.loader.state_dict()["next_g"] % S

        def state_dict(self):
            return self.loader.state_dict()

        def load_state_dict(self, state):
            self.loader.load_state_dict(state)

        def set_epoch(self, epoch):
            self.loader.set_epoch(epoch)

        def __repr__(self):
            return f"torch_dataset({self.loader!r})"

        def __reduce__(self):       # (the class is made in a function: pickle by the factory)
            return _rebuilt_torch_dataset, (self.loader, self.pin_memory, self.device)

    LoaderDataset.__qualname__ = LoaderDataset.__name__ = "LoaderDataset"
    LoaderDataset.__module__ = __name__
    return LoaderDataset


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
