"""From indices to a batch: the §5 pool (``bufferpool``), §4 the augmentations
(``augment``), the batch and its layout (``batch``), the slot table and the collator
(``collator``), §1 the fetch step (``fetch``), the Python-stage baton (``pacing``), and
the recipe every route runs, global step -> batch (``pipeline``). Stands on ``core`` and
``data``.
"""
