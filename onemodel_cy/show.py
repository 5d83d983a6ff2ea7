"""Pictures of batches: each image with its padding marked, its width, target, label and index.

``onemodel-cy show`` (or :func:`save_steps`) renders the batches of global steps
``g .. g+k-1`` to one PNG, with Pillow (``pip install pillow``, or the ``show`` extra in a checkout). Each batch
gets a title line (global step, epoch, step in the epoch, padded width); each sample one
row: its image in gray (or RGB for three channels), scaled by ``zoom``, the columns past
its real width hatched in magenta — the padding the collator added (§4, D13) — and beside
it the slot, the dataset index (and the sample's key, a pack's file name, when the
dataset has keys), the width, the label and the target, written as text through the
dataset's ``vocabulary`` when it has one (``data/vocabulary.py``: id 0 is the blank).

The layout has fixed sizes (below) so that a picture's size is known in advance: see
:func:`figure_size`.
"""
from __future__ import annotations

import numpy as np

__all__ = ["render", "save", "save_steps", "figure_size", "PAD_COLORS"]

#: The two colours of the padding's diagonal hatch (never gray: no image pixel has them).
PAD_COLORS = ((255, 0, 255), (150, 0, 150))
MARGIN = 8          # around the figure, and between the image column and the text
TITLE_HEIGHT = 18   # the title line of each batch
ROW_GAP = 4         # between two sample rows
TEXT_WIDTH = 420    # the text column
LINE_HEIGHT = 26    # a row is at least two text lines high
HATCH = 4           # width of a hatch stripe, in figure pixels


def _pillow():
    try:
        from PIL import Image, ImageDraw
    except ImportError:
        raise ImportError("onemodel_cy.show needs Pillow: pip install pillow "
                          "(in a checkout: pip install -e '.[show]')") from None
    return Image, ImageDraw


def _check_int(value, name, lo, hi):
    """The exception rule: TypeError for a non-integer, ValueError outside [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an integer, received {value!r}")
    if not lo <= value <= hi:
        raise ValueError(f"{name} must lie in [{lo}, {hi}], received {value!r}")


def figure_size(shapes, zoom):
    """(width, height) of the picture of batches whose images are ``shapes`` = [(B, C, H, Wp), ...]."""
    widest = max(wp for _, _, _, wp in shapes) * zoom
    height = MARGIN
    for b, _, h, _ in shapes:
        height += TITLE_HEIGHT + b * (max(h * zoom, LINE_HEIGHT) + ROW_GAP)
    return MARGIN + widest + MARGIN + TEXT_WIDTH + MARGIN, height + MARGIN


def _gray_levels(images, widths):
    """The batch's pixels as uint8 [B, H, Wp, 3], scaled from the min..max of the real pixels."""
    real = np.concatenate([images[k, :, :, :w].reshape(-1) for k, w in enumerate(widths)])
    lo, hi = (float(real.min()), float(real.max())) if real.size else (0.0, 1.0)
    scaled = np.clip((images - lo) / (hi - lo if hi > lo else 1.0), 0, 1)
    levels = (scaled * 255 + 0.5).astype(np.uint8)
    if images.shape[1] == 3:
        return levels.transpose(0, 2, 3, 1)                       # planar RGB to interleaved
    return np.repeat(levels[:, 0, :, :, None], 3, axis=3)       # gray: the first channel


