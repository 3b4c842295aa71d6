/*
 * sinpe_angle_values: cos and sin of p * w from tables of exact angles, in
 * integer arithmetic.  This is the CPU's evaluation of sinpe.torch's angle
 * tables (sinpe/torch/_angles.py), which every other device runs as torch
 * operations; a patched diffusers model gets the same bits on every device,
 * so this must give those operations' bits, step for step:
 *
 *  - a position's magnitude splits as n + f: n = trunc(|p|) in a high digit
 *    of 2**12 positions and a low digit of 12 bits, f read to 48 bits (its
 *    float rounded to the nearest 2**-48, ties to even) in six digits of 8;
 *  - each digit rotates the pair [c, s] by its table's 2x2 matrix: products
 *    of Q1.31 integers, exact in int64; between two fraction digits the pair
 *    goes back to Q1.31, rounded half up (floor of x + 2**30, then >> 31);
 *  - the one rounding: the int64, rounded to odd below 2**-52 (the dropped
 *    bits kept as a sticky bit), converted to float32 by IEEE's correctly
 *    rounded conversion; for a half type, that float32 rounded to odd
 *    instead (the half type's rounding, done by the caller, is then the only
 *    one); then scaled by the position's row of scalings (a power of two,
 *    the sine's sign, NaN out of range), which is exact.
 *
 * Integer operations only, and one float multiply by a power of two: no
 * contraction or SIMD width can change a bit.
 */
#include "sinpe.h"

#include <math.h>
#include <string.h>

#define LOW_BITS 12
#define FRACTION_BITS 48
#define FRACTION_DIGIT 8
#define ONE 31
#define STICKY 10

/* x >> bits rounded toward minus infinity, as torch's >> on int64 (the
 * arithmetic shift), without C's implementation-defined shift of a negative. */
static inline int64_t floor_shift(int64_t x, int bits)
{
    return x >= 0 ? x >> bits : -(int64_t)(((uint64_t)-(x + 1) >> bits) + 1);
}

/* [c, s] rotated by the matrix m[2][2] (rows [cos, -sin], [sin, cos]). */
static inline void rotate(int64_t pair[2], const int64_t *m)
{
    const int64_t c = pair[0] * m[0] + pair[1] * m[1];
    const int64_t s = pair[0] * m[2] + pair[1] * m[3];
    pair[0] = c;
    pair[1] = s;
}

/* The value in units of 2**-(2 * ONE - STICKY) rounded to odd, to float32;
 * for a half type, rounded to odd in float32 too. */
static inline float narrowed(int64_t value, int half)
{
    const int64_t odd =
        floor_shift(value, STICKY) | (((uint64_t)value & ((1u << STICKY) - 1)) != 0);
    float narrow = (float)odd;
    if (half) {
        const int64_t back = (int64_t)narrow;
        if (back != odd) {
            uint32_t bits;
            memcpy(&bits, &narrow, sizeof bits);
            const int64_t back_abs = back < 0 ? -back : back;
            const int64_t odd_abs = odd < 0 ? -odd : odd;
            bits = (bits - (back_abs > odd_abs)) | 1u; /* toward zero, then odd */
            memcpy(&narrow, &bits, sizeof narrow);
        }
    }
    return narrow;
}

/* One position: its magnitude's whole part and 48-bit fraction, whether it
 * is served, whether it is negative.  A position not served gets 0 and 0 (its
 * scalings are NaN: the value does not matter). */
typedef struct {
    int64_t whole, ticks;
    int valid, negative;
} split_position;

static split_position split_real(double magnitude, int negative, int64_t limit, int single)
{
    split_position s = {0, 0, magnitude <= (double)limit, negative};
    if (!s.valid) {
        return s;
    }
    if (single) { /* float32 positions: each step in float32, as torch's */
        const float m = (float)magnitude, whole = truncf(m);
        s.ticks = (int64_t)nearbyintf((m - whole) * 0x1p48f);
        s.whole = (int64_t)whole;
    } else {
        const double whole = trunc(magnitude);
        s.ticks = (int64_t)nearbyint((magnitude - whole) * 0x1p48);
        s.whole = (int64_t)whole;
    }
    s.whole += s.ticks >> FRACTION_BITS; /* a fraction that rounded up to 1 */
    s.ticks &= ((int64_t)1 << FRACTION_BITS) - 1;
    if (s.whole > limit) {
        s.whole = limit;
    }
    return s;
}

static split_position split(const void *positions, sinpe_position_kind kind, int64_t index,
                            int64_t limit)
{
    if (kind == SINPE_POSITIONS_INT64) {
        int64_t p = ((const int64_t *)positions)[index];
        p = p < -limit - 1 ? -limit - 1 : (p > limit + 1 ? limit + 1 : p);
        const int64_t magnitude = p < 0 ? -p : p;
        split_position s = {magnitude <= limit ? magnitude : limit, 0, magnitude <= limit, p < 0};
        return s;
    }
    if (kind == SINPE_POSITIONS_FLOAT32) {
        const float p = ((const float *)positions)[index];
        return split_real(fabsf(p), p < 0, limit, 1);
    }
    const double p = ((const double *)positions)[index];
    return split_real(fabs(p), p < 0, limit, 0);
}

void sinpe_angle_values(const sinpe_angle_digits *digits, const void *positions,
                        sinpe_position_kind kind, int64_t rows, int per_pair, int half,
                        float *out)
{
    const int64_t m = digits->pairs;
    const int real = kind != SINPE_POSITIONS_INT64;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t j = 0; j < m; j++) {
            const split_position s = split(positions, kind, per_pair ? r * m + j : r,
                                           digits->limit);
            const int64_t *high = digits->high + ((s.whole >> LOW_BITS) * m + j) * 2;
            int64_t pair[2] = {high[0], high[1]};
            rotate(pair, digits->low + ((s.whole & ((1 << LOW_BITS) - 1)) * m + j) * 4);
            for (int digit = 0; real && digit < SINPE_FRACTION_DIGITS; digit++) {
                const int shift = FRACTION_BITS - FRACTION_DIGIT * (digit + 1);
                const int64_t row = (s.ticks >> shift) & ((1 << FRACTION_DIGIT) - 1);
                pair[0] = floor_shift(pair[0] + ((int64_t)1 << (ONE - 1)), ONE);
                pair[1] = floor_shift(pair[1] + ((int64_t)1 << (ONE - 1)), ONE);
                if (row == 0) { /* the angle 0: the identity times 2**31, exactly */
                    pair[0] *= (int64_t)1 << ONE;
                    pair[1] *= (int64_t)1 << ONE;
                } else {
                    rotate(pair, digits->fraction[digit] + (row * m + j) * 4);
                }
            }
            const float *scaling = digits->scalings + 2 * (s.negative + 2 * !s.valid);
            float *value = out + (r * m + j) * 2;
            value[0] = narrowed(pair[0], half) * scaling[0];
            value[1] = narrowed(pair[1], half) * scaling[1];
        }
    }
}
