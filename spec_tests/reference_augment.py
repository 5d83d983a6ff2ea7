"""Pure-Python transcription of docs/contract.md, "Text-line augmentations".

Part of the oracle (``reference.py`` re-exports it): it never imports ``onemodel_cy``. An
operation is a plain description, a tuple ``(name, *arguments)`` in the order the
contract lists them, for example ``("affine", 2.0, 0.3, (0.9, 1.05), 1.5, "replicate", 0.0)``
or ``("random_apply", op, 0.5)``; ``apply(op, image, rng)`` returns the new float32 image
and moves ``rng`` past every draw, as the text says.

float32 arithmetic: numpy float32 scalars and arrays, one IEEE operation per step (numpy
never fuses a multiply and an add); ``f32`` rounds a Python number. Pixels are computed
for whole arrays at once where each element goes through the same operations in the same
order as the text's per-pixel formula.
"""
from __future__ import annotations

import math

import numpy as np

F = np.float32
WIDTH_LIMIT = 1 << 20


def f32(value) -> np.float32:
    return np.float32(value)


def bits(value: int) -> np.float32:
    return np.array([value], dtype=np.uint32).view(np.float32)[0]


S3, S5, S7, S9 = bits(0x3e2aaaab), bits(0x3c088889), bits(0x39500d01), bits(0x3638ef1d)
C2, C4, C6, C8, C10 = bits(0x3f000000), bits(0x3d2aaaab), bits(0x3ab60b61), bits(0x37d00d01), bits(0x3493f27e)
E7, E6, E5, E4, E3, E2 = (bits(0x39500d01), bits(0x3ab60b61), bits(0x3c088889), bits(0x3d2aaaab),
                          bits(0x3e2aaaab), bits(0x3f000000))
NORMAL_SCALE = bits(0x37ddb3d7)
DEG2RAD = bits(0x3c8efa35)
ONE, HALF, ZERO = F(1), F(0.5), F(0)


def sin32(x):
    x2 = x * x
    q = S9
    q = q * x2 - S7
    q = q * x2 + S5
    q = q * x2 - S3
    q = q * x2 + ONE
    return x * q


def cos32(x):
    x2 = x * x
    q = -C10
    q = q * x2 + C8
    q = q * x2 - C6
    q = q * x2 + C4
    q = q * x2 - C2
    q = q * x2 + ONE
    return q


def expneg32(t):
    if not t <= F(87):
        return ZERO
    s = t * F(2.0 ** -8)
    q = E7
    for c in (E6, E5, E4, E3, E2, ONE, ONE):
        q = c - s * q
    for _ in range(8):
        q = q * q
    return q


def uniform(rng, low, high):
    low, high = f32(low), f32(high)
    return low + (high - low) * rng.next_single()


def normals(rng, count):
    """``count`` successive ``normal()`` values; moves ``rng``."""
    out = np.empty(count, dtype=np.float32)
    for k in range(count):
        u = rng.next_u64()
        n = (u & 0xFFFF) + ((u >> 16) & 0xFFFF) + ((u >> 32) & 0xFFFF) + (u >> 48)
        out[k] = (f32(n) - F(131070)) * NORMAL_SCALE
    return out


def singles(rng, count):
    return np.array([rng.next_single() for _ in range(count)], dtype=np.float32)


def width(v):
    v = np.floor(f32(v) + HALF)
    if not v >= 1:
        return 1
    return WIDTH_LIMIT if v >= WIDTH_LIMIT else int(v)


# ---- sampling ------------------------------------------------------------------------------

def keep(s, n):
    """Coordinates kept to [-2, n + 1]; NaN becomes -2 (float32 arrays)."""
    s = np.where(np.isnan(s), F(-2), s)
    return np.clip(s, F(-2), F(n + 1)).astype(np.float32)


def neighbours(plane, xs, ys, border, fill):
    h, w = plane.shape
    if border == "constant":
        inside = (xs >= 0) & (xs < w) & (ys >= 0) & (ys < h)
        values = plane[np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)]
        return np.where(inside, values, f32(fill)).astype(np.float32)
    return plane[np.clip(ys, 0, h - 1), np.clip(xs, 0, w - 1)]


