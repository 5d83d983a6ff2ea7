"""The known-answer vectors of the text-line augmentations (``vectors/augment.json``), from the oracle.

``generate_vectors.py`` writes this file with the others (its ``build_augment`` calls
``build_augment(G)`` here with the generator's namespace ``G``); this module holds only
what belongs to ``onemodel_cy.augment``, so that its cases change apart from the other
sections. Like the main generator it computes everything with ``reference.py`` and
``reference_augment.py`` and never imports the compiled package.

What the cases pin (docs/contract.md, "Text-line augmentations"):

* the contract's functions ``sin``, ``cos``, ``expneg`` and ``normal`` at their edges;
* every operation at width 1 and height 1, at the smallest and the largest sizes the file
  can afford (large outputs as their hash), each argument at its bounds, both borders
  (``constant`` with a fill that is not 0), the output width kept to ``[1, 2^20]``,
  ``ResizeHeight``'s ``max_width``, the passes that copy;
* the composition rules: ``RandomApply`` at p = 0 and 1 and with ``u`` equal to ``p``,
  ``OneOf`` with unequal weights, ``u`` on a bound and past the last one, weights that stay
  float64; the preset ``text_lines()`` on whole lines;
* the arguments every operation refuses;
* the loader's batches with the preset as its ``transform`` (``stream``, and a
  ``stream_digest`` under several worker/prefetch settings).
"""
from __future__ import annotations

import hashlib
import math

import numpy as np

import reference as R
import reference_augment as RA

PINS = ["contract:augment"]
FULL = 80          # arrays of at most this many values are written out; larger ones by hash
M64 = R.M64


class Generated:
    """An input image given by ``singles_state``: the ``next_single()`` draws of
    ``SampleRng(state)`` in C order (for images too large to write out)."""

    def __init__(self, shape, state):
        self.shape, self.state = tuple(shape), state

    def array(self):
        return R._singles_bulk(R.SampleRng(self.state), int(np.prod(self.shape))).reshape(self.shape)


def singles(shape, state):
    """A small image of ``next_single()`` draws, written out in the case."""
    return Generated(shape, state).array()


def image_of(rows):
    """A ``[C, H, W]`` float32 image from nested lists."""
    return np.array(rows, dtype=np.float32)


class Builder:
    """Writes the cases, computing every output with the oracle through the codec's decoding
    of the very spec that goes into the case."""

    def __init__(self, G):
        self.G, self.codec, self.cases = G, G.codec, []

    def spec(self, kind, *args):
        return self.codec.transform_spec(kind, *args)

    def _image(self, image):
        if isinstance(image, Generated):
            array = image.array()
            decoded = self.codec.augment_image({"shape": list(image.shape), "singles_state": str(image.state)})
            assert np.array_equal(array.view(np.uint32), decoded.view(np.uint32))
            return {"shape": list(image.shape), "singles_state": str(image.state)}, array
        return self.codec.f32_array(image, True), image

    def run(self, spec, image, state):
        rng = R.SampleRng(state)
        with np.errstate(over="ignore", invalid="ignore"):      # infinities and NaN are inputs of some cases
            out = self.codec.build_transform(RA, spec).apply(image, rng)
        return out, rng.state

    def op(self, name, spec, image, state, pins=()):
        encoded, array = self._image(image)
        out, after = self.run(spec, array, state)
        full = out.size <= FULL
        self.cases.append(self.G.case(name, PINS + list(pins),
                                      {"op": "augment", "transform": spec, "text": self.codec.transform_text(spec),
                                       "image": encoded, "state": str(state), "full": full},
                                      {"image": self.codec.f32_array(out, full), "state_after": str(after)}))
        return out, after

    def refused(self, name, spec):
        try:
            self.codec.build_transform(RA, spec)
        except ValueError:
            pass
        else:
            raise AssertionError(f"the oracle accepted {name}")
        image = image_of([[[0.25, 0.5]]])
        self.cases.append(self.G.case(name, PINS, {"op": "augment", "transform": spec,
                                                   "text": self.codec.transform_text(spec),
                                                   "image": self.codec.f32_array(image, True), "state": "0",
                                                   "full": True}, {"error": "ValueError"}))

    def function(self, name, function, xs):
        x = np.array(xs, dtype=np.float32)
        values = RA.contract_function(function, x)
        self.cases.append(self.G.case(name, PINS, {"op": "augment_function", "function": function,
                                                   "x": [self.codec.f32_hex(v) for v in x]},
                                      {"values": [self.codec.f32_hex(v) for v in values]}))

    def normals(self, name, state, count):
        values, after = RA.contract_normals(state, count)
        self.cases.append(self.G.case(name, PINS, {"op": "augment_function", "function": "normal",
                                                   "state": str(state), "count": count},
                                      {"values": [self.codec.f32_hex(v) for v in values], "state_after": str(after)}))


