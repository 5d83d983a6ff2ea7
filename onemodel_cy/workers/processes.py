"""§1 process workers (``DataLoader(worker_mode="process")``): the engine on the consumer's side.

Why processes: a dataset or transform that is mostly Python holds the GIL, so worker
threads take turns instead of working together; worker processes each have their own.

What is sent: the pipeline (``collate.pipeline.Pipeline``: dataset, sampler, collator,
seed, transform, the rank's slots), pickled once per engine and given to each worker when
it starts; afterwards only small messages travel (``process_wire`` is their one home),
and the steps to build are posted on a shared task board (``taskboard``). Processes
(``process_link``) are started with
``forkserver`` where the platform has it, else ``spawn``: never a bare ``fork`` of a
parent that may run threads.

Where batches live: a :class:`~onemodel_cy.workers.shmring.ShmRing` of shared slots, allocated
once per engine and reused; a worker builds step ``g`` straight into the slot it was
handed (growing the slot, once, when a larger batch than the slot holds comes), and the
consumer receives an ``ImageBatch`` of views of that slot. A slot is handed out again
only once the batch and every view of it are gone. Steady state allocates no batch
memory on either side.

Order and bytes: workers only decide *when* a step is built; the step is built by the
pipeline's ``build`` in the worker, so the stream is byte-identical to threads and to
0 workers. The consumer posts the steps of its ``StepWindow`` in order, and a free worker
takes the lowest posted step (as thread workers claim theirs), so a worker slowed down
holds one step of the window, not its share.

Failures: an exception in a worker is delivered at its step (its type when it pickles,
always with its message and traceback text); a worker that dies is reported at the
first step it owed, with its exit code. Either way nothing after that step is delivered.

Lifetimes: ``signal_close`` (interpreter exit, and the first thing ``shutdown`` does)
marks the engine closed, tells the board to stop and rings every sleeping worker, and
waits for nothing. ``shutdown`` (close, leaving ``with``, a dropped stream, Ctrl-C through
the stream's error path) then waits for the workers to exit, ``join_timeout`` seconds in
all but never more than ``_STOP_WAIT`` (a process, unlike a thread, can be ended, and a
batch built after close is thrown away), and terminates those still running, naming the
ones that were building a step in a ``StuckWorkerWarning``. At interpreter exit
multiprocessing's own exit handler ends the worker processes (they are daemons). A
worker whose consumer was killed sees its socket end and exits; the shared memory has no
name, so nothing is left in ``/dev/shm``.
"""
from __future__ import annotations

import multiprocessing.process
import os
import pickle
import select
import sys
import threading
import time
import warnings
import weakref

from onemodel_cy.workers.choice import check_main_module, unpicklable_part
from onemodel_cy.workers.process_link import Worker, context, end_all
from onemodel_cy.workers.process_wire import BOARD, ERROR, FATAL, GROWN, MAP, READY, raised
from onemodel_cy.workers.protocol import StuckWorkerWarning
from onemodel_cy.workers.shmring import Segment, ShmRing
from onemodel_cy.workers.taskboard import TaskBoard, board_bytes
from onemodel_cy.workers.window import EngineBase, StepWindow

__all__ = ["ProcessEngine", "pickled_pipeline"]

_STOP_WAIT = 2.0        # seconds (at most join_timeout) a stopping worker may take to end, then SIGTERM
_LONGEST_POLL_MS = 2**31 - 1     # poll() takes a C int of milliseconds: a longer wait polls again


def pickled_pipeline(pipeline) -> bytes:
    """The pipeline a worker builds with, pickled; ``TypeError`` naming the part that does not pickle."""
    part = unpicklable_part(pipeline)
    if part is not None:
        name, obj, exc = part
        raise TypeError(
            f"worker_mode='process' sends the {name} to every worker process by pickling it, and "
            f"the {name} {type(obj).__module__}.{type(obj).__qualname__} cannot be pickled: "
            f"{type(exc).__name__}: {exc}. Make it picklable (defined at module level, no open "
            f"files, locks or lambdas), or use worker_mode='thread'") from exc
    return pickle.dumps(pipeline)


def _remote_error(worker, g, payload):
    """The exception a worker reported for step g, as the consumer raises it."""
    return raised(payload, f"onemodel_cy: raised in worker process {worker.process.pid} while building "
                           f"global step {g}")


