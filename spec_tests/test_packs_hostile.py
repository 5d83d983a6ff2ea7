"""Packs from someone else (issue 36, items 1, 2, 3, 4, 7, 17): a manifest is data, not a plan.

Whoever serves a pack writes its manifest: the names it gives, the sizes and counts it
records, its length and its vocabulary. Each test here gives the reader a hostile or
malformed manifest, on disk and at a URL served by a real HTTP server on 127.0.0.1 (nginx,
or aiohttp's static files where nginx is not installed; Python's ``http.server``, which
ignores byte ranges, for the server that does), and checks that it
is a ``PackError`` naming the pack, the file and the field, before anything is fetched or
written outside the cache's own folders, in bounded memory, and that no message shows a
password of the URL. Needs the ``remote`` extra (fsspec, aiohttp).
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import sys
import tracemalloc

import fsspec  # noqa: F401  (the remote extra: CI leaves this file out where it is not installed)
import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.data.packs import format as _format
from onemodel_cy.data.packs.format import PackError
from remote_packs import free_port, http_server, items, nothing_in, running, write_packs

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

QUICK = {"attempts": 2, "backoff": 0.01}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(root folder served, base URL)``: the HTTP server serving ``root`` (a gray pack ``gray``
    and a float32 sharded pack ``sharded``) on a free loopback port."""
    run, root = tmp_path_factory.mktemp("server"), tmp_path_factory.mktemp("served")
    write_packs(root)
    with http_server(root, str(run)) as port:
        yield root, f"http://127.0.0.1:{port}"


def manifest_of(folder):
    with open(os.path.join(folder, "manifest.json"), "rb") as f:
        return json.loads(f.read())


def write_manifest(folder, manifest) -> str:
    """``manifest`` written as ``folder``'s; its SHA-256."""
    data = json.dumps(manifest).encode()
    with open(os.path.join(folder, "manifest.json"), "wb") as f:
        f.write(data)
    return hashlib.sha256(data).hexdigest()


def variant(root, base, name, edit, shard=None):
    """A copy of the pack ``root/base`` at ``root/name`` whose manifest ``edit(manifest)``
    changed (for a sharded pack with ``shard``, that shard's manifest, and the pack's
    manifest then records its new SHA-256, as a hostile writer would); its folder."""
    folder = root / name
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(root / base, folder)
    inner = folder if shard is None else folder / shard
    manifest = manifest_of(inner)
    edit(manifest)
    digest = write_manifest(inner, manifest)
    if shard is not None:
        outer = manifest_of(folder)
        next(entry for entry in outer["shards"] if entry["name"] == shard)["manifest_sha256"] = digest
        write_manifest(folder, outer)
    return folder


def open_pack(where, **kw):
    constants = (None, None) if "sharded" in str(where) else (0.5, 0.25)
    return om.PackedImageDataset(str(where), *constants, **kw)


def payload(root) -> tuple[int, str]:
    """A file served at ``root/payload.npy`` (where ``..`` from a pack leads): its size and SHA-256."""
    data = b"overwritten by whoever serves the pack\n"
    (root / "payload.npy").write_bytes(data)
    return len(data), hashlib.sha256(data).hexdigest()


# ---------------------------------------------------------------- 1. names

NAMES = {
    "parent": "../payload.npy",
    "separator": "sub/labels.npy",
    "dots": "..",
    "empty": "",
    "nul": "labels\x00.npy",
}


