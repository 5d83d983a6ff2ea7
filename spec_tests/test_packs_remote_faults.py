"""Remote packs, faults (issue 25, part 4): a server that answers 500 or 503, drops the
connection mid-file, answers a short range or stalls.

Against a real misbehaving HTTP server started here on 127.0.0.1 (``flaky_http.py``, a
subprocess), whose first N answers of each file misbehave: with fewer faults than
attempts the pack arrives with the local pack's bytes; with more, the fetch ends in a
``PackError`` naming the file's URL, the last failure and the attempts, in bounded time. A
stall is cut by the timeout. Either way no folder is left in the cache, and no thread or
socket of this process outlives the fetch. Needs the ``remote`` extra (fsspec, aiohttp);
the runs of other Pythons leave this file out when it is missing.
"""
from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request

import fsspec  # noqa: F401  (the remote extra: CI leaves this file out where it is not installed)
import pytest

import onemodel_cy as om
from onemodel_cy.data.packs import remote as remote_fetch
from onemodel_cy.data.packs.format import PackError
from remote_packs import nothing_in, CONSTANTS, free_port, running, same, write_packs

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

FLAKY = os.path.join(os.path.dirname(os.path.abspath(__file__)), "flaky_http.py")
FAULTS = ("500", "503", "drop", "short")
QUICK = {"backoff": 0.01}      # the waits are tested on their own (test_the_waits_double...)


@pytest.fixture(scope="module")
def flaky(tmp_path_factory):
    """``(root folder served, base URL)``: flaky_http.py serving ``root`` on a free port."""
    root = tmp_path_factory.mktemp("flaky")
    write_packs(root)
    port = free_port()
    with running([sys.executable, FLAKY, str(root), str(port)], port, "flaky_http.py"):
        yield root, f"http://127.0.0.1:{port}"


def sockets():
    return sum(os.readlink(f"/proc/self/fd/{fd}").startswith("socket:") for fd in os.listdir("/proc/self/fd")
               if os.path.exists(f"/proc/self/fd/{fd}"))


@pytest.fixture
def served(flaky, tmp_path):
    """``(root, url, cache)`` with the server's counts reset; afterwards, the cache holds
    no hidden folder and this process no more threads or sockets than before (after a
    first fetch, which starts fsspec's one thread)."""
    root, url = flaky
    om.PackedImageDataset(f"{url}/ok/0/gray", 0.5, 0.25, cache=str(tmp_path / "warm"))
    urllib.request.urlopen(f"{url}/reset").close()
    threads, held = set(threading.enumerate()), sockets()
    cache = tmp_path / "cache"
    yield root, url, cache
    assert set(threading.enumerate()) <= threads     # none new (another test's may have ended meanwhile)
    deadline = time.monotonic() + 5
    while sockets() > held and time.monotonic() < deadline:     # a closed connection's end, being torn down
        time.sleep(0.05)
    assert sockets() <= held
    if cache.exists():
        assert not [name for name in os.listdir(cache) if name.startswith(".")]


@pytest.mark.parametrize("name", ["gray", "sharded"])
@pytest.mark.parametrize("fault", FAULTS)
def test_each_fault_is_retried_until_the_file_arrives(served, fault, name):
    """Part 4: every file (each manifest too, but for ``short``, which only a range can be)
    misbehaves twice; with 3 attempts the pack arrives, byte for byte the local pack."""
    root, url, cache = served
    remote = om.PackedImageDataset(f"{url}/{fault}/2/{name}", *CONSTANTS[name], cache=str(cache),
                                   retry={"attempts": 3, **QUICK})
    local = om.PackedImageDataset(str(root / name), *CONSTANTS[name])
    assert remote.manifest_sha256 == local.manifest_sha256 and remote.retry == {"attempts": 3, **QUICK}
    same(local, remote)
    assert os.listdir(cache) == [local.manifest_sha256 + "-exact"]     # its samples fetched one by one


def test_a_stall_is_cut_by_the_timeout_and_retried(served):
    """Part 4: every file stalls once after half its bytes; each stalled request is cut
    after the timeout and asked again, and the pack arrives whole (the spare attempts are
    for a healthy request slower than the short timeout, on a loaded machine)."""
    root, url, cache = served
    began = time.monotonic()
    remote = om.PackedImageDataset(f"{url}/stall/1/gray", 0.5, 0.25, cache=str(cache),
                                   retry={"attempts": 4, "timeout": 0.3, **QUICK})
    files = 1 + len(remote.manifest["arrays"])
    assert time.monotonic() - began < files * (0.3 + 1.5)
    same(om.PackedImageDataset(str(root / "gray"), 0.5, 0.25), remote)


