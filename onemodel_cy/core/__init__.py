"""The foundations every other part stands on: argument checks and checked size arithmetic
(``validate``), §2 the random streams (``rng``), §3 the keyed permutation (``permute``) and
the samplers (``samplers``), and sealed memory (``sealed``). Nothing here imports the rest
of the package.
"""
