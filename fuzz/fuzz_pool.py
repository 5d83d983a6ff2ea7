"""Fuzz ``BufferPool``: the constructor, ``reserve(nbytes, count)``, ``stats()`` and
``clear()`` with fuzzed sizes and counts (§5). Stats must stay consistent: never more bytes
held than ``max_bytes`` allows, never a negative count."""
import numbers
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import Draw, call, check, main  # noqa: E402

import onemodel_cy as om  # noqa: E402

# The keys the stub documents (the pool may report more, e.g. "reserved").
KEYS = {"hits", "misses", "returned", "dropped", "bytes_held", "blocks_in_use", "bytes_in_use"}


def consistent(pool):
    stats = pool.stats()
    check(KEYS <= set(stats), f"stats keys {sorted(stats)}")
    check(all(isinstance(v, int) and v >= 0 for v in stats.values()), f"stats {stats}")
    check(stats["bytes_held"] <= pool.max_bytes, f"holds {stats['bytes_held']} > {pool.max_bytes}")
    return stats


def TestOneInput(data: bytes):
    d = Draw(data)
    max_bytes = d.integer(0, 1 << 22) if d.small(0, 7) else d.odd_value()
    pool = call(om.BufferPool, max_bytes) if d.small(0, 3) else call(om.BufferPool)
    if pool is None:
        return
    consistent(pool)
    for _ in range(d.small(1, 4)):
        nbytes = d.integer(0, 1 << 20) if d.small(0, 7) else d.odd_value()
        count = d.integer(0, 8) if d.small(0, 7) else d.odd_value()
        # A large reservation within a large limit is real memory, not a bug (a block takes
        # at least 4 KiB: 2**20 blocks of 3 bytes under a 4 GiB limit hold 4 GiB). Numpy
        # integers (odd_value draws them) are integers here too.
        if pool.max_bytes > (1 << 26) and isinstance(count, numbers.Integral) and count > 4 \
                and isinstance(nbytes, numbers.Integral) and nbytes < (1 << 40):
            count = 4
        added = call(pool.reserve, nbytes, count)
        if added is not None:
            check(isinstance(added, int) and 0 <= added <= count, f"reserve returned {added!r}")
        consistent(pool)
        if d.flag():
            pool.clear()
            check(consistent(pool)["bytes_held"] == 0, "clear() kept free blocks")


if __name__ == "__main__":
    main(TestOneInput)
