"""``PackedImageDataset``: a pack on disk (``docs/packed-format.md``), memory-mapped, on the fast path.

The pixels stay in the file: ``pixels.npy`` is mapped read-only and nothing is read until
a batch needs it, so a pack may be larger than memory and processes opening the same pack
share its pages through the page cache. Every other array (offsets, shapes, targets,
labels) is checked once when the pack is opened and then held as a sealed private copy:
every bound the GIL-free fetch step uses comes from memory no one can change, and the
mapped file only supplies pixel values (docs/safety.md, "Memory-mapped packs").

``get_sample(i)`` is ``gray8_to_planar``/``rgb8_to_planar`` of the stored pixels (§6, D15)
or a copy of stored float32; the loader's fetch step instead reads the 8-bit pixels
itself and converts them while it writes the padded batch (``src/row.h``:
``om_convert_image``, and for gray pixels the AVX2/AVX-512 ``om_convert_gray``), with
the same float32 operations per pixel: both routes give the same bytes.
"""
cimport cython
cimport numpy as cnp
from posix.mman cimport madvise, MADV_DONTNEED
from posix.unistd cimport sysconf, _SC_PAGESIZE
import os

import numpy as np

from onemodel_cy.core.typedefs cimport i64, i32
from onemodel_cy.core.validate cimport as_index, as_size
from onemodel_cy.core.sealed cimport sealed_copy
from onemodel_cy.data.datasets cimport (PackedImages, PackedSource, Sample, PIXELS_FLOAT32, PIXELS_GRAY8,
                                        PIXELS_RGB8)
from onemodel_cy.data.image import gray8_to_planar, rgb8_to_planar
from onemodel_cy.data.packs.cache import absolute, is_exact, refuse_as_local
from onemodel_cy.data.packs.exact import RemoteSamples
from onemodel_cy.data.packs.format import (SHARDED_FORMAT as _SHARDED, PackError, join_shards, load_index,
                                           open_manifest, open_shards)
from onemodel_cy.data.packs.pixelmap import map_pixel_files
from onemodel_cy.data.packs.remote import (OUT_OF_DESCRIPTORS as _OUT_OF_DESCRIPTORS, fetch as _fetch,
                                           is_url as _is_url, out_of_descriptors, redact, retry_policy,
                                           shard_count)
from onemodel_cy.data.vocabulary import decode as _decode, with_blank as _with_blank

cnp.import_array()

VERIFY = ("index", "full")
FETCH = ("exact", "background", "whole")     # a pack at a URL: what is fetched when (exact.py)
DEFAULT_RESIDENT_LIMIT = 1 << 30     # bytes of pixels a process keeps mapped in, by default
KIND_CODES = {"gray8": PIXELS_GRAY8, "rgb8": PIXELS_RGB8, "float32": PIXELS_FLOAT32}


def planar_constants(mean, std, channels):
    """§6's float32 ``scale = 1 / (255 * std)`` and ``bias = mean / std`` per channel (D15):
    ``mean`` and ``std`` rounded to float32 first, one rounding per operation, exactly as
    ``gray8_to_planar`` computes them. Returns a float32 array ``[scale0..2, bias0..2]``."""
    cdef object shape = [1, 1] if channels == 1 else [1, 1, 3]
    probe = np.zeros(shape, dtype=np.uint8)
    (gray8_to_planar if channels == 1 else rgb8_to_planar)(probe, mean, std)    # §6's own checks
    means, stds = per_channel(mean, channels), per_channel(std, channels)
    out = np.zeros(6, dtype=np.float32)
    for c in range(channels):
        out[c] = np.float32(1.0) / (np.float32(255.0) * stds[c])
        out[3 + c] = means[c] / stds[c]
    return out


def per_channel(values, channels):
    """``values`` (one, or one per channel) rounded to float32, one per channel, as §6 uses them."""
    out = np.asarray(values, dtype=np.float64).reshape(-1).astype(np.float32)
    return np.repeat(out, channels) if out.size == 1 else out


