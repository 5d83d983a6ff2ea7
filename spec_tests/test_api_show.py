"""Concern: pictures of batches (issue 10 item 5): ``onemodel-cy show`` and ``onemodel_cy.show``.

The picture of a batch must show what §4 made of it: each image at its real width, and
the columns up to the padded width (D13) marked as padding, never confused with pixels;
beside it the sample's slot, index, width, label and target (through the dataset's
vocabulary). The tests read the PNG back and check its size and its pixels.
"""
from __future__ import annotations

import numpy as np
import pytest
try:
    from PIL import Image
except ImportError as exc:  # loud on purpose: these tests must run in CI (the test extra has pillow)
    raise ImportError("spec_tests/test_api_show.py needs Pillow; install the test extras with "
                      "`pip install -e '.[test,torch]'`") from exc

import onemodel_cy as om
from onemodel_cy import show
from onemodel_cy.cli import main

PAD = {tuple(c) for c in show.PAD_COLORS}


def _loader(dataset, batch_size=5, width_multiple=8):
    sampler = om.ShuffledSampler(len(dataset), batch_size, seed=3)
    return om.DataLoader(dataset, sampler, om.ImageBatchCollator(width_multiple=width_multiple), seed=3)


def _rows(batches, zoom):
    """Top row of every sample's image, recomputed from the layout constants: (batch, slot, top)."""
    top, out = show.MARGIN, []
    for b in batches:
        n, _, h, _ = b.images.shape
        top += show.TITLE_HEIGHT
        for k in range(n):
            out.append((b, k, top))
            top += max(h * zoom, show.LINE_HEIGHT) + show.ROW_GAP
    return out


def _check_picture(picture, batches, zoom):
    """Every image region is gray (R = G = B, never a padding colour), every padding region
    is the hatch and nothing else, and each row has text beside it."""
    pixels = np.asarray(picture.convert("RGB"))
    widest = max(b.images.shape[3] for b in batches)
    assert picture.size == (show.MARGIN * 3 + widest * zoom + show.TEXT_WIDTH,
                            show.MARGIN * 2 + sum(show.TITLE_HEIGHT + b.images.shape[0] * (
                                max(b.images.shape[2] * zoom, show.LINE_HEIGHT) + show.ROW_GAP) for b in batches))
    padded_columns = 0
    for b, k, top in _rows(batches, zoom):
        h, wp, w = b.images.shape[2], b.images.shape[3], int(b.widths[k])
        image = pixels[top:top + h * zoom, show.MARGIN:show.MARGIN + w * zoom]
        assert np.all(image[..., 0] == image[..., 1]) and np.all(image[..., 1] == image[..., 2])
        pad = pixels[top:top + h * zoom, show.MARGIN + w * zoom:show.MARGIN + wp * zoom].reshape(-1, 3)
        assert {tuple(p) for p in pad.tolist()} <= PAD
        if w < wp:
            assert {tuple(p) for p in pad.tolist()} == PAD      # both stripes: visibly hatched
            padded_columns += wp - w
        text = pixels[top:top + show.LINE_HEIGHT, -show.MARGIN - show.TEXT_WIDTH:-show.MARGIN]
        assert (text < 128).any(), "no text beside the row"
    return padded_columns


def test_picture_of_steps_marks_padding_and_has_the_expected_size(tmp_path):
    """Concern: pictures of batches (§4 D13). The PNG of steps 2..3 of a SyntheticTextLines
    pipeline has the size the layout defines; the padding of every image, and only the
    padding, is the magenta hatch; the pictured pixels are the batch's, in gray."""
    ds = om.SyntheticTextLines(40, seed=1)
    loader = _loader(ds)
    path = tmp_path / "steps.png"
    size = show.save_steps(loader, 2, 2, path, zoom=2)
    picture = Image.open(path)
    assert picture.format == "PNG" and picture.size == size
    batches = [loader.batch_at(2), loader.batch_at(3)]
    assert _check_picture(picture, batches, 2) > 0
    # The gray levels follow the pixels: the brightest pixel of the first image is white-ish.
    b, k, top = _rows(batches, 2)[0]
    region = np.asarray(picture.convert("L"))[top:top + 2 * b.images.shape[2],
                                              show.MARGIN:show.MARGIN + 2 * int(b.widths[k])]
    brightest = np.unravel_index(np.argmax(b.images[k, 0, :, :b.widths[k]]), (b.images.shape[2], int(b.widths[k])))
    assert region[brightest[0] * 2, brightest[1] * 2] > 200


