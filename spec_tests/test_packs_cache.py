"""The local cache of packs from a URL (issue 36, items 6, 8, 9, 10, 11, 14, 15, 16): it heals or says so.

Against a real HTTP server on 127.0.0.1 serving packs (``remote_packs.http_server``: nginx,
or aiohttp's static files where nginx is not installed), and, where a disk must be full or
read-only, a real tmpfs of 1 MiB mounted for the test (``small_disk``: skipped where the
sandbox does not let the tests mount one). A full disk under an exact folder is an
``OSError`` naming the file, never a SIGBUS (its maps were sparse files written through
memory maps); a read-only cache holding a complete copy serves it; a copy missing a file or
a map is fetched again; eviction removes only the cache's own folders, and the partial
folders of fetches whose process is gone; a pack of more shards than the open-file limit is
fetched sample by sample all the same; ``cache=`` is made absolute on opening; a pack
replaced at its URL is refused from its manifest before anything else is fetched. Needs the
``remote`` extra (fsspec, aiohttp).
"""
from __future__ import annotations

import contextlib
import gc
import os
import pickle
import re
import shutil
import signal
import subprocess
import sys
import time

import fsspec  # noqa: F401  (the remote extra: CI leaves this file out where it is not installed)
import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.data.packs.format import PackError
from few_files import OUT_OF_FILES, THE_LIMIT, digest_of, open_with_few_files
from remote_packs import free_port, http_server, items, running, same, write_packs

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
GRAY = (0.5, 0.25)


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``(root folder served, base URL)``: the HTTP server serving a gray pack ``gray``, a float32
    sharded pack ``sharded`` and ``big`` (64 gray lines of 32 x 200: its pixels span many
    pages) on a free loopback port."""
    run, root = tmp_path_factory.mktemp("server"), tmp_path_factory.mktemp("served")
    write_packs(root)
    rng = np.random.default_rng(5)
    om.pack([(rng.integers(0, 256, (32, 200), dtype=np.uint8), rng.integers(1, 9, 4), i, f"big{i}")
             for i in range(64)], str(root / "big"), progress=False)
    with http_server(root, str(run)) as port:
        yield root, f"http://127.0.0.1:{port}"


@contextlib.contextmanager
def small_disk(path, size="1m"):
    """A tmpfs of ``size`` mounted at ``path`` (a real file system that fills up, and that
    can be remounted read-only); the test is skipped where mounting is not allowed."""
    os.makedirs(path, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def read_only(path):
    gc.collect()        # every dataset of the test gone: nothing of the mount open for writing
    done = subprocess.run(["mount", "-o", "remount,ro", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def folder_size(folder):
    return sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(folder) for f in fs)


# ---------------------------------------------------------------- item 8: a full disk

FULL_DISK = r"""
import gc, os, sys
import onemodel_cy as om
url, cache, filler, mode = sys.argv[1:]
dataset = om.PackedImageDataset(url, 0.5, 0.25, cache=cache)                  # an exact folder: no pixel fetched yet
if mode == "sparse-maps":       # the maps as an earlier version wrote them: sparse files
    folder = dataset.path
    del dataset
    gc.collect()
    for name in ("present", "claims"):
        path = os.path.join(folder, name)
        size = os.path.getsize(path)
        os.remove(path)
        with open(path, "wb") as f:
            f.truncate(size)
with open(filler, "wb", buffering=0) as f:                         # the disk filled up meanwhile
    try:
        while True:
            f.write(bytes(1 << 16))
    except OSError:
        pass
    try:
        while True:
            f.write(b"x")
    except OSError:
        pass
try:
    if mode == "sparse-maps":
        dataset = om.PackedImageDataset(url, 0.5, 0.25, cache=cache)
    dataset.get_sample(len(dataset) - 1)                           # its bytes lie past the header's page
    print("no error")
except OSError as error:
    print(f"OSError errno={error.errno} {error}")