def local_folder(path, cache, cache_bytes, storage_options, retry, fetch):
    """The folder of the pack at the local ``path``, made absolute: a later ``os.chdir``
    cannot change which folder a pickled copy reopens (a symbolic link pointed elsewhere
    since is refused by the manifest's digest). The options of a pack at a URL are refused,
    and so is the cache folder of one fetched sample by sample (``cache.py``)."""
    given = [name for name, value in (("cache", cache), ("cache_bytes", cache_bytes),
                                      ("storage_options", storage_options), ("retry", retry), ("fetch", fetch))
             if value is not None]
    if given:
        *rest, last = given         # no negative index: this module is compiled without wraparound
        names = f"{', '.join(rest)} and {last}" if rest else last
        raise ValueError(f"{names} {'are' if rest else 'is'} for a pack at a URL, received a local path "
                         f"{path!r}")
    folder = os.path.abspath(os.fspath(path))
    refuse_as_local(folder)
    return folder


def opened_manifest(str folder, where, str expected):
    """``(manifest, sha256)`` of the pack in ``folder`` (``where``: as the user named it);
    with ``expected`` (unpickling), a pack whose manifest is not that one is refused: serving
    it would mix two datasets in one stream."""
    try:
        manifest, digest = open_manifest(folder)
    except PackError as error:
        if expected is None:
            raise
        raise PackError(f"{where} was replaced or removed since it was opened (manifest SHA-256 "
                        f"{expected}): {error}; open it again") from None
    if expected is not None and digest != expected:
        raise PackError(f"{where} was replaced since it was opened: manifest SHA-256 {digest}, "
                        f"expected {expected}; open it again")
    return manifest, digest


def conversion(str folder, str kind, mean, std):
    """The float32 constants the fetch step converts ``kind`` pixels with (§6, D15): zeros
    for float32 pixels (served as stored, which take no mean or std)."""
    if kind == "float32" and (mean is not None or std is not None):
        raise ValueError(f"{folder} holds float32 pixels, served as stored: pass neither mean nor std, "
                         f"received mean={mean!r}, std={std!r}")
    if kind != "float32" and (mean is None or std is None):
        raise ValueError(f"{folder} holds {kind} pixels: give mean= and std= for §6's conversion, "
                         f"received mean={mean!r}, std={std!r}")
    return (np.zeros(6, dtype=np.float32) if kind == "float32"
            else planar_constants(mean, std, 1 if kind == "gray8" else 3))


cdef cnp.ndarray sealed(array, int typenum):
    return sealed_copy(np.ascontiguousarray(array), typenum, "pack storage")


