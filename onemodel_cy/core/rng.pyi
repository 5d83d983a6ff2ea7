# Type stubs for the compiled module onemodel_cy.core.rng (§2 random numbers).
from typing import SupportsIndex, overload

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

# True when built with ONEMODEL_CY_CHECKS=1.
BUILT_WITH_CHECKS: bool
# The named streams of §2 and of this package, name -> stream number.
STREAMS: dict[str, int]
# The same streams by name.
STREAM_TRANSFORM: int  # 0
STREAM_AUGMENTATION: int  # 1
STREAM_SYNTH_SHAPE: int  # 2
STREAM_SYNTH_PIXELS: int  # 3
STREAM_EPOCH_ORDER: int  # 101
STREAM_MIXING: int  # 102
STREAM_BUCKET_ORDER: int  # 103
STREAM_BUCKET_PLACE: int  # 104

def mix(x: SupportsIndex) -> int: ...
def derive(
    seed: SupportsIndex,
    epoch: SupportsIndex,
    step: SupportsIndex,
    slot: SupportsIndex,
    stream: SupportsIndex,
) -> int: ...

@disjoint_base
class SampleRng:
    # A property over the C state: any integer assigned is reduced mod 2**64 (D3).
    state: int
    def __init__(self, state: SupportsIndex = 0) -> None: ...
    def __reduce__(self) -> tuple[type[SampleRng], tuple[int]]: ...
    @overload
    def next_u64(self, size: None = None) -> int: ...
    @overload
    def next_u64(self, size: SupportsIndex) -> npt.NDArray[np.uint64]: ...
    @overload
    def next_single(self, size: None = None) -> float: ...
    @overload
    def next_single(self, size: SupportsIndex) -> npt.NDArray[np.float32]: ...
    @overload
    def next_double(self, size: None = None) -> float: ...
    @overload
    def next_double(self, size: SupportsIndex) -> npt.NDArray[np.float64]: ...
    @overload
    def next_int(self, n: SupportsIndex, size: None = None) -> int: ...
    @overload
    def next_int(self, n: SupportsIndex, size: SupportsIndex) -> npt.NDArray[np.uint64]: ...
    @overload
    def next_normal(self, size: None = None) -> float: ...
    @overload
    def next_normal(self, size: SupportsIndex) -> npt.NDArray[np.float32]: ...
