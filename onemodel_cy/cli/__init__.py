"""``onemodel-cy`` / ``python -m onemodel_cy``: the demo job and the conformance suite.

The benchmark harness is not part of the installed package: it lives in ``benchmarks/`` of
a source checkout, and ``onemodel-cy bench`` only says how to run it.

A user's error (a missing folder, a bad labels file, an existing output) is one line on
stderr, ``onemodel-cy: error: <message>`` naming the file, and exit status 2 for the
command line (as argparse) or 1 for the data; an unexpected exception keeps its traceback.
"""
from __future__ import annotations

import argparse
import sys

# Each command's options and handler are a module of this folder (demo, pack, show; errors.py
# reports a user's error); `bench` and `conformance` are parsed where they run.
from onemodel_cy.cli.demo import add_demo_parser, run_demo
from onemodel_cy.cli.pack import add_pack_parser, run_pack
from onemodel_cy.cli.show import add_show_parser, run_show


BENCH_HOWTO = """The benchmarks are not installed with the package. In a source checkout, with the package
importable from it (pip install -e . there, or python setup.py build_ext --inplace and
PYTHONPATH=.), run:

  python benchmarks/bench_loader.py{args}
      the §7 workload: memory floor, this loader, the training-loop patterns, peers
      (--help lists --quick, --only loader|epochs|fresh|peers|scaling, --out)
  python benchmarks/bench_collate.py
      §4/§5 collation on one thread
  python benchmarks/bench_rng.py
      §2/§3 micro-benchmarks"""


def _bench(argv) -> int:
    """Say how to run the benchmark harness (it lives in the checkout, not in the package)."""
    print(BENCH_HOWTO.format(args="".join(f" {a}" for a in argv)))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    # `bench` and `conformance` own their options: hand them the rest of the line.
    if argv and argv[0] == "bench":
        return _bench(argv[1:])
    if argv and argv[0] == "conformance":
        from onemodel_cy.conformance.checker import main as conformance_main
        return conformance_main(argv[1:])

    parser = argparse.ArgumentParser(prog="onemodel-cy", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add_demo_parser(commands)
    commands.add_parser("bench", help="how to run the benchmarks from a source checkout")
    commands.add_parser("conformance", help="known-answer vectors for ports, and the checker (--help)")
    add_pack_parser(commands)
    add_show_parser(commands)
    args = parser.parse_args(argv)
    if args.command == "pack":
        return run_pack(args)
    if args.command == "show":
        return run_show(parser, args)
    return run_demo(parser, args)
