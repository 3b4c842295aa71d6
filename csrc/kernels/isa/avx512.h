/*
 * The vector layer of the avx512 and avx512_bf16 levels (kernels/vec.h):
 * AVX-512 F, BW, DQ and VL, 64-byte vectors; with AVX512_BF16
 * (SINPE_ISA_BF16) the bfloat16 narrowing by vcvtne2ps2bf16, whose lanes
 * are in order.  Only standard <immintrin.h> intrinsics.
 */
#ifndef SINPE_KERNELS_ISA_AVX512_H
#define SINPE_KERNELS_ISA_AVX512_H

typedef __m512 vf;  /* VF_LANES floats */
typedef __m512i vi; /* V16_LANES 16-bit elements */
typedef __m512d vd; /* VF_LANES / 2 doubles */
typedef __m256i vh; /* VF_LANES 16-bit elements */
typedef __m256 add_ps;  /* the adds' and streaming stores' vectors: 32 bytes, as at
                         * AVX2 (kernels/loops_add.h says why) */
typedef __m256d add_pd;
#define VF_LANES 16
#define V16_LANES 32
#define VEC(op) _mm512_##op
#define VEC_SI(op) _mm512_##op##_si512
#define VEC_SI_PS(v) _mm512_castsi512_ps(v)
#define ADD_OP(op, kind) _mm256_##op##_##kind
#if !defined(SINPE_ISA_BF16)
#define BF16_EVEN_ODD 1
#endif
#include "kernels/isa/uniform.h"

/* The heads a rotation loop takes side by side (kernels/rotate_vec.h): 32
 * registers hold 4 of every type; 8 heads were slower (Zen 5). */
#define F32_GROUP 4
#define BF16_GROUP 4
#define F16_GROUP 4
#define XF32_GROUP 4
#define X16_GROUP 4

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

#if defined(SINPE_ISA_BF16)
/* In order, as vcvtne2ps2bf16 packs. */
static SINPE_INLINE vf bf16_widen_half(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#define BF16_WIDEN_LO(v) bf16_widen_half(_mm512_castsi512_si256(v))
#define BF16_WIDEN_HI(v) bf16_widen_half(_mm512_extracti64x4_epi64(v, 1))
#endif
static SINPE_INLINE vi bf16_pack(vf lo, vf hi, int *bad)
{
#if defined(SINPE_ISA_BF16)
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

/* ------------------------------------------------------------------ */
/* Doubles: the exact rotations. */

static SINPE_INLINE vd vd_swap_pairs(vd a)
{
    return _mm512_permute_pd(a, 0x55);
}
static SINPE_INLINE vd vd_subadd(vd a, vd b)
{
    return _mm512_mask_sub_pd(_mm512_add_pd(a, b), 0x55, a, b);
}
static SINPE_INLINE vd vd_of_lo(vf v)
{
    return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
static SINPE_INLINE vd vd_of_hi(vf v)
{
    return _mm512_cvtps_pd(_mm512_extractf32x8_ps(v, 1));
}
static SINPE_INLINE vf vf_of_vd(vd lo, vd hi)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(lo)), _mm512_cvtpd_ps(hi), 1);
}
static SINPE_INLINE __m256 vd_odd_half(vd d)
{
    const __m256 t = _mm512_cvt_roundpd_ps(d, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask8 inexact = _mm512_cmp_pd_mask(_mm512_cvtps_pd(t), d, _CMP_NEQ_OQ);
    const __m256i bits = _mm256_castps_si256(t);
    return _mm256_castsi256_ps(_mm256_mask_or_epi32(bits, inexact, bits, _mm256_set1_epi32(1)));
}
static SINPE_INLINE vf vf_odd_of_vd(vd lo, vd hi)
{
    return _mm512_insertf32x8(_mm512_castps256_ps512(vd_odd_half(lo)), vd_odd_half(hi), 1);
}
static SINPE_INLINE vf seq_widen_bf16(const uint16_t *p)
{
    return _mm512_castsi512_ps(
        _mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(const void *)p)), 16));
}
static SINPE_INLINE vf seq_widen_f16(const uint16_t *p)
{
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
}
static SINPE_INLINE vh seq_narrow_bf16(vf v, int *bad)
{
#if defined(SINPE_ISA_BF16)
    /* NaNs, and subnormals: the instruction flushes them */
    *bad |= (int)_mm512_fpclass_ps_mask(v, 0xa1);
    return (vh)_mm512_cvtneps_pbh(v);
#else
    *bad |= vf_nan_lanes(v);
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_rounded_high(v), 16));
#endif
}
static SINPE_INLINE vh seq_narrow_f16(vf v, int *bad)
{
    *bad |= vf_nan_lanes(v);
    return _mm512_cvtps_ph(v, F16_RNE);
}
static SINPE_INLINE void vh_store(uint16_t *p, vh v)
{
    _mm256_storeu_si256((__m256i *)(void *)p, v);
}

#endif /* SINPE_KERNELS_ISA_AVX512_H */
