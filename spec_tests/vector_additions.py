"""The conformance cases added after the first release of the vectors (issue 11).

``generate_vectors.py`` appends these to each file's cases, after the original ones, so
that no existing case moves or changes (``spec_tests/vector_baseline.json`` holds the
digest of every released case and ``test_conformance_vectors.py`` checks them). Each function takes
the generator module ``G`` (its encoding helpers and the oracle ``G.R``) and returns a
list of cases.

What they pin that the first cases could not:

* §1 streams that start mid-epoch and mid-run, resumed streams, global steps far apart
  and out of order, a dataset failing at one index, world sizes 3 and 6, refused ranks,
  and one §7-sized stream digest;
* D10's strict ``c_i > u`` and the *last eligible* fallback, with ``u`` on a bound;
* §4 pad values that float32 must round (not truncate), refused batches;
* §6 refused raw buffers; §3 ``n <= 1`` with ``p != 0``.
"""
from __future__ import annotations

import hashlib

import numpy as np


class InjectedFailure(Exception):
    """The error of a dataset that fails at one index (§1: it surfaces at its step)."""


# The (workers, prefetch) settings a port's harness runs every stream_iter and
# stream_digest case under (§1: delivery order and bytes do not depend on them).
HARNESS = {"workers": ["0", "1", "3"], "prefetch": ["1", "4"]}


# ---------------------------------------------------------------- §3 permutation

def extra_permutation(G):
    """n <= 1: every p the integer type holds gives 0 (D6 refuses p outside [0, n) only for n >= 2)."""
    R, S = G.R, G.S
    cases = []
    for n, ps in ((1, [1, 5, (1 << 63) + 7, R.M64]), (0, [0, 3, R.M64])):
        values = [R.keyed_permutation(p, n, 0x0123456789ABCDEF) for p in ps]
        assert values == [0] * len(ps)
        cases.append(G.case(f"n_{n}_any_p_gives_0", ["D6", "§3"],
                            {"op": "points", "n": S(n), "key": S(0x0123456789ABCDEF), "p": [S(p) for p in ps]},
                            {"values": [S(v) for v in values]}))
    # D3 reduces seeds and derive's arguments only: p = -2 is refused, though 2**64 - 2 < n.
    n = R.M64
    _refused(lambda: R.keyed_permutation(-2, n, 0))
    cases.append(G.case("rejects_negative_p_not_reduced_mod_2_64", ["D3", "D6"],
                        {"op": "points", "n": S(n), "key": "0", "p": ["-2"]}, {"error": "ValueError"}))
    return cases


def _refused(call):
    """Asserts that the oracle refuses ``call()`` with ValueError."""
    try:
        call()
    except ValueError:
        return
    raise AssertionError("the oracle accepted an input the vectors refuse")


def extra_rng(G):
    """D3 applies to seeds and derive's arguments, not to next_int's n: -3 is refused
    (reduced mod 2**64 it would be the valid 2**64 - 3)."""
    _refused(lambda: G.R.SampleRng(0).next_int(-3))
    return [G.case("next_int_rejects_negative_n_not_reduced_mod_2_64", ["D3", "D4"],
                   {"op": "draws", "state": "0", "method": "next_int", "n": "-3", "count": 1},
                   {"error": "ValueError"})]


# ---------------------------------------------------------------- §3 mixing picks

def _grid_neighbours(bound):
    """``bound`` and the next_double value just below it, where they are next_double values
    (multiples of 2^-53 in [0, 1))."""
    step = 2.0 ** -53
    out = []
    for u in (bound, bound - step):
        if 0.0 <= u < 1.0 and (u * (1 << 53)).is_integer():
            out.append(u)
    return out


