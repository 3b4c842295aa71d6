/*
 * Internal: row writers, the only code that touches output elements.  They
 * turn runs of canonical values (table.h) into elements of any dtype, byte
 * order and stride (stores), and add a tile of elements to rows in the
 * elements' own arithmetic (adds).
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
 * r (at dst + (r - r0) * row_stride) gets sinpe_value(a[j], b[j], c, s)
 * with the steps c, s of lane j of row r in `steps`, j < lanes.  The row
 * loop is in here so that the fast loop is entered once per block, not once
 * per row.  tmp: scratch of `lanes` doubles. */
void sinpe_store_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t row_stride,
                      const sinpe_steps *steps, int r0, int r1, ptrdiff_t lanes,
                      const double *a, const double *b, double *tmp);

/* Element i < count of a row run (dst) gets v[i * step] (step 0: one value
 * for all), rounded once.  For values that are not a block's rotation:
 * zeros, and positions with no block (non-integral ones). */
void sinpe_store_values(const sinpe_row_format *fmt, char *dst, const double *v, ptrdiff_t step,
                        ptrdiff_t count);

/* For each of `rows` rows i (at dst + i * dst_stride; src rows at
 * src + i * src_stride, native elements of fmt's dtype, contiguous):
 * x[j] = x[j] * scale + src[j] for j < count, in the elements' arithmetic
 * (sinpe_add_elem); src NULL: x[j] * scale.  src_stride 0 adds one row to
 * many. */
void sinpe_add_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t dst_stride, const char *src,
                    ptrdiff_t src_stride, ptrdiff_t rows, ptrdiff_t count, double scale);

#endif /* SINPE_ROWS_H */
