"""What batches are made of: ``Sample`` and the in-memory and synthetic datasets
(``datasets``), the learnable built-in lines (``textlines``), §6 the 8-bit pixel
conversion (``image``, with the kernels of ``src/row.h`` declared in ``row.pxd``), and
packs: the format (``packfmt``), the memory-mapped dataset (``packed``), the writer
(``pack``) and its sources (``packsources``). Stands on ``core`` only.
"""
