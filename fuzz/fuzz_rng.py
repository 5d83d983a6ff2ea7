"""Fuzz ``SampleRng`` bulk draws (``size=``) from fuzzed states: each accepted call must
equal ``size`` single draws of ``reference.SampleRng`` and leave the same state behind (§2)."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Draw, call, check, main, reference, same  # noqa: E402

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402

DTYPES = {"next_u64": np.uint64, "next_single": np.float32, "next_double": np.float64,
          "next_int": np.uint64, "next_normal": np.float32}


def TestOneInput(data: bytes):
    d = Draw(data)
    state = d.integer(0, 2**64 - 1) if d.small(0, 7) else d.odd_value()
    rng = call(om.SampleRng, state)
    if rng is None:
        return
    method = d.pick(sorted(DTYPES))
    size = d.integer(0, 40) if d.small(0, 7) else d.odd_value()
    if size is None:
        size = 0      # size=None is the scalar draw, not a bulk one
    if isinstance(size, int) and 1 << 16 < size < 1 << 58:
        return        # a real allocation of up to 2**61 bytes: valid, but not this machine's to fill
    args = (d.integer(0, 2**20) if d.small(0, 7) else d.odd_value(),) if method == "next_int" else ()
    before = rng.state
    out = call(getattr(rng, method), *args, size=size)
    if out is None:
        return
    check(isinstance(out, np.ndarray) and out.ndim == 1 and out.dtype == DTYPES[method],
          f"{method} returned {type(out).__name__}")
    n = out.shape[0]
    check(n == size, f"asked {size}, got {n}")
    if n > 4096:
        return
    ref = reference.SampleRng(before)
    expected = np.array([getattr(ref, method)(*args) for _ in range(n)], dtype=DTYPES[method])
    check(same(out, expected), f"{method}(size={size}) differs from reference.py")
    check(rng.state == ref.state, "state after the bulk draw differs from reference.py")


if __name__ == "__main__":
    main(TestOneInput)
