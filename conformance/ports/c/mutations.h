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
 *   BUG_SIN_SHORT            contract  augment: the sine polynomial stops one term short (no x^9)
 *   BUG_EXPNEG_NO_CUTOFF     contract  augment: expneg(t) has no cut-off at t > 87 (nor for NaN)
 *   BUG_WIDTH_TRUNCATES      contract  augment: an output width truncates v instead of floor(v + 0.5)
 *   BUG_BILINEAR_COLUMNS_FIRST  contract  augment: bilinear blends down the columns first, then
 *                                  across (the lerps in the other order)
 *   BUG_RESAMPLE_NO_COPY     contract  augment: a 1-D pass whose size does not change is computed
 *                                  (a + 0*(b - a)), not copied
 *   BUG_BLUR_RADIUS_DOUBLE   contract  augment: the blur radius is ceil(3 sigma) in double, not of
 *                                  f32(3 sigma)
 *   BUG_BLUR_SUM_PAIRS       contract  augment: the blur sums the centre, then each pair -k, +k,
 *                                  not k = -r .. r left to right
 *   BUG_RANDOM_APPLY_LE      contract  augment: RandomApply runs its operation when u <= p, not u < p
 *   BUG_ONE_OF_GE            D10  augment: OneOf takes the first bound >= u instead of > u
 *   BUG_ONE_OF_WEIGHTS_F32   D10  augment: OneOf's weights are rounded to float32 like the other
 *                                  arguments (they stay float64)
 */
#ifndef MUTATIONS_H
#define MUTATIONS_H
#endif
