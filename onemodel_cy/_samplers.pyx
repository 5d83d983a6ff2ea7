"""§3 samplers: pure functions of (epoch, step-in-epoch) giving a batch's dataset indices.

Every sampler fills a caller's int64 buffer without the GIL (``indices_into``), which is
what the loader's workers use; ``indices`` is the allocating convenience.
"""
import math
import threading

cimport numpy as cnp
import numpy as np
from libc.stdlib cimport malloc, free, qsort
from libc.string cimport memcpy

from onemodel_cy._typedefs cimport u64, i64
from onemodel_cy._validate cimport as_u64, as_count, as_index
from onemodel_cy._rng cimport (derive_seed, draw_double, draw_int,
                               STREAM_EPOCH_ORDER, STREAM_MIXING, STREAM_BUCKET_ORDER,
                               STREAM_BUCKET_PLACE)
from onemodel_cy._permute cimport Permutation, permutation_of, permute, permute_range

cnp.import_array()

cdef object INT64_MAX = (1 << 63) - 1


cdef Py_ssize_t positive_int(object value, str name) except -1:
    v = as_index(value, name)
    if v < 1 or v > INT64_MAX:
        raise ValueError(f"{name} must be a positive integer (>= 1), received {v}")
    return v


cdef class Sampler:
    """Base of the §3 samplers.

    Attributes
    ----------
    batch_size : int
        ``B``, the number of positions in a full batch.
    steps_per_epoch : int
        ``S``; global step ``g`` is epoch ``g // S``, step-in-epoch ``g % S``.
    """
    cdef readonly Py_ssize_t batch_size
    cdef readonly Py_ssize_t steps_per_epoch

    cdef Py_ssize_t batch_length_of(self, Py_ssize_t step) noexcept nogil:
        return self.batch_size

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        """Write the batch's indices to ``out`` (room for ``batch_length_of(step)``)."""
        raise NotImplementedError

    cdef Py_ssize_t checked_step(self, object epoch, object step) except -1:
        e = as_index(epoch, "epoch")
        if e < 0:
            raise ValueError(f"epoch must be a non-negative integer, received {e}")
        s = as_index(step, "step")
        if not 0 <= s < self.steps_per_epoch:
            raise ValueError(
                f"step must lie in [0, steps_per_epoch) = [0, {self.steps_per_epoch}), received {s}")
        return s

    def batch_length(self, step):
        """Number of indices at ``step`` (``batch_size`` except a short last batch)."""
        return self.batch_length_of(self.checked_step(0, step))

    def indices(self, epoch, step):
        """The dataset indices of (epoch, step-in-epoch) as a new int64 array."""
        cdef Py_ssize_t s = self.checked_step(epoch, step)
        cdef cnp.ndarray out = np.empty(self.batch_length_of(s), dtype=np.int64)
        self.fill(as_u64(epoch, "epoch"), s, <i64*>cnp.PyArray_DATA(out))
        return out

    def indices_into(self, epoch, step, cnp.ndarray out not None):
        """Write the indices of (epoch, step-in-epoch) into ``out``; return how many.

        ``out`` must be a writable, C-contiguous, 1-D int64 array with room for the batch.
        """
        cdef Py_ssize_t s = self.checked_step(epoch, step)
        cdef Py_ssize_t length = self.batch_length_of(s)
        if (out.dtype != np.int64 or out.ndim != 1 or not out.flags.c_contiguous
                or not out.flags.writeable or out.shape[0] < length):
            raise ValueError(
                f"out must be a writable C-contiguous 1-D int64 array of length >= {length}, "
                f"received dtype={out.dtype}, shape={(<object>out).shape}, writeable={out.flags.writeable}")
        self.fill(as_u64(epoch, "epoch"), s, <i64*>cnp.PyArray_DATA(out))
        return length


