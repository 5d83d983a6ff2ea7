# Type stubs for the compiled module onemodel_cy.data.datasets (samples and built-in datasets).
from collections.abc import Iterable, Iterator, Sequence
from typing import Any, SupportsIndex

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

# A 1-D sequence of integers in [0, 2**31).
_Target = Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]]

# Base of the datasets that offer a packed view the loader gathers without the GIL.
@disjoint_base
class PackedSource: ...


@disjoint_base
class Sample:
    # float32 [C, H, W], read-only for good: a view of the caller's (aligned, native)
    # memory, or an aligned copy of a misaligned or byte-swapped image.
    @property
    def image(self) -> npt.NDArray[np.float32]: ...
    # int32 [L], values >= 0: a sealed copy of the target given.
    @property
    def target(self) -> npt.NDArray[np.int32]: ...
    # int in the int32 range
    @property
    def label(self) -> int: ...
    # Initialises once: a second call raises RuntimeError.
    def __init__(
        self, image: npt.NDArray[np.float32], target: _Target, label: SupportsIndex
    ) -> None: ...
    # Yields image, target, label.
    def __iter__(self) -> Iterator[npt.NDArray[Any] | int]: ...
    def __reduce__(
        self,
    ) -> tuple[type[Sample], tuple[npt.NDArray[np.float32], npt.NDArray[np.int32], int]]: ...

@disjoint_base
class ArrayImageDataset(PackedSource):
    @property
    def count(self) -> int: ...
    # images: float32 arrays [C, H, W_i], or one float32 array [N, C, H, W].
    # Initialises once: a second call raises RuntimeError.
    def __init__(
        self,
        images: Iterable[npt.NDArray[np.float32]] | npt.NDArray[np.float32],
        targets: Iterable[_Target],
        labels: Iterable[SupportsIndex],
    ) -> None: ...
    def __len__(self) -> int: ...
    # Rebuilds through the constructor (a subclass defines its own).
    def __reduce__(
        self,
    ) -> tuple[
        type[ArrayImageDataset],
        tuple[list[npt.NDArray[np.float32]], list[npt.NDArray[np.int32]], list[int]],
    ]: ...
    def get_sample(self, index: SupportsIndex) -> Sample: ...
    def __getitem__(self, index: SupportsIndex, /) -> Sample: ...
    # int64 [count], a fresh copy
    @property
    def widths(self) -> npt.NDArray[np.int64]: ...
    # int64 [count, 3] of (C, H, W), read-only for good (sealed storage)
    @property
    def shapes(self) -> npt.NDArray[np.int64]: ...

@disjoint_base
class SyntheticLineImages(ArrayImageDataset):
    @property
    def height(self) -> int: ...
    @property
    def min_width(self) -> int: ...
    @property
    def max_width(self) -> int: ...
    @property
    def channels(self) -> int: ...
    @property
    def seed(self) -> int: ...
    def __init__(
        self,
        count: SupportsIndex,
        height: SupportsIndex = 32,
        min_width: SupportsIndex = 64,
        max_width: SupportsIndex = 256,
        channels: SupportsIndex = 1,
        seed: SupportsIndex = 0,
    ) -> None: ...
    def __reduce__(  # type: ignore[override]  # rebuilt from its parameters, not its arrays
        self,
    ) -> tuple[type[SyntheticLineImages], tuple[int, int, int, int, int, int]]: ...
