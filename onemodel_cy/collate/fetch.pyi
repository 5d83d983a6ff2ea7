# Type stubs for the compiled module onemodel_cy.collate.fetch (§1 the loader's fetch step).
from collections.abc import Callable
from typing import Any, Literal, SupportsIndex

import numpy as np
import numpy.typing as npt

from onemodel_cy.collate.batch import ImageBatch
from onemodel_cy.collate.collator import ImageBatchCollator, Workspace
from onemodel_cy.data.datasets import Sample
from onemodel_cy.core.rng import SampleRng

ROUTES: tuple[None, str, str]

# Slots [start, stop) of the global batch `indices`, fetched from `dataset` and collated.
def build_batch(
    collator: ImageBatchCollator,
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
    workspace: Workspace | None = None,
    route: Literal["packed", "samples"] | None = None,
) -> ImageBatch: ...