class ProcessEngine(EngineBase):
    """A loader's worker processes and their shared ring; serves one stream at a time.

    An engine of ``protocol.Engine``. Driven by the consumer's thread; ``shutdown`` may
    come from any thread. ``skip``, ``reposition`` and ``park`` are ``EngineBase``'s, over
    ``_drop`` and ``_refill``.
    """

    def __init__(self, loader, workers, start, limit):
        self.pipeline = loader._pipeline
        payload = pickled_pipeline(self.pipeline)      # before any process starts
        check_main_module()                             # a __main__ no worker can import: one clear error
        self.owner = weakref.ref(loader)
        self.workers, self.prefetch = workers, loader.prefetch
        self.join_timeout = loader.join_timeout
        # Held only for a few writes that never block (signal_close) and to close the pipes
        # they write to, never across a wait.
        self.lock = threading.Lock()
        self._state = threading.RLock()          # everything below
        self._wake_r, self._wake_w = os.pipe()   # lets another thread's close wake a waiting consumer
        self.closed = self.forsaken = self.shut = False
        self.window = StepWindow(self.prefetch, start, limit, True)    # the consumer builds `start`
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
        for end in (self._doorbell_r, self._doorbell_w, self._wake_w):
            os.set_blocking(end, False)          # no side ever waits on a pipe itself
        self.tasks = {}                          # task id -> (g, slot, board entry)
        self.results = {}                        # g -> ("batch", slot, dims) | ("error", exception)
        self.dispatched = {}                     # g -> task id, steps sent and not yet answered
        self._task_ids = 0
        self.persistent = loader.persistent_workers     # parked between streams (registry.py)
        self.fatal = None                        # the error of a worker that could not start
        ctx = context()
        self.pool = []
        for k in range(workers):
            worker = Worker(ctx, payload, k)
            self.pool.append(worker)
            try:
                worker.send((BOARD, k, board_bytes(self.board.entries)), self.board.fd, self._doorbell_r)
            except OSError:
                pass                             # it died at once: its exit is reported by _wait
        self.threads = [w.process for w in self.pool]      # BatchStream's repr counts them
        self._watch()
        with self._state:
            self._dispatch()

    # -- dispatching ---------------------------------------------------------------------

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
        window = self.window
        while window.has_room() and self.board.has_room():
            if not self._map_everywhere(slot := self._free_slot()):
                self.ring.release(slot)
                break
            g = window.next_out
            self._task_ids += 1
            task = self._task_ids
            entry, sleeping = self.board.post(task, g, slot, self.versions[slot], self.largest)
            self.tasks[task] = (g, slot, entry)
            self.dispatched[g] = task
            window.hand_out()       # once posted: a post that raises leaves no hole in the window
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
                    worker.send((MAP, slot, version, segment.size), segment.fd)
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
        """One reply of ``worker`` (``fd``: the descriptor of a ``GROWN`` one)."""
        kind = message[0]
        if kind == READY:
            worker.ready = True
            return
        if kind == FATAL:           # it could not rebuild the pipeline: the stream stops at its next step
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
        if kind == GROWN:
            segment = Segment(fd, message[3])
            self.versions[slot] += 1
            self.ring.adopt(slot, segment)
            worker.known[slot] = self.versions[slot]
        current = self.dispatched.get(g) == task
        if current:
            del self.dispatched[g]
        if kind == ERROR:
            self.ring.release(slot)
            if current:
                self._set_result(g, ("error", _remote_error(worker, g, message[2])))
        elif current:
            self._set_result(g, ("batch", slot, message[2]))
        else:
            self.ring.release(slot)     # a step of an earlier position (reposition)

    def _set_result(self, g, result):
        self.results[g] = result
        if result[0] == "error":
            self.window.failed(g)       # nothing after g is sent any more

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
            return      # it reported FATAL
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
        left = None if deadline is None else min(max(0.0, deadline - time.monotonic()) * 1000, _LONGEST_POLL_MS)
        events = self._poller.poll(left)
        if not events:      # (a wait longer than poll's range is not over yet: True, to wait again)
            return deadline is not None and time.monotonic() < deadline
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
        """Step g's batch, waiting for it; None when g is the consumer's to build (then
        ``skip``); raises its build's exception, StopIteration once closed, TimeoutError
        after ``timeout`` seconds (None: wait while a worker lives)."""
        if g == self.window.local:
            return None                 # claimed for the consumer: never posted
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
            self.window.took(g)
            if result[0] == "error":
                raise result[1]
            _, slot, dims = result
            epoch, step = self.pipeline.locate(g)
            batch = self.ring.batch(slot, *dims, epoch, step, g)
            self.largest = max(self.largest, batch.nbytes)
            self._dispatch()
        return batch

    def fits(self, loader, workers):
        return (not self.closed and loader.worker_mode == "process" and loader._pipeline is self.pipeline
                and workers == self.workers and loader.prefetch == self.prefetch
                and all(w.alive for w in self.pool))       # (a forsaken engine is closed)

    def _refill(self):
        """(Under ``_state``; EngineBase.) Post the window's steps not yet posted."""
        if not self.closed:
            self._dispatch()

    def _drop(self, start):
        """(Under ``_state``; EngineBase.) Release every built batch's slot and forget every
        step sent; stand at ``start``. Answers already sent are read first: their entries are
        free again at once. No batch was made of a slot yet: none to close (an empty tuple)."""
        self._read_what_came()
        for result in self.results.values():
            if result[0] == "batch":
                self.ring.release(result[1])
        self.results.clear()
        for task in self.dispatched.values():
            self._withdraw(task)
        self.dispatched.clear()
        self.window.moved(start)
        return ()

    def idle(self):
        """(Every live worker asleep on the board, no step posted or being built.) Answers
        already sent are taken in first; a step still posted while every worker sleeps
        would be a lost wake-up."""
        with self._state:
            self._read_what_came()
            return self.board.sleepers == sum(w.alive for w in self.pool) and not self.tasks

    def signal_close(self):
        """Mark closed and wake every waiter, waiting for nothing: a consumer in ``take``
        returns, the board tells busy workers to take nothing more, and each sleeping worker
        gets a doorbell byte (then sees the stop and exits). Every write is to a pipe that
        never blocks; ``shutdown`` joins."""
        with self.lock:
            if self.closed:             # (a forsaken engine is closed)
                return
            self.closed = True
            self.board.stop()
            for end, count in ((self._wake_w, 1), (self._doorbell_w, len(self.pool))):
                try:
                    os.write(end, b"x" * count)
                except OSError:         # (BlockingIOError: bytes nobody read yet wake them anyway)
                    pass

    def forsake(self):
        """(After fork, in the child: see ``protocol.Engine.forsake``.) The workers are the
        parent's: nothing is sent to them and the board is left as it is. The child closes
        its copies of their sockets (a worker ends when its consumer's end closes, which it
        must still see when the parent dies) and of the pipes, and takes the processes out
        of multiprocessing's children, whose exit handler would terminate them. Batches the
        child holds stay mapped: they are the parent's shared memory (docs/workers.md)."""
        self.forsaken = self.closed = True
        children = getattr(multiprocessing.process, "_children", set())
        for worker in self.pool:
            worker.close()              # (idempotent: after a shutdown in the parent too)
            children.discard(worker.process)
        self._close_pipes()             # the parent may have closed them already: then nothing
        self.ring.close()               # this process's copies of the descriptors and mappings
        self.board.close_fd()

    def shutdown(self):
        """End every worker (idempotent): ``signal_close``, then wait for them to exit,
        ``join_timeout`` seconds in all but never more than ``_STOP_WAIT``, terminate those
        still running (``_end_workers``), and let go of the ring, the board and the pipes."""
        if self.forsaken:
            return
        with self.lock:
            first, self.shut = not self.shut, True
        self.signal_close()
        if not first or sys.is_finalizing():
            return      # (at exit multiprocessing's own handler has ended the daemon workers)
        with self._state:
            for worker in self.pool:
                worker.stop()
            self._end_workers()
            for worker in self.pool:
                worker.close()
            self.ring.close()           # only the slots of batches the user still holds stay mapped
            self.board.close_fd()
            self.results.clear()
            with self.lock:             # (signal_close writes to them under it)
                self._close_pipes()

    def _end_workers(self):
        """(Under ``_state``, closed.) Wait for the workers to exit, ``join_timeout`` in all, at
        most ``_STOP_WAIT``; terminate the rest, and name those that held a step of the board
        then (still inside dataset, transform or augmentation code) in a ``StuckWorkerWarning``."""
        wait = min(self.join_timeout, _STOP_WAIT)
        deadline = time.monotonic() + wait
        for worker in self.pool:
            worker.process.join(max(0.0, deadline - time.monotonic()))
        late = [worker for worker in self.pool if worker.process.is_alive()]
        building = {self.board.claimant(entry) for _, _, entry in self.tasks.values()}
        stuck = [worker.process.pid for worker in late if worker.k in building]
        end_all(late)
        if stuck:
            warnings.warn(f"onemodel_cy: worker processes {stuck} still inside dataset/transform/augmentation "
                          f"code {wait} s after close() (DataLoader join_timeout={self.join_timeout}, at most "
                          f"{_STOP_WAIT} s for processes); they were terminated", StuckWorkerWarning, stacklevel=4)

    def _close_pipes(self):
        """Close the wake-up and doorbell pipes once: a number closed here may be reused by
        the user's next file, which a second close (a forked child's) would close instead."""
        for name in ("_wake_r", "_wake_w", "_doorbell_r", "_doorbell_w"):
            end = getattr(self, name)
            if end >= 0:
                setattr(self, name, -1)
                os.close(end)

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass
