# Type stubs for the compiled module onemodel_cy.data.packs.reader (a memory-mapped pack, docs/packed-format.md).
import os
from collections.abc import Mapping, Sequence
from typing import Any, SupportsIndex

import numpy as np
import numpy.typing as npt
from typing_extensions import disjoint_base

from onemodel_cy.data.datasets import PackedSource, Sample
from onemodel_cy.data.packs.exact import RemoteSamples
from onemodel_cy.data.vocabulary import Vocabulary

VERIFY: tuple[str, str]
FETCH: tuple[str, str, str]
DEFAULT_RESIDENT_LIMIT: int
KIND_CODES: dict[str, int]

_Constants = float | Sequence[float]

# §6's float32 [scale0..2, bias0..2] (D15) for `channels` (1 or 3) channels.
def planar_constants(mean: _Constants, std: _Constants, channels: int) -> npt.NDArray[np.float32]: ...
# `values` (one, or one per channel) rounded to float32, one per channel.
def per_channel(values: _Constants, channels: int) -> npt.NDArray[np.float32]: ...
def float32_text(values: _Constants, channels: int) -> str: ...
# The absolute folder of a local pack; the options of a URL and a remote pack's cache folder refused.
def local_folder(
    path: str | os.PathLike[str], cache: Any, cache_bytes: Any, storage_options: Any, retry: Any, fetch: Any,
) -> str: ...
# (manifest, sha256) of the pack in `folder`; with `expected`, PackError unless the digest is that one.
def opened_manifest(folder: str, where: Any, expected: str | None) -> tuple[dict[str, Any], str]: ...
# The float32 [scale0..2, bias0..2] the fetch step converts `kind` pixels with (zeros for float32).
def conversion(folder: str, kind: str, mean: _Constants | None, std: _Constants | None) -> npt.NDArray[np.float32]: ...

@disjoint_base
class PackedImageDataset(PackedSource):
    @property
    def count(self) -> int: ...
    # Made absolute on opening.
    @property
    def path(self) -> str: ...
    # A pack read from a URL: the URL, the cache folder, its bound, the fsspec options and the
    # retry policy as given (the dicts copied); else None.
    @property
    def url(self) -> str | None: ...
    @property
    def cache(self) -> str | os.PathLike[str] | None: ...
    @property
    def cache_bytes(self) -> int | None: ...
    @property
    def storage_options(self) -> dict[str, Any] | None: ...
    @property
    def retry(self) -> dict[str, float] | None: ...
    # A pack fetched sample by sample (a URL, a pack with sample_sha256): what fetches them
    # (data/packs/exact.py); else None.
    @property
    def remote(self) -> RemoteSamples | None: ...
    # A pack at a URL: "exact", "background" or "whole" (as chosen, or the default); else None.
    @property
    def fetch(self) -> str | None: ...
    # SHA-256 of manifest.json's bytes as opened: the pack's content identity.
    @property
    def manifest_sha256(self) -> str: ...
    # "gray8", "rgb8" or "float32"
    @property
    def pixel_kind(self) -> str: ...
    @property
    def manifest(self) -> dict[str, Any]: ...
    # A sharded pack's shard folders in manifest order; () for a plain pack.
    @property
    def shards(self) -> tuple[str, ...]: ...
    @property
    def mean(self) -> _Constants | None: ...
    @property
    def std(self) -> _Constants | None: ...
    @property
    def verify(self) -> str: ...
    # Bytes of pixels the fast path reads between automatic releases (None: never).
    @property
    def resident_limit(self) -> int | None: ...
    @property
    def pages_released(self) -> int: ...
    # Opens once: a second call raises RuntimeError. Raises PackError (a ValueError) naming the file.
    def __init__(
        self,
        path: str | os.PathLike[str],
        mean: _Constants | None = None,
        std: _Constants | None = None,
        verify: str = "index",
        resident_limit: int | None = ...,
        cache: str | os.PathLike[str] | None = None,
        cache_bytes: int | None = None,
        storage_options: Mapping[str, Any] | None = None,
        retry: Mapping[str, float] | None = None,
        fetch: str | None = None,
    ) -> None: ...
    def __len__(self) -> int: ...
    # Reopens the pack in the unpickling process, refusing one whose manifest changed.
    def __reduce__(
        self,
    ) -> tuple[Any, tuple[str, Any, Any, str, int | None, str, Any, int | None, Any, Any]]: ...
    # The checkpoint's name of this dataset: its content and mean/std, never its path.
    def fingerprint(self) -> str: ...
    def get_sample(self, index: SupportsIndex) -> Sample: ...
    def __getitem__(self, index: SupportsIndex, /) -> Sample: ...
    def key(self, index: SupportsIndex) -> str | None: ...
    # madvise(MADV_DONTNEED) of the pixel mapping, now.
    def release_pages(self) -> bool: ...
    @property
    def vocabulary(self) -> Vocabulary | None: ...
    # The text of a target under `vocabulary` (ValueError for the blank or an id past it).
    def decode(self, target: Sequence[int] | npt.ArrayLike) -> str: ...
    @property
    def widths(self) -> npt.NDArray[np.int64]: ...
    @property
    def shapes(self) -> npt.NDArray[np.int64]: ...

# Raises PackError when the manifest's SHA-256 is not manifest_sha256.
def reopen(
    path: str, mean: _Constants | None, std: _Constants | None, verify: str,
    resident_limit: int | None, manifest_sha256: str,
    cache: str | os.PathLike[str] | None = None, cache_bytes: int | None = None,
    storage_options: Mapping[str, Any] | None = None, retry: Mapping[str, float] | None = None,
    fetch: str | None = None,
) -> PackedImageDataset: ...

PACKED_GET_SAMPLE: Any
