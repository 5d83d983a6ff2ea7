"""Packing a folder of line images with a labels file (Pillow, the ``pack`` extra; CI installs it
through the ``test`` extra): resizing to a fixed height, the vocabulary, the skipped-item
report, the refusal of a labels file naming a missing image, and ``onemodel-cy pack``.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.data.packs.format import PackError
from onemodel_cy.cli import main

Image = pytest.importorskip("PIL.Image")


pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py


@pytest.fixture
def folder(tmp_path):
    """Four PNG lines (sizes 40x10, 25x20, 7x3 and RGB 30x15), one corrupt file, a labels file."""
    rng = np.random.default_rng(0)
    images = tmp_path / "images"
    images.mkdir()
    for name, (w, h) in {"a.png": (40, 10), "b.png": (25, 20), "c.png": (7, 3)}.items():
        Image.fromarray(rng.integers(0, 256, (h, w), dtype=np.uint8), "L").save(images / name)
    Image.fromarray(rng.integers(0, 256, (15, 30, 3), dtype=np.uint8), "RGB").save(images / "d.png")
    (images / "bad.png").write_bytes(b"not a png at all")
    labels = tmp_path / "labels.txt"
    labels.write_text("a.png\thello world\nb.png\tab\n\nbad.png\tbroken\nc.png\t \nd.png\tdab\n",
                      encoding="utf-8")
    return str(images), str(labels)


def test_folder_pack_resizes_maps_text_and_reports_skips(folder, tmp_path):
    """Writer source (a): every image is decoded to 8-bit grey and resized to the fixed
    height keeping its aspect (width rounded half up); text becomes symbols k + 1 of the
    sorted vocabulary written to the manifest; the corrupt file and the empty text are
    skipped and reported by file name; keys are the file names, labels the line number."""
    images, labels = folder
    report = om.pack(images, str(tmp_path / "p"), labels=labels, height=8, workers=2, progress=False)
    assert report.count == 3
    assert sorted(s[0] for s in report.skipped) == ["bad.png", "c.png"]
    reasons = dict(report.skipped)
    assert reasons["c.png"] == "empty label" and reasons["bad.png"].startswith("unreadable image")
    ds = om.PackedImageDataset(report.path, 0.0, 1.0)
    # Built from every non-empty text before decoding: bad.png's text counts too.
    assert ds.vocabulary == ("<blank>", *sorted(set("hello world" + "ab" + "broken" + "dab")))
    assert ds.manifest["vocabulary"] == sorted(set("hello world" + "ab" + "broken" + "dab"))   # ids 1, 2, ...
    assert ds.shapes.tolist() == [[1, 8, 32], [1, 8, 10], [1, 8, 16]]     # 40*8/10, 25*8/20=10, 30*8/15
    assert [ds.key(i) for i in range(3)] == ["a.png", "b.png", "d.png"]
    assert [ds.get_sample(i).label for i in range(3)] == [0, 1, 5]
    vocab = ds.vocabulary
    assert "".join(vocab[k] for k in ds.get_sample(0).target.tolist()) == "hello world"
    assert ds.decode(ds.get_sample(0).target) == "hello world"
    with Image.open(os.path.join(images, "d.png")) as im:
        want = np.asarray(im.convert("L").resize((16, 8), Image.Resampling.BILINEAR))
    assert ds.get_sample(2).image.tobytes() == om.gray8_to_planar(want, 0.0, 1.0).tobytes()


def test_folder_pack_rgb_and_given_vocabulary(folder, tmp_path):
    """Writer source (a) in RGB mode, with a given vocabulary: a text using a symbol outside
    it is skipped with the symbols named."""
    images, labels = folder
    report = om.pack(images, str(tmp_path / "p"), labels=labels, height=6, mode="RGB", vocabulary="abd",
                     progress=False)
    assert report.count == 2 and dict(report.skipped)["a.png"].startswith("label uses symbols outside")
    ds = om.PackedImageDataset(report.path, [0.4, 0.5, 0.6], [0.2, 0.3, 0.4])
    assert ds.pixel_kind == "rgb8" and ds.shapes[:, 0].tolist() == [3, 3]
    assert ds.get_sample(1).target.tolist() == [3, 1, 2]        # d, a, b in "abd"


def test_labels_file_naming_a_missing_image(folder, tmp_path):
    """Bad input: a labels file line naming a file that is not in the folder is refused
    before anything is decoded, naming the labels file, the line and the missing path."""
    images, labels = folder
    with open(labels, "a", encoding="utf-8") as f:
        f.write("gone.png\tghost\n")
    with pytest.raises(PackError, match=r"labels\.txt, line 7: names 'gone\.png'"):
        om.pack(images, str(tmp_path / "p"), labels=labels, progress=False)
    assert not os.path.exists(tmp_path / "p")


def test_cli_pack_then_train(folder, tmp_path, capsys):
    """`onemodel-cy pack FOLDER OUT --labels FILE`: one command makes a pack the loader
    reads through the packed view (batch_at equals the get_sample route)."""
    images, labels = folder
    out = str(tmp_path / "cli-pack")
    assert main(["pack", images, out, "--labels", labels, "--height", "8", "--no-progress"]) == 0
    printed = capsys.readouterr().out
    assert "packed 3 samples" in printed and "skipped bad.png" in printed
    ds = om.PackedImageDataset(out, 0.5, 0.5)
    loader = om.DataLoader(ds, om.SequentialSampler(3, 3), om.ImageBatchCollator(pad_value=-1.0), seed=0)
    from onemodel_cy.collate.fetch import build_batch
    batch = loader.batch_at(0)
    slow = build_batch(loader.collator, ds, np.arange(3, dtype=np.int64), 0, 0, 0, route="samples")
    assert np.asarray(batch.images).tobytes() == np.asarray(slow.images).tobytes()


def test_a_labels_file_that_is_not_utf8_names_its_line(folder, tmp_path):
    """Bad input: a labels file with a Latin-1 byte raised a bare UnicodeDecodeError naming
    neither the file nor the line; now a PackError naming both (and the column). Lines
    still split as text mode splits them (CR, LF and CRLF each end one)."""
    from onemodel_cy.data.packs.sources import read_labels
    images, labels = folder
    with open(labels, "ab") as f:
        f.write("a.png\tone\r\nb.png\ttwo\rc.png\tcafé\r\r\nd.png\tend".encode("utf-8"))
    with open(labels, encoding="utf-8") as f:       # text mode's lines and numbers
        want = [(n, line.rstrip("\r\n")) for n, line in enumerate(f) if line.strip()]
    got = read_labels(images, labels)
    assert [(position, f"{name}\t{text}") for position, name, _, text in got] == want and len(want) == 9
    with open(labels, "ab") as f:
        f.write(b"\nb.png\tcaf\xe9\n")
    with pytest.raises(PackError, match=r"labels\.txt, line 12: not UTF-8 text \(byte 0xe9 at column 10\)"):
        om.pack(images, str(tmp_path / "p"), labels=labels, progress=False)
    assert os.listdir(tmp_path) == ["images", "labels.txt"]


def cli_error(capsys, argv):
    """``main(argv)``'s exit status and its stderr, which must be one line and no traceback."""
    status = main(argv)
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("onemodel-cy: error: ") and "Traceback" not in err, err
    return status, err


