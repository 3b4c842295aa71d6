/*
 * The table kernel: frequencies, block rotation with exact restarts, and the
 * per-dtype row writers for encode (store) and add (scale * x + PE).
 *
 * Why block rotation: sin/cos from libm cost ~15 ns each, far more than
 * writing the element.  Positions are grouped in blocks of ROWS_PER_BLOCK
 * aligned to absolute multiples of it, p = p0 + r, and
 *     sin(p w) = sin(p0 w) cos(r w) + cos(p0 w) sin(r w)
 *     cos(p w) = cos(p0 w) cos(r w) - sin(p0 w) sin(r w)
 * with the anchors sin/cos(p0 w) and the steps sin/cos(r w) both taken from
 * libm.  Nothing is carried from row to row, so error cannot accumulate with
 * position: each value is a fixed two-product sum of correctly rounded
 * factors (a few 2**-53 absolute), on top of the angle rounding that any
 * double method has.  Because blocks are aligned to absolute positions, the
 * bits of a row do not depend on which call, offset or thread produced it.
 */
#include "sinpe.h"
#include "float16.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define ROWS_PER_BLOCK 32

/* Scratch for one call: the per-column factors of the rotation. */
typedef struct {
    ptrdiff_t d, pairs;  /* pairs = ceil(d / 2): an odd d ends with a lone sine */
    double *freq;        /* [pairs] w_k */
    double *step_sin;    /* [ROWS_PER_BLOCK][pairs] sin(r w_k) */
    double *step_cos;    /* [ROWS_PER_BLOCK][pairs] cos(r w_k) */
    double *anchor_sin;  /* [pairs] sin(p0 w_k) of the current block */
    double *anchor_cos;  /* [pairs] cos(p0 w_k) */
    double *row;         /* [2 * pairs] the values of one row, interleaved */
} table_plan;

/* How a row of the destination is laid out. */
typedef struct {
    sinpe_dtype dtype;
    int swapped;
    ptrdiff_t col_stride; /* bytes between features */
    ptrdiff_t d;
} row_layout;

static size_t itemsize_of(sinpe_dtype dtype)
{
    return dtype == SINPE_FLOAT16 ? 2 : dtype == SINPE_FLOAT32 ? 4 : 8;
}

/* Floor division for possibly negative positions. */
static int64_t floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;
}

static void plan_free(table_plan *plan)
{
    free(plan->freq); /* one allocation holds every array */
    plan->freq = NULL;
}

static int plan_alloc(table_plan *plan, ptrdiff_t d)
{
    /* 2 * ROWS_PER_BLOCK step rows, freq, two anchors and a two-wide row */
    const size_t per_pair = 2 * ROWS_PER_BLOCK + 5;
    const size_t pairs = (size_t)d / 2 + (size_t)d % 2;
    if (pairs > SIZE_MAX / sizeof(double) / per_pair) {
        return SINPE_ERR_NOMEM;
    }
    double *mem = malloc(pairs * per_pair * sizeof(double));
    if (mem == NULL) {
        return SINPE_ERR_NOMEM;
    }
    plan->d = d;
    plan->pairs = (ptrdiff_t)pairs;
    plan->freq = mem;
    plan->step_sin = mem + pairs;
    plan->step_cos = plan->step_sin + ROWS_PER_BLOCK * pairs;
    plan->anchor_sin = plan->step_cos + ROWS_PER_BLOCK * pairs;
    plan->anchor_cos = plan->anchor_sin + pairs;
    plan->row = plan->anchor_cos + pairs;
    return SINPE_OK;
}

static void fill_freq(const table_plan *plan, double n)
{
    for (ptrdiff_t k = 0; k < plan->pairs; ++k) {
        plan->freq[k] = pow(n, -(2.0 * (double)k) / (double)plan->d);
    }
}

static void fill_step_row(const table_plan *plan, int64_t r)
{
    double *s = plan->step_sin + r * plan->pairs;
    double *c = plan->step_cos + r * plan->pairs;
    for (ptrdiff_t k = 0; k < plan->pairs; ++k) {
        const double angle = (double)r * plan->freq[k];
        s[k] = sin(angle);
        c[k] = cos(angle);
    }
}

