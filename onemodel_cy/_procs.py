"""§1 process workers (``DataLoader(worker_mode="process")``): the engine on the consumer's side.

Why processes: a dataset or transform that is mostly Python holds the GIL, so worker
threads take turns instead of working together; worker processes each have their own.

What is sent: the pipeline (dataset, sampler, collator settings, transform, seed, rank),
pickled once per stream engine and given to each worker when it starts; afterwards
only small messages travel (``_procworker`` describes them), and the steps to build are
posted on a shared task board (``_taskboard``). Processes are started with
``forkserver`` where the platform has it, else ``spawn``: never a bare ``fork`` of a
parent that may run threads.

Where batches live: a :class:`~onemodel_cy._shmring.ShmRing` of shared slots, allocated
once per engine and reused; a worker builds step ``g`` straight into the slot it was
handed (growing the slot, once, when a larger batch than the slot holds comes), and the
consumer receives an ``ImageBatch`` of views of that slot. A slot is handed out again
only once the batch and every view of it are gone. Steady state allocates no batch
memory on either side.

Order and bytes: workers only decide *when* a step is built; the step is built by the
loader's own ``_build`` in the worker, so the stream is byte-identical to threads and to
0 workers. The consumer posts steps in order, at most ``prefetch`` ahead of the one it
takes next, and a free worker takes the lowest posted step (as thread workers claim
theirs), so a worker slowed down holds one step of the window, not its share.

Failures: an exception in a worker is delivered at its step (its type when it pickles,
always with its message and traceback text); a worker that dies is reported at the
first step it owed, with its exit code. Either way nothing after that step is delivered.

Lifetimes: ``shutdown`` (close, leaving ``with``, a dropped stream, Ctrl-C through the
stream's error path, interpreter exit) asks every worker to stop, waits a bounded time,
then terminates. A worker whose consumer was killed sees its socket end and exits; the
shared memory has no name, so nothing is left in ``/dev/shm``.
"""
from __future__ import annotations

import array
import multiprocessing
import os
import pickle
import select
import socket
import struct
import threading
import time
import weakref

from onemodel_cy import _procworker
from onemodel_cy._shmring import Segment, ShmRing
from onemodel_cy._taskboard import TaskBoard, board_bytes
from onemodel_cy._validate import note_exception

__all__ = ["ProcessEngine", "pickled_pipeline"]

_STOP_WAIT = 2.0        # seconds a stopping worker may take to finish its build, then SIGTERM
_KILL_WAIT = 1.0        # seconds after SIGTERM, then SIGKILL


_PRELOAD = ["__main__", "numpy", "onemodel_cy.loader", "onemodel_cy._procworker", "onemodel_cy._shmring",
            "onemodel_cy._taskboard"]


def _context():
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


def pickled_pipeline(loader) -> bytes:
    """The pipeline a worker needs, pickled; ``TypeError`` naming the part that does not pickle."""
    parts = {"dataset": loader.dataset, "sampler": loader.sampler, "collator": loader.collator,
             "transform": loader.transform}
    for name, obj in parts.items():
        try:
            pickle.dumps(obj)
        except Exception as exc:
            raise TypeError(
                f"worker_mode='process' sends the {name} to every worker process by pickling it, and "
                f"the {name} {type(obj).__module__}.{type(obj).__qualname__} cannot be pickled: "
                f"{type(exc).__name__}: {exc}. Make it picklable (defined at module level, no open "
                f"files, locks or lambdas), or use worker_mode='thread'") from exc
    parts.update(seed=loader.seed, rank=loader.rank, world_size=loader.world_size)
    return pickle.dumps(parts)


class _Worker:
    """One worker process (number ``k`` on the task board) and the consumer's end of its socket."""

    def __init__(self, ctx, payload, k):
        self.k = k
        self.conn, child = ctx.Pipe(duplex=True)
        self.process = ctx.Process(target=_procworker.main, args=(child, payload),
                                   name=f"onemodel_cy-worker-process-{k}", daemon=True)
        self.process.start()
        child.close()
        self.sock = socket.fromfd(self.conn.fileno(), socket.AF_UNIX, socket.SOCK_STREAM)
        self.inbox = _Inbox(self.sock)
        self.known = {}         # slot -> segment version this worker has mapped
        self.alive = True
        self.ready = False

    def send(self, message, *fds):
        _procworker.send(self.conn, self.sock, message, fds)

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


