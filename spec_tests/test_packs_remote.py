"""Remote packs, a start (issue 25, part 3): ``PackedImageDataset("http://...", cache=...)``.

Against a real HTTP server started here on 127.0.0.1: nginx from Debian (``nginx-light``,
which .ci/run installs), serving a folder of packs with Range support, stopped at the end
of the module. A pack and a sharded pack read from their URLs serve the local packs'
samples at every index and the same batches through the loader (worker processes reopen
them by URL and find them in the cache); the cache stays within its bound; a changed, a
truncated and a missing file are each a PackError naming the URL, leaving nothing in the
cache; a pack replaced at its URL is refused by a pickled copy. Needs the ``remote``
extra (fsspec, aiohttp); the runs of other Pythons leave this file out when it is missing.
"""
from __future__ import annotations

import os
import pickle
import shutil
import socket
import subprocess
import time

import fsspec  # noqa: F401  (the remote extra: CI leaves this file out where it is not installed)
import numpy as np
import pytest

import onemodel_cy as om
from onemodel_cy.data.packfmt import PackError
from harness import batch_bits

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

NGINX_CONF = """
user root;
worker_processes 1;
daemon off;
pid {run}/nginx.pid;
error_log {run}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {run}/access.log;
    client_body_temp_path {run}/body;
    proxy_temp_path {run}/proxy;
    fastcgi_temp_path {run}/fastcgi;
    uwsgi_temp_path {run}/uwsgi;
    scgi_temp_path {run}/scgi;
    server {{
        listen 127.0.0.1:{port};
        root {root};
        location / {{ }}
    }}
}}
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``(root folder served, base URL)``: nginx serving ``root`` on a free loopback port."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    assert os.path.exists(nginx), "nginx is not installed: apt-get install nginx-light (.ci/run installs it)"
    run, root = tmp_path_factory.mktemp("nginx"), tmp_path_factory.mktemp("served")
    port = free_port()
    (run / "nginx.conf").write_text(NGINX_CONF.format(run=run, root=root, port=port))
    # The server is not the code under test: CI's sanitizer run preloads ASan into this
    # process, which an uninstrumented nginx is started without.
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}
    process = subprocess.Popen([nginx, "-c", str(run / "nginx.conf"), "-p", str(run)], env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"nginx did not start: {process.stderr.read().decode(errors='replace')}")
                time.sleep(0.05)
        yield root, f"http://127.0.0.1:{port}"
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


def items(seed, n=24):
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, (6, int(rng.integers(3, 40))), dtype=np.uint8),
             rng.integers(1, 9, int(rng.integers(1, 6))), i, f"line{i}.png") for i in range(n)]


class Items:
    """``items`` as a dataset, so that pack_sharded can cut it."""

    def __init__(self, seed):
        self.data = items(seed)

    def __len__(self):
        return len(self.data)

    def get_sample(self, i):
        image, target, label, _ = self.data[i]
        return om.Sample((image.astype(np.float32) / 255)[None], target, label)


@pytest.fixture(scope="module")
def packs(server):
    """A gray pack and a float32 sharded pack of 3 shards, served by nginx."""
    root, url = server
    om.pack(items(1), str(root / "gray"), progress=False)
    om.pack_sharded(Items(2), str(root / "sharded"), shards=3, progress=False)
    return root, url


def same(a, b):
    assert len(a) == len(b)
    for i in range(len(a)):
        x, y = a.get_sample(i), b.get_sample(i)
        assert (x.image.tobytes(), x.target.tolist(), x.label, a.key(i)) == \
               (y.image.tobytes(), y.target.tolist(), y.label, b.key(i)), i


def stream(dataset, **kw):
    loader = om.DataLoader(dataset, om.ShuffledSampler(len(dataset), 4, seed=1),
                           om.ImageBatchCollator(width_multiple=4), seed=2, **kw)
    with loader.iter(0, 2 * loader.steps_per_epoch) as batches:
        bits = [batch_bits(batch) for batch in batches]
    loader.close()
    return bits


@pytest.mark.parametrize("name, constants", [("gray", (0.5, 0.25)), ("sharded", (None, None))])
def test_a_pack_read_from_its_url_is_the_local_pack(packs, tmp_path, name, constants):
    """Part 3 (a start): the pack at the URL, fetched into the cache (each file checked
    against the manifest), serves the local pack's samples at every index and its batches
    through the packed lane and worker processes (which reopen it by URL and find it in
    the cache: nothing is fetched twice)."""
    root, url = packs
    local = om.PackedImageDataset(str(root / name), *constants)
    remote = om.PackedImageDataset(f"{url}/{name}", *constants, cache=str(tmp_path / "cache"))
    assert remote.url == f"{url}/{name}" and remote.manifest_sha256 == local.manifest_sha256
    assert remote.path == str(tmp_path / "cache" / local.manifest_sha256)
    assert remote.fingerprint() == local.fingerprint()
    same(local, remote)
    reference = stream(local)
    assert stream(remote, workers=2) == reference
    assert stream(remote, workers=2, worker_mode="process") == reference
    assert os.listdir(tmp_path / "cache") == [local.manifest_sha256]


def test_the_cache_keeps_within_its_bound(packs, tmp_path):
    """Part 3: with room for one pack, opening a second removes the first (least recently
    opened); a pack larger than the bound is refused before anything is fetched."""
    root, url = packs
    cache = str(tmp_path / "cache")
    sizes = {name: sum(os.path.getsize(os.path.join(r, f)) for r, _, fs in os.walk(root / name) for f in fs)
             for name in ("gray", "sharded")}
    bound = max(sizes.values()) + 10
    gray = om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=cache, cache_bytes=bound)
    sharded = om.PackedImageDataset(f"{url}/sharded", cache=cache, cache_bytes=bound)
    assert os.listdir(cache) == [sharded.manifest_sha256]
    same(gray, om.PackedImageDataset(str(root / "gray"), 0.5, 0.25))     # still mapped: its files unlinked only
    with pytest.raises(PackError, match=rf"{url}/gray: the pack holds {sizes['gray']} bytes, more than the cache's "
                                        rf"limit of 100 bytes"):
        om.PackedImageDataset(f"{url}/gray", 0.5, 0.25, cache=str(tmp_path / "small"), cache_bytes=100)
    assert os.listdir(tmp_path / "small") == []


@pytest.mark.parametrize("damage, message", [
    ("flip", r"/bad/pixels\.npy: SHA-256 differs from the manifest's"),
    ("truncate", r"/bad/pixels\.npy: holds \d+ bytes, the manifest records \d+"),
    ("remove", r"/bad/labels\.npy: missing \(the manifest lists it\)"),
])
def test_a_changed_short_or_missing_file_is_named_and_nothing_is_cached(packs, tmp_path, damage, message):
    """Part 3: every byte fetched is checked against the manifest: changed pixels, a short
    file and a missing one are each a PackError naming the URL of the file, and the cache
    holds nothing of that pack afterwards."""
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
    else:
        os.remove(bad / "labels.npy")
    cache = tmp_path / "cache"
    with pytest.raises(PackError, match=message):
        om.PackedImageDataset(f"{url}/bad", 0.5, 0.25, cache=str(cache))
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
    with pytest.raises(ValueError, match="cache and cache_bytes are for a pack at a URL"):
        om.PackedImageDataset(str(root / "gray"), 0.5, 0.25, cache=str(tmp_path))
