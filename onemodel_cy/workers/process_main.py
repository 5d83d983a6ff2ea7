"""The body of one worker process (``worker_mode="process"``, §1).

A worker receives the pipeline once (a pickled ``collate.pipeline.Pipeline``), gives it a
collator that rents its batches from shared memory, and then takes steps from the
engine's task board (``taskboard``: the posted step with the lowest global step,
whichever worker is free first) until the board says stop. Its socket carries the rest:
the board, the slots' segments, stop; its replies (``process_wire.py`` has every message).
When its consumer is gone, killed or not, the socket ends and the worker exits, leaving
nothing behind (its segments have no names).

A step is built with the pipeline's ``build`` (the very function of thread and 0-worker
streams, so the bytes are the same) straight into its slot's segment and answered
``DONE``; when the batch does not fit the segment it is built in private memory, copied
once into a new, larger segment (at least ``hint`` bytes, the largest batch the stream
has seen) sent with ``GROWN``. An exception while building is answered ``ERROR``.
"""
from __future__ import annotations

import os
import pickle
import select
import signal
import socket

from onemodel_cy.workers.process_wire import (BOARD, DONE, ERROR, FATAL, GROWN, MAP, READY, STOP, batch_dims,
                                              error_payload, receive, send)


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
        """Handle one message (a ``MAP``); False when the worker is to exit (``STOP``, or the
        socket ended)."""
        try:
            message, fds = receive(self.conn, self.sock)
        except (EOFError, OSError):
            return False
        if message is STOP or message[0] != MAP:
            return False
        _, slot, version, size = message
        self.segments[slot] = (version, _mapped(fds[0], size))
        return True

    def segment(self, slot, version):
        """The segment of ``slot`` at ``version`` (its ``MAP`` was sent before the step was
        posted: read until it is here); None for a slot without memory yet, False to exit."""
        while version:
            known = self.segments.get(slot)
            if known is not None and known[0] == version:
                return known[1]
            if not self.read():
                return False
        return None


def _open_board(channel):
    """The board and doorbell the consumer sends first (``BOARD``): (board, k, doorbell)."""
    from onemodel_cy.workers.taskboard import TaskBoard
    message, fds = receive(channel.conn, channel.sock)
    if message is STOP or message[0] != BOARD:
        raise EOFError("the consumer stopped before it sent the board")
    _, k, size = message
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
        conn.send((FATAL, error_payload(exc)))
        return
    workspace = pipeline.workspace()
    poller = select.poll()
    for fd in (doorbell, conn.fileno()):
        poller.register(fd, select.POLLIN)
    conn.send((READY, os.getpid()))
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
                conn.send((ERROR, task, error_payload(exc)))
                continue
            if pool.last_shared:
                reply, grown = (DONE, task, batch_dims(batch)), None
            else:       # grow the slot: a new, larger segment, filled with this batch
                grown = Segment.create(max(batch.nbytes, hint))
                copy_block(batch, grown)
                channel.segments[slot] = (version + 1, grown)
                reply = (GROWN, task, batch_dims(batch), grown.size)
            del batch
            send(conn, channel.sock, reply, [grown.fd] if grown is not None else ())
            if grown is not None:
                grown.close_fd()
    except (EOFError, OSError):
        return      # the consumer is gone
