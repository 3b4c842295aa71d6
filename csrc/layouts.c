/*
 * Every table variant (layouts.h) through one general row writer.
 *
 * How a call is organised.  The rows of the output (every index but the
 * feature one) are split into an outer and an inner part:
 *  - range positions (encode, add_, grids): outer = the position axis,
 *    inner = every other axis (the batch, or the other grid axes), so a
 *    position's canonical row is made once and written to all its copies;
 *  - explicit positions (encode_at, add_ positions=, RoPE at positions):
 *    outer = every row in C order, inner = nothing.
 * A chunk is a run of outer rows times one tile of frequencies.  Per outer
 * row the chunk makes the tile's canonical lanes (table.h: lane 2k = sin,
 * 2k + 1 = cos), reusing the block anchors while consecutive positions stay
 * in one block and the whole row while the position repeats, then scatters
 * the lanes into the columns of each target according to its kind.  Values
 * depend only on (p, freq[k]), never on the cut, so shards agree bit for bit.
 *
 * Kept separate from kernels.c on purpose: the default interleaved/paper
 * table keeps its tuned path there, untouched.  Here a tile's lanes are made
 * once into scratch (sinpe_values) and then scattered: native contiguous
 * float32/float64 rows through per-layout loops vectorised per SIMD width,
 * everything else element by element.  Some speed is still left to
 * kernels.c (it fuses the value expression into the store and streams the
 * stores past the cache), and there is no libm call per element.
 */
#include "layouts.h"
#include "elements.h"
#include "simd.h"
#include "sincos.h"
#include "table.h"
#include "threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Frequency tiles: the anchors and one tile of lanes stay in L1/L2 whatever
 * d is, and a wide table's step rows are built per tile (table.h). */
#define TILE_FREQS 512
/* Output bytes per chunk: big enough that the pool hand-off vanishes, small
 * enough to balance two threads and check for Ctrl-C often. */
#define CHUNK_BYTES ((double)(256 << 10))
/* Below this much output a call stays on one thread (a wake-up costs more). */
#define PARALLEL_MIN_BYTES ((double)(256 << 10))
#define CANCEL_BYTES ((double)(8 << 20))

enum {
    KIND_TABLE_INTERLEAVED,
    KIND_TABLE_CONCATENATED,
    KIND_COS_CONCATENATED,
    KIND_COS_INTERLEAVED,
    KIND_SIN_CONCATENATED,
    KIND_SIN_INTERLEAVED
};

typedef struct {
    char *data;
    sinpe_dtype dtype;
    int swapped;
    ptrdiff_t col_stride;
    int kind;
} target_t;

/* A set of row axes: their lengths, byte strides per target, and element
 * strides in the C order of all row axes (the index of positions/padding). */
typedef struct {
    int naxes;
    ptrdiff_t shape[SINPE_MAX_DIMS];
    ptrdiff_t bstride[2][SINPE_MAX_DIMS];
    ptrdiff_t cstride[SINPE_MAX_DIMS];
} axes_t;

typedef struct {
    ptrdiff_t index[SINPE_MAX_DIMS];
    ptrdiff_t off[2];
    ptrdiff_t flat;
} cursor_t;

typedef struct {
    sinpe_table *table; /* NULL when there are no frequencies (fairseq d = 1) */
    ptrdiff_t nfreq, d;
    int ntargets;
    target_t target[2];
    int adding;
    double scale;
    int64_t offset;
    const int64_t *ints;
    const double *reals;
    const unsigned char *padding;
    axes_t outer, inner;
    ptrdiff_t outer_count;
    ptrdiff_t rows_per_chunk, groups;
    ptrdiff_t tile_freqs, ntiles;
    uint32_t residues;
    int threads;
    ptrdiff_t cancel_period;
    double *scratch;
    size_t scratch_per_worker;
    ptrdiff_t *built_tile;
} plan_t;

static ptrdiff_t min_ptrdiff(ptrdiff_t a, ptrdiff_t b)
{
    return a < b ? a : b;
}

