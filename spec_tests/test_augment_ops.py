"""Concern: the built-in text-line augmentations (``onemodel_cy.augment``, docs/contract.md
"Text-line augmentations").

* Every operation, with parameters drawn by Hypothesis, equals the pure-Python transcription
  of the contract (``reference_augment.py``) bit for bit, and leaves the rng where the text
  says (every draw made, none extra), at the edges too: width 1, height 1, extreme
  magnitudes, both borders, p = 0 and 1.
* The preset ``text_lines()`` equals its description in the contract on random lines.
* A bad argument is refused when the operation is built, naming it; an output width is
  kept to [1, 2**20]; the operations pickle, compare equal and have a repr.
"""
from __future__ import annotations

import math
import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import onemodel_cy as om
import reference as R
import reference_augment as RA
from harness import _guard  # noqa: F401  (autouse: no worker may outlive a test)
from harness import assert_same, assert_stream_is_batch_at, drain_ok, finish
from onemodel_cy import augment as A
from onemodel_cy.augment import kernels


def same_bits(a, b):
    a, b = np.asarray(a, np.float32), np.asarray(b, np.float32)
    return a.shape == b.shape and np.array_equal(a.view(np.uint32), b.view(np.uint32))


def check(op, description, image, seed):
    """The compiled op and the reference agree on the pixels and on the rng's final state."""
    mine, theirs = om.SampleRng(seed), R.SampleRng(seed)
    out = op.apply(image, mine)
    expected = RA.apply(description, image, theirs)
    assert same_bits(out, expected), (op, out.shape, expected.shape,
                                      np.abs(out.astype(np.float64) - expected).max() if out.shape == expected.shape
                                      else None)
    assert mine.state == theirs.state, op


images = st.builds(
    lambda c, h, w, seed: np.random.default_rng(seed).random((c, h, w), dtype=np.float32),
    st.integers(1, 3), st.integers(1, 12), st.integers(1, 40), st.integers(0, 2**32))
seeds = st.integers(0, 2**64 - 1)
unit = st.floats(0.0, 1.0, width=32)
borders = st.sampled_from(["replicate", "constant"])
fills = st.floats(-2.0, 2.0, width=32)


def ordered(low, high, lo_bound, hi_bound):
    return st.tuples(st.floats(lo_bound, hi_bound, width=32), st.floats(lo_bound, hi_bound, width=32)).map(
        lambda pair: (min(pair), max(pair)))


# Each strategy gives (built-in, description) pairs with the same arguments.
OPERATIONS = {
    "stretch": ordered(0, 0, 1 / 64, 8.0).map(lambda s: (A.Stretch(s), ("stretch", s))),
    "resize_height": st.tuples(st.integers(1, 24), st.none() | st.integers(1, 60)).map(
        lambda a: (A.ResizeHeight(*a), ("resize_height",) + a)),
    "affine": st.tuples(st.floats(0, 45, width=32), st.floats(0, 1, width=32), ordered(0, 0, 1 / 16, 4.0),
                        st.floats(0, 8, width=32), borders, fills).map(
        lambda a: (A.Affine(*a), ("affine",) + a)),
    "perspective": st.tuples(st.floats(0, 0.5, width=32), borders, fills).map(
        lambda a: (A.Perspective(*a), ("perspective",) + a)),
    "elastic": st.tuples(ordered(0, 0, 0.0, 8.0), st.integers(1, 16), borders, fills).map(
        lambda a: (A.Elastic(*a), ("elastic",) + a)),
    "erode": st.integers(1, 5).map(lambda k: (A.Erode(k), ("erode", k))),
    "dilate": st.tuples(st.integers(1, 5), st.integers(1, 5)).map(lambda k: (A.Dilate(k), ("dilate", k))),
    "gaussian_blur": ordered(0, 0, 0.0, 8.0).map(lambda s: (A.GaussianBlur(s), ("gaussian_blur", s))),
    "brightness_contrast": st.tuples(ordered(0, 0, 0.0, 3.0), ordered(0, 0, -1.0, 1.0)).map(
        lambda a: (A.BrightnessContrast(*a), ("brightness_contrast",) + a)),
    "gaussian_noise": ordered(0, 0, 0.0, 1.0).map(lambda s: (A.GaussianNoise(s), ("gaussian_noise", s))),
    "speckle_noise": ordered(0, 0, 0.0, 1.0).map(lambda s: (A.SpeckleNoise(s), ("speckle_noise", s))),
    "impulse_noise": st.tuples(ordered(0, 0, 0.0, 1.0), fills, fills).map(
        lambda a: (A.ImpulseNoise(*a), ("impulse_noise",) + a)),
    "invert": st.tuples(fills, fills).map(lambda a: (A.Invert(*a), ("invert",) + a)),
}


