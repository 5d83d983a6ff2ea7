"""Concern: memory safety of the bottom modules (issue 13; architecture items 3, 7, 8).

No spec section is encoded here; the sections whose objects are checked are named in
each test (§3 samplers, §5 pool, §6 helpers, the §1 datasets). Each test encodes one
class of the issue, in the project's words:

1. sizes: every size product and sum is overflow-checked; a size that does not fit is a
   ``ValueError`` (or ``MemoryError``) before any memory is touched;
2. sealed storage: what a GIL-free kernel reads is owned and read-only for good (no
   writable base reachable from Python), never the caller's array, and a live object is
   never initialised twice;
3. pickling: no Cython-generated ``__setstate_cython__`` (a forged or empty state crashed
   or hung); objects pickle through their validating constructors, or not at all;
4. half-built objects: an object made by ``Cls.__new__(Cls)``, or whose ``__init__``
   failed, raises a clear error when used;
5. alignment: misaligned inputs are copied, misaligned ``out=`` arrays refused;
8. the pool's reservation cannot exceed ``max_bytes`` when threads reserve at once.

Where the old behaviour was a segfault or an endless GIL-free loop, the check runs in a
subprocess, so that a regression fails the test instead of killing pytest.
"""

from __future__ import annotations

import gc
import os
import pickle
import subprocess
import sys
import textwrap
import threading

import numpy as np
import pytest

from routes import gather

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_isolated(code: str, timeout: float = 60) -> str:
    """Run ``code`` in a fresh interpreter (with ``om`` and ``np`` imported); return its
    stdout, failing the test on a crash, a hang or a non-zero exit."""
    prelude = ("import numpy as np\nimport onemodel_cy as om\nfrom onemodel_cy.collate.fetch import build_batch\n"
               "gather = lambda col, *a: build_batch(col, *a, route='packed')\n"
               "read = lambda col, *a: build_batch(col, *a, route='samples')\n")
    try:
        done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the subprocess hung for {timeout} s")
    assert done.returncode == 0, (f"the subprocess died (exit {done.returncode}):\n"
                                  f"{done.stdout}\n{done.stderr}")
    return done.stdout


def _samplers(om):
    return {
        "sequential": om.SequentialSampler(10, 3, drop_last=False),
        "shuffled": om.ShuffledSampler(10, 3, 5, drop_last=False),
        "mixing": om.MixingSampler([(0, 5, 1.0), (5, 5, 2.0)], 3, 4, 9),
        "bucketed": om.BucketedSampler([5, 3, 9, 1, 7, 2, 8, 4], 2, 2, 3),
    }


def _same_batches(a, b):
    return all(a.indices(e, k).tolist() == b.indices(e, k).tolist()
               for e in (0, 3) for k in range(a.steps_per_epoch))


def _small_dataset(om):
    gen = np.random.default_rng(0)
    images = [gen.random((1, 2, w), dtype=np.float32) for w in (3, 5, 4)]
    return om.ArrayImageDataset(images, [[1, 2], [], [3]], [0, 1, 2])


# --------------------------------------------------------------------------- class 1: sizes

def test_raw_buffer_size_overflow_is_a_value_error(om):
    """Concern: memory safety (issue 13 class 1, wrapped size products). For the §6
    helpers, (height - 1) * stride + width * channels is computed with checked
    arithmetic; a stride or width whose size wraps is refused before a pixel is read (the
    wrapped size passed the length check and the copy read far past the buffer)."""
    out = run_isolated("""
        for fn, kw in ((om.gray8_to_planar, dict(width=4, height=2, stride=2**63 - 1)),
                       (om.rgb8_to_planar, dict(width=4, height=3, stride=2**62)),
                       (om.rgb8_to_planar, dict(width=2**62, height=1))):
            try:
                fn(bytes(64), 0.0, 1.0, **kw)
            except ValueError as e:
                assert "does not fit" in str(e), e
                print("refused")
    """)
    assert out.split() == ["refused"] * 3


