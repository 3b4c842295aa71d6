/*
 * The vector operations every x86-64 ISA spells alike, written once for
 * the ISA header that includes this (kernels/isa/sse2.h, avx2.h, avx512.h)
 * after its types and intrinsic prefixes: VEC(op) its intrinsics
 * (_mm_op, _mm256_op, _mm512_op), VEC_SI(op) those on a whole integer
 * register (_mm256_op_si256, ...), VEC_SI_PS(v) an integer register's bits
 * as floats.  Loads and stores are unaligned.
 */
#ifndef SINPE_KERNELS_ISA_UNIFORM_H
#define SINPE_KERNELS_ISA_UNIFORM_H

static SINPE_INLINE vi vi_load(const uint16_t *p)
{
    return VEC_SI(loadu)((const vi *)(const void *)p);
}
static SINPE_INLINE void vi_store(uint16_t *p, vi v)
{
    VEC_SI(storeu)((vi *)(void *)p, v);
}
static SINPE_INLINE vf vf_load(const float *p)
{
    return VEC(loadu_ps)(p);
}
static SINPE_INLINE void vf_store(float *p, vf v)
{
    VEC(storeu_ps)(p, v);
}
static SINPE_INLINE vf vf_add(vf a, vf b)
{
    return VEC(add_ps)(a, b);
}
static SINPE_INLINE vf vf_sub(vf a, vf b)
{
    return VEC(sub_ps)(a, b);
}
static SINPE_INLINE vf vf_mul(vf a, vf b)
{
    return VEC(mul_ps)(a, b);
}
static SINPE_INLINE vf vf_set1(float a)
{
    return VEC(set1_ps)(a);
}
static SINPE_INLINE vd vd_load(const double *p)
{
    return VEC(loadu_pd)(p);
}
static SINPE_INLINE vd vd_mul(vd a, vd b)
{
    return VEC(mul_pd)(a, b);
}
static SINPE_INLINE vd vd_add(vd a, vd b)
{
    return VEC(add_pd)(a, b);
}
static SINPE_INLINE vd vd_sub(vd a, vd b)
{
    return VEC(sub_pd)(a, b);
}

/* bfloat16: a float's b + 0x7fff + ((b >> 16) & 1), the bfloat16 rounded to
 * nearest even in the high half, and that rounding as a float. */
static SINPE_INLINE vi bf16_rounded_high(vf v)
{
    const vi b = VEC_SI(castps)(v);
    const vi odd = VEC_SI(and)(VEC(srli_epi32)(b, 16), VEC(set1_epi32)(1));
    return VEC(add_epi32)(VEC(add_epi32)(b, VEC(set1_epi32)(0x7fff)), odd);
}
static SINPE_INLINE vf bf16_round(vf v, int *bad)
{
    (void)bad;
    return VEC_SI_PS(VEC_SI(and)(bf16_rounded_high(v), VEC(set1_epi32)((int)0xffff0000u)));
}
#if defined(BF16_EVEN_ODD)
/* Widened by shift and mask: the even elements in lo, the odd ones in hi. */
#define BF16_WIDEN_LO(v) VEC_SI_PS(VEC(slli_epi32)(v, 16))
#define BF16_WIDEN_HI(v) VEC_SI_PS(VEC_SI(and)(v, VEC(set1_epi32)((int)0xffff0000u)))
#endif

#endif /* SINPE_KERNELS_ISA_UNIFORM_H */
