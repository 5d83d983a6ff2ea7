"""Remote packs (issue 25): one set of line images read locally, from an S3 server on
127.0.0.1, and from the same server about 20 ms away; beside MosaicML Streaming and LitData.

    python benchmarks/bench_remote.py [--lines 20000] [--repeats 3] [--delay-ms 20] [--dir DIR]

Writes ``--lines`` random gray line images (height 32, widths 40-400, random bytes that no
format can compress) as PNGs, packs them with ``om.pack_sharded`` (``--shards 8``; on a
Dask local cluster of 2 processes with ``--engine dask``), and writes the
same images as MosaicML Streaming MDS shards and LitData chunks (``remote_peers.py``, when
those packages are installed). A moto S3 server (``python -m moto.server``) holds all
three; two ``delay_proxy.py`` processes stand before it, one adding nothing, one adding
``--delay-ms`` to every request, and count the bytes they carry to the readers.

Each configuration reads one epoch, shuffled, in batches of 32, into a fresh cache folder
(a cold start: the manifests and index arrays are part of what is timed), the consumer
holding its two previous batches as a training loop does; the peers' samples are batched
with a numpy collate doing the same work as the loader (§6's conversion into a padded
float32 batch). Configurations run round-robin, ``--repeats`` rounds; the table gives the
median images/s with the min-max, the bytes the proxy carried to the reader per epoch, its
requests, and the rate against the local memory map.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import os
import shutil
import socket
import sys
import tempfile
import time

import numpy as np

import onemodel_cy as om

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "spec_tests"))
from _timing import round_robin, summary  # noqa: E402
from remote_packs import free_port, moto, nginx, running  # noqa: E402  (the tests' servers)

BATCH, HEIGHT, MEAN, STD, MULTIPLE = 32, 32, 0.5, 0.25, 8
HOLD = 2
HERE = os.path.dirname(os.path.abspath(__file__))
KEYS = {"key": "testing", "secret": "testing"}


def lines(n, widths, seed=0):
    """``n`` (uint8 [32, W], int32 target) pairs, W in ``widths`` ([low, high))."""
    rng = np.random.default_rng(seed)
    for _ in range(n):
        yield (rng.integers(0, 256, (HEIGHT, int(rng.integers(*widths))), dtype=np.uint8),
               rng.integers(1, 60, int(rng.integers(1, 9))).astype(np.int32))


def write_pack(samples, folder, shards, engine):
    """The lines as PNG files and a labels file, packed into ``folder/pack`` by
    ``pack_sharded`` (on a Dask LocalCluster of 2 processes with ``engine="dask"``)."""
    from PIL import Image
    png = os.path.join(folder, "png")
    os.makedirs(png)
    alphabet = [chr(ord("!") + k) for k in range(60)]
    count = 0
    with open(os.path.join(folder, "labels.txt"), "w") as f:
        for i, (image, target) in enumerate(samples):
            Image.fromarray(image, "L").save(os.path.join(png, f"{i:07d}.png"), compress_level=1)
            f.write(f"{i:07d}.png\t{''.join(alphabet[t - 1] for t in target)}\n")
            count += 1
    began = time.perf_counter()
    om.pack_sharded(png, os.path.join(folder, "pack"), labels=os.path.join(folder, "labels.txt"), shards=shards,
                    height=HEIGHT, progress=False, engine=engine, engine_workers=2 if engine == "dask" else None)
    seconds = time.perf_counter() - began
    print(f"packed {count} lines into {shards} shards (engine {engine}) in {seconds:.1f} s: {count / seconds:,.0f} "
          f"lines/s", file=sys.stderr)
    shutil.rmtree(png)


class Proxy:
    """delay_proxy.py before a server on ``target``, started in ``stack`` (an ExitStack): its
    endpoint, and the bytes it carried so far."""

    def __init__(self, stack, target, delay_ms):
        self.port, self.control = free_port(), free_port()
        stack.enter_context(running([sys.executable, os.path.join(HERE, "delay_proxy.py"), str(self.port),
                                     str(target), str(delay_ms), str(self.control)], self.control, "delay_proxy"))
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def totals(self):
        with socket.create_connection(("127.0.0.1", self.control)) as s:
            down, requests = s.makefile().readline().split()
        return int(down), int(requests)


def collate(batch):
    """What the loader does to a batch of 8-bit lines, in numpy: §6 into a padded float32 batch."""
    width = max(image.shape[1] for image, _ in batch)
    width = -(-width // MULTIPLE) * MULTIPLE
    out = np.zeros((len(batch), 1, HEIGHT, width), dtype=np.float32)
    scale, bias = np.float32(1 / (255 * STD)), np.float32(MEAN / STD)
    for k, (image, _) in enumerate(batch):
        out[k, 0, :, :image.shape[1]] = image.astype(np.float32) * scale - bias
    return out


def consume(batches):
    """Count the images of ``batches``, holding the last ``HOLD`` as a training loop does."""
    held, count = collections.deque(maxlen=HOLD), 0
    for batch in batches:
        held.append(batch)
        count += len(batch) if isinstance(batch, np.ndarray) else len(batch.indices)
    return count


def batched(samples):
    batch = []
    for sample in samples:
        batch.append(sample)
        if len(batch) == BATCH:
            yield collate(batch)
            batch = []
    if batch:
        yield collate(batch)


class Run:
    """One configuration: ``read(cache folder)`` reads one epoch and returns the images read."""

    def __init__(self, name, read, proxy=None):
        self.name, self.read, self.proxy = name, read, proxy
        self.rates, self.bytes, self.requests = [], [], []

    def __call__(self, scratch):
        cache = tempfile.mkdtemp(dir=scratch)
        before = self.proxy.totals() if self.proxy else (0, 0)
        began = time.perf_counter()
        count = self.read(cache)
        seconds = time.perf_counter() - began
        after = self.proxy.totals() if self.proxy else (0, 0)
        self.bytes.append(after[0] - before[0])
        self.requests.append(after[1] - before[1])
        shutil.rmtree(cache, ignore_errors=True)
        self.rates.append(count / seconds)
        return count / seconds


def ours(url_or_path, workers=0, options=None, fetch=None):
    def read(cache):
        if "://" not in url_or_path:
            dataset = om.PackedImageDataset(url_or_path, MEAN, STD)
        else:
            dataset = om.PackedImageDataset(url_or_path, MEAN, STD, cache=cache, storage_options=options,
                                            fetch=fetch)
        loader = om.DataLoader(dataset, om.ShuffledSampler(len(dataset), BATCH, seed=1),
                               om.ImageBatchCollator(width_multiple=MULTIPLE), seed=2, workers=workers,
                               worker_mode="process" if workers else "thread")
        with loader.iter(0, loader.steps_per_epoch) as batches:
            count = consume(batches)
        loader.close()
        return count
    return read


def ceiling(count, options, pack_folder):
    """The store's own limit: every pixels.npy of the pack read through s3fs in ranges of
    16 MiB, 4 at once (as fetch='background' asks), into nothing; no loader. Returns the
    lines an epoch holds, so that its rate reads as images/s."""
    import asyncio

    import s3fs
    from fsspec.asyn import sync
    names = sorted(os.path.relpath(os.path.join(root, f), pack_folder)
                   for root, _, files in os.walk(pack_folder) for f in files if f == "pixels.npy")

    def read(cache):
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        ranges = [(name, start, min(start + (16 << 20), os.path.getsize(os.path.join(pack_folder, name))))
                  for name in names for start in range(0, os.path.getsize(os.path.join(pack_folder, name)), 16 << 20)]
        gate = asyncio.Semaphore(4)

        async def one(name, start, end):
            async with gate:
                await fs._cat_file(f"bench/pack/{name}", start=start, end=end)

        async def every():
            await asyncio.gather(*(one(*r) for r in ranges))
        sync(fs.loop, every)
        return count
    return read


def peer(iterate, remote, endpoint):
    def read(cache):
        return consume(batched(iterate(remote, cache, {"endpoint_url": endpoint, **KEYS}, 1, BATCH)))
    return read


def digests(dataset):
    """SHA-256 of each batch of one shuffled epoch (its images and indices), 2 process workers."""
    import hashlib
    loader = om.DataLoader(dataset, om.ShuffledSampler(len(dataset), BATCH, seed=1),
                           om.ImageBatchCollator(width_multiple=MULTIPLE), seed=2, workers=2, worker_mode="process")
    with loader.iter(0, loader.steps_per_epoch) as batches:
        out = [hashlib.sha256(np.asarray(b.images).tobytes() + np.asarray(b.indices).tobytes()).hexdigest()
               for b in batches]
    loader.close()
    return out


def check_equal(local_path, options, cache):
    """The epoch through S3 (fetch='background', 2 process workers) against the local pack,
    batch for batch; then, once every sample is present, each fetched pixels.npy against
    the SHA-256 its shard's manifest records."""
    from onemodel_cy.data.packs.format import file_sha256, read_manifest
    remote = om.PackedImageDataset("s3://bench/pack", MEAN, STD, cache=cache, storage_options=options,
                                   fetch="background")
    began = time.perf_counter()
    far, near = digests(remote), digests(om.PackedImageDataset(local_path, MEAN, STD))
    print(f"equal: {len(far)} batches through S3, each equal to the local pack's: {far == near} "
          f"({time.perf_counter() - began:.0f} s)", file=sys.stderr)
    while not (remote.remote.present == 1).all():
        time.sleep(0.1)
    same = all(file_sha256(os.path.join(shard, "pixels.npy")) == read_manifest(shard)["arrays"]["pixels"]["sha256"]
               for shard in remote.shards)
    print(f"equal: the {len(remote.shards)} fetched pixel files hash to their manifests' SHA-256: {same}",
          file=sys.stderr)