@pytest.mark.parametrize("case", ["parent", "absolute", "separator", "dots", "empty", "nul"])
@pytest.mark.parametrize("where", ["pack", "sharded"])
def test_a_file_name_that_leaves_the_pack_is_refused_before_anything_is_fetched(served, tmp_path, case, where):
    """Item 1: a manifest (a pack's, or a shard's inside a sharded pack) naming an array file
    by a path (``..``, absolute, a separator, empty, a NUL) is refused naming the field, at a
    URL before any file is fetched (the cache holds nothing, the file the path leads to is
    untouched) and on disk."""
    root, url = served
    size, sha = payload(root)
    victim = tmp_path / "victim" / "labels.npy"
    victim.parent.mkdir()
    victim.write_bytes(b"a user's file")
    bad = str(victim) if case == "absolute" else NAMES[case]

    def edit(manifest):
        manifest["arrays"]["labels"].update(file=bad, bytes=size, sha256=sha)

    name = f"names-{where}-{case}"
    base, shard = ("gray", None) if where == "pack" else ("sharded", "shard-00001")
    folder = variant(root, base, name, edit, shard)
    inside = "" if shard is None else rf"{shard}/"
    message = rf"{inside}manifest\.json: arrays\.labels\.file must be a plain file name"
    cache = tmp_path / "cache"
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/{name}/{message}"):
        open_pack(f"{url}/{name}", cache=str(cache), retry=QUICK)
    assert victim.read_bytes() == b"a user's file"
    assert not os.path.exists(tmp_path / "payload.npy") and not os.path.exists(cache / "payload.npy")
    assert nothing_in(cache)
    shown = "" if shard is None else rf"{re.escape(str(folder))}: shard 1 of 3 \({shard}\): "
    with pytest.raises(PackError, match=rf"^{shown}{re.escape(str(folder))}/{message}"):
        open_pack(folder)


def test_a_link_out_of_the_pack_folder_is_not_followed(served, tmp_path):
    """Item 1, on disk: an array file that is a symbolic link to a file outside the pack's
    folder is refused, naming the file (a link inside the folder is read)."""
    root, _ = served
    folder = tmp_path / "linked"
    shutil.copytree(root / "gray", folder)
    outside = tmp_path / "elsewhere.npy"
    shutil.move(folder / "pixels.npy", outside)
    os.symlink(outside, folder / "pixels.npy")
    with pytest.raises(PackError, match=rf"^{re.escape(str(folder))}/pixels\.npy: a link to {re.escape(str(outside))}"
                                        rf", outside the pack's folder"):
        open_pack(folder)
    os.remove(folder / "pixels.npy")
    shutil.move(outside, folder / "stored.npy")
    os.symlink("stored.npy", folder / "pixels.npy")
    assert len(open_pack(folder)) == 24


# ---------------------------------------------------------------- 2. sizes and counts

@pytest.mark.parametrize("field, value", [
    ("bytes", -1), ("bytes", True), ("bytes", 1.5), ("bytes", "128"), ("bytes", 1 << 60),
    ("shape", [-1]), ("shape", [True]), ("shape", [2.0]), ("shape", 5),
])
def test_every_size_is_a_non_negative_integer_within_its_bound(served, tmp_path, field, value):
    """Item 2: an array's ``bytes`` and every dimension of its ``shape`` is an integer (not a
    bool, not a float) in [0, 2**48]: anything else is refused naming the field, on disk and
    at a URL (before anything is fetched)."""
    root, url = served
    name = f"sizes-{field}-{value!r}".replace(" ", "")
    folder = variant(root, "gray", name, lambda m: m["arrays"]["labels"].__setitem__(field, value))
    message = rf"manifest\.json: arrays\.labels\.{field}"
    with pytest.raises(PackError, match=rf"^{re.escape(str(folder))}/{message}"):
        open_pack(folder)
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/{re.escape(name)}/{message}"):
        open_pack(f"{url}/{name}", cache=str(tmp_path / "cache"), retry=QUICK)
    assert nothing_in(tmp_path / "cache")


def test_a_negative_size_cannot_shrink_a_pack_into_a_small_cache(served, tmp_path):
    """Item 2: the pack's size against the cache's bound is the sum of sizes each checked
    non-negative: a manifest recording a negative size for one file (the sum made small)
    is refused, and nothing lands in a cache bounded below the pack."""
    root, url = served
    if not os.path.exists(root / "larger"):
        om.pack(items(9, n=200), str(root / "larger"), progress=False)

    def edit(manifest):
        manifest["arrays"]["sample_sha256"].update(bytes=-(1 << 20), sha256=hashlib.sha256(b"").hexdigest())

    variant(root, "larger", "shrunk", edit)
    cache = tmp_path / "cache"
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/shrunk/manifest\.json: arrays\.sample_sha256\.bytes "
                                        r"must be an integer in \[0, 2\*\*48\], received -1048576"):
        om.PackedImageDataset(f"{url}/shrunk", 0.5, 0.25, cache=str(cache), cache_bytes=4096)
    assert nothing_in(cache)


def folder_size(folder) -> int:
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, files in os.walk(folder) for f in files)


