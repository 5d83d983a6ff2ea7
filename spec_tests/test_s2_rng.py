"""§2 Random numbers: SplitMix64, Mix, Derive, and the draws built on them (D1-D5).

Every property test compares the compiled package with ``reference.py`` on drawn
inputs, bit for bit.

Also here: the stream numbers (§2's and this package's own streams 2 and 3), the
package's bulk ``size=`` draws, the refusals (D4 and the package's exception rule),
checks of the oracle itself, and two concerns: memory safety (issue 13 class 1, bulk
sizes are checked) and pickling through the constructor (issue 13 class 3).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

import reference as R
from conftest import f32_bits, f64_bits

M64 = R.M64
GOLDEN = R.GOLDEN
U64 = st.integers(0, M64)
# integers as a caller may pass them: any sign, any size (D3 reduces them mod 2^64)
ANY_INT = st.one_of(U64, st.integers(-(1 << 64), -1), st.integers(1 << 64, 1 << 70),
                    st.sampled_from([0, 1, -1, M64, 1 << 63, -(1 << 63)]))
# states whose first draw is u = 0: every n that is not a power of two redraws from here
ZERO_U_STATE = (1 << 64) - GOLDEN
SPECIAL_N = [1, 2, 3, 10, (1 << 32) + 1, 1 << 63, (1 << 63) + 1, M64, 3 << 62, (1 << 64) - 3]
N_VALUES = st.one_of(st.integers(1, M64), st.integers(1, 1000), st.sampled_from(SPECIAL_N),
                     st.integers(1 << 63, M64))
COUNT = st.integers(0, 40)


def _u64s(rng, k):
    return [rng.next_u64() for _ in range(k)]


# --------------------------------------------------------------------------- generator

def test_published_splitmix64_outputs(om):
    """§2 (SplitMix64), D2 and the published values of the readings: the generator is
    exactly SplitMix64 as its author published it; the first five outputs from state
    1234567 are the public reference numbers."""
    rng = om.SampleRng(1234567)
    assert [rng.next_u64() for _ in range(5)] == [
        6457827717110365317, 3203168211198807973, 9817491932198370423,
        4593380528125082431, 16408922859458223821]


@given(state=U64, k=COUNT)
@example(state=0, k=8).via("state zero")
@example(state=M64, k=8).via("state wraps on the first increment")
def test_next_u64_matches_reference(om, state, k):
    """§2 (SplitMix64), D2: each 64-bit draw adds the golden-ratio constant to the state
    (mod 2^64) and returns the two xor-shift-multiply rounds and the final xor-shift of
    the new state."""
    got = om.SampleRng(state)
    want = R.SampleRng(state)
    assert _u64s(got, k) == _u64s(want, k)
    assert got.state == want.state


@given(state=U64)
def test_state_is_kept_as_given_and_advances_by_golden(om, state):
    """D2: the constructor stores the state untouched; a draw first moves it by the
    increment and the output is a function of the moved state alone."""
    rng = om.SampleRng(state)
    assert rng.state == state
    u = rng.next_u64()
    assert rng.state == (state + GOLDEN) & M64
    assert u == R._fmix((state + GOLDEN) & M64)


@given(a=U64, b=U64)
def test_state_is_writable(om, a, b):
    """§2 (D2), the state property: assigning the state makes the rng indistinguishable
    from one built with that state."""
    rng = om.SampleRng(a)
    rng.next_u64()
    rng.state = b
    assert rng.state == b
    assert _u64s(rng, 3) == _u64s(om.SampleRng(b), 3)


@given(x=U64)
@example(x=0).via("zero")
@example(x=M64).via("wraps")
def test_mix_is_output_of_generator_whose_previous_state_is_x(om, x):
    """D1: Mix(x) equals the first output of a generator whose pre-increment state is x,
    i.e. the finaliser applied to x plus the golden-ratio constant."""
    assert om.mix(x) == R.mix(x)
    assert om.mix(x) == om.SampleRng(x).next_u64()


# --------------------------------------------------------------------------- floats

@given(state=U64, k=st.integers(1, 30))
def test_next_single_is_top_24_bits_over_2_pow_24(om, state, k):
    """§2 (NextSingle): a single-precision draw keeps the top 24 bits of a 64-bit draw
    and scales them by 2^-24, so it is an exact float32 in [0, 1) (compared bit for bit)."""
    got, want, twin = om.SampleRng(state), R.SampleRng(state), om.SampleRng(state)
    for _ in range(k):
        g = got.next_single()
        w = want.next_single()
        assert float(np.float32(g)) == g, "not a float32 value"
        assert f32_bits(g) == f32_bits(w)
        assert g == (twin.next_u64() >> 40) / 2.0 ** 24
        assert 0.0 <= g < 1.0
    assert got.state == want.state


@given(state=U64, k=st.integers(1, 30))
def test_next_double_is_top_53_bits_over_2_pow_53(om, state, k):
    """§2 (NextDouble): a double draw keeps the top 53 bits of a 64-bit draw scaled by
    2^-53, in [0, 1)."""
    got, want, twin = om.SampleRng(state), R.SampleRng(state), om.SampleRng(state)
    for _ in range(k):
        g = got.next_double()
        assert f64_bits(g) == f64_bits(want.next_double())
        assert g == (twin.next_u64() >> 11) * 2.0 ** -53
        assert 0.0 <= g < 1.0


@given(state=U64, k=st.integers(1, 12))
def test_next_normal_bits_match_reference(om, state, k):
    """D5: the approximate normal is twelve single draws summed left to right in a
    float32 accumulator (one rounding per addition), minus 6 in float32."""
    got, want = om.SampleRng(state), R.SampleRng(state)
    for _ in range(k):
        g = got.next_normal()
        assert float(np.float32(g)) == g, "not a float32 value"
        assert f32_bits(g) == f32_bits(want.next_normal())
        assert -6.0 <= g <= 6.0
    assert got.state == want.state


@given(state=U64)
def test_next_normal_is_float32_running_sum_of_next_single(om, state):
    """D5 restated with the package's own next_single: the accumulator is float32
    throughout, so summing in float64 (one rounding at the end) is not the same thing."""
    twin = om.SampleRng(state)
    acc = np.float32(0.0)
    for _ in range(12):
        acc = np.float32(acc + np.float32(twin.next_single()))
    want = np.float32(acc - np.float32(6.0))
    rng = om.SampleRng(state)
    assert f32_bits(rng.next_normal()) == f32_bits(want)
    assert rng.state == twin.state


def test_next_normal_float32_accumulation_is_observable(ref):
    """§2 (D5), a guard for the test above: a float64 accumulation differs from D5 for
    some states, so the float32 rule is really being checked (the reference is the
    witness)."""
    differs = 0
    for state in range(2000):
        r32 = ref.SampleRng(state).next_normal()
        twin = ref.SampleRng(state)
        s64 = sum(float(twin.next_single()) for _ in range(12)) - 6.0
        differs += f32_bits(r32) != f32_bits(np.float32(s64))
    assert differs > 0


# --------------------------------------------------------------------------- next_int

@given(state=U64, n=N_VALUES, k=st.integers(1, 8))
@example(state=ZERO_U_STATE, n=3, k=2).via("redraw: u = 0")
@example(state=ZERO_U_STATE, n=M64, k=2).via("redraw: u = 0, n = 2^64-1")
@example(state=ZERO_U_STATE, n=1 << 63, k=2).via("power of two: no redraw")
def test_next_int_matches_reference_and_is_below_n(om, state, n, k):
    """§2 (NextInt), D4: the bounded draw is the high half of the 128-bit product u*n; a
    draw whose low half is below the threshold t = (2^64 - n) mod n is discarded and a
    fresh u taken. The result is always in [0, n), for every n up to 2^64 - 1."""
    got, want = om.SampleRng(state), R.SampleRng(state)
    for _ in range(k):
        g = got.next_int(n)
        assert g == want.next_int(n)
        assert 0 <= g < n
    assert got.state == want.state


@pytest.mark.parametrize("n", [3, 10, 1000, (1 << 32) + 1, M64, 3 << 62])
def test_next_int_redraw_takes_a_fresh_draw(om, n):
    """D4: from a state whose next draw is u = 0 the low half of the product is 0 < t for
    every n that is not a power of two, so one draw is rejected and the answer is the
    high half of the second draw times n."""
    rng = om.SampleRng(ZERO_U_STATE)
    value = rng.next_int(n)
    second = R.SampleRng(ZERO_U_STATE)
    assert second.next_u64() == 0
    u2 = second.next_u64()
    low2 = (u2 * n) & M64
    assert low2 >= n or low2 >= ((1 << 64) - n) % n, "the second draw must be accepted"
    assert value == (u2 * n) >> 64
    assert rng.state == (ZERO_U_STATE + 2 * GOLDEN) & M64


@pytest.mark.parametrize("n", [1, 2, 1 << 32, 1 << 63])
def test_next_int_power_of_two_never_redraws(om, n):
    """D4: for a power of two, t = 0, so the first draw is always kept (even u = 0)."""
    rng = om.SampleRng(ZERO_U_STATE)
    assert rng.next_int(n) == 0
    assert rng.state == 0


@given(state=st.integers(0, 5000))
def test_next_int_rejection_zone_with_half_range(om, state):
    """D4 for n = 2^63 + 1, where about half the draws land in the rejection zone: the
    package consumes exactly as many draws as the rule requires."""
    n = (1 << 63) + 1
    trace_rng = R.SampleRng(state)
    t = ((1 << 64) - n) % n
    draws = 0
    while True:
        m = trace_rng.next_u64() * n
        draws += 1
        if (m & M64) >= n or (m & M64) >= t:
            break
    rng = om.SampleRng(state)
    assert rng.next_int(n) == m >> 64
    assert rng.state == (state + draws * GOLDEN) & M64


# --------------------------------------------------------------------------- bulk draws

@given(state=U64, k=st.integers(0, 50))
def test_bulk_draws_equal_repeated_scalar_draws(om, state, k):
    """§2 (every draw), the package's size= argument: asking for k values at once yields
    exactly the k values of k single calls, with the dtype of the method (uint64,
    float32, float64, uint64, float32), and leaves the same state behind."""
    for method, dtype, args in (("next_u64", np.uint64, ()), ("next_single", np.float32, ()),
                                ("next_double", np.float64, ()), ("next_int", np.uint64, (7,)),
                                ("next_int", np.uint64, (M64,)), ("next_normal", np.float32, ())):
        bulk_rng, scalar_rng = om.SampleRng(state), om.SampleRng(state)
        bulk = getattr(bulk_rng, method)(*args, size=k)
        assert isinstance(bulk, np.ndarray) and bulk.dtype == dtype and bulk.shape == (k,)
        scalar = np.array([getattr(scalar_rng, method)(*args) for _ in range(k)], dtype=dtype)
        assert bulk.view(f"u{bulk.itemsize}").tolist() == scalar.view(f"u{scalar.itemsize}").tolist()
        assert bulk_rng.state == scalar_rng.state


# --------------------------------------------------------------------------- derive

@given(seed=ANY_INT, epoch=ANY_INT, step=ANY_INT, slot=ANY_INT, stream=ANY_INT)
@example(seed=0, epoch=0, step=0, slot=0, stream=0).via("all zero")
@example(seed=-1, epoch=-1, step=-1, slot=-1, stream=-1).via("all minus one")
def test_derive_matches_reference(om, seed, epoch, step, slot, stream):
    """§2 / D3: the derived state mixes the salted seed, then folds in epoch, step, slot and
    stream in that order, each added (mod 2^64) before a Mix; every argument is first
    reduced mod 2^64, negatives as two's complement."""
    want = R.derive(seed, epoch, step, slot, stream)
    assert om.derive(seed, epoch, step, slot, stream) == want
    assert om.derive(seed & M64, epoch & M64, step & M64, slot & M64, stream & M64) == want


