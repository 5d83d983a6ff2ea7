"""The §7 workload, measured side by side: the memory floor, this loader, and its peers.

Run from a source checkout, with the package importable (``pip install -e .``, or
``python setup.py build_ext --inplace`` and ``PYTHONPATH=.``):

    python benchmarks/bench_loader.py                      # everything; writes benchmarks/RESULTS.md
    python benchmarks/bench_loader.py --quick              # a run of about a minute (printed only)
    python benchmarks/bench_loader.py --only epochs fresh  # just the two training-loop patterns

Every configuration is repeated ``--repeats`` times, interleaved round-robin with the
memory floor and every other configuration so that drift of a shared machine hits all
alike; the table gives the median and the min-max of batches per second, the ratio to the
single-thread floor and to the best peer, the bytes allocated per batch on the consuming
thread, and pool misses after warm-up. A second table shows the time per batch against
batch size and image width.

Groups of configurations (``--only``; the floor is always measured):

* ``loader``: the fast and the generic path (the generic one also with 2 worker
  processes), each repetition a slice of one long stream
  after warm-up, and the ceiling of each: two processes, each running its own 0-worker
  loop, timed together in the same rounds (what 2 workers would reach if handing batches
  between threads cost nothing; every 2-worker figure is printed against it);
* ``epochs``: the training loop ``for epoch: loader.set_epoch(epoch); for batch in loader``,
  at 0 and 2 workers, every epoch's start and end inside the timing;
* ``fresh``: each repetition fresh ``loader.iter(start, start + k)`` streams of k = 64-128
  batches, at 0 and 2 workers, their start-up and shut-down inside the timing;
* ``peers``: torch and Grain, when installed;
* ``scaling``: the cost-growth table.

Every consumer holds its last 2 batches alive while the next one is built, as a training
loop does.
"""
from __future__ import annotations

import argparse
import datetime
import itertools
import os
import platform
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _timing import TwoCopies, against_ceiling, round_robin, summary, timed  # noqa: E402
from peers import available_peers  # noqa: E402
from workload import (BATCH, HEIGHT, HELD, MAX_W, MIN_W, MULTIPLE, PREFETCH, COUNT, Case,  # noqa: E402
                      FloorCase, StoredSamples, consume, leave_as_is, make_pipeline, pipeline, workload_dataset,
                      zero_worker_run)

from onemodel_cy.testing import _alloccount  # noqa: E402

GROUPS = ("loader", "epochs", "fresh", "peers", "scaling")
RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "RESULTS.md")
FRESH_LENGTHS = (64, 96, 128)     # k of the successive fresh streams, cycled


# ------------------------------------------------------------------ our cases

class LoaderCase(Case):
    """One long stream: each repetition takes its next slice of steps after a warm-up."""

    def __init__(self, workers, generic=False, mode="thread"):
        self.workers, self.generic, self.mode = workers, generic, mode
        self.name = f"{path_name(generic)}, {workers} workers" + {"thread": "", "process": ", processes",
                                                                  "auto": ", auto"}[mode]

    def setup(self):
        self.loader = make_pipeline(self.workers, self.generic)
        self.loader.worker_mode = self.mode
        self.chosen = self.loader.worker_mode     # "auto" reads as the mode it chose
        self.next = 0

    def run(self, n):
        warm = 2 * PREFETCH + self.workers
        with self.loader.iter(self.next, self.next + warm + n) as stream:
            consume(itertools.islice(stream, warm))
            result = timed(lambda: consume(stream, HELD))
        self.next += warm + n
        return result

    def steady_state(self, n):
        """(bytes and allocation calls per batch on this thread, pool misses) over n warm batches."""
        pool = self.loader.collator.pool
        warm = 4 * (PREFETCH + self.workers) + 50   # the pool reaches the window's size
        with self.loader.iter(0, warm + n) as stream:
            consume(itertools.islice(stream, warm))
            misses = pool.stats()["misses"]
            bytes0, calls0 = _alloccount.thread_allocated()
            consume(stream)
            bytes1, calls1 = _alloccount.thread_allocated()
        return (bytes1 - bytes0) / n, (calls1 - calls0) / n, pool.stats()["misses"] - misses


