"""Samples, the dataset protocol and the built-in datasets.

A dataset is anything with ``len(ds)`` and a thread-safe ``ds.get_sample(i)`` returning
the same :class:`Sample` for the same ``i`` (§1). :class:`ArrayImageDataset` packs its
samples into a few flat arrays so that the collator reads them without the GIL.

Everything a GIL-free kernel reads is sealed (``core/sealed.pyx``, ``SealedMemory``): the packed
storage, a sample's target and the view a sample gives of its image are read-only arrays
that no Python code can make writeable again, and no object is initialised twice. None
of these classes pickles its C state: each rebuilds through its validating constructor.
"""
cimport cython
cimport numpy as cnp
import numpy as np

from onemodel_cy.core.typedefs cimport u64, i64, i32
from onemodel_cy.core.validate cimport (as_index, as_u64, as_size, as_integer_vector, describe,
                                        checked_mul, checked_add, mul_overflows, add_overflows)
from onemodel_cy.core.sealed cimport sealed_empty, sealed_vector, sealed_copy, sealed_view, is_sealed, seal
from onemodel_cy.core.rng cimport (derive_seed, draw_int, draw_single,
                                   STREAM_SYNTH_SHAPE, STREAM_SYNTH_PIXELS)

cnp.import_array()

cdef object INT32_LIMIT = 1 << 31


cdef class PackedSource:
    """Base of the datasets whose images the loader gathers without the GIL.

    A subclass in Cython fills a :c:type:`PackedImages` view (``data/datasets.pxd``) of
    storage it owns and has sealed; the loader's fetch step reads it directly instead of
    calling ``get_sample``. The base offers no view.
    """

    cdef bint packed_view(self, PackedImages* view) except -1:
        return False

    cdef int pixels_read(self, Py_ssize_t nbytes) except -1:
        return 0

    cdef int ensure_samples(self, object indices, Py_ssize_t lo, Py_ssize_t hi) except -1:
        return 0

    cdef bint reads_ahead(self) except -1:
        return False

    cdef int read_ahead(self, object indices) except -1:
        return 0

    cdef int stop_read_ahead(self) except -1:
        return 0


cdef cnp.ndarray target_array(target, str where):
    """A sealed int32 copy of ``target``, checked after copying, so that no edit of the
    caller's array (before or after) reaches a batch. Sealed input is kept as it is."""
    cdef cnp.ndarray array
    if (is_sealed(target) and cnp.PyArray_TYPE(<cnp.ndarray>target) == cnp.NPY_INT32
            and cnp.PyArray_NDIM(<cnp.ndarray>target) == 1 and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>target)
            and cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>target) and cnp.PyArray_ISALIGNED(<cnp.ndarray>target)):
        array = target        # a dataset's own stored target: nobody can change it
    elif (type(target) is np.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>target) == cnp.NPY_INT32
            and cnp.PyArray_NDIM(<cnp.ndarray>target) == 1):
        array = sealed_copy(target, cnp.NPY_INT32, where)
    else:
        source = as_integer_vector(target, where)     # private: checked values stay the values copied
        if source.size and (source.min() < 0 or source.max() >= INT32_LIMIT):
            raise ValueError(f"{where} values must lie in [0, 2**31), received min={source.min()}, "
                             f"max={source.max()}")
        return sealed_copy(source.astype(np.int32), cnp.NPY_INT32, where)
    if first_negative(<const i32*>cnp.PyArray_DATA(array), array.shape[0]) >= 0:
        raise ValueError(f"{where} values must lie in [0, 2**31), received min={array.min()}")
    return array