@given(seed=U64, a=st.integers(0, 1 << 20), b=st.integers(0, 1 << 20))
def test_derive_argument_order_matters(om, seed, a, b):
    """§2 (Derive): the four values are folded one after another, so swapping two
    distinct ones gives another state (the fold is not a symmetric sum)."""
    if a != b:
        assert om.derive(seed, a, b, 0, 0) != om.derive(seed, b, a, 0, 0)


def test_derive_literal_chain(om):
    """§2 (Derive), D1: the derivation written out with Mix: salt-xor the seed, then one
    Mix per value."""
    seed, values = 42, (3, 17, 5, 101)
    h = om.mix(seed ^ 0xD1B54A32D192ED03)
    for v in values:
        h = om.mix((h + v) & M64)
    assert om.derive(seed, *values) == h


def test_stream_numbers(om):
    """§2 and the contract fix the stream numbers: transform 0, augmentation 1, synthetic
    dataset 2 and 3, epoch order 101, mixing 102, bucketing 103 and 104."""
    assert (om.STREAM_TRANSFORM, om.STREAM_AUGMENTATION, om.STREAM_SYNTH_SHAPE,
            om.STREAM_SYNTH_PIXELS, om.STREAM_EPOCH_ORDER, om.STREAM_MIXING,
            om.STREAM_BUCKET_ORDER, om.STREAM_BUCKET_PLACE) == (0, 1, 2, 3, 101, 102, 103, 104)