def path_name(generic):
    return "generic path (Python dataset + Python aug)" if generic else "onemodel_cy fast path"


class CeilingCase(Case):
    """Two processes, each running its own 0-worker loop of one path (holding HELD), timed
    together: the ceiling of two cores for that work, measured in the same rounds."""

    def __init__(self, generic=False):
        self.generic = generic
        self.name = ceiling_name(generic)

    def setup(self):
        self.copies = TwoCopies(zero_worker_run, self.generic)

    def run(self, n):
        return self.copies.run(n)

    def teardown(self):
        self.copies.close()


def ceiling_name(generic):
    return f"ceiling: 2 processes, each its own {path_name(generic)} 0-worker loop"


class OwnShareCase(LoaderCase):
    """The generic path with a dataset and an augmentation that allocate nothing: what is
    left is the loader's own allocation on the consuming thread (0 workers)."""

    def __init__(self):
        super().__init__(0, generic=True)
        self.name = "generic path, stored samples + no-op aug, 0 workers"

    def setup(self):
        self.loader = pipeline(StoredSamples(workload_dataset()), leave_as_is)
        self.next = 0


def epoch_by_epoch(loader, first, count):
    """The batches of a training loop that runs epochs ``first .. first+count-1``."""
    for epoch in range(first, first + count):
        loader.set_epoch(epoch)
        for batch in loader:
            yield batch


class EpochCase(Case):
    """``for epoch in range(E): loader.set_epoch(epoch); for batch in loader``: each epoch
    starts its own stream (and workers) and ends it; E whole epochs per repetition."""
    pattern = "Epoch by epoch"

    def __init__(self, workers):
        self.workers = workers
        self.name = f"epoch by epoch (set_epoch; for batch in loader), {workers} workers, holds {HELD}"

    def setup(self):
        self.loader = make_pipeline(self.workers)
        consume(epoch_by_epoch(self.loader, 0, 1), HELD)    # warm-up: the pool reaches its size
        self.epoch = 1

    def run(self, n):
        epochs = max(1, round(n / self.loader.steps_per_epoch))
        batches = epoch_by_epoch(self.loader, self.epoch, epochs)
        self.epoch += epochs
        return timed(lambda: consume(batches, HELD))


def fresh_streams(loader, start, lengths):
    """The batches of a training loop that opens a fresh ``loader.iter(start, start + k)``
    for each k of ``lengths``, one after the other."""
    for k in lengths:
        with loader.iter(start, start + k) as stream:
            yield from stream
        start += k


class FreshStreamCase(Case):
    """Each repetition: fresh ``loader.iter(start, start + k)`` streams, k cycling through
    FRESH_LENGTHS, until at least n batches; every stream's start-up and shut-down timed."""
    pattern = "Fresh short streams"

    def __init__(self, workers):
        self.workers = workers
        self.name = (f"fresh streams of {FRESH_LENGTHS[0]}-{FRESH_LENGTHS[-1]} batches (loader.iter), "
                     f"{self.workers} workers, holds {HELD}")

    def setup(self):
        self.loader = make_pipeline(self.workers)
        self.next, self.lengths = 0, itertools.cycle(FRESH_LENGTHS)
        self.run(1)                          # warm-up: the pool reaches its size

    def run(self, n):
        lengths = [next(self.lengths)]
        while sum(lengths) < n:
            lengths.append(next(self.lengths))
        batches = fresh_streams(self.loader, self.next, lengths)
        self.next += sum(lengths)
        return timed(lambda: consume(batches, HELD))


# ------------------------------------------------------------------ scaling

