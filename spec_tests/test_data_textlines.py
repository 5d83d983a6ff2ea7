"""The built-in learnable dataset SyntheticTextLines (docs/contract.md, its own section).

What this file covers:

* Concern: learnable built-in dataset (issue 10 item 1). Sample ``i`` is regenerable from
  the contract alone: layout from ``derive(seed, 0, i, 0, 4)``, pixels from
  ``derive(seed, 0, i, 0, 5)``; the compiled dataset equals the oracle
  ``reference.textlines_sample`` bit for bit, and both reproduce ``textlines.json``;
* the pixels carry the targets: without noise, the ink is exactly the font's bitmaps of
  the target's glyphs, so a model can learn to read them;
* §1/§4: the storage is sealed and packed, so the loader's GIL-free route serves it and
  gives the same batch as the ``get_sample`` route and as the oracle's collation;
* the refusals follow the package's exception rule; the stub matches the module.
"""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import reference as R
import test_api_stubs
from conftest import vector_cases
from onemodel_cy.conformance.replay import differences, replay
from routes import gather, read

M64 = R.M64
SEEDS = st.one_of(st.integers(0, M64), st.integers(-(1 << 63), -1), st.sampled_from([0, 1, -1, M64]))


def _bits(a):
    return np.asarray(a).view(np.uint32)


@st.composite
def text_params(draw):
    scale = draw(st.integers(1, 3))
    min_length = draw(st.integers(1, 5))
    return dict(height=draw(st.integers(7 * scale, 7 * scale + 12)), min_length=min_length,
                max_length=draw(st.integers(min_length, min_length + 6)),
                num_symbols=draw(st.integers(1, 16)), scale=scale,
                noise=draw(st.one_of(st.sampled_from([0.0, 0.5, 1.0]), st.floats(0, 4, width=32))),
                seed=draw(SEEDS))


@given(p=text_params(), count=st.integers(1, 6))
def test_textlines_match_the_oracle(om, p, count):
    """Concern: learnable built-in dataset (docs/contract.md SyntheticTextLines; §2 D2, D3, D4).
    Every sample of the compiled dataset (width, symbols, label, every pixel's float32
    bits) equals the oracle's transcription of the contract."""
    ds = om.SyntheticTextLines(count, **p)
    assert len(ds) == count
    for i in range(count):
        image, target, label = R.textlines_sample(i, **p)
        s = ds.get_sample(i)
        assert s.image.dtype == np.float32 and s.image.shape == image.shape
        assert np.array_equal(_bits(s.image), _bits(image))
        assert s.target.tolist() == target.tolist() and s.label == label
        assert ds.widths[i] == image.shape[2]


@pytest.mark.parametrize("case", vector_cases("textlines.json"))
@pytest.mark.parametrize("api", ["compiled", "reference"])
def test_textlines_vectors_replay(om, api, case):
    """Concern: learnable built-in dataset, known answers. Both the compiled package and the
    oracle reproduce every case of textlines.json through the one replay, refusals
    included (as ValueError, the exception rule's out-of-range error)."""
    got = replay(om if api == "compiled" else R, case)
    assert differences(case["output"], got) == []
    if "error" in case["output"]:
        assert got == case["output"]


@settings(max_examples=25)
@given(p=text_params(), count=st.integers(1, 5))
def test_ink_is_the_font_of_the_targets(om, p, count):
    """Concern: learnable built-in dataset (the pixels depend on the targets). Without noise
    every pixel is 0 except the glyphs' strokes; one column band per glyph, left to right,
    holds exactly the font bitmap of that target symbol scaled by ``scale``, in one ink
    level in [0.5, 1); the width is the contract's sum of margins, glyphs and gaps."""
    p["noise"] = 0.0
    ds = om.SyntheticTextLines(count, **p)
    s, font = p["scale"], om.data.textlines.FONT
    for i in range(count):
        sample = ds[i]
        image = sample.image[0]
        assert np.all(image[image != 0] >= 0.5) and np.all(image < 1)
        assert sample.label == len(sample.target)
        assert p["min_length"] <= len(sample.target) <= p["max_length"]
        assert all(1 <= t <= p["num_symbols"] for t in sample.target.tolist())
        # Cut the columns into glyph bands: gaps between glyphs are >= s empty columns.
        inked = np.flatnonzero(image.any(axis=0))
        found = 0
        for t in sample.target.tolist():
            bitmap = np.array([[row >> (4 - c) & 1 for c in range(5)] for row in font[t - 1]], bool)
            big = np.kron(bitmap, np.ones((s, s), bool))
            x0 = inked[inked >= found].min() - int(np.argmax(big.any(axis=0)))   # leftmost ink column
            rows = np.flatnonzero(image[:, x0:x0 + 5 * s].any(axis=1))
            y0 = rows.min() - int(np.argmax(big.any(axis=1)))
            window = image[y0:y0 + 7 * s, x0:x0 + 5 * s]
            assert np.array_equal(window != 0, big)
            assert len(np.unique(window[big])) == 1
            found = x0 + 5 * s
        assert not image[:, found:].any()


def test_noise_is_bounded_and_seeded(om):
    """Concern: learnable built-in dataset. Noise of amplitude a moves a pixel by less than
    a/2 (off the strokes the pixel is the noise alone); another seed gives other samples;
    D3: seed -1 and 2**64 - 1 are the same dataset; sample i does not depend on the count."""
    clean = om.SyntheticTextLines(4, noise=0.0, seed=5)
    noisy = om.SyntheticTextLines(4, noise=0.75, seed=5)
    for i in range(4):
        a, b = clean[i].image, noisy[i].image
        assert a.shape == b.shape and np.all(np.abs(b - a) <= 0.375)
        assert np.abs(b - a).max() > 0.3
    other = om.SyntheticTextLines(4, noise=0.75, seed=6)
    assert any(other[i].target.tolist() != noisy[i].target.tolist() for i in range(4))
    minus, top = om.SyntheticTextLines(3, seed=-1), om.SyntheticTextLines(9, seed=M64)
    for i in range(3):
        assert np.array_equal(_bits(minus[i].image), _bits(top[i].image))


def test_defaults_vocabulary_and_pickle(om):
    """Concern: learnable built-in dataset. The defaults are height 24, 1..6 glyphs, the ten
    digits, scale 2, noise 0.5, seed 0; ``vocabulary[t]`` is target t's character (0 is
    the CTC blank); a pickled dataset rebuilds the same samples through its constructor."""
    ds = om.SyntheticTextLines(3)
    assert (ds.height, ds.min_length, ds.max_length, ds.num_symbols, ds.scale, ds.noise, ds.seed) == (
        24, 1, 6, 10, 2, 0.5, 0)
    assert ds.vocabulary == ("<blank>", *"0123456789")
    assert om.SyntheticTextLines(1, num_symbols=16).vocabulary[1:] == tuple("0123456789ABCDEF")
    image, target, _ = R.textlines_sample(2)
    assert np.array_equal(_bits(ds[2].image), _bits(image))
    copy = pickle.loads(pickle.dumps(om.SyntheticTextLines(5, noise=0.3, seed=9, num_symbols=12)))
    again = om.SyntheticTextLines(5, noise=0.3, seed=9, num_symbols=12)
    assert repr(copy) == repr(again)
    for i in range(5):
        assert np.array_equal(_bits(copy[i].image), _bits(again[i].image))


