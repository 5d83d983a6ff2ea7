"""§3 Samplers: Sequential, Shuffled, Mixing, Bucketed (readings D7-D12).

What a sampler returns depends on (epoch, step-in-epoch) alone: the tests ask in any
order and compare with ``reference.py`` and with the properties the text states.

Also here: ``indices_into`` (the package's write-into-a-buffer form of a batch), the
refusals (D10, D11 and the package's exception rule), one check of the oracle itself,
and these concerns: Python-subclassable Sampler (architecture item 3), pickling of a
Python sampler, and memory safety (issue 13 class 1, a wrapped ceil(n / B); class 2, the
lengths cannot be edited).
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
from hypothesis import example, given, settings, strategies as st

import onemodel_cy
import reference as R

M64 = R.M64
SEEDS = st.one_of(st.integers(0, M64), st.integers(-(1 << 63), -1), st.sampled_from([0, 1, -1, M64]))
EPOCHS = st.one_of(st.integers(0, 20), st.integers(0, (1 << 63) - 1), st.sampled_from([(1 << 63) - 1]))


def _list(a):
    assert isinstance(a, np.ndarray) and a.dtype == np.int64 and a.ndim == 1
    return a.tolist()


def _epoch(s, epoch):
    return [_list(s.indices(epoch, k)) for k in range(s.steps_per_epoch)]


@st.composite
def range_config(draw, max_n=400):
    n = draw(st.integers(1, max_n))
    b = draw(st.integers(1, max(1, n + 3)))
    drop = draw(st.booleans())
    if drop and b > n:
        b = draw(st.integers(1, n))
    return n, b, drop


# --------------------------------------------------------------------------- sequential

@given(cfg=range_config(), epoch=EPOCHS, data=st.data())
def test_sequential_matches_reference(om, cfg, epoch, data):
    """§3 (Sequential): the index at position step*B + i is that position itself, in
    every epoch, as in the oracle."""
    n, b, drop = cfg
    s, r = om.SequentialSampler(n, b, drop), R.SequentialSampler(n, b, drop)
    assert (s.steps_per_epoch, s.batch_size) == (r.steps_per_epoch, r.batch_size)
    step = data.draw(st.integers(0, s.steps_per_epoch - 1))
    assert _list(s.indices(epoch, step)) == r.indices(epoch, step)


@given(cfg=range_config())
def test_sequential_steps_per_epoch_and_coverage(om, cfg):
    """§3 (drop-last), D8: with drop-last there are floor(n/B) full batches that cover
    exactly positions [0, S*B); without it S = ceil(n/B) and the last, short batch covers
    positions (S-1)*B up to n - 1."""
    n, b, drop = cfg
    s = om.SequentialSampler(n, b, drop)
    flat = [i for batch in _epoch(s, 0) for i in batch]
    if drop:
        assert s.steps_per_epoch == n // b
        assert flat == list(range(s.steps_per_epoch * b))
        assert all(len(x) == b for x in _epoch(s, 0))
    else:
        assert s.steps_per_epoch == -(-n // b)
        assert flat == list(range(n))
        assert len(_list(s.indices(0, s.steps_per_epoch - 1))) == n - (s.steps_per_epoch - 1) * b


# --------------------------------------------------------------------------- shuffled

@given(cfg=range_config(max_n=5000), seed=SEEDS, epoch=EPOCHS, data=st.data())
@example(cfg=(10, 3, False), seed=-1, epoch=0, data=None).via("short last batch, seed -1")
def test_shuffled_matches_reference(om, cfg, seed, epoch, data):
    """§3 (Shuffled), D7, D3: position p of epoch e reads index perm(p) keyed by
    Derive(seed, e, 0, 0, 101), seeds taken mod 2^64; the short last batch of a
    non-drop-last epoch included."""
    n, b, drop = cfg
    s, r = om.ShuffledSampler(n, b, seed, drop), R.ShuffledSampler(n, b, seed, drop)
    assert (s.steps_per_epoch, s.batch_size) == (r.steps_per_epoch, r.batch_size)
    steps = [s.steps_per_epoch - 1] if data is None else [
        data.draw(st.integers(0, s.steps_per_epoch - 1)), s.steps_per_epoch - 1]
    for step in steps:
        assert _list(s.indices(epoch, step)) == r.indices(epoch, step)


@given(cfg=range_config(max_n=3000), seed=SEEDS, epoch=st.integers(0, 1000))
def test_shuffled_every_index_once_per_epoch(om, cfg, seed, epoch):
    """§3 (Shuffled), D7: no index repeats within an epoch; with drop-last exactly the
    images at the first S*B positions of the epoch's permutation are used, without it all
    n of them."""
    n, b, drop = cfg
    s = om.ShuffledSampler(n, b, seed, drop)
    flat = [i for batch in _epoch(s, epoch) for i in batch]
    key = om.derive(seed, epoch, 0, 0, 101)
    used = s.steps_per_epoch * b if drop else n
    assert flat == om.permutation(n, key)[:used].tolist()
    assert len(set(flat)) == len(flat) == used
    assert s.steps_per_epoch == (n // b if drop else -(-n // b))


@given(n=st.integers(2, 2000), seed=SEEDS, epoch=st.integers(0, 100), data=st.data())
def test_shuffled_maps_position_to_perm_not_inverse(om, n, seed, epoch, data):
    """D7: the index at position p is perm(p), not the p such that perm(p) = position."""
    b = data.draw(st.integers(1, n))
    s = om.ShuffledSampler(n, b, seed, False)
    key = om.derive(seed, epoch, 0, 0, 101)
    step = data.draw(st.integers(0, s.steps_per_epoch - 1))
    got = _list(s.indices(epoch, step))
    assert got == [om.keyed_permutation(step * b + i, n, key) for i in range(len(got))]


@given(n=st.integers(64, 2000), seed=SEEDS)
def test_shuffled_epochs_differ(om, n, seed):
    """§3 (Shuffled): the epoch is part of the stream-101 key, so consecutive epochs use
    different orders."""
    s = om.ShuffledSampler(n, n, seed)
    assert _list(s.indices(0, 0)) != _list(s.indices(1, 0))


# --------------------------------------------------------------------------- mixing

@st.composite
def mixing_config(draw):
    k = draw(st.integers(1, 5))
    sources, start = [], 0
    for _ in range(k):
        size = draw(st.one_of(st.integers(0, 60), st.integers(0, (1 << 40))))
        share = draw(st.one_of(st.floats(0, 10, allow_nan=False), st.sampled_from([0.0, 1.0, 0.1])))
        sources.append((start, size, share))
        start = draw(st.integers(0, 1 << 20)) if draw(st.booleans()) else start + size
    if not any(sh > 0 and sz > 0 for _, sz, sh in sources):
        sources.append((start, 7, 0.5))
    return sources


@given(sources=mixing_config(), b=st.integers(1, 40), steps=st.integers(1, 20), seed=SEEDS,
       epoch=EPOCHS, data=st.data())
def test_mixing_matches_reference(om, sources, b, steps, seed, epoch, data):
    """§3 (Mixing), D9, D10: for slot j of step s the sampler takes one double from
    Derive(seed, e, s, j, 102), picks the first eligible source whose float64 cumulative
    share exceeds it (zero-share and empty sources skipped, last eligible as fallback),
    then adds a bounded draw to its start."""
    s, r = om.MixingSampler(sources, b, steps, seed), R.MixingSampler(sources, b, steps, seed)
    assert (s.steps_per_epoch, s.batch_size) == (steps, b)
    step = data.draw(st.integers(0, steps - 1))
    assert _list(s.indices(epoch, step)) == r.indices(epoch, step)


@st.composite
def share_vectors(draw):
    k = draw(st.integers(1, 6))
    return draw(st.lists(st.floats(0.02, 1.0, allow_nan=False), min_size=k, max_size=k))


@settings(derandomize=True, max_examples=25)
@given(shares=share_vectors(), seed=st.integers(0, M64))
def test_mixing_counts_within_four_sigma(om, shares, seed):
    """§3 (Mixing): each slot draws on its own and may repeat an index, so a source's
    share is met on average rather than exactly: over 10,000 draws the count of each
    source lies within 4 binomial standard deviations sqrt(N p (1 - p)) of N p, p being
    its normalised share."""
    sources = [(100 * k, 100, sh) for k, sh in enumerate(shares)]
    s = om.MixingSampler(sources, 100, 100, seed)
    counts = np.zeros(len(shares), dtype=np.int64)
    for step in range(100):
        counts += np.bincount(s.indices(0, step) // 100, minlength=len(shares))
    assert counts.sum() == 10_000
    total = sum(shares)
    for c, sh in zip(counts, shares):
        p = sh / total
        sigma = math.sqrt(10_000 * p * (1 - p))
        assert abs(c - 10_000 * p) <= 4 * sigma + 1e-9, (c, p, sigma)


@given(seed=SEEDS, epoch=st.integers(0, 50), b=st.integers(1, 64))
def test_mixing_skips_zero_share_and_empty_sources(om, seed, epoch, b):
    """§3 (Mixing), D10: only a source with a positive share and at least one index is
    drawn from: an empty source with the largest share and a zero-share source never are."""
    sources = [(0, 0, 100.0), (1000, 50, 0.0), (2000, 30, 1.0), (3000, 20, 2.0)]
    s = om.MixingSampler(sources, b, 3, seed)
    for step in range(3):
        for i in _list(s.indices(epoch, step)):
            assert 2000 <= i < 2030 or 3000 <= i < 3020


@given(seed=SEEDS, epoch=st.integers(0, 50))
def test_mixing_slot_uses_its_own_derived_rng(om, seed, epoch):
    """§3 (Mixing), D10: each slot's rng Derive(seed, e, s, slot, 102) gives first a
    NextDouble, then a NextInt(size): with a single source the index is start + the
    second draw of that rng."""
    s = om.MixingSampler([(40, 13, 1.0)], 8, 4, seed)
    for step in range(4):
        want = []
        for slot in range(8):
            rng = om.SampleRng(om.derive(seed, epoch, step, slot, 102))
            rng.next_double()
            want.append(40 + rng.next_int(13))
        assert _list(s.indices(epoch, step)) == want


# --------------------------------------------------------------------------- bucketed

@st.composite
def bucket_config(draw, max_n=300):
    n = draw(st.integers(1, max_n))
    lengths = draw(st.one_of(
        st.lists(st.integers(0, 10), min_size=n, max_size=n),             # many ties
        st.lists(st.integers(0, (1 << 31) - 1), min_size=n, max_size=n)))
    b = draw(st.integers(1, n))
    pool = draw(st.integers(1, 12))
    return lengths, b, pool


@given(cfg=bucket_config(), seed=SEEDS, epoch=EPOCHS, data=st.data())
def test_bucketed_matches_reference(om, cfg, seed, epoch, data):
    """§3 (Bucketed), D11: shuffle with key Derive(seed, e, 0, 0, 103), keep S*B, sort
    pools of B*poolBatches by (length << 32) | index, cut into batches, and serve batch t
    at step perm(t) keyed by Derive(seed, e, 1, 0, 104) over S; any step agrees with the
    oracle."""
    lengths, b, pool = cfg
    s, r = om.BucketedSampler(lengths, b, pool, seed), R.BucketedSampler(lengths, b, pool, seed)
    assert (s.steps_per_epoch, s.batch_size) == (len(lengths) // b, b)
    step = data.draw(st.integers(0, s.steps_per_epoch - 1))
    assert _list(s.indices(epoch, step)) == r.indices(epoch, step)


@given(cfg=bucket_config(), seed=SEEDS, epoch=st.integers(0, 1000))
def test_bucketed_plan_structure(om, cfg, seed, epoch):
    """§3 (Bucketed), D11: the stated structure, rebuilt from the package's own
    permutation: the kept indices are the first S*B of the epoch's shuffle, each once;
    each pool is sorted by the unique key (length << 32) | index; and sorted batch t is
    the batch served at step perm(t)."""
    lengths, b, pool = cfg
    s = om.BucketedSampler(lengths, b, pool, seed)
    S = s.steps_per_epoch
    served = _epoch(s, epoch)
    order = om.permutation(len(lengths), om.derive(seed, epoch, 0, 0, 103))[:S * b].tolist()
    flat = []
    for start in range(0, S * b, b * pool):
        flat += sorted(order[start:start + b * pool], key=lambda i: (lengths[i] << 32) | i)
    place = om.derive(seed, epoch, 1, 0, 104)
    for t in range(S):
        assert served[om.keyed_permutation(t, S, place)] == flat[t * b:(t + 1) * b]
    kept = [i for batch in served for i in batch]
    assert sorted(kept) == sorted(order) and len(set(kept)) == S * b


@given(seed=SEEDS, queries=st.lists(st.tuples(st.integers(0, 12), st.integers(0, 9)),
                                    min_size=1, max_size=25))
@example(seed=3, queries=[(5, 0), (4, 1), (9, 2), (5, 3), (0, 4), (4, 5), (5, 9)]).via("5, 4, 9, 5, 0")
def test_bucketed_plan_cache_is_invisible(om, seed, queries):
    """§3 (Bucketed plan cache): the sampler keeps the plans of the two most recent
    epochs, and that must not show: one sampler asked epochs in any order answers like a
    fresh sampler per question."""
    lengths = [(i * 7919) % 53 for i in range(41)]
    shared = om.BucketedSampler(lengths, 4, 3, seed)
    for epoch, step in queries:
        fresh = om.BucketedSampler(lengths, 4, 3, seed)
        assert _list(shared.indices(epoch, step)) == _list(fresh.indices(epoch, step))


# --------------------------------------------------------------------------- indices_into, purity

def _samplers(om):
    return [om.SequentialSampler(23, 5, False), om.ShuffledSampler(23, 5, 9, False),
            om.MixingSampler([(0, 10, 0.4), (10, 13, 0.6)], 5, 4, 9),
            om.BucketedSampler([i % 6 for i in range(23)], 5, 2, 9)]


@given(epoch=st.integers(0, 40), data=st.data())
def test_indices_into_equals_indices(om, epoch, data):
    """§3 (every sampler), the package's indices_into: writing a batch into a caller's
    int64 buffer gives the same indices and their count, and leaves the rest of the
    buffer alone."""
    for s in _samplers(om):
        step = data.draw(st.integers(0, s.steps_per_epoch - 1))
        want = _list(s.indices(epoch, step))
        out = np.full(s.batch_size + 3, -7, dtype=np.int64)
        k = s.indices_into(epoch, step, out)
        assert k == len(want)
        assert out[:k].tolist() == want
        assert (out[k:] == -7).all()


@given(queries=st.lists(st.tuples(st.integers(0, 30), st.integers(0, 3)), min_size=1, max_size=30))
def test_samplers_are_pure_functions_of_epoch_and_step(om, queries):
    """§3 (no sampler state): a sampler's answer depends only on (epoch, step), so any
    order of questions gives the answers the oracle gives for each question alone."""
    refs = [R.SequentialSampler(23, 5, False), R.ShuffledSampler(23, 5, 9, False),
            R.MixingSampler([(0, 10, 0.4), (10, 13, 0.6)], 5, 4, 9),
            R.BucketedSampler([i % 6 for i in range(23)], 5, 2, 9)]
    for s, r in zip(_samplers(om), refs):
        for epoch, step in queries:
            step %= s.steps_per_epoch
            assert _list(s.indices(epoch, step)) == r.indices(epoch, step)


# --------------------------------------------------------------------------- bad input

def _received(value) -> str:
    if isinstance(value, str):
        return r"'%s'|\"%s\"" % (re.escape(value), re.escape(value))
    return re.escape(repr(value))


def _constructors(om):
    """name -> (build(**overrides), the integer parameters it checks)."""
    return {
        "sequential": (lambda n=10, batch_size=3: om.SequentialSampler(n, batch_size),
                       ["n", "batch_size"]),
        "shuffled": (lambda n=10, batch_size=3, seed=1: om.ShuffledSampler(n, batch_size, seed),
                     ["n", "batch_size", "seed"]),
        "mixing": (lambda batch_size=3, steps_per_epoch=2, seed=1:
                   om.MixingSampler([(0, 5, 1.0)], batch_size, steps_per_epoch, seed),
                   ["batch_size", "steps_per_epoch", "seed"]),
        "bucketed": (lambda batch_size=3, pool_batches=2, seed=1:
                     om.BucketedSampler(list(range(10)), batch_size, pool_batches, seed),
                     ["batch_size", "pool_batches", "seed"]),
    }


@pytest.mark.parametrize("kind", ["sequential", "shuffled", "mixing", "bucketed"])
@pytest.mark.parametrize("bad", [0, -1, -7])
def test_zero_or_negative_sizes_are_errors(om, kind, bad):
    """§3 (sampler sizes), with the exception rule: sizes, batch sizes, steps per epoch
    and pool sizes must be >= 1; zero or negative values are a ValueError naming them."""
    build, params = _constructors(om)[kind]
    for p in params:
        if p == "seed":
            continue
        with pytest.raises(ValueError, match=_received(bad)):
            build(**{p: bad})


@pytest.mark.parametrize("kind", ["sequential", "shuffled", "mixing", "bucketed"])
@pytest.mark.parametrize("bad", [1.5, "3", None])
def test_non_integer_arguments_are_type_errors(om, kind, bad):
    """§3 (sampler arguments), with the exception rule: every integer constructor
    argument refuses a non-integer with a TypeError naming it."""
    build, params = _constructors(om)[kind]
    for p in params:
        with pytest.raises(TypeError, match=_received(bad)):
            build(**{p: bad})


@pytest.mark.parametrize("kind", ["sequential", "shuffled", "mixing", "bucketed"])
def test_step_epoch_out_of_range_and_non_integers(om, kind):
    """§3 (step-in-epoch lies in [0, S)), with the exception rule: a step outside [0,
    steps_per_epoch) or a negative epoch is a ValueError, a non-integer epoch or step a
    TypeError, each naming the value."""
    s = _constructors(om)[kind][0]()
    S = s.steps_per_epoch
    out = np.zeros(s.batch_size, dtype=np.int64)
    for step in (S, -1, S + 100):
        with pytest.raises(ValueError, match=_received(step)):
            s.indices(0, step)
        with pytest.raises(ValueError, match=_received(step)):
            s.indices_into(0, step, out)
    with pytest.raises(ValueError, match=_received(-1)):
        s.indices(-1, 0)
    with pytest.raises(ValueError, match=_received(-5)):
        s.indices(-5, 0)
    for bad in (1.5, "3", None):
        with pytest.raises(TypeError, match=_received(bad)):
            s.indices(bad, 0)
        with pytest.raises(TypeError, match=_received(bad)):
            s.indices(0, bad)


def test_mixing_negative_share_is_an_error(om):
    """D10: a negative share is refused, naming it."""
    with pytest.raises(ValueError, match=re.escape("-0.25")):
        om.MixingSampler([(0, 5, 0.5), (5, 5, -0.25)], 4, 2, 0)


@pytest.mark.parametrize("sources", [
    [(0, 0, 1.0), (5, 5, 0.0)],
    [(0, 5, 0.0)],
    [(0, 0, 0.0), (3, 0, 2.0)],
    [],
])
def test_mixing_without_eligible_source_is_an_error(om, sources):
    """D10: if no source has both share > 0 and size > 0 the sampler cannot be built."""
    with pytest.raises(ValueError):
        om.MixingSampler(sources, 4, 2, 0)


@pytest.mark.parametrize("bad", [-1, 1 << 31, (1 << 31) + 5, 1 << 40])
def test_bucketed_length_outside_range_is_an_error(om, bad):
    """D11: lengths lie in [0, 2^31) so the sort key (length << 32) | index is unique; any
    other length is refused, naming it."""
    with pytest.raises(ValueError, match=_received(bad)):
        om.BucketedSampler([1, 2, bad, 3], 2, 1, 0)


@pytest.mark.parametrize("bad", [1.5, "3", None])
def test_bucketed_non_integer_length_is_a_type_error(om, bad):
    """§3 (Bucketed, D11), with the exception rule: a length that is not an integer is a
    TypeError naming it."""
    with pytest.raises(TypeError, match=_received(bad)):
        om.BucketedSampler([1, 2, bad, 3], 2, 1, 0)


def test_bucketed_edge_lengths_are_accepted(om):
    """§3 (Bucketed), D11: the end points of the length range, 0 and 2^31 - 1, are valid
    and give the oracle's batches."""
    s = om.BucketedSampler([0, (1 << 31) - 1, 0, (1 << 31) - 1], 2, 1, 0)
    r = R.BucketedSampler([0, (1 << 31) - 1, 0, (1 << 31) - 1], 2, 1, 0)
    assert _epoch(s, 0) == [r.indices(0, k) for k in range(2)]


