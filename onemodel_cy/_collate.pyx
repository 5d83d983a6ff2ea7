"""§4 collation: samples of one C and H into a padded, pooled ``ImageBatch``.

The copy, the padding and the built-in augmentations run without the GIL. A Python
augmentation gets a reused contiguous scratch copy of each image (D17); a built-in one
is applied to the image in place in the batch, which performs the same float32
operations in the same order, hence the same bits.

With several worker threads, only the Python parts of a batch (``get_sample``, the
transform, a Python augmentation) need the GIL. They run as whole phases between copies
that do not, and a per-collator baton lets one thread run its Python phase while the
others copy (see ``om_baton_take``), instead of trading the GIL at every numpy call.
"""
import threading

cimport cython
cimport numpy as cnp
import numpy as np
from cpython.ref cimport PyObject
from libc.string cimport memcpy
from libc.stdlib cimport realloc, free

from onemodel_cy._typedefs cimport u64, i64, i32
from onemodel_cy._validate cimport as_index, as_u64
from onemodel_cy._rng cimport (derive_seed, draw_single, draw_normal,
                               STREAM_TRANSFORM, STREAM_AUGMENTATION)
from onemodel_cy._rng cimport SampleRng
from onemodel_cy._bufferpool cimport BufferPool, Block, POOL_ALIGN
from onemodel_cy._datasets cimport Sample, ArrayImageDataset

cnp.import_array()

cdef object INT32_LIMIT = 1 << 31
cdef i64 INT32_END = 1 << 31          # the same bound for C integers (no Python int per test)
# How long a thread waits for the Python-stage baton before going ahead without it: longer
# than the Python stage of a typical batch (0.1-0.6 ms for the §7 workload; a 0.1 ms wait
# gave up too early and lost the gain, 0.3-3 ms measured alike).
cdef long long BATON_WAIT_NS = 1000000
# A Python augmentation stages and augments a batch in this many parts: with two, the
# Python and the copy phases of two workers come out of similar length and interleave
# (measured: 2 parts about 8-13 % faster than 1 at 2 workers, 3 parts no better).
cdef Py_ssize_t STAGE_PARTS = 2

cdef extern from "Python.h":
    # Py_REFCNT on a borrowed pointer: no temporary reference to count, and valid on
    # free-threaded builds (which have no plain ob_refcnt field).
    Py_ssize_t refcount "Py_REFCNT"(PyObject* o)


cdef extern from *:
    """
    #if defined(__GNUC__) && __GNUC__ >= 12 && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    /* An AVX2 clone where the CPU has it, chosen at load time: no -march flag, and the
       same IEEE float32 multiply and add per lane (AVX2 alone brings no FMA). */
    #define OM_CLONES __attribute__((target_clones("avx2", "default")))
    #else
    #define OM_CLONES
    #endif

    /* One batch row in one pass: the pixels (x * g + o when scaling, two float32
       roundings, never fused: -ffp-contract=off), then the padding. The plain copy is a
       loop too: inlined and vectorised it beats a memcpy call on rows of a few hundred
       bytes (measured with benchmarks/bench_collate.py). */
    OM_CLONES static void om_store_row(const float* src, float* dst, Py_ssize_t width,
                                       Py_ssize_t padded, int scale, float g, float o, float pad) {
        Py_ssize_t x;
        if (scale) {
            for (x = 0; x < width; x++) dst[x] = src[x] * g + o;
        } else {
            for (x = 0; x < width; x++) dst[x] = src[x];
        }
        for (x = width; x < padded; x++) dst[x] = pad;
    }

    /* The Python-stage baton of a collator. Under the GIL, two workers that both run
       Python hand the GIL back and forth at every numpy call, and each hand-over wakes a
       sleeping thread (tens of microseconds on a virtual machine). A worker about to run
       the Python part of a batch (get_sample, a Python augmentation) first takes the
       baton, waiting for it by spinning without the GIL; the worker that leaves its
       Python part for a copy passes it on. So one worker runs Python while the others
       copy, and the GIL changes hands about once per phase. The baton is a hint: a
       waiter that does not get it within max_ns goes ahead (a dataset blocked in I/O
       holds it; the others must still make progress), and it does nothing where the GIL
       is disabled. */
    #include <time.h>
    #include <sched.h>
    #if defined(__GNUC__) && !defined(Py_GIL_DISABLED)
    static inline int om_baton_try(int* baton) {
        return __atomic_exchange_n(baton, 1, __ATOMIC_ACQUIRE) == 0;
    }
    static inline int om_baton_held(int* baton) { return __atomic_load_n(baton, __ATOMIC_RELAXED); }
    static inline void om_baton_release(int* baton) { __atomic_store_n(baton, 0, __ATOMIC_RELEASE); }
    #define OM_BATON 1
    #else
    static inline int om_baton_try(int* baton) { (void)baton; return 0; }
    static inline void om_baton_release(int* baton) { (void)baton; }
    #define OM_BATON 0
    #endif

    static inline void om_pause(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #endif
    }

    /* 1 once the baton is taken, 0 when max_ns ran out first. Spins, yielding the CPU
       every few microseconds to any other runnable thread. */
    static int om_baton_take(int* baton, long long max_ns) {
    #if OM_BATON
        struct timespec start, now;
        int k;
        if (om_baton_try(baton)) return 1;
        clock_gettime(CLOCK_MONOTONIC, &start);
        for (;;) {
            for (k = 0; k < 256; k++) {
                if (!om_baton_held(baton) && om_baton_try(baton)) return 1;
                om_pause();
            }
            clock_gettime(CLOCK_MONOTONIC, &now);
            if ((now.tv_sec - start.tv_sec) * 1000000000LL + (now.tv_nsec - start.tv_nsec) > max_ns) return 0;
            sched_yield();
        }
    #else
        (void)baton; (void)max_ns;
        return 0;
    #endif
    }
    """
    bint baton_try "om_baton_try"(int* baton) noexcept nogil
    void baton_release "om_baton_release"(int* baton) noexcept nogil
    bint baton_take "om_baton_take"(int* baton, long long max_ns) noexcept nogil
    void store_row "om_store_row"(const float* src, float* dst, Py_ssize_t width, Py_ssize_t padded,
                                  bint scale, float g, float o, float pad) noexcept nogil


