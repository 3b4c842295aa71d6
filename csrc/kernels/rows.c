/*
 * Row writers (see rows.h).  Native-order contiguous rows of every dtype,
 * the case that must run at memory speed, go to the hot loops of the SIMD
 * level in use (kernels.h, loops.h): fused with the value expression and
 * the rounding to the dtype (stores), or NumPy's own loop (adds, rotations).  Everything else (swapped bytes,
 * any stride, unaligned data) goes element by element through memcpy,
 * which is slower but exact and free of alignment UB.
 */
#include "core/platform.h"

#include <stdint.h>
#include <string.h>

#include "core/elements.h"
#include "kernels/kernels.h"
#include "kernels/rows.h"

/* The fast case: native, aligned, contiguous float32 or float64 rows. */
static int is_plain(const sinpe_row_format *fmt, const char *dst, ptrdiff_t row_stride,
                    size_t itemsize)
{
    return !fmt->swapped && fmt->col_stride == (ptrdiff_t)itemsize &&
           (uintptr_t)dst % itemsize == 0 && row_stride % (ptrdiff_t)itemsize == 0;
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
                         first_value(p->kind, sine[j], cosine[j]) * p->scale);
        if (j < p->seconds) {
            sinpe_store_elem(row + second_col(p, j) * fmt->col_stride, fmt->dtype, fmt->swapped,
                             second_value(p->kind, sine[j], cosine[j]) * p->scale);
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
    const sinpe_kernels *k = sinpe_kernels_active();
    if (ntargets == 2) {
        k->rope[dtype][p->interleaved](rows, p->seconds, s0, c0, cs, ss, step_stride, row,
                                       row_stride, row2, row_stride2, first, second, p->scale);
    } else {
        k->table[dtype][p->interleaved](rows, p->seconds, s0, c0, cs, ss, step_stride, row,
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
    const sinpe_kernels *k = sinpe_kernels_active();
    const sinpe_pairs *p = &t[0].pairs;
    const ptrdiff_t runs = p->count + p->seconds; /* floats per target in tmp */
    fast_rows(t, ntargets, (char *)tmp, 0, (char *)(tmp + runs), 0, 0, p->count, 1, s0, c0, c, s,
              0);
    lone_sines(p, SINPE_FLOAT32, (char *)tmp, 0, s0, c0, c, s);
    for (int q = 0; q < ntargets; ++q) {
        float *out = (float *)(void *)(t[q].row + r * t[q].row_stride);
        const float *made = tmp + q * runs;
        if (p->interleaved) {
            k->stream(out + p->first, made, runs);
        } else {
            k->stream(out + p->first, made, p->count);
            k->stream(out + p->second, made + p->count, p->seconds);
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
            sinpe_kernels_active()->table2[targets[0].fmt->dtype][p->interleaved](
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
        sinpe_kernels_active()->fence();
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

void sinpe_add_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t dst_stride, const char *src,
                    ptrdiff_t src_stride, ptrdiff_t rows, ptrdiff_t count, double scale)
{
    const size_t itemsize = sinpe_itemsize(fmt->dtype);
    /* the hot loop: native contiguous elements, the tile aligned */
    if (src != NULL && (uintptr_t)src % itemsize == 0 && src_stride % (ptrdiff_t)itemsize == 0 &&
        is_plain(fmt, dst, dst_stride, itemsize)) {
        sinpe_kernels_active()->add[fmt->dtype](dst, dst_stride, src, src_stride, rows, count,
                                                scale);
        return;
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

/* ------------------------------------------------------------------ */
/* Rotations. */

/* Element by element through memcpy: any dtype, byte order, stride. */
static void rotate_row_elements(const sinpe_rotation *r, char *dst, const char *src,
                                const char *cos, const char *sin)
{
    const sinpe_row_format *x_fmt = src != NULL ? r->src : r->dst;
    const char *x = src != NULL ? src : dst;
    const sinpe_dtype dtype = r->dst->dtype;
    const int exact = r->cos->dtype != dtype;
    for (ptrdiff_t j = 0; j < r->count; ++j) {
        const ptrdiff_t a = r->interleaved ? 2 * j : j, b = r->interleaved ? 2 * j + 1 : r->x_second + j;
        const ptrdiff_t ca = a, cb = r->interleaved ? b : r->c_second + j;
        const double xa = sinpe_load_elem(x + a * x_fmt->col_stride, dtype, x_fmt->swapped);
        const double xb = sinpe_load_elem(x + b * x_fmt->col_stride, dtype, x_fmt->swapped);
        const double cos_a = sinpe_load_elem(cos + ca * r->cos->col_stride, r->cos->dtype, r->cos->swapped);
        const double cos_b = sinpe_load_elem(cos + cb * r->cos->col_stride, r->cos->dtype, r->cos->swapped);
        const double sin_a = sinpe_load_elem(sin + ca * r->sin->col_stride, r->sin->dtype, r->sin->swapped);
        const double sin_b = sinpe_load_elem(sin + cb * r->sin->col_stride, r->sin->dtype, r->sin->swapped);
        sinpe_store_elem(dst + a * r->dst->col_stride, dtype, r->dst->swapped,
                         sinpe_rotate_elem(dtype, exact, xa, -xb, cos_a, sin_a));
        sinpe_store_elem(dst + b * r->dst->col_stride, dtype, r->dst->swapped,
                         sinpe_rotate_elem(dtype, exact, xb, xa, cos_b, sin_b));
    }
}

void sinpe_rotate_rows(const sinpe_rotation *r, char *dst, ptrdiff_t dst_stride, const char *src,
                       ptrdiff_t src_stride, const char *cos, ptrdiff_t cos_stride,
                       const char *sin, ptrdiff_t sin_stride, sinpe_rotate_shape shape)
{
    const sinpe_dtype dtype = r->dst->dtype;
    const size_t itemsize = sinpe_itemsize(dtype), cache_size = sinpe_itemsize(r->cos->dtype);
    const ptrdiff_t item = (ptrdiff_t)itemsize;
    const int copies_plain = shape.copies == 1 ||
                             (shape.dst_copy % item == 0 && (src == NULL || shape.src_copy % item == 0));
    if (copies_plain && is_plain(r->dst, dst, dst_stride, itemsize) &&
        (src == NULL || is_plain(r->src, src, src_stride, itemsize)) &&
        r->sin->dtype == r->cos->dtype && is_plain(r->cos, cos, cos_stride, cache_size) &&
        is_plain(r->sin, sin, sin_stride, cache_size)) {
        const sinpe_kernels *k = sinpe_kernels_active();
        const sinpe_rotate_loop loop = r->cos->dtype == dtype ? k->rotate[dtype][r->interleaved]
                                                              : k->rotate_exact[dtype][r->interleaved];
        const sinpe_rotate_args args = {dst, src, cos, sin, shape.rows, shape.copies, r->count,
                                        dst_stride, shape.dst_copy, src_stride, shape.src_copy,
                                        cos_stride, sin_stride, r->x_second, r->c_second};
        loop(&args);
        return;
    }
    for (ptrdiff_t h = 0; h < shape.copies; ++h) {
        for (ptrdiff_t i = 0; i < shape.rows; ++i) {
            rotate_row_elements(r, dst + i * dst_stride + h * shape.dst_copy,
                                src != NULL ? src + i * src_stride + h * shape.src_copy : NULL,
                                cos + i * cos_stride, sin + i * sin_stride);
        }
    }
}

void sinpe_copy_rows(const sinpe_row_format *dst_fmt, char *dst, ptrdiff_t dst_stride,
                     const sinpe_row_format *src_fmt, const char *src, ptrdiff_t src_stride,
                     ptrdiff_t rows, ptrdiff_t count)
{
    const size_t itemsize = sinpe_itemsize(dst_fmt->dtype);
    const int swap = dst_fmt->swapped != src_fmt->swapped;
    const int runs = !swap && dst_fmt->col_stride == (ptrdiff_t)itemsize &&
                     src_fmt->col_stride == (ptrdiff_t)itemsize;
    for (ptrdiff_t i = 0; i < rows; ++i) {
        char *to = dst + i * dst_stride;
        const char *from = src + i * src_stride;
        if (runs) {
            memcpy(to, from, (size_t)count * itemsize);
            continue;
        }
        for (ptrdiff_t j = 0; j < count; ++j) {
            unsigned char bytes[8];
            memcpy(bytes, from + j * src_fmt->col_stride, itemsize);
            for (size_t b = 0; swap && b < itemsize / 2; ++b) {
                const unsigned char t = bytes[b];
                bytes[b] = bytes[itemsize - 1 - b];
                bytes[itemsize - 1 - b] = t;
            }
            memcpy(to + j * dst_fmt->col_stride, bytes, itemsize);
        }
    }
}