/* ------------------------------------------------------------------ */
/* Native-order contiguous float32/float64 rows: the case that should run
 * at memory speed.  One loop per (dtype, column step, lane step), each with
 * constant steps and restrict pointers (the lanes are private scratch, never
 * the output) and compiled per SIMD width (simd.h), so GCC vectorises the
 * copy, the de-interleave of the concatenated layout (lane 2k -> column k)
 * and the pair duplication of an interleaved RoPE cache.  The bodies are the
 * same conversions as the generic path below: a store is one rounding of
 * the double lane; an add is x = scale * x + v in double, rounded once
 * (scale == 1 skips the multiply, which gives the same bits).  So the
 * choice of loop changes speed, never a bit. */
#define DEFINE_FAST_PUT(name, T, COL_STEP, LANE_STEP)                                        \
    SINPE_CLONES                                                                           \
    static void name(T *restrict out, const double *restrict v, ptrdiff_t count, int adding, \
                     double scale)                                                         \
    {                                                                                      \
        if (!adding) {                                                                     \
            for (ptrdiff_t i = 0; i < count; ++i) {                                        \
                out[i * (COL_STEP)] = (T)v[i * (LANE_STEP)];                               \
            }                                                                              \
        } else if (scale == 1.0) {                                                         \
            for (ptrdiff_t i = 0; i < count; ++i) {                                        \
                out[i * (COL_STEP)] = (T)((double)out[i * (COL_STEP)] + v[i * (LANE_STEP)]); \
            }                                                                              \
        } else {                                                                           \
            for (ptrdiff_t i = 0; i < count; ++i) {                                        \
                out[i * (COL_STEP)] =                                                      \
                    (T)(scale * (double)out[i * (COL_STEP)] + v[i * (LANE_STEP)]);         \
            }                                                                              \
        }                                                                                  \
    }

DEFINE_FAST_PUT(put_f32_1_1, float, 1, 1)
DEFINE_FAST_PUT(put_f32_1_2, float, 1, 2)
DEFINE_FAST_PUT(put_f32_2_2, float, 2, 2)
DEFINE_FAST_PUT(put_f64_1_1, double, 1, 1)
DEFINE_FAST_PUT(put_f64_1_2, double, 1, 2)
DEFINE_FAST_PUT(put_f64_2_2, double, 2, 2)

/* A RoPE interleaved cache: columns 2i and 2i + 1 both get v[2i] (stores
 * only: RoPE caches are never added to). */
#define DEFINE_FAST_PAIRS(name, T)                                                          \
    SINPE_CLONES                                                                           \
    static void name(T *restrict out, const double *restrict v, ptrdiff_t count)            \
    {                                                                                      \
        for (ptrdiff_t i = 0; i < count; ++i) {                                            \
            const T value = (T)v[2 * i];                                                   \
            out[2 * i] = value;                                                            \
            out[2 * i + 1] = value;                                                        \
        }                                                                                  \
    }

DEFINE_FAST_PAIRS(pairs_f32, float)
DEFINE_FAST_PAIRS(pairs_f64, double)

/* 4 for a native contiguous aligned float32 row from dst, 8 for float64,
 * 0 for everything else (float16, swapped bytes, strides, misalignment). */
static inline int fast_width(const target_t *tg, const char *dst)
{
    if (tg->swapped) {
        return 0;
    }
    if (tg->dtype == SINPE_FLOAT32 && tg->col_stride == 4 && (uintptr_t)dst % 4 == 0) {
        return 4;
    }
    if (tg->dtype == SINPE_FLOAT64 && tg->col_stride == 8 && (uintptr_t)dst % 8 == 0) {
        return 8;
    }
    return 0;
}

/* Columns col0 + i * col_step of a row get v[i * lane_step], i < count,
 * stored or added.  A fast row with one of the steps the layouts use goes
 * to its loop above; anything else element by element through memcpy,
 * which is slower but exact and free of alignment UB.  Always inlined with
 * constant steps, so the dispatch folds away at each call site. */
