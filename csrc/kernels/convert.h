/*
 * The 16-bit float formats in vectors, for the 16-bit loops (loops16.h) of
 * one x86-64 SIMD level: widening to float, rounding a float to the format
 * (to nearest, ties to even) and back to float, and narrowing for a store.
 * A level file includes this (through loops.h) after switching its
 * compiler to its instructions; SINPE_VEC16 says the level has them.
 * Elsewhere (aarch64, other CPUs) the loops run float16.h's scalar
 * conversions, which are the definition these match bit for bit.
 *
 * A vector of 16-bit elements (vi: 8 at the baseline's SSE2, 16 at AVX2,
 * 32 at AVX-512) widens to two float registers (v16f: lo and hi), in the
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
 * never reach memory.  scripts/convert.sh checks every function here
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
 * Only standard <immintrin.h> intrinsics; the bfloat16 instructions only
 * where GCC or Clang builds the avx512_bf16 level (SINPE_LOOPS_BF16).
 */
#ifndef SINPE_CONVERT_H
#define SINPE_CONVERT_H

#if defined(SINPE_X86_64)
#define SINPE_VEC16 1
/* vcvtps2ph's rounding: to nearest even, whatever MXCSR says (a constant
 * expression: Clang wants one) */
#define F16_RNE (_MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC)

#if defined(SINPE_LOOPS_AVX512)
typedef __m512 vf;
typedef __m512i vi;
#define V16_LANES 32

static SINPE_INLINE vi vi_load(const uint16_t *p)
{
    return _mm512_loadu_si512((const void *)p);
}
static SINPE_INLINE void vi_store(uint16_t *p, vi v)
{
    _mm512_storeu_si512((void *)p, v);
}
#define VF_LANES 16
static SINPE_INLINE vf vf_load(const float *p)
{
    return _mm512_loadu_ps(p);
}
static SINPE_INLINE void vf_store(float *p, vf v)
{
    _mm512_storeu_ps(p, v);
}
static SINPE_INLINE vf vf_add(vf a, vf b)
{
    return _mm512_add_ps(a, b);
}
static SINPE_INLINE vf vf_sub(vf a, vf b)
{
    return _mm512_sub_ps(a, b);
}
static SINPE_INLINE vf vf_mul(vf a, vf b)
{
    return _mm512_mul_ps(a, b);
}
static SINPE_INLINE vf vf_set1(float a)
{
    return _mm512_set1_ps(a);
}
/* (a0 - b0, a1 + b1, a2 - b2, ...): a pair's two outputs */
static SINPE_INLINE vf vf_subadd(vf a, vf b)
{
    return _mm512_mask_sub_ps(_mm512_add_ps(a, b), 0x5555, a, b);
}
/* (a1, a0, a3, a2, ...): each pair's partner */
static SINPE_INLINE vf vf_swap_pairs(vf a)
{
    return _mm512_permute_ps(a, 0xb1);
}
static SINPE_INLINE int vf_nan_lanes(vf a)
{
    return (int)_mm512_cmp_ps_mask(a, a, _CMP_UNORD_Q);
}
/* the lanes where a or b is a NaN (unordered), one compare for both */
static SINPE_INLINE int vf_nan_either(vf a, vf b)
{
    return (int)_mm512_cmp_ps_mask(a, b, _CMP_UNORD_Q);
}
static SINPE_INLINE vf vf_or(vf a, vf b)
{
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(a), _mm512_castps_si512(b)));
}
/* whether a lane has a bit in its low 16 */
static SINPE_INLINE int vf_low16_any(vf a)
{
    return _mm512_test_epi32_mask(_mm512_castps_si512(a), _mm512_set1_epi32(0xffff)) != 0;
}

