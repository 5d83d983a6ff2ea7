"""Pure-Python reference transcription of the OneModel data-loading contract.

This module is the oracle of the spec tests and the only source of the known-answer
vectors in ``onemodel_cy/conformance/vectors/``.  It transcribes, as plainly as possible:

* §2 random numbers (SplitMix64 ``SampleRng``, ``mix``, ``derive``), readings D1-D5;
* §3 the keyed Feistel permutation and the four samplers, readings D6-D12;
* §4 collation (D13, D14, D17) and the loader's batch at a global step (§1);
* §6 the 8-bit image helpers (D15, D16);
* ``docs/contract.md``: the built-in augmentations GainOffset / GaussianNoise and the
  SyntheticLineImages dataset.
* ``docs/contract.md``: the learnable SyntheticTextLines dataset (``textlines_sample``), at
  the end of this file.

Conventions
-----------
* It never imports ``onemodel_cy``; it must be possible to read it against the text
  alone.
* 64-bit unsigned arithmetic uses Python ints masked with ``M64``.
* float32 arithmetic uses numpy float32 scalars, or float32 arrays where every
  element goes through exactly one IEEE operation per step (numpy never fuses a
  multiply and an add).  ``f32(x)`` rounds to the nearest float32.
* Errors: ``TypeError`` when a value that must be an integer is not one, ``ValueError``
  when a value is out of range.  Messages quote the received value.

Speed is not a goal.  A few helpers (``_singles_bulk``, ``permutation_np``) vectorise a
loop with numpy uint64 arithmetic (which wraps mod 2^64 elementwise); the tests check
them against the plain loops.
"""

from __future__ import annotations

import math
import operator
from typing import Callable, List, Tuple

import numpy as np

M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15
MUL1 = 0xBF58476D1CE4E5B9
MUL2 = 0x94D049BB133111EB
DERIVE_SALT = 0xD1B54A32D192ED03
ROUND_CONST = 0x632BE59BD9B4E019

# Streams (§2 and contract.md)
STREAM_TRANSFORM = 0
STREAM_AUGMENTATION = 1
STREAM_SYNTH_SHAPE = 2
STREAM_SYNTH_PIXELS = 3
STREAM_EPOCH_ORDER = 101
STREAM_MIXING = 102
STREAM_BUCKET_ORDER = 103
STREAM_BUCKET_PLACE = 104

f32 = np.float32
TWO_POW_M24 = f32(2.0 ** -24)


# ---------------------------------------------------------------------------
# argument checking
# ---------------------------------------------------------------------------

def _as_int(value, name: str) -> int:
    """Return ``value`` as a Python int; TypeError for a non-integer (bool is refused)."""
    if isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be an integer, got {value!r} of type {type(value).__name__}")
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(
            f"{name} must be an integer, got {value!r} of type {type(value).__name__}"
        ) from None


def _u64(value, name: str) -> int:
    """D3: an integer argument taken mod 2^64 (two's complement for negatives)."""
    return _as_int(value, name) & M64


def _positive(value, name: str) -> int:
    v = _as_int(value, name)
    if v < 1:
        raise ValueError(f"{name} must be >= 1, got {v!r}")
    return v


def _non_negative(value, name: str) -> int:
    v = _as_int(value, name)
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v!r}")
    return v


# ---------------------------------------------------------------------------
# §2 random numbers
# ---------------------------------------------------------------------------

def _fmix(z: int) -> int:
    """The SplitMix64 output function of an already-incremented state."""
    z = ((z ^ (z >> 30)) * MUL1) & M64
    z = ((z ^ (z >> 27)) * MUL2) & M64
    return z ^ (z >> 31)


def mix(x) -> int:
    """D1: the SplitMix64 output whose state before the increment is ``x``."""
    return _fmix((_u64(x, "x") + GOLDEN) & M64)


def derive(seed, epoch, step, slot, stream) -> int:
    """§2 seed derivation; every argument reduced mod 2^64 (D3)."""
    seed = _u64(seed, "seed")
    values = [_u64(epoch, "epoch"), _u64(step, "step"), _u64(slot, "slot"), _u64(stream, "stream")]
    h = mix(seed ^ DERIVE_SALT)
    for v in values:
        h = mix((h + v) & M64)
    return h


