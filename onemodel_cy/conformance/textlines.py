"""The ``textlines`` op of the known-answer vectors: ``SyntheticTextLines`` samples.

Kept beside ``replay.py`` (which registers it) so that the dataset's replay, its
generator (``spec_tests/generate_textlines_vectors.py``) and its vectors
(``vectors/textlines.json``) change together and apart from the other sections.
"""
from __future__ import annotations

from onemodel_cy.conformance.codec import f32_array, from_f64_hex, ints

# The dataset's integer parameters, in constructor order after ``count``; ``noise`` is
# a float64 (bits in hex) and ``seed`` an integer, both also in ``params``.
INT_PARAMS = ("height", "min_length", "max_length", "num_symbols", "scale", "seed")


def textlines_params(params: dict) -> dict:
    """The constructor keywords a vector's ``params`` encode."""
    out = {name: int(params[name]) for name in INT_PARAMS}
    out["noise"] = from_f64_hex(params["noise"])
    return out


def replay_textlines(api, inp) -> dict:
    """``api.SyntheticTextLines(max(indices) + 1, **params)`` at ``indices``: each sample's
    width, target, label and image (sample ``i`` does not depend on the count)."""
    indices = [int(i) for i in inp["indices"]]
    dataset = api.SyntheticTextLines(max(indices) + 1, **textlines_params(inp["params"]))
    full = inp.get("full", True)
    samples = []
    for i in indices:
        s = dataset.get_sample(i)
        samples.append({"i": str(i), "width": int(s.image.shape[2]), "target": ints(s.target),
                        "label": int(s.label), "image": f32_array(s.image, full)})
    return {"samples": samples, "vocabulary": list(dataset.vocabulary)}