static inline __attribute__((always_inline)) void
put(const target_t *tg, int adding, double scale, char *row, ptrdiff_t col0, ptrdiff_t col_step,
    const double *v, ptrdiff_t lane_step, ptrdiff_t count)
{
    char *dst = row + col0 * tg->col_stride;
    const int width = fast_width(tg, dst);
    if (width == 4 && col_step == 1 && lane_step == 1) {
        put_f32_1_1((float *)(void *)dst, v, count, adding, scale);
        return;
    }
    if (width == 4 && col_step == 1 && lane_step == 2) {
        put_f32_1_2((float *)(void *)dst, v, count, adding, scale);
        return;
    }
    if (width == 4 && col_step == 2 && lane_step == 2) {
        put_f32_2_2((float *)(void *)dst, v, count, adding, scale);
        return;
    }
    if (width == 8 && col_step == 1 && lane_step == 1) {
        put_f64_1_1((double *)(void *)dst, v, count, adding, scale);
        return;
    }
    if (width == 8 && col_step == 1 && lane_step == 2) {
        put_f64_1_2((double *)(void *)dst, v, count, adding, scale);
        return;
    }
    if (width == 8 && col_step == 2 && lane_step == 2) {
        put_f64_2_2((double *)(void *)dst, v, count, adding, scale);
        return;
    }
    const ptrdiff_t step = col_step * tg->col_stride;
    for (ptrdiff_t i = 0; i < count; ++i) {
        char *elem = dst + i * step;
        const double value = adding ? scale * sinpe_load_elem(elem, tg->dtype, tg->swapped) + v[i * lane_step]
                                    : v[i * lane_step];
        sinpe_store_elem(elem, tg->dtype, tg->swapped, value);
    }
}

static const double zero_value = 0.0;

/* One row of one target from the lanes of frequencies [k0, k1).  Columns
 * that no frequency feeds (padding rows; fairseq's zero column) are written
 * by the chunks of tile 0 only, so each element is written exactly once. */
static void write_row(const plan_t *plan, const target_t *tg, char *row, ptrdiff_t k0,
                      ptrdiff_t k1, const double *vals, int padded, int first_tile)
{
    const int adding = plan->adding;
    const double scale = plan->scale;
    const ptrdiff_t m = plan->nfreq, d = plan->d;
    if (padded) {
        if (first_tile) {
            put(tg, adding, scale, row, 0, 1, &zero_value, 0, d);
        }
        return;
    }
    const ptrdiff_t count = k1 - k0;
    switch (tg->kind) {
    case KIND_TABLE_INTERLEAVED: /* lane j is column j; an odd d ends with a sine */
        put(tg, adding, scale, row, 2 * k0, 1, vals, 1, min_ptrdiff(2 * k1, d) - 2 * k0);
        break;
    case KIND_TABLE_CONCATENATED: {
        put(tg, adding, scale, row, k0, 1, vals, 2, count);
        const ptrdiff_t ncos = min_ptrdiff(k1, d - m) - k0;
        if (ncos > 0) {
            put(tg, adding, scale, row, m + k0, 1, vals + 1, 2, ncos);
        }
        break;
    }
    case KIND_COS_CONCATENATED:
    case KIND_SIN_CONCATENATED: {
        const double *v = vals + (tg->kind == KIND_COS_CONCATENATED);
        put(tg, adding, scale, row, k0, 1, v, 2, count);
        put(tg, adding, scale, row, m + k0, 1, v, 2, count);
        break;
    }
    case KIND_COS_INTERLEAVED:
    case KIND_SIN_INTERLEAVED: {
        const double *v = vals + (tg->kind == KIND_COS_INTERLEAVED);
        char *dst = row + 2 * k0 * tg->col_stride;
        const int width = adding ? 0 : fast_width(tg, dst);
        if (width == 4) {
            pairs_f32((float *)(void *)dst, v, count);
        } else if (width == 8) {
            pairs_f64((double *)(void *)dst, v, count);
        } else {
            put(tg, adding, scale, row, 2 * k0, 2, v, 2, count);
            put(tg, adding, scale, row, 2 * k0 + 1, 2, v, 2, count);
        }
        break;
    }
    }
    if (first_tile && (tg->kind == KIND_TABLE_INTERLEAVED || tg->kind == KIND_TABLE_CONCATENATED)) {
        /* m sines and min(m, d - m) cosines; any column left is zero */
        const ptrdiff_t used = m + min_ptrdiff(m, d - m);
        if (used < d) {
            put(tg, adding, scale, row, used, 1, &zero_value, 0, d - used);
        }
    }
}

/* The canonical lanes of a non-integral position: sincos of the double
 * angle, one rounding, no anchor (there is no integer row to agree with). */
