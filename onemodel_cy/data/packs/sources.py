"""The pack writer's sources, each a stream of checked ``(image, target, label, key)``: a
folder with a labels file, the containers of ``containers.py`` (LMDB, Parquet, WebDataset
tars: their records decoded and fitted here, by the folder's code), an iterable, a dataset.

Each returns the stream (a generator) and the list of skipped ``(item, reason)`` pairs,
which fills while the stream is consumed. Values that cannot be packed (an image file
Pillow cannot read, an empty text, a zero-sized image, a label outside the int32 range)
are skipped and reported; the wrong kind of object is a TypeError naming the item, by
the rule of ``Sample`` (a float64 image, a target that is not integers, a label that is a
bool or a float, a key that is not a str), and a key that UTF-8 cannot encode (a lone
surrogate) a ValueError. A labels file naming a file that does not exist, or that is not
UTF-8, is a ``PackError`` naming its line before anything is decoded.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import io
import operator
import os
import re

import numpy as np

from onemodel_cy.data.packs.format import INT32_END, PackError
from onemodel_cy.data.vocabulary import Vocabulary

MODES = ("L", "RGB")
BOM = b"\xef\xbb\xbf"
EMPTY = "empty label"


# ---------------------------------------------------------------- a folder and a labels file

def read_labels(folder: str, labels: str) -> list:
    """``(position, name, path, text)`` per non-blank line of ``labels``: ``name<TAB>text``,
    split at the first TAB only (a file name may hold spaces, a text spaces and TABs). A
    line without a TAB is refused, naming the file and the line: guessing at a space would
    split ``my scan.png<space>text`` at the wrong place without a word. Every named file
    must exist."""
    entries = []
    for number, line in label_lines(labels):
        if not line.strip():
            continue
        if "\t" not in line:
            shown = line if len(line) <= 60 else line[:57] + "..."
            raise PackError(f"{labels}, line {number}: no TAB between the file name and the text in {shown!r}; "
                            f"each line is 'file name<TAB>text'")
        name, _, text = line.partition("\t")
        name = name.strip()
        path = os.path.join(folder, name)
        if not os.path.isfile(path):
            raise PackError(f"{labels}, line {number}: names {name!r}, but {path} is not a file")
        entries.append((number - 1, name, path, text))
    return entries


def label_lines(labels: str):
    """``(number, text)`` per line of the file ``labels``, split as text mode splits (a
    newline, a carriage return or both end a line) but decoded line by line, so a line
    that is not UTF-8 is named (a text-mode read reports only a byte offset in a chunk).
    A UTF-8 byte order mark at the very start of the file (Windows editors write one) is
    not part of the first line; one anywhere else is text, as before."""
    number = 0
    with open(labels, "rb") as f:
        for raw in f:
            if number == 0 and raw.startswith(BOM):
                raw = raw[len(BOM):]
            body = raw[:-2] if raw.endswith(b"\r\n") else raw.rstrip(b"\n")
            for part in body.split(b"\r"):     # 0x0D is never inside a UTF-8 sequence
                number += 1
                try:
                    yield number, part.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise PackError(f"{labels}, line {number}: not UTF-8 text (byte {part[error.start]:#04x} "
                                    f"at column {error.start + 1}); a labels file is UTF-8") from None


def vocabulary_for(vocabulary, texts) -> Vocabulary:
    """The ``Vocabulary`` a pack's texts are encoded with: the one given (its symbols as a
    str, a list, or a dataset's ``vocabulary``, blank first), or else the one built from
    ``texts`` (every character of the non-empty ones, sorted: ``Vocabulary.from_texts``)."""
    return Vocabulary.from_texts(texts) if vocabulary is None else Vocabulary(vocabulary)


# ---------------------------------------------------------------- fitting a line (one policy)

DEFAULT_HEIGHT, DEFAULT_MODE = 32, "L"        # an image decoded from a file, when not given
TOO_WIDE = ("downscale", "skip")


@dataclasses.dataclass(frozen=True)
class Fit:
    """How every line is fitted, whatever its source (docs/guide.md, "Fitting lines to a
    height"; ``fit_for`` makes one from ``pack``'s arguments). In this order:

    1. ``mode``: an 8-bit image is converted by Pillow's ``convert``: a colour one to grey
       for ``"L"`` (ITU-R 601-2 luma), a grey one repeated in three channels for ``"RGB"``;
       alpha is dropped, a palette expanded. None is ``"L"``. A float32 image keeps its
       channels (a mode given for it is refused).
    2. ``height``: a line of another height is resized bilinearly to ``height`` rows, its
       width scaled by ``height / H`` and rounded half up (at least 1): the aspect ratio is
       kept. None: an array keeps its own height.
    3. ``max_width``: a line wider than this once fitted is, by ``too_wide``, either
       narrowed to ``max_width`` in the same resize (``"downscale"``: its height kept, so
       that line's aspect is not), or not packed and listed in the report (``"skip"``).

    Images decoded from a file (a folder, a container) are always fitted, to 32 rows of
    grey by default; arrays (an iterable, a dataset) only when one of the three is given
    (else they are stored as they are).
    """
    height: int | None = None
    mode: str | None = None
    max_width: int | None = None
    too_wide: str = "downscale"

    @property
    def fits_arrays(self) -> bool:
        return (self.height, self.mode, self.max_width) != (None, None, None)

    def size(self, w: int, h: int):
        """``((width, height), None)`` of a ``w`` x ``h`` line once fitted, or ``(None,
        reason)`` when it is too wide and ``too_wide`` is ``"skip"``."""
        height = h if self.height is None else self.height
        width = max(1, (2 * w * height + h) // (2 * h))
        if self.max_width is not None and width > self.max_width:
            if self.too_wide == "skip":
                return None, (f"line {width} pixels wide at height {height}, more than max_width="
                              f"{self.max_width} (too_wide='skip')")
            width = self.max_width
        return (width, height), None

    def image(self, image):
        """``(uint8 array, None)`` of the Pillow image ``image`` fitted, or ``(None, reason)``."""
        from PIL import Image
        image = image.convert(self.mode or DEFAULT_MODE)
        size, reason = self.size(*image.size)
        if reason is not None:
            return None, reason
        if size != image.size:
            image = image.resize(size, Image.Resampling.BILINEAR)
        return np.asarray(image, dtype=np.uint8), None

    def array(self, where: str, array: np.ndarray):
        """``(array, None)`` of an iterable's or a dataset's image fitted (as it is when
        nothing is asked of arrays), or ``(None, reason)``: an 8-bit image through Pillow as
        a file's, a float32 ``[C, H, W]`` one channel by channel in float (Pillow's ``F``)."""
        if not self.fits_arrays:
            return array, None
        from PIL import Image
        if array.dtype == np.uint8:
            return self.image(Image.fromarray(np.ascontiguousarray(array)))
        if self.mode is not None:
            raise ValueError(f"{where}: mode={self.mode!r} converts 8-bit images; a float32 image keeps its "
                             f"{array.shape[0]} channel(s): leave mode out for float32 images")
        size, reason = self.size(array.shape[2], array.shape[1])
        if reason is not None:
            return None, reason
        if size == (array.shape[2], array.shape[1]):
            return array, None
        return np.stack([np.asarray(Image.fromarray(np.ascontiguousarray(channel, dtype=np.float32)).resize(
            size, Image.Resampling.BILINEAR), dtype=np.float32) for channel in array]), None


def fit_for(height, mode, max_width, too_wide, files: bool) -> Fit:
    """The ``Fit`` of ``pack``'s arguments, each checked; for images decoded from files
    (``files``) a height and a mode left out are 32 and ``"L"``."""
    if files:
        height = DEFAULT_HEIGHT if height is None else height
        mode = DEFAULT_MODE if mode is None else mode
    if mode is not None and mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, received {mode!r}")
    if height is not None and (type(height) is not int or not 1 <= height < INT32_END):
        raise ValueError(f"height must be an integer in [1, 2**31), received {height!r}")
    if max_width is not None and (type(max_width) is not int or not 1 <= max_width < INT32_END):
        raise ValueError(f"max_width must be an integer in [1, 2**31) or None, received {max_width!r}")
    if too_wide not in TOO_WIDE:
        raise ValueError(f"too_wide must be one of {TOO_WIDE}, received {too_wide!r}")
    fit = Fit(height, mode, max_width, too_wide)
    if files or fit.fits_arrays:
        try:
            import PIL  # noqa: F401
        except ImportError:
            raise ImportError(f"{'packing image files' if files else 'fitting images'} needs Pillow: pip install "
                              f"pillow (in a checkout: pip install -e '.[pack]')") from None
    return fit


def decode(image, fit: Fit):
    """``(uint8 array, None)`` of the image ``image`` (a path, or the encoded bytes of a
    container's record) decoded by Pillow and fitted by ``fit``, or ``(None, reason)``."""
    from PIL import Image
    with Image.open(io.BytesIO(image) if isinstance(image, bytes) else image) as opened:
        return fit.image(opened)


def try_decode(args):
    """``(array, error, reason)``: the fitted image; or what Pillow raised reading it
    (``error``); or why ``fit`` does not pack it (``reason``)."""
    image, fit = args
    try:
        array, reason = decode(image, fit)
    except Exception as error:        # Pillow raises many kinds for a bad file: each is a skip
        said = re.sub(r"<_io\.BytesIO object at 0x[0-9a-f]+>", "its bytes", str(error))
        return None, f"unreadable image ({type(error).__name__}: {said})", None
    return array, None, reason


def folder_samples(folder, labels, fit, vocabulary, workers):
    """The samples of an image folder: decoded in ``workers`` threads, in the labels file's order."""
    usable, vocabulary, skipped = folder_plan(folder, labels, vocabulary)
    threads = decode_threads(workers)
    return decoded(usable, vocabulary, fit, threads, skipped), skipped, vocabulary, len(usable)


def container_samples(container, fit, vocabulary, workers):
    """The samples of a container (``containers.py``): its records read in order, their
    images decoded in ``workers`` threads."""
    usable, vocabulary, skipped = container_plan(container, vocabulary)
    threads = decode_threads(workers)
    return decoded(usable, vocabulary, fit, threads, skipped, container), skipped, vocabulary, len(usable)


def folder_plan(folder, labels, vocabulary):
    """What packing a folder decodes, before any image is read: ``(entries, vocabulary,
    skipped)``, the labels file's usable ``(position, name, path, text)`` entries in order,
    the ``Vocabulary`` their texts are encoded with, and the entries skipped (empty text, symbols outside the
    vocabulary). A sharded pack cuts ``entries`` into its partitions: every shard gives a
    symbol the id fixed here."""
    folder, labels = os.fspath(folder), os.fspath(labels)
    if not os.path.isdir(folder):
        raise PackError(f"{folder}: not a folder of images")
    return text_plan(read_labels(folder, labels), vocabulary)


def container_plan(container, vocabulary):
    """``folder_plan`` for a container: its ``(position, key, locator, text)`` records,
    every text read (and checked) before any image."""
    return text_plan(container.records(), vocabulary)


def text_plan(entries, vocabulary):
    """The one rule of text, whatever the source: ``(usable entries, vocabulary, skipped)``;
    an empty text, or one with symbols outside the vocabulary, is skipped
    (``text_skip``); the vocabulary is by default every character of the non-empty texts,
    sorted (``vocabulary_for``)."""
    entries = list(entries)
    vocabulary = vocabulary_for(vocabulary, [entry[3] for entry in entries])
    reasons = [text_skip(entry[3], vocabulary) for entry in entries]
    # The empty ones listed first, then those with other symbols: the report's order as it was.
    skipped = sorted(((entry[1], reason) for entry, reason in zip(entries, reasons) if reason is not None),
                     key=lambda skip: skip[1] != EMPTY)
    return [entry for entry, reason in zip(entries, reasons) if reason is None], vocabulary, skipped


def text_skip(text: str, vocabulary: Vocabulary):
    """Why ``text`` is not packed (an empty text, symbols outside the vocabulary), or None."""
    if not text.strip():
        return EMPTY
    unknown = vocabulary.unknown(text)
    return f"label uses symbols outside the vocabulary: {unknown!r}" if unknown else None


def decode_threads(workers, default=None) -> int:
    """The decoding threads ``workers`` asks for (None: ``default``, or the number of CPUs)."""
    threads = workers if workers is not None else (default or os.cpu_count() or 1)
    if type(threads) is not int or threads < 1:
        raise ValueError(f"workers must be an integer >= 1, received {workers!r}")
    return threads


def decoded(entries, vocabulary, fit, threads, skipped, container=None):
    """The samples of ``entries`` in order, decoded and fitted in ``threads`` threads. A
    folder's file that Pillow cannot read is skipped; a container's record that it cannot
    read is a ``PackError`` naming the record (a container is one file: a bad record is
    damage). A line ``fit`` does not pack (too wide) is skipped, whatever the source."""
    chunk = 64 * threads             # bounded read-ahead: memory stays flat on a million files
    images = None if container is None else container.images(entries)
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for start in range(0, len(entries), chunk):
            part = entries[start:start + chunk]
            sources = [e[2] for e in part] if images is None else [next(images) for _ in part]
            for (position, name, source_of, text), (image, error, reason) in zip(
                    part, pool.map(try_decode, [(source, fit) for source in sources])):
                if error is not None and container is not None:
                    raise PackError(f"{container.where((position, name, source_of, text))}: {error}")
                if error is not None or reason is not None:
                    skipped.append((name, error or reason))
                    continue
                yield image, vocabulary.encode(text), position, name.encode("utf-8")


# ---------------------------------------------------------------- iterables and datasets

def checked_item(position, item, texts, fit):
    """``(image, target, label, key)`` from one item (the key encoded, the image fitted by
    ``fit``), or a reason to skip it. The target is ids, or a text that ``texts`` (a
    ``TextTargets``) encodes or keeps."""
    if not isinstance(item, (tuple, list)) or len(item) not in (3, 4):
        raise TypeError(f"item {position}: expected (image, target, label) or (image, target, label, key), "
                        f"received {type(item).__name__}")
    image, target, label = item[0], item[1], item[2]
    key = key_bytes(position, item[3]) if len(item) == 4 else None
    where = f"item {position}" if key is None else f"item {position} (key {item[3]!r})"
    # float32 of either byte order, as Sample takes it (the writer stores it little-endian).
    if not isinstance(image, np.ndarray) or not (
            (image.dtype == np.uint8 and (image.ndim == 2 or (image.ndim == 3 and image.shape[2] == 3)))
            or (image.dtype.type is np.float32 and image.ndim == 3)):
        raise TypeError(f"{where}: image must be uint8 [H, W] or [H, W, 3], or float32 [C, H, W], "
                        f"received {type(image).__name__} {getattr(image, 'dtype', '')} "
                        f"{getattr(image, 'shape', '')}")
    target, reason = texts.target(where, target)      # first: a text counts in a built vocabulary
    if 0 in image.shape:
        return None, f"image of shape {image.shape}: every dimension must be >= 1"
    if reason is not None:
        return None, reason
    label = checked_label(where, label)
    if not -INT32_END <= label < INT32_END:
        return None, f"label {label} is outside the int32 range"
    image, reason = fit.array(where, image)
    if reason is not None:
        return None, reason
    return (image, target, label, key), None


class TextTargets:
    """The targets of an iterable: all integer ids (as before, the vocabulary recorded as
    given), or all texts, encoded by the one rule of text (``text_skip``): with the
    vocabulary given, as each item arrives; without one, kept as text until the iterable
    is spent, then encoded with the vocabulary built from every non-empty text seen, the
    one a folder of the same lines gets (the writer's ``finish`` encodes them)."""

    def __init__(self, vocabulary):
        self.given = None if vocabulary is None else Vocabulary(vocabulary)
        self.kind = None            # "ids" or "text": fixed by the first item
        self.seen = []              # the texts, for a vocabulary built from them

    def target(self, where, target):
        """``(target, reason to skip)``: int32 ids, or a text kept for the writer to encode."""
        kind = "text" if isinstance(target, str) else "ids"
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise TypeError(f"{where}: target is {'a text' if kind == 'text' else 'ids'}, the first item's was "
                            f"{'a text' if self.kind == 'text' else 'ids'}: an iterable's targets are all "
                            f"texts (str) or all integer ids")
        if kind == "ids":
            return checked_ids(where, target)
        if self.given is None:
            self.seen.append(target)
            return target, (EMPTY if not target.strip() else None)
        reason = text_skip(target, self.given)
        return (None, reason) if reason is not None else (self.given.encode(target), None)

    def vocabulary(self):
        """The pack's vocabulary: built from the texts, or the one given, or None."""
        if self.kind == "text" and self.given is None:
            return Vocabulary.from_texts(self.seen)
        return self.given


def checked_ids(where, target):
    """``(int32 ids, None)`` or ``(None, reason to skip)``; ``TypeError`` for what is not ids."""
    ids = np.asarray(target)
    if ids.ndim != 1 or (ids.size and ids.dtype.kind not in "iu"):
        raise TypeError(f"{where}: target must be a text (str) or a 1-D sequence of integer ids, received "
                        f"{type(target).__name__} {ids.dtype} {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= INT32_END):
        return None, f"target values must lie in [0, 2**31), received min {ids.min()}, max {ids.max()}"
    return ids.astype(np.int32), None


def checked_label(where: str, label) -> int:
    """``label`` as an int by ``Sample``'s rule: an integer (``operator.index``), not a bool
    (True would be stored as 1) and not a float (1.9 would be stored as 1)."""
    try:
        if isinstance(label, (bool, np.bool_)):
            raise TypeError
        return operator.index(label)
    except TypeError:
        raise TypeError(f"{where}: label must be an integer (not a bool or a float), received {label!r} "
                        f"of type {type(label).__name__}") from None


def key_bytes(position, key) -> bytes | None:
    """A key's UTF-8: a key is a str (``key(i)`` gives it back as one); bytes are refused,
    not guessed at, and so is a str that UTF-8 cannot encode (a lone surrogate), before
    anything is published."""
    if key is None:
        return None
    if not isinstance(key, str):
        raise TypeError(f"item {position}: key must be a str (or left out), received {key!r} of type "
                        f"{type(key).__name__}")
    try:
        return key.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"item {position}: key {key!r} cannot be stored as UTF-8 ({error.reason} at "
                         f"character {error.start}); keys must be valid Unicode text") from None


def iterable_samples(items, vocabulary=None, fit=Fit()):
    """``(stream, skipped, texts)``: the checked items of ``items``, fitted by ``fit``; ``texts`` (a
    ``TextTargets``) gives the pack's vocabulary and encodes what it kept as text once the
    stream is spent."""
    skipped = []
    texts = TextTargets(vocabulary)

    def stream():
        for position, item in enumerate(items):
            sample, reason = checked_item(position, item, texts, fit)
            if reason is not None:
                skipped.append((position, reason))
            else:
                yield sample
    return stream(), skipped, texts


def dataset_samples(dataset, start=0, stop=None, fit=Fit()):
    """Samples ``start`` .. ``stop - 1`` of ``dataset`` (by default all), named by their
    index, their images fitted by ``fit``."""
    skipped = []

    def stream():
        for i in range(start, len(dataset) if stop is None else stop):
            try:
                sample = dataset.get_sample(i)
            except Exception as error:
                skipped.append((i, f"get_sample raised {type(error).__name__}: {error}"))
                continue
            image, reason = fit.array(f"sample {i}", np.asarray(sample.image, dtype=np.float32))
            if reason is not None:
                skipped.append((i, reason))
                continue
            yield image, np.asarray(sample.target), checked_label(f"sample {i}", sample.label), None
    return stream(), skipped
