"""§2 random numbers: SplitMix64, ``mix``, ``derive`` and ``SampleRng``.

The kernels are inline functions in ``core/rng.pxd`` so that the samplers, the collator and
the datasets call them without the GIL; this module wraps them for Python and adds
bulk draws (``size=``) that fill an array without the GIL.
"""
cimport cython
cimport numpy as cnp
import numpy as np

from onemodel_cy.core.typedefs cimport u64
from onemodel_cy.core.validate cimport as_u64, as_count, as_size, checked_mul

cnp.import_array()

cdef extern from *:
    int ONEMODEL_CY_CHECKS    # set by setup.py

#: True when built with ONEMODEL_CY_CHECKS=1 (bounds, wraparound and initialisation checks on).
BUILT_WITH_CHECKS = bool(ONEMODEL_CY_CHECKS)

#: The named streams of §2 and of this package (see docs/contract.md).
STREAMS = {
    "STREAM_TRANSFORM": STREAM_TRANSFORM,
    "STREAM_AUGMENTATION": STREAM_AUGMENTATION,
    "STREAM_SYNTH_SHAPE": STREAM_SYNTH_SHAPE,
    "STREAM_SYNTH_PIXELS": STREAM_SYNTH_PIXELS,
    "STREAM_EPOCH_ORDER": STREAM_EPOCH_ORDER,
    "STREAM_MIXING": STREAM_MIXING,
    "STREAM_BUCKET_ORDER": STREAM_BUCKET_ORDER,
    "STREAM_BUCKET_PLACE": STREAM_BUCKET_PLACE,
}
# Each stream also by name (STREAM_TRANSFORM, ...), as ``core/rng.pyi`` declares them.
globals().update(STREAMS)


def mix(x):
    """SplitMix64 output for the state ``x`` before its increment (§2, D1).

    Parameters
    ----------
    x : int
        Any integer; reduced mod 2**64.

    Returns
    -------
    int
        The 64-bit mixed value.
    """
    return mix64(as_u64(x, "x"))


def derive(seed, epoch, step, slot, stream):
    """The seed of one draw site: ``derive(seed, epoch, step, slot, stream)`` (§2, D3).

    Every argument is an integer reduced mod 2**64. Streams: 0 transform,
    1 augmentation, 2-3 synthetic dataset, 101-104 samplers.
    """
    return derive_seed(as_u64(seed, "seed"), as_u64(epoch, "epoch"), as_u64(step, "step"),
                       as_u64(slot, "slot"), as_u64(stream, "stream"))


cdef Py_ssize_t _bulk_size(object size) except -1:
    """``size`` of a bulk draw: an integer >= 0 whose 8-byte (at most) array fits in memory."""
    cdef Py_ssize_t n = as_size(size, "size")
    checked_mul(n, 8, "the bulk draw's array")
    return n


@cython.auto_pickle(False)     # pickled through __reduce__ (the constructor), never raw state
@cython.freelist(16)   # one is made per sample on the generic path
cdef class SampleRng:
    """SplitMix64 generator of §2, holding one 64-bit ``state``.

    ``SampleRng(derive(seed, epoch, step, slot, stream))`` is the generator of one
    draw site. Each ``next_*`` method draws one value, or ``size`` successive values
    into a new array (filled without the GIL), exactly as repeated scalar calls would.

    Parameters
    ----------
    state : int
        The initial state, reduced mod 2**64 (D2, D3).
    """
    def __init__(self, state=0):
        self._state = as_u64(state, "state")

    @property
    def state(self):
        """The 64-bit state; any integer assigned is reduced mod 2**64 (D3)."""
        return self._state

    @state.setter
    def state(self, value):
        self._state = as_u64(value, "state")

    def __repr__(self):
        return f"SampleRng(state={self._state})"

    def __reduce__(self):
        return (SampleRng, (self._state,))

    def next_u64(self, size=None):
        """Next raw 64-bit output (int, or uint64 array of ``size``)."""
        if size is None:
            return draw_u64(&self._state)
        cdef Py_ssize_t i, n = _bulk_size(size)
        cdef cnp.ndarray out = np.empty(n, dtype=np.uint64)
        cdef u64* dst = <u64*>cnp.PyArray_DATA(out)
        with nogil:
            for i in range(n):
                dst[i] = draw_u64(&self._state)
        return out

    def next_single(self, size=None):
        """Next float32 in [0, 1): ``(u >> 40) / 2**24`` (a Python float, or float32 array)."""
        if size is None:
            return draw_single(&self._state)
        cdef Py_ssize_t i, n = _bulk_size(size)
        cdef cnp.ndarray out = np.empty(n, dtype=np.float32)
        cdef float* dst = <float*>cnp.PyArray_DATA(out)
        with nogil:
            for i in range(n):
                dst[i] = draw_single(&self._state)
        return out

    def next_double(self, size=None):
        """Next float64 in [0, 1): ``(u >> 11) / 2**53``."""
        if size is None:
            return draw_double(&self._state)
        cdef Py_ssize_t i, n = _bulk_size(size)
        cdef cnp.ndarray out = np.empty(n, dtype=np.float64)
        cdef double* dst = <double*>cnp.PyArray_DATA(out)
        with nogil:
            for i in range(n):
                dst[i] = draw_double(&self._state)
        return out

    def next_int(self, n, size=None):
        """Unbiased integer in ``[0, n)`` by multiply-shift with redraws (D4); ``1 <= n < 2**64``."""
        cdef u64 bound = as_count(n, "n", 1)
        if size is None:
            return draw_int(&self._state, bound)
        cdef Py_ssize_t i, count = _bulk_size(size)
        cdef cnp.ndarray out = np.empty(count, dtype=np.uint64)
        cdef u64* dst = <u64*>cnp.PyArray_DATA(out)
        with nogil:
            for i in range(count):
                dst[i] = draw_int(&self._state, bound)
        return out

    def next_normal(self, size=None):
        """Approximately normal float32: twelve ``next_single`` summed in float32, minus 6 (D5)."""
        if size is None:
            return draw_normal(&self._state)
        cdef Py_ssize_t i, n = _bulk_size(size)
        cdef cnp.ndarray out = np.empty(n, dtype=np.float32)
        cdef float* dst = <float*>cnp.PyArray_DATA(out)
        with nogil:
            for i in range(n):
                dst[i] = draw_normal(&self._state)
        return out
