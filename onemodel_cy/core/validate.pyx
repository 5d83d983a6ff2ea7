"""Argument checks and overflow-checked size arithmetic: the one home of both.

The exception rule (also in ``docs/architecture.md``): ``TypeError`` for the wrong kind of
object (not an integer, wrong dtype, wrong number of dimensions, a memory layout that is
not accepted), ``ValueError`` for a value out of range (including a size whose bytes do
not fit), ``IndexError`` for a dataset index out of range, ``RuntimeError`` for an object
used in a state it cannot serve (never initialised, initialised twice). Messages name what was
received and what is allowed.
"""
import operator

cimport numpy as cnp
import numpy as np

from onemodel_cy.core.typedefs cimport u64

cnp.import_array()

cdef object MASK64 = (1 << 64) - 1
cdef double FLOAT32_ROUNDS_TO_INF = 3.4028235677973366e38    # 2**128 - 2**103
cdef object SSIZE_MAX = (<object>1 << (8 * sizeof(Py_ssize_t) - 1)) - 1   # a Python shift: no C int overflow


cdef object as_index(object value, str name):
    """``value`` as a Python int; a bool, Python's or numpy's, is not taken for a number (as
    in the oracle). numpy before 2.x still answers ``operator.index(np.False_)`` (with a
    DeprecationWarning), so ``np.bool_`` is refused by name, on every numpy alike."""
    try:
        if isinstance(value, (bool, np.bool_)):
            raise TypeError
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an integer, received {value!r} of type {type(value).__name__}"
        ) from None


cdef u64 as_u64(object value, str name) except? 0:
    """An integer reduced mod 2^64 (D3: -1 becomes 2^64 - 1)."""
    return <u64>(as_index(value, name) & MASK64)


cdef u64 as_count(object value, str name, u64 minimum=0) except? 0:
    """A size or position: an integer in [minimum, 2^64), never wrapped."""
    v = as_index(value, name)
    if v < minimum or v > MASK64:
        raise ValueError(f"{name} must be an integer in [{minimum}, 2**64), received {v}")
    return <u64>v


cdef Py_ssize_t as_size(object value, str name, Py_ssize_t minimum=0,
                        Py_ssize_t maximum=-1) except? -1:
    """An integer in ``[minimum, maximum]`` (``maximum`` -1: the largest Py_ssize_t)."""
    v = as_index(value, name)
    top = SSIZE_MAX if maximum < 0 else maximum
    if not minimum <= v <= top:
        shown = "2**63 - 1" if maximum < 0 and sizeof(Py_ssize_t) == 8 else str(top)
        raise ValueError(f"{name} must be an integer in [{minimum}, {shown}], received {v}")
    return <Py_ssize_t>v


cdef float as_float32(object value, str name) except? -1:
    """``value`` rounded to float32, refused unless finite there (1e39 would round to inf)."""
    cdef double d
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be a real number, received {value!r}")
    try:
        d = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, received {value!r}") from None
    # Checked in double before the cast (casting an out-of-range double to float is
    # undefined in C): from 2**128 - 2**103 on, the float32 rounding is inf.
    if d != d or not -FLOAT32_ROUNDS_TO_INF < d < FLOAT32_ROUNDS_TO_INF:
        raise ValueError(f"{name} must be a finite float32 number, received {value!r}")
    return <float>d


cdef bint is_planar_float32(object image, bint writable):
    """An aligned, C-contiguous, native float32 [C, H, W] ndarray, writable when asked: the
    one check of an image a GIL-free kernel reads (numpy's C fields, which an ndarray
    subclass cannot misreport)."""
    if not isinstance(image, np.ndarray):
        return False
    cdef cnp.ndarray array = <cnp.ndarray>image
    return (cnp.PyArray_TYPE(array) == cnp.NPY_FLOAT32 and cnp.PyArray_NDIM(array) == 3
            and cnp.PyArray_ISNOTSWAPPED(array) and cnp.PyArray_IS_C_CONTIGUOUS(array)
            and cnp.PyArray_ISALIGNED(array) and (not writable or cnp.PyArray_ISWRITEABLE(array)))


cdef str describe(object obj):
    """What an error message says was received."""
    if isinstance(obj, np.ndarray):
        return (f"ndarray of dtype={obj.dtype}, shape={obj.shape}, "
                f"c_contiguous={obj.flags.c_contiguous}, aligned={obj.flags.aligned}, "
                f"writeable={obj.flags.writeable}")
    return f"{type(obj).__name__}"


