"""§3 The keyed permutation of [0, n): a four-round Feistel network with cycle walking (D6).

The property tests compare ``keyed_permutation`` and ``permutation`` with
``reference.py``. Also here: the refusals (D6 and the package's exception rule), one
check of the oracle itself, and one concern: memory safety (issue 13 class 1, the
table's byte count is checked).
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import example, given, strategies as st

import reference as R

M64 = R.M64
U64 = st.integers(0, M64)
KEYS = st.one_of(U64, st.sampled_from([0, 1, M64, R.ROUND_CONST]))
# sizes up to 2^20, biased towards powers of two and their neighbours
SMALL_N = st.one_of(st.integers(2, 300),
                    st.builds(lambda k, d: max(2, (1 << k) + d), st.integers(1, 20), st.integers(-1, 1)),
                    st.integers(2, 1 << 20))
LARGE_N = st.one_of(st.integers(2, (1 << 63) - 1),
                    st.builds(lambda k, d: (1 << k) + d, st.integers(2, 62), st.integers(-1, 1)))


@given(n=SMALL_N, key=KEYS)
@example(n=2, key=0).via("smallest table")
@example(n=(1 << 20) + 1, key=M64).via("just past a power of two: long cycle walks")
def test_permutation_is_a_bijection(om, n, key):
    """§3 (keyed permutation): four Feistel rounds permute [0, 2^(2*half)), and walking
    each value until it lands below n keeps that a permutation of [0, n): the table holds
    every value of [0, n) exactly once."""
    table = om.permutation(n, key)
    assert isinstance(table, np.ndarray) and table.dtype == np.int64 and table.shape == (n,)
    assert np.array_equal(np.sort(table), np.arange(n, dtype=np.int64))


@pytest.mark.parametrize("key", [0, 1, M64])
def test_permutation_of_zero_one_two(om, key):
    """§3 (keyed permutation, n <= 1): degenerate sizes: the empty range has an empty
    table, n = 1 maps its one position to 0, and n = 2 is one of the two orders of {0,
    1}."""
    assert om.permutation(0, key).shape == (0,)
    assert om.permutation(1, key).tolist() == [0]
    assert om.keyed_permutation(0, 1, key) == 0
    assert sorted(om.permutation(2, key).tolist()) == [0, 1]


@given(n=LARGE_N, key=KEYS, data=st.data())
def test_single_position_matches_reference(om, n, key, data):
    """D6: bits = bit length of n-1, half = ceil(bits/2), four rounds with round
    constant round*0x632BE59BD9B4E019 (mod 2^64) xor the key, repeated on the previous x
    while x >= n.  Any position of any n agrees with the oracle."""
    ps = data.draw(st.lists(st.one_of(st.integers(0, n - 1), st.sampled_from([0, n - 1])),
                            min_size=1, max_size=8))
    for p in ps:
        got = om.keyed_permutation(p, n, key)
        assert got == R.keyed_permutation(p, n, key)
        assert 0 <= got < n


@given(n=st.integers(1 << 63, M64), key=KEYS, data=st.data())
@example(n=M64, key=0, data=None).via("largest n")
def test_single_position_matches_reference_for_n_at_least_2_pow_63(om, n, key, data):
    """§3 (D6) at the top of the range: n is bounded only by 2^64, so the same rule holds
    with bits = 64."""
    ps = [0, n - 1] if data is None else data.draw(
        st.lists(st.integers(0, n - 1), min_size=1, max_size=4))
    for p in ps:
        assert om.keyed_permutation(p, n, key) == R.keyed_permutation(p, n, key)


@given(n=st.integers(0, 3000), key=KEYS)
def test_table_matches_reference(om, n, key):
    """§3 (D6): the whole table is, position by position, the keyed permutation (oracle
    table)."""
    assert om.permutation(n, key).tolist() == R.permutation(n, key)


@given(n=st.integers(2, 1 << 16), key=KEYS, data=st.data())
def test_table_agrees_with_single_positions(om, n, key, data):
    """§3 (a per-position function, no table needed): entry p of the table equals the
    single-position function at p."""
    table = om.permutation(n, key)
    assert np.array_equal(table, R.permutation_np(n, key))
    for p in data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=10)):
        assert table[p] == om.keyed_permutation(p, n, key)


@given(n=st.integers(64, 1 << 12), k1=U64, k2=U64)
def test_key_changes_the_order(om, n, k1, k2):
    """§3 (the key enters every round): two different keys give different orders (with n
    >= 64 a collision of whole tables would be a defect, not bad luck)."""
    if k1 != k2:
        assert not np.array_equal(om.permutation(n, k1), om.permutation(n, k2))


# --------------------------------------------------------------------------- bad input

def _received(value) -> str:
    if isinstance(value, str):
        return r"'%s'|\"%s\"" % (re.escape(value), re.escape(value))
    return re.escape(repr(value))


@pytest.mark.parametrize("n,p", [(10, 10), (10, -1), (2, 2), (2, 5), (1 << 40, 1 << 40),
                                 (M64, M64), (10, -(1 << 64))])
def test_position_outside_range_is_an_error(om, n, p):
    """D6: for n >= 2 a position outside [0, n) is refused, naming the position."""
    with pytest.raises(ValueError, match=_received(p)):
        om.keyed_permutation(p, n, 0)


@pytest.mark.parametrize("n", [-1, -100])
def test_negative_size_is_an_error(om, n):
    """§3 (keyed permutation), with the exception rule: a negative size is a ValueError
    naming it."""
    with pytest.raises(ValueError, match=_received(n)):
        om.permutation(n, 0)
    with pytest.raises(ValueError, match=_received(n)):
        om.keyed_permutation(0, n, 0)


@pytest.mark.parametrize("bad", [1.5, "3", None])
def test_non_integers_are_type_errors(om, bad):
    """§3 (keyed permutation), with the exception rule: position, size and key are
    integers; anything else is a TypeError naming it."""
    with pytest.raises(TypeError, match=_received(bad)):
        om.keyed_permutation(bad, 10, 0)
    with pytest.raises(TypeError, match=_received(bad)):
        om.keyed_permutation(0, bad, 0)
    with pytest.raises(TypeError, match=_received(bad)):
        om.keyed_permutation(0, 10, bad)
    with pytest.raises(TypeError, match=_received(bad)):
        om.permutation(bad, 0)
    with pytest.raises(TypeError, match=_received(bad)):
        om.permutation(10, bad)


# --------------------------------------------------------------------------- oracle self-checks

@given(n=st.integers(0, 2000), key=KEYS)
def test_reference_vectorised_table_equals_loop(ref, n, key):
    """Concern: oracle self-check (§3). The oracle's numpy table equals its plain
    per-position loop."""
    assert ref.permutation_np(n, key).tolist() == ref.permutation(n, key)


def test_table_too_large_for_memory_is_a_value_error(om):
    """Concern: memory safety (issue 13 class 1, wrapped size products). The table's byte
    count n * 8 is checked before allocating; a table that cannot fit (n = 2**62: 2**65
    bytes) is a ValueError naming it, not a wrapped allocation."""
    with pytest.raises(ValueError, match="permutation table"):
        om.permutation(1 << 62, 0)