SINPE_CLONES
static void direct_lanes(const double *freq, ptrdiff_t count, double x, double *sin_tmp,
                         double *cos_tmp, double *vals)
{
    for (ptrdiff_t k = 0; k < count; ++k) {
        sinpe_sincos(x * freq[k], &sin_tmp[k], &cos_tmp[k]);
    }
    for (ptrdiff_t k = 0; k < count; ++k) {
        vals[2 * k] = sin_tmp[k];
        vals[2 * k + 1] = cos_tmp[k];
    }
}

/* ------------------------------------------------------------------ */
/* Cursors over row axes. */

static void cursor_seek(const axes_t *ax, cursor_t *c, ptrdiff_t flat)
{
    c->off[0] = c->off[1] = 0;
    c->flat = 0;
    for (int i = ax->naxes - 1; i >= 0; --i) {
        c->index[i] = flat % ax->shape[i];
        flat /= ax->shape[i];
        c->off[0] += c->index[i] * ax->bstride[0][i];
        c->off[1] += c->index[i] * ax->bstride[1][i];
        c->flat += c->index[i] * ax->cstride[i];
    }
}

static void cursor_step(const axes_t *ax, cursor_t *c)
{
    for (int i = ax->naxes - 1; i >= 0; --i) {
        c->off[0] += ax->bstride[0][i];
        c->off[1] += ax->bstride[1][i];
        c->flat += ax->cstride[i];
        if (++c->index[i] < ax->shape[i]) {
            return;
        }
        c->off[0] -= ax->bstride[0][i] * ax->shape[i];
        c->off[1] -= ax->bstride[1][i] * ax->shape[i];
        c->flat -= ax->cstride[i] * ax->shape[i];
        c->index[i] = 0;
    }
}

/* ------------------------------------------------------------------ */

