# Type stubs for the compiled module onemodel_cy.core.permute (§3 keyed permutation).
from typing import SupportsIndex

import numpy as np
import numpy.typing as npt

def keyed_permutation(p: SupportsIndex, n: SupportsIndex, key: SupportsIndex) -> int: ...
def permutation(n: SupportsIndex, key: SupportsIndex) -> npt.NDArray[np.int64]: ...
