# Type stubs for the compiled module onemodel_cy.data.packs.pixelmap (a sharded pack's pixel
# files mapped back to back into one read-only range).
from typing import Any, final

import numpy as np
import numpy.typing as npt

# One read-only range of address space over several pixels.npy files (a sharded pack's).
@final
class PixelFiles: ...

# The files of the maps back to back in one range: (array over it, element index of each file's data).
def map_pixel_files(maps: list[np.memmap[Any, Any]]) -> tuple[npt.NDArray[Any], list[int]]: ...
