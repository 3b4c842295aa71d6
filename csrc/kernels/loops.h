/*
 * The hot loops (kernels.h), written once as plain C that GCC, Clang and
 * MSVC vectorise, and compiled once per SIMD level: each
 * kernels/levels/<name>.c includes kernels.h, switches the compiler to its
 * level's instructions, defines SINPE_LOOPS (sinpe_loops_<name>, the
 * pointer to its table) and includes this file.  Nothing
 * here may depend on the level but speed: the same IEEE operations in the
 * same order (no FMA contraction: -ffp-contract=off, /fp:precise), so every
 * level gives the same bits.
 *
 * Pair loops: each frequency's sine and cosine from one load of its steps
 * and anchors (table.h's two expressions), stored straight where the layout
 * wants them; the interleaved stores become in-register shuffles.  RoPE's
 * two caches share one computation.  The row loop is inside so that a
 * block is one call through the table.
 */
#ifndef SINPE_LOOPS
#error "loops.h is included by kernels/levels/<name>.c only, after defining SINPE_LOOPS"
#endif

#include "kernels/vec.h"

#define PAIR_LOOP(name, T, CONVERT, VALUE, args, body)                                        \
    static void name(int rows, ptrdiff_t n, const double *restrict s0,                        \
                     const double *restrict c0, const double *cs, const double *ss,           \
                     ptrdiff_t step_stride, args)                                             \
    {                                                                                         \
        for (int i = 0; i < rows; ++i) {                                                      \
            const double *restrict c = cs + i * step_stride;                                  \
            const double *restrict s = ss + i * step_stride;                                  \
            for (ptrdiff_t j = 0; j < n; ++j) {                                               \
                const T sine = CONVERT(VALUE(sinpe_sin_value(s0[j], c0[j], c[j], s[j])));     \
                const T cosine = CONVERT(VALUE(sinpe_cos_value(s0[j], c0[j], c[j], s[j])));   \
                body                                                                          \
            }                                                                                 \
        }                                                                                     \
    }

#define ROW(T, base, stride) ((T *)(void *)((base) + i * (stride)))
#define TABLE_ARGS char *row, ptrdiff_t row_stride, ptrdiff_t first, ptrdiff_t second
#define ROPE_ARGS char *cos_row, ptrdiff_t cos_stride, char *sin_row, ptrdiff_t sin_stride, \
                  ptrdiff_t first, ptrdiff_t second, double scale
/* RoPE caches are cos and sin times scale (YaRN's attention factor), in
 * double before the one rounding; scale 1 is exact, the same bits */
#define TIMES_SCALE(v) ((v) * scale)
#define DEFINE_PAIR_LOOPS(T, suffix, CONVERT)                                                 \
    PAIR_LOOP(table_interleaved_##suffix, T, CONVERT, AS_IS, TABLE_ARGS, {                     \
        T *restrict o = ROW(T, row, row_stride) + first;                                      \
        o[2 * j] = sine;                                                                      \
        o[2 * j + 1] = cosine;                                                                \
        (void)second;                                                                         \
    })                                                                                        \
    PAIR_LOOP(table_split_##suffix, T, CONVERT, AS_IS, TABLE_ARGS, {                           \
        T *restrict o = ROW(T, row, row_stride);                                              \
        o[first + j] = sine;                                                                  \
        o[second + j] = cosine;                                                               \
    })                                                                                        \
    PAIR_LOOP(rope_interleaved_##suffix, T, CONVERT, TIMES_SCALE, ROPE_ARGS, {                 \
        T *restrict oc = ROW(T, cos_row, cos_stride) + first;                                 \
        T *restrict os = ROW(T, sin_row, sin_stride) + first;                                 \
        oc[2 * j] = oc[2 * j + 1] = cosine;                                                   \
        os[2 * j] = os[2 * j + 1] = sine;                                                     \
        (void)second;                                                                         \
    })                                                                                        \
    PAIR_LOOP(rope_split_##suffix, T, CONVERT, TIMES_SCALE, ROPE_ARGS, {                       \
        T *restrict oc = ROW(T, cos_row, cos_stride);                                         \
        T *restrict os = ROW(T, sin_row, sin_stride);                                         \
        oc[first + j] = oc[second + j] = cosine;                                              \
        os[first + j] = os[second + j] = sine;                                                \
    })

/* Two blocks per load of the steps: rows i of block A (anchors s0, c0, rows
 * from `row`) and of block B (anchors s0 + n, c0 + n, rows from row +
 * SINPE_BLOCK_ROWS * row_stride) share row i's steps, which stream from L2
 * for a wide table; the values are the same expressions.  On the AMD EPYC
 * this made encode(5000, 512) about 10% faster on one core. */
