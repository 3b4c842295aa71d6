/*
 * The one vector layer the hot loops of x86-64 are written against: the
 * level's ISA (one header per ISA: kernels/isa/sse2.h, avx2.h, avx512.h,
 * chosen below by what the level file defines: SINPE_ISA_AVX2,
 * SINPE_ISA_AVX512, SINPE_ISA_BF16; none: SSE2) gives the vector types and
 * whatever it spells its own way; on them, here, what every ISA shares.
 * SINPE_VEC16 says the level has this layer; elsewhere (aarch64, other
 * CPUs) the loops run their scalar definitions, which the vectors match bit
 * for bit.  A level file includes this (through kernels/loops.h) after
 * switching its compiler to its instructions.
 *
 * 16-bit float formats: widening to float, rounding a float to the format
 * (to nearest, ties to even) and back to float, and narrowing for a store,
 * for the 16-bit adds and rotations (kernels/loops16.h, rotate_vec.h).  A
 * vector of 16-bit elements (vi: 8 at the baseline's SSE2, 16 at AVX2, 32
 * at AVX-512) widens to two float registers (v16f: lo and hi), in the
 * order each conversion makes cheapest: bfloat16 by shift and mask, the
 * even elements in lo and the odd ones in hi (so an interleaved rotation
 * finds each pair's partner in the other register); the hardware
 * conversions (float16, and bfloat16's vcvtne2ps2bf16) in order, the
 * first half in lo.  Narrowing restores the order, and the loops combine
 * only values widened the same way.
 *
 *   level        bfloat16                         float16
 *   baseline     integer rounding (SSE2)          the scalar formulas in SSE2
 *   avx2         integer rounding                 F16C: vcvtph2ps, vcvtps2ph
 *   avx512       integer rounding                 AVX-512F: vcvtph2ps, vcvtps2ph
 *   avx512_bf16  vcvtne2ps2bf16 to narrow          AVX-512F
 * (the rotations round their bfloat16 products by Veltkamp's split at
 * every level, bf16_round_split)
 *
 * The same bits as float16.h for every input, but narrowing and rounding
 * may leave a NaN lane a NaN of another payload or, the hardware bfloat16
 * conversion, flush a subnormal: they report such lanes instead (*bad,
 * nonzero: some lane of the vector is one), and the loops then compute that
 * vector's elements by the scalar definition.  So a NaN result always has
 * float16.h's bits, and the hardware's own choices (VCVTNEPS2BF16 flushes
 * subnormal inputs and makes its own NaN, VCVTPS2PH keeps a NaN's payload)
 * never reach memory.  scripts/convert.sh checks every conversion here
 * against float16.h for all 2**32 floats and all 2**16 16-bit values.
 *
 * The narrowing reports every NaN it is given, both formats, by one
 * unordered compare of its two registers (a lane is reported where either
 * holds a NaN; that compare replaced one on the packed result and freed
 * the registers that spilled the AVX2 bfloat16 rotation: 1.85x -> 1.65x
 * an in-place pass, Zen 5).  NaNs the loops make all have zero low 16
 * bits: a widened bfloat16 NaN, quieted by arithmetic, or the CPU's
 * default NaN.  bfloat16's integer rounding (*_round) keeps such a NaN a
 * NaN, so that it reaches the narrowing; other NaNs no loop makes
 * (scripts/convert.sh counts them apart).  float16's conversions keep
 * every NaN a NaN.
 *
 * Doubles, for the exact rotations (double caches, the products and the
 * sum in double, rounded once): VF_LANES elements widened in order to two
 * vectors of doubles (vdd); the sums rounded as rotate_loops.h's scalar
 * rows round them: float32 to nearest (cvtpd2ps), the 16-bit types to odd
 * in float (vf_odd_of_vd) and then to nearest even (the seq_ narrowings,
 * in order; float16.h's sinpe_double_to_half and _bfloat16).  Rounding to
 * odd: the float toward zero, its lowest bit set when that dropped
 * anything, which is what float16.h's sinpe_float_odd computes (nearest,
 * then one step toward zero when that went away from zero), also past the
 * float range (FLT_MAX, odd) and for float subnormals.  AVX-512 converts
 * toward zero by embedded rounding; AVX2 and SSE2 follow sinpe_float_odd's
 * steps.
 *
 * Only standard <immintrin.h> intrinsics; the bfloat16 instructions only
 * where GCC or Clang builds the avx512_bf16 level.
 */
#ifndef SINPE_KERNELS_VEC_H
#define SINPE_KERNELS_VEC_H

