"""Remote packs, a start (issue 25, part 3): ``PackedImageDataset("http://...", cache=...)``.

Against a real HTTP server started here on 127.0.0.1 (``remote_packs.http_server``): nginx
where it is on PATH (.ci/run installs Debian's ``nginx-light``), else aiohttp's static files
(the ``test`` extra), serving a folder of packs with Range support, stopped at the end of
the module. A pack and a sharded pack read from their URLs serve the local packs'
samples at every index and the same batches through the loader (worker processes reopen
them by URL and find them in the cache); the cache stays within its bound; a changed, a
truncated and a missing file are each a PackError naming the URL, leaving nothing in the
cache (test_packs_remote_faults.py: a server that misbehaves); a pack replaced at its URL
is refused by a pickled copy. Needs the ``remote``
extra (fsspec, aiohttp); the runs of other Pythons leave this file out when it is missing.
"""
from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
import time

import fsspec  # noqa: F401  (the remote extra: CI leaves this file out where it is not installed)
import pytest

import numpy as np

import onemodel_cy as om
from onemodel_cy.data.packs.format import PackError
from harness import batch_bits
from remote_packs import CONSTANTS, aiohttp_static, free_port, http_server, items, running, same, stream, write_packs

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``(root folder served, base URL)``: the HTTP server serving ``root`` on a free loopback port."""
    run, root = tmp_path_factory.mktemp("server"), tmp_path_factory.mktemp("served")
    with http_server(root, str(run)) as port:
        yield root, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def packs(server):
    """A gray pack and a float32 sharded pack of 3 shards, served by the HTTP server."""
    root, url = server
    write_packs(root)
    return root, url


@pytest.mark.parametrize("verify", ["index", "full"])
@pytest.mark.parametrize("name, constants", [("gray", (0.5, 0.25)), ("sharded", (None, None))])
def test_a_pack_read_from_its_url_is_the_local_pack(packs, tmp_path, name, constants, verify):
    """Part 3: the pack at the URL, fetched into the cache sample by sample (each checked
    against its SHA-256), or whole with ``verify="full"`` (each file checked against the
    manifest), serves the local pack's samples at every index and its batches through the
    packed lane and worker processes (which reopen it by URL and find it in the cache:
    nothing is fetched twice)."""
    root, url = packs
    local = om.PackedImageDataset(str(root / name), *constants)
    remote = om.PackedImageDataset(f"{url}/{name}", *constants, cache=str(tmp_path / "cache"), verify=verify)
    assert remote.url == f"{url}/{name}" and remote.manifest_sha256 == local.manifest_sha256
    folder = local.manifest_sha256 + ("-exact" if verify == "index" else "")
    assert remote.path == str(tmp_path / "cache" / folder) and (remote.remote is None) == (verify == "full")
    assert remote.fingerprint() == local.fingerprint()
    same(local, remote)
    reference = stream(local)
    assert stream(remote, workers=2) == reference
    assert stream(remote, workers=2, worker_mode="process") == reference
    assert os.listdir(tmp_path / "cache") == [folder]


def test_the_cache_keeps_within_its_bound(packs, tmp_path):
    """Part 3: with room for one pack, opening a second removes the first (least recently
    opened); a pack larger than the bound is refused before anything is fetched."""
    root, url = packs
    cache = str(tmp_path / "cache")
    sizes = {name: sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(root / name) for f in fs)
             for name in ("gray", "sharded")}
    bound = max(sizes.values()) + 24 * 5 + 10       # an exact folder's maps (5 bytes a sample) count too
    gray = om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=cache, cache_bytes=bound)
    sharded = om.PackedImageDataset(f"{url}/sharded", cache=cache, cache_bytes=bound)
    assert os.listdir(cache) == [os.path.basename(sharded.path)]
    same(gray, om.PackedImageDataset(str(root / "gray"), 0.5, 0.25))     # still mapped: its files unlinked only
    with pytest.raises(PackError, match=rf"{url}/gray: the pack holds {sizes['gray'] + 24 * 5} bytes, more than "
                                        rf"the cache's limit of 100 bytes"):
        om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(tmp_path / "small"), cache_bytes=100)
    assert os.listdir(tmp_path / "small") == []


@pytest.mark.parametrize("damage, message", [
    ("flip", r"/bad/pixels\.npy: SHA-256 differs from the manifest's"),
    ("truncate", r"/bad/pixels\.npy \(bytes 0-\d+\): gave up after 2 attempts, the last: answered \d+ of the \d+ "
                 r"bytes from byte 0 \(a short answer, or the file is shorter than the manifest records\)"),
    ("grow", r"/bad/pixels\.npy: holds more than \d+ bytes, the manifest records \d+"),
    ("remove", r"/bad/labels\.npy: missing \(the manifest lists it\)"),
])
def test_a_changed_short_or_missing_file_is_named_and_nothing_is_cached(packs, tmp_path, damage, message):
    """Parts 3 and 4: every byte fetched is checked against the manifest: changed pixels, a
    short, a longer and a missing file are each a PackError naming the URL of the file (the
    short one after its attempts: a short answer is retried), and the cache holds nothing
    of that pack afterwards."""
    root, url = packs
    bad = root / "bad"
    shutil.rmtree(bad, ignore_errors=True)
    shutil.copytree(root / "gray", bad)
    pixels = bad / "pixels.npy"
    if damage == "flip":
        data = bytearray(pixels.read_bytes())
        data[200] ^= 1
        pixels.write_bytes(bytes(data))
    elif damage == "truncate":
        pixels.write_bytes(pixels.read_bytes()[:-7])
    elif damage == "grow":
        pixels.write_bytes(pixels.read_bytes() + b"\0")
    else:
        os.remove(bad / "labels.npy")
    cache = tmp_path / "cache"
    with pytest.raises(PackError, match=message):       # verify="full": the whole pack, checked as it arrives
        om.PackedImageDataset(f"{url}/bad", 0.5, 0.25, cache=str(cache), retry={"attempts": 2, "backoff": 0.01},
                              verify="full")
    assert os.listdir(cache) == []
    with pytest.raises(PackError, match=rf"{url}/nothing/manifest\.json: missing"):
        om.PackedImageDataset(f"{url}/nothing", 0.5, 0.25, cache=str(cache))


def test_a_pack_replaced_at_its_url_is_refused_by_a_pickled_copy(packs, tmp_path):
    """Part 3: identity as for a local pack: a worker's copy reopens the URL and refuses
    another pack published there since, naming the URL."""
    root, url = packs
    om.pack(items(3), str(root / "moving"), progress=False)
    dataset = om.PackedImageDataset(f"{url}/moving", 0.5, 0.25, cache=str(tmp_path / "cache"))
    same(dataset, pickle.loads(pickle.dumps(dataset)))
    om.pack(items(4), str(root / "moving"), progress=False, overwrite=True)
    with pytest.raises(PackError, match=rf"{url}/moving was replaced since it was opened"):
        pickle.loads(pickle.dumps(dataset))
    with pytest.raises(ValueError, match=r"^cache is for a pack at a URL, received a local path '/"):
        om.PackedImageDataset(str(root / "gray"), 0.5, 0.25, cache=str(tmp_path))
    with pytest.raises(ValueError, match="^cache_bytes, storage_options and retry are for a pack at a URL"):
        om.PackedImageDataset(str(root / "gray"), 0.5, 0.25, cache_bytes=1, storage_options={}, retry={})


def loader_of(dataset, **kw):
    return om.DataLoader(dataset, om.ShuffledSampler(len(dataset), 4, seed=1),
                         om.ImageBatchCollator(width_multiple=4), seed=2, **kw)


def steps_of(dataset, start, stop, **kw):
    """``(batch bits, set of sample indices)`` of steps ``[start, stop)``."""
    loader = loader_of(dataset, **kw)
    with loader.iter(start, stop) as batches:
        built = [(batch_bits(batch), np.asarray(batch.indices).tolist()) for batch in batches]
    loader.close()
    return [bits for bits, _ in built], {i for _, indices in built for i in indices}


@pytest.mark.parametrize("name", ["gray", "sharded"])
@pytest.mark.parametrize("route", [{}, {"workers": 2}, {"workers": 2, "worker_mode": "process"}])
def test_exactly_the_samples_of_the_steps_run_are_fetched(packs, tmp_path, name, route):
    """Part 3: opening fetches no pixel; a stream over steps [0, 3) of rank 1 of 2 fetches
    exactly the samples of that rank's slots of those steps (the stream's read-ahead stops
    at stop_g), on every route, with the local pack's bytes; a stream resumed at step 3
    in a new dataset over the same cache fetches only the samples it had not."""
    root, url = packs
    local = om.PackedImageDataset(str(root / name), *CONSTANTS[name])
    cache = str(tmp_path / "cache")
    remote = om.PackedImageDataset(f"{url}/{name}", *CONSTANTS[name], cache=cache)
    assert not remote.remote.present.any() and remote.remote.requests == 0
    rank = {"world_size": 2, "rank": 1}
    want, first = steps_of(local, 0, 3, **rank)
    assert steps_of(remote, 0, 3, **route, **rank) == (want, first)
    assert set(np.flatnonzero(remote.remote.present == 1).tolist()) == first
    want, second = steps_of(local, 3, 6, **rank)
    again = om.PackedImageDataset(f"{url}/{name}", *CONSTANTS[name], cache=cache)
    assert steps_of(again, 3, 6, **route, **rank) == (want, second)
    assert set(np.flatnonzero(again.remote.present == 1).tolist()) == first | second
    if not route:       # this process fetched: what it asked for is what was missing, no byte of it twice
        lengths = again.shapes.prod(axis=1) * (4 if name == "sharded" else 1)
        assert again.remote.bytes_fetched >= sum(int(lengths[i]) for i in second - first)
        sample = om.PackedImageDataset(f"{url}/{name}", *CONSTANTS[name], cache=cache)
        before = sample.remote.requests
        same(local, sample)
        assert (sample.remote.present == 1).all() and sample.remote.requests > before
        assert (om.PackedImageDataset(f"{url}/{name}", *CONSTANTS[name], cache=cache).remote.present == 1).all()


def test_the_stream_reads_ahead_through_the_pipeline(packs, tmp_path):
    """Part 3, the read-ahead: the stream asks for the samples of the steps after the one it
    hands out through the pipeline (``Pipeline.read_ahead``, the dataset's own hook), without
    building them: once the first batch of a stream over [0, 3) with no workers is out, the
    samples of steps 1 and 2 arrive too, and no other. A dataset that does not read ahead
    (a local pack, an in-memory dataset) says so, and is never asked."""
    root, url = packs
    remote = om.PackedImageDataset(f"{url}/gray", *CONSTANTS["gray"], cache=str(tmp_path / "cache"))
    loader = loader_of(remote)
    assert loader._pipeline.reads_ahead()
    for dataset in (om.PackedImageDataset(str(root / "gray"), *CONSTANTS["gray"]), om.SyntheticLineImages(8, 3, 1, 9)):
        assert not loader_of(dataset)._pipeline.reads_ahead()
    wanted = sorted({i for g in range(3) for i in loader._pipeline.rank_indices(g).tolist()})
    with loader.iter(0, 3) as batches:
        next(batches)
        deadline = time.monotonic() + 60
        while not (remote.remote.present[wanted] == 1).all():
            assert time.monotonic() < deadline, "the samples of steps 1 and 2 were not read ahead within 60 s"
            time.sleep(0.01)
    assert np.flatnonzero(remote.remote.present == 1).tolist() == wanted
    loader.close()


@pytest.mark.parametrize("route", [{}, {"workers": 2, "worker_mode": "process"}])
def test_a_changed_or_removed_pixel_file_is_reported_at_its_step(packs, tmp_path, route):
    """Parts 3 and 4: a sample whose bytes at the URL no longer hash to its recorded
    SHA-256 is a PackError naming the file, the bytes and the sample, raised by the step
    that needed it (the steps before are served); it is never marked present. A pixel file
    removed at the URL is a PackError naming it, at its step too."""
    root, url = packs
    shutil.rmtree(root / "changing", ignore_errors=True)
    shutil.copytree(root / "gray", root / "changing")
    remote = om.PackedImageDataset(f"{url}/changing", 0.5, 0.25, cache=str(tmp_path / "cache"))
    local = om.PackedImageDataset(str(root / "gray"), 0.5, 0.25)
    loader = loader_of(local)
    victim = int(np.asarray(loader.batch_at(4).indices)[0])     # a sample of step 4, not of steps 0-3
    loader = loader_of(remote, **route)
    if any(victim in np.asarray(loader_of(local).batch_at(g).indices) for g in range(4)):
        pytest.fail("the sampler put the victim in an earlier step: pick another")
    offset = int(np.load(root / "gray" / "pixel_offsets.npy")[victim])
    with open(root / "changing" / "pixels.npy", "r+b") as f:
        f.seek(128 + offset)
        byte = f.read(1)
        f.seek(128 + offset)
        f.write(bytes([byte[0] ^ 1]))
    served = []
    with pytest.raises(PackError, match=rf"{url}/changing/pixels\.npy \(bytes \d+-\d+\): sample {victim} of this "
                                        rf"file does not hash to its SHA-256") as caught:
        with loader.iter(0, 8) as batches:
            for batch in batches:
                served.append(batch.global_step)
    assert served == [0, 1, 2, 3] and "global step 4" in str(caught.value) + "".join(caught.value.__notes__)
    assert remote.remote.present[victim] == 0
    loader.close()
    os.remove(root / "changing" / "pixels.npy")
    with pytest.raises(PackError, match=rf"{url}/changing/pixels\.npy: missing \(the manifest lists it"):
        remote.get_sample(victim)


def test_a_pack_without_sample_digests_is_fetched_whole(packs, tmp_path):
    """Part 3: a pack written before sample_sha256 existed (its manifest lists no such
    array) still opens, locally and at its URL, where it is fetched whole, as it must be
    for each byte to be checked."""
    root, url = packs
    old = root / "old"
    shutil.rmtree(old, ignore_errors=True)
    shutil.copytree(root / "gray", old)
    os.remove(old / "sample_sha256.npy")
    manifest = json.loads((old / "manifest.json").read_text())
    del manifest["arrays"]["sample_sha256"]
    (old / "manifest.json").write_text(json.dumps(manifest))
    local = om.PackedImageDataset(str(old), 0.5, 0.25)
    remote = om.PackedImageDataset(f"{url}/old", 0.5, 0.25, cache=str(tmp_path / "cache"))
    assert remote.remote is None and os.listdir(tmp_path / "cache") == [local.manifest_sha256]
    same(local, remote)
    same(local, om.PackedImageDataset(str(root / "gray"), 0.5, 0.25))


@pytest.mark.parametrize("name", ["gray", "sharded"])
def test_fetch_background_brings_every_sample_and_whole_brings_them_first(packs, tmp_path, name):
    """Part 3: fetch="background" fetches, beside what the steps ask for, every other sample
    in large requests until all are present (then reading asks the server for nothing);
    fetch="whole" fetches the whole pack before opening. Both serve the local pack's bytes."""
    root, url = packs
    local = om.PackedImageDataset(str(root / name), *CONSTANTS[name])
    remote = om.PackedImageDataset(f"{url}/{name}", *CONSTANTS[name], cache=str(tmp_path / "a"), fetch="background")
    assert remote.fetch == "background"
    deadline = time.monotonic() + 60
    while not (remote.remote.present == 1).all():
        assert time.monotonic() < deadline, "the background fetch did not bring every sample within 60 s"
        time.sleep(0.01)
    requests = remote.remote.requests
    assert requests < len(remote)       # large requests, not one per sample
    same(local, remote)
    assert remote.remote.requests == requests
    whole = om.PackedImageDataset(f"{url}/{name}", *CONSTANTS[name], cache=str(tmp_path / "b"), fetch="whole")
    assert whole.remote is None and os.listdir(tmp_path / "b") == [local.manifest_sha256]
    same(local, whole)


@pytest.mark.parametrize("kw, error, message", [
    ({"fetch": "lazy"}, ValueError, r"^fetch must be one of \('exact', 'background', 'whole'\), received 'lazy'$"),
    ({"fetch": "exact", "verify": "full"}, ValueError, r"^verify='full' hashes every pixel file whole: it needs "
                                                       r"fetch='whole'"),
])
def test_fetch_values_are_checked(packs, tmp_path, kw, error, message):
    root, url = packs
    with pytest.raises(error, match=message):
        om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(tmp_path), **kw)
    with pytest.raises(ValueError, match=r"^fetch is for a pack at a URL, received a local path"):
        om.PackedImageDataset(str(root / "gray"), 0.5, 0.25, fetch="exact")


