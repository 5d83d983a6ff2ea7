"""How a command reports a user's error: one line on stderr naming what was wrong, and the
exit status (``onemodel_cy.cli``'s docstring gives the rule)."""
from __future__ import annotations

import sys

USAGE, DATA = 2, 1          # exit statuses: a bad command line (argparse's), bad data


def user_error(message, status: int) -> int:
    print(f"onemodel-cy: error: {message}", file=sys.stderr)
    return status
