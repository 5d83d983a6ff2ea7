"""The pack format (docs/packed-format.md), its writer and its reader's refusals.

Covers: a pack is standard .npy files plus a manifest that numpy alone can read; the
writer's three sources and its atomic rename; PackedImageDataset.get_sample is §6 of the
stored pixels (D15); a missing, truncated, corrupted, out-of-range or other-version pack
is refused with an error naming the file; the known-answer packs of spec_tests/data/.
"""
from __future__ import annotations

import errno
import hashlib
import json
import os
import pickle
import re
import shutil
import subprocess
import sys
import types

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.data.packs import format as _format
from onemodel_cy.data.packs import publish as _publish
from onemodel_cy.data.packs import reader as _reader
from onemodel_cy.data.packs import writer as _writer
from onemodel_cy.data.packs.format import PackError

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py


def gray_items(n=6, height=5, seed=0):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, (height, int(rng.integers(1, 20))), dtype=np.uint8),
             rng.integers(0, 30, int(rng.integers(0, 4))), i - 2, f"img{i}.png") for i in range(n)]


@pytest.fixture
def gray_pack(tmp_path):
    items = gray_items()
    path = str(tmp_path / "pack")
    om.pack(items, path, progress=False)
    return path, items


def manifest_of(path):
    with open(os.path.join(path, "manifest.json")) as f:
        return json.load(f)


def rewrite_manifest(path, manifest):
    with open(os.path.join(path, "manifest.json"), "w") as f:
        json.dump(manifest, f)


def rewrite_array(path, name, values):
    """Replace an array and update the manifest's record, so only the value is wrong."""
    manifest = manifest_of(path)
    descr = manifest["arrays"][name]["dtype"]
    _format.write_npy(os.path.join(path, f"{name}.npy"), values, descr)
    manifest["arrays"][name] = _format.array_entry(path, name, descr, np.asarray(values).shape)
    rewrite_manifest(path, manifest)


# ---------------------------------------------------------------- the format and the writer

def test_pack_is_plain_npy_and_json_with_matching_sha256(gray_pack):
    """Format §Files: every array is a standard .npy (numpy.load reads it), the manifest
    records its dtype, shape, size and SHA-256 of the file, and the data starts at 128."""
    path, items = gray_pack
    manifest = manifest_of(path)
    assert manifest["format"] == "onemodel_cy-pack" and manifest["version"] == 1
    assert manifest["count"] == len(items) and manifest["pixels"] == "gray8"
    for name, entry in manifest["arrays"].items():
        file = os.path.join(path, entry["file"])
        with open(file, "rb") as f:
            raw = f.read()
        assert hashlib.sha256(raw).hexdigest() == entry["sha256"] and len(raw) == entry["bytes"]
        array = np.load(file)
        assert array.dtype.str == entry["dtype"] and list(array.shape) == entry["shape"]
        assert raw[:6] == b"\x93NUMPY" and len(raw) - array.nbytes == 128
    pixels, offsets, shapes = (np.load(os.path.join(path, f"{n}.npy")) for n in ("pixels", "pixel_offsets", "shapes"))
    ends, targets = np.load(os.path.join(path, "target_offsets.npy")), np.load(os.path.join(path, "targets.npy"))
    keys, key_ends = np.load(os.path.join(path, "keys.npy")), np.load(os.path.join(path, "key_offsets.npy"))
    for i, (image, target, label, key) in enumerate(items):
        c, h, w = shapes[i]
        assert (c, h, w) == (1, *image.shape)
        np.testing.assert_array_equal(pixels[offsets[i]:offsets[i] + h * w].reshape(h, w), image)
        np.testing.assert_array_equal(targets[ends[i]:ends[i + 1]], target)
        assert bytes(keys[key_ends[i]:key_ends[i + 1]]).decode() == key
    np.testing.assert_array_equal(np.load(os.path.join(path, "labels.npy")), [it[2] for it in items])
    digests = np.load(os.path.join(path, "sample_sha256.npy"))
    assert digests.shape == (len(items), 32)
    for i, (image, _, _, _) in enumerate(items):
        assert digests[i].tobytes() == hashlib.sha256(image.tobytes()).digest()


