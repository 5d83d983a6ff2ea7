"""§1 the worker engines: who builds the steps of a stream, and when.

``protocol``: the ``Engine`` protocol every engine answers. ``window``: the step window
they share. ``registry``: which engine a stream gets, the engines a loader keeps between
streams, and their ends. ``threads``, ``lane``, ``processes`` (with ``process_main``,
``shmring`` and ``taskboard``): the three engines. Whichever runs, a batch is the
pipeline's (``onemodel_cy.collate.pipeline``) function of its global step alone.
"""
from onemodel_cy.workers.protocol import DEFAULT_JOIN_TIMEOUT, Engine, StuckWorkerWarning

__all__ = ["Engine", "StuckWorkerWarning", "DEFAULT_JOIN_TIMEOUT"]