#if defined(SINPE_X86_64)
#define SINPE_VEC16 1
/* vcvtps2ph's rounding: to nearest even, whatever MXCSR says (a constant
 * expression: Clang wants one) */
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

#if defined(SINPE_ISA_AVX512)
#include "kernels/isa/avx512.h"
#elif defined(SINPE_ISA_AVX2)
#include "kernels/isa/avx2.h"
#else
#include "kernels/isa/sse2.h"
#endif

/* ------------------------------------------------------------------ */
/* The values of one vector of 16-bit elements, and what the loops do
 * with them: the same at every level. */

/* An operation on two registers' values (v16f, vdd): on each register. */
#define PAIR_BINARY(name, T, op)                                                              \
    static SINPE_INLINE T name(T a, T b)                                                      \
    {                                                                                         \
        return (T){op(a.lo, b.lo), op(a.hi, b.hi)};                                           \
    }

typedef struct {
    vf lo, hi;
} v16f;

PAIR_BINARY(v16_add, v16f, vf_add)
PAIR_BINARY(v16_sub, v16f, vf_sub)
PAIR_BINARY(v16_mul, v16f, vf_mul)
static SINPE_INLINE v16f v16_scale(v16f a, vf s)
{
    return (v16f){vf_mul(a.lo, s), vf_mul(a.hi, s)};
}

static SINPE_INLINE v16f bf16_widen(vi v)
{
    return (v16f){BF16_WIDEN_LO(v), BF16_WIDEN_HI(v)};
}
static SINPE_INLINE v16f f16_widen(vi v)
{
    return (v16f){F16_WIDEN_LO(v), F16_WIDEN_HI(v)};
}
static SINPE_INLINE vi bf16_narrow(v16f v, int *bad)
{
    return bf16_pack(v.lo, v.hi, bad);
}
static SINPE_INLINE vi f16_narrow(v16f v, int *bad)
{
    return f16_pack(v.lo, v.hi, bad);
}
static SINPE_INLINE v16f bf16_round2(v16f v, int *bad)
{
    return (v16f){bf16_round(v.lo, bad), bf16_round(v.hi, bad)};
}
static SINPE_INLINE v16f f16_round2(v16f v, int *bad)
{
    return (v16f){f16_round(v.lo, bad), f16_round(v.hi, bad)};
}

/* v rounded to bfloat16's values by Veltkamp's split, three operations
 * where bf16_round takes five: g = v * (2**16 + 1), g - (g - v) keeps
 * v's 8 leading significant bits, rounded to nearest, ties to even, for
 * every float from 2**-126 on (the sign of a zero kept too) until g
 * overflows (from 2**128 / 65537, just under 2**112), where the result is
 * a NaN, which the narrowing reports.
 * A subnormal v (float16.h rounds it to a multiple of 2**-133) comes out
 * with bits in its low 16 where it differs: they are ORed into *low, and
 * the caller reports the vector if any is set (vf_low16_any).  A NaN stays
 * a NaN.  scripts/convert.sh checks it for all 2**32 floats. */
static SINPE_INLINE vf bf16_round_split(vf v, vf *low)
{
    const vf g = vf_mul(v, vf_set1(65537.0f));
    const vf r = vf_sub(g, vf_sub(g, v));
    *low = vf_or(*low, r);
    return r;
}

/* ------------------------------------------------------------------ */
/* VF_LANES values in double (vdd), widened in order: the exact rotations. */

typedef struct {
    vd lo, hi;
} vdd;

static SINPE_INLINE vdd vdd_of(vf v)
{
    return (vdd){vd_of_lo(v), vd_of_hi(v)};
}
static SINPE_INLINE vdd vdd_load(const double *p)
{
    return (vdd){vd_load(p), vd_load(p + VF_LANES / 2)};
}
PAIR_BINARY(vdd_mul, vdd, vd_mul)
PAIR_BINARY(vdd_add, vdd, vd_add)
PAIR_BINARY(vdd_sub, vdd, vd_sub)
static SINPE_INLINE vdd vdd_pairs(vdd v, vdd c, vdd s)
{
    return (vdd){vd_subadd(vd_mul(v.lo, c.lo), vd_mul(vd_swap_pairs(v.lo), s.lo)),
                 vd_subadd(vd_mul(v.hi, c.hi), vd_mul(vd_swap_pairs(v.hi), s.hi))};
}

#undef PAIR_BINARY

#endif /* SINPE_X86_64 */
#endif /* SINPE_KERNELS_VEC_H */
