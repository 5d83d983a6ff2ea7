"""Augmentation: the built-in ``text_lines()`` preset against the same operations in OpenCV.

    PYTHONPATH=. python benchmarks/bench_augment.py [--lines 4000] [--rounds 5] [--seconds 0.5]
                 [--steps N] [--batch 64 128] [--dir DIR] [--quick]

Issue 35's benchmark (``PYTHONPATH=.`` from a checkout built in place, so that the
checkout's package is the one imported: the header prints where it came from). Renders
``--lines`` text-line PNGs as ``bench_realdata.py`` does (Pillow's default font, height
32, widths from the text) and packs them once with ``onemodel_cy.pack`` (into a temporary
folder, or reused from ``--dir``). Then, per batch
size, one interleaved run (round-robin slices, medians with the min-max) of images per
second of each configuration below, each an endless training loop (warmed up, workers
kept between slices) whose consumer holds its 2 previous batches. A slice's first
``SKIP`` batches are not timed (a loader with workers built them ahead, its prefetch,
while the others were measured), then ``--steps`` batches are (by default as many as take
about ``--seconds``, at least 8):

* the pack, no augmentation, 0 workers and 2 threads (the fast path);
* the pack with ``onemodel_cy.augment.text_lines()`` as the loader's ``transform``, 0
  workers, 2 threads and 2 processes;
* the pack with the same seven operations written in OpenCV and numpy as a Python
  ``transform(sample, rng)`` (``opencv_text_lines`` below: width stretch by
  ``cv2.resize``, rotation/shear/scale/shift by ``cv2.warpAffine``, elastic by
  ``cv2.remap`` of a coarse random grid upsampled or perspective by
  ``cv2.warpPerspective``, 2x2 ``cv2.erode``/``cv2.dilate``, ``cv2.GaussianBlur``,
  brightness/contrast and Gaussian noise in numpy; the preset's probabilities and ranges,
  ``onemodel_cy.augment.TEXT_LINES``; every draw from a numpy ``Generator`` seeded from
  the sample's ``SampleRng``), 0 workers, 2 threads and 2 processes;
* ``torch.utils.data.DataLoader`` over the same pixels held in RAM (a map-style dataset
  running the same OpenCV pipeline, a ``collate_fn`` padding to the widest), 0 and 2
  workers (persistent);
* the ceiling of two cores for the preset and for the OpenCV transform: two processes,
  each running its own 0-worker loop, timed together (``_timing.TwoCopies``).

OpenCV is given one thread per process (``cv2.setNumThreads(1)``): the loaders' workers
are the parallelism, and a line of 32 rows is too small for OpenCV's own threads to pay.
The printed ratios are the issue's targets: the preset at 2 workers against the better
torch + OpenCV row (>= 6x), against this package's best route for the OpenCV transform
(>= 4x) and against the better no-augmentation row (>= 0.07x).

The second table times each operation alone on one image of the pack's median width
(``op.apply(image, rng)`` of the built-in kernel; the OpenCV function on the same image),
microseconds per image, medians of interleaved repetitions; its last row is the whole
preset against the whole OpenCV pipeline.

Without OpenCV the OpenCV and torch rows are skipped (the torch rows run the OpenCV
pipeline), and without torch the torch rows, each with a printed note.
"""
from __future__ import annotations

import argparse
import itertools
import math
import os
import platform
import sys
import tempfile
import time
from collections import deque

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import onemodel_cy as om  # noqa: E402
from onemodel_cy import augment  # noqa: E402
from _timing import TwoCopies, against_ceiling, round_robin, seconds, summary  # noqa: E402

try:
    import cv2
except ImportError:          # the OpenCV rows are skipped (see main)
    cv2 = None
else:
    cv2.setNumThreads(1)

