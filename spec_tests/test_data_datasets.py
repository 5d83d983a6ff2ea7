"""The built-in datasets ArrayImageDataset and SyntheticLineImages, and Sample.

What this file covers:

* §1 (datasets): an index always gives back an equal sample, also when several threads
  read the dataset together;
* §4 (what a sample is): a planar float32 [C, H, W] image, an int32 target and an integer
  label, and the refusals of anything else under the package's exception rule
  (docs/architecture.md, Errors);
* Concern: built-in synthetic dataset. SyntheticLineImages is this package's own
  definition (docs/contract.md), regenerable in any language from streams 2 and 3 of
  ``derive``; the oracle is ``reference.synthetic_sample``; collated, it gives the
  oracle's §4 batches;
* Concern: memory safety (issue 13 class 2, sealed storage): the views a dataset or a
  Sample hands out stay read-only.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import reference as R
from routes import gather

M64 = R.M64
SEEDS = st.one_of(st.integers(0, M64), st.integers(-(1 << 63), -1), st.sampled_from([0, 1, -1, M64]))
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)


def _bits(a):
    return np.asarray(a).view(np.uint32)


@st.composite
def synthetic_params(draw):
    min_width = draw(st.integers(1, 40))
    return dict(count=draw(st.integers(1, 6)), height=draw(st.integers(1, 8)), min_width=min_width,
                max_width=draw(st.integers(min_width, min_width + 60)),
                channels=draw(st.integers(1, 3)), seed=draw(SEEDS))


# --------------------------------------------------------------------------- SyntheticLineImages

@given(p=synthetic_params())
def test_synthetic_matches_reference(om, p):
    """Concern: built-in synthetic dataset (docs/contract.md; D2). Sample i of
    SyntheticLineImages is the contract's: width, target length, symbols and label from
    the stream-2 rng of derive(seed, 0, i, 0, 2), pixels from stream 3 filled in C, H, W
    order with next_single; every sample equals the oracle bit for bit."""
    ds = om.SyntheticLineImages(p["count"], p["height"], p["min_width"], p["max_width"],
                                p["channels"], p["seed"])
    assert len(ds) == p["count"]
    for i in range(p["count"]):
        image, target, label = R.synthetic_sample(i, p["height"], p["min_width"], p["max_width"],
                                                  p["channels"], p["seed"])
        s = ds.get_sample(i)
        assert s.image.dtype == np.float32 and s.image.shape == image.shape
        assert np.array_equal(_bits(s.image), _bits(image))
        assert s.target.dtype == np.int32 and s.target.tolist() == target.tolist()
        assert s.label == label and isinstance(s.label, int)
        assert ds.widths[i] == image.shape[2]


@given(p=synthetic_params())
def test_synthetic_geometry(om, p):
    """Concern: built-in synthetic dataset. Independently of the oracle: widths lie in
    [min_width, max_width], images are [channels, height, width] with pixels in [0, 1), a
    target has 1..max(1, width // 16) symbols in 1..95 (0 is left for the CTC blank), the
    label is in 0..9."""
    ds = om.SyntheticLineImages(**p)
    for i in range(len(ds)):
        s = ds[i]
        c, h, w = s.image.shape
        assert (c, h) == (p["channels"], p["height"]) and p["min_width"] <= w <= p["max_width"]
        assert np.all((s.image >= 0) & (s.image < 1))
        assert 1 <= len(s.target) <= max(1, w // 16)
        assert all(1 <= v <= 95 for v in s.target.tolist())
        assert 0 <= s.label <= 9


def test_synthetic_defaults_and_seed_dependence(om):
    """Concern: built-in synthetic dataset (D3 for its seed). The defaults are height 32,
    widths 64..256, one channel, seed 0; another seed gives other samples; negative seeds
    are reduced mod 2^64."""
    ds = om.SyntheticLineImages(3)
    for i in range(3):
        image, target, label = R.synthetic_sample(i)
        assert np.array_equal(_bits(ds.get_sample(i).image), _bits(image))
    other = om.SyntheticLineImages(3, seed=1)
    assert not np.array_equal(ds.get_sample(0).image[:, :, :64], other.get_sample(0).image[:, :, :64])
    a, b = om.SyntheticLineImages(2, seed=-1), om.SyntheticLineImages(2, seed=M64)
    assert np.array_equal(_bits(a.get_sample(1).image), _bits(b.get_sample(1).image))


@settings(max_examples=15)
@given(p=synthetic_params(), m=st.integers(1, 8), data=st.data())
def test_synthetic_through_the_collator(om, p, m, data):
    """§4 (D13, D17) on the built-in synthetic dataset: end to end, collating
    SyntheticLineImages samples on the dataset path with a width multiple and GainOffset
    gives the oracle's collation of the oracle's samples."""
    p["channels"] = 1
    ds = om.SyntheticLineImages(**p)
    idx = data.draw(st.lists(st.integers(0, p["count"] - 1), min_size=1, max_size=6))
    with gather(om.ImageBatchCollator(width_multiple=m, augmentation=om.GainOffset()),
                ds, np.array(idx, np.int64), 3, 1, 2) as b:
        ref_samples = [R.synthetic_sample(i, p["height"], p["min_width"], p["max_width"], 1, p["seed"])
                       for i in idx]
        want = R.collate(ref_samples, idx, 3, 1, 2, width_multiple=m, augmentation=R.gain_offset())
        assert np.array_equal(_bits(b.images), _bits(want["images"]))
        for name in ("widths", "targets", "target_lengths", "labels", "indices"):
            assert np.array_equal(getattr(b, name), want[name]), name


@pytest.mark.parametrize("kwargs, error, fragment", [
    (dict(count=0), ValueError, "count"),
    (dict(count=-3), ValueError, "count"),
    (dict(count=2, height=0), ValueError, "height"),
    (dict(count=2, channels=0), ValueError, "channels"),
    (dict(count=2, min_width=0), ValueError, "min_width"),
    (dict(count=2, min_width=10, max_width=9), ValueError, "max_width=9"),
    (dict(count=2.0), TypeError, "count"),
    (dict(count=2, seed=1.5), TypeError, "seed"),
])
def test_synthetic_refuses_bad_parameters(om, kwargs, error, fragment):
    """Concern: built-in synthetic dataset, refusals under the exception rule. count,
    height, channels and widths are integers >= 1 with min_width <= max_width; errors
    name the parameter and the value received."""
    with pytest.raises(error) as e:
        om.SyntheticLineImages(**kwargs)
    assert fragment in str(e.value)


# --------------------------------------------------------------------------- ArrayImageDataset

@st.composite
def array_dataset_inputs(draw):
    n = draw(st.integers(1, 6))
    shapes = draw(st.lists(st.tuples(st.integers(1, 3), st.integers(1, 5), st.integers(1, 9)),
                           min_size=n, max_size=n))
    targets = draw(st.lists(st.lists(st.integers(0, (1 << 31) - 1), max_size=5), min_size=n, max_size=n))
    labels = draw(st.lists(INT32, min_size=n, max_size=n))
    seed = draw(st.integers(0, 2 ** 32 - 1))
    gen = np.random.default_rng(seed)
    images = [gen.standard_normal(s, dtype=np.float32) for s in shapes]
    if draw(st.booleans()) and images[0].shape[2] > 1:
        images[0] = images[0][:, :, ::2]                   # a non-contiguous input
    return images, targets, labels


@given(inputs=array_dataset_inputs())
def test_array_dataset_round_trips(om, inputs):
    """§1 (datasets give one fixed sample per index), §4 (sample dtypes):
    ArrayImageDataset returns exactly the images (any shapes), targets and labels it was
    given; get_sample returns read-only views (float32 image, int32 target), and asking
    for an index again gives an equal sample; the input arrays were copied (editing them
    later changes nothing)."""
    images, targets, labels = inputs
    ds = om.ArrayImageDataset(images, targets, labels)
    originals = [im.copy() for im in images]
    for im in images:
        im[...] = np.float32(123.0)
    assert len(ds) == len(images)
    for i in range(len(ds)):
        s = ds.get_sample(i)
        assert s.image.dtype == np.float32 and s.image.shape == originals[i].shape
        assert np.array_equal(_bits(s.image), _bits(originals[i]))
        assert s.target.dtype == np.int32 and s.target.tolist() == targets[i]
        assert s.label == labels[i]
        assert not s.image.flags.writeable and not s.target.flags.writeable
        with pytest.raises(ValueError):
            s.image[...] = 0
        again = ds[i]
        assert np.array_equal(_bits(again.image), _bits(s.image))
        assert again.target.tolist() == s.target.tolist() and again.label == s.label
    assert ds.widths.tolist() == [im.shape[2] for im in originals]
    assert ds.shapes.tolist() == [list(im.shape) for im in originals]


def test_array_dataset_accepts_a_4d_array(om):
    """§4 (planar [C, H, W] samples): one float32 [N, C, H, W] array is N images of equal
    size, each with its own target and label."""
    images = np.random.default_rng(1).random((4, 2, 3, 5), dtype=np.float32)
    ds = om.ArrayImageDataset(images, [[1], [2, 3], [], [4]], [0, 1, 2, 3])
    assert len(ds) == 4
    for i in range(4):
        assert np.array_equal(ds.get_sample(i).image, images[i])
    assert ds.get_sample(1).target.tolist() == [2, 3]
    assert ds.get_sample(2).target.tolist() == []


def test_array_dataset_is_thread_safe(om):
    """§1 (a dataset serves concurrent readers): three threads reading together each get
    exactly the samples the dataset holds."""
    gen = np.random.default_rng(2)
    images = [gen.random((1, 4, int(w)), dtype=np.float32) for w in gen.integers(1, 30, size=50)]
    ds = om.ArrayImageDataset(images, [[i % 7] for i in range(50)], list(range(50)))
    bad = []

    def read():
        for _ in range(20):
            for i in range(50):
                s = ds.get_sample(i)
                if not (np.array_equal(s.image, images[i]) and s.label == i and s.target.tolist() == [i % 7]):
                    bad.append(i)

    threads = [threading.Thread(target=read) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not bad


def test_array_dataset_index_errors(om):
    """§1 (datasets), with the exception rule: get_sample takes an integer in [0, len);
    an index outside it is an IndexError quoting it, a float a TypeError, and a numpy
    integer is accepted."""
    ds = om.ArrayImageDataset([np.ones((1, 1, 2), np.float32)] * 2, [[1], [2]], [0, 0])
    for bad in (2, -1, 1 << 40):
        with pytest.raises(IndexError) as e:
            ds.get_sample(bad)
        assert str(bad) in str(e.value)
        with pytest.raises(IndexError):
            ds[bad]
    with pytest.raises(TypeError):
        ds.get_sample(1.0)
    assert ds.get_sample(np.int64(1)).target.tolist() == [2]


@pytest.mark.parametrize("images, targets, labels, error, fragment", [
    ([np.ones((1, 1, 2), np.float32)] * 2, [[1]], [0, 0], ValueError, "2, 1, 2"),
    ([np.ones((1, 1, 2), np.float32)] * 2, [[1], [1]], [0], ValueError, "2, 2, 1"),
    ([], [], [], ValueError, "0"),
    ([np.ones((1, 1, 2), np.float64)], [[1]], [0], TypeError, "float64"),
    ([np.ones((1, 2), np.float32)], [[1]], [0], TypeError, "(1, 2)"),
    ([np.ones((1, 1, 2), np.float32)], [[-1]], [0], ValueError, "-1"),
    ([np.ones((1, 1, 2), np.float32)], [[1 << 31]], [0], ValueError, str(1 << 31)),
    ([np.ones((1, 1, 2), np.float32)], [[1]], [1 << 31], ValueError, str(1 << 31)),
    (np.ones((2, 1, 1, 2), np.float64), [[1], [1]], [0, 0], TypeError, "float64"),
])
def test_array_dataset_refuses_bad_input(om, images, targets, labels, error, fragment):
    """§4 (what a sample is), with the exception rule: one target and one label per
    image; at least one image; float32 [C, H, W] images; targets in [0, 2^31); int32
    labels. Errors quote what was received."""
    with pytest.raises(error) as e:
        om.ArrayImageDataset(images, targets, labels)
    assert fragment in str(e.value)


def test_storage_views_cannot_be_made_writeable(om):
    """Concern: memory safety (issue 13 class 2, sealed storage). The fast path trusts
    the packed storage: the shapes and images a dataset hands out are views that cannot
    be switched back to writeable."""
    ds = om.SyntheticLineImages(4, height=2, min_width=3, max_width=5, seed=1)
    with pytest.raises(ValueError):
        ds.shapes.flags.writeable = True
    with pytest.raises(ValueError):
        ds.get_sample(0).image.flags.writeable = True


def test_sample_label_refuses_bools_and_takes_numpy_integers(om):
    """§4 (labels), with the exception rule through _validate.as_index: a label is an
    integer (np.int64 included), never a bool (True was taken as 1 before); the error
    names the value."""
    image = np.ones((1, 1, 2), np.float32)
    assert om.Sample(image, [1], np.int64(-3)).label == -3
    with pytest.raises(TypeError, match="True"):
        om.Sample(image, [1], True)
    with pytest.raises(TypeError, match="Sample.label"):
        om.Sample(image, [1], 1.5)


def test_sample_targets_of_every_integer_kind_are_copied_and_checked(om):
    """§4 (int32 targets); Concern: memory safety (issue 13 class 2, sealed copy). A
    target given as a list, an int64 array, a uint8 array, a strided int32 view or a
    big-endian int32 array is held as a sealed native int32 copy with the same values; an
    int32 array with a negative value is refused on the copy, naming it."""
    image = np.ones((1, 1, 2), np.float32)
    for target in ([3, 1], np.array([3, 1], np.int64), np.array([3, 1], np.uint8),
                   np.array([3, 0, 1], np.int32)[::2], np.array([3, 1], ">i4")):
        s = om.Sample(image, target, 0)
        assert s.target.dtype == np.int32 and s.target.dtype.isnative and s.target.tolist() == [3, 1]
        assert not s.target.flags.writeable and s.target.flags.c_contiguous
    with pytest.raises(ValueError, match="-4"):
        om.Sample(image, np.array([2, -4], np.int32), 0)
