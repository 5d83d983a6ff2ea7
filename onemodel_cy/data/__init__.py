"""What batches are made of: ``Sample`` and the in-memory and synthetic datasets
(``datasets``), the learnable built-in lines (``textlines``), §6 the 8-bit pixel
conversion (``image``, with the kernels of ``src/row.h`` declared in ``row.pxd``), the
vocabulary convention (``vocabulary``), and packs (the ``packs`` subpackage: the format,
the writers, the memory-mapped dataset, packs at a URL). Stands on ``core`` only.
"""
