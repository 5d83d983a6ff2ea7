# Type stubs for the compiled module onemodel_cy.core.validate (argument checks, one exception rule).
from typing import SupportsIndex

# `value` as an int in [minimum, maximum] (TypeError if not an integer, ValueError if out of range).
def check_integer(
    value: SupportsIndex, name: str, minimum: int | None = None, maximum: int | None = None
) -> int: ...
G_END: int           # 2**63: global steps are [0, G_END)
LONGEST_WAIT: float  # seconds, the longest timeout or join_timeout a DataLoader accepts

# `value` as a global step in [0, 2**63) ([0, 2**63] with end_ok).
def check_global_step(value: SupportsIndex, name: str, end_ok: bool = False) -> int: ...
# `value` as seconds in (0, 1e9] ([0, 1e9] with zero_ok); None passes with none_ok.
def check_seconds(value: float | None, name: str, none_ok: bool, zero_ok: bool) -> float | None: ...
def note_exception(error: BaseException, note: str) -> None: ...
