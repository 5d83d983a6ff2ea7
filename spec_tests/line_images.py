"""Folders of line images for the pack tests: what ``pack`` and ``pack_sharded`` read."""
from __future__ import annotations

import numpy as np
from PIL import Image


def random_png_lines(root, count: int, seed: int, widths, heights, alphabet: str) -> list:
    """``count`` gray PNGs of random sizes (``widths`` and ``heights`` as [low, high)),
    ``00.png``, ``01.png``, ... in the folder ``root``, and the labels file lines naming
    them, ``"NN.png<TAB>text"``, each text 1-8 symbols of ``alphabet``."""
    rng = np.random.default_rng(seed)
    lines = []
    for i in range(count):
        w, h = int(rng.integers(*widths)), int(rng.integers(*heights))
        Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L").save(root / f"{i:02d}.png")
        lines.append(f"{i:02d}.png\t{''.join(rng.choice(list(alphabet), int(rng.integers(1, 9))))}")
    return lines