@pytest.mark.parametrize("name", sorted(OPERATIONS))
@given(data=st.data(), image=images, seed=seeds)
def test_each_operation_equals_the_contract(name, data, image, seed):
    op, description = data.draw(OPERATIONS[name])
    check(op, description, image, seed)


WARPS = [("affine", 45.0, 1.0, (1 / 16, 4.0), 8.0), ("affine", 2.0, 0.3, (0.9, 1.05), 1.5),
         ("perspective", 0.5), ("perspective", 0.08), ("elastic", (0.0, 8.0), 1), ("elastic", (1.0, 2.5), 3),
         ("elastic", (0.0, 64.0), 8)]


@pytest.mark.parametrize("width", [1, 3, 4, 5, 63, 64, 65, 131, 300])
@pytest.mark.parametrize("height", [1, 2, 32])
def test_the_warps_at_every_row_position_and_border(width, height):
    """The geometric kernels (src/warp.h) take a row in chunks of 64 pixels and those in
    groups of 4, with a fast path where all four pixels have their neighbours inside the
    plane, and elastic's columns in runs of one cell: widths around those sizes, heights
    1, 2 and 32, both borders, pixels of any size (an overflowing difference of neighbours
    included), against the contract. The images of the Hypothesis tests are at most 40
    pixels wide."""
    rng = np.random.default_rng(width * 1000 + height)
    image = (rng.normal(size=(2, height, width)) * 3).astype(np.float32)
    image[rng.random(image.shape) < 0.05] = np.float32(3e38)
    image[rng.random(image.shape) < 0.05] = np.float32(-3e38)
    for k, warp in enumerate(WARPS):
        for border in ("replicate", "constant"):
            description = warp + (border, -1.5)
            op = {"affine": A.Affine, "perspective": A.Perspective, "elastic": A.Elastic}[warp[0]](*description[1:])
            with np.errstate(all="ignore"):
                check(op, description, image, seed=k * 7919 + width)


SIMD_LEVELS = list(range(kernels.simd_kernels() + 1))      # 0 scalar C, 1 SSE2, 2 AVX2, 3 AVX-512
wide_images = st.builds(
    lambda c, h, w, seed: (np.random.default_rng(seed).normal(size=(c, h, w)) * 2).astype(np.float32),
    st.integers(1, 2), st.integers(1, 9), st.integers(1, 140), st.integers(0, 2**32))


@pytest.mark.parametrize("level", SIMD_LEVELS)
@settings(max_examples=40, deadline=None)
@given(data=st.data(), image=wide_images, seed=seeds)
def test_every_simd_level_gives_the_contracts_bits(level, data, image, seed):
    """The row loops of src/warp.h (warps, noise, blur, resampling) exist at every SIMD level
    this CPU runs; each, forced with ``simd_kernels(cap)``, gives the contract's bits on
    images wide enough to cross every vector and chunk boundary (up to 140 pixels)."""
    op, description = data.draw(st.sampled_from(sorted(OPERATIONS)).flatmap(lambda name: OPERATIONS[name]))
    previous = kernels.simd_kernels(level)
    try:
        with np.errstate(all="ignore"):
            check(op, description, image, seed)
    finally:
        kernels.simd_kernels(previous)


leaves = st.one_of(*OPERATIONS.values())


def composites(children):
    return st.one_of(
        st.lists(children, min_size=0, max_size=3).map(
            lambda ops: (A.Compose([o for o, _ in ops]), ("compose", [d for _, d in ops]))),
        st.tuples(children, unit).map(lambda a: (A.RandomApply(a[0][0], a[1]), ("random_apply", a[0][1], a[1]))),
        st.tuples(st.lists(children, min_size=1, max_size=3),
                  st.lists(st.floats(0.01, 10), min_size=3, max_size=3)).map(
            lambda a: (A.OneOf([o for o, _ in a[0]], a[1][:len(a[0])]),
                       ("one_of", [d for _, d in a[0]], a[1][:len(a[0])]))))


@given(pair=st.recursive(leaves, composites, max_leaves=6), image=images, seed=seeds)
def test_compositions_equal_the_contract(pair, image, seed):
    check(pair[0], pair[1], image, seed)


@given(seed=seeds, width=st.integers(1, 300), height=st.sampled_from([1, 8, 32]))
def test_the_preset_equals_its_description(seed, width, height):
    image = np.random.default_rng(seed % 2**32).random((1, height, width), dtype=np.float32)
    check(A.text_lines(), RA.text_lines(), image, seed)


