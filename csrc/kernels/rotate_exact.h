/*
 * The exact rotations (rotate_exact: double caches, the products and the
 * sum in double, rounded once) of float32, float16 and bfloat16 on x86-64
 * vectors, for rotate_vec.h's rows: the element types XF32, XF16, XBF16.
 * VF_LANES elements a vector, widened in order to two vectors of doubles
 * (vdd); the sums rounded as rotate_loops.h's scalar rows round them:
 * float32 to nearest (cvtpd2ps), the 16-bit types to odd in float and
 * then to nearest even (float16.h's sinpe_double_to_half and _bfloat16).
 * A NaN sum (still a NaN once rounded to float), and with the hardware
 * bfloat16 conversion a subnormal, is reported by one test of the float
 * vector: the scalar rows compute that vector (the NaN rule).
 *
 * Rounding to odd: the float toward zero, its lowest bit set when that
 * dropped anything, which is what float16.h's sinpe_float_odd computes
 * (nearest, then one step toward zero when that went away from zero),
 * also past the float range (FLT_MAX, odd) and for float subnormals.
 * AVX-512 converts toward zero by embedded rounding; AVX2 and SSE2 follow
 * sinpe_float_odd's steps.
 */
#ifndef SINPE_LOOPS
#error "rotate_exact.h is included by rotate_vec.h only"
#endif

#if defined(SINPE_LOOPS_AVX512)
typedef __m512d vd;
typedef __m256i vh; /* VF_LANES 16-bit elements */
static SINPE_INLINE vd vd_load(const double *p)
{
    return _mm512_loadu_pd(p);
}
static SINPE_INLINE vd vd_mul(vd a, vd b)
{
    return _mm512_mul_pd(a, b);
}
static SINPE_INLINE vd vd_add(vd a, vd b)
{
    return _mm512_add_pd(a, b);
}
static SINPE_INLINE vd vd_sub(vd a, vd b)
{
    return _mm512_sub_pd(a, b);
}
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
#if defined(SINPE_LOOPS_BF16)
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
#define XF32_GROUP 4
#define X16_GROUP 4

#elif defined(SINPE_LOOPS_AVX)
typedef __m256d vd;
typedef __m128i vh;
static SINPE_INLINE vd vd_load(const double *p)
{
    return _mm256_loadu_pd(p);
}
static SINPE_INLINE vd vd_mul(vd a, vd b)
{
    return _mm256_mul_pd(a, b);
}
static SINPE_INLINE vd vd_add(vd a, vd b)
{
    return _mm256_add_pd(a, b);
}
static SINPE_INLINE vd vd_sub(vd a, vd b)
{
    return _mm256_sub_pd(a, b);
}
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
#define XF32_GROUP 2
#define X16_GROUP 2

#else /* SSE2 */
typedef __m128d vd;
typedef __m128i vh; /* the low 64 bits */
static SINPE_INLINE vd vd_load(const double *p)
{
    return _mm_loadu_pd(p);
}
static SINPE_INLINE vd vd_mul(vd a, vd b)
{
    return _mm_mul_pd(a, b);
}
static SINPE_INLINE vd vd_add(vd a, vd b)
{
    return _mm_add_pd(a, b);
}
static SINPE_INLINE vd vd_sub(vd a, vd b)
{
    return _mm_sub_pd(a, b);
}
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
#define XF32_GROUP 2
#define X16_GROUP 2
#endif

/* ------------------------------------------------------------------ */
/* VF_LANES values in double, and the element types. */

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
static SINPE_INLINE vdd vdd_mul(vdd a, vdd b)
{
    return (vdd){vd_mul(a.lo, b.lo), vd_mul(a.hi, b.hi)};
}
static SINPE_INLINE vdd vdd_add(vdd a, vdd b)
{
    return (vdd){vd_add(a.lo, b.lo), vd_add(a.hi, b.hi)};
}
static SINPE_INLINE vdd vdd_sub(vdd a, vdd b)
{
    return (vdd){vd_sub(a.lo, b.lo), vd_sub(a.hi, b.hi)};
}
static SINPE_INLINE vdd vdd_pairs(vdd v, vdd c, vdd s)
{
    return (vdd){vd_subadd(vd_mul(v.lo, c.lo), vd_mul(vd_swap_pairs(v.lo), s.lo)),
                 vd_subadd(vd_mul(v.hi, c.hi), vd_mul(vd_swap_pairs(v.hi), s.hi))};
}

#define XF32_V vdd
#define XF32_OUT vf
#define XF32_LANES VF_LANES
#define XF32_LOAD(p) vdd_of(vf_load(p))
#define XF32_LOADC vdd_load
#define XF32_PROD(x, c) vdd_mul(x, c)
#define XF32_SUB vdd_sub
#define XF32_ADD vdd_add
#define XF32_FINISH(v) vf_of_vd((v).lo, (v).hi)
#define XF32_PUT(p, o) vf_store(p, o)
#define XF32_LOW_BAD(low) 0
#define XF32_PAIRS(v, c, s) XF32_FINISH(vdd_pairs(v, c, s))

#define XBF16_V vdd
#define XBF16_OUT vh
#define XBF16_LANES VF_LANES
#define XBF16_LOAD(p) vdd_of(seq_widen_bf16(p))
#define XBF16_LOADC vdd_load
#define XBF16_PROD(x, c) vdd_mul(x, c)
#define XBF16_SUB vdd_sub
#define XBF16_ADD vdd_add
#define XBF16_FINISH(v) seq_narrow_bf16(vf_odd_of_vd((v).lo, (v).hi), &bad)
#define XBF16_PUT(p, o) vh_store(p, o)
#define XBF16_LOW_BAD(low) 0
#define XBF16_PAIRS(v, c, s) XBF16_FINISH(vdd_pairs(v, c, s))
#define XBF16_GROUP X16_GROUP

#define XF16_V vdd
#define XF16_OUT vh
#define XF16_LANES VF_LANES
#define XF16_LOAD(p) vdd_of(seq_widen_f16(p))
#define XF16_LOADC vdd_load
#define XF16_PROD(x, c) vdd_mul(x, c)
#define XF16_SUB vdd_sub
#define XF16_ADD vdd_add
#define XF16_FINISH(v) seq_narrow_f16(vf_odd_of_vd((v).lo, (v).hi), &bad)
#define XF16_PUT(p, o) vh_store(p, o)
#define XF16_LOW_BAD(low) 0
#define XF16_PAIRS(v, c, s) XF16_FINISH(vdd_pairs(v, c, s))
#define XF16_GROUP X16_GROUP