def _state_drawing_u64(u):
    """The state whose first draw is ``u`` (D1, D2: that draw is ``mix(state)``)."""
    return R.unmix(u)


def _state_drawing_single(u):
    return R.unmix(int(np.float32(u) * (1 << 24)) << 40)


def _first_state(predicate, start=0):
    state = start
    while not predicate(state):
        state += 1
    return state


def _second_uniform(state, r):
    """The second draw of ``SampleRng(state)`` as ``U(-r, r)`` (Affine's shear)."""
    rng = R.SampleRng(state)
    rng.next_single()
    return RA.uniform(rng, -r, r)


def _used(builder, spec, image, state):
    """The leaf operations that ran, in order (the oracle traced, its bytes untouched)."""
    used, saved = [], dict(RA.OPERATIONS)

    def traced(name, fn):
        return lambda *args: (used.append(name), fn(*args))[1]
    try:
        for name, fn in saved.items():
            RA.OPERATIONS[name] = traced(name, fn)
        builder.run(spec, image, state)
    finally:
        RA.OPERATIONS.update(saved)
    return used


# ---------------------------------------------------------------- the functions

def functions(b):
    quarter = float(np.float32(math.pi / 4))
    largest = float(np.float32(45.0) * RA.DEG2RAD)        # |theta| of Affine(rotate=45) at its extreme
    xs = [0.0, -0.0, 1e-30, 1e-40, 1e-4, 0.1, -0.1, 0.5, 0.7, quarter, -quarter, largest, -largest]
    b.function("function_sin", "sin", xs)
    b.function("function_cos", "cos", xs)
    after_87 = float(np.nextafter(np.float32(87), np.float32(100)))
    b.function("function_expneg", "expneg", [0.0, 1e-30, 1e-3, 0.5, 1.0, 2.0, 4.5, 9.0, 20.0, 50.0, 86.99999, 87.0,
                                             after_87, 88.0, 1e30, math.inf, math.nan])
    b.normals("function_normal_state_0", 0, 12)
    b.normals("function_normal_sum_0", _state_drawing_u64(0), 1)
    b.normals("function_normal_sum_262140", _state_drawing_u64(M64), 1)


# ---------------------------------------------------------------- geometric operations

SPECIAL = [[[3e38, -3e38, 1.0, -0.0, 0.5, -3e38], [0.25, math.inf, -0.0, math.nan, 2.0, 3e38]]]


