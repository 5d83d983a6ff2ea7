"""§3 samplers: pure functions of (epoch, step-in-epoch) giving a batch's dataset indices.

This module holds the base and the range samplers (positions of ``[0, n)``); the
samplers built on caller-given tables, ``MixingSampler`` and ``BucketedSampler``, are in
``tablesamplers.pyx``, which subclasses :class:`Sampler` through ``samplers.pxd``.

The built-in samplers fill a caller's int64 buffer in C (``indices_into``, what the
loader's workers use): Sequential writes its indices directly, Shuffled and Mixing run
their kernels without the GIL, and Bucketed copies a slice of an epoch plan that it
builds without the GIL. ``indices`` is the allocating convenience.

:class:`Sampler` is also a base for samplers written in Python: define ``batch_size``,
``steps_per_epoch`` and ``indices(epoch, step)``, and the base's ``indices_into`` and
``batch_length`` (what the loader calls) check and copy what ``indices`` returns.

No sampler pickles its C state: each rebuilds through its validating constructor
(``__reduce__``), so a forged state is refused like a bad argument.
"""
import copyreg

cimport cython
cimport numpy as cnp
import numpy as np
from libc.string cimport memcpy

from onemodel_cy.core.typedefs cimport u64, i64
from onemodel_cy.core.validate cimport as_u64, as_index, as_size, as_integer_vector, describe
from onemodel_cy.core.rng cimport derive_seed, STREAM_EPOCH_ORDER
from onemodel_cy.core.permute cimport Permutation, permutation_of, permute_range

cnp.import_array()

cdef object INT64_MAX = (1 << 63) - 1

cdef str PYTHON_SAMPLER = ("a Python sampler (a subclass of Sampler) defines batch_size and steps_per_epoch "
                           "(integers >= 1, as attributes or properties) and indices(epoch, step) returning "
                           "a 1-D array of at most batch_size int64 dataset indices")


cdef Py_ssize_t positive_int(object value, str name) except -1:
    return as_size(value, name, 1)


class _Required:
    """What ``Sampler`` says of an attribute a Python subclass has not defined (a non-data
    descriptor: an instance attribute or a subclass property of the same name wins)."""

    def __init__(self, name):
        self.name = name

    def __get__(self, obj, owner=None):
        if obj is None:
            return self
        raise NotImplementedError(f"{type(obj).__name__} does not define {self.name}: {PYTHON_SAMPLER}")


cdef int check_out(cnp.ndarray out) except -1:
    """``out`` of ``indices_into``: a writable, aligned, C-contiguous 1-D int64 array."""
    if (cnp.PyArray_TYPE(out) != cnp.NPY_INT64 or cnp.PyArray_NDIM(out) != 1
            or not cnp.PyArray_IS_C_CONTIGUOUS(out) or not cnp.PyArray_ISALIGNED(out)
            or not cnp.PyArray_ISWRITEABLE(out) or not cnp.PyArray_ISNOTSWAPPED(out)):
        raise TypeError(f"out must be a writable, aligned, C-contiguous 1-D native int64 array, "
                        f"received {describe(out)}")
    return 0


