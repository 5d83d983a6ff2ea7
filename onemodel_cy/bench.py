"""The §7 workload, measured side by side: the memory floor, this loader, and its peers.

Run as ``python benchmarks/bench_loader.py`` or ``onemodel-cy bench`` (``--quick`` for a
run under a minute). Every configuration is repeated ``--repeats`` times, interleaved
round-robin so that drift of a shared machine hits all alike; the table gives the median
and the min-max of batches per second, the ratio to the single-thread floor and to the
best peer, the bytes allocated per batch on the consuming thread, and pool misses after
warm-up. A second table shows the time per batch against batch size and image width.
"""
from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import threading
import time

import numpy as np

import onemodel_cy as om
from onemodel_cy import _alloccount

BATCH, HEIGHT, MIN_W, MAX_W, COUNT, MULTIPLE, PREFETCH = 128, 32, 64, 256, 2048, 4, 8


# ------------------------------------------------------------------ the workload

def workload_dataset(min_width=MIN_W, max_width=MAX_W, seed=0):
    """The §7 images: COUNT synthetic lines of height HEIGHT."""
    return om.SyntheticLineImages(COUNT, height=HEIGHT, min_width=min_width, max_width=max_width, seed=seed)


def plain_arrays(source):
    """Each sample of ``source`` as its own numpy image, target and label (what a user's
    dataset, or a peer's, would hold)."""
    samples = [source.get_sample(i) for i in range(len(source))]
    return ([np.array(s.image) for s in samples], [np.array(s.target) for s in samples],
            [s.label for s in samples])


def make_pipeline(workers=0, generic=False, batch=BATCH, min_width=MIN_W, max_width=MAX_W, seed=0):
    dataset = workload_dataset(min_width, max_width, seed)
    if generic:
        return pipeline(PythonDataset(dataset), python_gain_offset, workers, batch, seed)
    return pipeline(dataset, om.GainOffset(), workers, batch, seed)


def pipeline(dataset, augmentation, workers=0, batch=BATCH, seed=0):
    """The §7 loader (shuffled, width multiple, prefetch) over ``dataset`` with ``augmentation``."""
    collator = om.ImageBatchCollator(MULTIPLE, augmentation=augmentation)
    return om.DataLoader(dataset, om.ShuffledSampler(len(dataset), batch, seed=seed), collator, seed=seed,
                         workers=workers, prefetch=PREFETCH)


class StoredSamples:
    """A Python dataset that allocates nothing: it hands out Samples built beforehand."""

    def __init__(self, source):
        self.samples = [source.get_sample(i) for i in range(len(source))]

    def __len__(self):
        return len(self.samples)

    def get_sample(self, index):
        return self.samples[index]


def leave_as_is(image, rng):
    """A Python augmentation that allocates nothing."""


class PythonDataset:
    """A user-written dataset: plain Python, a ``Sample`` per call (the generic path)."""

    def __init__(self, source):
        self.images, self.targets, self.labels = plain_arrays(source)

    def __len__(self):
        return len(self.images)

    def get_sample(self, index):
        return om.Sample(self.images[index], self.targets[index], self.labels[index])


def python_gain_offset(image, rng):
    """A gain and offset written as a user would, in numpy (the peers run it too)."""
    image *= 1 + 0.2 * (2 * rng.next_single() - 1)
    image += 0.1 * (2 * rng.next_single() - 1)


# ------------------------------------------------------------------ cases

class Case:
    """One configuration: ``run(n)`` consumes n batches after warm-up and returns seconds."""
    name = ""
    peer = False
    loader = None

    def setup(self):
        pass

    def run(self, n):
        raise NotImplementedError

    def teardown(self):
        pass


