"""Sharded packs (docs/packed-format.md, "Sharded packs"), written here one shard after another
(``pack_sharded``, the local engine).

A sharded pack is one dataset over its shards, global index i counting through them in
manifest order. Each test compares it with the plain pack of the same source: the same
sample at every index (pixels, target, label, key), the same batches through the loader
(0 workers, the packed lane, worker processes), the same vocabulary; and each damage to a
shard (missing, replaced, truncated, changed pixels) is a PackError naming the shard.
Written by Dask: test_packs_dask.py.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.cli import main
from onemodel_cy.data.packs.format import PackError
from few_files import OUT_OF_FILES, THE_LIMIT, digest_of, open_with_few_files
from harness import batch_bits
from line_images import random_png_lines


pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """23 gray PNG lines of random widths, one corrupt file (a skip inside shard 1 of 3), a
    blank line and an empty text (skips before the partitions are cut), a labels file."""
    root = tmp_path_factory.mktemp("lines")
    lines = random_png_lines(root, 23, seed=7, widths=(5, 60), heights=(6, 20), alphabet="abcdef xyz")
    (root / "09.png").write_bytes(b"not a png")
    lines.insert(4, "")
    lines[15] = lines[15].split("\t")[0] + "\t "
    (root / "labels.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(root), str(root / "labels.txt")


@pytest.fixture(scope="module")
def gray(folder, tmp_path_factory):
    """The folder as a plain pack and as a sharded pack of 3 shards."""
    images, labels = folder
    out = tmp_path_factory.mktemp("gray")
    plain = om.pack(images, str(out / "plain"), labels=labels, height=8, progress=False, workers=2)
    sharded = om.pack_sharded(images, str(out / "sharded"), labels=labels, height=8, progress=False, workers=2,
                              shards=3)
    return plain, sharded


def assert_same_samples(plain, sharded):
    """Every index: the same pixels as served (bits), target, label and key."""
    assert len(plain) == len(sharded)
    for i in range(len(plain)):
        a, b = plain.get_sample(i), sharded.get_sample(i)
        assert a.image.shape == b.image.shape and a.image.tobytes() == b.image.tobytes(), i
        assert a.target.tolist() == b.target.tolist() and a.label == b.label, i
        assert plain.key(i) == sharded.key(i), i
    assert plain.shapes.tolist() == sharded.shapes.tolist()


def stream_bits(dataset, steps, **kw):
    sampler = om.ShuffledSampler(len(dataset), 4, seed=3)
    collator = om.ImageBatchCollator(width_multiple=8, augmentation=om.GainOffset())
    loader = om.DataLoader(dataset, sampler, collator, seed=5, **kw)
    out = []
    with loader.iter(0, steps) as stream:
        for batch in stream:
            with batch:
                out.append(batch_bits(batch))
    loader.close()
    return out


def test_a_sharded_folder_pack_is_the_plain_pack_sample_for_sample(gray):
    """Issue 25 (1): one dataset over 3 shards, global indices in manifest order: the plain
    pack's sample at every index, the same vocabulary and skip report; each shard is a plain
    pack by itself (its own manifest, readable alone), and the manifest names them."""
    plain_report, sharded_report = gray
    assert sharded_report.count == plain_report.count == 21 and sharded_report.shards == 3
    assert sharded_report.skipped == plain_report.skipped        # the same items, in the same order
    assert sharded_report.vocabulary == plain_report.vocabulary
    plain = om.PackedImageDataset(plain_report.path, 0.5, 0.25)
    sharded = om.PackedImageDataset(sharded_report.path, 0.5, 0.25)
    assert_same_samples(plain, sharded)
    assert sharded.vocabulary == plain.vocabulary and sharded.decode([1, 2]) == plain.decode([1, 2])
    manifest = json.load(open(os.path.join(sharded.path, "manifest.json")))
    assert manifest["format"] == "onemodel_cy-sharded-pack" and manifest["count"] == 21
    assert [s["name"] for s in manifest["shards"]] == ["shard-00000", "shard-00001", "shard-00002"]
    assert sorted(os.listdir(sharded.path)) == ["manifest.json", "shard-00000", "shard-00001", "shard-00002"]
    assert sharded.shards == tuple(os.path.join(sharded.path, s["name"]) for s in manifest["shards"])
    first = 0
    for entry, shard_path in zip(manifest["shards"], sharded.shards):
        shard = om.PackedImageDataset(shard_path, 0.5, 0.25)
        assert len(shard) == entry["count"] and shard.manifest_sha256 == entry["manifest_sha256"]
        assert_same_samples(_Slice(plain, first, len(shard)), shard)
        first += len(shard)


class _Slice:
    """Samples first .. first + count - 1 of a dataset, as a dataset."""

    def __init__(self, dataset, first, count):
        self.dataset, self.first, self.count = dataset, first, count
        self.shapes = dataset.shapes[first:first + count]

    def __len__(self):
        return self.count

    def get_sample(self, i):
        return self.dataset.get_sample(self.first + i)

    def key(self, i):
        return self.dataset.key(self.first + i)


@pytest.mark.parametrize("route", [dict(workers=0), dict(workers=2), dict(workers=2, worker_mode="process")],
                         ids=["0 workers", "packed lane", "processes"])
def test_the_loader_serves_the_plain_packs_batches(gray, route):
    """Issue 25 (1): through the loader's fetch step (one pixels array over the shards'
    files), the packed lane and worker processes (each reopening the sharded pack by
    content), two epochs with an augmentation are the plain pack's batches, bit for bit."""
    plain = om.PackedImageDataset(gray[0].path, 0.5, 0.25)
    sharded = om.PackedImageDataset(gray[1].path, 0.5, 0.25)
    steps = 2 * (len(plain) // 4)
    assert stream_bits(sharded, steps, **route) == stream_bits(plain, steps)


@pytest.mark.parametrize("mode", ["RGB", "float32"])
def test_rgb8_and_float32_shards_serve_the_plain_packs_bytes(folder, tmp_path, mode):
    """Issue 25 (1): the other pixel kinds: rgb8 (a folder in RGB) and float32 (a dataset,
    4-byte pixels whose offsets are shifted by elements, not bytes)."""
    if mode == "RGB":
        images, labels = folder
        kw = dict(labels=labels, height=6, mode="RGB", progress=False)
        source, constants = images, ([0.1, 0.2, 0.3], [0.5, 0.25, 2.0])
    else:
        source, kw, constants = om.SyntheticTextLines(30, seed=2), dict(progress=False), (None, None)
    plain = om.PackedImageDataset(om.pack(source, str(tmp_path / "plain"), **kw).path, *constants)
    sharded = om.PackedImageDataset(om.pack_sharded(source, str(tmp_path / "s"), shards=4, **kw).path,
                                    *constants)
    assert sharded.pixel_kind == plain.pixel_kind == ("rgb8" if mode == "RGB" else "float32")
    assert_same_samples(plain, sharded)
    assert stream_bits(sharded, 10, workers=2) == stream_bits(plain, 10)


def test_one_shard_and_the_plain_pack_stay_valid(folder, gray, tmp_path):
    """Issue 25 (1): a sharded pack of one shard is valid; a plain pack is written as before
    (the known-answer packs of test_packs_format pin its bytes) and has no shards."""
    images, labels = folder
    one = om.pack_sharded(images, str(tmp_path / "one"), labels=labels, height=8, progress=False, shards=1)
    assert one.shards == 1
    assert_same_samples(om.PackedImageDataset(gray[0].path, 0.5, 0.25), om.PackedImageDataset(one.path, 0.5, 0.25))
    assert om.PackedImageDataset(gray[0].path, 0.5, 0.25).shards == ()
    assert "manifest.json" in os.listdir(gray[0].path) and "pixels.npy" in os.listdir(gray[0].path)


def test_pickling_fingerprint_and_replacement(gray, tmp_path):
    """Issue 25 (1): the identity of a sharded pack is its manifest's SHA-256, which records
    each shard's: a pickled copy reopens it, a copy elsewhere has the same fingerprint, and a
    re-pack of other samples in place is refused by the copy."""
    path = str(tmp_path / "copy")
    shutil.copytree(gray[1].path, path)
    dataset = om.PackedImageDataset(path, 0.5, 0.25)
    original = om.PackedImageDataset(gray[1].path, 0.5, 0.25)
    assert dataset.fingerprint() == original.fingerprint() and dataset.manifest_sha256 == original.manifest_sha256
    again = pickle.loads(pickle.dumps(dataset))
    assert_same_samples(dataset, again)
    om.pack_sharded(om.SyntheticTextLines(30, seed=1), path, shards=2, overwrite=True, progress=False)
    with pytest.raises(PackError, match="was replaced since it was opened"):
        pickle.loads(pickle.dumps(dataset))


def damaged_copy(gray, tmp_path):
    path = str(tmp_path / "damaged")
    shutil.copytree(gray[1].path, path)
    return path


def test_a_missing_replaced_or_truncated_shard_is_named(gray, tmp_path):
    """Issue 25 (1): opening checks every shard against the manifest: a missing shard, a
    shard replaced by another pack, a truncated array and (with verify="full") changed
    pixels are each a PackError naming the shard."""
    path = damaged_copy(gray, tmp_path)
    shutil.rmtree(os.path.join(path, "shard-00001"))
    with pytest.raises(PackError, match=r"shard 1 of 3 \(shard-00001\): .*shard-00001: not a folder"):
        om.PackedImageDataset(path, 0.5, 0.25)

    shutil.copytree(os.path.join(path, "shard-00002"), os.path.join(path, "shard-00001"))
    with pytest.raises(PackError, match=r"shard 1 of 3 \(shard-00001\): .*SHA-256 [0-9a-f]{64}, the pack's manifest "
                                        r"records [0-9a-f]{64} \(the shard was replaced"):
        om.PackedImageDataset(path, 0.5, 0.25)

    path = damaged_copy(gray, tmp_path / "t")
    pixels = os.path.join(path, "shard-00002", "pixels.npy")
    with open(pixels, "r+b") as f:
        f.truncate(os.path.getsize(pixels) - 3)
    with pytest.raises(PackError, match=r"shard 2 of 3 \(shard-00002\): .*shard-00002/pixels\.npy: holds \d+ bytes"):
        om.PackedImageDataset(path, 0.5, 0.25)

    path = damaged_copy(gray, tmp_path / "c")
    pixels = os.path.join(path, "shard-00000", "pixels.npy")
    with open(pixels, "r+b") as f:
        f.seek(200)
        byte = f.read(1)
        f.seek(200)
        f.write(bytes([byte[0] ^ 1]))
    assert len(om.PackedImageDataset(path, 0.5, 0.25)) == 21           # the index checks pass
    with pytest.raises(PackError, match=r"shard 0 of 3 \(shard-00000\): .*pixels\.npy: SHA-256 differs"):
        om.PackedImageDataset(path, 0.5, 0.25, verify="full")


def rewrite(path, change):
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    change(manifest)
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f)


