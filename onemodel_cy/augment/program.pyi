# Stub of onemodel_cy/augment/program.pyx.
from typing import Any, Dict, Optional, Sequence, Tuple, final

import numpy as np

from onemodel_cy.core.rng import SampleRng

WIDTH_LIMIT: int
HEIGHT_LIMIT: int
MAX_FLOATS: int
LEAF_KINDS: Dict[str, int]
BORDERS: Dict[str, int]

class Transform:
    keeps_shape: bool
    def __call__(self, item: Any, rng: SampleRng) -> Any: ...
    def apply(self, image: np.ndarray, rng: SampleRng) -> np.ndarray: ...

@final
class _Builder:
    @staticmethod
    def leaf(op: Transform, kind: str, args: Tuple[Any, ...], params: Sequence[float], ia: int = 0,
             ib: int = 0, border: str = 'replicate', fill: float = 0.0, keeps_shape: bool = True) -> None: ...
    @staticmethod
    def composite(op: Transform, kind: str, args: Tuple[Any, ...], children: list, p: float = 1.0,
                  bounds: Optional[Sequence[float]] = None) -> None: ...