def test_sample_sha256_is_optional_and_checked_when_present(gray_pack, tmp_path):
    """Format §Files: sample_sha256 holds the SHA-256 of each image's stored bytes (float32
    as stored, little-endian); a pack without it (written before it existed) reads as
    before; one of the wrong shape is a PackError naming the file."""
    images = [np.random.default_rng(1).random((2, 3, w), dtype=np.float32) for w in (4, 9)]
    om.pack([(image, [1], 0) for image in images], str(tmp_path / "f32"), progress=False)
    digests = np.load(tmp_path / "f32" / "sample_sha256.npy")
    assert [d.tobytes() for d in digests] == [hashlib.sha256(i.astype("<f4").tobytes()).digest() for i in images]
    path, items = gray_pack
    old = str(tmp_path / "old")
    shutil.copytree(path, old)
    manifest = manifest_of(old)
    del manifest["arrays"]["sample_sha256"]
    os.remove(os.path.join(old, "sample_sha256.npy"))
    rewrite_manifest(old, manifest)
    before = om.PackedImageDataset(path, 0.5, 0.25)
    after = om.PackedImageDataset(old, 0.5, 0.25)
    for i in range(len(items)):
        assert before[i].image.tobytes() == after[i].image.tobytes()
    rewrite_array(path, "sample_sha256", np.zeros((len(items), 31), dtype=np.uint8))
    with pytest.raises(PackError, match=r"manifest\.json: arrays\.sample_sha256\.shape must be \[6, 32\] for the "
                                        r"manifest's count 6, received \[6, 31\]"):
        om.PackedImageDataset(path, 0.5, 0.25)


@pytest.mark.parametrize("kind", ["gray8", "rgb8"])
def test_get_sample_is_section6_of_the_stored_pixels(tmp_path, kind):
    """§6/D15: get_sample(i) is exactly gray8_to_planar / rgb8_to_planar of the stored pixels."""
    rng = np.random.default_rng(3)
    shape = (4,) if kind == "gray8" else (4, 3)
    items = [(rng.integers(0, 256, (shape[0], w, *shape[1:]), dtype=np.uint8), [w], w) for w in (1, 5, 9)]
    om.pack(items, str(tmp_path / "p"), progress=False)
    mean, std = ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225]) if kind == "rgb8" else (0.1307, 0.3081)
    ds = om.PackedImageDataset(str(tmp_path / "p"), mean, std)
    convert = om.gray8_to_planar if kind == "gray8" else om.rgb8_to_planar
    for i, (image, target, label) in enumerate(items):
        sample = ds.get_sample(i)
        assert sample.image.view(np.uint32).tobytes() == convert(image, mean, std).view(np.uint32).tobytes()
        assert sample.target.tolist() == target and sample.label == label
    assert ds.widths.tolist() == [1, 5, 9] and ds.key(0) is None


def test_float32_pack_from_a_dataset_serves_the_samples(tmp_path):
    """Writer source (c): a dataset with get_sample packs float32 [C, H, W] as stored; the
    pack serves the same samples and takes no mean/std (§6 does not apply)."""
    rng = np.random.default_rng(1)
    source = om.ArrayImageDataset([rng.standard_normal((2, 3, w)).astype(np.float32) for w in (4, 1, 7)],
                                  [[1, 2], [], [3]], [7, 8, 9])
    report = om.pack(source, str(tmp_path / "f"), progress=False)
    assert report.count == 3 and report.skipped == []
    ds = om.PackedImageDataset(str(tmp_path / "f"))
    for i in range(3):
        a, b = source.get_sample(i), ds.get_sample(i)
        assert a.image.tobytes() == b.image.tobytes() and a.target.tolist() == b.target.tolist()
        assert a.label == b.label
    with pytest.raises(ValueError, match="float32 pixels"):
        om.PackedImageDataset(str(tmp_path / "f"), 0.5, 0.5)
    om.pack([(np.zeros((2, 2), np.uint8), [], 0)], str(tmp_path / "g"), progress=False)
    with pytest.raises(ValueError, match="give mean= and std="):
        om.PackedImageDataset(str(tmp_path / "g"))


def test_writer_skips_and_reports_bad_items(tmp_path):
    """Writer: an item whose values cannot be packed (an empty image, a negative symbol) is
    skipped and reported by position; the wrong kind of image is a TypeError."""
    items = [(np.zeros((3, 4), np.uint8), [1], 0), (np.zeros((3, 0), np.uint8), [1], 1),
             (np.ones((3, 2), np.uint8), [-1], 2), (np.full((3, 5), 9, np.uint8), [2], 3)]
    report = om.pack(items, str(tmp_path / "p"), progress=False)
    assert report.count == 2 and [s[0] for s in report.skipped] == [1, 2]
    assert "dimension" in report.skipped[0][1] and "[0, 2**31)" in report.skipped[1][1]
    assert om.PackedImageDataset(str(tmp_path / "p"), 0, 1).get_sample(1).label == 3
    with pytest.raises(TypeError, match="item 0: image must be uint8"):
        om.pack([(np.zeros((3, 4), np.float64), [1], 0)], str(tmp_path / "q"), progress=False)
    with pytest.raises(TypeError, match="one kind of pixels"):
        om.pack([(np.zeros((3, 4), np.uint8), [1], 0), (np.zeros((3, 4, 3), np.uint8), [1], 0)],
                str(tmp_path / "r"), progress=False)


