"""``python -m onemodel_cy.cli``, as ``python -m onemodel_cy``."""
import sys

from onemodel_cy.cli import main

sys.exit(main())
