"""Remote-reading peers of the benchmark: MosaicML Streaming and LitData reading line images from S3.

Each peer has a writer (local folder of shards/chunks from a list of ``(image, target)`` samples,
image a uint8 array [H, W], target an int32 array) and a reader that iterates ONE shuffled epoch
from an ``s3://bucket/prefix`` URL served by an S3-compatible server (moto's, in the self-check),
caching into a fresh local folder, and yields the samples back as ``(image, target)`` numpy arrays.

Both formats store the same four fields per sample: ``image`` (the raw pixel bytes, row-major),
``height`` and ``width`` (ints) and ``target`` (the raw bytes of the int32 target). Shards are cut
at ``SHARD_BYTES`` = 16 MiB (Streaming's ``size_limit``, LitData's ``chunk_bytes``), so a
20,000-line set of height 32 and widths 40..400 (about 140 MB of pixels) gives about 9 shards,
comparable to the 8 shards of ``bench_pack_shards.py``. No compression, no hashing.

``storage_options`` is in s3fs's terms: ``{"endpoint_url": ..., "key": ..., "secret": ...}``.

* Streaming reaches the endpoint through boto3, configured only by the environment: it reads
  ``S3_ENDPOINT_URL`` for the endpoint and boto3's own ``AWS_ACCESS_KEY_ID`` /
  ``AWS_SECRET_ACCESS_KEY`` / ``AWS_DEFAULT_REGION``. ``iterate_streaming`` sets them while its
  epoch runs and puts the previous values back after. It runs in this process (no DataLoader
  workers, world size 1), after ``streaming.base.util.clean_stale_shared_memory()``.
* LitData takes boto3 client arguments as ``StreamingDataset(storage_options=...)``:
  ``endpoint_url``, ``aws_access_key_id``, ``aws_secret_access_key``, ``region_name``; its chunk
  downloads go through obstore, which it builds from that same boto3 client (path-style for a
  non-AWS endpoint) but with client options of its own that forbid plain http, so for an
  ``http://`` endpoint (moto) ``iterate_litdata`` adds ``allow_http`` to them while it runs
  (``_litdata_allow_http``; ``AWS_ALLOW_HTTP`` in the environment is overridden by them).

Installed in the venv without touching torch (2.13.0 CPU) like this::

    pip install --no-deps mosaicml-streaming litdata
    pip install "transformers<5" lightning-utilities tifffile obstore zstd "xxhash<4" \\
        "python-snappy<1" brotli "catalogue<3"

``import streaming`` imports ``streaming.vision``, which needs torchvision; torchvision is not
installed (the PyPI wheel is built for CUDA torch and does not load with the CPU torch here), so
``_import_streaming`` puts an empty ``streaming.vision`` module in its place when torchvision is
missing. Nothing here uses it.

Self-check (starts a moto server, 500 random lines, both peers, stops the server)::

    python benchmarks/remote_peers.py
"""
from __future__ import annotations

import contextlib
import functools
import gc
import os
import shutil
import sys
import tempfile
import types
from collections import Counter

import numpy as np

SHARD_BYTES = 16 << 20
COLUMNS = {"image": "bytes", "height": "int", "width": "int", "target": "bytes"}


def _import_streaming():
    """``import streaming``, with an empty ``streaming.vision`` when torchvision is not installed."""
    try:
        import torchvision  # noqa: F401
    except ImportError:
        sys.modules.setdefault("streaming.vision", types.ModuleType("streaming.vision"))
    import streaming
    return streaming


def _record(image, target):
    image = np.ascontiguousarray(image, dtype=np.uint8)
    return {"image": image.tobytes(), "height": int(image.shape[0]), "width": int(image.shape[1]),
            "target": np.ascontiguousarray(target, dtype=np.int32).tobytes()}


def _sample(record):
    """``(image, target)`` from a stored record: read-only numpy views over the record's bytes."""
    image = np.frombuffer(record["image"], np.uint8).reshape(int(record["height"]), int(record["width"]))
    return image, np.frombuffer(record["target"], np.int32)


# ----------------------------------------------------------------------------------------------- writers

def write_streaming(samples, out_dir):
    """MDS shards of ``samples`` in ``out_dir`` (``streaming.MDSWriter``, no compression, ``SHARD_BYTES``)."""
    streaming = _import_streaming()
    with streaming.MDSWriter(out=out_dir, columns=COLUMNS, compression=None, size_limit=SHARD_BYTES) as writer:
        for image, target in samples:
            writer.write(_record(image, target))
    return out_dir


def _litdata_item(samples, index):
    return _record(*samples[index])


def write_litdata(samples, out_dir):
    """LitData chunks of ``samples`` in ``out_dir`` (``litdata.optimize``, one worker, ``SHARD_BYTES``).

    ``optimize`` runs its worker as a *spawned* process (its default outside notebooks), which gets
    ``samples`` pickled and re-imports ``__main__``: call this under ``if __name__ == "__main__":``.
    ``optimize`` also sets the process-wide multiprocessing start method (``force=True``); the one
    in force before is put back after, so torch DataLoader workers started later are unaffected.
    """
    import multiprocessing

    import litdata
    start_method = multiprocessing.get_start_method(allow_none=True)
    try:
        litdata.optimize(fn=functools.partial(_litdata_item, samples), inputs=list(range(len(samples))),
                         output_dir=out_dir, chunk_bytes=SHARD_BYTES, num_workers=1, mode="overwrite",
                         verbose=False)
    finally:
        multiprocessing.set_start_method(start_method, force=True)
    return out_dir


# ---------------------------------------------------------------------------------------------- upload

def _s3fs(storage_options):
    import s3fs
    return s3fs.S3FileSystem(endpoint_url=storage_options["endpoint_url"], key=storage_options["key"],
                             secret=storage_options["secret"])


