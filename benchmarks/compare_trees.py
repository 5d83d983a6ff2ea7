"""Two builds of the package side by side, interleaved, medians: is the AFTER tree slower?

Run: python benchmarks/compare_trees.py BEFORE_TREE AFTER_TREE [--repeats 5] [--configs NAME ...]

Each tree is a source checkout built in place (``python setup.py build_ext --inplace``).
Every repetition runs each configuration once per tree, in a fresh interpreter with that
tree first on ``PYTHONPATH`` (the two builds cannot share one process), alternating which
tree goes first (the BEFORE tree in even repetitions, the AFTER tree in odd ones), and
holding the previous 2 batches as a training loop does (the batch dropped is closed).
Use the same interpreter for both trees, outside any environment with an editable install
of the package (its import hook would mix the two builds; each run checks that it imported
its own tree). The script a run executes uses only the public API (``import onemodel_cy as
om``), so the private modules may differ between the trees. Prints, per configuration, the
median batches per second of each tree with the min-max of its repetitions, the after /
before ratio of the medians, and the min-max of the per-repetition (paired) ratios.

Configurations (``--configs`` takes names, comma- or space-separated, or shell-style
patterns such as ``'packed*'``; the default is all of them):

* ``fast-0``, ``fast-2``, ``fast-proc2``: the §7 workload on the fast path
  (``SyntheticLineImages``, ``GainOffset``; 2,048 lines, batch 128, prefetch 8), 0 and 2
  worker threads, and 2 worker processes;
* ``generic-0``, ``generic-2``: the same images through a Python dataset and a Python
  augmentation;
* ``packed32-0``, ``packed32-2``, ``packed128-0``, ``packed128-2``: the packed real-data
  benchmark (``bench_realdata.py``): 3,000 text-line PNGs rendered with Pillow, packed once
  per invocation with the BEFORE tree's ``om.pack`` into a temporary folder (both trees read
  the same bytes), read through ``om.PackedImageDataset`` (§6 mean 0.5, std 0.25, width
  multiple 8, prefetch 4) at batch 32 and 128, 0 and 2 workers (2 workers on a pack take the
  packed lane);
* ``small-0``, ``small-proc2``, ``large-0``, ``large-proc2``: the Python-heavy sets of
  ``bench_workers.py`` (``workload.PngLines``: PNG bytes decoded with Pillow and normalised in numpy in
  ``get_sample``; small: 512 lines of height 32, batch 32; large: 192 lines of
  height 128 resized to 64, batch 16) with ``worker_mode="process"`` and 2 workers, and
  0 workers as the anchor; read as a training loop does (``for batch in loader`` pass after
  pass, the workers kept between passes), the first pass (which starts the workers) not timed.

The temporary folder (the pack, the per-run script) is removed at the end.
"""
from __future__ import annotations

import argparse
import fnmatch
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

