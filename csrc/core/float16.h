/*
 * The two 16-bit float formats, IEEE binary16 ("half", 5 exponent and 10
 * fraction bits) and bfloat16 (8 and 7), to and from float and double by
 * bit manipulation, branch free so that the row loops vectorise.
 *
 * From a double, rounded once: double -> float -> half would round twice
 * and can be off by one unit on ties.  So the double is first rounded to
 * float with round-to-odd (sinpe_float_odd): toward zero, and the lowest
 * bit set when anything was dropped.  That float keeps 13 (half) or 16
 * (bfloat16) more bits than the target, so the target's rounding to
 * nearest even sees the same "below, at or above the halfway point" as it
 * would in the double, and rounds the same way (the classic round-to-odd
 * argument: exact whenever the intermediate has 2 or more extra bits).
 * Checked against a direct rounding of the double for every float, every
 * half and 4e8 random doubles.
 */
#ifndef SINPE_FLOAT16_H
#define SINPE_FLOAT16_H

#include "core/platform.h"

#include <stdint.h>
#include <string.h>

static SINPE_INLINE uint32_t sinpe_float_bits(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static SINPE_INLINE float sinpe_bits_float(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* value rounded to float toward zero, the lowest bit set if inexact (a NaN
 * stays a NaN; beyond the float range: FLT_MAX, odd, which every 16-bit
 * format rounds to infinity as it would the double). */
static SINPE_INLINE float sinpe_float_odd(double value)
{
    const float f = (float)value;
    const uint32_t inexact = (double)f != value && value == value;
    const uint32_t above = sinpe_fabs((double)f) > sinpe_fabs(value);
    return sinpe_bits_float((sinpe_float_bits(f) - (inexact & above)) | inexact);
}

/* float -> bfloat16 and float -> half, to nearest, ties to even; NaN: the
 * quiet NaN of the same sign. */
static SINPE_INLINE uint16_t sinpe_float_to_bfloat16(float value)
{
    const uint32_t b = sinpe_float_bits(value);
    const uint32_t rounded = (b + 0x7fffu + ((b >> 16) & 1u)) >> 16;
    const uint32_t nan = ((b >> 16) & 0x8000u) | 0x7fc0u;
    return (uint16_t)(value != value ? nan : rounded);
}

static SINPE_INLINE uint16_t sinpe_float_to_half(float value)
{
    const uint32_t f32_infinity = 255u << 23, f16_overflow = (127u + 16u) << 23;
    /* adding this float aligns a subnormal half's bits at the bottom, where
     * the float addition rounds them to nearest even */
    const uint32_t subnormal_magic = ((127u - 15u) + (23u - 10u) + 1u) << 23;
    const uint32_t sign = sinpe_float_bits(value) & 0x80000000u;
    const uint32_t f = sinpe_float_bits(value) ^ sign;
    const uint32_t subnormal =
        sinpe_float_bits(sinpe_bits_float(f) + sinpe_bits_float(subnormal_magic)) -
        subnormal_magic;
    /* rebias the exponent and round the 13 dropped bits to nearest even */
    const uint32_t normal = (f + 0xc8000fffu + ((f >> 13) & 1u)) >> 13;
    /* NaN or infinity */
    const uint32_t huge = 0x7c00u | (0x200u & -(uint32_t)(f > f32_infinity));
    /* selected with masks, not branches: the loops stay vectorisable */
    const uint32_t is_huge = -(uint32_t)(f >= f16_overflow);
    const uint32_t is_subnormal = -(uint32_t)(f < (113u << 23));
    const uint32_t finite = (subnormal & is_subnormal) | (normal & ~is_subnormal);
    const uint32_t bits = (huge & is_huge) | (finite & ~is_huge);
    return (uint16_t)(bits | (sign >> 16));
}

static SINPE_INLINE float sinpe_half_to_float(uint16_t half)
{
    const float magic = sinpe_bits_float((254u - 15u) << 23);
    const float infnan = sinpe_bits_float((127u + 16u) << 23);
    /* the fraction and exponent moved into place, scaled by 2**112: exact,
     * and subnormals come out normalised */
    const float f = sinpe_bits_float(((uint32_t)half & 0x7fffu) << 13) * magic;
    const uint32_t bits = sinpe_float_bits(f) | (f >= infnan ? 255u << 23 : 0u);
    return sinpe_bits_float(bits | ((uint32_t)half & 0x8000u) << 16);
}

/* bfloat16 is the top half of a float32: widening is exact. */
static SINPE_INLINE float sinpe_bfloat16_to_float(uint16_t bf)
{
    return sinpe_bits_float((uint32_t)bf << 16);
}

static SINPE_INLINE uint16_t sinpe_double_to_half(double value)
{
    return sinpe_float_to_half(sinpe_float_odd(value));
}

static SINPE_INLINE uint16_t sinpe_double_to_bfloat16(double value)
{
    return sinpe_float_to_bfloat16(sinpe_float_odd(value));
}

static SINPE_INLINE double sinpe_half_to_double(uint16_t half)
{
    return sinpe_half_to_float(half);
}

static SINPE_INLINE double sinpe_bfloat16_to_double(uint16_t bf)
{
    return sinpe_bfloat16_to_float(bf);
}

#endif /* SINPE_FLOAT16_H */