def upload(folder, s3_url, storage_options):
    """Put the files of local ``folder`` under ``s3_url`` (``s3://bucket/prefix``), making the bucket if needed."""
    fs = _s3fs(storage_options)
    bucket = s3_url.removeprefix("s3://").split("/", 1)[0]
    if not fs.exists(bucket):
        fs.mkdir(bucket)
    fs.put(folder.rstrip("/") + "/", s3_url.rstrip("/") + "/", recursive=True)
    fs.invalidate_cache()
    return s3_url


# ---------------------------------------------------------------------------------------------- readers

@contextlib.contextmanager
def _environ(**values):
    """Set environment variables for the duration of the block, putting the previous ones back."""
    old = {name: os.environ.get(name) for name in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for name, value in old.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def iterate_streaming(remote, local_cache, storage_options, shuffle_seed, batch_size):
    """One shuffled epoch of the MDS dataset at ``remote`` as ``(image uint8 [H, W], target int32)``.

    ``local_cache`` must be a fresh (absent or empty) folder. Single process, world size 1.
    """
    streaming = _import_streaming()
    from streaming.base.util import clean_stale_shared_memory
    with _environ(S3_ENDPOINT_URL=storage_options["endpoint_url"], AWS_ACCESS_KEY_ID=storage_options["key"],
                  AWS_SECRET_ACCESS_KEY=storage_options["secret"],
                  AWS_DEFAULT_REGION=storage_options.get("region", "us-east-1")):
        clean_stale_shared_memory()
        dataset = streaming.StreamingDataset(remote=remote, local=local_cache, shuffle=True,
                                             shuffle_seed=shuffle_seed, batch_size=batch_size)
        try:
            for record in dataset:
                yield _sample(record)
        finally:
            del dataset
            gc.collect()
            clean_stale_shared_memory()


def iterate_litdata(remote, local_cache, storage_options, shuffle_seed, batch_size):
    """One shuffled epoch of the LitData dataset at ``remote`` as ``(image uint8 [H, W], target int32)``.

    ``local_cache`` must be a fresh (absent or empty) folder. Single process (no DataLoader workers).
    """
    import litdata
    options = {"endpoint_url": storage_options["endpoint_url"], "aws_access_key_id": storage_options["key"],
               "aws_secret_access_key": storage_options["secret"],
               "region_name": storage_options.get("region", "us-east-1")}
    os.makedirs(local_cache, exist_ok=True)
    with _litdata_allow_http(storage_options["endpoint_url"].startswith("http://")):
        dataset = litdata.StreamingDataset(remote, cache_dir=local_cache, shuffle=True, seed=shuffle_seed,
                                           storage_options=options)
        dataset.set_batch_size(batch_size)
        for record in dataset:
            yield _sample(record)


@contextlib.contextmanager
def _litdata_allow_http(allow):
    """Let LitData's obstore chunk downloads use a plain-http endpoint for the block.

    LitData builds its obstore ``S3Store`` with its own ``client_options``
    (``litdata.streaming.downloader._OBSTORE_CLIENT_OPTIONS``, read when the store is built), which
    has no ``allow_http`` and replaces what obstore would take from ``AWS_ALLOW_HTTP``; without it
    every chunk GET from ``http://`` fails ("builder error: BadScheme"). Only the plain-http test
    server needs this; an https endpoint is left as LitData has it.
    """
    if not allow:
        yield
        return
    from litdata.streaming import downloader
    old = downloader._OBSTORE_CLIENT_OPTIONS
    downloader._OBSTORE_CLIENT_OPTIONS = {**old, "allow_http": True}
    try:
        yield
    finally:
        downloader._OBSTORE_CLIENT_OPTIONS = old


# ------------------------------------------------------------------------------------------ self-check

@contextlib.contextmanager
def moto_server():
    """A moto S3 server on a free local port for the block (the tests' own, ``spec_tests/remote_packs.py``);
    yields its ``storage_options``."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spec_tests"))
    from remote_packs import moto
    with moto() as endpoint:
        yield {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}


def random_lines(count, seed=0):
    """``count`` random ``(image uint8 [32, W], target int32 [n])`` samples, W in 40..400, n in 1..40."""
    rng = np.random.default_rng(seed)
    return [(rng.integers(0, 256, (32, int(rng.integers(40, 401))), dtype=np.uint8),
             rng.integers(0, 100, int(rng.integers(1, 41)), dtype=np.int32)) for _ in range(count)]


def _key(image, target):
    assert image.dtype == np.uint8 and image.ndim == 2 and target.dtype == np.int32, (image.dtype, target.dtype)
    return image.tobytes(), image.shape, target.tobytes()


def main():
    samples = random_lines(500)
    want = Counter(_key(*s) for s in samples)
    peers = [("streaming", write_streaming, iterate_streaming), ("litdata", write_litdata, iterate_litdata)]
    failed = False
    with tempfile.TemporaryDirectory(prefix="remote_peers_") as tmp, moto_server() as options:
        for name, write, iterate in peers:
            out = write(samples, os.path.join(tmp, f"{name}-out"))
            url = upload(out, f"s3://peers/{name}", options)
            cache = os.path.join(tmp, f"{name}-cache")
            shutil.rmtree(cache, ignore_errors=True)
            got = Counter(_key(*s) for s in iterate(url, cache, options, shuffle_seed=7, batch_size=16))
            count = sum(got.values())
            if got == want:
                print(f"{name}: {count} samples, all equal")
            else:
                failed = True
                print(f"{name}: {count} samples, {sum((want - got).values())} missing, "
                      f"{sum((got - want).values())} unexpected")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