def bilinear(plane, sx, sy, border, fill):
    h, w = plane.shape
    sx, sy = keep(sx, w), keep(sy, h)
    x0f, y0f = np.floor(sx), np.floor(sy)
    fx, fy = sx - x0f, sy - y0f
    x0, y0 = x0f.astype(np.int64), y0f.astype(np.int64)
    p00 = neighbours(plane, x0, y0, border, fill)
    p01 = neighbours(plane, x0 + 1, y0, border, fill)
    p10 = neighbours(plane, x0, y0 + 1, border, fill)
    p11 = neighbours(plane, x0 + 1, y0 + 1, border, fill)
    top = p00 + fx * (p01 - p00)
    bottom = p10 + fx * (p11 - p10)
    return top + fy * (bottom - top)


def resample(values, m, axis):
    """1-D linear resampling of ``values`` along ``axis`` to ``m`` samples."""
    n = values.shape[axis]
    if n == m:
        return values.copy()
    scale = f32(n) / f32(m)
    s = (np.arange(m, dtype=np.float32) + HALF) * scale - HALF
    s = keep(s, n)
    i = np.floor(s)
    f = s - i
    i = i.astype(np.int64)
    a = np.take(values, np.clip(i, 0, n - 1), axis=axis)
    b = np.take(values, np.clip(i + 1, 0, n - 1), axis=axis)
    shape = [1] * values.ndim
    shape[axis] = m
    f = f.reshape(shape)
    with np.errstate(over="ignore", invalid="ignore"):     # infinite or overflowing neighbours are cases
        return a + f * (b - a)


def pixel_grid(h, w):
    y, x = np.meshgrid(np.arange(h, dtype=np.float32), np.arange(w, dtype=np.float32), indexing="ij")
    return x, y


# ---- operations ----------------------------------------------------------------------------

