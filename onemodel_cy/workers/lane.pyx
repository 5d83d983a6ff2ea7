"""§1 the packed lane: worker threads that never take the GIL, for a packed dataset.

Why: a batch gathered from a packed view (``PackedImageDataset``, ``ArrayImageDataset``,
``SyntheticLineImages``) takes tens of microseconds, and thread workers that each need
the GIL for a few microseconds of Python per batch keep waking each other across cores
for it (docs/workers.md, "Threads on the packed route"). Here only the consumer runs
Python; the workers run the conversion.

How: the consumer prepares every step in order, at most ``prefetch`` ahead of the step
it takes next, under the GIL: the sampler's indices, the slot table (the fetch step's
``gather_packed``), the batch's layout, its pool block and its arrays
(``ImageBatchCollator.plan``). It posts the step to its ring slot, ``g % prefetch``. A
worker takes the posted slot of the lowest step, writes the batch's columns and images
into the block (``fill_batch``: the same code, with the same arguments, as the 0-worker
route) and marks the slot done; the consumer hands the batch out once it is done. A
consumer whose step is not done yet fills posted slots itself, the same way, instead of
waiting: its own step when no worker has taken it, else (unless the loader has a
``timeout``) the lowest posted one (``wait_done``). So the bytes are the 0-worker
route's, whatever the timing. Both halves are the pipeline's (``Pipeline.prepare`` and
``fill``, ``collate/pipeline.pyx``).

Errors: a step whose preparation raises is built again by the pipeline's ``build`` on
the consumer, so its exception is the one every other route raises (a build that then
succeeds is used as it is); it is raised at its step, and nothing after it is posted. A
fill whose built-in transform could not allocate its kernels' memory is built the same way
when its step is taken. A preparation that outlasts the loader's ``timeout`` waiting for a
remote pack's samples (``data/waits.py``) is no error of its step: preparing stops there,
a later call prepares that step again (its fetch went on meanwhile), and ``take`` raises
the ``WaitTimeout`` when the step is the one it takes.

Waiting: a consumer whose step is not done, and a worker with nothing posted, spin
without the GIL for up to ``SPIN_NS`` (yielding the core every microsecond or so), then
sleep on a condition that is signalled only when someone sleeps on it: waking a
sleeping thread costs the waker microseconds (docs/workers.md). Memory a worker writes
is never given back before the worker is done with it: emptying the ring waits for the
slots being built.

The registry chooses it in thread mode for a pipeline that ``splits()``; any step that
cannot take the split (the dataset's packed view refused) is built by the pipeline's
``build`` on the consumer instead.

One module, past the 500 lines docs/architecture.md asks for: the C half (``_Lane``) and
the engine share the ring's ``LaneSlot`` and call each other's C methods; split, they
would need a ``.pxd`` between them that nothing else uses.
"""
cimport cython
from cpython.exc cimport PyErr_CheckSignals
from libc.stdlib cimport calloc, free

import sys
import threading
import time
import warnings
import weakref

from onemodel_cy.core.typedefs cimport i64
from onemodel_cy.collate.batch cimport ImageBatch
from onemodel_cy.collate.bufferpool import PoolWindow
from onemodel_cy.collate.collator cimport Workspace
from onemodel_cy.collate.pipeline cimport Pipeline, Prepared, fill
from onemodel_cy.workers.window cimport StepWindow

from onemodel_cy.data.waits import WaitTimeout
from onemodel_cy.workers.protocol import StuckWorkerWarning
from onemodel_cy.workers.window import EngineBase, close_batches

cdef extern from "lane.h":
    ctypedef struct pthread_mutex_t:
        pass
    ctypedef struct pthread_cond_t:
        pass
    int pthread_mutex_init(pthread_mutex_t* mutex, void* attr) nogil
    int pthread_mutex_destroy(pthread_mutex_t* mutex) nogil
    int pthread_mutex_lock(pthread_mutex_t* mutex) nogil
    int pthread_mutex_unlock(pthread_mutex_t* mutex) nogil
    int pthread_cond_destroy(pthread_cond_t* cond) nogil
    int pthread_cond_signal(pthread_cond_t* cond) nogil
    int pthread_cond_broadcast(pthread_cond_t* cond) nogil
    int cond_init "om_cond_init"(pthread_cond_t* cond) nogil
    int cond_wait_until "om_cond_wait_until"(pthread_cond_t* cond, pthread_mutex_t* mutex,
                                             long long deadline_ns) nogil
    int atomic_load "om_load"(const int* p) nogil
    void atomic_store "om_store"(int* p, int v) nogil
    long long clock_ns "om_clock_ns"() nogil
    void spin_pause "om_pause"() nogil
    int sched_yield() nogil