@pytest.mark.parametrize("label", [1.9, True, np.float64(2.0), np.bool_(False), "3"])
def test_a_label_that_is_not_an_integer_is_a_type_error(tmp_path, label):
    """Writer values, by Sample's rule: a label 1.9 or True was stored as 1 (int()); now
    it is a TypeError naming the item and its key, and no pack or partial folder is left."""
    items = [(np.zeros((2, 3), np.uint8), [1], 0, "a.png"), (np.zeros((2, 3), np.uint8), [1], label, "b.png")]
    with pytest.raises(TypeError, match=r"item 1 \(key 'b\.png'\): label must be an integer \(not a bool or a float\)"):
        om.pack(items, str(tmp_path / "p"), progress=False)
    with pytest.raises(TypeError, match="Sample.label must be an integer"):
        om.Sample(np.zeros((1, 2, 3), np.float32), [1], label)

    class Duck:         # a dataset whose samples are not Sample objects
        def __len__(self):
            return 1

        def get_sample(self, i):
            return types.SimpleNamespace(image=np.zeros((1, 2, 3), np.float32), target=[1], label=label)
    with pytest.raises(TypeError, match=r"sample 0: label must be an integer"):
        om.pack(Duck(), str(tmp_path / "p"), progress=False)
    assert os.listdir(tmp_path) == []
    report = om.pack([(np.zeros((2, 3), np.uint8), [1], np.int16(-4))], str(tmp_path / "q"), progress=False)
    assert om.PackedImageDataset(report.path, 0, 1).get_sample(0).label == -4     # numpy integers are integers


@pytest.mark.parametrize("key, error, message", [
    (b"caf\xe9.png", TypeError, r"item 1: key must be a str \(or left out\), received b'caf\\xe9\.png' of type bytes"),
    (7, TypeError, r"item 1: key must be a str .* of type int"),
    ("caf\udce9.png", ValueError, r"item 1: key 'caf\\udce9\.png' cannot be stored as UTF-8 \(surrogates not "
                                  r"allowed at character 3\)"),
])
def test_a_key_that_is_not_text_is_refused_before_anything_is_published(tmp_path, key, error, message):
    """Writer values: a bytes key was stored as the string "b'caf\\xe9.png'" (str()), and a key
    with a lone surrogate aborted the pack with a bare UnicodeEncodeError. A key is a str
    that UTF-8 can store (the reader refuses any other keys.npy): a bytes or int key is a
    TypeError, a lone surrogate a ValueError, each naming the item; nothing is left."""
    items = [(np.zeros((2, 3), np.uint8), [1], 0, "ok.png"), (np.zeros((2, 3), np.uint8), [1], 1, key)]
    with pytest.raises(error, match=message):
        om.pack(items, str(tmp_path / "p"), progress=False)
    assert os.listdir(tmp_path) == []


def test_a_big_endian_float32_image_is_stored_as_the_native_one(tmp_path):
    """Writer values: a big-endian float32 [C, H, W] image, which Sample accepts, was refused
    by the writer; now it is packed, its stored bytes equal to the native-order route's."""
    rng = np.random.default_rng(5)
    native = [rng.standard_normal((2, 3, w)).astype(np.float32) for w in (4, 1, 6)]
    swapped = [image.astype(">f4") for image in native]
    assert om.Sample(swapped[0], [1], 0).image.tobytes() == native[0].tobytes()
    om.pack([(image, [1], 0) for image in native], str(tmp_path / "native"), progress=False)
    om.pack([(image, [1], 0) for image in swapped], str(tmp_path / "swapped"), progress=False)
    for name in ("pixels", "shapes", "pixel_offsets"):
        native_file, swapped_file = (tmp_path / route / f"{name}.npy" for route in ("native", "swapped"))
        assert native_file.read_bytes() == swapped_file.read_bytes(), name
    ds = om.PackedImageDataset(str(tmp_path / "swapped"))
    assert all(ds.get_sample(i).image.tobytes() == native[i].tobytes() for i in range(3))


def test_an_interrupted_pack_leaves_nothing_that_looks_complete(tmp_path):
    """Writer atomicity: a source that fails mid-way leaves neither the destination nor the
    temporary folder; an existing pack is refused, and replaced only once complete."""
    def failing():
        yield np.zeros((2, 3), np.uint8), [1], 0
        raise OSError("disk went away")
    with pytest.raises(OSError, match="disk went away"):
        om.pack(failing(), str(tmp_path / "p"), progress=False)
    assert os.listdir(tmp_path) == []
    om.pack([(np.zeros((2, 3), np.uint8), [1], 0)], str(tmp_path / "p"), progress=False)
    with pytest.raises(FileExistsError, match="already exists"):
        om.pack([(np.zeros((2, 3), np.uint8), [1], 0)], str(tmp_path / "p"), progress=False)
    with pytest.raises(OSError):
        om.pack(failing(), str(tmp_path / "p"), progress=False, overwrite=True)
    assert len(om.PackedImageDataset(str(tmp_path / "p"), 0, 1)) == 1 and os.listdir(tmp_path) == ["p"]
    om.pack([(np.ones((2, 3), np.uint8), [1], 0)] * 2, str(tmp_path / "p"), progress=False, overwrite=True)
    assert len(om.PackedImageDataset(str(tmp_path / "p"), 0, 1)) == 2 and os.listdir(tmp_path) == ["p"]


