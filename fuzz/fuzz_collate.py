"""Fuzz the collator's entry points: ``ImageBatchCollator(...)`` construction,
``.collate(samples, indices, seed, epoch, step, first_slot=...)`` on fuzzed samples (shapes,
layouts, targets), indices and keys, and ``DataLoader(...).batch_at(g)``. Each accepted batch
is compared, all six arrays bit for bit, with ``reference.collate`` / ``reference.batch`` (§4, §1)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Draw, call, check, main, reference, same  # noqa: E402

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402

FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")


def augmentation(d):
    """(package augmentation, the reference's) or (None, None)."""
    which = d.small(0, 3)
    if which == 1:
        gain, offset = d.real(), d.real()
        aug = call(om.GainOffset, gain, offset)
        return (aug, reference.gain_offset(gain, offset)) if aug is not None else (None, None)
    if which == 2:
        sigma = d.real()
        aug = call(om.GaussianNoise, sigma)
        return (aug, reference.gaussian_noise(sigma)) if aug is not None else (None, None)
    return None, None


def collator(d):
    m = d.integer(1, 8) if d.small(0, 7) else d.odd_value()
    if type(m) is int and (1 << 12) < m < (1 << 31):
        m = 1 << 12     # a valid multiple of millions pads every image to gigabytes: real memory
    pad = d.real()
    aug, ref_aug = augmentation(d)
    pool = om.BufferPool(d.pick([0, 1 << 12, 1 << 20])) if d.flag() else None
    return call(om.ImageBatchCollator, m, pad, aug, pool), m, pad, ref_aug


def samples_of(d):
    C, H = d.small(1, 2), d.small(1, 3)
    out = []
    for _ in range(d.small(0, 4)):
        c, h = (C, H) if d.small(0, 7) else (d.small(1, 2), d.small(1, 3))
        image = d.layout(np.arange(c * h * d.small(1, 5), dtype=np.float32).reshape(c, h, -1)
                         * np.float32(d.real()))
        s = call(om.Sample, image, [d.small(0, 9) for _ in range(d.small(0, 3))], d.integer(-2, 9))
        out.append(s if s is not None and d.small(0, 15) else d.odd_value())
    return out


def check_batch(batch, expected, what):
    for name in FIELDS:
        check(same(getattr(batch, name), expected[name]), f"{what}: {name} differs from reference.py")


def fuzz_collate(d):
    col, m, pad, ref_aug = collator(d)
    if col is None:
        return
    samples = samples_of(d)
    indices = [d.integer(0, 50) for _ in range(len(samples) + d.pick([0, 0, 0, 1, -1]))]
    if d.flag():
        indices = d.layout(np.array([v % 2**31 for v in indices],
                                    dtype=d.pick([np.int64, np.int32, np.uint64])))
    seed, epoch, step = d.integer(0, 2**64 - 1), d.integer(0, 5), d.integer(0, 5)
    first = d.integer(0, 8)
    batch = call(col.collate, samples, indices, seed, epoch, step, first_slot=first)
    if batch is None:
        return
    triples = [tuple(s) for s in samples]
    expected = call(reference.collate, triples, list(np.asarray(indices).tolist()), seed, epoch, step,
                    m, pad, ref_aug, slot_offset=first)
    check(expected is not None, "batch accepted by the package, refused by reference.py")
    check_batch(batch, expected, "collate")
    batch.close()


def fuzz_batch_at(d):
    col, m, pad, ref_aug = collator(d)
    if col is None:
        return
    ds = om.SyntheticLineImages(d.small(4, 12), d.small(1, 4), d.small(1, 6), d.small(6, 12),
                                d.small(1, 2), seed=d.small(0, 9))
    n, B = len(ds), d.small(1, 4)
    if d.flag():
        sampler, ref_sampler = om.ShuffledSampler(n, B, 7, False), reference.ShuffledSampler(n, B, 7, False)
    else:
        sampler, ref_sampler = om.SequentialSampler(n, B), reference.SequentialSampler(n, B)
    seed = d.integer(0, 2**64 - 1)
    loader = call(om.DataLoader, ds, sampler, col, seed=seed)
    if loader is None:
        return
    g = d.integer(0, 40)
    batch = call(loader.batch_at, g)
    if batch is None:
        return
    get = lambda i: tuple(ds.get_sample(i))     # noqa: E731
    expected = reference.batch(get, ref_sampler, seed, g, m, pad, ref_aug)
    check_batch(batch, expected, f"batch_at({g})")


def TestOneInput(data: bytes):
    d = Draw(data)
    (fuzz_collate if d.small(0, 2) else fuzz_batch_at)(d)


if __name__ == "__main__":
    main(TestOneInput)