def test_synthetic_pixel_count_overflow_is_a_value_error(om):
    """Concern: memory safety (issue 13 class 1, wrapped size products).
    SyntheticLineImages checks C * H * W and the running pixel total; a geometry whose
    pixel count wraps to 0 (2**21 * 2**21 * 2**22 = 2**64) is refused instead of being
    built with no pixels while its shapes claim 2**64 (which the packed route then read)."""
    out = run_isolated("""
        try:
            ds = om.SyntheticLineImages(1, height=2**21, min_width=2**22, max_width=2**22, channels=2**21)
            gather(om.ImageBatchCollator(), ds, np.zeros(1, np.int64), 0, 0, 0)
        except ValueError as e:
            assert "does not fit" in str(e), e
            print("refused")
    """)
    assert out.split() == ["refused"]


def test_array_dataset_total_size_is_checked(om):
    """Concern: memory safety (issue 13 class 1, wrapped size products). A broadcast view
    can claim far more pixels than memory holds; the packed size of an ArrayImageDataset
    is checked before anything is allocated (a ValueError naming what does not fit)."""
    huge = np.broadcast_to(np.zeros((1, 1, 1), np.float32), (2**20, 2**20, 2**20))   # 2**62 bytes each
    with pytest.raises(ValueError, match="does not fit"):
        om.ArrayImageDataset([huge] * 4, [[1]] * 4, [0] * 4)


def test_pool_sizes_are_integers_in_range(om):
    """Concern: memory safety (issue 13 class 1, wrapped size products), with the
    exception rule; §5 (BufferPool.reserve). Reserve sizes are checked integers (np.int64
    is accepted, bools and floats are TypeError, sizes beyond the pool's range
    ValueError); BufferPool used isinstance(int), which refused np.int64 and accepted
    True."""
    pool = om.BufferPool(max_bytes=1 << 20)
    assert pool.reserve(np.int64(4096), np.int64(2)) == 2
    for bad in (True, 1.5, "1"):
        with pytest.raises(TypeError):
            pool.reserve(bad, 1)
        with pytest.raises(TypeError):
            pool.reserve(4096, bad)
    with pytest.raises(ValueError, match="nbytes"):
        pool.reserve(2**49, 1)
    with pytest.raises(ValueError, match="count"):
        pool.reserve(4096, -1)


# --------------------------------------------------------------------------- class 2: sealed storage

def _cannot_be_made_writeable(array):
    """Neither the array nor any array base it reaches can be switched to writeable."""
    while isinstance(array, np.ndarray):
        assert not array.flags.writeable
        with pytest.raises(ValueError):
            array.flags.writeable = True
        array = array.base
    assert not isinstance(array, (bytearray, memoryview))


def test_dataset_storage_is_sealed(om):
    """Concern: memory safety (issue 13 class 2, sealed storage).
    ArrayImageDataset.shapes, and every image and target view get_sample hands out, are
    read-only down to their base (also for SyntheticLineImages): the shape table's base
    used to be the live, writable table (a width written there made the GIL-free copy
    read past the pixels)."""
    for ds in (_small_dataset(om), om.SyntheticLineImages(3, height=2, min_width=3, max_width=6)):
        _cannot_be_made_writeable(ds.shapes)
        for i in range(len(ds)):
            s = ds.get_sample(i)
            _cannot_be_made_writeable(s.image)
            _cannot_be_made_writeable(s.target)


def test_bucketed_sampler_copies_the_lengths(om):
    """Concern: memory safety (issue 13 class 2, sealed storage). BucketedSampler (§3)
    keeps a sealed copy of the lengths; the caller's array is neither kept nor flipped to
    read-only, and editing it later changes no batch."""
    lengths = np.array([5, 3, 9, 1, 7, 2, 8, 4], np.int64)
    s = om.BucketedSampler(lengths, 2, 2, 3)
    before = [s.indices(1, k).tolist() for k in range(4)]
    assert lengths.flags.writeable
    assert not np.shares_memory(s.lengths, lengths)
    _cannot_be_made_writeable(s.lengths)
    lengths[:] = [0, 9, 0, 9, 0, 9, 0, 9]
    assert [s.indices(1, k).tolist() for k in range(4)] == before


def test_sample_target_is_a_sealed_copy(om):
    """Concern: memory safety (issue 13 class 2, sealed storage). Sample copies its
    target (and checks the copy): editing the caller's array afterwards never reaches a
    batch ([-5, 2] reached one before), and the target it exposes cannot be made
    writeable."""
    target = np.array([1, 2], np.int32)
    sample = om.Sample(np.ones((1, 2, 2), np.float32), target, 0)
    target[0] = -5
    assert sample.target.tolist() == [1, 2]
    _cannot_be_made_writeable(sample.target)
    with om.ImageBatchCollator().collate([sample], [0], 0, 0, 0) as b:
        assert b.targets.tolist() == [1, 2]


