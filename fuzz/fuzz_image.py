"""Fuzz the §6 image helpers: ``gray8_to_planar`` / ``rgb8_to_planar`` on arrays and on raw
buffers with fuzzed width, height, stride, mean, std and ``out=``; every accepted call is
compared bit for bit with ``reference.gray8_to_planar`` / ``reference.rgb8_to_planar``."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Draw, call, check, main, reference, same  # noqa: E402

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402


def source_view(buf, channels, w, h, s):
    """What the helper must read from a raw buffer: rows ``s`` bytes apart (the oracle's input)."""
    flat = np.frombuffer(buf, dtype=np.uint8)
    shape = (h, w) if channels == 1 else (h, w, 3)
    strides = (s, 1) if channels == 1 else (s, 3, 1)
    return np.lib.stride_tricks.as_strided(flat, shape=shape, strides=strides)


def constants(d, channels):
    if channels == 3 and d.flag():
        return [d.real() for _ in range(d.pick([3, 3, 2, 4]))]
    return d.real()


def TestOneInput(data: bytes):
    d = Draw(data)
    channels = d.pick([1, 3])
    fn = om.gray8_to_planar if channels == 1 else om.rgb8_to_planar
    ref = reference.gray8_to_planar if channels == 1 else reference.rgb8_to_planar
    mean, std = constants(d, channels), constants(d, channels)
    raw = d.flag()
    if raw:
        w, h = d.integer(0, 8), d.integer(0, 8)
        s = d.integer(0, 40) if d.flag() else None
        buf = d.raw(d.small(0, 200))
        kwargs = dict(width=w, height=h, stride=s)
        src = d.pick([buf, bytearray(buf), memoryview(buf), np.frombuffer(buf, np.uint8)])
    else:
        shape = (d.small(0, 6), d.small(0, 6)) + ((3,) if channels == 3 else ())
        src = d.layout(np.frombuffer(d.raw(int(np.prod(shape))).ljust(int(np.prod(shape)), b"\0"),
                                     np.uint8).reshape(shape).copy())
        kwargs = {}
    out = None
    if d.flag():
        out = d.array(shape_max=8, dims=3) if d.flag() else None
        if out is None and raw and all(type(v) is int and 0 < v <= 64 for v in (w, h)):
            out = np.full((channels, h, w), np.float32(7.0), dtype=np.float32)
        kwargs["out"] = out
    result = call(fn, src, mean, std, **kwargs)
    if result is None:
        return
    check(result.dtype == np.float32 and result.ndim == 3 and result.shape[0] == channels,
          f"result {result.dtype} {result.shape}")
    if out is not None:
        check(result is out, "out= given but another array returned")
    if raw:
        step = w * channels if s is None else s
        expected = call(ref, source_view(src, channels, w, h, step), mean, std)
    else:
        expected = call(ref, src, mean, std)
    check(expected is not None, "accepted by the package, refused by the oracle")
    check(same(result, expected), "result differs from reference.py")


if __name__ == "__main__":
    main(TestOneInput)
