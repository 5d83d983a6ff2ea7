"""Fuzz the dataset constructors: ``ArrayImageDataset(images, targets, labels)`` with images
of every dtype, shape and layout, and ``SyntheticLineImages(...)`` with sizes at the edges.
An accepted dataset must give back what it was given, or what ``reference.synthetic_sample``
defines (docs/contract.md), and refuse indices out of range with IndexError."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Draw, call, check, main, reference, same  # noqa: E402

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402

PIXEL_BUDGET = 1 << 24     # valid datasets bigger than this are real memory, not a bug


def array_dataset(d):
    n = d.small(0, 4)
    C, H = d.small(1, 3), d.small(1, 4)
    if d.flag():
        images = [d.layout(np.full((C, H, d.small(1, 6)), d.small(0, 9), np.float32)) for _ in range(n)]
    else:
        images = [d.array(shape_max=4) for _ in range(n)]
    if d.small(0, 4) == 0:
        images = np.zeros((n, C, H, 2), np.float32)
    targets = [[d.integer(0, 9) for _ in range(d.small(0, 3))] for _ in range(n + d.pick([0, 0, 0, 1]))]
    labels = [d.integer(-2, 9) for _ in range(n + d.pick([0, 0, 0, -1]))]
    ds = call(om.ArrayImageDataset, images, targets, labels)
    if ds is None:
        return
    check(len(ds) == n, f"len {len(ds)} != {n}")
    for i in range(n):
        s = ds.get_sample(i)
        check(np.array_equal(s.image, images[i]) and s.image.dtype == np.float32, f"image {i}")
        check(s.target.tolist() == list(targets[i]) and s.label == labels[i], f"target/label {i}")
        check(same(ds.shapes[i], np.array(images[i].shape, np.int64)), f"shape {i}")
    for bad in (n, -1, 2**63, 2**64):
        try:
            ds.get_sample(bad)
        except (IndexError, ValueError):
            continue
        check(False, f"get_sample({bad}) accepted on {n} samples")


def synthetic(d):
    names = ("count", "height", "min_width", "max_width", "channels")
    values = [d.integer(1, 4), d.integer(1, 6), d.integer(1, 12), d.integer(1, 24), d.integer(1, 3)]
    seed = d.integer(0, 2**64 - 1)
    if all(isinstance(v, int) and 1 <= v < 2**31 for v in values):
        count, height, lo, hi, channels = values
        # Sizes whose byte count fits in a signed 64-bit product must really be allocated:
        # skip those beyond the budget. Larger ones must be refused, never wrapped.
        if lo <= hi and PIXEL_BUDGET < 4 * count * height * hi * channels < 2**63:
            return
    ds = call(om.SyntheticLineImages, *values, seed=seed)
    if ds is None:
        return
    kw = dict(zip(names[1:], values[1:]), seed=seed)
    for i in range(min(len(ds), 4)):
        image, target, label = reference.synthetic_sample(i, **kw)
        s = ds.get_sample(i)
        check(same(s.image, image) and same(s.target, target) and s.label == label,
              f"sample {i} of SyntheticLineImages{tuple(values)} differs from reference.py")


def TestOneInput(data: bytes):
    d = Draw(data)
    (array_dataset if d.flag() else synthetic)(d)


if __name__ == "__main__":
    main(TestOneInput)
