/*
 * The hot loops of one SIMD level, as a table of function pointers.
 * kernels/loops.h defines them once; kernels/levels/<name>.c compiles that
 * one definition for its level of sinpe.h's list, and dispatch.c picks the
 * table the CPU can run, once (no ifunc: musl, macOS and Windows have
 * none).  Every level computes the same IEEE operations in the same order
 * with -ffp-contract=off, so the choice changes speed, never bits.  Not
 * public API.
 *
 * Everything loops.h needs is included here, before a level file switches
 * its compiler to the level's instructions.
 */
#ifndef SINPE_KERNELS_H
#define SINPE_KERNELS_H

#include "core/platform.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/elements.h"
#include "core/float16.h"
#include "core/pow.h"
#include "core/sincos.h"
#include "core/table.h"
#include "sinpe.h"

#if defined(SINPE_X86_64)
#include <immintrin.h>
#endif

/* A table's values for `rows` rows and n frequencies: the sine and cosine
 * of frequency j from the anchors s0[j], c0[j] and row i's steps
 * (c, s + i * step_stride), stored as the element type, interleaved
 * (row + first: sine at 2j, cosine at 2j + 1) or split (sine at first + j,
 * cosine at second + j) in rows row + i * row_stride. */
typedef void (*sinpe_table_loop)(int rows, ptrdiff_t n, const double *s0, const double *c0,
                                 const double *cs, const double *ss, ptrdiff_t step_stride,
                                 char *row, ptrdiff_t row_stride, ptrdiff_t first,
                                 ptrdiff_t second);

/* RoPE's two caches from one computation: the cosine twice into cos_row,
 * the sine twice into sin_row, at the columns a table loop uses, each
 * times scale in double before its rounding. */
typedef void (*sinpe_rope_loop)(int rows, ptrdiff_t n, const double *s0, const double *c0,
                                const double *cs, const double *ss, ptrdiff_t step_stride,
                                char *cos_row, ptrdiff_t cos_stride, char *sin_row,
                                ptrdiff_t sin_stride, ptrdiff_t first, ptrdiff_t second,
                                double scale);

/* x = x * scale + t over `rows` rows of `count` native contiguous elements
 * (sinpe_add_rows in rows.h); scale is exact in the element arithmetic. */
typedef void (*sinpe_add_loop)(char *dst, ptrdiff_t dst_stride, const char *src,
                               ptrdiff_t src_stride, ptrdiff_t rows, ptrdiff_t count,
                               double scale);

/* Rotations (rows.h's sinpe_rotate_rows) of n pairs in each of `rows`
 * rows of `copies` copies, native contiguous elements: row i of copy h at
 * dst + i * dst_stride + h * dst_copy, rotated by the cache rows at
 * cos + i * cos_stride and sin + i * sin_stride (the copies of a row, the
 * heads of a position, share them).  Pair j of a row is columns
 * (j, x_second + j) split, or (2j, 2j + 1) interleaved, and its cosines
 * and sines are the same columns of the cos and sin rows (c_second for
 * split ones):
 *     y[a] = x[a] * cos[a] + (-x[b]) * sin[a],  y[b] = x[b] * cos[b] + x[a] * sin[b]
 * src NULL: in place in dst; else from src (src + i * src_stride +
 * h * src_copy; no shared memory with dst).  The caches are of the element
 * type (rotate: each operation in the element arithmetic) or double
 * (rotate_exact: in double, rounded once); they share no memory with dst. */
typedef struct {
    char *dst;
    const char *src, *cos, *sin;
    ptrdiff_t rows, copies, n;
    ptrdiff_t dst_stride, dst_copy, src_stride, src_copy, cos_stride, sin_stride;
    ptrdiff_t x_second, c_second;
} sinpe_rotate_args;
typedef void (*sinpe_rotate_loop)(const sinpe_rotate_args *r);

/* sin_out[k], cos_out[k] = sin, cos of position * freq[k], k < count:
 * the anchors of a block, and the step rows (position = the row). */
typedef void (*sinpe_sincos_loop)(const double *freq, double position, ptrdiff_t count,
                                  double *sin_out, double *cos_out);

/* freq[i] = n**e, e = -(step * (k0 + i)) / divisor, i < count, by
 * sinpe_pow_fast: correctly rounded, or negative where only the accurate
 * pass (pow.h) can round surely. */
typedef void (*sinpe_powers_loop)(sinpe_pow_base base, double step, double divisor,
                                  ptrdiff_t k0, int count, double *freq);

/* dst[0 .. n) = src[0 .. n) with stores that bypass the caches; visible
 * to other threads after the fence. */
typedef void (*sinpe_stream_loop)(float *dst, const float *src, ptrdiff_t n);
typedef void (*sinpe_fence_fn)(void);

typedef struct {
    /* [dtype][interleaved]; table2: two blocks per pass over the steps */
    sinpe_table_loop table[4][2], table2[4][2];
    sinpe_rope_loop rope[4][2];
    sinpe_add_loop add[4]; /* [dtype] */
    sinpe_rotate_loop rotate[4][2], rotate_exact[4][2]; /* [dtype][interleaved] */
    sinpe_sincos_loop sincos;
    sinpe_powers_loop powers;
    sinpe_stream_loop stream;
    sinpe_fence_fn fence;
} sinpe_kernels;

/* The loops of the level in use (dispatch.c). */
const sinpe_kernels *sinpe_kernels_active(void);

/* The SIMD levels (sinpe.h's sinpe_simd_select, _level, _available, _name). */
int sinpe_dispatch_select(const char *level);
int sinpe_dispatch_level(void);
int sinpe_dispatch_available(int level);
const char *sinpe_dispatch_name(int level);

/* sin_out[k], cos_out[k] = sin, cos of position * freq[k], k < count, by
 * the level in use's loop: a block's anchors (position p0), a table's step
 * rows (position r). */
static inline void sinpe_sincos_row(const double *freq, double position, ptrdiff_t count,
                                    double *sin_out, double *cos_out)
{
    sinpe_kernels_active()->sincos(freq, position, count, sin_out, cos_out);
}

/* Each level's loops (kernels/levels/<name>.c, for every level of sinpe.h's
 * list), or NULL where the build leaves the level out (no x86-64; MSVC
 * and the portable build leave avx512_bf16 out). */
#define SINPE_LEVEL_LOOPS_DECLARED(id, name, cpu)                                             \
    extern const sinpe_kernels *const sinpe_loops_##name;
SINPE_SIMD_LIST(SINPE_LEVEL_LOOPS_DECLARED)
#undef SINPE_LEVEL_LOOPS_DECLARED

/* What the level file of a level its build leaves out defines. */
#define SINPE_LEVEL_LEFT_OUT(name) const sinpe_kernels *const sinpe_loops_##name = NULL

#endif /* SINPE_KERNELS_H */