def test_target_goes_through_the_vocabulary():
    """Concern: pictures of batches. The target is written through the dataset's vocabulary
    (SyntheticTextLines: its glyphs), as numbers without one, and an id the vocabulary
    lacks is shown as <id> rather than failing."""
    ds = om.SyntheticTextLines(3, num_symbols=16)
    s = ds[0]
    assert show._target_text(s.target.tolist(), ds.vocabulary) == "".join("0123456789ABCDEF"[t - 1] for t in s.target)
    assert show._target_text([3, 17], None) == "3 17"
    assert show._target_text([1, 40], ds.vocabulary) == "0<40>"


def test_cli_show_writes_the_png(tmp_path, capsys):
    """Concern: pictures of batches, the command. ``onemodel-cy show`` writes a PNG of one
    batch or of several steps, for either built-in dataset, and says where."""
    out = tmp_path / "batch.png"
    assert main(["show", "--out", str(out), "--steps", "2", "--batch-size", "4", "--count", "64"]) == 0
    assert "wrote" in capsys.readouterr().out
    loader = _loader(om.SyntheticTextLines(64, seed=0), batch_size=4)
    # The command's pipeline: shuffled with the seed, width multiple 8.
    loader = om.DataLoader(loader.dataset, om.ShuffledSampler(64, 4, seed=0), om.ImageBatchCollator(width_multiple=8),
                           seed=0)
    assert _check_picture(Image.open(out), [loader.batch_at(0), loader.batch_at(1)], 3) > 0
    lines = tmp_path / "lines.png"
    assert main(["show", "--dataset", "lines", "--out", str(lines), "--zoom", "1", "--count", "16"]) == 0
    assert Image.open(lines).format == "PNG"


def test_three_channel_images_and_a_batch_without_padding(tmp_path):
    """Concern: pictures of batches. RGB images (three planar channels) are shown in colour;
    a batch whose images all have the padded width shows no hatch."""
    images = [np.zeros((3, 4, 8), np.float32), np.ones((3, 4, 8), np.float32)]
    images[0][0] = 1.0                       # pure red
    ds = om.ArrayImageDataset(images, [[1], [2]], [0, 1])
    batch = om.ImageBatchCollator().collate([ds[0], ds[1]], [0, 1], 0, 0, 0)
    picture = np.asarray(show.render([batch], zoom=2))
    top = show.MARGIN + show.TITLE_HEIGHT
    assert tuple(picture[top, show.MARGIN]) == (255, 0, 0)
    assert not any(tuple(p) in PAD for p in picture.reshape(-1, 3).tolist())


def test_refusals():
    """Concern: pictures of batches, the exception rule: no batch, a zoom outside [1, 32] or
    steps < 1 is a ValueError, a zoom that is not an integer a TypeError, each naming what
    was received; the command refuses the same through argparse (exit status 2)."""
    loader = _loader(om.SyntheticTextLines(10))
    with pytest.raises(ValueError, match="at least one batch"):
        show.render([])
    with pytest.raises(ValueError, match="zoom"):
        show.render([loader.batch_at(0)], zoom=0)
    with pytest.raises(TypeError, match="zoom"):
        show.render([loader.batch_at(0)], zoom=2.0)
    with pytest.raises(ValueError, match="steps"):
        show.save_steps(loader, 0, 0, "unused.png")
    for argv in (["--steps", "0"], ["--g", "-1"], ["--zoom", "0"], ["--batch-size", "9", "--count", "8"]):
        with pytest.raises(SystemExit) as exit_info:
            main(["show", "--out", "unused.png", *argv])
        assert exit_info.value.code == 2