def resize_height(image, rng, height, max_width=None):
    c, h, w = image.shape
    most = WIDTH_LIMIT if max_width is None else max_width
    new_w = min(max((w * height + h // 2) // h, 1), most)
    return resample(resample(image, new_w, 2), height, 1)


def stretch(image, rng, scale):
    f = uniform(rng, *scale)
    return resample(image, width(f32(image.shape[2]) * f), 2)


def affine(image, rng, rotate, shear, scale, shift, border="replicate", fill=0.0):
    c, h, w = image.shape
    a = uniform(rng, -f32(rotate), f32(rotate))
    s = uniform(rng, -f32(shear), f32(shear))
    k = uniform(rng, *scale)
    t = uniform(rng, -f32(shift), f32(shift))
    theta = a * DEG2RAD
    sn, cs, inv = sin32(theta), cos32(theta), ONE / k
    m00, m01, m10, m11 = inv * (cs + s * sn), inv * (sn - s * cs), -(inv * sn), inv * cs
    new_w = width(f32(w) + np.ceil(abs(s) * f32(h)))
    x, y = pixel_grid(h, new_w)
    dx = (x + HALF) - f32(new_w) * HALF
    dy = ((y + HALF) - f32(h) * HALF) - t
    sx = ((m00 * dx + m01 * dy) + f32(w) * HALF) - HALF
    sy = ((m10 * dx + m11 * dy) + f32(h) * HALF) - HALF
    return np.stack([bilinear(image[ch], sx, sy, border, fill) for ch in range(c)])


def perspective(image, rng, jitter, border="replicate", fill=0.0):
    c, h, w = image.shape
    j = f32(jitter) * f32(h)
    d = [uniform(rng, -j, j) for _ in range(8)]
    fw, fh = f32(w), f32(h)
    x0, y0, x1, y1 = ZERO + d[0], ZERO + d[1], fw + d[2], ZERO + d[3]
    x2, y2, x3, y3 = fw + d[4], fh + d[5], ZERO + d[6], fh + d[7]
    sx_, sy_ = ((x0 - x1) + x2) - x3, ((y0 - y1) + y2) - y3
    dx1, dx2, dy1, dy2 = x1 - x2, x3 - x2, y1 - y2, y3 - y2
    den = dx1 * dy2 - dx2 * dy1
    g = (sx_ * dy2 - dx2 * sy_) / den if den != 0 else ZERO
    hh = (dx1 * sy_ - sx_ * dy1) / den if den != 0 else ZERO
    a, b, cc = (x1 - x0) + g * x1, (x3 - x0) + hh * x3, x0
    dd, e, f = (y1 - y0) + g * y1, (y3 - y0) + hh * y3, y0
    x, y = pixel_grid(h, w)
    u = (x + HALF) * (ONE / fw)
    v = (y + HALF) * (ONE / fh)
    q = (g * u + hh * v) + ONE
    with np.errstate(divide="ignore", invalid="ignore"):
        sx = ((a * u + b * v) + cc) / q - HALF
        sy = ((dd * u + e * v) + f) / q - HALF
    return np.stack([bilinear(image[ch], sx, sy, border, fill) for ch in range(c)])


def elastic(image, rng, magnitude, cell, border="replicate", fill=0.0):
    c, h, w = image.shape
    m = uniform(rng, *magnitude)
    nx, ny = w // cell + 2, h // cell + 2
    nodes = (-m + (m + m) * singles(rng, nx * ny * 2)).reshape(ny, nx, 2)
    x, y = pixel_grid(h, w)
    inv = ONE / f32(cell)
    tx, ty = (x + HALF) * inv, (y + HALF) * inv
    i = np.minimum(np.floor(tx), f32(nx - 2))
    j = np.minimum(np.floor(ty), f32(ny - 2))
    fx, fy = tx - i, ty - j
    i, j = i.astype(np.int64), j.astype(np.int64)
    shifts = []
    for axis in (0, 1):
        n00, n01 = nodes[j, i, axis], nodes[j, i + 1, axis]
        n10, n11 = nodes[j + 1, i, axis], nodes[j + 1, i + 1, axis]
        top = n00 + fx * (n01 - n00)
        bottom = n10 + fx * (n11 - n10)
        shifts.append(top + fy * (bottom - top))
    return np.stack([bilinear(image[ch], x + shifts[0], y + shifts[1], border, fill) for ch in range(c)])


def _extreme(image, size, pick):
    kw, kh = size if isinstance(size, (tuple, list)) else (size, size)

    def along(values, k, axis):
        n = values.shape[axis]
        positions = np.arange(n) - (k - 1) // 2
        best = np.take(values, np.clip(positions, 0, n - 1), axis=axis)
        for step in range(1, k):
            value = np.take(values, np.clip(positions + step, 0, n - 1), axis=axis)
            best = np.where(pick(value, best), value, best)
        return best

    return along(along(image, kw, 2), kh, 1)


def erode(image, rng, size):
    return _extreme(image, size, lambda value, best: value < best)


def dilate(image, rng, size):
    return _extreme(image, size, lambda value, best: value > best)


def blur_weights(sigma):
    r = min(int(np.ceil(F(3) * sigma)), 24)
    if r == 0:
        return [ONE], 0
    d = (F(2) * sigma) * sigma
    w = [expneg32(f32(k * k) / d) for k in range(r + 1)]
    total = w[r]
    for k in range(-r + 1, r + 1):
        total = total + w[abs(k)]
    return [wk / total for wk in w], r


def gaussian_blur(image, rng, sigma):
    n, r = blur_weights(uniform(rng, *sigma))

    def along(values, axis):
        size = values.shape[axis]
        acc = np.zeros_like(values)
        for k in range(-r, r + 1):
            acc = acc + n[abs(k)] * np.take(values, np.clip(np.arange(size) + k, 0, size - 1), axis=axis)
        return acc

    return along(along(image, 2), 1)


def brightness_contrast(image, rng, gain, offset):
    g = uniform(rng, *gain)
    o = uniform(rng, *offset)
    return image * g + o


def gaussian_noise(image, rng, sigma):
    s = uniform(rng, *sigma)
    return image + s * normals(rng, image.size).reshape(image.shape)


def speckle_noise(image, rng, sigma):
    s = uniform(rng, *sigma)
    return image + image * (s * normals(rng, image.size).reshape(image.shape))


def impulse_noise(image, rng, amount, low=0.0, high=1.0):
    a = uniform(rng, *amount)
    u = singles(rng, image.size).reshape(image.shape)
    return np.where(u < a * HALF, f32(low), np.where(u < a, f32(high), image)).astype(np.float32)


def invert(image, rng, low=0.0, high=1.0):
    return (f32(low) + f32(high)) - image


OPERATIONS = {"resize_height": resize_height, "stretch": stretch, "affine": affine, "perspective": perspective,
              "elastic": elastic, "erode": erode, "dilate": dilate, "gaussian_blur": gaussian_blur,
              "brightness_contrast": brightness_contrast, "gaussian_noise": gaussian_noise,
              "speckle_noise": speckle_noise, "impulse_noise": impulse_noise, "invert": invert}


def apply(op, image, rng):
    """The image after ``op`` (a description tuple), drawing from ``rng``."""
    name, args = op[0], op[1:]
    image = np.asarray(image, dtype=np.float32)
    if name == "compose":
        for child in args[0]:
            image = apply(child, image, rng)
        return image
    if name == "random_apply":
        child, p = args
        return apply(child, image, rng) if rng.next_single() < f32(p) else image.copy()
    if name == "one_of":
        children, weights = args
        u = rng.next_double()
        total = 0.0
        for w in weights:
            total += float(w)
        bound = 0.0
        for child, w in zip(children, weights):
            bound += float(w) / total
            if bound > u:
                return apply(child, image, rng)
        return apply(children[-1], image, rng)
    return OPERATIONS[name](image, rng, *args).astype(np.float32, copy=False)


def text_lines():
    """The preset's description (docs/contract.md)."""
    return ("compose", [
        ("random_apply", ("stretch", (0.8, 1.2)), 0.5),
        ("random_apply", ("affine", 2.0, 0.3, (0.9, 1.05), 1.5, "replicate", 0.0), 0.75),
        ("random_apply", ("one_of", [("elastic", (1.0, 2.5), 8, "replicate", 0.0),
                                     ("perspective", 0.08, "replicate", 0.0)], [1.0, 1.0]), 0.5),
        ("random_apply", ("one_of", [("erode", 2), ("dilate", 2)], [1.0, 1.0]), 0.3),
        ("random_apply", ("gaussian_blur", (0.3, 1.0)), 0.3),
        ("random_apply", ("brightness_contrast", (0.7, 1.3), (-0.3, 0.3)), 0.5),
        ("random_apply", ("gaussian_noise", (0.0, 0.15)), 0.5),
    ])


# ---- constructors: the arguments an operation accepts (docs/contract.md, "Arguments") -------
# Each returns the operation's description (an ``Op``, a tuple as above) or raises ValueError
# naming the argument; ``op.apply(image, rng)`` is ``apply(op, image, rng)``. The conformance
# replay (``onemodel_cy/conformance/augment.py``) builds cases through these names, as it
# builds them through ``onemodel_cy.augment`` for the compiled package.

class Op(tuple):
    """A description made by a constructor."""

    def apply(self, image, rng):
        return apply(self, image, rng)


def _real(value, name, low=-math.inf, high=math.inf):
    """``f32(value)`` as a float, finite and within [low, high] once rounded."""
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating, np.integer)):
        raise TypeError(f"{name} must be a real number, received {type(value).__name__}")
    with np.errstate(over="ignore"):
        rounded = float(f32(value))
    if not math.isfinite(rounded) or not low <= rounded <= high:
        raise ValueError(f"{name} must be finite and lie in [{low}, {high}] once rounded to float32, "
                         f"received {value!r}")
    return rounded


def _pair(value, name, low, high):
    if not isinstance(value, (tuple, list)):
        value = (value, value)
    if len(value) != 2:
        raise TypeError(f"{name} must be a number or a pair (low, high), received {value!r}")
    first, second = _real(value[0], name, low, high), _real(value[1], name, low, high)
    if first > second:
        raise ValueError(f"{name} must have low <= high, received {tuple(value)!r}")
    return first, second


def _integer(value, name, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, received {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must lie in [{low}, {high}], received {value}")
    return int(value)


def _border(border, fill):
    if border not in ("replicate", "constant"):
        raise ValueError(f"border must be 'replicate' or 'constant', received {border!r}")
    return border, _real(fill, "fill")


def Compose(ops):
    return Op(("compose", [Op(op) for op in ops]))


def RandomApply(op, p=0.5):
    return Op(("random_apply", Op(op), _real(p, "p", 0.0, 1.0)))


def OneOf(ops, weights=None):
    ops = [Op(op) for op in ops]
    if not ops:
        raise ValueError("OneOf needs at least one operation")
    weights = [1.0] * len(ops) if weights is None else [float(w) for w in weights]     # float64: not rounded
    if len(weights) != len(ops) or not all(math.isfinite(w) and w > 0 for w in weights):
        raise ValueError(f"weights must be {len(ops)} finite numbers > 0, received {weights!r}")
    return Op(("one_of", ops, weights))


def ResizeHeight(height, max_width=None):
    height = _integer(height, "height", 1, 1 << 16)
    return Op(("resize_height", height, None if max_width is None else _integer(max_width, "max_width", 1,
                                                                                 WIDTH_LIMIT)))


def Stretch(scale=(0.8, 1.2)):
    return Op(("stretch", _pair(scale, "scale", 1.0 / 64, 64.0)))


def Affine(rotate=2.0, shear=0.3, scale=(0.9, 1.05), shift=1.5, border="replicate", fill=0.0):
    return Op(("affine", _real(rotate, "rotate", 0.0, 45.0), _real(shear, "shear", 0.0, 1.0),
               _pair(scale, "scale", 1.0 / 16, 16.0), _real(shift, "shift", 0.0, 4096.0)) + _border(border, fill))


def Perspective(jitter=0.08, border="replicate", fill=0.0):
    return Op(("perspective", _real(jitter, "jitter", 0.0, 0.5)) + _border(border, fill))


def Elastic(magnitude=(1.0, 2.5), cell=8, border="replicate", fill=0.0):
    return Op(("elastic", _pair(magnitude, "magnitude", 0.0, 64.0), _integer(cell, "cell", 1, 4096))
              + _border(border, fill))


def _window(size):
    size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
    if len(size) != 2:
        raise TypeError(f"size must be an integer or a pair (width, height), received {size!r}")
    return tuple(_integer(s, "size", 1, 31) for s in size)


def Erode(size=2):
    return Op(("erode", _window(size)))


def Dilate(size=2):
    return Op(("dilate", _window(size)))


def GaussianBlur(sigma=(0.3, 1.0)):
    return Op(("gaussian_blur", _pair(sigma, "sigma", 0.0, 8.0)))


def BrightnessContrast(gain=(0.7, 1.3), offset=(-0.3, 0.3)):
    return Op(("brightness_contrast", _pair(gain, "gain", 0.0, 1e6), _pair(offset, "offset", -1e6, 1e6)))


def GaussianNoise(sigma=(0.0, 0.15)):
    return Op(("gaussian_noise", _pair(sigma, "sigma", 0.0, 1e6)))


def SpeckleNoise(sigma=(0.0, 0.15)):
    return Op(("speckle_noise", _pair(sigma, "sigma", 0.0, 1e6)))


def ImpulseNoise(amount=(0.0, 0.02), low=0.0, high=1.0):
    return Op(("impulse_noise", _pair(amount, "amount", 0.0, 1.0), _real(low, "low"), _real(high, "high")))


def Invert(low=0.0, high=1.0):
    low, high = _real(low, "low"), _real(high, "high")
    with np.errstate(over="ignore"):
        total = f32(low) + f32(high)
    if not math.isfinite(float(total)):
        raise ValueError(f"low + high must be finite in float32, received {low!r} + {high!r}")
    return Op(("invert", low, high))


def contract_function(name, values):
    """``name`` (``"sin"``, ``"cos"`` or ``"expneg"``) of each float32 in ``values``: the
    conformance kit's ``augment_function`` cases (as ``onemodel_cy.augment.kernels`` offers it)."""
    function = {"sin": sin32, "cos": cos32, "expneg": expneg32}[name]
    with np.errstate(over="ignore", invalid="ignore", under="ignore"):
        return np.array([function(F(v)) for v in np.asarray(values, dtype=np.float32).reshape(-1)], dtype=np.float32)


def contract_normals(state, count):
    """``count`` draws of ``normal()`` from ``SampleRng(state)``: (float32 values, the state after)."""
    from reference import SampleRng
    rng = SampleRng(state)
    return normals(rng, count), rng.state