@pytest.mark.parametrize("change, message", [
    (lambda m: m["shards"][1].update(name="../plain"), r"shards\[1\] must be .*received .*\.\./plain"),
    (lambda m: m["shards"][1].update(name=".hidden"), r"shards\[1\] must be"),
    (lambda m: m["shards"].__setitem__(2, dict(m["shards"][0])), "shard names must be distinct"),
    (lambda m: m["shards"][0].update(count=m["shards"][0]["count"] + 1),
     "counts add up to 22, the manifest's count is 21"),
    (lambda m: m.update(shards=[]), "shards must be a non-empty list"),
    (lambda m: m["shards"][0].update(manifest_sha256="ABC"), r"shards\[0\] must be"),
    (lambda m: m.update(pixels="rgb8"),
     r"shard 0 of 3 \(shard-00000\): .*pixels 'gray8', the pack's manifest records 'rgb8'"),
    (lambda m: m.update(vocabulary=["a"]), r"shard 0 of 3 .*vocabulary .*, the pack's manifest records \['a'\]"),
])
def test_a_bad_sharded_manifest_is_named(gray, tmp_path, change, message):
    """Issue 25 (1): the top-level manifest's fields: plain shard names (never a path out of
    the pack), distinct, counts adding up, digests of 64 hex digits, and each shard's pixel
    kind and vocabulary those the manifest records."""
    path = damaged_copy(gray, tmp_path)
    rewrite(path, change)
    with pytest.raises(PackError, match=message):
        om.PackedImageDataset(path, 0.5, 0.25)


