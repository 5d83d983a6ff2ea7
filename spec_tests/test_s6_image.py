"""§6 Image helpers: 8-bit gray / interleaved RGB to planar float32 (D15, D16).

Each pixel p becomes p * scale - bias in float32 with two roundings, where mean and std
are first rounded to float32 and scale = 1 / (255 * std), bias = mean / std are computed
in float32 (D15). Gray gives [1, H, W], RGB gives [3, H, W] with per-channel constants;
both take a row stride in bytes (D16). The oracle is ``reference.gray8_to_planar`` /
``reference.rgb8_to_planar``.

Also here: the package's ``out=`` argument of the two helpers, the refusals of their
arguments under the package's exception rule (docs/architecture.md, Errors), and one
concern: memory safety (issue 13 class 5, alignment: a misaligned ``out=`` is refused).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, strategies as st

import reference as R

f32 = np.float32

MEANS = st.one_of(st.floats(-4, 4), st.sampled_from([0.0, 0.485, 0.456, 0.406, 0.5]))
STDS = st.one_of(st.floats(1e-3, 4), st.floats(-4, -1e-3), st.sampled_from([0.229, 0.224, 0.225, 1.0]))
SIZES = st.integers(1, 24)


def _bits(a):
    return np.asarray(a, dtype=np.float32).view(np.uint32)


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and np.array_equal(_bits(a), _bits(b))


def _bytes(seed, shape):
    return np.random.default_rng(seed).integers(0, 256, size=shape, dtype=np.uint8)


# --------------------------------------------------------------------------- known answers

def test_gray8_known_answer(om):
    """§6 (D15), a hand-computed answer: mean 0.5, std 0.25 give scale = f32(1/63.75)
    (bits 0x3c808081) and bias = 2; pixel 0 -> -2, 255 -> 2, 128 -> 0x3c008100 (one
    product rounding, then one subtraction rounding)."""
    src = np.array([[0, 1, 128], [200, 254, 255]], dtype=np.uint8)
    out = om.gray8_to_planar(src, 0.5, 0.25)
    assert out.shape == (1, 2, 3) and out.dtype == np.float32
    assert [hex(v) for v in _bits(out).reshape(-1)] == [
        "0xc0000000", "0xbffdfdfe", "0x3c008100", "0x3f919194", "0x3ffdfe00", "0x40000000"]


def _d15_discriminating_std():
    """A std (with mean 0.5) where D15's float32 constants give other pixels than both
    wrong readings: constants computed in float64 then rounded, or a fused p*scale-bias."""
    p = np.arange(256, dtype=np.float32)
    for k in range(1, 5000):
        std = k / 1000
        scale, bias = R.planar_constants(0.5, std)
        right = np.subtract(np.multiply(p, scale, dtype=f32), bias, dtype=f32)
        wide = np.subtract(np.multiply(p, f32(1 / (255 * std)), dtype=f32), f32(0.5 / std), dtype=f32)
        fused = (p.astype(np.float64) * float(scale) - float(bias)).astype(f32)
        if np.any(_bits(right) != _bits(wide)) and np.any(_bits(right) != _bits(fused)):
            return std, right, wide, fused
    raise AssertionError("no discriminating std found")


def test_d15_float32_constants_and_unfused_arithmetic(om):
    """§6 (D15): the constants go to float32 before anything else, scale and bias are
    float32 operations, and each pixel is a float32 product then a float32 difference,
    never fused. For a std where the float64-constant reading and the fused reading both
    differ from D15 (searched over std = k/1000), both helpers give exactly D15's bits
    for all 256 pixel values."""
    std, right, wide, fused = _d15_discriminating_std()
    src = np.arange(256, dtype=np.uint8).reshape(16, 16)
    got = om.gray8_to_planar(src, 0.5, std).reshape(-1)
    assert np.array_equal(_bits(got), _bits(right)), std
    assert not np.array_equal(_bits(got), _bits(wide))
    assert not np.array_equal(_bits(got), _bits(fused))
    rgb = np.repeat(src[:, :, None], 3, axis=2)
    got3 = om.rgb8_to_planar(rgb, (0.5, 0.5, 0.5), (std, std, std))
    for c in range(3):
        assert np.array_equal(_bits(got3[c].reshape(-1)), _bits(right))


def test_mean_and_std_are_rounded_to_float32_first(om):
    """§6 (D15): two float64 stds, or two float64 means, that round to the same float32
    give the same pixels."""
    std = 0.229
    nxt = np.nextafter(std, 1.0)
    assert f32(nxt) == f32(std) and nxt != std
    src = _bytes(0, (8, 8))
    assert _same(om.gray8_to_planar(src, 0.485, std), om.gray8_to_planar(src, 0.485, nxt))
    mean = 0.485
    assert _same(om.gray8_to_planar(src, mean, std),
                 om.gray8_to_planar(src, np.nextafter(mean, 1.0), std))


# --------------------------------------------------------------------------- reference agreement

@given(h=SIZES, w=SIZES, mean=MEANS, std=STDS, seed=st.integers(0, 2 ** 32 - 1))
def test_gray8_matches_reference(om, h, w, mean, std, seed):
    """§6 (D15, D16): Gray8 gives float32 [1, H, W] equal bit for bit to the oracle."""
    src = _bytes(seed, (h, w))
    got = om.gray8_to_planar(src, mean, std)
    assert _same(got, R.gray8_to_planar(src, mean, std))


@given(h=SIZES, w=SIZES, mean=st.tuples(MEANS, MEANS, MEANS), std=st.tuples(STDS, STDS, STDS),
       seed=st.integers(0, 2 ** 32 - 1))
def test_rgb8_matches_reference_per_channel(om, h, w, mean, std, seed):
    """§6 (D15, D16): Rgb8 turns interleaved [H, W, 3] into planar [3, H, W] with each
    channel's own mean and std, equal to the oracle, and channel c equals Gray8 of plane
    c with that channel's constants (the same formula per channel)."""
    src = _bytes(seed, (h, w, 3))
    got = om.rgb8_to_planar(src, mean, std)
    assert _same(got, R.rgb8_to_planar(src, mean, std))
    for c in range(3):
        plane = np.ascontiguousarray(src[:, :, c])
        assert _same(got[c:c + 1], om.gray8_to_planar(plane, mean[c], std[c]))