def scaling_rows(quick):
    """Seconds per batch of the fast path (0 workers) against batch size and image width."""
    rows = []
    n = 20 if quick else 60
    configs = [("batch", b, MIN_W, MAX_W) for b in (32, 64, 128, 256, 512)]
    configs += [("width", BATCH, w, w) for w in (64, 128, 256, 512, 1024)]
    for kind, batch, min_w, max_w in configs:
        loader = make_pipeline(0, batch=batch, min_width=min_w, max_width=max_w)
        steps = min(n, loader.steps_per_epoch * 8)
        consume(loader.iter(0, steps))  # warm-up
        times = round_robin({kind: lambda: timed(lambda: consume(loader.iter(0, steps)))[1] / steps}, 3)[kind]
        sample = loader.batch_at(0)
        moved = sample.images.nbytes + int(sample.widths.sum()) * HEIGHT * 4
        sample.close()
        rows.append((kind, batch, f"{min_w}-{max_w}", summary(times)[0], moved))
    return rows


# ------------------------------------------------------------------ driver

def measure(cases, batches, repeats):
    """name -> batches/s of each repetition, the cases interleaved round-robin."""
    for case in cases:
        case.setup()

    def rate(case):
        count, elapsed = case.run(batches)
        return count / elapsed
    try:
        return round_robin({case.name: (lambda case=case: rate(case)) for case in cases}, repeats)
    finally:
        for case in cases:
            case.teardown()


def select_cases(groups):
    """(every case to measure, the long-stream loader cases among them)."""
    # The generic path also with worker processes (what loader.profile() advises for it), and
    # both paths with the mode left to the default, worker_mode="auto" (workers/choice.py).
    ours = ([LoaderCase(w) for w in (0, 1, 2, 4)] + [LoaderCase(w, generic=True) for w in (0, 2)]
            + [LoaderCase(2, generic=True, mode="process"), LoaderCase(2, mode="auto"),
               LoaderCase(2, generic=True, mode="auto")] if "loader" in groups else [])
    cases = [FloorCase(1), FloorCase(2)] + ours
    if groups & {"loader", "epochs", "fresh"}:
        cases.append(CeilingCase())
    if "loader" in groups:
        cases.append(CeilingCase(generic=True))
    if "epochs" in groups:
        cases += [EpochCase(0), EpochCase(2)]
    if "fresh" in groups:
        cases += [FreshStreamCase(0), FreshStreamCase(2)]
    if "peers" in groups:
        cases += available_peers()
    return cases, ours


