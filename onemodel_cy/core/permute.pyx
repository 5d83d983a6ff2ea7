"""§3 keyed permutation of ``[0, n)``: no table to build or cache per epoch."""
cimport numpy as cnp
import numpy as np

from onemodel_cy.core.typedefs cimport u64, i64
from onemodel_cy.core.validate cimport as_u64, as_count, checked_mul

cnp.import_array()


def keyed_permutation(p, n, key):
    """Position ``p`` of the keyed permutation of ``[0, n)`` (§3, D6).

    Parameters
    ----------
    p : int
        Position, ``0 <= p < n`` (any ``p >= 0`` when ``n <= 1``, where the result is 0).
    n : int
        Size of the permuted range, ``0 <= n < 2**64``.
    key : int
        Permutation key, reduced mod 2**64 (usually ``derive(...)``).
    """
    cdef u64 size = as_count(n, "n")
    cdef u64 position = as_count(p, "p")
    if size >= 2 and position >= size:
        raise ValueError(f"p must lie in [0, n) = [0, {size}), received {position}")
    cdef Permutation perm = permutation_of(size, as_u64(key, "key"))
    return permute(&perm, position)


def permutation(n, key):
    """The whole table ``[perm(0), ..., perm(n-1)]`` as an int64 array, built without the GIL.

    Parameters
    ----------
    n : int
        Table length, ``0 <= n < 2**63``.
    key : int
        Permutation key, reduced mod 2**64.
    """
    cdef u64 size = as_count(n, "n")
    if size >= (<u64>1 << 63):
        raise ValueError(f"n must be below 2**63 for an int64 table, received {size}")
    cdef Permutation perm = permutation_of(size, as_u64(key, "key"))
    checked_mul(<Py_ssize_t>size, sizeof(i64), "the permutation table")
    cdef cnp.ndarray out = np.empty(<Py_ssize_t>size, dtype=np.int64)
    cdef i64* dst = <i64*>cnp.PyArray_DATA(out)
    with nogil:
        permute_range(&perm, 0, size, dst)
    return out
