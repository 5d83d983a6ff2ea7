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
route) and marks the slot done; the consumer hands the batch out once it is done. So
the bytes are the 0-worker route's, whatever the timing.

Errors: a step whose preparation raises is built again by the loader's own ``_build``
on the consumer, so its exception is the one every other route raises (a build that
then succeeds is used as it is); it is raised at its step, and nothing after it is
posted.

Waiting: a consumer whose step is not done, and a worker with nothing posted, spin
without the GIL for up to ``SPIN_NS`` (yielding the core every microsecond or so), then
sleep on a condition that is signalled only when someone sleeps on it: on this VM a
signal to a sleeping thread costs the signalling thread 8-15 us (``benchmarks/
lane_threads.c``). Memory a worker writes is never given back before the worker is
done with it: emptying the ring waits for the slots being built.

Used by ``DataLoader`` in thread mode when every build can take this route
(``lane_fits``); any step that cannot (the dataset's packed view refused) is built by
``_build`` on the consumer instead.
"""
cimport cython
cimport numpy as cnp
from cpython.exc cimport PyErr_CheckSignals
from libc.stdlib cimport calloc, free

import sys
import threading
import time
import warnings
import weakref

from onemodel_cy._typedefs cimport u64, i64
from onemodel_cy._validate cimport as_index, as_u64
from onemodel_cy._batch cimport BatchLayout, ImageBatch, batch_in_block
from onemodel_cy._bufferpool cimport Block
from onemodel_cy._bufferpool import PoolWindow
from onemodel_cy._collate cimport SlotJob, Workspace, ImageBatchCollator, fill_batch
from onemodel_cy._datasets cimport PackedImages, PackedSource
from onemodel_cy._fetch cimport gather_packed
from onemodel_cy._augment cimport AugmentKernel

cnp.import_array()

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
# images takes (30-50 us), so that in steady state neither side sleeps
# (benchmarks/lane_threads.c: 50 us took 2 workers from 1.28-1.41 x to 1.69-1.77 x
# 0 workers at batch 32, against a consumer that slept at once).
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
    const SlotJob* jobs
    Py_ssize_t n, first_slot
    char* data
    BatchLayout layout
    const AugmentKernel* kernel     # the collator's (the engine holds the collator while posted)
    float pad
    u64 seed, epoch, step


def lane_fits(loader):
    """Whether every build of ``loader`` can take the packed lane: thread mode, a dataset
    whose packed view serves (not a subclass with its own ``get_sample``), no transform,
    no Python augmentation, and the loader's own ``_build`` (not one a subclass or the
    caller replaced: the lane would bypass it)."""
    from onemodel_cy.loader import DataLoader
    cdef PackedImages view
    collator, dataset = loader.collator, loader.dataset
    return (loader.worker_mode == "thread" and loader.transform is None
            and type(loader)._build is DataLoader._build and "_build" not in vars(loader)
            and isinstance(dataset, PackedSource) and (<PackedSource>dataset).packed_view(&view)
            and isinstance(collator, ImageBatchCollator)
            and not (<ImageBatchCollator>collator)._python_augmentation)


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
    cdef bint ready             # mutex and conditions initialised

    def __cinit__(self, Py_ssize_t count):
        self.slots = <LaneSlot*>calloc(count, sizeof(LaneSlot))
        if self.slots == NULL:
            raise MemoryError("cannot allocate the lane's ring")
        self.count = count
        if pthread_mutex_init(&self.mutex, NULL) or cond_init(&self.posted_cond) or cond_init(&self.done_cond):
            raise MemoryError("cannot create the lane's mutex and conditions")
        self.ready = True

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
        cdef LaneSlot* slot
        pthread_mutex_lock(&self.mutex)
        while True:
            if atomic_load(&self.closed):
                break
            k = self.lowest_posted()
            if k >= 0:
                slot = &self.slots[k]
                atomic_store(&slot.state, BUILDING)
                atomic_store(&self.posted, self.posted - 1)
                pthread_mutex_unlock(&self.mutex)
                fill_batch(slot.jobs, slot.n, slot.data, &slot.layout, slot.kernel,
                           slot.seed, slot.epoch, slot.step, slot.first_slot, slot.pad)
                pthread_mutex_lock(&self.mutex)
                atomic_store(&slot.state, DONE)
                if self.consumer_sleeping:
                    pthread_cond_broadcast(&self.done_cond)
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

    cdef Py_ssize_t lowest_posted(self) noexcept nogil:
        """(Under the mutex.) The posted slot of the lowest step, or -1."""
        cdef Py_ssize_t k, best = -1
        for k in range(self.count):
            if self.slots[k].state == POSTED and (best < 0 or self.slots[k].g < self.slots[best].g):
                best = k
        return best

    cdef void spin_for_post(self) noexcept nogil:
        cdef long long start = clock_ns()
        cdef int i
        while clock_ns() - start < SPIN_NS_C:
            for i in range(16):
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

    cdef int wait_done(self, Py_ssize_t k, long long deadline_ns) noexcept nogil:
        """Wait for slot k: 1 done, 0 the deadline passed, -1 no worker is left, -2 closed."""
        cdef long long start = clock_ns()
        cdef int i, answer
        cdef LaneSlot* slot = &self.slots[k]
        while atomic_load(&slot.state) != DONE and clock_ns() - start < SPIN_NS_C:
            if atomic_load(&self.closed):
                break
            for i in range(16):
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



from onemodel_cy import _engine

# A waiting consumer checks for signals (Ctrl-C) this often.
cdef long long SIGNAL_CHECK_NS = 50_000_000


@cython.final
cdef class LaneEngine:
    """A loader's lane: its worker threads and their ring; serves one stream at a time.

    The interface of the thread engine (``_engine._Engine``): ``take``, ``skip``,
    ``fits``, ``reposition``, ``park``, ``signal_close``, ``shutdown``, and ``threads``,
    ``workers``, ``prefetch``, ``persistent``. Driven by the consumer's thread; ``shutdown``
    may come from any thread. Holds the loader weakly, as the thread engine does, and
    what the posted builds read (dataset, collator) strongly.
    """
    cdef readonly str mode
    cdef readonly Py_ssize_t workers, prefetch
    cdef readonly bint persistent, closed
    cdef readonly list threads
    cdef readonly object owner, window, lock
    cdef readonly double join_timeout
    cdef _Lane lane
    cdef object _state                  # RLock over everything below
    cdef object dataset, sampler, collator
    cdef u64 seed64
    cdef Py_ssize_t lo, hi              # this rank's slot range
    cdef list batches, workspaces, steps
    cdef dict errors                    # g -> the exception its build raised
    cdef i64 next_take, next_post
    cdef i64 local_claim, failed_at, limit      # -1: none
    cdef bint shut
    cdef object ended                   # set once shutdown is done
    cdef object __weakref__

    def __init__(self, loader, workers, start, limit, local_first=True):
        self.mode = "thread"
        self.owner = weakref.ref(loader)
        self.workers, self.prefetch = workers, loader.prefetch
        self.persistent = loader.persistent_workers
        self.join_timeout = getattr(loader, "join_timeout", _engine.DEFAULT_JOIN_TIMEOUT)
        self.lock = threading.Lock()
        self.ended = threading.Event()
        self._state = threading.RLock()
        self.dataset, self.sampler, self.collator = loader.dataset, loader.sampler, loader.collator
        self.seed64 = as_u64(loader.seed, "seed")
        self.lo, self.hi = loader._slots
        self.lane = _Lane(self.prefetch)
        self.batches = [None] * self.prefetch
        self.steps = [-1] * self.prefetch
        self.workspaces = [loader._workspace() for _ in range(self.prefetch)]
        self.errors = {}
        self.next_take = start
        self.next_post = start + 1 if local_first else start
        self.local_claim = start if local_first else -1
        self.failed_at = -1
        self.limit = -1 if limit is None else limit
        self.window = PoolWindow.for_stream(self.collator.pool, self.prefetch, workers)
        _engine._live_engines.add(self)
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

    cdef i64 window_end(self):
        cdef i64 end = self.next_take + self.prefetch
        if self.limit >= 0:
            end = min(end, self.limit)
        if self.failed_at >= 0:
            end = min(end, self.failed_at + 1)
        return end

    cdef dispatch(self):
        """(Under _state.) Prepare and post every step of the window not yet posted."""
        loader = self.owner()
        if loader is None or self.closed:
            return
        while self.next_post < self.window_end():
            self.prepare(loader, self.next_post)
            self.next_post += 1

    cdef prepare(self, loader, i64 g):
        """Post step g to the workers; a step that cannot take the lane, or whose
        preparation raises, is built by the loader's own route here (its exception is
        then the one that route raises), and kept for its turn."""
        cdef Py_ssize_t k = g % self.prefetch
        cdef Workspace ws = self.workspaces[k]
        try:
            if self.post(g, k, ws):
                return
        except KeyboardInterrupt:       # the consumer's own Ctrl-C, not the step's
            raise
        except BaseException:
            pass
        try:
            batch = loader._build(g, ws)
            self.window.fit(batch.nbytes)
        except KeyboardInterrupt:
            raise
        except BaseException as error:  # delivered at its step, as the thread engine does
            self.errors[g] = error
            if self.failed_at < 0 or g < self.failed_at:
                self.failed_at = g
            return
        self.batches[k], self.steps[k] = batch, g
        atomic_store(&self.lane.slots[k].state, DONE)

    cdef bint post(self, i64 g, Py_ssize_t k, Workspace ws) except -1:
        """The lane's part of ``DataLoader._build`` + ``build_batch`` for step g: the same
        indices, slot table, layout and block; the workers then fill the block."""
        cdef PackedImages view
        if not (<PackedSource>self.dataset).packed_view(&view):
            return False
        epoch, step = divmod(g, self.sampler.steps_per_epoch)
        count = self.sampler.indices_into(epoch, step, ws.indices)
        cdef Py_ssize_t lo = self.lo, hi = as_index(min(self.hi, count), "stop")   # as build_batch checks it
        if not 0 <= lo < hi <= ws.indices.shape[0]:
            return False                # the loader's route says what is wrong
        cdef u64 epoch64 = as_u64(epoch, "epoch"), step64 = as_u64(step, "step")
        cdef ImageBatchCollator collator = self.collator
        cdef Py_ssize_t shape[2]
        cdef Py_ssize_t total_width
        cdef bint baton = False
        cdef LaneSlot* slot = &self.lane.slots[k]
        collator.claim_workspace(ws)
        try:
            read = gather_packed(ws, &view, <const i64*>cnp.PyArray_DATA(ws.indices), lo, hi, shape)
            (<PackedSource>self.dataset).pixels_read(read)
            block = collator.plan(ws.jobs, hi - lo, shape[0], shape[1], &slot.layout, &total_width)
            batch = batch_in_block(block, &slot.layout, epoch, step, g)
            self.window.fit((<ImageBatch>batch).nbytes)
        except BaseException:
            ws.let_go(hi - lo, &baton)
            raise
        slot.g, slot.jobs, slot.n, slot.first_slot = g, ws.jobs, hi - lo, lo
        slot.data = (<Block>block).data
        slot.kernel = &collator._kernel
        slot.pad = collator.pad_value
        slot.seed, slot.epoch, slot.step = self.seed64, epoch64, step64
        self.batches[k], self.steps[k] = batch, g
        with nogil:
            self.lane.post(k)
        return True

    # -- the consumer ---------------------------------------------------------------------

    def take(self, g, timeout):
        """Step g's batch, waiting for it; raises its build's exception, StopIteration once
        closed, TimeoutError after ``timeout`` seconds (None: wait while a worker lives)."""
        cdef Py_ssize_t k = g % self.prefetch
        cdef long long deadline = -1 if timeout is None else clock_ns() + <long long>(timeout * 1e9)
        cdef long long until
        cdef int answer
        with self._state:
            if self.closed:
                raise StopIteration
            self.dispatch()
            if self.steps[k] != g:
                if g in self.errors:
                    self.next_take = g + 1
                    raise self.errors.pop(g)
                if self.owner() is None:
                    raise RuntimeError(f"the stream's DataLoader was collected: step {g} was never built")
                raise RuntimeError(f"ring slot {k} holds step {self.steps[k]}, expected {g}")   # never
            while True:
                until = clock_ns() + SIGNAL_CHECK_NS
                if deadline >= 0:
                    until = min(until, deadline)
                with nogil:
                    answer = self.lane.wait_done(k, until)
                if answer != 0 or (deadline >= 0 and clock_ns() >= deadline):
                    break
                PyErr_CheckSignals()    # raises what a signal handler raised (KeyboardInterrupt)
            if answer == -2 or self.closed:
                raise StopIteration
            if answer == -1:
                raise RuntimeError(f"every worker thread ended before building step {g}")
            if answer == 0:
                raise TimeoutError(f"no batch for step {g} after {timeout} s (DataLoader timeout)")
            batch = self.hand_out(k)
            self.next_take = g + 1
            self.dispatch()
        return batch

    cdef object hand_out(self, Py_ssize_t k):
        """(Under _state; slot k done, or emptied.) Its batch (or None); the slot and its
        workspace are free again."""
        cdef bint baton = False
        batch, self.batches[k], self.steps[k] = self.batches[k], None, -1
        (<Workspace>self.workspaces[k]).let_go(self.lane.slots[k].n, &baton)
        self.lane.release(k)
        return batch

    def idle(self):
        """True when every worker sleeps, with no step posted or being filled (the state of
        a parked engine once its last posted steps are done; tests check it)."""
        cdef bint answer
        with nogil:
            answer = self.lane.idle()
        return answer

    def ring(self):
        """(For tests.) The step in each slot and its state ("empty", "posted", "building",
        "done"), and the next step the consumer takes."""
        cdef Py_ssize_t k
        names = ("empty", "posted", "building", "done")
        with self._state:
            return ([(self.steps[k], names[atomic_load(&self.lane.slots[k].state)]) for k in range(self.prefetch)],
                    self.next_take)

    def skip(self, g):
        """The consumer built step g, claimed for it, itself: move the window on."""
        with self._state:
            if self.local_claim != g:
                return
            self.local_claim = -1
            self.next_take = g + 1
            self.next_post = max(self.next_post, g + 1)
            self.dispatch()

    def fits(self, workers, prefetch):
        loader = self.owner()
        with self._state:
            return (not self.closed and loader is not None and lane_fits(loader)
                    and workers == self.workers == self.lane.alive and prefetch == self.prefetch)

    def reposition(self, start, limit):
        """Serve steps [start, limit) (as ``_Engine.reposition``): keep what was built when
        already at ``start``, else empty the ring and move. Returns True when ``start``
        was posted to no worker: it is then claimed for the consumer to build."""
        with self._state:
            if start != self.next_take:
                self.drop(start)
            local = self.next_post == start and self.failed_at < 0
            if local:
                self.next_post, self.local_claim = start + 1, start
            self.limit = -1 if limit is None else limit
            if self.failed_at >= 0:
                self.limit = self.failed_at + 1 if limit is None else min(limit, self.failed_at + 1)
            self.dispatch()
        return local

    def park(self, next_g, keep_prefetching):
        """The stream closed at ``next_g`` (as ``_Engine.park``): keep what was built for a
        stream resuming there; a completed epoch pass goes on posting, any other stream's
        steps stop at what was posted; a step claimed for the consumer but not built, or a
        stream that stopped elsewhere, empties the ring."""
        with self._state:
            if self.local_claim >= 0 or next_g != self.next_take:
                self.drop(next_g)
            if keep_prefetching:
                self.limit = -1 if self.failed_at < 0 else self.failed_at + 1
            elif self.failed_at < 0:
                self.limit = self.next_post
            self.dispatch()

    cdef drop(self, i64 start):
        """(Under _state.) Empty the ring (waiting for the slots being filled) and stand at ``start``."""
        with nogil:
            self.lane.empty()
        self.release_all()
        self.next_take = self.next_post = start
        self.local_claim = -1
        self.failed_at = -1

    cdef release_all(self):
        """(Under _state; no slot being filled.) Close every batch the ring holds."""
        cdef Py_ssize_t k
        for k in range(self.prefetch):
            batch = self.hand_out(k)
            if batch is not None:
                batch.close()
        self.errors.clear()

    def signal_close(self):
        """Mark closed and wake every waiter (interpreter exit: workers end, a waiting
        consumer stops). The ring's batches are closed by ``shutdown``, once no worker
        writes them."""
        self.closed = True
        with nogil:
            self.lane.close()
        return []

    def shutdown(self):
        """End the workers: wake them, join them (a fill takes microseconds to
        milliseconds), then close the ring's batches. Idempotent; a second caller waits
        for the first to finish. A worker still filling after ``join_timeout`` (a pack's
        pages read from slow storage) gets a ``StuckWorkerWarning``, and the ring's
        batches stay with the engine, which its thread holds, until the fill ends."""
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
                              _engine.StuckWorkerWarning, stacklevel=3)
                return
            with self._state:
                with nogil:
                    self.lane.empty()
                self.release_all()
        finally:
            self.ended.set()
