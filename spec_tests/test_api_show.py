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
