"""Remote packs, a start (issue 25, part 3): ``PackedImageDataset("http://...", cache=...)``.

Against a real HTTP server started here on 127.0.0.1: nginx from Debian (``nginx-light``,
which .ci/run installs), serving a folder of packs with Range support, stopped at the end
of the module. A pack and a sharded pack read from their URLs serve the local packs'
samples at every index and the same batches through the loader (worker processes reopen
them by URL and find them in the cache); the cache stays within its bound; a changed, a
truncated and a missing file are each a PackError naming the URL, leaving nothing in the
cache (test_packs_remote_faults.py: a server that misbehaves); a pack replaced at its URL
is refused by a pickled copy. Needs the ``remote``
extra (fsspec, aiohttp); the runs of other Pythons leave this file out when it is missing.
"""
from __future__ import annotations

import os
import pickle
import shutil

import fsspec  # noqa: F401  (the remote extra: CI leaves this file out where it is not installed)
import pytest

import onemodel_cy as om
from onemodel_cy.data.packfmt import PackError
from remote_packs import free_port, items, running, same, stream, write_packs

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


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``(root folder served, base URL)``: nginx serving ``root`` on a free loopback port."""
    nginx = shutil.which("nginx") or "/usr/sbin/nginx"
    assert os.path.exists(nginx), "nginx is not installed: apt-get install nginx-light (.ci/run installs it)"
    run, root = tmp_path_factory.mktemp("nginx"), tmp_path_factory.mktemp("served")
    port = free_port()
    (run / "nginx.conf").write_text(NGINX_CONF.format(run=run, root=root, port=port))
    with running([nginx, "-c", str(run / "nginx.conf"), "-p", str(run)], port, "nginx"):
        yield root, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def packs(server):
    """A gray pack and a float32 sharded pack of 3 shards, served by nginx."""
    root, url = server
    write_packs(root)
    return root, url


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
    with pytest.raises(PackError, match=message):
        om.PackedImageDataset(f"{url}/bad", 0.5, 0.25, cache=str(cache), retry={"attempts": 2, "backoff": 0.01})
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
