"""One vocabulary convention for every dataset with text targets (``data/vocabulary.py``):
``vocabulary[t]`` is the symbol of target id ``t`` and id 0 the CTC blank, for the built-in
``SyntheticTextLines`` and for packs alike; ``decode``; ``onemodel-cy pack --vocabulary`` /
``--vocabulary-from`` so that train and test packs share ids; ``onemodel-cy show --pack``.
Before: a pack's ``vocabulary`` had no blank (``show`` wrote every target of a pack one
symbol off), and two packs written separately gave one symbol different ids, silently.
"""
from __future__ import annotations

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy import show
from onemodel_cy.cli import main
from onemodel_cy.data.vocabulary import BLANK, decode

Image = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py


def write_folder(root, texts):
    """A folder of random gray line images, one per text, and its labels file."""
    rng = np.random.default_rng(len(texts))
    images = root / "images"
    images.mkdir(parents=True)
    lines = []
    for k, text in enumerate(texts):
        name = f"line-{k:02d}.png"
        Image.fromarray(rng.integers(0, 256, (12, 8 * len(text) + 4), dtype=np.uint8), "L").save(images / name)
        lines.append(f"{name}\t{text}")
    labels = root / "labels.txt"
    labels.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(images), str(labels)


def test_every_dataset_with_text_reads_one_vocabulary(tmp_path):
    """The built-in lines and a pack of them: blank first, ``decode`` gives the text, and a
    dataset's own vocabulary handed to the writer keeps every id."""
    lines = om.SyntheticTextLines(12, num_symbols=10, seed=4)
    assert lines.vocabulary[0] == BLANK == "<blank>"
    report = om.pack(lines, str(tmp_path / "p"), vocabulary=lines.vocabulary, progress=False)
    packed = om.PackedImageDataset(report.path)
    assert packed.vocabulary == lines.vocabulary
    assert report.vocabulary == lines.vocabulary
    assert packed.manifest["vocabulary"] == list(lines.vocabulary[1:])      # the file keeps ids 1, 2, ...
    for i in range(len(lines)):
        target = lines.get_sample(i).target
        assert packed.get_sample(i).target.tolist() == target.tolist()
        text = "".join("0123456789"[t - 1] for t in target.tolist())
        assert lines.decode(target) == packed.decode(target) == decode(target, packed.vocabulary) == text


@pytest.mark.parametrize("target,pattern", [([0], r"target id 0 is not a symbol: ids 1\.\.10"),
                                            ([3, 11], r"target id 11 is not a symbol"),
                                            ([[1]], r"1-D sequence of integer ids"),
                                            ([1.5], r"1-D sequence of integer ids")])
def test_decode_refuses_what_is_no_symbol(target, pattern):
    lines = om.SyntheticTextLines(2, num_symbols=10)
    with pytest.raises((ValueError, TypeError), match=pattern):
        lines.decode(target)
    assert lines.decode([]) == ""


