"""§4 collation: a slot table of samples into one padded, pooled ``ImageBatch``.

The slot table (``SlotJob`` per slot: pixels, width, target, label, index) is filled by
``collate`` from a list of samples, or by the loader's fetch step (``collate/fetch.pyx``) from a
dataset. ``assemble`` turns it into a batch: the int32 columns, then every image copied
into its padded row block without the GIL; a kernel augmentation (``collate/augment.pxd``) is
fused with that copy. A Python augmentation gets a staged contiguous copy of each image
to edit under the GIL (D17), in parts paced by the loader's baton (``collate/pacing.pyx``), so
another worker's copies overlap this one's Python.

Why one module of about 550 lines (the rule is about 500, docs/architecture.md): it has one
concern, the slot table, and its parts share more than an interface. ``Workspace`` holds
the table and ``fill_slot`` fills it; ``plan``, ``assemble`` and ``augment_staged`` read
and rewrite the workspace's fields in place; and the GIL-free writes (``write_columns``,
``copy_images``) are ``cdef inline`` so that ``assemble`` (0 workers, thread workers) and
``fill_batch`` (the packed lane) each compile them into themselves: out of line they made
the 0-worker route slower (docs/workers.md, "Threads on the packed route"). In another
module they would be called out of line, or, as inline code in its ``.pxd``, need the
knobs below (streaming, prefetch, SIMD cap) passed in as arguments.
"""
cimport cython
cimport numpy as cnp
import threading

import numpy as np
from cpython.ref cimport PyObject
from libc.string cimport memcpy
from libc.stdlib cimport realloc, free

from onemodel_cy.core.typedefs cimport u64, i64, i32
from onemodel_cy.core.validate cimport (add_note, as_index, as_size, as_u64, as_float32, describe, checked_add,
                                        checked_mul)
from onemodel_cy.core.rng cimport SampleRng, derive_seed, STREAM_AUGMENTATION
from onemodel_cy.collate.augment cimport Augmentation, AugmentKernel, store_row, store_row_streamed
from onemodel_cy.augment.program cimport Transform, runs_program
from onemodel_cy.collate.bufferpool cimport BufferPool, Block
from onemodel_cy.collate.batch cimport BatchLayout, ImageBatch, plan_layout, batch_in_block
from onemodel_cy.data.datasets cimport Sample, PIXELS_FLOAT32, PIXELS_GRAY8
from onemodel_cy.collate.pacing cimport Pacing
from onemodel_cy.collate.profile cimport StageClock, clock_ns
from onemodel_cy.data.row cimport convert_image, convert_gray, simd_level, stream_fence, prefetch, prefetch_pages

cnp.import_array()

cdef i64 INT32_END = 1 << 31
# A batch whose images take at least this many bytes is written with streaming stores
# (src/row.h: om_convert_gray for 8-bit pixels with no augmentation, om_store_row_streamed
# for float32 ones, plain or through GainOffset): it outgrows the caches, so reading its
# lines in before writing them only costs. Smaller batches stay in cache, where plain
# stores are faster (docs/performance.md, "Measurements behind the code").
cdef Py_ssize_t STREAM_MIN_BYTES = 2 << 20
STREAMED_BATCH_BYTES = STREAM_MIN_BYTES     # the default, for tests and benchmarks
# The bytes of the next image asked for ahead (src/row.h om_prefetch): its first lines
# start the hardware's stream prefetcher on the rest. Asking for the whole image stalls
# the core once the line-fill buffers are full (docs/performance.md, "Measurements behind
# the code").
cdef Py_ssize_t PREFETCH_BYTES = 512
# The widest SIMD the gray 8-bit kernels may use (src/row.h om_convert_gray: 2
# AVX-512, 1 AVX2, 0 none), and below 1 no float32 streaming stores either (AVX2's); only
# tests lower it, to check every kernel on one machine.
cdef int simd_cap = 2


def streamed_bytes(nbytes=None):
    """The images' bytes from which a batch is written with streaming stores, and with
    ``nbytes`` set it (for tests: 0 streams every batch the rows allow): returns the previous."""
    global STREAM_MIN_BYTES
    if nbytes is None:
        return STREAM_MIN_BYTES
    previous, STREAM_MIN_BYTES = STREAM_MIN_BYTES, as_size(nbytes, "nbytes")
    return previous