HEIGHT, MULTIPLE, PAD, PREFETCH, SEED = 32, 4, 0.0, 4, 0
MEAN, STD = 0.0, 1.0           # pixels in [0, 1], the range the preset's magnitudes are meant for
HELD = 2                       # batches the consumer holds while the next is built
SKIP = PREFETCH + 2            # untimed batches at the start of a slice (more than any loader keeps ready)
MIN_STEPS = 8                  # timed batches per slice, at least
P = augment.TEXT_LINES         # the preset's probabilities and ranges, shared with the OpenCV pipeline
CEILING_PRESET = "ceiling: 2 processes, each its own text_lines() 0-worker loop"
CEILING_OPENCV = "ceiling: 2 processes, each its own OpenCV-transform 0-worker loop"


# ------------------------------------------------------------------ the OpenCV pipeline

def _uniform(gen, low, high):
    return low + (high - low) * gen.random()


def cv_stretch(image, gen):
    """Width times U(stretch), linear (cv2.resize)."""
    h, w = image.shape
    width = min(max(1, int(math.floor(w * _uniform(gen, *P["stretch"]) + 0.5))), 1 << 20)
    return cv2.resize(image, (width, h), interpolation=cv2.INTER_LINEAR)


def cv_affine(image, gen):
    """Rotation, horizontal shear, scale about the centre and a vertical shift, on a canvas
    ceil(|shear| h) columns wider (cv2.warpAffine, bilinear, replicated border)."""
    h, w = image.shape
    angle = math.radians(_uniform(gen, -P["rotate"], P["rotate"]))
    shear = _uniform(gen, -P["shear"], P["shear"])
    scale = _uniform(gen, *P["scale"])
    shift = _uniform(gen, -P["shift"], P["shift"])
    width = w + int(math.ceil(abs(shear) * h))
    c, s = math.cos(angle) * scale, math.sin(angle) * scale
    # forward map: rotation-and-scale times shear, about the source centre, onto the canvas centre
    a, b = c, c * shear - s
    d, e = s, s * shear + c
    cx, cy = (w - 1) / 2, (h - 1) / 2
    ox, oy = (width - 1) / 2, (h - 1) / 2 + shift
    matrix = np.array([[a, b, ox - a * cx - b * cy], [d, e, oy - d * cx - e * cy]], np.float64)
    return cv2.warpAffine(image, matrix, (width, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def cv_elastic(image, gen, cell=8):
    """A grid of nodes ``cell`` pixels apart moved by U(+-m), m = U(elastic), upsampled
    linearly to a displacement per pixel (cv2.resize), then cv2.remap (bilinear, replicated)."""
    h, w = image.shape
    m = _uniform(gen, *P["elastic"])
    nodes = gen.uniform(-m, m, (2, h // cell + 2, w // cell + 2)).astype(np.float32)
    dx = cv2.resize(nodes[0], (w, h), interpolation=cv2.INTER_LINEAR)
    dy = cv2.resize(nodes[1], (w, h), interpolation=cv2.INTER_LINEAR)
    dx += np.arange(w, dtype=np.float32)[None, :]
    dy += np.arange(h, dtype=np.float32)[:, None]
    return cv2.remap(image, dx, dy, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


def cv_perspective(image, gen):
    """Each corner moved by U(+-jitter h) in x then y (cv2.warpPerspective, bilinear, replicated)."""
    h, w = image.shape
    r = P["jitter"] * h
    corners = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float32)
    moved = corners + gen.uniform(-r, r, (4, 2)).astype(np.float32)
    matrix = cv2.getPerspectiveTransform(corners, moved)
    return cv2.warpPerspective(image, matrix, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REPLICATE)


_KERNEL = np.ones((P["morphology"], P["morphology"]), np.uint8)


def cv_erode(image, gen):
    return cv2.erode(image, _KERNEL, borderType=cv2.BORDER_REPLICATE)


def cv_dilate(image, gen):
    return cv2.dilate(image, _KERNEL, borderType=cv2.BORDER_REPLICATE)


def cv_blur(image, gen):
    """sigma U(blur), radius ceil(3 sigma) (cv2.GaussianBlur, replicated border)."""
    sigma = _uniform(gen, *P["blur"])
    size = 2 * int(math.ceil(3 * sigma)) + 1
    return cv2.GaussianBlur(image, (size, size), sigma, borderType=cv2.BORDER_REPLICATE)


def cv_brightness(image, gen):
    """x * U(gain) + U(offset), in place (numpy)."""
    gain, offset = _uniform(gen, *P["gain"]), _uniform(gen, *P["offset"])
    image *= np.float32(gain)
    image += np.float32(offset)
    return image


def cv_noise(image, gen):
    """x + sigma z, sigma = U(noise), z a float32 normal a pixel (numpy), in place."""
    sigma = _uniform(gen, *P["noise"])
    image += np.float32(sigma) * gen.standard_normal(image.shape, dtype=np.float32)
    return image


def opencv_text_lines(image, gen):
    """The seven operations of ``text_lines()`` with its probabilities, on a [H, W]
    float32 image (read, never written); the new [H, W] image."""
    start = image
    if gen.random() < P["p_stretch"]:
        image = cv_stretch(image, gen)
    if gen.random() < P["p_affine"]:
        image = cv_affine(image, gen)
    if gen.random() < P["p_warp"]:
        image = (cv_elastic if gen.random() < 0.5 else cv_perspective)(image, gen)
    if gen.random() < P["p_morphology"]:
        image = (cv_erode if gen.random() < 0.5 else cv_dilate)(image, gen)
    if gen.random() < P["p_blur"]:
        image = cv_blur(image, gen)
    if image is start:           # the in-place steps below must not write the dataset's pixels
        image = image.copy()
    if gen.random() < P["p_brightness"]:
        image = cv_brightness(image, gen)
    if gen.random() < P["p_noise"]:
        image = cv_noise(image, gen)
    return image


def opencv_transform(sample, rng):
    """The OpenCV pipeline as this package's ``transform(sample, rng) -> Sample``: a numpy
    Generator seeded from the sample's rng (so the batch is the same on every route)."""
    gen = np.random.default_rng(rng.next_u64())
    image = opencv_text_lines(np.asarray(sample.image)[0], gen)
    return om.Sample(image[None], sample.target, sample.label)


# ------------------------------------------------------------------ torch

class TorchLines:
    """torch's map-style dataset over the pack's pixels held in RAM (float32 [1, H, W]
    each), running the OpenCV pipeline with a numpy Generator seeded per item."""

    def __init__(self, images, targets):
        self.images, self.targets = images, targets
        self.counter = itertools.count()

    def __len__(self):
        return len(self.images)

    def __getitem__(self, i):
        gen = np.random.default_rng(SEED * 1_000_003 + next(self.counter))
        return opencv_text_lines(self.images[i][0], gen), self.targets[i]


def torch_collate(items):
    """Pad to the widest (a multiple of MULTIPLE) into one float32 batch, as the collator does."""
    import torch
    widest = max(image.shape[1] for image, _ in items)
    padded = -(-widest // MULTIPLE) * MULTIPLE
    images = np.full((len(items), 1, HEIGHT, padded), PAD, dtype=np.float32)
    for j, (image, _) in enumerate(items):
        images[j, 0, :, :image.shape[1]] = image
    targets = np.concatenate([t for _, t in items])
    return (torch.from_numpy(images), torch.from_numpy(targets),
            torch.tensor([len(t) for _, t in items]))


def torch_loader(pixels, batch, workers):
    import torch
    torch.set_num_threads(1)
    return torch.utils.data.DataLoader(
        TorchLines(*pixels), batch_size=batch, shuffle=True, drop_last=True, collate_fn=torch_collate,
        num_workers=workers, persistent_workers=workers > 0, prefetch_factor=2 if workers else None,
        generator=torch.Generator().manual_seed(SEED))


# ------------------------------------------------------------------ this package's loaders

def make_transform(kind):
    if kind == "preset":
        return augment.text_lines()
    if kind == "opencv":
        return opencv_transform
    return None


def package_loader(pack, batch, kind, workers=0, mode="thread"):
    dataset = om.PackedImageDataset(pack, MEAN, STD)
    return om.DataLoader(dataset, om.ShuffledSampler(len(dataset), batch, seed=SEED),
                         om.ImageBatchCollator(width_multiple=MULTIPLE, pad_value=PAD), seed=SEED,
                         workers=workers, prefetch=PREFETCH, transform=make_transform(kind), worker_mode=mode)


def endless(loader):
    """Batches pass after pass, as a training loop takes them (workers kept between passes)."""
    if isinstance(loader, om.DataLoader):
        yield from loader.iter(0)        # this package's stream has no end
    while True:
        yield from loader


def take(stream, n, held=HELD):
    """The next ``n`` batches of ``stream``, the last ``held`` kept alive (torch's are tuples)."""
    kept = deque()
    for _ in range(n):
        kept.append(next(stream))
        if len(kept) > held:
            batch = kept.popleft()
            if hasattr(batch, "close"):
                batch.close()
    return kept


def slice_rate(stream, n):
    """Batches per second of ``n`` batches of ``stream``, timed after the first SKIP of the
    slice: a stream with workers built those ahead while the other configurations were
    measured (its prefetch), and they would come for free."""
    kept = take(stream, SKIP)
    start = time.perf_counter()
    for _ in range(n):
        kept.append(next(stream))
        if len(kept) > HELD:
            batch = kept.popleft()
            if hasattr(batch, "close"):
                batch.close()
    return n / (time.perf_counter() - start)


def zero_worker_run(pack, batch, kind):
    """The 0-worker row's training loop as a function of n (for TwoCopies' processes)."""
    stream = endless(package_loader(pack, batch, kind))
    return lambda n: take(stream, n)


def calibrated(stream, target, steps=None):
    """Timed batches per slice: ``steps`` if given, else about ``target`` seconds' worth (at
    least MIN_STEPS). Warms the stream up first (workers started, pools at size)."""
    take(stream, 2 * SKIP)
    n, spent = 2, 0.0
    while spent < target / 4 and n < 1 << 16:
        n *= 2
        spent = seconds(lambda: take(stream, n))
    return steps or max(MIN_STEPS, int(n * target / spent))


# ------------------------------------------------------------------ the loader table

def loader_table(pack, pixels, batch, args):
    """One interleaved run of every configuration at ``batch``: rows and medians (images/s)."""
    loaders = {
        "pack, no augmentation, 0 workers": package_loader(pack, batch, "none"),
        "pack, no augmentation, 2 threads": package_loader(pack, batch, "none", 2),
        "pack + text_lines(), 0 workers": package_loader(pack, batch, "preset"),
        "pack + text_lines(), 2 threads": package_loader(pack, batch, "preset", 2),
        "pack + text_lines(), 2 processes": package_loader(pack, batch, "preset", 2, "process"),
    }
    if cv2 is not None:
        loaders.update({
            "pack + OpenCV transform, 0 workers": package_loader(pack, batch, "opencv"),
            "pack + OpenCV transform, 2 threads": package_loader(pack, batch, "opencv", 2),
            "pack + OpenCV transform, 2 processes": package_loader(pack, batch, "opencv", 2, "process"),
        })
        if pixels is not None:
            loaders.update({f"torch DataLoader + OpenCV, {w} workers": torch_loader(pixels, batch, w)
                            for w in (0, 2)})
    ceilings = {CEILING_PRESET: TwoCopies(zero_worker_run, pack, batch, "preset")}
    if cv2 is not None:
        ceilings[CEILING_OPENCV] = TwoCopies(zero_worker_run, pack, batch, "opencv")
    streams = {label: endless(loader) for label, loader in loaders.items()}
    try:
        counts = {label: calibrated(stream, args.seconds, args.steps) for label, stream in streams.items()}
        zero_rows = {CEILING_PRESET: "pack + text_lines(), 0 workers",
                     CEILING_OPENCV: "pack + OpenCV transform, 0 workers"}
        for label in ceilings:      # each copy builds the batches of one slice of its 0-worker row
            counts[label] = 2 * counts[zero_rows[label]]
        measures = {label: (lambda s=s, n=counts[label]: slice_rate(s, n))
                    for label, s in streams.items()}
        measures.update({label: (lambda c=c, n=counts[label]: c.rate(n)) for label, c in ceilings.items()})
        samples = round_robin(measures, args.rounds)
    finally:
        for stream in streams.values():
            stream.close()
        for loader in loaders.values():
            if hasattr(loader, "close"):
                loader.close()
        for ceiling in ceilings.values():
            ceiling.close()
    rows = [(label, *(v * batch for v in summary(samples[label]))) for label in samples]
    return rows, counts


def ratio(value, digits=2):
    """``value`` with ``digits`` decimals, or n/a when a peer was not measured (NaN)."""
    return "n/a" if math.isnan(value) else f"{value:.{digits}f}"


def print_loader_table(batch, rows, counts, args):
    medians = {label: median for label, median, _, _ in rows}
    torch_best = max((v for k, v in medians.items() if k.startswith("torch")), default=math.nan)
    plain_best = max(v for k, v in medians.items() if "no augmentation" in k)
    print(f"\n## batch {batch}: images/s, medians of {args.rounds} interleaved rounds "
          f"(timed batches per slice, after {SKIP} untimed: {', '.join(str(counts[label]) for label, *_ in rows)})\n")
    print("| configuration | images/s (median) | min-max | x best torch + OpenCV | x best no augmentation |")
    print("| --- | ---: | ---: | ---: | ---: |")
    for label, median, low, high in rows:
        print(f"| {label} | {median:,.0f} | {low:,.0f}-{high:,.0f} | {ratio(median / torch_best)} | "
              f"{median / plain_best:.4f} |")
    print()
    python_routes = [v for k, v in medians.items() if k.startswith("pack + OpenCV")]
    python_best = max(python_routes, default=math.nan)
    for route in ("2 threads", "2 processes"):
        preset = medians[f"pack + text_lines(), {route}"]
        print(f"text_lines() at {route}: x best torch + OpenCV {ratio(preset / torch_best)} (target >= 6); "
              f"x best OpenCV transform in this loader {ratio(preset / python_best)} (target >= 4); "
              f"x best no augmentation {preset / plain_best:.3f} (target >= 0.07)")
    print(against_ceiling("text_lines(), threads", medians["pack + text_lines(), 2 threads"],
                          medians["pack + text_lines(), 0 workers"], medians[CEILING_PRESET]))
    print(against_ceiling("text_lines(), processes", medians["pack + text_lines(), 2 processes"],
                          medians["pack + text_lines(), 0 workers"], medians[CEILING_PRESET]))
    if CEILING_OPENCV in medians:
        print(against_ceiling("OpenCV transform, processes", medians["pack + OpenCV transform, 2 processes"],
                              medians["pack + OpenCV transform, 0 workers"], medians[CEILING_OPENCV]))


# ------------------------------------------------------------------ the per-operation table

def operation_cases():
    """(name, built-in operation with the preset's parameters, the OpenCV function or None)."""
    k = P
    border = dict(border=k["border"], fill=k["fill"])
    cases = [
        ("Stretch", augment.Stretch(k["stretch"]), "cv_stretch"),
        ("Affine", augment.Affine(k["rotate"], k["shear"], k["scale"], k["shift"], **border), "cv_affine"),
        ("Elastic", augment.Elastic(k["elastic"], **border), "cv_elastic"),
        ("Perspective", augment.Perspective(k["jitter"], **border), "cv_perspective"),
        ("Erode 2x2", augment.Erode(k["morphology"]), "cv_erode"),
        ("Dilate 2x2", augment.Dilate(k["morphology"]), "cv_dilate"),
        ("GaussianBlur", augment.GaussianBlur(k["blur"]), "cv_blur"),
        ("BrightnessContrast", augment.BrightnessContrast(k["gain"], k["offset"]), "cv_brightness"),
        ("GaussianNoise", augment.GaussianNoise(k["noise"]), "cv_noise"),
        ("text_lines() (with its probabilities)", augment.text_lines(), "opencv_text_lines"),
    ]
    return [(name, op, globals()[fn] if cv2 is not None else None) for name, op, fn in cases]


def per_call_seconds(fn, calls):
    return seconds(lambda: [fn() for _ in range(calls)]) / calls


def operation_table(image, rounds, target):
    """Microseconds per image of each operation, ours and OpenCV's, interleaved."""
    plane = np.ascontiguousarray(image[0])
    rng, gen = om.SampleRng(SEED), np.random.default_rng(SEED)
    measures = {}
    for name, op, cv_fn in operation_cases():
        measures[(name, "ours")] = lambda op=op: op.apply(image, rng)
        if cv_fn is not None:
            # the in-place numpy steps write a copy (the copy is timed too, as apply's output is)
            measures[(name, "opencv")] = lambda f=cv_fn: f(plane.copy(), gen)
    calls = {}
    for key, fn in measures.items():
        n = 1
        while per_call_seconds(fn, n) * n < target / 4 and n < 1 << 20:
            n *= 4
        calls[key] = max(1, int(n * target / (per_call_seconds(fn, n) * n)))
    samples = round_robin({key: (lambda fn=fn, n=calls[key]: per_call_seconds(fn, n)) for key, fn in
                           measures.items()}, rounds)
    print(f"\n## each operation alone: microseconds per image (1x{image.shape[1]}x{image.shape[2]} float32, "
          f"the pack's median width), medians of {rounds} interleaved rounds\n")
    print("| operation | onemodel_cy kernel (us) | min-max | OpenCV / numpy (us) | min-max | OpenCV / ours |")
    print("| --- | ---: | ---: | ---: | ---: | ---: |")
    for name, _, cv_fn in operation_cases():
        ours = [v * 1e6 for v in summary(samples[(name, "ours")])]
        if (name, "opencv") in samples:
            theirs = [v * 1e6 for v in summary(samples[(name, "opencv")])]
            cv_cells = f"{theirs[0]:.1f} | {theirs[1]:.1f}-{theirs[2]:.1f} | {theirs[0] / ours[0]:.2f}"
        else:
            cv_cells = "(no OpenCV) | | "
        print(f"| {name} | {ours[0]:.1f} | {ours[1]:.1f}-{ours[2]:.1f} | {cv_cells} |")


# ------------------------------------------------------------------ data

def build_pack(folder, lines):
    """``lines`` rendered lines (bench_realdata.render_lines) packed at height 32 into
    ``folder``/pack; an existing pack there is reused."""
    out = os.path.join(folder, "pack")
    if os.path.exists(os.path.join(out, "manifest.json")):
        print(f"reusing the pack {out}")
        return out
    from bench_realdata import render_lines
    start = time.perf_counter()
    pngs = os.path.join(folder, "png")
    render_lines(pngs, lines)
    report = om.pack(pngs, out, labels=os.path.join(pngs, "labels.txt"), height=HEIGHT, workers=2, progress=False)
    print(f"rendered and packed {report.count} lines in {time.perf_counter() - start:.1f} s -> {out}")
    return out


def ram_pixels(pack):
    """The pack's images as float32 [1, H, W] arrays in RAM and their targets (for torch)."""
    dataset = om.PackedImageDataset(pack, MEAN, STD)
    samples = [dataset.get_sample(i) for i in range(len(dataset))]
    return [np.array(s.image) for s in samples], [np.array(s.target) for s in samples]


def versions():
    parts = [f"numpy {np.__version__}"]
    parts.append(f"opencv {cv2.__version__}" if cv2 is not None else "no OpenCV")
    try:
        import torch
        parts.append(f"torch {torch.__version__}")
    except ImportError:
        parts.append("no torch")
    return ", ".join(parts)


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "")
    except OSError:
        return platform.processor()


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=None, help="lines in the pack (default 4000; --quick 1000)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 5; --quick 2)")
    parser.add_argument("--seconds", type=float, default=None,
                        help="about how long one timed slice lasts (default 0.5; --quick 0.1)")
    parser.add_argument("--steps", type=int, default=None,
                        help="batches per timed slice, the same for every configuration (default: calibrated "
                             "to --seconds per configuration)")
    parser.add_argument("--batch", type=int, nargs="+", default=[64, 128], help="batch sizes (default 64 128)")
    parser.add_argument("--dir", default=None, help="keep the pack in this folder and reuse it (default: a "
                                                    "temporary folder)")
    parser.add_argument("--quick", action="store_true", help="a smoke run of about a minute")
    parser.add_argument("--no-ops", action="store_true", help="skip the per-operation table")
    args = parser.parse_args(argv)
    args.lines = args.lines or (1000 if args.quick else 4000)
    args.rounds = args.rounds or (2 if args.quick else 5)
    args.seconds = args.seconds or (0.1 if args.quick else 0.5)
    for name in ("lines", "rounds", "steps"):
        if getattr(args, name) is not None and getattr(args, name) < 1:
            parser.error(f"--{name} must be at least 1")
    path = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get("PYTHONPATH") else ""
    print(f"# bench_augment: `{path}{' '.join(['python benchmarks/bench_augment.py', *argv])}`")
    print(f"- machine: {platform.machine()} {cpu_model()}, {os.cpu_count()} CPUs, Python "
          f"{platform.python_version()}, {versions()}, onemodel_cy from {os.path.dirname(om.__file__)}")
    print(f"- {args.lines} lines of height {HEIGHT}, batches {args.batch}, {args.rounds} interleaved rounds, "
          f"consumer holding {HELD} batches, prefetch {PREFETCH}, width multiple {MULTIPLE}")
    if cv2 is None:
        print("- OpenCV not installed (pip install -e '.[bench]'): the OpenCV and torch rows are skipped")
    try:
        import torch  # noqa: F401
        has_torch = True
    except ImportError:
        has_torch = False
        print("- torch not installed: the torch rows are skipped")
    sys.stdout.flush()
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.dir or scratch
        if args.dir:
            folder = os.path.join(args.dir, f"bench_augment_{args.lines}_lines")
            os.makedirs(folder, exist_ok=True)
        pack = build_pack(folder, args.lines)
        pixels = ram_pixels(pack) if has_torch and cv2 is not None else None
        widths = sorted(s.image.shape[2] for s in map(om.PackedImageDataset(pack, MEAN, STD).get_sample,
                                                      range(args.lines)))
        print(f"- line widths: min {widths[0]}, median {widths[len(widths) // 2]}, max {widths[-1]}")
        for batch in args.batch:
            rows, counts = loader_table(pack, pixels, batch, args)
            print_loader_table(batch, rows, counts, args)
            sys.stdout.flush()
        if not args.no_ops:
            dataset = om.PackedImageDataset(pack, MEAN, STD)
            median = next(i for i in range(len(dataset)) if dataset.get_sample(i).image.shape[2] ==
                          widths[len(widths) // 2])
            operation_table(np.array(dataset.get_sample(median).image), args.rounds,
                            0.05 if args.quick else 0.25)


if __name__ == "__main__":
    main()
