/*
 * Internal: row writers.  They turn one row segment of canonical values (see
 * table.h) into elements of any supported dtype, byte order and stride,
 * storing them (encode) or adding them (add_).  Lane j goes to element j of
 * the segment: the interleaved layout of the paper.
 */
#ifndef SINPE_ROWS_H
#define SINPE_ROWS_H

#include <stddef.h>

#include "sinpe.h"
#include "table.h"

typedef struct {
    sinpe_dtype dtype;
    int swapped;          /* elements in non-native byte order */
    ptrdiff_t col_stride; /* bytes between consecutive elements of a row */
    int streaming;        /* store around the caches (tables far larger than them) */
} sinpe_row_format;

/* Rows r0 .. r1 - 1 of the block whose anchors are a, b: element j of row
 * r (at dst + (r - r0) * row_stride) gets the canonical lane whose anchors
 * are a[j], b[j] and whose steps are in `steps`, j < lanes.  The row loop is
 * in here so that the fast loop is entered once per block, not once per
 * row.  tmp: scratch of `lanes` doubles. */
void sinpe_store_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t row_stride,
                      const sinpe_steps *steps, int r0, int r1, ptrdiff_t lanes,
                      const double *a, const double *b, double *tmp);

/* For each of `count` rows i (at dst + i * dst_stride, values at
 * pe + i * pe_stride; pe_stride 0 adds one row of values to many rows):
 * x[j] = scale * x[j] + pe[j] in double, rounded once, j < lanes. */
void sinpe_add_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t dst_stride,
                    const double *pe, ptrdiff_t pe_stride, ptrdiff_t count, ptrdiff_t lanes,
                    double scale);

#endif /* SINPE_ROWS_H */