def test_the_cache_folder_of_a_url_is_not_a_local_pack(packs, tmp_path):
    """Part 3: an exact cache folder holds only the samples fetched so far: opened by its
    path it would serve holes; it is refused, naming the way to open it."""
    root, url = packs
    remote = om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(tmp_path))
    with pytest.raises(PackError, match=r"-exact: the cache of a pack at a URL whose samples are fetched as they "
                                        r"are needed \(not all are here\): open the URL"):
        om.PackedImageDataset(remote.path, 0.5, 0.25)


def ended_process_id():
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


@pytest.mark.parametrize("owner", ["ended", "alive"])
def test_a_claim_is_waited_for_while_its_process_lives_and_never_longer(packs, tmp_path, owner):
    """Part 3: a sample another process is fetching (its claim) is waited for, at most as
    long as one request may take (retry's timeout), then fetched here; the claim of a
    process that has ended (a crash, a worker stopped mid-fetch) is not waited for."""
    root, url = packs
    remote = om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(tmp_path), retry={"timeout": 1.5})
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        remote.remote.claims[3] = sleeper.pid if owner == "alive" else ended_process_id()
        began = time.monotonic()
        image = remote.get_sample(3).image
        waited = time.monotonic() - began
    finally:
        sleeper.kill()
        sleeper.wait()
    assert image.tobytes() == om.PackedImageDataset(str(root / "gray"), 0.5, 0.25).get_sample(3).image.tobytes()
    assert (1.5 <= waited < 10) if owner == "alive" else waited < 1.0


