"""§2/§3 micro-benchmarks: bulk draws, permutation tables and sampler calls against numpy.

Run: python benchmarks/bench_rng.py [--repeats 5]
Prints medians (min-max) of interleaved repetitions and the ratio to numpy's equivalent.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onemodel_cy as om  # noqa: E402
from _timing import interleaved  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    n = 1_000_000
    rng = om.SampleRng(1234567)
    gen = np.random.Generator(np.random.PCG64(1234567))
    draws = {
        "SampleRng.next_u64(size)": (lambda: rng.next_u64(n), n),
        "numpy integers(0, 2**64, uint64)": (lambda: gen.integers(0, 2**64, n, dtype=np.uint64), n),
        "SampleRng.next_double(size)": (lambda: rng.next_double(n), n),
        "numpy random(size)": (lambda: gen.random(n), n),
        "SampleRng.next_int(1000, size)": (lambda: rng.next_int(1000, n), n),
        "numpy integers(0, 1000, size)": (lambda: gen.integers(0, 1000, n), n),
        "SampleRng.next_single(size)": (lambda: rng.next_single(n), n),
        "numpy random(size, float32)": (lambda: gen.random(n, dtype=np.float32), n),
    }
    tables = {}
    for size in (100_000, 1_000_000, (1 << 20) + 1):
        tables[f"om.permutation({size})"] = (lambda size=size: om.permutation(size, 42), 1)
        tables[f"numpy permutation({size})"] = (lambda size=size: gen.permutation(size), 1)
    lengths = np.random.default_rng(0).integers(64, 257, 100_000)
    samplers = {
        "SequentialSampler": om.SequentialSampler(100_000, 128),
        "ShuffledSampler": om.ShuffledSampler(100_000, 128, seed=1),
        "MixingSampler (3 sources)": om.MixingSampler([(0, 50_000, 0.5), (50_000, 30_000, 0.3),
                                                       (80_000, 20_000, 0.2)], 128, 781, seed=1),
        "BucketedSampler (plan cached)": om.BucketedSampler(lengths, 128, 8, seed=1),
    }
    out = np.empty(128, dtype=np.int64)
    calls = {name: (lambda s=s: s.indices_into(3, 7, out), 1) for name, s in samplers.items()}
    bucketed = om.BucketedSampler(lengths, 128, 8, seed=1)
    epochs = iter(range(10**9))
    calls["BucketedSampler plan build (n=100k)"] = (lambda: bucketed.indices_into(next(epochs), 0, out), 1)

    print(f"onemodel_cy bench_rng: median (min-max) of {args.repeats} interleaved runs\n")
    for title, cases, unit in (("draws", draws, "draws/s"), ("permutation tables", tables, "tables/s"),
                               ("sampler indices_into (batch 128)", calls, "calls/s")):
        result = interleaved(cases, args.repeats)
        print(f"## {title} [{unit}]")
        names = list(cases)
        for name in names:
            med, lo, hi = result[name]
            line = f"  {name:40s} {med:14,.0f}  ({lo:,.0f}-{hi:,.0f})"
            if name.startswith(("SampleRng", "om.")):
                partner = names[names.index(name) + 1]
                line += f"   x{med / result[partner][0]:.2f} vs numpy"
            print(line)
        print()


if __name__ == "__main__":
    main()
