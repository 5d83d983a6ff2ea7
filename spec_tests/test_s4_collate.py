"""§4 Collation (ImageBatchCollator), readings D13, D14 and D17.

The property tests compare the compiled collator with ``reference.collate`` bit for bit
(float32 arrays compared through their IEEE bits), with no augmentation, with the
built-in GainOffset / GaussianNoise (docs/contract.md) and with a Python callable. The
remaining tests pin the layout, the per-slot seeding, the equality of the fused built-in
route with the scratch route, the refusals, and that the kernel runs without the GIL.

Also here, because they drive the collator directly: the refusals of the two routes of the
§1 fetch step (``routes.gather`` / ``routes.read``), and three concerns of the package:
GIL release (DESIGN: kernels run inside ``with nogil``), worker pacing (the Python-stage
baton) and the collator's repr. The §5 tests (pool, kept scratch, workspaces) live in
``test_s5_memory.py``.
"""

from __future__ import annotations

import re
import sys
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import reference as R
from collate_helpers import pixels as _pixels
from routes import gather, read
from onemodel_cy.conformance.codec import BATCH_FIELDS as FIELDS

M64 = R.M64
INT_FIELDS = FIELDS[1:]

SEEDS = st.one_of(st.integers(0, M64), st.integers(-(1 << 63), -1), st.sampled_from([0, 1, -1, M64]))
STEPS = st.one_of(st.integers(0, 1000), st.integers(0, M64))
FIRST_SLOTS = st.one_of(st.integers(0, 64), st.integers(0, (1 << 62)))
PAD_VALUES = st.floats(width=32, allow_nan=False, allow_infinity=False)
INT32 = st.integers(-(1 << 31), (1 << 31) - 1)
SYMBOLS = st.lists(st.integers(0, (1 << 31) - 1), max_size=5)


# --------------------------------------------------------------------------- helpers

