/*
 * Row writers (see rows.h).  Native-order contiguous float32/float64 rows,
 * the case that must run at memory speed, get loops fused with the value
 * expression and compiled per SIMD width; everything else (float16, swapped
 * bytes, any stride, unaligned data) goes element by element through
 * memcpy, which is slower but exact and free of alignment UB.
 */
#include "rows.h"
#include "float16.h"
#include "simd.h"

#include <stdint.h>
#include <string.h>

static inline void store_elem(char *dst, sinpe_dtype dtype, int swapped, double value)
{
    switch (dtype) {
    case SINPE_FLOAT16: {
        uint16_t bits = sinpe_double_to_half(value);
        if (swapped) bits = (uint16_t)((bits << 8) | (bits >> 8));
        memcpy(dst, &bits, 2);
        break;
    }
    case SINPE_FLOAT32: {
        const float narrow = (float)value;
        uint32_t bits;
        memcpy(&bits, &narrow, 4);
        if (swapped) bits = __builtin_bswap32(bits);
        memcpy(dst, &bits, 4);
        break;
    }
    case SINPE_FLOAT64: {
        uint64_t bits;
        memcpy(&bits, &value, 8);
        if (swapped) bits = __builtin_bswap64(bits);
        memcpy(dst, &bits, 8);
        break;
    }
    }
}

static inline double load_elem(const char *src, sinpe_dtype dtype, int swapped)
{
    switch (dtype) {
    case SINPE_FLOAT16: {
        uint16_t bits;
        memcpy(&bits, src, 2);
        if (swapped) bits = (uint16_t)((bits << 8) | (bits >> 8));
        return sinpe_half_to_double(bits);
    }
    case SINPE_FLOAT32: {
        uint32_t bits;
        memcpy(&bits, src, 4);
        if (swapped) bits = __builtin_bswap32(bits);
        float narrow;
        memcpy(&narrow, &bits, 4);
        return narrow;
    }
    case SINPE_FLOAT64:
    default: {
        uint64_t bits;
        memcpy(&bits, src, 8);
        if (swapped) bits = __builtin_bswap64(bits);
        double wide;
        memcpy(&wide, &bits, 8);
        return wide;
    }
    }
}

/* The fast case: native, aligned, contiguous float32 or float64 rows. */
static int is_plain(const sinpe_row_format *fmt, const char *dst, ptrdiff_t row_stride,
                    size_t itemsize)
{
    return !fmt->swapped && fmt->col_stride == (ptrdiff_t)itemsize &&
           (uintptr_t)dst % itemsize == 0 && row_stride % (ptrdiff_t)itemsize == 0;
}

SINPE_CLONES
static void store_f32(char *dst, ptrdiff_t row_stride, int rows, ptrdiff_t lanes,
                      const double *restrict a, const double *restrict b, sinpe_steps steps)
{
    for (int i = 0; i < rows; ++i) {
        float *restrict out = (float *)(void *)(dst + i * row_stride);
        const double *restrict c = steps.c + i * steps.stride;
        const double *restrict s = steps.s + i * steps.stride;
        for (ptrdiff_t l = 0; l < lanes; ++l) {
            out[l] = (float)sinpe_value(a[l], b[l], c[l], s[l]);
        }
    }
}

SINPE_CLONES
static void store_f64(char *dst, ptrdiff_t row_stride, int rows, ptrdiff_t lanes,
                      const double *restrict a, const double *restrict b, sinpe_steps steps)
{
    for (int i = 0; i < rows; ++i) {
        double *restrict out = (double *)(void *)(dst + i * row_stride);
        const double *restrict c = steps.c + i * steps.stride;
        const double *restrict s = steps.s + i * steps.stride;
        for (ptrdiff_t l = 0; l < lanes; ++l) {
            out[l] = sinpe_value(a[l], b[l], c[l], s[l]);
        }
    }
}

void sinpe_store_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t row_stride,
                      const sinpe_steps *steps, int r0, int r1, ptrdiff_t lanes,
                      const double *a, const double *b, double *tmp)
{
    sinpe_steps from_r0 = *steps;
    from_r0.c += r0 * steps->stride;
    from_r0.s += r0 * steps->stride;
    if (fmt->dtype == SINPE_FLOAT32 && is_plain(fmt, dst, row_stride, 4)) {
        store_f32(dst, row_stride, r1 - r0, lanes, a, b, from_r0);
        return;
    }
    if (fmt->dtype == SINPE_FLOAT64 && is_plain(fmt, dst, row_stride, 8)) {
        store_f64(dst, row_stride, r1 - r0, lanes, a, b, from_r0);
        return;
    }
    for (int r = r0; r < r1; ++r) {
        char *row = dst + (r - r0) * row_stride;
        sinpe_values(steps, r, lanes, a, b, tmp);
        for (ptrdiff_t j = 0; j < lanes; ++j) {
            store_elem(row + j * fmt->col_stride, fmt->dtype, fmt->swapped, tmp[j]);
        }
    }
}

/* scale == 1 skips the multiply: 1.0 * x == x for every double (a NaN
 * stays the same quiet NaN), so the bits are the same either way. */
SINPE_CLONES
static void add_f32(float *restrict x, const double *restrict pe, ptrdiff_t lanes, double scale)
{
    if (scale == 1.0) {
        for (ptrdiff_t l = 0; l < lanes; ++l) {
            x[l] = (float)((double)x[l] + pe[l]);
        }
    } else {
        for (ptrdiff_t l = 0; l < lanes; ++l) {
            x[l] = (float)(scale * (double)x[l] + pe[l]);
        }
    }
}

SINPE_CLONES
static void add_f64(double *restrict x, const double *restrict pe, ptrdiff_t lanes, double scale)
{
    if (scale == 1.0) {
        for (ptrdiff_t l = 0; l < lanes; ++l) {
            x[l] = x[l] + pe[l];
        }
    } else {
        for (ptrdiff_t l = 0; l < lanes; ++l) {
            x[l] = scale * x[l] + pe[l];
        }
    }
}

void sinpe_add_row(const sinpe_row_format *fmt, char *dst, const double *pe, ptrdiff_t lanes,
                   double scale)
{
    if (fmt->dtype == SINPE_FLOAT32 && is_plain(fmt, dst, 0, 4)) {
        add_f32((float *)(void *)dst, pe, lanes, scale);
        return;
    }
    if (fmt->dtype == SINPE_FLOAT64 && is_plain(fmt, dst, 0, 8)) {
        add_f64((double *)(void *)dst, pe, lanes, scale);
        return;
    }
    for (ptrdiff_t j = 0; j < lanes; ++j) {
        char *elem = dst + j * fmt->col_stride;
        const double value = scale * load_elem(elem, fmt->dtype, fmt->swapped) + pe[j];
        store_elem(elem, fmt->dtype, fmt->swapped, value);
    }
}