class SampleRng:
    """§2 SplitMix64 generator.  D2: the state is kept as given; a draw increments first."""

    def __init__(self, state):
        self.state = _u64(state, "state")

    def next_u64(self) -> int:
        self.state = (self.state + GOLDEN) & M64
        return _fmix(self.state)

    def next_single(self) -> np.float32:
        # (u >> 40) < 2^24 is exact in float32, and the scaling by 2^-24 is exact.
        return f32(self.next_u64() >> 40) * TWO_POW_M24

    def next_double(self) -> float:
        return float(self.next_u64() >> 11) * (2.0 ** -53)

    def next_int(self, n) -> int:
        """D4: unbiased multiply-shift on a 128-bit product, ``1 <= n < 2^64``."""
        n = _as_int(n, "n")
        if not 1 <= n <= M64:
            raise ValueError(f"n must satisfy 1 <= n < 2**64, got {n!r}")
        m = self.next_u64() * n
        low = m & M64
        if low < n:
            t = ((1 << 64) - n) % n
            while low < t:
                m = self.next_u64() * n
                low = m & M64
        return m >> 64

    def next_normal(self) -> np.float32:
        """D5: float32 sum of twelve next_single, left to right, minus 6 in float32."""
        acc = f32(0.0)
        for _ in range(12):
            acc = f32(acc + self.next_single())
        return f32(acc - f32(6.0))

    def __repr__(self) -> str:
        return f"SampleRng(state={self.state})"


def _fmix_np(z: np.ndarray) -> np.ndarray:
    """Vectorised ``_fmix`` over a uint64 array (numpy uint64 arrays wrap mod 2^64)."""
    z = (z ^ (z >> np.uint64(30))) * np.uint64(MUL1)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(MUL2)
    return z ^ (z >> np.uint64(31))


def _u64_stream_np(state: int, count: int) -> np.ndarray:
    """The next ``count`` next_u64 outputs of ``SampleRng(state)`` (does not move any rng)."""
    k = np.arange(1, count + 1, dtype=np.uint64)
    states = np.uint64(state) + k * np.uint64(GOLDEN)
    return _fmix_np(states)


def _singles_bulk(rng: SampleRng, count: int) -> np.ndarray:
    """``count`` successive ``rng.next_single()`` as a float32 array; advances ``rng``."""
    u = _u64_stream_np(rng.state, count)
    rng.state = (rng.state + count * GOLDEN) & M64
    return (u >> np.uint64(40)).astype(np.float32) * TWO_POW_M24


# ---------------------------------------------------------------------------
# §3 keyed permutation
# ---------------------------------------------------------------------------

def _feistel_params(n: int) -> Tuple[int, int]:
    bits = (n - 1).bit_length()          # D6: ceil(log2 n) for n >= 2
    half = (bits + 1) // 2
    return half, (1 << half) - 1


def keyed_permutation(p, n, key) -> int:
    """§3 / D6: position ``p`` of the keyed permutation of ``[0, n)``."""
    p = _as_int(p, "p")
    n = _as_int(n, "n")
    key = _u64(key, "key")
    if n < 0 or n > M64:
        raise ValueError(f"n must satisfy 0 <= n < 2**64, got {n!r}")
    if n <= 1:
        return 0
    if not 0 <= p < n:
        raise ValueError(f"p must satisfy 0 <= p < n={n}, got {p!r}")
    half, mask = _feistel_params(n)
    x = p
    while True:
        left = x >> half
        right = x & mask
        for rnd in range(4):
            f = mix(right ^ key ^ ((rnd * ROUND_CONST) & M64)) & mask
            left, right = right, left ^ f
        x = (left << half) | right
        if x < n:
            return x


def permutation(n, key) -> List[int]:
    """The whole table ``[keyed_permutation(p, n, key) for p in range(n)]``."""
    n = _as_int(n, "n")
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n!r}")
    return [keyed_permutation(p, n, key) for p in range(n)]


