"""Remote packs on S3 (issue 25, part 4): ``PackedImageDataset("s3://bucket/pack", ...)``.

Against a real S3-compatible server started here on 127.0.0.1: moto's server mode
(``python -m moto.server``, the ``test-s3`` extra), a subprocess speaking S3 over HTTP,
stopped at the end of the module. A pack and a sharded pack are uploaded with s3fs and read
by their s3:// URLs, the endpoint given as fsspec's ``storage_options`` (and, once, as
botocore's ``AWS_ENDPOINT_URL``): every sample and every batch, with 0 workers and with
worker processes (which reopen the URL with the same options), is the local pack's. Needs
the ``remote`` extra's s3fs; the runs of other Pythons leave this file out.
"""
from __future__ import annotations

import os

import pytest
import s3fs  # the remote extra (CI leaves this file out where it is not installed)

import onemodel_cy as om
from remote_packs import CONSTANTS, moto, same, stream, write_packs

pytestmark = pytest.mark.usefixtures("without_fsync")     # conftest.py


@pytest.fixture(scope="module")
def bucket(tmp_path_factory):
    """``(root, storage_options)``: the packs of ``root`` uploaded to bucket ``packs`` of a
    moto server on a free loopback port; the options reach it."""
    root = tmp_path_factory.mktemp("packs")
    write_packs(root)
    with moto() as endpoint:
        options = {"endpoint_url": endpoint, "key": "testing", "secret": "testing"}
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
        fs.mkdir("packs")
        for name in CONSTANTS:
            fs.put(str(root / name), f"packs/{name}", recursive=True)
        yield root, options


@pytest.mark.parametrize("name", list(CONSTANTS))
def test_a_pack_read_from_s3_is_the_local_pack(bucket, tmp_path, name):
    """Part 4: the pack fetched from the S3 server (the pixels sample by sample, each checked
    against its SHA-256; the other files by ranges, checked against the manifest) gives the
    local pack's samples at every index, and its batches with 0 workers and with worker
    processes, which reopen the URL with the pickled options and find the pack in the
    cache."""
    root, options = bucket
    local = om.PackedImageDataset(str(root / name), *CONSTANTS[name])
    remote = om.PackedImageDataset(f"s3://packs/{name}", *CONSTANTS[name], cache=str(tmp_path / "cache"),
                                   storage_options=options)
    assert remote.manifest_sha256 == local.manifest_sha256 and remote.storage_options == options
    same(local, remote)
    reference = stream(local)
    assert stream(remote) == reference
    assert stream(remote, workers=2, worker_mode="process") == reference
    assert os.listdir(tmp_path / "cache") == [local.manifest_sha256 + "-exact"]
    assert (remote.remote.present == 1).all()       # every sample was asked for, each fetched once, in place


def test_the_endpoint_may_come_from_botocores_environment(bucket, tmp_path, monkeypatch):
    """Part 4: without storage_options, s3fs takes the endpoint and the credentials where
    botocore looks for them (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID, ...)."""
    root, options = bucket
    for variable, value in (("AWS_ENDPOINT_URL", options["endpoint_url"]), ("AWS_ACCESS_KEY_ID", "testing"),
                            ("AWS_SECRET_ACCESS_KEY", "testing"), ("AWS_DEFAULT_REGION", "us-east-1")):
        monkeypatch.setenv(variable, value)
    s3fs.S3FileSystem.clear_instance_cache()     # a filesystem made earlier holds the environment it saw
    remote = om.PackedImageDataset("s3://packs/gray", 0.5, 0.25, cache=str(tmp_path / "cache"))
    same(om.PackedImageDataset(str(root / "gray"), 0.5, 0.25), remote)
    s3fs.S3FileSystem.clear_instance_cache()
