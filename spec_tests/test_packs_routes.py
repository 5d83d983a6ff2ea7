"""A pack read through the loader's GIL-free fetch step gives the bytes of the get_sample route.

The fast path of ``PackedImageDataset`` converts the stored 8-bit pixels itself (§6, D15)
while it writes the padded batch (§4), fused with the augmentation kernel; the other route
calls ``get_sample`` (``gray8_to_planar``/``rgb8_to_planar`` of the same pixels) and
collates the float32 samples. Both must give the same batch, bit for bit, through
``build_batch(route=...)`` and through ``DataLoader.batch_at``.
"""
from __future__ import annotations

import contextlib
import os
import tempfile

import numpy as np
import pytest
from hypothesis import given, strategies as st

import onemodel_cy as om
from onemodel_cy.collate.collator import simd_kernels
from onemodel_cy.collate.fetch import build_batch
from harness import batch_bits
from pipeline_parts import PyDataset   # no packed view: the loader must call get_sample


pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py

# Every gray 8-bit kernel this CPU runs (src/row.h: 0 the portable loop, 1 AVX2, 2
# AVX-512), so that each is compared with the samples route (which uses the portable loop).
KERNELS = list(range(simd_kernels() + 1))


@contextlib.contextmanager
def kernel_cap(level):
    previous = simd_kernels(level)
    try:
        yield
    finally:
        simd_kernels(previous)


MEANS = [0.0, 0.5, 0.1234567, 1e-3, 200.0, -3.25]
STDS = [1.0, 0.25, 0.3081, 1e-4, 7.0, -0.5]


def scale_by_draw(image, rng):
    """A Python augmentation: the collator stages (and converts) the slot before calling it."""
    image *= np.float32(rng.next_single())


@st.composite
def packs(draw):
    kind = draw(st.sampled_from(["gray8", "rgb8", "float32"]))
    n = draw(st.integers(1, 12))
    height = draw(st.integers(1, 6))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    items = []
    for i in range(n):
        width = int(rng.integers(1, 40))
        if kind == "gray8":
            image = rng.integers(0, 256, (height, width), dtype=np.uint8)
        elif kind == "rgb8":
            image = rng.integers(0, 256, (height, width, 3), dtype=np.uint8)
        else:
            image = rng.standard_normal((2, height, width)).astype(np.float32)
        target = rng.integers(0, 50, int(rng.integers(0, 6)))
        items.append((image, target, int(rng.integers(-5, 5))))
    if kind == "float32":
        mean = std = None
    elif kind == "rgb8" and draw(st.booleans()):
        mean = [draw(st.sampled_from(MEANS)) for _ in range(3)]
        std = [draw(st.sampled_from(STDS)) for _ in range(3)]
    else:
        mean, std = draw(st.sampled_from(MEANS)), draw(st.sampled_from(STDS))
    return items, mean, std


AUGMENTATIONS = st.sampled_from(["none", "gain_offset", "noise", "python"])


def collator(name, multiple, pad):
    aug = {"none": None, "gain_offset": om.GainOffset(0.3, 0.2), "noise": om.GaussianNoise(0.1),
           "python": scale_by_draw}[name]
    return om.ImageBatchCollator(width_multiple=multiple, pad_value=pad, augmentation=aug)


@given(packs(), AUGMENTATIONS, st.integers(1, 9), st.sampled_from([0.0, -1.0, 0.5]),
       st.integers(0, 2**64 - 1), st.sampled_from(KERNELS), st.data())
def test_packed_route_equals_samples_route(pack_spec, aug, multiple, pad, seed, kernel, data):
    """§1/§4/§6 (D15, D17): build_batch through the packed view (8-bit pixels converted in
    the fused kernel, each SIMD kernel the CPU has) equals build_batch through get_sample,
    for every pixel kind, mean and std, augmentation kind (kernel or Python), width
    multiple and pad value."""
    items, mean, std = pack_spec
    with tempfile.TemporaryDirectory() as folder, kernel_cap(kernel):
        om.pack(items, os.path.join(folder, "p"), progress=False)
        ds = om.PackedImageDataset(os.path.join(folder, "p"), mean, std)
        n = len(items)
        indices = np.array(data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8)), dtype=np.int64)
        col = collator(aug, multiple, pad)
        epoch, step = data.draw(st.integers(0, 5)), data.draw(st.integers(0, 5))
        fast = build_batch(col, ds, indices, seed, epoch, step, route="packed")
        slow = build_batch(col, ds, indices, seed, epoch, step, route="samples")
        assert batch_bits(fast) == batch_bits(slow)
        first = data.draw(st.integers(0, len(indices) - 1))
        part = build_batch(col, ds, indices, seed, epoch, step, start=first, route="packed")
        assert batch_bits(part) == batch_bits(build_batch(col, ds, indices, seed, epoch, step, start=first,
                                                          route="samples"))