@cython.auto_pickle(False)
cdef class PackedImageDataset(PackedSource):
    """A pack written by :func:`onemodel_cy.pack`, read through a read-only memory map.

    Parameters
    ----------
    path : str or os.PathLike
        The pack's folder (holding ``manifest.json``), or a sharded pack's: its shards are
        read as one dataset, global index ``i`` counting through them in manifest order,
        each shard checked against the manifest's SHA-256 of it (``docs/packed-format.md``).
    mean, std : float or sequence of float, optional
        §6's constants (one, or one per channel for RGB), required for 8-bit packs; a
        float32 pack is served as stored and takes neither.
    verify : {"index", "full"}, default "index"
        ``"index"`` checks every array's size, header and, except for the pixels, its
        SHA-256 on opening; ``"full"`` hashes the pixels too (reads the whole pack once).
    resident_limit : int or None, default 2**30
        Bytes of pixels the loader's fast path reads before it gives the mapping's pages
        back (:meth:`release_pages`), so a pass over a pack larger than memory keeps this
        process's resident size flat at about this much. A pack whose pixels are no larger
        never releases (it stays mapped in whole); None never releases. The pages stay in
        the page cache, shared with other processes: a release costs only page faults.
    cache, cache_bytes : path and int, optional
        For a ``path`` that is a URL fsspec reads (``http(s)://``, ``s3://``; the ``remote``
        extra): the local folder the pack is fetched into (default
        ``~/.cache/onemodel_cy/packs``) and its bound in bytes (default 64 GiB; the packs
        least recently opened are removed to make room). Each file is checked against the
        manifest's size and SHA-256 as it arrives, each sample fetched alone against its
        ``sample_sha256``; the local copy is then read as any pack.
    fetch : {"exact", "background", "whole"}, optional
        For a URL: ``"exact"`` (the default) fetches the samples of the steps a loader is
        about to build, and nothing else (:attr:`remote`); ``"background"`` also fetches
        every other sample in the background, in large requests; ``"whole"`` fetches the
        whole pack before opening (the default with ``verify="full"``, which needs it; and
        what a pack without ``sample_sha256`` or a synchronous filesystem gets anyway).
    storage_options : dict, optional
        For a URL: options given to fsspec's filesystem as they are, e.g. an S3-compatible
        endpoint and its credentials, ``{"endpoint_url": "http://host:9000", "key": ...,
        "secret": ...}`` for ``s3://`` (s3fs; without them, botocore's environment:
        ``AWS_ENDPOINT_URL``, ``AWS_ACCESS_KEY_ID``, ...). A pickled copy (a worker
        process's) carries them.
    retry : dict, optional
        For a URL: how each request is retried, any of ``attempts`` (default 5, in [1, 100]),
        ``timeout`` (seconds one request may take, default 30) and ``backoff`` (seconds
        before the second try, doubled before each next one; default 0.5). A 5xx answer, a
        dropped connection, a short answer or a stall is retried, then a ``PackError``
        naming the file's URL, what happened and the attempts.

    Raises
    ------
    PackError
        (a ``ValueError``) naming the file, for a missing or truncated array, another
        format version, a SHA-256 mismatch, an image outside the pixels or of width 0.

    Notes
    -----
    The pack's identity is its content: ``manifest_sha256``, the SHA-256 of the
    ``manifest.json`` bytes read on opening (the manifest holds every array's SHA-256).
    ``path`` is made absolute on opening. A pickled copy (a worker process's) reopens
    ``path`` and refuses, with a ``PackError``, a pack whose manifest is not that one (a
    re-pack in place since); :meth:`fingerprint`, what a checkpoint names the dataset by,
    holds the content and never the path.
    """
    cdef readonly Py_ssize_t count
    cdef readonly str path
    # A pack read from a URL (remote.py), as given; else None.
    cdef readonly object url, cache, cache_bytes, storage_options, retry, fetch
    # Its RemoteSamples when the pack is fetched sample by sample (exact.py); else None.
    cdef readonly object remote
    cdef readonly str manifest_sha256   # the content identity (docs/packed-format.md, "Identity")
    cdef readonly str pixel_kind        # "gray8", "rgb8" or "float32"
    cdef readonly object manifest
    cdef readonly tuple shards          # a sharded pack's shard folders, in manifest order; () for a pack
    cdef object _shard_starts           # the global index of each shard's first sample
    cdef readonly object mean, std, verify
    cdef int _kind
    cdef cnp.ndarray _pixels            # the read-only memory map of pixels.npy (kept alive here)
    cdef cnp.ndarray _pixel_offsets, _shapes, _targets, _target_offsets, _labels, _convert
    cdef object _keys, _key_offsets
    cdef bint _initialised, _claimed
    cdef readonly object resident_limit
    cdef readonly Py_ssize_t pages_released  # releases so far (automatic and release_pages())
    cdef Py_ssize_t _release_after           # bytes read between releases; 0: never
    cdef Py_ssize_t _read_since_release

    def __init__(self, path, mean=None, std=None, verify="index", resident_limit=DEFAULT_RESIDENT_LIMIT,
                 cache=None, cache_bytes=None, storage_options=None, retry=None, fetch=None):
        self._open(path, mean, std, verify, resident_limit, None, cache, cache_bytes, storage_options, retry, fetch)

    cdef _open(self, path, mean, std, verify, resident_limit, str expected, cache, cache_bytes, storage_options,
               retry, fetch):
        """``__init__``; ``expected`` (unpickling) is the manifest SHA-256 the pack must still have.
        The URL half (``_fetched``) or a local path's checks (``local_folder``) give the
        folder, the folder half (``_open_folder``) opens the pack in it."""
        if self._claimed:
            raise RuntimeError("PackedImageDataset.__init__ was already called on this dataset (workers may "
                               "be reading its storage); open a new one")
        self._claimed = True
        if verify not in VERIFY:
            raise ValueError(f"verify must be one of {VERIFY}, received {verify!r}")
        limit = None if resident_limit is None else as_size(resident_limit, "resident_limit")
        if limit == 0:
            raise ValueError("resident_limit must be a positive number of bytes, or None (never release), "
                             "received 0")
        if _is_url(path):
            folder = self._fetched(path, verify, cache, cache_bytes, storage_options, retry, fetch, expected)
        else:
            folder = local_folder(path, cache, cache_bytes, storage_options, retry, fetch)
        self._open_folder(folder, path, mean, std, verify, limit, expected)

    cdef str _fetched(self, path, verify, cache, cache_bytes, storage_options, retry, fetch, str expected):
        """The URL half of ``_open``: the pack at ``path`` fetched into the local cache (or
        found there), and what a pickled copy reopens it with kept; its local folder. The
        cache folder is made absolute now (a chdir afterwards, or a worker process started
        elsewhere, reopens the same cache); ``expected`` (unpickling): a pack replaced at its
        URL is refused from its manifest, before anything else is fetched."""
        # verify="full" hashes every pixel file: only a whole copy can be checked so.
        if fetch is None:
            fetch = "whole" if verify == "full" else "exact"
        if fetch not in FETCH:
            raise ValueError(f"fetch must be one of {FETCH}, received {fetch!r}")
        if verify == "full" and fetch != "whole":
            raise ValueError(f"verify='full' hashes every pixel file whole: it needs fetch='whole' (or no "
                             f"fetch), received fetch={fetch!r}")
        # Fetched into the local cache (or found there), then read as any pack on disk.
        cache = absolute(cache)
        folder = _fetch(path, cache, cache_bytes, storage_options, retry, whole=fetch == "whole", expected=expected)
        self.fetch = fetch
        # Copied (the top level): the caller's dict changed later does not change what a worker reopens.
        self.url, self.cache, self.cache_bytes = path, cache, cache_bytes
        self.storage_options = None if storage_options is None else dict(storage_options)
        self.retry = None if retry is None else dict(retry)
        return folder

    cdef _open_folder(self, str folder, path, mean, std, verify, limit, str expected):
        """The folder half of ``_open``: the pack in ``folder`` (``path`` as given) checked,
        its index sealed, its pixels mapped; for a pack at a URL fetched sample by sample,
        what fetches them (``remote``)."""
        shown = folder if self.url is None else redact(path)
        manifest, digest = opened_manifest(folder, shown, expected)
        try:
            self._open_checked(folder, path, manifest, digest, mean, std, verify, limit, expected)
        except OSError as error:
            if error.errno in _OUT_OF_DESCRIPTORS:
                raise out_of_descriptors(shown, shard_count(manifest), error) from None
            raise

    cdef _open_checked(self, str folder, path, dict manifest, str digest, mean, std, verify, limit, str expected):
        """``_open_folder`` once the manifest is read and checked."""
        kind = manifest["pixels"]
        convert = conversion(folder, kind, mean, std)
        if manifest["format"] == _SHARDED:
            opened = open_shards(folder, manifest, verify)
            pixels, starts = map_pixel_files([shard_arrays["pixels"] for _, shard_arrays in opened])
            arrays = join_shards(opened, pixels, starts)
            self.shards = tuple(shard for shard, _ in opened)
            self._shard_starts = np.cumsum([0] + [entry["count"] for entry in manifest["shards"]])
        else:
            arrays = load_index(folder, manifest, verify)
            self.shards = ()
        self._install(arrays, convert)
        if self.url is not None and is_exact(folder):
            self.remote = RemoteSamples(folder, path, self.storage_options, retry_policy(self.retry))
            if self.fetch == "background" and expected is None:     # the opener's, not every worker's
                self.remote.fill()
        self.path, self.manifest, self.pixel_kind = folder, manifest, kind
        self.manifest_sha256 = digest
        self.mean, self.std, self.verify = mean, std, verify
        self.resident_limit = limit
        if limit is not None and limit < cnp.PyArray_NBYTES(self._pixels):
            self._release_after = limit
        self._kind = KIND_CODES[kind]
        self.count = manifest["count"]
        self._initialised = True

    cdef _install(self, dict arrays, convert):
        cdef cnp.ndarray pixels = arrays["pixels"]
        if pixels.flags.writeable or not cnp.PyArray_ISALIGNED(pixels):
            raise AssertionError("pixels.npy must be mapped read-only and aligned")
        self._pixels = pixels
        self._pixel_offsets = sealed(arrays["pixel_offsets"], cnp.NPY_INT64)
        self._shapes = sealed(arrays["shapes"], cnp.NPY_INT64)
        self._targets = sealed(arrays["targets"], cnp.NPY_INT32)
        self._target_offsets = sealed(arrays["target_offsets"], cnp.NPY_INT64)
        self._labels = sealed(arrays["labels"], cnp.NPY_INT32)
        self._convert = sealed(convert, cnp.NPY_FLOAT32)
        self._keys = arrays.get("keys")
        self._key_offsets = arrays.get("key_offsets")

    def __len__(self):
        return self.count

    def __repr__(self):
        return f"PackedImageDataset({self.path!r}, <{self.count} {self.pixel_kind} samples>)"

    def __reduce__(self):
        ready(self)
        if type(self) is not PackedImageDataset:
            raise TypeError(f"{type(self).__name__} must define __reduce__ to be pickled")
        return (reopen, (self.path if self.url is None else self.url, self.mean, self.std, self.verify,
                         self.resident_limit, self.manifest_sha256, self.cache, self.cache_bytes,
                         self.storage_options, self.retry, self.fetch))

    def fingerprint(self):
        """What a checkpoint names this dataset by (``DataLoader.fingerprint``): the pack's
        content (``manifest_sha256``) and what changes the bytes served from it, §6's mean
        and std per channel rounded to float32 as the conversion uses them (the pixel kind
        is in the manifest). Never the path: the same pack copied, moved or opened through
        another path resumes, another pack at the same path is refused."""
        ready(self)
        served = "served as stored"
        if self._kind != PIXELS_FLOAT32:
            channels = 1 if self._kind == PIXELS_GRAY8 else 3
            served = f"mean={float32_text(self.mean, channels)}, std={float32_text(self.std, channels)}"
        return f"PackedImageDataset(manifest_sha256={self.manifest_sha256}, {self.pixel_kind}, {served})"

    cdef int pixels_read(self, Py_ssize_t nbytes) except -1:
        # Holding the GIL (the fetch step calls it after each gather): the count is exact.
        if self._release_after == 0:
            return 0
        self._read_since_release += nbytes
        if self._read_since_release >= self._release_after:
            self.release_mapping()
        return 0

    cdef int ensure_samples(self, object indices, Py_ssize_t lo, Py_ssize_t hi) except -1:
        if self.remote is not None:
            self.remote.ensure(indices[lo:hi])
        return 0

    cdef bint reads_ahead(self) except -1:
        return self.remote is not None

    cdef int read_ahead(self, object indices) except -1:
        if self.remote is not None:
            self.remote.ahead(indices)
        return 0

    cdef int stop_read_ahead(self) except -1:
        if self.remote is not None:
            self.remote.cancel()
        return 0

    cdef int release_mapping(self) except -1:
        """``madvise(MADV_DONTNEED)`` over the pixels' whole pages, without the GIL (a
        release of a gigabyte walks a quarter of a million page-table entries)."""
        cdef size_t page = <size_t>sysconf(_SC_PAGESIZE)
        cdef size_t start = <size_t>cnp.PyArray_DATA(self._pixels)
        cdef size_t end = start + <size_t>cnp.PyArray_NBYTES(self._pixels)
        cdef int failed
        # Whole pages around the array: they all belong to its mapping (which maps whole pages).
        start -= start % page
        end = (end + page - 1) // page * page
        self._read_since_release = 0
        if end == start:
            return 0
        with nogil:
            failed = madvise(<void*>start, end - start, MADV_DONTNEED)
        if failed:
            raise OSError(f"madvise(MADV_DONTNEED) of {self.path}/pixels.npy failed")
        self.pages_released += 1
        return 0

    cdef bint packed_view(self, PackedImages* view) except -1:
        # The stored pixels are what get_sample serves, unless a subclass overrides it.
        if not self._initialised or getattr(type(self), "get_sample") is not PACKED_GET_SAMPLE:
            return False
        view.count = self.count
        view.kind = self._kind
        view.pixels = <const float*>cnp.PyArray_DATA(self._pixels)
        view.bytes = <const unsigned char*>cnp.PyArray_DATA(self._pixels)
        view.convert = <const float*>cnp.PyArray_DATA(self._convert)
        view.pixel_offsets = <const i64*>cnp.PyArray_DATA(self._pixel_offsets)
        view.shapes = <const i64*>cnp.PyArray_DATA(self._shapes)
        view.targets = <const i32*>cnp.PyArray_DATA(self._targets)
        view.target_offsets = <const i64*>cnp.PyArray_DATA(self._target_offsets)
        view.labels = <const i32*>cnp.PyArray_DATA(self._labels)
        return True

    def get_sample(self, index):
        """Sample ``index``: §6 of the stored 8-bit pixels with this dataset's mean and
        std, or a copy of the stored float32 image."""
        ready(self)
        cdef i64 i = self.checked_index(index)
        if self.remote is not None:
            self.remote.ensure((i,))
        c, h, w = (int(v) for v in self._shapes[i])
        start = int(self._pixel_offsets[i])
        stored = self._pixels[start:start + c * h * w]
        if self._kind == PIXELS_GRAY8:
            image = gray8_to_planar(stored.reshape(h, w), self.mean, self.std)
        elif self._kind == PIXELS_RGB8:
            image = rgb8_to_planar(stored.reshape(h, w, 3), self.mean, self.std)
        else:
            image = np.array(stored.reshape(c, h, w), dtype=np.float32)
        target = self._targets[self._target_offsets[i]:self._target_offsets[i + 1]]
        return Sample(image, target, int(self._labels[i]))

    def __getitem__(self, index):
        return self.get_sample(index)

    cdef i64 checked_index(self, index) except -1:
        i = as_index(index, "index")
        if not 0 <= i < self.count:
            raise IndexError(f"index must lie in [0, {self.count}), received {i}")
        return i

    def key(self, index):
        """Sample ``index``'s key (its original file name), or None if the pack has no keys.
        A stored key that is not UTF-8 raises a ``PackError`` naming ``keys.npy``."""
        ready(self)
        cdef i64 i = self.checked_index(index)
        if self._keys is None:
            return None
        stored = bytes(self._keys[self._key_offsets[i]:self._key_offsets[i + 1]])
        try:
            return stored.decode("utf-8")
        except UnicodeDecodeError as error:     # keys are not hashed into the index checks' values
            folder, local = self.path, i
            if self.shards:
                shard = int(np.searchsorted(self._shard_starts, i, side="right")) - 1
                folder, local = self.shards[shard], i - int(self._shard_starts[shard])
            raise PackError(f"{os.path.join(folder, 'keys.npy')}: key of sample {local} is not UTF-8 "
                            f"({error})") from None

    def release_pages(self):
        """Give back this process's resident pages of the pixel mapping now (``madvise``
        ``MADV_DONTNEED``); returns True.

        The pages stay in the page cache: a later read maps them again from there (or
        from the file), with the same bytes, so this is safe while workers read. The fast
        path does this by itself every ``resident_limit`` bytes it reads; call it to drop
        the pages sooner (after an evaluation pass, say)."""
        ready(self)
        self.release_mapping()
        return True

    @property
    def vocabulary(self):
        """The ``Vocabulary`` of the pack, ``("<blank>", symbol of id 1, ...)``: ``vocabulary[t]``
        is the symbol of target id ``t``, id 0 the CTC blank (``data/vocabulary.py``, as ``SyntheticTextLines``); None
        when the pack was not written from text. (The manifest lists ids 1, 2, ...)"""
        symbols = self.manifest.get("vocabulary") if self.manifest is not None else None
        return None if symbols is None else _with_blank(symbols)

    def decode(self, target):
        """The text of ``target`` (target ids) under :attr:`vocabulary`."""
        return _decode(target, self.vocabulary)

    @property
    def widths(self):
        """Width of every image, int64 (a ready key for :class:`BucketedSampler`)."""
        ready(self)
        return self._shapes[:, 2].copy()

    @property
    def shapes(self):
        """``[count, 3]`` int64 (C, H, W): a read-only view of the sealed copy the fast path reads."""
        ready(self)
        return self._shapes.view()


cdef int ready(PackedImageDataset dataset) except -1:
    if not dataset._initialised:
        raise RuntimeError("this PackedImageDataset was never initialised (its __init__ did not run)")
    return 0


def float32_text(values, channels):
    return "[" + ", ".join(str(v) for v in per_channel(values, channels)) + "]"


def reopen(path, mean, std, verify, resident_limit, str manifest_sha256 not None, cache=None, cache_bytes=None,
           storage_options=None, retry=None, fetch=None):
    """Unpickling: open the pack at ``path`` again (a process maps it itself, sharing its
    pages), refusing with a ``PackError`` a pack whose manifest SHA-256 is not
    ``manifest_sha256``: the bytes served are the pickled dataset's, or none."""
    cdef PackedImageDataset dataset = PackedImageDataset.__new__(PackedImageDataset)
    dataset._open(path, mean, std, verify, resident_limit, manifest_sha256, cache, cache_bytes, storage_options,
                  retry, fetch)
    return dataset


PACKED_GET_SAMPLE = PackedImageDataset.get_sample