def _pick_case(G, name, sources, extra_us):
    R, S, F64 = G.R, G.S, G.F64
    spec = G._mixing(sources, 1, 1, 0)["sources"]
    eligible = [(k, st, sz, sh) for k, (st, sz, sh) in enumerate(sources) if sh > 0 and sz > 0]
    sampler = R.MixingSampler(sources, 1, 1, 0)
    bounds = [c for c, _, _ in sampler._table]
    us = [0.0, 1.0 - 2.0 ** -53, *extra_us]
    for b in bounds:
        us += _grid_neighbours(b)
    us = sorted(set(us))
    picks, picked, indices = [], [], []
    for u in us:
        state = R.state_drawing_double(u)
        seed = R.seed_deriving(state, 0, 0, 0, R.STREAM_MIXING)
        rng = R.SampleRng(state)
        assert rng.next_double() == u
        index = R.MixingSampler(sources, 1, 1, seed).indices(0, 0)[0]
        # which eligible source: the first bound above u, else the last eligible one (D10)
        k = next((i for i, c in enumerate(bounds) if c > u), len(bounds) - 1)
        position, start, size, _ = eligible[k]
        assert start <= index < start + size
        picks.append({"u": F64(u), "u_decimal": repr(u), "seed": S(seed), "state": S(state)})
        picked.append(S(position))
        indices.append(S(index))
    return G.case(name, ["D10", "§3"], {"op": "mixing_pick", "sources": spec, "picks": picks},
                  {"cumulative": [F64(c) for c in bounds], "sources": picked, "indices": indices})


def extra_samplers(G):
    """Picks with an explicit u: on a bound (strict >), below the last bound < 1.0 (the
    last eligible source, not the literal last), zero-share and empty sources around."""
    R = G.R
    around = [(0, 8, 0.5), (100, 5, 0.0), (200, 0, 0.7), (300, 6, 0.25), (400, 0, 0.1), (500, 3, 0.25),
              (600, 4, 0.0)]
    short = [(50, 0, 0.4), (0, 10, 0.1), (20, 10, 0.2), (40, 10, 0.3), (60, 5, 0.0), (70, 0, 0.9)]
    assert R.MixingSampler(short, 1, 1, 0)._table[-1][0] < 1.0
    uneven = [(0, 4, 3.0), (10, 0, 1.0), (20, 4, 1.0), (30, 1, 2.5), (40, 2, 0.0)]
    cases = []
    # D3 reduces seeds only: negative sizes, counts and positions are refused.
    for name, spec, call in (
            ("error_negative_n_not_reduced", G._seq(-5, 2, True), None),
            ("error_negative_batch_size_not_reduced", G._shuf(10, -2, 0, True), None),
            ("error_mixing_negative_start_not_reduced", G._mixing([(-3, 5, 1.0)], 2, 2, 0), None),
            ("error_mixing_negative_size_not_reduced", G._mixing([(0, -5, 1.0)], 2, 2, 0), None),
            ("error_mixing_negative_steps_per_epoch", G._mixing([(0, 5, 1.0)], 2, -2, 0), None),
            ("error_bucketed_negative_pool_batches", G._bucketed([1, 2, 3, 4], 2, -1, 0), None),
            ("error_negative_step_not_reduced", G._shuf(10, 2, 0, True), ["0", "-1"])):
        def attempt(spec=spec, call=call):
            sampler = G.codec.build_sampler(R, spec)
            if call is not None:
                sampler.indices(int(call[0]), int(call[1]))
        _refused(attempt)
        inp = {"op": "sampler_error", "sampler": spec}
        if call is not None:
            inp["call"] = {"epoch": call[0], "step": call[1]}
        cases.append(G.case(name, ["D3", "§3"], inp, {"error": "ValueError"}))
    return cases + [
        _pick_case(G, "mixing_pick_u_on_bounds_zero_and_empty_sources_between", around, [0.25, 0.625]),
        _pick_case(G, "mixing_pick_last_bound_below_1_falls_back_to_last_eligible", short, []),
        _pick_case(G, "mixing_pick_unnormalised_shares_u_on_bounds", uneven, [0.5]),
    ]


# ---------------------------------------------------------------- §4 collation

def extra_collate(G):
    """Pad values float32 must round to nearest; batches and settings to refuse."""
    R = G.R
    cases = []
    rng = R.SampleRng(4242)
    tiny = [(G._pixels((1, 2, w), rng), np.array(t, np.int32), label) for w, t, label in ((1, [3], 1), (3, [2, 2], 4))]
    for pad, truncated in ((0.1, 0x3dcccccc), (-1.0 / 3.0, 0xbeaaaaaa), (2.0 / 3.0, 0x3f2aaaaa)):
        bits = G.codec.f32_bits(np.float32(pad))
        assert bits == truncated + 1, (pad, hex(bits))     # nearest is one ulp above truncation
        b = R.collate(tiny, [7, 8], 0, 0, 0, width_multiple=4, pad_value=pad)
        cases.append(G.case(f"pad_{pad!r}_rounds_to_nearest_float32", ["§4", "D13"],
                            _collate_input(G, tiny, [7, 8], pad, 4), G.codec.encode_batch(b, True)))
    one_c = [(G._pixels((1, 2, 2), rng), np.array([1], np.int32), 0), (G._pixels((3, 2, 2), rng),
                                                                        np.array([1], np.int32), 0)]
    one_h = [(G._pixels((1, 2, 2), rng), np.array([1], np.int32), 0), (G._pixels((1, 3, 2), rng),
                                                                        np.array([1], np.int32), 0)]
    refused = [("refuses_mixed_channels", one_c, [0, 1], 1), ("refuses_mixed_heights", one_h, [0, 1], 1),
               ("refuses_empty_batch", [], [], 1), ("refuses_width_multiple_0", tiny, [7, 8], 0),
               ("refuses_width_multiple_minus_4", tiny, [7, 8], -4)]
    for name, samples, indices, m in refused:
        try:
            R.collate(samples, indices, 0, 0, 0, width_multiple=m)
            raise AssertionError(f"{name}: the oracle accepted it")
        except ValueError:
            pass
        cases.append(G.case(name, ["§4", "D13"] if "width" in name else ["§4"],
                            _collate_input(G, samples, indices, 0.0, m), {"error": "ValueError"}))
    return cases


def _collate_input(G, samples, indices, pad, m):
    S = G.S
    return {"op": "collate", "samples": G._explicit_samples(samples), "indices": [S(i) for i in indices],
            "seed": "0", "epoch": "0", "step": "0", "width_multiple": S(m), "pad_value": G.F64(pad),
            "pad_value_decimal": repr(pad), "augmentation": None, "slot_offset": "0"}


# ---------------------------------------------------------------- §6 images

def extra_image(G):
    """Raw buffers to refuse: a row stride below width * channels, a buffer too short."""
    R, S, F64 = G.R, G.S, G.F64
    cases = []
    for op, channels, size, h, w, stride, what in (
            ("gray8", 1, 12, 3, 4, 3, "stride_below_width"),
            ("gray8", 1, 10, 3, 4, 4, "buffer_too_short"),
            ("gray8", 1, 13, 3, 4, 5, "buffer_one_byte_short"),
            ("rgb8", 3, 24, 2, 3, 8, "stride_below_3_width"),
            ("rgb8", 3, 17, 2, 3, 9, "buffer_one_byte_short")):
        assert not R.raw_layout_allowed(size, h, w, stride, channels)
        mean = F64(0.5) if op == "gray8" else [F64(0.5)] * 3
        std = F64(0.25) if op == "gray8" else [F64(0.25)] * 3
        cases.append(G.case(f"{op}_refuses_{what}", ["§6", "D16"],
                            {"op": op, "height": S(h), "width": S(w), "stride": S(stride),
                             "src": list(range(size)), "mean": mean, "std": std},
                            {"error": "ValueError"}))
    return cases


# ---------------------------------------------------------------- §1 streams

def _reference_batch(G, inp, get, g, rank):
    R, lspec = G.R, inp["loader"]
    sampler = G.codec.build_sampler(R, inp["sampler"])
    return R.batch(get, sampler, int(lspec["seed"]), g, width_multiple=int(lspec["width_multiple"]),
                   pad_value=G.codec.from_f64_hex(lspec["pad_value"]),
                   augmentation=G._aug_from_spec(lspec["augmentation"]),
                   transform=G._transform_from_spec(lspec["transform"]), rank=rank,
                   world_size=int(inp["world_size"]))


def _getter(G, dspec):
    get = G._synth_from_spec(dspec)
    if "fails_at" not in dspec:
        return get
    bad = int(dspec["fails_at"])

    def failing(i):
        if i == bad:
            raise InjectedFailure(i)
        return get(i)
    return failing


def _stream_iter_case(G, name, pins, dspec, sspec, lspec, world, runs):
    S = G.S
    inp = {"op": "stream_iter", "dataset": dspec, "sampler": sspec, "loader": lspec, "world_size": S(world),
           "runs": [{"start_g": S(a), "stop_g": S(b)} for a, b in runs], "harness": HARNESS}
    get = _getter(G, dspec)
    out_runs = []
    for start, stop in runs:
        for rank in range(world):
            batches, error_at = [], None
            for g in range(start, stop):
                try:
                    b = _reference_batch(G, inp, get, g, rank)
                except InjectedFailure:
                    error_at = S(g)       # the error at its step, then nothing
                    break
                o = G.codec.encode_batch(b, False)
                o.update({"g": S(g), "epoch": S(b["epoch"]), "step": S(b["step"]), "rank": S(rank)})
                batches.append(o)
            out_runs.append({"start_g": S(start), "stop_g": S(stop), "rank": S(rank), "batches": batches,
                             "error_at": error_at})
    steps = G.codec.build_sampler(G.R, sspec).steps_per_epoch
    return G.case(name, pins, inp, {"steps_per_epoch": S(steps), "runs": out_runs})


def _stream_case(G, name, pins, dspec, sspec, lspec, world, steps):
    """The existing ``stream`` op (each rank's ``batch_at(g)``), at any list of steps."""
    S = G.S
    inp = {"op": "stream", "dataset": dspec, "sampler": sspec, "loader": lspec, "world_size": S(world),
           "steps": [S(g) for g in steps]}
    sampler = G.codec.build_sampler(G.R, sspec)
    if not G.R.loader_ranks_allowed(sampler, world) or min(steps) < 0:
        if min(steps) < 0:
            _refused(lambda: G.R.batch(_getter(G, dspec), sampler, 0, min(steps)))
        return G.case(name, pins, inp, {"error": "ValueError"})
    get, batches = _getter(G, dspec), []
    for g in steps:
        for rank in range(world):
            b = _reference_batch(G, inp, get, g, rank)
            o = G.codec.encode_batch(b, False)
            o.update({"g": S(g), "rank": S(rank), "epoch": S(b["epoch"]), "step": S(b["step"])})
            batches.append(o)
    return G.case(name, pins, inp, {"steps_per_epoch": S(sampler.steps_per_epoch), "batches": batches})


def _first_failing_step(G, sspec, index, start, world, rank):
    """The first global step >= start whose rank-``rank`` slots hold ``index``."""
    sampler = G.codec.build_sampler(G.R, sspec)
    share = sampler.batch_size // world
    g = start
    while True:
        epoch, step = divmod(g, sampler.steps_per_epoch)
        if index in sampler.indices(epoch, step)[rank * share:(rank + 1) * share]:
            return g
        g += 1


def _stream_configs(G):
    ds = G._synth_spec(40, 4, 3, 9, 1, 7)
    get = G._synth_from_spec(ds)
    widths = [int(get(i)[0].shape[2]) for i in range(40)]
    loader = {"seed": "5", "width_multiple": "4", "pad_value": G.F64(0.0),
              "augmentation": G._gain_offset_spec(), "transform": None}
    loader2 = {"seed": "21", "width_multiple": "1", "pad_value": G.F64(-1.0), "augmentation": G._noise_spec(0.1),
               "transform": {"kind": "gain_offset_copy", "gain": G.F64(0.3), "offset": G.F64(0.05),
                             "gain_decimal": "0.3", "offset_decimal": "0.05"}}
    samplers = {"sequential": G._seq(40, 6, False), "shuffled": G._shuf(40, 6, 11, True),
                "mixing": G._mixing([(0, 25, 0.75), (25, 15, 0.25)], 6, 5, 13),
                "bucketed": G._bucketed(widths, 6, 2, 17), "shuffled_keep_last": G._shuf(40, 6, 11, False)}
    return ds, loader, loader2, samplers