@given(packs(), st.sampled_from(["none", "gain_offset", "python"]), st.integers(0, 2**32), st.integers(0, 6))
def test_loader_batch_at_packed_equals_get_sample_loader(pack_spec, aug, seed, g):
    """§1: DataLoader.batch_at(g) over the pack (fast path) equals batch_at(g) of a loader
    over a dataset offering only the pack's get_sample (the samples route)."""
    items, mean, std = pack_spec
    with tempfile.TemporaryDirectory() as folder:
        om.pack(items, os.path.join(folder, "p"), progress=False)
        ds = om.PackedImageDataset(os.path.join(folder, "p"), mean, std)
        n = len(items)
        batch = min(n, 3)
        fast = om.DataLoader(ds, om.ShuffledSampler(n, batch, 7), collator(aug, 4, -1.0), seed=seed)
        slow = om.DataLoader(PyDataset(ds), om.ShuffledSampler(n, batch, 7), collator(aug, 4, -1.0), seed=seed)
        assert batch_bits(fast.batch_at(g)) == batch_bits(slow.batch_at(g))


@given(st.sampled_from(MEANS), st.sampled_from(STDS))
def test_fused_conversion_is_section6_of_every_byte(mean, std):
    """§6/D15: the fast path's value for each of the 256 gray levels is p * scale - bias with
    scale = 1/(255*std) and bias = mean/std, each rounded to float32 (numpy float32
    arithmetic as an independent oracle), followed by the pad value."""
    ramp = np.arange(256, dtype=np.uint8).reshape(1, 256)
    with tempfile.TemporaryDirectory() as folder:
        om.pack([(ramp, [1], 0)], os.path.join(folder, "p"), progress=False)
        ds = om.PackedImageDataset(os.path.join(folder, "p"), mean, std)
        col = om.ImageBatchCollator(width_multiple=300, pad_value=-2.0)
        batch = build_batch(col, ds, np.zeros(1, dtype=np.int64), 0, 0, 0, route="packed")
    s32, m32 = np.float32(std), np.float32(mean)
    scale = np.float32(1.0) / (np.float32(255.0) * s32)
    bias = m32 / s32
    expected = np.full(300, -2.0, dtype=np.float32)
    expected[:256] = ramp[0].astype(np.float32) * scale - bias
    assert np.asarray(batch.images)[0, 0, 0].view(np.uint32).tobytes() == expected.view(np.uint32).tobytes()


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("kind, multiple, pad, seed", [
    ("gray8", 8, 0.0, 0), ("gray8", 8, -1.0, 1), ("gray8", 16, 0.5, 2),    # streamed (aligned rows)
    ("gray8", 3, 0.0, 3), ("rgb8", 8, -1.0, 4),                            # plain stores
])
def test_batches_past_the_cache_equal_the_samples_route(tmp_path, kind, multiple, pad, seed, kernel):
    """§4/§6 (D15): a batch of 8-bit pixels without augmentation whose images exceed
    STREAMED_BATCH_BYTES is written with streaming stores (rows 32-byte aligned, a width
    multiple of 8, gray, AVX2 or AVX-512) or, otherwise, plain ones; either way it is the
    samples route, bit for bit, at every width (so every tail of 0-15 pixels shares its
    last lanes with the padding, and rows start on both halves of a 64-byte line)."""
    from onemodel_cy.collate.collator import STREAMED_BATCH_BYTES
    rng = np.random.default_rng(seed)
    n, height = 48, 64
    shape = (height,) if kind == "gray8" else (height, 3)
    items = [(rng.integers(0, 256, (shape[0], int(w)) + shape[1:], dtype=np.uint8), [1 + i % 7], i)
             for i, w in enumerate(list(range(281, 297)) + list(rng.integers(1, 300, n - 16)))]
    om.pack(items, str(tmp_path / "p"), progress=False)
    mean, std = (0.485, 0.229) if kind == "gray8" else ([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    ds = om.PackedImageDataset(str(tmp_path / "p"), mean, std)
    col = om.ImageBatchCollator(multiple, pad)
    indices = rng.permutation(n).astype(np.int64)
    with kernel_cap(kernel):
        fast = build_batch(col, ds, indices, seed, 0, 0, route="packed")
        part = build_batch(col, ds, indices, seed, 0, 0, start=5, route="packed")
    assert np.asarray(fast.images).nbytes >= STREAMED_BATCH_BYTES, "the batch must be large enough to stream"
    assert batch_bits(fast) == batch_bits(build_batch(col, ds, indices, seed, 0, 0, route="samples"))
    assert batch_bits(part) == batch_bits(build_batch(col, ds, indices, seed, 0, 0, start=5, route="samples"))



@pytest.fixture(scope="module")
def guarded_page():
    """A readable page followed by an unreadable one (PROT_NONE): bytes ending at the
    page's end are an image that nothing may read past."""
    import ctypes
    import mmap
    page = mmap.PAGESIZE
    region = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    base = ctypes.addressof(ctypes.c_char.from_buffer(region))
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
    assert libc.mprotect(base + page, page, 0) == 0, ctypes.get_errno()     # PROT_NONE
    yield np.frombuffer(region, dtype=np.uint8, count=page)
    libc.mprotect(base + page, page, mmap.PROT_READ | mmap.PROT_WRITE)



# The guard itself: a child reads the unreadable page's first byte and must crash.
GUARD_CHILD = r"""
import ctypes, mmap
page = mmap.PAGESIZE
region = mmap.mmap(-1, 2 * page, prot=mmap.PROT_READ | mmap.PROT_WRITE)
base = ctypes.addressof(ctypes.c_char.from_buffer(region))
libc = ctypes.CDLL(None)
libc.mprotect.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
assert libc.mprotect(base + page, page, 0) == 0     # PROT_NONE
ctypes.string_at(base + page - 1, 2)
"""


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("streamed", [False, True])
def test_no_kernel_reads_past_an_image(guarded_page, kernel, streamed):
    """Memory safety (docs/safety.md): every gray kernel reads an image's pixels and not
    a byte after them, and writes its rows and not a float outside them. Images of every
    tail (widths 1-40, rows of 1 and 3) end where an unreadable page begins; the rows are
    padded to a multiple of 8 or not, and start on a 64-byte line, in its middle, or 4
    bytes in (where streaming must be refused); the helper checks a sentinel around the
    rows. Values (inexact §6 constants) equal the portable loop's, bit for bit. (A child
    process shows that the page is unreadable: reading its first byte crashes it.)"""
    import subprocess
    import sys
    from onemodel_cy.testing._kernels import convert_gray8
    page = guarded_page.shape[0]
    scale = np.float32(1.0) / (np.float32(255.0) * np.float32(0.229))
    bias = np.float32(0.485) / np.float32(0.229)
    for height in (1, 3):
        for width in range(1, 41):
            pixels = guarded_page[page - height * width:]
            pixels[:] = np.arange(height * width, dtype=np.uint8) * 37
            for padded in (-(-width // 8) * 8, width + 3):
                for misalign in (0, 8, 1):
                    rows, wrote = convert_gray8(pixels, height, width, padded, scale, bias, -1.0, streamed,
                                                kernel, misalign)
                    expected, portable = convert_gray8(pixels, height, width, padded, scale, bias, -1.0, False, 0)
                    streams = streamed and padded % 8 == 0 and misalign % 8 == 0
                    assert portable == 0
                    assert wrote == {0: 0, 1: 2 if streams else 0, 2: 2 if streams else 1}[kernel]
                    assert rows.view(np.uint32).tobytes() == expected.view(np.uint32).tobytes(), \
                        (height, width, padded, misalign)
    crash = subprocess.run([sys.executable, "-c", GUARD_CHILD], capture_output=True, timeout=60)
    assert crash.returncode < 0, "reading the guard page must fault"
