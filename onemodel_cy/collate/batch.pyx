"""§4 ``ImageBatch``: the six arrays of one batch, views of one pooled block (§5).

The block layout (``plan_layout``) is computed with overflow-checked arithmetic, so a
batch whose bytes do not fit is a ``ValueError`` before any memory is touched.
"""
cimport cython
cimport numpy as cnp
import numpy as np

from onemodel_cy.core.typedefs cimport i32
from onemodel_cy.collate.bufferpool cimport Block, POOL_ALIGN
from onemodel_cy.core.validate cimport checked_add, checked_mul, describe

cnp.import_array()

from onemodel_cy.conformance.codec import BATCH_FIELDS as FIELDS   # the one list of the six fields


cdef Py_ssize_t aligned_size(Py_ssize_t nbytes, str what) except? -1:
    return checked_add(nbytes, POOL_ALIGN - 1, what) // POOL_ALIGN * POOL_ALIGN


cdef int plan_layout(BatchLayout* layout, Py_ssize_t n, Py_ssize_t channels, Py_ssize_t height,
                     Py_ssize_t padded, Py_ssize_t total_targets) except -1:
    """Fill ``layout`` for a batch of ``n`` images ``[channels, height, padded]``."""
    cdef str what = f"a batch of {n} images of [{channels}, {height}, {padded}] float32"
    cdef Py_ssize_t floats = checked_mul(checked_mul(checked_mul(n, channels, what), height, what),
                                         padded, what)
    layout.n = n
    layout.channels = channels
    layout.height = height
    layout.padded = padded
    layout.total_targets = total_targets
    layout.small_pages = False
    layout.image_bytes = aligned_size(checked_mul(floats, sizeof(float), what), what)
    layout.column_bytes = aligned_size(checked_mul(n, sizeof(i32), what), what)
    layout.targets_at = checked_add(layout.image_bytes, checked_mul(4, layout.column_bytes, what), what)
    layout.nbytes = checked_add(layout.targets_at,
                                checked_mul(total_targets, sizeof(i32), "the batch's targets"), what)
    return 0


cdef cnp.ndarray view_of(Block block, Py_ssize_t offset, int typenum, int ndim, cnp.npy_intp* dims):
    cdef cnp.ndarray array = cnp.PyArray_SimpleNewFromData(ndim, dims, typenum, block.data + offset)
    cnp.set_array_base(array, block)
    return array


cdef ImageBatch batch_in_block(Block block, const BatchLayout* layout, object epoch, object step,
                               object global_step):
    """The batch whose arrays are views of ``block`` laid out as ``layout``."""
    cdef cnp.npy_intp dims[4]
    dims[0] = layout.n
    dims[1] = layout.channels
    dims[2] = layout.height
    dims[3] = layout.padded
    cdef Py_ssize_t columns = layout.image_bytes
    cdef ImageBatch batch = ImageBatch.__new__(ImageBatch)
    batch._images = view_of(block, 0, cnp.NPY_FLOAT32, 4, dims)
    batch._widths = view_of(block, columns, cnp.NPY_INT32, 1, dims)
    batch._target_lengths = view_of(block, columns + layout.column_bytes, cnp.NPY_INT32, 1, dims)
    batch._labels = view_of(block, columns + 2 * layout.column_bytes, cnp.NPY_INT32, 1, dims)
    batch._indices = view_of(block, columns + 3 * layout.column_bytes, cnp.NPY_INT32, 1, dims)
    dims[0] = layout.total_targets
    batch._targets = view_of(block, layout.targets_at, cnp.NPY_INT32, 1, dims)
    batch._nbytes = block.nbytes
    batch.epoch = epoch
    batch.step = step
    batch.global_step = global_step
    return batch


def _rebuild(images, widths, targets, target_lengths, labels, indices, epoch, step, global_step):
    """Unpickle an ImageBatch: the same arrays, now ordinary (unpooled) numpy arrays."""
    cdef ImageBatch batch = ImageBatch.__new__(ImageBatch)
    arrays = [images, widths, targets, target_lengths, labels, indices]     # FIELDS order
    for name, value in zip(FIELDS, arrays):
        dtype, ndim = (np.float32, 4) if name == "images" else (np.int32, 1)
        if not isinstance(value, np.ndarray) or value.dtype != dtype or value.ndim != ndim:
            raise TypeError(f"ImageBatch {name} must be a {np.dtype(dtype)} array of {ndim} "
                            f"dimension(s), received {describe(value)}")
    n = arrays[0].shape[0]
    if any(a.shape[0] != n for a in arrays[1:2] + arrays[3:]):
        raise ValueError(f"ImageBatch columns must all have {n} entries")
    (batch._images, batch._widths, batch._targets, batch._target_lengths, batch._labels,
     batch._indices) = arrays
    batch._nbytes = sum(a.nbytes for a in arrays)
    batch.epoch, batch.step, batch.global_step = epoch, step, global_step
    return batch


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
        The epoch and the step in the epoch the batch was built for.
    global_step : int or None
        The global step ``g`` (set when the batch is built by a loader; None for a
        direct ``collate``).

    ``close()`` (or leaving ``with batch:``) drops the batch's arrays; the memory goes
    back to the pool as soon as nothing else refers to it. Arrays you kept stay valid and
    are never overwritten. Pickling or copying a batch gives ordinary numpy arrays.
    """

    cdef _check_open(self):
        if self._images is None:
            raise ValueError("this ImageBatch is closed; keep a reference to an array "
                             "(for example images = batch.images) before close() to use it after")

    @property
    def closed(self):
        return self._images is None

    @property
    def nbytes(self):
        """Bytes of the memory this batch's arrays live in (its pooled block)."""
        self._check_open()
        return self._nbytes

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
        """The six arrays by name (``FIELDS`` order)."""
        self._check_open()
        return dict(zip(FIELDS, (self._images, self._widths, self._targets, self._target_lengths,
                                 self._labels, self._indices)))

    def __reduce__(self):
        self._check_open()
        return (_rebuild, (self._images.copy(), self._widths.copy(), self._targets.copy(),
                           self._target_lengths.copy(), self._labels.copy(), self._indices.copy(),
                           self.epoch, self.step, self.global_step))

    def __repr__(self):
        where = f"epoch={self.epoch}, step={self.step}, global_step={self.global_step}"
        if self._images is None:
            return f"ImageBatch(closed, {where})"
        return (f"ImageBatch(images=<float32 {tuple(self._images.shape)}>, targets={self._targets.shape[0]}, "
                f"{where})")