def test_the_preset_is_the_documented_composition():
    assert A.text_lines() == A.Compose([
        A.RandomApply(A.Stretch((0.8, 1.2)), 0.5),
        A.RandomApply(A.Affine(2.0, 0.3, (0.9, 1.05), 1.5), 0.75),
        A.RandomApply(A.OneOf([A.Elastic((1.0, 2.5), 8), A.Perspective(0.08)]), 0.5),
        A.RandomApply(A.OneOf([A.Erode(2), A.Dilate(2)]), 0.3),
        A.RandomApply(A.GaussianBlur((0.3, 1.0)), 0.3),
        A.RandomApply(A.BrightnessContrast((0.7, 1.3), (-0.3, 0.3)), 0.5),
        A.RandomApply(A.GaussianNoise((0.0, 0.15)), 0.5)])
    assert A.text_lines(p_noise=0.0) != A.text_lines()
    with pytest.raises(TypeError, match="p_nois"):
        A.text_lines(p_nois=0.0)


def test_random_apply_at_p_0_and_1():
    image = np.random.default_rng(1).random((1, 4, 9), dtype=np.float32)
    never, always = A.RandomApply(A.Invert(), 0.0), A.RandomApply(A.Invert(), 1.0)
    for seed in range(50):
        rng = om.SampleRng(seed)
        assert same_bits(never.apply(image, rng), image)
        assert rng.state == om.SampleRng(seed).state + 0x9E3779B97F4A7C15 & (2**64 - 1)   # one draw only
        assert same_bits(always.apply(image, om.SampleRng(seed)), np.float32(1) - image)


def test_the_contract_functions_are_close_to_the_true_ones():
    """Not the contract itself (the bits are), but a check that the polynomials are what
    they claim to be."""
    for x in np.linspace(-math.pi / 4, math.pi / 4, 101, dtype=np.float32):
        assert abs(float(RA.sin32(x)) - math.sin(x)) < 1e-6
        assert abs(float(RA.cos32(x)) - math.cos(x)) < 1e-6
    for t in np.linspace(0, 87, 300, dtype=np.float32):     # eight squarings: 2.7e-5 at worst
        assert abs(float(RA.expneg32(t)) - math.exp(-t)) <= 4e-5 * math.exp(-t)
    values = RA.normals(R.SampleRng(3), 20000)
    assert abs(values.mean()) < 0.03 and abs(values.std() - 1) < 0.03


def test_an_output_width_is_kept_within_the_limit():
    wide = np.zeros((1, 1, 20000), np.float32)
    assert A.Stretch(64.0).apply(wide, om.SampleRng(0)).shape == (1, 1, A.WIDTH_LIMIT)
    assert A.Stretch(1 / 64).apply(np.zeros((1, 2, 1), np.float32), om.SampleRng(0)).shape == (1, 2, 1)
    assert A.ResizeHeight(4, max_width=5).apply(np.zeros((1, 2, 100), np.float32), om.SampleRng(0)).shape == (1, 4, 5)
    assert A.ResizeHeight(1).apply(np.zeros((1, 64, 1), np.float32), om.SampleRng(0)).shape == (1, 1, 1)


@pytest.mark.parametrize("make, name", [
    (lambda: A.GaussianBlur(-0.1), "sigma"), (lambda: A.GaussianBlur((1.0, 0.5)), "sigma"),
    (lambda: A.GaussianBlur(9.0), "sigma"), (lambda: A.RandomApply(A.Invert(), 1.5), "p"),
    (lambda: A.RandomApply(A.Invert(), float("nan")), "p"), (lambda: A.ResizeHeight(32, max_width=0), "max_width"),
    (lambda: A.ResizeHeight(0), "height"), (lambda: A.Affine(rotate=46), "rotate"),
    (lambda: A.Affine(shear=float("inf")), "shear"), (lambda: A.Affine(scale=(0.0, 1.0)), "scale"),
    (lambda: A.Affine(border="wrap"), "border"), (lambda: A.Erode(0), "size"), (lambda: A.Dilate(32), "size"),
    (lambda: A.Elastic(cell=0), "cell"), (lambda: A.Perspective(0.6), "jitter"),
    (lambda: A.ImpulseNoise(amount=1.5), "amount"), (lambda: A.Stretch((0.0, 1.0)), "scale"),
    (lambda: A.OneOf([A.Invert()], weights=[0.0]), "weights"), (lambda: A.OneOf([]), "at least one"),
    (lambda: A.GaussianNoise(float("nan")), "sigma"), (lambda: A.Invert(3e38, 3e38), "low \\+ high"),
])
def test_bad_arguments_are_refused_naming_them(make, name):
    with pytest.raises((ValueError, TypeError), match=name):
        make()


