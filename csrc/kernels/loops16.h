/*
 * The 16-bit types' adds (kernels.h's add loops for float16 and bfloat16)
 * on x86-64 (SINPE_VEC16: kernels/vec.h), included by loops.h once per
 * SIMD level.
 *
 * The definition is scalar: each element as loops.h's DEFINE_ADD and
 * DEFINE_ROTATE compute it with float16.h's conversions (the arithmetic of
 * NumPy and torch: each operation in float32, its result rounded to the
 * type), which is what runs on other CPUs.  These loops run that
 * arithmetic on vectors of V16_LANES elements: widen, the same float32
 * operations, the same roundings.  A vector in which kernels/vec.h reports a
 * lane it does not round as float16.h does (a NaN; the hardware bfloat16
 * conversion's subnormals) is computed again by the scalar definition
 * before anything is stored, and so is the tail of a row.  So every level
 * gives the scalar bits, NaN included, and which operand of a sum the CPU
 * propagates never matters.
 *
 * Why not leave it to the compiler: GCC 12 vectorises the scalar
 * definition at AVX2 with blends for the NaN selects, packs with
 * saturation and permutes, and at the baseline it scarcely vectorises the
 * 16-bit stores; float16 it cannot turn into F16C.  The bfloat16 add took
 * 1.3 times torch's at AVX2 and 2.7 times at the baseline.
 */
#if !defined(SINPE_LOOPS) || !defined(SINPE_VEC16)
#error "loops16.h is included by loops.h only, on levels with kernels/vec.h's vectors"
#endif

/* x = x * scale + t on V16_LANES elements at a time, two vectors a step
 * where the row allows (the loop's overhead and the check shared), FMT:
 * bf16 or f16.  The row is inline so that each call site's `scaled` is a
 * constant. */
#define ADD16_VECTOR(FMT, at, y, bad)                                                         \
    do {                                                                                      \
        v16f a_ = FMT##_widen(vi_load(x + (at)));                                             \
        if (scaled) {                                                                         \
            a_ = FMT##_round2(v16_scale(a_, s), &(bad));                                      \
        }                                                                                     \
        y = FMT##_narrow(v16_add(a_, FMT##_widen(vi_load(t + (at)))), &(bad));                \
    } while (0)
#define DEFINE_ADD16(name, FMT, WIDEN, NARROW)                                                \
    static inline void name##_scalar(uint16_t *restrict x, const uint16_t *restrict t,        \
                                     ptrdiff_t from, ptrdiff_t to, float scale, int scaled)   \
    {                                                                                         \
        for (ptrdiff_t l = from; l < to; ++l) {                                               \
            x[l] = ADD_ELEM(x[l], t[l], scale, WIDEN, NARROW, scaled); /* loops.h's */         \
        }                                                                                     \
    }                                                                                         \
    static inline void name##_row(uint16_t *restrict x, const uint16_t *restrict t,           \
                                  ptrdiff_t count, float scale, int scaled)                   \
    {                                                                                         \
        const vf s = vf_set1(scale);                                                          \
        ptrdiff_t l = 0;                                                                      \
        for (; l + 2 * V16_LANES <= count; l += 2 * V16_LANES) {                              \
            int bad = 0;                                                                      \
            vi y0, y1;                                                                        \
            ADD16_VECTOR(FMT, l, y0, bad);                                                    \
            ADD16_VECTOR(FMT, l + V16_LANES, y1, bad);                                        \
            if (bad) {                                                                        \
                name##_scalar(x, t, l, l + 2 * V16_LANES, scale, scaled);                     \
                continue;                                                                     \
            }                                                                                 \
            vi_store(x + l, y0);                                                              \
            vi_store(x + l + V16_LANES, y1);                                                  \
        }                                                                                     \
        if (l + V16_LANES <= count) {                                                         \
            int bad = 0;                                                                      \
            vi y;                                                                             \
            ADD16_VECTOR(FMT, l, y, bad);                                                     \
            if (bad) {                                                                        \
                name##_scalar(x, t, l, l + V16_LANES, scale, scaled);                         \
            } else {                                                                          \
                vi_store(x + l, y);                                                           \
            }                                                                                 \
            l += V16_LANES;                                                                   \
        }                                                                                     \
        name##_scalar(x, t, l, count, scale, scaled); /* the tail */                          \
    }                                                                                         \
    DEFINE_ADD_KERNEL(name, uint16_t, float)

DEFINE_ADD16(add_f16, f16, sinpe_half_to_float, sinpe_float_to_half)
DEFINE_ADD16(add_bf16, bf16, sinpe_bfloat16_to_float, sinpe_float_to_bfloat16)