# --------------------------------------------------------------------------- bad input

def _received(value) -> str:
    """A regex that matches a message quoting ``value``."""
    if isinstance(value, str):
        return r"'%s'|\"%s\"" % (re.escape(value), re.escape(value))
    return re.escape(repr(value))


@pytest.mark.parametrize("n", [0, -1, -(1 << 70), 1 << 64, (1 << 64) + 5])
def test_next_int_rejects_n_outside_1_to_2_pow_64(om, n):
    """D4: the bound must lie in [1, 2^64); zero (and anything outside) is an error that
    names the value received."""
    with pytest.raises(ValueError, match=_received(n)):
        om.SampleRng(0).next_int(n)


@pytest.mark.parametrize("bad", [1.5, "3", None, 2.0])
def test_next_int_rejects_non_integers(om, bad):
    """§2 (D4), with the exception rule: a bound that is not an integer is a TypeError
    naming what was received."""
    with pytest.raises(TypeError, match=_received(bad)):
        om.SampleRng(0).next_int(bad)


@pytest.mark.parametrize("bad", [1.5, "3", None])
def test_rng_and_mix_reject_non_integers(om, bad):
    """§2 (D1, D2), with the exception rule: states and Mix inputs are integers; anything
    else is a TypeError naming it."""
    with pytest.raises(TypeError, match=_received(bad)):
        om.SampleRng(bad)
    with pytest.raises(TypeError, match=_received(bad)):
        om.mix(bad)