static void run_chunk(void *context, ptrdiff_t chunk, int worker)
{
    const plan_t *plan = context;
    const ptrdiff_t tile = chunk / plan->groups;
    const ptrdiff_t group = chunk % plan->groups;
    const ptrdiff_t k0 = tile * plan->tile_freqs;
    const ptrdiff_t k1 = min_ptrdiff(k0 + plan->tile_freqs, plan->nfreq);
    const ptrdiff_t lanes = 2 * (k1 - k0);
    const ptrdiff_t tile_lanes = 2 * plan->tile_freqs;
    double *a = plan->scratch + (size_t)worker * plan->scratch_per_worker;
    double *b = a + tile_lanes;
    double *vals = b + tile_lanes;
    double *sin_tmp = vals + tile_lanes;
    double *cos_tmp = sin_tmp + plan->tile_freqs;
    double *step_buffer = cos_tmp + plan->tile_freqs;

    sinpe_steps steps = {NULL, NULL, 0};
    if (plan->table != NULL) {
        /* tile-major chunk order: a worker on a wide table rebuilds its
         * step rows only when its tile changes */
        const int rebuild = plan->built_tile[worker] != tile;
        plan->built_tile[worker] = tile;
        steps = sinpe_steps_for(plan->table, k0, k1, rebuild ? plan->residues : 0, step_buffer);
    }

    const ptrdiff_t i0 = group * plan->rows_per_chunk;
    const ptrdiff_t i1 = min_ptrdiff(i0 + plan->rows_per_chunk, plan->outer_count);
    int have_anchor = 0, have_vals = 0, vals_int = 0;
    int64_t anchor_p0 = 0, vals_p = 0;
    double vals_x = 0.0;
    cursor_t oc, ic;
    cursor_seek(&plan->outer, &oc, i0);
    for (ptrdiff_t i = i0; i < i1; ++i, cursor_step(&plan->outer, &oc)) {
        int is_int = 1;
        int64_t p = 0;
        double x = 0.0;
        if (plan->ints != NULL) {
            p = plan->ints[i];
        } else if (plan->reals != NULL) {
            x = plan->reals[i];
            if (x == floor(x)) { /* integral: the integer path, bits of the table */
                p = (int64_t)x;
            } else {
                is_int = 0;
            }
        } else {
            p = plan->offset + i;
        }
        int ready = 0;
        cursor_seek(&plan->inner, &ic, 0);
        for (;;) {
            const ptrdiff_t flat = oc.flat + ic.flat;
            const int padded = plan->padding != NULL && plan->padding[flat];
            if (!padded && !ready && plan->table != NULL) {
                if (is_int) {
                    if (!(have_vals && vals_int && vals_p == p)) {
                        const int64_t p0 = sinpe_block_start(p);
                        if (!have_anchor || anchor_p0 != p0) {
                            sinpe_anchor(plan->table, p0, k0, k1, a, b, sin_tmp, cos_tmp);
                            have_anchor = 1;
                            anchor_p0 = p0;
                        }
                        sinpe_values(&steps, (int)(p - p0), lanes, a, b, vals);
                        have_vals = 1;
                        vals_int = 1;
                        vals_p = p;
                    }
                } else if (!(have_vals && !vals_int && vals_x == x)) {
                    direct_lanes(plan->table->freq + k0, k1 - k0, x, sin_tmp, cos_tmp, vals);
                    have_vals = 1;
                    vals_int = 0;
                    vals_x = x;
                }
                ready = 1;
            }
            for (int t = 0; t < plan->ntargets; ++t) {
                write_row(plan, &plan->target[t], plan->target[t].data + oc.off[t] + ic.off[t],
                          k0, k1, vals, padded, tile == 0);
            }
            /* the inner cursor wraps to all zeros after its last row */
            cursor_step(&plan->inner, &ic);
            int wrapped = 1;
            for (int ax = 0; ax < plan->inner.naxes; ++ax) {
                wrapped &= ic.index[ax] == 0;
            }
            if (wrapped) {
                break;
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* Validation and planning. */

int sinpe_check_freq(const double *freq, ptrdiff_t nfreq, double max_abs_position)
{
    const double reach = max_abs_position + SINPE_ANCHOR_SLACK;
    for (ptrdiff_t k = 0; k < nfreq; ++k) {
        /* !(>= 0) also rejects NaN; the product bound rejects inf */
        if (!(freq[k] >= 0.0) || !(freq[k] * reach <= SINPE_MAX_ANGLE)) {
            return SINPE_ERR_INVALID;
        }
    }
    return SINPE_OK;
}

/* The largest |position| the call reaches, or -1 when one is out of the
 * supported range (or not finite). */
static double max_abs_position(const sinpe_positions *pos, ptrdiff_t count)
{
    const double bound = (double)SINPE_MAX_POSITION;
    double most = 0.0;
    if (pos->pos_axis >= 0) {
        if (count == 0) {
            return 0.0;
        }
        const double lo = (double)pos->offset, hi = (double)pos->offset + (double)(count - 1);
        most = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
        return most <= bound && fabs(lo) <= bound ? most : -1.0;
    }
    for (ptrdiff_t i = 0; i < count; ++i) {
        const double p = pos->ints != NULL ? (double)pos->ints[i] : pos->reals[i];
        if (!(fabs(p) <= bound)) { /* NaN too */
            return -1.0;
        }
        most = fabs(p) > most ? fabs(p) : most;
    }
    return most;
}

/* The frequencies as a table (NULL with *status OK when there are none). */
static sinpe_table *make_table(const sinpe_freqs *freqs, ptrdiff_t d, ptrdiff_t nfreq,
                               int *status)
{
    *status = SINPE_OK;
    if (nfreq == 0) {
        return NULL;
    }
    sinpe_table *table = NULL;
    if (freqs->freq != NULL) {
        table = sinpe_table_from_freq(freqs->freq, nfreq);
    } else if (freqs->schedule == SINPE_PAPER) {
        table = sinpe_table_standard(freqs->n, d);
    } else {
        /* fairseq/t2t/Whisper: log-spaced from 1 down to exactly 1/n;
         * t2t's max(., 1) defines d = 2, 3 (w_0 = 1) */
        double *w = malloc((size_t)nfreq * sizeof *w);
        if (w != NULL) {
            const double denominator = nfreq - 1 > 1 ? (double)(nfreq - 1) : 1.0;
            for (ptrdiff_t k = 0; k < nfreq; ++k) {
                w[k] = pow(freqs->n, -(double)k / denominator);
            }
            table = sinpe_table_from_freq(w, nfreq);
            free(w);
        }
    }
    if (table == NULL) {
        *status = SINPE_ERR_NOMEM;
    }
    return table;
}

static void plan_free(plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    free(plan->scratch);
    free(plan->built_tile);
    sinpe_table_release(plan->table);
    free(plan);
}

/* Checks everything, takes the table and the scratch: after this only a
 * cancel can stop the call.  *out_plan is NULL (with SINPE_OK) for an
 * empty output. */
static int plan_make(plan_t **out_plan, const sinpe_array *const *outs, const int *kinds,
                     int ntargets, const sinpe_freqs *freqs, const sinpe_positions *pos,
                     int adding, double scale)
{
    *out_plan = NULL;
    for (int t = 0; t < ntargets; ++t) {
        if (sinpe_check_view(outs[t]) != SINPE_OK || outs[t]->ndim != outs[0]->ndim) {
            return SINPE_ERR_INVALID;
        }
        for (int i = 0; i < outs[0]->ndim; ++i) {
            if (outs[t]->shape[i] != outs[0]->shape[i]) {
                return SINPE_ERR_INVALID;
            }
        }
    }
    const sinpe_array *x = outs[0];
    const int nrow_axes = x->ndim - 1;
    const ptrdiff_t d = x->shape[nrow_axes];
    const int rope = kinds[0] != KIND_TABLE_INTERLEAVED && kinds[0] != KIND_TABLE_CONCATENATED;
    if (pos == NULL || freqs == NULL || !isfinite(scale) || d < 1 || (rope && d % 2 != 0)) {
        return SINPE_ERR_INVALID;
    }
    if (pos->pos_axis >= 0 ? (pos->pos_axis >= nrow_axes || pos->ints != NULL ||
                              pos->reals != NULL)
                           : ((pos->ints == NULL) == (pos->reals == NULL))) {
        return SINPE_ERR_INVALID;
    }
    ptrdiff_t nfreq;
    if (freqs->freq != NULL) {
        nfreq = freqs->nfreq;
        if (rope ? nfreq != d / 2 : (nfreq != d / 2 && nfreq != (d + 1) / 2)) {
            return SINPE_ERR_INVALID;
        }
    } else {
        if (!(freqs->n >= SINPE_MIN_BASE && freqs->n <= SINPE_MAX_BASE) ||
            (freqs->schedule != SINPE_PAPER && freqs->schedule != SINPE_FAIRSEQ) ||
            (rope && freqs->schedule != SINPE_PAPER)) {
            return SINPE_ERR_INVALID;
        }
        nfreq = freqs->schedule == SINPE_PAPER ? (d + 1) / 2 : d / 2;
    }

    /* Row counts: products of the shape of a valid array, so they fit;
     * an empty output needs no work (and no table). */
    ptrdiff_t rows = 1;
    for (int i = 0; i < nrow_axes; ++i) {
        if (x->shape[i] == 0) {
            return SINPE_OK;
        }
        rows *= x->shape[i];
    }
    for (int t = 0; t < ntargets; ++t) {
        if (outs[t]->data == NULL) {
            return SINPE_ERR_INVALID;
        }
    }
    const ptrdiff_t outer_count = pos->pos_axis >= 0 ? x->shape[pos->pos_axis] : rows;
    const double most = max_abs_position(pos, outer_count);
    if (most < 0.0) {
        return SINPE_ERR_INVALID;
    }

    plan_t *plan = calloc(1, sizeof *plan); /* ~8 KB of axes: not on the stack */
    if (plan == NULL) {
        return SINPE_ERR_NOMEM;
    }
    int status;
    plan->table = make_table(freqs, d, nfreq, &status);
    if (status != SINPE_OK) {
        plan_free(plan);
        return status;
    }
    if (plan->table != NULL && sinpe_check_freq(plan->table->freq, nfreq, most) != SINPE_OK) {
        plan_free(plan);
        return SINPE_ERR_INVALID;
    }
    plan->nfreq = nfreq;
    plan->d = d;
    plan->ntargets = ntargets;
    double row_bytes = 0.0;
    for (int t = 0; t < ntargets; ++t) {
        plan->target[t] = (target_t){outs[t]->data, outs[t]->dtype, outs[t]->byteswapped != 0,
                                     outs[t]->strides[nrow_axes], kinds[t]};
        row_bytes += (double)d * (double)sinpe_itemsize(outs[t]->dtype);
    }
    plan->adding = adding;
    plan->scale = scale;
    plan->offset = pos->offset;
    plan->ints = pos->ints;
    plan->reals = pos->reals;
    plan->padding = pos->padding;

    /* C-order element strides of the row axes, then the outer/inner split */
    ptrdiff_t cstride[SINPE_MAX_DIMS];
    ptrdiff_t c = 1;
    for (int i = nrow_axes - 1; i >= 0; --i) {
        cstride[i] = c;
        c *= x->shape[i];
    }
    for (int i = 0; i < nrow_axes; ++i) {
        axes_t *ax = (pos->pos_axis < 0 || i == pos->pos_axis) ? &plan->outer : &plan->inner;
        const int at = ax->naxes++;
        ax->shape[at] = x->shape[i];
        ax->cstride[at] = cstride[i];
        for (int t = 0; t < 2; ++t) {
            ax->bstride[t][at] = t < ntargets ? outs[t]->strides[i] : 0;
        }
    }
    plan->outer_count = outer_count;
    const double inner_rows = (double)rows / (double)outer_count;

    plan->tile_freqs = nfreq == 0 ? 0 : min_ptrdiff(nfreq, TILE_FREQS);
    plan->ntiles = nfreq == 0 ? 1 : nfreq / plan->tile_freqs + (nfreq % plan->tile_freqs != 0);
    plan->residues = pos->pos_axis >= 0 ? sinpe_residues(pos->offset, outer_count) : 0xffffffffu;

    const double outer_bytes = row_bytes * inner_rows;
    const double total = outer_bytes * (double)outer_count;
    double per_chunk = floor(CHUNK_BYTES / (outer_bytes > 1.0 ? outer_bytes : 1.0));
    if (pos->pos_axis >= 0) { /* whole blocks: fewer anchors */
        per_chunk = SINPE_BLOCK_ROWS * ceil(per_chunk / SINPE_BLOCK_ROWS);
    }
    plan->rows_per_chunk = per_chunk < 1.0 ? 1
                           : per_chunk >= (double)outer_count ? outer_count
                                                              : (ptrdiff_t)per_chunk;
    plan->groups = outer_count / plan->rows_per_chunk + (outer_count % plan->rows_per_chunk != 0);
    plan->threads = total < PARALLEL_MIN_BYTES ? 1 : sinpe_threads_get();
    const double period = ceil(CANCEL_BYTES / (outer_bytes * (double)plan->rows_per_chunk + 1.0));
    plan->cancel_period = period > 1e9 ? 1000000000 : (ptrdiff_t)period;

    /* Per worker: anchors a, b, the lanes, sincos temporaries, and a wide
     * table's step rows; all bounded by TILE_FREQS, whatever d is. */
    const size_t tile_lanes = 2 * (size_t)plan->tile_freqs;
    const size_t step_rows = plan->table != NULL && plan->table->step_c == NULL
                                 ? 2 * SINPE_BLOCK_ROWS * tile_lanes : 0;
    plan->scratch_per_worker = 3 * tile_lanes + 2 * (size_t)plan->tile_freqs + step_rows + 1;
    plan->scratch = malloc((size_t)plan->threads * plan->scratch_per_worker * sizeof(double));
    plan->built_tile = malloc((size_t)plan->threads * sizeof(ptrdiff_t));
    if (plan->scratch == NULL || plan->built_tile == NULL) {
        plan_free(plan);
        return SINPE_ERR_NOMEM;
    }
    for (int w = 0; w < plan->threads; ++w) {
        plan->built_tile[w] = -1;
    }
    *out_plan = plan;
    return SINPE_OK;
}

static int plan_run(plan_t *plan, sinpe_cancel_fn cancel, void *cancel_context)
{
    if (plan == NULL) {
        return SINPE_OK;
    }
    /* every chunk holds at least one element, so the count fits */
    return sinpe_run_chunks(plan->groups * plan->ntiles, plan->threads, run_chunk, plan, cancel,
                            cancel_context, plan->cancel_period);
}

/* ------------------------------------------------------------------ */

int sinpe_variant_table(const sinpe_array *out, const sinpe_freqs *freqs, sinpe_layout layout,
                        const sinpe_positions *pos, int adding, double scale,
                        sinpe_cancel_fn cancel, void *cancel_context)
{
    if (layout != SINPE_INTERLEAVED && layout != SINPE_CONCATENATED) {
        return SINPE_ERR_INVALID;
    }
    const int kind = layout == SINPE_INTERLEAVED ? KIND_TABLE_INTERLEAVED : KIND_TABLE_CONCATENATED;
    plan_t *plan;
    int status = plan_make(&plan, &out, &kind, 1, freqs, pos, adding != 0, adding ? scale : 1.0);
    if (status == SINPE_OK) {
        status = plan_run(plan, cancel, cancel_context);
    }
    plan_free(plan);
    return status;
}

int sinpe_variant_rope(const sinpe_array *cos_out, const sinpe_array *sin_out,
                       const sinpe_freqs *freqs, sinpe_layout layout,
                       const sinpe_positions *pos, sinpe_cancel_fn cancel, void *cancel_context)
{
    if (layout != SINPE_INTERLEAVED && layout != SINPE_CONCATENATED) {
        return SINPE_ERR_INVALID;
    }
    const sinpe_array *outs[2] = {cos_out, sin_out};
    const int kinds[2] = {
        layout == SINPE_CONCATENATED ? KIND_COS_CONCATENATED : KIND_COS_INTERLEAVED,
        layout == SINPE_CONCATENATED ? KIND_SIN_CONCATENATED : KIND_SIN_INTERLEAVED};
    plan_t *plan;
    int status = plan_make(&plan, outs, kinds, 2, freqs, pos, 0, 1.0);
    if (status == SINPE_OK) {
        status = plan_run(plan, cancel, cancel_context);
    }
    plan_free(plan);
    return status;
}

int sinpe_variant_grid(const sinpe_array *out, const ptrdiff_t *split, const int *order,
                       const sinpe_freqs *freqs, sinpe_layout layout, sinpe_cancel_fn cancel,
                       void *cancel_context)
{
    if (sinpe_check_view(out) != SINPE_OK || out->ndim < 2 || split == NULL || order == NULL ||
        freqs == NULL || freqs->freq != NULL ||
        (layout != SINPE_INTERLEAVED && layout != SINPE_CONCATENATED)) {
        return SINPE_ERR_INVALID;
    }
    const int r = out->ndim - 1;
    const ptrdiff_t d = out->shape[r];
    int seen[SINPE_MAX_DIMS] = {0};
    ptrdiff_t total = 0;
    for (int a = 0; a < r; ++a) {
        if (order[a] < 0 || order[a] >= r || seen[order[a]]++ || split[a] < 1 || split[a] > d) {
            return SINPE_ERR_INVALID;
        }
        total += split[a]; /* each <= d, r <= 64 terms: no overflow */
    }
    if (total != d) {
        return SINPE_ERR_INVALID;
    }
    /* Every chunk planned (tables, scratch) before any is written, so a
     * failure leaves out untouched. */
    plan_t *plans[SINPE_MAX_DIMS] = {NULL};
    ptrdiff_t shape[SINPE_MAX_DIMS]; /* plan_make copies what it keeps */
    const int kind = layout == SINPE_INTERLEAVED ? KIND_TABLE_INTERLEAVED : KIND_TABLE_CONCATENATED;
    int status = SINPE_OK;
    ptrdiff_t col = 0;
    for (int i = 0; i < r && status == SINPE_OK; ++i) {
        const int a = order[i];
        memcpy(shape, out->shape, (size_t)out->ndim * sizeof(ptrdiff_t));
        shape[r] = split[a];
        sinpe_array view = *out;
        view.data = out->data == NULL ? NULL : out->data + col * out->strides[r];
        view.shape = shape;
        const sinpe_array *views[1] = {&view};
        const sinpe_positions pos = {a, 0, NULL, NULL, NULL};
        status = plan_make(&plans[i], views, &kind, 1, freqs, &pos, 0, 1.0);
        col += split[a];
    }
    for (int i = 0; i < r && status == SINPE_OK; ++i) {
        status = plan_run(plans[i], cancel, cancel_context);
    }
    for (int i = 0; i < r; ++i) {
        plan_free(plans[i]);
    }
    return status;
}