cdef object as_integer_vector(object value, str name):
    """``value`` as a new 1-D numpy array of integers, private to the caller (checked
    values stay the values used). A sequence holding a non-integer is a ``TypeError``
    naming the element; integers beyond int64 give an object array, so that the caller's
    range check can name them. Ranges are the caller's."""
    array = np.array(value, copy=True)
    if array.ndim != 1:
        raise TypeError(f"{name} must be a 1-D sequence of integers, received {describe(array)}")
    if array.dtype.kind not in "iu" and array.size:
        # The elements as given: numpy would have turned [1, 1.5] into [1.0, 1.5].
        items = array.tolist() if isinstance(value, np.ndarray) else list(value)
        for position, item in enumerate(items):
            as_index(item, f"{name}[{position}]")
        array = np.array(items, dtype=object)
    return array


cdef double as_real(object value, str name) except? -1:
    """A real number as float64 (not rounded to float32; the caller checks its range);
    bools, text and bytes are refused."""
    if isinstance(value, (bool, str, bytes)):
        raise TypeError(f"{name} must be a real number, received {value!r}")
    try:
        return float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a real number, received {value!r}") from None


cdef Py_ssize_t checked_mul(Py_ssize_t a, Py_ssize_t b, str what) except? -1:
    """``a * b`` for sizes; ``ValueError`` naming ``what`` when it does not fit."""
    cdef Py_ssize_t out
    if a < 0 or b < 0 or mul_overflows(a, b, &out):
        raise ValueError(f"{what} does not fit in memory: {a} * {b} exceeds 2**63 - 1 bytes/elements")
    return out


cdef Py_ssize_t checked_add(Py_ssize_t a, Py_ssize_t b, str what) except? -1:
    """``a + b`` for sizes; ``ValueError`` naming ``what`` when it does not fit."""
    cdef Py_ssize_t out
    if a < 0 or b < 0 or add_overflows(a, b, &out):
        raise ValueError(f"{what} does not fit in memory: {a} + {b} exceeds 2**63 - 1 bytes/elements")
    return out


cdef int add_note(object error, str note) except -1:
    """``error.add_note(note)``. Python 3.10 has no ``add_note``: there the note goes to the
    same ``__notes__`` list (PEP 678), where code and tests read it, though 3.10's own
    tracebacks do not print it."""
    method = getattr(error, "add_note", None)
    if method is not None:
        method(note)
        return 0
    notes = getattr(error, "__notes__", None)
    if notes is None:
        notes = []
        error.__notes__ = notes
    notes.append(note)
    return 0


def check_integer(value, name, minimum=None, maximum=None):
    """For pure-Python modules (the loader): ``value`` as an int in ``[minimum, maximum]``."""
    v = as_index(value, name)
    if (minimum is not None and v < minimum) or (maximum is not None and v > maximum):
        low = "-inf" if minimum is None else minimum
        high = "inf" if maximum is None else maximum
        raise ValueError(f"{name} must be an integer in [{low}, {high}], received {v}")
    return v


# Global steps are the integers [0, 2**63): a signed 64-bit count, as in every port, and
# what the process engine's task board and the lane's C slots hold. A stream ends at G_END.
G_END = 1 << 63

# The longest wait a DataLoader accepts (timeout, join_timeout), about 31.7 years: every
# clock a wait reaches (threading's, poll's milliseconds, the lane's nanoseconds since
# boot) holds it. Longer is a mistake for "for ever", which is timeout=None.
LONGEST_WAIT = 1e9


def check_global_step(value, name, end_ok=False):
    """``value`` as a global step: an int in ``[0, 2**63)``, or ``[0, 2**63]`` with
    ``end_ok`` (a stream's stop, or the position of a stream that reached the end)."""
    v = as_index(value, name)
    if v < 0 or v > G_END or (v == G_END and not end_ok):
        raise ValueError(f"{name} must be an integer in [0, 2**63{']' if end_ok else ')'} (a global step), "
                         f"received {v}")
    return v


def check_seconds(value, name, none_ok, zero_ok):
    """``value`` as a float of seconds: a finite number up to ``LONGEST_WAIT``, positive
    (or >= 0 with ``zero_ok``); None passes with ``none_ok`` (no limit)."""
    if value is None and none_ok:
        return None
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        raise TypeError(f"{name} must be a number of seconds{' or None' if none_ok else ''}, "
                        f"received {type(value).__name__}")
    low = "0 <=" if zero_ok else "0 <"
    if not ((0 <= value) if zero_ok else (0 < value)) or not value <= LONGEST_WAIT:
        raise ValueError(f"{name} must be a number of seconds with {low} {name} <= 1e9 (about 31 years)"
                         f"{'; None waits as long as a worker lives' if none_ok else ''}, received {value!r}")
    return float(value)


def note_exception(error, note):
    """``add_note`` for Python callers (the process engine): ``error.add_note(note)``, also on 3.10."""
    if not isinstance(error, BaseException) or not isinstance(note, str):
        raise TypeError(f"note_exception(error, note) takes an exception and a str, received "
                        f"{type(error).__name__} and {type(note).__name__}")
    add_note(error, note)