def test_train_and_test_packs_share_ids_with_vocabulary_from(tmp_path, capsys):
    """The issue's case: a test set whose texts lack '0' packed on its own gives '5' another
    id than the train pack does; ``--vocabulary-from TRAIN`` gives it the train pack's ids."""
    train_images, train_labels = write_folder(tmp_path / "train", ["0528564", "91730", "4268"])
    test_images, test_labels = write_folder(tmp_path / "test", ["528564", "913"])
    train = str(tmp_path / "train.pack")
    assert main(["pack", train_images, train, "--labels", train_labels, "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "vocabulary: 10 symbols, ids 1.. = '0123456789' (0: the CTC blank)" in printed
    alone, shared = str(tmp_path / "alone.pack"), str(tmp_path / "shared.pack")
    assert main(["pack", test_images, alone, "--labels", test_labels, "--no-progress"]) == 0
    assert main(["pack", test_images, shared, "--labels", test_labels, "--no-progress",
                 "--vocabulary-from", train]) == 0
    capsys.readouterr()
    train_ds, alone_ds, shared_ds = (om.PackedImageDataset(p, 0.5, 0.25) for p in (train, alone, shared))
    assert shared_ds.vocabulary == train_ds.vocabulary
    target_alone, target_shared = alone_ds.get_sample(0).target, shared_ds.get_sample(0).target
    assert alone_ds.decode(target_alone) == shared_ds.decode(target_shared) == "528564"
    assert train_ds.decode(target_shared) == "528564"          # the same ids as the train pack
    assert train_ds.decode(target_alone) != "528564"           # what went wrong silently before
    # --vocabulary as text, and as a file of one line.
    given = str(tmp_path / "given.pack")
    assert main(["pack", test_images, given, "--labels", test_labels, "--no-progress",
                 "--vocabulary", "0123456789"]) == 0
    assert om.PackedImageDataset(given, 0.5, 0.25).vocabulary == train_ds.vocabulary
    symbols = tmp_path / "symbols.txt"
    symbols.write_text("9876543210\n", encoding="utf-8")
    from_file = str(tmp_path / "file.pack")
    assert main(["pack", test_images, from_file, "--labels", test_labels, "--no-progress",
                 "--vocabulary", str(symbols)]) == 0
    assert om.PackedImageDataset(from_file, 0.5, 0.25).vocabulary == ("<blank>", *"9876543210")


@pytest.mark.parametrize("case", ["two lines", "repeated", "no vocabulary", "missing pack"])
def test_cli_vocabulary_errors_are_one_line(tmp_path, capsys, case):
    images, labels = write_folder(tmp_path / "f", ["12", "21"])
    if case == "two lines":
        path = tmp_path / "v.txt"
        path.write_text("12\n34\n", encoding="utf-8")
        extra, pattern = ["--vocabulary", str(path)], "a vocabulary file holds one line"
    elif case == "repeated":
        extra, pattern = ["--vocabulary", "1123"], "--vocabulary must be distinct characters"
    elif case == "no vocabulary":
        plain = om.pack([(np.zeros((2, 3), np.uint8), [1], 0)], str(tmp_path / "plain"), progress=False)
        extra, pattern = ["--vocabulary-from", plain.path], "this pack has no vocabulary"
    else:
        extra, pattern = ["--vocabulary-from", str(tmp_path / "nowhere")], "nowhere"
    status = main(["pack", images, str(tmp_path / "out"), "--labels", labels, "--no-progress", *extra])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and err.startswith("onemodel-cy: error: ") and pattern in err, err
    assert not (tmp_path / "out").exists()


def test_show_on_a_pack_writes_file_names_and_text(tmp_path, capsys, monkeypatch):
    """``onemodel-cy show --pack PATH``: beside each image its file name and its text,
    decoded through the pack's vocabulary (before: one symbol off)."""
    texts = ["53936", "0417", "8822", "169"]
    images, labels = write_folder(tmp_path / "f", texts)
    pack = str(tmp_path / "p")
    assert main(["pack", images, pack, "--labels", labels, "--no-progress"]) == 0
    drawn = []
    from PIL import ImageDraw
    original = ImageDraw.ImageDraw.multiline_text

    def record(self, xy, text, *args, **kwargs):
        drawn.append(text)
        return original(self, xy, text, *args, **kwargs)
    monkeypatch.setattr(ImageDraw.ImageDraw, "multiline_text", record)
    out = tmp_path / "pack.png"
    assert main(["show", "--pack", pack, "--out", str(out), "--batch-size", "4"]) == 0
    assert f"of {pack}, 4 images each" in capsys.readouterr().out
    assert Image.open(out).format == "PNG"
    rows = [t for t in drawn if t.startswith("slot ")]
    assert len(rows) == 4
    seen = set()
    for row in rows:
        index = int(row.split("  ")[1].split()[1])
        assert f"line-{index:02d}.png" in row and f"target {texts[index]!r}" in row, row
        seen.add(index)
    assert seen == {0, 1, 2, 3}
    assert show._target_text([0, 1], ("<blank>", "a")) == "<0>a"     # the blank is no symbol


def test_show_on_a_missing_pack_is_one_line(tmp_path, capsys):
    status = main(["show", "--pack", str(tmp_path / "nowhere"), "--out", str(tmp_path / "x.png")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1 and "nowhere" in err and "Traceback" not in err, err


def test_check_same_names_both_datasets_and_the_first_differing_id(tmp_path):
    """Where two datasets meet (train and test, a dataset of one's own over several packs):
    ``check_same`` returns their one vocabulary, or a ValueError naming both and the id."""
    from onemodel_cy.data.vocabulary import check_same
    a = om.PackedImageDataset(om.pack([(np.zeros((2, 3), np.uint8), [1], 0)], str(tmp_path / "a"),
                                      vocabulary="0123", progress=False).path, 0.5, 0.25)
    b = om.PackedImageDataset(om.pack([(np.zeros((2, 3), np.uint8), [1], 0)], str(tmp_path / "b"),
                                      vocabulary="0124", progress=False).path, 0.5, 0.25)
    assert check_same(a, a) == ("<blank>", "0", "1", "2", "3")
    with pytest.raises(ValueError, match=r"id 4 is '3' in PackedImageDataset\('.*/a'.* and '4' in "
                                         r"PackedImageDataset\('.*/b'.*--vocabulary-from"):
        check_same(a, b)
    with pytest.raises(ValueError, match="has a vocabulary"):
        check_same(a, om.SyntheticLineImages(4, 2, 1, 3, seed=0))