class _Inbox:
    """A worker's replies, read in bulk: one ``recvmsg`` takes every byte waiting (several
    replies, and the descriptor that follows a "grown" one), where ``Connection.recv``
    makes two reads per reply and ``socket.recv_fds`` one more. System calls are the
    consumer's main cost per batch on a virtual machine (profiled: two reads, a write and
    a poll were about 50 us of a 32-image batch). Frames are multiprocessing's own: a
    4-byte big-endian length, then the pickle (the worker sends with ``Connection.send``);
    a descriptor comes with the one byte ``b"F"`` after its "grown" reply."""

    _FD_SPACE = socket.CMSG_SPACE(4 * array.array("i").itemsize)

    def __init__(self, sock):
        self.sock = sock
        self.buffer = bytearray()
        self.fds = []                   # descriptors received, in order, not yet taken

    def fill(self):
        """Read what is waiting (blocks if nothing is); EOFError once the worker's end is closed."""
        data, ancillary, _, _ = self.sock.recvmsg(1 << 16, self._FD_SPACE)
        for level, kind, cdata in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(cdata[:len(cdata) - len(cdata) % fds.itemsize])
                self.fds.extend(fds)
        if not data:
            raise EOFError("the worker's socket ended")
        self.buffer += data

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


def _remote_error(worker, g, payload):
    """The exception a worker reported for step g, as the consumer raises it."""
    blob, kind, message, text = payload
    error = None
    if blob is not None:
        try:
            error = pickle.loads(blob)
        except Exception:
            error = None
    if not isinstance(error, BaseException):
        error = RuntimeError(f"{kind}: {message}")
    note_exception(error, f"onemodel_cy: raised in worker process {worker.process.pid} while building global "
                          f"step {g}; its traceback there:\n{text.rstrip()}")
    return error


