/*
 * Single elements and views of caller memory, shared by the row writers
 * (kernels/rows.c) and the planner (plan/).  Elements go through memcpy,
 * so any alignment and byte order is defined behaviour; the 16-bit formats
 * round straight from the double (core/float16.h), so every dtype holds
 * the one rounding of the double value.  sinpe_add_elem is the one
 * definition of an add's arithmetic, which the fast loops
 * (kernels/loops.h) must match.  Not public API.
 */
#ifndef SINPE_ELEMENTS_H
#define SINPE_ELEMENTS_H

#include "core/platform.h"

#include <stdint.h>
#include <string.h>

#include "core/float16.h"
#include "sinpe.h"

static inline size_t sinpe_itemsize(sinpe_dtype dtype)
{
#define SINPE_DTYPE_BYTES(id, name, bytes) bytes,
    static const unsigned char bytes[] = {SINPE_DTYPES(SINPE_DTYPE_BYTES)};
#undef SINPE_DTYPE_BYTES
    return bytes[dtype];
}

static inline void sinpe_store_elem(char *dst, sinpe_dtype dtype, int swapped, double value)
{
    switch (dtype) {
    case SINPE_FLOAT16:
    case SINPE_BFLOAT16: {
        uint16_t bits = dtype == SINPE_FLOAT16 ? sinpe_double_to_half(value)
                                               : sinpe_double_to_bfloat16(value);
        if (swapped) bits = (uint16_t)((bits << 8) | (bits >> 8));
        memcpy(dst, &bits, 2);
        break;
    }
    case SINPE_FLOAT32: {
        const float narrow = (float)value;
        uint32_t bits;
        memcpy(&bits, &narrow, 4);
        if (swapped) bits = sinpe_bswap32(bits);
        memcpy(dst, &bits, 4);
        break;
    }
    case SINPE_FLOAT64: {
        uint64_t bits;
        memcpy(&bits, &value, 8);
        if (swapped) bits = sinpe_bswap64(bits);
        memcpy(dst, &bits, 8);
        break;
    }
    }
}

static inline double sinpe_load_elem(const char *src, sinpe_dtype dtype, int swapped)
{
    switch (dtype) {
    case SINPE_FLOAT16:
    case SINPE_BFLOAT16: {
        uint16_t bits;
        memcpy(&bits, src, 2);
        if (swapped) bits = (uint16_t)((bits << 8) | (bits >> 8));
        return dtype == SINPE_FLOAT16 ? sinpe_half_to_double(bits) : sinpe_bfloat16_to_double(bits);
    }
    case SINPE_FLOAT32: {
        uint32_t bits;
        memcpy(&bits, src, 4);
        if (swapped) bits = sinpe_bswap32(bits);
        float narrow;
        memcpy(&narrow, &bits, 4);
        return narrow;
    }
    case SINPE_FLOAT64:
    default: {
        uint64_t bits;
        memcpy(&bits, src, 8);
        if (swapped) bits = sinpe_bswap64(bits);
        double wide;
        memcpy(&wide, &bits, 8);
        return wide;
    }
    }
}

/* The value of a double rounded to a 16-bit dtype (and widened back). */
static inline double sinpe_round_small(sinpe_dtype dtype, double value)
{
    return dtype == SINPE_FLOAT16 ? sinpe_half_to_double(sinpe_double_to_half(value))
                                  : sinpe_bfloat16_to_double(sinpe_double_to_bfloat16(value));
}

/* x * scale + t (just x * scale without t; x + t when scale is 1) in the
 * arithmetic of dtype, as NumPy and torch compute it: float64 and float32
 * in their own type, the 16-bit types one operation at a time in float32,
 * each result rounded to the type.  x and t are values of dtype; scale is
 * exact in float32 unless dtype is float64 (sinpe_plan.scale).  The result
 * is a value of dtype, so storing it rounds nothing. */
static inline double sinpe_add_elem(sinpe_dtype dtype, double x, const double *t, double scale)
{
    if (dtype == SINPE_FLOAT64) {
        const double scaled = scale == 1.0 ? x : x * scale;
        return t != NULL ? scaled + *t : scaled;
    }
    const float narrow = (float)x;
    float scaled = scale == 1.0 ? narrow : narrow * (float)scale;
    if (dtype == SINPE_FLOAT32) {
        return t != NULL ? (double)(scaled + (float)*t) : (double)scaled;
    }
    if (scale != 1.0) {
        scaled = (float)sinpe_round_small(dtype, scaled);
    }
    return t != NULL ? sinpe_round_small(dtype, scaled + (float)*t) : (double)scaled;
}

/* One output of a rotation, y = x * c + w * s with w = -x's partner (the
 * pair's first element) or the partner itself (its second), from values of
 * dtype x, w and cache values c, s: exact or float64, in double (storing it
 * rounds once); otherwise in the arithmetic of dtype, as NumPy and torch
 * compute x * C + rotate_half(x) * S with C, S of dtype: float32 in float,
 * the 16-bit types each product and the sum in float32 rounded to the type.
 * A 16-bit NaN result is the first NaN operand's (x before c, x * c before
 * w * s), whichever one the CPU would propagate.  The rotation loops
 * (kernels/rotate_loops.h) must match this bit for bit. */
#define SINPE_NAN_FIRST(a, r) ((a) != (a) ? (a) : (r))
static inline double sinpe_rotate_elem(sinpe_dtype dtype, int exact, double x, double w, double c,
                                       double s)
{
    const int small = dtype == SINPE_FLOAT16 || dtype == SINPE_BFLOAT16;
    if ((exact || dtype == SINPE_FLOAT64) && !small) {
        return x * c + w * s;
    }
    if (exact) {
        const double p = SINPE_NAN_FIRST(x, x * c), q = SINPE_NAN_FIRST(w, w * s);
        return SINPE_NAN_FIRST(p, p + q);
    }
    if (dtype == SINPE_FLOAT32) {
        return (double)((float)x * (float)c + (float)w * (float)s);
    }
    const float xf = (float)x, wf = (float)w;
    const float p = (float)sinpe_round_small(dtype, SINPE_NAN_FIRST(xf, xf * (float)c));
    const float q = (float)sinpe_round_small(dtype, SINPE_NAN_FIRST(wf, wf * (float)s));
    return sinpe_round_small(dtype, SINPE_NAN_FIRST(p, p + q));
}

/* The shape of a view the kernels can walk: 1 .. SINPE_MAX_DIMS axes, no
 * negative length, a known dtype.  SINPE_OK or SINPE_ERR_INVALID. */
static inline int sinpe_check_view(const sinpe_array *a)
{
    if (a == NULL || a->ndim < 1 || a->ndim > SINPE_MAX_DIMS || a->shape == NULL ||
        a->strides == NULL || (unsigned)a->dtype > SINPE_BFLOAT16) {
        return SINPE_ERR_INVALID;
    }
    for (int i = 0; i < a->ndim; ++i) {
        if (a->shape[i] < 0) {
            return SINPE_ERR_INVALID;
        }
    }
    return SINPE_OK;
}

#endif /* SINPE_ELEMENTS_H */