#if defined(SINPE_LOOPS_BF16)
/* In order, as vcvtne2ps2bf16 packs. */
static SINPE_INLINE vf bf16_widen_half(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#define BF16_WIDEN_LO(v) bf16_widen_half(_mm512_castsi512_si256(v))
#define BF16_WIDEN_HI(v) bf16_widen_half(_mm512_extracti64x4_epi64(v, 1))
#else
#define BF16_EVEN_ODD 1
#define BF16_WIDEN_LO(v) _mm512_castsi512_ps(_mm512_slli_epi32(v, 16))
#define BF16_WIDEN_HI(v) _mm512_castsi512_ps(_mm512_and_si512(v, _mm512_set1_epi32((int)0xffff0000u)))
#endif
/* b + 0x7fff + ((b >> 16) & 1): the bfloat16, rounded, in the high half */
static SINPE_INLINE vi bf16_rounded_high(vf v)
{
    const vi b = _mm512_castps_si512(v);
    const vi odd = _mm512_and_si512(_mm512_srli_epi32(b, 16), _mm512_set1_epi32(1));
    return _mm512_add_epi32(_mm512_add_epi32(b, _mm512_set1_epi32(0x7fff)), odd);
}
static SINPE_INLINE vf bf16_round(vf v, int *bad)
{
    (void)bad;
    return _mm512_castsi512_ps(
        _mm512_and_si512(bf16_rounded_high(v), _mm512_set1_epi32((int)0xffff0000u)));
}
static SINPE_INLINE vi bf16_pack(vf lo, vf hi, int *bad)
{
#if defined(SINPE_LOOPS_BF16)
    /* QNaN (0x01), subnormal (0x20), SNaN (0x80): what the instruction
     * rounds otherwise than float16.h */
    *bad |= (int)(_mm512_fpclass_ps_mask(lo, 0xa1) | _mm512_fpclass_ps_mask(hi, 0xa1));
    return (vi)_mm512_cvtne2ps_pbh(hi, lo);
#else
    *bad |= vf_nan_either(lo, hi);
    return _mm512_mask_blend_epi16(0xaaaaaaaau, _mm512_srli_epi32(bf16_rounded_high(lo), 16),
                                   bf16_rounded_high(hi));
#endif
}

#define F16_WIDEN_LO(v) _mm512_cvtph_ps(_mm512_castsi512_si256(v))
#define F16_WIDEN_HI(v) _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1))
static SINPE_INLINE vf f16_round(vf v, int *bad)
{
    (void)bad;
    return _mm512_cvtph_ps(_mm512_cvtps_ph(v, F16_RNE));
}
static SINPE_INLINE vi f16_pack(vf lo, vf hi, int *bad)
{
    *bad |= vf_nan_either(lo, hi);
    return _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtps_ph(lo, F16_RNE)),
                              _mm512_cvtps_ph(hi, F16_RNE), 1);
}

#elif defined(SINPE_LOOPS_AVX)
typedef __m256 vf;
typedef __m256i vi;
#define V16_LANES 16

static SINPE_INLINE vi vi_load(const uint16_t *p)
{
    return _mm256_loadu_si256((const __m256i *)(const void *)p);
}
static SINPE_INLINE void vi_store(uint16_t *p, vi v)
{
    _mm256_storeu_si256((__m256i *)(void *)p, v);
}
#define VF_LANES 8
static SINPE_INLINE vf vf_load(const float *p)
{
    return _mm256_loadu_ps(p);
}
static SINPE_INLINE void vf_store(float *p, vf v)
{
    _mm256_storeu_ps(p, v);
}
static SINPE_INLINE vf vf_add(vf a, vf b)
{
    return _mm256_add_ps(a, b);
}
static SINPE_INLINE vf vf_sub(vf a, vf b)
{
    return _mm256_sub_ps(a, b);
}
static SINPE_INLINE vf vf_mul(vf a, vf b)
{
    return _mm256_mul_ps(a, b);
}
static SINPE_INLINE vf vf_set1(float a)
{
    return _mm256_set1_ps(a);
}
static SINPE_INLINE vf vf_subadd(vf a, vf b)
{
    return _mm256_addsub_ps(a, b);
}
static SINPE_INLINE vf vf_swap_pairs(vf a)
{
    return _mm256_permute_ps(a, 0xb1);
}
static SINPE_INLINE int vf_nan_lanes(vf a)
{
    return _mm256_movemask_ps(_mm256_cmp_ps(a, a, _CMP_UNORD_Q));
}
static SINPE_INLINE int vf_nan_either(vf a, vf b)
{
    return _mm256_movemask_ps(_mm256_cmp_ps(a, b, _CMP_UNORD_Q));
}
static SINPE_INLINE vf vf_or(vf a, vf b)
{
    return _mm256_or_ps(a, b);
}
static SINPE_INLINE int vf_low16_any(vf a)
{
    return !_mm256_testz_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0xffff));
}

