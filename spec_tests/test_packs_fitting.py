"""Fitting lines to a height (issue 38, item 3): one policy for every source (``sources.Fit``).

A line is converted to the pack's mode (a colour line to grey, a grey one to three equal
channels), resized to the height with its aspect ratio kept, and a line wider than
``max_width`` is narrowed to it or skipped, as the user chooses; a folder's and a
container's files always, an iterable's or a dataset's arrays when a height, a mode or a
maximum width is given (else stored as they are, as before). So one set of lines gives
one pack from a folder, an LMDB, Parquet, WebDataset tars and an iterable of the decoded
arrays with their texts; a dataset's float32 images are fitted as an iterable's. Before:
an iterable's images were stored as given whatever ``height`` said, and there was no
maximum width.
"""
from __future__ import annotations

import io

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.cli import main
from PIL import Image

from test_packs_containers import (TEXTS, arrays_and_manifest, encoded_lines, wds_members, write_folder, write_lmdb,
                                   write_parquet, write_tar)

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py


@pytest.fixture(scope="module")
def lines():
    return encoded_lines()


def decoded_arrays(lines):
    """Each encoded line as Pillow decodes it, unfitted: uint8 [H, W] (grey) or [H, W, 3]."""
    return [np.asarray(Image.open(io.BytesIO(data))) for _, data, _ in lines]


class FloatLines:
    """A dataset of float32 [C, H, W] lines of several heights and channel counts."""

    def __init__(self, images):
        self.images = images

    def __len__(self):
        return len(self.images)

    def get_sample(self, i):
        return om.Sample(self.images[i], [1 + i % 3], i)


def float_images():
    rng = np.random.default_rng(11)
    return [rng.random((1, 9 + 3 * (i % 4), 20 + 7 * i), dtype=np.float32) for i in range(6)]