def test_reference_rejects_the_same_inputs(ref):
    """Concern: oracle self-check (D10, D11 and the exception rule). The oracle refuses
    the inputs the package must refuse, with the same types."""
    with pytest.raises(ValueError, match=re.escape("-0.25")):
        ref.MixingSampler([(0, 5, 0.5), (5, 5, -0.25)], 4, 2, 0)
    with pytest.raises(ValueError):
        ref.MixingSampler([(0, 0, 1.0), (5, 5, 0.0)], 4, 2, 0)
    with pytest.raises(ValueError, match=_received(1 << 31)):
        ref.BucketedSampler([1, 1 << 31], 1, 1, 0)
    with pytest.raises(ValueError, match=_received(0)):
        ref.SequentialSampler(10, 0)
    with pytest.raises(ValueError, match=_received(3)):
        ref.ShuffledSampler(10, 3, 0).indices(0, 3)
    with pytest.raises(ValueError, match=_received(-1)):
        ref.SequentialSampler(10, 3).indices(-1, 0)
    with pytest.raises(TypeError, match=_received("3")):
        ref.SequentialSampler("3", 1)


def test_bucketed_huge_pool_batches_is_one_pool(om):
    """D11: pools hold B*pool_batches kept indices; a pool_batches beyond the epoch makes a
    single pool (the whole kept order), never an overflow or an endless loop."""
    lengths = [5, 3, 9, 1, 7, 2, 8, 4]
    huge = om.BucketedSampler(lengths, 2, 2**62, 3)
    whole = om.BucketedSampler(lengths, 2, 4, 3)
    ref = R.BucketedSampler(lengths, 2, 2**62, 3)
    for step in range(4):
        assert huge.indices(0, step).tolist() == whole.indices(0, step).tolist() == ref.indices(0, step)


