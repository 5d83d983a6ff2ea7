"""Text targets with one codec (issue 38, item 2): ``om.Vocabulary`` encodes a text into
target ids and decodes ids into a text, id ``om.BLANK_ID`` (0) the CTC blank; every
dataset's ``vocabulary`` is one, the pack writer encodes with it, ``show`` writes targets
through it, and an iterable given to ``om.pack`` may yield texts, encoded with the
vocabulary given or with the one built from its texts: the pack a folder of the same lines
gives. Before: no public encoder, and an iterable's targets had to be integer ids.
"""
from __future__ import annotations

import json
import os
import pickle

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy import show

Image = pytest.importorskip("PIL.Image")

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

TEXTS = ["hello world", "café 12", "", "ÆØÅ x", "  ", "zz 0"]


def test_the_codec_encodes_and_decodes_with_the_blank_at_id_0():
    vocabulary = om.Vocabulary("0123456789")
    assert om.BLANK_ID == 0 and vocabulary[om.BLANK_ID] == om.BLANK == "<blank>"
    ids = vocabulary.encode("2024")
    assert ids.dtype == np.int32 and ids.tolist() == [3, 1, 3, 5] and vocabulary.decode(ids) == "2024"
    assert vocabulary.encode("").tolist() == [] and vocabulary.decode([]) == ""
    assert len(vocabulary) == 11 and vocabulary.symbols == "0123456789"
    # A tuple indexed by id, equal to the plain tuple; taken back from any of its forms.
    assert vocabulary == ("<blank>", *"0123456789") and hash(vocabulary) == hash(tuple(vocabulary))
    for form in ("0123456789", list("0123456789"), tuple(vocabulary), vocabulary):
        assert om.Vocabulary(form) == vocabulary
    copy = pickle.loads(pickle.dumps(vocabulary))
    assert type(copy) is om.Vocabulary and copy == vocabulary and repr(copy) == "Vocabulary('0123456789')"
    assert om.Vocabulary.from_texts(["ba", "  ", "", "cab"]) == om.Vocabulary("abc")
    assert vocabulary.decode([0, 3, 99], strict=False) == "<0>2<99>"


@pytest.mark.parametrize("call, error, pattern", [
    (lambda v: v.encode("12a3b"), ValueError, r"text '12a3b' has characters outside the vocabulary: 'ab'"),
    (lambda v: v.encode(b"12"), TypeError, r"encode takes a str, received bytes b'12'"),
    (lambda v: v.decode([1, 0]), ValueError, r"target id 0 is not a symbol: ids 1\.\.10 .* 0 is the CTC blank"),
    (lambda v: v.decode([11]), ValueError, r"target id 11 is not a symbol"),
    (lambda v: v.decode([1.5]), TypeError, r"1-D sequence of integer ids"),
    (lambda v: om.Vocabulary("0012"), ValueError, r"distinct one-character strings .* received '0012'"),
    (lambda v: om.Vocabulary(["ab", "c"]), ValueError, r"distinct one-character strings"),
    (lambda v: om.Vocabulary(7), TypeError, r"a str of its symbols or a sequence .* received int 7"),
    (lambda v: om.Vocabulary.from_texts(["a", 3]), TypeError, r"text 1 is not a str: 3"),
])
def test_the_codec_refuses_what_it_cannot_encode_or_decode(call, error, pattern):
    with pytest.raises(error, match=pattern):
        call(om.Vocabulary("0123456789"))


def test_every_dataset_and_report_gives_the_codec(tmp_path):
    lines = om.SyntheticTextLines(8, num_symbols=16, seed=2)
    assert type(lines.vocabulary) is om.Vocabulary and lines.vocabulary.symbols == "0123456789ABCDEF"
    report = om.pack(lines, str(tmp_path / "p"), vocabulary=lines.vocabulary, progress=False)
    packed = om.PackedImageDataset(report.path)
    assert type(report.vocabulary) is om.Vocabulary and type(packed.vocabulary) is om.Vocabulary
    for i in range(len(lines)):
        target = lines.get_sample(i).target
        assert packed.vocabulary.encode(lines.decode(target)).tolist() == target.tolist()
    assert show._target_text([1, 0, 16, 17], packed.vocabulary) == "0<0>F<17>"