@pytest.mark.parametrize("position", range(5))
@pytest.mark.parametrize("bad", [1.5, "3", None])
def test_derive_rejects_non_integers(om, bad, position):
    """§2 (Derive, D3), with the exception rule: every Derive argument is an integer; a
    non-integer anywhere is a TypeError naming it."""
    args = [1, 2, 3, 4, 5]
    args[position] = bad
    with pytest.raises(TypeError, match=_received(bad)):
        om.derive(*args)


@pytest.mark.parametrize("bad", [-1, -5])
def test_bulk_size_must_not_be_negative(om, bad):
    """§2, the size= argument, with the exception rule: a negative number of draws is a
    ValueError naming the value."""
    with pytest.raises(ValueError, match=_received(bad)):
        om.SampleRng(0).next_u64(size=bad)


def test_reference_rejects_the_same_inputs(ref):
    """Concern: oracle self-check (D4 and the exception rule). The oracle refuses what
    the package must refuse, with the same exception types."""
    with pytest.raises(ValueError, match="0"):
        ref.SampleRng(0).next_int(0)
    with pytest.raises(ValueError):
        ref.SampleRng(0).next_int(1 << 64)
    for bad in (1.5, "3", None):
        with pytest.raises(TypeError, match=_received(bad)):
            ref.SampleRng(0).next_int(bad)
        with pytest.raises(TypeError, match=_received(bad)):
            ref.derive(0, 0, bad, 0, 0)


