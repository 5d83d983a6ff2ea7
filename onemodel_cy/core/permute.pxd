# §3 keyed permutation: a 4-round Feistel network with cycle walking (D6).
from onemodel_cy.core.typedefs cimport u64, i64
from onemodel_cy.core.rng cimport mix64

cdef extern from *:
    """
    #define OM_FEISTEL_ROUND 0x632BE59BD9B4E019ULL
    #if defined(__GNUC__) && __GNUC__ >= 12 && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    /* Wide-vector clones chosen at load time (no -march flag): the rounds are integer
       operations, identical in every clone. */
    #define OM_FEISTEL_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
    #else
    #define OM_FEISTEL_CLONES
    #endif

    /* One pass of the four Feistel rounds over xs[0..m), in place. Positions are
       independent, so the loop vectorises; cycle walking (D6) is the caller's. */
    OM_FEISTEL_CLONES static void om_feistel_pass(uint64_t* xs, Py_ssize_t m, uint64_t key,
                                                  unsigned int half, uint64_t mask) {
        const uint64_t k0 = key, k1 = key ^ OM_FEISTEL_ROUND,
                       k2 = key ^ (2 * OM_FEISTEL_ROUND), k3 = key ^ (3 * OM_FEISTEL_ROUND);
        for (Py_ssize_t i = 0; i < m; i++) {
            uint64_t left = xs[i] >> half, right = xs[i] & mask, t;
            t = left ^ (om_mix64(right ^ k0) & mask); left = right; right = t;
            t = left ^ (om_mix64(right ^ k1) & mask); left = right; right = t;
            t = left ^ (om_mix64(right ^ k2) & mask); left = right; right = t;
            t = left ^ (om_mix64(right ^ k3) & mask); left = right; right = t;
            xs[i] = (left << half) | right;
        }
    }
    """
    const u64 FEISTEL_ROUND "OM_FEISTEL_ROUND"
    void feistel_pass "om_feistel_pass"(u64* xs, Py_ssize_t m, u64 key, unsigned int half,
                                        u64 mask) noexcept nogil


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
    perm.mask = (<u64>1 << perm.half) - 1
    return perm


cdef inline u64 permute(const Permutation* perm, u64 p) noexcept nogil:
    """perm(p) for 0 <= p < n; the caller checks the range. 0 when n <= 1."""
    if perm.n <= 1:
        return 0
    cdef u64 x = p
    while True:
        feistel_pass(&x, 1, perm.key, perm.half, perm.mask)
        if x < perm.n:      # D6: cycle walking re-runs all four rounds on the previous x
            return x


cdef enum:
    CHUNK = 256   # positions per vectorised pass


cdef inline void permute_range(const Permutation* perm, u64 start, u64 count, i64* out) noexcept nogil:
    """out[k] = perm(start + k) for k < count; the caller checks start + count <= n.

    The same values as ``permute``, CHUNK positions at a time: one Feistel pass over all
    of them (vectorised), then those that landed outside [0, n) walk on together.
    """
    cdef u64 x[CHUNK]
    cdef u64 position[CHUNK]
    cdef u64 done = 0, k
    cdef Py_ssize_t pending, kept, i
    if perm.n <= 1:
        for k in range(count):
            out[k] = 0
        return
    while done < count:
        pending = <Py_ssize_t>min(<u64>CHUNK, count - done)
        for i in range(pending):
            x[i] = start + done + <u64>i
            position[i] = done + <u64>i
        while pending:
            feistel_pass(x, pending, perm.key, perm.half, perm.mask)
            kept = 0
            for i in range(pending):
                if x[i] < perm.n:
                    out[position[i]] = <i64>x[i]
                else:
                    x[kept] = x[i]
                    position[kept] = position[i]
                    kept += 1
            pending = kept
        done += <u64>min(<u64>CHUNK, count - done)