cdef class _RangeSampler(Sampler):
    """Shared by the sequential and shuffled samplers: positions ``step*B + i`` of ``[0, n)``."""
    cdef readonly Py_ssize_t n
    cdef readonly bint drop_last

    def __init__(self, n, batch_size, drop_last):
        self.n = positive_int(n, "n")
        self.batch_size = positive_int(batch_size, "batch_size")
        self.drop_last = bool(drop_last)
        if self.drop_last:
            if self.n < self.batch_size:
                raise ValueError(
                    f"with drop_last=True, n must be >= batch_size to give one batch, "
                    f"received n={self.n}, batch_size={self.batch_size}")
            self.steps_per_epoch = self.n // self.batch_size
        else:
            # D8: a short last batch holds the remaining positions.
            self.steps_per_epoch = (self.n + self.batch_size - 1) // self.batch_size

    cdef Py_ssize_t batch_length_of(self, Py_ssize_t step) noexcept nogil:
        cdef Py_ssize_t remaining = self.n - step * self.batch_size
        return self.batch_size if remaining > self.batch_size else remaining


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
        super().__init__(n, batch_size, drop_last)

    def __repr__(self):
        return f"SequentialSampler(n={self.n}, batch_size={self.batch_size}, drop_last={self.drop_last})"

    def __reduce__(self):
        return (SequentialSampler, (self.n, self.batch_size, self.drop_last))

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        cdef Py_ssize_t i, start = step * self.batch_size
        cdef Py_ssize_t length = self.batch_length_of(step)
        for i in range(length):
            out[i] = start + i
        return 0


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
        super().__init__(n, batch_size, drop_last)
        self.seed = as_u64(seed, "seed")

    def __repr__(self):
        return (f"ShuffledSampler(n={self.n}, batch_size={self.batch_size}, seed={self.seed}, "
                f"drop_last={self.drop_last})")

    def __reduce__(self):
        return (ShuffledSampler, (self.n, self.batch_size, self.seed, self.drop_last))

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        cdef Py_ssize_t start = step * self.batch_size
        cdef Py_ssize_t length = self.batch_length_of(step)
        cdef Permutation perm = permutation_of(<u64>self.n,
                                               derive_seed(self.seed, epoch, 0, 0, STREAM_EPOCH_ORDER))
        with nogil:
            permute_range(&perm, <u64>start, <u64>length, out)
        return 0


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
    cdef cnp.ndarray _starts, _sizes, _bounds   # the sources taking part, in order
    cdef Py_ssize_t _eligible

    def __init__(self, sources, batch_size, steps_per_epoch, seed):
        self.batch_size = positive_int(batch_size, "batch_size")
        self.steps_per_epoch = positive_int(steps_per_epoch, "steps_per_epoch")
        self.seed = as_u64(seed, "seed")
        parsed = []
        for k, source in enumerate(sources):
            try:
                start, size, share = source
            except (TypeError, ValueError):
                raise TypeError(f"sources[{k}] must be a (start, size, share) triple, received {source!r}") from None
            start = as_index(start, f"sources[{k}].start")
            size = as_index(size, f"sources[{k}].size")
            if isinstance(share, (str, bytes, bool)):
                raise TypeError(f"sources[{k}].share must be a real number, received {share!r}")
            try:
                share = float(share)
            except (TypeError, ValueError):
                raise TypeError(f"sources[{k}].share must be a real number, received {share!r}") from None
            if start < 0 or size < 0 or start + size > INT64_MAX + 1:
                raise ValueError(f"sources[{k}] must have 0 <= start, 0 <= size, start + size <= 2**63, "
                                 f"received start={start}, size={size}")
            if not (share >= 0 and math.isfinite(share)):
                raise ValueError(f"sources[{k}].share must be finite and >= 0, received {share}")
            parsed.append((start, size, share))
        self.sources = tuple(parsed)
        eligible = [(start, size, share) for start, size, share in parsed if share > 0 and size > 0]
        if not eligible:
            raise ValueError(f"MixingSampler needs a source with share > 0 and size > 0, received {parsed!r}")
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
        self._starts = np.array([s[0] for s in eligible], dtype=np.int64)
        self._sizes = np.array([s[1] for s in eligible], dtype=np.uint64)
        self._bounds = np.array(bounds, dtype=np.float64)
        self._eligible = len(eligible)

    def __repr__(self):
        return (f"MixingSampler(sources={list(self.sources)!r}, batch_size={self.batch_size}, "
                f"steps_per_epoch={self.steps_per_epoch}, seed={self.seed})")

    def __reduce__(self):
        return (MixingSampler, (list(self.sources), self.batch_size, self.steps_per_epoch, self.seed))

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        cdef const i64* starts = <i64*>cnp.PyArray_DATA(self._starts)
        cdef const u64* sizes = <u64*>cnp.PyArray_DATA(self._sizes)
        cdef const double* bounds = <double*>cnp.PyArray_DATA(self._bounds)
        cdef Py_ssize_t slot, k, last = self._eligible - 1
        cdef u64 state
        cdef double u
        with nogil:
            for slot in range(self.batch_size):
                state = derive_seed(self.seed, epoch, <u64>step, <u64>slot, STREAM_MIXING)
                u = draw_double(&state)
                k = 0
                while k < last and not bounds[k] > u:
                    k += 1
                out[slot] = starts[k] + <i64>draw_int(&state, sizes[k])
        return 0