#define BF16_EVEN_ODD 1
#define BF16_WIDEN_LO(v) _mm256_castsi256_ps(_mm256_slli_epi32(v, 16))
#define BF16_WIDEN_HI(v) _mm256_castsi256_ps(_mm256_and_si256(v, _mm256_set1_epi32((int)0xffff0000u)))
static SINPE_INLINE vi bf16_rounded_high(vf v)
{
    const vi b = _mm256_castps_si256(v);
    const vi odd = _mm256_and_si256(_mm256_srli_epi32(b, 16), _mm256_set1_epi32(1));
    return _mm256_add_epi32(_mm256_add_epi32(b, _mm256_set1_epi32(0x7fff)), odd);
}
static SINPE_INLINE vf bf16_round(vf v, int *bad)
{
    (void)bad;
    return _mm256_castsi256_ps(
        _mm256_and_si256(bf16_rounded_high(v), _mm256_set1_epi32((int)0xffff0000u)));
}
static SINPE_INLINE vi bf16_pack(vf lo, vf hi, int *bad)
{
    *bad |= vf_nan_either(lo, hi);
    return _mm256_blend_epi16(_mm256_srli_epi32(bf16_rounded_high(lo), 16),
                              bf16_rounded_high(hi), 0xaa);
}

#define F16_WIDEN_LO(v) _mm256_cvtph_ps(_mm256_castsi256_si128(v))
#define F16_WIDEN_HI(v) _mm256_cvtph_ps(_mm256_extracti128_si256(v, 1))
static SINPE_INLINE vf f16_round(vf v, int *bad)
{
    (void)bad;
    return _mm256_cvtph_ps(_mm256_cvtps_ph(v, F16_RNE));
}
static SINPE_INLINE vi f16_pack(vf lo, vf hi, int *bad)
{
    *bad |= vf_nan_either(lo, hi);
    return _mm256_inserti128_si256(_mm256_castsi128_si256(_mm256_cvtps_ph(lo, F16_RNE)),
                                   _mm256_cvtps_ph(hi, F16_RNE), 1);
}

#else /* the baseline: SSE2 */
typedef __m128 vf;
typedef __m128i vi;
#define V16_LANES 8

