# §2 random numbers: GIL-free inline kernels that every other module cimports.
from onemodel_cy.core.typedefs cimport u64, u32

cdef extern from *:
    """
    #include <stdint.h>
    #include <float.h>
    /* §2, §4 and §6 are defined on float32 operations each rounded to float32. */
    #if defined(FLT_EVAL_METHOD) && FLT_EVAL_METHOD != 0 && FLT_EVAL_METHOD != -1
    #error "onemodel_cy needs float32 arithmetic evaluated in float32 (FLT_EVAL_METHOD 0):"
    #error "on 32-bit x86 build with -msse2 -mfpmath=sse"
    #endif
    /* High 64 bits of a 64x64-bit product, low half through *lo (§2 NextInt). */
    #if defined(__SIZEOF_INT128__)
    static inline uint64_t om_mul128(uint64_t a, uint64_t b,
                                               uint64_t *lo) {
        unsigned __int128 m = (unsigned __int128)a * b;
        *lo = (uint64_t)m;
        return (uint64_t)(m >> 64);
    }
    #else
    static inline uint64_t om_mul128(uint64_t a, uint64_t b,
                                               uint64_t *lo) {
        uint64_t a_lo = a & UINT64_C(0xFFFFFFFF), a_hi = a >> 32;
        uint64_t b_lo = b & UINT64_C(0xFFFFFFFF), b_hi = b >> 32;
        uint64_t p0 = a_lo * b_lo, p1 = a_lo * b_hi, p2 = a_hi * b_lo, p3 = a_hi * b_hi;
        uint64_t mid = (p0 >> 32) + (p1 & UINT64_C(0xFFFFFFFF)) + (p2 & UINT64_C(0xFFFFFFFF));
        *lo = (mid << 32) | (p0 & UINT64_C(0xFFFFFFFF));
        return p3 + (p1 >> 32) + (p2 >> 32) + (mid >> 32);
    }
    #endif
    #define OM_GOLDEN_GAMMA 0x9E3779B97F4A7C15ULL
    #define OM_DERIVE_SALT 0xD1B54A32D192ED03ULL

    /* The SplitMix64 finaliser, and D1's mix(x): the output whose state before the
       increment is x. In C so that C kernels (the Feistel pass) share this one copy. */
    static inline uint64_t om_fmix64(uint64_t z) {
        z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
        z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
        return z ^ (z >> 31);
    }
    static inline uint64_t om_mix64(uint64_t x) { return om_fmix64(x + OM_GOLDEN_GAMMA); }
    """
    u64 om_mul128(u64 a, u64 b, u64* lo) noexcept nogil
    u64 fmix64 "om_fmix64"(u64 z) noexcept nogil
    u64 mix64 "om_mix64"(u64 x) noexcept nogil
    const u64 GOLDEN_GAMMA "OM_GOLDEN_GAMMA"
    const u64 DERIVE_SALT "OM_DERIVE_SALT"

cdef enum:
    STREAM_TRANSFORM = 0
    STREAM_AUGMENTATION = 1
    STREAM_SYNTH_SHAPE = 2
    STREAM_SYNTH_PIXELS = 3
    STREAM_EPOCH_ORDER = 101
    STREAM_MIXING = 102
    STREAM_BUCKET_ORDER = 103
    STREAM_BUCKET_PLACE = 104


cdef inline u64 draw_u64(u64* state) noexcept nogil:
    # D2: the state is stored as given; a draw increments first.
    state[0] += GOLDEN_GAMMA
    return fmix64(state[0])


cdef inline float draw_single(u64* state) noexcept nogil:
    # 24 bits scaled by 2^-24: exact in float32.
    return <float>(draw_u64(state) >> 40) * <float>5.9604644775390625e-08


cdef inline double draw_double(u64* state) noexcept nogil:
    return <double>(draw_u64(state) >> 11) * 1.1102230246251565e-16


cdef inline u64 draw_int(u64* state, u64 n) noexcept nogil:
    # D4: unbiased multiply-shift; the caller guarantees n >= 1.
    cdef u64 low
    cdef u64 high = om_mul128(draw_u64(state), n, &low)
    cdef u64 threshold
    if low < n:
        threshold = (0 - n) % n
        while low < threshold:
            high = om_mul128(draw_u64(state), n, &low)
    return high


cdef inline float draw_normal(u64* state) noexcept nogil:
    # D5: twelve float32 additions, each rounded, then minus 6 in float32.
    cdef float acc = 0.0
    cdef int _i
    for _i in range(12):
        acc = acc + draw_single(state)
    return acc - <float>6.0


cdef inline u64 derive_seed(u64 seed, u64 epoch, u64 step, u64 slot, u64 stream) noexcept nogil:
    cdef u64 h = mix64(seed ^ DERIVE_SALT)
    h = mix64(h + epoch)
    h = mix64(h + step)
    h = mix64(h + slot)
    return mix64(h + stream)


cdef class SampleRng:
    cdef u64 _state     # read and written through the ``state`` property (D3)
