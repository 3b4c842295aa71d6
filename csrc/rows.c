/*
 * Row writers (see rows.h).  Native-order contiguous rows of every dtype,
 * the case that must run at memory speed, get loops fused with the value
 * expression and the rounding to the dtype (stores) or NumPy's own loop
 * (adds) compiled per SIMD width; the 16-bit conversions are branch free
 * (float16.h) so that they vectorise too.  Everything else (swapped bytes,
 * any stride, unaligned data) goes element by element through memcpy,
 * which is slower but exact and free of alignment UB.
 */
#include "rows.h"
#include "elements.h"
#include "simd.h"

#include <stdint.h>
#include <string.h>

#if SINPE_X86_DISPATCH
#include <immintrin.h>
#include <stdatomic.h>
#endif

/* The fast case: native, aligned, contiguous float32 or float64 rows. */
static int is_plain(const sinpe_row_format *fmt, const char *dst, ptrdiff_t row_stride,
                    size_t itemsize)
{
    return !fmt->swapped && fmt->col_stride == (ptrdiff_t)itemsize &&
           (uintptr_t)dst % itemsize == 0 && row_stride % (ptrdiff_t)itemsize == 0;
}

/* ------------------------------------------------------------------ */
/* Fast loops: each frequency's sine and cosine from one load of its steps
 * and anchors, stored straight where the layout wants them.  Plain C that
 * GCC and Clang vectorise per SIMD width (SINPE_CLONES); the stores of the
 * interleaved table become in-register interleaves.  Half the step data of
 * a loop over columns, and RoPE's two caches share one computation.  n
 * frequencies of `rows` rows; steps of row i at c + i * step_stride. */
#define PAIR_LOOP(name, T, CONVERT, args, body)                                               \
    SINPE_CLONES                                                                              \
    static void name(int rows, ptrdiff_t n, const double *restrict s0,                        \
                     const double *restrict c0, const double *cs, const double *ss,           \
                     ptrdiff_t step_stride, args)                                             \
    {                                                                                         \
        for (int i = 0; i < rows; ++i) {                                                      \
            const double *restrict c = cs + i * step_stride;                                  \
            const double *restrict s = ss + i * step_stride;                                  \
            for (ptrdiff_t j = 0; j < n; ++j) {                                               \
                const T sine = CONVERT(sinpe_sin_value(s0[j], c0[j], c[j], s[j]));            \
                const T cosine = CONVERT(sinpe_cos_value(s0[j], c0[j], c[j], s[j]));          \
                body                                                                          \
            }                                                                                 \
        }                                                                                     \
    }

#define ROW(T, base, stride) ((T *)(void *)((base) + i * (stride)))
#define TABLE_ARGS char *row, ptrdiff_t row_stride, ptrdiff_t first, ptrdiff_t second
#define ROPE_ARGS char *cos_row, ptrdiff_t cos_stride, char *sin_row, ptrdiff_t sin_stride, \
                  ptrdiff_t first, ptrdiff_t second
#define DEFINE_PAIR_LOOPS(T, suffix, CONVERT)                                                 \
    PAIR_LOOP(table_interleaved_##suffix, T, CONVERT, TABLE_ARGS, {                                    \
        T *restrict o = ROW(T, row, row_stride) + first;                                      \
        o[2 * j] = sine;                                                                      \
        o[2 * j + 1] = cosine;                                                                \
        (void)second;                                                                         \
    })                                                                                        \
    PAIR_LOOP(table_split_##suffix, T, CONVERT, TABLE_ARGS, {                                          \
        T *restrict o = ROW(T, row, row_stride);                                              \
        o[first + j] = sine;                                                                  \
        o[second + j] = cosine;                                                               \
    })                                                                                        \
    PAIR_LOOP(rope_interleaved_##suffix, T, CONVERT, ROPE_ARGS, {                                      \
        T *restrict oc = ROW(T, cos_row, cos_stride) + first;                                 \
        T *restrict os = ROW(T, sin_row, sin_stride) + first;                                 \
        oc[2 * j] = oc[2 * j + 1] = cosine;                                                   \
        os[2 * j] = os[2 * j + 1] = sine;                                                     \
        (void)second;                                                                         \
    })                                                                                        \
    PAIR_LOOP(rope_split_##suffix, T, CONVERT, ROPE_ARGS, {                                            \
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
    SINPE_CLONES                                                                              \
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

/* The fast loops by dtype (sinpe_dtype order) and by interleaving. */
typedef void (*table_loop)(int, ptrdiff_t, const double *restrict, const double *restrict,
                           const double *, const double *, ptrdiff_t, TABLE_ARGS);
typedef void (*rope_loop)(int, ptrdiff_t, const double *restrict, const double *restrict,
                          const double *, const double *, ptrdiff_t, ROPE_ARGS);
static const table_loop table_loops[4][2] = {
    {table_split_f16, table_interleaved_f16},
    {table_split_f32, table_interleaved_f32},
    {table_split_f64, table_interleaved_f64},
    {table_split_bf16, table_interleaved_bf16},
};
static const table_loop table2_loops[4][2] = {
    {table2_split_f16, table2_interleaved_f16},
    {table2_split_f32, table2_interleaved_f32},
    {table2_split_f64, table2_interleaved_f64},
    {table2_split_bf16, table2_interleaved_bf16},
};
static const rope_loop rope_loops[4][2] = {
    {rope_split_f16, rope_interleaved_f16},
    {rope_split_f32, rope_interleaved_f32},
    {rope_split_f64, rope_interleaved_f64},
    {rope_split_bf16, rope_interleaved_bf16},
};

/* Which clone of the fast loops this CPU runs (the ifunc's choice). */
const char *sinpe_simd_level(void)
{
#if SINPE_X86_DISPATCH
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        return "AVX-512";
    }
    return __builtin_cpu_supports("avx2") ? "AVX2" : "x86-64 baseline";
#else
    return "portable C (no SIMD clones)";
#endif
}

/* ------------------------------------------------------------------ */
/* Streaming stores, for tables much larger than the caches: a plain store
 * first reads each line it writes (read for ownership) and the table then
 * evicts everything else; streaming stores write whole lines straight to
 * memory (measured on a 256 MB table: 0.33 ns per element instead of 0.78).
 * A row is made by the fast loops into a row in L1, then copied out with
 * streaming stores: 32-byte stores back to back complete each 64-byte line,
 * AVX2 suffices for that, and the values are the fast loops' bits. */
#if SINPE_X86_DISPATCH
__attribute__((target("avx2")))
static void stream_copy_avx2(float *dst, const float *src, ptrdiff_t n)
{
    ptrdiff_t i = 0;
    for (; i < n && (uintptr_t)(dst + i) % 32 != 0; ++i) {
        dst[i] = src[i];
    }
    for (; i + 8 <= n; i += 8) {
        _mm256_stream_ps(dst + i, _mm256_loadu_ps(src + i));
    }
    for (; i < n; ++i) {
        dst[i] = src[i];
    }
}

/* Every thread that races here stores the same answer. */
static int has_avx2(void)
{
    static atomic_int known = -1;
    int avx2 = atomic_load_explicit(&known, memory_order_relaxed);
    if (avx2 < 0) {
        avx2 = __builtin_cpu_supports("avx2") != 0;
        atomic_store_explicit(&known, avx2, memory_order_relaxed);
    }
    return avx2;
}
#endif

/* dst[0 .. n) = src[0 .. n): streaming where the CPU can, else plain. */
static void stream_copy(float *dst, const float *src, ptrdiff_t n)
{
#if SINPE_X86_DISPATCH
    if (has_avx2()) {
        stream_copy_avx2(dst, src, n);
        return;
    }
#endif
    memcpy(dst, src, (size_t)n * sizeof *dst);
}

static void stream_fence(void)
{
#if SINPE_X86_DISPATCH
    _mm_sfence(); /* streaming stores are weakly ordered: publish them */
#endif
}

/* ------------------------------------------------------------------ */

/* The value of frequency j of a kind: its first and second column. */
static double first_value(int kind, double sine, double cosine)
{
    return kind == SINPE_PAIRS_COS ? cosine : sine;
}

static double second_value(int kind, double sine, double cosine)
{
    return kind == SINPE_PAIRS_SIN ? sine : cosine;
}

static ptrdiff_t first_col(const sinpe_pairs *p, ptrdiff_t j)
{
    return p->interleaved ? p->first + 2 * j : p->first + j;
}

static ptrdiff_t second_col(const sinpe_pairs *p, ptrdiff_t j)
{
    return p->interleaved ? p->first + 2 * j + 1 : p->second + j;
}

/* Element by element through memcpy (any dtype, byte order, stride,
 * alignment): one row's values, sine[j] and cosine[j], j < count. */
static void store_row_elements(const sinpe_pair_target *t, char *row, const double *sine,
                               const double *cosine)
{
    const sinpe_row_format *fmt = t->fmt;
    const sinpe_pairs *p = &t->pairs;
    for (ptrdiff_t j = 0; j < p->count; ++j) {
        sinpe_store_elem(row + first_col(p, j) * fmt->col_stride, fmt->dtype, fmt->swapped,
                         first_value(p->kind, sine[j], cosine[j]));
        if (j < p->seconds) {
            sinpe_store_elem(row + second_col(p, j) * fmt->col_stride, fmt->dtype, fmt->swapped,
                             second_value(p->kind, sine[j], cosine[j]));
        }
    }
}

/* The fast loops for `rows` rows from `row` (stride row_stride) of one
 * target, or of RoPE's two (row2, the sin cache), with the first and second
 * columns given: the first `seconds` frequencies, which fill both. */
static void fast_rows(const sinpe_pair_target *t, int ntargets, char *row, ptrdiff_t row_stride,
                      char *row2, ptrdiff_t row_stride2, ptrdiff_t first, ptrdiff_t second,
                      int rows, const double *s0, const double *c0, const double *cs,
                      const double *ss, ptrdiff_t step_stride)
{
    const sinpe_pairs *p = &t[0].pairs;
    const sinpe_dtype dtype = t[0].fmt->dtype;
    if (ntargets == 2) {
        rope_loops[dtype][p->interleaved](rows, p->seconds, s0, c0, cs, ss, step_stride, row,
                                          row_stride, row2, row_stride2, first, second);
    } else {
        table_loops[dtype][p->interleaved](rows, p->seconds, s0, c0, cs, ss, step_stride, row,
                                           row_stride, first, second);
    }
}

/* Whether the fast loops can write the targets: native contiguous
 * elements, both targets of one dtype; RoPE's two caches (the rope loops),
 * or one table target. */
static int fast_targets(const sinpe_pair_target *t, int ntargets)
{
    const sinpe_dtype dtype = t[0].fmt->dtype;
    const size_t itemsize = sinpe_itemsize(dtype);
    for (int k = 0; k < ntargets; ++k) {
        if (t[k].fmt->dtype != dtype ||
            !is_plain(t[k].fmt, t[k].row, t[k].row_stride, itemsize)) {
            return 0;
        }
    }
    return ntargets == 2 ? t[0].pairs.kind == SINPE_PAIRS_COS && t[1].pairs.kind == SINPE_PAIRS_SIN
                         : t[0].pairs.kind == SINPE_PAIRS_TABLE;
}

/* A table of odd width ends with a lone sine (RoPE widths are even):
 * frequencies seconds .. count - 1 of one row fill their first column only,
 * counted from `first` in `row` (plain elements of the dtype). */
static void lone_sines(const sinpe_pairs *p, sinpe_dtype dtype, char *row, ptrdiff_t first,
                       const double *s0, const double *c0, const double *c, const double *s)
{
    const ptrdiff_t itemsize = (ptrdiff_t)sinpe_itemsize(dtype);
    for (ptrdiff_t j = p->seconds; j < p->count; ++j) {
        const ptrdiff_t col = first + (p->interleaved ? 2 * j : j);
        sinpe_store_elem(row + col * itemsize, dtype, 0, sinpe_sin_value(s0[j], c0[j], c[j], s[j]));
    }
}

/* A streaming row: made in tmp (the first run from tmp[0], a split layout's
 * second run after it), then streamed out run by run. */
