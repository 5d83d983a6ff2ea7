# Type stubs for the compiled module onemodel_cy.core.tablesamplers (§3 samplers built on
# caller-given tables: MixingSampler, BucketedSampler).
from collections.abc import Iterable, Sequence
from typing import Any, SupportsFloat, SupportsIndex

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from onemodel_cy.core.samplers import Sampler

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
