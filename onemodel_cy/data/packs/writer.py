"""The pack writer: ``onemodel_cy.pack(...)`` and ``onemodel-cy pack`` (``docs/packed-format.md``).

The sources: a folder of image files with a labels file (decoded with Pillow, the
``pack`` extra, in threads: Pillow decodes and resizes without the GIL), an LMDB, Parquet
files or WebDataset tars (``containers.py``, their records decoded as a folder's), any iterable of
``(image, target, label)`` or ``(image, target, label, key)`` (the target a text or ids), and any dataset with
``get_sample``. A pack is written into a hidden temporary folder beside the destination
and renamed into place only once its manifest is written, so an interrupted pack never
looks complete; the rename never replaces what another writer published meanwhile unless
``overwrite``, and every failure removes the temporary folder. What could not be packed
is listed in the returned :class:`PackReport`.
"""
from __future__ import annotations

import dataclasses
import hashlib
import os
import secrets
import shutil
import time

import numpy as np

from onemodel_cy.core.validate import note_exception
from onemodel_cy.data.packs.containers import Container
from onemodel_cy.data.packs.format import (DIGEST_BYTES, FORMAT, HEADER_BYTES, VERSION, PackError, array_entry,
                                           npy_header, sync, write_manifest, write_npy)
from onemodel_cy.data.packs.publish import publish
from onemodel_cy.data.vocabulary import Vocabulary

__all__ = ["pack", "PackReport", "PackError"]


@dataclasses.dataclass
class PackReport:
    """What :func:`pack` wrote: the pack's folder, how many samples, what it skipped
    (``(item, reason)`` pairs: a file name, or an item's position in the source), the
    seconds it took and the bytes of the pack on disk."""
    path: str
    count: int
    skipped: list
    seconds: float
    bytes: int
    vocabulary: Vocabulary = None   # as the pack reads it, blank first (data/vocabulary.py); None: no text
    shards: int = None          # a sharded pack's number of shards; None: a plain pack

    def summary(self) -> str:
        into = self.path if self.shards is None else f"{self.path} ({self.shards} shard{'s' * (self.shards != 1)})"
        lines = [f"packed {self.count} samples into {into} ({self.bytes / 1e6:.1f} MB) in "
                 f"{self.seconds:.1f} s ({self.count / max(self.seconds, 1e-9):.0f} samples/s); "
                 f"skipped {len(self.skipped)}"]
        if self.vocabulary is not None:
            symbols = Vocabulary(self.vocabulary).symbols
            lines.append(f"  vocabulary: {len(self.vocabulary) - 1} symbols, ids 1.. = {symbols!r} (0: the CTC "
                         f"blank); pass --vocabulary-from {self.path} to give another pack the same ids")
        lines += [f"  skipped {item}: {reason}" for item, reason in self.skipped]
        return "\n".join(lines)