def line_images():
    """Seven gray line images (uint8 [12, W]), one per text of TEXTS."""
    rng = np.random.default_rng(7)
    return [rng.integers(0, 256, (12, 5 * len(text) + 4), dtype=np.uint8) for text in TEXTS]


def arrays_and_manifest(path):
    """A pack's arrays and manifest without what names its source (the keys and ``source``)."""
    with open(os.path.join(path, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    manifest.pop("source")
    names = sorted(set(manifest["arrays"]) - {"keys", "key_offsets"})
    manifest["arrays"] = {name: manifest["arrays"][name] for name in names}
    return {name: np.load(os.path.join(path, f"{name}.npy")).tobytes() for name in names}, manifest


def test_an_iterable_of_texts_gives_the_pack_a_folder_of_the_same_lines_gives(tmp_path):
    """The texts encoded with the vocabulary built from them all, as a folder's labels are:
    equal arrays and manifest (vocabulary included); the empty texts skipped as a folder
    skips them."""
    images = line_images()
    folder = tmp_path / "lines"
    folder.mkdir()
    for k, image in enumerate(images):
        Image.fromarray(image, "L").save(folder / f"{k}.png")
    (folder / "labels.txt").write_text("".join(f"{k}.png\t{t}\n" for k, t in enumerate(TEXTS)), encoding="utf-8")
    from_folder = om.pack(str(folder), str(tmp_path / "folder.pack"), labels=str(folder / "labels.txt"), height=12,
                          progress=False)
    from_items = om.pack(((image, text, k, f"{k}.png") for k, (image, text) in enumerate(zip(images, TEXTS))),
                         str(tmp_path / "items.pack"), progress=False)
    assert from_items.vocabulary == from_folder.vocabulary == om.Vocabulary.from_texts(TEXTS)
    assert from_items.count == from_folder.count == 4
    assert from_items.skipped == [(2, "empty label"), (4, "empty label")]
    assert arrays_and_manifest(from_items.path) == arrays_and_manifest(from_folder.path)
    ds = om.PackedImageDataset(from_items.path, 0.5, 0.25)
    assert [ds.decode(ds.get_sample(i).target) for i in range(4)] == [t for t in TEXTS if t.strip()]


def test_an_iterable_of_texts_with_a_vocabulary_given(tmp_path):
    """Encoded as each item arrives; a text with other characters is skipped and listed,
    as for a folder; the given vocabulary is the pack's."""
    images = line_images()
    report = om.pack([(image, text, k) for k, (image, text) in enumerate(zip(images, TEXTS))],
                     str(tmp_path / "p"), vocabulary="0123456789 abcdefghijklmnopqrstuvwxyzé", progress=False)
    assert report.skipped == [(2, "empty label"), (3, "label uses symbols outside the vocabulary: 'ÅÆØ'"),
                              (4, "empty label")]
    ds = om.PackedImageDataset(report.path, 0.5, 0.25)
    assert ds.vocabulary.symbols == "0123456789 abcdefghijklmnopqrstuvwxyzé"
    assert [ds.decode(ds.get_sample(i).target) for i in range(len(ds))] == ["hello world", "café 12", "zz 0"]


@pytest.mark.parametrize("items, pattern", [
    ([(np.zeros((2, 3), np.uint8), "ab", 0), (np.zeros((2, 3), np.uint8), [1, 2], 1)],
     r"item 1: target is ids, the first item's was a text: an iterable's targets are all texts \(str\) or all "
     r"integer ids"),
    ([(np.zeros((2, 3), np.uint8), [1], 0), (np.zeros((2, 3), np.uint8), "ab", 1)],
     r"item 1: target is a text, the first item's was ids"),
    ([(np.zeros((2, 3), np.uint8), b"ab", 0)],
     r"item 0: target must be a text \(str\) or a 1-D sequence of integer ids, received bytes"),
])
def test_an_iterable_mixing_texts_and_ids_is_refused(tmp_path, items, pattern):
    with pytest.raises(TypeError, match=pattern):
        om.pack(items, str(tmp_path / "p"), progress=False)
    assert os.listdir(tmp_path) == []
