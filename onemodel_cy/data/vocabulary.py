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

__all__ = ["BLANK", "decode", "with_blank", "symbols_of", "are_symbols", "check_same"]

BLANK = "<blank>"


def with_blank(symbols) -> tuple:
    """The vocabulary of a dataset whose ids 1, 2, ... are ``symbols``."""
    return (BLANK,) + tuple(symbols)


def symbols_of(vocabulary) -> list:
    """The symbols of ids 1, 2, ...: ``vocabulary`` itself, or without its first entry when
    that is the blank (a dataset's ``vocabulary``), so either form can be passed on."""
    symbols = list(vocabulary)
    return symbols[1:] if symbols and symbols[0] == BLANK else symbols


def are_symbols(symbols) -> bool:
    """Whether ``symbols`` are the symbols of ids 1, 2, ... as a pack records them: a list of
    distinct one-character strings. The one rule of a vocabulary a writer is given and of
    the one a manifest records (``data/packs/format.py`` checks every manifest's by it)."""
    return (isinstance(symbols, list) and all(isinstance(s, str) and len(s) == 1 for s in symbols)
            and len(set(symbols)) == len(symbols))


def check_same(*datasets) -> tuple:
    """The one vocabulary of ``datasets`` (train and test sets, the parts of a dataset
    that combines several); ``ValueError`` naming two that give a symbol different ids, and
    the first id where they differ. Call it wherever datasets meet: a model trained on one
    and tested on another, a dataset of your own over several packs."""
    if not datasets:
        raise TypeError("check_same needs at least one dataset")
    first = datasets[0]
    for other in datasets[1:]:
        a, b = getattr(first, "vocabulary", None), getattr(other, "vocabulary", None)
        if a != b:
            if a is None or b is None:
                where = (f"{first!r} has {'no' if a is None else 'a'} vocabulary, "
                         f"{other!r} {'none' if b is None else 'one'}")
            else:
                t = next((t for t in range(min(len(a), len(b))) if a[t] != b[t]), min(len(a), len(b)))
                where = (f"id {t} is {a[t] if t < len(a) else 'past the end'!r} in {first!r} and "
                         f"{b[t] if t < len(b) else 'past the end'!r} in {other!r}")
            raise ValueError(f"these datasets give symbols different ids: {where}. Write the second pack with "
                             f"the first one's vocabulary (onemodel-cy pack ... --vocabulary-from FIRST)")
    return getattr(first, "vocabulary", None)


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
