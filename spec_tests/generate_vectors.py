"""Write the known-answer vectors in onemodel_cy/conformance/vectors/ from spec_tests/reference.py.

Run from the repository root:

    python spec_tests/generate_vectors.py            # (re)write the JSON files
    python spec_tests/generate_vectors.py --check    # exit 1 if a file would change
    python spec_tests/generate_vectors.py --freeze   # record new cases in vector_baseline.json

Only ``reference.py`` (the pure-Python transcription of the spec) computes anything here;
the compiled package is never imported: the encoding (``onemodel_cy/conformance/codec.py``,
which imports nothing from the package) is loaded by its path. The output is
deterministic: keys are sorted, one case per line, UTF-8, ``\\n`` line ends. The format is
described in the README.md beside the vectors.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import types

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import reference as R  # noqa: E402
import vector_additions  # noqa: E402
from generate_textlines_vectors import build_textlines  # noqa: E402,F401  (writes textlines.json)
import generate_augment_vectors  # noqa: E402  (writes augment.json)


def _load_codec():
    path = os.path.join(ROOT, "onemodel_cy", "conformance", "codec.py")
    spec = importlib.util.spec_from_file_location("_vector_codec", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


codec = _load_codec()
VECTORS = str(codec.VECTORS_DIR)
F32, F64, i32_list, f32_array = codec.f32_hex, codec.f64_hex, codec.ints, codec.f32_array
M64 = R.M64

PUBLISHED_1234567 = [6457827717110365317, 3203168211198807973, 9817491932198370423,
                     4593380528125082431, 16408922859458223821]


# ---------------------------------------------------------------------------
# encoding helpers
# ---------------------------------------------------------------------------

def S(v) -> str:
    """An integer as a decimal string."""
    return str(int(v))


def case(name, pins, inp, out) -> dict:
    return {"name": name, "pins": list(pins), "input": inp, "output": out}


# ---------------------------------------------------------------------------
# §2 rng.json
# ---------------------------------------------------------------------------

def _next_int_trace(state, n):
    """Replays D4 step by step: the (u, low) of every draw, t, and the result."""
    rng = R.SampleRng(state)
    t = ((1 << 64) - n) % n
    u = rng.next_u64()
    m = u * n
    trace = [(u, m & M64)]
    if (m & M64) < n:
        while (m & M64) < t:
            u = rng.next_u64()
            m = u * n
            trace.append((u, m & M64))
    return trace, t, m >> 64, rng.state


def _find_state(n, predicate, start=0):
    s = start
    while True:
        trace, t, _, _ = _next_int_trace(s, n)
        if predicate(trace, t):
            return s
        s += 1


def build_rng() -> dict:
    cases = []
    r = R.SampleRng(1234567)
    got = [r.next_u64() for _ in range(5)]
    assert got == PUBLISHED_1234567, got
    cases.append(case("splitmix64_published_state_1234567", ["D2", "§2"],
                      {"op": "draws", "state": "1234567", "method": "next_u64", "count": 5},
                      {"values": [S(v) for v in got], "state_after": S(r.state)}))

    xs = [0, 1, 2, 3, 1234567, R.GOLDEN, (1 << 64) - R.GOLDEN, 1 << 63, (1 << 63) - 1,
          M64, R.DERIVE_SALT, R.ROUND_CONST, 0xDEADBEEFCAFEBABE]
    # D1: mix(x) is the first output of SampleRng(x)
    for x in xs:
        assert R.mix(x) == R.SampleRng(x).next_u64()
    cases.append(case("mix", ["D1", "§2"], {"op": "mix", "x": [S(x) for x in xs]},
                      {"values": [S(R.mix(x)) for x in xs]}))

    derive_args = [
        [0, 0, 0, 0, 0], [1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 0, 1, 0],
        [0, 0, 0, 0, 1], [42, 3, 17, 5, 101], [42, 3, 17, 5, 102], [7, 0, 0, 0, 103],
        [7, 4, 1, 0, 104], [1234567, 10, 20, 30, 2], [M64, M64, M64, M64, M64],
        [R.DERIVE_SALT, 0, 0, 0, 0], [1 << 63, 1 << 62, 12345678901234, 99, 3],
    ]
    cases.append(case("derive", ["§2"], {"op": "derive", "args": [[S(a) for a in t] for t in derive_args]},
                      {"values": [S(R.derive(*t)) for t in derive_args]}))
    neg = [[-1, -1, -1, -1, -1], [-1, 0, 0, 0, 0], [-5, 2, -3, 0, 102], [0, -(1 << 63), 0, -2, 1],
           [-1234567, 0, 7, 0, 0]]
    for t in neg:
        assert R.derive(*t) == R.derive(*[a & M64 for a in t])
    cases.append(case("derive_negative_args_two_complement", ["D3", "§2"],
                      {"op": "derive", "args": [[S(a) for a in t] for t in neg]},
                      {"values": [S(R.derive(*t)) for t in neg],
                       "same_as_args": [[S(a & M64) for a in t] for t in neg]}))
    big = [[(1 << 64) + 5, 0, 0, 0, 0], [3, (1 << 64) + 1, 2, (1 << 65) + 3, 101]]
    cases.append(case("derive_args_reduced_mod_2_64_above_range", ["D3"],
                      {"op": "derive", "args": [[S(a) for a in t] for t in big]},
                      {"values": [S(R.derive(*t)) for t in big],
                       "same_as_args": [[S(a & M64) for a in t] for t in big]}))

    states = [0, 1, 1234567, M64, R.GOLDEN, 1 << 63, 0xDEADBEEFCAFEBABE, R.derive(7, 0, 0, 0, 0),
              (1 << 64) - R.GOLDEN]
    ns = [1, 2, 3, 10, (1 << 32) + 1, 1 << 63, (1 << 63) + 1, M64]
    for st in states:
        for method, count, pins in (("next_u64", 8, ["D2", "§2"]), ("next_single", 8, ["§2"]),
                                    ("next_double", 8, ["§2"]), ("next_normal", 4, ["D5", "§2"])):
            rng = R.SampleRng(st)
            vals = [codec.encode_draw(method, getattr(rng, method)()) for _ in range(count)]
            cases.append(case(f"{method}_state_{st}", pins,
                              {"op": "draws", "state": S(st), "method": method, "count": count},
                              {"values": vals, "state_after": S(rng.state)}))
        for n in ns:
            rng = R.SampleRng(st)
            vals = [S(rng.next_int(n)) for _ in range(4)]
            cases.append(case(f"next_int_{n}_state_{st}", ["D4", "§2"],
                              {"op": "draws", "state": S(st), "method": "next_int", "n": S(n),
                               "count": 4},
                              {"values": vals, "state_after": S(rng.state)}))

    # D4 redraw path: states whose first draw lands in the rejection zone (low < t).
    redraw = []
    zero_u = (1 << 64) - R.GOLDEN          # the first draw from this state is u = 0
    for n in (3, 10, (1 << 32) + 1, M64):
        redraw.append((f"next_int_redraw_u_zero_n_{n}", zero_u, n))
    n = (1 << 63) + 1
    redraw.append(("next_int_redraw_once_n_2^63+1",
                   _find_state(n, lambda tr, t: len(tr) == 2), n))
    redraw.append(("next_int_redraw_several_n_2^63+1",
                   _find_state(n, lambda tr, t: len(tr) >= 4), n))
    n = 3 << 62
    redraw.append(("next_int_redraw_once_n_3*2^62", _find_state(n, lambda tr, t: len(tr) == 2), n))
    redraw.append(("next_int_redraw_twice_n_3*2^62", _find_state(n, lambda tr, t: len(tr) == 3), n))
    redraw.append(("next_int_low_below_n_but_not_below_t_n_3*2^62",
                   _find_state(n, lambda tr, t: len(tr) == 1 and t <= tr[0][1] < n), n))
    for name, st, n in redraw:
        trace, t, value, after = _next_int_trace(st, n)
        assert R.SampleRng(st).next_int(n) == value
        if "not_below_t" not in name:
            assert len(trace) >= 2 and trace[0][1] < t, name
        cases.append(case(name, ["D4", "§2"],
                          {"op": "draws", "state": S(st), "method": "next_int", "n": S(n), "count": 1},
                          {"values": [S(value)], "state_after": S(after), "t": S(t),
                           "draws_used": len(trace),
                           "trace": [{"u": S(u), "low": S(lo)} for u, lo in trace]}))

    # Interleaved calls: each method consumes draws exactly as specified.
    calls = [["next_u64"], ["next_single"], ["next_int", 10], ["next_double"], ["next_normal"],
             ["next_int", (1 << 63) + 1], ["next_u64"], ["next_single"]]
    for st in (99, 0xDEADBEEFCAFEBABE):
        rng = R.SampleRng(st)
        vals = []
        for c in calls:
            v = getattr(rng, c[0])(*c[1:])
            vals.append(codec.encode_draw(c[0], v))
        cases.append(case(f"interleaved_calls_state_{st}", ["D2", "D4", "D5", "§2"],
                          {"op": "sequence", "state": S(st),
                           "calls": [[c[0]] + [S(a) for a in c[1:]] for c in calls]},
                          {"values": vals, "state_after": S(rng.state)}))

    for n in (0, -1, 1 << 64):
        try:
            R.SampleRng(0).next_int(n)
            raise AssertionError("expected ValueError")
        except ValueError:
            pass
        cases.append(case(f"next_int_rejects_n_{n}", ["D4"],
                          {"op": "draws", "state": "0", "method": "next_int", "n": S(n), "count": 1},
                          {"error": "ValueError"}))
    return {"section": "§2", "cases": cases}


# ---------------------------------------------------------------------------
# §3 permutation.json
# ---------------------------------------------------------------------------

def _perm_passes(p, n, key):
    """How many 4-round passes the cycle walk takes for position p (D6), for humans."""
    half, mask = R._feistel_params(n)
    x, passes = p, 0
    while True:
        passes += 1
        left, right = x >> half, x & mask
        for rnd in range(4):
            f = R.mix(right ^ key ^ ((rnd * R.ROUND_CONST) & M64)) & mask
            left, right = right, left ^ f
        x = (left << half) | right
        if x < n:
            return passes


def build_permutation() -> dict:
    cases = []
    keys_small = [0, 1, M64, 0x0123456789ABCDEF, R.derive(2024, 0, 0, 0, 101)]
    small_ns = [0, 1, 2, 3, 10, 100, 15, 16, 17, 255, 256, 257]
    for n in small_ns:
        for key in keys_small:
            table = R.permutation(n, key)
            assert sorted(table) == list(range(n))
            assert list(R.permutation_np(n, key)) == table
            cases.append(case(f"table_n_{n}_key_{key}", ["D6", "§3"],
                              {"op": "table", "n": S(n), "key": S(key)},
                              {"table": [S(v) for v in table]}))
    for n in (4095, 4096, 4097):
        for key in (0, 0x0123456789ABCDEF):
            table = R.permutation(n, key)
            assert sorted(table) == list(range(n))
            cases.append(case(f"table_n_{n}_key_{key}", ["D6", "§3"],
                              {"op": "table", "n": S(n), "key": S(key)},
                              {"table": [S(v) for v in table]}))
    big_ns = [(1 << 20) + 1, (1 << 32) - 1, 1 << 32, (1 << 32) + 1, (1 << 40) + 3, (1 << 53) + 1,
              (1 << 62) + 1, (1 << 63) - 1]
    for n in big_ns:
        for key in (0, 0x0123456789ABCDEF):
            ps = [0, 1, 2, n // 3, n // 2, n - 2, n - 1]
            vals = [R.keyed_permutation(p, n, key) for p in ps]
            assert len(set(vals)) == len(vals)
            cases.append(case(f"points_n_{n}_key_{key}", ["D6", "§3"],
                              {"op": "points", "n": S(n), "key": S(key), "p": [S(p) for p in ps]},
                              {"values": [S(v) for v in vals],
                               "passes": [_perm_passes(p, n, key) for p in ps]}))
    # n at and above 2^63 (the spec puts no bound on n below 2^64)
    for n in (1 << 63, (1 << 63) + 1, M64):
        key = 0x0123456789ABCDEF
        ps = [0, 1, n // 2, n - 1]
        vals = [R.keyed_permutation(p, n, key) for p in ps]
        cases.append(case(f"points_n_{n}_key_{key}", ["D6", "§3"],
                          {"op": "points", "n": S(n), "key": S(key), "p": [S(p) for p in ps]},
                          {"values": [S(v) for v in vals],
                           "passes": [_perm_passes(p, n, key) for p in ps]}))
    # cycle walking: positions whose walk needs several passes
    n, key = 17, 5
    walk = sorted(range(n), key=lambda p: (-_perm_passes(p, n, key), p))[:4]
    cases.append(case("cycle_walk_several_passes_n_17", ["D6", "§3"],
                      {"op": "points", "n": S(n), "key": S(key), "p": [S(p) for p in walk]},
                      {"values": [S(R.keyed_permutation(p, n, key)) for p in walk],
                       "passes": [_perm_passes(p, n, key) for p in walk]}))
    assert _perm_passes(walk[0], n, key) >= 3
    # n <= 1: the answer is 0
    cases.append(case("n_le_1_gives_0", ["§3"],
                      {"op": "points", "n": "1", "key": S(M64), "p": ["0"]}, {"values": ["0"]}))
    for n, p in ((10, 10), (10, -1), (2, 2), (1 << 40, 1 << 40)):
        cases.append(case(f"rejects_p_{p}_n_{n}", ["D6"],
                          {"op": "points", "n": S(n), "key": "0", "p": [S(p)]},
                          {"error": "ValueError"}))
    return {"section": "§3", "cases": cases}


# ---------------------------------------------------------------------------
# §3 samplers.json
# ---------------------------------------------------------------------------

def _sampler_case(name, pins, spec, epochs):
    s = codec.build_sampler(R, spec)
    out = {"steps_per_epoch": S(s.steps_per_epoch), "batch_size": S(s.batch_size),
           "epochs": [{"epoch": S(e),
                       "batches": [[S(i) for i in s.indices(e, k)] for k in range(s.steps_per_epoch)]}
                      for e in epochs]}
    if spec["kind"] == "mixing":
        out["cumulative"] = [F64(c) for c, _, _ in s._table]
    return case(name, pins, {"op": "sampler", "sampler": spec, "epochs": [S(e) for e in epochs]}, out)


def _seq(n, b, drop):
    return {"kind": "sequential", "n": S(n), "batch_size": S(b), "drop_last": drop}


def _shuf(n, b, seed, drop):
    return {"kind": "shuffled", "n": S(n), "batch_size": S(b), "seed": S(seed), "drop_last": drop}


def _mixing(sources, b, steps, seed):
    return {"kind": "mixing", "batch_size": S(b), "steps_per_epoch": S(steps), "seed": S(seed),
            "sources": [{"start": S(st), "size": S(sz), "share": F64(sh), "share_decimal": repr(float(sh))}
                        for st, sz, sh in sources]}


def _bucketed(lengths, b, pool, seed):
    return {"kind": "bucketed", "lengths": [S(v) for v in lengths], "batch_size": S(b),
            "pool_batches": S(pool), "seed": S(seed)}


def build_samplers() -> dict:
    cases = []
    E = [0, 1, 2, 9]
    for n, b, drop in ((10, 3, True), (10, 3, False), (12, 4, True), (12, 4, False), (7, 7, False),
                       (5, 8, False), (1, 1, True)):
        pins = ["§3"] if drop else ["D8", "§3"]
        cases.append(_sampler_case(f"sequential_n{n}_b{b}_drop{int(drop)}", pins, _seq(n, b, drop), [0, 3]))
    for n, b, seed, drop in ((10, 3, 0, True), (10, 3, 0, False), (100, 7, 12345, True),
                             (100, 7, 12345, False), (17, 4, 99, False), (1, 1, 5, True),
                             (5, 8, 3, False), (1000, 32, 2024, True), (4097, 64, 1, False)):
        pins = ["D7", "§3"] + ([] if drop else ["D8"])
        epochs = E if n <= 100 else [0, 1]
        cases.append(_sampler_case(f"shuffled_n{n}_b{b}_seed{seed}_drop{int(drop)}", pins,
                                   _shuf(n, b, seed, drop), epochs))
    a = _sampler_case("shuffled_seed_minus_1", ["D3", "D7"], _shuf(17, 4, -1, True), [0, 1])
    b_ = _sampler_case("shuffled_seed_2^64-1", ["D3", "D7"], _shuf(17, 4, M64, True), [0, 1])
    assert a["output"] == b_["output"]
    cases += [a, b_]

    mix_cfgs = [
        ("mixing_three_sources", [(0, 10, 0.5), (10, 20, 0.3), (100, 5, 0.2)], 8, 5, 1),
        ("mixing_zero_share_source_skipped", [(0, 10, 0.5), (50, 7, 0.0), (100, 5, 0.5)], 8, 4, 2),
        ("mixing_empty_source_skipped", [(0, 0, 0.9), (10, 5, 0.1), (30, 3, 0.0)], 6, 3, 3),
        ("mixing_single_source", [(5, 3, 1.0)], 4, 2, 4),
        ("mixing_unnormalised_shares", [(0, 4, 3.0), (4, 4, 1.0), (8, 1, 2.5)], 8, 3, 5),
        ("mixing_tenths_cumulative_rounding", [(i * 10, 10, 0.1) for i in range(10)], 16, 3, 6),
        ("mixing_large_start_and_size", [(1 << 40, 1 << 33, 0.25), (0, (1 << 62) + 1, 0.75)], 8, 2, 7),
        ("mixing_seed_minus_1", [(0, 10, 0.5), (10, 10, 0.5)], 4, 2, -1),
    ]
    for name, sources, b, steps, seed in mix_cfgs:
        pins = ["D9", "D10", "§3"] + (["D3"] if seed < 0 else [])
        cases.append(_sampler_case(name, pins, _mixing(sources, b, steps, seed), [0, 1, 4]))

    lengths23 = [(i * 37) % 11 for i in range(23)]           # many ties: the index breaks them
    lengths50 = [int(R.synthetic_sample(i, 1, 4, 60, 1, 0)[0].shape[2]) for i in range(50)]
    bucket_cfgs = [
        ("bucketed_last_pool_shorter", lengths23, 3, 2, 5),      # S=7, S*B=21, pools 6,6,6,3
        ("bucketed_exact_pools", lengths50, 4, 3, 8),            # S=12, pools of 12
        ("bucketed_one_pool", lengths50, 4, 100, 9),             # the whole epoch sorted
        ("bucketed_pool_of_one_batch", lengths23, 5, 1, 10),     # S=4, 3 dropped
        ("bucketed_single_step", [3, 1, 2, 0, (1 << 31) - 1, 7, 7, 7, 0, 5], 10, 2, 11),
        ("bucketed_extreme_lengths", [(1 << 31) - 1, 0, (1 << 31) - 1, 0, 1, (1 << 30), 2, 2], 2, 2, 12),
        ("bucketed_seed_minus_1", lengths23, 3, 2, -1),
    ]
    for name, lengths, b, pool, seed in bucket_cfgs:
        pins = ["D11", "§3"] + (["D3"] if seed < 0 else [])
        cases.append(_sampler_case(name, pins, _bucketed(lengths, b, pool, seed), [0, 1, 2, 7]))

    # bad input: the constructor or indices() must refuse
    errors = [
        ("error_mixing_negative_share", ["D10"], _mixing([(0, 5, 0.5), (5, 5, -0.1)], 4, 2, 0), None),
        ("error_mixing_no_eligible_source", ["D10"], _mixing([(0, 0, 1.0), (5, 5, 0.0)], 4, 2, 0), None),
        ("error_bucketed_length_2^31", ["D11"], _bucketed([1, 2, 1 << 31, 3], 2, 1, 0), None),
        ("error_bucketed_negative_length", ["D11"], _bucketed([1, -1, 2, 3], 2, 1, 0), None),
        ("error_sequential_batch_size_0", ["§3"], _seq(10, 0, True), None),
        ("error_shuffled_n_0", ["§3"], _shuf(0, 2, 0, True), None),
        ("error_step_out_of_range", ["§3"], _shuf(10, 3, 0, True), ["0", "3"]),
        ("error_negative_epoch", ["§3"], _seq(10, 3, True), ["-1", "0"]),
        ("error_mixing_step_out_of_range", ["D9"], _mixing([(0, 5, 1.0)], 4, 2, 0), ["0", "2"]),
    ]
    for name, pins, spec, call in errors:
        try:
            s = codec.build_sampler(R, spec)
            if call is not None:
                s.indices(int(call[0]), int(call[1]))
            raise AssertionError(f"{name}: expected ValueError")
        except ValueError:
            pass
        inp = {"op": "sampler_error", "sampler": spec}
        if call is not None:
            inp["call"] = {"epoch": call[0], "step": call[1]}
        cases.append(case(name, pins, inp, {"error": "ValueError"}))
    return {"section": "§3", "cases": cases}


# ---------------------------------------------------------------------------
# §4 collate.json, §1 stream.json
# ---------------------------------------------------------------------------

def _aug_from_spec(spec):
    return codec.build_augmentation(spec, {"gain_offset": R.gain_offset, "gaussian_noise": R.gaussian_noise})


def _gain_offset_spec(gain=0.2, offset=0.1):
    return {"kind": "gain_offset", "gain": F64(gain), "offset": F64(offset),
            "gain_decimal": repr(gain), "offset_decimal": repr(offset)}


def _noise_spec(sigma=0.05):
    return {"kind": "gaussian_noise", "sigma": F64(sigma), "sigma_decimal": repr(sigma)}


def _synth_spec(count, height, min_width, max_width, channels, seed):
    return {"kind": "SyntheticLineImages", "count": S(count), "height": S(height),
            "min_width": S(min_width), "max_width": S(max_width), "channels": S(channels),
            "seed": S(seed)}


def _synth_from_spec(spec):
    args = [int(spec[k]) for k in ("height", "min_width", "max_width", "channels", "seed")]
    count = int(spec["count"])

    def get(i):
        if not 0 <= i < count:
            raise IndexError(i)
        return R.synthetic_sample(i, *args)
    return get


def _explicit_samples(samples):
    return [{"image": f32_array(img, True), "target": i32_list(t), "label": int(label)}
            for img, t, label in samples]


def _pixels(shape, rng):
    n = int(np.prod(shape))
    vals = [np.float32(rng.next_single() * np.float32(4.0) - np.float32(2.0)) for _ in range(n)]
    return np.array(vals, dtype=np.float32).reshape(shape)


def build_collate() -> dict:
    cases = []
    rng = R.SampleRng(31337)
    tiny = [(_pixels((1, 2, w), rng), np.array(t, np.int32), label)
            for w, t, label in ((1, [4], 2), (3, [1, 2, 3], 0), (2, [], 9))]
    tiny3 = [(_pixels((3, 2, w), rng), np.array(t, np.int32), label)
             for w, t, label in ((2, [7, 7], 1), (4, [5], 3))]
    explicit_cfgs = [
        ("tiny_plain", ["§4", "D13"], tiny, [5, 0, 9], dict(seed=0, epoch=0, step=0)),
        ("tiny_width_multiple_4_pad_minus_1.5", ["§4", "D13"], tiny, [5, 0, 9],
         dict(seed=0, epoch=0, step=0, width_multiple=4, pad_value=-1.5)),
        ("tiny_width_multiple_3_exact", ["§4", "D13"], tiny, [1, 2, 3],
         dict(seed=0, epoch=0, step=0, width_multiple=3, pad_value=7.0)),
        ("tiny_gain_offset", ["§4", "D14", "D17"], tiny, [5, 0, 9],
         dict(seed=11, epoch=2, step=3, width_multiple=2, augmentation=_gain_offset_spec())),
        ("tiny_gain_offset_slot_offset_2", ["§4", "D14", "D17"], tiny, [5, 0, 9],
         dict(seed=11, epoch=2, step=3, width_multiple=2, augmentation=_gain_offset_spec(),
              slot_offset=2)),
        ("tiny_gain_offset_custom_params", ["§4", "D17"], tiny, [5, 0, 9],
         dict(seed=-1, epoch=0, step=1, augmentation=_gain_offset_spec(0.75, -0.3))),
        ("tiny_gaussian_noise", ["§4", "D17"], tiny, [5, 0, 9],
         dict(seed=3, epoch=1, step=0, augmentation=_noise_spec())),
        ("tiny_three_channels_gaussian_noise", ["§4", "D17"], tiny3, [8, 4],
         dict(seed=3, epoch=0, step=5, width_multiple=4, pad_value=0.5,
              augmentation=_noise_spec(0.3))),
    ]
    for name, pins, samples, indices, kw in explicit_cfgs:
        aug_spec = kw.pop("augmentation", None)
        b = R.collate(samples, indices, augmentation=_aug_from_spec(aug_spec), **kw)
        inp = {"op": "collate", "samples": _explicit_samples(samples), "indices": [S(i) for i in indices],
               "seed": S(kw["seed"]), "epoch": S(kw["epoch"]), "step": S(kw["step"]),
               "width_multiple": S(kw.get("width_multiple", 1)),
               "pad_value": F64(kw.get("pad_value", 0.0)), "augmentation": aug_spec,
               "slot_offset": S(kw.get("slot_offset", 0))}
        cases.append(case(name, pins, inp, codec.encode_batch(b, True)))

    ds = _synth_spec(64, 8, 5, 40, 1, 3)
    get = _synth_from_spec(ds)
    ds3 = _synth_spec(16, 5, 2, 11, 3, 4)
    get3 = _synth_from_spec(ds3)
    synth_cfgs = [
        ("synthetic_plain", ["§4"], ds, get, [3, 1, 4, 1, 5, 9, 2, 6], dict(seed=0, epoch=0, step=0)),
        ("synthetic_width_multiple_4_gain_offset", ["§4", "D13", "D17"], ds, get,
         [10, 20, 30, 40, 50, 60], dict(seed=5, epoch=1, step=2, width_multiple=4,
                                        augmentation=_gain_offset_spec())),
        ("synthetic_width_multiple_7_pad_0.25", ["§4", "D13"], ds, get, [0, 63, 7],
         dict(seed=5, epoch=1, step=2, width_multiple=7, pad_value=0.25)),
        ("synthetic_gaussian_noise", ["§4", "D17"], ds, get, [11, 12, 13],
         dict(seed=8, epoch=3, step=1, width_multiple=4, augmentation=_noise_spec())),
        ("synthetic_three_channels_gain_offset", ["§4", "D17"], ds3, get3, [0, 1, 2, 3, 15],
         dict(seed=8, epoch=0, step=0, width_multiple=4, augmentation=_gain_offset_spec())),
    ]
    for name, pins, dspec, getter, indices, kw in synth_cfgs:
        aug_spec = kw.pop("augmentation", None)
        samples = [getter(i) for i in indices]
        b = R.collate(samples, indices, augmentation=_aug_from_spec(aug_spec), **kw)
        inp = {"op": "collate", "dataset": dspec, "indices": [S(i) for i in indices],
               "seed": S(kw["seed"]), "epoch": S(kw["epoch"]), "step": S(kw["step"]),
               "width_multiple": S(kw.get("width_multiple", 1)),
               "pad_value": F64(kw.get("pad_value", 0.0)), "augmentation": aug_spec,
               "slot_offset": "0"}
        cases.append(case(name, pins, inp, codec.encode_batch(b, False)))
    return {"section": "§4", "cases": cases}


def _transform_from_spec(spec):
    if spec is None:
        return None
    if spec["kind"] == "augment":         # a built-in augmentation (docs/contract.md), the oracle's
        op = codec.build_transform(R.augment, spec["op"])
        return lambda sample, rng: (op.apply(np.asarray(sample[0], dtype=np.float32), rng), sample[1], sample[2])
    aug = codec.build_gain_offset_copy(spec, R.gain_offset)

    def transform(sample, rng):
        img = np.array(sample[0], dtype=np.float32, copy=True)
        aug(img, rng)
        return (img, sample[1], sample[2])
    return transform


def build_stream() -> dict:
    cases = []
    ds = _synth_spec(40, 4, 3, 9, 1, 7)
    get = _synth_from_spec(ds)
    widths = [int(get(i)[0].shape[2]) for i in range(40)]
    samplers = [
        ("sequential", _seq(40, 6, False)),
        ("shuffled", _shuf(40, 6, 11, True)),
        ("mixing", _mixing([(0, 25, 0.75), (25, 15, 0.25)], 6, 5, 13)),
        ("bucketed", _bucketed(widths, 6, 2, 17)),
    ]
    loader = {"seed": "5", "width_multiple": "4", "pad_value": F64(0.0),
              "augmentation": _gain_offset_spec(), "transform": None}
    configs = [(name, spec, loader, ["§1", "§4", "D12", "D14", "D17"]) for name, spec in samplers]
    loader2 = {"seed": "21", "width_multiple": "1", "pad_value": F64(-1.0),
               "augmentation": _noise_spec(0.1),
               "transform": {"kind": "gain_offset_copy", "gain": F64(0.3), "offset": F64(0.05),
                             "gain_decimal": "0.3", "offset_decimal": "0.05",
                             "note": "returns a copy of the sample whose image got GainOffset(gain, offset) "
                                     "with the stream-0 rng"}}
    configs.append(("shuffled_transform_and_noise", _shuf(40, 6, 11, False), loader2,
                    ["§1", "§4", "D12", "D14", "D17"]))
    for name, sspec, lspec, pins in configs:
        sampler = codec.build_sampler(R, sspec)
        S_ = sampler.steps_per_epoch
        steps = list(range(0, 2 * S_ + 2))
        for ws in (1, 2):
            batches = []
            for g in steps:
                for rank in range(ws):
                    b = R.batch(get, sampler, int(lspec["seed"]), g,
                                width_multiple=int(lspec["width_multiple"]),
                                pad_value=codec.from_f64_hex(lspec["pad_value"]),
                                augmentation=_aug_from_spec(lspec["augmentation"]),
                                transform=_transform_from_spec(lspec["transform"]),
                                rank=rank, world_size=ws)
                    o = codec.encode_batch(b, False)
                    o.update({"g": S(g), "rank": S(rank), "epoch": S(b["epoch"]), "step": S(b["step"])})
                    batches.append(o)
            cases.append(case(f"{name}_world_size_{ws}", pins,
                              {"op": "stream", "dataset": ds, "sampler": sspec, "loader": lspec,
                               "world_size": S(ws), "steps": [S(g) for g in steps]},
                              {"steps_per_epoch": S(S_), "batches": batches}))
    return {"section": "§1", "cases": cases}


# ---------------------------------------------------------------------------
# §6 image.json
# ---------------------------------------------------------------------------

def _float64_route(mean, std):
    """NOT the contract: constants computed in float64 and rounded once (for contrast)."""
    return np.float32(1.0 / (255.0 * float(std))), np.float32(float(mean) / float(std))


def build_image() -> dict:
    cases = []
    rng = R.SampleRng(606)

    def gray_case(name, pins, src, mean, std, full=True, extra=None):
        out = R.gray8_to_planar(src, mean, std)
        scale, bias = R.planar_constants(mean, std)
        o = {"planar": f32_array(out, full), "scale": F32(scale), "bias": F32(bias)}
        if extra:
            o.update(extra)
        cases.append(case(name, pins,
                          {"op": "gray8", "height": S(src.shape[0]), "width": S(src.shape[1]),
                           "stride": S(src.shape[1]), "src": i32_list(src), "mean": F64(mean),
                           "std": F64(std), "mean_decimal": repr(mean), "std_decimal": repr(std)}, o))

    px = np.array([[0, 1, 128], [200, 254, 255]], dtype=np.uint8)
    gray_case("gray8_tiny", ["§6", "D15", "D16"], px, 0.5, 0.25)
    ramp = np.arange(256, dtype=np.uint8).reshape(1, 256)
    gray_case("gray8_all_values_imagenet_red", ["§6", "D15"], ramp, 0.485, 0.229)
    # D15: a std where the float64 route (round once at the end) gives other constants.
    for mean in (0.0, 0.456):
        std = 0.224
        s32, b32 = R.planar_constants(mean, std)
        s64, b64 = _float64_route(mean, std)
        assert (s32, b32) != (s64, b64), (mean, std)
        wrong = np.subtract(np.multiply(ramp.astype(np.float32), s64, dtype=np.float32), b64,
                            dtype=np.float32)
        right = R.gray8_to_planar(ramp, mean, std)[0]
        assert (wrong.view(np.uint32) != right.view(np.uint32)).any()
        gray_case(f"gray8_float32_constants_std_0.224_mean_{mean}", ["D15"], ramp, mean, std,
                  extra={"float64_route_differs": True,
                         "float64_route_scale_not_this": F32(s64),
                         "float64_route_bias_not_this": F32(b64),
                         "float64_route_pixels_differing": int(
                             (wrong.view(np.uint32) != right.view(np.uint32)).sum())})
    big = np.array([rng.next_u64() & 255 for _ in range(32 * 100)], dtype=np.uint8).reshape(32, 100)
    gray_case("gray8_32x100", ["§6", "D15", "D16"], big, 0.3, 0.7, full=False)

    # a row stride larger than the width (bytes past the width are ignored)
    h, w, stride = 3, 4, 7
    buf = np.array([rng.next_u64() & 255 for _ in range(h * stride)], dtype=np.uint8)
    view = buf.reshape(h, stride)[:, :w]
    out = R.gray8_to_planar(view, 0.25, 0.5)
    cases.append(case("gray8_row_stride", ["§6", "D16"],
                      {"op": "gray8", "height": S(h), "width": S(w), "stride": S(stride),
                       "src": i32_list(buf), "mean": F64(0.25), "std": F64(0.5),
                       "mean_decimal": "0.25", "std_decimal": "0.5"},
                      {"planar": f32_array(out, True)}))

    def rgb_case(name, pins, src, mean, std, full=True, stride=None, buf=None):
        out = R.rgb8_to_planar(src, mean, std)
        means = np.broadcast_to(np.asarray(mean, dtype=np.float64), (3,))
        stds = np.broadcast_to(np.asarray(std, dtype=np.float64), (3,))
        consts = [R.planar_constants(means[c], stds[c]) for c in range(3)]
        cases.append(case(name, pins,
                          {"op": "rgb8", "height": S(src.shape[0]), "width": S(src.shape[1]),
                           "stride": S(stride if stride else 3 * src.shape[1]),
                           "src": i32_list(buf if buf is not None else src),
                           "mean": [F64(m) for m in means], "std": [F64(s) for s in stds],
                           "mean_decimal": [repr(float(m)) for m in means],
                           "std_decimal": [repr(float(s)) for s in stds]},
                          {"planar": f32_array(out, full), "scale": [F32(c[0]) for c in consts],
                           "bias": [F32(c[1]) for c in consts]}))

    rgb = np.array([rng.next_u64() & 255 for _ in range(2 * 2 * 3)], dtype=np.uint8).reshape(2, 2, 3)
    rgb_case("rgb8_tiny_imagenet", ["§6", "D15", "D16"], rgb, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    rgb_case("rgb8_tiny_scalar_mean_std", ["§6", "D15", "D16"], rgb, 0.5, 0.5)
    big = np.array([rng.next_u64() & 255 for _ in range(16 * 40 * 3)], dtype=np.uint8).reshape(16, 40, 3)
    rgb_case("rgb8_16x40", ["§6", "D15", "D16"], big, (0.485, 0.456, 0.406), (0.229, 0.224, 0.225),
             full=False)
    h, w, stride = 2, 3, 11
    buf = np.array([rng.next_u64() & 255 for _ in range(h * stride)], dtype=np.uint8)
    view = buf.reshape(h, stride)[:, :3 * w].reshape(h, w, 3)
    rgb_case("rgb8_row_stride", ["§6", "D16"], view, 0.1, 0.9, stride=stride, buf=buf)
    return {"section": "§6", "cases": cases}


# ---------------------------------------------------------------------------
# synthetic.json
# ---------------------------------------------------------------------------

def build_synthetic() -> dict:
    cases = []
    cfgs = [
        ("tiny", dict(height=2, min_width=1, max_width=4, channels=1, seed=0), range(6), True),
        ("tiny_three_channels", dict(height=2, min_width=2, max_width=3, channels=3, seed=9), range(3), True),
        ("default", dict(height=32, min_width=64, max_width=256, channels=1, seed=0),
         [0, 1, 2, 3, 1000, 2047], False),
        ("stream_config", dict(height=4, min_width=3, max_width=9, channels=1, seed=7), range(40), False),
        ("seed_minus_1", dict(height=3, min_width=16, max_width=48, channels=2, seed=-1), range(4), False),
        ("fixed_width", dict(height=1, min_width=33, max_width=33, channels=1, seed=2), range(3), True),
    ]
    for name, kw, idx, full in cfgs:
        samples = []
        for i in idx:
            img, target, label = R.synthetic_sample(i, **kw)
            samples.append({"i": S(i), "width": int(img.shape[2]), "target": i32_list(target),
                            "label": int(label), "image": f32_array(img, full)})
        pins = ["contract:SyntheticLineImages"] + (["D3"] if kw["seed"] < 0 else [])
        cases.append(case(f"synthetic_{name}", pins,
                          {"op": "synthetic", "params": {k: S(v) for k, v in kw.items()},
                           "indices": [S(i) for i in idx]},
                          {"samples": samples}))
    return {"section": "contract", "cases": cases}


# ---------------------------------------------------------------------------
# augment.json (spec_tests/generate_augment_vectors.py)
# ---------------------------------------------------------------------------

def build_augment() -> dict:
    return generate_augment_vectors.build_augment(types.SimpleNamespace(**globals()))


# ---------------------------------------------------------------------------
# writing
# ---------------------------------------------------------------------------

def _with_additions(stem, build):
    """``build``'s document with ``vector_additions.extra_<stem>``'s cases appended after the
    released ones (which therefore keep their place and bytes)."""
    def build_all_cases():
        doc = build()
        extra = getattr(vector_additions, "extra_" + stem, None)
        if extra is not None:
            doc["cases"] += extra(types.SimpleNamespace(**globals()))
        return doc
    return build_all_cases


# One builder per vector file, found by name: ``rng.json`` is written by ``build_rng``.
BUILDERS = {name: _with_additions(name.removesuffix(".json"), globals()["build_" + name.removesuffix(".json")])
            for name in codec.VECTOR_FILES}


def dumps(obj: dict) -> str:
    """Deterministic text: sorted keys, one case per line."""
    head = json.dumps({k: v for k, v in obj.items() if k != "cases"}, sort_keys=True,
                      ensure_ascii=False)
    lines = [json.dumps(c, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
             for c in obj["cases"]]
    names = [c["name"] for c in obj["cases"]]
    assert len(names) == len(set(names)), "case names must be unique"
    return '{"cases": [\n' + ",\n".join(lines) + "\n], " + head[1:] + "\n"


def build_all() -> dict:
    return {name: dumps(fn()) for name, fn in BUILDERS.items()}


BASELINE = os.path.join(HERE, "vector_baseline.json")


def case_digest(case) -> str:
    """The sha256 of a case's canonical JSON (sorted keys, no spaces)."""
    text = json.dumps(case, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def freeze() -> int:
    """Record the digest of every case not yet in vector_baseline.json; never rewrite one
    that is (a released case never changes)."""
    with open(BASELINE, encoding="utf-8") as fh:
        baseline = json.load(fh)
    added = 0
    for name in codec.VECTOR_FILES:
        known = baseline.setdefault(name, {})
        for c in codec.load(name)["cases"]:
            if c["name"] not in known:
                known[c["name"]] = case_digest(c)
                added += 1
    body = ",\n".join(json.dumps(name) + ": {\n" + ",\n".join(f"  {json.dumps(k)}: {json.dumps(v)}"
                                                                for k, v in cases.items()) + "\n}"
                      for name, cases in baseline.items())
    with open(BASELINE, "w", encoding="utf-8", newline="\n") as fh:
        fh.write("{\n" + body + "\n}\n")
    print(f"vector_baseline.json: {added} cases added")
    return 0


def main(argv) -> int:
    if "--freeze" in argv:
        return freeze()
    check = "--check" in argv
    stale = []
    for name, text in build_all().items():
        path = os.path.join(VECTORS, name)
        old = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                old = fh.read()
        if old != text:
            stale.append(name)
            if not check:
                with open(path, "w", encoding="utf-8", newline="\n") as fh:
                    fh.write(text)
        print(f"{name}: {len(text.encode('utf-8'))} bytes{' (changed)' if old != text else ''}")
    if check and stale:
        print("stale:", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
