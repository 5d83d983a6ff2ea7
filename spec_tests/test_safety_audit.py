"""Regressions found by the memory audit (``docs/memory-audit.md``).

Each test encodes one gap of the audit list: a sequence of public calls that, with bounds
checks off, writes or reads memory the package does not own, or lets a value the package
checked change afterwards. Calls that can crash run in a fresh interpreter, so a crash
fails the test instead of killing the run.
"""
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import onemodel_cy as om

ROOT = Path(__file__).resolve().parents[1]


def run_alone(code: str, timeout: float = 60, env: dict | None = None) -> str:
    """Run ``code`` in a fresh interpreter; return its stdout, failing on a crash, a hang
    or a non-zero exit (as ``test_safety_memory.run_isolated``, with extra environment)."""
    prelude = "import threading, sys\nimport numpy as np\nimport onemodel_cy as om\n"
    full_env = dict(os.environ, **(env or {}))
    try:
        done = subprocess.run([sys.executable, "-c", prelude + textwrap.dedent(code)], cwd=ROOT,
                              capture_output=True, text=True, timeout=timeout, env=full_env)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the subprocess hung for {timeout} s")
    assert done.returncode == 0, (f"the subprocess died (exit {done.returncode}):\n"
                                  f"{done.stdout}\n{done.stderr}")
    return done.stdout


# ------------------------------------------------------------ one-time initialisation

def _reentrant_cases():
    """(name, make, outer args with a hook, inner args): ``hook()`` is called while the
    outer ``__init__`` converts an argument, after its "already initialised" check."""
    img = np.zeros((1, 2, 3), np.float32)
    return {
        "Sample": (om.Sample, lambda h: (img, [1], h), (img, [1], 0)),
        "ArrayImageDataset": (om.ArrayImageDataset, lambda h: ([img], [[1]], [h]), ([img], [[1]], [0])),
        "SyntheticLineImages": (om.SyntheticLineImages, lambda h: (h, 2, 2, 2), (1, 2, 2, 2)),
        "SequentialSampler": (om.SequentialSampler, lambda h: (h, 2), (4, 2)),
        "ShuffledSampler": (om.ShuffledSampler, lambda h: (h, 2, 0), (4, 2, 0)),
        "MixingSampler": (om.MixingSampler, lambda h: ([(0, 4, 1.0)], h, 1, 0), ([(0, 4, 1.0)], 2, 1, 0)),
        "BucketedSampler": (om.BucketedSampler, lambda h: ([1, 2, 3, 4], h, 1, 0), ([1, 2, 3, 4], 2, 1, 0)),
    }


@pytest.mark.parametrize("name", sorted(_reentrant_cases()))
def test_init_reentered_from_an_argument_is_refused(name):
    """Concern: "initialised once" (a second __init__ is a RuntimeError, since kernels may
    be reading the object's tables without the GIL) must also hold when the second call
    comes from the first one's own argument conversion (an ``__index__``); otherwise the
    outer call overwrites state that a caller already validated against."""
    cls, outer, inner = _reentrant_cases()[name]
    obj = cls.__new__(cls)

    class Hook:
        def __index__(self):
            obj.__init__(*inner)
            return 4

    with pytest.raises(RuntimeError):
        obj.__init__(*outer(Hook()))


def test_sampler_reinitialised_between_room_check_and_fill_writes_no_more_than_out():
    """Concern: ``indices_into`` checks ``out`` has room for ``batch_length`` and then
    fills; a second __init__ finishing in between (another thread, woken from the epoch's
    ``__index__``) must not make the fill write a larger batch past the end of ``out``."""
    out = run_alone("""
        s = om.SequentialSampler.__new__(om.SequentialSampler)
        inner_done, go = threading.Event(), threading.Event()
        class Gate:
            def __index__(self):
                try:
                    s.__init__(4, 4)
                finally:
                    inner_done.set()
                go.wait()
                return 1 << 20
        def outer():
            try:
                s.__init__(Gate(), 1 << 20)
            except RuntimeError:
                pass
        t = threading.Thread(target=outer); t.start(); inner_done.wait()
        class Epoch:
            calls = 0
            def __index__(self):
                Epoch.calls += 1
                if Epoch.calls == 2:
                    go.set(); t.join()
                return 0
        buf = np.zeros(4, dtype=np.int64)
        try:
            n = s.indices_into(Epoch(), 0, buf)
            assert n <= buf.shape[0], n
        except (RuntimeError, ValueError, NotImplementedError):
            pass
        go.set(); t.join()
        print("ok")
    """)
    assert out.strip() == "ok"


def test_sample_reinitialised_while_collated_keeps_its_slot_memory():
    """Concern: the slot table points into ``Sample.image``; a second __init__ finishing
    while the batch is being built (woken from the seed's ``__index__``) must not free
    that memory under the copy: the batch must hold the sample's pixels, not freed memory
    (with a small mmap threshold the freed image is unmapped or reused)."""
    out = run_alone("""
        s = om.Sample.__new__(om.Sample)
        inner_done, go = threading.Event(), threading.Event()
        class Gate:
            def __index__(self):
                try:
                    s.__init__(np.full((1, 1024, 2048), 7.0, np.float32), [1], 0)
                finally:
                    inner_done.set()
                go.wait()
                return 0
        def outer():
            try:
                s.__init__(np.full((1, 1024, 2048), 3.0, np.float32), [1], Gate())
            except RuntimeError:
                pass
        t = threading.Thread(target=outer); t.start(); inner_done.wait()
        class Seed:
            def __index__(self):
                go.set(); t.join()
                Seed.reuse = np.full((1, 1024, 2048), 5.0, np.float32)   # may take the freed memory
                return 0
        try:
            b = om.ImageBatchCollator().collate([s], [0], Seed(), 0, 0)
        except (TypeError, RuntimeError):
            # Refused because the re-entered __init__ left the sample uninitialised: fine.
            assert repr(s) == "Sample(<never initialised>)", repr(s)
            print("ok")
        else:
            assert np.array_equal(b.images[0], s.image), (float(b.images[0, 0, 0, 0]), float(s.image[0, 0, 0]))
            print("ok")
    """, env={"MALLOC_MMAP_THRESHOLD_": "65536"})
    assert out.strip() == "ok"