@pytest.mark.parametrize("share", ["0.5", b"1", True])
def test_mixing_share_must_be_a_number(om, share):
    """D10: a share is a real number; text and bools are refused, naming the value."""
    with pytest.raises(TypeError, match=re.escape(repr(share))):
        om.MixingSampler([(0, 4, share), (4, 4, 1.0)], 2, 1, 0)


def test_mixing_shares_with_an_infinite_total_are_refused(om):
    """D10 normalises by the float64 total; shares whose total overflows are refused
    instead of silently sending every draw to the last source."""
    with pytest.raises(ValueError, match="finite total"):
        om.MixingSampler([(0, 4, 1e308), (4, 4, 1e308)], 2, 1, 0)


def test_sampler_sizes_refuse_bools(om):
    """§3 (sampler sizes), with the exception rule: sizes are integers, not booleans (as
    in the oracle)."""
    with pytest.raises(TypeError, match="True"):
        om.SequentialSampler(True, 1)


def test_bucketed_lengths_cannot_be_edited(om):
    """Concern: memory safety (issue 13 class 2, sealed storage). The §3 bucketing plan
    depends on the lengths: what the sampler hands out is a read-only view that cannot be
    made writeable again."""
    s = om.BucketedSampler([3, 1, 2, 5], 2, 1, 0)
    with pytest.raises(ValueError):
        s.lengths.flags.writeable = True


