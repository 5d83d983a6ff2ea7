"""What every harness shares: decoding fuzz bytes into arguments, the accepted exceptions,
the oracle, and the atheris entry point.

A harness is a module with ``TestOneInput(data: bytes)``. It decodes ``data`` into the
arguments of one public entry point, calls it, and lets through only the exceptions the
project's rule allows (``core/validate.pxd``: TypeError, ValueError, IndexError, RuntimeError
for an object in a state it cannot serve, and MemoryError for an allocation the machine
refuses). Anything else, a wrong result against
``spec_tests/reference.py``, a segfault or a sanitizer report, is a finding.

The values are drawn so that random bytes reach the edges often: every integer comes either
from a small range or from a list of boundaries (0, -1, 2**31, 2**32, 2**63, 2**64, ...),
because coverage guidance cannot see inside the compiled kernels (gcc builds them without
libFuzzer's instrumentation).
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _path in (ROOT, os.path.join(ROOT, "spec_tests")):
    if _path not in sys.path:
        sys.path.insert(0, _path)

import numpy as np  # noqa: E402

import reference  # noqa: E402  (spec_tests/reference.py, the pure-Python oracle)

# RuntimeError: an object used in a state it cannot serve (never initialised, initialised
# twice, a workspace already in use), the rule's fourth case (docs/architecture.md).
ALLOWED = (TypeError, ValueError, IndexError, MemoryError, RuntimeError)
# While hunting past a finding that is already recorded (fuzz/FINDINGS.md), name its
# exception type here, e.g. ONEMODEL_CY_FUZZ_KNOWN=OverflowError. CI never sets it.
ALLOWED += tuple(getattr(__builtins__, n) if not isinstance(__builtins__, dict) else __builtins__[n]
                 for n in os.environ.get("ONEMODEL_CY_FUZZ_KNOWN", "").split(",") if n)

# Integers where size products and conversions wrap.
BOUNDARIES = (0, 1, 2, 3, -1, -2, 255, 256, 2**15, 2**16, 2**31 - 1, 2**31, 2**32 - 1, 2**32,
              2**32 + 1, 2**40, 2**62, 2**63 - 1, 2**63, 2**64 - 1, 2**64, 2**65, -2**31,
              -2**63, -2**63 - 1, 3037000500, 4294967297, 6148914691236517206)

# Largest element count a harness lets through to an allocation it expects to succeed.
SMALL = 64


class Draw:
    """Argument decoding over atheris' FuzzedDataProvider (the only thing harnesses see)."""

    def __init__(self, data: bytes):
        import atheris
        self.fdp = atheris.FuzzedDataProvider(data)

    def small(self, lo=0, hi=SMALL) -> int:
        return self.fdp.ConsumeIntInRange(lo, hi)

    def integer(self, lo=0, hi=SMALL) -> int:
        """Mostly ``[lo, hi]``, otherwise a boundary value (possibly negative or huge)."""
        if self.fdp.ConsumeIntInRange(0, 3) == 0:
            return self.fdp.PickValueInList(list(BOUNDARIES))
        return self.fdp.ConsumeIntInRange(lo, hi)

    def flag(self) -> bool:
        return self.fdp.ConsumeBool()

    def real(self) -> float:
        """A float32-representable real, or an edge (0, inf, nan, subnormal, huge)."""
        if self.fdp.ConsumeIntInRange(0, 3) == 0:
            return self.fdp.PickValueInList([0.0, -0.0, 1.0, 1e-45, 1e39, float("inf"),
                                             float("nan"), -1.0, 3.4028235e38])
        return float(np.float32(self.fdp.ConsumeFloatInRange(-4.0, 4.0)))

    def raw(self, n: int) -> bytes:
        return self.fdp.ConsumeBytes(n)

    def pick(self, options):
        return self.fdp.PickValueInList(list(options))

    def odd_value(self):
        """Something of the wrong kind where an integer or an array is expected."""
        return self.pick([None, 1.5, "3", b"x", True, np.float64(2.0), [1, 2], object(),
                          np.int8(3), np.uint64(2**64 - 1)])

    def array(self, shape_max=4, dims=None):
        """An array of fuzzed dtype, shape, layout and alignment."""
        dtype = self.pick([np.float32, np.float32, np.float64, np.int32, np.int64, np.uint8,
                           np.int16, np.bool_])
        ndim = dims if dims is not None else self.small(0, 4)
        shape = tuple(self.small(0, shape_max) for _ in range(ndim))
        return self.layout(np.zeros(shape, dtype=dtype) + self.small(0, 9), dtype)

    def layout(self, a, dtype=None):
        """``a`` as given, transposed, strided, read-only, or misaligned in a byte buffer."""
        how = self.small(0, 5)
        if how == 1 and a.ndim >= 2:
            a = a.T
        elif how == 2 and a.ndim >= 1:
            a = np.repeat(a, 2, axis=-1)[..., ::2]
        elif how == 3:
            a = a.copy()
            a.setflags(write=False)
        elif how == 4 and a.size:
            buf = np.zeros(a.nbytes + a.itemsize, dtype=np.uint8)
            b = buf[1:1 + a.nbytes].view(a.dtype).reshape(a.shape)   # misaligned by one byte
            b[...] = a
            a = b
        return a


TRACE = os.environ.get("ONEMODEL_CY_FUZZ_TRACE", "") not in ("", "0")


def call(fn, *args, allowed=ALLOWED, **kwargs):
    """``fn(*args, **kwargs)``, or None when it raises one of ``allowed`` (anything else escapes).

    With ``ONEMODEL_CY_FUZZ_TRACE=1`` every call is printed first, so replaying a crash
    (``python fuzz/fuzz_X.py CRASH_FILE``) shows the call that crashed."""
    if TRACE:
        print(f"call {getattr(fn, '__qualname__', fn)!s} args={args!r} kwargs={kwargs!r}",
              file=sys.stderr, flush=True)
    try:
        return fn(*args, **kwargs)
    except allowed:
        return None


def same(a, b) -> bool:
    """Bit-for-bit equal arrays (dtype, shape and bytes)."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def check(condition, what):
    """A wrong result is a finding: raise something the fuzzer reports (never an allowed type)."""
    if not condition:
        raise AssertionError(what)


def instrument_module(atheris, module):
    """Instrument the functions and methods defined in ``module`` (in place)."""
    import types
    for value in list(vars(module).values()):
        if isinstance(value, types.FunctionType) and value.__module__ == module.__name__:
            atheris.instrument_func(value)
        elif isinstance(value, type) and value.__module__ == module.__name__:
            for attr in vars(value).values():
                if isinstance(attr, types.FunctionType):
                    atheris.instrument_func(attr)


def main(test_one_input):
    """atheris entry point: ``python fuzz/fuzz_X.py [libFuzzer flags]``."""
    import atheris
    # Python-level coverage of the harness, this module, the oracle and the loader guides
    # the search (the compiled kernels are reached through the boundary values above).
    # Only these modules: instrumenting everything loaded (numpy included) takes a minute
    # under the sanitizer build.
    import onemodel_cy.loader
    for module in (sys.modules["__main__"], sys.modules[__name__], reference, onemodel_cy.loader):
        instrument_module(atheris, module)
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