def test_sample_image_is_read_only_for_good(om):
    """Concern: memory safety (issue 13 class 2, sealed storage); our reading of the
    brief. A Sample does not copy an aligned native image; its ``image`` is a read-only
    view of the caller's memory that cannot be made writeable (the caller may still edit
    their own array: that races only with their own batch, and the collator's bounds come
    from the Sample's own view, which keeps its shape)."""
    image = np.arange(6, dtype=np.float32).reshape(1, 2, 3)
    sample = om.Sample(image, [1], 0)
    assert np.shares_memory(sample.image, image)
    _cannot_be_made_writeable(sample.image)
    image.shape = (6,)
    assert sample.image.shape == (1, 2, 3)


def test_second_init_is_refused(om):
    """Concern: memory safety (issue 13 class 2, sealed storage). Calling __init__ again
    on a live dataset, sampler, sample or pool is refused (it freed the storage workers
    were copying from: use-after-free), and the object keeps working unchanged."""
    ds = _small_dataset(om)
    with pytest.raises(RuntimeError, match="already"):
        ds.__init__([np.ones((1, 1, 1), np.float32)], [[1]], [0])
    assert len(ds) == 3 and ds.get_sample(1).image.shape == (1, 2, 5)
    syn = om.SyntheticLineImages(3, height=2, min_width=3, max_width=6)
    with pytest.raises(RuntimeError, match="already"):
        syn.__init__(1)
    assert len(syn) == 3
    args = {"sequential": (4, 1), "shuffled": (4, 1, 0), "mixing": ([(0, 1, 1.0)], 1, 1, 0),
            "bucketed": ([1, 2], 1, 1, 0)}
    for kind, s in _samplers(om).items():
        before = s.indices(0, 0).tolist()
        with pytest.raises(RuntimeError, match="already"):
            s.__init__(*args[kind])
        assert s.indices(0, 0).tolist() == before
    sample = om.Sample(np.ones((1, 1, 2), np.float32), [1], 3)
    with pytest.raises(RuntimeError, match="already"):
        sample.__init__(np.ones((1, 1, 5), np.float32), [2], 4)
    assert sample.image.shape == (1, 1, 2) and sample.label == 3
    pool = om.BufferPool(4096)
    with pytest.raises(RuntimeError, match="already"):
        pool.__init__(1 << 30)
    assert pool.max_bytes == 4096


def test_reinit_during_collation_cannot_free_storage(om):
    """Concern: memory safety (issue 13 class 2, sealed storage). The use-after-free of a
    re-initialised dataset, run for real in a subprocess: threads collate from the
    dataset while another calls __init__ on it; every re-init is refused and every batch
    equals the first."""
    out = run_isolated("""
        import threading
        ds = om.SyntheticLineImages(64, height=4, min_width=64, max_width=128, seed=1)
        col = om.ImageBatchCollator()
        idx = np.arange(16, dtype=np.int64)
        with gather(col, ds, idx, 0, 0, 0) as b:
            want = b.images.copy()
        bad = []
        def collate():
            c = om.ImageBatchCollator()
            for _ in range(50):
                with gather(c, ds, idx, 0, 0, 0) as b:
                    if not np.array_equal(b.images, want):
                        bad.append(1)
        threads = [threading.Thread(target=collate) for _ in range(2)]
        for t in threads:
            t.start()
        refused = 0
        for _ in range(50):
            try:
                ds.__init__(1, 2, 1, 1)
            except RuntimeError:
                refused += 1
        for t in threads:
            t.join()
        print(refused, len(bad))
    """)
    assert out.split() == ["50", "0"]


# --------------------------------------------------------------------------- class 3: pickling