cdef int compare_u64(const void* a, const void* b) noexcept nogil:
    cdef u64 x = (<const u64*>a)[0]
    cdef u64 y = (<const u64*>b)[0]
    return (x > y) - (x < y)


cdef class BucketedSampler(Sampler):
    """Shuffle, sort pools of similar lengths, cut into batches, place batches by a permutation (§3, D11).

    Always drop-last: ``S = n // batch_size``. The plan of an epoch is built in
    O(n log n) without the GIL and the plans of the two most recently used epochs are
    kept, so that workers straddling an epoch boundary do not rebuild.

    Parameters
    ----------
    lengths : 1-D sequence of int
        Sort key of each dataset index, each in ``[0, 2**31)``; ``1 <= n < 2**32``.
    batch_size : int
        ``B`` >= 1, at most ``n``.
    pool_batches : int
        Batches per sorting pool, >= 1.
    seed : int
        The sampler's seed (D12).
    """
    cdef readonly u64 seed
    cdef readonly Py_ssize_t n, pool_batches
    cdef cnp.ndarray _lengths
    cdef list _plans          # [(epoch, int64 plan of S*B indices in step order)], most recent first
    cdef object _lock

    def __init__(self, lengths, batch_size, pool_batches, seed):
        array = np.asarray(lengths)
        if array.ndim != 1:
            raise TypeError(f"lengths must be a 1-D sequence of integers, received shape={array.shape}")
        if array.dtype.kind not in "iu" and array.size:
            for position, value in enumerate(lengths):
                as_index(value, f"lengths[{position}]")
            # Integers too large for int64 (the range check below names them).
            array = np.asarray(array.tolist(), dtype=object)
        self.n = array.shape[0]
        if not 1 <= self.n < (1 << 32):
            raise ValueError(f"lengths must hold between 1 and 2**32 - 1 entries, received {self.n}")
        if array.min() < 0 or array.max() >= (1 << 31):
            raise ValueError(f"every length must lie in [0, 2**31), received min={array.min()}, "
                             f"max={array.max()}")
        self._lengths = np.ascontiguousarray(array, dtype=np.int64)
        self._lengths.flags.writeable = False
        self.batch_size = positive_int(batch_size, "batch_size")
        self.pool_batches = positive_int(pool_batches, "pool_batches")
        self.seed = as_u64(seed, "seed")
        if self.batch_size > self.n:
            raise ValueError(f"batch_size must be <= n (always drop-last), received batch_size="
                             f"{self.batch_size}, n={self.n}")
        self.steps_per_epoch = self.n // self.batch_size
        self._plans = []
        self._lock = threading.Lock()

    @property
    def lengths(self):
        """The lengths (a read-only view: the plan depends on them)."""
        return self._lengths.view()

    def __repr__(self):
        return (f"BucketedSampler(lengths=<{self.n} lengths>, batch_size={self.batch_size}, "
                f"pool_batches={self.pool_batches}, seed={self.seed})")

    def __reduce__(self):
        return (BucketedSampler, (self._lengths, self.batch_size, self.pool_batches, self.seed))

    cdef cnp.ndarray plan(self, u64 epoch):
        with self._lock:
            for cached_epoch, cached in self._plans:
                if cached_epoch == epoch:
                    return cached
            built = self.build_plan(epoch)
            self._plans.insert(0, (epoch, built))
            del self._plans[2:]
            return built

    cdef cnp.ndarray build_plan(self, u64 epoch):
        cdef Py_ssize_t B = self.batch_size, S = self.steps_per_epoch
        cdef Py_ssize_t kept = S * B
        # B * pool_batches, computed so that a huge pool_batches cannot overflow.
        cdef Py_ssize_t pool = kept if self.pool_batches >= S else B * self.pool_batches
        cdef cnp.ndarray result = np.empty(kept, dtype=np.int64)
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
        return result

    cdef int fill(self, u64 epoch, Py_ssize_t step, i64* out) except -1:
        cdef cnp.ndarray plan = self.plan(epoch)
        memcpy(out, <i64*>cnp.PyArray_DATA(plan) + step * self.batch_size,
               self.batch_size * sizeof(i64))
        return 0
