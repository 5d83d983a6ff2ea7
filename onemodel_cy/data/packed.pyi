# Type stubs for the compiled module onemodel_cy.data.packed (a memory-mapped pack, docs/packed-format.md).
import os
from collections.abc import Sequence
from typing import Any, SupportsIndex

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from onemodel_cy.data.datasets import PackedSource, Sample

VERIFY: tuple[str, str]
DEFAULT_RESIDENT_LIMIT: int
KIND_CODES: dict[str, int]

_Constants = float | Sequence[float]

# §6's float32 [scale0..2, bias0..2] (D15) for `channels` (1 or 3) channels.
def planar_constants(mean: _Constants, std: _Constants, channels: int) -> npt.NDArray[np.float32]: ...

@disjoint_base
class PackedImageDataset(PackedSource):
    @property
    def count(self) -> int: ...
    @property
    def path(self) -> str: ...
    # "gray8", "rgb8" or "float32"
    @property
    def pixel_kind(self) -> str: ...
    @property
    def manifest(self) -> dict[str, Any]: ...
    @property
    def mean(self) -> _Constants | None: ...
    @property
    def std(self) -> _Constants | None: ...
    @property
    def verify(self) -> str: ...
    # Bytes of pixels the fast path reads between automatic releases (None: never).
    @property
    def resident_limit(self) -> int | None: ...
    @property
    def pages_released(self) -> int: ...
    # Opens once: a second call raises RuntimeError. Raises PackError (a ValueError) naming the file.
    def __init__(
        self,
        path: str | os.PathLike[str],
        mean: _Constants | None = None,
        std: _Constants | None = None,
        verify: str = "index",
        resident_limit: int | None = ...,
    ) -> None: ...
    def __len__(self) -> int: ...
    # Reopens the pack in the unpickling process.
    def __reduce__(self) -> tuple[Any, tuple[str, Any, Any, str, int | None]]: ...
    def get_sample(self, index: SupportsIndex) -> Sample: ...
    def __getitem__(self, index: SupportsIndex, /) -> Sample: ...
    def key(self, index: SupportsIndex) -> str | None: ...
    # madvise(MADV_DONTNEED) of the pixel mapping, now.
    def release_pages(self) -> bool: ...
    @property
    def vocabulary(self) -> list[str] | None: ...
    @property
    def widths(self) -> npt.NDArray[np.int64]: ...
    @property
    def shapes(self) -> npt.NDArray[np.int64]: ...

def reopen(
    path: str, mean: _Constants | None, std: _Constants | None, verify: str,
    resident_limit: int | None = ...,
) -> PackedImageDataset: ...

PACKED_GET_SAMPLE: Any
