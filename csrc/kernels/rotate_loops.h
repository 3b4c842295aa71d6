/*
 * The rotations (kernels.h's sinpe_rotate_loop), included by loops.h once
 * per SIMD level: the scalar definition of each element type's rotation,
 * and the loop over a call's rows and copies.  On x86-64 the rows of
 * float32, float16 and bfloat16 run on vectors (rotate_vec.h) with these
 * bits.
 *
 * Per element type: LOAD widens an element to the working type W,
 * PRODUCT(x, c) is a product as the arithmetic rounds it, SUM adds two,
 * STORE rounds a sum to the element.  Only sums of products,
 * "p + (-b) * s" and never "p - b * s" (the same bits, as (-b) * s is
 * -(b * s) exactly): GCC 12 fuses an interleaved "subtract here, add
 * there" of products into vfmsubadd, an FMA, even under -ffp-contract=off,
 * and the levels would then disagree.
 *
 * NaN: the 16-bit types store the quiet NaN of the result's sign, and the
 * sign must not depend on which operand of a product or a sum the CPU
 * propagates (x86 the first, as the compiler happened to order them): a
 * product or sum with a NaN operand is that operand, the first one of two
 * (x before the cache value, x * c before w * s).  float32 and float64
 * keep whatever NaN the CPU makes.
 *
 * One row is an inline function whose pointers are restrict parameters:
 * GCC ignores restrict on pointers declared inside the row loop and checks
 * for overlap at run time on every row, which cost more than the row's
 * work for heads of 64 features (0.23 ms instead of 0.13 for 16384 rows).
 * In place and from a source are separate rows for the same reason.
 */
#ifndef SINPE_LOOPS
#error "rotate_loops.h is included by loops.h only"
#endif

#define ROTATE_PAIR(ya, yb, a, b, ca, cb, sa, sb, PRODUCT, SUM, STORE)                        \
    ya = STORE(SUM(PRODUCT(a, ca), PRODUCT(-(b), sa)));                                       \
    yb = STORE(SUM(PRODUCT(b, cb), PRODUCT(a, sb)))
#define ROTATE_ROWS_SPLIT(name, T, C, W, LOAD, PRODUCT, SUM, STORE)                           \
    static inline void name##_row(ptrdiff_t n, T *restrict ya, T *restrict yb,                \
                                  const C *restrict ca, const C *restrict cb,                 \
                                  const C *restrict sa, const C *restrict sb)                 \
    {                                                                                         \
        for (ptrdiff_t j = 0; j < n; ++j) {                                                   \
            const W a = LOAD(ya[j]), b = LOAD(yb[j]);                                         \
            ROTATE_PAIR(ya[j], yb[j], a, b, ca[j], cb[j], sa[j], sb[j], PRODUCT, SUM, STORE); \
        }                                                                                     \
    }                                                                                         \
    static inline void name##_row_from(ptrdiff_t n, T *restrict ya, T *restrict yb,           \
                                       const T *restrict xa, const T *restrict xb,            \
                                       const C *restrict ca, const C *restrict cb,            \
                                       const C *restrict sa, const C *restrict sb)            \
    {                                                                                         \
        for (ptrdiff_t j = 0; j < n; ++j) {                                                   \
            const W a = LOAD(xa[j]), b = LOAD(xb[j]);                                         \
            ROTATE_PAIR(ya[j], yb[j], a, b, ca[j], cb[j], sa[j], sb[j], PRODUCT, SUM, STORE); \
        }                                                                                     \
    }
#define ROTATE_ROWS_INTERLEAVED(name, T, C, W, LOAD, PRODUCT, SUM, STORE)                     \
    static inline void name##_row(ptrdiff_t n, T *restrict y, const C *restrict c,            \
                                  const C *restrict s)                                        \
    {                                                                                         \
        for (ptrdiff_t j = 0; j < n; ++j) {                                                   \
            const W a = LOAD(y[2 * j]), b = LOAD(y[2 * j + 1]);                               \
            ROTATE_PAIR(y[2 * j], y[2 * j + 1], a, b, c[2 * j], c[2 * j + 1], s[2 * j],       \
                        s[2 * j + 1], PRODUCT, SUM, STORE);                                   \
        }                                                                                     \
    }                                                                                         \
    static inline void name##_row_from(ptrdiff_t n, T *restrict y, const T *restrict x,       \
                                       const C *restrict c, const C *restrict s)              \
    {                                                                                         \
        for (ptrdiff_t j = 0; j < n; ++j) {                                                   \
            const W a = LOAD(x[2 * j]), b = LOAD(x[2 * j + 1]);                               \
            ROTATE_PAIR(y[2 * j], y[2 * j + 1], a, b, c[2 * j], c[2 * j + 1], s[2 * j],       \
                        s[2 * j + 1], PRODUCT, SUM, STORE);                                   \
        }                                                                                     \
    }

