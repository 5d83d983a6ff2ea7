"""onemodel_cy: the OneModel training data stream, bit for bit, fed by GIL-free Cython kernels.

The batch at global step ``g`` is a pure function of ``(seed, g)`` and the pipeline's
configuration (§1). See ``docs/contract.md`` for the readings this package implements.

``__all__`` is the public API, with ``interop``, ``show`` and the ``onemodel-cy`` command
(docs/guide.md, "Public API"); the subpackages behind these names may move.
"""
from onemodel_cy.core.rng import STREAMS as _STREAMS, SampleRng, derive, mix
from onemodel_cy.core.permute import keyed_permutation, permutation
from onemodel_cy.core.samplers import Sampler, SequentialSampler, ShuffledSampler
from onemodel_cy.core.tablesamplers import BucketedSampler, MixingSampler
from onemodel_cy.data.datasets import ArrayImageDataset, Sample, SyntheticLineImages
from onemodel_cy.data.textlines import SyntheticTextLines
from onemodel_cy.data.vocabulary import BLANK, BLANK_ID, Vocabulary, check_same, decode
from onemodel_cy.collate.bufferpool import BufferPool
from onemodel_cy.collate.augment import Augmentation, GainOffset, GaussianNoise
from onemodel_cy.collate.batch import ImageBatch
from onemodel_cy.collate.collator import ImageBatchCollator
from onemodel_cy.data.image import gray8_to_planar, rgb8_to_planar
from onemodel_cy.data.packs.reader import PackedImageDataset
from onemodel_cy.data.packs.writer import PackError, PackReport, pack
from onemodel_cy.data.packs.sharded import pack_sharded
from onemodel_cy.data.packs.containers import LmdbSource, ParquetSource, WebDatasetSource
from onemodel_cy.loader import DataLoader, threads_available
from onemodel_cy.profile import LoaderProfile
from onemodel_cy.stream import BatchStream
from onemodel_cy.workers.protocol import StuckWorkerWarning

globals().update(_STREAMS)

__version__ = "0.1.0"

__all__ = [
    "mix", "derive", "SampleRng", *sorted(_STREAMS),
    "keyed_permutation", "permutation",
    "Sampler", "SequentialSampler", "ShuffledSampler", "MixingSampler", "BucketedSampler",
    "Sample", "ArrayImageDataset", "SyntheticLineImages", "SyntheticTextLines",
    "Vocabulary", "BLANK", "BLANK_ID", "decode", "check_same",
    "BufferPool", "ImageBatchCollator", "ImageBatch", "Augmentation", "GainOffset", "GaussianNoise",
    "gray8_to_planar", "rgb8_to_planar",
    "PackedImageDataset", "pack", "pack_sharded", "PackReport", "PackError",
    "LmdbSource", "ParquetSource", "WebDatasetSource",
    "DataLoader", "BatchStream", "LoaderProfile", "StuckWorkerWarning", "threads_available",
]
