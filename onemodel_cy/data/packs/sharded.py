"""The sharded pack writer: ``pack_sharded(...)`` and ``onemodel-cy pack --shards N``.

A sharded pack (``docs/packed-format.md``, "Sharded packs") is a folder of plain packs, one
per contiguous partition of the source, and a manifest naming them in order with their
counts and manifest SHA-256. Writing one takes three steps:

1. ``plan`` (the caller): read what says which items there are (the labels file, the
   dataset's length), fix the vocabulary once, so that every shard gives a symbol the same
   id, and cut the items into ``shards`` partitions: a ``ShardJob`` each.
2. ``write_shard`` (a task, here or on an engine's worker: ``dask.py``): one partition
   written as a plain pack by the pack writer, inside the sharded pack's partial folder,
   published there under its name by the writer's own rename. A failed attempt removes
   its files; one whose process died leaves a hidden folder that step 3 removes.
3. ``finish`` (the caller): remove whatever is in the partial folder but not a shard that
   a task reported, write the manifest, and publish the folder with the writer's
   exclusive rename. If any task failed for good, the partial folder is removed instead:
   nothing is published.

The samples, labels, keys, vocabulary and skips are those ``pack`` gives for the same
source, in the same order (tested sample for sample and through the loader): only the
files differ.
"""
from __future__ import annotations

import dataclasses
import os
import secrets
import shutil
import socket
import time

from onemodel_cy.core.validate import note_exception
from onemodel_cy.data.packs.format import INT32_END, SHARDED_FORMAT, VERSION, PackError, open_manifest, write_manifest
from onemodel_cy.data.packs.publish import publish, remove_path, sync_folder
from onemodel_cy.data.packs.writer import PackReport, _PackWriter, is_container, recorded_vocabulary, with_progress
from onemodel_cy.data.vocabulary import Vocabulary

ENGINES = ("local", "dask")


@dataclasses.dataclass
class ShardJob:
    """One partition of the source, what one task packs into one shard. Pickled to an
    engine's worker: it holds the folder entries (not the images) or the dataset itself."""
    name: str                   # the shard's folder name in the pack
    source: str                 # "folder", a container's format or "dataset", recorded in the shard's manifest
    vocabulary: Vocabulary | None   # fixed by the plan, the same in every shard: it encodes the texts
    start: int                  # the partition: items start .. stop - 1 of the plan
    stop: int
    entries: list = None        # a folder: the labels file's entries of this partition
    fit: object = None          # sources.Fit: how every line is fitted, the same in every shard
    threads: int = 1
    dataset: object = None      # a dataset: the whole dataset (its items start .. stop - 1 packed)
    container: object = None    # a container (containers.py): its paths and options, its records in entries
    sizes: list = None          # a folder on an engine: the bytes of each entry's file, as the client saw it
    identity: list = None       # a container: its files this partition reads, as the plan saw them (Container.identity)

    def samples(self):
        """``(stream of checked samples, skipped list)`` of this partition, as ``pack`` reads them."""
        if self.sizes is not None:
            self.check_files()
        if self.identity is not None:
            self.check_container()
        if self.entries is not None:
            from onemodel_cy.data.packs.sources import decoded
            skipped = []
            return decoded(self.entries, self.vocabulary, self.fit, self.threads, skipped,
                           self.container), skipped
        from onemodel_cy.data.packs.sources import dataset_samples
        return dataset_samples(self.dataset, self.start, self.stop, self.fit)

    def check_files(self) -> None:
        """On an engine's worker: each file this partition names (by its absolute path) is
        the size the client saw; another is a ``PackError``, not another folder's images
        paired with the client's texts."""
        for (position, name, path, _), size in zip(self.entries, self.sizes):
            try:
                found = os.path.getsize(path)
            except OSError as error:
                found = f"unreadable ({error.strerror})"
            if found != size:
                raise PackError(f"{path}: {found if isinstance(found, str) else f'{found} bytes'} on this worker "
                                f"({socket.gethostname()}), {size} bytes where the pack was planned (labels line "
                                f"{position + 1}, {name!r}): the engine's workers must see the source at the same "
                                f"path as the client")

    def check_container(self) -> None:
        """Where the task runs (an engine's worker, or this process after the plan): each
        file of the container this partition reads is the one the plan read its texts from
        (``Container.identity``); another is a ``PackError`` naming the file, what the plan
        saw and what the task finds, before a shard is written: not another file's images
        paired with the plan's texts."""
        try:
            found = self.container.identity(self.entries)
        except (OSError, PackError) as error:
            found = [(path, f"unreadable ({getattr(error, 'strerror', None) or error})") for path, _ in self.identity]
        for (path, seen), (where, there) in zip(self.identity, found):
            if where != path:
                there = f"the file {where}" if where is not None else f"only {there['files']} files"
            if there != seen:
                raise PackError(f"{path}: {described(there)} where shard {self.name}'s task runs "
                                f"({socket.gethostname()}), {described(seen)} where the pack was planned "
                                f"({self.describe()}): the file changed since, or the engine's workers do not "
                                f"see the client's file at this path")

    def describe(self) -> str:
        if self.source == "folder":
            return f"labels lines {self.entries[0][0] + 1}..{self.entries[-1][0] + 1}"
        if self.entries is not None:
            return f"records {self.entries[0][0]}..{self.entries[-1][0]} of {self.container!r}"
        return f"dataset indices {self.start}..{self.stop - 1}"


