/*
 * IEEE binary16 <-> double by bit manipulation.  Going through float would
 * round twice (double -> float -> half) and can be off by one half-ulp on
 * ties; rounding straight from the double keeps the "rounded once" promise.
 */
#ifndef SINPE_FLOAT16_H
#define SINPE_FLOAT16_H

#include <stdint.h>
#include <string.h>

static inline uint16_t sinpe_double_to_half(double value)
{
    uint64_t bits;
    memcpy(&bits, &value, sizeof bits);
    const uint16_t sign = (uint16_t)((bits >> 48) & 0x8000u);
    const uint64_t magnitude = bits & 0x7fffffffffffffffull;

    if (magnitude >= 0x7ff0000000000000ull) { /* inf stays inf, nan stays a quiet nan */
        return (uint16_t)(sign | 0x7c00u | (magnitude > 0x7ff0000000000000ull ? 0x0200u : 0u));
    }
    const int exponent = (int)(magnitude >> 52) - 1023;
    if (exponent > 15) {
        return (uint16_t)(sign | 0x7c00u); /* beyond 65504 after rounding too */
    }
    const uint64_t significand = (magnitude & 0x000fffffffffffffull) | 0x0010000000000000ull;
    /* Half keeps 10 fraction bits for normals; subnormals are multiples of
     * 2**-24, so drop the bits below that weight and round to nearest even. */
    int shift;
    uint32_t biased;
    if (exponent >= -14) {
        shift = 42;
        biased = (uint32_t)(exponent + 15) << 10;
    } else {
        if (exponent < -25) {
            return sign; /* below half of the smallest subnormal: rounds to zero */
        }
        shift = 28 - exponent; /* 43 .. 53 */
        biased = 0;
    }
    uint64_t kept = significand >> shift;
    if (exponent >= -14) {
        kept &= 0x3ffu; /* the implicit bit lives in the exponent field */
    }
    const uint64_t dropped = significand & ((1ull << shift) - 1);
    const uint64_t halfway = 1ull << (shift - 1);
    uint32_t half = biased + (uint32_t)kept;
    if (dropped > halfway || (dropped == halfway && (half & 1u))) {
        half += 1; /* a carry rolls into the exponent, up to inf: that is right */
    }
    return (uint16_t)(sign | half);
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

#endif /* SINPE_FLOAT16_H */
