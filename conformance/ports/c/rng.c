/* §2 random numbers: SplitMix64, Mix, Derive and the SampleRng draws (D1-D5). */
#include "port.h"

static const uint64_t GOLDEN = 0x9E3779B97F4A7C15u;

/* The SplitMix64 output function applied to an already incremented state. */
static uint64_t finalise(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9u;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBu;
    return z ^ (z >> 31);
}

/* D1: Mix(x) is the output of a generator whose state before the increment is x. */
uint64_t mix(uint64_t x)
{
    return finalise(x + GOLDEN);
}

/* §2 seed derivation: the seed is whitened, then epoch, step, slot, stream are folded in
 * in that order (each argument is already reduced mod 2^64, D3). */
uint64_t derive(uint64_t seed, uint64_t epoch, uint64_t step, uint64_t slot, uint64_t stream)
{
#ifdef BUG_DERIVE_SWAP
    uint64_t t = epoch; epoch = step; step = t;
#endif
    uint64_t h = mix(seed ^ 0xD1B54A32D192ED03u);
    h = mix(h + epoch);
    h = mix(h + step);
    h = mix(h + slot);
    return mix(h + stream);
}

/* D2: the first draw increments the stored state first. */
uint64_t next_u64(Rng *rng)
{
    rng->state += GOLDEN;
    return finalise(rng->state);
}

/* The top 24 bits over 2^24: exact in float32, in [0, 1). */
float next_single(Rng *rng)
{
#ifdef BUG_SINGLE_SHIFT_41
    return (float)(next_u64(rng) >> 41) * (1.0f / 16777216.0f);
#else
    return (float)(next_u64(rng) >> 40) * (1.0f / 16777216.0f);
#endif
}

double next_double(Rng *rng)
{
    return (double)(next_u64(rng) >> 11) * (1.0 / 9007199254740992.0);
}

/* The 128-bit product a * b as (high, low) halves, from four 32x32-bit products, so that
 * the port needs no compiler extension. */
static void mul_128(uint64_t a, uint64_t b, uint64_t *high, uint64_t *low)
{
    uint64_t a_lo = a & 0xFFFFFFFFu, a_hi = a >> 32, b_lo = b & 0xFFFFFFFFu, b_hi = b >> 32;
    uint64_t ll = a_lo * b_lo, lh = a_lo * b_hi, hl = a_hi * b_lo, hh = a_hi * b_hi;
    uint64_t middle = (ll >> 32) + (lh & 0xFFFFFFFFu) + (hl & 0xFFFFFFFFu);
    *low = (middle << 32) | (ll & 0xFFFFFFFFu);
    *high = hh + (lh >> 32) + (hl >> 32) + (middle >> 32);
}

/* D4: Lemire's multiply-shift. Only when the low half falls below n can the draw be in the
 * biased zone; t = 2^64 mod n (computed as (0 - n) mod n), and every redraw takes a fresh u. */
uint64_t next_int(Rng *rng, uint64_t n)
{
    uint64_t high, low;
    mul_128(next_u64(rng), n, &high, &low);
#ifndef BUG_NEXT_INT_NO_REDRAW
    if (low < n) {
        uint64_t t = (0 - n) % n;
        while (low < t)
            mul_128(next_u64(rng), n, &high, &low);
    }
#endif
    return high;
}

/* D5: twelve singles summed left to right, each sum rounded to float32, then 6 taken off. */
float next_normal(Rng *rng)
{
#ifdef BUG_NORMAL_DOUBLE
    double sum = 0.0;
#else
    float sum = 0.0f;
#endif
    for (int k = 0; k < 12; k++)
        sum += next_single(rng);
    return (float)(sum - 6.0f);
}
