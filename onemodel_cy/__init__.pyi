# Type stubs for the package namespace: the public API, re-exported by name.
from onemodel_cy.collate.augment import Augmentation as Augmentation
from onemodel_cy.collate.augment import GainOffset as GainOffset
from onemodel_cy.collate.augment import GaussianNoise as GaussianNoise
from onemodel_cy.collate.batch import ImageBatch as ImageBatch
from onemodel_cy.collate.bufferpool import BufferPool as BufferPool
from onemodel_cy.collate.collator import ImageBatchCollator as ImageBatchCollator
from onemodel_cy.data.datasets import ArrayImageDataset as ArrayImageDataset
from onemodel_cy.data.datasets import Sample as Sample
from onemodel_cy.data.datasets import SyntheticLineImages as SyntheticLineImages
from onemodel_cy.data.textlines import SyntheticTextLines as SyntheticTextLines
from onemodel_cy.data.vocabulary import BLANK as BLANK
from onemodel_cy.data.vocabulary import BLANK_ID as BLANK_ID
from onemodel_cy.data.vocabulary import Vocabulary as Vocabulary
from onemodel_cy.data.vocabulary import check_same as check_same
from onemodel_cy.data.vocabulary import decode as decode
from onemodel_cy.data.image import gray8_to_planar as gray8_to_planar
from onemodel_cy.data.image import rgb8_to_planar as rgb8_to_planar
from onemodel_cy.data.packs.reader import PackedImageDataset as PackedImageDataset
from onemodel_cy.core.permute import keyed_permutation as keyed_permutation
from onemodel_cy.core.permute import permutation as permutation
from onemodel_cy.core.rng import SampleRng as SampleRng
from onemodel_cy.core.rng import derive as derive
from onemodel_cy.core.rng import mix as mix
from onemodel_cy.core.samplers import Sampler as Sampler
from onemodel_cy.core.samplers import SequentialSampler as SequentialSampler
from onemodel_cy.core.samplers import ShuffledSampler as ShuffledSampler
from onemodel_cy.core.tablesamplers import BucketedSampler as BucketedSampler
from onemodel_cy.core.tablesamplers import MixingSampler as MixingSampler
from onemodel_cy.stream import BatchStream as BatchStream
from onemodel_cy.loader import DataLoader as DataLoader
from onemodel_cy.profile import LoaderProfile as LoaderProfile
from onemodel_cy.workers.protocol import StuckWorkerWarning as StuckWorkerWarning
from onemodel_cy.loader import threads_available as threads_available
from onemodel_cy.data.packs.writer import PackError as PackError
from onemodel_cy.data.packs.writer import PackReport as PackReport
from onemodel_cy.data.packs.writer import pack as pack
from onemodel_cy.data.packs.sharded import pack_sharded as pack_sharded
from onemodel_cy.data.packs.containers import LmdbSource as LmdbSource
from onemodel_cy.data.packs.containers import ParquetSource as ParquetSource
from onemodel_cy.data.packs.containers import WebDatasetSource as WebDatasetSource

# The named streams of §2 and of this package (docs/contract.md).
STREAM_TRANSFORM: int
STREAM_AUGMENTATION: int
STREAM_SYNTH_SHAPE: int
STREAM_SYNTH_PIXELS: int
STREAM_EPOCH_ORDER: int
STREAM_MIXING: int
STREAM_BUCKET_ORDER: int
STREAM_BUCKET_PLACE: int

__version__: str
__all__: list[str]
