"""§4/§5 collation benchmark on one thread: the §7 batch against the memory floor.

Run: python benchmarks/bench_collate.py [--repeats 5] [--batches 300]

Prints batches per second of ``ImageBatchCollator.collate_from`` building the §7 batch
(128 images of height 32, widths 64-256, width multiple 4, GainOffset) from an
``ArrayImageDataset``; the floor (the same bytes moved by ``numpy.copyto`` into a reused
buffer: each batch's source pixels, gathered beforehand, read once, and the padded batch
written once); their ratio; bytes allocated per batch on this thread; pool misses after
warm-up.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import tracemalloc


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onemodel_cy as om  # noqa: E402
from onemodel_cy import _alloccount  # noqa: E402
from onemodel_cy.bench import BATCH, COUNT, MULTIPLE, FloorCase, workload_dataset  # noqa: E402


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batches", type=int, default=300)
    args = parser.parse_args(argv)
    _alloccount.install()

    dataset = workload_dataset()
    sampler = om.ShuffledSampler(COUNT, BATCH, seed=0)
    steps = [sampler.indices(0, s) for s in range(sampler.steps_per_epoch)]
    collators = {"GainOffset": om.ImageBatchCollator(MULTIPLE, augmentation=om.GainOffset()),
                 "no augmentation": om.ImageBatchCollator(MULTIPLE)}

    def collate(collator, n):
        for k in range(n):
            s = k % len(steps)
            collator.collate_from(dataset, steps[s], 0, 0, s).close()

    floor = FloorCase(1)
    floor.setup()
    for collator in collators.values():
        collate(collator, 50)  # warm-up: the pool reaches its size classes
    rates = {name: [] for name in ["floor (numpy copy)", *collators]}
    for _ in range(args.repeats):
        rates["floor (numpy copy)"].append(args.batches / floor.run(args.batches))
        for name, collator in collators.items():
            start = time.perf_counter()
            collate(collator, args.batches)
            rates[name].append(args.batches / (time.perf_counter() - start))

    collator = collators["GainOffset"]
    misses = collator.pool.stats()["misses"]
    bytes0, calls0 = _alloccount.thread_allocated()
    tracemalloc.start()
    collate(collator, args.batches)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    bytes1, calls1 = _alloccount.thread_allocated()
    floor_median = statistics.median(rates["floor (numpy copy)"])

    print(f"§7 batch collated on one thread: median (min-max) of {args.repeats} interleaved runs "
          f"of {args.batches} batches")
    for name, r in rates.items():
        med = statistics.median(r)
        print(f"  {name:22s} {med:8,.0f} batches/s  ({min(r):,.0f}-{max(r):,.0f})   {med / floor_median:.2f} x floor")
    print(f"  allocated on this thread per batch (GainOffset): {(bytes1 - bytes0) / args.batches:,.0f} bytes in "
          f"{(calls1 - calls0) / args.batches:.1f} allocations; tracemalloc peak over the run {peak:,} bytes")
    print(f"  pool misses after warm-up: {collator.pool.stats()['misses'] - misses}")


if __name__ == "__main__":
    main()
