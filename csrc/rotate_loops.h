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
    static inline void name##_row_from(ptrdiff_t n, T *restrict ya, T *restrict yb,          \
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

/* A call's rows and copies (kernels.h): the copies (heads) of one cache
 * row are rotated one after the other, in groups of ROTATE_GROUP copies
 * walked row by row, so that the cache row is read from L1 for each copy
 * after the first and a group's rows stream side by side.  Heads of 64
 * and 128 features get rows of a known length (unrolled). */
#ifndef ROTATE_GROUP
#define ROTATE_GROUP 4
#endif
#define ROTATE_KERNEL(name, T, C, ROW_CALL)                                                   \
    static void name(const sinpe_rotate_args *r)                                              \
    {                                                                                         \
        const ptrdiff_t n = r->n, x_second = r->x_second, c_second = r->c_second;             \
        for (ptrdiff_t h0 = 0; h0 < r->copies; h0 += ROTATE_GROUP) {                          \
            const ptrdiff_t h1 = h0 + ROTATE_GROUP < r->copies ? h0 + ROTATE_GROUP : r->copies; \
            for (ptrdiff_t i = 0; i < r->rows; ++i) {                                         \
                const C *c = (const C *)(const void *)(r->cos + i * r->cos_stride);           \
                const C *s = (const C *)(const void *)(r->sin + i * r->sin_stride);           \
                for (ptrdiff_t h = h0; h < h1; ++h) {                                         \
                    T *y = (T *)(void *)(r->dst + i * r->dst_stride + h * r->dst_copy);       \
                    const T *x = r->src == NULL ? NULL                                        \
                                                : (const T *)(const void *)(r->src +          \
                                                  i * r->src_stride + h * r->src_copy);       \
                    ROW_CALL(name, y, x, c, s);                                               \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        (void)x_second, (void)c_second;                                                       \
    }
#define SPLIT_ROW_CALL(name, y, x, c, s)                                                      \
    if (x == NULL && n == 32) {                                                               \
        name##_row(32, y, y + x_second, c, c + c_second, s, s + c_second);                    \
    } else if (x == NULL && n == 64) {                                                        \
        name##_row(64, y, y + x_second, c, c + c_second, s, s + c_second);                    \
    } else if (x == NULL) {                                                                   \
        name##_row(n, y, y + x_second, c, c + c_second, s, s + c_second);                     \
    } else {                                                                                  \
        name##_row_from(n, y, y + x_second, x, x + x_second, c, c + c_second, s,              \
                        s + c_second);                                                        \
    }
#define INTERLEAVED_ROW_CALL(name, y, x, c, s)                                                \
    if (x == NULL) {                                                                          \
        name##_row(n, y, c, s);                                                               \
    } else {                                                                                  \
        name##_row_from(n, y, x, c, s);                                                       \
    }
#define DEFINE_ROTATE(suffix, T, C, W, LOAD, PRODUCT, SUM, STORE)                             \
    ROTATE_ROWS_SPLIT(rotate_split_##suffix, T, C, W, LOAD, PRODUCT, SUM, STORE)              \
    ROTATE_KERNEL(rotate_split_##suffix, T, C, SPLIT_ROW_CALL)                                \
    ROTATE_ROWS_INTERLEAVED(rotate_interleaved_##suffix, T, C, W, LOAD, PRODUCT, SUM, STORE)  \
    ROTATE_KERNEL(rotate_interleaved_##suffix, T, C, INTERLEAVED_ROW_CALL)

/* Each operation in the element arithmetic: float32 and float64 in their
 * own type; float16 and bfloat16 in float32 with each product and the sum
 * rounded to the type (the product of two 16-bit values is exact in
 * float32, so each is one rounding, as NumPy and torch compute it). */
#define EXACT_PRODUCT(x, c) ((x) * (c))
#define PLAIN_SUM(p, q) ((p) + (q))
/* the first NaN operand (the NaN rule above) */
#define NAN_FIRST_PRODUCT(x, c) ((x) != (x) ? (x) : (x) * (c))
#define NAN_FIRST_SUM(p, q) ((p) != (p) ? (p) : (p) + (q))
#define F16_PRODUCT(x, c)                                                                     \
    sinpe_half_to_float(sinpe_float_to_half(NAN_FIRST_PRODUCT(x, sinpe_half_to_float(c))))
#define BF16_PRODUCT(x, c)                                                                    \
    sinpe_bfloat16_to_float(sinpe_float_to_bfloat16(NAN_FIRST_PRODUCT(x, sinpe_bfloat16_to_float(c))))
DEFINE_ROTATE(f32, float, float, float, AS_IS, EXACT_PRODUCT, PLAIN_SUM, AS_IS)
DEFINE_ROTATE(f64, double, double, double, AS_IS, EXACT_PRODUCT, PLAIN_SUM, AS_IS)
DEFINE_ROTATE(f16, uint16_t, uint16_t, float, sinpe_half_to_float, F16_PRODUCT, NAN_FIRST_SUM,
              sinpe_float_to_half)
DEFINE_ROTATE(bf16, uint16_t, uint16_t, float, sinpe_bfloat16_to_float, BF16_PRODUCT,
              NAN_FIRST_SUM, sinpe_float_to_bfloat16)

/* exact: the products and the sum in double from x's values and double
 * caches, rounded once to the element (16-bit types by round-to-odd,
 * float16.h).  float64 is the same loop as rotate_f64. */
#define TO_DOUBLE(v) ((double)(v))
#define HALF_TO_DOUBLE(v) ((double)sinpe_half_to_float(v))
#define BFLOAT16_TO_DOUBLE(v) ((double)sinpe_bfloat16_to_float(v))
DEFINE_ROTATE(exact_f32, float, double, double, TO_DOUBLE, EXACT_PRODUCT, PLAIN_SUM, TO_FLOAT)
DEFINE_ROTATE(exact_f16, uint16_t, double, double, HALF_TO_DOUBLE, NAN_FIRST_PRODUCT,
              NAN_FIRST_SUM, sinpe_double_to_half)
DEFINE_ROTATE(exact_bf16, uint16_t, double, double, BFLOAT16_TO_DOUBLE, NAN_FIRST_PRODUCT,
              NAN_FIRST_SUM, sinpe_double_to_bfloat16)
