"""Writes the known-answer packs of spec_tests/data/ and their expectations (expected.json).

    python3 spec_tests/data/make_tiny_packs.py

The packs are written with ``onemodel_cy.pack`` from the fixed samples below; the
expectations of each sample (shape, target, label, key, and the SHA-256 of its §6
float32 image) are computed here with numpy alone, independently of the package, and
the batch expectation records the loader's bytes for one configuration.
"""
from __future__ import annotations

import hashlib
import json
import os

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
VOCABULARY = list("abcdefgh")
MEAN, STD = 0.5, 0.25                   # §6 constants of the gray pack
RGB_MEAN, RGB_STD = [0.485, 0.456, 0.406], [0.229, 0.224, 0.225]
BATCH = dict(batch_size=3, sampler_seed=5, width_multiple=4, pad_value=-1.0, gain=0.3, offset=0.2,
             seed=11, g=2)


def gray_samples():
    """Five gray line images of height 4 and widths 3, 7, 1, 5, 9 (pixels from a formula)."""
    out = []
    for i, w in enumerate([3, 7, 1, 5, 9]):
        y, x = np.mgrid[0:4, 0:w]
        image = ((37 * i + 11 * y + 29 * x) % 256).astype(np.uint8)
        target = [(i + k) % 8 + 1 for k in range(i % 4)]
        out.append((image, target, 10 + i, f"line{i}.png"))
    return out


def rgb_samples():
    out = []
    for i, w in enumerate([2, 6, 4]):
        y, x, c = np.mgrid[0:3, 0:w, 0:3]
        out.append((((53 * i + 7 * y + 31 * x + 101 * c) % 256).astype(np.uint8), [i + 1, 2], i))
    return out


def planar_sha(image, mean, std):
    """§6 (D15) in numpy float32: p * (1 / (255 * std)) - mean / std per channel."""
    channels = 1 if image.ndim == 2 else 3
    planar = image[None] if channels == 1 else np.moveaxis(image, 2, 0)
    m = np.broadcast_to(np.asarray(mean, np.float64).astype(np.float32), (channels,))
    s = np.broadcast_to(np.asarray(std, np.float64).astype(np.float32), (channels,))
    scale = (np.float32(1.0) / (np.float32(255.0) * s)).astype(np.float32)
    bias = (m / s).astype(np.float32)
    values = planar.astype(np.float32) * scale[:, None, None] - bias[:, None, None]
    return hashlib.sha256(np.ascontiguousarray(values, dtype="<f4").tobytes()).hexdigest()


def expectations(samples, mean, std):
    return [{"shape": [1 if s[0].ndim == 2 else 3, s[0].shape[0], s[0].shape[1]], "target": list(s[1]),
             "label": s[2], "key": s[3] if len(s) == 4 else None, "image_sha256": planar_sha(s[0], mean, std)}
            for s in samples]


def batch_sha(path, mean, std):
    import onemodel_cy as om
    ds = om.PackedImageDataset(path, mean, std)
    b = BATCH
    loader = om.DataLoader(ds, om.ShuffledSampler(len(ds), b["batch_size"], b["sampler_seed"]),
                           om.ImageBatchCollator(width_multiple=b["width_multiple"], pad_value=b["pad_value"],
                                                 augmentation=om.GainOffset(b["gain"], b["offset"])),
                           seed=b["seed"])
    batch = loader.batch_at(b["g"])
    return hashlib.sha256(np.asarray(batch.images).tobytes()).hexdigest(), np.asarray(batch.indices).tolist()


def main():
    import onemodel_cy as om
    gray, rgb = os.path.join(HERE, "tiny_gray8"), os.path.join(HERE, "tiny_rgb8")
    om.pack(gray_samples(), gray, vocabulary=VOCABULARY, progress=False, overwrite=True)
    om.pack(rgb_samples(), rgb, progress=False, overwrite=True)
    expected = {"batch": BATCH}
    for name, path, samples, mean, std in (("tiny_gray8", gray, gray_samples(), MEAN, STD),
                                           ("tiny_rgb8", rgb, rgb_samples(), RGB_MEAN, RGB_STD)):
        sha, indices = batch_sha(path, mean, std)
        expected[name] = {"mean": mean, "std": std, "samples": expectations(samples, mean, std),
                          "batch_images_sha256": sha, "batch_indices": indices}
    with open(os.path.join(HERE, "expected.json"), "w") as f:
        json.dump(expected, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
