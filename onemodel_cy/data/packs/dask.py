"""The shard tasks of a sharded pack (``sharded.py``) on Dask: ``pack_sharded(..., engine="dask")``.

Why Dask rather than Ray Data (docs/packed-format.md, "Writing a sharded pack"): a shard
task is one plain function call on one partition, which ``Client.submit`` runs as it is,
with retries and rescheduling when a worker process dies; ``dask.distributed`` is pure
Python, installs with pip in a fresh venv (about 45 MB with what it brings) and starts a
``LocalCluster`` of processes in seconds, where Ray brings a native runtime with its own
object store and daemon processes, and Ray Data's datasets of rows, which this writer has
no use for. Nothing of the package imports this module unless an engine is asked for:
``dask`` is the optional ``distributed`` extra. (This module is ``onemodel_cy.data.packs.dask``:
``import dask`` in it is the Dask package, imports being absolute.)
"""
from __future__ import annotations

import logging
import os

from onemodel_cy.data.packs.writer import with_progress

# A task that raises is run again this many times (a passing fault of a shared file system,
# a worker short of memory) before the pack fails; a task whose worker process dies is
# rescheduled by the scheduler itself (distributed.scheduler.allowed-failures, 3 by default).
RETRIES = 2
# Starting a LocalCluster, connecting to a scheduler: bounded, so a stuck start is an error.
START_TIMEOUT = 60


def run_on_dask(task, folder, jobs, *, client=None, workers=None, progress=False) -> list:
    """``[task(folder, job) for job in jobs]``, each call a Dask task, in the jobs' order.

    Without ``client``: on a ``LocalCluster`` of ``workers`` processes (one thread each),
    started here and closed before this returns or raises, so a task still running when
    another failed for good is ended with its process before the caller removes ``folder``.
    With a ``client`` (a ``dask.distributed.Client`` or a scheduler's address): on its
    cluster, which is left running; on a failure the other tasks are cancelled."""
    try:
        from dask.distributed import Client, LocalCluster, as_completed
        from distributed.scheduler import KilledWorker
    except ImportError:
        raise ImportError("engine 'dask' needs dask.distributed: pip install 'onemodel-cy[distributed]' (in a "
                          "checkout: pip install -e '.[distributed]')") from None
    cluster = owned_client = None
    if client is None:
        count = workers if workers is not None else (os.cpu_count() or 1)
        if type(count) is not int or count < 1:
            raise ValueError(f"engine_workers must be an integer >= 1, received {workers!r}")
        cluster = LocalCluster(n_workers=count, threads_per_worker=1, processes=True, dashboard_address=":0",
                               silence_logs=logging.ERROR, timeout=START_TIMEOUT)
        client = owned_client = Client(cluster, timeout=START_TIMEOUT)
    elif isinstance(client, str):
        client = owned_client = Client(client, timeout=START_TIMEOUT)
    futures = []
    try:
        futures = [client.submit(task, folder, job, key=f"onemodel-cy-{os.path.basename(folder)}-{job.name}",
                                 retries=RETRIES, pure=False) for job in jobs]
        names = {future.key: job.name for future, job in zip(futures, jobs)}
        done = with_progress(as_completed(futures), len(futures), progress, "shard")
        for future in done:
            try:
                future.result()         # the task's own error, after its retries
            except KilledWorker as error:
                raise RuntimeError(f"shard {names[future.key]}: its task ended the worker process running it "
                                   f"each time it ran ({error}); nothing was published") from None
        return [future.result() for future in futures]
    except BaseException:
        if cluster is None:         # not ours to close: stop what it would still run
            client.cancel(futures)
        raise
    finally:
        if owned_client is not None:
            owned_client.close()
        if cluster is not None:
            cluster.close()         # ends every worker process, and a task still running in it
