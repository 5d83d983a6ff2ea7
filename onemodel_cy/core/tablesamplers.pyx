"""§3 samplers built on caller-given tables: ``MixingSampler`` (sources and shares) and
``BucketedSampler`` (a length per dataset index).

Each checks its table once, keeps a sealed copy of it (docs/safety.md) and reads it
without the GIL: Mixing draws each slot in a GIL-free kernel, Bucketed builds an epoch
plan without the GIL and copies a slice of it. Both subclass
:class:`onemodel_cy.core.samplers.Sampler` (declared in ``samplers.pxd``) and, like the
range samplers, pickle by rebuilding through their validating constructor
(``__reduce__``).
"""
import math
import threading

cimport cython
cimport numpy as cnp
import numpy as np
from libc.stdlib cimport malloc, free, qsort
from libc.string cimport memcpy

from onemodel_cy.core.typedefs cimport u64, i64
from onemodel_cy.core.validate cimport as_u64, as_index, as_real, as_integer_vector
from onemodel_cy.core.sealed cimport sealed_copy, sealed_empty, seal
from onemodel_cy.core.rng cimport (derive_seed, draw_double, draw_int, STREAM_MIXING,
                                   STREAM_BUCKET_ORDER, STREAM_BUCKET_PLACE)
from onemodel_cy.core.permute cimport Permutation, permutation_of, permute, permute_range
from onemodel_cy.core.samplers cimport Sampler, positive_int, exact_type_only

cnp.import_array()

cdef object INT64_MAX = (1 << 63) - 1


@cython.auto_pickle(False)
cdef class MixingSampler(Sampler):
    """Each slot draws a source by share, then an index of that source, with replacement (§3, D9, D10).

    Parameters
    ----------
    sources : sequence of (start, size, share)
        Source ``k`` covers dataset indices ``[start, start + size)``; ``share >= 0``.
        Sources with ``share == 0`` or ``size == 0`` never take part; at least one must.
    batch_size : int
        ``B`` >= 1.
    steps_per_epoch : int
        ``S`` >= 1 (the spec leaves it to the caller, D9).
    seed : int
        The sampler's seed (D12).
    """
    cdef readonly u64 seed
    cdef readonly tuple sources
    cdef cnp.ndarray _starts, _sizes, _bounds   # sealed: the sources taking part, in order
    cdef Py_ssize_t _eligible

    def __init__(self, sources, batch_size, steps_per_epoch, seed):
        self.begin_init()
        cdef Py_ssize_t B = positive_int(batch_size, "batch_size")
        cdef Py_ssize_t S = positive_int(steps_per_epoch, "steps_per_epoch")
        cdef u64 key = as_u64(seed, "seed")
        parsed = tuple(parse_source(k, source) for k, source in enumerate(sources))
        eligible = [(start, size, share) for start, size, share in parsed if share > 0 and size > 0]
        if not eligible:
            raise ValueError(f"MixingSampler needs a source with share > 0 and size > 0, received {list(parsed)!r}")
        total = 0.0
        for _, _, share in eligible:
            total += share
        if not math.isfinite(total):
            raise ValueError(f"the shares must add up to a finite total, received {[s[2] for s in eligible]}")
        bounds = []
        cumulative = 0.0
        for _, _, share in eligible:
            cumulative += share / total
            bounds.append(cumulative)
        # Sealed copies: draw_int(state, size) needs every size >= 1, so no Python code may
        # edit these tables after they were checked.
        starts = sealed_copy(np.array([s[0] for s in eligible], dtype=np.int64), cnp.NPY_INT64, "starts")
        sizes = sealed_copy(np.array([s[1] for s in eligible], dtype=np.uint64), cnp.NPY_UINT64, "sizes")
        bounds_array = sealed_copy(np.array(bounds, dtype=np.float64), cnp.NPY_FLOAT64, "bounds")
        self._batch_size, self._steps_per_epoch, self.seed, self.sources = B, S, key, parsed
        self._starts, self._sizes, self._bounds = starts, sizes, bounds_array
        self._eligible = len(eligible)
        self._initialised = True

    cdef bint built_in(self) noexcept:
        return True

    @property
    def batch_size(self):
        """``B``, the number of slots of every batch."""
        return self._batch_size

    @property
    def steps_per_epoch(self):
        """``S``, as given."""
        return self._steps_per_epoch

    def __repr__(self):
        if not self._initialised:
            return f"{type(self).__name__}(<never initialised>)"
        return (f"MixingSampler(sources={list(self.sources)!r}, batch_size={self._batch_size}, "
                f"steps_per_epoch={self._steps_per_epoch}, seed={self.seed})")

    def __reduce__(self):
        self.check_ready()
        exact_type_only(self, MixingSampler)
        return (MixingSampler, (list(self.sources), self._batch_size, self._steps_per_epoch, self.seed))

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        cdef const i64* starts = <i64*>cnp.PyArray_DATA(self._starts)
        cdef const u64* sizes = <u64*>cnp.PyArray_DATA(self._sizes)
        cdef const double* bounds = <double*>cnp.PyArray_DATA(self._bounds)
        cdef Py_ssize_t slot, k, last = self._eligible - 1
        cdef u64 state
        cdef double u
        with nogil:
            for slot in range(self._batch_size):
                state = derive_seed(self.seed, epoch, <u64>step, <u64>slot, STREAM_MIXING)
                u = draw_double(&state)
                k = 0
                while k < last and not bounds[k] > u:
                    k += 1
                # start + size <= 2**63 was checked, so the sum fits int64.
                out[slot] = starts[k] + <i64>draw_int(&state, sizes[k])
        return 0