class FloorCase(Case):
    """The bytes a batch must move, moved by numpy: each batch's source pixels (gathered
    beforehand into one contiguous array, read once) copied into a reused padded buffer,
    and the padding written once."""

    def __init__(self, threads=1):
        self.threads = threads
        self.name = "floor (numpy copy)" + (f", {threads} threads" if threads > 1 else "")

    def setup(self):
        dataset = workload_dataset()
        sampler = om.ShuffledSampler(COUNT, BATCH, seed=0)
        self.sources = []
        for step in range(sampler.steps_per_epoch):
            samples = [dataset.get_sample(int(i)) for i in sampler.indices(0, step)]
            width = max(s.image.shape[2] for s in samples)
            padded = -(-width // MULTIPLE) * MULTIPLE
            pixels = np.concatenate([s.image.ravel() for s in samples])
            self.sources.append((pixels, BATCH * HEIGHT * padded))
        self.buffers = [np.empty(BATCH * HEIGHT * MAX_W, np.float32) for _ in range(self.threads)]

    def _copy(self, n, buffer, offset):
        for k in range(n):
            pixels, total = self.sources[(k + offset) % len(self.sources)]
            np.copyto(buffer[:pixels.size], pixels)
            buffer[pixels.size:total].fill(0)

    def run(self, n):
        # Each thread copies its share of the n batches into its own reused buffer.
        shares = [n // self.threads + (t < n % self.threads) for t in range(self.threads)]
        threads = [threading.Thread(target=self._copy, args=(shares[t], self.buffers[t], t * 7))
                   for t in range(self.threads)]
        start = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return time.perf_counter() - start


class LoaderCase(Case):
    def __init__(self, workers, generic=False):
        self.workers, self.generic = workers, generic
        kind = "generic path (Python dataset + Python aug)" if generic else "onemodel_cy fast path"
        self.name = f"{kind}, {workers} workers"

    def setup(self):
        self.loader = make_pipeline(self.workers, self.generic)
        self.next = 0

    def run(self, n):
        warm = 2 * PREFETCH + self.workers
        with self.loader.iter(self.next, self.next + warm + n) as stream:
            for _ in range(warm):
                next(stream).close()
            start = time.perf_counter()
            for batch in stream:
                batch.close()
            elapsed = time.perf_counter() - start
        self.next += warm + n
        return elapsed

    def steady_state(self, n):
        """(bytes and allocation calls per batch on this thread, pool misses) over n warm batches."""
        pool = self.loader.collator.pool
        warm = 4 * (PREFETCH + self.workers) + 50   # the pool reaches the window's size
        with self.loader.iter(0, warm + n) as stream:
            for _ in range(warm):
                next(stream).close()
            misses = pool.stats()["misses"]
            bytes0, calls0 = _alloccount.thread_allocated()
            for batch in stream:
                batch.close()
            bytes1, calls1 = _alloccount.thread_allocated()
        return (bytes1 - bytes0) / n, (calls1 - calls0) / n, pool.stats()["misses"] - misses


class OwnShareCase(LoaderCase):
    """The generic path with a dataset and an augmentation that allocate nothing: what is
    left is the loader's own allocation on the consuming thread (0 workers)."""

    def __init__(self):
        super().__init__(0, generic=True)
        self.name = "generic path, stored samples + no-op aug, 0 workers"

    def setup(self):
        self.loader = pipeline(StoredSamples(workload_dataset()), leave_as_is)
        self.next = 0


class TorchCase(Case):
    """torch.utils.data.DataLoader doing the same work as well as we could write it: the
    dataset returns a numpy copy with the gain and offset applied in place, the collate_fn
    pads into one zeroed array and wraps it with torch.from_numpy. Workers are processes,
    as torch makes them; they are started and shut down inside each repetition, so they
    never run while another configuration is being measured."""
    peer = True

    def __init__(self, workers):
        self.workers = workers
        self.name = f"torch DataLoader, {workers} workers"

    def setup(self):
        import torch
        torch.set_num_threads(1)
        dataset = _TorchDataset(*plain_arrays(workload_dataset()))
        self.loader = torch.utils.data.DataLoader(
            dataset, batch_size=BATCH, shuffle=True, drop_last=True, num_workers=self.workers,
            collate_fn=_torch_collate, generator=torch.Generator().manual_seed(0),
            prefetch_factor=PREFETCH if self.workers else None)

    def run(self, n):
        warm = 2 + 2 * self.workers
        iterator, served = None, 0
        try:
            while served < warm + n:
                if iterator is None:
                    iterator = iter(self.loader)
                try:
                    next(iterator)
                except StopIteration:
                    iterator = None
                    continue
                served += 1
                if served == warm:
                    start = time.perf_counter()
            return time.perf_counter() - start
        finally:
            del iterator   # shuts the worker processes down

    def teardown(self):
        self.loader = None


class _TorchDataset:
    def __init__(self, images, targets, labels):
        self.images, self.targets, self.labels = images, targets, labels

    def __len__(self):
        return len(self.images)

    def __getitem__(self, index):
        image = self.images[index].copy()
        python_gain_offset(image, om.SampleRng(index))
        return image, self.targets[index], self.labels[index]


def _torch_collate(items):
    import torch
    widths = np.array([image.shape[2] for image, _, _ in items], dtype=np.int32)
    padded = -(-int(widths.max()) // MULTIPLE) * MULTIPLE
    c, h = items[0][0].shape[:2]
    images = np.zeros((len(items), c, h, padded), dtype=np.float32)
    for j, (image, _, _) in enumerate(items):
        images[j, :, :, :image.shape[2]] = image
    targets = np.concatenate([t for _, t, _ in items])
    lengths = np.array([len(t) for _, t, _ in items], dtype=np.int32)
    labels = np.array([label for _, _, label in items], dtype=np.int32)
    return tuple(torch.from_numpy(a) for a in (images, widths, targets, lengths, labels))


class GrainCase(Case):
    """Grain's MapDataset pipeline doing the same work (only when grain is installed)."""
    peer = True
    name = "grain MapDataset"

    def setup(self):
        import grain
        images = plain_arrays(workload_dataset())[0]

        def augment(index):
            image = images[index].copy()
            python_gain_offset(image, om.SampleRng(index))
            return image

        def pad(batch_images):
            padded = -(-max(i.shape[2] for i in batch_images) // MULTIPLE) * MULTIPLE
            out = np.zeros((len(batch_images), 1, HEIGHT, padded), np.float32)
            for j, image in enumerate(batch_images):
                out[j, :, :, :image.shape[2]] = image
            return out

        dataset = (grain.MapDataset.range(COUNT).shuffle(seed=0).map(augment)
                   .batch(BATCH, drop_remainder=True, batch_fn=pad).repeat())
        self.dataset, self.position = dataset, 0

    def run(self, n):
        start = time.perf_counter()
        for _ in range(n):
            self.dataset[self.position]
            self.position += 1
        return time.perf_counter() - start


# ------------------------------------------------------------------ scaling

def scaling_rows(quick):
    """Seconds per batch of the fast path (0 workers) against batch size and image width."""
    rows = []
    n = 20 if quick else 60
    configs = [("batch", b, MIN_W, MAX_W) for b in (32, 64, 128, 256, 512)]
    configs += [("width", BATCH, w, w) for w in (64, 128, 256, 512, 1024)]
    for kind, batch, min_w, max_w in configs:
        loader = make_pipeline(0, batch=batch, min_width=min_w, max_width=max_w)
        S = loader.steps_per_epoch

        def consume(loader=loader, S=S):
            with loader.iter(0, min(n, S * 8)) as stream:
                for b in stream:
                    b.close()
        consume()  # warm-up
        times = []
        for _ in range(3):
            start = time.perf_counter()
            consume()
            times.append((time.perf_counter() - start) / min(n, S * 8))
        sample = loader.batch_at(0)
        moved = sample.images.nbytes + int(sample.widths.sum()) * HEIGHT * 4
        sample.close()
        rows.append((kind, batch, f"{min_w}-{max_w}", statistics.median(times), moved))
    return rows


# ------------------------------------------------------------------ driver

def measure(cases, batches, repeats):
    rates = {case.name: [] for case in cases}
    for case in cases:
        case.setup()
    try:
        for _ in range(repeats):
            for case in cases:
                rates[case.name].append(batches / case.run(batches))
    finally:
        for case in cases:
            case.teardown()
    return rates


def main(argv=None):
    parser = argparse.ArgumentParser(prog="bench_loader", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer batches and repeats (< 1 minute)")
    parser.add_argument("--repeats", type=int, default=None)
    parser.add_argument("--batches", type=int, default=None, help="batches per measurement")
    parser.add_argument("--no-peers", action="store_true", help="skip torch and grain")
    parser.add_argument("--results", default=None, help="write the tables here (default benchmarks/RESULTS.md "
                                                        "when run from a source checkout)")
    args = parser.parse_args(argv)
    repeats = args.repeats or (3 if args.quick else 5)
    batches = args.batches or (60 if args.quick else 500)
    _alloccount.install()

    ours = [LoaderCase(w) for w in (0, 1, 2, 4)] + [LoaderCase(w, generic=True) for w in (0, 2)]
    cases = [FloorCase(1), FloorCase(2)] + ours
    if not args.no_peers:
        try:
            import torch  # noqa: F401
            cases += [TorchCase(0), TorchCase(2)]
        except ImportError:
            print("torch not installed: skipping the torch peer", file=sys.stderr)
        try:
            import grain  # noqa: F401
            cases.append(GrainCase())
        except ImportError:
            print("grain not installed: skipping the grain peer", file=sys.stderr)

    print(f"measuring {len(cases)} configurations x {repeats} interleaved repetitions of {batches} batches ...",
          file=sys.stderr)
    rates = measure(cases, batches, repeats)
    medians = {name: statistics.median(r) for name, r in rates.items()}
    floor = medians["floor (numpy copy)"]
    peers = [c.name for c in cases if c.peer]
    best_peer = max(peers, key=medians.get) if peers else None

    steady = {}
    for case in ours:
        case.setup()
        steady[case.name] = case.steady_state(50 if args.quick else 200)

    lines = [f"## §7 workload: {COUNT} images {HEIGHT} x {MIN_W}-{MAX_W}, batch {BATCH}, width multiple "
             f"{MULTIPLE}, GainOffset, prefetch {PREFETCH}", "",
             "| configuration | batches/s median | min-max | x floor | x best peer | bytes/batch on consumer "
             "(allocs) | pool misses after warm-up |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for case in cases:
        r = rates[case.name]
        versus_peer = f"{medians[case.name] / medians[best_peer]:.1f}" if best_peer else "-"
        row = (f"| {case.name} | {medians[case.name]:,.0f} | {min(r):,.0f}-{max(r):,.0f} | "
               f"{medians[case.name] / floor:.2f} | {versus_peer} |")
        if case.name in steady:
            per_batch, calls, misses = steady[case.name]
            row += f" {per_batch:,.0f} ({calls:.1f}) | {misses} |"
        else:
            row += " - | - |"
        lines.append(row)
    lines.append("")
    lines.append(f"Best peer: {best_peer}." if best_peer else "No peer installed.")
    own = OwnShareCase()
    own.setup()
    per_batch, calls, _ = own.steady_state(50 if args.quick else 200)
    lines.append(f"At 0 workers the generic path runs the dataset and the augmentation on the consuming thread, "
                 f"so their allocations count there; with a dataset and an augmentation that allocate nothing "
                 f"the loader's own share is {per_batch:,.0f} bytes ({calls:.1f} allocations) per batch: the index "
                 f"ints passed to get_sample and the scratch arrays handed to the augmentation.")
    floor2 = medians.get("floor (numpy copy), 2 threads")
    fast0, fast2 = medians["onemodel_cy fast path, 0 workers"], medians["onemodel_cy fast path, 2 workers"]
    lines.append(f"Fast path 2 workers / 0 workers: {fast2 / fast0:.2f}; 2 workers / 2-thread floor: "
                 f"{fast2 / floor2:.2f}.")
    lines += ["", "## Cost growth (fast path, 0 workers, median of 3)", "",
              "| varied | batch | widths | us/batch | MiB moved | ns per KiB moved |",
              "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for kind, batch, widths, seconds, moved in scaling_rows(args.quick):
        lines.append(f"| {kind} | {batch} | {widths} | {seconds * 1e6:,.0f} | {moved / 2**20:.2f} | "
                     f"{seconds * 1e9 / (moved / 1024):,.1f} |")

    command = "python benchmarks/bench_loader.py " + " ".join(argv if argv is not None else sys.argv[1:])
    header = ["# onemodel_cy benchmark results", "",
              f"- date: {datetime.datetime.now().isoformat(timespec='seconds')}",
              f"- command: `{command.strip()}`",
              f"- machine: {platform.machine()}, {os.cpu_count()} CPUs, Python {platform.python_version()}, "
              f"numpy {np.__version__}",
              f"- {repeats} interleaved repetitions of {batches} batches per configuration", ""]
    text = "\n".join(header + lines) + "\n"
    print(text)
    target = args.results
    if target is None:   # a source checkout: benchmarks/ beside the package holds this script
        here = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")
        target = os.path.join(here, "RESULTS.md") if os.path.exists(os.path.join(here, "bench_loader.py")) else None
    if target:
        with open(target, "w", encoding="utf-8") as fh:
            fh.write(text)
        print(f"written to {target}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