"""


@pytest.mark.parametrize("mode", ["maps", "sparse-maps"])
def test_a_full_disk_under_an_exact_folder_is_an_os_error_naming_the_file(served, tmp_path, mode):
    """Item 8: the disk fills up after an exact folder was made (``maps``), or under maps an
    earlier version left sparse (``sparse-maps``), then a sample is fetched: the process
    gets an OSError naming the file it could not write (a sample's pixels, or the map whose
    blocks it could not reserve), not a SIGBUS from a store through a mapping of a sparse
    file. In a fresh interpreter (a SIGBUS would end the test run)."""
    root, url = served
    with small_disk(tmp_path / "disk") as disk:
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
        done = subprocess.run([sys.executable, "-c", FULL_DISK, f"{url}/big", str(disk / "cache"),
                               str(disk / "filler"), mode], env=env, cwd=ROOT, capture_output=True, text=True,
                              timeout=120)
    assert done.returncode != -signal.SIGBUS, "killed by SIGBUS (a store through a mapping of a sparse file)"
    assert done.returncode == 0, done.stderr
    named = "pixels.npy: cannot write sample 63" if mode == "maps" else "present'"
    assert done.stdout.startswith("OSError errno=28 ") and named in done.stdout, done.stdout


def test_a_disk_full_before_the_fetch_is_an_os_error_naming_the_file(served, tmp_path):
    """Item 8: a disk already full when a pack is fetched: an OSError naming the file in the
    cache it could not write (a write's ENOSPC names no file by itself), and nothing left."""
    root, url = served
    with small_disk(tmp_path / "disk") as disk:
        with open(disk / "filler", "wb", buffering=0) as f:
            with contextlib.suppress(OSError):
                while True:
                    f.write(bytes(4096))
        with pytest.raises(OSError) as caught:
            om.PackedImageDataset(f"{url}/gray", *GRAY, cache=str(disk / "cache"))
        assert caught.value.errno == 28
        assert caught.value.filename is not None and caught.value.filename.startswith(str(disk / "cache")), \
            str(caught.value)
        assert os.listdir(disk / "cache") == []


# ---------------------------------------------------------------- item 16: a read-only disk

@pytest.mark.parametrize("fetch", ["exact", "whole"])
def test_a_read_only_cache_with_a_complete_copy_serves_it(served, tmp_path, fetch):
    """Item 16: the cache holds a complete copy (every sample of an exact folder fetched, or
    a whole copy) and is then read-only: opening the URL serves it (nothing is created or
    touched before the copy is looked for), and its samples are the local pack's."""
    root, url = served
    with small_disk(tmp_path / "disk") as disk:
        cache = str(disk / "cache")
        first = om.PackedImageDataset(f"{url}/gray", *GRAY, cache=cache, fetch=fetch)
        for i in range(len(first)):
            first.get_sample(i)
        del first
        read_only(disk)
        again = om.PackedImageDataset(f"{url}/gray", *GRAY, cache=cache, fetch=fetch)
        same(again, om.PackedImageDataset(str(root / "gray"), *GRAY))
        del again
        gc.collect()


def test_a_read_only_cache_serves_what_it_holds_and_names_what_it_does_not(served, tmp_path):
    """Item 16: an exact folder holding samples 0-9 only, on a read-only disk: those are
    served; another is a PackError saying the cache is read-only, not a raw OSError."""
    root, url = served
    with small_disk(tmp_path / "disk") as disk:
        cache = str(disk / "cache")
        first = om.PackedImageDataset(f"{url}/gray", *GRAY, cache=cache)
        for i in range(10):
            first.get_sample(i)
        del first
        read_only(disk)
        again = om.PackedImageDataset(f"{url}/gray", *GRAY, cache=cache)
        local = om.PackedImageDataset(str(root / "gray"), *GRAY)
        assert again.get_sample(7).image.tobytes() == local.get_sample(7).image.tobytes()
        with pytest.raises(PackError, match=r"-exact: the cache is read-only and sample 12 \(of 1 asked for\) is "
                                            r"not in it; open the pack with a writable cache="):
            again.get_sample(12)
        del again
        gc.collect()


# ---------------------------------------------------------------- item 15: a damaged copy

@pytest.mark.parametrize("fetch, damage", [("exact", "present"), ("exact", "claims"), ("exact", "labels.npy"),
                                           ("whole", "labels.npy"), ("whole", "cut pixels.npy"),
                                           ("sharded", "shard-00001/shapes.npy")])
def test_a_cache_copy_missing_a_file_is_fetched_again(served, tmp_path, fetch, damage):
    """Item 15: a cache copy with a file (or a map) removed or cut short is not refused on
    every later open: it is removed and the pack fetched again, the local pack's samples."""
    root, url = served
    name = "sharded" if fetch == "sharded" else "gray"
    constants = () if name == "sharded" else GRAY
    cache = str(tmp_path / "cache")
    first = om.PackedImageDataset(f"{url}/{name}", *constants, cache=cache,
                                  fetch="exact" if fetch == "sharded" else fetch)
    first.get_sample(0)
    path = os.path.join(first.path, damage.split()[-1])
    del first
    gc.collect()
    if damage.startswith("cut"):
        os.truncate(path, os.path.getsize(path) - 1)
    else:
        os.remove(path)
    again = om.PackedImageDataset(f"{url}/{name}", *constants, cache=cache,
                                  fetch="exact" if fetch == "sharded" else fetch)
    same(again, om.PackedImageDataset(str(root / name), *constants))
    assert os.path.exists(path) and sorted(os.listdir(cache)) == [os.path.basename(again.path)]


# ---------------------------------------------------------------- item 6: only the cache's own folders

def test_eviction_removes_only_the_caches_own_folders(served, tmp_path):
    """Item 6: ``cache=`` pointed at a folder that holds a user's results and a user's pack:
    making room removes the cache's packs (least recently opened first) and nothing else,
    nor does it count the user's bytes against ``cache_bytes``."""
    root, url = served
    cache = tmp_path / "data"
    shutil.copytree(root / "gray", cache / "my-pack")
    (cache / "results").mkdir()
    (cache / "results" / "scores.txt").write_text("0.93\n")
    (cache / ("0" * 64)).mkdir()            # a user's folder that happens to look like a digest
    (cache / ("0" * 64) / "notes.txt").write_text("mine\n")
    # An exact folder's maps (5 bytes a sample) count too.
    bound = max(folder_size(root / "gray"), folder_size(root / "sharded")) + 24 * 5 + 10
    gray = om.PackedImageDataset(f"{url}/gray", *GRAY, cache=str(cache), cache_bytes=bound)
    sharded = om.PackedImageDataset(f"{url}/sharded", cache=str(cache), cache_bytes=bound)
    assert sorted(os.listdir(cache)) == sorted(["my-pack", "results", "0" * 64, os.path.basename(sharded.path)])
    assert (cache / "results" / "scores.txt").read_text() == "0.93\n"
    same(om.PackedImageDataset(str(cache / "my-pack"), *GRAY), om.PackedImageDataset(str(root / "gray"), *GRAY))
    same(gray, om.PackedImageDataset(str(root / "gray"), *GRAY))        # still mapped: its files unlinked only


# ---------------------------------------------------------------- item 11: more shards than open files, at a URL

def test_a_pack_at_a_url_of_more_shards_than_the_open_file_limit_is_fetched(served, tmp_path):
    """Item 11 at a URL: 100 shards opened, then fetched sample by sample in a shuffled
    order, by a process whose soft open-file limit is 64: as many requests at once as the
    descriptors left allow, the shards' files kept open a few at a time (was: "Too many
    open files" while the pack was opened, then one file open per shard). Every sample is
    the local pack's."""
    root, url = served
    om.pack_sharded(om.SyntheticTextLines(100, seed=3), str(root / "many-shards"), shards=100, progress=False)
    local = om.PackedImageDataset(str(root / "many-shards"))
    said = open_with_few_files(64, f"{url}/many-shards", tmp_path / "cache")
    assert said.startswith("opened 100 ") and said.endswith(digest_of(local)), said
    assert os.listdir(tmp_path / "cache") == [local.manifest_sha256 + "-exact"]      # fetched sample by sample


def test_a_shard_file_evicted_while_it_was_closed_is_an_error_not_a_write_elsewhere(served, tmp_path, monkeypatch):
    """Item 11 at a URL (outside review): with more shards than files it may keep open (one,
    here), a shard file opened again must be the one the dataset maps: once the cache has
    removed the copy and fetched it again under the same name (new files), fetching into
    a shard not open is a ``PackError`` naming the file and saying to open the URL again,
    and nothing is written into the new copy (its sample stays missing there)."""
    from onemodel_cy.data.packs import exact
    root, url = served
    monkeypatch.setattr(exact, "KEEP_OPEN", 1)
    cache = tmp_path / "cache"
    dataset = om.PackedImageDataset(f"{url}/sharded", cache=str(cache))
    assert dataset.remote is not None and dataset.remote._out.keep == 1
    dataset.remote.ensure([0])                      # shard 0's file open, the others closed
    shutil.rmtree(dataset.path)                     # evicted, then fetched again by another opener
    again = om.PackedImageDataset(f"{url}/sharded", cache=str(cache))
    assert again.path == dataset.path
    last = len(dataset) - 1
    shard = os.path.join(dataset.path, os.path.basename(dataset.shards[-1]), "pixels.npy")
    with pytest.raises(PackError, match=rf"^{re.escape(shard)}: removed from the cache \(to make room for another "
                                        rf"pack\) while this dataset was fetching into it, and only 1 of its 3 shard "
                                        rf"files could be kept open \(the open-file limit\); open "
                                        rf"{re.escape(url)}/sharded again"):
        dataset.remote.ensure([last])
    assert again.remote.missing([last]).tolist() == [last]
    same(again, om.PackedImageDataset(str(root / "sharded")))


def test_a_shard_file_gone_while_the_pack_opens_leaves_no_file_open(tmp_path):
    """Item 11 at a URL (outside review): the shard files an exact folder keeps open are
    opened together; one removed meanwhile (the copy evicted between its check and this)
    is a ``PackError`` naming it, and the files opened before it are closed (it was a bare
    ``FileNotFoundError`` that left them open)."""
    from onemodel_cy.data.packs.exact import ShardFiles
    paths = [str(tmp_path / f"shard-{k}.npy") for k in range(3)]
    for path in paths[:2]:
        open(path, "wb").close()
    before = sorted(os.listdir("/proc/self/fd"))
    with pytest.raises(PackError, match=rf"^{re.escape(paths[2])}: removed from the cache \(to make room for another "
                                        r"pack\) while the pack was being opened; open http://127\.0\.0\.1/p again"):
        ShardFiles(paths, 8, "http://127.0.0.1/p")
    assert sorted(os.listdir("/proc/self/fd")) == before


def test_too_few_descriptors_to_open_a_url_is_an_error_naming_the_limit(served, tmp_path):
    """Item 11 at a URL: a process left with one descriptor gets a PackError naming the URL
    and the limit (the number of shards is not known before the manifest is read); was a
    bare "Too many open files" from asyncio."""
    root, url = served
    said = open_with_few_files("+1", f"{url}/sharded", tmp_path / "cache")
    assert re.match(rf"^PackError {re.escape(url)}/sharded: {OUT_OF_FILES} before its manifest was read: {THE_LIMIT}",
                    said), said


# ---------------------------------------------------------------- item 9: partial fetches

FETCH = r"""
import sys
import onemodel_cy as om
om.PackedImageDataset(sys.argv[1], 0.5, 0.25, cache=sys.argv[2], fetch="whole", retry={"attempts": 100})
"""


@pytest.fixture(scope="module")
def flaky(tmp_path_factory):
    """The base URL of flaky_http.py serving the packs of ``write_packs``: under
    ``/short/1000/`` every range is answered short, so a fetch retries for a long time
    with its partial folder in the cache (its manifest written)."""
    root = tmp_path_factory.mktemp("flaky")
    write_packs(root)
    port = free_port()
    with running([sys.executable, os.path.join(HERE, "flaky_http.py"), str(root), str(port)], port, "flaky_http.py"):
        yield f"http://127.0.0.1:{port}"


def fetch_under_way(url, cache):
    """A process fetching ``url`` into ``cache`` (its ranges answered short, retried), once its
    partial folder holds the manifest: ``(process, partial folder)``."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
    process = subprocess.Popen([sys.executable, "-c", FETCH, url, str(cache)], env=env, cwd=ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = [os.path.join(cache, name) for name in (os.listdir(cache) if os.path.isdir(cache) else [])
                 if name.startswith(f".fetch-{process.pid}-")]
        if found and os.path.exists(os.path.join(found[0], "manifest.json")):
            return process, found[0]
        time.sleep(0.02)
    process.kill()
    raise AssertionError("the fetch made no partial folder")


def test_the_partial_folders_of_dead_fetches_are_reclaimed_and_live_ones_counted(served, flaky, tmp_path):
    """Item 9: a fetch killed midway (SIGKILL) leaves its ``.fetch-<pid>-*`` folder: the
    next fetch that makes room removes it (its process is gone, and it has not changed for
    ``cache.STALE`` seconds); the folder of a fetch still under way is left, and counted
    against ``cache_bytes`` (a cached pack is evicted to make room for it)."""
    root, url = served
    cache = tmp_path / "cache"
    process, dead = fetch_under_way(f"{flaky}/short/1000/gray", cache)
    process.kill()
    process.wait()
    old = time.time() - 3600            # far longer ago than cache.STALE
    for folder, _, files in os.walk(dead):
        for name in files:
            os.utime(os.path.join(folder, name), (old, old))
    os.utime(dead, (old, old))
    sharded = om.PackedImageDataset(f"{url}/sharded", cache=str(cache), cache_bytes=1 << 30)
    assert not os.path.exists(dead), "the partial folder of a dead fetch was left"
    process, under_way = fetch_under_way(f"{flaky}/short/1000/gray", cache)
    try:
        bound = folder_size(sharded.path) + folder_size(root / "gray") + folder_size(under_way) // 2
        om.PackedImageDataset(f"{url}/gray", *GRAY, cache=str(cache), cache_bytes=bound)
        assert os.path.isdir(under_way), "the folder of a fetch under way was removed"
        assert not os.path.exists(sharded.path), "a fetch under way was not counted against cache_bytes"
    finally:
        process.kill()
        process.wait()


# ---------------------------------------------------------------- item 10: cache= made absolute

def test_a_relative_cache_is_made_absolute_on_opening(served, tmp_path, monkeypatch):
    """Item 10: ``cache="packs"`` names the folder in the working folder of the opening:
    after an ``os.chdir``, a pickled copy (what a worker process reopens) uses the same
    cache, and fetches nothing again."""
    root, url = served
    (tmp_path / "here").mkdir()
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "here")
    dataset = om.PackedImageDataset(f"{url}/gray", *GRAY, cache="packs")
    assert dataset.cache == str(tmp_path / "here" / "packs")
    monkeypatch.chdir(tmp_path / "elsewhere")
    copy = pickle.loads(pickle.dumps(dataset))
    assert copy.path == dataset.path
    assert os.listdir(tmp_path / "elsewhere") == []
    same(copy, om.PackedImageDataset(str(root / "gray"), *GRAY))


# ---------------------------------------------------------------- item 14: replaced at its URL

def test_a_pack_replaced_at_its_url_is_refused_before_anything_is_fetched(served, tmp_path):
    """Item 14: a worker's copy that reopens a URL where another pack was published since is
    refused from the manifest: nothing of the new pack is fetched into the cache."""
    root, url = served
    om.pack(items(3), str(root / "moving"), progress=False)
    cache = tmp_path / "cache"
    dataset = om.PackedImageDataset(f"{url}/moving", *GRAY, cache=str(cache), fetch="whole")
    before = sorted(os.listdir(cache))
    om.pack(items(4), str(root / "moving"), progress=False, overwrite=True)
    with pytest.raises(PackError, match=rf"^{url}/moving was replaced since it was opened: manifest SHA-256 "):
        pickle.loads(pickle.dumps(dataset))
    assert sorted(os.listdir(cache)) == before