def test_only_built_ins_compose_and_images_are_checked():
    with pytest.raises(TypeError, match="built-in"):
        A.Compose([lambda sample, rng: sample])
    op = A.Invert()
    with pytest.raises(TypeError, match="float32"):
        op.apply(np.zeros((1, 2, 3), np.float64), om.SampleRng(0))
    with pytest.raises(TypeError, match="float32"):
        op.apply(np.zeros((2, 3), np.float32), om.SampleRng(0))
    with pytest.raises(ValueError, match="dimension"):
        op.apply(np.zeros((1, 0, 3), np.float32), om.SampleRng(0))
    with pytest.raises(TypeError, match="Sample"):
        op("text", om.SampleRng(0))
    with pytest.raises(TypeError, match="change the image's shape"):
        A.Stretch()(np.zeros((1, 2, 3), np.float32), om.SampleRng(0))
    with pytest.raises(RuntimeError, match="already"):
        op.__init__()


def test_operations_pickle_compare_and_repr():
    preset = A.text_lines()
    copy = pickle.loads(pickle.dumps(preset))
    assert copy == preset and hash(copy) == hash(preset) and repr(copy) == repr(preset)
    image = np.random.default_rng(0).random((1, 8, 30), dtype=np.float32)
    assert same_bits(copy.apply(image, om.SampleRng(9)), preset.apply(image, om.SampleRng(9)))
    assert "Affine(2.0" in repr(preset)


def test_a_transform_returns_a_new_sample_and_an_augmentation_edits_in_place():
    image = np.random.default_rng(2).random((1, 6, 10), dtype=np.float32)
    sample = om.Sample(image, [1, 2], 3)
    out = A.Stretch((2.0, 2.0))(sample, om.SampleRng(4))
    assert isinstance(out, om.Sample) and out.image.shape == (1, 6, 20)
    assert out.target.tolist() == [1, 2] and out.label == 3
    edited = image.copy()
    assert A.Invert()(edited, om.SampleRng(0)) is None
    assert same_bits(edited, np.float32(1) - image)


# ---- the preset on every route of the loader -----------------------------------------------

def _preset_loader(workers=0, mode="thread", prefetch=2, augmentation=None):
    dataset = om.SyntheticTextLines(40, height=16, max_length=5, seed=3)
    sampler = om.ShuffledSampler(len(dataset), 6, seed=8)
    return om.DataLoader(dataset, sampler, om.ImageBatchCollator(width_multiple=4, augmentation=augmentation),
                         seed=11, transform=A.text_lines(), workers=workers, prefetch=prefetch, worker_mode=mode)


def test_the_preset_is_the_oracle_batch_at_every_step():
    """§1 with the preset as transform (stream 0) and a built-in as the collator's augmentation
    (stream 1): batch_at(g) equals the reference's batch, two epochs."""
    loader = _preset_loader(augmentation=A.Compose([A.BrightnessContrast(), A.GaussianNoise()]))
    def get_sample(i):
        return R.textlines_sample(i, height=16, max_length=5, seed=3)
    oracle_sampler = R.ShuffledSampler(40, 6, seed=8)
    preset = RA.text_lines()
    photometric = ("compose", [("brightness_contrast", (0.7, 1.3), (-0.3, 0.3)), ("gaussian_noise", (0.0, 0.15))])

    def transform(sample, rng):
        image, target, label = sample
        return (RA.apply(preset, image, rng), target, label)

    def augmentation(scratch, rng):
        scratch[...] = RA.apply(photometric, scratch, rng)

    for g in range(2 * loader.steps_per_epoch):
        want = R.batch(get_sample, oracle_sampler, 11, g, width_multiple=4, augmentation=augmentation,
                       transform=transform)
        assert_same(loader.batch_at(g), want, f"batch_at({g})")


@pytest.mark.parametrize("workers, mode, prefetch", [(0, "thread", 1), (2, "thread", 3), (2, "process", 2)])
def test_the_preset_gives_the_same_batches_on_every_route_and_after_a_resume(workers, mode, prefetch):
    loader = _preset_loader(workers, mode, prefetch)
    steps = range(0, 14)
    with loader.iter(0, 14) as stream:
        batches = drain_ok(stream)
    assert_stream_is_batch_at(batches, loader, steps, f"{workers} {mode} workers")
    with loader.iter(9, 14) as stream:       # resumed mid-epoch from one integer
        resumed = drain_ok(stream)
    assert_stream_is_batch_at(resumed, loader, range(9, 14), "resumed at 9")
    finish(loader)
