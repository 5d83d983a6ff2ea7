"""§1 process workers: what travels between the consumer and a worker process, in one place.

Each worker has one socket, a ``multiprocessing`` duplex ``Pipe``. A message is a tuple
whose first item names its kind, or ``STOP`` (None). It travels in multiprocessing's frame
(a 4-byte big-endian length, then the pickle: ``Connection.send``), and the descriptors a
message carries follow it as the one byte ``FD_MARKER`` (``b"F"``) sent with
``SCM_RIGHTS`` (``send``). The steps themselves never travel here: the consumer posts them
on the task board (``taskboard.pyx``), in shared memory.

The consumer's messages (``processes.py`` sends them, a worker reads them with ``receive``):

* ``(BOARD, k, size)`` with 2 descriptors, first and once: the task board's segment of
  ``size`` bytes and the read end of the doorbell; ``k`` is the worker's number on it;
* ``(MAP, slot, version, size)`` with 1 descriptor: ``slot``'s shared segment is now this
  one, of ``size`` bytes, at ``version`` (sent before any step that uses it is posted);
* ``STOP``, or the end of the socket: exit. The end of the socket is also how a worker
  learns that its consumer is gone, killed or not.

A worker's replies (``process_main.py`` sends them, the consumer reads them with an
``Inbox``):

* ``(READY, pid)``: the pipeline is rebuilt, the worker takes steps;
* ``(FATAL, error)``: the pipeline could not be rebuilt; the worker exits;
* ``(DONE, task, dims)``: the task's step is built in its slot's segment;
* ``(GROWN, task, dims, size)`` with 1 descriptor: the step did not fit its slot, and is
  built in a new segment of ``size`` bytes, the slot's from now on (its version + 1);
* ``(ERROR, task, error)``: the build raised.

``dims`` is ``(n, channels, height, padded width, targets)``, what the consumer needs to
view the slot as an ``ImageBatch`` (``batch_dims``). ``error`` is ``(pickle or None,
type name, message, traceback text)`` (``error_payload``), raised on the consumer's side
as the worker's own exception when its pickle loads back (``raised``).
"""
from __future__ import annotations

import array
import os
import pickle
import socket
import struct
import traceback

from onemodel_cy.core.validate import note_exception

__all__ = ["BOARD", "MAP", "STOP", "READY", "FATAL", "DONE", "GROWN", "ERROR", "FD_MARKER",
           "send", "receive", "batch_dims", "error_payload", "raised", "Inbox"]

# The consumer's messages, and how many descriptors each carries.
BOARD, MAP, STOP = "board", "map", None
_DESCRIPTORS = {BOARD: 2, MAP: 1}
# A worker's replies.
READY, FATAL, DONE, GROWN, ERROR = "ready", "fatal", "done", "grown", "error"
FD_MARKER = b"F"        # the byte that carries a message's descriptors


def send(conn, sock, message, fds=()):
    """``message`` on ``conn`` (multiprocessing's frame), then, when there are descriptors,
    ``FD_MARKER`` carrying them: both sides' one way of sending."""
    conn.send(message)
    if fds:
        socket.send_fds(sock, [FD_MARKER], list(fds))


def receive(conn, sock):
    """(A worker.) The consumer's next message and the descriptors it carries (a list);
    EOFError or OSError once the socket ended."""
    message = conn.recv()
    count = 0 if message is STOP else _DESCRIPTORS.get(message[0], 0)
    if not count:
        return message, []
    _, fds, _, _ = socket.recv_fds(sock, 1, count)
    return message, fds


def batch_dims(batch):
    """A built batch's ``dims``: what the consumer needs to view its slot as the batch."""
    n, channels, height, padded = batch.images.shape
    return n, channels, height, padded, batch.targets.shape[0]


def error_payload(exc):
    """(A worker.) What travels of ``exc``: its pickle when that loads back, else None; and
    always its type's name, its message and its traceback text."""
    try:
        blob = pickle.dumps(exc)
        pickle.loads(blob)      # an exception whose pickle does not load back is sent as text
    except Exception:
        blob = None
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    kind = f"{type(exc).__module__}.{type(exc).__qualname__}"
    return blob, kind, str(exc), text


def raised(payload, where):
    """(The consumer.) The exception an ``error_payload`` describes: the worker's own, else a
    ``RuntimeError`` naming its type, with ``where`` and the worker's traceback as a note."""
    blob, kind, message, text = payload
    error = None
    if blob is not None:
        try:
            error = pickle.loads(blob)
        except Exception:
            error = None
    if not isinstance(error, BaseException):
        error = RuntimeError(f"{kind}: {message}")
    note_exception(error, f"{where}; its traceback there:\n{text.rstrip()}")
    return error


class Inbox:
    """(The consumer.) A worker's replies, read in bulk: one ``recvmsg`` takes every byte
    waiting (several replies, and the descriptor that follows a ``GROWN`` one), where
    ``Connection.recv`` makes two reads per reply and ``socket.recv_fds`` one more. System
    calls are the consumer's main cost per batch on a virtual machine (docs/performance.md,
    "Measurements behind the code")."""

    def __init__(self, sock):
        self.sock = sock
        self.fd_space = socket.CMSG_SPACE(4 * array.array("i").itemsize)   # room for the descriptors
        self.buffer = bytearray()
        self.fds = []                   # descriptors received, in order, not yet taken
        # Where each read lands: reused, so that a read allocates no 64 KiB of its own.
        self.landing = bytearray(1 << 16)
        self.landed = memoryview(self.landing)

    def fill(self):
        """Read what is waiting (blocks if nothing is); EOFError once the worker's end is closed."""
        size, ancillary, _, _ = self.sock.recvmsg_into([self.landing], self.fd_space)
        for level, kind, cdata in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
                self.fds.extend(fds)
        if not size:
            raise EOFError("the worker's socket ended")
        self.buffer += self.landed[:size]

    def next(self):
        """The next complete reply (with its descriptor for ``GROWN``), or None."""
        if len(self.buffer) < 4:
            return None
        size, = struct.unpack("!i", self.buffer[:4])
        if size < 0:                    # multiprocessing's frame for payloads of 2 GiB and more: never sent
            raise OSError(f"unexpected frame of a worker: length {size}")
        if len(self.buffer) < 4 + size:
            return None
        message = pickle.loads(self.buffer[4:4 + size])
        fd = None
        if message[0] == GROWN:
            if len(self.buffer) < 5 + size or not self.fds:
                return None             # its descriptor has not come yet
            if self.buffer[4 + size:5 + size] != FD_MARKER:
                raise OSError("a worker's descriptor marker is missing")
            fd = self.fds.pop(0)
            size += 1
        del self.buffer[:4 + size]
        return message, fd

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []
