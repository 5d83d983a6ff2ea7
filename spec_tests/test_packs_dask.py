"""Sharded packs written by Dask (``pack_sharded(..., engine=...)``, ``onemodel-cy pack --engine dask``).

On a real LocalCluster of 2 worker processes, started once for the module (and closed at
its end): each task writes one shard from one partition; the pack equals ``om.pack`` of the
same source at every index and through the loader, and is the byte-identical pack the
local engine writes; a task that fails once (an error, or its worker process dying in the
middle of its shard) is run again and leaves nothing of its first attempt; a task that
fails for good publishes nothing. Needs the ``distributed`` extra (CI installs it; the
runs of other Pythons leave this file out when it is missing).
"""
from __future__ import annotations

import logging
import os
import re
import sys

import cloudpickle
import pytest
from dask.distributed import Client, LocalCluster

import onemodel_cy as om
from onemodel_cy.cli import main
from onemodel_cy.data.packs import sharded
from onemodel_cy.data.packs.publish import remove_path
from harness import batch_bits
from line_images import random_png_lines


pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py: in this process and (below) the workers

# The workers unpickle this module's failing dataset by value: they cannot import a test file.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def no_fsync():
    from onemodel_cy.data.packs import format as _format
    _format.FSYNC = False


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0",
                      silence_logs=logging.ERROR) as cluster, Client(cluster) as client:
        client.run(no_fsync)
        yield client


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """17 gray PNG lines, one of them corrupt (skipped inside a shard), and a labels file."""
    root = tmp_path_factory.mktemp("lines")
    lines = random_png_lines(root, 17, seed=11, widths=(5, 50), heights=(6, 16), alphabet="lorem ipsum")
    (root / "05.png").write_bytes(b"corrupt")
    (root / "labels.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return str(root), str(root / "labels.txt")


class Flaky:
    """SyntheticTextLines whose sample ``at`` fails: reading its image raises an OSError
    (``"raise"``), or the process dies (``"kill"``, in the middle of writing its shard);
    once, when ``marker`` is given (the file records the failure), or every time."""

    def __init__(self, count, at, how, marker=None):
        self.lines, self.at, self.how, self.marker = om.SyntheticTextLines(count, seed=4), at, how, marker

    def __len__(self):
        return len(self.lines)

    def get_sample(self, i):
        sample = self.lines.get_sample(i)
        if i != self.at or (self.marker is not None and os.path.exists(self.marker)):
            return sample
        if self.marker is not None:
            open(self.marker, "w").close()
        if self.how == "kill":
            os._exit(3)
        return Unreadable(sample)


class Unreadable:
    def __init__(self, sample):
        self.target, self.label = sample.target, sample.label

    @property
    def image(self):
        raise OSError("injected: the disk went away")


def assert_same_as(reference, path, constants=(None, None)):
    """The pack at ``path`` serves ``reference``'s sample at every index, and its batches
    through the loader (the packed lane, two epochs) bit for bit."""
    a, b = om.PackedImageDataset(reference, *constants), om.PackedImageDataset(path, *constants)
    assert len(a) == len(b)
    for i in range(len(a)):
        x, y = a.get_sample(i), b.get_sample(i)
        assert (x.image.tobytes(), x.target.tolist(), x.label, a.key(i)) == \
               (y.image.tobytes(), y.target.tolist(), y.label, b.key(i)), i
    assert stream(a) == stream(b)


def stream(dataset):
    loader = om.DataLoader(dataset, om.ShuffledSampler(len(dataset), 4, seed=1),
                           om.ImageBatchCollator(width_multiple=4, augmentation=om.GainOffset()), seed=2, workers=2)
    with loader.iter(0, 2 * loader.steps_per_epoch) as batches:
        bits = [batch_bits(batch) for batch in batches]
    loader.close()
    return bits


def published(tmp_path):
    """What lies in tmp_path, hidden entries (partial folders) included."""
    return sorted(os.listdir(tmp_path))


def test_a_folder_packed_on_dask_is_om_pack_of_it(client, folder, tmp_path):
    """Issue 25 (2): 4 tasks, each a shard of a partition of the labels file; the pack equals
    om.pack's at every index (pixels, target, label, key) and through the loader, reports the
    same skip, and is byte for byte the sharded pack the local engine writes (same manifest
    SHA-256)."""
    images, labels = folder
    kw = dict(labels=labels, height=8, progress=False)
    plain = om.pack(images, str(tmp_path / "plain"), **kw)
    local = om.pack_sharded(images, str(tmp_path / "local"), shards=4, **kw)
    dask = om.pack_sharded(images, str(tmp_path / "dask"), shards=4, engine=client, **kw)
    assert dask.count == plain.count == 16 and dask.shards == 4 and dask.skipped == plain.skipped
    assert dask.vocabulary == plain.vocabulary
    assert_same_as(plain.path, dask.path, (0.5, 0.25))
    assert (om.PackedImageDataset(dask.path, 0, 1).manifest_sha256
            == om.PackedImageDataset(local.path, 0, 1).manifest_sha256)
    assert published(tmp_path) == ["dask", "local", "plain"]


def test_a_task_that_fails_once_is_retried_and_leaves_nothing(client, tmp_path):
    """Issue 25 (2): the task of shard 1 fails once with an error (its attempt removes its
    files) and is run again by Dask: the pack is om.pack's."""
    source = Flaky(40, at=13, how="raise", marker=str(tmp_path / "failed-once"))
    dask = om.pack_sharded(source, str(tmp_path / "dask"), shards=3, engine=client, progress=False)
    assert os.path.exists(tmp_path / "failed-once")
    assert_same_as(om.pack(source, str(tmp_path / "plain"), progress=False).path, dask.path)
    assert sorted(os.listdir(dask.path)) == ["manifest.json", "shard-00000", "shard-00001", "shard-00002"]
    assert published(tmp_path) == ["dask", "failed-once", "plain"]


def test_a_task_whose_worker_dies_mid_shard_is_rescheduled_and_its_half_shard_removed(client, tmp_path,
                                                                                      monkeypatch):
    """Issue 25 (2): the process writing shard 1 dies after writing part of it (its hidden
    partial folder stays on the disk); the scheduler runs the task again on a live worker.
    The last step removes the half shard; the published pack holds the manifest and the
    three shards, nothing else, and is om.pack's sample for sample."""
    removed = []
    monkeypatch.setattr(sharded, "remove_path", lambda path: (removed.append(path), remove_path(path)))
    source = Flaky(40, at=20, how="kill", marker=str(tmp_path / "died-once"))
    dask = om.pack_sharded(source, str(tmp_path / "dask"), shards=3, engine=client, progress=False)
    assert os.path.exists(tmp_path / "died-once")
    assert [os.path.basename(path).split("-")[:2] for path in removed] == [[".shard", "00001.partial"]], removed
    assert sorted(os.listdir(dask.path)) == ["manifest.json", "shard-00000", "shard-00001", "shard-00002"]
    for shard in ("shard-00000", "shard-00001", "shard-00002"):
        assert not [n for n in os.listdir(os.path.join(dask.path, shard)) if n.startswith(".")]
    assert_same_as(om.pack(source, str(tmp_path / "plain"), progress=False).path, dask.path)
    assert published(tmp_path) == ["dask", "died-once", "plain"]


def test_a_task_that_fails_for_good_publishes_nothing(client, tmp_path):
    """Issue 25 (2): shard 2's task fails at every attempt: pack raises the task's error,
    naming the shard and its items; nothing is published and no partial folder is left."""
    with pytest.raises(OSError, match="injected: the disk went away") as caught:
        om.pack_sharded(Flaky(30, at=25, how="raise"), str(tmp_path / "dask"), shards=3, engine=client,
                        progress=False)
    assert "while writing shard shard-00002 (dataset indices 20..29)" in "\n".join(getattr(caught.value,
                                                                                        "__notes__", [])) \
        or sys.version_info < (3, 11)
    assert published(tmp_path) == []


def test_cli_packs_on_dask_on_its_own_cluster_and_on_a_scheduler(client, folder, tmp_path, capsys):
    """Issue 25 (2): onemodel-cy pack --engine dask --shards N: on a LocalCluster the command
    starts (--engine-workers 1) and on a running one (--scheduler ADDRESS); both equal the
    plain pack."""
    images, labels = folder
    plain = om.pack(images, str(tmp_path / "plain"), labels=labels, height=8, progress=False)
    base = ["pack", images, "--labels", labels, "--height", "8", "--no-progress", "--engine", "dask", "--shards", "3"]
    assert main([*base[:2], str(tmp_path / "own"), *base[2:], "--engine-workers", "1"]) == 0
    assert main([*base[:2], str(tmp_path / "theirs"), *base[2:], "--scheduler", client.scheduler.address]) == 0
    assert capsys.readouterr().out.count("(3 shards)") == 2
    for name in ("own", "theirs"):
        assert_same_as(plain.path, str(tmp_path / name), (0.5, 0.25))
    assert published(tmp_path) == ["own", "plain", "theirs"]


def test_a_container_on_dask_equals_the_local_engine(client, tmp_path):
    """A container (here an LMDB written by lmdb) goes to the Dask workers as its path and
    options; each task reads its partition's records: the sharded pack is byte for byte
    the local engine's."""
    import lmdb
    from PIL import Image
    import io
    env = lmdb.open(str(tmp_path / "lines.lmdb"), map_size=1 << 24)
    with env.begin(write=True) as txn:
        for i in range(1, 8):
            buffer = io.BytesIO()
            Image.new("L", (10 + 3 * i, 8 + i % 3), 40 * i % 256).save(buffer, "PNG")
            txn.put(b"image-%09d" % i, buffer.getvalue())
            txn.put(b"label-%09d" % i, f"line {i}".encode())
        txn.put(b"num-samples", b"7")
    env.close()
    source = om.LmdbSource(tmp_path / "lines.lmdb")
    local = om.pack_sharded(source, str(tmp_path / "local"), shards=3, height=8, progress=False)
    dask = om.pack_sharded(source, str(tmp_path / "dask"), shards=3, height=8, engine=client, progress=False)
    assert (local.count, local.shards) == (dask.count, dask.shards) == (7, 3)
    for root, _, files in os.walk(local.path):
        for name in files:
            mine = os.path.join(root, name)
            with open(mine, "rb") as a, open(mine.replace(local.path, dask.path), "rb") as b:
                assert a.read() == b.read(), mine


def lines_folder(root, seed):
    root.mkdir()
    lines = random_png_lines(root, 12, seed=seed, widths=(5, 50), heights=(6, 16), alphabet="lorem ipsum")
    (root / "labels.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return root


def test_a_relative_folder_is_resolved_on_the_client(client, tmp_path, monkeypatch):
    """Issue 36, item 5: a relative folder and labels file given to the Dask engine name the
    client's files, whatever the workers' working folder: here the workers run in a decoy
    folder holding other images under the same names (which they decoded before, pairing
    them with the client's texts); the pack is om.pack of the client's folder."""
    real, decoy = lines_folder(tmp_path / "real", 31), lines_folder(tmp_path / "decoy", 32)
    before = client.run(os.getcwd)
    client.run(os.chdir, str(decoy))
    try:
        monkeypatch.chdir(real)
        dask = om.pack_sharded(".", str(tmp_path / "dask"), shards=3, labels="labels.txt", height=8, engine=client,
                               progress=False)
    finally:
        for address, folder in before.items():
            client.run(os.chdir, folder, workers=[address])
    plain = om.pack(str(real), str(tmp_path / "plain"), labels=str(real / "labels.txt"), height=8, progress=False)
    assert_same_as(plain.path, dask.path, (0.5, 0.25))


def test_a_worker_that_finds_other_files_at_the_clients_paths_refuses_them(client, tmp_path):
    """Issue 36, item 5: each task checks that the files it reads are the ones the client
    planned with (their sizes): an image that is another file where the worker reads it
    (here: replaced after the plan, as a worker of another machine may see another file at
    that path) is a PackError naming the file and the worker, not another image packed."""
    from PIL import Image
    real = lines_folder(tmp_path / "real", 33)
    jobs, _, _, _ = sharded.plan(str(real), 2, labels=str(real / "labels.txt"), height=8, mode="L",
                                 vocabulary=None, workers=None, engine="dask")
    Image.new("L", (77, 9), 3).save(real / "01.png")
    (tmp_path / "partial").mkdir()
    with pytest.raises(om.PackError, match=rf"^{re.escape(str(real / '01.png'))}: \d+ bytes on this worker \(.+\), "
                                           r"\d+ bytes where the pack was planned \(labels line 2, '01.png'\): the "
                                           r"engine's workers must see the source at the same path as the client"):
        client.submit(sharded.write_shard, str(tmp_path / "partial"), jobs[0], pure=False).result()


@pytest.mark.parametrize("kind", ["lmdb", "parquet", "webdataset"])
def test_a_worker_that_finds_another_container_at_the_clients_path_refuses_it(client, tmp_path, kind):
    """Issue 36, item 5, for a container: the client records each file of the container as
    its plan read it (``Container.identity``: its size, what the format says of it, the
    digest of the partition's texts or tar headers) and ships it in the task, which reads
    it again on the worker: here the file was replaced after the plan by the same records
    in reverse order (as a worker of another machine may see another copy at that path; an
    LMDB of the same size, count and commit). A PackError names the file, what the client
    saw and what the worker found, and no shard is written."""
    from test_packs_containers import encoded_lines, planned_then_replaced, refused_after_the_plan
    jobs, file = planned_then_replaced(encoded_lines(), tmp_path, kind, "dask")
    with pytest.raises(om.PackError, match=refused_after_the_plan(file)):
        client.submit(sharded.write_shard, str(tmp_path / "partial"), jobs[0], pure=False).result()
    assert os.listdir(tmp_path / "partial") == []


def test_a_relative_container_is_resolved_on_the_client(client, tmp_path, monkeypatch):
    """Issue 36, item 5: a container named by a relative path reads the client's file on
    the workers, whose working folder (here) holds another container of the same name;
    the pack is the local engine's of the client's container."""
    from test_packs_containers import encoded_lines, write_container
    lines = encoded_lines()
    real, _ = write_container(tmp_path / "real", "lmdb", lines)
    write_container(tmp_path / "decoy", "lmdb", lines[::-1])
    before = client.run(os.getcwd)
    client.run(os.chdir, str(tmp_path / "decoy"))
    try:
        monkeypatch.chdir(tmp_path / "real")
        dask = om.pack_sharded(om.LmdbSource("lines.lmdb"), str(tmp_path / "dask"), shards=3, height=16,
                               engine=client, progress=False)
    finally:
        for address, folder in before.items():
            client.run(os.chdir, folder, workers=[address])
    local = om.pack_sharded(real, str(tmp_path / "local"), shards=3, height=16, progress=False)
    assert_same_as(local.path, dask.path, (0.5, 0.25))