static SINPE_INLINE vi vi_load(const uint16_t *p)
{
    return _mm_loadu_si128((const __m128i *)(const void *)p);
}
static SINPE_INLINE void vi_store(uint16_t *p, vi v)
{
    _mm_storeu_si128((__m128i *)(void *)p, v);
}
#define VF_LANES 4
static SINPE_INLINE vf vf_load(const float *p)
{
    return _mm_loadu_ps(p);
}
static SINPE_INLINE void vf_store(float *p, vf v)
{
    _mm_storeu_ps(p, v);
}
static SINPE_INLINE vf vf_add(vf a, vf b)
{
    return _mm_add_ps(a, b);
}
static SINPE_INLINE vf vf_sub(vf a, vf b)
{
    return _mm_sub_ps(a, b);
}
static SINPE_INLINE vf vf_mul(vf a, vf b)
{
    return _mm_mul_ps(a, b);
}
static SINPE_INLINE vf vf_set1(float a)
{
    return _mm_set1_ps(a);
}
/* SSE2 has no addsub: b's even lanes negated (exact), then added */
static SINPE_INLINE vf vf_subadd(vf a, vf b)
{
    const __m128 even_signs = _mm_castsi128_ps(_mm_set_epi32(0, (int)0x80000000u, 0,
                                                             (int)0x80000000u));
    return _mm_add_ps(a, _mm_xor_ps(b, even_signs));
}
static SINPE_INLINE vf vf_swap_pairs(vf a)
{
    return _mm_shuffle_ps(a, a, 0xb1);
}
static SINPE_INLINE int vf_nan_lanes(vf a)
{
    return _mm_movemask_ps(_mm_cmpunord_ps(a, a));
}
static SINPE_INLINE int vf_nan_either(vf a, vf b)
{
    return _mm_movemask_ps(_mm_cmpunord_ps(a, b));
}
static SINPE_INLINE vf vf_or(vf a, vf b)
{
    return _mm_or_ps(a, b);
}
static SINPE_INLINE int vf_low16_any(vf a)
{
    const __m128i low = _mm_and_si128(_mm_castps_si128(a), _mm_set1_epi32(0xffff));
    return _mm_movemask_epi8(_mm_cmpeq_epi32(low, _mm_setzero_si128())) != 0xffff;
}

#define BF16_EVEN_ODD 1
#define BF16_WIDEN_LO(v) _mm_castsi128_ps(_mm_slli_epi32(v, 16))
#define BF16_WIDEN_HI(v) _mm_castsi128_ps(_mm_and_si128(v, _mm_set1_epi32((int)0xffff0000u)))
static SINPE_INLINE vi bf16_rounded_high(vf v)
{
    const vi b = _mm_castps_si128(v);
    const vi odd = _mm_and_si128(_mm_srli_epi32(b, 16), _mm_set1_epi32(1));
    return _mm_add_epi32(_mm_add_epi32(b, _mm_set1_epi32(0x7fff)), odd);
}
static SINPE_INLINE vf bf16_round(vf v, int *bad)
{
    (void)bad;
    return _mm_castsi128_ps(_mm_and_si128(bf16_rounded_high(v), _mm_set1_epi32((int)0xffff0000u)));
}
static SINPE_INLINE vi bf16_pack(vf lo, vf hi, int *bad)
{
    *bad |= vf_nan_either(lo, hi);
    return _mm_or_si128(_mm_srli_epi32(bf16_rounded_high(lo), 16),
                        _mm_and_si128(bf16_rounded_high(hi), _mm_set1_epi32((int)0xffff0000u)));
}

/* float16.h's sinpe_half_to_float on halves held in the high 16 bits of
 * each lane (as the unpack leaves them) */
static SINPE_INLINE vf f16_widen_high(__m128i u)
{
    const __m128i sign = _mm_and_si128(u, _mm_set1_epi32((int)0x80000000u));
    /* the fraction and exponent, moved into place and scaled by 2**112 */
    const __m128i moved = _mm_srli_epi32(_mm_xor_si128(u, sign), 3);
    const __m128 f = _mm_mul_ps(_mm_castsi128_ps(moved), _mm_castsi128_ps(_mm_set1_epi32(
                                                             (254 - 15) << 23)));
    const __m128 infnan = _mm_cmpge_ps(f, _mm_castsi128_ps(_mm_set1_epi32((127 + 16) << 23)));
    const __m128 exponent = _mm_and_ps(infnan, _mm_castsi128_ps(_mm_set1_epi32(255 << 23)));
    return _mm_or_ps(_mm_or_ps(f, exponent), _mm_castsi128_ps(sign));
}
#define F16_WIDEN_LO(v) f16_widen_high(_mm_unpacklo_epi16(_mm_setzero_si128(), v))
#define F16_WIDEN_HI(v) f16_widen_high(_mm_unpackhi_epi16(_mm_setzero_si128(), v))

