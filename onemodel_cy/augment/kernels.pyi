# Stub of onemodel_cy/augment/kernels.pyx: the pixel kernels are C-level; these two serve the conformance kit.
from typing import Any, Tuple

import numpy as np

def contract_function(name: str, values: Any) -> np.ndarray: ...
def contract_normals(state: int, count: int) -> Tuple[np.ndarray, int]: ...