def test_a_count_beyond_the_arrays_is_refused_before_anything_is_written(served, tmp_path):
    """Item 2 (outside review): a manifest whose ``count`` is far above its arrays' rows (a
    million beside arrays of 24) is refused from the manifest, naming the array, on disk
    and at a URL, and nothing is written: an exact folder's maps are sized by the count (5
    bytes a sample), and were written (5 MB here, 10 GiB for a count of 2**31 - 1) into a
    cache bounded to 1 MiB before the reader found the arrays short."""
    root, url = served
    folder = variant(root, "gray", "counted", lambda m: m.__setitem__("count", 1_000_000))
    message = (r"manifest\.json: arrays\.pixel_offsets\.shape must be \[1000000\] for the manifest's count "
               r"1000000, received \[24\]")
    with pytest.raises(PackError, match=rf"^{re.escape(str(folder))}/{message}"):
        open_pack(folder)
    cache = tmp_path / "cache"
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/counted/{message}"):
        om.PackedImageDataset(f"{url}/counted", 0.5, 0.25, cache=str(cache), cache_bytes=1 << 20)
    assert nothing_in(cache)


def test_an_exact_folders_maps_count_against_the_cache_bound(served, tmp_path):
    """Item 2 (outside review): the bound counts an exact folder's ``present`` and ``claims``
    maps (5 bytes a sample) with the pack's files: a cache bounded to the files alone takes
    the whole copy (no maps) and refuses the exact folder before fetching anything."""
    root, url = served
    files = folder_size(root / "gray")
    maps = 24 * 5
    cache = tmp_path / "cache"
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/gray: the pack holds {files + maps} bytes, more than "
                                        rf"the cache's limit of {files} bytes"):
        om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(cache), cache_bytes=files)
    assert nothing_in(cache)
    whole = om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(cache), cache_bytes=files, fetch="whole")
    assert whole.remote is None and folder_size(cache) == files
    exact = om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(tmp_path / "roomy"), cache_bytes=files + maps)
    assert exact.remote is not None and folder_size(tmp_path / "roomy") == files + maps


@pytest.mark.parametrize("name", ["present", "claims"])
def test_a_shard_named_as_an_exact_folders_map_is_refused(served, tmp_path, name):
    """Item 17 (outside review): a shard folder named ``present`` or ``claims`` (the maps an
    exact cache folder keeps beside its shards) is refused from the manifest, naming the
    shard, at a URL (it was a bare ``IsADirectoryError`` writing the map) and on disk (it
    was taken for a cache folder: "open the URL")."""
    root, url = served
    folder = root / f"sharded-reserved-{name}"
    if not folder.exists():
        shutil.copytree(root / "sharded", folder)
        outer = manifest_of(folder)
        os.rename(folder / outer["shards"][1]["name"], folder / name)
        outer["shards"][1]["name"] = name
        write_manifest(folder, outer)
    message = (r"manifest\.json: shards\[1\] must be {\"name\": a plain folder name \(.*, none of "
               r"manifest\.json, present, claims\)")
    with pytest.raises(PackError, match=rf"^{re.escape(str(folder))}/{message}"):
        open_pack(folder)
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/sharded-reserved-{name}/{message}"):
        open_pack(f"{url}/sharded-reserved-{name}", cache=str(tmp_path / "cache"), retry=QUICK)
    assert nothing_in(tmp_path / "cache")


# ---------------------------------------------------------------- 3. bounded reads

