/*
 * The two 16-bit float formats, IEEE binary16 ("half", 5 exponent and 10
 * fraction bits) and bfloat16 (8 and 7), to and from double by bit
 * manipulation.  Going through float would round twice (double -> float ->
 * half) and can be off by one unit on ties; rounding straight from the
 * double keeps the "rounded once" promise.  Both formats are one routine
 * with the field widths as parameters, so they round alike.
 */
#ifndef SINPE_FLOAT16_H
#define SINPE_FLOAT16_H

#include <stdint.h>
#include <string.h>

/* The 16-bit pattern (sign at bit 15) of value rounded to nearest, ties to
 * even, in a format of exp_bits exponent and frac_bits fraction bits. */
static inline uint16_t sinpe_double_to_small(double value, int exp_bits, int frac_bits)
{
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    const uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    const uint64_t magnitude = bits & 0x7fffffffffffffffull;
    const int bias = (1 << (exp_bits - 1)) - 1;
    const uint32_t infinity = ((1u << exp_bits) - 1u) << frac_bits;

    if (magnitude >= 0x7ff0000000000000ull) { /* inf stays inf, nan stays a quiet nan */
        const uint32_t quiet = magnitude > 0x7ff0000000000000ull ? 1u << (frac_bits - 1) : 0u;
        return (uint16_t)(sign | infinity | quiet);
    }
    const int exponent = (int)(magnitude >> 52) - 1023;
    if (exponent > bias) {
        return (uint16_t)(sign | infinity); /* beyond the largest finite after rounding too */
    }
    const uint64_t significand = (magnitude & 0x000fffffffffffffull) | 0x0010000000000000ull;
    /* Normals keep frac_bits fraction bits; subnormals are multiples of
     * 2**(emin - frac_bits), so drop the bits below that weight and round
     * to nearest even. */
    const int emin = 1 - bias;
    int shift;
    uint32_t biased;
    if (exponent >= emin) {
        shift = 52 - frac_bits;
        biased = (uint32_t)(exponent + bias) << frac_bits;
    } else {
        if (exponent < emin - frac_bits - 1) {
            return sign; /* below half of the smallest subnormal (double subnormals too) */
        }
        shift = 52 - frac_bits + (emin - exponent); /* up to 53 */
        biased = 0;
    }
    uint64_t kept = significand >> shift;
    if (exponent >= emin) {
        kept &= (1u << frac_bits) - 1u; /* the implicit bit lives in the exponent field */
    }
    const uint64_t dropped = significand & ((1ull << shift) - 1);
    const uint64_t halfway = 1ull << (shift - 1);
    uint32_t small = biased + (uint32_t)kept;
    if (dropped > halfway || (dropped == halfway && (small & 1u))) {
        small += 1; /* a carry rolls into the exponent, up to inf: that is right */
    }
    return (uint16_t)(sign | small);
}

static inline uint16_t sinpe_double_to_half(double value)
{
    return sinpe_double_to_small(value, 5, 10);
}

static inline uint16_t sinpe_double_to_bfloat16(double value)
{
    return sinpe_double_to_small(value, 8, 7);
}

static inline double sinpe_half_to_double(uint16_t half)
{
    const int sign = half >> 15;
    const int exponent = (half >> 10) & 0x1f;
    const uint64_t fraction = half & 0x3ffu;
    uint64_t bits;
    if (exponent == 0x1f) {
        bits = 0x7ff0000000000000ull | (fraction << 42);
    } else if (exponent != 0) {
        bits = ((uint64_t)(exponent - 15 + 1023) << 52) | (fraction << 42);
    } else {
        /* zero or subnormal: fraction * 2**-24 is exact in double */
        double value = (double)fraction * (1.0 / 16777216.0);
        return sign ? -value : value;
    }
    bits |= (uint64_t)sign << 63;
    double value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

/* bfloat16 is the top half of a float32: widening is exact. */
static inline double sinpe_bfloat16_to_double(uint16_t bf)
{
    const uint32_t bits = (uint32_t)bf << 16;
    float value;
    memcpy(&value, &bits, sizeof value);
    return value;
}

#endif /* SINPE_FLOAT16_H */