@cython.auto_pickle(False)
cdef class Sampler:
    """Base of the §3 samplers, and of samplers written in Python.

    A Python subclass defines ``batch_size`` and ``steps_per_epoch`` (integers >= 1, as
    attributes or properties) and ``indices(epoch, step)`` returning a 1-D array (or
    sequence) of at most ``batch_size`` dataset indices. The base's ``indices_into`` and
    ``batch_length``, which the loader calls, then call ``indices`` and check what it
    returns (integers in ``[0, 2**63)``, between 1 and ``batch_size`` of them); using a
    subclass that defines none of these raises ``NotImplementedError`` naming them.

    Attributes
    ----------
    batch_size : int
        ``B``, the number of positions in a full batch.
    steps_per_epoch : int
        ``S``; global step ``g`` is epoch ``g // S``, step-in-epoch ``g % S``.
    """
    # The cdef fields and methods are declared in samplers.pxd.
    batch_size = _Required("batch_size")
    steps_per_epoch = _Required("steps_per_epoch")

    def __cinit__(self, *args, **kwargs):
        self._python = type(self).indices is not Sampler.indices

    cdef bint built_in(self) noexcept:
        """True for the built-in samplers (and their subclasses), which override this: a
        cdef method, so the base need not import the module of any of them."""
        return False

    cdef int begin_init(self) except -1:
        """Refuse a second ``__init__`` (workers may be reading the sampler's tables): the
        object is claimed before any Python code runs, so two threads can never both
        initialise it. A failed __init__ leaves it claimed and unusable."""
        if self._claimed:
            raise RuntimeError(f"{type(self).__name__}.__init__ was already called on this sampler; "
                               f"build a new one")
        self._claimed = True
        return 0

    cdef int check_ready(self) except -1:
        if not self._initialised:
            # The bare base is abstract; a built-in sampler made without its constructor is
            # an object in a state it cannot serve (the exception rule).
            error = RuntimeError if self.built_in() else NotImplementedError
            raise error(f"{type(self).__name__} was never initialised: build a built-in sampler through "
                        f"its constructor; {PYTHON_SAMPLER}")
        return 0

    cdef Py_ssize_t batch_length_of(self, Py_ssize_t step) noexcept nogil:
        return self._batch_size

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        """Write the batch's indices to ``out`` (room for ``batch_length_of(step)``)."""
        raise NotImplementedError(PYTHON_SAMPLER)

    cdef Py_ssize_t checked_step(self, object epoch, object step, Py_ssize_t steps) except -1:
        e = as_index(epoch, "epoch")
        if e < 0:
            raise ValueError(f"epoch must be a non-negative integer, received {e}")
        s = as_index(step, "step")
        if not 0 <= s < steps:
            raise ValueError(f"step must lie in [0, steps_per_epoch) = [0, {steps}), received {s}")
        return s

    cdef Py_ssize_t native_step(self, object epoch, object step) except -1:
        self.check_ready()
        return self.checked_step(epoch, step, self._steps_per_epoch)

    cdef cnp.ndarray python_indices(self, object epoch, object step):
        """What a Python subclass's ``indices`` returns, checked, as a C-contiguous int64 array."""
        steps = as_size(self.steps_per_epoch, f"{type(self).__name__}.steps_per_epoch", 1)
        limit = as_size(self.batch_size, f"{type(self).__name__}.batch_size", 1)
        self.checked_step(epoch, step, steps)
        name = f"{type(self).__name__}.indices({epoch}, {step})"
        array = as_integer_vector(self.indices(epoch, step), name)
        if not 1 <= array.shape[0] <= limit:
            raise ValueError(f"{name} must return between 1 and batch_size = {limit} indices, "
                             f"received {array.shape[0]}")
        if array.min() < 0 or array.max() > INT64_MAX:
            raise ValueError(f"{name} must return dataset indices in [0, 2**63), received "
                             f"min={array.min()}, max={array.max()}")
        return np.ascontiguousarray(array, dtype=np.int64)

    def batch_length(self, step):
        """Number of indices at ``step`` (``batch_size`` except a short last batch)."""
        if self._python:
            return self.python_indices(0, step).shape[0]
        return self.batch_length_of(self.native_step(0, step))

    def indices(self, epoch, step):
        """The dataset indices of (epoch, step-in-epoch) as a new int64 array."""
        cdef Py_ssize_t s = self.native_step(epoch, step)
        cdef cnp.ndarray out = np.empty(self.batch_length_of(s), dtype=np.int64)
        self.fill(as_u64(epoch, "epoch"), s, <i64*>cnp.PyArray_DATA(out))
        return out

    def indices_into(self, epoch, step, cnp.ndarray out not None):
        """Write the indices of (epoch, step-in-epoch) into ``out``; return how many.

        ``out`` must be a writable, aligned, C-contiguous, 1-D native int64 array
        (``TypeError`` otherwise: a misaligned view is refused, not read) with room for
        the batch (``ValueError`` otherwise).
        """
        check_out(out)
        epoch = as_index(epoch, "epoch")      # once: every later use sees the same value
        step = as_index(step, "step")
        cdef cnp.ndarray values
        cdef Py_ssize_t s, length
        if self._python:
            values = self.python_indices(epoch, step)
            length = values.shape[0]
        else:
            s = self.native_step(epoch, step)
            length = self.batch_length_of(s)
        if out.shape[0] < length:
            raise ValueError(f"out must have room for the batch's {length} indices, received "
                             f"{describe(out)}")
        if self._python:
            memcpy(cnp.PyArray_DATA(out), cnp.PyArray_DATA(values), length * sizeof(i64))
        else:
            self.fill(as_u64(epoch, "epoch"), s, <i64*>cnp.PyArray_DATA(out))
        return length

    def __reduce__(self):
        # A Python subclass keeps its state in its __dict__; the base holds none of it.
        if self._initialised:
            raise TypeError(f"{type(self).__name__} must define __reduce__ to be pickled")
        return (copyreg.__newobj__, (type(self),), getattr(self, "__dict__", None))


cdef int exact_type_only(object obj, type cls) except -1:
    """Pickling rebuilds through ``cls``'s constructor: a subclass (whose overrides that
    would drop) must say how it pickles."""
    if type(obj) is not cls:
        raise TypeError(f"{type(obj).__name__} must define __reduce__ to be pickled (the inherited one "
                        f"would rebuild a plain {cls.__name__})")
    return 0