def peak_of(action) -> int:
    """The peak of Python's allocations (every thread's: fsspec's loop too) while ``action`` runs."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_manifest_larger_than_the_bound_is_refused_without_reading_it_whole(served, tmp_path):
    """Item 3: ``manifest.json`` is read up to ``MANIFEST_BYTES`` (16 MiB) and one byte more: a
    larger one (here 256 MiB) is a PackError naming the bound, on disk and at a URL, and
    the read held no more than about the bound in memory."""
    root, url = served
    folder = root / "huge"
    folder.mkdir(exist_ok=True)
    with open(folder / "manifest.json", "wb") as f:
        f.truncate(256 << 20)             # sparse: no disk, no time
    limit = _format.MANIFEST_BYTES
    assert limit == 16 << 20
    message = rf"manifest\.json: larger than the {limit} bytes a manifest may hold"
    for where in (str(folder), f"{url}/huge"):
        def action():
            with pytest.raises(PackError, match=rf"^{re.escape(where)}/{message}"):
                open_pack(where, cache=str(tmp_path / "cache"), retry=QUICK) if "://" in where else open_pack(where)
        peak = peak_of(action)
        assert peak < 3 * limit, f"{where}: {peak} bytes at the peak"


@pytest.fixture(scope="module")
def big(served):
    """A gray pack of 24 MiB of pixels at ``root/big``: a small image (6 x 40), then 4 of 6 MiB."""
    root, _ = served
    rng = np.random.default_rng(5)
    shapes = [(6, 40)] + [(1536, 4096)] * 4
    om.pack([(rng.integers(0, 256, shape, dtype=np.uint8), [1, 2], i, f"big{i}.png") for i, shape in enumerate(shapes)],
            str(root / "big"), progress=False)
    return root / "big"


def test_a_server_that_ignores_byte_ranges_is_refused_without_buffering_its_answer(served, big, tmp_path):
    """Item 3: a server that answers a range request with the whole file (Python's
    http.server ignores ``Range``) is refused at its first answer, having read at most the
    bytes asked for and one more: on opening (the pixels' header, 4 KiB asked for a 24 MiB
    file), and when a sample (240 bytes) is fetched from a server that ignores ranges after
    the opening (the cache's copy opened through the ranged server first)."""
    root, url = served
    port = free_port()
    cache = str(tmp_path / "cache")
    om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(tmp_path / "warm"))   # fsspec's modules imported
    with running([sys.executable, "-m", "http.server", "-b", "127.0.0.1", str(port), "-d", str(root)], port,
                 "http.server"):
        plain = f"http://127.0.0.1:{port}/big"

        def opening():
            with pytest.raises(PackError, match=r"/big/pixels\.npy: answered more than the 4096 bytes of a request "
                                                r"for bytes 0-4095; the server must serve byte ranges"):
                om.PackedImageDataset(plain, 0.5, 0.25, cache=cache, retry=QUICK)
        assert peak_of(opening) < 4 << 20
        om.PackedImageDataset(f"{url}/big", 0.5, 0.25, cache=cache)      # the exact folder, through the ranged server
        dataset = om.PackedImageDataset(plain, 0.5, 0.25, cache=cache, retry=QUICK)

        def sample():
            with pytest.raises(PackError, match=r"/big/pixels\.npy: answered more than the 240 bytes of a request "
                                                r"for bytes 128-367; the server must serve byte ranges"):
                dataset.get_sample(0)
        assert peak_of(sample) < 4 << 20


def test_a_sample_larger_than_a_request_is_fetched_in_pieces(served, tmp_path):
    """Item 3 (outside review): a sample larger than one request (``remote.CHUNK``, 4 MiB) is
    fetched a request at a time, each piece hashed and written as it comes: fetching a
    64 MiB sample holds about one piece in memory, not the sample (it held the sample
    twice, the answer's parts and their join: a manifest may record one sample as large as
    the cache's bound, 64 GiB by default). Its bytes are the pack's, and a sample whose
    pieces do not hash to its SHA-256 is refused and left missing."""
    root, url = served
    from onemodel_cy.data.packs.remote import CHUNK
    if not os.path.exists(root / "huge-sample"):
        rng = np.random.default_rng(7)
        om.pack([(rng.integers(0, 256, (6, 40), dtype=np.uint8), [1], 0, "small.png"),
                 (rng.integers(0, 256, (2048, 32768), dtype=np.uint8), [2], 1, "huge.png")],
                str(root / "huge-sample"), progress=False)
    dataset = om.PackedImageDataset(f"{url}/huge-sample", 0.5, 0.25, cache=str(tmp_path / "cache"))
    assert dataset.remote is not None
    peak = peak_of(lambda: dataset.remote.ensure([1]))
    assert peak < 3 * CHUNK, f"{peak} bytes at the peak fetching a sample of {64 << 20}"
    assert dataset.remote.requests == 16
    local = om.PackedImageDataset(str(root / "huge-sample"), 0.5, 0.25)
    assert dataset.get_sample(1).image.tobytes() == local.get_sample(1).image.tobytes()
    changed = root / "huge-changed"
    shutil.rmtree(changed, ignore_errors=True)
    shutil.copytree(root / "huge-sample", changed)
    other = om.PackedImageDataset(f"{url}/huge-changed", 0.5, 0.25, cache=str(tmp_path / "other"))
    with open(changed / "pixels.npy", "r+b") as f:     # a byte of the last piece changed at the URL
        f.seek(-1, os.SEEK_END)
        last = f.read(1)
        f.seek(-1, os.SEEK_END)
        f.write(bytes([last[0] ^ 1]))
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/huge-changed/pixels\.npy \(bytes \d+-\d+\): sample 1 of "
                                        r"this file does not hash to its SHA-256"):
        other.remote.ensure([1])
    assert other.remote.missing([1]).tolist() == [1]


