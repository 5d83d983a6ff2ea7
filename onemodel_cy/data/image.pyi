# Type stubs for the compiled module onemodel_cy.data.image (§6 image helpers).
from collections.abc import Sequence
from typing import Any, SupportsFloat, SupportsIndex

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer

# src: a uint8 array [H, W], or any bytes-like buffer with width=, height= (and stride=).
# out: a writable, aligned, C-contiguous native float32 [1, H, W] (TypeError otherwise;
# ValueError for another shape).
def gray8_to_planar(
    src: npt.NDArray[np.uint8] | Buffer,
    mean: SupportsFloat,
    std: SupportsFloat,
    *,
    width: SupportsIndex | None = None,
    height: SupportsIndex | None = None,
    stride: SupportsIndex | None = None,
    out: npt.NDArray[np.float32] | None = None,
) -> npt.NDArray[np.float32]: ...

# src: a uint8 array [H, W, 3], or any bytes-like buffer; mean/std: one number or one per channel.
# out: as for gray8_to_planar, of shape [3, H, W].
def rgb8_to_planar(
    src: npt.NDArray[np.uint8] | Buffer,
    mean: SupportsFloat | Sequence[SupportsFloat] | npt.NDArray[Any],
    std: SupportsFloat | Sequence[SupportsFloat] | npt.NDArray[Any],
    *,
    width: SupportsIndex | None = None,
    height: SupportsIndex | None = None,
    stride: SupportsIndex | None = None,
    out: npt.NDArray[np.float32] | None = None,
) -> npt.NDArray[np.float32]: ...