ONE = [(np.zeros((2, 3), np.uint8), [1], 0)]
TWO = [(np.full((2, 3), 7, np.uint8), [2], 1)] * 2


def partials(folder):
    return [name for name in os.listdir(folder) if ".partial-" in name]


@pytest.fixture(params=["renameat2", "portable"])
def publish_route(request, monkeypatch):
    """The exclusive publish through renameat2(RENAME_NOREPLACE), and through the portable
    fallback (os.rename, which replaces an empty folder: guarded by a check)."""
    if request.param == "renameat2" and _publish.renameat2 is None:
        pytest.skip("no renameat2 in this libc")     # not Linux: the portable route runs
    if request.param == "portable":
        monkeypatch.setattr(_publish, "renameat2", None)
    return request.param


def publish_meanwhile(monkeypatch, action):
    """Run ``action`` once, in the writer between its manifest (its last file) and its publish."""
    write = _writer.write_manifest

    def hooked(folder, manifest):
        write(folder, manifest)
        monkeypatch.setattr(_writer, "write_manifest", write)
        action()
    monkeypatch.setattr(_writer, "write_manifest", hooked)


@pytest.mark.parametrize("rival", ["pack", "empty folder"])
def test_a_pack_published_meanwhile_is_never_replaced(tmp_path, monkeypatch, publish_route, rival):
    """Writer publish (overwrite=False): writer B publishes the destination while writer A is
    between its last file and its rename. A used to move B's finished pack aside, publish
    its own and delete B's; now A fails with a FileExistsError naming the path, B's pack is
    left as it was and A's partial folder is removed (an empty folder appearing there is
    refused too, not replaced)."""
    out = str(tmp_path / "p")
    if rival == "pack":
        publish_meanwhile(monkeypatch, lambda: om.pack(TWO, out, progress=False))
    else:
        publish_meanwhile(monkeypatch, lambda: os.mkdir(out))
    with pytest.raises(FileExistsError, match=r"p: another writer published it .* partial folder .* was removed"):
        om.pack(ONE, out, progress=False)
    assert partials(tmp_path) == [] and os.listdir(tmp_path) == ["p"]
    if rival == "pack":
        assert len(om.PackedImageDataset(out, 0, 1)) == 2
    else:
        assert os.listdir(out) == []


def test_two_writers_replacing_one_pack_leave_one(tmp_path, monkeypatch, publish_route):
    """Writer publish (overwrite=True): writer B publishes while writer A has just moved the
    old pack aside. A's rename then met B's pack and failed, leaving the old pack in a
    hidden folder; now A moves B's aside too and publishes: the last writer wins, and no
    hidden folder is left."""
    out = str(tmp_path / "p")
    om.pack(ONE * 3, out, progress=False)
    rename = os.rename
    calls = []

    def hooked(src, dst, *args, **kwargs):
        rename(src, dst, *args, **kwargs)
        if src == out and not calls:             # A has moved the old pack aside
            calls.append(dst)
            om.pack(TWO, out, progress=False, overwrite=True)     # B
    monkeypatch.setattr(os, "rename", hooked)
    om.pack(ONE, out, progress=False, overwrite=True)              # A
    monkeypatch.setattr(os, "rename", rename)
    assert calls and os.listdir(tmp_path) == ["p"] and len(om.PackedImageDataset(out, 0, 1)) == 1


def test_a_failed_replace_puts_the_old_pack_back(tmp_path, monkeypatch):
    """Writer publish (overwrite=True): when the publish itself fails after the old pack was
    moved aside, the old pack is put back and the partial removed."""
    out = str(tmp_path / "p")
    om.pack(ONE * 3, out, progress=False)
    exclusive = _publish.rename_exclusive

    def failing(src, dst):
        if ".replaced-" not in src:
            raise OSError(errno.EIO, "the disk went away")
        exclusive(src, dst)
    monkeypatch.setattr(_publish, "rename_exclusive", failing)
    with pytest.raises(OSError, match="the disk went away"):
        om.pack(ONE, out, progress=False, overwrite=True)
    assert os.listdir(tmp_path) == ["p"] and len(om.PackedImageDataset(out, 0, 1)) == 3