def table(runs, local_rate):
    out = ["| configuration | images/s median | min-max | x local mmap | MB fetched per epoch | requests |",
           "| --- | ---: | ---: | ---: | ---: | ---: |"]
    for run in runs:
        med, lo, hi = summary(run.rates)
        fetched = f"{np.median(run.bytes) / 1e6:,.1f}" if run.proxy else ""
        requests = f"{int(np.median(run.requests)):,}" if run.proxy else ""
        out.append(f"| {run.name} | {med:,.0f} | {lo:,.0f}-{hi:,.0f} | {med / local_rate:.2f} | {fetched} | "
                   f"{requests} |")
    return "\n".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--delay-ms", type=float, default=20.0)
    parser.add_argument("--workers", type=int, default=2, help="process workers of an HTTP row")
    parser.add_argument("--dir", default=None, help="where to write (default: a temporary folder)")
    parser.add_argument("--no-peers", action="store_true", help="leave out Streaming and LitData")
    parser.add_argument("--http", action="store_true", help="also read the pack over HTTP from nginx")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--engine", default="local", choices=["local", "dask"], help="what packs the shards")
    parser.add_argument("--widths", type=int, nargs=2, default=[40, 401], help="line widths, [low, high)")
    parser.add_argument("--only-background", action="store_true",
                        help="of this package's remote rows, only fetch='background' over S3 with the delay")
    parser.add_argument("--equal", action="store_true",
                        help="afterwards, check that an epoch read through S3 with the delay is the local pack's, "
                             "batch for batch, and that the fetched pixel files hash to the manifests'")
    args = parser.parse_args(argv)
    import s3fs
    with tempfile.TemporaryDirectory(dir=args.dir) as folder:
        write_pack(lines(args.lines, args.widths), folder, args.shards, args.engine)
        peers = []
        if not args.no_peers:
            try:
                import remote_peers
                samples = list(lines(args.lines, args.widths))
                remote_peers.write_streaming(samples, os.path.join(folder, "mds"))
                remote_peers.write_litdata(samples, os.path.join(folder, "litdata"))
                peers = [("MosaicML Streaming", remote_peers.iterate_streaming, "mds"),
                         ("LitData", remote_peers.iterate_litdata, "litdata")]
                del samples
            except ImportError as error:
                print(f"peers not installed ({error}): leaving them out", file=sys.stderr)
        with contextlib.ExitStack() as stack:
            endpoint = stack.enter_context(moto())
            port = int(endpoint.rsplit(":", 1)[1])
            fs = s3fs.S3FileSystem(endpoint_url=endpoint, skip_instance_cache=True, **KEYS)
            fs.mkdir("bench")
            for name in ["pack"] + [prefix for _, _, prefix in peers]:
                fs.put(os.path.join(folder, name), f"bench/{name}", recursive=True)
            near, far = Proxy(stack, port, 0), Proxy(stack, port, args.delay_ms)
            delay = f"+{args.delay_ms:g} ms"
            runs = [Run("onemodel_cy, local pack (mmap)", ours(os.path.join(folder, "pack")))]
            for proxy, how in ((near, "S3 on 127.0.0.1"), (far, f"S3 {delay}")):
                # botocore keeps 10 connections by default: as many requests at once, at most.
                options = {"endpoint_url": proxy.endpoint, **KEYS, "config_kwargs": {"max_pool_connections": 64}}
                runs.append(Run(f"ceiling: the pack's pixel files through s3fs, {how}, 16 MiB ranges 4 at once",
                                ceiling(args.lines, options, os.path.join(folder, "pack")), proxy))
                fetches = ("exact", "background") if proxy is far else ("background",)
                if args.only_background:
                    fetches = ("background",) if proxy is far else ()
                for fetch in fetches:
                    runs.append(Run(f"onemodel_cy, {how}, fetch={fetch!r}", ours("s3://bench/pack", 0, options, fetch),
                                    proxy))
                for name, iterate, prefix in peers:
                    runs.append(Run(f"{name}, {how}", peer(iterate, f"s3://bench/{prefix}", proxy.endpoint), proxy))
            if args.http:
                web_port = stack.enter_context(nginx(folder, os.path.join(folder, "nginx")))
                proxy = Proxy(stack, web_port, args.delay_ms)
                for workers, fetch in ((0, "exact"), (args.workers, "exact"), (0, "background")):
                    runs.append(Run(f"onemodel_cy, HTTP (nginx) {delay}, fetch={fetch!r}"
                                    + (f", {workers} process workers" if workers else ""),
                                    ours(f"{proxy.endpoint}/pack", workers, None, fetch), proxy))
            scratch = os.path.join(folder, "caches")
            os.makedirs(scratch)
            round_robin({run.name: (lambda run=run: run(scratch)) for run in runs}, args.repeats)
            if args.equal:
                options = {"endpoint_url": far.endpoint, **KEYS, "config_kwargs": {"max_pool_connections": 64}}
                check_equal(os.path.join(folder, "pack"), options, os.path.join(folder, "kept"))
    print(f"\n{args.lines} lines (height {HEIGHT}, widths {args.widths[0]}-{args.widths[1] - 1}, gray), "
          f"batch {BATCH}, one shuffled epoch per repetition from a cold cache, {args.repeats} interleaved "
          f"repetitions, {os.cpu_count()} CPUs (shared)\n")
    print(table(runs, summary(runs[0].rates)[0]))


if __name__ == "__main__":
    main()
