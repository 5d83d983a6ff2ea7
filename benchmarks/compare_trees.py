"""Two builds of the package side by side: the §7 workload, interleaved, medians.

Run: python benchmarks/compare_trees.py BEFORE_TREE AFTER_TREE [--repeats 5]

Each tree is a source checkout built in place (``python setup.py build_ext --inplace``).
Every repetition runs each configuration once per tree, in a fresh interpreter with that
tree first on ``PYTHONPATH`` (the two builds cannot share one process), alternating which
tree goes first, and holding the previous 2 batches as a training loop does. Use the
same interpreter for both trees, outside any environment with an editable install of the
package (its import hook would mix the two builds). Prints batches per second and the
after / before ratio of the medians. Configurations: the fast path (in-memory dataset,
GainOffset) and the generic path (Python dataset, Python augmentation), 0 and 2 workers.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

ONE_RUN = r'''
import collections, sys, time
import numpy as np
import onemodel_cy as om
path, workers, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
ds = om.SyntheticLineImages(2048, height=32, min_width=64, max_width=256, seed=0)
class Plain:
    def __init__(self, base): self.base = base
    def __len__(self): return len(self.base)
    def get_sample(self, i): return self.base.get_sample(i)
def gain(image, rng):
    a = rng.next_single(); b = rng.next_single()
    image *= np.float32(1 + 0.2 * (2 * a - 1)); image += np.float32(0.1 * (2 * b - 1))
dataset, aug = (ds, om.GainOffset()) if path == "fast" else (Plain(ds), gain)
loader = om.DataLoader(dataset, om.ShuffledSampler(2048, 128, seed=0),
                       om.ImageBatchCollator(width_multiple=4, augmentation=aug),
                       seed=0, workers=workers, prefetch=8)
held = collections.deque(maxlen=2)
with loader.iter(0, 64) as stream:          # warm-up (positional: both APIs)
    for batch in stream: held.append(batch)
held.clear()
start = time.perf_counter()
with loader.iter(64, 64 + steps) as stream:
    for batch in stream: held.append(batch)
print(steps / (time.perf_counter() - start))
'''
CONFIGS = [("fast", 0, 320), ("fast", 2, 320), ("generic", 0, 160), ("generic", 2, 160)]


def run(tree, path, workers, steps):
    env = dict(os.environ, PYTHONPATH=os.path.abspath(tree))
    done = subprocess.run([sys.executable, "-c", ONE_RUN, path, str(workers), str(steps)],
                          capture_output=True, text=True, env=env, cwd=os.path.abspath(tree))
    if done.returncode:
        raise SystemExit(f"{tree}: {done.stderr}")
    return float(done.stdout)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    trees = {"before": args.before, "after": args.after}
    rates = {(name, c): [] for name in trees for c in CONFIGS}
    for rep in range(args.repeats):
        for config in CONFIGS:
            for name in (("before", "after") if rep % 2 == 0 else ("after", "before")):
                rates[(name, config)].append(run(trees[name], *config))
    print(f"median batches/s of {args.repeats} interleaved repetitions")
    for config in CONFIGS:
        before = statistics.median(rates[("before", config)])
        after = statistics.median(rates[("after", config)])
        print(f"  {config[0]:8s} {config[1]} workers: before {before:7,.0f}  after {after:7,.0f}  "
              f"after/before {after / before:.3f}")


if __name__ == "__main__":
    main()
