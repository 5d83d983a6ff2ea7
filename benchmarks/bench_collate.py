"""§4/§5 collation benchmark on one thread: the §7 batch against the memory floor.

Run: python benchmarks/bench_collate.py [--repeats 5] [--batches 300]

Prints batches per second of the loader's fetch step (``_fetch.build_batch``, the packed
route) and the collator building the §7 batch
(128 images of height 32, widths 64-256, width multiple 4, GainOffset) from an
``ArrayImageDataset``; the floor (the same bytes moved by ``numpy.copyto`` into a reused
buffer: each batch's source pixels, gathered beforehand, read once, and the padded batch
written once); their ratio; bytes allocated per batch on this thread; pool misses after
warm-up.
"""
from __future__ import annotations

import argparse
import os
import sys
import tracemalloc

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onemodel_cy as om  # noqa: E402
from _timing import round_robin, seconds, summary  # noqa: E402
from onemodel_cy.collate.fetch import build_batch  # noqa: E402
from onemodel_cy.testing import _alloccount  # noqa: E402
from workload import BATCH, COUNT, MULTIPLE, FloorCase, workload_dataset  # noqa: E402


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
            build_batch(collator, dataset, steps[s], 0, 0, s, route="packed").close()

    floor = FloorCase(1)
    floor.setup()
    for collator in collators.values():
        collate(collator, 50)  # warm-up: the pool reaches its size classes
    measures = {"floor (numpy copy)": lambda: args.batches / floor.run(args.batches)[1]}
    measures.update({name: (lambda collator=collator: args.batches / seconds(lambda: collate(collator, args.batches)))
                     for name, collator in collators.items()})
    rates = round_robin(measures, args.repeats)

    collator = collators["GainOffset"]
    misses = collator.pool.stats()["misses"]
    bytes0, calls0 = _alloccount.thread_allocated()
    tracemalloc.start()
    collate(collator, args.batches)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    bytes1, calls1 = _alloccount.thread_allocated()
    floor_median = summary(rates["floor (numpy copy)"])[0]

    print(f"§7 batch collated on one thread: median (min-max) of {args.repeats} interleaved runs "
          f"of {args.batches} batches")
    for name, r in rates.items():
        med, low, high = summary(r)
        print(f"  {name:22s} {med:8,.0f} batches/s  ({low:,.0f}-{high:,.0f})   {med / floor_median:.2f} x floor")
    print(f"  allocated on this thread per batch (GainOffset): {(bytes1 - bytes0) / args.batches:,.0f} bytes in "
          f"{(calls1 - calls0) / args.batches:.1f} allocations; tracemalloc peak over the run {peak:,} bytes")
    print(f"  pool misses after warm-up: {collator.pool.stats()['misses'] - misses}")


if __name__ == "__main__":
    main()
