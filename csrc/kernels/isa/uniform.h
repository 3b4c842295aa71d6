/*
 * The vector operations every x86-64 ISA spells alike, written once for
 * the ISA header that includes this (kernels/isa/sse2.h, avx2.h, avx512.h)
 * after its types and intrinsic prefixes: VEC(op) its intrinsics
 * (_mm_op, _mm256_op, _mm512_op), VEC_SI(op) those on a whole integer
 * register (_mm256_op_si256, ...), VEC_SI_PS(v) an integer register's bits
 * as floats, ADD_OP(op, kind) those of the adds' vectors (add_ps, add_pd).
 * Loads and stores are unaligned.
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
/* a OP b, lane by lane */
#define VEC_BINARY(name, T, op)                                                               \
    static SINPE_INLINE T name(T a, T b)                                                      \
    {                                                                                         \
        return VEC(op)(a, b);                                                                 \
    }

static SINPE_INLINE vf vf_load(const float *p)
{
    return VEC(loadu_ps)(p);
}
static SINPE_INLINE void vf_store(float *p, vf v)
{
    VEC(storeu_ps)(p, v);
}
static SINPE_INLINE vf vf_set1(float a)
{
    return VEC(set1_ps)(a);
}
VEC_BINARY(vf_add, vf, add_ps)
VEC_BINARY(vf_sub, vf, sub_ps)
VEC_BINARY(vf_mul, vf, mul_ps)

static SINPE_INLINE vd vd_load(const double *p)
{
    return VEC(loadu_pd)(p);
}
VEC_BINARY(vd_add, vd, add_pd)
VEC_BINARY(vd_sub, vd, sub_pd)
VEC_BINARY(vd_mul, vd, mul_pd)
#undef VEC_BINARY

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

/* Streaming stores of add_ps vectors (the ISA's ADD_OP intrinsics): src's
 * STREAM_LANES floats to dst, around the caches. */
#define STREAM_LANES ((int)(sizeof(add_ps) / sizeof(float)))
static SINPE_INLINE void stream_store(float *dst, const float *src)
{
    ADD_OP(stream, ps)(dst, ADD_OP(loadu, ps)(src));
}

#endif /* SINPE_KERNELS_ISA_UNIFORM_H */