FSIZE_CHILD = r"""
import os, resource, signal, sys
import numpy as np
import onemodel_cy as om
from onemodel_cy.data.packs import format as _format
_format.FSYNC = False
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)          # a write past the limit fails with EFBIG
resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
items = [(np.full((64, 1024), i, np.uint8), [1], i) for i in range(40)]    # 2.6 MB of pixels
try:
    om.pack(items, sys.argv[1], progress=False)
except OSError as error:
    print("error", error.errno, type(error).__name__)
print("left", sorted(os.listdir(os.path.dirname(sys.argv[1]))))
"""


@pytest.mark.skipif(sys.platform == "win32", reason="RLIMIT_FSIZE is POSIX")
def test_a_write_past_the_file_size_limit_removes_its_partial_folder(tmp_path):
    """Writer cleanup (a full disk, here the file-size limit): the pixel write fails with
    EFBIG, and the abort's close failed again flushing its buffer, so the partial folder
    was never removed; now the OSError comes out and nothing is left."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-c", FSIZE_CHILD, str(tmp_path / "p")], capture_output=True,
                         text=True, timeout=120, env=env, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == [f"error {errno.EFBIG} OSError", "left []"], run.stdout + run.stderr


def test_a_close_that_fails_still_removes_the_partial_folder(tmp_path, monkeypatch):
    """Writer cleanup: a source error followed by a pixel-file close that fails too; the
    close's error used to replace the source's and leave the partial folder. Now the
    source's error is raised, the close's added as a note, and the folder is removed."""
    import io
    close = io.BufferedWriter.close

    class Failing(io.BufferedWriter):
        def close(self):
            close(self)
            raise OSError(errno.ENOSPC, "No space left on device")
    opened = open

    def opener(path, mode="r", *args, **kwargs):
        f = opened(path, mode, *args, **kwargs)
        return Failing(f.detach()) if path.endswith("pixels.npy") else f
    monkeypatch.setattr(_writer, "open", opener, raising=False)

    def failing():
        yield from ONE
        raise RuntimeError("source broke")
    with pytest.raises(RuntimeError, match="source broke") as caught:
        om.pack(failing(), str(tmp_path / "p"), progress=False)
    if sys.version_info >= (3, 11):        # exceptions carry notes from 3.11 on
        assert any("No space left" in note for note in caught.value.__notes__)
    assert os.listdir(tmp_path) == []


def test_pickled_dataset_reopens_the_pack(gray_pack):
    """A pickled PackedImageDataset (a process's copy) maps the same pack again: the same
    content identity (the SHA-256 of manifest.json's bytes) and the same samples."""
    path, _ = gray_pack
    ds = om.PackedImageDataset(path, 0.5, 0.5)
    with open(os.path.join(path, "manifest.json"), "rb") as f:
        assert ds.manifest_sha256 == hashlib.sha256(f.read()).hexdigest()
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.path == path and copy.get_sample(2).image.tobytes() == ds.get_sample(2).image.tobytes()
    assert copy.manifest_sha256 == ds.manifest_sha256 and copy.fingerprint() == ds.fingerprint()


def test_a_pickled_pack_refuses_a_pack_replaced_since_it_was_opened(gray_pack):
    """Issue 22 (1): a pickle names the pack's content, not only its path. Unpickled after a
    re-pack in place with other samples, it used to open the new pack; now a PackError names
    the folder and both digests. Re-packed with the same samples (the same bytes), it loads;
    with the folder gone, the PackError says so."""
    path, items = gray_pack
    ds = om.PackedImageDataset(path, 0.5, 0.5)
    blob = pickle.dumps(ds)
    om.pack(gray_items(seed=1), path, progress=False, overwrite=True)
    new = om.PackedImageDataset(path, 0.5, 0.5).manifest_sha256
    with pytest.raises(PackError, match=re.escape(f"{path} was replaced since it was opened: manifest SHA-256 "
                                                  f"{new}, expected {ds.manifest_sha256}; open it again")):
        pickle.loads(blob)
    om.pack(items, path, progress=False, overwrite=True)
    assert pickle.loads(blob).get_sample(5).image.tobytes() == ds.get_sample(5).image.tobytes()
    shutil.rmtree(path)
    with pytest.raises(PackError, match=re.escape(f"{path} was replaced or removed since it was opened")):
        pickle.loads(blob)
    with pytest.raises(TypeError, match="manifest_sha256"):
        _reader.reopen(path, 0.5, 0.5, "index", None, 1)


def test_a_pack_opened_by_a_relative_path_keeps_its_folder_after_chdir(gray_pack, tmp_path, monkeypatch):
    """Issue 22 (1): the path is made absolute when the pack is opened, so a pickle made after
    os.chdir (into a folder holding another pack of that name) reopens the folder opened."""
    path, _ = gray_pack
    monkeypatch.chdir(os.path.dirname(path))
    ds = om.PackedImageDataset(os.path.basename(path), 0.5, 0.5)
    assert ds.path == path
    other = tmp_path / "elsewhere"
    other.mkdir()
    om.pack(gray_items(seed=1), str(other / os.path.basename(path)), progress=False)
    monkeypatch.chdir(other)
    copy = pickle.loads(pickle.dumps(ds))
    assert copy.path == path and copy.get_sample(0).image.tobytes() == ds.get_sample(0).image.tobytes()


# ---------------------------------------------------------------- refusals, each naming the file

def test_missing_manifest_or_array(gray_pack, tmp_path):
    """Bad input: a folder without manifest.json (a partial pack) and a missing array."""
    path, _ = gray_pack
    with pytest.raises(PackError, match=r"manifest\.json: missing"):
        om.PackedImageDataset(str(tmp_path), 0, 1)
    os.remove(os.path.join(path, "targets.npy"))
    with pytest.raises(PackError, match=r"targets\.npy: missing"):
        om.PackedImageDataset(path, 0, 1)


def test_truncated_array(gray_pack):
    """Bad input: a truncated pixels.npy (size differs from the manifest's record)."""
    path, _ = gray_pack
    file = os.path.join(path, "pixels.npy")
    with open(file, "r+b") as f:
        f.truncate(os.path.getsize(file) - 3)
    with pytest.raises(PackError, match=r"pixels\.npy: holds \d+ bytes, the manifest records"):
        om.PackedImageDataset(path, 0, 1)


def test_other_version_or_format(gray_pack):
    """Bad input: a manifest of another format version (or a version that only compares
    equal to 1), or of another format."""
    path, _ = gray_pack
    manifest = manifest_of(path)
    rewrite_manifest(path, {**manifest, "version": 2})
    with pytest.raises(PackError, match=r"manifest\.json: pack format version 2"):
        om.PackedImageDataset(path, 0, 1)
    for almost in (True, 1.0, "1"):         # equal to 1 in Python, or alike, but not the integer 1
        rewrite_manifest(path, {**manifest, "version": almost})
        with pytest.raises(PackError, match="pack format version"):
            om.PackedImageDataset(path, 0, 1)
    rewrite_manifest(path, {**manifest, "format": "mds"})
    with pytest.raises(PackError, match="format must be"):
        om.PackedImageDataset(path, 0, 1)


@pytest.mark.parametrize("field", ["count", "version", "arrays.labels.bytes", "arrays.shapes.shape[1]"])
def test_an_integer_of_thousands_of_digits_is_a_pack_error_naming_the_field(gray_pack, field):
    """Bad input: an integer field of 5000 digits made json raise Python's bare ValueError
    ('Exceeds the limit (4300 digits) for integer string conversion'), naming no file; now
    a PackError naming manifest.json and the field. 20 digits are still parsed (and refused
    by the field's own range check)."""
    path, _ = gray_pack
    text = json.dumps(manifest_of(path))
    manifest = json.loads(text)
    *parents, last = field.replace("[", ".").replace("]", "").split(".")
    holder = manifest
    for name in parents:
        holder = holder[int(name)] if isinstance(holder, list) else holder[name]
    holder[int(last) if isinstance(holder, list) else last] = "HUGE"
    with open(os.path.join(path, "manifest.json"), "w") as f:
        f.write(json.dumps(manifest).replace('"HUGE"', "-" + "9" * 5000))
    with pytest.raises(PackError, match=rf"manifest\.json: {re.escape(field)} is an integer of 5000 digits"):
        om.PackedImageDataset(path, 0, 1)
    rewrite_manifest(path, {**json.loads(text), "count": 10 ** 19})
    with pytest.raises(PackError, match=r"manifest\.json: count must be an integer in \[1, 2\*\*31\), received 1000"):
        om.PackedImageDataset(path, 0, 1)


def test_sha256_mismatch(gray_pack):
    """Integrity: a changed byte in an index array fails its SHA-256 on opening; a changed
    pixel fails with verify="full" (the pixels are hashed only when asked)."""
    path, _ = gray_pack
    om.PackedImageDataset(path, 0, 1, verify="full")
    file = os.path.join(path, "pixels.npy")
    with open(file, "r+b") as f:
        f.seek(130)
        byte = f.read(1)
        f.seek(130)
        f.write(bytes([byte[0] ^ 1]))
    om.PackedImageDataset(path, 0, 1)
    with pytest.raises(PackError, match=r"pixels\.npy: SHA-256 differs"):
        om.PackedImageDataset(path, 0, 1, verify="full")
    file = os.path.join(path, "labels.npy")
    with open(file, "r+b") as f:
        f.seek(128)
        f.write(b"\x7f")
    with pytest.raises(PackError, match=r"labels\.npy: SHA-256 differs"):
        om.PackedImageDataset(path, 0, 1)


def test_offsets_past_the_pixels_and_zero_width(gray_pack):
    """Bad input: an image extending past pixels.npy (including a width chosen to overflow
    C * H * W in int64) and a width of 0, each refused naming the array, with correct SHAs."""
    path, items = gray_pack
    offsets = np.load(os.path.join(path, "pixel_offsets.npy"))
    shapes = np.load(os.path.join(path, "shapes.npy"))
    total = np.load(os.path.join(path, "pixels.npy")).shape[0]
    for bad_offset in (total, -1):
        moved = offsets.copy()
        moved[3] = bad_offset
        rewrite_array(path, "pixel_offsets", moved)
        with pytest.raises(PackError, match=r"pixel_offsets\.npy: sample 3 .* points past the"):
            om.PackedImageDataset(path, 0, 1)
    rewrite_array(path, "pixel_offsets", offsets)
    for w, message in ((0, r"shapes\.npy: sample 4 has W=0"), (2**62, "points past"), (2**61 + 1, "points past")):
        wide = shapes.copy()
        wide[4, 2] = w
        rewrite_array(path, "shapes", wide)
        with pytest.raises(PackError, match=message):
            om.PackedImageDataset(path, 0, 1)


def test_target_offsets_and_symbols_checked(gray_pack):
    """Bad input: target offsets that do not rise to the targets' length, a negative symbol."""
    path, _ = gray_pack
    ends = np.load(os.path.join(path, "target_offsets.npy"))
    bad = ends.copy()
    bad[-1] += 1
    rewrite_array(path, "target_offsets", bad)
    with pytest.raises(PackError, match=r"target_offsets\.npy: must rise from 0"):
        om.PackedImageDataset(path, 0, 1)
    rewrite_array(path, "target_offsets", ends)
    targets = np.load(os.path.join(path, "targets.npy"))
    targets[0] = -4
    rewrite_array(path, "targets", targets)
    with pytest.raises(PackError, match=r"targets\.npy: value -4"):
        om.PackedImageDataset(path, 0, 1)


# ---------------------------------------------------------------- known answers for ports

def read_with_numpy(path):
    """A port's reader in a few lines of numpy (docs/packed-format.md): the samples' pixels."""
    manifest = manifest_of(path)
    load = {name: np.load(os.path.join(path, e["file"]), mmap_mode="r") for name, e in manifest["arrays"].items()}
    out = []
    for i in range(manifest["count"]):
        c, h, w = (int(v) for v in load["shapes"][i])
        start = int(load["pixel_offsets"][i])
        flat = np.asarray(load["pixels"][start:start + c * h * w])
        out.append(flat.reshape(h, w) if manifest["pixels"] == "gray8" else flat.reshape(h, w, 3))
    return manifest, load, out


@pytest.mark.parametrize("name", ["tiny_gray8", "tiny_rgb8"])
def test_known_answer_packs(name, tmp_path):
    """Known answers (spec_tests/data/): the committed pack opens with its SHAs checked,
    each sample's §6 image and target match expected.json (computed with numpy alone), a
    numpy-only reader finds the same pixels, one loader batch has the recorded bytes, and
    the writer rewrites the same files byte for byte."""
    with open(os.path.join(DATA, "expected.json")) as f:
        expected = json.load(f)
    want = expected[name]
    path = os.path.join(DATA, name)
    ds = om.PackedImageDataset(path, want["mean"], want["std"], verify="full")
    manifest, load, images = read_with_numpy(path)
    for i, sample in enumerate(want["samples"]):
        s = ds.get_sample(i)
        assert list(s.image.shape) == sample["shape"] and s.target.tolist() == sample["target"]
        assert s.label == sample["label"] and ds.key(i) == sample["key"]
        assert hashlib.sha256(s.image.astype("<f4").tobytes()).hexdigest() == sample["image_sha256"]
        convert = om.gray8_to_planar if images[i].ndim == 2 else om.rgb8_to_planar
        assert convert(images[i], want["mean"], want["std"]).tobytes() == s.image.tobytes()
    b = expected["batch"]
    loader = om.DataLoader(ds, om.ShuffledSampler(len(ds), b["batch_size"], b["sampler_seed"]),
                           om.ImageBatchCollator(width_multiple=b["width_multiple"], pad_value=b["pad_value"],
                                                 augmentation=om.GainOffset(b["gain"], b["offset"])), seed=b["seed"])
    batch = loader.batch_at(b["g"])
    assert np.asarray(batch.indices).tolist() == want["batch_indices"]
    assert hashlib.sha256(np.asarray(batch.images).tobytes()).hexdigest() == want["batch_images_sha256"]
    sys.path.insert(0, DATA)
    try:
        import make_tiny_packs as maker
    finally:
        sys.path.remove(DATA)
    samples = maker.gray_samples() if name == "tiny_gray8" else maker.rgb_samples()
    vocabulary = maker.VOCABULARY if name == "tiny_gray8" else None
    om.pack(samples, str(tmp_path / name), vocabulary=vocabulary, progress=False)
    for file in sorted(os.listdir(path)):
        with open(os.path.join(path, file), "rb") as f, open(tmp_path / name / file, "rb") as g:
            assert f.read() == g.read(), file


def rss_file_kb():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("RssFile:"))


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="needs Linux /proc for resident sizes")
def test_release_pages_drops_resident_pages_and_changes_no_batch(tmp_path):
    """Large packs: release_pages() gives back the mapping's resident pages (file-backed
    RSS falls) and the batches read afterwards are the same bytes (pages map again)."""
    rng = np.random.default_rng(5)
    items = [(rng.integers(0, 256, (64, 1024), dtype=np.uint8), [1], i) for i in range(128)]    # 8 MiB
    om.pack(items, str(tmp_path / "p"), progress=False)
    ds = om.PackedImageDataset(str(tmp_path / "p"), 0.5, 0.5)
    loader = om.DataLoader(ds, om.SequentialSampler(128, 128), om.ImageBatchCollator(), seed=0)
    first = np.asarray(loader.batch_at(0).images).tobytes()
    touched = rss_file_kb()
    assert ds.release_pages() is True
    assert rss_file_kb() < touched - 4096          # most of the 8 MiB just read is given back
    assert np.asarray(loader.batch_at(0).images).tobytes() == first