def geometric(b):
    T = b.spec
    b.op("resize_height_1x1_up_to_4", T("resize_height", 4, None), image_of([[[0.75]]]), 0)
    b.op("resize_height_down_to_1_width_kept_to_1", T("resize_height", 1, None), singles((1, 64, 1), 1), 0)
    b.op("resize_height_rounds_half_up", T("resize_height", 3, None), singles((1, 2, 3), 2), 0)
    b.op("resize_height_width_unchanged_rows_copied", T("resize_height", 4, None), singles((1, 3, 1), 3), 0)
    b.op("resize_height_max_width_squeezes", T("resize_height", 4, 5), Generated((1, 2, 100), 4), 0)
    b.op("resize_height_max_width_1_three_channels", T("resize_height", 5, 1), singles((3, 3, 7), 5), 0)
    b.op("resize_height_same_height_columns_copied", T("resize_height", 2, 4), image_of(SPECIAL), 0)
    b.op("resize_height_same_size_copies", T("resize_height", 2, None), image_of(SPECIAL), 0)
    b.op("resize_height_three_channels", T("resize_height", 6, None), singles((3, 4, 5), 6), 0)
    b.op("resize_height_to_65536", T("resize_height", 1 << 16, 2), singles((1, 3, 2), 7), 0)

    b.op("stretch_width_1_by_1_64th_kept_to_1", T("stretch", (1 / 64, 1 / 64)), singles((1, 3, 1), 8), 0)
    b.op("stretch_half_rounds_up", T("stretch", (0.5, 0.5)), singles((1, 2, 3), 9), 0)
    b.op("stretch_scale_1_copies", T("stretch", (1.0, 1.0)), image_of(SPECIAL), 0)
    b.op("stretch_random_scale", T("stretch", (0.8, 1.2)), singles((1, 4, 9), 10), 11)
    b.op("stretch_height_1_three_channels", T("stretch", (0.8, 1.2)), singles((3, 1, 7), 12), 13)
    b.op("stretch_1x1", T("stretch", (0.8, 1.2)), image_of([[[0.5]]]), 99)
    b.op("stretch_height_1024", T("stretch", (0.8, 1.2)), Generated((1, 1024, 3), 100), 101)
    b.op("stretch_by_64", T("stretch", (64.0, 64.0)), singles((1, 2, 5), 14), 0)
    b.op("stretch_to_exactly_2^20", T("stretch", (64.0, 64.0)), Generated((1, 1, 1 << 14), 15), 0)
    b.op("stretch_past_2^20_kept_to_2^20", T("stretch", (64.0, 64.0)), Generated((1, 1, (1 << 14) + 1), 16), 0)

    b.op("affine_identity", T("affine", 0.0, 0.0, (1.0, 1.0), 0.0, "replicate", 0.0), singles((1, 3, 4), 17), 0)
    extremes = (45.0, 1.0, (1 / 16, 16.0), 4096.0)
    b.op("affine_every_argument_at_its_bound_replicate", T("affine", *extremes, "replicate", 0.0),
         singles((1, 5, 7), 18), 19)
    b.op("affine_every_argument_at_its_bound_constant_fill", T("affine", *extremes, "constant", -2.5),
         singles((1, 5, 7), 18), 19)
    b.op("affine_small_scale_shift_constant_fill", T("affine", 10.0, 0.5, (1 / 16, 2.0), 2.0, "constant", 0.75),
         singles((1, 5, 7), 20), 21)
    b.op("affine_rotation_45_only", T("affine", 45.0, 0.0, (1.0, 1.0), 0.0, "replicate", 0.0),
         singles((1, 6, 6), 22), _first_state(lambda s: abs(float(RA.uniform(R.SampleRng(s), -45, 45))) > 44))
    b.op("affine_width_1_height_1_constant_fill", T("affine", 2.0, 0.3, (0.9, 1.05), 1.5, "constant", 0.25),
         image_of([[[0.5]]]), 23)
    b.op("affine_default_three_channels", T("affine", 2.0, 0.3, (0.9, 1.05), 1.5, "replicate", 0.0),
         singles((3, 4, 6), 24), 25)
    b.op("affine_height_256", T("affine", 10.0, 0.5, (0.9, 1.05), 1.5, "replicate", 0.0), Generated((1, 256, 3), 26),
         27)
    wide = (1 << 20) - 1
    b.op("affine_canvas_past_2^20_kept_to_2^20", T("affine", 0.0, 1.0, (1.0, 1.0), 0.0, "replicate", 0.0),
         Generated((1, 2, wide), 28), _first_state(lambda s: abs(float(_second_uniform(s, 1.0))) > 0.5))

    b.op("perspective_jitter_0", T("perspective", 0.0, "replicate", 0.0), singles((1, 3, 5), 29), 30)
    b.op("perspective_jitter_0.5_replicate", T("perspective", 0.5, "replicate", 0.0), singles((1, 6, 8), 31), 32)
    b.op("perspective_jitter_0.5_constant_fill", T("perspective", 0.5, "constant", 1.5), singles((2, 5, 7), 33), 34)
    b.op("perspective_width_1_height_1_constant_fill", T("perspective", 0.5, "constant", -1.0),
         image_of([[[0.5]]]), 35)
    b.op("perspective_default", T("perspective", 0.08, "replicate", 0.0), singles((1, 4, 12), 36), 37)
    b.op("perspective_height_512", T("perspective", 0.08, "replicate", 0.0), Generated((1, 512, 2), 38), 39)

    b.op("elastic_magnitude_0_copies_the_pixels", T("elastic", (0.0, 0.0), 3, "replicate", 0.0),
         singles((1, 4, 5), 40), 41)
    b.op("elastic_cell_1_magnitude_64", T("elastic", (64.0, 64.0), 1, "replicate", 0.0), singles((1, 4, 5), 42), 43)
    b.op("elastic_cell_4096_constant_fill", T("elastic", (1.0, 2.5), 4096, "constant", 0.5), singles((1, 5, 6), 44),
         45)
    b.op("elastic_cell_1_constant_fill", T("elastic", (0.0, 3.0), 1, "constant", -0.5), singles((1, 3, 4), 46), 47)
    b.op("elastic_width_1_height_1_constant_fill", T("elastic", (1.0, 2.5), 8, "constant", 2.0),
         image_of([[[0.5]]]), 48)
    b.op("elastic_default_three_channels", T("elastic", (1.0, 2.5), 8, "replicate", 0.0), singles((3, 6, 9), 49), 50)
    b.op("elastic_height_256", T("elastic", (1.0, 2.5), 8, "replicate", 0.0), Generated((1, 256, 4), 51), 52)