cdef tuple parse_source(Py_ssize_t k, object source):
    """``sources[k]`` as (start, size, share), or a clear error."""
    try:
        start, size, share = source
    except (TypeError, ValueError):
        raise TypeError(f"sources[{k}] must be a (start, size, share) triple, received {source!r}") from None
    start = as_index(start, f"sources[{k}].start")
    size = as_index(size, f"sources[{k}].size")
    share = as_real(share, f"sources[{k}].share")
    if start < 0 or size < 0 or start + size > INT64_MAX + 1:
        raise ValueError(f"sources[{k}] must have 0 <= start, 0 <= size, start + size <= 2**63, "
                         f"received start={start}, size={size}")
    if not (share >= 0 and math.isfinite(share)):
        raise ValueError(f"sources[{k}].share must be finite and >= 0, received {share}")
    return (start, size, share)


cdef int compare_u64(const void* a, const void* b) noexcept nogil:
    cdef u64 x = (<const u64*>a)[0]
    cdef u64 y = (<const u64*>b)[0]
    return (x > y) - (x < y)


cdef cnp.ndarray lengths_array(object lengths):
    """``lengths`` checked (1-D integers in [0, 2**31), 1 <= n < 2**32) as a sealed int64
    copy: never the caller's own array, which the caller could edit (or whose flags the
    sampler would change)."""
    array = as_integer_vector(lengths, "lengths")
    n = array.shape[0]
    if not 1 <= n < (1 << 32):
        raise ValueError(f"lengths must hold between 1 and 2**32 - 1 entries, received {n}")
    if array.min() < 0 or array.max() >= (1 << 31):
        raise ValueError(f"every length must lie in [0, 2**31), received min={array.min()}, "
                         f"max={array.max()}")
    return sealed_copy(np.asarray(array, dtype=np.int64), cnp.NPY_INT64, "lengths")


