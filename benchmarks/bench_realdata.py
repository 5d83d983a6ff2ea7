"""Real data: PNG text lines decoded per batch, against the same lines decoded once into a pack.

    python benchmarks/bench_realdata.py [--images 3000] [--repeats 5] [--large 0]

Renders ``--images`` text-line PNGs with Pillow (height 32, widths from the text), packs
them with ``onemodel_cy.pack`` (size on disk against the PNGs, packing throughput), then
measures in one interleaved run (round-robin repetitions, medians) images per second of
the following, each consumer holding its two previous batches as a training loop does:

* torch ``DataLoader`` whose dataset decodes each PNG with Pillow and converts it as §6
  does (numpy float32), with a padding collate, 0 and 2 worker processes;
* this package's ``DataLoader`` over a Python dataset doing the same in ``get_sample``
  (``gray8_to_planar``), 0 and 2 worker threads;
* this package's ``DataLoader`` over ``PackedImageDataset`` (the GIL-free fetch step with
  the fused 8-bit conversion), 0 and 2 worker threads, with its pool misses after warm-up;
* the floor of this work on one thread: read each batch's uint8 pixels once and write the
  padded float32 batch once (a converting copy and a fill in numpy);
* the ceiling of two cores for the packed route: two processes, each running its own
  0-worker loop over the pack, timed together (what 2 workers would reach if handing
  batches between threads cost nothing).

``--large N`` then writes a pack of N generated line images (several GB for a million)
and reads all of it through the loader with 2 workers, printing the reading process's
resident memory (anonymous and file-backed) before, during and after.
"""
from __future__ import annotations

import argparse
import os
import random
import sys
import tempfile
import time

import numpy as np

import onemodel_cy as om
from _timing import TwoCopies, against_ceiling, round_robin, summary

BATCH, HEIGHT, MEAN, STD, PAD, MULTIPLE = 32, 32, 0.5, 0.25, 0.0, 8
HOLD = 2       # batches the consumer holds while the next is built, as a training loop does
ALPHABET = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:'-"


# ------------------------------------------------------------------ data

def render_lines(folder, n, seed=0):
    """``n`` PNG text lines of height 32 rendered with Pillow's default font, and labels.txt."""
    from PIL import Image, ImageDraw, ImageFont
    rng = random.Random(seed)
    font = ImageFont.load_default()
    os.makedirs(folder, exist_ok=True)
    lines = []
    for i in range(n):
        text = "".join(rng.choice(ALPHABET) for _ in range(rng.randint(8, 40))).strip() or "x"
        width = int(ImageDraw.Draw(Image.new("L", (1, 1))).textlength(text, font=font)) + 8
        image = Image.new("L", (width, HEIGHT), color=rng.randint(200, 255))
        ImageDraw.Draw(image).text((4, rng.randint(4, 14)), text, fill=rng.randint(0, 60), font=font)
        name = f"line{i:06d}.png"
        image.save(os.path.join(folder, name))
        lines.append(f"{name}\t{text}\n")
    with open(os.path.join(folder, "labels.txt"), "w", encoding="utf-8") as f:
        f.writelines(lines)
    return [line.split("\t")[0] for line in lines]


def decode_png(path):
    from PIL import Image
    with Image.open(path) as image:
        return np.asarray(image.convert("L"), dtype=np.uint8)


def section6_numpy(pixels):
    """§6 in numpy float32 (what a torch user would write)."""
    scale = np.float32(1.0) / (np.float32(255.0) * np.float32(STD))
    return (pixels.astype(np.float32) * scale - np.float32(MEAN) / np.float32(STD))[None]


class PngDataset:
    """This package's dataset protocol over the PNG files: decode with Pillow in get_sample."""

    def __init__(self, folder, names):
        self.paths = [os.path.join(folder, n) for n in names]

    def __len__(self):
        return len(self.paths)

    def get_sample(self, i):
        return om.Sample(om.gray8_to_planar(decode_png(self.paths[i]), MEAN, STD), [1], int(i))


class TorchPngDataset:
    def __init__(self, folder, names):
        self.paths = [os.path.join(folder, n) for n in names]

    def __len__(self):
        return len(self.paths)

    def __getitem__(self, i):
        return section6_numpy(decode_png(self.paths[i])), i