# --------------------------------------------------------------------------- Python samplers

class ReversedBlocks(onemodel_cy.Sampler):
    """A Python sampler: steps of 3 indices of [0, 10), the last one short, each block reversed."""
    batch_size = 3

    def __init__(self):
        self.steps_per_epoch = 4          # an instance attribute works as well as a class one

    def indices(self, epoch, step):
        start = 3 * step
        return np.arange(min(start + 3, 10) - 1, start - 1, -1)


def _python_sampler_class(om):
    return ReversedBlocks


def test_python_sampler_indices_into_and_batch_length(om):
    """Concern: Python-subclassable Sampler (architecture item 3). A Python subclass of
    Sampler that defines batch_size, steps_per_epoch and indices() gets indices_into and
    batch_length from the base, which call indices() and copy what it returns; steps
    outside [0, S) are refused as for the built-in samplers (§3)."""
    s = _python_sampler_class(om)()
    out = np.full(3, -1, np.int64)
    assert s.indices_into(0, 1, out) == 3 and out.tolist() == [5, 4, 3]
    assert s.indices_into(5, 3, out) == 1 and out[:1].tolist() == [9]
    assert [s.batch_length(k) for k in range(4)] == [3, 3, 3, 1]
    with pytest.raises(ValueError, match=_received(4)):
        s.indices_into(0, 4, out)
    with pytest.raises(ValueError, match=_received(-1)):
        s.batch_length(-1)


