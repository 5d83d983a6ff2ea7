"""The ``augment`` and ``augment_function`` ops of the known-answer vectors: the text-line
augmentations of ``docs/contract.md`` (``onemodel_cy.augment``).

Kept beside ``replay.py`` (which registers them) so that the operations' replay, their
generator (``spec_tests/generate_augment_vectors.py``) and their vectors
(``vectors/augment.json``) change together and apart from the other sections. The loader's
batches with an augmentation as its ``transform`` are ``stream`` and ``stream_digest``
cases, replayed by ``replay.py`` with the transform this module builds.
"""
from __future__ import annotations

import importlib

import numpy as np

from onemodel_cy.conformance.codec import augment_image, build_transform, f32_array, f32_hex


def augmentations(api):
    """``api``'s namespace of augmentation constructors: ``api.augment`` when it has one
    (the oracle ``spec_tests/reference.py``), else its ``augment`` subpackage
    (``onemodel_cy.augment``, which ``import onemodel_cy`` does not load)."""
    namespace = getattr(api, "augment", None)
    return namespace if namespace is not None else importlib.import_module(f"{api.__name__}.augment")


def transform(api, spec):
    """The operation an ``augment`` spec describes, built with ``api``'s constructors (a
    refused argument raises their ValueError; one infinite once rounded to float32, as some
    refused cases are, is not also reported as numpy's overflow warning)."""
    with np.errstate(over="ignore"):
        return build_transform(augmentations(api), spec)


def replay_augment(api, inp) -> dict:
    """``op.apply(image, SampleRng(state))``: the new image (all values when the case says
    ``full``, else its hash) and the rng's state after every draw."""
    op = transform(api, inp["transform"])
    rng = api.SampleRng(int(inp["state"]))
    out = op.apply(augment_image(inp["image"]), rng)
    return {"image": f32_array(out, inp.get("full", True)), "state_after": str(rng.state)}


def _functions(api):
    """``(contract_function, contract_normals)``: the compiled kernels' (``augment.kernels``)
    or the oracle's (``reference.augment``)."""
    namespace = augmentations(api)
    if hasattr(namespace, "contract_function"):
        return namespace.contract_function, namespace.contract_normals
    kernels = importlib.import_module(f"{namespace.__name__}.kernels")
    return kernels.contract_function, kernels.contract_normals


def replay_augment_function(api, inp) -> dict:
    """The contract's float32 functions: ``sin``, ``cos`` or ``expneg`` of each ``x`` (float32
    bits), or ``count`` draws of ``normal()`` from ``SampleRng(state)`` and the state after."""
    function, normals = _functions(api)
    if inp["function"] == "normal":
        values, state = normals(int(inp["state"]), int(inp["count"]))
        return {"values": [f32_hex(v) for v in values], "state_after": str(int(state))}
    x = np.array([int(h, 16) for h in inp["x"]], dtype=np.uint32).view(np.float32)
    return {"values": [f32_hex(v) for v in function(inp["function"], x)]}
