"""What the remote-pack tests share (test_packs_remote*.py): the packs they serve, their
comparisons, and starting a server process on 127.0.0.1 (nginx, or aiohttp's static files
where nginx is not installed; moto's S3 server) and ending it. ``benchmarks/bench_remote.py``
and ``benchmarks/remote_peers.py`` start their servers with these too."""
from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import numpy as np

import onemodel_cy as om
from harness import batch_bits


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def server_env():
    """This environment less the sanitizers: CI's sanitizer run preloads ASan into the test
    process, and a server is not the code under test."""
    return {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "ASAN_OPTIONS", "UBSAN_OPTIONS")}


@contextlib.contextmanager
def running(command, port, what):
    """The server process ``command``, once it accepts connections on ``port``; ended on exit.
    Its output goes to a file (a pipe nobody reads would stop a server that logs each request)."""
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen(command, env=server_env(), stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 30
            while True:
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=1).close()
                    break
                except OSError:
                    if process.poll() is not None or time.monotonic() > deadline:
                        log.seek(0)
                        raise RuntimeError(f"{what} did not start: {log.read().decode(errors='replace')}") from None
                    time.sleep(0.05)
            yield process
        finally:
            process.terminate()
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


NGINX_CONF = """
user root;
worker_processes 1;
daemon off;
pid {run}/nginx.pid;
error_log {run}/error.log;
events {{ worker_connections 512; }}
http {{
    access_log off;
    keepalive_requests 100000;
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


def nginx_binary():
    """The nginx the tests run: the one on PATH, or None. PATH alone decides (Debian installs
    it in /usr/sbin), so that a run with a PATH without it takes the other server."""
    return shutil.which("nginx")


@contextlib.contextmanager
def nginx(root, run):
    """nginx serving the folder ``root`` (byte ranges included) on a free loopback port, its
    files in the folder ``run``; yields the port."""
    binary = nginx_binary()
    assert binary, "nginx is not on PATH: apt-get install nginx-light, or use http_server()"
    port = free_port()
    os.makedirs(run, exist_ok=True)
    with open(os.path.join(run, "nginx.conf"), "w") as f:
        f.write(NGINX_CONF.format(run=run, root=root, port=port))
    with running([binary, "-c", os.path.join(run, "nginx.conf"), "-p", str(run)], port, "nginx"):
        yield port


@contextlib.contextmanager
def aiohttp_static(root):
    """aiohttp's static files (``static_http.py``, the ``test`` extra) serving the folder
    ``root`` (byte ranges included) on a free loopback port; yields the port."""
    port = free_port()
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "static_http.py")
    with running([sys.executable, script, str(root), str(port)], port, "aiohttp static server"):
        yield port


def http_server_name():
    """Which server ``http_server`` starts: what the test session's header says."""
    binary = nginx_binary()
    if binary:
        return f"nginx ({binary})"
    import aiohttp
    return f"aiohttp {aiohttp.__version__} static files (no nginx on PATH)"


@contextlib.contextmanager
def http_server(root, run):
    """A real HTTP server with byte ranges serving the folder ``root`` on a free loopback
    port: nginx where it is on PATH, else aiohttp's static files, so that the README's two
    commands pass the remote-pack tests on a machine without nginx; yields the port."""
    if nginx_binary():
        with nginx(root, run) as port:
            yield port
    else:
        with aiohttp_static(root) as port:
            yield port


@contextlib.contextmanager
def moto():
    """moto's S3 server on a free loopback port; yields its endpoint URL."""
    port = free_port()
    with running([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], port, "moto_server"):
        yield f"http://127.0.0.1:{port}"


def nothing_in(cache) -> bool:
    """Whether the cache folder ``cache`` holds nothing (or was never made: a fetch that
    fails on the manifest creates nothing)."""
    return not os.path.exists(cache) or os.listdir(cache) == []


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


def write_packs(root):
    """A gray pack (``gray``, opened with mean and std ``GRAY``) and a float32 sharded pack
    of 3 shards (``sharded``) in ``root``."""
    om.pack(items(1), str(root / "gray"), progress=False)
    om.pack_sharded(Items(2), str(root / "sharded"), shards=3, progress=False)


CONSTANTS = {"gray": (0.5, 0.25), "sharded": (None, None)}


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