static void stream_row(const sinpe_pair_target *t, int ntargets, float *tmp, int r,
                       const double *s0, const double *c0, const double *c, const double *s)
{
    const sinpe_pairs *p = &t[0].pairs;
    const ptrdiff_t runs = p->count + p->seconds; /* floats per target in tmp */
    fast_rows(t, ntargets, (char *)tmp, 0, (char *)(tmp + runs), 0, 0, p->count, 1, s0, c0, c, s,
              0);
    lone_sines(p, SINPE_FLOAT32, (char *)tmp, 0, s0, c0, c, s);
    for (int k = 0; k < ntargets; ++k) {
        float *out = (float *)(void *)(t[k].row + r * t[k].row_stride);
        const float *made = tmp + k * runs;
        if (p->interleaved) {
            stream_copy(out + p->first, made, runs);
        } else {
            stream_copy(out + p->first, made, p->count);
            stream_copy(out + p->second, made + p->count, p->seconds);
        }
    }
}

void sinpe_store_pairs(const sinpe_pair_target *targets, int ntargets, const sinpe_steps *steps,
                       int r0, int r1, int blocks, const double *s0, const double *c0,
                       double *tmp)
{
    const sinpe_pairs *p = &targets[0].pairs;
    const ptrdiff_t stride = steps->stride;
    const double *cs = steps->c + r0 * stride, *ss = steps->s + r0 * stride;
    if (blocks == 2) {
        if (ntargets == 1 && fast_targets(targets, 1) && !targets[0].fmt->streaming &&
            p->seconds == p->count) {
            table2_loops[targets[0].fmt->dtype][p->interleaved](
                r1 - r0, p->count, s0, c0, cs, ss, stride, targets[0].row,
                targets[0].row_stride, p->first, p->second);
            return;
        }
        sinpe_pair_target next[2];
        for (int t = 0; t < ntargets; ++t) {
            next[t] = targets[t];
            next[t].row += SINPE_BLOCK_ROWS * targets[t].row_stride;
        }
        sinpe_store_pairs(targets, ntargets, steps, r0, r1, 1, s0, c0, tmp);
        sinpe_store_pairs(next, ntargets, steps, r0, r1, 1, s0 + p->count, c0 + p->count, tmp);
        return;
    }
    if (!fast_targets(targets, ntargets)) {
        double *sine = tmp, *cosine = tmp + p->count;
        for (int r = 0; r < r1 - r0; ++r) {
            for (ptrdiff_t j = 0; j < p->count; ++j) {
                const double c = cs[r * stride + j], s = ss[r * stride + j];
                sine[j] = sinpe_sin_value(s0[j], c0[j], c, s);
                cosine[j] = sinpe_cos_value(s0[j], c0[j], c, s);
            }
            for (int t = 0; t < ntargets; ++t) {
                store_row_elements(&targets[t], targets[t].row + r * targets[t].row_stride, sine,
                                   cosine);
            }
        }
        return;
    }
    const sinpe_pair_target *t1 = &targets[ntargets - 1];
    if (targets[0].fmt->streaming && targets[0].fmt->dtype == SINPE_FLOAT32) {
        for (int r = 0; r < r1 - r0; ++r) {
            stream_row(targets, ntargets, (float *)(void *)tmp, r, s0, c0, cs + r * stride,
                       ss + r * stride);
        }
        stream_fence();
        return;
    }
    fast_rows(targets, ntargets, targets[0].row, targets[0].row_stride, t1->row, t1->row_stride,
              p->first, p->second, r1 - r0, s0, c0, cs, ss, stride);
    for (int r = 0; p->seconds < p->count && r < r1 - r0; ++r) {
        lone_sines(p, targets[0].fmt->dtype, targets[0].row + r * targets[0].row_stride, p->first,
                   s0, c0, cs + r * stride, ss + r * stride);
    }
}

void sinpe_store_pair_values(const sinpe_pair_target *targets, int ntargets, const double *sin_v,
                             const double *cos_v)
{
    for (int t = 0; t < ntargets; ++t) {
        store_row_elements(&targets[t], targets[t].row, sin_v, cos_v);
    }
}

