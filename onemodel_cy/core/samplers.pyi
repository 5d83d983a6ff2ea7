# Type stubs for the compiled module onemodel_cy.core.samplers (§3 samplers: the base and the range
# samplers; MixingSampler and BucketedSampler are in tablesamplers.pyi).
from collections.abc import Sequence
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

@disjoint_base
class Sampler:
    # A Python subclass defines these two (attributes or properties) and indices(); on the
    # base they raise NotImplementedError naming what to define.
    batch_size: int
    steps_per_epoch: int
    def batch_length(self, step: SupportsIndex) -> int: ...
    # A Python subclass overrides this: a 1-D sequence of 1..batch_size indices in [0, 2**63).
    def indices(
        self, epoch: SupportsIndex, step: SupportsIndex
    ) -> npt.NDArray[np.int64] | Sequence[SupportsIndex]: ...
    # out: writable, aligned, C-contiguous, 1-D native int64 with room for the batch;
    # returns the count written.
    def indices_into(
        self, epoch: SupportsIndex, step: SupportsIndex, out: npt.NDArray[np.int64]
    ) -> int: ...

# Private base shared by SequentialSampler and ShuffledSampler.
@disjoint_base
class _RangeSampler(Sampler):
    @property
    def batch_size(self) -> int: ...  # type: ignore[override]  # read-only here, settable on the base for Python subclasses
    @property
    def steps_per_epoch(self) -> int: ...  # type: ignore[override]  # read-only here, settable on the base for Python subclasses
    @property
    def n(self) -> int: ...
    @property
    def drop_last(self) -> bool: ...
    def __init__(self, n: SupportsIndex, batch_size: SupportsIndex, drop_last: bool) -> None: ...

class SequentialSampler(_RangeSampler):
    def __init__(
        self, n: SupportsIndex, batch_size: SupportsIndex, drop_last: bool = True
    ) -> None: ...
    def __reduce__(self) -> tuple[type[SequentialSampler], tuple[int, int, bool]]: ...

@disjoint_base
class ShuffledSampler(_RangeSampler):
    @property
    def seed(self) -> int: ...
    def __init__(
        self,
        n: SupportsIndex,
        batch_size: SupportsIndex,
        seed: SupportsIndex,
        drop_last: bool = True,
    ) -> None: ...
    def __reduce__(self) -> tuple[type[ShuffledSampler], tuple[int, int, int, bool]]: ...