# ---------------------------------------------------------------- augmentations

cdef class Augmentation:
    """Base of the built-in augmentations: GIL-free, and callable as ``aug(image, rng)``.

    A subclass implements ``copy_apply``: read ``rows`` rows of ``width`` pixels from
    ``src`` (rows ``src_stride`` apart), write the augmented pixels to ``dst`` (rows
    ``dst_stride`` apart) followed by ``pad`` up to ``padded``. ``src == dst`` with
    ``padded == width`` edits in place; since both routes run the same float32 operations
    in the same order, fusing the copy changes no bit.
    """

    cdef void copy_apply(self, const float* src, Py_ssize_t src_stride, float* dst, Py_ssize_t dst_stride,
                         Py_ssize_t rows, Py_ssize_t width, Py_ssize_t padded, float pad,
                         u64* state) noexcept nogil:
        pass

    def __call__(self, image, SampleRng rng not None):
        """Edit ``image`` (writable C-contiguous float32 ``[C, H, W]``) in place, drawing from ``rng``."""
        if type(self) not in BUILTIN_AUGMENTATIONS:
            raise NotImplementedError(f"{type(self).__name__} must define __call__(image, rng); only the "
                                      f"built-in augmentations have a GIL-free kernel")
        if (not isinstance(image, np.ndarray) or image.dtype != np.float32 or image.ndim != 3
                or not image.flags.c_contiguous or not image.flags.writeable):
            raise TypeError(f"{type(self).__name__} edits a writable C-contiguous float32 [C, H, W] "
                            f"array, received {_describe(image)}")
        cdef cnp.ndarray array = image
        cdef Py_ssize_t rows = array.shape[0] * array.shape[1], width = array.shape[2]
        cdef float* data = <float*>cnp.PyArray_DATA(array)
        cdef u64 state = rng._state
        with nogil:
            self.copy_apply(data, width, data, width, rows, width, width, 0, &state)
        rng._state = state


@cython.final
cdef class GainOffset(Augmentation):
    """Per-image gain and offset: ``x * g + o`` in float32 (docs/contract.md).

    ``g = 1 + gain * (2a - 1)`` and ``o = offset * (2b - 1)`` from two ``next_single``
    draws ``a``, ``b``, each operation rounded to float32; then every pixel, in C, H, W
    order, becomes ``(x * g) + o`` with two roundings.

    Parameters
    ----------
    gain, offset : float
        Half-widths of the uniform gain and offset ranges (rounded to float32).
    """
    cdef readonly float gain, offset

    def __init__(self, gain=0.2, offset=0.1):
        self.gain = _finite(gain, "gain")
        self.offset = _finite(offset, "offset")

    def __repr__(self):
        return f"GainOffset(gain={self.gain!r}, offset={self.offset!r})"

    def __reduce__(self):
        return (GainOffset, (self.gain, self.offset))

    cdef void copy_apply(self, const float* src, Py_ssize_t src_stride, float* dst, Py_ssize_t dst_stride,
                         Py_ssize_t rows, Py_ssize_t width, Py_ssize_t padded, float pad,
                         u64* state) noexcept nogil:
        cdef float one = 1.0, two = 2.0
        cdef float a = draw_single(state)
        cdef float b = draw_single(state)
        cdef float g = one + self.gain * (two * a - one)
        cdef float o = self.offset * (two * b - one)
        cdef Py_ssize_t r
        for r in range(rows):
            store_row(src + r * src_stride, dst + r * dst_stride, width, padded, True, g, o, pad)