def test_cli_user_errors_are_one_line_naming_the_file(folder, tmp_path, capsys):
    """`onemodel-cy pack` user errors printed raw tracebacks; now one line
    `onemodel-cy: error: <message>` naming the file, status 2 for the command line (a
    missing folder or labels file, an existing output without --overwrite) and 1 for the
    data (a labels line naming a missing image, a labels file that is not UTF-8)."""
    images, labels = folder
    out = str(tmp_path / "p")
    missing = str(tmp_path / "nowhere")
    assert cli_error(capsys, ["pack", missing, out, "--labels", labels]) == (
        2, f"onemodel-cy: error: {missing}: no such folder (SOURCE is the folder of image files)\n")
    status, err = cli_error(capsys, ["pack", images, out, "--labels", missing])
    assert status == 2 and f"{missing}: no such file" in err
    status, err = cli_error(capsys, ["pack", images, out, "--labels", labels, "--height", "0"])
    assert status == 2 and "--height must be an integer in [1, 2**31), received 0" in err
    os.mkdir(out)
    status, err = cli_error(capsys, ["pack", images, out, "--labels", labels])
    assert status == 2 and f"{out}: already exists (pass --overwrite to replace it)" in err
    with open(labels, "a", encoding="utf-8") as f:
        f.write("gone.png\tghost\n")
    status, err = cli_error(capsys, ["pack", images, out, "--labels", labels, "--overwrite"])
    assert status == 1 and "labels.txt, line 7: names 'gone.png'" in err
    with open(labels, "wb") as f:
        f.write(b"a.png\tok\nb.png\t\xff\n")
    status, err = cli_error(capsys, ["pack", images, out, "--labels", labels, "--overwrite"])
    assert status == 1 and f"{labels}, line 2: not UTF-8 text" in err
    assert os.listdir(out) == []            # what was there is untouched