def extra_stream(G):
    """Streams from any start step, resumed, failing, at other world sizes; refused ranks."""
    ds, loader, loader2, sm = _stream_configs(G)
    pins = ["§1", "§4", "D12", "D14", "D17"]
    cases = [
        _stream_iter_case(G, "iter_shuffled_resumed_mid_epoch_world_size_1", pins, ds, sm["shuffled"], loader, 1,
                          [(0, 14), (8, 14), (15, 20)]),
        _stream_iter_case(G, "iter_mixing_resumed_mid_run_world_size_2", pins + ["D9"], ds, sm["mixing"], loader, 2,
                          [(3, 9), (12, 13), (7, 16)]),
        _stream_iter_case(G, "iter_bucketed_mid_epoch_world_size_3", pins + ["D11"], ds, sm["bucketed"], loader, 3,
                          [(5, 11), (20, 23)]),
        _stream_iter_case(G, "iter_sequential_short_last_batch_world_size_2", pins + ["D8"], ds, sm["sequential"],
                          loader, 2, [(6, 9), (13, 15)]),
        _stream_iter_case(G, "iter_transform_and_noise_world_size_2", pins, ds, sm["shuffled_keep_last"], loader2,
                          2, [(4, 10)]),
    ]
    # A dataset failing at one index: every step before it, the error at its step, then nothing.
    for world, rank, sampler_name, start in ((1, 0, "shuffled", 2), (2, 1, "shuffled", 7), (2, 0, "mixing", 1)):
        sspec = sm[sampler_name]
        sampler = G.codec.build_sampler(G.R, sspec)
        share = sampler.batch_size // world
        epoch, step = divmod(start + 3, sampler.steps_per_epoch)
        index = sampler.indices(epoch, step)[rank * share]       # met by `rank` at or before start + 3
        failing = dict(ds, fails_at=G.S(index))
        g = _first_failing_step(G, sspec, index, start, world, rank)
        assert start <= g <= start + 3
        cases.append(_stream_iter_case(G, f"iter_{sampler_name}_dataset_fails_at_index_{index}_world_size_{world}",
                                       ["§1"], failing, sspec, loader, world, [(start, start + 8)]))
    cases += [
        _stream_case(G, "shuffled_steps_out_of_order_and_far_apart_world_size_2", pins, ds, sm["shuffled"], loader,
                     2, [13, 2, 2, 0, 1000003, 7, 6]),
        _stream_case(G, "mixing_steps_out_of_order_world_size_3", pins + ["D9"], ds, sm["mixing"], loader, 3,
                     [9, 4, 250, 0, 5]),
        _stream_case(G, "shuffled_world_size_3", pins, ds, sm["shuffled"], loader, 3, list(range(8))),
        _stream_case(G, "bucketed_world_size_6", pins + ["D11"], ds, sm["bucketed"], loader, 6, list(range(8))),
        _stream_case(G, "transform_and_noise_world_size_3", pins, ds, sm["shuffled"], loader2, 3,
                     [0, 5, 6, 13]),
        _stream_case(G, "refuses_world_size_4_for_batch_6", ["§1"], ds, sm["shuffled"], loader, 4, [0]),
        _stream_case(G, "refuses_world_size_0", ["§1"], ds, sm["shuffled"], loader, 0, [0]),
        _stream_case(G, "refuses_negative_global_step_not_reduced", ["§1", "D3"], ds, sm["shuffled"], loader, 1,
                     [3, -1]),
        _stream_case(G, "refuses_short_last_batch_world_size_3", ["§1", "D8"], ds, sm["sequential"], loader, 3, [0]),
    ]
    cases.append(section7_digest(G))
    return cases


# ---------------------------------------------------------------- §7-sized digest

SECTION7_SECONDS = "about 2 s in the oracle, about 0.3 s per harness setting in this package (2 cores)"


def section7_digest(G):
    """The §7 workload, two epochs: 2,048 synthetic images of 32 x 64..256, batch 128,
    GainOffset, width multiple 4; each step's six arrays hashed, then the steps' hashes."""
    S = G.S
    ds = G._synth_spec(2048, 32, 64, 256, 1, 0)
    sspec = G._shuf(2048, 128, 0, True)
    lspec = {"seed": "0", "width_multiple": "4", "pad_value": G.F64(0.0), "augmentation": G._gain_offset_spec(),
             "transform": None}
    inp = {"op": "stream_digest", "dataset": ds, "sampler": sspec, "loader": lspec, "world_size": "1",
           "start_g": "0", "stop_g": "32", "harness": {"workers": ["0", "2"], "prefetch": ["1", "8"]}}
    get = G._synth_from_spec(ds)
    steps, whole = [], hashlib.sha256()
    for g in range(32):
        step = G.codec.batch_digest(_reference_batch(G, inp, get, g, 0))
        steps.append(step.hex())
        whole.update(step)
    return G.case("section7_two_epochs_digest", ["§1", "§3", "§4", "§7", "D7", "D12", "D13", "D14", "D17"], inp,
                  {"steps_per_epoch": S(16), "step_sha256": steps, "sha256": whole.hexdigest(),
                   "expected_seconds": SECTION7_SECONDS})