# ---------------------------------------------------------------- 4. credentials

SECRET = "s3cr3t-pa55"


def shown(text: str) -> None:
    assert SECRET not in text and "alice" not in text, text


def test_a_password_in_the_url_is_in_no_message_repr_or_fingerprint(served, tmp_path):
    """Item 4: the user and password of a URL (``http://user:pass@host/...``), and the values
    of its query, appear in no PackError (a missing pack, a pack larger than the cache, a
    file changed at its URL, a sample that fails its check), in no repr and no fingerprint;
    they still reach the server (which ignores them)."""
    root, url = served
    auth = url.replace("http://", f"http://alice:{SECRET}@")
    cache = str(tmp_path / "cache")
    for where, kw in ((f"{auth}/nothing", {}), (f"{url}/nothing?token={SECRET}", {}),
                      (f"{auth}/gray", {"cache_bytes": 100})):
        with pytest.raises(PackError) as error:
            om.PackedImageDataset(where, 0.5, 0.25, cache=cache, retry=QUICK, **kw)
        shown(str(error.value))
        assert "127.0.0.1" in str(error.value)
    bad = root / "changed"
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(root / "gray", bad)
    data = bytearray((bad / "labels.npy").read_bytes())
    data[-1] ^= 1
    (bad / "labels.npy").write_bytes(bytes(data))
    with pytest.raises(PackError) as error:
        om.PackedImageDataset(f"{auth}/changed", 0.5, 0.25, cache=cache, retry=QUICK)
    shown(str(error.value))
    dataset = om.PackedImageDataset(f"{auth}/gray", 0.5, 0.25, cache=cache, retry=QUICK)
    assert dataset.url == f"{auth}/gray"        # what a worker process reopens: the user's own
    for text in (repr(dataset), dataset.fingerprint(), repr(dataset.remote)):
        shown(text)
    flipped = root / "flipped"
    shutil.rmtree(flipped, ignore_errors=True)
    shutil.copytree(root / "gray", flipped)
    later = om.PackedImageDataset(f"{auth}/flipped", 0.5, 0.25, cache=str(tmp_path / "other"), retry=QUICK)
    data = bytearray((flipped / "pixels.npy").read_bytes())
    data[-1] ^= 1                         # the last sample's pixels changed at the URL since the opening
    (flipped / "pixels.npy").write_bytes(bytes(data))
    with pytest.raises(PackError) as error:
        later.get_sample(len(later) - 1)
    shown(str(error.value))
    assert "127.0.0.1" in str(error.value)


# ---------------------------------------------------------------- 7. vocabulary

@pytest.mark.parametrize("vocabulary", [5, {"a": 1}, "abc", ["ab"], [None], [3], ["a", "a"]])
def test_a_plain_packs_vocabulary_is_checked_on_opening(served, tmp_path, vocabulary):
    """Item 7: a pack's ``vocabulary`` is a list of distinct one-character strings or null,
    checked on opening as a sharded pack's is (one check), on disk and at a URL."""
    root, url = served
    name = f"vocabulary-{abs(hash(repr(vocabulary)))}"
    folder = variant(root, "gray", name, lambda m: m.__setitem__("vocabulary", vocabulary))
    message = r"manifest\.json: vocabulary must be a list of distinct one-character strings or null"
    with pytest.raises(PackError, match=rf"^{re.escape(str(folder))}/{message}"):
        open_pack(folder)
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/{name}/{message}"):
        open_pack(f"{url}/{name}", cache=str(tmp_path / "cache"), retry=QUICK)
    outer = variant(root, "sharded", name + "-sharded", lambda m: m.__setitem__("vocabulary", vocabulary))
    with pytest.raises(PackError, match=rf"^{re.escape(str(outer))}/{message}"):
        open_pack(outer)


