# Type stubs for the compiled module onemodel_cy.core.validate (argument checks, one exception rule).
from typing import SupportsIndex

# `value` as an int in [minimum, maximum] (TypeError if not an integer, ValueError if out of range).
def check_integer(
    value: SupportsIndex, name: str, minimum: int | None = None, maximum: int | None = None
) -> int: ...
def note_exception(error: BaseException, note: str) -> None: ...
