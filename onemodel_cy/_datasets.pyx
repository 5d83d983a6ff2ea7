"""Samples, the dataset protocol and the built-in datasets.

A dataset is anything with ``len(ds)`` and a thread-safe ``ds.get_sample(i)`` returning
the same :class:`Sample` for the same ``i`` (§1). :class:`ArrayImageDataset` packs its
samples into a few flat arrays so that the collator reads them without the GIL.
"""
import operator

cimport cython
cimport numpy as cnp
import numpy as np

from onemodel_cy._typedefs cimport u64, i64, i32
from onemodel_cy._validate cimport as_index, as_u64
from onemodel_cy._rng cimport (derive_seed, draw_int, draw_single,
                               STREAM_SYNTH_SHAPE, STREAM_SYNTH_PIXELS)

cnp.import_array()

cdef object INT32_LIMIT = 1 << 31


cdef class PackedSource:
    """Base of the datasets whose images the loader gathers without the GIL.

    A subclass in Cython fills a :c:type:`PackedImages` view (``_datasets.pxd``) of
    storage it owns and has sealed; the loader's fetch step reads it directly instead of
    calling ``get_sample``. The base offers no view.
    """

    cdef bint packed_view(self, PackedImages* view) except -1:
        return False


cdef cnp.ndarray target_array(target, str where):
    cdef cnp.ndarray array
    if (type(target) is np.ndarray and cnp.PyArray_TYPE(<cnp.ndarray>target) == cnp.NPY_INT32
            and cnp.PyArray_NDIM(<cnp.ndarray>target) == 1 and cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>target)):
        # The common case (a dataset handing out its stored int32 arrays) stays in C;
        # subclasses and other byte orders take the general route below.
        array = target if cnp.PyArray_IS_C_CONTIGUOUS(<cnp.ndarray>target) else np.ascontiguousarray(target)
        if first_negative(<const i32*>cnp.PyArray_DATA(array), array.shape[0]) >= 0:
            raise ValueError(f"{where} values must lie in [0, 2**31), received min={array.min()}")
        return array
    array = np.asarray(target)
    if array.ndim != 1 or (array.dtype.kind not in "iu" and array.size):
        raise TypeError(f"{where} must be a 1-D sequence of integers, received dtype={array.dtype}, "
                        f"shape={(<object>array).shape}")
    if array.size and (array.min() < 0 or array.max() >= INT32_LIMIT):
        raise ValueError(f"{where} values must lie in [0, 2**31), received min={array.min()}, "
                         f"max={array.max()}")
    return np.ascontiguousarray(array, dtype=np.int32)