@given(mean=MEANS, std=STDS, seed=st.integers(0, 2 ** 32 - 1))
def test_rgb8_scalar_mean_std_apply_to_every_channel(om, mean, std, seed):
    """§6 (Rgb8 per-channel constants): one mean and one std for RGB mean the same
    constants for the three channels, and the result equals the oracle."""
    src = _bytes(seed, (3, 5, 3))
    assert _same(om.rgb8_to_planar(src, mean, std), om.rgb8_to_planar(src, (mean,) * 3, (std,) * 3))
    assert _same(om.rgb8_to_planar(src, mean, std), R.rgb8_to_planar(src, mean, std))


# --------------------------------------------------------------------------- strides and out=

@given(h=SIZES, w=SIZES, extra=st.integers(1, 9), left=st.integers(0, 5), mean=MEANS, std=STDS,
       seed=st.integers(0, 2 ** 32 - 1))
def test_gray8_row_stride(om, h, w, extra, left, mean, std, seed):
    """§6 (row stride; D16 counts it in bytes): rows may lie further apart than their
    width: a column slice of a wider array, and a raw bytes buffer with
    width/height/stride whose padding bytes are garbage, give the same result as the
    compact image."""
    wide = _bytes(seed, (h, left + w + extra))
    view = wide[:, left:left + w]
    want = R.gray8_to_planar(np.ascontiguousarray(view), mean, std)
    assert _same(om.gray8_to_planar(view, mean, std), want)
    stride = w + extra
    buf = bytearray(_bytes(seed + 1, (h * stride,)).tobytes())
    for y in range(h):
        buf[y * stride:y * stride + w] = view[y].tobytes()
    # the last row need not be followed by its padding
    raw = bytes(buf[:(h - 1) * stride + w])
    assert _same(om.gray8_to_planar(raw, mean, std, width=w, height=h, stride=stride), want)
    assert _same(om.gray8_to_planar(memoryview(raw), mean, std, width=w, height=h, stride=stride), want)


@given(h=SIZES, w=SIZES, extra=st.integers(1, 9), mean=st.tuples(MEANS, MEANS, MEANS),
       std=st.tuples(STDS, STDS, STDS), seed=st.integers(0, 2 ** 32 - 1))
def test_rgb8_row_stride(om, h, w, extra, mean, std, seed):
    """§6 (row stride, D16): RGB rows of `stride` bytes (>= 3 * width): a pixel slice of
    a wider image and a raw buffer with padded rows both read only the real pixels."""
    wide = _bytes(seed, (h, w + extra, 3))
    view = wide[:, extra:, :]
    want = R.rgb8_to_planar(np.ascontiguousarray(view), mean, std)
    assert _same(om.rgb8_to_planar(view, mean, std), want)
    stride = 3 * w + extra
    buf = bytearray(_bytes(seed + 1, (h * stride,)).tobytes())
    for y in range(h):
        buf[y * stride:y * stride + 3 * w] = view[y].tobytes()
    assert _same(om.rgb8_to_planar(bytes(buf), mean, std, width=w, height=h, stride=stride), want)