@cython.auto_pickle(False)
cdef class _RangeSampler(Sampler):
    """Shared by the sequential and shuffled samplers: positions ``step*B + i`` of ``[0, n)``."""
    cdef readonly Py_ssize_t n
    cdef readonly bint drop_last

    def __init__(self, n, batch_size, drop_last):
        self.begin_init()
        self.init_range(n, batch_size, drop_last)
        self._initialised = True

    cdef bint built_in(self) noexcept:
        return True

    cdef int init_range(self, n, batch_size, drop_last) except -1:
        """Validate first, assign last: a refused argument leaves the sampler unusable, never half-built."""
        cdef Py_ssize_t size = positive_int(n, "n"), B = positive_int(batch_size, "batch_size"), steps
        cdef bint drop = bool(drop_last)
        if drop:
            if size < B:
                raise ValueError(
                    f"with drop_last=True, n must be >= batch_size to give one batch, "
                    f"received n={size}, batch_size={B}")
            steps = size // B
        else:
            # D8: a short last batch holds the remaining positions. ceil(n / B) without
            # forming n + B - 1, which overflows for n near 2**63.
            steps = size // B + (1 if size % B else 0)
        self.n, self._batch_size, self._steps_per_epoch, self.drop_last = size, B, steps, drop
        return 0

    @property
    def batch_size(self):
        """``B``, the number of positions in a full batch."""
        return self._batch_size

    @property
    def steps_per_epoch(self):
        """``S``: ``n // B`` with drop-last, else ``ceil(n / B)``."""
        return self._steps_per_epoch

    cdef Py_ssize_t batch_length_of(self, Py_ssize_t step) noexcept nogil:
        # step < S, so step * B <= n - 1 (no overflow).
        cdef Py_ssize_t remaining = self.n - step * self._batch_size
        return self._batch_size if remaining > self._batch_size else remaining


@cython.auto_pickle(False)
cdef class SequentialSampler(_RangeSampler):
    """Position ``p = step*B + i`` reads dataset index ``p`` (§3).

    Parameters
    ----------
    n : int
        Dataset size, >= 1.
    batch_size : int
        ``B`` >= 1.
    drop_last : bool, default True
        ``S = n // B`` full batches; otherwise ``S = ceil(n / B)`` with a short last batch.
    """

    def __init__(self, n, batch_size, drop_last=True):
        self.begin_init()
        self.init_range(n, batch_size, drop_last)
        self._initialised = True

    def __repr__(self):
        if not self._initialised:
            return f"{type(self).__name__}(<never initialised>)"
        return f"SequentialSampler(n={self.n}, batch_size={self._batch_size}, drop_last={self.drop_last})"

    def __reduce__(self):
        self.check_ready()
        exact_type_only(self, SequentialSampler)
        return (SequentialSampler, (self.n, self._batch_size, self.drop_last))

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        cdef Py_ssize_t i, start = step * self._batch_size
        cdef Py_ssize_t length = self.batch_length_of(step)
        for i in range(length):
            out[i] = start + i
        return 0


@cython.auto_pickle(False)
cdef class ShuffledSampler(_RangeSampler):
    """Position ``p`` of epoch ``e`` reads index ``perm(p)``, keyed by ``derive(seed, e, 0, 0, 101)`` (§3, D7).

    Parameters
    ----------
    n : int
        Dataset size, >= 1.
    batch_size : int
        ``B`` >= 1.
    seed : int
        The sampler's seed (D12), reduced mod 2**64.
    drop_last : bool, default True
        As for :class:`SequentialSampler`.
    """
    cdef readonly u64 seed

    def __init__(self, n, batch_size, seed, drop_last=True):
        self.begin_init()
        cdef u64 key = as_u64(seed, "seed")
        self.init_range(n, batch_size, drop_last)
        self.seed = key
        self._initialised = True

    def __repr__(self):
        if not self._initialised:
            return f"{type(self).__name__}(<never initialised>)"
        return (f"ShuffledSampler(n={self.n}, batch_size={self._batch_size}, seed={self.seed}, "
                f"drop_last={self.drop_last})")

    def __reduce__(self):
        self.check_ready()
        exact_type_only(self, ShuffledSampler)
        return (ShuffledSampler, (self.n, self._batch_size, self.seed, self.drop_last))

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        cdef Py_ssize_t start = step * self._batch_size
        cdef Py_ssize_t length = self.batch_length_of(step)
        cdef Permutation perm = permutation_of(<u64>self.n,
                                               derive_seed(self.seed, epoch, 0, 0, STREAM_EPOCH_ORDER))
        with nogil:
            permute_range(&perm, <u64>start, <u64>length, out)
        return 0