def test_a_server_without_byte_ranges_is_refused_on_opening(packs, tmp_path):
    """Part 4: a server that answers a range request with the whole file (Python's
    http.server) is refused when the pack is opened, before any sample is asked for."""
    root, _ = packs
    if not os.path.exists(root / "larger"):
        om.pack(items(9, n=200), str(root / "larger"), progress=False)     # pixels past the first request
    port = free_port()
    with running([sys.executable, "-m", "http.server", "-b", "127.0.0.1", str(port), "-d", str(root)], port,
                 "http.server"):
        with pytest.raises(PackError, match=r"/larger/pixels\.npy: answered more than the 4096 bytes of a request "
                                            r"for bytes 0-4095; the server must serve byte ranges"):
            om.PackedImageDataset(f"http://127.0.0.1:{port}/larger", 0.5, 0.25, cache=str(tmp_path))


def test_the_background_fetch_passes_over_a_bad_sample(packs, tmp_path):
    """Part 3: a sample that does not match its SHA-256 is counted by the background fetch
    (fill_failures, fill_error) and passed over: every other sample arrives; the bad one is
    refused when a step asks for it, and never served."""
    root, url = packs
    shutil.rmtree(root / "spoiled", ignore_errors=True)
    shutil.copytree(root / "gray", root / "spoiled")
    offset = int(np.load(root / "gray" / "pixel_offsets.npy")[5])
    with open(root / "spoiled" / "pixels.npy", "r+b") as f:
        f.seek(128 + offset)
        f.write(b"\xff\x00")
    remote = om.PackedImageDataset(f"{url}/spoiled", 0.5, 0.25, cache=str(tmp_path), fetch="background")
    local = om.PackedImageDataset(str(root / "gray"), 0.5, 0.25)
    deadline = time.monotonic() + 60
    while (remote.remote.present == 1).sum() < len(remote) - 1 or remote.remote.fill_failures == 0:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    assert remote.remote.present[5] == 0 and "sample 5 of this file does not hash" in remote.remote.fill_error
    for i in range(len(local)):
        if i != 5:
            assert remote.get_sample(i).image.tobytes() == local.get_sample(i).image.tobytes()
    with pytest.raises(PackError, match="sample 5 of this file does not hash"):
        remote.get_sample(5)


