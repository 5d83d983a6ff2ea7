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

``onemodel-cy show --augment`` (or :func:`save_augment`) draws a few lines as
``onemodel_cy.augment`` changes them instead: one row of the originals, rows of the preset
``text_lines()`` at a few steps, and a row for each operation of
:data:`AUGMENT_OPS` alone, at a low and a high magnitude (docs/augment.md). Line ``k``
of the row for step ``d`` is ``op.apply(line, SampleRng(derive(seed, 0, d, k, 0)))``:
the transform rng the loader gives slot ``k`` of step ``d`` in epoch 0 (D17). Every row
maps the pixels to gray through the same range, the originals' min..max, so a change of
brightness shows; see :func:`augment_figure_size` for the picture's size.
"""
from __future__ import annotations

import numpy as np

__all__ = ["render", "save", "save_steps", "figure_size", "PAD_COLORS", "AUGMENT_OPS", "augment_rows",
           "render_augment", "save_augment", "augment_figure_size", "BACKGROUND"]

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


def _gray_levels(images, widths, span=None):
    """The batch's pixels as uint8 [B, H, Wp, 3], scaled from ``span`` = (lo, hi), by default
    the min..max of the real pixels (clipped outside it)."""
    if span is None:
        span = _span(images[k, :, :, :w] for k, w in enumerate(widths))
    lo, hi = span
    scaled = np.clip((images - lo) / (hi - lo if hi > lo else 1.0), 0, 1)
    levels = (scaled * 255 + 0.5).astype(np.uint8)
    if images.shape[1] == 3:
        return levels.transpose(0, 2, 3, 1)                       # planar RGB to interleaved
    return np.repeat(levels[:, 0, :, :, None], 3, axis=3)       # gray: the first channel


def _span(images):
    """(min, max) of the pixels of ``images`` (arrays), (0, 1) when there are none."""
    real = np.concatenate([np.asarray(image).reshape(-1) for image in images])
    return (float(real.min()), float(real.max())) if real.size else (0.0, 1.0)


def _zoomed(levels, zoom):
    """An [H, W, 3] block with each pixel repeated ``zoom`` times down and across."""
    return np.repeat(np.repeat(levels, zoom, axis=0), zoom, axis=1)


def _with_texts(canvas, texts):
    """The canvas as a ``PIL.Image`` in RGB with ``texts`` = [((x, y), text), ...] written in black."""
    Image, ImageDraw = _pillow()
    picture = Image.fromarray(canvas, "RGB")
    draw = ImageDraw.Draw(picture)
    for position, text in texts:
        draw.multiline_text(position, text, fill=(0, 0, 0), spacing=1)
    return picture


def _hatch(height, width, top, left):
    """A block of the padding hatch, its stripes aligned to the figure's coordinates."""
    y, x = np.mgrid[top:top + height, left:left + width]
    stripe = ((x + y) // HATCH) % 2
    return np.where(stripe[..., None] == 0, np.array(PAD_COLORS[0], np.uint8), np.array(PAD_COLORS[1], np.uint8))


def _target_text(target, vocabulary):
    """The target as text through the ``Vocabulary`` codec (an id that is no symbol, the
    blank included, as ``<id>``), or its ids as numbers without a vocabulary."""
    if vocabulary is None:
        return " ".join(str(t) for t in target)
    from onemodel_cy.data.vocabulary import Vocabulary
    return Vocabulary(vocabulary).decode(target, strict=False)


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
        block = _zoomed(levels[k], zoom)
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
    vocabulary : Vocabulary, str or sequence of str, optional
        A dataset's ``vocabulary`` (or anything ``Vocabulary`` takes): ``vocabulary[t]`` is the
        symbol of target id ``t``, 0 the blank; without one the target ids are written as numbers.
    zoom : int, default 3
        Figure pixels per image pixel.
    key : callable, optional
        ``key(index)``: a sample's name (a pack's ``key``, its file name), written beside
        its index; None (or a key that returns None) writes none.
    """
    _pillow()
    batches = list(batches)
    if not batches:
        raise ValueError("render needs at least one batch, received none")
    _check_int(zoom, "zoom", 1, 32)
    if vocabulary is not None:      # checked once, before anything is drawn
        from onemodel_cy.data.vocabulary import Vocabulary
        vocabulary = Vocabulary(vocabulary)
    width, height = figure_size([np.asarray(b.images).shape for b in batches], zoom)
    canvas = np.full((height, width, 3), 255, dtype=np.uint8)
    texts, top = [], MARGIN
    for batch in batches:
        top = _draw_batch(canvas, texts, batch, top, zoom, vocabulary, key)
    return _with_texts(canvas, texts)


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


# --- pictures of augmentations (``onemodel-cy show --augment``) ---------------------------

#: The colour of a cell past its image (a row's image narrower or lower than its column): never gray.
BACKGROUND = (214, 230, 255)
LABEL_WIDTH = 210   # the label column of the augmentation picture
MAX_LINES = 64
MAX_STEPS = 64


def _augment_ops():
    from onemodel_cy import augment as A
    low_affine, high_affine = A.Affine(1, 0.1, 1, 0.5), A.Affine(4, 0.6, (0.9, 1.05), 2)
    return (
        ("Stretch(0.8)", A.Stretch(0.8)),
        ("Stretch(1.2)", A.Stretch(1.2)),
        ("Affine(rotate=1, shear=0.1, scale=1, shift=0.5)", low_affine),
        ("Affine(rotate=4, shear=0.6, scale=(0.9, 1.05), shift=2)", high_affine),
        ("Elastic(magnitude=1)", A.Elastic(1)),
        ("Elastic(magnitude=2.5)", A.Elastic(2.5)),
        ("Perspective(jitter=0.04)", A.Perspective(0.04)),
        ("Perspective(jitter=0.12)", A.Perspective(0.12)),
        ("Erode(2)", A.Erode(2)),
        ("Erode(3)", A.Erode(3)),
        ("Dilate(2)", A.Dilate(2)),
        ("Dilate(3)", A.Dilate(3)),
        ("GaussianBlur(sigma=0.3)", A.GaussianBlur(0.3)),
        ("GaussianBlur(sigma=1.0)", A.GaussianBlur(1.0)),
        ("BrightnessContrast(gain=0.7, offset=-0.3)", A.BrightnessContrast(0.7, -0.3)),
        ("BrightnessContrast(gain=1.3, offset=0.3)", A.BrightnessContrast(1.3, 0.3)),
        ("GaussianNoise(sigma=0.05)", A.GaussianNoise(0.05)),
        ("GaussianNoise(sigma=0.15)", A.GaussianNoise(0.15)),
        ("SpeckleNoise(sigma=0.1)", A.SpeckleNoise(0.1)),
        ("SpeckleNoise(sigma=0.3)", A.SpeckleNoise(0.3)),
        ("ImpulseNoise(amount=0.01)", A.ImpulseNoise(0.01)),
        ("ImpulseNoise(amount=0.05)", A.ImpulseNoise(0.05)),
        ("Invert()", A.Invert()),
    )


#: The operation rows :func:`render_augment` draws by default: ``(label, op)``, each label the
#: call that builds its op (a single number ``x`` is the range ``(x, x)``; a half-width ``r``
#: still draws ``U(±r)``).
AUGMENT_OPS = _augment_ops()


def _check_lines(lines):
    lines = list(lines)
    if not 1 <= len(lines) <= MAX_LINES:
        raise ValueError(f"lines must hold 1 to {MAX_LINES} images, received {len(lines)}")
    for k, line in enumerate(lines):
        if not (isinstance(line, np.ndarray) and line.dtype == np.float32 and line.ndim == 3
                and min(line.shape) >= 1):
            shown = (f"{line.dtype} array of shape {line.shape}" if isinstance(line, np.ndarray)
                     else type(line).__name__)
            raise TypeError(f"lines[{k}] must be a float32 [C, H, W] array (every dimension >= 1), "
                            f"received {shown}")
    return [np.ascontiguousarray(line) for line in lines]


def _check_ops(ops):
    from onemodel_cy.augment import Transform
    ops = list(AUGMENT_OPS if ops is None else ops)
    for k, entry in enumerate(ops):
        if not (isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[0], str)
                and isinstance(entry[1], Transform)):
            raise TypeError(f"ops[{k}] must be a pair (label, op) of a str and an onemodel_cy.augment "
                            f"operation, received {entry!r}")
    return ops


def augment_rows(lines, ops=None, seed=0, first_step=0, steps=3):
    """The rows of the augmentation picture, as data: a list of ``(label, images)``.

    Row 0 is ``("original", lines)``; then ``steps`` rows of the preset
    ``onemodel_cy.augment.text_lines()`` at steps ``first_step .. first_step + steps - 1``;
    then one row per ``(label, op)`` of ``ops`` (default :data:`AUGMENT_OPS`) at step
    ``first_step``. Image ``k`` of a row at step ``d`` is
    ``op.apply(lines[k], SampleRng(derive(seed, 0, d, k, 0)))``: the transform rng (stream
    0, D17) of slot ``k`` at step ``d`` of epoch 0.

    Parameters
    ----------
    lines : sequence of numpy.ndarray
        1 to 64 float32 ``[C, H, W]`` images (pixels in [0, 1] suit the default operations).
    ops : sequence of (str, Transform), optional
    seed : int
        The loader seed of the rngs (reduced mod 2**64, D3).
    first_step, steps : int
        The first step and how many rows of the preset (0 to 64; 0 draws none).
    """
    from onemodel_cy.augment import text_lines
    from onemodel_cy.core.rng import STREAM_TRANSFORM, SampleRng, derive

    lines = _check_lines(lines)
    ops = _check_ops(ops)
    _check_int(seed, "seed", -(1 << 63), (1 << 64) - 1)
    _check_int(first_step, "first_step", 0, (1 << 64) - 1 - MAX_STEPS)
    _check_int(steps, "steps", 0, MAX_STEPS)

    def row(op, step):
        return [op.apply(line, SampleRng(derive(seed, 0, step, k, STREAM_TRANSFORM))) for k, line in enumerate(lines)]

    preset = text_lines()
    rows = [("original", lines)]
    rows += [(f"text_lines(), step {d}", row(preset, d)) for d in range(first_step, first_step + steps)]
    rows += [(label, row(op, first_step)) for label, op in ops]
    return rows


def _columns(rows):
    """The width of each line's column (its widest image over the rows) and each row's height."""
    count = len(rows[0][1])
    columns = [max(images[k].shape[2] for _, images in rows) for k in range(count)]
    heights = [max(image.shape[1] for image in images) for _, images in rows]
    return columns, heights


def augment_figure_size(rows, zoom):
    """(width, height) of :func:`render_augment`'s picture of ``rows`` (:func:`augment_rows`'s answer)."""
    columns, heights = _columns(rows)
    width = MARGIN + LABEL_WIDTH + sum(c * zoom + MARGIN for c in columns)
    height = MARGIN + TITLE_HEIGHT + sum(max(h * zoom, LINE_HEIGHT) + ROW_GAP for h in heights)
    return width, height + MARGIN


def _label_text(label):
    """A label on two lines: the operation's name, then its arguments."""
    name, paren, rest = label.partition("(")
    return f"{name}\n({rest}" if paren and label.endswith(")") and rest != ")" else label