def _hatch(height, width, top, left):
    """A block of the padding hatch, its stripes aligned to the figure's coordinates."""
    y, x = np.mgrid[top:top + height, left:left + width]
    stripe = ((x + y) // HATCH) % 2
    return np.where(stripe[..., None] == 0, np.array(PAD_COLORS[0], np.uint8), np.array(PAD_COLORS[1], np.uint8))


def _target_text(target, vocabulary):
    """The target as text (an id that is no symbol, the blank included, as ``<id>``), or
    its ids as numbers without a vocabulary."""
    if vocabulary is None:
        return " ".join(str(t) for t in target)
    return "".join(vocabulary[t] if 0 < t < len(vocabulary) else f"<{t}>" for t in target)


def _draw_batch(canvas, texts, batch, top, zoom, vocabulary, key):
    """Paste one batch's rows into ``canvas`` from row ``top``; queue its texts; return the next top."""
    images, widths = np.asarray(batch.images), np.asarray(batch.widths)
    targets, lengths = np.asarray(batch.targets), np.asarray(batch.target_lengths)
    b, _, h, wp = images.shape
    texts.append(((MARGIN, top + 2), f"global step {batch.global_step} (epoch {batch.epoch}, step {batch.step}): "
                                     f"{b} images, padded to width {wp}"))
    top += TITLE_HEIGHT
    levels = _gray_levels(images, widths)
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    text_left = canvas.shape[1] - MARGIN - TEXT_WIDTH
    for k in range(b):
        block = np.repeat(np.repeat(levels[k], zoom, axis=0), zoom, axis=1)
        w = int(widths[k]) * zoom
        canvas[top:top + h * zoom, MARGIN:MARGIN + w] = block[:, :w]
        canvas[top:top + h * zoom, MARGIN + w:MARGIN + wp * zoom] = _hatch(h * zoom, wp * zoom - w, top, MARGIN + w)
        target = targets[offsets[k]:offsets[k + 1]].tolist()
        index = int(batch.indices[k])
        name = None if key is None else key(index)
        texts.append(((text_left, top), f"slot {k}  index {index}{'' if name is None else f'  {name}'}  width "
                                        f"{int(widths[k])}  label {int(batch.labels[k])}\n"
                                        f"target {_target_text(target, vocabulary)!r}"))
        top += max(h * zoom, LINE_HEIGHT) + ROW_GAP
    return top


def render(batches, vocabulary=None, zoom=3, key=None):
    """One picture (a ``PIL.Image`` in RGB) of ``batches`` (``ImageBatch``es, still open).

    Parameters
    ----------
    batches : sequence of ImageBatch
    vocabulary : sequence of str, optional
        A dataset's ``vocabulary``: ``vocabulary[t]`` is the symbol of target id ``t``, 0 the
        blank; without one the target ids are written as numbers.
    zoom : int, default 3
        Figure pixels per image pixel.
    key : callable, optional
        ``key(index)``: a sample's name (a pack's ``key``, its file name), written beside
        its index; None (or a key that returns None) writes none.
    """
    Image, ImageDraw = _pillow()
    batches = list(batches)
    if not batches:
        raise ValueError("render needs at least one batch, received none")
    _check_int(zoom, "zoom", 1, 32)
    width, height = figure_size([np.asarray(b.images).shape for b in batches], zoom)
    canvas = np.full((height, width, 3), 255, dtype=np.uint8)
    texts, top = [], MARGIN
    for batch in batches:
        top = _draw_batch(canvas, texts, batch, top, zoom, vocabulary, key)
    picture = Image.fromarray(canvas, "RGB")
    draw = ImageDraw.Draw(picture)
    for position, text in texts:
        draw.multiline_text(position, text, fill=(0, 0, 0), spacing=1)
    return picture


def save(batches, path, vocabulary=None, zoom=3, key=None):
    """Write :func:`render`'s picture of ``batches`` to ``path`` as PNG; returns its (width, height)."""
    picture = render(batches, vocabulary, zoom, key)
    picture.save(path, format="PNG")
    return picture.size


def save_steps(loader, start_g, steps, path, zoom=3):
    """Picture of the loader's batches at global steps ``start_g .. start_g + steps - 1``,
    written to ``path`` (the dataset's ``vocabulary`` and ``key`` are used when it has them)."""
    _check_int(steps, "steps", 1, 1 << 20)
    batches = [loader.batch_at(g) for g in range(start_g, start_g + steps)]
    try:
        dataset = loader.dataset
        return save(batches, path, getattr(dataset, "vocabulary", None), zoom, getattr(dataset, "key", None))
    finally:
        for batch in batches:
            batch.close()