void sinpe_store_values(const sinpe_row_format *fmt, char *dst, const double *v, ptrdiff_t step,
                        ptrdiff_t count)
{
    for (ptrdiff_t i = 0; i < count; ++i) {
        sinpe_store_elem(dst + i * fmt->col_stride, fmt->dtype, fmt->swapped, v[i * step]);
    }
}

/* The fast adds: native contiguous elements, the loop NumPy's add runs (one
 * multiply unless scale is 1, one add).  float32/float64 in their own type;
 * the 16-bit types as NumPy and torch add them, each operation in float32
 * and its result rounded to the type (WIDEN/NARROW; sinpe_add_elem).  The
 * row loop is inside so that short rows (d = 512 is 2 KB) are not each a
 * call through the clone dispatcher. */
#define DEFINE_FAST_ADD(name, T, S, WIDEN, NARROW)                                           \
    SINPE_CLONES                                                                             \
    static void name(char *dst, ptrdiff_t dst_stride, const char *src, ptrdiff_t src_stride,  \
                     ptrdiff_t rows, ptrdiff_t count, S scale)                               \
    {                                                                                        \
        for (ptrdiff_t i = 0; i < rows; ++i) {                                               \
            T *restrict x = (T *)(void *)(dst + i * dst_stride);                             \
            const T *restrict t = (const T *)(const void *)(src + i * src_stride);           \
            if (scale == (S)1) {                                                             \
                for (ptrdiff_t l = 0; l < count; ++l) {                                      \
                    x[l] = NARROW(WIDEN(x[l]) + WIDEN(t[l]));                                \
                }                                                                            \
            } else {                                                                         \
                for (ptrdiff_t l = 0; l < count; ++l) {                                      \
                    x[l] = NARROW(WIDEN(NARROW(WIDEN(x[l]) * scale)) + WIDEN(t[l]));         \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

DEFINE_FAST_ADD(add_f32, float, float, AS_IS, AS_IS)
DEFINE_FAST_ADD(add_f64, double, double, AS_IS, AS_IS)
DEFINE_FAST_ADD(add_f16, uint16_t, float, sinpe_half_to_float, sinpe_float_to_half)
DEFINE_FAST_ADD(add_bf16, uint16_t, float, sinpe_bfloat16_to_float, sinpe_float_to_bfloat16)

void sinpe_add_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t dst_stride, const char *src,
                    ptrdiff_t src_stride, ptrdiff_t rows, ptrdiff_t count, double scale)
{
    const size_t itemsize = sinpe_itemsize(fmt->dtype);
    if (src != NULL && (uintptr_t)src % itemsize == 0 && src_stride % (ptrdiff_t)itemsize == 0) {
        if (fmt->dtype == SINPE_FLOAT32 && is_plain(fmt, dst, dst_stride, 4)) {
            add_f32(dst, dst_stride, src, src_stride, rows, count, (float)scale);
            return;
        }
        if (fmt->dtype == SINPE_FLOAT64 && is_plain(fmt, dst, dst_stride, 8)) {
            add_f64(dst, dst_stride, src, src_stride, rows, count, scale);
            return;
        }
        if (itemsize == 2 && is_plain(fmt, dst, dst_stride, 2)) {
            (fmt->dtype == SINPE_FLOAT16 ? add_f16 : add_bf16)(dst, dst_stride, src, src_stride,
                                                               rows, count, (float)scale);
            return;
        }
    }
    const sinpe_dtype dtype = fmt->dtype;
    for (ptrdiff_t i = 0; i < rows; ++i) {
        for (ptrdiff_t j = 0; j < count; ++j) {
            char *elem = dst + i * dst_stride + j * fmt->col_stride;
            double t = 0.0;
            if (src != NULL) {
                t = sinpe_load_elem(src + i * src_stride + (ptrdiff_t)itemsize * j, dtype, 0);
            }
            const double x = sinpe_load_elem(elem, dtype, fmt->swapped);
            sinpe_store_elem(elem, dtype, fmt->swapped,
                             sinpe_add_elem(dtype, x, src != NULL ? &t : NULL, scale));
        }
    }
}