def simd_kernels(cap=None):
    """The kernel level of gray 8-bit conversions this CPU runs (2 AVX-512, 1 AVX2, 0 the
    portable loop), and with ``cap`` lower it (for tests): returns the previous cap."""
    global simd_cap
    if cap is None:
        return simd_level()
    previous, simd_cap = simd_cap, as_size(cap, "cap")
    return previous


cdef extern from "Python.h":
    # Py_REFCNT on a borrowed pointer: no temporary reference to count, and valid on
    # free-threaded builds (which have no plain ob_refcnt field).
    Py_ssize_t refcount "Py_REFCNT"(PyObject* o)


# ---------------------------------------------------------------- the workspace

@cython.final
cdef class Workspace:
    """What one building thread reuses from batch to batch (§5).

    The loader makes one per worker (and one for the consumer's thread), with the
    loader's :class:`Pacing`. A workspace is used by one collation at a time.

    Parameters
    ----------
    batch_size : int
        Length of the index array the sampler fills.
    pacing : Pacing, optional
        The baton the loader's workers share; None takes no baton.
    clock : StageClock, optional
        The loader's counters (``DataLoader.profile()``): the Python stages and the copies
        of the batches built with this workspace add their time there; None counts nothing.
    """

    def __cinit__(self):
        self.jobs = NULL
        self.capacity = 0
        self.held = []
        self.keep = []
        self.scratch_pool = BufferPool()

    def __init__(self, batch_size=0, Pacing pacing=None, StageClock clock=None):
        cdef Py_ssize_t n = as_size(batch_size, "batch_size")
        self.indices = np.empty(n, dtype=np.int64)
        self.pacing = pacing
        self.clock = clock

    def __dealloc__(self):
        free(self.jobs)

    def __reduce__(self):
        raise TypeError("a Workspace holds one thread's scratch memory and cannot be pickled")

    cdef SlotJob* reserve(self, Py_ssize_t n) except NULL:
        cdef SlotJob* grown
        if n > self.capacity:
            grown = <SlotJob*>realloc(self.jobs, checked_mul(max(n, 1), sizeof(SlotJob), "the slot table"))
            if grown == NULL:
                raise MemoryError("cannot grow the collation slot table")
            self.jobs = grown
            self.held.extend([None] * (n - self.capacity))
            self.capacity = n
        return self.jobs

    cdef void let_go(self, Py_ssize_t n, bint* baton):
        """End a collation: give the pacing's baton back if ``baton`` is held, and drop
        what the batch held (its first n slots), keeping the lists' capacity: a warm
        collation allocates nothing for them."""
        cdef Py_ssize_t j
        if self.pacing is not None:
            self.pacing.give_back(baton)
        for j in range(min(n, self.capacity)):
            self.held[j] = None
        if self.keep:
            self.keep.clear()
        self.busy = False

    cdef float* stage(self, Py_ssize_t floats) except NULL:
        """The batch's augmentation scratch: room for every slot's image side by side.
        Reused only while no augmentation kept a view of an earlier batch's scratch (a
        kept view keeps its block, which goes back to the pool when the view dies)."""
        cdef Py_ssize_t nbytes = checked_mul(floats, sizeof(float), "the augmentation's staging scratch")
        if (self.scratch is None or self.scratch.raw.capacity < <size_t>nbytes
                or refcount(<PyObject*>self.scratch) > 1):
            self.scratch = None
            self.scratch = self.scratch_pool.rent(nbytes)
        return <float*>self.scratch.data


# ---------------------------------------------------------------- the slot table

