# §3 keyed permutation: a 4-round Feistel network with cycle walking (D6).
from onemodel_cy._typedefs cimport u64
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


cdef inline u64 permute(const Permutation* perm, u64 p) noexcept nogil:
    """perm(p) for 0 <= p < n; the caller checks the range. 0 when n <= 1."""
    if perm.n <= 1:
        return 0
    cdef u64 x = p
    cdef u64 left, right, f
    cdef unsigned int round
    while True:
        left = x >> perm.half
        right = x & perm.mask
        for round in range(4):
            f = mix64(right ^ perm.key ^ (<u64>round * FEISTEL_ROUND)) & perm.mask
            left, right = right, left ^ f
        x = (left << perm.half) | right
        if x < perm.n:
            return x
