# Type stubs for the compiled module onemodel_cy.collate.pacing (the workers' Python-stage baton).
from typing import SupportsIndex

from typing_extensions import disjoint_base

@disjoint_base
class Pacing:
    @property
    def enabled(self) -> bool: ...
    @property
    def wait_ns(self) -> int: ...
    @property
    def stage_parts(self) -> int: ...
    # True while some thread holds the baton.
    @property
    def held(self) -> bool: ...
    def __init__(
        self, enabled: bool = True, wait_ns: SupportsIndex = 1_000_000, stage_parts: SupportsIndex = 2
    ) -> None: ...
    # (After fork, in the child.) Free a baton that a thread of the parent held.
    def forsake_holder(self) -> None: ...
