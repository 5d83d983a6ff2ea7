"""Fuzz ``Sample(image, target, label)``: images of every dtype, rank, shape, layout and
alignment, targets of every kind, labels at the int32 edges. An accepted sample must hold
the image's values as float32 [C, H, W], the target as int32 and the label as given."""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Draw, call, check, main, same  # noqa: E402

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402


def target_of(d):
    how = d.small(0, 4)
    if how == 0:
        return [d.integer(0, 100) for _ in range(d.small(0, 6))]
    if how == 1:
        return d.array(shape_max=6, dims=d.pick([0, 1, 1, 2]))
    if how == 2:
        return d.odd_value()
    if how == 3:
        return np.arange(d.small(0, 6), dtype=d.pick([np.int32, np.int64, np.uint64, np.int8]))
    return (v for v in range(d.small(0, 4)))


def image_of(d):
    if d.small(0, 5) == 0:
        return d.odd_value()
    a = d.array(shape_max=4, dims=d.pick([3, 3, 3, 2, 4]))
    if d.flag() and a.dtype == np.float32 and a.size:
        a = a.astype(a.dtype.newbyteorder())   # a non-native byte order
    return a


def TestOneInput(data: bytes):
    d = Draw(data)
    image, target = image_of(d), target_of(d)
    target_copy = list(target) if isinstance(target, list) else target
    label = d.integer(-3, 3) if d.small(0, 5) else d.odd_value()
    sample = call(om.Sample, image, target, label)
    if sample is None:
        return
    got_image, got_target, got_label = sample
    check(got_image.dtype == np.float32 and got_image.dtype.isnative and got_image.ndim == 3,
          f"image {got_image.dtype} {got_image.shape}")
    check(np.array_equal(got_image, image), "image values changed")
    check(got_target.dtype == np.int32 and got_target.ndim == 1, f"target {got_target.dtype}")
    check(np.array_equal(got_target, np.asarray(target_copy, dtype=np.int64).reshape(-1)),
          "target values changed")
    check(got_label == int(label) and -2**31 <= got_label < 2**31, f"label {got_label}")
    check(same(sample.image, got_image), "sample.image differs from iteration")


if __name__ == "__main__":
    main(TestOneInput)