def described(identity) -> str:
    """A file's identity (``Container.identity``) as words: ``1234 bytes, rows 7, ...``."""
    if isinstance(identity, str):
        return identity
    return ", ".join(f"{value} bytes" if what == "bytes" else f"{what} {value}" for what, value in identity.items())


def write_shard(folder: str, job: ShardJob) -> dict:
    """The task: ``job``'s partition written as a pack named ``job.name`` in ``folder`` (the
    sharded pack's partial folder, which must exist: a task still running after its pack
    was abandoned writes nothing). Returns ``{"name", "count", "skipped"}``; a count of 0
    (every item skipped) publishes no shard. A retried task replaces what an earlier
    attempt of it published (the same bytes: a shard is a function of its partition)."""
    writer = _PackWriter(os.path.join(folder, job.name), overwrite=True, make_parent=False)
    try:
        items, skipped = job.samples()
        for image, target, label, key in items:
            writer.add(image, target, label, key)
        if not writer.labels:
            writer.abort(None)
            return {"name": job.name, "count": 0, "skipped": skipped}
        count, _ = writer.finish(job.vocabulary, job.source)
    except BaseException as error:
        writer.abort(error)
        note_exception(error, f"while writing shard {job.name} ({job.describe()})")
        raise
    return {"name": job.name, "count": count, "skipped": skipped}


def plan(source, shards, *, labels, height, mode, vocabulary, workers, engine, max_width=None, too_wide="downscale"):
    """``(jobs, skipped, vocabulary, source name)``: the source cut into ``shards`` contiguous
    partitions, ``shards`` at most the number of items to pack."""
    container = is_container(source)
    fitting = (height, mode, max_width, too_wide)
    # Every path resolved here, on the client: a task reads what the client named, whatever
    # its worker's working folder (a relative path on a worker is its own folder's).
    if container:
        source = source.absolute()
    elif isinstance(source, (str, os.PathLike)):
        source = os.path.abspath(os.fspath(source))
        labels = None if labels is None else os.path.abspath(os.fspath(labels))
    if container or isinstance(source, (str, os.PathLike)):
        from onemodel_cy.data.packs.sources import container_plan, decode_threads, fit_for, folder_plan
        if container:
            if labels is not None:
                raise TypeError(f"labels= is a folder's labels file; {source!r} holds its texts")
            fit = fit_for(*fitting, files=True)
            entries, vocabulary, skipped = container_plan(source, vocabulary)
            name = source.format
        elif labels is None:
            raise TypeError("packing a folder needs labels= (a file of 'name<TAB>text' lines)")
        else:
            fit = fit_for(*fitting, files=True)
            entries, vocabulary, skipped = folder_plan(source, labels, vocabulary)
            name = "folder"
        # On an engine its workers are the parallelism: one decoding thread per task by default.
        threads = decode_threads(workers, default=1 if engine != "local" else None)
        common = dict(source=name, vocabulary=vocabulary, fit=fit, threads=threads,
                      container=source if container else None)
        cut = partitions(len(entries), shards)
        # On an engine, the bytes of each image as the client sees it: the task checks it reads those files.
        sizes = [os.path.getsize(entry[2]) for entry in entries] if engine != "local" and not container else None
        # A container's files as the plan read them, on every engine (a task runs after the
        # plan, on the local engine too): cheap (no image read), and its task refuses others.
        return ([ShardJob(shard_name(k), start=a, stop=b, entries=entries[a:b],
                          sizes=None if sizes is None else sizes[a:b],
                          identity=source.identity(entries[a:b], planned=True) if container else None, **common)
                 for k, (a, b) in enumerate(cut)], skipped, vocabulary, name)
    if hasattr(source, "get_sample"):
        from onemodel_cy.data.packs.sources import fit_for
        fit = fit_for(*fitting, files=False)
        vocabulary = recorded_vocabulary(vocabulary)
        cut = partitions(len(source), shards)
        return ([ShardJob(shard_name(k), "dataset", vocabulary, a, b, dataset=source, fit=fit)
                 for k, (a, b) in enumerate(cut)], [], vocabulary, "dataset")
    raise TypeError(f"shards= needs a folder of images (with labels=), a container or a dataset (len and "
                    f"get_sample), whose items can be cut into partitions; received {type(source).__name__} "
                    f"(pack writes an iterable, whole)")