#define PAIR_LOOP2(name, T, CONVERT, body)                                                    \
    static void name(int rows, ptrdiff_t n, const double *restrict s0,                        \
                     const double *restrict c0, const double *cs, const double *ss,           \
                     ptrdiff_t step_stride, TABLE_ARGS)                                       \
    {                                                                                         \
        const double *restrict s1 = s0 + n, *restrict c1 = c0 + n;                            \
        char *row2 = row + SINPE_BLOCK_ROWS * row_stride;                                     \
        for (int i = 0; i < rows; ++i) {                                                      \
            const double *restrict c = cs + i * step_stride;                                  \
            const double *restrict s = ss + i * step_stride;                                  \
            T *restrict o = ROW(T, row, row_stride);                                          \
            T *restrict o2 = ROW(T, row2, row_stride);                                        \
            for (ptrdiff_t j = 0; j < n; ++j) {                                               \
                const double cj = c[j], sj = s[j];                                            \
                const T sine = CONVERT(sinpe_sin_value(s0[j], c0[j], cj, sj));                \
                const T cosine = CONVERT(sinpe_cos_value(s0[j], c0[j], cj, sj));              \
                const T sine2 = CONVERT(sinpe_sin_value(s1[j], c1[j], cj, sj));               \
                const T cosine2 = CONVERT(sinpe_cos_value(s1[j], c1[j], cj, sj));             \
                body                                                                          \
            }                                                                                 \
        }                                                                                     \
    }
#define DEFINE_PAIR_LOOPS2(T, suffix, CONVERT)                                                \
    PAIR_LOOP2(table2_interleaved_##suffix, T, CONVERT, {                                     \
        o[first + 2 * j] = sine;                                                              \
        o[first + 2 * j + 1] = cosine;                                                        \
        o2[first + 2 * j] = sine2;                                                            \
        o2[first + 2 * j + 1] = cosine2;                                                      \
        (void)second;                                                                         \
    })                                                                                        \
    PAIR_LOOP2(table2_split_##suffix, T, CONVERT, {                                           \
        o[first + j] = sine;                                                                  \
        o[second + j] = cosine;                                                               \
        o2[first + j] = sine2;                                                                \
        o2[second + j] = cosine2;                                                             \
    })

#define TO_FLOAT(v) ((float)(v))
#define AS_IS(v) (v)
DEFINE_PAIR_LOOPS(float, f32, TO_FLOAT)
DEFINE_PAIR_LOOPS(double, f64, AS_IS)
DEFINE_PAIR_LOOPS(uint16_t, f16, sinpe_double_to_half)
DEFINE_PAIR_LOOPS(uint16_t, bf16, sinpe_double_to_bfloat16)
DEFINE_PAIR_LOOPS2(float, f32, TO_FLOAT)
DEFINE_PAIR_LOOPS2(double, f64, AS_IS)
DEFINE_PAIR_LOOPS2(uint16_t, f16, sinpe_double_to_half)
DEFINE_PAIR_LOOPS2(uint16_t, bf16, sinpe_double_to_bfloat16)

/* The adds: the loop NumPy's add runs (one multiply unless scale is 1, one
 * add).  float32/float64 in their own type; the 16-bit types as NumPy and
 * torch add them, each operation in float32 and its result rounded to the
 * type (WIDEN/NARROW; sinpe_add_elem is the definition they match).  One
 * element, as every add loop's tails and reported vectors compute it: */
#define ADD_ELEM(x, t, scale, WIDEN, NARROW, scaled)                                          \
    ((scaled) ? NARROW(WIDEN(NARROW(WIDEN(x) * (scale))) + WIDEN(t))                         \
              : NARROW(WIDEN(x) + WIDEN(t)))
/* An add over its rows, from name##_row(x, t, count, scale, scaled), each
 * call with `scaled` a constant; rows contiguous in x and in t are one row
 * (they lie in one array each, so the product of counts is an element
 * count that fits).  Every add loop, vectors by hand too. */
#define DEFINE_ADD_KERNEL(name, T, S)                                                        \
    static void name(char *dst, ptrdiff_t dst_stride, const char *src, ptrdiff_t src_stride,  \
                     ptrdiff_t rows, ptrdiff_t count, double scale_value)                    \
    {                                                                                        \
        const S scale = (S)scale_value;                                                      \
        if (rows > 1 && dst_stride == src_stride &&                                          \
            dst_stride == count * (ptrdiff_t)sizeof(T)) {                                    \
            count *= rows;                                                                   \
            rows = 1;                                                                        \
        }                                                                                    \
        for (ptrdiff_t i = 0; i < rows; ++i) {                                               \
            T *x = (T *)(void *)(dst + i * dst_stride);                                      \
            const T *t = (const T *)(const void *)(src + i * src_stride);                    \
            if (scale == (S)1) {                                                             \
                name##_row(x, t, count, scale, 0);                                           \
            } else {                                                                         \
                name##_row(x, t, count, scale, 1);                                           \
            }                                                                                \
        }                                                                                    \
    }
