/*
 * The vector layer of the baseline level on x86-64 (kernels/vec.h): SSE2,
 * 16-byte vectors, every x86-64 CPU.  No half conversions: float16 widens
 * and rounds by float16.h's formulas on vectors.
 */
#ifndef SINPE_KERNELS_ISA_SSE2_H
#define SINPE_KERNELS_ISA_SSE2_H

typedef __m128 vf;  /* VF_LANES floats */
typedef __m128i vi; /* V16_LANES 16-bit elements */
typedef __m128d vd; /* VF_LANES / 2 doubles */
typedef __m128i vh; /* VF_LANES 16-bit elements, in the low 64 bits */
typedef __m128 add_ps;  /* the adds' and streaming stores' vectors */
typedef __m128d add_pd;
#define VF_LANES 4
#define V16_LANES 8
#define VEC(op) _mm_##op
#define VEC_SI(op) _mm_##op##_si128
#define VEC_SI_PS(v) _mm_castsi128_ps(v)
#define ADD_OP(op, kind) _mm_##op##_##kind
#define BF16_EVEN_ODD 1
#include "kernels/isa/uniform.h"

/* The heads a rotation loop takes side by side (kernels/rotate_vec.h),
 * what 16 registers hold: float16 4 heads 5% faster than 2, bfloat16 alike
 * at 2 and 3 (Zen 5). */
#define F32_GROUP 4
#define BF16_GROUP 3
#define F16_GROUP 4
#define XF32_GROUP 2
#define X16_GROUP 2

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

/* ------------------------------------------------------------------ */
/* Doubles: the exact rotations. */

static SINPE_INLINE vd vd_swap_pairs(vd a)
{
    return _mm_shuffle_pd(a, a, 1);
}
static SINPE_INLINE vd vd_subadd(vd a, vd b) /* SSE2 has no addsub: b's even lane negated */
{
    return _mm_add_pd(a, _mm_xor_pd(b, _mm_set_pd(0.0, -0.0)));
}
static SINPE_INLINE vd vd_of_lo(vf v)
{
    return _mm_cvtps_pd(v);
}
static SINPE_INLINE vd vd_of_hi(vf v)
{
    return _mm_cvtps_pd(_mm_movehl_ps(v, v));
}
static SINPE_INLINE vf vf_of_vd(vd lo, vd hi)
{
    return _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi));
}
static SINPE_INLINE __m128i vd_odd_half(vd d) /* two floats in the low lanes */
{
    const __m128 f = _mm_cvtpd_ps(d);
    const vd back = _mm_cvtps_pd(f), sign = _mm_set1_pd(-0.0);
    const vd inexact = _mm_cmpneq_pd(back, d), ordered = _mm_cmpord_pd(d, d);
    const vd above = _mm_cmpgt_pd(_mm_andnot_pd(sign, back), _mm_andnot_pd(sign, d));
    /* cmpneq is true for NaNs too: those stay NaNs, reported by the narrowing */
    const __m128i in32 = _mm_shuffle_epi32(_mm_castpd_si128(_mm_and_pd(inexact, ordered)), 0x08);
    const __m128i toward_zero = _mm_shuffle_epi32(_mm_castpd_si128(_mm_and_pd(inexact, above)), 0x08);
    const __m128i bits = _mm_add_epi32(_mm_castps_si128(f), toward_zero);
    return _mm_or_si128(bits, _mm_srli_epi32(in32, 31));
}
static SINPE_INLINE vf vf_odd_of_vd(vd lo, vd hi)
{
    return _mm_castsi128_ps(_mm_unpacklo_epi64(vd_odd_half(lo), vd_odd_half(hi)));
}
static SINPE_INLINE vf seq_widen_bf16(const uint16_t *p)
{
    return _mm_castsi128_ps(
        _mm_unpacklo_epi16(_mm_setzero_si128(), _mm_loadl_epi64((const __m128i *)(const void *)p)));
}
static SINPE_INLINE vf seq_widen_f16(const uint16_t *p)
{
    return f16_widen_high(
        _mm_unpacklo_epi16(_mm_setzero_si128(), _mm_loadl_epi64((const __m128i *)(const void *)p)));
}
static SINPE_INLINE vh seq_narrow_bf16(vf v, int *bad)
{
    *bad |= vf_nan_lanes(v);
    const __m128i r = _mm_srai_epi32(bf16_rounded_high(v), 16);
    return _mm_packs_epi32(r, r);
}
static SINPE_INLINE vh seq_narrow_f16(vf v, int *bad)
{
    *bad |= vf_nan_lanes(v);
    const __m128i r = _mm_srai_epi32(f16_rounded_high(v), 16);
    return _mm_packs_epi32(r, r);
}
static SINPE_INLINE void vh_store(uint16_t *p, vh v)
{
    _mm_storel_epi64((__m128i *)(void *)p, v);
}

#endif /* SINPE_KERNELS_ISA_SSE2_H */