cdef Py_ssize_t first_negative(const i32* values, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        if values[k] < 0:
            return k
    return -1


cdef cnp.ndarray image_array(image):
    """``image`` checked (float32 ``[C, H, W]``, every dimension >= 1) and held read-only:
    a sealed view of the caller's memory, or an aligned native copy when numpy reports
    the array misaligned or byte-swapped."""
    if (not isinstance(image, np.ndarray) or cnp.PyArray_TYPE(<cnp.ndarray>image) != cnp.NPY_FLOAT32
            or cnp.PyArray_NDIM(<cnp.ndarray>image) != 3):
        raise TypeError(f"Sample.image must be a float32 ndarray [C, H, W], received {describe(image)}")
    cdef cnp.ndarray array = <cnp.ndarray>image
    cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(array)
    if dims[0] < 1 or dims[1] < 1 or dims[2] < 1:
        raise ValueError(f"Sample.image dimensions must all be >= 1, received shape={image.shape}")
    if not cnp.PyArray_ISNOTSWAPPED(array) or not cnp.PyArray_ISALIGNED(array):
        return sealed_copy(array, cnp.NPY_FLOAT32, "Sample.image")   # the collator reads native, aligned float32
    if is_sealed(array):
        return array
    return sealed_view(array)


cdef int sample_ready(Sample sample) except -1:
    if not sample._initialised:
        raise RuntimeError("this Sample was never initialised (build it as Sample(image, target, label))")
    return 0


cdef int dataset_ready(ArrayImageDataset dataset) except -1:
    if not dataset._initialised:
        raise RuntimeError(f"this {type(dataset).__name__} was never initialised (its __init__ did not run)")
    return 0


@cython.auto_pickle(False)
@cython.freelist(16)   # one is made per sample on the generic path
cdef class Sample:
    """One training sample: ``image`` float32 ``[C, H, W]``, ``target`` int32 ``[L]``, ``label`` int.

    Everything is checked before anything is stored, and a sample is initialised once.
    ``image`` and ``target`` are read-only arrays that cannot be made writeable again.

    Parameters
    ----------
    image : numpy.ndarray
        float32, 3-D, every dimension >= 1 (planar channels, as §4 expects). Not copied:
        ``Sample.image`` is a read-only view of the caller's memory (the collator copies
        the pixels later, holding the sample, with bounds from the shape, which numpy
        cannot change in place), so a caller who edits that memory meanwhile races only
        with their own batch. A misaligned or byte-swapped array is copied into an
        aligned native one.
    target : sequence of int
        Symbol ids in [0, 2**31), possibly empty (the CTC target). Always copied, and
        checked on the copy.
    label : int
        Class label in the int32 range.
    """

    def __init__(self, image, target, label):
        # Claimed before any Python code runs (no other thread can pass this check as
        # well); a failed __init__ leaves the object claimed and unusable.
        if self._claimed:
            raise RuntimeError("Sample.__init__ was already called on this sample; build a new Sample")
        self._claimed = True
        # Validate first, assign last: a refused argument leaves nothing half-set.
        cdef cnp.ndarray held_image = image_array(image)
        cdef cnp.ndarray held_target = target_array(target, "Sample.target")
        held_label = as_index(label, "Sample.label")
        if not -INT32_LIMIT <= held_label < INT32_LIMIT:
            raise ValueError(f"Sample.label must lie in the int32 range, received {held_label}")
        self.image, self.target, self.label = held_image, held_target, held_label
        self._initialised = True

    def __repr__(self):
        if not self._initialised:
            return "Sample(<never initialised>)"
        return (f"Sample(image=<float32 {tuple(self.image.shape)}>, target={self.target.tolist()!r}, "
                f"label={self.label})")

    def __iter__(self):
        sample_ready(self)
        return iter((self.image, self.target, self.label))

    def __reduce__(self):
        sample_ready(self)
        return (Sample, (self.image, self.target, self.label))


@cython.auto_pickle(False)
cdef class ArrayImageDataset(PackedSource):
    """In-memory dataset, the loader's fast path: whole batches are gathered without the GIL.

    Parameters
    ----------
    images : sequence of float32 arrays ``[C, H, W_i]``, or one float32 array ``[N, C, H, W]``
        Copied into packed storage; widths may differ.
    targets : sequence of 1-D integer sequences
        One per image, values in [0, 2**31).
    labels : sequence of int
        One per image, in the int32 range.

    ``get_sample(i)`` returns read-only views into the storage (no copy). The storage is
    sealed (no array over it can be made writeable) and filled once: a second
    ``__init__`` is refused, since workers may be copying from it.
    """

    def __cinit__(self, *args, **kwargs):
        # Empty storage until __init__ fills it: an object made by __new__ alone holds
        # no sample, so every index is out of range instead of a read through NULL.
        cdef cnp.npy_intp dims[2]
        dims[0] = 0
        dims[1] = 3
        self._pixels = sealed_vector(0, cnp.NPY_FLOAT32)
        self._pixel_offsets = sealed_vector(0, cnp.NPY_INT64)
        self._shapes = sealed_empty(2, dims, cnp.NPY_INT64)
        self._targets = sealed_vector(0, cnp.NPY_INT32)
        self._target_offsets = sealed_vector(1, cnp.NPY_INT64)
        (<i64*>cnp.PyArray_DATA(self._target_offsets))[0] = 0
        self._labels = sealed_vector(0, cnp.NPY_INT32)
        for array in (self._pixels, self._pixel_offsets, self._shapes, self._targets,
                      self._target_offsets, self._labels):
            seal(array)
        self.count = 0

    def __init__(self, images, targets, labels):
        self.begin_init()
        if isinstance(images, np.ndarray) and images.ndim == 4:
            images = list(images)
        images = list(images)
        targets = list(targets)
        labels = list(labels)
        if not images:
            raise ValueError("ArrayImageDataset needs at least one image, received 0")
        if not len(images) == len(targets) == len(labels):
            raise ValueError(f"images, targets and labels must have one entry per sample, received "
                             f"{len(images)}, {len(targets)}, {len(labels)}")
        samples = [Sample(image, target, label) for image, target, label in zip(images, targets, labels)]
        self._pack(samples)

    cdef int begin_init(self) except -1:
        """Claim the object for one __init__, before any Python code runs: two threads
        can never both initialise it (the second would free storage workers read). A
        failed __init__ leaves it claimed and empty: build a new dataset."""
        if self._claimed:
            raise RuntimeError(f"{type(self).__name__}.__init__ was already called on this dataset "
                               f"(workers may be reading its storage); build a new dataset")
        self._claimed = True
        return 0

    cdef _pack(self, list samples):
        cdef Py_ssize_t n = len(samples), i, total = 0, total_targets = 0, size
        cdef cnp.npy_intp dims[2]
        dims[0] = n
        dims[1] = 3
        cdef cnp.ndarray shapes = sealed_empty(2, dims, cnp.NPY_INT64)
        cdef cnp.ndarray offsets = sealed_vector(n, cnp.NPY_INT64)
        cdef cnp.ndarray target_offsets = sealed_vector(n + 1, cnp.NPY_INT64)
        cdef cnp.ndarray labels = sealed_vector(n, cnp.NPY_INT32)
        cdef i64[:, ::1] shape_view = shapes
        cdef i64[::1] offset_view = offsets, target_view = target_offsets
        cdef i32[::1] label_view = labels
        cdef Sample s
        target_view[0] = 0
        for i in range(n):
            s = samples[i]
            c, h, w = s.image.shape
            shape_view[i, 0], shape_view[i, 1], shape_view[i, 2] = c, h, w
            # A view (np.broadcast_to) can claim far more pixels than memory holds.
            size = checked_mul(checked_mul(c, h, "an image's pixel count"), w, "an image's pixel count")
            offset_view[i] = total
            total = checked_add(total, size, "the dataset's pixel count")
            total_targets = checked_add(total_targets, s.target.shape[0], "the dataset's target count")
            target_view[i + 1] = total_targets
            label_view[i] = s.label
        cdef cnp.ndarray pixels = sealed_vector(total, cnp.NPY_FLOAT32)
        cdef cnp.ndarray flat_targets = sealed_vector(total_targets, cnp.NPY_INT32)
        for i in range(n):
            s = samples[i]
            c, h, w = s.image.shape
            pixels[offset_view[i]:offset_view[i] + c * h * w].reshape(c, h, w)[...] = s.image
            flat_targets[target_view[i]:target_view[i + 1]] = s.target
        self._set_storage(pixels, offsets, shapes, flat_targets, target_offsets, labels)

    cdef _set_storage(self, pixels, pixel_offsets, shapes, targets, target_offsets, labels):
        """Seal and install storage built with ``sealed_empty``; the count is set last."""
        for array in (pixels, pixel_offsets, shapes, targets, target_offsets, labels):
            seal(array)
            if not is_sealed(array):
                raise AssertionError("dataset storage must be built over sealed memory")
        self._pixels = pixels
        self._pixel_offsets = pixel_offsets
        self._shapes = shapes
        self._targets = targets
        self._target_offsets = target_offsets
        self._labels = labels
        self.count = labels.shape[0]
        self._initialised = True

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"ArrayImageDataset(<{self.count} samples>)"

    cdef bint packed_view(self, PackedImages* view) except -1:
        # The packed storage is what get_sample serves, unless a subclass overrides it.
        # (Storage is valid from __cinit__ on: empty, count 0, until __init__ fills it.)
        if getattr(type(self), "get_sample") is not STORAGE_GET_SAMPLE:
            return False
        view.count = self.count
        view.kind = PIXELS_FLOAT32
        view.pixels = <const float*>cnp.PyArray_DATA(self._pixels)
        view.bytes = NULL
        view.convert = NULL
        view.pixel_offsets = <const i64*>cnp.PyArray_DATA(self._pixel_offsets)
        view.shapes = <const i64*>cnp.PyArray_DATA(self._shapes)
        view.targets = <const i32*>cnp.PyArray_DATA(self._targets)
        view.target_offsets = <const i64*>cnp.PyArray_DATA(self._target_offsets)
        view.labels = <const i32*>cnp.PyArray_DATA(self._labels)
        return True

    def __reduce__(self):
        dataset_ready(self)
        if type(self) is not ArrayImageDataset:
            raise TypeError(f"{type(self).__name__} must define __reduce__ to be pickled")
        samples = [self.get_sample(i) for i in range(self.count)]
        return (ArrayImageDataset, ([s.image for s in samples], [s.target for s in samples],
                                    [s.label for s in samples]))

    cpdef Sample get_sample(self, index):
        """Sample ``index`` (0 <= index < len), as read-only views of the packed storage."""
        dataset_ready(self)
        i = as_index(index, "index")
        if not 0 <= i < self.count:
            raise IndexError(f"index must lie in [0, {self.count}), received {i}")
        c, h, w = self._shapes[i]
        start = self._pixel_offsets[i]
        image = self._pixels[start:start + c * h * w].reshape(c, h, w)
        target = self._targets[self._target_offsets[i]:self._target_offsets[i + 1]]
        cdef Sample sample = Sample.__new__(Sample)
        sample.image = image
        sample.target = target
        sample.label = int(self._labels[i])
        sample._initialised = True
        return sample

    def __getitem__(self, index):
        return self.get_sample(index)

    @property
    def widths(self):
        """Width of every image, int64 (a ready key for :class:`BucketedSampler`)."""
        return self._shapes[:, 2].copy()

    @property
    def shapes(self):
        """``[count, 3]`` int64 array of (C, H, W) (a read-only view of the storage that
        cannot be made writeable: the fast path trusts it)."""
        return self._shapes.view()


# get_sample as ArrayImageDataset defines it: a subclass that overrides it is read with it.
cdef object STORAGE_GET_SAMPLE = ArrayImageDataset.__dict__["get_sample"]


@cython.auto_pickle(False)
cdef class SyntheticLineImages(ArrayImageDataset):
    """Deterministic text-line-shaped samples, regenerable in any language (docs/contract.md).

    Sample ``i``: from ``SampleRng(derive(seed, 0, i, 0, 2))`` the width
    ``min_width + next_int(max_width - min_width + 1)``, the target length
    ``1 + next_int(max(1, width // 16))``, that many symbols ``1 + next_int(95)``, then the
    label ``next_int(10)``; from ``SampleRng(derive(seed, 0, i, 0, 3))`` the pixels of the
    float32 ``[channels, height, width]`` image in C, H, W order, each ``next_single()``.

    Parameters
    ----------
    count : int
        Number of samples, >= 1.
    height, min_width, max_width, channels : int
        Geometry; ``1 <= min_width <= max_width``, ``height, channels >= 1``, each below
        2**31. A pixel count that does not fit in memory is a ``ValueError`` before
        anything is allocated.
    seed : int
        Dataset seed, reduced mod 2**64.
    """
    cdef readonly Py_ssize_t height, min_width, max_width, channels
    cdef readonly u64 seed

    def __init__(self, count, height=32, min_width=64, max_width=256, channels=1, seed=0):
        self.begin_init()
        cdef Py_ssize_t top = INT32_LIMIT - 1
        cdef Py_ssize_t n = as_size(count, "count", 1, top), h = as_size(height, "height", 1, top)
        cdef Py_ssize_t lo = as_size(min_width, "min_width", 1, top)
        cdef Py_ssize_t hi = as_size(max_width, "max_width", 1, top)
        cdef Py_ssize_t ch = as_size(channels, "channels", 1, top)
        if lo > hi:
            raise ValueError(f"min_width must be <= max_width, received min_width={lo}, "
                             f"max_width={hi}")
        cdef u64 key = as_u64(seed, "seed")
        self._generate(n, h, lo, hi, ch, key)

    def __repr__(self):
        return (f"SyntheticLineImages(count={self.count}, height={self.height}, min_width="
                f"{self.min_width}, max_width={self.max_width}, channels={self.channels}, seed={self.seed})")

    def __reduce__(self):
        dataset_ready(self)
        return (SyntheticLineImages, (self.count, self.height, self.min_width, self.max_width,
                                      self.channels, self.seed))

    cdef _generate(self, Py_ssize_t n, Py_ssize_t height, Py_ssize_t min_width, Py_ssize_t max_width,
                   Py_ssize_t channels, u64 seed):
        cdef Py_ssize_t i, k, plane = checked_mul(channels, height, "SyntheticLineImages channels * height")
        cdef cnp.npy_intp dims[2]
        dims[0] = n
        dims[1] = 3
        cdef cnp.ndarray shapes = sealed_empty(2, dims, cnp.NPY_INT64)
        cdef cnp.ndarray target_offsets = sealed_vector(n + 1, cnp.NPY_INT64)
        cdef cnp.ndarray labels = sealed_vector(n, cnp.NPY_INT32)
        cdef cnp.ndarray pixel_offsets = sealed_vector(n, cnp.NPY_INT64)
        cdef i64[:, ::1] shape_view = shapes
        cdef i64[::1] toff = target_offsets, poff = pixel_offsets
        cdef u64 state, span = <u64>(max_width - min_width + 1)
        cdef i64 width, length
        cdef Py_ssize_t npix, total = 0, targets_total = 0
        cdef bint overflow = False
        # Pass 1: widths, target lengths (the symbols are drawn and dropped) and the
        # offsets, every product and sum checked: a wrapped count would store too few pixels.
        with nogil:
            toff[0] = 0
            for i in range(n):
                state = derive_seed(seed, 0, <u64>i, 0, STREAM_SYNTH_SHAPE)
                width = min_width + <i64>draw_int(&state, span)
                length = 1 + <i64>draw_int(&state, <u64>max(1, width // 16))
                shape_view[i, 0] = channels
                shape_view[i, 1] = height
                shape_view[i, 2] = width
                poff[i] = total
                if (mul_overflows(plane, width, &npix) or add_overflows(total, npix, &total)
                        or add_overflows(targets_total, length, &targets_total)):
                    overflow = True
                    break
                toff[i + 1] = targets_total
        if overflow:
            raise ValueError(f"SyntheticLineImages of count={n}, channels={channels}, height={height}, "
                             f"max_width={max_width} does not fit in memory: its pixel count exceeds 2**63 - 1")
        cdef cnp.ndarray targets = sealed_vector(targets_total, cnp.NPY_INT32)
        cdef cnp.ndarray pixels = sealed_vector(total, cnp.NPY_FLOAT32)   # MemoryError if it cannot be had
        cdef i32[::1] tview = targets
        cdef i32[::1] lview = labels
        cdef float* px = <float*>cnp.PyArray_DATA(pixels)
        cdef Py_ssize_t p
        # Pass 2: symbols, labels and pixels.
        with nogil:
            for i in range(n):
                state = derive_seed(seed, 0, <u64>i, 0, STREAM_SYNTH_SHAPE)
                draw_int(&state, span)
                draw_int(&state, <u64>max(1, shape_view[i, 2] // 16))
                for k in range(toff[i], toff[i + 1]):
                    tview[k] = 1 + <i32>draw_int(&state, 95)
                lview[i] = <i32>draw_int(&state, 10)
                state = derive_seed(seed, 0, <u64>i, 0, STREAM_SYNTH_PIXELS)
                npix = plane * shape_view[i, 2]
                for p in range(npix):
                    px[poff[i] + p] = draw_single(&state)
        self.height, self.min_width, self.max_width, self.channels, self.seed = (
            height, min_width, max_width, channels, seed)
        self._set_storage(pixels, pixel_offsets, shapes, targets, target_offsets, labels)