# ---------------------------------------------------------------- morphology and blur

TIES = [[[0.0, -0.0, 0.5, math.nan], [-0.0, 0.0, math.nan, 0.5], [0.25, math.nan, -0.0, 0.0]]]


def morphology(b):
    T = b.spec
    b.op("erode_2x2_ties_and_nan", T("erode", (2, 2)), image_of(TIES), 0)
    b.op("dilate_2x2_ties_and_nan", T("dilate", (2, 2)), image_of(TIES), 0)
    b.op("erode_1x1_copies", T("erode", (1, 1)), singles((1, 3, 4), 53), 0)
    b.op("dilate_31x31_larger_than_the_image", T("dilate", (31, 31)), singles((1, 3, 4), 54), 0)
    b.op("erode_3x1", T("erode", (3, 1)), singles((2, 4, 6), 55), 0)
    b.op("dilate_1x4", T("dilate", (1, 4)), singles((1, 6, 4), 56), 0)
    b.op("erode_31x31_width_1_height_1", T("erode", (31, 31)), image_of([[[0.5]]]), 0)
    b.op("dilate_2x3_width_1_height_1", T("dilate", (2, 3)), image_of([[[0.5]]]), 0)
    b.op("dilate_2x2_height_1024", T("dilate", (2, 2)), Generated((1, 1024, 2), 57), 0)
    b.op("erode_3x3_height_1024", T("erode", (3, 3)), Generated((1, 1024, 2), 102), 0)

    b.op("blur_sigma_0_radius_0", T("gaussian_blur", (0.0, 0.0)), image_of(TIES), 0)
    third = float(np.float32(1 / 3))       # f32(3 * sigma) is 1: the radius is 1, not ceil(1.0000000298) = 2
    assert float(np.float32(3) * np.float32(third)) == 1.0 and math.ceil(3 * third) == 2
    b.op("blur_sigma_third_radius_1", T("gaussian_blur", (third, third)), singles((1, 3, 5), 58), 0)
    b.op("blur_sigma_1_radius_3", T("gaussian_blur", (1.0, 1.0)), singles((1, 4, 9), 59), 0)
    b.op("blur_sigma_0.001_weights_past_87", T("gaussian_blur", (0.001, 0.001)), singles((1, 3, 4), 60), 0)
    b.op("blur_sigma_8_radius_24", T("gaussian_blur", (8.0, 8.0)), singles((1, 3, 5), 61), 0)
    b.op("blur_width_1_height_1", T("gaussian_blur", (0.3, 1.0)), image_of([[[0.5]]]), 62)
    b.op("blur_random_sigma_three_channels", T("gaussian_blur", (0.3, 1.0)), singles((3, 4, 7), 63), 64)
    b.op("blur_sigma_8_height_1024", T("gaussian_blur", (8.0, 8.0)), Generated((1, 1024, 2), 65), 0)


