"""Fuzz the §3 samplers' constructors and ``indices`` / ``indices_into``: fuzzed sizes,
seeds, sources and lengths, and ``out`` arrays of every dtype, size, layout and alignment.
Accepted results are compared with the samplers of ``reference.py`` (D7-D11)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import SMALL, Draw, call, check, main, reference  # noqa: E402

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402


def build(d):
    """(package sampler or None, the same arguments for reference.py)."""
    kind = d.pick(["sequential", "shuffled", "mixing", "bucketed"])
    B = d.integer(1, 8)
    if kind in ("sequential", "shuffled"):
        n = d.integer(1, 40)
        args = (n, B, d.integer(0, 2**64 - 1)) if kind == "shuffled" else (n, B)
        args += (d.flag(),)
        cls = om.SequentialSampler if kind == "sequential" else om.ShuffledSampler
        ref = reference.SequentialSampler if kind == "sequential" else reference.ShuffledSampler
    elif kind == "mixing":
        sources = [(d.integer(0, 100), d.integer(0, 20), d.real()) for _ in range(d.small(0, 3))]
        args = (sources, B, d.integer(1, 5), d.integer(0, 2**64 - 1))
        cls, ref = om.MixingSampler, reference.MixingSampler
    else:
        lengths = (d.array(shape_max=40, dims=1) if d.flag()
                   else [d.integer(0, 300) for _ in range(d.small(0, 40))])
        args = (lengths, B, d.integer(1, 4), d.integer(0, 2**64 - 1))
        cls, ref = om.BucketedSampler, reference.BucketedSampler
    if isinstance(B, int) and B > 1 << 16 and kind in ("mixing", "sequential", "shuffled"):
        return None, None, None      # a valid batch of a million slots is real memory, not a bug
    return call(cls, *args), ref, args


def out_array(d, B):
    if d.small(0, 3) == 0:
        return d.odd_value()
    size = max(0, B + d.pick([0, 0, 0, -1, 1, 5])) if B <= SMALL else d.small(0, 8)
    a = np.full(size, 7, dtype=d.pick([np.int64, np.int64, np.int32, np.uint64, np.float64]))
    return d.layout(a) if d.flag() else a


def TestOneInput(data: bytes):
    d = Draw(data)
    sampler, ref_cls, args = build(d)
    if sampler is None:
        return
    S, B = sampler.steps_per_epoch, sampler.batch_size
    epoch = d.integer(0, 3) if d.small(0, 7) else d.odd_value()
    check(isinstance(S, int) and S >= 1 and isinstance(B, int) and B >= 1, f"{sampler!r}: S={S!r}, B={B!r}")
    step = d.integer(0, min(S - 1, 2**62)) if d.small(0, 7) else d.odd_value()
    if d.flag():
        got = call(sampler.indices, epoch, step)
        if got is None:
            return
        check(got.dtype == np.int64 and got.ndim == 1, f"indices {got.dtype} {got.shape}")
    else:
        out = out_array(d, B)
        n = call(sampler.indices_into, epoch, step, out)
        if n is None:
            return
        check(isinstance(n, int) and 0 <= n <= B and n <= len(out), f"indices_into wrote {n}")
        got = np.asarray(out[:n]).copy()
    if B > SMALL or getattr(sampler, "n", 0) > 4096:
        return
    ref = ref_cls(*args)
    expected = np.array(ref.indices(epoch, step), dtype=np.int64)
    check(got.tolist() == expected.tolist(), f"{sampler!r} at ({epoch}, {step}) differs from reference.py")


if __name__ == "__main__":
    main(TestOneInput)
