/*
 * The vector layer of the avx2 level (kernels/vec.h): AVX2 and F16C,
 * 32-byte vectors.  Only standard <immintrin.h> intrinsics.
 */
#ifndef SINPE_KERNELS_ISA_AVX2_H
#define SINPE_KERNELS_ISA_AVX2_H

typedef __m256 vf;  /* VF_LANES floats */
typedef __m256i vi; /* V16_LANES 16-bit elements */
typedef __m256d vd; /* VF_LANES / 2 doubles */
typedef __m128i vh; /* VF_LANES 16-bit elements */
typedef __m256 add_ps;  /* the adds' and streaming stores' vectors */
typedef __m256d add_pd;
#define VF_LANES 8
#define V16_LANES 16
#define VEC(op) _mm256_##op
#define VEC_SI(op) _mm256_##op##_si256
#define VEC_SI_PS(v) _mm256_castsi256_ps(v)
#define ADD_OP(op, kind) _mm256_##op##_##kind
#define BF16_EVEN_ODD 1
#include "kernels/isa/uniform.h"

/* The heads a rotation loop takes side by side (kernels/rotate_vec.h),
 * what 16 registers hold (a 16-bit vector's values take two), as measured
 * on Zen 5 (rope_ of (1, 32, 2048, 128) against an in-place pass, one
 * thread): bfloat16 3 heads 1.52x, 2 heads 1.65x, 4 heads 1.73x; float16
 * 4 heads 2.95x, 2 heads 3.3x, 8 heads 3.2x. */
#define F32_GROUP 4
#define BF16_GROUP 3
#define F16_GROUP 4
#define XF32_GROUP 2
#define X16_GROUP 2

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

/* ------------------------------------------------------------------ */
/* Doubles: the exact rotations. */

static SINPE_INLINE vd vd_swap_pairs(vd a)
{
    return _mm256_permute_pd(a, 0x5);
}
static SINPE_INLINE vd vd_subadd(vd a, vd b)
{
    return _mm256_addsub_pd(a, b);
}
static SINPE_INLINE vd vd_of_lo(vf v)
{
    return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
static SINPE_INLINE vd vd_of_hi(vf v)
{
    return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
static SINPE_INLINE vf vf_of_vd(vd lo, vd hi)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}
/* the low 32 bits of each 64-bit lane of a double mask: all ones or zero */
static SINPE_INLINE __m128i mask32_of_vd(vd m)
{
    const __m256i low = _mm256_permutevar8x32_epi32(_mm256_castpd_si256(m),
                                                    _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6));
    return _mm256_castsi256_si128(low);
}
static SINPE_INLINE __m128 vd_odd_half(vd d)
{
    const __m128 f = _mm256_cvtpd_ps(d);
    const vd back = _mm256_cvtps_pd(f), sign = _mm256_set1_pd(-0.0);
    const vd inexact = _mm256_cmp_pd(back, d, _CMP_NEQ_OQ);
    const vd above = _mm256_cmp_pd(_mm256_andnot_pd(sign, back), _mm256_andnot_pd(sign, d), _CMP_GT_OQ);
    const __m128i in32 = mask32_of_vd(inexact), toward_zero = mask32_of_vd(_mm256_and_pd(inexact, above));
    const __m128i bits = _mm_add_epi32(_mm_castps_si128(f), toward_zero); /* one step: -1 */
    return _mm_castsi128_ps(_mm_or_si128(bits, _mm_srli_epi32(in32, 31)));
}
static SINPE_INLINE vf vf_odd_of_vd(vd lo, vd hi)
{
    return _mm256_insertf128_ps(_mm256_castps128_ps256(vd_odd_half(lo)), vd_odd_half(hi), 1);
}
static SINPE_INLINE vf seq_widen_bf16(const uint16_t *p)
{
    return _mm256_castsi256_ps(
        _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(const void *)p)), 16));
}
static SINPE_INLINE vf seq_widen_f16(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(const void *)p));
}
static SINPE_INLINE vh seq_narrow_bf16(vf v, int *bad)
{
    *bad |= vf_nan_lanes(v);
    const __m256i r = _mm256_srli_epi32(bf16_rounded_high(v), 16);
    return _mm_packus_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
}
static SINPE_INLINE vh seq_narrow_f16(vf v, int *bad)
{
    *bad |= vf_nan_lanes(v);
    return _mm256_cvtps_ph(v, F16_RNE);
}
static SINPE_INLINE void vh_store(uint16_t *p, vh v)
{
    _mm_storeu_si128((__m128i *)(void *)p, v);
}

#endif /* SINPE_KERNELS_ISA_AVX2_H */