# ------------------------------------------------------------ the packed gather

def test_packed_gather_error_message_reads_no_index_twice():
    """Concern: the packed gather checks each index once, without the GIL; its C/H
    mismatch message must use the index it checked, not read ``indices`` again after
    another thread may have changed it (a re-read huge index indexes the shape table
    out of bounds)."""
    out = run_alone("""
        import time
        from onemodel_cy.collate.fetch import build_batch
        sys.setswitchinterval(1e-4)
        ds = om.ArrayImageDataset([np.zeros((1, 2, 3), np.float32), np.zeros((1, 3, 3), np.float32)],
                                  [[1], [1]], [0, 0])
        col = om.ImageBatchCollator()
        idx = np.array([0, 1], dtype=np.int64)
        stop = False
        def flip():
            while not stop:
                idx[1] = 1
                idx[1] = 1 << 40
        t = threading.Thread(target=flip, daemon=True); t.start()
        end = time.monotonic() + 3
        while time.monotonic() < end:
            try:
                build_batch(col, ds, idx, 0, 0, 0, route="packed")
            except (ValueError, IndexError):
                pass
        stop = True; t.join()
        print("ok")
    """)
    assert out.strip() == "ok"


# ------------------------------------------------------------ sealed targets

def test_sample_target_never_aliases_caller_memory():
    """Concern: ``Sample.target`` is "always copied, and checked on the copy" (values in
    [0, 2**31)); a read-only reinterpretation of a sample's image (a view over the
    caller's writable array) passes ``is_sealed`` and is kept as it is, so the caller
    can make a checked target negative afterwards."""
    img = np.zeros((1, 1, 4), np.float32)
    alias = om.Sample(img, [], 0).image.view(np.int32).reshape(-1)
    sample = om.Sample(np.ones((1, 1, 2), np.float32), alias, 0)
    img[0, 0, 0] = -1.0
    assert not np.shares_memory(sample.target, img)
    assert sample.target.min() >= 0


# ------------------------------------------------------------ ndarray subclasses that lie

LIARS = """
class Flags:
    c_contiguous = writeable = aligned = True
class LyingShape(np.ndarray):          # shape and strides claim far more than the buffer holds
    @property
    def shape(self): return SHAPE
    @property
    def strides(self): return STRIDES
class LyingFlags(np.ndarray):          # claims to be contiguous, writable and aligned
    flags = Flags()
"""


@pytest.mark.parametrize("case", ["gray8 src", "gray8 out", "augmentation image", "build_batch indices"])
def test_array_layout_is_read_from_the_array_not_its_python_attributes(case):
    """Concern: bounds of a kernel's loop come from numpy's own fields of the array (as
    ``PyArray_DIMS``/``PyArray_STRIDES``/flags), never from Python attributes an ndarray
    subclass can override: a subclass claiming a bigger shape or a contiguous layout must
    be refused (TypeError/ValueError) or read as what it really is, not walked past its end."""
    body = {
        "gray8 src": """
            SHAPE, STRIDES = (4096, 4096), (4096, 1)
            src = np.zeros((2, 2), np.uint8).view(LyingShape)
            try:
                r = om.gray8_to_planar(src, 0.0, 1.0)
                assert r.shape == (1, 2, 2), r.shape
            except (TypeError, ValueError):
                pass
        """,
        "gray8 out": """
            SHAPE, STRIDES = (1, 4096, 4096), (4, 4, 4)
            out = np.zeros((1, 1, 1), np.float32).view(LyingShape)
            try:
                om.gray8_to_planar(np.zeros((4096, 4096), np.uint8), 0.0, 1.0, out=out)
            except (TypeError, ValueError):
                pass
        """,
        "augmentation image": """
            base = np.zeros((1, 4, 1 << 20), np.float32)
            img = base[:, ::-1, :].view(LyingFlags)
            try:
                om.GainOffset()(img, om.SampleRng(0))
            except (TypeError, ValueError):
                pass
        """,
        "build_batch indices": """
            from onemodel_cy.collate.fetch import build_batch
            ds = om.ArrayImageDataset([np.zeros((1, 2, 3), np.float32)] * 2, [[1], [1]], [0, 0])
            idx = np.zeros(1 << 24, np.int64)[::-1].view(LyingFlags)
            try:
                build_batch(om.ImageBatchCollator(), ds, idx, 0, 0, 0, route="packed")
            except TypeError:
                pass
            else:
                raise AssertionError("a reversed view was gathered as if contiguous")
        """,
    }[case]
    out = run_alone(LIARS + textwrap.dedent(body) + "print('ok')\n")
    assert out.strip() == "ok"