def torch_collate(items):
    import torch
    widest = max(image.shape[2] for image, _ in items)
    padded = -(-widest // MULTIPLE) * MULTIPLE
    out = np.full((len(items), 1, HEIGHT, padded), PAD, dtype=np.float32)
    for j, (image, _) in enumerate(items):
        out[j, :, :, :image.shape[2]] = image
    return torch.from_numpy(out), torch.tensor([i for _, i in items])


# ------------------------------------------------------------------ the configurations

class TorchCase:
    def __init__(self, folder, names, workers):
        import torch
        torch.set_num_threads(1)
        self.name = f"torch DataLoader, PNG + Pillow, {workers} workers"
        self.loader = torch.utils.data.DataLoader(
            TorchPngDataset(folder, names), batch_size=BATCH, shuffle=True, drop_last=True,
            num_workers=workers, collate_fn=torch_collate, generator=torch.Generator().manual_seed(0),
            prefetch_factor=2 if workers else None)
        self.workers = workers

    def run(self, batches):
        """Batches/s after a warm-up (workers start inside the repetition, as torch does)."""
        it, served, warm, held = None, 0, 1 + 2 * self.workers, []
        try:
            while served < warm + batches:
                if it is None:
                    it = iter(self.loader)
                try:
                    held = held[-HOLD + 1:] + [next(it)]
                except StopIteration:      # a new epoch (counted: torch restarts its workers)
                    it = None
                    continue
                served += 1
                if served == warm:
                    start = time.perf_counter()
            return batches / (time.perf_counter() - start)
        finally:
            del it                          # shuts the worker processes down


class OursCase:
    def __init__(self, name, dataset, workers):
        self.name = f"{name}, {workers} workers"
        self.loader = om.DataLoader(dataset, om.ShuffledSampler(len(dataset), BATCH, 0),
                                    om.ImageBatchCollator(width_multiple=MULTIPLE, pad_value=PAD),
                                    seed=0, workers=workers, prefetch=4)
        self.start = 0
        self.misses = []

    def run(self, batches):
        warm = 4
        stream = self.loader.iter(self.start, self.start + warm + batches)
        self.start += warm + batches
        held = [next(stream) for _ in range(warm)][-HOLD:]
        before = self.loader.collator.pool.stats()["misses"]
        start = time.perf_counter()
        for batch in stream:
            held.pop(0).close()
            held.append(batch)
        elapsed = time.perf_counter() - start
        for batch in held:
            batch.close()
        self.misses.append(self.loader.collator.pool.stats()["misses"] - before)
        return batches / elapsed


class FloorCase:
    """The floor of this work: per batch, read its images' uint8 pixels once and write the
    padded float32 block once, in the two cheapest numpy calls there are (a converting
    copy of one contiguous run of pixels, then the padding's fill). It does no §6
    arithmetic, no per-image work and reads the pixels in order: a bound the loader can
    only approach."""
    name = "floor: uint8 read once, padded float32 written once (1 thread)"

    def __init__(self, pack_folder):
        # numpy alone, pixels read into memory (the loader's pages are warm as well).
        self.pixels = np.load(os.path.join(pack_folder, "pixels.npy"))
        self.widths = np.load(os.path.join(pack_folder, "shapes.npy"))[:, 2]
        self.order = np.random.default_rng(0).permutation(len(self.widths))
        self.out = np.empty(BATCH * HEIGHT * (-(-int(self.widths.max()) // MULTIPLE) * MULTIPLE), np.float32)
        self.at = 0

    def run(self, batches):
        start = time.perf_counter()
        for b in range(batches):
            picks = self.order[(b * BATCH) % (len(self.order) - BATCH):][:BATCH]
            widths = self.widths[picks]
            total = int(widths.sum()) * HEIGHT
            padded = BATCH * HEIGHT * (-(-int(widths.max()) // MULTIPLE) * MULTIPLE)
            if self.at + total > self.pixels.shape[0]:
                self.at = 0
            self.out[:total] = self.pixels[self.at:self.at + total]
            self.out[total:padded] = PAD
            self.at += total
        return batches / (time.perf_counter() - start)


def packed_zero_worker_run(pack_folder, batch):
    """The packed 0-worker row's loop, as a function of n (for TwoCopies' processes)."""
    global BATCH
    BATCH = batch
    case = OursCase("packed", om.PackedImageDataset(pack_folder, MEAN, STD), 0)
    return case.run


class CeilingCase:
    name = "ceiling: 2 processes, each its own packed 0-worker loop"

    def __init__(self, pack_folder):
        self.copies = TwoCopies(packed_zero_worker_run, pack_folder, BATCH)

    def run(self, batches):
        return self.copies.rate(batches)

    def close(self):
        self.copies.close()


def calibrated(case, seconds=0.4):
    """Batches per repetition so that one lasts about ``seconds`` (at least 8)."""
    n = 8
    while True:
        rate = case.run(n)
        if n / rate >= seconds / 2 or n >= 1 << 16:
            return max(8, int(rate * seconds))
        n *= 2


# ------------------------------------------------------------------ reports

def folder_bytes(folder, names):
    return sum(os.path.getsize(os.path.join(folder, n)) for n in names)


def pack_report(folder, names, out):
    start = time.perf_counter()
    report = om.pack(folder, out, labels=os.path.join(folder, "labels.txt"), height=HEIGHT, workers=2,
                     progress=False)
    seconds = time.perf_counter() - start
    pngs = folder_bytes(folder, names)
    print(f"packing: {report.count} PNGs -> pack in {seconds:.2f} s = {report.count / seconds:,.0f} images/s "
          f"(2 decoding threads); skipped {len(report.skipped)}")
    print(f"size on disk: PNGs {pngs / 1e6:.1f} MB, pack {report.bytes / 1e6:.1f} MB "
          f"({report.bytes / pngs:.2f} x the PNGs; the pack stores raw 8-bit pixels)")
    return report


def table(cases, samples, misses):
    medians = {c.name: summary(samples[c.name])[0] * BATCH for c in cases}
    floor = medians[FloorCase.name]
    torch_best = max([v for k, v in medians.items() if k.startswith("torch")], default=float("nan"))
    lines = ["| configuration | images/s median | min-max | x floor | x best torch | pool misses |",
             "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for c in cases:
        med, lo, hi = (v * BATCH for v in summary(samples[c.name]))
        # Misses after the first repetition (which fills the pool): steady state.
        miss = str(sum(misses[c.name][1:])) if c.name in misses else ""
        lines.append(f"| {c.name} | {med:,.0f} | {lo:,.0f}-{hi:,.0f} | {med / floor:.2f} | "
                     f"{med / torch_best:.1f} | {miss} |")
    return "\n".join(lines), medians


def rss():
    """The process's resident memory (kB): total, anonymous, file-backed (/proc/self/status)."""
    fields = {}
    with open("/proc/self/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "RssAnon", "RssFile"):
                fields[key] = int(value.split()[0])
    return fields


def large_pack(n, folder):
    """Write n generated line images (height 32, widths 64-448) and read all of it back."""
    rng = np.random.default_rng(1)
    pool = rng.integers(0, 256, 1 << 24, dtype=np.uint8)
    widths = rng.integers(64, 449, n)
    starts = rng.integers(0, (1 << 24) - HEIGHT * 449, n)

    def items():
        for i in range(n):
            w = int(widths[i])
            yield pool[starts[i]:starts[i] + HEIGHT * w].reshape(HEIGHT, w), [1 + i % 50], i
    out = os.path.join(folder, "large")
    start = time.perf_counter()
    report = om.pack(items(), out, progress=False)
    seconds = time.perf_counter() - start
    print(f"large pack: {report.count:,} images, {report.bytes / 1e9:.2f} GB written in {seconds:.0f} s "
          f"({report.count / seconds:,.0f} images/s, {report.bytes / 1e6 / seconds:,.0f} MB/s, from uint8 arrays)")
    del items
    before = rss()
    kept = om.PackedImageDataset(out, MEAN, STD, resident_limit=None)
    print(f"  RSS before opening: {mb(before)}; after opening: {mb(rss())}")
    read_all(kept, "resident_limit=None (never release)")
    kept.release_pages()
    del kept
    ds = om.PackedImageDataset(out, MEAN, STD)
    read_all(ds, f"the default resident_limit ({ds.resident_limit >> 20} MiB)")
    print(f"  automatic releases: {ds.pages_released}")


def mb(r):
    return (f"{r['VmRSS'] / 1e3:,.0f} MB (anon {r['RssAnon'] / 1e3:,.0f} MB, "
            f"file-backed {r['RssFile'] / 1e3:,.0f} MB)")


def read_all(ds, how):
    """One pass over the pack with 2 workers, holding the two previous batches."""
    loader = om.DataLoader(ds, om.SequentialSampler(len(ds), 256), om.ImageBatchCollator(width_multiple=8),
                           seed=0, workers=2, prefetch=4)
    start, seen, first = time.perf_counter(), 0, rss()
    peak, held = dict(first), []
    for k, batch in enumerate(loader.iter(0, loader.steps_per_epoch)):
        seen += batch.images.shape[0]
        held.append(batch)
        if len(held) > 2:
            held.pop(0).close()
        if k % 50 == 0:
            peak = {key: max(peak[key], value) for key, value in rss().items()}
        if k % 1000 == 0:
            print(f"  [{how}] after {seen:,} images: RSS {mb(rss())}", flush=True)
    seconds = time.perf_counter() - start
    del held
    loader.close()
    print(f"read {seen:,} images in {seconds:.1f} s ({seen / seconds:,.0f} images/s, 2 workers, {how})")
    print(f"  RSS at the start: {mb(first)}; at the end: {mb(rss())}")
    print(f"  peak sampled every 50 batches: anon {peak['RssAnon'] / 1e3:,.0f} MB, "
          f"file-backed {peak['RssFile'] / 1e3:,.0f} MB")


def main(argv=None):
    global BATCH
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--images", type=int, default=3000)
    parser.add_argument("--seconds", type=float, default=0.5, help="about how long one repetition lasts")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--batch", type=int, default=BATCH, help="batch size (default 32)")
    parser.add_argument("--large", type=int, default=0, help="images of the large-pack read test (0: skip)")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    args = parser.parse_args(argv)
    BATCH = args.batch
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        names = render_lines(os.path.join(folder, "png"), args.images)
        pack_report(os.path.join(folder, "png"), names, os.path.join(folder, "pack"))
        packed = om.PackedImageDataset(os.path.join(folder, "pack"), MEAN, STD)
        cases = [FloorCase(os.path.join(folder, "pack"))]
        try:
            cases += [TorchCase(os.path.join(folder, "png"), names, w) for w in (0, 2)]
        except ImportError:
            print("torch not installed: skipping the torch configurations", file=sys.stderr)
        pngs = PngDataset(os.path.join(folder, "png"), names)
        cases += [OursCase("onemodel_cy, Python PNG dataset", pngs, w) for w in (0, 2)]
        cases += [OursCase("onemodel_cy, PackedImageDataset", packed, w) for w in (0, 2)]
        ceiling = CeilingCase(os.path.join(folder, "pack"))
        cases.append(ceiling)
        counts = {c.name: calibrated(c, args.seconds) for c in cases}
        samples = round_robin({c.name: (lambda c=c: c.run(counts[c.name])) for c in cases}, args.repeats)
        ceiling.close()
        for c in cases:
            if isinstance(c, OursCase):
                c.misses = c.misses[-args.repeats:]        # the measured repetitions only
        misses = {c.name: c.misses for c in cases if isinstance(c, OursCase)}
        text, medians = table(cases, samples, misses)
        print(f"\nbatch {BATCH}, height {HEIGHT}, {args.repeats} interleaved repetitions of about "
              f"{args.seconds} s each (batches: {counts}), {os.cpu_count()} CPUs (shared machine)\n")
        print(text)
        p0 = medians["onemodel_cy, PackedImageDataset, 0 workers"]
        p2 = medians["onemodel_cy, PackedImageDataset, 2 workers"]
        top = medians[CeilingCase.name]
        print(f"\npacked 0 workers / floor: {p0 / medians[FloorCase.name]:.2f}; "
              + against_ceiling("packed", p2, p0, top))
        if args.large:
            large_pack(args.large, folder)


if __name__ == "__main__":
    main()