# ---------------------------------------------------------------- photometric operations

SIGNED = [[[-0.75, 0.0, -0.0, 0.5], [1.0, 2.5, -3.0, 0.125], [math.nan, 0.25, 1e-3, -1e-3]]]


def photometric(b):
    T = b.spec
    b.op("brightness_contrast_at_the_bounds", T("brightness_contrast", (0.0, 1e6), (-1e6, 1e6)), image_of(SIGNED), 66)
    b.op("brightness_contrast_gain_0", T("brightness_contrast", (0.0, 0.0), (0.25, 0.25)), image_of(SIGNED), 67)
    b.op("brightness_contrast_default", T("brightness_contrast", (0.7, 1.3), (-0.3, 0.3)), singles((2, 3, 4), 68), 69)
    b.op("gaussian_noise_sigma_1_on_zeros_is_normal", T("gaussian_noise", (1.0, 1.0)),
         np.zeros((1, 4, 4), np.float32), 70)
    b.op("gaussian_noise_at_the_bounds", T("gaussian_noise", (0.0, 1e6)), singles((2, 3, 4), 71), 72)
    b.op("gaussian_noise_sigma_0_still_draws", T("gaussian_noise", (0.0, 0.0)), image_of(SIGNED), 73)
    b.op("gaussian_noise_height_1024", T("gaussian_noise", (0.0, 0.15)), Generated((1, 1024, 1), 74), 75)
    b.op("speckle_noise_at_the_bounds", T("speckle_noise", (0.0, 1e6)), image_of(SIGNED), 76)
    b.op("speckle_noise_default", T("speckle_noise", (0.0, 0.15)), singles((1, 4, 6), 77), 78)
    b.op("impulse_noise_amount_1_custom_low_high", T("impulse_noise", (1.0, 1.0), -1.0, 2.0), singles((1, 4, 5), 79),
         80)
    b.op("impulse_noise_amount_0_still_draws", T("impulse_noise", (0.0, 0.0), 0.0, 1.0), singles((1, 3, 4), 81), 82)
    b.op("impulse_noise_random_amount", T("impulse_noise", (0.0, 1.0), 0.0, 1.0), singles((2, 4, 5), 83), 84)
    b.op("invert_default", T("invert", 0.0, 1.0), image_of(SIGNED), 85)
    b.op("invert_custom_range", T("invert", -1.0, 3.0), image_of(SIGNED), 86)
    for k, (kind, spec) in enumerate([
            ("brightness_contrast", T("brightness_contrast", (0.7, 1.3), (-0.3, 0.3))),
            ("gaussian_noise", T("gaussian_noise", (0.0, 0.15))), ("speckle_noise", T("speckle_noise", (0.0, 0.15))),
            ("impulse_noise", T("impulse_noise", (0.0, 0.5), -1.0, 2.0)), ("invert", T("invert", 0.0, 1.0))]):
        b.op(f"{kind}_1x1", spec, image_of([[[0.5]]]), 110 + k)
        if kind != "gaussian_noise":
            b.op(f"{kind}_height_1024", spec, Generated((1, 1024, 1), 120 + k), 130 + k)


# ---------------------------------------------------------------- composition and the preset

