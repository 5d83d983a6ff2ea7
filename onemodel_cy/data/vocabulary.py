"""The one vocabulary convention of datasets with text targets (docs/guide.md, "Vocabularies").

A dataset whose targets are text (``SyntheticTextLines``, a ``PackedImageDataset`` written
from text) has ``vocabulary``, a tuple of str indexed by target id: ``vocabulary[t]`` is
the symbol of id ``t``, and id 0 is the CTC blank, ``vocabulary[0] == BLANK``, which no
target holds (``torch.nn.CTCLoss(blank=0)``). ``decode(target, vocabulary)`` (and each
such dataset's ``decode(target)``) gives a target's text.

A pack's manifest records the symbols of ids 1, 2, ... (``docs/packed-format.md``); the
blank is added when the pack is opened, so a pack and the built-in data read alike.
"""
from __future__ import annotations

import numpy as np

__all__ = ["BLANK", "decode", "with_blank", "symbols_of"]

BLANK = "<blank>"


def with_blank(symbols) -> tuple:
    """The vocabulary of a dataset whose ids 1, 2, ... are ``symbols``."""
    return (BLANK,) + tuple(symbols)


def symbols_of(vocabulary) -> list:
    """The symbols of ids 1, 2, ...: ``vocabulary`` itself, or without its first entry when
    that is the blank (a dataset's ``vocabulary``), so either form can be passed on."""
    symbols = list(vocabulary)
    return symbols[1:] if symbols and symbols[0] == BLANK else symbols


def decode(target, vocabulary) -> str:
    """The text of ``target`` (a sequence of target ids) under ``vocabulary`` (blank first).
    ``ValueError`` for an id that is the blank or lies past the vocabulary."""
    ids = np.asarray(target)
    if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise TypeError(f"target must be a 1-D sequence of integer ids, received {target!r}")
    if vocabulary is None:
        raise ValueError("this dataset has no vocabulary (its targets are not text)")
    count = len(vocabulary)
    symbols = []
    for t in ids.tolist():
        if not 1 <= t < count:
            raise ValueError(f"target id {t} is not a symbol: ids 1..{count - 1} are the vocabulary's "
                             f"symbols and 0 is the CTC blank")
        symbols.append(vocabulary[t])
    return "".join(symbols)