def mapping_rss_kb(path):
    """Resident kB of this process's mappings of ``path`` (/proc/self/smaps)."""
    total, inside = 0, False
    with open("/proc/self/smaps") as f:
        for line in f:
            if line[:1].isdigit() or line[:1] in "abcdef":       # a mapping's header line
                inside = line.rstrip().endswith(path)
            elif inside and line.startswith("Rss:"):
                total += int(line.split()[1])
    return total


@pytest.mark.skipif(not os.path.exists("/proc/self/smaps"), reason="needs Linux /proc for resident sizes")
@pytest.mark.parametrize("workers", [0, 2])
def test_resident_limit_keeps_the_mapping_small_and_changes_no_batch(tmp_path, workers):
    """Issue 9 (packs larger than memory): the fast path gives the pixel mapping's pages
    back every ``resident_limit`` bytes it reads, so a whole pass keeps the mapping's
    resident size near that limit, where ``resident_limit=None`` keeps all of it; the
    batches are the same bytes either way, and a pickled dataset keeps its limit."""
    rng = np.random.default_rng(6)
    items = [(rng.integers(0, 256, (64, 1024), dtype=np.uint8), [1], i) for i in range(128)]    # 8 MiB
    om.pack(items, str(tmp_path / "p"), progress=False)
    pixels = os.path.realpath(str(tmp_path / "p" / "pixels.npy"))
    limit = 1 << 20
    kept = om.PackedImageDataset(str(tmp_path / "p"), 0.5, 0.5, resident_limit=None)
    released = pickle.loads(pickle.dumps(om.PackedImageDataset(str(tmp_path / "p"), 0.5, 0.5,
                                                               resident_limit=limit)))
    assert released.resident_limit == limit and kept.resident_limit is None
    streams = []
    for ds in (kept, released):
        loader = om.DataLoader(ds, om.SequentialSampler(128, 8), om.ImageBatchCollator(), seed=0,
                               workers=workers)
        with loader:
            streams.append([np.asarray(b.images).tobytes() for b in loader.iter(0, 16)])
        if ds is kept:
            assert mapping_rss_kb(pixels) >= 7 * 1024, "the whole pass should be resident without a limit"
            kept.release_pages()
    assert streams[0] == streams[1]
    assert released.pages_released >= 7            # 8 MiB read, a release every 1 MiB
    # At most the limit, plus the batch read after the last release, plus fault-around.
    assert mapping_rss_kb(pixels) <= limit // 1024 + 512 + 256


def test_resident_limit_argument_checks(gray_pack):
    """The exception rule: a non-integer resident_limit is a TypeError, zero or a negative
    value a ValueError (None means never release); a pack no larger than the limit never
    releases."""
    path, _ = gray_pack
    with pytest.raises(TypeError, match="resident_limit"):
        om.PackedImageDataset(path, 0, 1, resident_limit=1.5)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="resident_limit"):
            om.PackedImageDataset(path, 0, 1, resident_limit=bad)
    ds = om.PackedImageDataset(path, 0, 1, resident_limit=1)
    small = om.PackedImageDataset(path, 0, 1)
    loader = om.DataLoader(small, om.SequentialSampler(len(small), 2), om.ImageBatchCollator(), seed=0)
    loader.batch_at(0)
    assert small.pages_released == 0               # its few bytes are below the default 1 GiB
    loader = om.DataLoader(ds, om.SequentialSampler(len(ds), 2), om.ImageBatchCollator(), seed=0)
    loader.batch_at(0)
    assert ds.pages_released == 1
