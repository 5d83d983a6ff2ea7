"""Fuzz the loader's fetch step, ``_fetch.build_batch(collator, dataset, indices, seed, epoch,
step, start=, stop=, transform=, global_step=, workspace=, route=)``, and
``DataLoader(..., rank=r, world_size=w).batch_at(g)``.

Mode 1 (``fuzz_build``) decodes a small dataset (``SyntheticLineImages``, or an
``ArrayImageDataset`` that sometimes mixes C or H so that a batch must be refused), an
``indices`` argument (int64 values, out of range, negative, huge; or the wrong dtype, ndim,
byte order, a strided or a one-byte-misaligned view), a slot range, a route, an
augmentation and a transform. An accepted batch is checked against the dataset (§4: widths,
targets, labels and indices of the chosen slots are ``get_sample``'s) and, without a
transform, against the other route: what one of "packed" and "samples" builds, the other
builds too, bit for bit (§1: the batch is a function of the dataset and the collator, not of
how the fetch step reads the dataset); an identity transform gives the batch built without
one (D17).

Mode 2 (``fuzz_ranks``) builds step ``g`` on every rank of a ``world_size`` and on one rank:
``global_step == g``, ``(epoch, step) == divmod(g, steps_per_epoch)``, the ranks' indices
(widths, labels, targets) concatenated are the global batch's, and the global batch's
indices are the reference sampler's (§1 global steps, §3; the loader's concern that ranks
share one global batch by slot range, docs of ``DataLoader``).
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Draw, call, check, main, reference, same  # noqa: E402

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402
from onemodel_cy.collate.fetch import build_batch  # noqa: E402

FIELDS = ("images", "widths", "targets", "target_lengths", "labels", "indices")


def dataset_of(d):
    """A small dataset; an ArrayImageDataset sometimes mixes C or H across its images."""
    if d.flag():
        return call(om.SyntheticLineImages, d.small(1, 8), d.small(1, 4), d.small(1, 5), d.small(5, 9),
                    d.pick([1, 1, 3]), seed=d.small(0, 9))
    C, H = d.small(1, 2), d.small(1, 3)
    images, targets, labels = [], [], []
    for _ in range(d.small(1, 6)):
        c, h = (d.small(1, 2), d.small(1, 3)) if d.small(0, 5) == 0 else (C, H)
        w = d.small(1, 5)
        images.append((np.arange(c * h * w, dtype=np.float32).reshape(c, h, w) * np.float32(d.real())))
        targets.append([d.small(0, 9) for _ in range(d.small(0, 3))])
        labels.append(d.small(0, 9) - 2)
    return call(om.ArrayImageDataset, images, targets, labels)


def indices_of(d, n):
    """The ``indices`` argument: usually a good int64 array, otherwise a wrong kind or layout."""
    values = [d.integer(0, n + 1) if d.small(0, 3) else d.small(0, max(n - 1, 0))
              for _ in range(d.small(1, 5))]
    values = [v if -2**63 <= v < 2**63 else -1 for v in values]
    how = d.small(0, 9)
    a = np.array(values, dtype=np.int64)
    if how == 1:
        return a.astype(d.pick([np.int32, np.uint64, np.float64, np.int16]))
    if how == 2:
        return a.reshape(1, -1)
    if how == 3:
        return np.repeat(a, 2)[::2]                        # strided view
    if how == 4:
        return np.frombuffer(b"\0" + a.tobytes(), dtype=np.int64, offset=1)   # misaligned
    if how == 5:
        return a.astype(">i8")                             # byte-swapped
    if how == 6:
        return d.odd_value()
    return a


def augmentation(d):
    which = d.small(0, 3)
    if which == 1:
        return call(om.GainOffset, d.real(), d.real())
    if which == 2:
        return call(om.GaussianNoise, d.real())
    return None


def IDENTITY(sample, rng):
    """A transform that returns its sample: the batch is the untransformed one (D17: the
    transform's stream 0 is apart from the augmentation's, so drawing nothing changes nothing)."""
    return sample


def transform_of(d):
    """None, the identity, a transform that draws from its rng and scales, or a wrong one."""
    which = d.small(0, 5)
    if which == 1:
        return IDENTITY
    if which == 2:
        def scaled(sample, rng):
            image, target, label = tuple(sample)
            return om.Sample(np.ascontiguousarray(image) * np.float32(1 + rng.next_int(3)), target, label)
        return scaled
    if which == 3:
        return lambda sample, rng: d.odd_value()
    if which == 4:
        return d.odd_value()
    return None


def attempt(fn, *args, **kwargs):
    """``(batch, None)`` or ``(None, exception type)`` for an allowed exception."""
    from _common import ALLOWED
    try:
        return fn(*args, **kwargs), None
    except ALLOWED as exc:
        return None, type(exc)


def check_against_dataset(batch, ds, indices, lo, hi, transformed):
    """§4: the batch's slots are ``get_sample(indices[j])`` for ``j`` in ``[lo, hi)``."""
    chosen = [int(i) for i in np.asarray(indices)[lo:hi]]
    check(batch.indices.tolist() == chosen, f"indices {batch.indices.tolist()} != {chosen}")
    samples = [tuple(ds.get_sample(i)) for i in chosen]
    check(batch.labels.tolist() == [int(s[2]) for s in samples], "labels differ from get_sample")
    targets = [list(np.asarray(s[1]).tolist()) for s in samples]
    check(batch.target_lengths.tolist() == [len(t) for t in targets], "target_lengths differ")
    check(batch.targets.tolist() == [v for t in targets for v in t], "targets differ from get_sample")
    if not transformed:
        check(batch.widths.tolist() == [s[0].shape[2] for s in samples], "widths differ from get_sample")
    check(batch.images.shape[0] == hi - lo, f"images has {batch.images.shape[0]} slots, expected {hi - lo}")


