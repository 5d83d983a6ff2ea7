"""Helpers shared by the §4 (``test_s4_collate.py``) and §5 (``test_s5_memory.py``) spec tests.

Only what both files need lives here; each file keeps its own helpers otherwise.
"""

from __future__ import annotations

import numpy as np


def pixels(seed, shape, special=False):
    """Deterministic float32 pixels; with ``special`` some are -0.0, inf or NaN.

    Parameters
    ----------
    seed : int
        Seed of the NumPy generator, so the same call gives the same image.
    shape : tuple of int
        Shape of the image, ``(C, H, W)`` for a sample.
    special : bool, optional
        Overwrite up to three pixels with -0.0, +inf and NaN, to show that the collator
        copies bits, not values.

    Returns
    -------
    numpy.ndarray
        A float32 array of ``shape``.
    """
    gen = np.random.default_rng(seed)
    image = (gen.standard_normal(shape, dtype=np.float32) * np.float32(3.0)).astype(np.float32)
    if special and image.size:
        flat = image.reshape(-1)
        picks = gen.integers(0, flat.size, size=min(3, flat.size))
        flat[picks[0]] = np.float32(-0.0)
        if picks.size > 1:
            flat[picks[1]] = np.float32(np.inf)
        if picks.size > 2:
            flat[picks[2]] = np.float32(np.nan)
    return image
