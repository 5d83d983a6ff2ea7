"""The §7 workload shared by the benchmarks: the data, the pipelines, the memory floor.

2,048 synthetic text-line images of height 32 and width 64-256, batch 128 (16 steps per
epoch), width multiple 4, GainOffset augmentation, prefetch 8.

Also the Python-heavy dataset of ``bench_workers.py`` and ``compare_trees.py``:
``PngLines`` (PNG bytes decoded with Pillow and normalised in numpy in ``get_sample``) and
its two sizes, ``PNG_SETS``.
"""
from __future__ import annotations

import io
import threading
import time
from collections import deque

import numpy as np

import onemodel_cy as om

BATCH, HEIGHT, MIN_W, MAX_W, COUNT, MULTIPLE, PREFETCH = 128, 32, 64, 256, 2048, 4, 8

# A training loop keeps the batch it is training on and the one before (the optimizer
# step of the previous batch may still be running) while the next one is built.
HELD = 2


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
    """The §7 loader on the fast path (built-in dataset and augmentation) or the generic
    path (a Python dataset and a Python augmentation)."""
    dataset = workload_dataset(min_width, max_width, seed)
    if generic:
        return pipeline(PythonDataset(dataset), python_gain_offset, workers, batch, seed)
    return pipeline(dataset, om.GainOffset(), workers, batch, seed)


def pipeline(dataset, augmentation, workers=0, batch=BATCH, seed=0):
    """The §7 loader (shuffled, width multiple, prefetch) over ``dataset`` with ``augmentation``."""
    collator = om.ImageBatchCollator(MULTIPLE, augmentation=augmentation)
    return om.DataLoader(dataset, om.ShuffledSampler(len(dataset), batch, seed=seed), collator, seed=seed,
                         workers=workers, prefetch=PREFETCH)


def zero_worker_run(generic=False):
    """The 0-worker training loop of the §7 loader as a function ``run(n)`` taking the next
    n batches of one endless stream, holding the last HELD (for ``_timing.TwoCopies``)."""
    stream = make_pipeline(0, generic).iter(0)
    held = deque()

    def run(n):
        for _ in range(n):
            held.append(next(stream))
            if len(held) > HELD:
                held.popleft().close()
    return run


def consume(batches, held=None) -> int:
    """Take every batch of ``batches``; with ``held`` keep the last ``held`` of them alive
    while the next is built, as a training loop does (otherwise close each at once).
    Returns how many were taken."""
    kept = deque()
    count = 0
    for batch in batches:
        count += 1
        kept.append(batch)
        if len(kept) > (held or 0):
            kept.popleft().close()
    for batch in kept:
        batch.close()
    return count


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


PNG_SETS = {   # name: (count, height, min width, max width, resize to height, batch size)
    "small": (512, 32, 64, 256, None, 32),
    "large": (192, 128, 256, 1024, 64, 16),
}


def encode_png(array) -> bytes:
    from PIL import Image
    buffer = io.BytesIO()
    Image.fromarray(array).save(buffer, format="PNG")
    return buffer.getvalue()


class PngLines:
    """Text lines stored as PNG bytes; get_sample decodes (and resizes) with Pillow, then
    normalises to zero mean and unit variance in numpy: Python work that holds the GIL.
    Importable by name (``workload.PngLines``), so worker processes unpickle it."""

    def __init__(self, count, height, min_width, max_width, resize_to=None, seed=0):
        source = om.SyntheticLineImages(count, height, min_width, max_width, seed=seed)
        self.pngs, self.targets, self.labels = [], [], []
        for i in range(count):
            s = source.get_sample(i)
            self.pngs.append(encode_png((np.asarray(s.image)[0] * 255).astype(np.uint8)))
            self.targets.append(np.array(s.target))
            self.labels.append(int(s.label))
        self.resize_to = resize_to

    def __len__(self):
        return len(self.pngs)

    def decode(self, index):
        from PIL import Image
        image = Image.open(io.BytesIO(self.pngs[index])).convert("L")
        if self.resize_to is not None:
            width = max(1, image.width * self.resize_to // image.height)
            image = image.resize((width, self.resize_to), Image.BILINEAR)
        pixels = np.asarray(image, dtype=np.float32) / 255.0
        pixels = (pixels - pixels.mean()) / (pixels.std() + 1e-6)
        return pixels[None]

    def get_sample(self, index):
        return om.Sample(self.decode(index), self.targets[index], self.labels[index])


def python_gain_offset(image, rng):
    """A gain and offset written as a user would, in numpy (the peers run it too)."""
    image *= 1 + 0.2 * (2 * rng.next_single() - 1)
    image += 0.1 * (2 * rng.next_single() - 1)


# ------------------------------------------------------------------ cases

class Case:
    """One configuration: ``run(n)`` consumes about n batches after any warm-up and returns
    (batches consumed, seconds)."""
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
        return n, time.perf_counter() - start
