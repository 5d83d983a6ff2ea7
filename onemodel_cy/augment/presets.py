"""Ready-made pipelines of built-in augmentations."""
from __future__ import annotations

from onemodel_cy.augment.operations import (Affine, BrightnessContrast, Compose, Dilate, Elastic, Erode,
                                             GaussianBlur, GaussianNoise, OneOf, Perspective, RandomApply,
                                             Stretch)

__all__ = ["text_lines"]

TEXT_LINES = dict(stretch=(0.8, 1.2), p_stretch=0.5,
                  rotate=2.0, shear=0.3, scale=(0.9, 1.05), shift=1.5, p_affine=0.75,
                  elastic=(1.0, 2.5), jitter=0.08, p_warp=0.5,
                  morphology=2, p_morphology=0.3,
                  blur=(0.3, 1.0), p_blur=0.3,
                  gain=(0.7, 1.3), offset=(-0.3, 0.3), p_brightness=0.5,
                  noise=(0.0, 0.15), p_noise=0.5,
                  border="replicate", fill=0.0)


def text_lines(**overrides):
    """The augmentation an OCR/HTR practitioner applies to text lines, as one built-in transform.

    Per sample, in this order (each ``RandomApply`` one draw, then its operation's own):
    width stretch ``U(0.8, 1.2)`` with p = 0.5; affine (rotation ±2°, shear ±0.3, scale
    ``U(0.9, 1.05)``, vertical shift ±1.5 px) with p = 0.75; with p = 0.5 one of elastic
    distortion (magnitude ``U(1, 2.5)`` px) and perspective (corners ±8 % of the height),
    each half the time (so each p = 0.25); erosion or dilation 2×2 with p = 0.3; Gaussian
    blur ``sigma U(0.3, 1.0)`` with p = 0.3; brightness/contrast (gain ``U(0.7, 1.3)``,
    offset ``U(-0.3, 0.3)``) with p = 0.5; Gaussian noise ``sigma U(0, 0.15)`` with p = 0.5.

    Every keyword of ``TEXT_LINES`` overrides its default (``p_*`` are the probabilities).
    Use it as ``DataLoader(..., transform=text_lines())``: the width may change, the height
    does not.
    """
    unknown = sorted(set(overrides) - set(TEXT_LINES))
    if unknown:
        raise TypeError(f"text_lines() got unexpected keywords {unknown}; allowed: {sorted(TEXT_LINES)}")
    k = {**TEXT_LINES, **overrides}
    border = dict(border=k["border"], fill=k["fill"])
    return Compose([
        RandomApply(Stretch(k["stretch"]), k["p_stretch"]),
        RandomApply(Affine(k["rotate"], k["shear"], k["scale"], k["shift"], **border), k["p_affine"]),
        RandomApply(OneOf([Elastic(k["elastic"], **border), Perspective(k["jitter"], **border)]), k["p_warp"]),
        RandomApply(OneOf([Erode(k["morphology"]), Dilate(k["morphology"])]), k["p_morphology"]),
        RandomApply(GaussianBlur(k["blur"]), k["p_blur"]),
        RandomApply(BrightnessContrast(k["gain"], k["offset"]), k["p_brightness"]),
        RandomApply(GaussianNoise(k["noise"]), k["p_noise"]),
    ])