# The script each run executes (and that makes the pack), written to the temporary folder
# as the module ``ab_run`` (its datasets must be importable by name in worker processes:
# the Python-heavy one is ``workload.PngLines``, this folder's workload.py on the path).
# Public API only.
RUN_MODULE = r'''
import collections, json, os, random, sys, time
import numpy as np
import onemodel_cy as om
from workload import PNG_SETS, PngLines      # benchmarks/workload.py, on the path: the same for both trees

HELD = 2          # batches a training loop holds while the next is built


def take(batches, n):
    """Take n batches of the iterator ``batches``, holding the last HELD (the dropped one is closed)."""
    held = collections.deque()
    for _ in range(n):
        held.append(next(batches))
        if len(held) > HELD:
            held.popleft().close()
    return held


def warm_then_timed(loader, warm, steps):
    """Batches/s of steps [warm, warm + steps) after a warm-up stream over [0, warm)."""
    with loader.iter(0, warm) as stream:       # positional: both APIs
        take(iter(stream), warm)
    with loader.iter(warm, warm + steps) as stream:
        batches = iter(stream)
        start = time.perf_counter()
        held = take(batches, steps)
        rate = steps / (time.perf_counter() - start)
    for batch in held:
        batch.close()
    return rate


# ------------------------------------------------------------------ §7 (fast and generic path)

class Plain:
    def __init__(self, base): self.base = base
    def __len__(self): return len(self.base)
    def get_sample(self, i): return self.base.get_sample(i)


def gain(image, rng):
    a = rng.next_single(); b = rng.next_single()
    image *= np.float32(1 + 0.2 * (2 * a - 1)); image += np.float32(0.1 * (2 * b - 1))


def section7(path, workers, steps, mode="thread"):
    ds = om.SyntheticLineImages(2048, height=32, min_width=64, max_width=256, seed=0)
    dataset, aug = (ds, om.GainOffset()) if path == "fast" else (Plain(ds), gain)
    loader = om.DataLoader(dataset, om.ShuffledSampler(2048, 128, seed=0),
                           om.ImageBatchCollator(width_multiple=4, augmentation=aug),
                           seed=0, workers=workers, prefetch=8, worker_mode=mode)
    return warm_then_timed(loader, 64, steps)


# ------------------------------------------------------------------ the pack (bench_realdata.py)

ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:'-"


def make_pack(folder, images):
    """bench_realdata.render_lines (seed 0), then om.pack into folder/pack; the PNGs are removed."""
    import shutil
    from PIL import Image, ImageDraw, ImageFont
    rng = random.Random(0)
    font = ImageFont.load_default()
    png = os.path.join(folder, "png")
    os.makedirs(png)
    lines = []
    for i in range(images):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(8, 40))).strip() or "x"
        width = int(ImageDraw.Draw(Image.new("L", (1, 1))).textlength(text, font=font)) + 8
        image = Image.new("L", (width, 32), color=rng.randint(200, 255))
        ImageDraw.Draw(image).text((4, rng.randint(4, 14)), text, fill=rng.randint(0, 60), font=font)
        name = f"line{i:06d}.png"
        image.save(os.path.join(png, name))
        lines.append(f"{name}\t{text}\n")
    with open(os.path.join(png, "labels.txt"), "w", encoding="utf-8") as f:
        f.writelines(lines)
    report = om.pack(png, os.path.join(folder, "pack"), labels=os.path.join(png, "labels.txt"), height=32,
                     workers=2, progress=False)
    shutil.rmtree(png)
    return report.count


def packed(pack, batch, workers, steps):
    ds = om.PackedImageDataset(pack, 0.5, 0.25)
    loader = om.DataLoader(ds, om.ShuffledSampler(len(ds), batch, 0),
                           om.ImageBatchCollator(width_multiple=8, pad_value=0.0),
                           seed=0, workers=workers, prefetch=4)
    # Warm-up: one epoch (every page of the pack touched, the pool at size).
    return warm_then_timed(loader, loader.steps_per_epoch, steps)


# ------------------------------------------------------------------ Python-heavy sets (bench_workers.py)

def python_heavy(name, workers, mode, passes):
    count, height, lo, hi, resize, batch = PNG_SETS[name]
    dataset = PngLines(count, height, lo, hi, resize)
    loader = om.DataLoader(dataset, om.ShuffledSampler(len(dataset), batch, seed=1),
                           om.ImageBatchCollator(4), seed=1, workers=workers, prefetch=4,
                           worker_mode=mode)

    def endless():
        while True:
            yield from loader
    batches = endless()
    per_pass = len(dataset) // batch
    for batch in take(batches, per_pass):       # the first pass starts the workers
        batch.close()
    start = time.perf_counter()
    held = take(batches, per_pass * passes)
    rate = per_pass * passes / (time.perf_counter() - start)
    for batch in held:
        batch.close()
    batches.close()
    loader.close()
    return rate


def main(argv):
    kind, args = argv[0], json.loads(argv[1])
    if kind == "pack":
        result = make_pack(*args)
    else:
        result = {"section7": section7, "packed": packed, "python_heavy": python_heavy}[kind](*args)
    print(json.dumps({"result": result, "package": os.path.dirname(os.path.abspath(om.__file__))}))
'''

# name: (kind of run, its arguments; the pack's folder is put in front for "packed").
# The counts keep the timed part of a run near 1.5 s on 2 cores (2-5 s with start-up and
# warm-up), so that --repeats 5 over all of them takes about 8 minutes (more on a busy machine).
CONFIGS = {
    "fast-0": ("section7", ["fast", 0, 3000]),
    "fast-2": ("section7", ["fast", 2, 3000]),
    "fast-proc2": ("section7", ["fast", 2, 3000, "process"]),
    "generic-0": ("section7", ["generic", 0, 1200]),
    "generic-2": ("section7", ["generic", 2, 1200]),
    "packed32-0": ("packed", [32, 0, 20000]),
    "packed32-2": ("packed", [32, 2, 20000]),
    "packed128-0": ("packed", [128, 0, 6000]),
    "packed128-2": ("packed", [128, 2, 6000]),
    "small-0": ("python_heavy", ["small", 0, "thread", 10]),      # passes of 16 batches
    "small-proc2": ("python_heavy", ["small", 2, "process", 10]),
    "large-0": ("python_heavy", ["large", 0, "thread", 5]),       # passes of 12 batches
    "large-proc2": ("python_heavy", ["large", 2, "process", 5]),
}
PACK_IMAGES = 3000
BENCHMARKS = os.path.dirname(os.path.abspath(__file__))     # workload.py, which ab_run imports