@cython.auto_pickle(False)
cdef class BucketedSampler(Sampler):
    """Shuffle, sort pools of similar lengths, cut into batches, place batches by a permutation (§3, D11).

    Always drop-last: ``S = n // batch_size``. The plan of an epoch is built in
    O(n log n) without the GIL and the plans of the two most recently used epochs are
    kept, so that workers straddling an epoch boundary do not rebuild.

    Parameters
    ----------
    lengths : 1-D sequence of int
        Sort key of each dataset index, each in ``[0, 2**31)``; ``1 <= n < 2**32``.
        Copied: the caller's array is neither kept nor changed.
    batch_size : int
        ``B`` >= 1, at most ``n``.
    pool_batches : int
        Batches per sorting pool, >= 1.
    seed : int
        The sampler's seed (D12).
    """
    cdef readonly u64 seed
    cdef readonly Py_ssize_t n, pool_batches
    cdef cnp.ndarray _lengths     # sealed int64 copy
    cdef tuple _plans             # ((epoch, sealed int64 plan of S*B indices in step order), ...), most recent first
    cdef object _lock

    def __init__(self, lengths, batch_size, pool_batches, seed):
        self.begin_init()
        cdef cnp.ndarray table = lengths_array(lengths)
        cdef Py_ssize_t n = table.shape[0]
        cdef Py_ssize_t B = positive_int(batch_size, "batch_size")
        cdef Py_ssize_t pools = positive_int(pool_batches, "pool_batches")
        cdef u64 key = as_u64(seed, "seed")
        if B > n:
            raise ValueError(f"batch_size must be <= n (always drop-last), received batch_size="
                             f"{B}, n={n}")
        self._lengths, self.n, self._batch_size, self.pool_batches, self.seed = table, n, B, pools, key
        self._steps_per_epoch = n // B
        self._plans = ()
        self._lock = threading.Lock()
        self._initialised = True

    cdef bint built_in(self) noexcept:
        return True

    @property
    def batch_size(self):
        """``B``, the number of indices of every batch."""
        return self._batch_size

    @property
    def steps_per_epoch(self):
        """``S = n // batch_size``."""
        return self._steps_per_epoch

    @property
    def lengths(self):
        """The lengths (a read-only view that cannot be made writeable: the plan depends on them)."""
        self.check_ready()
        return self._lengths.view()

    def __repr__(self):
        if not self._initialised:
            return f"{type(self).__name__}(<never initialised>)"
        return (f"BucketedSampler(lengths=<{self.n} lengths>, batch_size={self._batch_size}, "
                f"pool_batches={self.pool_batches}, seed={self.seed})")

    def __reduce__(self):
        self.check_ready()
        exact_type_only(self, BucketedSampler)
        return (BucketedSampler, (self._lengths, self._batch_size, self.pool_batches, self.seed))

    cdef cnp.ndarray plan(self, u64 epoch):
        with self._lock:
            for cached_epoch, cached in self._plans:
                if cached_epoch == epoch:
                    return cached
            built = self.build_plan(epoch)
            self._plans = ((epoch, built),) + self._plans[:1]
            return built

    cdef cnp.ndarray build_plan(self, u64 epoch):
        cdef Py_ssize_t B = self._batch_size, S = self._steps_per_epoch
        cdef Py_ssize_t kept = S * B          # <= n < 2**32
        # B * pool_batches, computed so that a huge pool_batches cannot overflow.
        cdef Py_ssize_t pool = kept if self.pool_batches >= S else B * self.pool_batches
        cdef cnp.npy_intp dims[1]
        dims[0] = kept
        cdef cnp.ndarray result = sealed_empty(1, dims, cnp.NPY_INT64)
        cdef i64* plan = <i64*>cnp.PyArray_DATA(result)
        cdef const i64* lengths = <i64*>cnp.PyArray_DATA(self._lengths)
        cdef u64* keys = <u64*>malloc(kept * sizeof(u64))
        if keys == NULL:
            raise MemoryError(f"cannot allocate the bucketing plan of {kept} indices")
        cdef Permutation order = permutation_of(<u64>self.n,
                                                derive_seed(self.seed, epoch, 0, 0, STREAM_BUCKET_ORDER))
        cdef Permutation place = permutation_of(<u64>S,
                                                derive_seed(self.seed, epoch, 1, 0, STREAM_BUCKET_PLACE))
        cdef Py_ssize_t p, start, t, i
        cdef u64 index, step
        with nogil:
            permute_range(&order, 0, <u64>kept, <i64*>keys)
            for p in range(kept):
                index = keys[p]
                keys[p] = (<u64>lengths[index] << 32) | index   # unique keys: any sort agrees
            start = 0
            while start < kept:
                qsort(keys + start, min(pool, kept - start), sizeof(u64), compare_u64)
                start += pool
            for t in range(S):
                step = permute(&place, <u64>t)
                for i in range(B):
                    plan[step * B + i] = <i64>(keys[t * B + i] & 0xFFFFFFFFULL)
        free(keys)
        seal(result)
        return result

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        cdef cnp.ndarray plan = self.plan(epoch)
        memcpy(out, <i64*>cnp.PyArray_DATA(plan) + step * self._batch_size,
               self._batch_size * sizeof(i64))
        return 0
