"""Packing throughput: ``pack`` against ``pack_sharded`` on a Dask LocalCluster of 1 and 2 workers.

    python benchmarks/bench_pack_shards.py [--lines 20000] [--shards 8] [--repeats 3]

Renders ``--lines`` PNG text lines (height 32, as ``bench_realdata.py`` renders them: what
``onemodel-cy pack`` is fed, a folder and its labels file), then packs them, interleaved
(round-robin repetitions, medians), by:

* ``pack`` with one decoding thread, and with two (the plain writer's own parallelism);
* ``pack_sharded(engine=client, shards=--shards)`` on a ``LocalCluster`` of 1 and of 2
  worker processes (one thread each, one decoding thread per task), each cluster started
  once before the timed runs (its start is printed apart: a run of ``--engine dask``
  pays it once).

Prints lines per second of each, and checks that every sharded pack serves the plain
pack's samples (the bytes of every sample at every index). Needs the ``distributed`` extra.
"""
from __future__ import annotations

import argparse
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time

import onemodel_cy as om

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_realdata import render_lines  # noqa: E402


def same_samples(a_path, b_path):
    a, b = om.PackedImageDataset(a_path, 0.5, 0.25), om.PackedImageDataset(b_path, 0.5, 0.25)
    return len(a) == len(b) and all(
        a.get_sample(i).image.tobytes() == b.get_sample(i).image.tobytes()
        and a.get_sample(i).target.tolist() == b.get_sample(i).target.tolist() for i in range(len(a)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=20000)
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from dask.distributed import Client, LocalCluster
    logging.getLogger("distributed").setLevel(logging.ERROR)     # the clusters' closing chatter

    root = tempfile.mkdtemp(prefix="bench-shards-")
    try:
        images = os.path.join(root, "lines")
        started = time.perf_counter()
        render_lines(images, args.lines)
        print(f"rendered {args.lines} PNG lines in {time.perf_counter() - started:.1f} s", flush=True)
        labels = os.path.join(images, "labels.txt")
        clusters = {}
        for n in (1, 2):
            started = time.perf_counter()
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0",
                                   silence_logs=logging.ERROR)
            clusters[n] = (cluster, Client(cluster))
            print(f"LocalCluster of {n} worker process{'es' * (n > 1)} started in "
                  f"{time.perf_counter() - started:.1f} s", flush=True)
        kw = dict(labels=labels, height=32, progress=False)
        routes = {
            "pack, 1 decoding thread": lambda out: om.pack(images, out, workers=1, **kw),
            "pack, 2 decoding threads": lambda out: om.pack(images, out, workers=2, **kw),
            "pack_sharded on Dask, 1 worker": lambda out: om.pack_sharded(
                images, out, shards=args.shards, engine=clusters[1][1], **kw),
            "pack_sharded on Dask, 2 workers": lambda out: om.pack_sharded(
                images, out, shards=args.shards, engine=clusters[2][1], **kw),
        }
        seconds = {name: [] for name in routes}
        reference = None
        for repeat in range(args.repeats):
            for name, route in routes.items():
                out = os.path.join(root, f"out-{len(seconds[name])}-{abs(hash(name))}")
                started = time.perf_counter()
                report = route(out)
                seconds[name].append(time.perf_counter() - started)
                if reference is None:
                    reference = out
                elif not same_samples(reference, out):
                    print(f"MISMATCH: {name} serves other samples than the plain pack")
                    return 1
                if out != reference:
                    shutil.rmtree(out)
                count = report.count
        print(f"\n{count} lines, {args.shards} shards, medians of {args.repeats} interleaved runs "
              f"(fsync on, as a user's run):")
        print("| route | lines/s | seconds (runs) |\n| --- | ---: | --- |")
        for name, runs in seconds.items():
            median = statistics.median(runs)
            print(f"| {name} | {count / median:,.0f} | {median:.2f} ({', '.join(f'{s:.2f}' for s in runs)}) |")
        print("every pack serves the plain pack's samples, byte for byte")
        for cluster, client in clusters.values():
            client.close()
            cluster.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