def test_shards_with_and_without_keys_are_refused(gray, tmp_path):
    """Issue 25 (1): every shard has keys, or none (a dataset would otherwise answer key(i)
    for some indices only)."""
    path = damaged_copy(gray, tmp_path)
    shard = os.path.join(path, "shard-00001")
    manifest = json.load(open(os.path.join(shard, "manifest.json")))
    del manifest["arrays"]["keys"], manifest["arrays"]["key_offsets"]
    text = json.dumps(manifest, sort_keys=True, indent=1) + "\n"
    with open(os.path.join(shard, "manifest.json"), "w") as f:
        f.write(text)
    import hashlib
    rewrite(path, lambda m: m["shards"][1].update(manifest_sha256=hashlib.sha256(text.encode()).hexdigest()))
    with pytest.raises(PackError, match=r"shard 0 \(shard-00000\) has keys, shard 1 \(shard-00001\) has no keys"):
        om.PackedImageDataset(path, 0.5, 0.25)


def test_release_pages_over_shards_changes_no_batch(gray):
    """Issue 25 (1): resident_limit releases the one mapping over every shard's pixels."""
    small = om.PackedImageDataset(gray[1].path, 0.5, 0.25, resident_limit=4096)
    steps = 2 * (len(small) // 4)
    assert stream_bits(small, steps) == stream_bits(om.PackedImageDataset(gray[0].path, 0.5, 0.25), steps)
    assert small.pages_released > 0 and small.release_pages()


def test_shard_arguments_are_checked(folder, tmp_path):
    """Issue 25 (1): shards is an integer >= 1, at most the items; an iterable has no
    partitions; an unknown engine is named. Nothing is left behind."""
    images, labels = folder
    out = str(tmp_path / "p")
    items = [(np.zeros((2, 3), np.uint8), [1], 0)] * 3
    cases = [
        (dict(source=items, shards=2), TypeError, "shards= needs a folder of images .* received list"),
        (dict(source=om.SyntheticTextLines(3, seed=0), shards=4), ValueError,
         "at most the 3 items to pack, received 4"),
        (dict(source=om.SyntheticTextLines(3, seed=0), shards=0), ValueError, "shards must be an integer >= 1"),
        (dict(source=om.SyntheticTextLines(3, seed=0), shards=True), ValueError, "shards must be an integer >= 1"),
        (dict(source=om.SyntheticTextLines(3, seed=0), shards=2, engine_workers=2), ValueError,
         "engine_workers is the size of the LocalCluster engine='dask' starts"),
        (dict(source=om.SyntheticTextLines(3, seed=0), shards=2, engine="ray"), ValueError,
         r"engine must be one of \('local', 'dask'\)"),
    ]
    for kw, error, message in cases:
        with pytest.raises(error, match=message):
            om.pack_sharded(kw.pop("source"), out, progress=False, **kw)
    assert os.listdir(tmp_path) == []


def test_cli_writes_a_sharded_pack_and_names_bad_shard_options(folder, gray, tmp_path, capsys):
    """Issue 25 (2): onemodel-cy pack --shards N (here, local); the shard options' misuse is
    one line naming the option, exit status 2."""
    images, labels = folder
    out = str(tmp_path / "cli")
    assert main(["pack", images, out, "--labels", labels, "--height", "8", "--shards", "3", "--no-progress"]) == 0
    assert "(3 shards)" in capsys.readouterr().out
    assert_same_samples(om.PackedImageDataset(gray[1].path, 0.5, 0.25), om.PackedImageDataset(out, 0.5, 0.25))
    assert om.PackedImageDataset(out, 0, 1).manifest_sha256 == om.PackedImageDataset(gray[1].path, 0, 1).manifest_sha256
    for extra, message in [(["--shards", "0"], "--shards must be an integer >= 1, received 0"),
                           (["--engine", "dask"], "--engine dask writes a sharded pack: give --shards N"),
                           (["--shards", "2", "--engine-workers", "2"], "options of --engine dask"),
                           (["--shards", "2", "--engine", "dask", "--scheduler", "localhost"],
                            "--scheduler must be a Dask scheduler's address"),
                           (["--shards", "99"], "at most the 22 items to pack, received 99")]:
        status = main(["pack", images, str(tmp_path / "x"), "--labels", labels, "--no-progress", *extra])
        err = capsys.readouterr().err
        assert status in (1, 2) and err.startswith("onemodel-cy: error: ") and err.count("\n") == 1, err
        assert any(part in err for part in message.split("|")), err
    assert not os.path.exists(tmp_path / "x") and [n for n in os.listdir(tmp_path) if n.startswith(".")] == []


def test_a_pack_of_more_shards_than_the_open_file_limit_opens(tmp_path):
    """Issue 36, item 11: 100 shards opened by a process limited to 64 open files: each
    shard's pixel file is mapped and closed (no descriptor kept per shard)."""
    om.pack_sharded(om.SyntheticTextLines(100, seed=3), str(tmp_path / "many"), shards=100, progress=False)
    said = open_with_few_files(64, tmp_path / "many")
    assert said.startswith("opened 100 ") and said.endswith(digest_of(om.PackedImageDataset(str(tmp_path / "many"))))


def test_too_few_descriptors_to_open_a_sharded_pack_is_an_error_naming_the_limit_and_the_shards(tmp_path):
    """Issue 36, item 11: a process left with one descriptor to open 100 shards with gets a
    PackError naming the pack, the limit and the number of shards (was: a bare "Too many
    open files")."""
    import re
    om.pack_sharded(om.SyntheticTextLines(100, seed=3), str(tmp_path / "many"), shards=100, progress=False)
    said = open_with_few_files("+1", tmp_path / "many")
    assert re.match(rf"^PackError {re.escape(str(tmp_path / 'many'))}: {OUT_OF_FILES} with 100 shards: {THE_LIMIT}",
                    said), said
