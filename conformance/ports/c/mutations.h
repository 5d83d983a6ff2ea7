/* The classic port bugs the mutation tests switch on, one -D flag each
 * (spec_tests/test_conformance_c_port.py builds the port once per flag and checks that
 * `onemodel-cy conformance check` rejects its results). None is defined in a normal build.
 *
 *   BUG_SINGLE_SHIFT_41      §2   NextSingle takes u >> 41 instead of u >> 40
 *   BUG_NORMAL_DOUBLE        D5   NextNormal sums the twelve singles in double
 *   BUG_NEXT_INT_NO_REDRAW   D4   NextInt returns m >> 64 of the first draw, never redraws
 *   BUG_DERIVE_SWAP          §2   Derive folds in step before epoch
 *   BUG_THREE_ROUNDS         D6   the Feistel network runs three rounds, not four
 *   BUG_SHUFFLED_INVERSE     D7   Shuffled reads index perm^-1(p) instead of perm(p)
 *   BUG_MIXING_LITERAL_LAST  D10  the fallback is the last source listed, eligible or not
 *   BUG_MIXING_GE            D10  the pick takes the first c_i >= u instead of c_i > u
 *   BUG_BUCKET_INVERSE       D11  bucketed batch t is served at perm^-1(t) instead of perm(t)
 *   BUG_PAD_TRUNCATE         §4   the float64 pad value is truncated to float32, not rounded
 *   BUG_AUGMENT_STREAM_0     §4   the collator's augmentation draws from stream 0, not 1
 *   BUG_GRAY8_DOUBLE         D15  scale and bias are computed in double, then rounded
 *   BUG_SLOT_PER_RANK        D14  a rank numbers its slots from 0, not from its global offset
 *   BUG_EPOCH_FROM_RESUME    §1   a resumed loader counts epochs from its own first step
 *   BUG_WINDOW_DROPS_TAIL    §1   with workers, a stream ends at the last full prefetch window
 *   BUG_TEXTLINES_NO_UPPER_BOUNDS  contract  SyntheticTextLines checks no upper bound
 *                                  (scale, height, lengths)
 *   BUG_NOISE_CHECKED_IN_DOUBLE    contract  noise is checked before its rounding to
 *                                  float32 (1e39 is finite, f32(1e39) is not)
 */
#ifndef MUTATIONS_H
#define MUTATIONS_H
#endif