@cython.final
cdef class GaussianNoise(Augmentation):
    """Additive noise: every pixel, in C, H, W order, becomes ``x + sigma * next_normal()`` in float32.

    Parameters
    ----------
    sigma : float
        Noise scale (rounded to float32).
    """
    cdef readonly float sigma

    def __init__(self, sigma=0.05):
        self.sigma = _finite(sigma, "sigma")

    def __repr__(self):
        return f"GaussianNoise(sigma={self.sigma!r})"

    def __reduce__(self):
        return (GaussianNoise, (self.sigma,))

    cdef void copy_apply(self, const float* src, Py_ssize_t src_stride, float* dst, Py_ssize_t dst_stride,
                         Py_ssize_t rows, Py_ssize_t width, Py_ssize_t padded, float pad,
                         u64* state) noexcept nogil:
        # Twelve draws per pixel make this compute-bound: plain stores.
        cdef Py_ssize_t r, x
        cdef float* row
        for r in range(rows):
            row = dst + r * dst_stride
            for x in range(width):
                row[x] = src[r * src_stride + x] + self.sigma * draw_normal(state)
            for x in range(width, padded):
                row[x] = pad


# Exactly these types run their kernel without the GIL; a Python subclass of
# Augmentation is an ordinary callable.
BUILTIN_AUGMENTATIONS = (GainOffset, GaussianNoise)


cdef float _finite(value, str name) except? -1:
    """``value`` rounded to float32, refused unless finite there (1e39 would round to inf)."""
    cdef float v
    try:
        v = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, received {value!r}") from None
    if v != v or v - v != 0:
        raise ValueError(f"{name} must be a finite float32 number, received {value!r}")
    return v


cdef str _describe(obj):
    if isinstance(obj, np.ndarray):
        return (f"ndarray of dtype={obj.dtype}, shape={obj.shape}, "
                f"c_contiguous={obj.flags.c_contiguous}, writeable={obj.flags.writeable}")
    return f"{type(obj).__name__}"


# ---------------------------------------------------------------- the batch

@cython.final
@cython.freelist(32)
cdef class ImageBatch:
    """One collated batch (§4). Arrays are views of one pooled block (§5).

    Attributes
    ----------
    images : float32 ``[B, C, H, Wp]``
    widths, target_lengths, labels, indices : int32 ``[B]``
    targets : int32 ``[sum(target_lengths)]`` (the CTC layout)
    epoch, step : int
        Epoch and step-in-epoch the batch was built for.
    global_step : int or None
        Set by the loader.

    ``close()`` (or leaving ``with batch:``) drops the batch's arrays; the memory goes
    back to the pool as soon as nothing else refers to it. Arrays you kept stay valid and
    are never overwritten.
    """
    cdef object _images, _widths, _targets, _target_lengths, _labels, _indices
    cdef readonly object epoch, step
    cdef public object global_step

    cdef _check_open(self):
        if self._images is None:
            raise ValueError("this ImageBatch is closed; keep a reference to an array "
                             "(for example images = batch.images) before close() to use it after")

    @property
    def closed(self):
        return self._images is None

    @property
    def nbytes(self):
        """Bytes of the pooled block this batch's arrays live in."""
        self._check_open()
        return (<Block>self._images.base).nbytes

    @property
    def images(self):
        self._check_open()
        return self._images

    @property
    def widths(self):
        self._check_open()
        return self._widths

    @property
    def targets(self):
        self._check_open()
        return self._targets

    @property
    def target_lengths(self):
        self._check_open()
        return self._target_lengths

    @property
    def labels(self):
        self._check_open()
        return self._labels

    @property
    def indices(self):
        self._check_open()
        return self._indices

    def __len__(self):
        self._check_open()
        return self._widths.shape[0]

    def close(self):
        """Release the batch's arrays (idempotent)."""
        self._images = self._widths = self._targets = None
        self._target_lengths = self._labels = self._indices = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def as_dict(self):
        """The six arrays by name."""
        self._check_open()
        return {"images": self._images, "widths": self._widths, "targets": self._targets,
                "target_lengths": self._target_lengths, "labels": self._labels,
                "indices": self._indices}

    def __repr__(self):
        if self._images is None:
            return f"ImageBatch(closed, epoch={self.epoch}, step={self.step})"
        return (f"ImageBatch(images=<float32 {tuple(self._images.shape)}>, targets={self._targets.shape[0]}, "
                f"epoch={self.epoch}, step={self.step})")


# ---------------------------------------------------------------- collation