@st.composite
def batch_specs(draw, max_b=6, max_c=3, max_hw=40, max_pixels=None):
    """A batch: samples sharing C and H, widths 1..max_hw, targets, labels, indices."""
    b = draw(st.integers(1, max_b))
    c = draw(st.integers(1, max_c))
    h = draw(st.integers(1, max_hw))
    w_hi = max_hw
    if max_pixels is not None:
        w_hi = max(1, min(max_hw, max_pixels // (b * c * h)))
    widths = draw(st.lists(st.integers(1, w_hi), min_size=b, max_size=b))
    return {
        "c": c, "h": h, "widths": widths,
        "targets": draw(st.lists(SYMBOLS, min_size=b, max_size=b)),
        "labels": draw(st.lists(INT32, min_size=b, max_size=b)),
        "indices": draw(st.lists(st.integers(0, (1 << 31) - 1), min_size=b, max_size=b)),
        "pixel_seed": draw(st.integers(0, 2 ** 32 - 1)),
    }


def _samples(om, spec, special=False):
    out = []
    for j, w in enumerate(spec["widths"]):
        image = _pixels(spec["pixel_seed"] + j, (spec["c"], spec["h"], w), special)
        out.append(om.Sample(image, spec["targets"][j], spec["labels"][j]))
    return out


def _bits(a):
    a = np.asarray(a)
    return a.view(np.uint32) if a.dtype == np.float32 else a


def assert_same_batch(batch, want):
    """Every array of ``batch`` has the dtype, shape and bits of ``want`` (a reference dict)."""
    for name in FIELDS:
        got = getattr(batch, name)
        exp = want[name]
        assert isinstance(got, np.ndarray), name
        assert got.dtype == exp.dtype, (name, got.dtype, exp.dtype)
        assert got.shape == exp.shape, (name, got.shape, exp.shape)
        assert np.array_equal(_bits(got), _bits(exp)), name


def scale_shift(image, rng):
    """A Python augmentation: x * a + b with a, b from two next_single draws (float32 ops)."""
    a = np.float32(rng.next_single())
    b = np.float32(rng.next_single())
    np.multiply(image, a, out=image)
    np.add(image, b, out=image)


# --------------------------------------------------------------------------- agreement with the oracle

@given(spec=batch_specs(), m=st.integers(1, 8), pad=PAD_VALUES, seed=SEEDS, epoch=STEPS,
       step=STEPS, first=FIRST_SLOTS)
def test_collate_no_augmentation_matches_reference(om, spec, m, pad, seed, epoch, step, first):
    """§4 (D13, D14): Without augmentation a batch is the samples copied bit for bit to
    the left of [B, C, H, Wp] rows (Wp = max width rounded up to the multiple), the rest
    of each row the pad value, plus the int32 widths, CTC-concatenated targets, target
    lengths, labels and dataset indices; special float values (-0.0, inf, NaN) survive the
    copy."""
    samples = _samples(om, spec, special=True)
    col = om.ImageBatchCollator(width_multiple=m, pad_value=pad)
    batch = col.collate(samples, spec["indices"], seed, epoch, step, first_slot=first)
    want = R.collate([tuple(s) for s in samples], spec["indices"], seed, epoch, step,
                     width_multiple=m, pad_value=pad, slot_offset=first)
    assert_same_batch(batch, want)
    assert (batch.epoch, batch.step) == (epoch, step)
    batch.close()


@given(spec=batch_specs(), m=st.integers(1, 8), pad=PAD_VALUES, seed=SEEDS, epoch=STEPS,
       step=STEPS, first=FIRST_SLOTS, gain=st.floats(-3, 3), offset=st.floats(-3, 3))
def test_collate_gain_offset_matches_reference(om, spec, m, pad, seed, epoch, step, first, gain,
                                               offset):
    """§4 (D17): With GainOffset each slot's real pixels become x*g + o in float32 (two
    roundings), g and o drawn from the slot's stream-1 rng (contract); the padding stays the
    pad value."""
    samples = _samples(om, spec)
    col = om.ImageBatchCollator(width_multiple=m, pad_value=pad,
                                augmentation=om.GainOffset(gain, offset))
    batch = col.collate(samples, spec["indices"], seed, epoch, step, first_slot=first)
    want = R.collate([tuple(s) for s in samples], spec["indices"], seed, epoch, step,
                     width_multiple=m, pad_value=pad, augmentation=R.gain_offset(gain, offset),
                     slot_offset=first)
    assert_same_batch(batch, want)


@given(spec=batch_specs(max_hw=60), m=st.integers(1, 9), pad=PAD_VALUES, seed=SEEDS, epoch=STEPS,
       step=STEPS, first=FIRST_SLOTS, augment=st.booleans(), offset=st.sampled_from([0, 1, 2, 3, 5, 7]))
def test_streamed_float32_batches_match_reference(om, spec, m, pad, seed, epoch, step, first, augment, offset):
    """§4 (D13, D17): a float32 batch past ``streamed_bytes()`` is written with streaming
    stores (src/row.h om_store_row_streamed), plain or through GainOffset; with the
    threshold at 0 every batch is, at every width and width multiple (so rows start on
    every 16-byte boundary of a 32-byte line and every tail of 0-7 pixels shares its last
    lanes with the padding), and from sources at every float offset; still the oracle's
    bits, special values included. The AVX2 cap 0 takes the plain stores instead."""
    from onemodel_cy.collate.collator import simd_kernels, streamed_bytes
    samples = []
    for s in _samples(om, spec, special=not augment):
        storage = np.empty(s.image.size + offset, np.float32)   # pixels `offset` floats into their buffer
        image = storage[offset:].reshape(s.image.shape)
        image[...] = s.image
        samples.append(om.Sample(image, s.target, s.label))
    aug = om.GainOffset(0.3, 0.2) if augment else None
    col = om.ImageBatchCollator(width_multiple=m, pad_value=pad, augmentation=aug)
    want = R.collate([tuple(s) for s in samples], spec["indices"], seed, epoch, step, width_multiple=m,
                     pad_value=pad, augmentation=R.gain_offset(0.3, 0.2) if augment else None,
                     slot_offset=first)
    previous = streamed_bytes(0)
    try:
        for cap in sorted({0, simd_kernels()}):
            before = simd_kernels(cap)
            try:
                batch = col.collate(samples, spec["indices"], seed, epoch, step, first_slot=first)
            finally:
                simd_kernels(before)
            assert_same_batch(batch, want)
            batch.close()
    finally:
        streamed_bytes(previous)


@settings(max_examples=25)
@given(spec=batch_specs(max_b=3, max_c=2, max_hw=24, max_pixels=600), m=st.integers(1, 8),
       pad=PAD_VALUES, seed=SEEDS, epoch=STEPS, step=STEPS, first=FIRST_SLOTS,
       sigma=st.floats(-2, 2))
def test_collate_gaussian_noise_matches_reference(om, spec, m, pad, seed, epoch, step, first, sigma):
    """§4 (D5, D17): With GaussianNoise every real pixel, in C, H, W order, gets sigma *
    next_normal() added in float32 from the slot's stream-1 rng (contract)."""
    samples = _samples(om, spec)
    col = om.ImageBatchCollator(width_multiple=m, pad_value=pad,
                                augmentation=om.GaussianNoise(sigma))
    batch = col.collate(samples, spec["indices"], seed, epoch, step, first_slot=first)
    want = R.collate([tuple(s) for s in samples], spec["indices"], seed, epoch, step,
                     width_multiple=m, pad_value=pad, augmentation=R.gaussian_noise(sigma),
                     slot_offset=first)
    assert_same_batch(batch, want)


@given(spec=batch_specs(), m=st.integers(1, 8), pad=PAD_VALUES, seed=SEEDS, epoch=STEPS,
       step=STEPS, first=FIRST_SLOTS)
def test_collate_python_augmentation_matches_reference(om, spec, m, pad, seed, epoch, step, first):
    """§4 (D17): A Python callable edits a scratch copy of each sample in place with the
    slot's stream-1 rng; the edited scratch is what lands in the batch."""
    samples = _samples(om, spec)
    col = om.ImageBatchCollator(width_multiple=m, pad_value=pad, augmentation=scale_shift)
    batch = col.collate(samples, spec["indices"], seed, epoch, step, first_slot=first)
    want = R.collate([tuple(s) for s in samples], spec["indices"], seed, epoch, step,
                     width_multiple=m, pad_value=pad, augmentation=scale_shift, slot_offset=first)
    assert_same_batch(batch, want)


AUGMENTATIONS = ["none", "gain_offset", "gaussian_noise", "python"]


def _pair(om, kind):
    """(compiled augmentation, reference augmentation) of one kind."""
    return {
        "none": (None, None),
        "gain_offset": (om.GainOffset(0.3, 0.2), R.gain_offset(0.3, 0.2)),
        "gaussian_noise": (om.GaussianNoise(0.1), R.gaussian_noise(0.1)),
        "python": (scale_shift, scale_shift),
    }[kind]


@st.composite
def dataset_draws(draw):
    c = draw(st.integers(1, 2))
    h = draw(st.integers(1, 8))
    n = draw(st.integers(1, 8))
    widths = draw(st.lists(st.integers(1, 20), min_size=n, max_size=n))
    targets = draw(st.lists(SYMBOLS, min_size=n, max_size=n))
    labels = draw(st.lists(INT32, min_size=n, max_size=n))
    length = draw(st.integers(1, 8))
    indices = draw(st.lists(st.integers(0, n - 1), min_size=length, max_size=length))
    start = draw(st.integers(0, length - 1))
    stop = draw(st.one_of(st.none(), st.integers(start + 1, length)))
    return c, h, widths, targets, labels, indices, start, stop, draw(st.integers(0, 2 ** 32 - 1))


@given(d=dataset_draws(), kind=st.sampled_from(AUGMENTATIONS), m=st.integers(1, 8), pad=PAD_VALUES,
       seed=SEEDS, epoch=STEPS, step=STEPS)
def test_gather_equals_collate_of_the_same_samples(om, d, kind, m, pad, seed, epoch, step):
    """§4 (D14), through the §1 fetch routes: The gather-from-dataset path builds slots
    [start, stop) of a global index array exactly as collating those samples with
    first_slot = start would: slot numbers are positions in the global batch, so the
    augmentation keys match too."""
    c, h, widths, targets, labels, indices, start, stop, pseed = d
    images = [_pixels(pseed + k, (c, h, w)) for k, w in enumerate(widths)]
    ds = om.ArrayImageDataset(images, targets, labels)
    idx = np.array(indices, dtype=np.int64)
    ours, theirs = _pair(om, kind)
    col = om.ImageBatchCollator(width_multiple=m, pad_value=pad, augmentation=ours)
    got = gather(col, ds, idx, seed, epoch, step, start=start, stop=stop)
    hi = len(indices) if stop is None else stop
    chosen = indices[start:hi]
    listed = col.collate([ds.get_sample(i) for i in chosen], chosen, seed, epoch, step,
                         first_slot=start)
    generic = read(col, _PlainDataset(ds), idx, seed, epoch, step, start=start, stop=stop)
    want = R.collate([(images[i], targets[i], labels[i]) for i in chosen], chosen, seed, epoch,
                     step, width_multiple=m, pad_value=pad, augmentation=theirs, slot_offset=start)
    assert_same_batch(got, want)
    assert_same_batch(listed, want)
    assert_same_batch(generic, want)
    assert (got.epoch, got.step) == (epoch, step) == (generic.epoch, generic.step)


class _PlainDataset:
    """A user's dataset: get_sample hands out fresh Samples built from plain arrays."""

    def __init__(self, source):
        self.source = source

    def get_sample(self, index):
        s = self.source.get_sample(index)
        return s.__class__(np.array(s.image), s.target.tolist(), s.label)


# --------------------------------------------------------------------------- layout

@given(spec=batch_specs(), m=st.integers(1, 8), pad=PAD_VALUES)
def test_batch_layout(om, spec, m, pad):
    """§4 (D13): Images are float32 [B, C, H, Wp] with Wp = ceil(max W / m) * m; sample j
    sits at the left of its rows, columns W_j..Wp hold the pad value; widths, target
    lengths, labels and indices are int32 [B]; targets are int32, every sample's target in
    batch order (the CTC layout). Checked directly, without the oracle."""
    samples = _samples(om, spec)
    col = om.ImageBatchCollator(width_multiple=m, pad_value=pad)
    with col.collate(samples, spec["indices"], 1, 2, 3) as batch:
        b, c, h = len(samples), spec["c"], spec["h"]
        wp = -(-max(spec["widths"]) // m) * m
        assert wp % m == 0 and wp - m < max(spec["widths"]) <= wp
        assert batch.images.dtype == np.float32 and batch.images.shape == (b, c, h, wp)
        assert len(batch) == b
        pad_bits = np.array([pad], dtype=np.float32).view(np.uint32)[0]
        for j, s in enumerate(samples):
            w = spec["widths"][j]
            assert np.array_equal(batch.images[j, :, :, :w].view(np.uint32), s.image.view(np.uint32))
            assert np.all(batch.images[j, :, :, w:].view(np.uint32) == pad_bits)
        for name in INT_FIELDS:
            arr = getattr(batch, name)
            assert arr.dtype == np.int32 and arr.ndim == 1, name
        assert batch.widths.tolist() == spec["widths"]
        assert batch.target_lengths.tolist() == [len(t) for t in spec["targets"]]
        assert batch.targets.tolist() == [v for t in spec["targets"] for v in t]
        assert batch.labels.tolist() == spec["labels"]
        assert batch.indices.tolist() == spec["indices"]
        assert (batch.epoch, batch.step) == (2, 3)


def test_width_multiple_rounding_known_answers(om):
    """D13 on hand-picked cases: widths 5 and 7 give Wp 7 (m=1), 8 (m=2, 4, 8), 9 (m=3),
    and 7 (m=7): the widest width rounded up, never down, never beyond one multiple."""
    img5 = np.zeros((1, 1, 5), np.float32)
    img7 = np.zeros((1, 1, 7), np.float32)
    samples = [om.Sample(img5, [], 0), om.Sample(img7, [], 0)]
    for m, wp in [(1, 7), (2, 8), (3, 9), (4, 8), (7, 7), (8, 8), (10, 10)]:
        with om.ImageBatchCollator(width_multiple=m).collate(samples, [0, 1], 0, 0, 0) as b:
            assert b.images.shape == (2, 1, 1, wp), m


def test_empty_targets_give_an_empty_int32_column(om):
    """§4: When no sample has a symbol the targets column is an empty int32 array and
    every target length is 0."""
    samples = [om.Sample(np.ones((1, 2, 3), np.float32), [], 5) for _ in range(3)]
    with om.ImageBatchCollator().collate(samples, [4, 5, 6], 0, 0, 0) as b:
        assert b.targets.dtype == np.int32 and b.targets.shape == (0,)
        assert b.target_lengths.tolist() == [0, 0, 0]
        assert b.labels.tolist() == [5, 5, 5]


def test_collate_accepts_non_contiguous_images(om):
    """§4: A sample image may be any float32 [C, H, W] view (strided, sliced); the batch
    holds its values, not the memory that happens to follow its first pixel."""
    big = np.arange(2 * 3 * 10, dtype=np.float32).reshape(2, 3, 10)
    views = [big[:, :, ::3], big[:, :, 1:5], big[:, ::-1, 2:6]]
    samples = [om.Sample(v, [1], 0) for v in views]
    with om.ImageBatchCollator().collate(samples, [0, 1, 2], 0, 0, 0) as b:
        for j, v in enumerate(views):
            assert np.array_equal(b.images[j, :, :, :v.shape[2]], v)


def test_collate_copies_target_values_of_any_layout(om):
    """§4: Targets are the sample's symbol values in order, whatever the memory layout of
    the int32 array it was given (strided or reversed views), concatenated in batch
    order."""
    img = np.ones((1, 1, 2), np.float32)
    strided = np.arange(10, dtype=np.int32)[::2]          # [0, 2, 4, 6, 8]
    # [7, 6, 5]; the base is larger so that a wrong read stays inside it
    reversed_ = np.array([9, 9, 9, 5, 6, 7, 9, 9, 9], dtype=np.int32)[5:2:-1]
    samples = [om.Sample(img, strided, 0), om.Sample(img, reversed_, 0)]
    with om.ImageBatchCollator().collate(samples, [0, 1], 0, 0, 0) as b:
        assert b.target_lengths.tolist() == [5, 3]
        assert b.targets.tolist() == [0, 2, 4, 6, 8, 7, 6, 5]


# --------------------------------------------------------------------------- per-slot seeding

@given(spec=batch_specs(max_b=5, max_hw=8), seed=SEEDS, epoch=STEPS, step=STEPS, first=FIRST_SLOTS)
def test_augmentation_rng_is_derived_per_slot(om, spec, seed, epoch, step, first):
    """§4 (D14, D17): Slot j's augmentation receives a SampleRng whose state is
    Derive(seed, epoch, step, first_slot + j, 1) (stream 1, global slot numbers). It is
    called once per sample, in slot order, on a writable C-contiguous float32 [C, H, W_j]
    scratch holding a copy of the sample (not the padded row, not the sample's own
    memory)."""
    samples = _samples(om, spec)
    calls = []

    def record(image, rng):
        calls.append((rng.state, image.shape, image.dtype, image.flags.c_contiguous,
                      image.flags.writeable, image.copy(), image))
        image[...] = np.float32(-1.0)   # editing the scratch must not touch the sample

    col = om.ImageBatchCollator(augmentation=record)
    before = [s.image.copy() for s in samples]
    with col.collate(samples, spec["indices"], seed, epoch, step, first_slot=first) as batch:
        assert len(calls) == len(samples)
        for j, (state, shape, dtype, contiguous, writeable, content, scratch) in enumerate(calls):
            assert state == om.derive(seed, epoch, step, first + j, 1)
            assert state == R.derive(seed, epoch, step, first + j, R.STREAM_AUGMENTATION)
            assert shape == samples[j].image.shape and dtype == np.float32
            assert contiguous and writeable
            assert np.array_equal(content.view(np.uint32), before[j].view(np.uint32))
            assert not np.shares_memory(scratch, samples[j].image)
            assert not np.shares_memory(scratch, batch.images)
            assert np.all(batch.images[j, :, :, :shape[2]] == np.float32(-1.0))
    for s, b in zip(samples, before):
        assert np.array_equal(s.image.view(np.uint32), b.view(np.uint32))


def test_moving_a_sample_to_another_slot_changes_its_augmentation(om):
    """§4 (D14, D17): The augmentation key includes the slot: the same sample augmented
    at slot 0 and at slot 1 (or with another seed, epoch or step) comes out different,
    while the same (seed, epoch, step, slot) reproduces it exactly."""
    a = om.Sample(_pixels(1, (1, 4, 6)), [1], 0)
    b = om.Sample(_pixels(2, (1, 4, 6)), [2], 1)
    for aug in (om.GainOffset(), om.GaussianNoise(), scale_shift):
        col = om.ImageBatchCollator(augmentation=aug)
        with col.collate([a, b], [0, 1], 7, 1, 2) as ab, col.collate([b, a], [1, 0], 7, 1, 2) as ba:
            assert not np.array_equal(ab.images[0], ba.images[1])
            assert not np.array_equal(ab.images[1], ba.images[0])
            with col.collate([a, b], [0, 1], 7, 1, 2) as again:
                assert np.array_equal(ab.images.view(np.uint32), again.images.view(np.uint32))
            with col.collate([b], [1], 7, 1, 2, first_slot=1) as shifted:
                assert np.array_equal(ab.images[1].view(np.uint32), shifted.images[0].view(np.uint32))
            for args in [(8, 1, 2), (7, 2, 2), (7, 1, 3)]:
                with col.collate([a, b], [0, 1], *args) as other:
                    assert not np.array_equal(ab.images[0], other.images[0]), args


def test_built_in_augmentations_are_callable_on_their_own(om):
    """§4 (D17): GainOffset and GaussianNoise called as aug(image, rng) edit the
    image in place, draw from the rng they are given, and agree with the contract's
    formulas."""
    for ours, theirs in [(om.GainOffset(0.25, 0.5), R.gain_offset(0.25, 0.5)),
                         (om.GaussianNoise(0.3), R.gaussian_noise(0.3))]:
        image = _pixels(3, (2, 3, 5))
        expect = image.copy()
        rng, ref_rng = om.SampleRng(99), R.SampleRng(99)
        assert ours(image, rng) is None
        theirs(expect, ref_rng)
        assert np.array_equal(image.view(np.uint32), expect.view(np.uint32))
        assert rng.state == ref_rng.state
        with pytest.raises(TypeError, match="float64"):
            ours(np.zeros((1, 1, 2)), om.SampleRng(0))
        with pytest.raises(TypeError):
            ours(np.zeros((1, 2), np.float32), om.SampleRng(0))


# --------------------------------------------------------------------------- fused == scratch

@given(spec=batch_specs(max_pixels=2000), kind=st.sampled_from(["gain_offset", "gaussian_noise"]),
       m=st.integers(1, 8), pad=PAD_VALUES, seed=SEEDS, epoch=STEPS, step=STEPS, first=FIRST_SLOTS,
       param=st.floats(-2, 2))
def test_fused_built_in_equals_scratch_route(om, spec, kind, m, pad, seed, epoch, step, first, param):
    """§4 (D17): A built-in augmentation applied in place inside the padded batch gives the
    same bits as the same augmentation run through the Python scratch route (a lambda
    wrapping it): same float32 operations, same order, same stream-1 rng, padding
    untouched."""
    samples = _samples(om, spec)
    aug = om.GainOffset(param, param / 2) if kind == "gain_offset" else om.GaussianNoise(param)
    fused = om.ImageBatchCollator(width_multiple=m, pad_value=pad, augmentation=aug)
    scratch = om.ImageBatchCollator(width_multiple=m, pad_value=pad,
                                    augmentation=lambda img, rng: aug(img, rng))
    with fused.collate(samples, spec["indices"], seed, epoch, step, first_slot=first) as a, \
            scratch.collate(samples, spec["indices"], seed, epoch, step, first_slot=first) as b:
        for name in FIELDS:
            assert np.array_equal(_bits(getattr(a, name)), _bits(getattr(b, name))), name


def _dirty_pool(om, samples):
    """A pool whose free block for this batch size is filled with 7.0 (so unwritten pixels show)."""
    pool = om.BufferPool()
    with om.ImageBatchCollator(pool=pool).collate(samples, list(range(len(samples))), 0, 0, 0) as b:
        b.images[...] = np.float32(7.0)
    return pool


def test_python_subclass_of_augmentation_is_honoured(om):
    """§4 (D17): Augmentation is public, so a Python subclass that defines __call__ is a
    callable augmentation (called as aug(scratch, rng)): the collator applies it like any
    Python callable (same bits as wrapping it in a lambda), or refuses it with a TypeError
    when built. A bare Augmentation(), which defines no edit, either leaves the pixels as
    copied or is refused (TypeError / NotImplementedError). In no case may the batch hold
    pixels that were never written (stale memory of an earlier batch)."""
    class Double(om.Augmentation):
        def __call__(self, image, rng):
            image *= np.float32(2.0)

    samples = [om.Sample(_pixels(k, (1, 2, 3 + k)), [k], k) for k in range(3)]
    idx = [0, 1, 2]
    with om.ImageBatchCollator(augmentation=lambda img, rng: Double()(img, rng)).collate(
            samples, idx, 0, 0, 0) as b:
        doubled = b.images.copy()
    with om.ImageBatchCollator().collate(samples, idx, 0, 0, 0) as b:
        plain = b.images.copy()
    for aug, want, refusals in ((Double(), doubled, ()),
                                (om.Augmentation(), plain, (NotImplementedError, TypeError))):
        pool = _dirty_pool(om, samples)
        try:
            col = om.ImageBatchCollator(augmentation=aug, pool=pool)
        except TypeError:
            continue
        try:
            with col.collate(samples, idx, 0, 0, 0) as b:
                got = b.images.copy()
        except refusals:
            continue
        assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), \
            (type(aug).__name__, "got", got.ravel()[:4].tolist(), "want", want.ravel()[:4].tolist())


def test_one_collator_on_several_threads(om):
    """§4 under §1 (no dependence on the thread): Loader workers share one collator:
    batches built concurrently on three threads (each with its own slot table and scratch)
    equal the batches built on one thread, for every kind of augmentation."""
    samples = [om.Sample(_pixels(k, (2, 5, 4 + k % 7)), [k % 5] * (k % 3), k) for k in range(16)]
    idx = list(range(16))
    for kind in AUGMENTATIONS:
        col = om.ImageBatchCollator(width_multiple=4, augmentation=_pair(om, kind)[0])
        want = {}
        for step in range(6):
            with col.collate(samples, idx, 5, 0, step) as b:
                want[step] = [a.copy() for a in (b.images, b.targets, b.labels)]
        bad = []

        def work():
            for _ in range(5):
                for step in range(6):
                    with col.collate(samples, idx, 5, 0, step) as b:
                        got = (b.images, b.targets, b.labels)
                        if not all(np.array_equal(_bits(x), _bits(y)) for x, y in zip(got, want[step])):
                            bad.append(step)

        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not bad, (kind, bad)


def test_collation_inside_an_augmentation_leaves_the_outer_batch_intact(om):
    """§4 (D17): A Python augmentation may itself collate with the same collator on the
    same thread (for instance to mix in other samples). The outer batch must still be the
    §4 batch of its own samples, or the nested use must be refused with a RuntimeError;
    it must never silently take pixels from the nested batch."""
    samples = [om.Sample(np.full((1, 2, 3), k, np.float32), [k], k) for k in range(4)]
    others = [om.Sample(np.full((1, 2, 3), 100 + k, np.float32), [100 + k], 100 + k) for k in range(4)]
    depth = [0]

    def nesting(image, rng):
        if depth[0] == 0:
            depth[0] += 1
            try:
                col.collate(others, [0, 1, 2, 3], 0, 0, 0).close()
            finally:
                depth[0] -= 1

    col = om.ImageBatchCollator(augmentation=nesting)
    try:
        batch = col.collate(samples, [0, 1, 2, 3], 0, 0, 0)
    except RuntimeError:
        return
    with batch:
        got = batch.images[:, 0, 0, 0].tolist()
        assert got == [0.0, 1.0, 2.0, 3.0], got
        assert batch.labels.tolist() == [0, 1, 2, 3]


# --------------------------------------------------------------------------- errors

def _sample(om, c=1, h=2, w=3, target=(1,), label=0):
    return om.Sample(np.ones((c, h, w), np.float32), list(target), label)


def _names_slot(excinfo, slot, index=None):
    msg = str(excinfo.value)
    assert re.search(rf"\bslot {slot}\b", msg), msg
    if index is not None:
        assert re.search(rf"(?<![\d-]){index}(?!\d)", msg) and "index" in msg, msg


@pytest.mark.parametrize("first", [0, 10])
@pytest.mark.parametrize("bad", [dict(c=2), dict(h=3)])
def test_samples_must_share_c_and_h(om, bad, first):
    """§4: A batch shares C and H: a sample of another C or H is refused with an error
    that names its (global) slot and its dataset index."""
    samples = [_sample(om), _sample(om), _sample(om, **bad)]
    with pytest.raises(ValueError) as e:
        om.ImageBatchCollator().collate(samples, [11, 12, 1234], 0, 0, 0, first_slot=first)
    _names_slot(e, first + 2, 1234)


def test_gather_refuses_mixed_c_or_h(om):
    """§4: The dataset path refuses a batch mixing C or H too, naming slot and dataset
    index."""
    ds = om.ArrayImageDataset([np.ones((1, 2, 3), np.float32), np.ones((1, 4, 3), np.float32)],
                              [[1], [2]], [0, 0])
    with pytest.raises(ValueError) as e:
        gather(om.ImageBatchCollator(), ds, np.array([0, 0, 1], np.int64), 0, 0, 0)
    _names_slot(e, 2, 1)


@pytest.mark.parametrize("item", [(np.ones((1, 2, 3), np.float32), [1], 0), None, "sample",
                                  np.ones((1, 2, 3), np.float32)])
def test_non_sample_items_are_refused(om, item):
    """§4: Only Sample objects are collated; anything else is a TypeError naming the slot
    and the dataset index."""
    with pytest.raises(TypeError) as e:
        om.ImageBatchCollator().collate([_sample(om), item], [3, 77], 0, 0, 0, first_slot=4)
    _names_slot(e, 5, 77)


@pytest.mark.parametrize("image, target, label, error, fragment", [
    (np.ones((1, 2, 3), np.float64), [1], 0, TypeError, "float64"),
    (np.ones((2, 3), np.float32), [1], 0, TypeError, "(2, 3)"),
    (np.ones((1, 0, 3), np.float32), [1], 0, ValueError, "(1, 0, 3)"),
    ([[[1.0]]], [1], 0, TypeError, "list"),
    (np.ones((1, 2, 3), np.float32), [1, -1], 0, ValueError, "-1"),
    (np.ones((1, 2, 3), np.float32), [1 << 31], 0, ValueError, str(1 << 31)),
    (np.ones((1, 2, 3), np.float32), [1.5], 0, TypeError, "float"),
    (np.ones((1, 2, 3), np.float32), [[1]], 0, TypeError, "(1, 1)"),
    (np.ones((1, 2, 3), np.float32), [1], 1 << 31, ValueError, str(1 << 31)),
])
def test_sample_refuses_bad_contents(om, image, target, label, error, fragment):
    """§4: A Sample is a float32 [C, H, W] image with every dimension >= 1, a 1-D target
    of symbols in [0, 2^31) (int32 Targets) and an int32 label; anything else is refused
    with an error that quotes what was received."""
    with pytest.raises(error) as e:
        om.Sample(image, target, label)
    assert fragment in str(e.value)


def test_image_changed_after_sample_construction_is_refused(om):
    """§4, memory safety: a Sample's image reshaped to 2-D or reinterpreted as int32 in
    place after the Sample was made is refused at collation, naming the slot and the
    dataset index. (Sealed storage: the Sample holds its own read-only view, so reshaping
    or retyping the caller's array object no longer reaches the Sample at all; the sample
    then collates as it was validated.)"""
    for change in ("shape", "dtype"):
        image = np.ones((1, 2, 4), np.float32)
        s = om.Sample(image, [1], 0)
        if change == "shape":
            image.shape = (2, 4)
        else:
            image.dtype = np.int32
        assert s.image.shape == (1, 2, 4) and s.image.dtype == np.float32
        with om.ImageBatchCollator().collate([_sample(om, w=4), s], [0, 42], 0, 0, 0) as b:
            assert b.images.shape == (2, 1, 2, 4) and np.all(b.images[1] == 1)
        if change == "shape":
            s.image.shape = (2, 4)
        else:
            s.image.dtype = np.int32
        with pytest.raises(TypeError) as e:
            om.ImageBatchCollator().collate([_sample(om, w=4), s], [0, 42], 0, 0, 0)
        _names_slot(e, 1, 42)


def _returns_new(image, rng):
    return image * 2


def _returns_same(image, rng):
    return np.multiply(image, np.float32(2), out=image)


def _reshapes(image, rng):
    image.shape = (image.shape[0] * image.shape[1], image.shape[2])


def _reshapes_3d(image, rng):
    image.shape = (image.shape[0], image.shape[2], image.shape[1])


def _retypes(image, rng):
    image.dtype = np.int32


@pytest.mark.parametrize("aug, error", [(_returns_new, TypeError), (_reshapes, ValueError),
                                        (_reshapes_3d, ValueError), (_retypes, ValueError)])
def test_augmentation_may_only_edit_values(om, aug, error):
    """§4 (D17): An augmentation edits its scratch in place and cannot change its width
    or shape (shape changes belong in the loader's transform): returning a new array, or
    changing the scratch's shape or dtype in place, is refused naming slot and index."""
    samples = [_sample(om, w=3), _sample(om, w=2)]
    col = om.ImageBatchCollator(augmentation=aug)
    with pytest.raises(error) as e:
        col.collate(samples, [8, 9], 0, 0, 0, first_slot=3)
    _names_slot(e, 3, 8)


def test_augmentation_returning_its_scratch_is_accepted(om):
    """§4 (D17): Returning the scratch itself (as numpy's out= functions do) is an
    in-place edit."""
    col = om.ImageBatchCollator(augmentation=_returns_same)
    with col.collate([_sample(om)], [0], 0, 0, 0) as b:
        assert np.all(b.images == 2)


def test_augmentation_exception_propagates(om):
    """§4 (D17): An exception raised by the augmentation reaches the caller
    unchanged."""
    class Boom(Exception):
        pass

    def boom(image, rng):
        raise Boom("from the augmentation")

    with pytest.raises(Boom, match="from the augmentation"):
        om.ImageBatchCollator(augmentation=boom).collate([_sample(om)], [0], 0, 0, 0)


def test_gather_index_out_of_range(om):
    """§1 (fetch step): The dataset path refuses an index outside [0, len) with an
    IndexError naming the slot and the index received."""
    ds = om.ArrayImageDataset([np.ones((1, 2, 3), np.float32)] * 3, [[1]] * 3, [0] * 3)
    for bad in (3, -1, 1 << 40):
        with pytest.raises(IndexError) as e:
            gather(om.ImageBatchCollator(), ds, np.array([0, 1, bad], np.int64), 0, 0, 0)
        _names_slot(e, 2, bad)


def test_gather_refuses_bad_index_arrays_and_ranges(om):
    """§1 (fetch step): The dataset path takes a 1-D int64 index array and a non-empty
    [start, stop) inside it."""
    ds = om.ArrayImageDataset([np.ones((1, 2, 3), np.float32)] * 3, [[1]] * 3, [0] * 3)
    col = om.ImageBatchCollator()
    with pytest.raises(TypeError, match="int32"):
        gather(col, ds, np.array([0, 1], np.int32), 0, 0, 0)
    with pytest.raises(TypeError):
        gather(col, ds, np.array([[0, 1]], np.int64), 0, 0, 0)
    idx = np.array([0, 1, 2], np.int64)
    for start, stop in [(0, 0), (2, 1), (-1, 2), (0, 4), (3, None)]:
        with pytest.raises(ValueError):
            gather(col, ds, idx, 0, 0, 0, start=start, stop=stop)
    with pytest.raises(ValueError):
        gather(col, ds, np.zeros(0, np.int64), 0, 0, 0)


def test_read_refuses_bad_input_naming_it(om):
    """§1 (fetch step, D17): The generic path takes the same index arrays and ranges as
    the dataset path, a callable transform, and int32 dataset indices; what get_sample or
    the transform hands back must be a Sample, and the error names the step, the slot and
    the index."""
    ds = _PlainDataset(om.ArrayImageDataset([np.ones((1, 2, 3), np.float32)] * 3, [[1]] * 3, [0] * 3))
    col = om.ImageBatchCollator()
    with pytest.raises(TypeError, match="int32"):
        read(col, ds, np.array([0, 1], np.int32), 0, 0, 0)
    idx = np.array([0, 1, 2], np.int64)
    for start, stop in [(0, 0), (2, 1), (-1, 2), (0, 4), (3, None)]:
        with pytest.raises(ValueError, match=rf"received start={start}, stop={3 if stop is None else stop}"):
            read(col, ds, idx, 0, 0, 0, start=start, stop=stop)
    with pytest.raises(TypeError, match="transform.*int"):
        read(col, ds, idx, 0, 0, 0, transform=3)
    with pytest.raises(TypeError, match="get_sample.*received list"):
        read(col, [1, 2, 3], idx, 0, 0, 0)
    for bad in (-1, 1 << 31):     # a dataset index out of range is an IndexError (one rule)
        with pytest.raises(IndexError) as e:
            read(col, ds, np.array([0, bad], np.int64), 0, 0, 0)
        _names_slot(e, 1)
    with pytest.raises(TypeError, match=r"global step 7 \(epoch 1, step 2\), slot 1, dataset index 1: "
                                        r"the transform returned str"):
        read(col, ds, idx, 0, 1, 2, start=1, global_step=7,
                            transform=lambda s, rng: "text")


def test_the_python_stage_baton_is_released_whatever_happens(om):
    """Concern: worker pacing (§1 loader). The loader's Python-stage baton (a pacing hint
    that lets one worker run Python while the others copy) is free again after every
    collation, finished or failed, so no later collation waits for it."""
    from onemodel_cy.collate.collator import Workspace
    from onemodel_cy.collate.pacing import Pacing
    pacing = Pacing()
    base = om.ArrayImageDataset([np.ones((1, 2, 3), np.float32)] * 4, [[1]] * 4, [0] * 4)
    idx = np.arange(4, dtype=np.int64)

    class Broken(_PlainDataset):
        def get_sample(self, index):
            if index == 2:
                raise KeyError(index)
            return super().get_sample(index)

    def raising_aug(image, rng):
        raise ArithmeticError("augmentation")

    attempts = [
        (om.ImageBatchCollator(augmentation=_returns_same), _PlainDataset(base), None, None),
        (om.ImageBatchCollator(augmentation=raising_aug), _PlainDataset(base), None, ArithmeticError),
        (om.ImageBatchCollator(), Broken(base), None, KeyError),
        (om.ImageBatchCollator(), _PlainDataset(base), lambda s, rng: None, TypeError),
        (om.ImageBatchCollator(augmentation=om.GainOffset()), _PlainDataset(base), None, None),
    ]
    for col, ds, transform, error in attempts:
        ws = Workspace(4, pacing)
        if error is None:
            read(col, ds, idx, 0, 0, 0, transform=transform, workspace=ws).close()
        else:
            with pytest.raises(error):
                read(col, ds, idx, 0, 0, 0, transform=transform, workspace=ws)
        assert not pacing.held
    failing = om.ImageBatchCollator(augmentation=raising_aug)
    with pytest.raises(ArithmeticError):
        gather(failing, base, idx, 0, 0, 0, workspace=Workspace(4, pacing))
    assert not pacing.held
    with pytest.raises(ArithmeticError):
        failing.collate([base.get_sample(0)], [0], 0, 0, 0, workspace=Workspace(1, pacing))
    assert not pacing.held


def test_collate_refuses_mismatched_or_empty_input(om):
    """§4 (D14): One dataset index per sample; an empty batch is refused; a dataset
    index must fit the int32 Indices column, naming the slot."""
    col = om.ImageBatchCollator()
    with pytest.raises(ValueError, match="2 samples.*1 ind|1 ind.*2 samples"):
        col.collate([_sample(om), _sample(om)], [0], 0, 0, 0)
    with pytest.raises(ValueError, match="empty|0 samples"):
        col.collate([], [], 0, 0, 0)
    for bad in (-1, 1 << 31):     # a dataset index out of range is an IndexError (one rule)
        with pytest.raises(IndexError) as e:
            col.collate([_sample(om), _sample(om)], [0, bad], 0, 0, 0)
        _names_slot(e, 1)
    with pytest.raises(TypeError):
        col.collate([_sample(om)], [1.5], 0, 0, 0)


@pytest.mark.parametrize("kwargs, error, fragment", [
    (dict(width_multiple=0), ValueError, "0"),
    (dict(width_multiple=-1), ValueError, "-1"),
    (dict(width_multiple=2.0), TypeError, "2.0"),
    (dict(augmentation=42), TypeError, "int"),
    (dict(augmentation="gain"), TypeError, "str"),
    (dict(pad_value=float("nan")), ValueError, "nan"),
    (dict(pad_value=float("inf")), ValueError, "inf"),
    (dict(pool=object()), TypeError, "object"),
])
def test_collator_refuses_bad_configuration(om, kwargs, error, fragment):
    """§4 (D13): width_multiple is an integer >= 1, the augmentation is callable, the pad
    value is finite, the pool is a BufferPool; errors quote the value received."""
    with pytest.raises(error) as e:
        om.ImageBatchCollator(**kwargs)
    assert fragment in str(e.value)


@pytest.mark.parametrize("kwargs", [dict(gain=float("nan")), dict(offset=float("inf"))])
def test_built_in_augmentation_parameters_are_finite(om, kwargs):
    """§4: GainOffset / GaussianNoise parameters must be finite numbers."""
    with pytest.raises(ValueError):
        om.GainOffset(**kwargs)
    with pytest.raises(ValueError):
        om.GaussianNoise(sigma=float("nan"))


def test_repr_names_the_configuration(om):
    """Concern: repr. The collator's repr names every constructor argument (DESIGN
    conventions)."""
    text = repr(om.ImageBatchCollator(width_multiple=4, pad_value=0.5, augmentation=om.GainOffset()))
    for part in ("width_multiple=4", "pad_value=0.5", "GainOffset", "pool="):
        assert part in text


# --------------------------------------------------------------------------- the GIL

def _progress_while(work, trials, chunk=2000):
    """Run ``work`` on this thread while another thread counts in pure Python.

    The switch interval is raised to 5 s, so a thread that holds the GIL is never asked to
    give it up during ``work``: the counter can only run while ``work`` has released the
    GIL. The counter gives the GIL back after every chunk (a short sleep), so ``work``
    resumes promptly. Returns, per trial, how many chunks the counter completed before
    ``work`` had returned (progress events, no clock).
    """
    results = []
    for _ in range(trials):
        state = {"done": False, "during": 0}
        go = threading.Event()

        def counter():
            go.wait()
            n = 0
            while not state["done"]:
                for _ in range(chunk):
                    n += 1
                if not state["done"]:
                    state["during"] += 1
                time.sleep(1e-4)

        thread = threading.Thread(target=counter, daemon=True)
        thread.start()
        old = sys.getswitchinterval()
        sys.setswitchinterval(5.0)
        try:
            go.set()
            work()
            state["done"] = True
        finally:
            sys.setswitchinterval(old)
            state["done"] = True
        thread.join()
        results.append(state["during"])
        if results[-1] >= 5:
            break
    return results


def test_progress_probe_sees_nothing_while_the_gil_is_held():
    """Concern: GIL release (DESIGN: kernels run inside `with nogil`). Control for the next
    test: while this thread runs pure Python (holding the GIL), the counting thread
    completes no chunk at all, so any progress seen below comes from the collation kernel
    releasing the GIL."""
    def hold():
        x = 0
        for i in range(200_000):
            x += i
    assert _progress_while(hold, 3) == [0, 0, 0]


@pytest.mark.parametrize("kind", ["none", "gaussian_noise"])
def test_collation_kernel_releases_the_gil(om, kind):
    """Concern: GIL release (DESIGN: kernels run inside `with nogil`). The copy / pad /
    built-in augmentation kernel of a large dataset-path collation runs without the GIL:
    another Python thread makes substantial progress (several chunks of pure-Python
    counting) while one gather call is still running. Up to 30 trials, so a loaded machine
    that does not schedule the counter in one trial cannot fail it (measured on 2 cores
    with 3 busy processes: at least 5 chunks in about 40 % of the trials of the plain copy
    and in every trial of the noise kernel)."""
    if kind == "none":
        b, width, aug = 256, 1024, None          # 64 MiB copied per call
    else:
        b, width, aug = 32, 512, om.GaussianNoise()
    images = np.random.default_rng(0).random((b, 1, 64, width), dtype=np.float32)
    ds = om.ArrayImageDataset(images, [[1]] * b, [0] * b)
    idx = np.arange(b, dtype=np.int64)
    col = om.ImageBatchCollator(width_multiple=4, augmentation=aug)
    gather(col, ds, idx, 0, 0, 0).close()           # warm the pool

    def work():
        gather(col, ds, idx, 0, 0, 0).close()

    progress = _progress_while(work, 30)
    assert max(progress) >= 5, progress


def test_samples_created_on_access_stay_alive(om):
    """§4 copies each sample's pixels: a sequence whose items are built on access (and
    dropped right after) still collates to exactly those pixels and targets."""
    class OnAccess:
        def __len__(self):
            return 6

        def __getitem__(self, k):
            if not 0 <= k < 6:
                raise IndexError(k)
            return om.Sample(np.full((1, 2, 3), k + 1, np.float32), [k + 4], k)

    with om.ImageBatchCollator().collate(OnAccess(), list(range(6)), 0, 0, 0) as b:
        assert b.images[:, 0, 0, 0].tolist() == [1, 2, 3, 4, 5, 6]
        assert b.targets.tolist() == [4, 5, 6, 7, 8, 9]


def test_byte_order_and_array_subclasses_give_the_values_they_hold(om):
    """§4: A big-endian float32 image or int32 target, or a target held in an ndarray
    subclass, is taken by value: the batch holds the numbers the arrays mean, and the
    Sample keeps plain native arrays."""
    image = _pixels(3, (1, 2, 5))
    target = np.array([7, 1 << 20, 3], np.int32)
    swapped = om.Sample(image.astype(">f4"), target.astype(">i4"), 4)
    masked = om.Sample(image, np.ma.masked_array(target, mask=[0, 1, 0]), 4)
    for sample in (swapped, masked):
        assert sample.image.dtype == np.float32 and sample.image.dtype.isnative
        assert type(sample.target) is np.ndarray and sample.target.dtype == np.int32
        assert sample.target.dtype.isnative and sample.target.tolist() == target.tolist()
        with om.ImageBatchCollator().collate([sample], [0], 0, 0, 0) as b:
            assert np.array_equal(b.images[0].view(np.uint32), image.view(np.uint32))
            assert b.targets.tolist() == target.tolist()
    # The same arrays changed in place to the other byte order after construction:
    # the image is read by value, the target is refused naming what it became.
    later = om.Sample(image.copy(), target.copy(), 4)
    later.image.dtype = np.dtype(">f4")
    with om.ImageBatchCollator().collate([later], [0], 0, 0, 0) as b:
        want = np.asarray(later.image, dtype=np.float32)
        assert np.array_equal(b.images[0].view(np.uint32), want.view(np.uint32))
    later.target.dtype = np.dtype(">i4")
    with pytest.raises(TypeError, match=">i4"):
        om.ImageBatchCollator().collate([later], [0], 0, 0, 0)


def test_target_changed_in_place_after_the_sample_is_refused(om):
    """§4, memory safety: A target array whose dtype or shape was changed in place after
    the Sample was built is refused at collation, naming the slot, instead of being read
    past its end."""
    target = np.array([1, 2, 3, 4], np.int32)
    sample = om.Sample(np.ones((1, 2, 3), np.float32), target, 0)
    # Sealed storage: the Sample holds its own copy, so the caller's array no longer reaches it.
    target.dtype = np.int8
    assert sample.target.dtype == np.int32 and sample.target.tolist() == [1, 2, 3, 4]
    sample.target.dtype = np.int8
    with pytest.raises(TypeError, match="slot 0"):
        om.ImageBatchCollator().collate([sample], [0], 0, 0, 0)


# --------------------------------------------------------------------------- module boundaries

def test_a_kernel_augmentation_is_sealed_when_the_collator_is_built(om):
    """§4 with a built-in augmentation: the collator copies the augmentation's kernel and
    parameters when it is built, and a second __init__ of the augmentation (or of the
    collator) is refused, so nothing (even from another thread, while workers collate)
    can change or tear a batch."""
    samples = [om.Sample(_pixels(k, (1, 2, 3 + k)), [k], k) for k in range(3)]
    aug = om.GainOffset(0.2, 0.1)
    col = om.ImageBatchCollator(augmentation=aug)
    with col.collate(samples, [0, 1, 2], 5, 0, 0) as b:
        before = b.images.copy()
    with pytest.raises(RuntimeError, match="already called"):
        aug.__init__(0.9, 0.9)
    assert (aug.gain, aug.offset) == (np.float32(0.2), np.float32(0.1))
    with col.collate(samples, [0, 1, 2], 5, 0, 0) as b:
        assert np.array_equal(b.images.view(np.uint32), before.view(np.uint32))
    with pytest.raises(RuntimeError, match="already called"):
        col.__init__(width_multiple=8)
    assert col.width_multiple == 1


def test_both_fetch_routes_give_the_same_bits(om):
    """§1 fetch step: a packed dataset read through its packed view (the GIL-free route)
    and through get_sample (the route of any other dataset) gives the same batch, bit for
    bit, with a kernel and with a Python augmentation; a subclass overriding get_sample is
    read through its get_sample, never through the storage it inherits."""
    ds = om.SyntheticLineImages(40, height=3, min_width=2, max_width=9, seed=3)
    idx = np.array([5, 1, 33, 7, 7, 20], np.int64)

    class Doubled(om.ArrayImageDataset):
        def get_sample(self, index):
            s = super().get_sample(index)
            return om.Sample(s.image * np.float32(2), s.target, s.label)

    for aug in (None, om.GainOffset(), _returns_same):
        col = om.ImageBatchCollator(width_multiple=4, augmentation=aug)
        with gather(col, ds, idx, 1, 2, 3) as a, read(col, ds, idx, 1, 2, 3) as b:
            for name in FIELDS:
                assert np.array_equal(getattr(a, name).view(np.uint32), getattr(b, name).view(np.uint32)), name
    images = [ds.get_sample(i).image for i in range(len(ds))]
    doubled = Doubled(images, [ds.get_sample(i).target for i in range(len(ds))], [0] * len(ds))
    col = om.ImageBatchCollator(width_multiple=4)
    with pytest.raises(TypeError, match="packed view"):
        gather(col, doubled, idx, 1, 2, 3)
    from onemodel_cy.collate.fetch import build_batch
    with build_batch(col, doubled, idx, 1, 2, 3) as b:
        assert b.images[0, 0, 0, 0] == np.float32(2) * images[5][0, 0, 0]


def test_a_batch_knows_its_global_step_and_it_cannot_be_changed(om):
    """§1/§4: a batch built by the loader carries its global step g (epoch and step are
    divmod(g, steps_per_epoch)); a direct collate carries None. It is set when the batch
    is built and read-only afterwards."""
    ds = om.SyntheticLineImages(16, height=2, min_width=2, max_width=5, seed=1)
    loader = om.DataLoader(ds, om.ShuffledSampler(16, 4, seed=2), om.ImageBatchCollator(), seed=0)
    with loader.batch_at(9) as b:
        assert (b.global_step, b.epoch, b.step) == (9, 2, 1)
        with pytest.raises(AttributeError):
            b.global_step = 3
    with om.ImageBatchCollator().collate([ds.get_sample(0)], [0], 0, 0, 0) as b:
        assert b.global_step is None


def test_a_pickled_or_copied_batch_holds_equal_ordinary_arrays(om):
    """§4/§5: pickling or deep-copying an ImageBatch gives a batch of ordinary numpy arrays
    with the same values, epoch, step and global step; the copy's nbytes is the size of
    its own arrays, never a read through a pooled block it does not have."""
    import copy
    import pickle
    ds = om.SyntheticLineImages(8, height=2, min_width=2, max_width=5, seed=1)
    loader = om.DataLoader(ds, om.SequentialSampler(8, 4), om.ImageBatchCollator(), seed=0)
    with loader.batch_at(1) as b:
        for other in (pickle.loads(pickle.dumps(b)), copy.deepcopy(b)):
            for name in FIELDS:
                assert np.array_equal(getattr(other, name), getattr(b, name)), name
            assert (other.epoch, other.step, other.global_step) == (b.epoch, b.step, b.global_step)
            assert other.nbytes == sum(getattr(other, name).nbytes for name in FIELDS)
    with pytest.raises(ValueError, match="closed"):
        pickle.dumps(b)