def table(cases, rates, steady):
    """The main table's lines, and the medians by name."""
    medians = {name: summary(r)[0] for name, r in rates.items()}
    floor = medians["floor (numpy copy)"]
    peers = [c.name for c in cases if c.peer]
    best_peer = max(peers, key=medians.get) if peers else None
    lines = [f"## §7 workload: {COUNT} images {HEIGHT} x {MIN_W}-{MAX_W}, batch {BATCH}, width multiple "
             f"{MULTIPLE}, GainOffset, prefetch {PREFETCH}", "",
             "| configuration | batches/s median | min-max | x floor | x best peer | bytes/batch on consumer "
             "(allocs) | pool misses after warm-up |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for case in cases:
        median, low, high = summary(rates[case.name])
        versus_peer = f"{median / medians[best_peer]:.1f}" if best_peer else "-"
        row = f"| {case.name} | {median:,.0f} | {low:,.0f}-{high:,.0f} | {median / floor:.2f} | {versus_peer} |"
        if case.name in steady:
            per_batch, calls, misses = steady[case.name]
            row += f" {per_batch:,.0f} ({calls:.1f}) | {misses} |"
        else:
            row += " - | - |"
        lines.append(row)
    lines += ["", f"Best peer: {best_peer}." if best_peer else "No peer measured."]
    return lines, medians


def notes(medians, cases, ours, quick):
    """The sentences under the table that compare configurations measured in this run."""
    lines = []
    if ours:
        own = OwnShareCase()
        own.setup()
        per_batch, calls, _ = own.steady_state(50 if quick else 200)
        lines.append(f"At 0 workers the generic path runs the dataset and the augmentation on the consuming "
                     f"thread, so their allocations count there; with a dataset and an augmentation that "
                     f"allocate nothing the loader's own share is {per_batch:,.0f} bytes ({calls:.1f} "
                     f"allocations) per batch: the index ints passed to get_sample and the scratch arrays "
                     f"handed to the augmentation.")
        fast2 = medians["onemodel_cy fast path, 2 workers"]
        lines.append(f"Fast path 2 workers / 2-thread floor: {fast2 / medians['floor (numpy copy), 2 threads']:.2f}.")
        for generic, suffix in ((False, ""), (True, ""), (True, ", processes"), (False, ", auto"), (True, ", auto")):
            lines.append(against_ceiling(path_name(generic) + suffix,
                                         medians[f"{path_name(generic)}, 2 workers{suffix}"],
                                         medians[f"{path_name(generic)}, 0 workers"],
                                         medians[ceiling_name(generic)]) + ".")
        for case in ours:
            if case.mode == "auto":
                lines.append(f"worker_mode='auto' ran {case.chosen} workers for the {path_name(case.generic)}.")
    for case in cases:
        long_stream = f"onemodel_cy fast path, {getattr(case, 'workers', None)} workers"
        if getattr(case, "pattern", None) and long_stream in medians:
            lines.append(f"{case.pattern}, {case.workers} workers / one long stream: "
                         f"{medians[case.name] / medians[long_stream]:.2f}.")
        if getattr(case, "pattern", None) and case.workers == 2:
            zero = next(c for c in cases if type(c) is type(case) and c.workers == 0)
            lines.append(against_ceiling(case.pattern, medians[case.name], medians[zero.name],
                                         medians[ceiling_name(False)]) + ".")
    return lines


def scaling_table(quick):
    lines = ["", "## Cost growth (fast path, 0 workers, median of 3)", "",
             "| varied | batch | widths | us/batch | MiB moved | ns per KiB moved |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind, batch, widths, secs, moved in scaling_rows(quick):
        lines.append(f"| {kind} | {batch} | {widths} | {secs * 1e6:,.0f} | {moved / 2**20:.2f} | "
                     f"{secs * 1e9 / (moved / 1024):,.1f} |")
    return lines


def parse_args(argv):
    parser = argparse.ArgumentParser(prog="bench_loader", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer batches and repeats (about a minute)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--batches", type=int, default=None, help="batches per measurement")
    parser.add_argument("--only", nargs="+", choices=GROUPS, default=None, metavar="GROUP",
                        help=f"measure only these groups besides the floor ({', '.join(GROUPS)})")
    parser.add_argument("--no-peers", action="store_true", help="skip torch and grain")
    parser.add_argument("--out", "--results", dest="out", default=None,
                        help=f"write the tables here; by default a full run (no --only, no --quick) "
                             f"writes {os.path.relpath(RESULTS)} and any other run only prints")
    args = parser.parse_args(argv)
    for name in ("repeats", "batches"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1, received {getattr(args, name)}")
    return args


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    batches = args.batches or (60 if args.quick else 500)
    groups = set(args.only or GROUPS) - ({"peers"} if args.no_peers else set())
    _alloccount.install()

    cases, ours = select_cases(groups)
    print(f"measuring {len(cases)} configurations x {repeats} interleaved repetitions of {batches} batches ...",
          file=sys.stderr)
    rates = measure(cases, batches, repeats)
    steady = {}
    for case in ours:
        case.setup()
        steady[case.name] = case.steady_state(50 if args.quick else 200)
    lines, medians = table(cases, rates, steady)
    lines += notes(medians, cases, ours, args.quick)
    if "scaling" in groups:
        lines += scaling_table(args.quick)

    header = ["# onemodel_cy benchmark results", "",
              f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
              f"- command: `{' '.join(['python benchmarks/bench_loader.py', *argv])}`",
              f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"numpy {np.__version__}",
              f"- {repeats} interleaved repetitions of {batches} batches per configuration", ""]
    text = "\n".join(header + lines) + "\n"
    print(text)
    target = args.out or (RESULTS if args.only is None and not args.quick else None)
    if target:
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"written to {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
