"""The loader's ``timeout`` over a pack at a URL fetched sample by sample (issue 36, item 13).

Against a real HTTP server on 127.0.0.1 (``remote_packs.http_server``) behind a real TCP
proxy (``slow_proxy.py``) that the test makes hold every request once the pack is open,
until it lets them through. On every route the
consumer's own wait for the samples of a step it builds or prepares (the first step of a
stream, every step at 0 workers, the packed lane's preparations) ends after the loader's
``timeout`` with a ``TimeoutError`` naming the step, the timeout and the samples; a worker
thread waiting for samples is called off when its stream ends, so no thread is left
waiting and no ``StuckWorkerWarning`` is given; and the same loader gives the local pack's
batches once the server answers again. Needs the ``remote`` extra (fsspec, aiohttp).
"""
from __future__ import annotations

import contextlib
import os
import sys
import threading
import warnings

import fsspec  # noqa: F401  (the remote extra: CI leaves this file out where it is not installed)
import pytest

import onemodel_cy as om
from harness import batch_bits, live_workers
from remote_packs import free_port, http_server, running, write_packs

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

HERE = os.path.dirname(os.path.abspath(__file__))
GRAY = (0.5, 0.25)
TIMEOUT = 0.5
# A request is cut after 5 s and not tried again: before item 13 the consumer's wait ended
# there (a PackError), not at the loader's timeout. The test lets the held requests through
# long before that.
RETRY = {"timeout": 5.0, "attempts": 1}
STEP = r"no batch for step {g} after 0\.5 s \(DataLoader timeout\)"
SAMPLES = r": 4 samples of http://127\.0\.0\.1:\d+/gray \(the first: sample \d+\) had not arrived yet"


@pytest.fixture(scope="module")
def proxied(tmp_path_factory):
    """``(root folder served, base URL through the proxy, the proxy's delay file)``."""
    run, root = tmp_path_factory.mktemp("nginx"), tmp_path_factory.mktemp("served")
    write_packs(root)
    delay = str(run / "delay")
    with http_server(root, str(run)) as port:
        listen = free_port()
        with running([sys.executable, os.path.join(HERE, "slow_proxy.py"), str(listen), str(port), delay],
                     listen, "slow_proxy.py"):
            yield root, f"http://127.0.0.1:{listen}", delay


@contextlib.contextmanager
def held(delay):
    """Every request through the proxy held until the block ends (then let through)."""
    with open(delay, "w") as f:
        f.write("3600")
    try:
        yield
    finally:
        with open(delay, "w") as f:
            f.write("0")


def python_transform(sample, rng):
    """A transform written in Python: in thread mode, the thread engine (not the lane)."""
    return sample


ROUTES = {
    "auto (the packed lane)": dict(workers=2),
    "thread workers": dict(workers=2, worker_mode="thread", transform=python_transform),
    "process workers": dict(workers=2, worker_mode="process"),
    "0 workers": dict(workers=0),
}


def loader_over(dataset, **kw):
    return om.DataLoader(dataset, om.ShuffledSampler(len(dataset), 4, seed=1),
                         om.ImageBatchCollator(width_multiple=4), seed=2, **kw)


def epoch_bits(loader):
    return [batch_bits(batch) for batch in loader]


@contextlib.contextmanager
def nothing_left_behind():
    """No warning (a StuckWorkerWarning above all) and no new thread or worker process once
    the block ends; fsspec's one event-loop thread is started before it."""
    threads = set(threading.enumerate())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        yield
    assert [str(w.message) for w in caught] == []
    assert set(threading.enumerate()) <= threads and live_workers() == []


@pytest.mark.parametrize("route", ROUTES)
def test_the_consumers_wait_for_remote_samples_ends_at_the_loaders_timeout(proxied, tmp_path, route):
    """Item 13: the first step, which the consumer builds itself on every route (and the
    lane's preparations, and every step at 0 workers), waits for its samples no longer than
    the loader's timeout: a TimeoutError naming the step, the timeout and the samples (was:
    18 s, then a PackError, with timeout=2). The loader then gives the local pack's epoch."""
    root, url, delay = proxied
    dataset = om.PackedImageDataset(f"{url}/gray", *GRAY, cache=str(tmp_path / "cache"), retry=RETRY)
    assert dataset.remote is not None
    loader = loader_over(dataset, timeout=TIMEOUT, join_timeout=2, **ROUTES[route])
    with nothing_left_behind():
        with held(delay), pytest.raises(TimeoutError, match="^" + STEP.format(g=0) + SAMPLES):
            next(iter(loader))
    loader.timeout = 60     # the fetches cut off above are still on their way: they are waited for
    assert epoch_bits(loader) == epoch_bits(loader_over(om.PackedImageDataset(str(root / "gray"), *GRAY)))
    loader.close()


@pytest.mark.parametrize("route", ["auto (the packed lane)", "thread workers"])
def test_a_later_step_waiting_for_remote_samples_ends_at_the_timeout_and_no_worker_stays(proxied, tmp_path,
                                                                                       route):
    """Item 13: step 0's samples are in the cache, step 1's are held. Step 0 comes (the lane
    stops preparing step 1 at the timeout, without failing it); step 1 is a TimeoutError
    after the loader's timeout; a worker thread still waiting for its samples is called off
    as the stream ends, so closing joins it at once (was: a StuckWorkerWarning after
    join_timeout, and the thread left waiting for the server)."""
    root, url, delay = proxied
    dataset = om.PackedImageDataset(f"{url}/gray", *GRAY, cache=str(tmp_path / "cache"), retry=RETRY)
    loader = loader_over(dataset, timeout=TIMEOUT, join_timeout=2, **ROUTES[route])
    first = batch_bits(loader.batch_at(0))      # step 0's samples fetched now
    with nothing_left_behind():
        with held(delay):
            stream = loader.iter(0, loader.steps_per_epoch)
            assert batch_bits(next(stream)) == first
            with pytest.raises(TimeoutError, match="^" + STEP.format(g=1)):
                next(stream)
    loader.timeout = 60
    assert epoch_bits(loader) == epoch_bits(loader_over(om.PackedImageDataset(str(root / "gray"), *GRAY)))
    loader.close()
