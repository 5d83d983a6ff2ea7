"""Packing the containers OCR line data comes in (issue 38, item 1): an LMDB (``lmdb``),
Parquet files as Hugging Face datasets write them (``pyarrow``), WebDataset tars
(``tarfile``), each written here by its real library. One set of lines packed from a
folder with a labels file and from the three containers gives the same pack, apart from
the keys and the manifest's ``source``, which name where the lines came from; bad input
in each (a missing key or column, an undecodable image, a label that is not text, an
empty or truncated file) is a ``PackError`` naming the record, and nothing is published.
"""
from __future__ import annotations

import copy
import io
import json
import os
import re
import tarfile

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.cli import main
from onemodel_cy.data.packs.format import PackError

import lmdb
import pyarrow as pa
import pyarrow.parquet as pq
from PIL import Image, ImageDraw

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

TEXTS = ["hello world", "café 12", "line three", "ÆØÅ æøå", "x", "the fifth line", "Zz 0"]


def encoded_lines() -> list:
    """``(file name, encoded bytes, text)`` of seven rendered lines: PNG and JPEG, grey and
    RGB, of several heights."""
    lines = []
    for i, text in enumerate(TEXTS):
        h = (16, 24, 31, 20)[i % 4]
        color = i % 3 == 1
        image = Image.new("RGB" if color else "L", (8 * len(text) + 6, h), (250, 240, 200) if color else 245)
        ImageDraw.Draw(image).text((3, h // 4), text, fill=(20, 30, 90) if color else 10)
        buffer = io.BytesIO()
        kind = "JPEG" if i % 2 else "PNG"
        image.save(buffer, kind)
        lines.append((f"{i:03d}.{'jpg' if kind == 'JPEG' else 'png'}", buffer.getvalue(), text))
    return lines


def write_folder(root, lines, labels_name="labels.txt"):
    root.mkdir()
    for name, data, _ in lines:
        (root / name).write_bytes(data)
    (root / labels_name).write_text("".join(f"{name}\t{text}\n" for name, _, text in lines), encoding="utf-8")
    return str(root), str(root / labels_name)


def write_lmdb(path, lines, *, count=None, labels=None, images=None):
    """deep-text-recognition-benchmark's create_lmdb_dataset.py layout, by lmdb itself."""
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, (_, data, text) in enumerate(lines, 1):
            txn.put(b"image-%09d" % i, data if images is None else images.get(i, data))
            txn.put(b"label-%09d" % i, text.encode("utf-8") if labels is None else labels.get(i, text.encode()))
        txn.put(b"num-samples", str(len(lines) if count is None else count).encode())
    env.close()
    return str(path)


def write_parquet(path, lines, *, images=None, texts=None, image_column="image", text_column="text", struct=True):
    """A Hugging Face datasets Parquet file: ``image`` as the Image feature's {bytes, path}."""
    data = [d for _, d, _ in lines] if images is None else images
    if struct:
        column = pa.array([{"bytes": d, "path": name} for (name, _, _), d in zip(lines, data)],
                          pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    else:
        column = pa.array(data, pa.binary())
    text = pa.array([t for _, _, t in lines]) if texts is None else texts
    pq.write_table(pa.table({image_column: column, text_column: text}), str(path), row_group_size=3)
    return str(path)


def write_tar(path, members):
    """A WebDataset shard: ``(name, bytes)`` members in order, by tarfile (as WebDataset's
    TarWriter writes them)."""
    with tarfile.open(str(path), "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return str(path)


def wds_members(lines):
    members = []
    for name, data, text in lines:
        key, ext = name.split(".")
        members += [(f"lines/{key}.{ext}", data), (f"lines/{key}.txt", text.encode("utf-8") + b"\n"),
                    (f"lines/{key}.json", b"{}")]
    return members


def arrays_and_manifest(path):
    """A pack's arrays (bytes) and manifest without what names the source: its keys and
    ``source``."""
    with open(os.path.join(path, "manifest.json"), encoding="utf-8") as f:
        manifest = json.load(f)
    source = manifest.pop("source")
    names = sorted(set(manifest["arrays"]) - {"keys", "key_offsets"})
    manifest["arrays"] = {name: manifest["arrays"][name] for name in names}
    return source, {name: np.load(os.path.join(path, f"{name}.npy")).tobytes() for name in names}, manifest


def opened(path):
    return om.PackedImageDataset(str(path), 0.0, 1.0)


def nothing_published(out):
    parent, name = os.path.split(str(out))
    left = [entry for entry in os.listdir(parent) if entry.startswith(name) or entry.startswith(f".{name}")]
    return left == []


@pytest.fixture(scope="module")
def lines():
    return encoded_lines()


def test_one_set_of_lines_gives_one_pack_from_all_four_sources(lines, tmp_path):
    """The same images and texts, as a folder + labels.txt, an LMDB, a Parquet file and a
    WebDataset tar, give packs equal in every array and the manifest (its vocabulary, its
    arrays' sizes and SHA-256), apart from the keys and ``source``; each source's keys
    are what it documents."""
    images, labels = write_folder(tmp_path / "folder", lines)
    sources = {"folder": images,
               "lmdb": om.LmdbSource(write_lmdb(tmp_path / "lines.lmdb", lines)),
               "parquet": om.ParquetSource(write_parquet(tmp_path / "lines.parquet", lines)),
               "webdataset": om.WebDatasetSource(write_tar(tmp_path / "lines.tar", wds_members(lines)))}
    packs = {}
    for name, source in sources.items():
        report = om.pack(source, str(tmp_path / f"{name}.pack"), labels=labels if name == "folder" else None,
                         height=20, workers=2, progress=False)
        assert report.count == len(lines) and report.skipped == []
        packs[name] = arrays_and_manifest(report.path)
    assert {name: pack[0] for name, pack in packs.items()} == {name: name for name in packs}
    folder = packs["folder"]
    for name in ("lmdb", "parquet", "webdataset"):
        assert packs[name][1] == folder[1], name
        assert packs[name][2] == folder[2], name
    print({name: pack[2]["arrays"]["pixels"]["sha256"][:16] for name, pack in packs.items()})
    keys = {name: [opened(tmp_path / f"{name}.pack").key(i) for i in range(len(lines))] for name in sources}
    assert keys["folder"] == [name for name, _, _ in lines]
    assert keys["lmdb"] == [f"image-{i:09d}" for i in range(1, len(lines) + 1)]
    assert keys["parquet"] == [str(i) for i in range(len(lines))]
    assert keys["webdataset"] == [f"lines/{name.split('.')[0]}" for name, _, _ in lines]
    ds = opened(tmp_path / "lmdb.pack")
    assert [ds.decode(ds.get_sample(i).target) for i in range(len(lines))] == TEXTS


def test_other_layouts_by_their_options(lines, tmp_path):
    """The options name another layout: Parquet columns of raw bytes under other names
    with a key column, split over two files of a folder; WebDataset images under another
    extension; an LMDB with other key patterns numbered from 0. Same pack as the defaults."""
    want = arrays_and_manifest(om.pack(om.ParquetSource(write_parquet(tmp_path / "a.parquet", lines)),
                                       str(tmp_path / "want"), height=12, progress=False).path)[1]
    split = tmp_path / "split"
    split.mkdir()
    for part, chunk in enumerate((lines[:4], lines[4:])):
        table = pa.table({"jpg": pa.array([d for _, d, _ in chunk], pa.binary()),
                          "caption": pa.array([t.encode() for _, _, t in chunk], pa.binary()),
                          "id": pa.array([n for n, _, _ in chunk])})
        pq.write_table(table, str(split / f"train-{part:05d}-of-00002.parquet"))
    source = om.ParquetSource(split, image_column="jpg", text_column="caption", key_column="id")
    report = om.pack(source, str(tmp_path / "split.pack"), height=12, progress=False)
    assert arrays_and_manifest(report.path)[1] == want
    assert opened(report.path).key(5) == lines[5][0]

    members = [(f"{n.split('.')[0]}.{'webp' if i == 2 else 'img'}", d) for i, (n, d, _) in enumerate(lines)]
    tar = write_tar(tmp_path / "x.tar", [m for i, (m, (_, _, t)) in enumerate(zip(members, lines))
                                         for m in (m, (f"{lines[i][0].split('.')[0]}.label", t.encode()))])
    report = om.pack(om.WebDatasetSource(tar, image_extensions=("img", "webp"), text_extension="label"),
                     str(tmp_path / "wds.pack"), height=12, progress=False)
    assert arrays_and_manifest(report.path)[1] == want

    env = lmdb.open(str(tmp_path / "other.lmdb"), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i, (_, data, text) in enumerate(lines):
            txn.put(f"img_{i}".encode(), data)
            txn.put(f"txt_{i}".encode(), text.encode())
        txn.put(b"total", str(len(lines)).encode())
    env.close()
    source = om.LmdbSource(tmp_path / "other.lmdb", image_key="img_%d", label_key="txt_%d", count_key="total", first=0)
    report = om.pack(source, str(tmp_path / "lmdb.pack"), height=12, progress=False)
    assert arrays_and_manifest(report.path)[1] == want


def test_a_container_packs_sharded_as_it_packs_whole(lines, tmp_path):
    """``pack_sharded`` cuts a container's records into partitions: the same samples at the
    same indices as ``pack``, the same vocabulary."""
    source = om.WebDatasetSource(write_tar(tmp_path / "lines.tar", wds_members(lines)))
    whole = opened(om.pack(source, str(tmp_path / "whole"), height=16, progress=False).path)
    report = om.pack_sharded(source, str(tmp_path / "sharded"), shards=3, height=16, progress=False)
    sharded = opened(report.path)
    assert report.shards == 3 and len(sharded) == len(whole) and sharded.vocabulary == whole.vocabulary
    for i in range(len(whole)):
        a, b = whole.get_sample(i), sharded.get_sample(i)
        assert (a.image.tobytes(), a.target.tolist(), a.label, whole.key(i)) == (
            b.image.tobytes(), b.target.tolist(), b.label, sharded.key(i))
    assert sharded.manifest["source"] == "webdataset"


def test_cli_pack_from_each_container(lines, tmp_path, capsys):
    """`onemodel-cy pack --from lmdb|parquet|webdataset SOURCE OUT`, the layout options, and
    the command line's mistakes (status 2): --labels with a container, an option of another
    format, a missing source."""
    lmdb_path = write_lmdb(tmp_path / "l.lmdb", lines)
    parquet = write_parquet(tmp_path / "p.parquet", lines, image_column="png", struct=False)
    tar = write_tar(tmp_path / "w.tar", wds_members(lines))
    for source, extra in ((lmdb_path, ["--from", "lmdb"]), (parquet, ["--from", "parquet", "--image-column", "png"]),
                          (tar, ["--from", "webdataset", "--image-ext", "jpg,png"])):
        out = str(tmp_path / f"{extra[1]}.pack")
        assert main(["pack", source, out, "--height", "10", "--no-progress", *extra]) == 0
        assert f"packed {len(lines)} samples" in capsys.readouterr().out
        assert opened(out).manifest["source"] == extra[1]
    assert main(["pack", tar, str(tmp_path / "s.pack"), "--from", "webdataset", "--shards", "2", "--no-progress"]) == 0
    capsys.readouterr()
    for argv, message in (
            (["--from", "lmdb", "--labels", "x.txt"], "--labels is the labels file of a folder"),
            (["--from", "lmdb", "--image-column", "png"], "--image-column is not an option of --from lmdb"),
            (["--image-key", "a%d"], "--image-key is an option of --from lmdb")):
        assert main(["pack", lmdb_path, str(tmp_path / "bad"), *argv]) == 2
        assert message in capsys.readouterr().err
    assert main(["pack", str(tmp_path / "none.lmdb"), str(tmp_path / "bad"), "--from", "lmdb"]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["pack", parquet, str(tmp_path / "bad"), "--from", "parquet", "--no-progress"]) == 1
    assert "no column 'image'" in capsys.readouterr().err
    assert nothing_published(tmp_path / "bad")


# ---------------------------------------------------------------- bad input, each a PackError naming the record

def refused(source, out, match):
    with pytest.raises(PackError, match=match):
        om.pack(source, str(out), height=10, progress=False)
    assert nothing_published(out)


def test_bad_lmdb(lines, tmp_path):
    """An LMDB written by lmdb: a missing label key, a missing image key, an undecodable
    image, a label that is not UTF-8, no ``num-samples``, an empty and a truncated file."""
    out = tmp_path / "out"
    refused(om.LmdbSource(write_lmdb(tmp_path / "a", lines, count=len(lines) + 1)), out,
            r"a, record 7 \(key 'image-000000008'\): no key 'label-000000008'")
    env = lmdb.open(str(tmp_path / "a"), map_size=1 << 26)
    with env.begin(write=True) as txn:
        txn.put(b"label-000000008", b"ok")
    env.close()
    refused(om.LmdbSource(tmp_path / "a"), out, r"record 7 \(key 'image-000000008'\): no key 'image-000000008'")
    refused(om.LmdbSource(write_lmdb(tmp_path / "b", lines, images={3: b"\x89PNG not really"})), out,
            r"b, record 2 \(key 'image-000000003'\): unreadable image")
    refused(om.LmdbSource(write_lmdb(tmp_path / "c", lines, labels={5: b"caf\xe9"})), out,
            r"c, record 4 \(key 'image-000000005'\): the label is not UTF-8 text \(byte 0xe9 at position 3\)")
    refused(om.LmdbSource(tmp_path / "a", count_key="n"), out, r"no 'n' key \(the number of records\)")
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "data.mdb").write_bytes(b"")
    refused(om.LmdbSource(empty), out, r"data\.mdb: the file is empty")
    big = [(n, d * 1 + bytes(3000), t) for n, d, t in lines]        # records that fill several pages
    data = os.path.join(write_lmdb(tmp_path / "d", big), "data.mdb")
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size // 2)
    refused(om.LmdbSource(tmp_path / "d"), out, r"data\.mdb: truncated")


def test_bad_parquet(lines, tmp_path):
    """Parquet written by pyarrow: a missing column, an undecodable image, a text that is
    not UTF-8 (a binary column), a null text, an image that is only a path, an empty and a
    truncated file."""
    out = tmp_path / "out"
    refused(om.ParquetSource(write_parquet(tmp_path / "a.parquet", lines, text_column="label")), out,
            r"a\.parquet: no column 'text' \(its columns: image, label\); pass text_column=")
    bad = [d for _, d, _ in lines]
    bad[4] = b"GIF89a broken"
    refused(om.ParquetSource(write_parquet(tmp_path / "b.parquet", lines, images=bad)), out,
            r"b\.parquet, row 4 \(key '4'\): unreadable image \(UnidentifiedImageError: cannot identify image "
            r"file its bytes\)")
    texts = pa.array([t.encode() for _, _, t in lines[:2]] + [b"\xff\xfe"] + [t.encode() for _, _, t in lines[3:]])
    refused(om.ParquetSource(write_parquet(tmp_path / "c.parquet", lines, texts=texts)), out,
            r"c\.parquet, row 2 \(key '2'\), column 'text': the label is not UTF-8 text")
    texts = pa.array([t for _, _, t in lines[:5]] + [None] + [t for _, _, t in lines[6:]])
    refused(om.ParquetSource(write_parquet(tmp_path / "n.parquet", lines, texts=texts)), out,
            r"n\.parquet, row 5 \(key '5'\), column 'text': the label is NoneType, not text")
    column = pa.array([{"bytes": None if i == 1 else d, "path": n} for i, (n, d, _) in enumerate(lines)],
                      pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image": column, "text": [t for _, _, t in lines]}), str(tmp_path / "p.parquet"))
    refused(om.ParquetSource(tmp_path / "p.parquet"), out,
            r"p\.parquet, row 1 \(key '1'\): the image has no bytes \(path '001\.jpg' only")
    (tmp_path / "e.parquet").write_bytes(b"")
    refused(om.ParquetSource(tmp_path / "e.parquet"), out, r"e\.parquet: the file is empty")
    whole = open(write_parquet(tmp_path / "t.parquet", lines), "rb").read()
    for cut in (len(whole) // 2, len(whole) - 3):
        (tmp_path / "t.parquet").write_bytes(whole[:cut])
        refused(om.ParquetSource(tmp_path / "t.parquet"), out, r"t\.parquet: not a readable Parquet file")


def test_bad_webdataset(lines, tmp_path):
    """A tar written by tarfile: a record without its text, one without an image, an
    undecodable image, a text that is not UTF-8, an empty and a truncated tar."""
    out = tmp_path / "out"
    members = wds_members(lines)
    refused(om.WebDatasetSource(write_tar(tmp_path / "a.tar", members[:7] + members[8:])), out,
            r"a\.tar, record 2 \(key 'lines/002'\): no \.txt file \(the record has \.png, \.json\)")
    refused(om.WebDatasetSource(write_tar(tmp_path / "b.tar", members[:3] + members[4:])), out,
            r"b\.tar, record 1 \(key 'lines/001'\): no image \(\.png, \.jpg, \.jpeg; the record has \.txt, \.json\)")
    broken = list(members)
    broken[9] = (broken[9][0], b"\xff\xd8 not a jpeg")
    refused(om.WebDatasetSource(write_tar(tmp_path / "c.tar", broken)), out,
            r"c\.tar, record 3 \(key 'lines/003'\): unreadable image")
    broken = list(members)
    broken[13] = (broken[13][0], b"ok \xc3(")
    refused(om.WebDatasetSource(write_tar(tmp_path / "d.tar", broken)), out,
            r"d\.tar, record 4 \(key 'lines/004'\): the label is not UTF-8 text")
    (tmp_path / "e.tar").write_bytes(b"")
    refused(om.WebDatasetSource(tmp_path / "e.tar"), out, r"e\.tar: the file is empty")
    whole = open(write_tar(tmp_path / "t.tar", members), "rb").read()
    for cut in (len(whole) // 2, len(whole) // 2 + 100, 512 * 7):
        (tmp_path / "t.tar").write_bytes(whole[:cut])
        refused(om.WebDatasetSource(tmp_path / "t.tar"), out, r"t\.tar: truncated")


# ---------------------------------------------------------------- issue 36, item 5: the files the plan read

def write_container(root, kind, lines):
    """One container of ``lines`` in the folder ``root`` (made): ``(source, the file it reads)``."""
    root.mkdir()
    if kind == "lmdb":
        return om.LmdbSource(write_lmdb(root / "lines.lmdb", lines)), root / "lines.lmdb" / "data.mdb"
    if kind == "parquet":
        return om.ParquetSource(write_parquet(root / "lines.parquet", lines)), root / "lines.parquet"
    return om.WebDatasetSource(write_tar(root / "lines.tar", wds_members(lines))), root / "lines.tar"


def planned_then_replaced(lines, tmp_path, kind, engine):
    """A container planned as 2 shards, then its file replaced by one of the same records
    in the reverse order (the same count, texts and images, the same size or nearly: what
    the plan's texts no longer pair with). ``(shard jobs, the replaced file)``."""
    from onemodel_cy.data.packs import sharded
    source, file = write_container(tmp_path / "real", kind, lines)
    jobs, _, _, _ = sharded.plan(source, 2, labels=None, height=16, mode=None, vocabulary=None, workers=None,
                                 engine=engine)
    _, other = write_container(tmp_path / "other", kind, lines[::-1])
    os.replace(other, file)
    (tmp_path / "partial").mkdir()
    return jobs, str(file)


def refused_after_the_plan(file) -> str:
    return (rf"^{re.escape(file)}: .+ where shard shard-00000's task runs \(.+\), .+ where the pack was planned "
            rf"\(records 0\.\.2 of .+\): the file changed since, or the engine's workers do not see the client's "
            rf"file at this path")


@pytest.mark.parametrize("kind", ["lmdb", "parquet", "webdataset"])
def test_a_container_replaced_after_the_plan_is_refused_by_its_shard_task(lines, tmp_path, kind):
    """Issue 36, item 5, on the local engine: each shard task checks that the container's
    file is the one the plan read its texts from (``Container.identity``); here it was
    replaced between the plan and the task by the same records in reverse order, which
    paired each text with another line's image. The task refuses it, naming the file, what
    the plan saw and what it finds, before it writes anything."""
    from onemodel_cy.data.packs import sharded
    jobs, file = planned_then_replaced(lines, tmp_path, kind, "local")
    with pytest.raises(PackError, match=refused_after_the_plan(file)) as refused_error:
        sharded.write_shard(str(tmp_path / "partial"), jobs[0])
    message = str(refused_error.value)
    found, seen = re.search(r": (.+) where shard .+ runs \(.+\), (.+) where the pack", message).groups()
    assert found != seen and "bytes" in found and "bytes" in seen
    assert os.listdir(tmp_path / "partial") == []


def test_a_container_folder_that_gains_a_file_after_the_plan_is_refused(lines, tmp_path):
    """Issue 36, item 5: a folder of tars read as a list of its files by name: a tar added
    before the planned one moves it, and the task that would read the new one refuses."""
    from onemodel_cy.data.packs import sharded
    (tmp_path / "tars").mkdir()
    write_tar(tmp_path / "tars" / "b.tar", wds_members(lines))
    jobs, _, _, _ = sharded.plan(om.WebDatasetSource(tmp_path / "tars"), 2, labels=None, height=16, mode=None,
                                 vocabulary=None, workers=None, engine="local")
    write_tar(tmp_path / "tars" / "a.tar", wds_members(lines[::-1]))
    (tmp_path / "partial").mkdir()
    with pytest.raises(PackError, match=rf"^{re.escape(str(tmp_path / 'tars' / 'b.tar'))}: the file "
                                        rf"{re.escape(str(tmp_path / 'tars' / 'a.tar'))} where shard shard-00000's "
                                        rf"task runs"):
        sharded.write_shard(str(tmp_path / "partial"), jobs[0])


@pytest.mark.parametrize("kind", ["lmdb", "parquet"])
def test_a_container_replaced_while_the_plan_reads_it_is_refused(lines, tmp_path, kind):
    """Issue 36, item 5: the digest of a partition's texts the client ships is of the texts
    its plan read, not read again from the file: a file replaced by the same records in
    reverse order right after the plan read its texts (before the rest of its identity
    was read) is refused by the task too."""
    from onemodel_cy.data.packs import sharded
    source, file = write_container(tmp_path / "real", kind, lines)
    _, other = write_container(tmp_path / "other", kind, lines[::-1])

    class ReplacedOnceRead(type(source)):
        def records(self):
            entries = super().records()
            os.replace(other, file)
            return entries

    replaced = copy.copy(source)
    replaced.__class__ = ReplacedOnceRead
    jobs, _, _, _ = sharded.plan(replaced, 2, labels=None, height=16, mode=None, vocabulary=None, workers=None,
                                 engine="local")
    (tmp_path / "partial").mkdir()
    with pytest.raises(PackError, match=refused_after_the_plan(str(file))):
        sharded.write_shard(str(tmp_path / "partial"), jobs[0])
