"""Instruments for the test suite and the benchmarks, not for training code.

``onemodel_cy.testing._alloccount`` counts the bytes allocated on the calling thread by
wrapping Python's allocators process-wide once ``install()`` is called; every allocation
of the process then pays for the count. The spec tests (§5) and ``benchmarks/`` use it to
show what loading a batch allocates. Nothing in the package imports this subpackage.
"""