cdef int fill_slot(Workspace ws, Py_ssize_t j, object item, i64 index, Py_ssize_t first_slot,
                   Py_ssize_t* shape) except -1:
    """Check ``item`` for slot ``first_slot + j`` and point ``ws.jobs[j]`` at its arrays
    (the caller holds the item until the batch is built). ``shape`` holds C and H of slot 0."""
    cdef Py_ssize_t slot = first_slot + j
    if not isinstance(item, Sample):
        raise TypeError(f"slot {slot} (dataset index {index}): expected a Sample, received {type(item).__name__}")
    cdef Sample sample = <Sample>item
    if not isinstance(sample.image, np.ndarray) or not isinstance(sample.target, np.ndarray):
        raise RuntimeError(f"slot {slot} (dataset index {index}): the Sample was never initialised "
                           f"(build it as Sample(image, target, label))")
    cdef cnp.ndarray image = sample.image
    if cnp.PyArray_TYPE(image) != cnp.NPY_FLOAT32 or cnp.PyArray_NDIM(image) != 3:
        raise TypeError(f"slot {slot} (dataset index {index}): image must be float32 [C, H, W], "
                        f"received {describe(image)}")
    if (not cnp.PyArray_IS_C_CONTIGUOUS(image) or not cnp.PyArray_ISNOTSWAPPED(image)
            or not cnp.PyArray_ISALIGNED(image)):
        image = np.array(image, dtype=np.float32, order="C", copy=True)   # native, aligned, contiguous
        ws.keep.append(image)
    cdef Py_ssize_t c = image.shape[0], h = image.shape[1]
    if j == 0:
        shape[0] = c
        shape[1] = h
    elif c != shape[0] or h != shape[1]:
        raise ValueError(f"slot {slot} (dataset index {index}): every sample of a batch must share C and H; "
                         f"slot {first_slot} has C={shape[0]}, H={shape[1]}, received C={c}, H={h}")
    cdef cnp.ndarray target = sample.target
    if (cnp.PyArray_TYPE(target) != cnp.NPY_INT32 or cnp.PyArray_NDIM(target) != 1
            or not cnp.PyArray_IS_C_CONTIGUOUS(target) or not cnp.PyArray_ISNOTSWAPPED(target)
            or not cnp.PyArray_ISALIGNED(target)):
        raise TypeError(f"slot {slot} (dataset index {index}): the Sample's target was changed in place "
                        f"to {describe(target)}; it must stay a native 1-D int32 array")
    cdef SlotJob* job = &ws.jobs[j]
    job.pixels = <const float*>cnp.PyArray_DATA(image)
    job.kind = PIXELS_FLOAT32
    job.width = image.shape[2]
    job.target = <const i32*>cnp.PyArray_DATA(target)
    job.target_length = target.shape[0]
    job.label = <i32>sample.label
    job.index = index
    return 0


# ---------------------------------------------------------------- GIL-free copies

cdef void fill_batch(const SlotJob* jobs, Py_ssize_t n, char* data, const BatchLayout* layout,
                     const AugmentKernel* kernel, u64 seed, u64 epoch, u64 step, Py_ssize_t first_slot,
                     float pad) noexcept nogil:
    """Everything of a planned batch (``ImageBatchCollator.plan``) but a Python
    augmentation: its columns, then its images. The packed lane's workers run it."""
    write_columns(jobs, n, data, layout)
    copy_images(jobs, n, <float*>data, layout, kernel, seed, epoch, step, first_slot, pad)


cdef inline void write_columns(const SlotJob* jobs, Py_ssize_t n, char* data,
                               const BatchLayout* layout) noexcept nogil:
    """The int32 columns and the concatenated targets (CTC layout)."""
    cdef i32* widths = <i32*>(data + layout.image_bytes)
    cdef i32* target_lengths = widths + layout.column_bytes // sizeof(i32)
    cdef i32* labels = target_lengths + layout.column_bytes // sizeof(i32)
    cdef i32* indices = labels + layout.column_bytes // sizeof(i32)
    cdef i32* targets = <i32*>(data + layout.targets_at)
    cdef Py_ssize_t j, t = 0
    for j in range(n):
        widths[j] = <i32>jobs[j].width
        target_lengths[j] = <i32>jobs[j].target_length
        labels[j] = jobs[j].label
        indices[j] = <i32>jobs[j].index
        memcpy(targets + t, jobs[j].target, jobs[j].target_length * sizeof(i32))
        t += jobs[j].target_length