# --- show --augment: lines before and after onemodel_cy.augment (issue 35 item 4) ---------

from onemodel_cy import augment  # noqa: E402
from onemodel_cy.cli.show import AUGMENT_TEXTLINES  # noqa: E402

EVERY_OPERATION = {"Stretch", "Affine", "Elastic", "Perspective", "Erode", "Dilate", "GaussianBlur",
                   "BrightnessContrast", "GaussianNoise", "SpeckleNoise", "ImpulseNoise", "Invert"}


def _lines(count=3, seed=0):
    dataset = om.SyntheticTextLines(256, seed=seed, **AUGMENT_TEXTLINES)
    return [dataset.get_sample(k).image for k in range(count)]


def _levels(image, span):
    """The gray levels the picture must show for ``image``: ``span`` mapped to 0..255, clipped."""
    lo, hi = span
    return (np.clip((image[0] - lo) / (hi - lo), 0, 1) * 255 + 0.5).astype(np.uint8)


def test_augment_rows_are_each_op_applied_with_the_transform_rng_of_its_slot():
    """Concern: pictures of augmentations (contract, "Text-line augmentations"; D17). Row
    "original" is the lines unchanged; the preset's rows at steps d = 2, 3 and each
    operation's row (at step 2) hold ``op.apply(line k, SampleRng(derive(seed, 0, d, k, 0)))``,
    byte for byte; the preset's rows are what a loader with ``transform=text_lines()`` gives
    slot k at step d of epoch 0."""
    lines = _lines(3)
    before = [line.copy() for line in lines]
    rows = show.augment_rows(lines, seed=5, first_step=2, steps=2)
    assert [label for label, _ in rows] == (["original", "text_lines(), step 2", "text_lines(), step 3"]
                                            + [label for label, _ in show.AUGMENT_OPS])
    assert all(np.array_equal(a, b) for a, b in zip(lines, before)), "the lines were edited"
    assert all(np.array_equal(a, b) for a, b in zip(rows[0][1], before))
    ops = [(augment.text_lines(), 2), (augment.text_lines(), 3)] + [(op, 2) for _, op in show.AUGMENT_OPS]
    for (label, images), (op, step) in zip(rows[1:], ops):
        assert len(images) == 3
        for k, image in enumerate(images):
            expected = op.apply(before[k], om.SampleRng(om.derive(5, 0, step, k, om.STREAM_TRANSFORM)))
            assert image.dtype == np.float32 and image.tobytes() == expected.tobytes(), (label, k)
    # The widths change by operation (Stretch 0.8 narrows, Stretch 1.2 widens, Affine grows).
    widths = {label: [image.shape[2] for image in images] for label, images in rows}
    assert all(w < o for w, o in zip(widths["Stretch(0.8)"], widths["original"]))
    assert all(w > o for w, o in zip(widths["Stretch(1.2)"], widths["original"]))
    # The preset's rows are the loader's transform at steps 2 and 3 of epoch 0: a loader over
    # the three lines four times, in order, three a batch, has line k in slot k of every step.
    dataset = om.ArrayImageDataset(before * 4, [[1]] * 12, [0] * 12)
    loader = om.DataLoader(dataset, om.SequentialSampler(12, 3), om.ImageBatchCollator(), seed=5,
                           transform=augment.text_lines())
    for step, (_, images) in zip((2, 3), rows[1:3]):
        with loader.batch_at(step) as batch:
            assert (batch.epoch, batch.step) == (0, step)
            for k in range(3):
                assert batch.widths[k] == images[k].shape[2]
                assert batch.images[k, :, :, :batch.widths[k]].tobytes() == images[k].tobytes(), (step, k)
    loader.close()