def render_augment(lines, ops=None, seed=0, first_step=0, steps=3, zoom=2, title=None):
    """One picture (a ``PIL.Image`` in RGB) of :func:`augment_rows`'s rows: each row's label,
    then its images side by side, line ``k`` in column ``k`` (as wide as the widest image
    of that line in any row; the rest of a cell is :data:`BACKGROUND`). Every image is
    mapped to gray through the originals' min..max (clipped), so that brightness changes
    show; three-channel images are drawn in colour. ``title`` (default: the data's
    description) heads the picture."""
    _pillow()
    _check_int(zoom, "zoom", 1, 32)
    rows = augment_rows(lines, ops, seed, first_step, steps)
    span = _span(rows[0][1])
    width, height = augment_figure_size(rows, zoom)
    columns, heights = _columns(rows)
    canvas = np.full((height, width, 3), 255, dtype=np.uint8)
    lo, hi = span
    texts = [((MARGIN, MARGIN + 2), (title or f"{len(rows[0][1])} lines") +
              f"; line k at step d: op.apply(line, SampleRng(derive({seed}, 0, d, k, 0))); "
              f"gray: {lo:.3g} black .. {hi:.3g} white")]
    top = MARGIN + TITLE_HEIGHT
    for (label, images), h in zip(rows, heights):
        texts.append(((MARGIN, top), _label_text(label)))
        left = MARGIN + LABEL_WIDTH
        for image, column in zip(images, columns):
            canvas[top:top + h * zoom, left:left + column * zoom] = BACKGROUND
            _, ih, iw = image.shape
            levels = _gray_levels(image[None], [iw], span)[0]
            canvas[top:top + ih * zoom, left:left + iw * zoom] = _zoomed(levels, zoom)
            left += column * zoom + MARGIN
        top += max(h * zoom, LINE_HEIGHT) + ROW_GAP
    return _with_texts(canvas, texts)


def save_augment(lines, path, ops=None, seed=0, first_step=0, steps=3, zoom=2, title=None):
    """Write :func:`render_augment`'s picture to ``path`` as PNG; returns its (width, height)."""
    picture = render_augment(lines, ops, seed, first_step, steps, zoom, title)
    picture.save(path, format="PNG", optimize=True)
    return picture.size
