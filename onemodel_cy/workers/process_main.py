"""The body of one worker process (``worker_mode="process"``, §1).

A worker receives the pipeline once (a pickled ``_pipeline.Pipeline``), gives it a
collator that rents its batches from shared memory, and then takes steps from the
engine's task board (``taskboard``: the posted step with the lowest global step,
whichever worker is free first) until the board says stop.

Its socket carries the rest, in order:

* first ``("board", k, size)`` with two descriptors: the board's shared segment and the
  read end of the doorbell; ``k`` is this worker's number on the board;
* ``("map", slot, version, size)`` followed by a descriptor: the shared segment of
  ``slot`` is now that one (sent before any step that uses it is posted);
* ``None`` or the end of the socket: exit. The end of the socket is also how a worker
  learns that its consumer is gone, killed or not: it then exits, leaving nothing behind
  (its segments have no names).

A step is built with the pipeline's ``build`` (the very function of thread and 0-worker
streams, so the bytes are the same) straight into its slot's segment and
answered ``("done", task, dims)``; when the batch does not fit the segment it is built in
private memory, copied once into a new, larger segment (at least ``hint`` bytes, the
largest batch the stream has seen) whose descriptor follows ``("grown", task, dims,
size)``. An exception while building is answered ``("error", task, payload)``: the pickled
exception when it pickles, and always its type, message and traceback text.
"""
from __future__ import annotations

import os
import pickle
import select
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


# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3


def _keep_freed_memory():
    """Let glibc keep up to 64 MiB of freed memory in this process instead of giving it
    back to the kernel after every batch.

    A fresh process starts at glibc's lowest thresholds (128 KiB): every batch's decoded
    images and numpy temporaries are then mapped, freed, unmapped and faulted in again
    (docs/workers.md, "Worker processes", has the page faults measured with and without).
    Allocations above 16 MiB are still mapped and returned at once. No effect where malloc is not
    glibc's (the call is missing) or is replaced (a sanitizer's)."""
    import ctypes
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return
    mallopt(_M_TRIM_THRESHOLD, 64 << 20)
    mallopt(_M_MMAP_THRESHOLD, 16 << 20)


def send(conn, sock, message, fds=()):
    """``message`` on ``conn`` (multiprocessing's frame), then, when there are descriptors,
    the one byte ``b"F"`` carrying them (``SCM_RIGHTS``): both sides' one way of sending."""
    conn.send(message)
    if fds:
        socket.send_fds(sock, [b"F"], list(fds))


def _mapped(fd, size):
    """The segment a received descriptor names, mapped (the descriptor itself is closed)."""
    from onemodel_cy.workers.shmring import Segment
    segment = Segment(fd, size)
    segment.close_fd()
    return segment


class _Channel:
    """The worker's end of its socket: the consumer's messages, with their descriptors."""

    def __init__(self, conn):
        self.conn = conn
        self.sock = socket.fromfd(conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)
        self.segments = {}      # slot -> (version, Segment)

    def read(self):
        """Handle one message; False when the worker is to exit (None, or the socket ended)."""
        try:
            message = self.conn.recv()
            if message is None:
                return False
            _, slot, version, size = message        # "map"
            _, fds, _, _ = socket.recv_fds(self.sock, 1, 1)
        except (EOFError, OSError):
            return False
        self.segments[slot] = (version, _mapped(fds[0], size))
        return True

    def segment(self, slot, version):
        """The segment of ``slot`` at ``version`` (its "map" was sent before the step was
        posted: read until it is here); None for a slot without memory yet, False to exit."""
        while version:
            known = self.segments.get(slot)
            if known is not None and known[0] == version:
                return known[1]
            if not self.read():
                return False
        return None


def _open_board(channel):
    """The board and doorbell the consumer sends first: (board, k, doorbell)."""
    from onemodel_cy.workers.taskboard import TaskBoard
    _, k, size = channel.conn.recv()
    _, fds, _, _ = socket.recv_fds(channel.sock, 1, 2)
    board_fd, doorbell = fds
    return TaskBoard(_mapped(board_fd, size)), k, doorbell


def _next_task(board, k, channel, doorbell, poller):
    """The next step this worker takes from the board, or None when it is to exit."""
    while not board.stopping:
        claimed = board.claim(k)
        if claimed is not None:
            return claimed
        board.sleeping(+1)
        try:
            claimed = board.claim(k)        # a post made before we counted ourselves in
            if claimed is not None:
                return claimed
            if board.stopping:
                return None
            for fd, _ in poller.poll():
                if fd == doorbell:
                    try:
                        if not os.read(doorbell, 1):    # one byte per post: the other sleepers keep theirs
                            return None                 # its write end is closed: the consumer is gone
                    except BlockingIOError:
                        pass                            # another worker took it
                elif not channel.read():
                    return None
        finally:
            board.sleeping(-1)
    return None


def main(conn, payload):
    """Run one worker until its consumer says stop or goes away."""
    # Ctrl-C reaches the whole process group: the consumer decides, and closes us.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _keep_freed_memory()
    from onemodel_cy.workers.shmring import Segment, ShmPool, copy_block
    channel = _Channel(conn)
    try:
        board, k, doorbell = _open_board(channel)
    except (EOFError, OSError):
        return      # the consumer is gone
    pool = ShmPool()
    try:
        pipeline = pickle.loads(payload).with_pool(pool)
    except BaseException as exc:
        conn.send(("fatal", _error_payload(exc)))
        return
    workspace = pipeline.workspace()
    poller = select.poll()
    for fd in (doorbell, conn.fileno()):
        poller.register(fd, select.POLLIN)
    conn.send(("ready", os.getpid()))
    try:
        while (claimed := _next_task(board, k, channel, doorbell, poller)) is not None:
            _, task, g, slot, version, hint = claimed
            segment = channel.segment(slot, version)
            if segment is False:
                return
            pool.aim(segment)
            try:
                batch = pipeline.build(g, workspace)
            except BaseException as exc:
                conn.send(("error", task, _error_payload(exc)))
                continue
            if pool.last_shared:
                reply, grown = ("done", task, _dims(batch)), None
            else:       # grow the slot: a new, larger segment, filled with this batch
                grown = Segment.create(max(batch.nbytes, hint))
                copy_block(batch, grown)
                channel.segments[slot] = (version + 1, grown)
                reply = ("grown", task, _dims(batch), grown.size)
            del batch
            send(conn, channel.sock, reply, [grown.fd] if grown is not None else ())
            if grown is not None:
                grown.close_fd()
    except (EOFError, OSError):
        return      # the consumer is gone