def test_augment_ops_cover_every_operation_and_their_labels_build_them():
    """Concern: pictures of augmentations. The default rows show every operation of the
    preset and the other photometric ones, each but Invert at two magnitudes, and each
    label is the call that builds its row's operation."""
    names = [type(op).__name__ for _, op in show.AUGMENT_OPS]
    assert set(names) == EVERY_OPERATION
    assert all(names.count(name) == 2 for name in EVERY_OPERATION - {"Invert"})
    labels = [label for label, _ in show.AUGMENT_OPS]
    assert len(set(labels)) == len(labels)
    for label, op in show.AUGMENT_OPS:
        assert eval(label, dict(vars(augment))) == op, label      # noqa: S307 (our own labels)


def test_augment_picture_shows_each_row_at_its_width_through_one_gray_scale(tmp_path):
    """Concern: pictures of augmentations. The picture has the size of its layout; every
    cell shows its row's image (zoomed, mapped to gray through the originals' min..max,
    so a brightness change shows), the rest of the cell is the background colour, and
    every row has its label."""
    lines = _lines(2)
    ops = [("Stretch(1.2)", augment.Stretch(1.2)), ("Stretch(0.8)", augment.Stretch(0.8)),
           ("BrightnessContrast(gain=0.7, offset=-0.3)", augment.BrightnessContrast(0.7, -0.3))]
    zoom = 2
    picture = show.render_augment(lines, ops, seed=1, steps=1, zoom=zoom)
    rows = show.augment_rows(lines, ops, seed=1, steps=1)
    assert picture.size == show.augment_figure_size(rows, zoom)
    pixels = np.asarray(picture.convert("RGB"))
    span = (min(float(line.min()) for line in lines), max(float(line.max()) for line in lines))
    columns = [max(images[k].shape[2] for _, images in rows) for k in range(2)]
    top = show.MARGIN + show.TITLE_HEIGHT
    for label, images in rows:
        h = max(image.shape[1] for image in images)
        assert (pixels[top:top + show.LINE_HEIGHT, show.MARGIN:show.MARGIN + show.LABEL_WIDTH] < 128).any(), label
        left = show.MARGIN + show.LABEL_WIDTH
        for image, column in zip(images, columns):
            ih, iw = image.shape[1:]
            cell = pixels[top:top + h * zoom, left:left + column * zoom]
            shown = cell[:ih * zoom, :iw * zoom]
            expected = np.repeat(np.repeat(_levels(image, span), zoom, axis=0), zoom, axis=1)
            assert np.array_equal(shown, np.repeat(expected[..., None], 3, axis=2)), label
            rest = cell[:, iw * zoom:].reshape(-1, 3)
            assert {tuple(p) for p in rest.tolist()} <= {show.BACKGROUND}
            assert (rest.size > 0) == (iw < column)
            left += column * zoom + show.MARGIN
        top += max(h * zoom, show.LINE_HEIGHT) + show.ROW_GAP
    # The darker row is darker in the picture (no per-row rescaling hides it).
    darker = show.augment_rows(lines, ops, seed=1, steps=1)[-1][1][0]
    assert _levels(darker, span).mean() < _levels(lines[0], span).mean()
    path = tmp_path / "a.png"
    assert show.save_augment(lines, path, ops, seed=1, steps=1, zoom=zoom) == picture.size
    assert np.array_equal(np.asarray(Image.open(path).convert("RGB")), pixels)


