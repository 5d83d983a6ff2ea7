"""Regression tests for the crashes the fuzz harnesses found (fuzz/FINDINGS.md).

Each runs the crashing call in a child process, so a segfault or a sanitizer abort fails
the test instead of ending pytest. The child prints how the call ended (``ok`` or the
exception type); the test asks for an outcome the project's exception rule allows
(``onemodel_cy/core/validate.pxd``: TypeError for the wrong kind, ValueError for a value out of
range) or the oracle's result.

Under the sanitizer build (docs/safety.md) the children inherit the preloaded runtime, so a
bad access that happens to survive in the plain build fails here too.
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SANITIZED = "libasan" in os.environ.get("LD_PRELOAD", "")


def outcome(code: str) -> str:
    """Run ``code`` in a fresh interpreter; its last printed line, or the way it died."""
    child = textwrap.dedent("""
        import numpy as np
        import onemodel_cy as om
        def attempt(fn, *args, **kwargs):
            try:
                result = fn(*args, **kwargs)
            except Exception as exc:
                print(type(exc).__name__)
                return None
            print("ok")
            return result
    """) + textwrap.dedent(code)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [ROOT, os.environ.get("PYTHONPATH")])))
    proc = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env=env)
    assert proc.returncode == 0, (f"child died with exit code {proc.returncode}:\n"
                                  f"{proc.stdout[-1500:]}\n{proc.stderr[-3000:]}")
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("cls", ["Sampler", "ArrayImageDataset", "ImageBatchCollator", "ImageBatch"])
def test_setstate_cython_on_a_bare_object_refuses(cls):
    """Concern: memory safety (pickling). Forged restore (fuzz_pickle):
    ``cls.__new__(cls).__setstate_cython__(())`` segfaulted; the generated method is now
    gone (no generated pickling), or a state the class cannot take is refused."""
    got = outcome(f"o = om.{cls}.__new__(om.{cls})\n"
                  f"print('absent') if not hasattr(o, '__setstate_cython__') else "
                  f"attempt(o.__setstate_cython__, ())")
    assert got in ("absent", "TypeError", "ValueError")


def test_setstate_cython_on_a_bare_batch_with_a_short_state_refuses():
    """Concern: memory safety (pickling). Forged restore (fuzz_pickle):
    ``ImageBatch.__new__(ImageBatch).__setstate_cython__((1, 2))``
    segfaulted; it must be refused."""
    got = outcome("o = om.ImageBatch.__new__(om.ImageBatch)\n"
                  "print('absent') if not hasattr(o, '__setstate_cython__') else "
                  "attempt(o.__setstate_cython__, (1, 2))")
    assert got in ("absent", "TypeError", "ValueError")


def test_sequential_sampler_step_count_never_wraps():
    """§3 / D8 (fuzz_samplers): ``SequentialSampler(2**63 - 1, 8, drop_last=False)`` reported
    a negative ``steps_per_epoch`` (the ceiling division wrapped). It must either be refused
    with ValueError or count ceil(n / B) steps."""
    got = outcome("""
        s = attempt(om.SequentialSampler, 2**63 - 1, 8, drop_last=False)
        if s is not None:
            print("ok" if s.steps_per_epoch == -(-(2**63 - 1) // 8) else f"steps={s.steps_per_epoch}")
    """)
    assert got in ("ok", "ValueError")


def test_bucketed_sampler_reads_misaligned_lengths_correctly():
    """§3 / D11 (fuzz_samplers): lengths given as a misaligned int64 view were read with an
    8-byte load at an odd address (undefined behaviour; UBSan aborts). The plan must be
    the oracle's, whatever the alignment."""
    got = outcome("""
        import sys
        sys.path.insert(0, "spec_tests")
        import reference
        buf = np.zeros(8 * 12 + 1, np.uint8)
        lengths = buf[1:].view(np.int64)
        lengths[:] = np.arange(12) % 5
        s = attempt(om.BucketedSampler, lengths, 3, 2, 7)
        if s is not None:
            want = reference.BucketedSampler(lengths.tolist(), 3, 2, 7).indices(0, 1)
            print("ok" if s.indices(0, 1).tolist() == want else "differs")
    """)
    assert got == "ok"


@pytest.mark.parametrize("call", [
    "om.gray8_to_planar(b'x' * 16, 0.5, 0.5, width=2**64, height=1)",
    "om.rgb8_to_planar(b'x' * 16, 0.5, 0.5, width=1, height=1, stride=2**64)",
    "om.SampleRng(1).next_u64(size=2**64)",
    "om.SampleRng(1).next_int(5, size=2**63)",
    "om.BufferPool(2**64)",
    "om.ImageBatchCollator().collate([om.Sample(np.ones((1, 1, 1), np.float32), [1], 0)], [0], 1, 0, 0, "
    "first_slot=2**64)",
])
def test_integer_beyond_64_bits_is_a_value_error(call):
    """Concern: the exception rule (fuzz_image, fuzz_rng, fuzz_pool, fuzz_collate): a size or position
    beyond the machine's range is a value out of range, ValueError, not OverflowError."""
    assert outcome(f"attempt(lambda: {call})") == "ValueError"


@pytest.mark.parametrize("aug", ["None", "om.GaussianNoise(0.5)", "om.GainOffset(0.3, 0.2)"])
def test_collate_reads_a_misaligned_image_correctly(aug):
    """§4 (fuzz_collate): a Sample whose float32 image is a view at an odd address was read
    with 4-byte loads at that address by the augmentation kernel (undefined behaviour; UBSan
    aborts). The batch must be the oracle's, whatever the alignment."""
    got = outcome(f"""
        import sys
        sys.path.insert(0, "spec_tests")
        import reference
        buf = np.zeros(4 * 6 + 1, np.uint8)
        image = buf[1:].view(np.float32).reshape(1, 2, 3)
        image[...] = (np.arange(6, dtype=np.float32) / 7).reshape(1, 2, 3)
        aug = {aug}
        ref_aug = {{None: None, "GaussianNoise": reference.gaussian_noise(0.5),
                    "GainOffset": reference.gain_offset(0.3, 0.2)}}[aug and type(aug).__name__]
        sample = om.Sample(image, [3], 1)
        batch = attempt(om.ImageBatchCollator(augmentation=aug).collate, [sample], [4], 9, 0, 2)
        if batch is not None:
            want = reference.collate([tuple(sample)], [4], 9, 0, 2, augmentation=ref_aug)
            print("ok" if batch.images.tobytes() == want["images"].tobytes() else "differs")
    """)
    assert got == "ok"


@pytest.mark.parametrize("make", ["om.SequentialSampler(12, 3)", "om.ShuffledSampler(12, 3, 5)"])
def test_indices_into_a_misaligned_out_is_refused_or_correct(make):
    """§3 (fuzz_samplers): ``indices_into`` wrote 8-byte stores to an int64 ``out`` at an odd
    address (undefined behaviour; UBSan aborts). Such an ``out`` must be refused with
    TypeError (an unaccepted memory layout) or filled with the oracle's indices."""
    got = outcome(f"""
        s = {make}
        buf = np.zeros(8 * 3 + 1, np.uint8)
        out = buf[1:].view(np.int64)
        n = attempt(s.indices_into, 0, 1, out)
        if n is not None:
            print("ok" if out[:n].tolist() == s.indices(0, 1).tolist() else "differs")
    """)
    assert got in ("ok", "TypeError")