/* |v| (a) rounded to float16's values, as a float: adding c = 2**13 times
 * a's power of two (at least 0.5: float16's subnormals are multiples of
 * 2**-24) leaves 11 significant bits, rounded to nearest, ties to even, by
 * the addition itself.  From 65520 (float16's overflow) on the result is
 * 65536 or more, or a NaN (c is then no power of two); a NaN stays a NaN
 * (max_ps takes 0.5 for its c).  About a third of the operations of
 * float16.h's steps. */
static SINPE_INLINE vf f16_round_magnitude(vf a)
{
    const __m128i power = _mm_and_si128(_mm_castps_si128(a), _mm_set1_epi32(255 << 23));
    const __m128 c = _mm_max_ps(_mm_castsi128_ps(_mm_add_epi32(power, _mm_set1_epi32(13 << 23))),
                                _mm_set1_ps(0.5f));
    return _mm_sub_ps(_mm_add_ps(a, c), c);
}

/* float16.h's sinpe_float_to_half but for NaNs (reported by every caller),
 * the half in the high 16 bits of each lane (the low 16 are zero): the
 * rounded magnitude, at most 65536, times 2**-112 has the half's exponent
 * and fraction (a subnormal half's too) in the float's bits 13 and up, and
 * 65536 becomes the infinity. */
static SINPE_INLINE __m128i f16_rounded_high(vf v)
{
    const __m128 sign = _mm_castsi128_ps(_mm_set1_epi32((int)0x80000000u));
    const __m128 r = _mm_min_ps(f16_round_magnitude(_mm_andnot_ps(sign, v)), _mm_set1_ps(65536.0f));
    const __m128 moved = _mm_mul_ps(r, _mm_castsi128_ps(_mm_set1_epi32((127 - 112) << 23)));
    return _mm_or_si128(_mm_slli_epi32(_mm_castps_si128(moved), 3),
                        _mm_castps_si128(_mm_and_ps(v, sign)));
}
/* v rounded to float16's values, as a float, without the half's bits;
 * float16's overflow (|v| >= 65520, infinities) is the infinity. */
static SINPE_INLINE vf f16_round(vf v, int *bad)
{
    (void)bad;
    const __m128 sign = _mm_castsi128_ps(_mm_set1_epi32((int)0x80000000u));
    const __m128 a = _mm_andnot_ps(sign, v);
    const __m128 huge = _mm_cmpge_ps(a, _mm_set1_ps(65520.0f));
    const __m128 inf = _mm_and_ps(huge, _mm_castsi128_ps(_mm_set1_epi32(255 << 23)));
    return _mm_or_ps(_mm_or_ps(inf, _mm_andnot_ps(huge, f16_round_magnitude(a))),
                     _mm_and_ps(v, sign));
}
static SINPE_INLINE vi f16_pack(vf lo, vf hi, int *bad)
{
    *bad |= vf_nan_either(lo, hi);
    return _mm_packs_epi32(_mm_srai_epi32(f16_rounded_high(lo), 16),
                           _mm_srai_epi32(f16_rounded_high(hi), 16));
}
#endif

/* ------------------------------------------------------------------ */
/* The values of one vector of 16-bit elements, and what the loops do
 * with them: the same at every level. */

typedef struct {
    vf lo, hi;
} v16f;

static SINPE_INLINE v16f v16_add(v16f a, v16f b)
{
    return (v16f){vf_add(a.lo, b.lo), vf_add(a.hi, b.hi)};
}
static SINPE_INLINE v16f v16_sub(v16f a, v16f b)
{
    return (v16f){vf_sub(a.lo, b.lo), vf_sub(a.hi, b.hi)};
}
static SINPE_INLINE v16f v16_mul(v16f a, v16f b)
{
    return (v16f){vf_mul(a.lo, b.lo), vf_mul(a.hi, b.hi)};
}
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

#endif /* SINPE_X86_64 */
#endif /* SINPE_CONVERT_H */