def test_cli_show_augment_writes_the_same_png_every_time(tmp_path, capsys):
    """Concern: pictures of augmentations, the command. ``show --augment`` writes a PNG of
    the layout's size for the first lines of the data, the same bytes on every run, other
    bytes for another seed; it reads a pack too."""
    out, again, other = tmp_path / "a.png", tmp_path / "b.png", tmp_path / "c.png"
    assert main(["show", "--augment", "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    rows = show.augment_rows(_lines(3), seed=0, first_step=0, steps=3)
    assert Image.open(out).format == "PNG" and Image.open(out).size == show.augment_figure_size(rows, 2)
    assert main(["show", "--augment", "--out", str(again)]) == 0
    assert out.read_bytes() == again.read_bytes()
    assert main(["show", "--augment", "--out", str(other), "--seed", "1", "--lines", "2", "--steps", "1",
                 "--g", "4", "--zoom", "1"]) == 0
    rows = show.augment_rows(_lines(2, seed=1), seed=1, first_step=4, steps=1)
    assert Image.open(other).size == show.augment_figure_size(rows, 1)
    assert [label for label, _ in rows][:2] == ["original", "text_lines(), step 4"]
    items = [((np.arange(12 * (20 + k)).reshape(12, 20 + k) % 251).astype(np.uint8), [1], 0) for k in range(2)]
    pack = om.pack(items, str(tmp_path / "p"), progress=False).path
    packed = tmp_path / "pack.png"
    assert main(["show", "--augment", "--pack", pack, "--lines", "2", "--out", str(packed)]) == 0
    dataset = om.PackedImageDataset(pack, 0.0, 1.0)
    rows = show.augment_rows([dataset.get_sample(k).image for k in range(2)])
    assert Image.open(packed).size == show.augment_figure_size(rows, 2)
    capsys.readouterr()
    assert main(["show", "--augment", "--pack", pack, "--lines", "3", "--out", str(packed)]) == 2
    assert "2 samples, fewer than --lines 3" in capsys.readouterr().err


def test_augment_refusals(tmp_path, capsys):
    """Concern: pictures of augmentations, the exception rule: no lines, a line that is not
    a float32 [C, H, W] array, an op that is not a built-in pair (label, op), steps or a
    zoom out of range are refused naming the argument; the command refuses the batch
    options with --augment, --lines without it, and counts out of range (exit status 2)."""
    lines = _lines(1)
    with pytest.raises(ValueError, match="lines must hold 1 to 64"):
        show.augment_rows([])
    with pytest.raises(TypeError, match=r"lines\[0\] must be a float32 \[C, H, W\] array"):
        show.augment_rows([lines[0].astype(np.float64)])
    with pytest.raises(TypeError, match=r"lines\[0\]"):
        show.augment_rows([lines[0][0]])
    with pytest.raises(TypeError, match=r"ops\[0\] must be a pair"):
        show.augment_rows(lines, ops=[("blur", lambda image, rng: image)])
    with pytest.raises(TypeError, match=r"ops\[0\]"):
        show.augment_rows(lines, ops=[augment.Invert()])
    with pytest.raises(ValueError, match="steps"):
        show.augment_rows(lines, steps=65)
    with pytest.raises(ValueError, match="first_step"):
        show.augment_rows(lines, first_step=-1)
    with pytest.raises(ValueError, match="zoom"):
        show.render_augment(lines, zoom=0)
    with pytest.raises(TypeError, match="zoom"):
        show.render_augment(lines, zoom=1.5)
    out = str(tmp_path / "unused.png")
    for argv, message in ((["--augment", "--batch-size", "4"], "--batch-size does not apply"),
                          (["--augment", "--width-multiple", "4", "--batch-size", "2"],
                           "--batch-size and --width-multiple do not apply"),
                          (["--lines", "2"], "--lines is an option of show --augment"),
                          (["--augment", "--lines", "0"], "--lines"),
                          (["--augment", "--lines", "65"], "--lines"),
                          (["--augment", "--lines", "9", "--count", "8"], "--count"),
                          (["--augment", "--steps", "-1"], "--steps"),
                          (["--augment", "--zoom", "33"], "--zoom")):
        with pytest.raises(SystemExit) as exit_info:
            main(["show", "--out", out, *argv])
        assert exit_info.value.code == 2
        assert message in capsys.readouterr().err, argv
    assert main(["show", "--augment", "--pack", str(tmp_path / "missing"), "--out", out]) == 2
    assert "missing" in capsys.readouterr().err
    assert not (tmp_path / "unused.png").exists()