cdef inline void copy_images(const SlotJob* jobs, Py_ssize_t n, float* images, const BatchLayout* layout,
                             const AugmentKernel* kernel, u64 seed, u64 epoch, u64 step, Py_ssize_t first_slot,
                             float pad) noexcept nogil:
    """Every slot's image into its padded block, through ``kernel`` when it has one."""
    cdef Py_ssize_t j, r, rows = layout.channels * layout.height, padded = layout.padded
    cdef Py_ssize_t slot_floats = rows * padded
    cdef float* dst
    cdef u64 state
    # (An augmentation edits each image right after its conversion, from the cache.)
    cdef bint streamed = kernel.run == NULL and layout.image_bytes >= STREAM_MIN_BYTES, fence = False
    # float32 pixels are streamed by the plain copy and by a kernel that streams (GainOffset).
    cdef bint streamed32 = streamed_float32(layout)
    for j in range(n):
        dst = images + j * slot_floats
        # The start of the next image while this one is written (src/row.h om_prefetch):
        # a batch's images lie scattered, in the sampler's order.
        if j + 1 < n and jobs[j + 1].kind != PIXELS_FLOAT32:
            prefetch(jobs[j + 1].bytes, min(rows * jobs[j + 1].width, PREFETCH_BYTES))
        elif j + 1 < n:
            prefetch(jobs[j + 1].pixels, min(rows * jobs[j + 1].width * <Py_ssize_t>sizeof(float), PREFETCH_BYTES))
        # and, when the batch is streamed into 4 KiB pages, the pages the next image is
        # written to (row.h om_prefetch_pages: their address translations, while this
        # image is written; on huge pages the hint only costs).
        if j + 1 < n and layout.small_pages and (streamed or streamed32):
            prefetch_pages(dst + slot_floats, slot_floats * sizeof(float))
        if jobs[j].kind != PIXELS_FLOAT32:
            # §6 fused with the padding, then the kernel edits the converted image in place
            # while it is still in cache (same float32 operations as on a Sample's image).
            if convert_slot(&jobs[j], layout.channels, layout.height, dst, padded, pad, streamed) == 2:
                fence = True
            if kernel.run != NULL:
                state = derive_seed(seed, epoch, step, <u64>(first_slot + j), STREAM_AUGMENTATION)
                kernel.run(kernel.params, dst, padded, dst, padded, rows, jobs[j].width, padded, pad, &state,
                           False)
        elif kernel.run == NULL:
            for r in range(rows):
                if streamed32:
                    store_row_streamed(jobs[j].pixels + r * jobs[j].width, dst + r * padded, jobs[j].width,
                                       padded, False, 0, 0, pad)
                else:
                    store_row(jobs[j].pixels + r * jobs[j].width, dst + r * padded, jobs[j].width, padded,
                              False, 0, 0, pad)
        else:
            state = derive_seed(seed, epoch, step, <u64>(first_slot + j), STREAM_AUGMENTATION)
            kernel.run(kernel.params, jobs[j].pixels, jobs[j].width, dst, padded, rows, jobs[j].width,
                       padded, pad, &state, streamed32)
    if fence or streamed32:
        stream_fence()


cdef inline bint streamed_float32(const BatchLayout* layout) noexcept nogil:
    """Whether float32 rows of this batch are written with streaming stores (AVX2's, which
    the tests' kernel cap can switch off)."""
    return layout.image_bytes >= STREAM_MIN_BYTES and min(simd_cap, simd_level()) >= 1


cdef inline int convert_slot(const SlotJob* job, Py_ssize_t channels, Py_ssize_t height, float* dst,
                             Py_ssize_t padded, float pad, bint streamed) noexcept nogil:
    """A slot of 8-bit pixels, converted (§6) into planar rows of ``padded`` floats: gray
    through the CPU's SIMD kernel (with streaming stores when ``streamed`` and the rows
    allow), RGB through the portable loop. Returns 2 when it streamed (the caller fences)."""
    if job.kind == PIXELS_GRAY8:
        return convert_gray(job.bytes, height, job.width, job.width, dst, padded, job.convert[0],
                            job.convert[3], pad, streamed, simd_cap)
    # (rows packed: width * channels bytes apart, within the image's validated size)
    convert_image(job.bytes, channels, height, job.width, job.width * channels, dst, padded, job.convert,
                  job.convert + 3, pad)
    return 0


cdef void stage_slots(SlotJob* jobs, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t channels, Py_ssize_t height,
                      float** staged) noexcept nogil:
    """Copy slots [lo, hi) to the staging scratch at staged[0] (advanced past them) and
    point the slot table at the copies (8-bit pixels converted, §6: float32 from then on)."""
    cdef Py_ssize_t j, size, rows = channels * height
    for j in range(lo, hi):
        size = rows * jobs[j].width
        if jobs[j].kind != PIXELS_FLOAT32:
            convert_slot(&jobs[j], channels, height, staged[0], jobs[j].width, 0, False)
            jobs[j].kind = PIXELS_FLOAT32
        else:
            store_row(jobs[j].pixels, staged[0], size, size, False, 0, 0, 0)
        jobs[j].pixels = staged[0]
        staged[0] += size


cdef inline Py_ssize_t part_start(Py_ssize_t n, Py_ssize_t parts, Py_ssize_t part) noexcept nogil:
    """First slot of staging part ``part`` of ``n`` (the first part is never empty)."""
    return (n * part + parts - 1) // parts


