/*
 * Internal: row writers, the only code that touches output elements.  They
 * turn each frequency's sine and cosine (table.h) into elements of any
 * dtype, byte order and stride, in the columns a layout gives them
 * (stores), and add a tile of elements to rows in the elements' own
 * arithmetic (adds).
 */
#ifndef SINPE_ROWS_H
#define SINPE_ROWS_H

#include <stddef.h>

#include "sinpe.h"
#include "core/table.h"

typedef struct {
    sinpe_dtype dtype;
    int swapped;          /* elements in non-native byte order */
    ptrdiff_t col_stride; /* bytes between consecutive elements of a row */
    int streaming;        /* store around the caches (tables far larger than them) */
} sinpe_row_format;

/* The elements of a view's rows: dtype, byte order, column stride. */
static inline sinpe_row_format sinpe_row_format_of(const sinpe_array *a)
{
    const sinpe_row_format fmt = {a->dtype, a->byteswapped != 0, a->strides[a->ndim - 1], 0};
    return fmt;
}

/* What one target receives from a run of `count` frequencies j, at columns
 * counted from its row pointer:
 *  - SINPE_PAIRS_TABLE: the sine and the cosine of frequency j;
 *  - SINPE_PAIRS_COS / SINPE_PAIRS_SIN (RoPE caches): that value, twice;
 * at columns 2j and 2j + 1 (interleaved) or first + j and second + j.  The
 * first `seconds` frequencies fill both columns, the rest only the first
 * (a table of odd width ends with a lone sine). */
enum { SINPE_PAIRS_TABLE, SINPE_PAIRS_COS, SINPE_PAIRS_SIN };

typedef struct {
    int kind;
    int interleaved;
    ptrdiff_t first, second; /* columns of frequency 0 (interleaved: first, first + 1) */
    ptrdiff_t count, seconds;
    double scale; /* every value times this, in double, before its rounding (RoPE
                   * caches' attention factor; 1 for tables) */
} sinpe_pairs;

typedef struct {
    const sinpe_row_format *fmt;
    char *row;            /* row r0's element at column 0 */
    ptrdiff_t row_stride; /* bytes from a row to the next */
    sinpe_pairs pairs;
} sinpe_pair_target;

/* Rows r0 .. r1 - 1 of a block, for one target or for RoPE's two caches
 * (same shape and frequencies): frequency j's values are sinpe_sin_value and
 * sinpe_cos_value of the anchors s0[j], c0[j] and the steps of the row,
 * computed once per frequency and row for every target.  The row loop is in
 * here so that the fast loop is entered once per block.  blocks = 2: also
 * the same rows of the next block (anchors at s0 + count, c0 + count, rows
 * SINPE_BLOCK_ROWS further on), made in the same pass over the steps.  tmp:
 * scratch of 4 * count doubles. */
void sinpe_store_pairs(const sinpe_pair_target *targets, int ntargets, const sinpe_steps *steps,
                       int r0, int r1, int blocks, const double *s0, const double *c0,
                       double *tmp);

/* One row whose values are sin_v[j], cos_v[j] themselves (a position with no
 * block: non-integral), for one or two targets. */
void sinpe_store_pair_values(const sinpe_pair_target *targets, int ntargets, const double *sin_v,
                             const double *cos_v);

/* Element i < count of a row run (dst) gets v[i * step] (step 0: one value
 * for all), rounded once: zeros, and values a row writer did not make. */
void sinpe_store_values(const sinpe_row_format *fmt, char *dst, const double *v, ptrdiff_t step,
                        ptrdiff_t count);

/* For each of `rows` rows i (at dst + i * dst_stride; src rows at
 * src + i * src_stride, native elements of fmt's dtype, contiguous):
 * x[j] = x[j] * scale + src[j] for j < count, in the elements' arithmetic
 * (sinpe_add_elem); src NULL: x[j] * scale.  src_stride 0 adds one row to
 * many. */
void sinpe_add_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t dst_stride, const char *src,
                    ptrdiff_t src_stride, ptrdiff_t rows, ptrdiff_t count, double scale);

/* A rotation's rows (sinpe.h's rotate): x's rows (dst, in place, or read
 * from src), and their cos and sin cache rows, of x's dtype (each operation
 * in x's arithmetic) or float64 (exact: in double, rounded once).  Pair j
 * of `count` is columns (j, x_second + j) of x and (j, c_second + j) of the
 * caches when split, (2j, 2j + 1) of both when interleaved:
 *     y[a] = x[a] * cos[a] + (-x[b]) * sin[a],  y[b] = x[b] * cos[b] + x[a] * sin[b] */
typedef struct {
    const sinpe_row_format *dst, *src; /* src NULL: in place */
    const sinpe_row_format *cos, *sin;
    int interleaved;
    ptrdiff_t count, x_second, c_second;
} sinpe_rotation;

/* `rows` rows of `copies` copies: x rows at dst + i * dst_stride +
 * h * dst_copy (src + i * src_stride + h * src_copy), cache rows at
 * cos + i * cos_stride and sin + i * sin_stride (stride 0: one row for
 * all; the copies of a row share it).  The fast loops when every row is
 * plain, else element by element (sinpe_rotate_elem). */
typedef struct {
    ptrdiff_t rows, copies, dst_copy, src_copy;
} sinpe_rotate_shape;
void sinpe_rotate_rows(const sinpe_rotation *r, char *dst, ptrdiff_t dst_stride, const char *src,
                       ptrdiff_t src_stride, const char *cos, ptrdiff_t cos_stride,
                       const char *sin, ptrdiff_t sin_stride, sinpe_rotate_shape shape);

/* `rows` rows of `count` elements copied bit for bit (byte order as each
 * format says): the columns an out-of-place rotation does not rotate. */
void sinpe_copy_rows(const sinpe_row_format *dst_fmt, char *dst, ptrdiff_t dst_stride,
                     const sinpe_row_format *src_fmt, const char *src, ptrdiff_t src_stride,
                     ptrdiff_t rows, ptrdiff_t count);

#endif /* SINPE_ROWS_H */
