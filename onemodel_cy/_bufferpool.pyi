# Type stubs for the compiled module onemodel_cy._bufferpool (§5 buffer pool).
from typing import final

from typing_extensions import disjoint_base

DEFAULT_MAX_BYTES: int

@disjoint_base
class BufferPool:
    @property
    def max_bytes(self) -> int: ...
    def __init__(self, max_bytes: int = 268435456) -> None: ...
    # Keys: hits, misses, returned, dropped, bytes_held, blocks_in_use, bytes_in_use.
    def stats(self) -> dict[str, int]: ...
    def clear(self) -> None: ...

@final
class Block:
    @property
    def nbytes(self) -> int: ...
    @property
    def address(self) -> int: ...