/* Step rows for the residues the call will visit: all of them for a long
 * call, only a few for a short one (libm calls dominate small tables). */
static void fill_steps(const table_plan *plan, int64_t offset, int64_t rows)
{
    const int64_t count = rows < ROWS_PER_BLOCK ? rows : ROWS_PER_BLOCK;
    for (int64_t i = 0; i < count; ++i) {
        const int64_t p = offset + i;
        fill_step_row(plan, p - floor_div(p, ROWS_PER_BLOCK) * ROWS_PER_BLOCK);
    }
}

static void fill_anchors(const table_plan *plan, int64_t p0)
{
    for (ptrdiff_t k = 0; k < plan->pairs; ++k) {
        const double angle = (double)p0 * plan->freq[k];
        plan->anchor_sin[k] = sin(angle);
        plan->anchor_cos[k] = cos(angle);
    }
}

/* Interleaved sin/cos values of position p0 + r into plan->row. */
static void fill_row(const table_plan *plan, int64_t r)
{
    const double *as = plan->anchor_sin, *ac = plan->anchor_cos;
    const double *ss = plan->step_sin + r * plan->pairs;
    const double *sc = plan->step_cos + r * plan->pairs;
    double *row = plan->row;
    for (ptrdiff_t k = 0; k < plan->pairs; ++k) {
        row[2 * k] = as[k] * sc[k] + ac[k] * ss[k];
        row[2 * k + 1] = ac[k] * sc[k] - as[k] * ss[k];
    }
}

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

/* Contiguous native rows take a loop the compiler can vectorise; the
 * generic loop covers any stride and byte order. */
static void write_row(const row_layout *lay, char *dst, const double *row)
{
    const ptrdiff_t d = lay->d;
    if (!lay->swapped && lay->col_stride == (ptrdiff_t)itemsize_of(lay->dtype)) {
        if (lay->dtype == SINPE_FLOAT32) {
            for (ptrdiff_t j = 0; j < d; ++j) {
                const float narrow = (float)row[j];
                memcpy(dst + 4 * j, &narrow, 4);
            }
            return;
        }
        if (lay->dtype == SINPE_FLOAT64) {
            memcpy(dst, row, (size_t)d * 8);
            return;
        }
    }
    for (ptrdiff_t j = 0; j < d; ++j) {
        store_elem(dst + j * lay->col_stride, lay->dtype, lay->swapped, row[j]);
    }
}

static void add_row(const row_layout *lay, char *dst, const double *row, double scale)
{
    const ptrdiff_t d = lay->d;
    if (!lay->swapped && lay->dtype == SINPE_FLOAT32 && lay->col_stride == 4) {
        for (ptrdiff_t j = 0; j < d; ++j) {
            float narrow;
            memcpy(&narrow, dst + 4 * j, 4);
            narrow = (float)(scale * (double)narrow + row[j]);
            memcpy(dst + 4 * j, &narrow, 4);
        }
        return;
    }
    for (ptrdiff_t j = 0; j < d; ++j) {
        char *elem = dst + j * lay->col_stride;
        const double value = scale * load_elem(elem, lay->dtype, lay->swapped) + row[j];
        store_elem(elem, lay->dtype, lay->swapped, value);
    }
}

static int check_array(const sinpe_array *a)
{
    if (a == NULL || a->ndim < 1 || a->ndim > SINPE_MAX_DIMS || a->shape == NULL ||
        a->strides == NULL || (unsigned)a->dtype > SINPE_FLOAT64) {
        return SINPE_ERR_INVALID;
    }
    for (int i = 0; i < a->ndim; ++i) {
        if (a->shape[i] < 0) {
            return SINPE_ERR_INVALID;
        }
    }
    return SINPE_OK;
}