# How long a waiting thread spins before it sleeps: longer than a batch of 32 line
# images takes to fill, so that in steady state neither side sleeps (docs/workers.md,
# "The packed lane", has the measurements behind the figure).
SPIN_NS = 50_000
cdef long long SPIN_NS_C = SPIN_NS

cdef enum:
    EMPTY = 0       # no step (or one the consumer took)
    POSTED = 1      # prepared, waiting for a worker
    BUILDING = 2    # a worker is filling its block
    DONE = 3        # filled: the consumer may hand it out


cdef struct LaneSlot:
    int state
    i64 g
    Prepared prepared       # its kernel is the collator's (the engine holds the pipeline)


@cython.final
cdef class _Lane:
    """The C half: the ring slots, their mutex and conditions, and the worker loop."""
    cdef pthread_mutex_t mutex
    cdef pthread_cond_t posted_cond, done_cond
    cdef LaneSlot* slots
    cdef Py_ssize_t count
    cdef int posted             # slots POSTED (read while spinning)
    cdef int closed             # set once: workers end (read while spinning)
    cdef int alive              # workers running their loop
    cdef int sleeping_workers, consumer_sleeping
    cdef Py_ssize_t consumer_fills     # steps the consumer filled itself (wait_done)
    cdef bint ready             # mutex and conditions initialised

    def __cinit__(self, Py_ssize_t count):
        self.slots = <LaneSlot*>calloc(count, sizeof(LaneSlot))
        if self.slots == NULL:
            raise MemoryError("cannot allocate the lane's ring")
        self.count = count
        if pthread_mutex_init(&self.mutex, NULL) or cond_init(&self.posted_cond) or cond_init(&self.done_cond):
            raise MemoryError("cannot create the lane's mutex and conditions")
        self.ready = True

    def forsake(self):
        """(After fork, in the child.) The mutex may be locked and the conditions waited on
        by threads that do not exist here; glibc's pthread_cond_destroy would wait for
        those waiters for ever: the three are never destroyed (a few bytes, once)."""
        self.ready = False

    def __dealloc__(self):
        # Only once no worker runs (the engine joins them, and they hold this object).
        if self.ready:
            pthread_cond_destroy(&self.posted_cond)
            pthread_cond_destroy(&self.done_cond)
            pthread_mutex_destroy(&self.mutex)
        free(self.slots)

    # -- workers ------------------------------------------------------------------------

    def run(self):
        """A worker thread's whole life: fill posted slots until the lane closes."""
        with nogil:
            self.work()

    cdef void work(self) noexcept nogil:
        cdef Py_ssize_t k
        pthread_mutex_lock(&self.mutex)
        while True:
            if atomic_load(&self.closed):
                break
            k = self.lowest_posted()
            if k >= 0:
                self.build(k)
                continue
            pthread_mutex_unlock(&self.mutex)
            self.spin_for_post()
            pthread_mutex_lock(&self.mutex)
            if self.posted == 0 and not self.closed:
                self.sleeping_workers += 1
                cond_wait_until(&self.posted_cond, &self.mutex, -1)
                self.sleeping_workers -= 1
        self.alive -= 1
        pthread_cond_broadcast(&self.done_cond)       # a consumer waiting on no worker sees the end
        pthread_mutex_unlock(&self.mutex)

    cdef void build(self, Py_ssize_t k) noexcept nogil:
        """(Under the mutex, which it lets go while filling; slot k posted.) Fill slot k."""
        cdef LaneSlot* slot = &self.slots[k]
        atomic_store(&slot.state, BUILDING)
        atomic_store(&self.posted, self.posted - 1)
        pthread_mutex_unlock(&self.mutex)
        fill(&slot.prepared)
        pthread_mutex_lock(&self.mutex)
        atomic_store(&slot.state, DONE)
        if self.consumer_sleeping:
            pthread_cond_broadcast(&self.done_cond)

    cdef Py_ssize_t lowest_posted(self) noexcept nogil:
        """(Under the mutex.) The posted slot of the lowest step, or -1."""
        cdef Py_ssize_t k, best = -1
        for k in range(self.count):
            if self.slots[k].state == POSTED and (best < 0 or self.slots[k].g < self.slots[best].g):
                best = k
        return best

    cdef void spin_for_post(self) noexcept nogil:
        cdef long long start = clock_ns()
        cdef int _i
        while clock_ns() - start < SPIN_NS_C:
            for _i in range(16):
                if atomic_load(&self.posted) or atomic_load(&self.closed):
                    return
                spin_pause()
            sched_yield()

    # -- the consumer -------------------------------------------------------------------

    cdef void post(self, Py_ssize_t k) noexcept nogil:
        """(Without the mutex; slot k filled in.) Hand slot k to the workers."""
        pthread_mutex_lock(&self.mutex)
        atomic_store(&self.slots[k].state, POSTED)
        atomic_store(&self.posted, self.posted + 1)
        if self.sleeping_workers:
            pthread_cond_signal(&self.posted_cond)
        pthread_mutex_unlock(&self.mutex)

    cdef int wait_done(self, Py_ssize_t k, long long deadline_ns, bint fill_others) noexcept nogil:
        """Wait for slot k: 1 done, 0 the deadline passed, -1 no worker is left, -2 closed.
        While a worker lives, the consumer fills posted slots itself before it waits: slot
        k when no worker has taken it, else (with ``fill_others``) the lowest posted one,
        until k is done or none is left posted. On two cores the consumer and two workers
        are three threads: a worker without a core (or still waking up) would leave the
        consumer waiting on a step nobody builds, and a consumer spinning for a step a
        worker builds takes a core the other worker could fill with. (With no worker left
        the stream reports that.)"""
        cdef long long start = clock_ns()
        cdef int _i, answer
        cdef LaneSlot* slot = &self.slots[k]
        cdef Py_ssize_t other
        if atomic_load(&slot.state) != DONE:
            pthread_mutex_lock(&self.mutex)
            while slot.state != DONE and not self.closed and self.alive > 0:
                other = k if slot.state == POSTED else (self.lowest_posted() if fill_others else -1)
                if other < 0:
                    break
                self.consumer_fills += 1
                self.build(other)
            pthread_mutex_unlock(&self.mutex)
        while atomic_load(&slot.state) != DONE and clock_ns() - start < SPIN_NS_C:
            if atomic_load(&self.closed):
                break
            for _i in range(16):
                spin_pause()
            sched_yield()
        pthread_mutex_lock(&self.mutex)
        while True:
            if slot.state == DONE:
                answer = 1
                break
            if self.closed:
                answer = -2
                break
            if self.alive == 0:
                answer = -1
                break
            if deadline_ns >= 0 and clock_ns() >= deadline_ns:
                answer = 0
                break
            self.consumer_sleeping = 1
            cond_wait_until(&self.done_cond, &self.mutex, deadline_ns)
            self.consumer_sleeping = 0
        pthread_mutex_unlock(&self.mutex)
        return answer

    cdef void empty(self) noexcept nogil:
        """Take every slot back: posted ones at once, those being built once their worker
        is done with their memory."""
        cdef Py_ssize_t k
        pthread_mutex_lock(&self.mutex)
        for k in range(self.count):
            if self.slots[k].state == POSTED:
                atomic_store(&self.slots[k].state, EMPTY)
                atomic_store(&self.posted, self.posted - 1)
        for k in range(self.count):
            while self.slots[k].state == BUILDING:
                self.consumer_sleeping = 1
                cond_wait_until(&self.done_cond, &self.mutex, -1)
                self.consumer_sleeping = 0
            atomic_store(&self.slots[k].state, EMPTY)
        pthread_mutex_unlock(&self.mutex)

    cdef void expect(self, int workers) noexcept nogil:
        """Count ``workers`` threads in before they start (each counts itself out when it
        ends), so a consumer never takes a worker not yet started for one that ended."""
        pthread_mutex_lock(&self.mutex)
        self.alive = workers
        pthread_mutex_unlock(&self.mutex)

    cdef void release(self, Py_ssize_t k) noexcept nogil:
        atomic_store(&self.slots[k].state, EMPTY)

    cdef void close(self) noexcept nogil:
        pthread_mutex_lock(&self.mutex)
        atomic_store(&self.closed, 1)
        pthread_cond_broadcast(&self.posted_cond)
        pthread_cond_broadcast(&self.done_cond)
        pthread_mutex_unlock(&self.mutex)

    cdef bint idle(self) noexcept nogil:
        """Whether every worker sleeps with nothing posted or being filled (no CPU used)."""
        cdef Py_ssize_t k
        cdef bint answer
        pthread_mutex_lock(&self.mutex)
        answer = self.posted == 0 and self.sleeping_workers == self.alive
        for k in range(self.count):
            if self.slots[k].state == BUILDING:
                answer = False
        pthread_mutex_unlock(&self.mutex)
        return answer


