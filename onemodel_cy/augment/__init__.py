"""Built-in, GIL-free, deterministic augmentations of text lines (``onemodel_cy.augment``).

Each operation draws its random parameters from the sample's ``SampleRng`` in the order
docs/contract.md states, and writes its pixels in float32 arithmetic that a port can
rebuild bit for bit; none holds the GIL while it writes. Use one as the loader's
``transform`` (stream 0; the width may change), or, when it keeps the shape, as the
collator's augmentation (stream 1)::

    >>> import onemodel_cy as om
    >>> from onemodel_cy import augment
    >>> loader = om.DataLoader(dataset, sampler, om.ImageBatchCollator(), seed=0,
    ...                        transform=augment.text_lines())

(docs/augment.md has more.) This package imports only ``core`` and ``data``: the collator
and the fetch step import it.
"""
from onemodel_cy.augment.program import Transform, WIDTH_LIMIT, HEIGHT_LIMIT
from onemodel_cy.augment.operations import (Affine, BrightnessContrast, Compose, Dilate, Elastic, Erode,
                                            GaussianBlur, GaussianNoise, ImpulseNoise, Invert, OneOf,
                                            Perspective, RandomApply, ResizeHeight, SpeckleNoise, Stretch)
from onemodel_cy.augment.presets import TEXT_LINES, text_lines

__all__ = ["Transform", "Compose", "RandomApply", "OneOf", "ResizeHeight", "Stretch", "Affine", "Perspective",
           "Elastic", "Erode", "Dilate", "GaussianBlur", "BrightnessContrast", "GaussianNoise", "SpeckleNoise",
           "ImpulseNoise", "Invert", "text_lines", "TEXT_LINES", "WIDTH_LIMIT", "HEIGHT_LIMIT"]