def composition(b):
    T = b.spec
    invert = T("invert", 0.0, 1.0)
    small = singles((1, 2, 3), 87)
    b.op("random_apply_p_0", T("random_apply", invert, 0.0), small, 88)
    b.op("random_apply_p_1", T("random_apply", invert, 1.0), small, 88)
    u = float(R.SampleRng(_state_drawing_single(0.625)).next_single())
    state = _state_drawing_single(0.625)
    assert u == 0.625
    b.op("random_apply_u_equal_to_p_not_applied", T("random_apply", invert, u), small, state)
    assert float(np.float32(u + 2.0 ** -40)) == u
    b.op("random_apply_p_rounded_to_float32_not_applied", T("random_apply", invert, u + 2.0 ** -40), small, state)
    above = float(np.nextafter(np.float32(u), np.float32(1)))
    b.op("random_apply_u_just_below_p_applied", T("random_apply", invert, above), small, state)

    three = [invert, T("brightness_contrast", (0.5, 1.5), (-0.2, 0.2)), T("gaussian_noise", (0.1, 0.2))]
    weights = [1.0, 2.0, 5.0]                  # bounds 1/8, 3/8, 1
    for k, u in enumerate((0.0625, 0.25, 0.75)):
        b.op(f"one_of_unequal_weights_picks_op_{k}", T("one_of", three, weights), small, R.state_drawing_double(u),
             pins=["D10"])
    assert R.SampleRng(R.state_drawing_double(0.25)).next_double() == 0.25
    b.op("one_of_u_on_a_bound_takes_the_next", T("one_of", three[:2], [1.0, 3.0]), small, R.state_drawing_double(0.25),
         pins=["D10"])
    # Weights 0.1 and 0.3: the bounds, float64 left to right, are 0.25 and 1 - 2^-53, so the
    # largest next_double exceeds none of them and the last operation is taken.
    bounds, total, c = [], 0.0, 0.0
    for w in (0.1, 0.3):
        total += w
    for w in (0.1, 0.3):
        c += w / total
        bounds.append(c)
    top = 1.0 - 2.0 ** -53
    assert bounds == [0.25, top]
    b.op("one_of_past_the_last_bound_takes_the_last", T("one_of", three[1:], [0.1, 0.3]), small,
         R.state_drawing_double(top), pins=["D10"])
    # float64 weights: 0.1 / 1.0 is the first bound; float32-rounded weights would put it at
    # 0.10000000134..., above this u.
    u = math.ceil(0.1 * 2.0 ** 53) / 2.0 ** 53          # the first next_double value at or above 0.1
    f32_weights = [float(np.float32(w)) for w in (0.1, 0.2, 0.7)]
    assert 0.1 <= u < f32_weights[0] / sum(f32_weights)
    b.op("one_of_weights_stay_float64", T("one_of", three, [0.1, 0.2, 0.7]), small, R.state_drawing_double(u),
         pins=["D10"])
    b.op("compose_empty_draws_nothing", T("compose", []), small, 89)
    chain = T("compose", [T("stretch", (0.8, 1.2)), T("affine", 2.0, 0.3, (0.9, 1.05), 1.5, "constant", 0.5),
                          T("gaussian_blur", (0.3, 1.0)), T("erode", (2, 1)), T("speckle_noise", (0.0, 0.1))])
    b.op("compose_shapes_change_between_operations", chain, singles((1, 5, 8), 90), 91)
    nested = T("random_apply", T("one_of", [T("compose", [T("invert", 0.0, 1.0), T("dilate", (1, 2))]),
                                            T("elastic", (0.5, 1.0), 2, "replicate", 0.0)], [2.0, 1.0]), 0.9)
    b.op("random_apply_of_one_of_of_compose", nested, singles((1, 4, 5), 92), 93)


def preset(b):
    """``text_lines()`` on whole lines, at states chosen so that every branch runs somewhere."""
    spec = preset_spec(b)
    line = Generated((1, 32, 64), 94)
    wanted = [{"stretch", "elastic", "dilate", "gaussian_noise"}, {"affine", "perspective", "erode", "gaussian_blur"},
              {"stretch", "affine", "brightness_contrast", "gaussian_noise", "gaussian_blur"}, set()]
    seen, state, pixels = [], 100, line.array()

    def covers(want, s):
        used = set(_used(b, spec, pixels, s))
        return used >= want if want else not used
    for want in wanted:
        state = _first_state(lambda s: covers(want, s), state)
        seen.append(state)
        state += 1
    for k, state in enumerate(seen):
        b.op(f"text_lines_on_a_line_{k}", spec, line, state)
    b.op("text_lines_width_1", spec, image_of([[[0.5]] * 3]), 1000)
    b.op("text_lines_height_1", spec, singles((1, 1, 40), 95), 1001)