@pytest.mark.parametrize("workers", [0, 2])
def test_python_sampler_through_a_data_loader(om, workers):
    """Concern: Python-subclassable Sampler (architecture item 3), under the §1 contract.
    A Python sampler drives a DataLoader end to end (the loader calls batch_size,
    steps_per_epoch, batch_length and indices_into); with 0 and 2 workers every batch of
    the stream equals batch_at and holds the indices the sampler gave."""
    ds = om.SyntheticLineImages(10, height=2, min_width=3, max_width=6, seed=4)
    loader = om.DataLoader(ds, _python_sampler_class(om)(), om.ImageBatchCollator(), seed=7,
                           workers=workers)
    assert loader.steps_per_epoch == 4
    got = 0
    with loader.iter(0, 8) as stream:
        for g, batch in enumerate(stream):
            with batch, loader.batch_at(g) as want:
                assert batch.indices.tolist() == want.indices.tolist()
                step = g % 4
                assert batch.indices.tolist() == list(range(min(3 * step + 3, 10) - 1, 3 * step - 1, -1))
                assert np.array_equal(batch.images.view(np.uint32), want.images.view(np.uint32))
            got += 1
    assert got == 8


def test_python_sampler_missing_parts_are_named(om):
    """Concern: Python-subclassable Sampler (architecture item 3). A subclass that
    defines nothing (``class S(Sampler): pass``) fails with NotImplementedError naming
    batch_size, steps_per_epoch and indices, also when handed to a DataLoader (it failed
    with a step-range ValueError before)."""
    class Nothing(om.Sampler):
        pass

    s = Nothing()
    for use in (lambda: s.batch_size, lambda: s.steps_per_epoch, lambda: s.batch_length(0),
                lambda: s.indices(0, 0), lambda: s.indices_into(0, 0, np.zeros(2, np.int64))):
        with pytest.raises(NotImplementedError) as e:
            use()
        for name in ("batch_size", "steps_per_epoch", "indices"):
            assert name in str(e.value)
    ds = om.SyntheticLineImages(4, height=2, min_width=3, max_width=4)
    with pytest.raises(NotImplementedError, match="steps_per_epoch"):
        om.DataLoader(ds, s, om.ImageBatchCollator(), seed=0)