static int check_table_args(double n, int64_t offset, ptrdiff_t rows)
{
    if (!(n >= SINPE_MIN_BASE && n <= SINPE_MAX_BASE)) { /* also rejects nan */
        return SINPE_ERR_INVALID;
    }
    if (offset < -SINPE_MAX_POSITION || offset > SINPE_MAX_POSITION ||
        rows > SINPE_MAX_POSITION - offset + 1) {
        return SINPE_ERR_INVALID;
    }
    return SINPE_OK;
}

/* The batch axes of x: every axis but the positions and the features. */
typedef struct {
    int count;
    ptrdiff_t shape[SINPE_MAX_DIMS];
    ptrdiff_t strides[SINPE_MAX_DIMS];
} batch_axes;

/* Applies one row of values to every batch element at row_base. */
static void apply_row_to_batch(const row_layout *lay, const batch_axes *batch, char *row_base,
                               const double *row, int adding, double scale)
{
    ptrdiff_t index[SINPE_MAX_DIMS] = {0};
    ptrdiff_t shift = 0;
    for (;;) {
        if (adding) {
            add_row(lay, row_base + shift, row, scale);
        } else {
            write_row(lay, row_base + shift, row);
        }
        int axis = batch->count - 1;
        for (; axis >= 0; --axis) { /* odometer step */
            shift += batch->strides[axis];
            if (++index[axis] < batch->shape[axis]) {
                break;
            }
            shift -= batch->strides[axis] * batch->shape[axis];
            index[axis] = 0;
        }
        if (axis < 0) {
            return;
        }
    }
}

static int run_table(const sinpe_array *x, int pos_axis, double n, int64_t offset, double scale,
                     int adding)
{
    int status = check_array(x);
    if (status != SINPE_OK) {
        return status;
    }
    const int feature_axis = x->ndim - 1;
    if (pos_axis < 0 || pos_axis >= feature_axis) {
        return SINPE_ERR_INVALID;
    }
    const ptrdiff_t rows = x->shape[pos_axis];
    status = check_table_args(n, offset, rows);
    if (status != SINPE_OK) {
        return status;
    }
    batch_axes batch = {0};
    int empty = rows == 0 || x->shape[feature_axis] == 0;
    for (int axis = 0; axis < feature_axis; ++axis) {
        if (axis != pos_axis) {
            batch.shape[batch.count] = x->shape[axis];
            batch.strides[batch.count] = x->strides[axis];
            empty |= x->shape[axis] == 0;
            batch.count++;
        }
    }
    if (empty) {
        return SINPE_OK;
    }
    if (x->data == NULL) {
        return SINPE_ERR_INVALID;
    }

    table_plan plan;
    status = plan_alloc(&plan, x->shape[feature_axis]);
    if (status != SINPE_OK) {
        return status;
    }
    const row_layout lay = {x->dtype, x->byteswapped, x->strides[feature_axis], plan.d};
    fill_freq(&plan, n);
    fill_steps(&plan, offset, rows);

    const int64_t end = offset + rows;
    for (int64_t p = offset; p < end;) {
        const int64_t p0 = floor_div(p, ROWS_PER_BLOCK) * ROWS_PER_BLOCK;
        const int64_t block_end = p0 + ROWS_PER_BLOCK < end ? p0 + ROWS_PER_BLOCK : end;
        fill_anchors(&plan, p0);
        for (; p < block_end; ++p) {
            fill_row(&plan, p - p0);
            char *row_base = x->data + (ptrdiff_t)(p - offset) * x->strides[pos_axis];
            apply_row_to_batch(&lay, &batch, row_base, plan.row, adding, scale);
        }
    }
    plan_free(&plan);
    return SINPE_OK;
}

int sinpe_encode(const sinpe_array *out, double n, int64_t offset)
{
    if (out == NULL || out->ndim != 2) {
        return SINPE_ERR_INVALID;
    }
    return run_table(out, 0, n, offset, 0.0, 0);
}

int sinpe_add(const sinpe_array *x, int pos_axis, double n, int64_t offset, double scale)
{
    if (!isfinite(scale)) {
        return SINPE_ERR_INVALID;
    }
    return run_table(x, pos_axis, n, offset, scale, 1);
}
