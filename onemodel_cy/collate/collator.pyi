# Type stubs for the compiled module onemodel_cy.collate.collator (§4 collation).
from collections.abc import Callable, Sequence
from typing import Any, SupportsFloat, SupportsIndex, final

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from onemodel_cy.augment.program import Transform
from onemodel_cy.collate.augment import Augmentation
from onemodel_cy.collate.batch import ImageBatch
from onemodel_cy.collate.bufferpool import BufferPool
from onemodel_cy.data.datasets import Sample
from onemodel_cy.collate.pacing import Pacing
from onemodel_cy.collate.profile import StageClock
from onemodel_cy.core.rng import SampleRng

# Image bytes from which a batch of 8-bit pixels without augmentation is streamed.
STREAMED_BATCH_BYTES: int

# The gray 8-bit kernel level this CPU runs (2 AVX-512, 1 AVX2, 0 portable); with `cap`,
# lower the level used (tests) and return the previous cap.
def streamed_bytes(nbytes: SupportsIndex | None = None) -> int: ...
def simd_kernels(cap: SupportsIndex | None = None) -> int: ...

# aug(image, rng) edits a contiguous float32 [C, H, W] scratch in place (returns None or it).
_AugmentationFn = Callable[[npt.NDArray[np.float32], SampleRng], npt.NDArray[np.float32] | None]

@final
class Workspace:
    # int64 [batch_size], filled by the sampler
    @property
    def indices(self) -> npt.NDArray[np.int64]: ...
    @property
    def pacing(self) -> Pacing | None: ...
    @property
    def clock(self) -> StageClock | None: ...
    def __init__(
        self, batch_size: SupportsIndex = 0, pacing: Pacing | None = None, clock: StageClock | None = None
    ) -> None: ...

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
    # The augmentation when it is a built-in of onemodel_cy.augment (run with the transform).
    @property
    def program(self) -> Transform | None: ...
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
        workspace: Workspace | None = None,
    ) -> ImageBatch: ...