# --------------------------------------------------------------------------- oracle self-checks

@given(state=U64, k=st.integers(0, 200))
def test_reference_bulk_singles_equal_loop(ref, state, k):
    """Concern: oracle self-check (§2). The oracle's vectorised single-precision fill
    equals its plain loop."""
    a, b = ref.SampleRng(state), ref.SampleRng(state)
    bulk = ref._singles_bulk(a, k)
    loop = np.array([b.next_single() for _ in range(k)], dtype=np.float32)
    assert bulk.view(np.uint32).tolist() == loop.view(np.uint32).tolist()
    assert a.state == b.state


@pytest.mark.parametrize("value", [-1, 1 << 64, (1 << 70) + 5])
def test_state_assignment_is_reduced_mod_2_64(om, value):
    """D3: a state assigned after construction is reduced mod 2^64 exactly like one given
    to the constructor, so both routes draw the same numbers."""
    rng = om.SampleRng(0)
    rng.state = value
    assert rng.state == value % (1 << 64)
    assert rng.next_u64() == om.SampleRng(value).next_u64()


def test_a_bool_is_not_an_integer_argument(om):
    """§2 (D4), with the exception rule: integer arguments take integers; True is refused
    as the oracle refuses it."""
    with pytest.raises(TypeError, match="True"):
        om.SampleRng(0).next_int(True)


def test_bulk_size_too_large_for_memory_is_a_value_error(om):
    """Concern: memory safety (issue 13 class 1, wrapped size products). The bytes of a
    bulk draw are checked before allocating; a size whose array cannot fit is a
    ValueError naming the array (not a wrapped size)."""
    for draw in ("next_u64", "next_single", "next_double", "next_normal"):
        with pytest.raises(ValueError, match="does not fit"):
            getattr(om.SampleRng(0), draw)(size=1 << 62)
    with pytest.raises(ValueError, match="does not fit"):
        om.SampleRng(0).next_int(5, size=1 << 62)


def test_named_streams_are_module_constants(om):
    """§2 streams are visible by name in ``onemodel_cy.core.rng`` (and declared in its stub,
    so type checkers see them), equal to the ``STREAMS`` table and the package's names."""
    from onemodel_cy.core import rng as _rng
    assert _rng.STREAMS == {"STREAM_TRANSFORM": 0, "STREAM_AUGMENTATION": 1, "STREAM_SYNTH_SHAPE": 2,
                            "STREAM_SYNTH_PIXELS": 3, "STREAM_EPOCH_ORDER": 101, "STREAM_MIXING": 102,
                            "STREAM_BUCKET_ORDER": 103, "STREAM_BUCKET_PLACE": 104}
    for name, value in _rng.STREAMS.items():
        assert getattr(_rng, name) == value == getattr(om, name)


def test_sample_rng_pickles_through_its_constructor(om):
    """Concern: pickling (memory safety, issue 13 class 3). SampleRng pickles as
    SampleRng(state); Cython's generated __setstate_cython__ (which wrote raw state with
    bounds checks off) does not exist."""
    import pickle
    rng = om.SampleRng(-1)
    assert rng.__reduce__() == (om.SampleRng, ((1 << 64) - 1,))
    assert pickle.loads(pickle.dumps(rng)).state == rng.state
    assert not hasattr(rng, "__setstate_cython__")