# ---------------------------------------------------------------- the collator

cdef class ImageBatchCollator:
    """Builds §4 batches: images ``[B, C, H, Wp]`` left-aligned and padded, plus the int32 columns.

    Parameters
    ----------
    width_multiple : int, default 1
        ``Wp`` is the widest image rounded up to a multiple of this (D13).
    pad_value : float, default 0.0
        Fill of columns ``W_i..Wp`` (rounded to float32).
    augmentation : callable or Augmentation, optional
        ``aug(image, rng)`` editing a contiguous float32 ``[C, H, W_i]`` scratch in place with
        ``rng = SampleRng(derive(seed, epoch, step, slot, 1))``. An :class:`Augmentation`
        with a kernel (:class:`GainOffset`, :class:`GaussianNoise`) runs without the GIL, and
        so does a built-in one of ``onemodel_cy.augment`` that keeps the shape, in a loader
        (``collate`` calls it). It must leave the samples' own arrays alone: some slots are copied only after
        others were augmented.
    pool : BufferPool, optional
        Where batch memory comes from; a private pool by default.

    Notes
    -----
    Thread-safe: each collation uses its own :class:`Workspace` (the loader keeps one per
    worker; ``collate`` without one uses a per-thread workspace of the collator).
    """

    def __init__(self, width_multiple=1, pad_value=0.0, augmentation=None, pool=None):
        if self._claimed:
            raise RuntimeError("ImageBatchCollator.__init__ was already called on this object (workers may be "
                               "using it); build a new one")
        self._claimed = True
        m = as_index(width_multiple, "width_multiple")
        if not 1 <= m < INT32_END:
            raise ValueError(f"width_multiple must be an integer in [1, 2**31), received {m}")
        if augmentation is not None and not callable(augmentation):
            raise TypeError(f"augmentation must be callable as aug(image, rng) or None, "
                            f"received {type(augmentation).__name__}")
        if pool is not None and not isinstance(pool, BufferPool):
            raise TypeError(f"pool must be a BufferPool or None, received {type(pool).__name__}")
        self.width_multiple = m
        self.pad_value = as_float32(pad_value, "pad_value")
        self.augmentation = augmentation
        self._kernel.run = NULL
        if isinstance(augmentation, Augmentation):
            self._kernel = (<Augmentation>augmentation).kernel    # a sealed copy of the parameters
        self._python_augmentation = augmentation is not None and self._kernel.run == NULL
        if runs_program(augmentation):
            (<Transform>augmentation).ready()
            if not (<Transform>augmentation).keeps_shape:
                raise TypeError(f"augmentation {augmentation!r} can change the image's shape: use it as the "
                                f"loader's transform; an augmentation edits the image in place")
            self.program = augmentation
        self.pool = pool if pool is not None else BufferPool()
        self._local = threading.local()

    def __repr__(self):
        return (f"ImageBatchCollator(width_multiple={self.width_multiple}, pad_value={self.pad_value!r}, "
                f"augmentation={self.augmentation!r}, pool={self.pool!r})")

    def __reduce__(self):
        # The pool is this process's memory: a copy gets a private pool of its own.
        if type(self) is not ImageBatchCollator:
            raise TypeError(f"{type(self).__name__} must define __reduce__ to be pickled (the inherited one "
                            f"would rebuild a plain ImageBatchCollator)")
        return (ImageBatchCollator, (self.width_multiple, self.pad_value, self.augmentation))

    cdef Workspace claim_workspace(self, Workspace ws):
        """``ws`` marked busy for one collation; None means this thread's default
        workspace of this collator (a fresh one when a collation on this thread is already
        using it: an augmentation that collates, for instance)."""
        if ws is None:
            ws = getattr(self._local, "workspace", None)
            if ws is None:
                ws = Workspace()
                self._local.workspace = ws
            elif ws.busy:
                ws = Workspace()
        elif ws.busy:
            raise RuntimeError("this Workspace is already in use by a collation (one per thread)")
        ws.busy = True
        return ws

    def collate(self, samples, indices, seed, epoch, step, *, first_slot=0, Workspace workspace=None):
        """Collate ``samples`` (a sequence of :class:`Sample`) into an :class:`ImageBatch`.

        ``indices[j]`` is the dataset index of ``samples[j]``; sample ``j`` sits at slot
        ``first_slot + j`` of the global batch, which keys its augmentation (D14, D17).
        ``epoch`` and ``step`` (the step in the epoch) key the augmentation too.
        """
        # The slot table points into the samples' arrays: hold every sample until the
        # batch is built (a sequence may create its items on access).
        samples = list(samples)
        cdef Py_ssize_t n = len(samples), j
        if len(indices) != n:
            raise ValueError(f"indices must give one dataset index per sample: {n} samples, "
                             f"received {len(indices)} indices")
        if n == 0:
            raise ValueError("cannot collate an empty batch (0 samples)")
        cdef Py_ssize_t first = as_size(first_slot, "first_slot")
        checked_add(first, n, "first_slot + the number of samples")     # every slot number fits
        # Every conversion (which may run user code) before the slot table points anywhere.
        epoch_value, step_value = as_index(epoch, "epoch"), as_index(step, "step")
        cdef u64 seed64 = as_u64(seed, "seed"), epoch64 = as_u64(epoch_value, "epoch")
        cdef u64 step64 = as_u64(step_value, "step")
        index_values = [as_index(indices[j], "every entry of indices") for j in range(n)]
        cdef Workspace ws = self.claim_workspace(workspace)
        cdef Py_ssize_t shape[2]
        cdef bint baton = False
        try:
            ws.reserve(n)
            for j in range(n):
                index = index_values[j]
                if not 0 <= index < INT32_END:
                    raise IndexError(f"slot {first + j}: dataset index must lie in [0, 2**31) "
                                     f"(int32 Indices), received {index}")
                fill_slot(ws, j, samples[j], index, first, shape)
            return self.assemble(ws, n, shape[0], shape[1], seed64, epoch64, step64, epoch_value, step_value,
                                 None, first, False, &baton)
        finally:
            ws.let_go(0, &baton)

    cdef ImageBatch assemble(self, Workspace ws, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                             u64 seed64, u64 epoch64, u64 step64, object epoch_value, object step_value,
                             object global_step, Py_ssize_t first_slot, bint augmented, bint* baton):
        """The batch of the ``n`` slots in ``ws``'s table; gives the baton back (``baton``).
        ``augmented``: a built-in augmentation (``program``) already ran on the table (the
        fetch step's), so only a kernel augmentation is left to run, fused with the copy;
        otherwise ``program`` is called like a Python augmentation (the same bytes).

        Every argument is already converted (the callers convert first, before the slot
        table points anywhere: converting runs user code, ``__index__``)."""
        cdef SlotJob* jobs = ws.jobs
        cdef BatchLayout layout
        cdef Py_ssize_t total_width
        cdef Block block = self.plan(jobs, n, channels, height, &layout, &total_width)
        cdef float* images = <float*>block.data
        cdef Pacing pacing = ws.pacing
        cdef StageClock clock = ws.clock
        cdef i64 started
        with nogil:
            if pacing is not None:
                pacing.give_back(baton)
            write_columns(jobs, n, block.data, &layout)
        if self._python_augmentation and not augmented:
            self.augment_staged(ws, n, channels, height, total_width, seed64, epoch64, step64, first_slot, baton,
                                epoch_value, step_value, global_step)
        with nogil:
            if pacing is not None:
                pacing.give_back(baton)
            started = clock_ns() if clock is not None else 0
            copy_images(jobs, n, images, &layout, &self._kernel, seed64, epoch64, step64, first_slot,
                        self.pad_value)
        if clock is not None:
            clock.copy_ns += clock_ns() - started
        return batch_in_block(block, &layout, epoch_value, step_value, global_step)

    cdef Block plan(self, const SlotJob* jobs, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                    BatchLayout* layout, Py_ssize_t* total_width):
        """The layout of the batch of the ``n`` slots of ``jobs`` (D13's padded width, the
        int32 columns' room), and the pool block it is built in; ``total_width`` gets the
        slots' widths added up."""
        cdef Py_ssize_t j, widest = 0, total_width_sum = 0, total_targets = 0
        for j in range(n):
            widest = max(widest, jobs[j].width)
            total_width_sum = checked_add(total_width_sum, jobs[j].width, "the batch's total width")
            total_targets = checked_add(total_targets, jobs[j].target_length, "the batch's targets")
        cdef Py_ssize_t m = self.width_multiple
        cdef Py_ssize_t padded = checked_add(widest, m - 1, "the padded width") // m * m     # D13
        if padded >= INT32_END or total_targets >= INT32_END:
            raise ValueError(f"a batch's padded width ({padded}) and target count ({total_targets}) "
                             f"must fit int32 (§4 columns)")
        plan_layout(layout, n, channels, height, padded, total_targets)
        total_width[0] = total_width_sum
        cdef Block block = self.pool.rent(layout.nbytes)
        layout.small_pages = block.small_pages
        return block

    cdef augment_staged(self, Workspace ws, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                        Py_ssize_t total_width, u64 seed, u64 epoch, u64 step, Py_ssize_t first_slot,
                        bint* baton, object epoch_value, object step_value, object global_step):
        """Stage every slot in the workspace's scratch and let the Python augmentation edit
        the copies, in the pacing's parts: copy a part without the GIL, take the baton,
        augment it under the GIL, give the baton back for the next part's copy. An exception
        from the augmentation gets the note the fetch step gives one from ``get_sample``."""
        cdef Py_ssize_t rows = channels * height
        cdef float* staged = ws.stage(checked_mul(rows, total_width, "the augmentation's staging scratch"))
        cdef Pacing pacing = ws.pacing
        cdef StageClock clock = ws.clock
        cdef Py_ssize_t parts = 1 if pacing is None else pacing.stage_parts
        cdef Py_ssize_t part, lo, hi, j
        cdef i64 started, copied
        for part in range(parts):
            lo = part_start(n, parts, part)
            hi = part_start(n, parts, part + 1)
            if lo == hi:
                continue
            with nogil:
                if pacing is not None:
                    pacing.give_back(baton)
                started = clock_ns() if clock is not None else 0
                stage_slots(ws.jobs, lo, hi, channels, height, &staged)
                copied = clock_ns() if clock is not None else 0
                if pacing is not None:
                    baton[0] = pacing.take()
            if clock is not None:
                clock.copy_ns += copied - started
                started = clock_ns()     # (after the baton's wait)
            for j in range(lo, hi):
                try:
                    self.augment_slot(ws, &ws.jobs[j], channels, height, seed, epoch, step, first_slot + j)
                except Exception as error:
                    add_note(error, f"onemodel_cy: while building {step_name(global_step, epoch_value, step_value)}, "
                                    f"slot {first_slot + j}, dataset index {ws.jobs[j].index}")
                    raise
            if clock is not None:       # the part's calls, with their scratch views and rngs
                clock.augmentation_ns += clock_ns() - started

    cdef augment_slot(self, Workspace ws, SlotJob* job, Py_ssize_t channels, Py_ssize_t height,
                      u64 seed, u64 epoch, u64 step, Py_ssize_t slot):
        """Let the augmentation edit the slot's staged copy (``job.pixels``) in place."""
        cdef Py_ssize_t width = job.width
        cdef float* data = <float*>job.pixels
        cdef cnp.npy_intp dims[3]
        dims[0] = channels
        dims[1] = height
        dims[2] = width
        cdef cnp.ndarray scratch = cnp.PyArray_SimpleNewFromData(3, dims, cnp.NPY_FLOAT32, data)
        cnp.set_array_base(scratch, ws.scratch)
        cdef SampleRng rng = SampleRng.__new__(SampleRng)
        rng._state = derive_seed(seed, epoch, step, <u64>slot, STREAM_AUGMENTATION)
        result = self.augmentation(scratch, rng)
        if result is not None and result is not scratch:
            raise TypeError(f"slot {slot} (dataset index {job.index}): the augmentation must edit its "
                            f"scratch in place and return None, received a {type(result).__name__}; "
                            f"shape-changing work belongs in the loader's transform")
        cdef cnp.npy_intp* now = cnp.PyArray_DIMS(scratch)
        if (cnp.PyArray_TYPE(scratch) != cnp.NPY_FLOAT32 or cnp.PyArray_NDIM(scratch) != 3
                or now[0] != channels or now[1] != height or now[2] != width
                or <float*>cnp.PyArray_DATA(scratch) != data):
            raise ValueError(f"slot {slot} (dataset index {job.index}): the augmentation changed its scratch "
                             f"from float32 {(channels, height, width)} to {describe(scratch)}; it may "
                             f"only edit values (use the loader's transform to change shapes)")


cdef str step_name(global_step, epoch, step):
    if global_step is None:
        return f"epoch {epoch}, step {step}"
    return f"global step {global_step} (epoch {epoch}, step {step})"