@pytest.mark.parametrize("fault, where, problem", [
    ("500", "manifest.json", r"ClientResponseError: 500, message='Internal Server Error'"),
    ("503", "manifest.json", r"ClientResponseError: 503, message='Service Unavailable'"),
    ("drop", "manifest.json", r"ClientPayloadError: Response payload is not completed"),
    ("short", r"\w+\.npy \(bytes 0-\d+\)", r"answered \d+ of the \d+ bytes from byte 0 \(a short answer"),
    ("stall", "manifest.json", r"no complete answer within 0.3 s \(timeout\)"),
])
def test_a_fault_that_persists_is_a_clear_error(served, fault, where, problem):
    """Part 4: a file that misbehaves at every attempt ends the fetch in bounded time with a
    PackError naming its URL, the attempts and the last failure; nothing stays in the cache."""
    root, url, cache = served
    short = {"timeout": 0.3} if fault == "stall" else {}     # the others must not be cut: their answer is named
    began = time.monotonic()
    with pytest.raises(PackError, match=rf"^{url}/{fault}/99/gray/{where}: gave up after 2 attempts, the last: "
                                        rf"{problem}"):
        om.PackedImageDataset(f"{url}/{fault}/99/gray", 0.5, 0.25, cache=str(cache),
                              retry={"attempts": 2, **short, **QUICK})
    assert time.monotonic() - began < 5
    assert nothing_in(cache)


def test_the_waits_double_from_backoff_and_stay_bounded(served, monkeypatch):
    """Part 4: before attempt k (k >= 2) the fetch waits backoff * 2**(k-2) seconds, jittered
    down to half of it at most, and never more than remote_fetch.MAX_WAIT."""
    root, url, cache = served
    waits, pause = [], remote_fetch.pause
    monkeypatch.setattr(remote_fetch, "pause", lambda retry, attempt: waits.append(pause(retry, attempt)) or 0.0)
    with pytest.raises(PackError, match="gave up after 4 attempts"):
        om.PackedImageDataset(f"{url}/503/99/gray", 0.5, 0.25, cache=str(cache),
                              retry={"attempts": 4, "backoff": 0.25})
    assert len(waits) == 3 and all(d / 2 <= w <= d for w, d in zip(waits, (0.25, 0.5, 1.0))), waits
    many = remote_fetch.Retry(attempts=100, backoff=remote_fetch.MAX_WAIT)
    assert all(remote_fetch.pause(many, k) <= remote_fetch.MAX_WAIT for k in range(2, 101))


@pytest.mark.parametrize("retry, error, message", [
    ({"attempts": 0}, ValueError, r"^retry\['attempts'\] must be in \[1, 100\], received 0$"),
    ({"attempts": 2.0}, TypeError, r"^retry\['attempts'\] must be an integer in \[1, 100\], received float 2.0$"),
    ({"attempts": True}, TypeError, r"received bool True$"),
    ({"timeout": 0}, ValueError, r"^retry\['timeout'\] must be in \[0.001, 3600.0\], received 0$"),
    ({"timeout": float("nan")}, ValueError, r"received nan$"),
    ({"timeout": "5"}, TypeError, r"^retry\['timeout'\] must be a number in \[0.001, 3600.0\], received str '5'$"),
    ({"backoff": -1}, ValueError, r"^retry\['backoff'\] must be in \[0.0, 60.0\], received -1$"),
    ({"tries": 3}, ValueError, r"^retry: unknown key\(s\) 'tries'; allowed: attempts, timeout, backoff$"),
    ([("attempts", 3)], TypeError, r"^retry must be None or a dict with keys among attempts, timeout, backoff, "
                                   r"received list \[\('attempts', 3\)\]$"),
])
def test_retry_values_are_checked(tmp_path, retry, error, message):
    """Part 4: a retry policy out of range or of the wrong kind is refused before any request."""
    with pytest.raises(error, match=message):
        om.PackedImageDataset("http://127.0.0.1:9/pack", cache=str(tmp_path), retry=retry)
    with pytest.raises(TypeError, match=r"^storage_options must be None or a dict of fsspec options \(str keys\), "
                                        r"received list \['endpoint_url'\]$"):
        om.PackedImageDataset("s3://bucket/pack", cache=str(tmp_path), storage_options=["endpoint_url"])