# A waiting consumer checks for signals (Ctrl-C) this often.
cdef long long SIGNAL_CHECK_NS = 50_000_000


@cython.final
cdef class LaneEngine:
    """A loader's lane: its worker threads and their ring; serves one stream at a time.

    An engine of ``protocol.Engine``. Driven by the consumer's thread; ``shutdown`` may
    come from any thread. Holds the loader weakly, as the thread engine does, and the
    pipeline (what the posted fills read) strongly.

    ``skip``, ``reposition`` and ``park`` are ``window.EngineBase``'s (over ``_drop`` and
    ``_refill``), taken as class attributes: ``EngineBase`` says why.
    """
    cdef readonly Py_ssize_t workers, prefetch
    cdef readonly bint persistent, closed, forsaken
    cdef readonly list threads
    cdef readonly object owner, pool_window, lock, pacing
    cdef readonly Pipeline pipeline
    cdef readonly StepWindow window
    cdef readonly double join_timeout
    cdef _Lane lane
    cdef readonly object _state         # RLock over everything below (EngineBase's lock)
    cdef list batches, workspaces, steps
    cdef dict errors                    # g -> the exception its build raised
    cdef object late                    # the WaitTimeout that stopped the last dispatch, or None
    cdef bint shut
    cdef object ended                   # set once shutdown is done
    cdef object __weakref__

    def __init__(self, loader, workers, start, limit):
        self.owner = weakref.ref(loader)
        self.pipeline = loader._pipeline
        self.workers, self.prefetch = workers, loader.prefetch
        self.persistent = loader.persistent_workers
        self.join_timeout = loader.join_timeout
        self.lock = threading.Lock()
        self.ended = threading.Event()
        self._state = threading.RLock()
        self.lane = _Lane(self.prefetch)
        self.batches = [None] * self.prefetch
        self.steps = [-1] * self.prefetch
        # A slot's workspace is made when a step is first posted to it: a deep window over a
        # short stream allocates none for the steps it never reaches.
        self.pacing = loader.pacing
        self.workspaces = [None] * self.prefetch
        self.errors = {}
        self.window = StepWindow(self.prefetch, start, limit, True)    # the consumer builds `start`
        self.pool_window = PoolWindow.for_stream(self.pipeline.collator.pool, self.prefetch, workers)
        self.threads = [threading.Thread(target=self._run, name=f"onemodel_cy-worker-{k}", daemon=True)
                        for k in range(workers)]
        self.lane.expect(workers)
        try:
            for k, thread in enumerate(self.threads):
                try:
                    thread.start()
                except RuntimeError:        # "can't start new thread": count the rest out
                    self.lane.expect(k)
                    self.threads = self.threads[:k]
                    break
            with self._state:
                self.dispatch()
        except BaseException:       # (Ctrl-C while starting) no thread outlives a failed start
            self.shutdown()
            raise

    def _run(self):
        # The thread holds the engine (as the thread engine's workers do), so it is not
        # collected while a worker may write into a block it keeps.
        self.lane.run()

    # -- posting --------------------------------------------------------------------------

    cdef dispatch(self):
        """(Under _state.) Prepare and post every step of the window not yet posted."""
        self.late = None
        if self.owner() is None or self.closed:
            return
        while self.window.has_room():
            try:
                self.prepare(self.window.next_out)  # handed out once it is posted or built:
            except WaitTimeout as error:            # a Ctrl-C meanwhile leaves no hole
                # The loader's timeout passed while the consumer waited for this step's
                # remote samples: a later call prepares it (take raises this if it is the
                # step taken), and the fetch goes on meanwhile.
                self.late = error
                return
            self.window.hand_out()

    cdef prepare(self, g):
        """Post step g to the workers; a step that cannot take the split, or whose
        preparation raises, is built whole here (its exception is then the one every
        route raises), and kept for its turn."""
        cdef Py_ssize_t k = g % self.prefetch
        if self.workspaces[k] is None:
            self.workspaces[k] = self.pipeline.workspace(self.pacing)
        cdef Workspace ws = self.workspaces[k]
        cdef LaneSlot* slot = &self.lane.slots[k]
        cdef bint baton = False
        try:
            batch = self.pipeline.prepare(g, ws, &slot.prepared)
            if batch is not None:
                try:
                    self.pool_window.fit((<ImageBatch>batch).nbytes)
                except BaseException:
                    ws.let_go(slot.prepared.n, &baton)
                    raise
                slot.g = g
                self.batches[k], self.steps[k] = batch, g
                with nogil:
                    self.lane.post(k)
                return
        except (KeyboardInterrupt, WaitTimeout):    # the consumer's own Ctrl-C or timeout, not the step's
            raise
        except BaseException:
            pass
        try:
            batch = self.pipeline.build(g, ws)
            self.pool_window.fit(batch.nbytes)
        except (KeyboardInterrupt, WaitTimeout):
            raise
        except BaseException as error:  # delivered at its step, as the thread engine does
            self.errors[g] = error
            self.window.failed(g)
            return
        slot.prepared.n = 0             # nothing of the workspace is held
        slot.prepared.failed = False
        self.batches[k], self.steps[k] = batch, g
        atomic_store(&slot.state, DONE)

    # -- the consumer ---------------------------------------------------------------------

    skip, reposition, park = EngineBase.skip, EngineBase.reposition, EngineBase.park

    def take(self, g, timeout):
        """Step g's batch, waiting for it; None when g is the consumer's to build (then
        ``skip``); raises its build's exception, StopIteration once closed, TimeoutError
        after ``timeout`` seconds (None: wait while a worker lives)."""
        if g == self.window._local:
            return None                 # claimed for the consumer: never posted
        cdef Py_ssize_t k = g % self.prefetch
        cdef long long deadline = -1 if timeout is None else clock_ns() + <long long>(timeout * 1e9)
        # A user's timeout bounds the wait for step g: the consumer then fills no other step.
        cdef bint fill_others = timeout is None
        cdef long long until
        cdef int answer
        with self._state:
            if self.closed:
                raise StopIteration
            self.dispatch()
            if self.steps[k] != g:
                if g in self.errors:
                    self.window.took(g)
                    raise self.errors.pop(g)
                if self.late is not None and self.window.next_out == g:
                    raise self.late         # its samples did not arrive within the timeout
                if self.owner() is None:
                    raise RuntimeError(f"the stream's DataLoader was collected: step {g} was never built")
                raise RuntimeError(f"ring slot {k} holds step {self.steps[k]}, expected {g}")   # never
            while True:
                until = clock_ns() + SIGNAL_CHECK_NS
                if deadline >= 0:
                    until = min(until, deadline)
                with nogil:
                    answer = self.lane.wait_done(k, until, fill_others)
                if answer != 0 or (deadline >= 0 and clock_ns() >= deadline):
                    break
                PyErr_CheckSignals()    # raises what a signal handler raised (KeyboardInterrupt)
            if answer == -2 or self.closed:
                raise StopIteration
            if answer == -1:
                raise RuntimeError(f"every worker thread ended before building step {g}")
            if answer == 0:
                raise TimeoutError(f"no batch for step {g} after {timeout} s (DataLoader timeout)")
            failed = self.lane.slots[k].prepared.failed
            batch = self.hand_out(k)
            self.window.took(g)
            if failed:      # a transform's kernel could not allocate: built whole, which raises what it raises
                batch = None
                batch = self.pipeline.build(g, self.workspaces[k])
            self.dispatch()
        return batch

    cdef object hand_out(self, Py_ssize_t k):
        """(Under _state; slot k done, or emptied.) Its batch (or None); the slot and its
        workspace are free again."""
        cdef bint baton = False
        batch, self.batches[k], self.steps[k] = self.batches[k], None, -1
        if self.workspaces[k] is not None:
            (<Workspace>self.workspaces[k]).let_go(self.lane.slots[k].prepared.n, &baton)
        self.lane.slots[k].prepared.n = 0
        self.lane.release(k)
        return batch

    def idle(self):
        cdef bint answer
        with nogil:
            answer = self.lane.idle()
        return answer

    @property
    def consumer_fills(self):
        """(For tests and benchmarks.) How many steps the consumer filled itself while it
        waited for its own (``_Lane.wait_done``)."""
        return self.lane.consumer_fills

    def ring(self):
        """(For tests.) The step in each slot and its state ("empty", "posted", "building",
        "done"), and the next step the consumer takes."""
        cdef Py_ssize_t k
        names = ("empty", "posted", "building", "done")
        with self._state:
            return ([(self.steps[k], names[atomic_load(&self.lane.slots[k].state)]) for k in range(self.prefetch)],
                    self.window.next_take)

    def fits(self, loader, workers):
        if self.forsaken:
            return False
        with self._state:
            return (not self.closed and loader.worker_mode == "thread" and loader._pipeline is self.pipeline
                    and self.pipeline.splits() and workers == self.workers == self.lane.alive
                    and loader.prefetch == self.prefetch)

    def _refill(self):
        """(Under _state; EngineBase.) Post the window's steps not yet posted."""
        self.dispatch()

    def _drop(self, start):
        """(Under _state; EngineBase.) Empty the ring (waiting for the slots being filled) and
        stand at ``start``; returns the ring's batches, for the caller to close."""
        with nogil:
            self.lane.empty()
        self.window.moved(start)
        return self.take_all()

    cdef list take_all(self):
        """(Under _state; no slot being filled.) Every batch the ring holds, taken out of it."""
        cdef Py_ssize_t k
        self.errors.clear()
        return [self.hand_out(k) for k in range(self.prefetch)]

    def signal_close(self):
        """Mark closed and wake every waiter (workers end, a waiting consumer stops). The
        ring's batches are closed by ``shutdown``, once no worker writes them."""
        if self.forsaken:
            return
        self.closed = True
        with nogil:
            self.lane.close()

    def forsake(self):
        """(After fork, in the child: see ``protocol.Engine.forsake``.) No worker runs here,
        and the lane's mutex and conditions may be held or waited on by threads of the
        parent: they are left as they are, never locked or destroyed (``_Lane.forsake``)."""
        self.forsaken = self.closed = True
        self.lane.forsake()

    def shutdown(self):
        """End the workers: wake them, join them (a fill takes microseconds to
        milliseconds), then close the ring's batches. Idempotent; a second caller waits
        for the first to finish. A worker still filling after ``join_timeout`` (a pack's
        pages read from slow storage) gets a ``StuckWorkerWarning``, and the ring's
        batches stay with the engine, which its thread holds, until the fill ends."""
        if self.forsaken:
            return
        with self.lock:
            first, self.shut = not self.shut, True
        if sys.is_finalizing():
            self.signal_close()
            return          # other threads no longer run: joining them could hang
        if not first:
            self.ended.wait(self.join_timeout)
            return
        try:
            self.signal_close()
            deadline = time.monotonic() + self.join_timeout
            for thread in self.threads:
                if thread.ident is not None:
                    thread.join(max(0.0, deadline - time.monotonic()))
            stuck = [thread.name for thread in self.threads if thread.is_alive()]
            if stuck:
                warnings.warn(f"onemodel_cy: {stuck} still filling a batch {self.join_timeout} s after close() "
                              f"(DataLoader join_timeout); they end when that fill is done",
                              StuckWorkerWarning, stacklevel=3)
                return
            with self._state:
                with nogil:
                    self.lane.empty()
                batches = self.take_all()
            close_batches(batches)
        finally:
            self.ended.set()
