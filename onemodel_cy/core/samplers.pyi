# Type stubs for the compiled module onemodel_cy.core.samplers (§3 samplers).
from collections.abc import Iterable, Sequence
from typing import Any, SupportsFloat, SupportsIndex

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

@disjoint_base
class MixingSampler(Sampler):
    @property
    def batch_size(self) -> int: ...  # type: ignore[override]  # read-only here, settable on the base for Python subclasses
    @property
    def steps_per_epoch(self) -> int: ...  # type: ignore[override]  # read-only here, settable on the base for Python subclasses
    @property
    def seed(self) -> int: ...
    # The parsed (start, size, share) of every source, in the order given.
    @property
    def sources(self) -> tuple[tuple[int, int, float], ...]: ...
    def __init__(
        self,
        sources: Iterable[tuple[SupportsIndex, SupportsIndex, SupportsFloat]],
        batch_size: SupportsIndex,
        steps_per_epoch: SupportsIndex,
        seed: SupportsIndex,
    ) -> None: ...
    def __reduce__(
        self,
    ) -> tuple[type[MixingSampler], tuple[list[tuple[int, int, float]], int, int, int]]: ...

@disjoint_base
class BucketedSampler(Sampler):
    @property
    def batch_size(self) -> int: ...  # type: ignore[override]  # read-only here, settable on the base for Python subclasses
    @property
    def steps_per_epoch(self) -> int: ...  # type: ignore[override]  # read-only here, settable on the base for Python subclasses
    @property
    def seed(self) -> int: ...
    @property
    def n(self) -> int: ...
    @property
    def pool_batches(self) -> int: ...
    # Read-only int64 copy of the lengths given.
    @property
    def lengths(self) -> npt.NDArray[np.int64]: ...
    def __init__(
        self,
        lengths: Sequence[SupportsIndex] | npt.NDArray[np.integer[Any]],
        batch_size: SupportsIndex,
        pool_batches: SupportsIndex,
        seed: SupportsIndex,
    ) -> None: ...
    def __reduce__(
        self,
    ) -> tuple[type[BucketedSampler], tuple[npt.NDArray[np.int64], int, int, int]]: ...