def preset_spec(b):
    """The preset as the contract writes it, a spec of built-ins."""
    T = b.spec
    spec = T("compose", [
        T("random_apply", T("stretch", (0.8, 1.2)), 0.5),
        T("random_apply", T("affine", 2.0, 0.3, (0.9, 1.05), 1.5, "replicate", 0.0), 0.75),
        T("random_apply", T("one_of", [T("elastic", (1.0, 2.5), 8, "replicate", 0.0),
                                       T("perspective", 0.08, "replicate", 0.0)], [1.0, 1.0]), 0.5),
        T("random_apply", T("one_of", [T("erode", (2, 2)), T("dilate", (2, 2))], [1.0, 1.0]), 0.3),
        T("random_apply", T("gaussian_blur", (0.3, 1.0)), 0.3),
        T("random_apply", T("brightness_contrast", (0.7, 1.3), (-0.3, 0.3)), 0.5),
        T("random_apply", T("gaussian_noise", (0.0, 0.15)), 0.5)])
    line = singles((1, 6, 11), 99)
    for state in range(8):       # the same operation as the oracle's own description of the preset
        assert np.array_equal(b.run(spec, line, state)[0].view(np.uint32),
                              RA.apply(RA.text_lines(), line, R.SampleRng(state)).view(np.uint32))
    return spec


# ---------------------------------------------------------------- refused arguments

def refused(b):
    T = b.spec
    invert = T("invert", 0.0, 1.0)
    for name, spec in [
        ("random_apply_p_1.5", T("random_apply", invert, 1.5)),
        ("random_apply_p_nan", T("random_apply", invert, math.nan)),
        ("one_of_no_operation", T("one_of", [], [])),
        ("one_of_weight_0", T("one_of", [invert, invert], [1.0, 0.0])),
        ("one_of_fewer_weights", T("one_of", [invert, invert], [1.0])),
        ("resize_height_0", T("resize_height", 0, None)),
        ("resize_height_65537", T("resize_height", (1 << 16) + 1, None)),
        ("resize_height_max_width_0", T("resize_height", 4, 0)),
        ("resize_height_max_width_past_2^20", T("resize_height", 4, (1 << 20) + 1)),
        ("stretch_scale_below_1_64th", T("stretch", (0.015, 1.0))),
        ("stretch_scale_65", T("stretch", (1.0, 65.0))),
        ("stretch_low_above_high", T("stretch", (1.2, 0.8))),
        ("affine_rotate_45.00001", T("affine", 45.00001, 0.3, (0.9, 1.05), 1.5, "replicate", 0.0)),
        ("affine_shear_1.5", T("affine", 2.0, 1.5, (0.9, 1.05), 1.5, "replicate", 0.0)),
        ("affine_scale_16.5", T("affine", 2.0, 0.3, (0.9, 16.5), 1.5, "replicate", 0.0)),
        ("affine_shift_4097", T("affine", 2.0, 0.3, (0.9, 1.05), 4097.0, "replicate", 0.0)),
        ("affine_border_wrap", T("affine", 2.0, 0.3, (0.9, 1.05), 1.5, "wrap", 0.0)),
        ("affine_fill_infinite_in_float32", T("affine", 2.0, 0.3, (0.9, 1.05), 1.5, "constant", 1e39)),
        ("perspective_jitter_0.6", T("perspective", 0.6, "replicate", 0.0)),
        ("elastic_magnitude_65", T("elastic", (1.0, 65.0), 8, "replicate", 0.0)),
        ("elastic_cell_0", T("elastic", (1.0, 2.5), 0, "replicate", 0.0)),
        ("elastic_cell_4097", T("elastic", (1.0, 2.5), 4097, "replicate", 0.0)),
        ("erode_size_0", T("erode", (0, 2))),
        ("dilate_size_32", T("dilate", (2, 32))),
        ("blur_sigma_negative", T("gaussian_blur", (-0.1, 1.0))),
        ("blur_sigma_8.1", T("gaussian_blur", (0.3, 8.1))),
        ("brightness_contrast_gain_negative", T("brightness_contrast", (-1.0, 1.0), (0.0, 0.0))),
        ("brightness_contrast_offset_2e6", T("brightness_contrast", (1.0, 1.0), (0.0, 2e6))),
        ("gaussian_noise_sigma_nan", T("gaussian_noise", (0.0, math.nan))),
        ("speckle_noise_sigma_infinite_in_float32", T("speckle_noise", (0.0, 1e39))),
        ("impulse_noise_amount_1.5", T("impulse_noise", (0.0, 1.5), 0.0, 1.0)),
        ("impulse_noise_high_infinite", T("impulse_noise", (0.0, 0.5), 0.0, math.inf)),
        ("invert_sum_infinite_in_float32", T("invert", 3e38, 3e38)),
    ]:
        b.refused(f"refuses_{name}", spec)
    # At a bound once rounded to float32: accepted.
    b.op("accepts_rotate_45.0000001_rounding_to_45", T("affine", 45.0000001, 0.0, (1.0, 1.0), 0.0, "replicate", 0.0),
         singles((1, 3, 3), 96), 97)
    b.op("accepts_sigma_8.0000001_rounding_to_8", T("gaussian_blur", (8.0000001, 8.0000001)), singles((1, 2, 3), 98),
         0)


