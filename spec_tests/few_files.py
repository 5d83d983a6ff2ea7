"""A pack opened by a fresh interpreter limited to a few open files (issue 36, item 11):
``test_packs_sharded.py`` opens a folder this way, ``test_packs_cache.py`` a URL."""
from __future__ import annotations

import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# What running out of descriptors says (a regular expression): the cause, then the limit.
OUT_OF_FILES = r"out of file descriptors \(Too many open files\)"
THE_LIMIT = r"the open-file limit \(RLIMIT_NOFILE\) is \d+(, \d+ open)?; raise it \(ulimit -n, resource\.setrlimit\)$"

# Lowers the soft RLIMIT_NOFILE to argv[1] (``+N``: N more than the files open once every
# module the open needs is imported), opens argv[2] (a folder, or a URL with
# argv[3] its cache), then reads every sample in a shuffled order (a URL's are fetched one
# by one, so every shard file is written) and prints what a test compares: the count, the
# last sample's shape and the SHA-256 of every sample's image and target, in index order.
# Any exception is printed as one line, its type first.
FEW_FILES = r"""
import hashlib, os, resource, sys
import numpy as np
import onemodel_cy as om
if "://" in sys.argv[2]:
    import aiohttp, fsspec     # imported before the limit: an import opens files too
given = sys.argv[1]
limit = len(os.listdir("/proc/self/fd")) - 1 + int(given[1:]) if given.startswith("+") else int(given)
resource.setrlimit(resource.RLIMIT_NOFILE, (limit, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
try:
    dataset = om.PackedImageDataset(sys.argv[2], **({"cache": sys.argv[3]} if len(sys.argv) > 3 else {}))
    samples = {}
    for i in np.random.default_rng(0).permutation(len(dataset)).tolist():
        sample = dataset.get_sample(i)
        samples[i] = sample.image.tobytes() + np.asarray(sample.target, np.int64).tobytes()
    digest = hashlib.sha256(b"".join(samples[i] for i in range(len(dataset)))).hexdigest()
    print("opened", len(dataset), dataset.get_sample(len(dataset) - 1).image.shape, digest)
except Exception as error:
    print(type(error).__name__, error)
"""


def open_with_few_files(limit, *args):
    """What a fresh interpreter limited to ``limit`` open files (``"+N"``: N more than it has
    open) says opening ``args[0]`` (a path or URL; ``args[1]``: the cache) and reading every
    sample."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-c", FEW_FILES, str(limit), *map(str, args)], env=env,
                          cwd=os.path.dirname(HERE), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def digest_of(dataset):
    """The SHA-256 ``FEW_FILES`` prints, of ``dataset`` read in this process."""
    import hashlib

    import numpy as np
    parts = []
    for i in range(len(dataset)):
        sample = dataset.get_sample(i)
        parts.append(sample.image.tobytes() + np.asarray(sample.target, np.int64).tobytes())
    return hashlib.sha256(b"".join(parts)).hexdigest()
