"""§7 loader benchmark (the code lives in onemodel_cy/bench.py so that `onemodel-cy bench` runs it too).

Run: python benchmarks/bench_loader.py [--quick] [--repeats N] [--batches N] [--no-peers]
"""
import sys

from onemodel_cy.bench import main

if __name__ == "__main__":
    sys.exit(main())
