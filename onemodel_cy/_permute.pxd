# §3 keyed permutation: a 4-round Feistel network with cycle walking (D6).
from onemodel_cy._typedefs cimport u64, i64
from onemodel_cy._rng cimport mix64

cdef extern from *:
    """
    #define OM_FEISTEL_ROUND 0x632BE59BD9B4E019ULL
    """
    const u64 FEISTEL_ROUND "OM_FEISTEL_ROUND"


ctypedef struct Permutation:
    u64 n
    u64 key
    unsigned int half   # bits per Feistel half
    u64 mask            # 2^half - 1


cdef inline Permutation permutation_of(u64 n, u64 key) noexcept nogil:
    cdef Permutation perm
    cdef unsigned int bits = 0
    cdef u64 top
    perm.n = n
    perm.key = key
    if n >= 2:
        # D6: bits = ceil(log2 n) is the bit length of n - 1.
        top = n - 1
        while top:
            bits += 1
            top >>= 1
    perm.half = (bits + 1) // 2
    perm.mask = (<u64>1 << perm.half) - 1 if perm.half < 64 else <u64>0xFFFFFFFFFFFFFFFFULL
    return perm




cdef enum:
    LANES = 8   # positions walked side by side: their Feistel chains are independent


cdef inline void feistel_rounds(const Permutation* perm, u64* x) noexcept nogil:
    cdef u64 left = x[0] >> perm.half
    cdef u64 right = x[0] & perm.mask
    cdef u64 f
    cdef unsigned int round
    for round in range(4):
        f = mix64(right ^ perm.key ^ (<u64>round * FEISTEL_ROUND)) & perm.mask
        left, right = right, left ^ f
    x[0] = (left << perm.half) | right


cdef inline void permute_range(const Permutation* perm, u64 start, u64 count, i64* out) noexcept nogil:
    """out[k] = perm(start + k) for k < count; the caller checks start + count <= n.

    Same values as ``permute``, computed LANES positions at a time: one position's
    rounds form a long dependency chain, so interleaving independent positions keeps the
    multiplier busy instead of waiting on it.
    """
    cdef u64 x[LANES]
    cdef u64 position[LANES]
    cdef bint active[LANES]
    cdef u64 next_position = 0
    cdef int lane, busy = 0
    if perm.n <= 1:
        for next_position in range(count):
            out[next_position] = 0
        return
    for lane in range(LANES):
        active[lane] = next_position < count
        if active[lane]:
            position[lane] = next_position
            x[lane] = start + next_position
            next_position += 1
            busy += 1
    while busy:
        for lane in range(LANES):
            if active[lane]:
                feistel_rounds(perm, &x[lane])
        for lane in range(LANES):
            if active[lane] and x[lane] < perm.n:   # else walk the cycle once more
                out[position[lane]] = <i64>x[lane]
                if next_position < count:
                    position[lane] = next_position
                    x[lane] = start + next_position
                    next_position += 1
                else:
                    active[lane] = False
                    busy -= 1


cdef inline u64 permute(const Permutation* perm, u64 p) noexcept nogil:
    """perm(p) for 0 <= p < n; the caller checks the range. 0 when n <= 1."""
    if perm.n <= 1:
        return 0
    cdef u64 x = p
    while True:
        feistel_rounds(perm, &x)
        if x < perm.n:      # D6: cycle walking re-runs all four rounds on the previous x
            return x