def test_a_step_with_a_transform_fetches_its_samples_together(packs, tmp_path):
    """Part 3: the route that calls get_sample (a transform) fetches a step's missing
    samples in one go, as the packed route does, not one request per sample; a failure
    to fetch them is named at its step there too."""
    root, url = packs
    remote = om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(tmp_path))
    loader = om.DataLoader(remote, om.SequentialSampler(len(remote), 16), om.ImageBatchCollator(), seed=0,
                           transform=lambda sample, rng: sample)
    batch = loader.batch_at(0)
    assert remote.remote.requests == 1 and (remote.remote.present[:16] == 1).all()
    assert np.asarray(batch.indices).tolist() == list(range(16))
    shutil.rmtree(root / "moved", ignore_errors=True)
    shutil.copytree(root / "gray", root / "moved")
    moved = om.PackedImageDataset(f"{url}/moved", 0.5, 0.25, cache=str(tmp_path / "moved"))
    os.remove(root / "moved" / "pixels.npy")
    loader = om.DataLoader(moved, om.SequentialSampler(len(moved), 16), om.ImageBatchCollator(), seed=0,
                           transform=lambda sample, rng: sample)
    with pytest.raises(PackError, match=r"/moved/pixels\.npy: missing") as caught:
        loader.batch_at(1)
    assert any("while building global step 1" in note for note in caught.value.__notes__)