# ---------------------------------------------------------------- 17. malformed manifests

def set_entry(name, value):
    return lambda m: m["arrays"].__setitem__(name, value)


def drop_field(name, field):
    return lambda m: m["arrays"][name].pop(field)


MALFORMED = [
    ("string-entry", set_entry("labels", "labels.npy"), r"arrays\.labels must be an object"),
    ("no-file", drop_field("labels", "file"), r"arrays\.labels\.file must be a plain file name"),
    ("no-bytes", drop_field("labels", "bytes"), r"arrays\.labels\.bytes must be an integer"),
    ("no-sha256", drop_field("labels", "sha256"), r"arrays\.labels\.sha256 must be 64 lowercase hex digits"),
    ("sha256-number", lambda m: m["arrays"]["labels"].__setitem__("sha256", 5),
     r"arrays\.labels\.sha256 must be 64 lowercase hex digits"),
    ("other-file", lambda m: m["arrays"]["labels"].__setitem__("file", "targets.npy"),
     r"arrays\.labels\.file must be labels\.npy"),
    ("dtype", lambda m: m["arrays"]["labels"].__setitem__("dtype", "<f8"), r"arrays\.labels\.dtype must be '<i4'"),
    ("unknown-array", set_entry("extra", {"file": "extra.npy", "bytes": 0, "sha256": "0" * 64}),
     r"arrays\.extra: not an array of this format"),
    ("arrays-list", lambda m: m.__setitem__("arrays", ["pixels.npy"]), r"arrays must be an object"),
    ("missing-array", lambda m: m["arrays"].pop("labels"), r"arrays\.labels: missing"),
]


@pytest.mark.parametrize("where", ["pack", "sharded"])
@pytest.mark.parametrize("case, edit, message", MALFORMED, ids=[case for case, _, _ in MALFORMED])
def test_a_malformed_manifest_is_a_pack_error_naming_the_pack_file_and_field(served, tmp_path, case, edit,
                                                                            message, where):
    """Item 17: an entry that is a string, a missing or wrong field, a field of the wrong
    type: a PackError naming the manifest's file (its URL, or its path) and the field, the
    same from disk and from a URL; never a TypeError or KeyError."""
    root, url = served
    name = f"malformed-{where}-{case}"
    base, shard = ("gray", None) if where == "pack" else ("sharded", "shard-00000")
    folder = variant(root, base, name, edit, shard)
    inside = "" if shard is None else f"{shard}/"
    found = rf"{inside}manifest\.json: {message}"
    with pytest.raises(PackError, match=rf"^{re.escape(str(folder))}: shard 0 of 3 \(shard-00000\): "
                                        rf"{re.escape(str(folder))}/{found}" if shard else
                                        rf"^{re.escape(str(folder))}/{found}"):
        open_pack(folder)
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/{name}/{found}"):
        open_pack(f"{url}/{name}", cache=str(tmp_path / "cache"), retry=QUICK)
    assert nothing_in(tmp_path / "cache")


def test_a_folder_where_a_file_should_be_is_a_pack_error(served, tmp_path):
    """Item 17: a folder in place of an array file, or of ``manifest.json``, is a PackError
    naming it, on disk and at a URL."""
    root, url = served
    folder = root / "folders"
    shutil.rmtree(folder, ignore_errors=True)
    shutil.copytree(root / "gray", folder)
    os.remove(folder / "labels.npy")
    os.mkdir(folder / "labels.npy")
    with pytest.raises(PackError, match=rf"^{re.escape(str(folder))}/labels\.npy: not a regular file"):
        open_pack(folder)
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/folders/labels\.npy"):
        open_pack(f"{url}/folders", cache=str(tmp_path / "cache"), retry=QUICK)
    os.remove(folder / "manifest.json")
    os.mkdir(folder / "manifest.json")
    with pytest.raises(PackError, match=rf"^{re.escape(str(folder))}/manifest\.json: not a regular file"):
        open_pack(folder)
    with pytest.raises(PackError, match=rf"^{re.escape(url)}/folders/manifest\.json"):
        open_pack(f"{url}/folders", cache=str(tmp_path / "cache"), retry=QUICK)
    assert nothing_in(tmp_path / "cache")