class _PackWriter:
    """Appends samples to a pack under construction in a temporary folder."""

    def __init__(self, out: str, overwrite: bool, make_parent: bool = True):
        """``make_parent=False`` (a shard): the folder ``out`` goes in must exist, so a task
        still running after its sharded pack was abandoned cannot create it again."""
        self.out = os.path.abspath(os.fspath(out))
        self.overwrite = overwrite
        if os.path.lexists(self.out) and not overwrite:
            raise FileExistsError(f"{self.out}: already exists (pass overwrite=True / --overwrite to replace it)")
        parent, name = os.path.split(self.out)
        if make_parent:
            os.makedirs(parent, exist_ok=True)
        self.tmp = os.path.join(parent, f".{name}.partial-{os.getpid()}-{secrets.token_hex(4)}")
        os.mkdir(self.tmp)
        self.pixels = None
        try:
            self.pixels = open(os.path.join(self.tmp, "pixels.npy"), "wb")
            self.pixels.write(b"\0" * HEADER_BYTES)      # the real header once the size is known
        except BaseException:
            if self.pixels is not None:
                close_quietly(self.pixels)
            shutil.rmtree(self.tmp, ignore_errors=True)
            raise
        self.kind = None
        self.total = 0
        self.offsets, self.shapes, self.labels, self.keys, self.digests = [], [], [], [], []
        self.targets, self.target_ends = [], [0]

    def add(self, image: np.ndarray, target, label: int, key: bytes | None) -> None:
        """One sample, already checked (``sources.py``): uint8 [H, W] / [H, W, 3] or float32
        [C, H, W] of either byte order (stored little-endian), int32 target ids or a text
        (one id per character, encoded by ``finish`` once the vocabulary is known), an int
        label, a UTF-8 key."""
        if image.dtype == np.uint8:
            kind = "gray8" if image.ndim == 2 else "rgb8"
            c, h, w = (1, *image.shape) if image.ndim == 2 else (3, image.shape[0], image.shape[1])
        else:
            kind, (c, h, w) = "float32", image.shape
        if self.kind is None:
            self.kind = kind
        elif kind != self.kind:
            raise TypeError(f"every image of a pack has one kind of pixels: the first was {self.kind}, "
                            f"sample {len(self.labels)} is {kind}")
        stored = np.ascontiguousarray(image, dtype="<f4" if kind == "float32" else "|u1").tobytes()
        self.pixels.write(stored)
        self.digests.append(hashlib.sha256(stored).digest())
        self.offsets.append(self.total)
        self.total += c * h * w
        self.shapes.append((c, h, w))
        self.targets.append(target)
        self.target_ends.append(self.target_ends[-1] + len(target))
        self.labels.append(label)
        self.keys.append(key)

    def finish(self, vocabulary, source: str) -> tuple[int, int]:
        """Write the arrays and the manifest, then rename the folder into place; the count
        and the bytes of the pack. ``vocabulary`` (a ``Vocabulary``, its symbols, or None)
        encodes the targets added as text and is recorded in the manifest."""
        n = len(self.labels)
        if n == 0:
            raise ValueError("nothing to pack: every item was skipped or the source was empty")
        if vocabulary is not None:
            vocabulary = Vocabulary(vocabulary)
            self.targets = [vocabulary.encode(t) if isinstance(t, str) else t for t in self.targets]
        elif any(isinstance(t, str) for t in self.targets):
            raise TypeError("targets given as text need a vocabulary to encode them")
        descr = "<f4" if self.kind == "float32" else "|u1"
        self.pixels.seek(0)
        self.pixels.write(npy_header(descr, (self.total,)))
        sync(self.pixels)
        self.pixels.close()
        arrays = {"pixels": (descr, (self.total,))}
        columns = {"pixel_offsets": ("<i8", self.offsets), "shapes": ("<i8", np.array(self.shapes).reshape(n, 3)),
                   "targets": ("<i4", np.concatenate(self.targets) if self.targets else []),
                   "target_offsets": ("<i8", self.target_ends), "labels": ("<i4", self.labels),
                   "sample_sha256": ("|u1", np.frombuffer(b"".join(self.digests), np.uint8).reshape(n, DIGEST_BYTES))}
        if all(key is not None for key in self.keys):
            ends = np.cumsum([0] + [len(key) for key in self.keys])
            columns["keys"] = ("|u1", np.frombuffer(b"".join(self.keys), dtype=np.uint8))
            columns["key_offsets"] = ("<i8", ends)
        for name, (descr_, values) in columns.items():
            values = np.asarray(values, dtype=np.dtype(descr_))
            write_npy(os.path.join(self.tmp, f"{name}.npy"), values, descr_)
            arrays[name] = (descr_, values.shape)
        manifest = {"format": FORMAT, "version": VERSION, "count": n, "pixels": self.kind,
                    "vocabulary": None if vocabulary is None else list(vocabulary.symbols), "source": source,
                    "arrays": {name: array_entry(self.tmp, name, d, shape) for name, (d, shape) in arrays.items()}}
        write_manifest(self.tmp, manifest)      # last: a folder without it is no pack
        size = sum(os.path.getsize(os.path.join(self.tmp, f)) for f in os.listdir(self.tmp))
        publish(self.tmp, self.out, self.overwrite)
        return n, size

    def abort(self, error: BaseException | None) -> None:
        """Remove the partial folder after ``error`` (None: a shard left empty, nothing to
        publish), whatever fails on the way: closing a file on a full disk fails again (its
        buffer cannot be flushed), and is added to ``error`` as a note instead of replacing it."""
        try:
            if not self.pixels.closed:
                self.pixels.close()
        except Exception as close_error:
            if error is None:
                raise
            note_exception(error, f"closing {self.pixels.name} failed too: {close_error!r}")
        finally:
            shutil.rmtree(self.tmp, ignore_errors=True)
            if error is not None and os.path.lexists(self.tmp):
                note_exception(error, f"the partial folder {self.tmp} could not be removed")


def close_quietly(f) -> None:
    try:
        f.close()
    except OSError:
        pass