def permutation_np(n: int, key: int) -> np.ndarray:
    """Vectorised ``permutation`` (int64 array), n < 2^63; checked against the loop by the tests."""
    n = _as_int(n, "n")
    key = _u64(key, "key")
    if n <= 0:
        return np.zeros(0, dtype=np.int64)
    if n == 1:
        return np.zeros(1, dtype=np.int64)
    half, mask = _feistel_params(n)
    h, mk = np.uint64(half), np.uint64(mask)
    consts = [np.uint64(((rnd * ROUND_CONST) & M64) ^ key) for rnd in range(4)]
    golden = np.uint64(GOLDEN)
    x = np.arange(n, dtype=np.uint64)
    out = np.empty(n, dtype=np.uint64)
    todo = np.arange(n)
    nn = np.uint64(n)
    while todo.size:
        left = x >> h
        right = x & mk
        for c in consts:
            f = _fmix_np((right ^ c) + golden) & mk
            left, right = right, left ^ f
        x = (left << h) | right
        done = x < nn
        out[todo[done]] = x[done]
        todo = todo[~done]
        x = x[~done]
    return out.astype(np.int64)


# ---------------------------------------------------------------------------
# §3 samplers
# ---------------------------------------------------------------------------

class _Sampler:
    steps_per_epoch: int
    batch_size: int

    def _check(self, epoch, step) -> Tuple[int, int]:
        epoch = _as_int(epoch, "epoch")
        step = _as_int(step, "step")
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch!r}")
        if not 0 <= step < self.steps_per_epoch:
            raise ValueError(
                f"step must satisfy 0 <= step < steps_per_epoch={self.steps_per_epoch}, got {step!r}")
        return epoch, step


class SequentialSampler(_Sampler):
    """§3: position ``p = step*B + i`` is index ``p`` (D8 without drop-last)."""

    def __init__(self, n, batch_size, drop_last=True):
        self.n = _positive(n, "n")
        self.batch_size = _positive(batch_size, "batch_size")
        self.drop_last = bool(drop_last)
        if self.drop_last:
            self.steps_per_epoch = self.n // self.batch_size
        else:
            self.steps_per_epoch = -(-self.n // self.batch_size)
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"n={self.n} is smaller than batch_size={self.batch_size} with drop_last: no batch")

    def _positions(self, step: int) -> range:
        start = step * self.batch_size
        return range(start, min(start + self.batch_size, self.n))

    def indices(self, epoch, step) -> List[int]:
        epoch, step = self._check(epoch, step)
        return list(self._positions(step))


class ShuffledSampler(SequentialSampler):
    """§3 / D7: position ``p`` of epoch ``e`` reads ``perm(p, n, derive(seed, e, 0, 0, 101))``."""

    def __init__(self, n, batch_size, seed, drop_last=True):
        super().__init__(n, batch_size, drop_last)
        self.seed = _u64(seed, "seed")

    def indices(self, epoch, step) -> List[int]:
        epoch, step = self._check(epoch, step)
        key = derive(self.seed, epoch, 0, 0, STREAM_EPOCH_ORDER)
        return [keyed_permutation(p, self.n, key) for p in self._positions(step)]


class MixingSampler(_Sampler):
    """§3 / D9 / D10: each slot picks a source by share, then an index in it, with replacement."""

    def __init__(self, sources, batch_size, steps_per_epoch, seed):
        self.batch_size = _positive(batch_size, "batch_size")
        self.steps_per_epoch = _positive(steps_per_epoch, "steps_per_epoch")
        self.seed = _u64(seed, "seed")
        self.sources = []
        for k, src in enumerate(sources):
            start, size, share = src
            start = _non_negative(start, f"sources[{k}].start")
            size = _non_negative(size, f"sources[{k}].size")
            if isinstance(share, (str, bytes)) or share is None:
                raise TypeError(f"sources[{k}].share must be a real number, got {share!r}")
            share = float(share)
            if not math.isfinite(share) or share < 0:
                raise ValueError(f"sources[{k}].share must be finite and >= 0, got {share!r}")
            self.sources.append((start, size, share))
        eligible = [s for s in self.sources if s[2] > 0 and s[1] > 0]
        if not eligible:
            raise ValueError(f"no source has share > 0 and size > 0: {self.sources!r}")
        total = 0.0
        for _, _, share in eligible:
            total += share
        cum = 0.0
        self._table = []   # (cumulative bound, start, size), eligible sources only
        for start, size, share in eligible:
            cum += share / total
            self._table.append((cum, start, size))

    def pick(self, rng: SampleRng) -> int:
        u = rng.next_double()
        chosen = self._table[-1]
        for entry in self._table:
            if entry[0] > u:
                chosen = entry
                break
        _, start, size = chosen
        return start + rng.next_int(size)

    def indices(self, epoch, step) -> List[int]:
        epoch, step = self._check(epoch, step)
        return [self.pick(SampleRng(derive(self.seed, epoch, step, j, STREAM_MIXING)))
                for j in range(self.batch_size)]