class ProcessEngine:
    """A loader's worker processes and their shared ring; serves one stream at a time.

    Same interface as the thread engine (``take``, ``skip``, ``reposition``, ``fits``,
    ``shutdown``, ``signal_close``, and the ``lock``/``limit``/``room`` a loader uses to
    keep it between passes), so ``BatchStream`` drives either. Driven by the consumer's
    thread; ``shutdown`` may come from any thread.
    """

    mode = "process"

    def __init__(self, loader, workers, start, limit, local_first=True):
        payload = pickled_pipeline(loader)      # before any process starts
        self.owner = weakref.ref(loader)
        self.workers, self.prefetch = workers, loader.prefetch
        self.lock = threading.Lock()             # the loader's handover takes it to set `limit`
        self.room = threading.Condition(self.lock)
        self._state = threading.RLock()          # everything below
        self._wake_r, self._wake_w = os.pipe()   # lets another thread's close wake a waiting consumer
        self.closed = False
        self._limit, self.failed_at = limit, None
        self.ring = ShmRing()
        self.versions = []                       # slot -> segment version (0: no segment yet)
        self.largest = 0                         # the largest batch seen, bytes
        # Entries in use: the window's steps (at most prefetch), and after a move the stale
        # steps of the old position that workers had claimed (posted ones are revoked, and
        # answers already sent are read first): the one each is building, and one more it
        # may have finished and claimed past in the meantime. Should the board be full
        # anyway, posting waits for answers (_dispatch).
        self.board = TaskBoard.create(self.prefetch + 2 * workers)
        self._doorbell_r, self._doorbell_w = os.pipe()
        for end in (self._doorbell_r, self._doorbell_w):
            os.set_blocking(end, False)          # neither side ever waits on the pipe itself
        self.tasks = {}                          # task id -> (g, slot, board entry)
        self.results = {}                        # g -> ("batch", slot, dims) | ("error", exception)
        self.dispatched = {}                     # g -> task id, steps sent and not yet answered
        self._task_ids = 0
        self.persistent = loader.persistent_workers     # parked between streams (see _engine.py)
        self.next_take = start
        self.next_send = start + 1 if local_first else start
        self.local_claim = start if local_first else None  # the step the consumer builds itself
        self.fatal = None                        # the error of a worker that could not start
        ctx = _context()
        self.pool = []
        for k in range(workers):
            worker = _Worker(ctx, payload, k)
            self.pool.append(worker)
            try:
                worker.send(("board", k, board_bytes(self.board.entries)), self.board.fd, self._doorbell_r)
            except OSError:
                pass                             # it died at once: its exit is reported by _wait
        self.threads = [w.process for w in self.pool]      # BatchStream's repr counts them
        self._watch()
        from onemodel_cy._engine import _live_engines
        _live_engines.add(self)
        with self._state:
            self._dispatch()

    # `limit` is set by the loader's handover when a pass ends (steps past it may be sent)
    @property
    def limit(self):
        return self._limit

    @limit.setter
    def limit(self, value):
        with self._state:
            self._limit = value
            if not self.closed:
                self._dispatch()

    # -- dispatching ---------------------------------------------------------------------

    def _window_end(self):
        end = self.next_take + self.prefetch
        if self._limit is not None:
            end = min(end, self._limit)
        if self.failed_at is not None:
            end = min(end, self.failed_at + 1)
        return end

    def _free_slot(self):
        """A free slot, else a new one: batches the user still holds keep their slots, so
        the ring grows to what is held plus the window (as the pool would allocate), and
        never hands out memory a batch still lives in."""
        if self.ring.free:
            return self.ring.free.pop()
        self.versions.append(0)
        return self.ring.new_slot()

    def _dispatch(self):
        """Post every step of the window not yet posted, each in a free slot; every live
        worker has the slot's segment mapped before the step is posted (any may take it).
        Sleeping workers get one doorbell byte per post. With every entry in use (stale
        steps whose answers are not read yet) the rest waits: ``take`` reads answers, which
        free entries, and dispatches again."""
        wake = 0
        while self.next_send < self._window_end() and self.board.has_room():
            if not self._map_everywhere(slot := self._free_slot()):
                self.ring.release(slot)
                break
            g = self.next_send
            self._task_ids += 1
            task = self._task_ids
            entry, sleeping = self.board.post(task, g, slot, self.versions[slot], self.largest)
            self.tasks[task] = (g, slot, entry)
            self.dispatched[g] = task
            self.next_send = g + 1
            wake += sleeping
        if wake:
            try:
                os.write(self._doorbell_w, b"x" * min(wake, len(self.pool)))
            except BlockingIOError:
                pass        # the pipe is full of bytes not yet read: every sleeper wakes anyway

    def _map_everywhere(self, slot):
        """Send ``slot``'s segment to every live worker without it; False when none lives."""
        version = self.versions[slot]
        for worker in self.pool:
            if worker.alive and version and worker.known.get(slot) != version:
                segment = self.ring.segment(slot)
                try:
                    worker.send(("map", slot, version, segment.size), segment.fd)
                    worker.known[slot] = version
                except OSError:
                    self._worker_died(worker)
        return any(w.alive for w in self.pool)

    # -- receiving -----------------------------------------------------------------------

    def _receive(self, worker):
        """Read what ``worker`` sent and handle every complete reply (or its death)."""
        try:
            self._read_replies(worker)
        except (EOFError, OSError, pickle.UnpicklingError):
            self._worker_died(worker)

    def _read_replies(self, worker):
        """Read what is waiting from ``worker`` (blocks if nothing is) and handle every complete reply."""
        worker.inbox.fill()
        while (item := worker.inbox.next()) is not None:
            self._handle(worker, *item)

    def _handle(self, worker, message, fd):
        """One reply of ``worker`` (``fd``: the descriptor of a "grown" one)."""
        kind = message[0]
        if kind == "ready":
            worker.ready = True
            return
        if kind == "fatal":         # it could not rebuild the pipeline: the stream stops at its next step
            self._retire(worker)
            self.fatal = lambda g: _remote_error(worker, g, message[1])
            if self.dispatched:
                g = min(self.dispatched)
                self._withdraw(self.dispatched.pop(g))
                self._set_result(g, ("error", self.fatal(g)))
            return
        task = message[1]
        if task not in self.tasks:
            if fd is not None:
                os.close(fd)
            raise OSError(f"a worker answered task {task}, which it was not given")
        g, slot, entry = self.tasks.pop(task)
        self.board.free(entry)
        if kind == "grown":
            segment = Segment(fd, message[3])
            self.versions[slot] += 1
            self.ring.adopt(slot, segment)
            worker.known[slot] = self.versions[slot]
        current = self.dispatched.get(g) == task
        if current:
            del self.dispatched[g]
        if kind == "error":
            self.ring.release(slot)
            if current:
                self._set_result(g, ("error", _remote_error(worker, g, message[2])))
        elif current:
            self._set_result(g, ("batch", slot, message[2]))
        else:
            self.ring.release(slot)     # a step of an earlier position (reposition)

    def _set_result(self, g, result):
        self.results[g] = result
        if result[0] == "error" and (self.failed_at is None or g < self.failed_at):
            self.failed_at = g          # nothing after g is sent any more

    def _retire(self, worker):
        """Count ``worker`` out: nothing more is sent to it or read from it."""
        worker.alive = False
        for fd in (worker.conn.fileno(), worker.process.sentinel):
            if fd in self._watched:             # a closed socket would report itself at every poll
                self._poller.unregister(fd)
                del self._watched[fd]

    def _worker_died(self, worker):
        """``worker`` is gone (its process exited, or its socket broke or sent nonsense): the
        answers it sent before count, the steps it still held fail with its exit code, and a
        process still running is ended (it would go on taking steps from the board)."""
        if not worker.alive:
            return
        self._take_last_answers(worker)
        if not worker.alive:
            return      # it reported "fatal"
        self._retire(worker)
        code = worker.exit_code()
        if code is None:
            worker.end()
            code = worker.process.exitcode
        pid = worker.process.pid

        def died(g):
            return RuntimeError(f"worker process {pid} died (exit code {code}) while building global step "
                                f"{g}; the stream stops at that step")
        self._fail_claims(worker, died)

    def _take_last_answers(self, worker):
        """Handle what ``worker`` sent before its end, so a step it built still arrives."""
        try:
            while worker.conn.poll():
                self._read_replies(worker)
        except (EOFError, OSError, pickle.UnpicklingError):
            pass

    def _fail_claims(self, worker, make_error):
        """The steps ``worker`` had taken from the board fail (it builds nothing more)."""
        for task, (g, slot, entry) in list(self.tasks.items()):
            if self.board.claimant(entry) == worker.k:
                self._forget(task)      # a dead worker's slot: it writes nothing more
                if self.dispatched.get(g) == task:
                    del self.dispatched[g]
                    self._set_result(g, ("error", make_error(g)))

    def _forget(self, task):
        """Drop a task whose answer will not come: its entry and slot are free."""
        g, slot, entry = self.tasks.pop(task)
        self.board.free(entry)
        self.ring.release(slot)

    def _withdraw(self, task):
        """A task whose answer no longer counts: taken back when no worker has claimed it,
        else left to arrive (and be discarded, as a step no longer dispatched)."""
        if self.board.revoke(self.tasks[task][2]):
            self._forget(task)

    def _wait(self, deadline):
        """Wait for messages (or deaths) of the workers, and handle them; False on timeout.
        One ``poll`` on descriptors registered once per engine (a selector built per wait
        cost more than the poll itself)."""
        left = None if deadline is None else max(0.0, deadline - time.monotonic()) * 1000
        events = self._poller.poll(left)
        if not events:
            return False
        exited = []
        for fd, _ in events:
            worker, what = self._watched.get(fd, (None, None))    # (None: the wake-up pipe)
            if worker is not None and worker.alive:
                if what == "socket":
                    self._receive(worker)
                else:
                    exited.append(worker)
        for worker in exited:
            self._worker_died(worker)
        return True

    def _read_what_came(self):
        """(Under ``_state``.) Handle every answer and death already reported, without waiting."""
        while not self.closed and self._wait(time.monotonic()):
            pass

    def _watch(self):
        """Register every worker's socket and exit sentinel, and the wake-up pipe."""
        self._poller = select.poll()
        self._watched = {}
        for worker in self.pool:
            for fd, what in ((worker.conn.fileno(), "socket"), (worker.process.sentinel, "exit")):
                self._poller.register(fd, select.POLLIN)
                self._watched[fd] = (worker, what)
        self._poller.register(self._wake_r, select.POLLIN)

    # -- the consumer's side -------------------------------------------------------------

    def take(self, g, timeout):
        """Step g's batch, waiting for it; raises its build's exception, StopIteration once
        closed, TimeoutError after ``timeout`` seconds (None: wait while a worker lives)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._state:
            while g not in self.results:
                if self.closed:
                    raise StopIteration
                self._dispatch()
                if g not in self.results and not any(w.alive for w in self.pool):
                    if self.fatal is not None:
                        raise self.fatal(g)
                    raise RuntimeError(f"every worker process ended before building global step {g}")
                if not self._wait(deadline):
                    raise TimeoutError(f"no batch for step {g} after {timeout} s (DataLoader timeout)")
            result = self.results.pop(g)
            self.next_take = g + 1
            if result[0] == "error":
                raise result[1]
            _, slot, dims = result
            epoch, step = divmod(g, self.owner().sampler.steps_per_epoch)
            batch = self.ring.batch(slot, *dims, epoch, step, g)
            self.largest = max(self.largest, batch.nbytes)
            self._dispatch()
        return batch

    def skip(self, g):
        """The consumer built step g, claimed for it, itself: move the window on. (Nothing
        when that claim is gone: the stream was closed meanwhile from another thread.)"""
        with self._state:
            if self.local_claim != g:
                return
            self.local_claim = None
            self.next_take = g + 1
            self.next_send = max(self.next_send, g + 1)
            self._dispatch()

    def fits(self, workers, prefetch):
        loader = self.owner()
        return (not self.closed and loader is not None and loader.worker_mode == "process"
                and workers == self.workers and prefetch == self.prefetch
                and all(w.alive for w in self.pool))

    def reposition(self, start, limit):
        """Serve steps [start, limit): keep what was built when already at ``start``, else
        drop it (builds in flight are discarded when they arrive) and move. Returns True
        when ``start`` was sent to no worker: it is then claimed for the consumer to build."""
        with self._state:
            if start != self.next_take:
                self._drop(start)
            local = self.next_send == start and self.failed_at is None
            if local:
                self.next_send, self.local_claim = start + 1, start
            self._limit = limit
            self._dispatch()
        return local

    def park(self, next_g, keep_prefetching):
        """The stream closed at ``next_g`` (as ``_Engine.park``): keep what was built for a
        stream resuming there; a completed epoch pass sends on, any other stream's steps
        stop at what was sent; a step claimed for the consumer but not delivered, or a
        stream that stopped elsewhere, drops the ring."""
        with self._state:
            if self.local_claim is not None or next_g != self.next_take:
                self._drop(next_g)
            if keep_prefetching:
                self._limit = None if self.failed_at is None else self.failed_at + 1
            elif self.failed_at is None:
                self._limit = self.next_send
            if not self.closed:
                self._dispatch()

    def _drop(self, start):
        """(Under ``_state``.) Release every built batch and forget every step sent; stand at ``start``.
        Answers already sent are read first: their entries are free again at once."""
        self._read_what_came()
        for result in self.results.values():
            if result[0] == "batch":
                self.ring.release(result[1])
        self.results.clear()
        for task in self.dispatched.values():
            self._withdraw(task)
        self.dispatched.clear()
        self.next_take = self.next_send = start
        self.local_claim = None
        self.failed_at = None

    def idle(self):
        """Every live worker asleep on the board and no step posted or being built (the
        harness's check that parked workers use no CPU). Answers already sent are taken
        in first; a step still posted while every worker sleeps would be a lost wake-up."""
        with self._state:
            self._read_what_came()
            return self.board.sleepers == sum(w.alive for w in self.pool) and not self.tasks

    def signal_close(self):
        """Interpreter exit: end the workers now."""
        self.shutdown()
        return []

    def shutdown(self):
        """End every worker: ask, wait a bounded time, then terminate (idempotent)."""
        with self.lock:
            if self.closed:
                return
            self.closed = True
        try:
            os.write(self._wake_w, b"x")         # a consumer waiting in take() returns
        except OSError:
            pass
        with self._state:
            self.board.stop()                    # a busy worker takes nothing more
            for worker in self.pool:
                try:
                    worker.conn.send(None)
                except OSError:
                    pass
            deadline = time.monotonic() + _STOP_WAIT
            for worker in self.pool:
                worker.process.join(max(0.0, deadline - time.monotonic()))
            for worker in self.pool:
                worker.end()
                worker.close()
            self.ring.close_fds()       # mappings stay for the batches the user still holds
            self.board.close_fd()
            self.results.clear()
            for end in (self._wake_r, self._wake_w, self._doorbell_r, self._doorbell_w):
                os.close(end)

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass
