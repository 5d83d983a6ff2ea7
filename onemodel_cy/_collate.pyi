# Type stubs for the compiled module onemodel_cy._collate (§4 collation).
from collections.abc import Callable, Sequence
from typing import Any, Literal, SupportsFloat, SupportsIndex, final

import numpy as np
import numpy.typing as npt
from typing_extensions import Self, disjoint_base

from onemodel_cy._bufferpool import BufferPool
from onemodel_cy._datasets import ArrayImageDataset, Sample
from onemodel_cy._rng import SampleRng

# aug(image, rng) edits a contiguous float32 [C, H, W] scratch in place (returns None or it).
_AugmentationFn = Callable[[npt.NDArray[np.float32], SampleRng], npt.NDArray[np.float32] | None]

@disjoint_base
class Augmentation:
    # Only the built-ins have a kernel; a Python subclass must define its own __call__.
    def __call__(self, image: npt.NDArray[np.float32], rng: SampleRng) -> None: ...

@final
class GainOffset(Augmentation):
    @property
    def gain(self) -> float: ...
    @property
    def offset(self) -> float: ...
    def __init__(self, gain: SupportsFloat = 0.2, offset: SupportsFloat = 0.1) -> None: ...
    def __reduce__(self) -> tuple[type[GainOffset], tuple[float, float]]: ...

@final
class GaussianNoise(Augmentation):
    @property
    def sigma(self) -> float: ...
    def __init__(self, sigma: SupportsFloat = 0.05) -> None: ...
    def __reduce__(self) -> tuple[type[GaussianNoise], tuple[float]]: ...

# The types whose kernel runs without the GIL.
BUILTIN_AUGMENTATIONS: tuple[type[GainOffset], type[GaussianNoise]]

@final
class ImageBatch:
    # The epoch and step-in-epoch objects given to collate()/collate_from().
    @property
    def epoch(self) -> Any: ...
    @property
    def step(self) -> Any: ...
    # Set by the loader.
    global_step: int | None
    @property
    def closed(self) -> bool: ...
    @property
    def nbytes(self) -> int: ...
    # The array properties raise ValueError once the batch is closed.
    @property
    def images(self) -> npt.NDArray[np.float32]: ...
    @property
    def widths(self) -> npt.NDArray[np.int32]: ...
    @property
    def targets(self) -> npt.NDArray[np.int32]: ...
    @property
    def target_lengths(self) -> npt.NDArray[np.int32]: ...
    @property
    def labels(self) -> npt.NDArray[np.int32]: ...
    @property
    def indices(self) -> npt.NDArray[np.int32]: ...
    def __len__(self) -> int: ...
    def close(self) -> None: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *exc: object) -> Literal[False]: ...
    def as_dict(self) -> dict[str, npt.NDArray[Any]]: ...

@disjoint_base
class ImageBatchCollator:
    @property
    def width_multiple(self) -> int: ...
    @property
    def pad_value(self) -> float: ...
    @property
    def augmentation(self) -> Augmentation | _AugmentationFn | None: ...
    @property
    def pool(self) -> BufferPool: ...
    def __init__(
        self,
        width_multiple: SupportsIndex = 1,
        pad_value: SupportsFloat = 0.0,
        augmentation: Augmentation | _AugmentationFn | None = None,
        pool: BufferPool | None = None,
    ) -> None: ...
    def collate(
        self,
        samples: Sequence[Sample],
        indices: Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]],
        seed: SupportsIndex,
        epoch: SupportsIndex,
        step: SupportsIndex,
        *,
        first_slot: int = 0,
    ) -> ImageBatch: ...
    # indices: the global batch's C-contiguous 1-D int64 array; slots [start, stop) are gathered.
    def collate_from(
        self,
        dataset: ArrayImageDataset,
        indices: npt.NDArray[np.int64],
        seed: SupportsIndex,
        epoch: SupportsIndex,
        step: SupportsIndex,
        *,
        start: SupportsIndex = 0,
        stop: SupportsIndex | None = None,
    ) -> ImageBatch: ...
    # The generic path: slots [start, stop) of indices read with dataset.get_sample (any
    # object with get_sample(index) -> Sample), each through
    # transform(sample, SampleRng(derive(seed, epoch, step, slot, 0))) when given.
    def collate_dataset(
        self,
        dataset: Any,
        indices: npt.NDArray[np.int64],
        seed: SupportsIndex,
        epoch: SupportsIndex,
        step: SupportsIndex,
        *,
        start: SupportsIndex = 0,
        stop: SupportsIndex | None = None,
        transform: Callable[[Sample, SampleRng], Sample] | None = None,
        global_step: int | None = None,
    ) -> ImageBatch: ...