cdef Py_ssize_t first_negative(const i32* values, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        if values[k] < 0:
            return k
    return -1


@cython.freelist(16)   # one is made per sample on the generic path
cdef class Sample:
    """One training sample: ``image`` float32 ``[C, H, W]``, ``target`` int32 ``[L]``, ``label`` int.

    Parameters
    ----------
    image : numpy.ndarray
        float32, 3-D, every dimension >= 1 (planar channels, as §4 expects); held as
        given, except that a non-native byte order is converted to native.
    target : sequence of int
        Symbol ids in [0, 2**31), possibly empty (the CTC target).
    label : int
        Class label in the int32 range.
    """

    def __init__(self, image, target, label):
        if (not isinstance(image, np.ndarray) or cnp.PyArray_TYPE(<cnp.ndarray>image) != cnp.NPY_FLOAT32
                or cnp.PyArray_NDIM(<cnp.ndarray>image) != 3):
            kind = (f"ndarray of dtype={image.dtype}, shape={image.shape}"
                    if isinstance(image, np.ndarray) else type(image).__name__)
            raise TypeError(f"Sample.image must be a float32 ndarray [C, H, W], received {kind}")
        cdef cnp.npy_intp* dims = cnp.PyArray_DIMS(<cnp.ndarray>image)
        if dims[0] < 1 or dims[1] < 1 or dims[2] < 1:
            raise ValueError(f"Sample.image dimensions must all be >= 1, received shape={image.shape}")
        if not cnp.PyArray_ISNOTSWAPPED(<cnp.ndarray>image):
            image = image.astype(np.float32)      # the collator copies native float32 bits
        label = operator.index(label) if not isinstance(label, int) else label
        if not -INT32_LIMIT <= label < INT32_LIMIT:
            raise ValueError(f"Sample.label must lie in the int32 range, received {label}")
        self.image = image
        self.target = target_array(target, "Sample.target")
        self.label = label

    def __repr__(self):
        return (f"Sample(image=<float32 {tuple(self.image.shape)}>, target={self.target.tolist()!r}, "
                f"label={self.label})")

    def __iter__(self):
        return iter((self.image, self.target, self.label))

    def __reduce__(self):
        return (Sample, (self.image, self.target, self.label))


cdef class ArrayImageDataset:
    """In-memory dataset, the loader's fast path: whole batches are gathered without the GIL.

    Parameters
    ----------
    images : sequence of float32 arrays ``[C, H, W_i]``, or one float32 array ``[N, C, H, W]``
        Copied into packed storage; widths may differ.
    targets : sequence of 1-D integer sequences
        One per image, values in [0, 2**31).
    labels : sequence of int
        One per image, in the int32 range.

    ``get_sample(i)`` returns read-only views into the storage (no copy).
    """

    def __init__(self, images, targets, labels):
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

    cdef _pack(self, list samples):
        self.count = len(samples)
        shapes = np.array([s.image.shape for s in samples], dtype=np.int64).reshape(self.count, 3)
        sizes = shapes.prod(axis=1)
        offsets = np.zeros(self.count + 1, dtype=np.int64)
        np.cumsum(sizes, out=offsets[1:])
        pixels = np.empty(int(offsets[self.count]), dtype=np.float32)
        for i, s in enumerate(samples):
            pixels[offsets[i]:offsets[i + 1]] = s.image.ravel()
        target_offsets = np.zeros(self.count + 1, dtype=np.int64)
        np.cumsum([len(s.target) for s in samples], out=target_offsets[1:])
        flat_targets = (np.concatenate([s.target for s in samples]) if target_offsets[self.count]
                        else np.empty(0, dtype=np.int32))
        labels = np.array([s.label for s in samples], dtype=np.int32)
        self._set_storage(pixels, offsets[:self.count].copy(), shapes, flat_targets, target_offsets, labels)

    cdef _set_storage(self, pixels, pixel_offsets, shapes, targets, target_offsets, labels):
        for array in (pixels, pixel_offsets, shapes, targets, target_offsets, labels):
            array.flags.writeable = False
        self._pixels = pixels
        self._pixel_offsets = pixel_offsets
        self._shapes = shapes
        self._targets = targets
        self._target_offsets = target_offsets
        self._labels = labels

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"ArrayImageDataset(<{self.count} samples>)"

    cdef bint packed_view(self, PackedImages* view) except -1:
        # The packed storage is what get_sample serves, unless a subclass overrides it.
        if getattr(type(self), "get_sample") is not STORAGE_GET_SAMPLE or self._pixels is None:
            return False
        view.count = self.count
        view.pixels = <const float*>cnp.PyArray_DATA(self._pixels)
        view.pixel_offsets = <const i64*>cnp.PyArray_DATA(self._pixel_offsets)
        view.shapes = <const i64*>cnp.PyArray_DATA(self._shapes)
        view.targets = <const i32*>cnp.PyArray_DATA(self._targets)
        view.target_offsets = <const i64*>cnp.PyArray_DATA(self._target_offsets)
        view.labels = <const i32*>cnp.PyArray_DATA(self._labels)
        return True

    cpdef Sample get_sample(self, index):
        """Sample ``index`` (0 <= index < len), as read-only views of the packed storage."""
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
        return sample

    def __getitem__(self, index):
        return self.get_sample(index)

    @property
    def widths(self):
        """Width of every image, int64 (a ready key for :class:`BucketedSampler`)."""
        return self._shapes[:, 2].copy()

    @property
    def shapes(self):
        """``[count, 3]`` int64 array of (C, H, W) (a read-only view of the storage)."""
        return self._shapes.view()


# get_sample as ArrayImageDataset defines it: a subclass that overrides it is read with it.
cdef object STORAGE_GET_SAMPLE = ArrayImageDataset.__dict__["get_sample"]


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
        Geometry; ``1 <= min_width <= max_width``, ``height, channels >= 1``.
    seed : int
        Dataset seed, reduced mod 2**64.
    """
    cdef readonly Py_ssize_t height, min_width, max_width, channels
    cdef readonly u64 seed

    def __init__(self, count, height=32, min_width=64, max_width=256, channels=1, seed=0):
        for name, value in (("count", count), ("height", height), ("min_width", min_width),
                            ("max_width", max_width), ("channels", channels)):
            v = as_index(value, name)
            if not 1 <= v < INT32_LIMIT:
                raise ValueError(f"{name} must be an integer in [1, 2**31), received {v}")
        if min_width > max_width:
            raise ValueError(f"min_width must be <= max_width, received min_width={min_width}, "
                             f"max_width={max_width}")
        self.count, self.height, self.channels = count, height, channels
        self.min_width, self.max_width = min_width, max_width
        self.seed = as_u64(seed, "seed")
        self._generate()

    def __repr__(self):
        return (f"SyntheticLineImages(count={self.count}, height={self.height}, min_width="
                f"{self.min_width}, max_width={self.max_width}, channels={self.channels}, seed={self.seed})")

    def __reduce__(self):
        return (SyntheticLineImages, (self.count, self.height, self.min_width, self.max_width,
                                      self.channels, self.seed))

    cdef _generate(self):
        cdef Py_ssize_t n = self.count, i, k, plane = self.channels * self.height
        cdef cnp.ndarray shapes = np.empty((n, 3), dtype=np.int64)
        cdef cnp.ndarray target_offsets = np.zeros(n + 1, dtype=np.int64)
        cdef cnp.ndarray labels = np.empty(n, dtype=np.int32)
        cdef i64[:, ::1] shape_view = shapes
        cdef i64[::1] toff = target_offsets
        cdef u64 state, span = <u64>(self.max_width - self.min_width + 1)
        cdef i64 width, length
        # Pass 1: widths and target lengths (the symbols are drawn and dropped).
        with nogil:
            for i in range(n):
                state = derive_seed(self.seed, 0, <u64>i, 0, STREAM_SYNTH_SHAPE)
                width = self.min_width + <i64>draw_int(&state, span)
                length = 1 + <i64>draw_int(&state, <u64>max(1, width // 16))
                shape_view[i, 0] = self.channels
                shape_view[i, 1] = self.height
                shape_view[i, 2] = width
                toff[i + 1] = toff[i] + length
        cdef cnp.ndarray targets = np.empty(target_offsets[n], dtype=np.int32)
        cdef i32[::1] tview = targets
        cdef i32[::1] lview = labels
        cdef cnp.ndarray pixel_offsets = np.zeros(n, dtype=np.int64)
        cdef i64[::1] poff = pixel_offsets
        for i in range(1, n):
            poff[i] = poff[i - 1] + plane * shape_view[i - 1, 2]
        cdef cnp.ndarray pixels = np.empty(poff[n - 1] + plane * shape_view[n - 1, 2], dtype=np.float32)
        cdef float* px = <float*>cnp.PyArray_DATA(pixels)
        cdef Py_ssize_t p, npix
        # Pass 2: symbols, labels and pixels.
        with nogil:
            for i in range(n):
                state = derive_seed(self.seed, 0, <u64>i, 0, STREAM_SYNTH_SHAPE)
                draw_int(&state, span)
                draw_int(&state, <u64>max(1, shape_view[i, 2] // 16))
                for k in range(toff[i], toff[i + 1]):
                    tview[k] = 1 + <i32>draw_int(&state, 95)
                lview[i] = <i32>draw_int(&state, 10)
                state = derive_seed(self.seed, 0, <u64>i, 0, STREAM_SYNTH_PIXELS)
                npix = plane * shape_view[i, 2]
                for p in range(npix):
                    px[poff[i] + p] = draw_single(&state)
        self._set_storage(pixels, pixel_offsets, shapes, targets, target_offsets, labels)