class BucketedSampler(_Sampler):
    """§3 / D11: shuffle, pool, sort pools by (length << 32) | index, place batches by perm."""

    def __init__(self, lengths, batch_size, pool_batches, seed):
        lengths = [_as_int(v, f"lengths[{k}]") for k, v in enumerate(lengths)]
        for k, v in enumerate(lengths):
            if not 0 <= v < (1 << 31):
                raise ValueError(f"lengths[{k}] must satisfy 0 <= length < 2**31, got {v!r}")
        self.lengths = lengths
        self.n = len(lengths)
        if self.n >= (1 << 32):
            raise ValueError(f"len(lengths) must be < 2**32, got {self.n}")
        self.batch_size = _positive(batch_size, "batch_size")
        self.pool_batches = _positive(pool_batches, "pool_batches")
        self.seed = _u64(seed, "seed")
        self.steps_per_epoch = self.n // self.batch_size
        if self.steps_per_epoch == 0:
            raise ValueError(
                f"len(lengths)={self.n} is smaller than batch_size={self.batch_size}: no batch")

    def plan(self, epoch) -> List[List[int]]:
        epoch = _as_int(epoch, "epoch")
        if epoch < 0:
            raise ValueError(f"epoch must be >= 0, got {epoch!r}")
        n, B, S = self.n, self.batch_size, self.steps_per_epoch
        key_order = derive(self.seed, epoch, 0, 0, STREAM_BUCKET_ORDER)
        order = [keyed_permutation(p, n, key_order) for p in range(S * B)]
        pool = B * self.pool_batches
        flat: List[int] = []
        for start in range(0, S * B, pool):
            chunk = order[start:start + pool]
            chunk.sort(key=lambda i: (self.lengths[i] << 32) | i)
            flat.extend(chunk)
        key_place = derive(self.seed, epoch, 1, 0, STREAM_BUCKET_PLACE)
        steps: List[List[int]] = [[] for _ in range(S)]
        for t in range(S):
            steps[keyed_permutation(t, S, key_place)] = flat[t * B:(t + 1) * B]
        return steps

    def indices(self, epoch, step) -> List[int]:
        epoch, step = self._check(epoch, step)
        return list(self.plan(epoch)[step])


# ---------------------------------------------------------------------------
# contract.md: built-in augmentations
# ---------------------------------------------------------------------------

def gain_offset(gain=0.2, offset=0.1) -> Callable[[np.ndarray, SampleRng], None]:
    """GainOffset: one gain and one offset per image from two next_single draws."""
    gain32, offset32 = f32(gain), f32(offset)
    one, two = f32(1.0), f32(2.0)

    def aug(image: np.ndarray, rng: SampleRng) -> None:
        a = rng.next_single()
        b = rng.next_single()
        g = f32(one + f32(gain32 * f32(f32(two * a) - one)))
        o = f32(offset32 * f32(f32(two * b) - one))
        prod = np.multiply(image, g, dtype=np.float32)      # one rounding
        np.add(prod, o, out=image, dtype=np.float32)       # one rounding

    return aug


def gaussian_noise(sigma=0.05) -> Callable[[np.ndarray, SampleRng], None]:
    """GaussianNoise: each pixel, in C, H, W order, plus f32(sigma * next_normal())."""
    sigma32 = f32(sigma)

    def aug(image: np.ndarray, rng: SampleRng) -> None:
        flat = image.reshape(-1)   # C-contiguous: C, H, W order
        for k in range(flat.size):
            flat[k] = f32(flat[k] + f32(sigma32 * rng.next_normal()))

    return aug