def test_one_set_of_lines_gives_one_pack_from_every_source(lines, tmp_path):
    """The same images (PNG and JPEG, grey and colour, heights 16 to 31) fitted to 20 rows
    of grey: a folder, an LMDB, a Parquet file, a WebDataset tar and an iterable of the
    decoded arrays with their texts give equal arrays and manifests (only the keys and
    ``source`` differ); with ``max_width`` too. A dataset's float32 lines are fitted as an
    iterable's: equal packs, every line 20 rows high."""
    images, labels = write_folder(tmp_path / "folder", lines)
    arrays = decoded_arrays(lines)
    assert {a.ndim for a in arrays} == {2, 3} and len({a.shape[0] for a in arrays}) == 4

    def sources():
        return {"folder": images,
                "lmdb": om.LmdbSource(write_lmdb(tmp_path / f"lines{len(packs)}.lmdb", lines)),
                "parquet": om.ParquetSource(write_parquet(tmp_path / f"lines{len(packs)}.parquet", lines)),
                "webdataset": om.WebDatasetSource(write_tar(tmp_path / f"lines{len(packs)}.tar", wds_members(lines))),
                "iterable": ((array, text, i) for i, (array, text) in enumerate(zip(arrays, TEXTS)))}
    narrow = {"height": 20, "max_width": 60}
    for fitting in ({"height": 20}, narrow, {**narrow, "too_wide": "skip"}):
        packs = {}
        for name, source in sources().items():
            report = om.pack(source, str(tmp_path / f"{name}-{len(fitting)}.pack"), progress=False,
                             labels=labels if name == "folder" else None, **fitting)
            packs[name] = report.count, arrays_and_manifest(report.path)[1:]
        assert all(pack == packs["folder"] for pack in packs.values()), fitting
        print(fitting, packs["folder"][0], packs["folder"][1][1]["arrays"]["pixels"]["sha256"][:16])
    widest = om.PackedImageDataset(str(tmp_path / "iterable-2.pack"), 0.0, 1.0).shapes
    assert widest[:, 1].tolist() == [20] * len(lines) and widest[:, 2].max() == 60
    assert packs["folder"][0] < len(lines)                         # too_wide="skip": some not packed
    floats = float_images()
    from_dataset = om.pack(FloatLines(floats), str(tmp_path / "dataset.pack"), height=20, progress=False)
    from_items = om.pack([(image, [1 + i % 3], i) for i, image in enumerate(floats)], str(tmp_path / "floats.pack"),
                         height=20, progress=False)
    assert arrays_and_manifest(from_dataset.path)[1:] == arrays_and_manifest(from_items.path)[1:]
    shapes = om.PackedImageDataset(from_dataset.path).shapes
    assert shapes[:, 1].tolist() == [20] * len(floats)
    assert shapes[:, 2].tolist() == [max(1, (2 * f.shape[2] * 20 + f.shape[1]) // (2 * f.shape[1])) for f in floats]


def one(report):
    dataset = om.PackedImageDataset(report.path, 0.0, 1.0)
    return dataset, dataset.shapes.tolist()


def pixels(dataset, i):
    """Sample ``i``'s 8-bit pixels, [C, H, W] (mean 0 and std 1: §6 gives them over 255)."""
    return np.rint(dataset.get_sample(i).image * 255).astype(np.uint8)


def test_the_policy_step_by_step(tmp_path):
    """What a line becomes: its height resized to the pack's (up or down), its width scaled
    and rounded half up; a colour line grey by Pillow's luma, a grey one three equal
    channels; a line wider than max_width narrowed to it (its height kept) or skipped and
    listed; arrays with nothing asked of them stored as they are, as before."""
    rng = np.random.default_rng(3)
    grey = rng.integers(0, 256, (7, 31), dtype=np.uint8)
    colour = rng.integers(0, 256, (40, 90, 3), dtype=np.uint8)
    items = [(grey, "ab", 0), (colour, "ba", 1)]
    _, shapes = one(om.pack(items, str(tmp_path / "fit"), height=20, progress=False))
    assert shapes == [[1, 20, 89], [1, 20, 45]]            # 31 * 20 / 7 = 88.57 -> 89; 90 * 20 / 40 = 45
    dataset, _ = one(om.pack(items, str(tmp_path / "grey"), mode="L", progress=False))
    assert np.array_equal(pixels(dataset, 1)[0], np.asarray(Image.fromarray(colour).convert("L")))
    dataset, shapes = one(om.pack(items, str(tmp_path / "rgb"), mode="RGB", progress=False))
    assert shapes == [[3, 7, 31], [3, 40, 90]]
    assert all(np.array_equal(pixels(dataset, 0)[c], grey) for c in range(3))
    report = om.pack(items, str(tmp_path / "narrow"), height=20, max_width=50, progress=False)
    assert one(report)[1] == [[1, 20, 50], [1, 20, 45]] and report.skipped == []
    report = om.pack(items, str(tmp_path / "skip"), height=20, max_width=50, too_wide="skip", progress=False)
    assert one(report)[1] == [[1, 20, 45]]
    assert report.skipped == [(0, "line 89 pixels wide at height 20, more than max_width=50 (too_wide='skip')")]
    assert report.vocabulary.symbols == "ab"                 # its text still counts, as a folder's
    dataset, shapes = one(om.pack([items[0], (grey[:5, :9], "b", 2)], str(tmp_path / "kept"), progress=False))
    assert shapes == [[1, 7, 31], [1, 5, 9]] and np.array_equal(pixels(dataset, 0)[0], grey)
    dataset, shapes = one(om.pack(items[1:], str(tmp_path / "kept-rgb"), progress=False))
    assert shapes == [[3, 40, 90]] and np.array_equal(pixels(dataset, 0), colour.transpose(2, 0, 1))


@pytest.mark.parametrize("kw, error, pattern", [
    ({"height": 0}, ValueError, r"height must be an integer in \[1, 2\*\*31\), received 0"),
    ({"max_width": 0}, ValueError, r"max_width must be an integer in \[1, 2\*\*31\) or None, received 0"),
    ({"max_width": 9.5}, ValueError, r"max_width must be an integer .* received 9\.5"),
    ({"too_wide": "crop"}, ValueError, r"too_wide must be one of \('downscale', 'skip'\), received 'crop'"),
    ({"mode": "CMYK"}, ValueError, r"mode must be one of \('L', 'RGB'\), received 'CMYK'"),
])
def test_fitting_arguments_are_checked_for_every_source(tmp_path, lines, kw, error, pattern):
    images, labels = write_folder(tmp_path / "folder", lines)
    for source, extra in (([(np.zeros((4, 5), np.uint8), "a", 0)], {}), (images, {"labels": labels})):
        with pytest.raises(error, match=pattern):
            om.pack(source, str(tmp_path / "p"), progress=False, **kw, **extra)
        assert not (tmp_path / "p").exists()


def test_a_mode_for_float32_lines_is_refused_naming_the_item(tmp_path):
    with pytest.raises(ValueError, match=r"sample 0: mode='L' converts 8-bit images; a float32 image keeps its 1 "
                                         r"channel\(s\): leave mode out for float32 images"):
        om.pack(FloatLines(float_images()), str(tmp_path / "p"), mode="L", progress=False)


def test_sharded_packing_fits_as_pack_does(tmp_path):
    floats = FloatLines(float_images())
    plain = om.pack(floats, str(tmp_path / "plain"), height=12, max_width=40, progress=False)
    sharded = om.pack_sharded(floats, str(tmp_path / "sharded"), shards=2, height=12, max_width=40, progress=False)
    a, b = om.PackedImageDataset(plain.path), om.PackedImageDataset(sharded.path)
    assert a.shapes.tolist() == b.shapes.tolist() and a.shapes[:, 1].tolist() == [12] * 6
    assert all(a.get_sample(i).image.tobytes() == b.get_sample(i).image.tobytes() for i in range(6))


def test_cli_max_width(lines, tmp_path, capsys):
    images, labels = write_folder(tmp_path / "folder", lines)
    out = str(tmp_path / "p")
    assert main(["pack", images, out, "--labels", labels, "--height", "20", "--max-width", "60", "--too-wide", "skip",
                 "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "more than max_width=60 (too_wide='skip')" in printed, printed
    assert om.PackedImageDataset(out, 0.5, 0.25).shapes[:, 2].max() <= 60
    status = main(["pack", images, str(tmp_path / "q"), "--labels", labels, "--max-width", "0", "--no-progress"])
    err = capsys.readouterr().err
    assert status == 2 and "--max-width must be an integer in [1, 2**31), received 0" in err, err
