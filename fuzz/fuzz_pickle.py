"""Fuzz pickling and ``copy.deepcopy`` of every public object, and forged restores: a
``__reduce__`` tuple whose arguments are replaced by fuzzed ones, ``__setstate_cython__``
called with a fuzzed state, and methods called on an object made by ``cls.__new__(cls)``
without ``__init__``. A round trip must give an object that behaves the same; a forged
restore may only raise the allowed exceptions (never crash)."""
import copy
import numbers
import os
import pickle
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import ALLOWED, Draw, call, check, main, same  # noqa: E402

import numpy as np  # noqa: E402

import onemodel_cy as om  # noqa: E402

# Refusing to pickle is allowed (TypeError), e.g. for a batch or a pool.
ROUND_TRIP_ALLOWED = ALLOWED + (pickle.PicklingError, NotImplementedError)


def objects(d):
    """One public object per kind, from small fuzzed arguments."""
    n, B = d.small(2, 9), d.small(1, 2)
    ds = om.SyntheticLineImages(n, 2, 3, 6, 1, seed=d.small(0, 5))
    sample = om.Sample(np.ones((1, 2, d.small(1, 3)), np.float32), [d.small(0, 5)], d.small(0, 5))
    col = om.ImageBatchCollator(d.small(1, 4), float(d.small(0, 3)))
    return [
        om.SampleRng(d.integer(0, 2**64 - 1) % 2**64),
        om.SequentialSampler(n, B, d.flag()), om.ShuffledSampler(n, B, d.small(0, 9), d.flag()),
        om.MixingSampler([(0, n, 1.0), (n, 2, 0.5)], B, 3, d.small(0, 9)),
        om.BucketedSampler(list(range(n)), B, 2, d.small(0, 9)),
        sample, ds, om.ArrayImageDataset([np.zeros((1, 2, 2), np.float32)], [[1]], [0]),
        om.BufferPool(1 << 16), col, om.GainOffset(), om.GaussianNoise(),
        col.collate([sample], [0], 1, 0, 0),
    ]


def behaviour(obj):
    """What an object does, as comparable bytes/values."""
    if isinstance(obj, om.SampleRng):     # draws from a copy: the original keeps its state
        return obj.state, om.SampleRng(obj.state).next_u64(size=3).tobytes()
    if isinstance(obj, om.Sampler):
        return repr(obj), obj.indices(0, 0).tobytes()
    if isinstance(obj, om.Sample):
        return obj.image.tobytes(), obj.image.shape, obj.target.tobytes(), obj.label
    if isinstance(obj, om.ArrayImageDataset):
        s = obj.get_sample(len(obj) - 1)
        return len(obj), s.image.tobytes(), s.target.tobytes(), s.label
    return repr(obj)


def round_trip(d, obj):
    how = d.pick(["pickle", "deepcopy", "copy"])
    if how == "pickle":
        blob = call(pickle.dumps, obj, d.small(0, pickle.HIGHEST_PROTOCOL), allowed=ROUND_TRIP_ALLOWED)
        if blob is None:
            return
        twin = pickle.loads(blob)
    else:
        twin = call(copy.deepcopy if how == "deepcopy" else copy.copy, obj, allowed=ROUND_TRIP_ALLOWED)
        if twin is None:
            return
    if isinstance(obj, om.ImageBatch):
        for name in ("images", "widths", "targets", "target_lengths", "labels", "indices"):
            check(same(getattr(obj, name), getattr(twin, name)), f"{how} of ImageBatch: {name}")
        return
    check(type(twin) is type(obj), f"{how} gave {type(twin).__name__}")
    check(behaviour(twin) == behaviour(obj), f"{how} of {type(obj).__name__} behaves differently")


def fuzzed_args(d, args):
    return tuple(d.pick([a, d.integer(0, 9), d.odd_value(), d.array(shape_max=3), [], (), -1])
                 if d.flag() else a for a in args)


def poke(d, obj):
    """Call a few methods; only allowed exceptions may come out."""
    for name in ("__len__", "get_sample", "indices", "indices_into", "batch_length", "next_u64",
                 "stats", "reserve", "collate", "as_dict", "__iter__", "__repr__", "__call__"):
        method = call(getattr, obj, name, None)     # a closed batch's properties raise ValueError
        if method is None or not d.flag():
            continue
        args = [d.pick([0, 1, -1, 2**64, None, np.zeros(4, np.int64), [om.Sample(
            np.ones((1, 1, 1), np.float32), [], 0)], np.ones((1, 1, 1), np.float32), om.SampleRng()])
            for _ in range(d.small(0, 5))]
        call(method, *args, allowed=ALLOWED + (NotImplementedError, AttributeError))


def real_memory(args) -> bool:
    """Whether forged constructor arguments are sizes that are each plausible (below 2**31)
    and together ask for gigabytes: ``SyntheticLineImages(32768, 32768, ...)`` makes its
    count x height x width pixels at once (about 18 GB), as it was asked to. That is real
    memory, not a bug; larger single values still go through, to reach the size checks."""
    sizes = [int(a) for a in args if isinstance(a, numbers.Integral) and not isinstance(a, bool)]
    if not sizes or any(not 0 <= v < 2**31 for v in sizes):
        return False
    product = 1
    for v in sizes:
        product *= max(v, 1)
    return product > 1 << 28


def forge(d, obj):
    cls = type(obj)
    how = d.small(0, 2)
    if how == 0:
        reduced = call(obj.__reduce__, allowed=ROUND_TRIP_ALLOWED)
        if not (isinstance(reduced, tuple) and len(reduced) >= 2 and isinstance(reduced[1], tuple)):
            return
        args = fuzzed_args(d, reduced[1])
        if real_memory(args):
            return
        made = call(reduced[0], *args)
    elif how == 1:
        made = call(cls.__new__, cls, allowed=ALLOWED + (NotImplementedError,))
        setstate = getattr(made, "__setstate_cython__", None)
        if setstate is not None and d.flag():
            call(setstate, d.pick([None, (), (1, 2), d.odd_value(), (None,) * d.small(0, 12),
                                   tuple(d.integer(0, 9) for _ in range(d.small(0, 12)))]),
                 allowed=ALLOWED + (pickle.PicklingError, AttributeError))
    else:
        made = call(cls.__new__, cls, allowed=ALLOWED + (NotImplementedError,))
    if made is not None:
        poke(d, made)


def TestOneInput(data: bytes):
    d = Draw(data)
    objs = objects(d)
    obj = objs[d.small(0, len(objs) - 1)]
    (round_trip if d.flag() else forge)(d, obj)


if __name__ == "__main__":
    main(TestOneInput)
