"""The built-in augmentations of text lines: each checks its arguments and becomes a program.

Every class here is a :class:`~onemodel_cy.augment.Transform`; what each one draws, in
which order, and the float32 arithmetic of its pixels are in docs/contract.md
("Text-line augmentations"). A range argument is a pair ``(low, high)`` with
``low <= high`` (a single number means ``(x, x)``); a half-width ``r`` means the range
``(-r, r)``. Every float is rounded to float32 first, as the kernels use it.
"""
from __future__ import annotations

import math
import numbers

import numpy as np

from onemodel_cy.augment.program import HEIGHT_LIMIT, WIDTH_LIMIT, Transform, _Builder

__all__ = ["Compose", "RandomApply", "OneOf", "ResizeHeight", "Stretch", "Affine", "Perspective", "Elastic",
           "Erode", "Dilate", "GaussianBlur", "BrightnessContrast", "GaussianNoise", "SpeckleNoise",
           "ImpulseNoise", "Invert"]

MAX_ROTATION = 45.0        # degrees: the contract's sine and cosine hold for |angle| <= pi/4
MAX_SIGMA = 8.0            # the blur's radius ceil(3 sigma) stays within 24
MAX_KERNEL = 31            # erosion and dilation windows
MAX_CELL = 4096


def _float(value, name, low=-math.inf, high=math.inf, owner=""):
    """``value`` as a float32-rounded float in [low, high], or a ValueError naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{owner}: {name} must be a real number, received {type(value).__name__}")
    rounded = float(np.float32(value))
    if not math.isfinite(rounded) or not low <= rounded <= high:
        raise ValueError(f"{owner}: {name} must be a finite number in [{low}, {high}], received {value!r}")
    return rounded


def _range(value, name, low, high, owner):
    """A ``(low, high)`` pair (or one number ``x``, meaning ``(x, x)``) within [low, high]."""
    if isinstance(value, numbers.Real) and not isinstance(value, bool):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise TypeError(f"{owner}: {name} must be a number or a pair (low, high), received {value!r}")
    first, second = (_float(v, name, low, high, owner) for v in value)
    if first > second:
        raise ValueError(f"{owner}: {name} must have low <= high, received {tuple(value)!r}")
    return first, second


def _int(value, name, low, high, owner):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{owner}: {name} must be an integer, received {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{owner}: {name} must lie in [{low}, {high}], received {value}")
    return int(value)


def _border(border, fill, owner):
    if border not in ("replicate", "constant"):
        raise ValueError(f"{owner}: border must be 'replicate' or 'constant', received {border!r}")
    return border, _float(fill, "fill", owner=owner)


def _transforms(ops, owner):
    ops = list(ops)
    bad = [op for op in ops if not isinstance(op, Transform)]
    if bad:
        raise TypeError(f"{owner} composes built-in augmentations (onemodel_cy.augment), received "
                        f"{type(bad[0]).__name__}; a Python transform is called by the loader on its own")
    # A composition copies its children's programs: Python code of a subclass would not run.
    custom = [op for op in ops if type(op).__call__ is not Transform.__call__ or type(op).apply is not Transform.apply]
    if custom:
        raise TypeError(f"{owner} runs its children's built-in programs, and {type(custom[0]).__name__} overrides "
                        f"__call__ or apply, which it would not run; call that one as a Python transform")
    return ops


class Compose(Transform):
    """Apply ``ops`` in order, each drawing from the same rng after the previous one."""

    def __init__(self, ops):
        ops = _transforms(ops, "Compose")
        _Builder.composite(self, "compose", (tuple(ops),), ops)


class RandomApply(Transform):
    """Apply ``op`` when ``next_single() < p`` (one draw; ``op`` draws only when it runs)."""

    def __init__(self, op, p=0.5):
        (op,) = _transforms([op], "RandomApply")
        p = _float(p, "p", 0.0, 1.0, "RandomApply")
        _Builder.composite(self, "random_apply", (op, p), [op], p=p)


class OneOf(Transform):
    """Apply one of ``ops``: ``u = next_double()``, the first whose cumulative share of the
    ``weights`` (float64, left to right, as D10) exceeds ``u``, else the last."""

    def __init__(self, ops, weights=None):
        ops = _transforms(ops, "OneOf")
        if not ops:
            raise ValueError("OneOf needs at least one operation, received none")
        if weights is None:
            weights = [1.0] * len(ops)
        weights = [float(w) for w in weights]
        if len(weights) != len(ops) or not all(math.isfinite(w) and w > 0 for w in weights):
            raise ValueError(f"OneOf: weights must be {len(ops)} finite numbers > 0, received {weights!r}")
        total, bound, bounds = 0.0, 0.0, []
        for w in weights:
            total += w
        for w in weights:
            bound += w / total
            bounds.append(bound)
        _Builder.composite(self, "one_of", (tuple(ops), tuple(weights)), ops, bounds=bounds)


class ResizeHeight(Transform):
    """Resize to ``height`` rows, the aspect kept: width ``(w * height + h div 2) div h``,
    at most ``max_width`` (a longer line is squeezed to it); linear, rows then columns."""

    def __init__(self, height, max_width=None):
        height = _int(height, "height", 1, HEIGHT_LIMIT, "ResizeHeight")
        most = WIDTH_LIMIT if max_width is None else _int(max_width, "max_width", 1, WIDTH_LIMIT, "ResizeHeight")
        _Builder.leaf(self, "resize_height", (height, max_width), (), ia=height, ib=most, keeps_shape=False)


class Stretch(Transform):
    """Scale the width by ``U(scale)``: ``floor(w * f + 1/2)`` columns (within [1, 2**20]), linear."""

    def __init__(self, scale=(0.8, 1.2)):
        low, high = _range(scale, "scale", 1.0 / 64, 64.0, "Stretch")
        _Builder.leaf(self, "stretch", ((low, high),), (low, high), keeps_shape=False)


class Affine(Transform):
    """Rotation ``U(±rotate)`` degrees, horizontal shear ``U(±shear)``, scale ``U(scale)``,
    vertical shift ``U(±shift)`` pixels, about the image's centre; the canvas grows by
    ``ceil(|shear| * h)`` columns to hold the shear. Bilinear."""

    def __init__(self, rotate=2.0, shear=0.3, scale=(0.9, 1.05), shift=1.5, border="replicate", fill=0.0):
        owner = "Affine"
        rotate = _float(rotate, "rotate", 0.0, MAX_ROTATION, owner)
        shear = _float(shear, "shear", 0.0, 1.0, owner)
        low, high = _range(scale, "scale", 1.0 / 16, 16.0, owner)
        shift = _float(shift, "shift", 0.0, 4096.0, owner)
        border, fill = _border(border, fill, owner)
        _Builder.leaf(self, "affine", (rotate, shear, (low, high), shift, border, fill),
                      (rotate, shear, low, high, shift), border=border, fill=fill, keeps_shape=False)


class Perspective(Transform):
    """Each corner moved by ``U(±jitter * h)`` pixels in x, then in y (top-left, top-right,
    bottom-right, bottom-left); the image resampled through the square-to-quad projective
    map. The shape is kept. Bilinear."""

    def __init__(self, jitter=0.08, border="replicate", fill=0.0):
        jitter = _float(jitter, "jitter", 0.0, 0.5, "Perspective")
        border, fill = _border(border, fill, "Perspective")
        _Builder.leaf(self, "perspective", (jitter, border, fill), (jitter,), border=border, fill=fill)


class Elastic(Transform):
    """A smooth random displacement: a grid of nodes ``cell`` pixels apart, each moved by
    ``U(±m)`` in x and y with ``m = U(magnitude)``, blended bilinearly. The shape is kept."""

    def __init__(self, magnitude=(1.0, 2.5), cell=8, border="replicate", fill=0.0):
        low, high = _range(magnitude, "magnitude", 0.0, 64.0, "Elastic")
        cell = _int(cell, "cell", 1, MAX_CELL, "Elastic")
        border, fill = _border(border, fill, "Elastic")
        _Builder.leaf(self, "elastic", ((low, high), cell, border, fill), (low, high), ia=cell, border=border,
                      fill=fill)


def _window(size, owner):
    if isinstance(size, (tuple, list)) and len(size) == 2:
        return tuple(_int(s, "size", 1, MAX_KERNEL, owner) for s in size)
    size = _int(size, "size", 1, MAX_KERNEL, owner)
    return size, size


class Erode(Transform):
    """The minimum over a ``size`` (width, height) window, replicated at the border."""

    def __init__(self, size=2):
        kw, kh = _window(size, "Erode")
        _Builder.leaf(self, "erode", (size,), (), ia=kw, ib=kh)


class Dilate(Transform):
    """The maximum over a ``size`` (width, height) window, replicated at the border."""

    def __init__(self, size=2):
        kw, kh = _window(size, "Dilate")
        _Builder.leaf(self, "dilate", (size,), (), ia=kw, ib=kh)


class GaussianBlur(Transform):
    """Separable Gaussian blur of ``sigma = U(sigma)``, radius ``ceil(3 sigma)``, replicated border."""

    def __init__(self, sigma=(0.3, 1.0)):
        low, high = _range(sigma, "sigma", 0.0, MAX_SIGMA, "GaussianBlur")
        _Builder.leaf(self, "blur", ((low, high),), (low, high))


class BrightnessContrast(Transform):
    """Each pixel ``x * g + o`` with ``g = U(gain)`` then ``o = U(offset)``."""

    def __init__(self, gain=(0.7, 1.3), offset=(-0.3, 0.3)):
        g = _range(gain, "gain", 0.0, 1e6, "BrightnessContrast")
        o = _range(offset, "offset", -1e6, 1e6, "BrightnessContrast")
        _Builder.leaf(self, "brightness_contrast", (g, o), g + o)


class GaussianNoise(Transform):
    """Each pixel plus ``sigma * z``, ``sigma = U(sigma)`` and ``z`` one fast normal draw a
    pixel (not the 12-draw normal of the collator's ``onemodel_cy.GaussianNoise``)."""

    def __init__(self, sigma=(0.0, 0.15)):
        low, high = _range(sigma, "sigma", 0.0, 1e6, "GaussianNoise")
        _Builder.leaf(self, "noise", ((low, high),), (low, high))


class SpeckleNoise(Transform):
    """Each pixel plus ``x * (sigma * z)``: noise proportional to the pixel."""

    def __init__(self, sigma=(0.0, 0.15)):
        low, high = _range(sigma, "sigma", 0.0, 1e6, "SpeckleNoise")
        _Builder.leaf(self, "speckle", ((low, high),), (low, high))


class ImpulseNoise(Transform):
    """Salt and pepper: with ``a = U(amount)``, a pixel whose draw ``u < a/2`` becomes ``low``,
    else ``u < a`` makes it ``high``."""

    def __init__(self, amount=(0.0, 0.02), low=0.0, high=1.0):
        a = _range(amount, "amount", 0.0, 1.0, "ImpulseNoise")
        low, high = _float(low, "low", owner="ImpulseNoise"), _float(high, "high", owner="ImpulseNoise")
        _Builder.leaf(self, "impulse", (a, low, high), a + (low, high))


class Invert(Transform):
    """Each pixel ``(low + high) - x``: dark text on light becomes light on dark (``low`` and
    ``high`` are the pixel range, [0, 1] for the loader's default normalisation)."""

    def __init__(self, low=0.0, high=1.0):
        low, high = _float(low, "low", owner="Invert"), _float(high, "high", owner="Invert")
        with np.errstate(over="ignore"):
            total = float(np.float32(low) + np.float32(high))
        if not math.isfinite(total):
            raise ValueError(f"Invert: low + high must be finite in float32, received {low!r} + {high!r}")
        _Builder.leaf(self, "invert", (low, high), (total,))