def test_no_generated_setstate(om):
    """Concern: memory safety (issue 13 class 3, pickling). No class of the bottom
    modules has Cython's generated __setstate_cython__ (with bounds checks off,
    obj.__setstate_cython__(()) segfaulted on every sampler and the dataset, and a forged
    ShuffledSampler state looped forever without the GIL); run in a subprocess so a
    regression cannot kill pytest."""
    out = run_isolated("""
        objs = [om.SequentialSampler(10, 3), om.ShuffledSampler(10, 3, 1), om.MixingSampler([(0, 5, 1.0)], 2, 2, 0),
                om.BucketedSampler([1, 2, 3, 4], 2, 1, 0), om.SyntheticLineImages(2, 2, 2, 3),
                om.ArrayImageDataset([np.ones((1, 1, 2), np.float32)], [[1]], [0]),
                om.Sample(np.ones((1, 1, 2), np.float32), [1], 0), om.SampleRng(3), om.BufferPool()]
        for obj in objs:
            for state in ((), (2, True, 10, 100), None):
                try:
                    obj.__setstate_cython__(state)
                except AttributeError:
                    pass
                else:
                    raise SystemExit(f"{type(obj).__name__} accepted a forged state")
            assert not hasattr(obj, "__setstate_cython__") and not hasattr(obj, "__reduce_cython__")
            print(type(obj).__name__)
    """)
    assert len(out.split()) == 9


def test_no_class_of_the_bottom_modules_has_generated_pickling():
    """Concern: memory safety (issue 13 class 3, pickling). Pickling is decided per class
    (``auto_pickle(False)`` and, where it makes sense, ``__reduce__`` through the
    constructor): no class of the core modules, the datasets, the pool or §6 carries
    Cython's __reduce_cython__ / __setstate_cython__."""
    import importlib
    found = []
    for name in ("core.rng", "core.permute", "core.samplers", "core.tablesamplers", "core.sealed", "data.datasets",
                 "collate.bufferpool", "data.image"):
        module = importlib.import_module(f"onemodel_cy.{name}")
        for cname, cls in vars(module).items():
            if isinstance(cls, type) and cls.__module__ == module.__name__:
                found.append(cname)
                assert not hasattr(cls, "__setstate_cython__"), cname
                assert not hasattr(cls, "__reduce_cython__"), cname
    assert {"SampleRng", "Sampler", "SequentialSampler", "ShuffledSampler", "MixingSampler",
            "BucketedSampler", "Sample", "ArrayImageDataset", "SyntheticLineImages", "BufferPool",
            "Block"} <= set(found)


def test_pickle_round_trips_through_the_constructors(om):
    """Concern: memory safety (issue 13 class 3, pickling). Samplers, datasets, samples
    and generators pickle by rebuilding through their validating constructors, and the
    copy gives the same batches, samples or draws."""
    for s in _samplers(om).values():
        again = pickle.loads(pickle.dumps(s))
        assert type(again) is type(s) and repr(again) == repr(s) and _same_batches(s, again)
    for ds in (_small_dataset(om), om.SyntheticLineImages(3, height=2, min_width=3, max_width=6, seed=2)):
        again = pickle.loads(pickle.dumps(ds))
        assert type(again) is type(ds) and len(again) == len(ds)
        assert np.array_equal(again.shapes, ds.shapes)
        for i in range(len(ds)):
            a, b = ds.get_sample(i), again.get_sample(i)
            assert np.array_equal(a.image.view(np.uint32), b.image.view(np.uint32))
            assert a.target.tolist() == b.target.tolist() and a.label == b.label
    sample = om.Sample(np.arange(4, dtype=np.float32).reshape(1, 1, 4), [3, 1], -7)
    again = pickle.loads(pickle.dumps(sample))
    assert np.array_equal(again.image, sample.image) and again.target.tolist() == [3, 1]
    assert again.label == -7
    rng = om.SampleRng(12345)
    rng.next_u64()
    again = pickle.loads(pickle.dumps(rng))
    assert again.state == rng.state and again.next_u64() == rng.next_u64()