ctypedef struct SlotJob:
    const float* pixels     # C-contiguous [C, H, W]
    const i32* target
    Py_ssize_t width
    Py_ssize_t target_length
    i32 label
    i64 index


@cython.final
cdef class _Workspace:
    """Per-thread scratch of a collator: the slot table, what it points into, and the
    augmentation's staging scratch (from a private pool, so it never counts against the
    batches' window)."""
    cdef SlotJob* jobs
    cdef Py_ssize_t capacity
    cdef Block scratch                 # staging of a batch's images, reused while nobody else holds it
    cdef BufferPool scratch_pool
    cdef list held                     # slot j's sample, while the slot table points into it
    cdef list keep                     # contiguous copies the slot table points into
    cdef bint busy                     # in use by a collation on this thread

    def __cinit__(self):
        self.jobs = NULL
        self.capacity = 0
        self.held = []
        self.keep = []
        self.scratch_pool = BufferPool()

    def __dealloc__(self):
        free(self.jobs)

    cdef SlotJob* reserve(self, Py_ssize_t n) except NULL:
        cdef SlotJob* grown
        if n > self.capacity:
            grown = <SlotJob*>realloc(self.jobs, max(n, 1) * sizeof(SlotJob))
            if grown == NULL:
                raise MemoryError("cannot grow the collation slot table")
            self.jobs = grown
            self.held.extend([None] * (n - self.capacity))
            self.capacity = n
        return self.jobs

    cdef void let_go(self, Py_ssize_t n):
        """Drop what the last batch held (its first n slots), keeping the lists' capacity:
        a warm collation allocates nothing for them."""
        cdef Py_ssize_t j
        for j in range(min(n, self.capacity)):
            self.held[j] = None
        if self.keep:
            self.keep.clear()

    cdef float* stage(self, Py_ssize_t floats) except NULL:
        """The batch's augmentation scratch: room for every slot's image side by side.
        Reused only while no augmentation kept a view of an earlier batch's scratch (a
        kept view keeps its block, which goes back to the pool when the view dies)."""
        if (self.scratch is None or self.scratch.raw.capacity < floats * sizeof(float)
                or refcount(<PyObject*>self.scratch) > 1):
            self.scratch = None
            self.scratch = self.scratch_pool.rent(floats * sizeof(float))
        return <float*>self.scratch.data

    cdef cnp.ndarray scratch_view(self, float* at, Py_ssize_t c, Py_ssize_t h, Py_ssize_t w):
        cdef cnp.npy_intp dims[3]
        dims[0] = c
        dims[1] = h
        dims[2] = w
        cdef cnp.ndarray view = cnp.PyArray_SimpleNewFromData(3, dims, cnp.NPY_FLOAT32, at)
        cnp.set_array_base(view, self.scratch)
        return view


cdef inline Py_ssize_t aligned(Py_ssize_t nbytes) noexcept nogil:
    return (nbytes + POOL_ALIGN - 1) // POOL_ALIGN * POOL_ALIGN


cdef cnp.ndarray view_of(Block block, Py_ssize_t offset, int typenum, int ndim, cnp.npy_intp* dims):
    cdef cnp.ndarray array = cnp.PyArray_SimpleNewFromData(ndim, dims, typenum, block.data + offset)
    cnp.set_array_base(array, block)
    return array


cdef void copy_padded(const float* src, float* dst, Py_ssize_t rows, Py_ssize_t width,
                      Py_ssize_t padded_width, float pad) noexcept nogil:
    cdef Py_ssize_t r
    for r in range(rows):
        store_row(src + r * width, dst + r * padded_width, width, padded_width, False, 0, 0, pad)


cdef inline Py_ssize_t part_start(Py_ssize_t n, Py_ssize_t part) noexcept nogil:
    """First slot of staging part ``part`` of ``n`` (the first part is never empty)."""
    return (n * part + STAGE_PARTS - 1) // STAGE_PARTS


cdef void stage_slots(SlotJob* jobs, Py_ssize_t lo, Py_ssize_t hi, Py_ssize_t rows, float** staged) noexcept nogil:
    """Copy slots [lo, hi) to the staging scratch at staged[0] (advanced past them) and
    point the slot table at the copies."""
    cdef Py_ssize_t j, size
    for j in range(lo, hi):
        size = rows * jobs[j].width
        store_row(jobs[j].pixels, staged[0], size, size, False, 0, 0, 0)
        jobs[j].pixels = staged[0]
        staged[0] += size