def test_cli_keeps_the_traceback_of_a_bug(folder, tmp_path, monkeypatch):
    """An unexpected exception inside `onemodel-cy pack` is no user error: it propagates
    (a traceback), it is not turned into one line."""
    import onemodel_cy.data.packs.writer as pack_module

    def broken(*args, **kwargs):
        raise TypeError("a bug")
    monkeypatch.setattr(pack_module, "pack", broken)
    images, labels = folder
    with pytest.raises(TypeError, match="a bug"):
        main(["pack", images, str(tmp_path / "p"), "--labels", labels])


def test_cli_error_from_the_command_line_has_no_traceback(tmp_path):
    """`python -m onemodel_cy pack` on a missing folder, as a user runs it: status 2, one line."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
    run = subprocess.run([sys.executable, "-m", "onemodel_cy", "pack", str(tmp_path / "none"), str(tmp_path / "p"),
                          "--labels", str(tmp_path / "labels.txt")], capture_output=True, text=True, timeout=120,
                         env=env, cwd=root)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr == (f"onemodel-cy: error: {tmp_path / 'none'}: no such folder "
                          f"(SOURCE is the folder of image files)\n")


def test_a_labels_line_without_a_tab_is_refused_naming_the_line(folder, tmp_path, capsys):
    """Bad input: a space where the TAB belongs was taken as the separator, silently (a file
    name holding a space was then split at the wrong place); now a PackError naming the
    labels file and the line, and through the CLI one line with status 1."""
    images, labels = folder
    with open(labels, "a", encoding="utf-8") as f:
        f.write("a.png hello there\n")
    with pytest.raises(PackError, match=r"labels\.txt, line 7: no TAB between the file name and the text in "
                                        r"'a\.png hello there'"):
        om.pack(images, str(tmp_path / "p"), labels=labels, progress=False)
    status, err = cli_error(capsys, ["pack", images, str(tmp_path / "q"), "--labels", labels, "--no-progress"])
    assert status == 1 and "line 7: no TAB" in err
    assert not (tmp_path / "p").exists() and not (tmp_path / "q").exists()


def test_a_labels_file_with_a_bom_and_crlf_line_ends(folder, tmp_path):
    """Issue 38, item 4: a labels file saved by a Windows editor (a UTF-8 byte order mark,
    CRLF line ends) packs as the same file without them. Everything else stays strict: a
    BOM anywhere but the file's start is text (here part of a file name, which does not
    exist), and a UTF-16 file (its BOM FF FE) is not UTF-8."""
    images, labels = folder
    with open(labels, "rb") as f:
        plain = f.read()
    windows = str(tmp_path / "windows.txt")
    with open(windows, "wb") as f:
        f.write(b"\xef\xbb\xbf" + plain.replace(b"\n", b"\r\n"))
    a = om.pack(images, str(tmp_path / "a"), labels=labels, height=8, progress=False)
    b = om.pack(images, str(tmp_path / "b"), labels=windows, height=8, progress=False)
    assert a.count == b.count == 3 and a.skipped == b.skipped
    for name in ("pixels", "shapes", "targets", "labels", "keys", "sample_sha256"):
        assert (np.load(os.path.join(a.path, f"{name}.npy")).tobytes()
                == np.load(os.path.join(b.path, f"{name}.npy")).tobytes()), name
    with open(windows, "wb") as f:
        f.write(b"\xef\xbb\xbfa.png\tone\r\n\xef\xbb\xbfb.png\ttwo\r\n")
    with pytest.raises(PackError, match=r"windows\.txt, line 2: names '\\ufeffb\.png'"):
        om.pack(images, str(tmp_path / "c"), labels=windows, progress=False)
    with open(windows, "wb") as f:
        f.write("a.png\tone\n".encode("utf-16"))
    with pytest.raises(PackError, match=r"windows\.txt, line 1: not UTF-8 text \(byte 0xff at column 1\)"):
        om.pack(images, str(tmp_path / "d"), labels=windows, progress=False)
    assert not os.path.exists(tmp_path / "c") and not os.path.exists(tmp_path / "d")