def pack(source, out, *, labels=None, height=None, mode=None, max_width=None, too_wide="downscale",
         vocabulary=None, workers=None, progress=True, overwrite=False) -> PackReport:
    """Write a pack (``docs/packed-format.md``) to the folder ``out``.

    Parameters
    ----------
    source : folder path, container, iterable, or dataset
        A folder of image files (with ``labels=``); an ``LmdbSource``, ``ParquetSource`` or
        ``WebDatasetSource`` (encoded images and their texts in one container, decoded,
        fitted and encoded as a folder's are); an iterable of ``(image, target, label)`` or
        ``(image, target, label, key)`` with a uint8 ``[H, W]`` / ``[H, W, 3]`` or float32
        ``[C, H, W]`` image and a target that is a text (``str``, encoded by the
        ``Vocabulary``) or integer ids, one kind for every item; or any object with
        ``get_sample(i)`` and ``len``.
    out : path
        The pack's folder; must not exist unless ``overwrite``. Without ``overwrite``, a
        pack another writer publishes there meanwhile is never replaced: this one then
        fails with a ``FileExistsError`` (its temporary folder removed).
    labels : path, optional
        For a folder: a UTF-8 text file, one ``file name<TAB>text`` per line.
    height : int, optional
        Every line is resized to this height, its aspect ratio kept. Default: 32 for images
        decoded from files (a folder, a container); an array (an iterable's, a dataset's)
        keeps its own height unless ``height``, ``mode`` or ``max_width`` is given. The one
        policy of every source is ``sources.Fit`` (docs/guide.md, "Fitting lines to a height").
    mode : {"L", "RGB"}, optional
        8-bit grey or 8-bit RGB pixels: a colour line becomes grey (ITU-R 601-2 luma), a grey
        one three equal channels. Default: ``"L"`` for files; an array keeps its kind (a
        float32 image always keeps its channels).
    max_width : int, optional
        The widest line packed, once fitted to the height (default: no limit).
    too_wide : {"downscale", "skip"}, default "downscale"
        A line wider than ``max_width``: narrowed to ``max_width`` (its height kept), or
        not packed and listed in the report's ``skipped``.
    vocabulary : Vocabulary, str or sequence of str, optional
        The symbols of target ids 1, 2, ... (``BLANK_ID``, 0, is the CTC blank), as
        ``Vocabulary`` takes them: a dataset's ``vocabulary`` too (another pack's, so that
        both packs give one symbol one id: ``data/vocabulary.py``).
        For texts (a folder, a container, an iterable of texts), the characters they may use:
        a text with others is skipped. By default every character of the non-empty texts,
        sorted (``Vocabulary.from_texts``), taken before decoding (it covers a text whose
        image turns out unreadable too); an iterable's texts are encoded once it is spent.
        For integer ids (a dataset, an iterable of ids) it is recorded in the manifest as given.
    workers : int, optional
        Decoding threads for a folder or a container (default: the number of CPUs).
    progress : bool, default True
        Show a tqdm progress bar (when tqdm is installed).
    overwrite : bool, default False
        Replace an existing ``out`` (only once the new pack is complete; of two writers
        replacing one pack, the last to publish wins).
    Every failure (an exception from the source, a full disk, a refused item) removes the
    temporary folder and leaves ``out`` as it was. :func:`pack_sharded` writes the same
    samples as a sharded pack, its shards written in parallel.
    """
    started = time.perf_counter()
    writer = _PackWriter(out, overwrite)
    try:
        from onemodel_cy.data.packs.sources import fit_for
        fitting = (height, mode, max_width, too_wide)
        if is_container(source):
            if labels is not None:
                raise TypeError(f"labels= is a folder's labels file; {source!r} holds its texts")
            from onemodel_cy.data.packs.sources import container_samples
            fit = fit_for(*fitting, files=True)
            items, skipped, vocab, total = container_samples(source, fit, vocabulary, workers)
            name = source.format
        elif isinstance(source, (str, os.PathLike)):
            if labels is None:
                raise TypeError("packing a folder needs labels= (a file of 'name<TAB>text' lines)")
            from onemodel_cy.data.packs.sources import folder_samples
            fit = fit_for(*fitting, files=True)
            items, skipped, vocab, total = folder_samples(source, labels, fit, vocabulary, workers)
            name = "folder"
        elif hasattr(source, "get_sample"):
            from onemodel_cy.data.packs.sources import dataset_samples
            fit = fit_for(*fitting, files=False)
            items, skipped, total, name = (*dataset_samples(source, fit=fit), len(source), "dataset")
            vocab = recorded_vocabulary(vocabulary)
        else:
            from onemodel_cy.data.packs.sources import iterable_samples
            items, skipped, texts = iterable_samples(source, vocabulary, fit_for(*fitting, files=False))
            total, name, vocab = None, "iterable", None
        for image, target, label, key in with_progress(items, total, progress):
            writer.add(image, target, label, key)
        if name == "iterable":
            vocab = texts.vocabulary()      # known once the iterable is spent, when it is built from its texts
        count, size = writer.finish(vocab, name)
    except BaseException as error:
        writer.abort(error)
        raise
    return PackReport(writer.out, count, skipped, time.perf_counter() - started, size,
                      None if vocab is None else Vocabulary(vocab))


def is_container(source) -> bool:
    """An ``LmdbSource``, ``ParquetSource`` or ``WebDatasetSource`` (``containers.py``)."""
    return isinstance(source, Container)


def recorded_vocabulary(vocabulary):
    """A vocabulary given with a dataset (or an iterable of ids) is recorded as given (its
    targets are already ids)."""
    return None if vocabulary is None else Vocabulary(vocabulary)


def with_progress(items, total, progress, unit="img"):
    if not progress:
        return items
    try:
        from tqdm import tqdm
    except ImportError:           # the bar is a convenience: pack without it
        return items
    return tqdm(items, total=total, unit=unit, desc="packing")
