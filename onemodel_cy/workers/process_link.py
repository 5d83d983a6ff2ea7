"""§1 process workers: one worker process, and the consumer's end of its socket.

``Worker`` starts a process running ``process_main.main``, sends it messages and reads its
replies through an ``Inbox`` (both in ``process_wire.py``, the wire's one home);
``context()`` is how every worker process is started, ``end_all`` how the last ones are
ended. The engine (``processes.py``) decides what they build.
"""
from __future__ import annotations

import multiprocessing
import os
import socket
import sys
import threading
import time

from onemodel_cy.workers import process_main
from onemodel_cy.workers.process_wire import STOP, Inbox, send

__all__ = ["Worker", "context", "end_all"]

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
        send(self.conn, self.sock, message, fds)

    def stop(self):
        """Ask the process to exit (``STOP``), unless its socket is gone already."""
        try:
            self.conn.send(STOP)
        except OSError:
            pass

    def exit_code(self):
        self.process.join(0.5)
        return self.process.exitcode

    def end(self):
        """Terminate the process if it still runs, and kill it after ``_KILL_WAIT`` more."""
        end_all([self])

    def close(self):
        self.inbox.close()
        for end in (self.sock, self.conn):
            try:
                end.close()
            except OSError:
                pass


def end_all(workers):
    """Terminate every process of ``workers`` still running, and kill those still running
    ``_KILL_WAIT`` seconds later: all at once, so ending many takes as long as ending one."""
    for how in ("terminate", "kill"):
        running = [w.process for w in workers if w.process.is_alive()]
        if not running:
            return
        for process in running:
            getattr(process, how)()
        deadline = time.monotonic() + _KILL_WAIT
        for process in running:
            process.join(max(0.0, deadline - time.monotonic()))