def run(tree, folder, kind, args):
    """One fresh interpreter with ``tree`` first on the path: the JSON result of ab_run.main."""
    import json
    tree = os.path.abspath(tree)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([tree, folder, BENCHMARKS]))
    done = subprocess.run([sys.executable, "-c", "import sys, ab_run; ab_run.main(sys.argv[1:])",
                           kind, json.dumps(args)], capture_output=True, text=True, env=env, cwd=folder)
    if done.returncode:
        raise SystemExit(f"{tree}, {kind} {args}: exit code {done.returncode}\n{done.stderr}")
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if answer["package"] != os.path.join(tree, "onemodel_cy"):
        raise SystemExit(f"a run for {tree} imported onemodel_cy from {answer['package']} "
                         f"(an editable install or another path entry in the way?)")
    return answer["result"]


def selected(patterns):
    if not patterns:
        return list(CONFIGS)
    names = [p for arg in patterns for p in arg.replace(",", " ").split()]
    chosen = [c for c in CONFIGS if any(fnmatch.fnmatchcase(c, p) for p in names)]
    unknown = [p for p in names if not any(fnmatch.fnmatchcase(c, p) for c in CONFIGS)]
    if unknown or not chosen:
        raise SystemExit(f"unknown configuration(s) {unknown}; choose from {', '.join(CONFIGS)}")
    return chosen


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--configs", nargs="*", metavar="NAME",
                        help=f"configurations to run (names or patterns; default all): {', '.join(CONFIGS)}")
    parser.add_argument("--dir", default=None, help="where to make the temporary folder (default: the system's)")
    args = parser.parse_args(argv)
    configs = selected(args.configs)
    trees = {"before": args.before, "after": args.after}
    for tree in trees.values():
        if not os.path.isdir(os.path.join(tree, "onemodel_cy")):
            raise SystemExit(f"{tree}: not a source tree of the package (no onemodel_cy folder)")
    began = time.perf_counter()
    folder = tempfile.mkdtemp(prefix="compare_trees-", dir=args.dir)
    try:
        with open(os.path.join(folder, "ab_run.py"), "w", encoding="utf-8") as f:
            f.write(RUN_MODULE)
        pack = os.path.join(folder, "pack")
        if any(CONFIGS[c][0] == "packed" for c in configs):
            start = time.perf_counter()
            count = run(trees["before"], folder, "pack", [folder, PACK_IMAGES])
            print(f"pack: {count} line images packed by the BEFORE tree in {time.perf_counter() - start:.1f} s",
                  flush=True)
        rates = {(name, c): [] for name in trees for c in configs}
        for rep in range(args.repeats):
            for config in configs:
                kind, config_args = CONFIGS[config]
                if kind == "packed":
                    config_args = [pack] + config_args
                for name in (("before", "after") if rep % 2 == 0 else ("after", "before")):
                    rates[(name, config)].append(run(trees[name], folder, kind, config_args))
            print(f"repetition {rep + 1}/{args.repeats} done ({time.perf_counter() - began:.0f} s)",
                  file=sys.stderr, flush=True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"median batches/s of {args.repeats} interleaved repetitions (fresh interpreter per run; "
          f"{os.cpu_count()} CPUs)")
    print(f"  before = {os.path.abspath(args.before)}\n  after  = {os.path.abspath(args.after)}")
    print(f"  {'configuration':12s} {'before':>9s} {'(min-max)':>21s} {'after':>9s} {'(min-max)':>21s}  "
          f"{'after/before':>12s}  {'paired ratios':>13s}")
    for config in configs:
        b, a = rates[("before", config)], rates[("after", config)]
        paired = [x / y for x, y in zip(a, b)]
        print(f"  {config:12s} {statistics.median(b):9,.1f} {f'({min(b):,.1f}-{max(b):,.1f})':>21s} "
              f"{statistics.median(a):9,.1f} {f'({min(a):,.1f}-{max(a):,.1f})':>21s}  "
              f"{statistics.median(a) / statistics.median(b):12.3f}  {min(paired):.2f}-{max(paired):.2f}")
    print(f"wall time {time.perf_counter() - began:.0f} s")


if __name__ == "__main__":
    main()
