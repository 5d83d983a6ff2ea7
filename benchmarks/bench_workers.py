"""Threads or processes: worker modes on a Python-heavy dataset and on the §7 fast path.

Run from a source checkout with the package importable and Pillow and torch installed:

    python benchmarks/bench_workers.py                 # the three tables, 5 interleaved repeats
    python benchmarks/bench_workers.py --repeats 3     # shorter
    python benchmarks/bench_workers.py --only fast     # the §7 table alone

The Python-heavy dataset (``workload.PngLines``) is what a new user writes: the images are
stored as PNG files (in memory, as bytes) and ``get_sample`` decodes each with Pillow and
normalises it in numpy (``small``: height 32, widths 64-256; ``large``: height 128, widths
256-1024, decoded then resized to height 64). The same dataset and the same padding collation run
in this package's loader (thread mode 0/1/2 workers, process mode 1/2 workers) and in
``torch.utils.data.DataLoader`` (0 and 2 worker processes, ``persistent_workers``).

Each configuration runs one endless training loop (``for batch in loader`` pass after
pass; both loaders keep their workers between passes), warmed up first, so worker
start-up is not in the timing; each repetition times its next ``--epochs`` epochs (4),
holding the last 2 batches as a training loop does. The
configurations are interleaved round-robin; the table gives the median and the min-max of
batches per second and the ratio to the first row (this package's 0 workers). The last
row of each set is the ceiling of two processes on this machine, timed in the same
rounds: two independent copies of the 0-worker loop in two processes, building half the
slice each at the same time (no worker processes can do the same work faster).

The second table: a dataset whose reads wait 2 ms and need almost no CPU (batch 8), so
that the scaling of the engines shows even when other work keeps the cores busy.

The third table is the §7 workload (``workload.py``: built-in dataset and GainOffset,
batch 128, prefetch 8) at 0 workers, at 2 and 1 workers in thread and in process mode, and
its two-process ceiling, slices of 256 batches, the last 2 batches held as a training loop
does.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections import deque

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onemodel_cy as om  # noqa: E402
from _timing import TwoCopies, against_ceiling, round_robin, seconds, summary  # noqa: E402
import workload  # noqa: E402

MULTIPLE = 4
CEILING = "ceiling: 2 processes, each its own 0-worker loop"


class WaitingLines:
    """Synthetic lines whose every read first waits 2 ms (a stand-in for storage latency):
    it needs almost no CPU, so it shows how the engines scale on a machine whose cores are
    busy with other work."""

    def __init__(self, count):
        self.inner = om.SyntheticLineImages(count, 32, 64, 256, seed=0)

    def __len__(self):
        return len(self.inner)

    def get_sample(self, index):
        time.sleep(0.002)
        return self.inner.get_sample(index)


class TorchPngLines:
    """The same dataset for torch: (image, target, label) with the same decode."""

    def __init__(self, inner):
        self.inner = inner

    def __len__(self):
        return len(self.inner)

    def __getitem__(self, index):
        return self.inner.decode(index), self.inner.targets[index], self.inner.labels[index]


def torch_collate(items):
    """Pad to a width multiple of MULTIPLE into one float32 batch, as the package's collator."""
    import torch
    widest = max(image.shape[2] for image, _, _ in items)
    padded = -(-widest // MULTIPLE) * MULTIPLE
    images = np.zeros((len(items), 1, items[0][0].shape[1], padded), dtype=np.float32)
    for j, (image, _, _) in enumerate(items):
        images[j, :, :, :image.shape[2]] = image
    targets = np.concatenate([t for _, t, _ in items])
    return (torch.from_numpy(images), torch.from_numpy(targets),
            torch.tensor([len(t) for _, t, _ in items]), torch.tensor([label for _, _, label in items]))


def zero_worker_run(dataset, batch):
    """The 0-worker row's training loop, as a function of n (for TwoCopies' processes)."""
    stream = endless(package_loader(dataset, batch, 0, "thread"))
    return lambda n: take(stream, n, workload.HELD)


def package_loader(dataset, batch, workers, mode):
    return om.DataLoader(dataset, om.ShuffledSampler(len(dataset), batch, seed=1),
                         om.ImageBatchCollator(MULTIPLE), seed=1, workers=workers, prefetch=4,
                         worker_mode=mode)


def torch_loader(dataset, batch, workers):
    import torch.utils.data as tud
    return tud.DataLoader(TorchPngLines(dataset), batch_size=batch, shuffle=True, drop_last=True,
                          collate_fn=torch_collate, num_workers=workers, persistent_workers=workers > 0,
                          prefetch_factor=2 if workers else None)


def endless(loader):
    """Batches pass after pass (``for batch in loader``, as a training loop does)."""
    while True:
        yield from loader


def take(stream, n, held):
    """The next ``n`` batches of ``stream``, the last ``held`` kept alive (torch's are tuples)."""
    kept = deque()
    for _ in range(n):
        kept.append(next(stream))
        if len(kept) > held:
            batch = kept.popleft()
            if hasattr(batch, "close"):
                batch.close()


def slice_rate(stream, n, held=0):
    """Batches per second of the next ``n`` batches of ``stream``."""
    return n / seconds(lambda: take(stream, n, held))


def measure(loaders, n, repeats, held=0, base=None, ceiling=None):
    """Each loader's endless stream, warmed up (workers started, pools and rings at size),
    then ``repeats`` interleaved slices of ``n`` batches: rows (label, median, min, max, ratio).
    Between two of its slices a stream builds at most its prefetch depth ahead, then waits.
    ``ceiling`` (a TwoCopies) is timed in the same rounds, as the last row."""
    streams = {label: endless(loader) for label, loader in loaders.items()}
    for stream in streams.values():
        slice_rate(stream, n // 2, held)
    measures = {label: (lambda s=s: slice_rate(s, n, held)) for label, s in streams.items()}
    if ceiling is not None:
        measures[CEILING] = lambda: ceiling.rate(n)
    samples = round_robin(measures, repeats)
    reference = summary(samples[base or next(iter(samples))])[0]
    rows = [(label, *summary(v), summary(v)[0] / reference) for label, v in samples.items()]
    for stream in streams.values():
        stream.close()
    for loader in loaders.values():
        if hasattr(loader, "close"):
            loader.close()
    return rows


def python_heavy(repeats, epochs):
    rows = []
    for name, (count, height, lo, hi, resize, batch) in workload.PNG_SETS.items():
        dataset = workload.PngLines(count, height, lo, hi, resize)
        loaders = {
            "threads, 0 workers": package_loader(dataset, batch, 0, "thread"),
            "threads, 1 worker": package_loader(dataset, batch, 1, "thread"),
            "threads, 2 workers": package_loader(dataset, batch, 2, "thread"),
            "processes, 1 worker": package_loader(dataset, batch, 1, "process"),
            "processes, 2 workers": package_loader(dataset, batch, 2, "process"),
            "torch, 0 workers": torch_loader(dataset, batch, 0),
            "torch, 2 workers": torch_loader(dataset, batch, 2),
        }
        n = len(dataset) // batch * epochs
        ceiling = TwoCopies(zero_worker_run, dataset, batch)
        try:
            rows += [(name, *row) for row in measure(loaders, n, repeats, held=workload.HELD, ceiling=ceiling)]
        finally:
            ceiling.close()
    return rows


def waiting(repeats):
    dataset = WaitingLines(256)
    configurations = [("threads", "thread", 0), ("threads", "thread", 2), ("processes", "process", 1),
                      ("processes", "process", 2), ("processes", "process", 4)]
    loaders = {f"{kind}, {w} worker{'s' if w != 1 else ''}": package_loader(dataset, 8, w, mode)
               for kind, mode, w in configurations}
    return [("waiting", *row) for row in measure(loaders, 32, repeats, held=workload.HELD)]


def fast_path(repeats):
    loaders = {"0 workers": workload.make_pipeline(workers=0)}
    for workers in (2, 1):
        for mode in ("thread", "process"):
            loader = workload.make_pipeline(workers=workers)
            loader.worker_mode = mode
            loaders[f"{mode} mode, {workers} worker{'s' if workers > 1 else ''}"] = loader
    ceiling = TwoCopies(workload.zero_worker_run)
    try:
        return [("§7", *row) for row in measure(loaders, 256, repeats, held=workload.HELD, ceiling=ceiling)]
    finally:
        ceiling.close()


def print_table(rows, ratio_label):
    print(f"| set | configuration | batches/s (median) | min-max | {ratio_label} |")
    print("| --- | --- | ---: | ---: | ---: |")
    for name, label, median, low, high, ratio in rows:  # noqa: B007
        print(f"| {name} | {label} | {median:.1f} | {low:.1f}-{high:.1f} | {ratio:.2f} |")


TABLES = ("python", "waiting", "fast")     # the Python-heavy sets, the waiting set, §7


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--epochs", type=int, default=4,
                        help="epochs per timed slice of the Python-heavy sets (default 4)")
    parser.add_argument("--only", nargs="+", choices=TABLES, default=TABLES,
                        help="the tables to run (default all): " + ", ".join(TABLES))
    args = parser.parse_args()
    print(f"# bench_workers: Python {platform.python_version()}, {os.cpu_count()} CPUs, "
          f"{args.repeats} interleaved repeats\n")
    if "python" in args.only:
        rows = python_heavy(args.repeats, args.epochs)
        print_table(rows, "× threads, 0 workers")
        medians = {(name, label): median for name, label, median, *_ in rows}
        print()
        for name in workload.PNG_SETS:
            print(against_ceiling(f"{name}, processes", medians[(name, "processes, 2 workers")],
                                  medians[(name, "threads, 0 workers")], medians[(name, CEILING)]))
        print()
    if "waiting" in args.only:
        print_table(waiting(args.repeats), "× threads, 0 workers")
        print()
    if "fast" not in args.only:
        return
    rows = fast_path(args.repeats)
    print_table(rows, "× 0 workers")
    medians = {label: median for _, label, median, *_ in rows}
    print()
    for mode in ("thread", "process"):
        print(against_ceiling(f"§7, {mode} mode", medians[f"{mode} mode, 2 workers"], medians["0 workers"],
                              medians[CEILING]))


if __name__ == "__main__":
    main()