def partitions(total: int, shards: int) -> list:
    """``shards`` contiguous ``(start, stop)`` ranges of ``range(total)``, as even as can be."""
    if total == 0:
        raise ValueError("nothing to pack: every item was skipped or the source was empty")
    if shards > total:
        raise ValueError(f"shards must be at most the {total} items to pack, received {shards}")
    return [(k * total // shards, (k + 1) * total // shards) for k in range(shards)]


def shard_name(k: int) -> str:
    return f"shard-{k:05d}"


def finish(folder: str, out: str, results: list, vocabulary, source: str, overwrite: bool) -> tuple[int, int, int]:
    """Write the manifest of the shards the tasks reported and publish ``folder`` as ``out``;
    ``(count, shards, bytes)``. Anything else in ``folder`` (a hidden folder of an attempt
    whose process died, a shard a retried attempt left empty) is removed first."""
    kept = [r for r in results if r["count"]]
    if not kept:
        raise ValueError("nothing to pack: every item was skipped or the source was empty")
    names = {r["name"] for r in kept}
    for entry in os.listdir(folder):
        if entry not in names:
            remove_path(os.path.join(folder, entry))
    shards, kinds = [], set()
    for result in kept:
        manifest, digest = open_manifest(os.path.join(folder, result["name"]))
        shards.append({"name": result["name"], "count": manifest["count"], "manifest_sha256": digest})
        kinds.add(manifest["pixels"])
    if len(kinds) != 1:
        raise TypeError(f"every image of a pack has one kind of pixels: the shards hold {sorted(kinds)}")
    count = sum(shard["count"] for shard in shards)
    if count >= INT32_END:
        raise ValueError(f"a pack holds fewer than 2**31 samples, these shards hold {count}")
    write_manifest(folder, {"format": SHARDED_FORMAT, "version": VERSION, "count": count, "pixels": kinds.pop(),
                            "vocabulary": None if vocabulary is None else list(vocabulary.symbols),
                            "source": source, "shards": shards})
    sync_folder(folder)
    size = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(folder) for f in files)
    publish(folder, out, overwrite)
    return count, len(shards), size


def pack_sharded(source, out, *, shards, engine="local", engine_workers=None, labels=None, height=None, mode=None,
                 max_width=None, too_wide="downscale", vocabulary=None, workers=None, progress=True,
                 overwrite=False) -> PackReport:
    """Write the samples :func:`pack` writes for ``source`` as a sharded pack of ``shards``
    shards (``docs/packed-format.md``, "Sharded packs"), one per contiguous partition of the
    source, each written by a task: the same sample at every index, the same vocabulary
    and skip report. The arguments not listed here are :func:`pack`'s.

    Parameters
    ----------
    source : folder path, container or dataset
        A folder of image files (with ``labels=``), an ``LmdbSource``, ``ParquetSource`` or
        ``WebDatasetSource`` (partitions of its records), or an object with ``get_sample(i)``
        and ``len`` (its items can be cut into partitions; an iterable cannot).
    shards : int
        How many shards (partitions), at least 1 and at most the items to pack.
    engine : {"local", "dask"}, a scheduler address or a dask.distributed.Client, default "local"
        Where the shard tasks run: one after another in this process; on a Dask
        ``LocalCluster`` of ``engine_workers`` processes started and closed here (the
        ``distributed`` extra); or on the cluster of the Dask scheduler at the given
        address (``"tcp://host:port"``) or of the given client, whose workers must see
        ``out``'s folder and, for a folder source, the images, at the same paths. With an
        engine, ``workers`` is the decoding threads of each task (default 1).
    engine_workers : int, optional
        The processes of the ``LocalCluster`` (default: the number of CPUs).

    A task that fails is run again (Dask's retries; one whose process died is rescheduled)
    and what its attempt left is removed; if one fails for good, its error is raised (with
    a note naming the shard and its items) and nothing is published.
    """
    started = time.perf_counter()
    if type(shards) is not int or shards < 1:
        raise ValueError(f"shards must be an integer >= 1, received {shards!r}")
    engine, client = engine_of(engine, engine_workers)
    out = os.path.abspath(os.fspath(out))
    if os.path.lexists(out) and not overwrite:
        raise FileExistsError(f"{out}: already exists (pass overwrite=True / --overwrite to replace it)")
    jobs, skipped, vocabulary, name = plan(source, shards, labels=labels, height=height, mode=mode, max_width=max_width,
                                           too_wide=too_wide, vocabulary=vocabulary, workers=workers, engine=engine)
    parent, base = os.path.split(out)
    os.makedirs(parent, exist_ok=True)
    folder = os.path.join(parent, f".{base}.partial-{os.getpid()}-{secrets.token_hex(4)}")
    os.mkdir(folder)
    try:
        if engine == "local":
            results = [write_shard(folder, job) for job in with_progress(jobs, len(jobs), progress, "shard")]
        else:
            from onemodel_cy.data.packs.dask import run_on_dask
            results = run_on_dask(write_shard, folder, jobs, client=client, workers=engine_workers,
                                  progress=progress)
        count, written, size = finish(folder, out, results, vocabulary, name, overwrite)
    except BaseException:
        abandon(folder)
        raise
    skipped = skipped + [item for result in results for item in result["skipped"]]
    return PackReport(out, count, skipped, time.perf_counter() - started, size, vocabulary, shards=written)


def engine_of(engine, engine_workers) -> tuple:
    """``(engine, client)``: ``"local"`` or ``"dask"``, and the Dask client or scheduler
    address to run on (None: a ``LocalCluster`` of ``engine_workers`` started here)."""
    client = None
    if isinstance(engine, str) and "://" in engine:        # a Dask scheduler's address
        client, engine = engine, "dask"
    elif engine is None or isinstance(engine, str):
        if (engine or "local") not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, a Dask scheduler's address (tcp://host:port) or a "
                             f"dask.distributed Client, received {engine!r}")
        engine = engine or "local"
    else:
        client, engine = engine, "dask"
    if engine_workers is not None and (engine != "dask" or client is not None):
        raise ValueError(f"engine_workers is the size of the LocalCluster engine='dask' starts; received "
                         f"engine_workers={engine_workers!r} with engine={engine if client is None else client!r}")
    return engine, client


def abandon(folder: str) -> None:
    """Remove the partial folder of a pack that failed. It is renamed first: a task still
    running on a cluster this writer does not own (cancelled, but a running task cannot be
    stopped) creates its files by paths under the old name, which then fail, so nothing
    appears in the folder while it is being removed, and nothing recreates it."""
    doomed = f"{folder}.abandoned"
    try:
        os.rename(folder, doomed)
    except OSError:
        doomed = folder
    shutil.rmtree(doomed, ignore_errors=True)