/* A call's rows and copies (kernels.h).  Copies one after the other, row
 * by row; with vector rows, GROUP copies at a time side by side (the heads
 * of one position: GROUP_CALL), which read each cache vector once for all
 * of them, from registers, and load all their elements before storing any;
 * fewer than GROUP left, two at a time (8 heads in groups of 3: 3, 3, 2).
 * Loads first matters: the heads of (B, H, L, D) lie a multiple of 4 KB
 * apart, and a load after another head's store to the same low 12 address
 * bits waits for that store (4K aliasing; on the AMD EPYC, Zen 5, heads
 * taken in turn row by row were slower than one head at a time).  The
 * walk is chosen once per call (rows of a known length for heads of 64 and
 * 128 features, in place, by a tile's rows), so that the row loop is
 * short. */
#define ROTATE_KERNEL(name, T, C, ROW_CALL, GROUP_CALL, GROUP)                                \
    static SINPE_INLINE void name##_walk(const sinpe_rotate_args *r, ptrdiff_t n, int same,   \
                                   int in_place)                                              \
    {                                                                                         \
        /* in locals: the vector stores may alias anything, *r included */                    \
        char *const dst = r->dst;                                                             \
        const char *const src = in_place ? NULL : r->src, *const cos = r->cos;                \
        const char *const sin = r->sin;                                                       \
        const ptrdiff_t rows = r->rows, copies = r->copies;                                   \
        const ptrdiff_t dst_stride = r->dst_stride, dst_copy = r->dst_copy;                   \
        const ptrdiff_t src_stride = r->src_stride, src_copy = r->src_copy;                   \
        const ptrdiff_t cos_stride = r->cos_stride, sin_stride = r->sin_stride;               \
        const ptrdiff_t x_second = r->x_second, c_second = same ? 0 : r->c_second;            \
        for (ptrdiff_t h = 0; h < copies;) {                                                  \
            const ptrdiff_t left = copies - h;                                                \
            const int group =                                                                 \
                GROUP < 2 || rows < 2 || left < 2 ? 1 : left >= GROUP ? GROUP : 2;            \
            char *yrow = dst + h * dst_copy;                                                  \
            const char *xrow = in_place ? NULL : src + h * src_copy;                          \
            const char *crow = cos, *srow = sin;                                              \
            for (ptrdiff_t i = 0; i < rows; ++i) {                                            \
                T *y = (T *)(void *)yrow;                                                     \
                const T *x = in_place ? NULL : (const T *)(const void *)xrow;                 \
                const C *c = (const C *)(const void *)crow;                                   \
                const C *s = (const C *)(const void *)srow;                                   \
                if (group == GROUP && GROUP > 1) {                                            \
                    GROUP_CALL(name, T, y, x, c, s, GROUP);                                   \
                } else if (group == 2) {                                                      \
                    GROUP_CALL(name, T, y, x, c, s, 2);                                       \
                } else {                                                                      \
                    ROW_CALL(name, T, y, x, c, s);                                            \
                }                                                                             \
                yrow += dst_stride;                                                           \
                xrow = in_place ? NULL : xrow + src_stride;                                   \
                crow += cos_stride;                                                           \
                srow += sin_stride;                                                           \
            }                                                                                 \
            h += group;                                                                       \
        }                                                                                     \
        (void)x_second, (void)c_second, (void)src_copy, (void)dst_copy;                       \
    }                                                                                         \
    static void name(const sinpe_rotate_args *r)                                              \
    {                                                                                         \
        const int same = r->c_second == 0, in_place = r->src == NULL;                         \
        if (same && in_place && r->n == 32) {                                                 \
            name##_walk(r, 32, 1, 1);                                                         \
        } else if (same && in_place && r->n == 64) {                                          \
            name##_walk(r, 64, 1, 1);                                                         \
        } else if (in_place) {                                                                \
            name##_walk(r, r->n, same, 1);                                                    \
        } else {                                                                              \
            name##_walk(r, r->n, same, 0);                                                    \
        }                                                                                     \
    }