def test_the_server_without_nginx_serves_byte_ranges_and_the_same_packs(packs, tmp_path):
    """Issue 38, item 6: aiohttp's static files (``static_http.py``), the server the tests
    take where nginx is not on PATH, run here whatever the machine has, so that both servers
    are exercised on every run: a range request is a ``206`` of exactly those bytes, a range
    past the end a ``416``, and both packs read from it sample by sample and whole are the
    local packs."""
    import urllib.error
    import urllib.request
    root, _ = packs
    with aiohttp_static(root) as port:
        url = f"http://127.0.0.1:{port}"
        pixels = (root / "gray" / "pixels.npy").read_bytes()
        request = urllib.request.Request(f"{url}/gray/pixels.npy", headers={"Range": "bytes=100-227"})
        with urllib.request.urlopen(request, timeout=10) as answer:
            assert answer.status == 206 and answer.read() == pixels[100:228]
            assert answer.headers["Content-Range"] == f"bytes 100-227/{len(pixels)}"
        request = urllib.request.Request(f"{url}/gray/pixels.npy", headers={"Range": f"bytes={len(pixels)}-"})
        with pytest.raises(urllib.error.HTTPError, match="416"):
            urllib.request.urlopen(request, timeout=10)
        for name, constants in CONSTANTS.items():
            local = om.PackedImageDataset(str(root / name), *constants)
            for verify in ("index", "full"):
                remote = om.PackedImageDataset(f"{url}/{name}", *constants, cache=str(tmp_path / verify),
                                               verify=verify)
                same(local, remote)