# ---------------------------------------------------------------- the loader's batches

def streams(b):
    """The preset as the loader's ``transform`` (stream 0, D17): each rank's batch at global
    steps, and one stream's digest under several worker/prefetch settings."""
    G = b.G
    import vector_additions as V
    ds = G._synth_spec(24, 8, 6, 24, 1, 3)
    preset = {"kind": "augment", "op": preset_spec(b), "text": "text_lines()"}
    loader = {"seed": "9", "width_multiple": "4", "pad_value": G.F64(0.0), "augmentation": None, "transform": preset}
    noisy = dict(loader, seed="10", width_multiple="1", pad_value=G.F64(-1.0), augmentation=G._noise_spec(0.05))
    shuffled = G._shuf(24, 4, 2, False)
    pins = ["§1", "D14", "D17"]
    cases = [
        V._stream_case(G, "text_lines_transform_world_size_1", pins, ds, shuffled, loader, 1, list(range(8)) + [40]),
        V._stream_case(G, "text_lines_transform_world_size_2", pins, ds, shuffled, loader, 2, [3, 0, 13, 1000001]),
        V._stream_case(G, "text_lines_transform_and_noise_world_size_2", pins, ds, G._seq(24, 6, False), noisy, 2,
                       [0, 1, 5, 9]),
    ]
    resized = {"kind": "augment", "text": "Compose([ResizeHeight(12, 40), text_lines()])",
               "op": b.spec("compose", [b.spec("resize_height", 12, 40), preset_spec(b)])}
    cases.append(V._stream_case(G, "resize_height_then_text_lines_world_size_1", pins, ds, shuffled,
                                dict(loader, transform=resized), 1, [0, 1, 2, 7]))
    inp = {"op": "stream_digest", "dataset": ds, "sampler": shuffled, "loader": loader, "world_size": "1",
           "start_g": "0", "stop_g": "12", "harness": {"workers": ["0", "2"], "prefetch": ["1", "4"]}}
    get = G._synth_from_spec(ds)
    steps, whole = [], hashlib.sha256()
    for g in range(12):
        step = b.codec.batch_digest(V._reference_batch(G, inp, get, g, 0))
        steps.append(step.hex())
        whole.update(step)
    cases.append(G.case("text_lines_transform_digest", pins, inp,
                        {"steps_per_epoch": G.S(6), "step_sha256": steps, "sha256": whole.hexdigest()}))
    b.cases += cases


def build_augment(G) -> dict:
    """The document of ``augment.json``."""
    b = Builder(G)
    functions(b)
    geometric(b)
    morphology(b)
    photometric(b)
    composition(b)
    preset(b)
    refused(b)
    streams(b)
    return {"section": "contract", "cases": b.cases}