cdef slot_range(cnp.ndarray indices, start, stop, Py_ssize_t* lo, Py_ssize_t* hi):
    """Check a global batch's index array and the slots ``[start, stop)`` taken from it."""
    if indices.dtype != np.int64 or indices.ndim != 1 or not indices.flags.c_contiguous:
        raise TypeError(f"indices must be a C-contiguous 1-D int64 array, received {_describe(indices)}")
    lo[0] = as_index(start, "start")
    hi[0] = indices.shape[0] if stop is None else as_index(stop, "stop")
    if not 0 <= lo[0] < hi[0] <= indices.shape[0]:
        raise ValueError(f"need 0 <= start < stop <= len(indices) = {indices.shape[0]}, "
                         f"received start={lo[0]}, stop={hi[0]}")


cdef str _step_name(global_step, epoch, step):
    if global_step is None:
        return f"epoch {epoch}, step {step}"
    return f"global step {global_step} (epoch {epoch}, step {step})"


cdef fill_job(_Workspace ws, SlotJob* jobs, Py_ssize_t j, item, i64 index, Py_ssize_t first_slot,
              Py_ssize_t* shape):
    """Check ``item`` for slot ``first_slot + j`` and point ``jobs[j]`` at its arrays
    (held by the caller until the batch is built). ``shape`` holds C and H of slot 0."""
    cdef Py_ssize_t slot = first_slot + j
    if not isinstance(item, Sample):
        raise TypeError(f"slot {slot} (dataset index {index}): expected a Sample, received {type(item).__name__}")
    cdef Sample sample = <Sample>item
    if not isinstance(sample.image, np.ndarray):
        raise TypeError(f"slot {slot} (dataset index {index}): the Sample was never initialised "
                        f"(build it as Sample(image, target, label))")
    cdef cnp.ndarray image = sample.image
    if cnp.PyArray_TYPE(image) != cnp.NPY_FLOAT32 or cnp.PyArray_NDIM(image) != 3:
        raise TypeError(f"slot {slot} (dataset index {index}): image must be float32 [C, H, W], "
                        f"received {_describe(image)}")
    if not cnp.PyArray_IS_C_CONTIGUOUS(image) or not cnp.PyArray_ISNOTSWAPPED(image):
        image = np.ascontiguousarray(image, dtype=np.float32)
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
            or not cnp.PyArray_IS_C_CONTIGUOUS(target) or not cnp.PyArray_ISNOTSWAPPED(target)):
        raise TypeError(f"slot {slot} (dataset index {index}): the Sample's target was changed in place "
                        f"to {_describe(target)}; it must stay a native 1-D int32 array")
    jobs[j].pixels = <const float*>cnp.PyArray_DATA(image)
    jobs[j].width = image.shape[2]
    jobs[j].target = <const i32*>cnp.PyArray_DATA(target)
    jobs[j].target_length = target.shape[0]
    jobs[j].label = <i32>sample.label
    jobs[j].index = index


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
        ``rng = SampleRng(derive(seed, epoch, step, slot, 1))``. Built-ins
        (:class:`GainOffset`, :class:`GaussianNoise`) run without the GIL. It must leave
        the samples' own arrays alone: some slots are copied only after others were
        augmented.
    pool : BufferPool, optional
        Where batch memory comes from; a private pool by default.

    Notes
    -----
    Thread-safe: each thread collates in its own workspace. Threads that share a collator
    take turns for their Python phases (the baton); a thread never waits more than 1 ms
    for its turn, so a ``get_sample`` blocked in I/O does not hold the others back.
    """
    cdef readonly Py_ssize_t width_multiple
    cdef readonly float pad_value
    cdef readonly object augmentation
    cdef readonly BufferPool pool
    cdef Augmentation _builtin
    cdef object _local
    cdef readonly int _baton            # 1 while a thread runs the Python stage of a batch

    def __init__(self, width_multiple=1, pad_value=0.0, augmentation=None, pool=None):
        m = as_index(width_multiple, "width_multiple")
        if not 1 <= m < INT32_LIMIT:
            raise ValueError(f"width_multiple must be an integer in [1, 2**31), received {m}")
        self.width_multiple = m
        self.pad_value = _finite(pad_value, "pad_value")
        if augmentation is not None and not callable(augmentation):
            raise TypeError(f"augmentation must be callable as aug(image, rng) or None, "
                            f"received {type(augmentation).__name__}")
        self.augmentation = augmentation
        self._builtin = augmentation if type(augmentation) in BUILTIN_AUGMENTATIONS else None
        if pool is not None and not isinstance(pool, BufferPool):
            raise TypeError(f"pool must be a BufferPool or None, received {type(pool).__name__}")
        self.pool = pool if pool is not None else BufferPool()
        self._local = threading.local()

    def __repr__(self):
        return (f"ImageBatchCollator(width_multiple={self.width_multiple}, pad_value={self.pad_value!r}, "
                f"augmentation={self.augmentation!r}, pool={self.pool!r})")

    cdef _Workspace acquire_workspace(self):
        """This thread's workspace, or a fresh one when a collation on this thread is
        already using it (an augmentation that collates, for instance)."""
        cdef _Workspace ws = getattr(self._local, "workspace", None)
        if ws is None:
            ws = _Workspace()
            self._local.workspace = ws
        elif ws.busy:
            ws = _Workspace()
        ws.busy = True
        return ws

    def collate(self, samples, indices, seed, epoch, step, *, first_slot=0):
        """Collate ``samples`` (a sequence of :class:`Sample`) into an :class:`ImageBatch`.

        ``indices[j]`` is the dataset index of ``samples[j]``; sample ``j`` sits at slot
        ``first_slot + j`` of the global batch, which keys its augmentation (D14, D17).
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
        cdef Py_ssize_t first = as_index(first_slot, "first_slot")
        cdef _Workspace ws = self.acquire_workspace()
        cdef SlotJob* jobs
        cdef Py_ssize_t shape[2]
        cdef bint baton = False
        try:
            jobs = ws.reserve(n)
            for j in range(n):
                index = as_index(indices[j], "every entry of indices")
                if not 0 <= index < INT32_LIMIT:
                    raise ValueError(f"slot {first + j}: dataset index must lie in [0, 2**31) "
                                     f"(int32 Indices), received {index}")
                fill_job(ws, jobs, j, samples[j], index, first, shape)
            return self.assemble(ws, n, shape[0], shape[1], seed, epoch, step, first, &baton)
        finally:
            if baton:
                baton_release(&self._baton)
            ws.let_go(0)
            ws.busy = False

    def collate_dataset(self, dataset, cnp.ndarray indices not None, seed, epoch, step, *, start=0,
                        stop=None, transform=None, global_step=None):
        """Generic path: build slots ``[start, stop)`` of the global batch ``indices`` from
        ``dataset.get_sample(i)``, in one loop in C.

        Each sample passes through ``transform(sample, rng)`` when one is given, with
        ``rng = SampleRng(derive(seed, epoch, step, slot, 0))`` (D12). An exception from
        either gets a note naming the step, slot and dataset index (``global_step`` too,
        when given) and propagates unchanged.
        """
        cdef Py_ssize_t lo, hi
        slot_range(indices, start, stop, &lo, &hi)
        if transform is not None and not callable(transform):
            raise TypeError(f"transform must be callable as transform(sample, rng) or None, "
                            f"received {type(transform).__name__}")
        get_sample = getattr(dataset, "get_sample", None)
        if not callable(get_sample):
            raise TypeError(f"dataset must provide get_sample(index) -> Sample, received "
                            f"{type(dataset).__name__}")
        cdef u64 seed64 = as_u64(seed, "seed"), epoch64 = as_u64(epoch, "epoch"), step64 = as_u64(step, "step")
        cdef const i64* idx = <const i64*>cnp.PyArray_DATA(indices)
        cdef Py_ssize_t n = hi - lo, j, slot
        cdef i64 index
        cdef SampleRng rng
        cdef _Workspace ws = self.acquire_workspace()
        cdef SlotJob* jobs
        cdef Py_ssize_t shape[2]
        cdef bint baton = baton_try(&self._baton)
        try:
            if not baton:
                with nogil:
                    baton = baton_take(&self._baton, BATON_WAIT_NS)
            jobs = ws.reserve(n)
            for j in range(n):
                slot = lo + j
                index = idx[slot]
                if not 0 <= index < INT32_END:
                    raise ValueError(f"slot {slot}: dataset index must lie in [0, 2**31) "
                                     f"(int32 Indices), received {index}")
                try:
                    item = get_sample(index)
                    if transform is not None:
                        rng = SampleRng.__new__(SampleRng)
                        rng._state = derive_seed(seed64, epoch64, step64, <u64>slot, STREAM_TRANSFORM)
                        item = transform(item, rng)
                except BaseException as error:
                    if isinstance(error, Exception):
                        error.add_note(f"onemodel_cy: while building {_step_name(global_step, epoch, step)}, "
                                       f"slot {slot}, dataset index {index}")
                    raise
                if not isinstance(item, Sample):
                    source = "the transform" if transform is not None else "dataset.get_sample"
                    raise TypeError(f"{_step_name(global_step, epoch, step)}, slot {slot}, dataset index {index}: "
                                    f"{source} returned {type(item).__name__}; a Sample(image, target, label) "
                                    f"is required")
                ws.held[j] = item
                fill_job(ws, jobs, j, item, index, lo, shape)
            return self.assemble(ws, n, shape[0], shape[1], seed, epoch, step, lo, &baton)
        finally:
            if baton:
                baton_release(&self._baton)
            ws.let_go(n)
            ws.busy = False

    def collate_from(self, ArrayImageDataset dataset not None, cnp.ndarray indices not None, seed, epoch,
                     step, *, start=0, stop=None):
        """Fast path: gather slots ``[start, stop)`` of ``indices`` straight from ``dataset``.

        ``indices`` is the global batch's int64 index array; slot numbers are positions in
        it. No Python object is created per sample; with a built-in or no augmentation
        the whole batch is built without the GIL.
        """
        cdef Py_ssize_t lo, hi
        slot_range(indices, start, stop, &lo, &hi)
        cdef Py_ssize_t n = hi - lo, j, bad = -1
        cdef const i64* idx = <const i64*>cnp.PyArray_DATA(indices) + lo
        cdef const i64* shapes = <const i64*>cnp.PyArray_DATA(dataset._shapes)
        cdef const i64* pixel_offsets = <const i64*>cnp.PyArray_DATA(dataset._pixel_offsets)
        cdef const i64* target_offsets = <const i64*>cnp.PyArray_DATA(dataset._target_offsets)
        cdef const float* pixels = <const float*>cnp.PyArray_DATA(dataset._pixels)
        cdef const i32* targets = <const i32*>cnp.PyArray_DATA(dataset._targets)
        cdef const i32* labels = <const i32*>cnp.PyArray_DATA(dataset._labels)
        cdef Py_ssize_t count = dataset.count
        cdef i64 i
        cdef bint out_of_range = False
        cdef SlotJob* jobs
        if count >= INT32_LIMIT:
            raise ValueError(f"dataset indices must fit int32 (§4 Indices), the dataset has {count} samples")
        cdef _Workspace ws = self.acquire_workspace()
        cdef bint baton = False
        try:
            jobs = ws.reserve(n)
            with nogil:
                for j in range(n):
                    i = idx[j]
                    if not 0 <= i < count:
                        bad = j
                        out_of_range = True
                        break
                    if shapes[3 * i] != shapes[3 * idx[0]] or shapes[3 * i + 1] != shapes[3 * idx[0] + 1]:
                        bad = j
                        break
                    jobs[j].pixels = pixels + pixel_offsets[i]
                    jobs[j].width = shapes[3 * i + 2]
                    jobs[j].target = targets + target_offsets[i]
                    jobs[j].target_length = target_offsets[i + 1] - target_offsets[i]
                    jobs[j].label = labels[i]
                    jobs[j].index = i
            if bad >= 0:
                if out_of_range:
                    raise IndexError(f"slot {lo + bad}: dataset index must lie in [0, {count}), "
                                     f"received {idx[bad]}")
                raise ValueError(
                    f"slot {lo + bad} (dataset index {idx[bad]}): every sample of a batch must share C and H; "
                    f"slot {lo} has C={shapes[3 * idx[0]]}, H={shapes[3 * idx[0] + 1]}, received "
                    f"C={shapes[3 * idx[bad]]}, H={shapes[3 * idx[bad] + 1]}")
            return self.assemble(ws, n, shapes[3 * idx[0]], shapes[3 * idx[0] + 1], seed, epoch, step, lo,
                                 &baton)
        finally:
            if baton:
                baton_release(&self._baton)
            ws.busy = False

    cdef ImageBatch assemble(self, _Workspace ws, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                             seed, epoch, step, Py_ssize_t first_slot, bint* baton):
        cdef u64 seed64 = as_u64(seed, "seed"), epoch64 = as_u64(epoch, "epoch"), step64 = as_u64(step, "step")
        cdef SlotJob* jobs = ws.jobs
        cdef Py_ssize_t j, widest = 0, total_width = 0, total_targets = 0
        for j in range(n):
            widest = max(widest, jobs[j].width)
            total_width += jobs[j].width
            total_targets += jobs[j].target_length
        cdef Py_ssize_t m = self.width_multiple
        cdef Py_ssize_t padded = (widest + m - 1) // m * m           # D13
        cdef Py_ssize_t rows = channels * height
        cdef Py_ssize_t image_bytes = aligned(n * rows * padded * sizeof(float))
        cdef Py_ssize_t column_bytes = aligned(n * sizeof(i32))
        cdef Py_ssize_t targets_at = image_bytes + 4 * column_bytes
        cdef Block block = self.pool.rent(targets_at + total_targets * sizeof(i32))
        cdef float* images = <float*>block.data
        cdef i32* widths = <i32*>(block.data + image_bytes)
        cdef i32* target_lengths = <i32*>(block.data + image_bytes + column_bytes)
        cdef i32* labels = <i32*>(block.data + image_bytes + 2 * column_bytes)
        cdef i32* indices = <i32*>(block.data + image_bytes + 3 * column_bytes)
        cdef i32* targets = <i32*>(block.data + targets_at)
        cdef Py_ssize_t slot_floats = rows * padded, t = 0
        cdef float pad = self.pad_value
        cdef Augmentation builtin = self._builtin
        cdef bint python_aug = self.augmentation is not None and builtin is None
        cdef u64 state
        # A Python augmentation: the slots are copied to their own stretches of the staging
        # scratch and augmented there (the only part holding the GIL), in STAGE_PARTS
        # parts, then all padded into the batch. Another worker's copies thus overlap this
        # one's Python, and the Python-stage baton passes at each change.
        cdef float* staged = ws.stage(rows * total_width) if python_aug else NULL
        cdef Py_ssize_t part, lo, hi
        with nogil:
            if baton[0]:
                baton_release(&self._baton)
                baton[0] = False
            for j in range(n):
                widths[j] = <i32>jobs[j].width
                target_lengths[j] = <i32>jobs[j].target_length
                labels[j] = jobs[j].label
                indices[j] = <i32>jobs[j].index
                memcpy(targets + t, jobs[j].target, jobs[j].target_length * sizeof(i32))
                t += jobs[j].target_length
                if python_aug:
                    continue
                elif builtin is None:
                    copy_padded(jobs[j].pixels, images + j * slot_floats, rows, jobs[j].width, padded, pad)
                else:
                    state = derive_seed(seed64, epoch64, step64, <u64>(first_slot + j), STREAM_AUGMENTATION)
                    builtin.copy_apply(jobs[j].pixels, jobs[j].width, images + j * slot_floats, padded,
                                       rows, jobs[j].width, padded, pad, &state)
            if python_aug:
                stage_slots(jobs, 0, part_start(n, 1), rows, &staged)
                baton[0] = baton_take(&self._baton, BATON_WAIT_NS)
        if python_aug:
            for part in range(STAGE_PARTS):
                lo = part_start(n, part)
                hi = part_start(n, part + 1)
                if lo == hi:
                    continue
                if part > 0:
                    with nogil:
                        if baton[0]:
                            baton_release(&self._baton)
                            baton[0] = False
                        stage_slots(jobs, lo, hi, rows, &staged)
                        baton[0] = baton_take(&self._baton, BATON_WAIT_NS)
                for j in range(lo, hi):
                    self.augment_in_python(ws, &jobs[j], channels, height, seed64, epoch64, step64, first_slot + j)
            with nogil:
                if baton[0]:
                    baton_release(&self._baton)
                    baton[0] = False
                for j in range(n):
                    copy_padded(jobs[j].pixels, images + j * slot_floats, rows, jobs[j].width, padded, pad)
        cdef cnp.npy_intp dims[4]
        dims[0] = n
        dims[1] = channels
        dims[2] = height
        dims[3] = padded
        cdef ImageBatch batch = ImageBatch.__new__(ImageBatch)
        batch._images = view_of(block, 0, cnp.NPY_FLOAT32, 4, dims)
        batch._widths = view_of(block, image_bytes, cnp.NPY_INT32, 1, dims)
        batch._target_lengths = view_of(block, image_bytes + column_bytes, cnp.NPY_INT32, 1, dims)
        batch._labels = view_of(block, image_bytes + 2 * column_bytes, cnp.NPY_INT32, 1, dims)
        batch._indices = view_of(block, image_bytes + 3 * column_bytes, cnp.NPY_INT32, 1, dims)
        dims[0] = total_targets
        batch._targets = view_of(block, targets_at, cnp.NPY_INT32, 1, dims)
        batch.epoch = epoch
        batch.step = step
        return batch

    cdef augment_in_python(self, _Workspace ws, SlotJob* job, Py_ssize_t channels, Py_ssize_t height,
                           u64 seed, u64 epoch, u64 step, Py_ssize_t slot):
        """Let the augmentation edit the slot's staged copy (``job.pixels``) in place."""
        cdef Py_ssize_t width = job.width
        cdef float* data = <float*>job.pixels
        cdef cnp.ndarray scratch = ws.scratch_view(data, channels, height, width)
        cdef SampleRng rng = SampleRng.__new__(SampleRng)
        rng._state = derive_seed(seed, epoch, step, <u64>slot, STREAM_AUGMENTATION)
        result = self.augmentation(scratch, rng)
        if result is not None and result is not scratch:
            raise TypeError(f"slot {slot} (dataset index {job.index}): the augmentation must edit its "
                            f"scratch in place and return None, received a {type(result).__name__}; "
                            f"shape-changing work belongs in the loader's transform")
        cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(scratch)
        if (cnp.PyArray_TYPE(scratch) != cnp.NPY_FLOAT32 or cnp.PyArray_NDIM(scratch) != 3
                or dims[0] != channels or dims[1] != height or dims[2] != width
                or <float*>cnp.PyArray_DATA(scratch) != data):
            raise ValueError(f"slot {slot} (dataset index {job.index}): the augmentation changed its scratch "
                             f"from float32 {(channels, height, width)} to {_describe(scratch)}; it may "
                             f"only edit values (use the loader's transform to change shapes)")
