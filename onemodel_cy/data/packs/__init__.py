"""Packs (``docs/packed-format.md``): a dataset's samples written once into a folder of
``.npy`` files, then read memory-mapped on the loader's GIL-free route, locally or from a
URL. Each module owns one concern:

- ``format``: the on-disk format, its manifest and every check of it (plain Python);
- ``writer``, ``sources``, ``containers``, ``publish``: ``pack``, the sources it reads (a
  folder, an iterable, a dataset, and the LMDB, Parquet and WebDataset containers), and
  the exclusive publish of a finished folder;
- ``sharded``, ``dask``: ``pack_sharded`` (one task per shard), and its tasks on Dask;
- ``reader`` (compiled), ``pixelmap`` (compiled): ``PackedImageDataset``, and a sharded
  pack's pixel files mapped into one range;
- ``remote``, ``cache``, ``exact``: a pack at a URL fetched into the local cache (its
  requests, timeouts and retries), the cache's layout and bound, and the samples of an
  exact folder fetched as the loader needs them.

The public names are re-exported by ``onemodel_cy`` (``om.pack``, ``om.pack_sharded``,
``om.PackedImageDataset``, ``om.PackError``, ``om.PackReport``, ``om.LmdbSource``,
``om.ParquetSource``, ``om.WebDatasetSource``); importing this package
loads none of its modules.
"""