# ---------------------------------------------------------------------------
# contract.md: SyntheticLineImages
# ---------------------------------------------------------------------------

def synthetic_sample(i, height=32, min_width=64, max_width=256, channels=1, seed=0):
    """Sample ``i`` of SyntheticLineImages: (image float32 [C,H,W], target int32, label)."""
    i = _non_negative(i, "i")
    height = _positive(height, "height")
    min_width = _positive(min_width, "min_width")
    max_width = _as_int(max_width, "max_width")
    if max_width < min_width:
        raise ValueError(f"max_width must be >= min_width={min_width}, got {max_width!r}")
    channels = _positive(channels, "channels")
    g = SampleRng(derive(seed, 0, i, 0, STREAM_SYNTH_SHAPE))
    width = min_width + g.next_int(max_width - min_width + 1)
    target_length = 1 + g.next_int(max(1, width // 16))
    target = np.array([1 + g.next_int(95) for _ in range(target_length)], dtype=np.int32)
    label = g.next_int(10)
    p = SampleRng(derive(seed, 0, i, 0, STREAM_SYNTH_PIXELS))
    image = _singles_bulk(p, channels * height * width).reshape(channels, height, width)
    return image, target, label


def synthetic_sample_loop(i, height=32, min_width=64, max_width=256, channels=1, seed=0):
    """``synthetic_sample`` with the pixel fill as a plain loop (for checking the bulk path)."""
    image, target, label = synthetic_sample(i, 1, min_width, max_width, 1, seed)
    width = image.shape[2]
    p = SampleRng(derive(seed, 0, i, 0, STREAM_SYNTH_PIXELS))
    out = np.empty((channels, height, width), dtype=np.float32)
    for c in range(channels):
        for y in range(height):
            for x in range(width):
                out[c, y, x] = p.next_single()
    return out, target, label


# ---------------------------------------------------------------------------
# §4 collation and the §1 batch at a global step
# ---------------------------------------------------------------------------

def collate(samples, indices, seed, epoch, step, width_multiple=1, pad_value=0.0,
            augmentation=None, slot_offset=0) -> dict:
    """§4 ImageBatchCollator.  ``samples`` are (image, target, label) triples."""
    width_multiple = _positive(width_multiple, "width_multiple")
    samples = list(samples)
    indices = [_as_int(v, "index") for v in indices]
    if len(samples) != len(indices):
        raise ValueError(f"{len(samples)} samples but {len(indices)} indices")
    if not samples:
        raise ValueError("a batch needs at least one sample, got 0")
    images = [np.asarray(s[0]) for s in samples]
    for k, im in enumerate(images):
        if im.ndim != 3 or im.dtype != np.float32:
            raise ValueError(f"sample {k}: image must be float32 [C,H,W], got {im.dtype} {im.shape}")
    C, H = images[0].shape[0], images[0].shape[1]
    for k, im in enumerate(images):
        if im.shape[:2] != (C, H):
            raise ValueError(f"sample {k}: shape {im.shape} does not share C={C}, H={H}")
    widths = [im.shape[2] for im in images]
    m = width_multiple
    wp = -(-max(widths) // m) * m                       # D13
    B = len(samples)
    out = np.full((B, C, H, wp), f32(pad_value), dtype=np.float32)
    for j, im in enumerate(images):
        if augmentation is not None:
            scratch = np.array(im, dtype=np.float32, order="C", copy=True)
            rng = SampleRng(derive(seed, epoch, step, slot_offset + j, STREAM_AUGMENTATION))
            augmentation(scratch, rng)
            if scratch.shape != im.shape:
                raise ValueError("an augmentation cannot change the sample's shape")
            im = scratch
        out[j, :, :, :widths[j]] = im
    targets = [np.asarray(s[1], dtype=np.int32).reshape(-1) for s in samples]
    return {
        "images": out,
        "widths": np.array(widths, dtype=np.int32),
        "targets": (np.concatenate(targets).astype(np.int32) if targets
                    else np.zeros(0, np.int32)),
        "target_lengths": np.array([t.size for t in targets], dtype=np.int32),
        "labels": np.array([int(s[2]) for s in samples], dtype=np.int32),
        "indices": np.array(indices, dtype=np.int32),
    }


def batch(get_sample, sampler, seed, g, width_multiple=1, pad_value=0.0, augmentation=None,
          transform=None, rank=0, world_size=1) -> dict:
    """§1: rank ``rank``'s share of the loader's batch at global step ``g``."""
    g = _non_negative(g, "g")
    world_size = _positive(world_size, "world_size")
    rank = _as_int(rank, "rank")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must satisfy 0 <= rank < world_size={world_size}, got {rank!r}")
    B = sampler.batch_size
    if B % world_size:
        raise ValueError(f"batch_size={B} is not divisible by world_size={world_size}")
    S = sampler.steps_per_epoch
    epoch, s = divmod(g, S)
    idx = list(sampler.indices(epoch, s))
    per = B // world_size
    lo = rank * per
    hi = min(lo + per, len(idx))
    samples, kept = [], []
    for slot in range(lo, hi):
        sample = get_sample(idx[slot])
        if transform is not None:
            sample = transform(sample, SampleRng(derive(seed, epoch, s, slot, STREAM_TRANSFORM)))
        samples.append(sample)
        kept.append(idx[slot])
    out = collate(samples, kept, seed, epoch, s, width_multiple, pad_value, augmentation,
                  slot_offset=lo)
    out["epoch"], out["step"] = epoch, s
    return out


# ---------------------------------------------------------------------------
# §6 image helpers
# ---------------------------------------------------------------------------

def planar_constants(mean, std) -> Tuple[np.float32, np.float32]:
    """D15: (scale, bias) computed in float32 from float32-rounded mean and std."""
    mean32, std32 = f32(mean), f32(std)
    scale = f32(f32(1.0) / f32(f32(255.0) * std32))
    bias = f32(mean32 / std32)
    return scale, bias


def gray8_to_planar(src, mean, std) -> np.ndarray:
    """§6 Gray8ToPlanar: uint8 [H, W] -> float32 [1, H, W] (D15, D16)."""
    src = np.asarray(src)
    if src.dtype != np.uint8 or src.ndim != 2:
        raise ValueError(f"src must be uint8 [H, W], got {src.dtype} {src.shape}")
    scale, bias = planar_constants(mean, std)
    prod = np.multiply(src.astype(np.float32), scale, dtype=np.float32)
    return np.subtract(prod, bias, dtype=np.float32)[None, :, :]


def rgb8_to_planar(src, mean, std) -> np.ndarray:
    """§6 Rgb8ToPlanar: interleaved uint8 [H, W, 3] -> planar float32 [3, H, W]."""
    src = np.asarray(src)
    if src.dtype != np.uint8 or src.ndim != 3 or src.shape[2] != 3:
        raise ValueError(f"src must be uint8 [H, W, 3], got {src.dtype} {src.shape}")
    means = np.broadcast_to(np.asarray(mean, dtype=np.float64), (3,))
    stds = np.broadcast_to(np.asarray(std, dtype=np.float64), (3,))
    out = np.empty((3, src.shape[0], src.shape[1]), dtype=np.float32)
    for c in range(3):
        scale, bias = planar_constants(means[c], stds[c])
        prod = np.multiply(src[:, :, c].astype(np.float32), scale, dtype=np.float32)
        out[c] = np.subtract(prod, bias, dtype=np.float32)
    return out


# ---------------------------------------------------------------------------
# Inverses and rules used to write the conformance vectors (not part of the text)
# ---------------------------------------------------------------------------

def _unshift(z: int, shift: int) -> int:
    """The inverse of ``z ^ (z >> shift)`` on 64 bits."""
    x = z
    for _ in range(64 // shift + 1):
        x = z ^ (x >> shift)
    return x


def unmix(y) -> int:
    """The ``x`` with ``mix(x) == y``: SplitMix64's output function is a bijection of 64-bit words."""
    z = _unshift(_u64(y, "y"), 31)
    z = _unshift((z * pow(MUL2, -1, 1 << 64)) & M64, 27)
    z = _unshift((z * pow(MUL1, -1, 1 << 64)) & M64, 30)
    return (z - GOLDEN) & M64


def seed_deriving(state, epoch, step, slot, stream) -> int:
    """The seed with ``derive(seed, epoch, step, slot, stream) == state`` (each step of
    ``derive`` is a ``mix`` of a sum, so it can be undone)."""
    h = _u64(state, "state")
    for v in reversed([epoch, step, slot, stream]):
        h = (unmix(h) - _u64(v, "v")) & M64
    return unmix(h) ^ DERIVE_SALT


def state_drawing_double(u: float) -> int:
    """A state whose first ``next_double`` is ``u`` (``u`` must be a multiple of 2^-53 in [0, 1))."""
    k = u * (1 << 53)
    if not (0.0 <= u < 1.0 and k == int(k)):
        raise ValueError(f"{u!r} is not a next_double value")
    return unmix(int(k) << 11)


def loader_ranks_allowed(sampler, world_size) -> bool:
    """The loader's rank rule: ``world_size >= 1`` divides the batch size, and the last
    batch of an epoch (shorter without drop-last) gives every rank at least one sample."""
    if world_size < 1 or sampler.batch_size % world_size:
        return False
    share = sampler.batch_size // world_size
    last = len(sampler.indices(0, sampler.steps_per_epoch - 1))
    return last > (world_size - 1) * share


def raw_layout_allowed(size, height, width, stride, channels) -> bool:
    """§6 on a raw buffer: a row stride of at least ``width * channels`` bytes, and
    ``(height - 1) * stride + width * channels`` bytes in the buffer."""
    row = width * channels
    return stride >= row and size >= (height - 1) * stride + row


# ---------------------------------------------------------------------------
# contract.md: SyntheticTextLines (a transcription of its section, glyph by glyph)
# ---------------------------------------------------------------------------

STREAM_TEXT_LAYOUT = 4
STREAM_TEXT_PIXELS = 5
TEXT_GLYPHS = "0123456789ABCDEF"
# The 5x7 font of contract.md, rows top to bottom, bit 4 = leftmost column.
TEXT_FONT = {
    "0": (0x0E, 0x11, 0x13, 0x15, 0x19, 0x11, 0x0E), "1": (0x04, 0x0C, 0x04, 0x04, 0x04, 0x04, 0x0E),
    "2": (0x0E, 0x11, 0x01, 0x02, 0x04, 0x08, 0x1F), "3": (0x1F, 0x02, 0x04, 0x02, 0x01, 0x11, 0x0E),
    "4": (0x02, 0x06, 0x0A, 0x12, 0x1F, 0x02, 0x02), "5": (0x1F, 0x10, 0x1E, 0x01, 0x01, 0x11, 0x0E),
    "6": (0x06, 0x08, 0x10, 0x1E, 0x11, 0x11, 0x0E), "7": (0x1F, 0x01, 0x02, 0x04, 0x08, 0x08, 0x08),
    "8": (0x0E, 0x11, 0x11, 0x0E, 0x11, 0x11, 0x0E), "9": (0x0E, 0x11, 0x11, 0x0F, 0x01, 0x02, 0x0C),
    "A": (0x0E, 0x11, 0x11, 0x1F, 0x11, 0x11, 0x11), "B": (0x1E, 0x11, 0x11, 0x1E, 0x11, 0x11, 0x1E),
    "C": (0x0E, 0x11, 0x10, 0x10, 0x10, 0x11, 0x0E), "D": (0x1C, 0x12, 0x11, 0x11, 0x11, 0x12, 0x1C),
    "E": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x1F), "F": (0x1F, 0x10, 0x10, 0x1E, 0x10, 0x10, 0x10),
}


def _text_params(height, min_length, max_length, num_symbols, scale, noise):
    """The argument checks of contract.md's SyntheticTextLines section."""
    scale = _as_int(scale, "scale")
    if not 1 <= scale <= 64:
        raise ValueError(f"scale must lie in [1, 64], got {scale!r}")
    height = _as_int(height, "height")
    if not 7 * scale <= height <= 4096:
        raise ValueError(f"height must lie in [7 * scale, 4096], got {height!r}")
    min_length, max_length = _as_int(min_length, "min_length"), _as_int(max_length, "max_length")
    if not 1 <= min_length <= max_length <= 4096:
        raise ValueError(f"need 1 <= min_length <= max_length <= 4096, got {min_length}, {max_length}")
    num_symbols = _as_int(num_symbols, "num_symbols")
    if not 1 <= num_symbols <= 16:
        raise ValueError(f"num_symbols must lie in [1, 16], got {num_symbols!r}")
    with np.errstate(over="ignore"):      # a float64 past float32's range rounds to inf: refused below
        noise32 = f32(noise)
    if not (math.isfinite(noise32) and noise32 >= 0):
        raise ValueError(f"noise must be finite and >= 0, got {noise!r}")
    return height, min_length, max_length, num_symbols, scale, noise32


def textlines_sample(i, height=24, min_length=1, max_length=6, num_symbols=10, scale=2, noise=0.5,
                     seed=0):
    """Sample ``i`` of SyntheticTextLines: (image float32 [1,H,W], target int32, label)."""
    i = _non_negative(i, "i")
    height, min_length, max_length, num_symbols, s, noise32 = _text_params(
        height, min_length, max_length, num_symbols, scale, noise)
    r = SampleRng(derive(seed, 0, i, 0, STREAM_TEXT_LAYOUT))
    length = min_length + r.next_int(max_length - min_length + 1)
    target = [1 + r.next_int(num_symbols) for _ in range(length)]
    glyphs = []                                  # (x, y, ink) of each glyph
    x = s
    for k in range(length):
        gap = r.next_int(2 * s + 1)
        y = r.next_int(height - 7 * s + 1)
        ink = f32(f32(0.5) + f32(f32(0.5) * r.next_single()))
        x = x + (6 * s if k > 0 else 0) + gap
        glyphs.append((x, y, ink))
    width = x + 6 * s + r.next_int(2 * s + 1)
    ink_plane = np.zeros((height, width), dtype=np.float32)
    for symbol, (x0, y0, ink) in zip(target, glyphs):
        rows = TEXT_FONT[TEXT_GLYPHS[symbol - 1]]
        for yy in range(7 * s):
            for xx in range(5 * s):
                if rows[yy // s] >> (4 - xx // s) & 1:
                    ink_plane[y0 + yy, x0 + xx] = ink
    p = SampleRng(derive(seed, 0, i, 0, STREAM_TEXT_PIXELS))
    u = _singles_bulk(p, height * width).reshape(height, width)
    v = np.multiply(noise32, np.subtract(u, f32(0.5), dtype=np.float32), dtype=np.float32)
    image = np.add(ink_plane, v, dtype=np.float32)
    return image[None, :, :], np.array(target, dtype=np.int32), length


class TextLineSample:
    """What the oracle's ``SyntheticTextLines.get_sample`` returns (image, target, label)."""

    def __init__(self, image, target, label):
        self.image, self.target, self.label = image, target, label


class SyntheticTextLines:
    """The oracle's dataset: ``get_sample(i)`` is ``textlines_sample(i, ...)`` (replay needs a class)."""

    def __init__(self, count, height=24, min_length=1, max_length=6, num_symbols=10, scale=2,
                 noise=0.5, seed=0):
        self.count = _positive(count, "count")
        self.params = dict(height=height, min_length=min_length, max_length=max_length,
                           num_symbols=num_symbols, scale=scale, noise=noise, seed=seed)
        _text_params(height, min_length, max_length, num_symbols, scale, noise)
        self.vocabulary = ("<blank>",) + tuple(TEXT_GLYPHS[:int(num_symbols)])

    def __len__(self):
        return self.count

    def get_sample(self, i):
        if not 0 <= _as_int(i, "i") < self.count:
            raise IndexError(f"index must lie in [0, {self.count}), got {i!r}")
        return TextLineSample(*textlines_sample(i, **self.params))


# The text-line augmentations (docs/contract.md) are transcribed in their own module; the
# conformance replay finds them here as ``reference.augment``.
import reference_augment as augment  # noqa: E402,F401
