# Type stubs for the compiled module onemodel_cy.collate.augment (§4 augmentations with a GIL-free kernel).
from typing import SupportsFloat, final

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from onemodel_cy.core.rng import SampleRng

@disjoint_base
class Augmentation:
    # An augmentation without a kernel (a Python subclass) must define its own __call__.
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