def fuzz_build(d):
    ds = dataset_of(d)
    if ds is None:
        return
    n = len(ds)
    m = d.integer(1, 8) if d.small(0, 7) else d.odd_value()
    if type(m) is int and (1 << 12) < m < (1 << 31):
        m = 1 << 12     # a valid multiple of millions pads every image to gigabytes: real memory
    col = call(om.ImageBatchCollator, m, d.real(), augmentation(d), None)
    if col is None:
        return
    indices = indices_of(d, n)
    length = len(indices) if isinstance(indices, np.ndarray) and indices.ndim == 1 else 1
    start = d.integer(0, length) if d.small(0, 3) else 0
    stop = d.pick([None, None, length, length - 1, length + 1, 0, d.integer(0, length)])
    seed, epoch, step = d.integer(0, 2**64 - 1), d.integer(0, 5), d.integer(0, 5)
    g = d.pick([None, d.integer(0, 50)])
    transform = transform_of(d)
    route = d.pick([None, "packed", "samples", "other"])
    kwargs = dict(start=start, stop=stop, transform=transform, global_step=g)
    batch, err = attempt(build_batch, col, ds, indices, seed, epoch, step, route=route, **kwargs)
    if batch is None:
        return
    lo, hi = start, (len(indices) if stop is None else stop)
    check(batch.global_step == g or g is None, f"global_step {batch.global_step} != {g}")
    check((batch.epoch, batch.step) == (epoch, step), "epoch/step not stored")
    check_against_dataset(batch, ds, indices, lo, hi, transform is not None)
    if transform is None or transform is IDENTITY:
        other = "samples" if route in (None, "packed") or transform is IDENTITY else "packed"
        kwargs["transform"] = None
        twin, twin_err = attempt(build_batch, col, ds, indices, seed, epoch, step, route=other, **kwargs)
        check(twin is not None, f"route {route!r} (transform {transform!r}) built the batch, route "
                                f"{other!r} without a transform raised {twin_err}")
        for name in FIELDS:
            a, b = getattr(batch, name), getattr(twin, name)
            if name == "images":
                a, b = a.view(np.uint32), b.view(np.uint32)
            check(same(a, b), f"routes {route!r} and {other!r} differ in {name}")
        twin.close()
    batch.close()


def fuzz_ranks(d):
    ds = call(om.SyntheticLineImages, d.small(2, 12), d.small(1, 3), d.small(1, 4), d.small(4, 8), 1,
              seed=d.small(0, 9))
    if ds is None:
        return
    n, w = len(ds), d.pick([1, 2, 3, 4])
    B = w * d.small(1, 3)
    drop = d.flag()
    if d.flag():
        make = lambda: om.ShuffledSampler(n, B, 11, drop)      # noqa: E731
        make_ref = lambda: reference.ShuffledSampler(n, B, 11, drop)      # noqa: E731
    else:
        make = lambda: om.SequentialSampler(n, B, drop)        # noqa: E731
        make_ref = lambda: reference.SequentialSampler(n, B, drop)        # noqa: E731
    if call(make) is None:
        return
    ref = make_ref()
    col = om.ImageBatchCollator(d.small(1, 4), 0.0, augmentation(d), None)
    seed = d.integer(0, 2**64 - 1)
    whole = call(om.DataLoader, ds, make(), col, seed=seed)
    if whole is None:
        return
    S = whole.steps_per_epoch
    g = d.pick([0, S - 1, S, S + 1, 2 * S - 1, d.integer(0, 4 * S)])
    full, err = attempt(whole.batch_at, g)
    ranks = [call(om.DataLoader, ds, make(), col, seed=seed, rank=r, world_size=w) for r in range(w)]
    if full is None:
        for loader in ranks:
            if loader is not None:
                check(attempt(loader.batch_at, g)[0] is None, f"batch_at({g}) refused on one rank only")
        return
    check(full.global_step == g, f"global_step {full.global_step} != {g}")
    check((full.epoch, full.step) == divmod(g, S), f"(epoch, step) != divmod({g}, {S})")
    epoch, step = divmod(g, S)
    check(full.indices.tolist() == list(ref.indices(epoch, step)), "indices differ from reference.py")
    if any(loader is None for loader in ranks):
        check(all(loader is None for loader in ranks), "some ranks refused their loader, others did not")
        return
    parts = [loader.batch_at(g) for loader in ranks]
    for p in parts:
        check(p.global_step == g and (p.epoch, p.step) == (epoch, step), "a rank's step differs")
    for name in ("indices", "widths", "labels", "targets", "target_lengths"):
        joined = np.concatenate([getattr(p, name) for p in parts])
        check(same(joined, getattr(full, name)), f"ranks' {name} concatenated differ from the global batch")


def TestOneInput(data: bytes):
    d = Draw(data)
    (fuzz_build if d.small(0, 2) else fuzz_ranks)(d)


if __name__ == "__main__":
    main(TestOneInput)
