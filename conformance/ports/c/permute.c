/* §3 the keyed permutation: a four-round Feistel network on 2*half bits, restricted to
 * [0, n) by cycle walking (D6). */
#include "port.h"

static const uint64_t ROUND_CONSTANT = 0x632BE59BD9B4E019u;

#ifdef BUG_THREE_ROUNDS
enum { ROUNDS = 3 };
#else
enum { ROUNDS = 4 };
#endif

/* bits = ceil(log2 n) = the bit length of n - 1, for n >= 2 */
static unsigned bit_length(uint64_t v)
{
    unsigned bits = 0;
    while (v) {
        bits++;
        v >>= 1;
    }
    return bits;
}

uint64_t keyed_permutation(uint64_t p, uint64_t n, uint64_t key)
{
    if (n <= 1)
        return 0;
    unsigned half = (bit_length(n - 1) + 1) / 2;          /* at most 32 */
    uint64_t mask = ((uint64_t)1 << half) - 1;
    uint64_t x = p;
    do {    /* each pass runs every round again on the previous x */
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = 0; round < ROUNDS; round++) {
            uint64_t f = mix(r ^ key ^ (round * ROUND_CONSTANT)) & mask;
            uint64_t next_r = l ^ f;
            l = r;
            r = next_r;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}

#if defined(BUG_SHUFFLED_INVERSE) || defined(BUG_BUCKET_INVERSE)
/* Only the mutation tests use the inverse: the Feistel rounds run backwards, and cycle
 * walking on the inverse network inverts the cycle-walked permutation. */
uint64_t keyed_permutation_inverse(uint64_t x, uint64_t n, uint64_t key)
{
    if (n <= 1)
        return 0;
    unsigned half = (bit_length(n - 1) + 1) / 2;
    uint64_t mask = ((uint64_t)1 << half) - 1;
    do {
        uint64_t l = x >> half, r = x & mask;
        for (uint64_t round = ROUNDS; round-- > 0;) {
            uint64_t f = mix(l ^ key ^ (round * ROUND_CONSTANT)) & mask;
            uint64_t prev_l = r ^ f;
            r = l;
            l = prev_l;
        }
        x = (l << half) | r;
    } while (x >= n);
    return x;
}
#endif