def test_forged_states_are_refused_and_pools_do_not_pickle(om):
    """Concern: memory safety (issue 13 class 3, pickling). A forged pickle can only call
    the constructor, which validates: the state (2, True, 10, 100) that made an endless
    ShuffledSampler is refused. Pools and blocks hold process-local memory and refuse
    pickling with a TypeError."""
    class Forged:
        def __reduce__(self):
            return (om.ShuffledSampler, (2, True, 10, 100))

    with pytest.raises(TypeError, match="True"):
        pickle.loads(pickle.dumps(Forged()))
    cls, args = om.ShuffledSampler(4, 2, 1).__reduce__()
    with pytest.raises(ValueError):
        cls(args[0], 0, *args[2:])
    for obj in (om.BufferPool(),):
        with pytest.raises(TypeError):
            pickle.dumps(obj)
    ds = om.SyntheticLineImages(2, 2, 2, 3)
    with gather(om.ImageBatchCollator(), ds, np.zeros(1, np.int64), 0, 0, 0) as b:
        with pytest.raises(TypeError):
            pickle.dumps(b.images.base)


# --------------------------------------------------------------------------- class 4: half-built objects

def test_objects_made_by_new_alone_fail_cleanly(om):
    """Concern: memory safety (issue 13 class 4, half-built objects). Every public class
    of the bottom modules, made by Cls.__new__(Cls) without __init__, raises a clear
    error when used (or works as an empty object), never crashes: run in a subprocess,
    since a NULL table read segfaulted."""
    out = run_isolated("""
        import pickle
        def expect(fn, *errors):
            try:
                fn()
            except errors:
                return "ok"
            raise SystemExit(f"no error from {fn}")
        col = om.ImageBatchCollator()
        idx = np.zeros(2, np.int64)
        for cls in (om.Sampler, om.SequentialSampler, om.ShuffledSampler, om.MixingSampler, om.BucketedSampler):
            s = cls.__new__(cls)
            # the bare base is abstract; a built-in made without its constructor is in a
            # state it cannot serve (the exception rule: RuntimeError)
            error = NotImplementedError if cls is om.Sampler else RuntimeError
            print(expect(lambda: s.indices(0, 0), error),
                  expect(lambda: s.indices_into(0, 0, np.zeros(4, np.int64)), error),
                  expect(lambda: s.batch_length(0), error), repr(s) != "")
        for cls in (om.ArrayImageDataset, om.SyntheticLineImages):
            ds = cls.__new__(cls)
            print(len(ds), expect(lambda: ds.get_sample(0), RuntimeError),
                  expect(lambda: gather(col, ds, idx, 0, 0, 0), IndexError),
                  expect(lambda: read(col, ds, idx, 0, 0, 0), RuntimeError),
                  expect(lambda: ds.shapes[0], IndexError), repr(ds) != "")
        s = om.Sample.__new__(om.Sample)
        print(expect(lambda: col.collate([s], [0], 0, 0, 0), RuntimeError),
              expect(lambda: list(s), RuntimeError), repr(s) != "")
        rng = om.SampleRng.__new__(om.SampleRng)
        print(rng.next_u64() == om.SampleRng(0).next_u64())
        pool = om.BufferPool.__new__(om.BufferPool)
        print(pool.reserve(4096, 1) == 0, pool.stats()["bytes_held"] == 0)
        from onemodel_cy.collate.bufferpool import Block
        from onemodel_cy.core.sealed import SealedMemory
        block = Block.__new__(Block)
        print(block.nbytes, expect(lambda: pickle.dumps(block), TypeError))
        del block
        print(repr(SealedMemory.__new__(SealedMemory)), expect(lambda: SealedMemory(), TypeError))
    """)
    assert out.split() == ["ok", "ok", "ok", "True"] * 5 + ["0", "ok", "ok", "ok", "ok", "True"] * 2 + [
        "ok", "ok", "True", "True", "True", "True", "0", "ok", "<SealedMemory>", "ok"]


def test_failed_sample_init_leaves_nothing_half_set(om):
    """Concern: memory safety (issue 13 class 4, half-built objects). Sample.__init__
    validates everything before assigning anything: a target refused after a good image
    leaves no image behind (the collator then read target=None as an array), so using the
    sample is a clear error; run in a subprocess."""
    out = run_isolated("""
        s = om.Sample.__new__(om.Sample)
        try:
            s.__init__(np.ones((1, 1, 2), np.float32), [-5, 2], 0)
        except ValueError:
            pass
        assert s.image is None and s.target is None
        try:
            om.ImageBatchCollator().collate([s], [0], 0, 0, 0)
        except RuntimeError as e:      # an object in a state it cannot serve (the exception rule)
            assert "never initialised" in str(e), e
            print("refused")
        try:                        # claimed by the failed __init__: build a new Sample instead
            s.__init__(np.ones((1, 1, 2), np.float32), [5, 2], 0)
        except RuntimeError as e:
            assert "already called" in str(e), e
            print("claimed")
        s = om.Sample(np.ones((1, 1, 2), np.float32), [5, 2], 0)
        with om.ImageBatchCollator().collate([s], [0], 0, 0, 0) as b:
            print(b.targets.tolist())
    """)
    assert out.split() == ["refused", "claimed", "[5,", "2]"]


