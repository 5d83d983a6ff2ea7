"""The peers of the §7 benchmark: torch.utils.data.DataLoader and Grain, doing the same work.

Each is measured only when its package is installed (``available_peers``).
"""
from __future__ import annotations

import sys
import time

import numpy as np

import onemodel_cy as om
from workload import BATCH, COUNT, HEIGHT, MULTIPLE, PREFETCH, Case, plain_arrays, python_gain_offset, workload_dataset


def available_peers():
    """The peer cases whose package imports here (a note on stderr for each missing one)."""
    cases = []
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
    return cases


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
            return n, time.perf_counter() - start
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
        return n, time.perf_counter() - start