@pytest.mark.parametrize("result, error, fragment", [
    (np.array([1.5, 2.0]), TypeError, "received 1.5"),
    (np.array([[1, 2]]), TypeError, "(1, 2)"),
    (np.array([], np.int64), ValueError, "received 0"),
    (np.arange(4), ValueError, "received 4"),
    (np.array([1, -2]), ValueError, "min=-2"),
    (np.array([2**63], np.uint64), ValueError, str(2**63)),
    ("abc", TypeError, "<U3"),
])
def test_python_sampler_results_are_checked(om, result, error, fragment):
    """Concern: Python-subclassable Sampler (architecture item 3), with the exception
    rule. What a Python sampler's indices() returns is checked before it reaches the
    loader: a 1-D integer array of 1..batch_size indices in [0, 2**63); a refused result
    writes nothing."""
    class Bad(om.Sampler):
        batch_size = 3
        steps_per_epoch = 2

        def indices(self, epoch, step):
            return result

    out = np.full(3, 7, np.int64)
    with pytest.raises(error) as e:
        Bad().indices_into(0, 0, out)
    assert fragment in str(e.value)
    assert out.tolist() == [7, 7, 7]          # nothing written


def test_python_sampler_pickles_its_own_state(om):
    """Concern: pickling (Python samplers). A Python sampler pickles through its __dict__
    (the base holds none of its state)."""
    import pickle
    s = _python_sampler_class(om)()
    s.steps_per_epoch = 3
    again = pickle.loads(pickle.dumps(s))
    assert type(again) is type(s) and again.steps_per_epoch == 3
    out = np.zeros(3, np.int64)
    assert again.indices_into(0, 2, out) == 3 and out.tolist() == [8, 7, 6]