@settings(max_examples=15)
@given(p=text_params(), m=st.integers(1, 8), data=st.data())
def test_the_gil_free_route_serves_it(om, p, m, data):
    """§1, §4 (D13, D17) on SyntheticTextLines: it is a packed source, so the GIL-free
    route gathers it; that batch equals the get_sample route's and the oracle's collation
    of the oracle's samples (GainOffset included)."""
    ds = om.SyntheticTextLines(6, **p)
    idx = np.array(data.draw(st.lists(st.integers(0, 5), min_size=1, max_size=6)), np.int64)
    collator = om.ImageBatchCollator(width_multiple=m, augmentation=om.GainOffset())
    want = R.collate([R.textlines_sample(i, **p) for i in idx.tolist()], idx.tolist(), 3, 1, 2,
                     width_multiple=m, augmentation=R.gain_offset())
    with gather(collator, ds, idx, 3, 1, 2) as packed, read(collator, ds, idx, 3, 1, 2) as samples:
        for b in (packed, samples):
            assert np.array_equal(_bits(b.images), _bits(want["images"]))
            for name in ("widths", "targets", "target_lengths", "labels", "indices"):
                assert np.array_equal(getattr(b, name), want[name]), name


def test_storage_is_sealed(om):
    """Concern: memory safety (sealed storage). The images and targets it hands out are
    read-only views that cannot be made writeable again, and a second __init__ is refused."""
    ds = om.SyntheticTextLines(2)
    s = ds[0]
    for array in (s.image, s.target, ds.shapes):
        with pytest.raises(ValueError):
            array.flags.writeable = True
    with pytest.raises(RuntimeError, match="already"):
        ds.__init__(2)


@pytest.mark.parametrize("kwargs, error, fragment", [
    (dict(count=0), ValueError, "count"),
    (dict(count=2, scale=0), ValueError, "scale"),
    (dict(count=2, scale=65, height=4096), ValueError, "scale"),
    (dict(count=2, height=13), ValueError, "height"),
    (dict(count=2, height=4097), ValueError, "height"),
    (dict(count=2, min_length=0), ValueError, "min_length"),
    (dict(count=2, min_length=5, max_length=4), ValueError, "max_length"),
    (dict(count=2, max_length=4097), ValueError, "max_length"),
    (dict(count=2, num_symbols=0), ValueError, "num_symbols"),
    (dict(count=2, num_symbols=17), ValueError, "num_symbols"),
    (dict(count=2, noise=-0.1), ValueError, "noise"),
    (dict(count=2, noise=float("nan")), ValueError, "noise"),
    (dict(count=2, noise="x"), TypeError, "noise"),
    (dict(count=2.0), TypeError, "count"),
    (dict(count=2, seed=1.5), TypeError, "seed"),
])
def test_refuses_bad_parameters(om, kwargs, error, fragment):
    """Concern: learnable built-in dataset, refusals under the exception rule: a wrong kind
    is a TypeError, a value outside the contract's ranges a ValueError naming the argument;
    the oracle refuses the same values."""
    with pytest.raises(error, match=fragment):
        om.SyntheticTextLines(**kwargs)
    if error is ValueError:
        with pytest.raises(ValueError):
            R.SyntheticTextLines(**kwargs)


def test_index_errors(om):
    """§1 (datasets), exception rule: an index out of range is an IndexError."""
    ds = om.SyntheticTextLines(3)
    for index in (3, -1, 1 << 70):
        with pytest.raises(IndexError):
            ds.get_sample(index)


@pytest.mark.parametrize("check", [
    test_api_stubs.test_every_compiled_module_has_a_stub, test_api_stubs.test_stub_names_exist_at_runtime,
    test_api_stubs.test_runtime_classes_and_functions_are_stubbed,
    test_api_stubs.test_runtime_constants_are_stubbed,
    test_api_stubs.test_stub_class_members_exist_at_runtime, test_api_stubs.test_runtime_class_members_are_stubbed,
    test_api_stubs.test_stub_class_bases_and_finality_match_runtime,
    test_api_stubs.test_parameter_names_match_embedded_signatures,
    test_api_stubs.test_defaults_match_embedded_signatures,
], ids=lambda f: f.__name__)
def test_stub_of_the_module(check):
    """Concern: type stubs. ``data/textlines.pyi`` passes every check ``test_api_stubs.py`` makes of
    the other compiled modules (names, members, bases, parameters, defaults)."""
    check("data.textlines")