#define DEFINE_ADD(name, T, S, WIDEN, NARROW)                                                \
    static SINPE_INLINE void name##_row(T *restrict x, const T *restrict t, ptrdiff_t count, \
                                        S scale, int scaled)                                 \
    {                                                                                        \
        for (ptrdiff_t l = 0; l < count; ++l) {                                              \
            x[l] = ADD_ELEM(x[l], t[l], scale, WIDEN, NARROW, scaled);                       \
        }                                                                                    \
    }                                                                                        \
    DEFINE_ADD_KERNEL(name, T, S)

#if defined(SINPE_VEC16)
#include "kernels/loops_add.h" /* float32 and float64 on vectors by hand, these bits */
#include "kernels/loops16.h"   /* the 16-bit types on vectors, with these bits */
#else
DEFINE_ADD(add_f32, float, float, AS_IS, AS_IS)
DEFINE_ADD(add_f64, double, double, AS_IS, AS_IS)
DEFINE_ADD(add_f16, uint16_t, float, sinpe_half_to_float, sinpe_float_to_half)
DEFINE_ADD(add_bf16, uint16_t, float, sinpe_bfloat16_to_float, sinpe_float_to_bfloat16)
#endif

#include "kernels/rotate_loops.h"

/* The anchors and step rows: sinpe_sincos is branch free, so this
 * vectorises. */
static void sincos_loop(const double *freq, double position, ptrdiff_t count, double *sin_out,
                        double *cos_out)
{
    for (ptrdiff_t k = 0; k < count; ++k) {
        sinpe_sincos(position * freq[k], &sin_out[k], &cos_out[k]);
    }
}

/* The frequencies' fast pass (pow.h).  An int counter and the base by
 * value let the loop vectorise ((double)k0 + (double)i is exactly
 * (double)(k0 + i)). */
static void powers_loop(sinpe_pow_base base, double step, double divisor, ptrdiff_t k0,
                        int count, double *freq)
{
    const double first = (double)k0;
    for (int i = 0; i < count; ++i) {
        freq[i] = sinpe_pow_fast(&base, -(step * (first + (double)i)) / divisor);
    }
}

/* Streaming stores, for tables much larger than the caches: a plain store
 * first reads each line it writes (read for ownership) and the table then
 * evicts everything else; streaming stores write whole lines straight to
 * memory (measured on a 256 MB table: 0.33 ns per element instead of 0.78).
 * Stores of 16 or 32 bytes back to back complete each 64-byte line. */
static void stream_loop(float *dst, const float *src, ptrdiff_t n)
{
#if defined(SINPE_VEC16)
    ptrdiff_t i = 0;
    for (; i < n && (uintptr_t)(dst + i) % (STREAM_LANES * sizeof(float)) != 0; ++i) {
        dst[i] = src[i];
    }
    for (; i + STREAM_LANES <= n; i += STREAM_LANES) {
        stream_store(dst + i, src + i);
    }
    for (; i < n; ++i) {
        dst[i] = src[i];
    }
#else
    memcpy(dst, src, (size_t)n * sizeof *dst);
#endif
}

/* Streaming stores are weakly ordered: this publishes them (once a block). */
static void stream_fence(void)
{
#if defined(SINPE_X86_64)
    _mm_sfence();
#endif
}

/* By dtype code, and by interleaving (split, interleaved): the loops
 * prefix##f16 .. prefix##bf16 (the exact rotations have float64's plain
 * loop). */
#define BY_DTYPE(split, interleaved, f16, f32, f64, bf16)                                     \
    {                                                                                         \
        [SINPE_FLOAT16] = {split##f16, interleaved##f16},                                     \
        [SINPE_FLOAT32] = {split##f32, interleaved##f32},                                     \
        [SINPE_FLOAT64] = {split##f64, interleaved##f64},                                     \
        [SINPE_BFLOAT16] = {split##bf16, interleaved##bf16},                                  \
    }
static const sinpe_kernels level_loops = {
    .table = BY_DTYPE(table_split_, table_interleaved_, f16, f32, f64, bf16),
    .table2 = BY_DTYPE(table2_split_, table2_interleaved_, f16, f32, f64, bf16),
    .rope = BY_DTYPE(rope_split_, rope_interleaved_, f16, f32, f64, bf16),
    .add = {[SINPE_FLOAT16] = add_f16, [SINPE_FLOAT32] = add_f32, [SINPE_FLOAT64] = add_f64,
            [SINPE_BFLOAT16] = add_bf16},
    .rotate = BY_DTYPE(rotate_split_, rotate_interleaved_, f16, f32, f64, bf16),
    .rotate_exact = BY_DTYPE(rotate_split_, rotate_interleaved_, exact_f16, exact_f32, f64,
                             exact_bf16),
    .sincos = sincos_loop,
    .powers = powers_loop,
    .stream = stream_loop,
    .fence = stream_fence,
};
#undef BY_DTYPE

/* The level's loops, for kernels/dispatch.c. */
const sinpe_kernels *const SINPE_LOOPS = &level_loops;