@pytest.mark.parametrize("kind", ["sequential", "shuffled", "mixing", "bucketed"])
def test_indices_into_refuses_a_wrong_out_with_a_type_error(om, kind):
    """§3 (every sampler), the package's indices_into, with the exception rule: an out of
    the wrong dtype, dimensions or layout (strided, read-only, misaligned: numpy reports
    a float32 or int64 at an odd address as not aligned) is a TypeError, never written;
    one too short is a ValueError (these were all ValueError)."""
    s = _constructors(om)[kind][0]()
    B = s.batch_size
    read_only = np.zeros(B, np.int64)
    read_only.flags.writeable = False
    misaligned = np.frombuffer(bytearray(8 * B + 1), dtype=np.int64, offset=1, count=B)
    assert not misaligned.flags.aligned
    for bad in (np.zeros(B, np.float64), np.zeros(B, np.int32), np.zeros((1, B), np.int64),
                np.zeros(2 * B, np.int64)[::2], read_only, misaligned, np.zeros(B, ">i8")):
        with pytest.raises(TypeError, match="out must be"):
            s.indices_into(0, 0, bad)
    with pytest.raises(ValueError, match="room"):
        s.indices_into(0, 0, np.zeros(B - 1, np.int64))


def test_steps_per_epoch_near_2_63_without_drop_last(om):
    """Concern: memory safety (issue 13 class 1, wrapped size products); §3 (D8). ceil(n
    / B) for n near 2**63 is computed without forming n + B - 1 (which wrapped to a
    negative steps_per_epoch); the last batch is short."""
    n = (1 << 63) - 1
    for cls in (lambda: om.SequentialSampler(n, 2, drop_last=False),
                lambda: om.ShuffledSampler(n, 2, 5, drop_last=False)):
        s = cls()
        assert s.steps_per_epoch == 1 << 62
        assert s.batch_length(s.steps_per_epoch - 1) == 1
        assert s.batch_length(0) == 2
    last = om.SequentialSampler(n, 2, drop_last=False).indices(0, (1 << 62) - 1)
    assert last.tolist() == [n - 1]
    assert om.SequentialSampler(n, n, drop_last=False).steps_per_epoch == 1
