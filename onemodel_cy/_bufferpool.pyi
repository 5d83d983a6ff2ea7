# Type stubs for the compiled module onemodel_cy._bufferpool (§5 buffer pool).
from typing import SupportsIndex, final

from typing_extensions import disjoint_base

DEFAULT_MAX_BYTES: int

@disjoint_base
class BufferPool:
    @property
    def max_bytes(self) -> int: ...
    def __init__(self, max_bytes: SupportsIndex = 268435456) -> None: ...
    # nbytes in [0, 2**48], count >= 0; returns how many blocks it allocated.
    def reserve(self, nbytes: SupportsIndex, count: SupportsIndex) -> int: ...
    # Keys: hits, misses, reserved, returned, dropped, bytes_held, blocks_in_use, bytes_in_use.
    def stats(self) -> dict[str, int]: ...
    def clear(self) -> None: ...

@final
class Block:
    @property
    def nbytes(self) -> int: ...

# The base of the package's sealed read-only arrays; not constructible from Python.
@final
class SealedMemory:
    def __init__(self) -> None: ...
