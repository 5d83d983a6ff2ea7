"""The body of one worker process (``worker_mode="process"``, §1).

A worker receives the pipeline once (pickled: dataset, sampler, collator settings,
transform, seed, rank), rebuilds a 0-worker :class:`DataLoader` of it, and then serves
the consumer's messages in order over its socket:

* ``("map", slot, version, size)`` followed by a file descriptor: the shared segment of
  ``slot`` is now that one;
* ``("build", task, g, slot, version, hint)``: build global step ``g`` with the loader's
  own ``_build`` (the very function of thread and 0-worker streams, so the bytes are the
  same) straight into ``slot``'s segment, and answer ``("done", task, dims)``; when the
  batch does not fit the segment it is built in private memory, copied once into a new,
  larger segment (at least ``hint`` bytes, the largest batch the stream has seen) whose
  descriptor follows ``("grown", task, dims, size)``;
* ``None`` or the end of the socket: exit. The end of the socket is also how a worker
  learns that its consumer is gone, killed or not: it then exits at once, leaving
  nothing behind (its segments have no names).

An exception while building is answered with ``("error", task, payload)``: the pickled
exception when it pickles, and always its type, message and traceback text.
"""
from __future__ import annotations

import os
import pickle
import signal
import socket
import traceback


def _dims(batch):
    n, channels, height, padded = batch.images.shape
    return n, channels, height, padded, batch.targets.shape[0]


def _error_payload(exc):
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)      # an exception whose pickle does not load back is sent as text
    except Exception:
        blob = None
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    return blob, kind, str(exc), text


def _rebuild_loader(payload, pool):
    """The worker's own 0-worker DataLoader of the pipeline, batches rented from ``pool``."""
    from onemodel_cy._collate import ImageBatchCollator
    from onemodel_cy.loader import DataLoader
    parts = pickle.loads(payload)
    c = parts["collator"]
    collator = ImageBatchCollator(c.width_multiple, c.pad_value, c.augmentation, pool=pool)
    return DataLoader(parts["dataset"], parts["sampler"], collator, seed=parts["seed"],
                      transform=parts["transform"], rank=parts["rank"], world_size=parts["world_size"])


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _keep_freed_memory():
    """Let glibc keep up to 64 MiB of freed memory in this process instead of giving it
    back to the kernel after every batch.

    A fresh process starts at glibc's lowest thresholds (128 KiB): every batch's decoded
    images and numpy temporaries are then mapped, freed, unmapped and faulted in again.
    Measured on the Python-heavy benchmark set (benchmarks/bench_workers.py, "small"): a
    worker took 184,513 page faults over 1,050 batches, 41,035 with these thresholds
    (0 workers in the consumer: 26,548), and its CPU per batch fell by 4-15 % in three paired runs. Allocations
    above 16 MiB are still mapped and returned at once. No effect where malloc is not
    glibc's (the call is missing) or is replaced (a sanitizer's)."""
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)
    mallopt(_M_MMAP_THRESHOLD, 16 << 20)


def main(conn, payload):
    """Run one worker until its consumer says stop or goes away."""
    # Ctrl-C reaches the whole process group: the consumer decides, and closes us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _keep_freed_memory()
    from onemodel_cy._collate import Workspace
    from onemodel_cy._shmring import Segment, ShmPool, copy_block
    sock = socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)
    pool = ShmPool()
    try:
        loader = _rebuild_loader(payload, pool)
    except BaseException as exc:
        conn.send(("fatal", _error_payload(exc)))
        return
    workspace = Workspace(loader.sampler.batch_size, None)
    segments = {}       # slot -> (version, Segment)
    conn.send(("ready", os.getpid()))
    try:
        while True:
            message = conn.recv()
            if message is None:
                return
            if message[0] == "map":
                _, slot, version, size = message
                _, fds, _, _ = socket.recv_fds(sock, 1, 1)
                segment = Segment(fds[0], size)
                segment.close_fd()
                segments[slot] = (version, segment)
                continue
            _, task, g, slot, version, hint = message
            known = segments.get(slot)
            pool.aim(known[1] if known is not None and known[0] == version else None)
            try:
                batch = loader._build(g, workspace)
            except BaseException as exc:
                conn.send(("error", task, _error_payload(exc)))
                continue
            if pool.last_shared:
                reply, fd = ("done", task, _dims(batch)), None
            else:       # grow the slot: a new, larger segment, filled with this batch
                segment = Segment.create(max(batch.nbytes, hint))
                copy_block(batch, segment)
                segments[slot] = (version + 1, segment)
                reply, fd = ("grown", task, _dims(batch), segment.size), segment
            del batch
            conn.send(reply)
            if fd is not None:
                socket.send_fds(sock, [b"F"], [fd.fd])
                fd.close_fd()
    except (EOFError, OSError):
        return      # the consumer is gone
