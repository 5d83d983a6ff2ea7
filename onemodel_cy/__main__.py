import sys

from onemodel_cy.cli import main

sys.exit(main())
