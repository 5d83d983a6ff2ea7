# Type stubs for the compiled module onemodel_cy.core.sealed (storage behind read-only arrays).
from typing import final

# The base of the package's sealed read-only arrays; not constructible from Python.
@final
class SealedMemory:
    def __init__(self) -> None: ...