#define NO_GROUP_CALL(name, T, y, x, c, s, group)
#define SPLIT_ROW_CALL(name, T, y, x, c, s)                                                   \
    if (x == NULL) {                                                                          \
        name##_row(n, y, y + x_second, c, c + c_second, s, s + c_second);                     \
    } else {                                                                                  \
        name##_row_from(n, y, y + x_second, x, x + x_second, c, c + c_second, s,              \
                        s + c_second);                                                        \
    }
#define INTERLEAVED_ROW_CALL(name, T, y, x, c, s)                                             \
    if (x == NULL) {                                                                          \
        name##_row(n, y, c, s);                                                               \
    } else {                                                                                  \
        name##_row_from(n, y, x, c, s);                                                       \
    }
#define DEFINE_ROTATE(suffix, T, C, W, LOAD, PRODUCT, SUM, STORE)                             \
    ROTATE_ROWS_SPLIT(rotate_split_##suffix, T, C, W, LOAD, PRODUCT, SUM, STORE)              \
    ROTATE_KERNEL(rotate_split_##suffix, T, C, SPLIT_ROW_CALL, NO_GROUP_CALL, 1)              \
    ROTATE_ROWS_INTERLEAVED(rotate_interleaved_##suffix, T, C, W, LOAD, PRODUCT, SUM, STORE)  \
    ROTATE_KERNEL(rotate_interleaved_##suffix, T, C, INTERLEAVED_ROW_CALL, NO_GROUP_CALL, 1)

/* Each operation in the element arithmetic: float32 and float64 in their
 * own type; float16 and bfloat16 in float32 with each product and the sum
 * rounded to the type (the product of two 16-bit values is exact in
 * float32, so each is one rounding, as NumPy and torch compute it). */
#define EXACT_PRODUCT(x, c) ((x) * (c))
#define PLAIN_SUM(p, q) ((p) + (q))
/* The first NaN operand (the NaN rule above), selected with a mask of
 * bits: a conditional on floats, or the product computed in one arm of
 * one, left GCC's loops unvectorised (under trapping math it neither
 * converts a float select to a vector one nor computes an arm
 * speculatively), and these are aarch64's only loops. */
static SINPE_INLINE float nan_first_f(float operand, float result)
{
    const uint32_t nan = (uint32_t)0 - (uint32_t)(operand != operand);
    return sinpe_bits_float((sinpe_float_bits(operand) & nan) | (sinpe_float_bits(result) & ~nan));
}
static SINPE_INLINE double nan_first_d(double operand, double result)
{
    const uint64_t nan = (uint64_t)0 - (uint64_t)(operand != operand);
    uint64_t a, r;
    memcpy(&a, &operand, 8);
    memcpy(&r, &result, 8);
    r = (a & nan) | (r & ~nan);
    memcpy(&result, &r, 8);
    return result;
}
#define NAN_FIRST_PRODUCT(x, c) nan_first_f(x, (x) * (c))
#define NAN_FIRST_SUM(p, q) nan_first_f(p, (p) + (q))
#define NAN_FIRST_PRODUCT_D(x, c) nan_first_d(x, (x) * (c))
#define NAN_FIRST_SUM_D(p, q) nan_first_d(p, (p) + (q))
#define F16_PRODUCT(x, c)                                                                     \
    sinpe_half_to_float(sinpe_float_to_half(NAN_FIRST_PRODUCT(x, sinpe_half_to_float(c))))
#define BF16_PRODUCT(x, c)                                                                    \
    sinpe_bfloat16_to_float(sinpe_float_to_bfloat16(NAN_FIRST_PRODUCT(x, sinpe_bfloat16_to_float(c))))
#if defined(SINPE_VEC16)
#include "kernels/rotate_vec.h"
/* the scalar rows, the vector rows on them, the kernel */
#define DEFINE_ROTATE_VEC(suffix, K, T, C, W, LOAD, PRODUCT, SUM, STORE)                      \
    ROTATE_ROWS_SPLIT(rotate_split_##suffix, T, C, W, LOAD, PRODUCT, SUM, STORE)              \
    ROTATE_VEC_SPLIT(rotate_split_##suffix, K, T, C)                                          \
    ROTATE_VEC_SPLIT_GROUP(rotate_split_##suffix, K, T, C)                                    \
    ROTATE_KERNEL(rotate_split_##suffix, T, C, VEC_SPLIT_ROW_CALL, VEC_SPLIT_GROUP_CALL,      \
                  K##_GROUP)                                                                  \
    ROTATE_ROWS_INTERLEAVED(rotate_interleaved_##suffix, T, C, W, LOAD, PRODUCT, SUM, STORE)  \
    ROTATE_VEC_INTERLEAVED(rotate_interleaved_##suffix, K, T, C)                              \
    ROTATE_VEC_INTERLEAVED_GROUP(rotate_interleaved_##suffix, K, T, C)                        \
    ROTATE_KERNEL(rotate_interleaved_##suffix, T, C, VEC_INTERLEAVED_ROW_CALL,                \
                  VEC_INTERLEAVED_GROUP_CALL, K##_GROUP)
DEFINE_ROTATE_VEC(f32, F32, float, float, float, AS_IS, EXACT_PRODUCT, PLAIN_SUM, AS_IS)
DEFINE_ROTATE_VEC(f16, F16, uint16_t, uint16_t, float, sinpe_half_to_float, F16_PRODUCT, NAN_FIRST_SUM,
                  sinpe_float_to_half)
DEFINE_ROTATE_VEC(bf16, BF16, uint16_t, uint16_t, float, sinpe_bfloat16_to_float, BF16_PRODUCT,
                  NAN_FIRST_SUM, sinpe_float_to_bfloat16)
#else
DEFINE_ROTATE(f32, float, float, float, AS_IS, EXACT_PRODUCT, PLAIN_SUM, AS_IS)
DEFINE_ROTATE(f16, uint16_t, uint16_t, float, sinpe_half_to_float, F16_PRODUCT, NAN_FIRST_SUM,
              sinpe_float_to_half)
DEFINE_ROTATE(bf16, uint16_t, uint16_t, float, sinpe_bfloat16_to_float, BF16_PRODUCT,
              NAN_FIRST_SUM, sinpe_float_to_bfloat16)
#endif
DEFINE_ROTATE(f64, double, double, double, AS_IS, EXACT_PRODUCT, PLAIN_SUM, AS_IS)

/* exact: the products and the sum in double from x's values and double
 * caches, rounded once to the element (16-bit types by round-to-odd,
 * float16.h).  float64 is the same loop as rotate_f64. */
#define TO_DOUBLE(v) ((double)(v))
#define HALF_TO_DOUBLE(v) ((double)sinpe_half_to_float(v))
#define BFLOAT16_TO_DOUBLE(v) ((double)sinpe_bfloat16_to_float(v))
#if defined(SINPE_VEC16)
DEFINE_ROTATE_VEC(exact_f32, XF32, float, double, double, TO_DOUBLE, EXACT_PRODUCT, PLAIN_SUM,
                  TO_FLOAT)
DEFINE_ROTATE_VEC(exact_f16, XF16, uint16_t, double, double, HALF_TO_DOUBLE, NAN_FIRST_PRODUCT_D,
                  NAN_FIRST_SUM_D, sinpe_double_to_half)
DEFINE_ROTATE_VEC(exact_bf16, XBF16, uint16_t, double, double, BFLOAT16_TO_DOUBLE,
                  NAN_FIRST_PRODUCT_D, NAN_FIRST_SUM_D, sinpe_double_to_bfloat16)
#else
DEFINE_ROTATE(exact_f32, float, double, double, TO_DOUBLE, EXACT_PRODUCT, PLAIN_SUM, TO_FLOAT)
DEFINE_ROTATE(exact_f16, uint16_t, double, double, HALF_TO_DOUBLE, NAN_FIRST_PRODUCT_D,
              NAN_FIRST_SUM_D, sinpe_double_to_half)
DEFINE_ROTATE(exact_bf16, uint16_t, double, double, BFLOAT16_TO_DOUBLE, NAN_FIRST_PRODUCT_D,
              NAN_FIRST_SUM_D, sinpe_double_to_bfloat16)
#endif
