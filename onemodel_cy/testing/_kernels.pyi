# Type stubs for the compiled module onemodel_cy.testing._kernels (the gray 8-bit kernels, tests only).
import numpy as np
import numpy.typing as npt

# (float32 [height, padded], 2 streamed / 1 plain SIMD / 0 portable loop)
def convert_gray8(pixels: object, height: int, width: int, padded: int, scale: float, bias: float,
                  pad: float, streamed: bool, cap: int, misalign: int = 0) -> tuple[npt.NDArray[np.float32], int]: ...
