"""§1 process workers: one worker process, and the consumer's end of its socket.

``Worker`` starts a process running ``process_main.main`` and reads its replies through
an ``Inbox``; ``context()`` is how every worker process is started. The engine
(``processes.py``) decides what they build.
"""
from __future__ import annotations

import array
import multiprocessing
import os
import pickle
import socket
import struct
import sys
import threading

from onemodel_cy.workers import process_main

__all__ = ["Worker", "Inbox", "context"]

_KILL_WAIT = 1.0        # seconds after SIGTERM, then SIGKILL

_PRELOAD = ["__main__", "numpy", "onemodel_cy.loader", "onemodel_cy.workers.process_main",
            "onemodel_cy.workers.shmring", "onemodel_cy.workers.taskboard"]


def context():
    """forkserver where available (its server is started once, without threads, and forks
    each worker), else spawn. The server imports the package once ("__main__" first, as
    the default preload does), so a new worker starts in milliseconds, not in an import."""
    if "forkserver" not in multiprocessing.get_all_start_methods():
        return multiprocessing.get_context("spawn")
    ctx = multiprocessing.get_context("forkserver")
    from multiprocessing import forkserver
    if getattr(forkserver._forkserver, "_forkserver_pid", None) is None:     # not started yet
        ctx.set_forkserver_preload(_PRELOAD)
    return ctx


def _forget_the_parents_forkserver():
    """(After fork, in the child.) multiprocessing's forkserver is the parent's child, not
    this process's: the next worker started here would ``waitpid`` it and fail
    (ChildProcessError). The child lets go of it (closing its copy of the pipe that keeps
    the parent's server alive) and starts a server of its own when it first needs one,
    as a process that never had one does. Its lock may have been held by a parent's thread."""
    forkserver = sys.modules.get("multiprocessing.forkserver")
    server = getattr(forkserver, "_forkserver", None)
    if server is None or getattr(server, "_forkserver_pid", None) is None:
        return
    alive = server._forkserver_alive_fd
    server._forkserver_pid = server._forkserver_address = server._forkserver_alive_fd = None
    server._lock = threading.Lock()
    if alive is not None:
        try:
            os.close(alive)
        except OSError:
            pass


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_the_parents_forkserver)


class Worker:
    """One worker process (number ``k`` on the task board) and the consumer's end of its socket."""

    def __init__(self, ctx, payload, k):
        self.k = k
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=process_main.main, args=(child, payload),
                                   name=f"onemodel_cy-worker-process-{k}", daemon=True)
        self.process.start()
        child.close()
        self.sock = socket.fromfd(self.conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)
        self.inbox = Inbox(self.sock)
        self.known = {}         # slot -> segment version this worker has mapped
        self.alive = True
        self.ready = False

    def send(self, message, *fds):
        process_main.send(self.conn, self.sock, message, fds)

    def exit_code(self):
        self.process.join(0.5)
        return self.process.exitcode

    def end(self):
        """Terminate the process if it still runs, and kill it after ``_KILL_WAIT`` more."""
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(_KILL_WAIT)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(_KILL_WAIT)

    def close(self):
        self.inbox.close()
        for end in (self.sock, self.conn):
            try:
                end.close()
            except OSError:
                pass


class Inbox:
    """A worker's replies, read in bulk: one ``recvmsg`` takes every byte waiting (several
    replies, and the descriptor that follows a "grown" one), where ``Connection.recv``
    makes two reads per reply and ``socket.recv_fds`` one more. System calls are the
    consumer's main cost per batch on a virtual machine (docs/performance.md, "Measurements
    behind the code"). Frames are multiprocessing's own: a
    4-byte big-endian length, then the pickle (the worker sends with ``Connection.send``);
    a descriptor comes with the one byte ``b"F"`` after its "grown" reply."""

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
        """The next complete reply (with its descriptor for "grown"), or None."""
        if len(self.buffer) < 4:
            return None
        size, = struct.unpack("!i", self.buffer[:4])
        if size < 0:                    # multiprocessing's frame for payloads of 2 GiB and more: never sent
            raise OSError(f"unexpected frame of a worker: length {size}")
        if len(self.buffer) < 4 + size:
            return None
        message = pickle.loads(self.buffer[4:4 + size])
        fd = None
        if message[0] == "grown":
            if len(self.buffer) < 5 + size or not self.fds:
                return None             # its descriptor has not come yet
            if self.buffer[4 + size:5 + size] != b"F":
                raise OSError("a worker's descriptor marker is missing")
            fd = self.fds.pop(0)
            size += 1
        del self.buffer[:4 + size]
        return message, fd

    def close(self):
        for fd in self.fds:
            os.close(fd)
        self.fds = []