def test_failed_synthetic_init_leaves_an_empty_dataset(om):
    """Concern: memory safety (issue 13 class 4, half-built objects). A
    SyntheticLineImages whose generation is refused stays empty (no count without
    storage); the fast path then finds no index. It stays claimed: a second __init__ is
    refused (initialisation is claimed before any argument is converted, so two threads
    can never both initialise one object), and a new dataset is built instead."""
    ds = om.SyntheticLineImages.__new__(om.SyntheticLineImages)
    with pytest.raises(ValueError, match="does not fit"):
        ds.__init__(3, height=2**21, min_width=2**22, max_width=2**22, channels=2**21)
    assert len(ds) == 0
    with pytest.raises(IndexError):
        gather(om.ImageBatchCollator(), ds, np.zeros(1, np.int64), 0, 0, 0)
    with pytest.raises(RuntimeError, match="already called"):
        ds.__init__(3, height=2, min_width=3, max_width=4)
    assert len(ds) == 0
    assert len(om.SyntheticLineImages(3, height=2, min_width=3, max_width=4)) == 3


# --------------------------------------------------------------------------- class 5: alignment

def test_misaligned_image_is_copied_aligned(om):
    """Concern: memory safety (issue 13 class 5, alignment). A float32 image at an odd
    address is copied into an aligned array owned by the Sample (the collator would read
    it with misaligned loads); pixels and batch bits are unchanged."""
    values = np.random.default_rng(3).random(12, dtype=np.float32)
    buf = bytearray(4 * 12 + 1)
    view = np.frombuffer(buf, dtype=np.float32, offset=1, count=12)
    view[...] = values
    image = view.reshape(1, 3, 4)
    assert not image.flags.aligned
    sample = om.Sample(image, [1], 0)
    assert sample.image.flags.aligned and not np.shares_memory(sample.image, image)
    assert np.array_equal(sample.image.reshape(-1).view(np.uint32), values.view(np.uint32))
    aligned = om.Sample(values.reshape(1, 3, 4).copy(), [1], 0)
    col = om.ImageBatchCollator()
    with col.collate([sample], [0], 0, 0, 0) as a, col.collate([aligned], [0], 0, 0, 0) as b:
        assert np.array_equal(a.images.view(np.uint32), b.images.view(np.uint32))


def test_misaligned_indices_out_is_refused(om):
    """Concern: memory safety (issue 13 class 5, alignment). An int64 out= of a sampler's
    indices_into at an odd address is refused (TypeError naming the layout) and left
    unwritten."""
    buf = bytearray(8 * 3 + 1)
    out = np.frombuffer(buf, dtype=np.int64, offset=1, count=3)
    for s in _samplers(om).values():
        with pytest.raises(TypeError, match="aligned=False"):
            s.indices_into(0, 0, out)
    assert bytes(buf) == bytes(len(buf))


# --------------------------------------------------------------------------- item 8: pool race

def test_concurrent_reserve_never_exceeds_max_bytes(om):
    """Concern: memory safety (architecture item 8, concurrent reservation); §5
    (BufferPool.reserve). Each reserved block is checked against max_bytes and added in
    one step under the pool's mutex, so threads reserving against one small pool at once
    never hold more than max_bytes together. (Under the GIL the old race needed a thread
    switch inside reserve; on a free-threaded build it exceeded the bound.)"""
    nbytes = 64 << 10
    for _ in range(20):
        pool = om.BufferPool(max_bytes=5 * nbytes)
        barrier = threading.Barrier(4)

        def reserve():
            barrier.wait()
            for count in range(1, 12):
                pool.reserve(nbytes, count)

        threads = [threading.Thread(target=reserve) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        stats = pool.stats()
        assert stats["bytes_held"] <= 5 * nbytes
        assert stats["reserved"] == 5
        pool.clear()
        gc.collect()


def test_block_address_is_gone(om):
    """Concern: memory safety (architecture item 7, dead code). Block.address was dead
    code (nothing used it) and no longer exists."""
    from onemodel_cy.collate.bufferpool import Block
    assert not hasattr(Block, "address")


def test_configuration_that_the_bytes_depend_on_is_read_only(om):
    """§1 (the batch is a function of the configuration): a loader's dataset, sampler,
    collator, seed, transform, rank and world size cannot be reassigned, so batches that
    kept workers built ahead always belong to the configuration they are delivered under."""
    ds = om.SyntheticLineImages(8, height=2, min_width=2, max_width=3, seed=1)
    loader = om.DataLoader(ds, om.SequentialSampler(8, 4), om.ImageBatchCollator(), seed=3)
    for name in ("dataset", "sampler", "collator", "seed", "transform", "rank", "world_size"):
        with pytest.raises(AttributeError):
            setattr(loader, name, getattr(loader, name))
    loader.prefetch = 3          # these do not change the bytes
    loader.workers = 1
    assert loader.seed == 3


def test_subclasses_do_not_pickle_as_their_base(om):
    """Concern: pickling. A Python subclass of a built-in sampler or of the collator is
    refused by the inherited __reduce__ (which would rebuild the base class and drop the
    subclass's overrides) instead of coming back as a plain base object."""
    class Reversed(om.SequentialSampler):
        def indices(self, epoch, step):
            return super().indices(epoch, step)[::-1].copy()

    class Mine(om.ImageBatchCollator):
        pass

    for obj in (Reversed(10, 2), Mine()):
        with pytest.raises(TypeError, match="must define __reduce__"):
            pickle.dumps(obj)
    assert pickle.loads(pickle.dumps(om.SequentialSampler(10, 2))).steps_per_epoch == 5


def test_pool_window_checks_its_size_and_keeps_its_record_on_failure(om):
    """§5 (PoolWindow): a size that is not a non-negative integer is refused with the rule's
    types, and a reservation the pool refuses leaves the window's record where it was."""
    from onemodel_cy.collate.bufferpool import PoolWindow
    window = PoolWindow.for_stream(om.BufferPool(max_bytes=1 << 20), 2, 1)
    assert window.count == 4
    with pytest.raises(ValueError):
        window.fit(-1)
    with pytest.raises(TypeError):
        window.fit(1.5)
    with pytest.raises((ValueError, MemoryError)):
        window.fit(1 << 60)
    assert window.reserved == 0
    window.fit(4096)
    assert window.reserved == 4096


def test_image_constants_must_give_a_finite_scale_and_bias(om):
    """§6 (D15): finite mean and std whose float32 scale 1/(255 std) or bias mean/std is
    not finite are refused with a ValueError naming them, instead of a NaN or infinite image."""
    gray = np.zeros((2, 3), np.uint8)
    for mean, std in ((0.0, 1e-44), (1e30, 1e-30)):
        with pytest.raises(ValueError, match="finite"):
            om.gray8_to_planar(gray, mean, std)
    with pytest.raises(ValueError, match="finite"):
        om.GainOffset(3.5e38, 0.0)


def test_a_misaligned_view_of_sealed_storage_is_copied_into_a_sample(om):
    """Concern: memory safety (issue 13 class 5, alignment). A target that is a misaligned
    view of a dataset's sealed storage is read-only for good, but not aligned: a Sample
    takes an aligned sealed copy of it (the values its bytes hold) instead of keeping it,
    so no kernel reads it through a misaligned int32 pointer and collation takes it."""
    ds = om.ArrayImageDataset([np.ones((1, 2, 3), np.float32)], [[1, 2, 3, 4, 5]], [0])
    misaligned = ds.get_sample(0).target.view(np.uint8)[1:9].view(np.int32)
    assert not misaligned.flags.aligned
    sample = om.Sample(np.ones((1, 2, 3), np.float32), misaligned, 0)
    assert sample.target.flags.aligned and not sample.target.flags.writeable
    assert sample.target.tolist() == misaligned.tolist()
    with om.ImageBatchCollator().collate([sample], [0], 0, 0, 0) as b:
        assert b.targets.tolist() == misaligned.tolist()
