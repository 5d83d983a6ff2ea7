"""The one vocabulary convention of datasets with text targets, and its codec, ``Vocabulary``
(docs/guide.md, "Vocabularies").

Target ids are small integers, one per character of a text. Id ``BLANK_ID`` (0) is the
CTC blank: no target holds it, a model's class 0 is it (``torch.nn.CTCLoss(blank=BLANK_ID)``),
and ``vocabulary[BLANK_ID] == BLANK`` (``"<blank>"``). Ids 1, 2, ... are the symbols, each one
character. This module is the only place that says so; everything else reads ``BLANK_ID``.

A dataset whose targets are text (``SyntheticTextLines``, a ``PackedImageDataset`` written
from text) has ``vocabulary``, a ``Vocabulary``: a tuple indexed by target id
(``vocabulary[t]`` is the symbol of id ``t``, ``len(vocabulary)`` the number of classes,
blank included) that encodes a text into ids (``encode``) and decodes ids into a text
(``decode``). The pack writer encodes every text with it, ``show`` writes targets through
it, and ``decode(target, vocabulary)`` (and each such dataset's ``decode(target)``) gives a
target's text.

A pack's manifest records the symbols of ids 1, 2, ... (``docs/packed-format.md``); the
blank is added when the pack is opened, so a pack and the built-in data read alike.
"""
from __future__ import annotations

import numpy as np

__all__ = ["BLANK", "BLANK_ID", "Vocabulary", "decode", "with_blank", "symbols_of", "are_symbols", "check_same"]

BLANK = "<blank>"
BLANK_ID = 0


def with_blank(symbols) -> Vocabulary:
    """The vocabulary of a dataset whose ids 1, 2, ... are ``symbols``."""
    return Vocabulary(symbols)


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
    """The text of ``target`` (a sequence of target ids) under ``vocabulary`` (blank first:
    a dataset's ``vocabulary``). ``ValueError`` for an id that is the blank or lies past the
    vocabulary."""
    if vocabulary is None:
        target_ids(target)
        raise ValueError("this dataset has no vocabulary (its targets are not text)")
    return text_of(target, vocabulary, strict=True)


def target_ids(target) -> list:
    """``target`` as a list of ints; ``TypeError`` unless it is a 1-D sequence of integers."""
    ids = np.asarray(target)
    if ids.ndim != 1 or not (ids.size == 0 or np.issubdtype(ids.dtype, np.integer)):
        raise TypeError(f"target must be a 1-D sequence of integer ids, received {target!r}")
    return ids.tolist()


def text_of(target, vocabulary, strict: bool) -> str:
    """The one decoding of ids, for ``decode`` and ``Vocabulary.decode``: each id's symbol;
    an id that is no symbol (the blank, or past the vocabulary) is a ``ValueError`` when
    ``strict``, else written ``<id>`` (``show`` draws any target)."""
    count = len(vocabulary)
    symbols = []
    for t in target_ids(target):
        if BLANK_ID < t < count:
            symbols.append(vocabulary[t])
        elif strict:
            raise ValueError(f"target id {t} is not a symbol: ids 1..{count - 1} are the vocabulary's "
                             f"symbols and {BLANK_ID} is the CTC blank")
        else:
            symbols.append(f"<{t}>")
    return "".join(symbols)


class Vocabulary(tuple):
    """Text to target ids and back: the codec of every dataset with text targets.

    ``Vocabulary("0123456789")`` gives the characters of the text ids 1, 2, ... in order;
    id ``BLANK_ID`` (0) is the CTC blank (``vocabulary[0] == BLANK``). A sequence of
    one-character strings is taken too, with or without the blank in front (a dataset's
    ``vocabulary``, a pack manifest's list). ``Vocabulary.from_texts(texts)`` builds the one
    the pack writer builds when it is given none: every character of the non-empty texts,
    sorted by code point.

    It is a tuple indexed by id (``len(vocabulary)`` is the number of a model's classes,
    blank included) and compares equal to the plain tuple of the same symbols, so it goes
    wherever a dataset's ``vocabulary`` went before. ``encode(text)`` gives the ids of a
    text (int32), ``decode(ids)`` the text of ids; ``symbols`` the characters of ids 1, 2, ...
    as one string (what ``--vocabulary`` takes and a checkpoint can keep).
    """
    def __new__(cls, symbols=()):
        if isinstance(symbols, Vocabulary):
            return symbols
        if isinstance(symbols, str):
            listed = list(symbols)
        elif isinstance(symbols, (bytes, bytearray)) or not hasattr(symbols, "__iter__"):
            raise TypeError(f"a vocabulary is a str of its symbols or a sequence of one-character strings, "
                            f"received {type(symbols).__name__} {symbols!r}")
        else:
            listed = symbols_of(symbols)
        if not are_symbols(listed):
            raise ValueError(f"a vocabulary's symbols must be distinct one-character strings (ids 1, 2, ... in "
                             f"order; id {BLANK_ID} is the CTC blank), received {symbols!r}")
        return super().__new__(cls, (BLANK, *listed))

    @classmethod
    def from_texts(cls, texts) -> Vocabulary:
        """Every character of the non-empty ``texts`` (blank-only texts count as empty),
        sorted by code point: the writer's vocabulary when it is given none."""
        characters = set()
        for position, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(f"text {position} is not a str: {text!r} of type {type(text).__name__}")
            if text.strip():
                characters.update(text)
        return cls(sorted(characters))

    @property
    def symbols(self) -> str:
        """The characters of ids 1, 2, ... in order."""
        return "".join(self[1:])

    def unknown(self, text: str) -> str:
        """The characters of ``text`` that are no symbol, sorted, each once ("" if none)."""
        return "".join(sorted(set(text) - set(self[1:])))

    def encode(self, text: str) -> np.ndarray:
        """The target ids of ``text``, one per character, as int32. ``TypeError`` for
        anything but a str; ``ValueError`` naming the characters that are no symbol."""
        if not isinstance(text, str):
            raise TypeError(f"encode takes a str, received {type(text).__name__} {text!r}")
        ids = self.__dict__.get("_ids")
        if ids is None:         # built once: a writer encodes every line of a pack with it
            ids = self.__dict__["_ids"] = {symbol: t for t, symbol in enumerate(self) if t != BLANK_ID}
        try:
            return np.array([ids[character] for character in text], dtype=np.int32)
        except KeyError:
            shown = text if len(text) <= 60 else text[:57] + "..."
            raise ValueError(f"text {shown!r} has characters outside the vocabulary: {self.unknown(text)!r} "
                             f"(its symbols: {self.symbols[:80]!r})") from None

    def decode(self, ids, *, strict: bool = True) -> str:
        """The text of ``ids`` (a 1-D sequence of target ids). An id that is the blank or
        lies past the vocabulary is a ``ValueError``; with ``strict=False`` it is written
        ``<id>`` instead (to show any target, a model's raw output included)."""
        return text_of(ids, self, strict)

    def __repr__(self) -> str:
        return f"Vocabulary({self.symbols!r})"

    def __reduce__(self):
        return Vocabulary, (self.symbols,)