def test_raw_buffer_without_stride_is_compact(om):
    """§6 (row stride, D16): a raw buffer without stride= has rows of exactly width
    (gray) or 3*width (RGB) bytes."""
    src = _bytes(4, (3, 5))
    assert _same(om.gray8_to_planar(src.tobytes(), 0.1, 0.7, width=5, height=3),
                 R.gray8_to_planar(src, 0.1, 0.7))
    rgb = _bytes(5, (3, 5, 3))
    assert _same(om.rgb8_to_planar(rgb.tobytes(), 0.1, 0.7, width=5, height=3),
                 R.rgb8_to_planar(rgb, 0.1, 0.7))


def test_non_contiguous_arrays_are_read_correctly(om):
    """§6 (strided input): any uint8 array view is accepted: flipped rows, every other
    column, reversed (BGR) channel order, a transposed plane; the result is that of the
    compact copy."""
    src = _bytes(6, (6, 8, 3))
    for view in (src[::-1, :, :], src[:, ::2, :], src[:, :, ::-1], src[1:4, 2:7, :]):
        assert _same(om.rgb8_to_planar(view, 0.4, 0.3),
                     R.rgb8_to_planar(np.ascontiguousarray(view), 0.4, 0.3))
    gray = src[:, :, 0]
    for view in (gray, gray[::-1], gray[:, ::3], gray.T):
        assert _same(om.gray8_to_planar(view, 0.4, 0.3),
                     R.gray8_to_planar(np.ascontiguousarray(view), 0.4, 0.3))


def test_out_is_reused(om):
    """§6, the package's out= argument: the given array is returned and fully overwritten
    (every element), call after call, from arrays and from raw buffers."""
    for fn, ref, shape, make in [
            (om.gray8_to_planar, R.gray8_to_planar, (1, 4, 6), lambda s: _bytes(s, (4, 6))),
            (om.rgb8_to_planar, R.rgb8_to_planar, (3, 4, 6), lambda s: _bytes(s, (4, 6, 3)))]:
        out = np.full(shape, np.nan, dtype=np.float32)
        for seed in range(3):
            src = make(seed)
            got = fn(src, 0.3, 0.6, out=out)
            assert got is out
            assert _same(out, ref(src, 0.3, 0.6))
            out[...] = np.nan
        raw = make(7)
        got = fn(raw.tobytes(), 0.3, 0.6, width=6, height=4, out=out)
        assert got is out and _same(out, ref(raw, 0.3, 0.6))


# --------------------------------------------------------------------------- refusals

@pytest.mark.parametrize("fn_name, src, error, fragment", [
    ("gray8_to_planar", np.zeros((2, 3), np.float32), TypeError, "float32"),
    ("gray8_to_planar", np.zeros((2, 3), np.int8), TypeError, "int8"),
    ("gray8_to_planar", np.zeros((2, 3, 1), np.uint8), TypeError, "(2, 3, 1)"),
    ("gray8_to_planar", np.zeros(6, np.uint8), TypeError, "(6,)"),
    ("rgb8_to_planar", np.zeros((2, 3, 4), np.uint8), ValueError, "(2, 3, 4)"),
    ("rgb8_to_planar", np.zeros((2, 3), np.uint8), TypeError, "(2, 3)"),
    ("rgb8_to_planar", np.zeros((2, 3, 3), np.uint16), TypeError, "uint16"),
])
def test_bad_arrays_are_refused(om, fn_name, src, error, fragment):
    """§6 (D16 input shapes), with the exception rule: Gray8 takes uint8 [H, W]; Rgb8
    takes uint8 [H, W, 3]; anything else is refused with an error quoting the dtype or
    shape received: a wrong dtype or number of dimensions is a TypeError, a wrong channel
    count a ValueError (a wrong dtype was a ValueError before)."""
    with pytest.raises(error) as e:
        getattr(om, fn_name)(src, 0.0, 1.0)
    assert fragment in str(e.value)


@pytest.mark.parametrize("fn_name, channels", [("gray8_to_planar", 1), ("rgb8_to_planar", 3)])
def test_bad_raw_buffers_are_refused(om, fn_name, channels):
    """§6 (row stride, D16), with the exception rule: a raw buffer needs width and
    height; the stride cannot be smaller than one row of pixels; the buffer must hold
    (height-1)*stride + row bytes; errors quote the numbers."""
    fn = getattr(om, fn_name)
    row = 4 * channels
    buf = bytes(3 * row)
    with pytest.raises(ValueError):
        fn(buf, 0.0, 1.0)
    with pytest.raises(ValueError):
        fn(buf, 0.0, 1.0, width=4)
    with pytest.raises(ValueError) as e:
        fn(buf, 0.0, 1.0, width=4, height=3, stride=row - 1)
    assert str(row - 1) in str(e.value)
    with pytest.raises(ValueError) as e:
        fn(buf[:-1], 0.0, 1.0, width=4, height=3)
    assert str(len(buf) - 1) in str(e.value)
    with pytest.raises(ValueError) as e:
        fn(buf, 0.0, 1.0, width=4, height=3, stride=row + 1)
    assert str(row + 1) in str(e.value)
    for w, h in [(0, 3), (4, 0), (-1, 3)]:
        with pytest.raises(ValueError):
            fn(buf, 0.0, 1.0, width=w, height=h)
    with pytest.raises(TypeError):
        fn(buf, 0.0, 1.0, width=4.0, height=3)


@pytest.mark.parametrize("mean, std, fragment", [
    (0.0, 0.0, "0.0"),
    (0.0, 1e-60, "1e-60"),       # zero once rounded to float32
    (float("nan"), 1.0, "nan"),
    (float("inf"), 1.0, "inf"),
    (0.0, float("inf"), "inf"),
    (0.0, float("nan"), "nan"),
])
def test_bad_constants_are_refused(om, mean, std, fragment):
    """§6 (D15): std must not be zero (after rounding to float32) and mean and std must
    be finite; the error quotes the value received."""
    for fn, src in ((om.gray8_to_planar, _bytes(0, (2, 2))), (om.rgb8_to_planar, _bytes(0, (2, 2, 3)))):
        with pytest.raises(ValueError) as e:
            fn(src, mean, std)
        assert fragment in str(e.value)


def test_bad_per_channel_constants_are_refused(om):
    """§6 (Rgb8 per-channel constants): RGB takes one or three means and stds, each
    finite; a zero std in any channel is refused; gray takes exactly one."""
    src = _bytes(0, (2, 2, 3))
    with pytest.raises(ValueError):
        om.rgb8_to_planar(src, (0.1, 0.2), 1.0)
    with pytest.raises(ValueError):
        om.rgb8_to_planar(src, 0.1, (1.0, 0.0, 1.0))
    with pytest.raises(ValueError):
        om.rgb8_to_planar(src, (0.1, float("nan"), 0.3), 1.0)
    with pytest.raises(ValueError):
        om.gray8_to_planar(src[:, :, 0], (0.1, 0.2, 0.3), 1.0)


@pytest.mark.parametrize("out, fragment", [
    (np.zeros((1, 3, 5), np.float32), "(1, 3, 5)"),
    (np.zeros((1, 4, 5), np.float64), "float64"),
    (np.zeros((1, 4, 10), np.float32)[:, :, ::2], "c_contiguous=False"),
    (np.zeros((4, 5), np.float32), "(4, 5)"),
    ([[0.0]], "list"),
])
def test_bad_out_is_refused(om, out, fragment):
    """§6, the out= argument, with the exception rule: out must be a writable
    C-contiguous float32 array of the result's shape; the error quotes what was received
    (a wrong shape is a ValueError, anything else a TypeError)."""
    error = ValueError if fragment == "(1, 3, 5)" else TypeError
    with pytest.raises(error) as e:
        om.gray8_to_planar(_bytes(0, (4, 5)), 0.0, 1.0, out=out)
    assert fragment in str(e.value)


@pytest.mark.parametrize("fn_name, channels", [("gray8_to_planar", 1), ("rgb8_to_planar", 3)])
def test_misaligned_out_is_refused(om, fn_name, channels):
    """Concern: memory safety (issue 13 class 5, alignment). A float32 out of a §6 helper
    at an odd address (numpy reports it not aligned) is refused with a TypeError naming
    the layout, and left unwritten, instead of being written with misaligned stores."""
    n = channels * 2 * 3
    buf = bytearray(4 * n + 1)
    out = np.frombuffer(buf, dtype=np.float32, offset=1, count=n).reshape(channels, 2, 3)
    assert not out.flags.aligned and out.flags.writeable
    src = _bytes(1, (2, 3) if channels == 1 else (2, 3, 3))
    with pytest.raises(TypeError, match="aligned=False"):
        getattr(om, fn_name)(src, 0.0, 1.0, out=out)
    assert bytes(buf) == bytes(len(buf))


def test_read_only_out_is_refused(om):
    """§6, the out= argument: a read-only out array is refused (the error says
    writeable=False) rather than written."""
    out = np.zeros((3, 2, 2), np.float32)
    out.flags.writeable = False
    with pytest.raises((ValueError, TypeError)) as e:
        om.rgb8_to_planar(_bytes(0, (2, 2, 3)), 0.0, 1.0, out=out)
    assert "writeable=False" in str(e.value)
    assert np.all(out == 0)


@pytest.mark.parametrize("kw", [dict(mean=0.0, std=1e39), dict(mean=1e39, std=1.0)])
def test_constants_that_overflow_float32_are_refused(om, kw):
    """§6 (D15): mean and std go to float32 before anything else; a value that becomes
    infinite there is refused instead of giving a plane of zeros or infinities."""
    with pytest.raises(ValueError, match="float32"):
        om.gray8_to_planar(np.zeros((2, 2), np.uint8), **kw)
