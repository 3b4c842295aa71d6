/*
 * Every table variant (layouts.h) on the value generator of table.h, at the
 * speed of the default table.
 *
 * How a call is organised.  The rows of the output (every index but the
 * feature one) are split into an outer and an inner part:
 *  - range positions (encode, add_, grids): outer = the position axis,
 *    inner = every other axis (the batch, or the other grid axes);
 *  - explicit positions (encode_at, add_ positions=, RoPE at positions):
 *    outer = every row in C order, inner = nothing.
 * A chunk is a run of outer rows times one tile of frequencies.
 *
 * Segments.  Every layout is, per tile, at most two runs of contiguous
 * columns ("segments") whose element j is sinpe_value(A[j], B[j], C[j],
 * S[j]): the expression of table.h with the anchors rearranged, never
 * different arithmetic.  With s = sin(p0 w), c = cos(p0 w) of the block:
 *  - interleaved table: one segment, A = (s, c, ..), B = (c, -s, ..) over
 *    the full step rows (kernels.c's lanes);
 *  - concatenated table: sines (A = s, B = c) then cosines (A = c, B = -s),
 *    both over the half step rows (one entry per frequency);
 *  - RoPE, concatenated: the cos (or sin) segment twice, at k and d/2 + k;
 *  - RoPE, interleaved: one segment over the full step rows with the pair's
 *    anchors doubled, A = (c, c, ..), B = (-s, -s, ..) for cos.
 * A value so depends only on (p, freq[k]) and lands where the layout wants
 * it; shards, tiles and thread counts agree bit for bit, and each layout's
 * values are the interleaved table's.  Stores go through rows.c's fused
 * writers (sinpe_store_rows: SIMD clones, streaming stores for big tables),
 * a block of rows at a time when positions run along an axis.  Adds make a
 * segment's values once per position and add them to each copy.
 * A non-integral float position has no block: its sin/cos are computed
 * directly, and then A itself is the segment's values.
 *
 * Kept separate from kernels.c on purpose: the default interleaved/paper
 * table keeps its tuned path there, untouched.
 */
#include "layouts.h"
#include "elements.h"
#include "rows.h"
#include "simd.h"
#include "sincos.h"
#include "table.h"
#include "threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Frequency tiles: the anchors stay in L1 whatever d is, and a wide
 * table's step rows are built per tile (table.h). */
#define TILE_FREQS 512
/* Output bytes per chunk: big enough that the pool hand-off vanishes, small
 * enough to balance two threads and check for Ctrl-C often. */
#define CHUNK_BYTES ((double)(256 << 10))
/* Below this much output a call stays on one thread (a wake-up costs more). */
#define PARALLEL_MIN_BYTES ((double)(256 << 10))
#define CANCEL_BYTES ((double)(8 << 20))
/* Streaming stores: the same rule as kernels.c (see there): tables of
 * 8 MB or more, except fresh arrays of 32 MB or more. */
#define STREAM_MIN_BYTES ((double)(8 << 20))
#define FRESH_PLAIN_MIN_BYTES ((double)(32 << 20))

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
    sinpe_row_format fmt;
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
    int half_steps;     /* the segments use half step rows (concatenated kinds) */
    int adding;
    double scale;
    int64_t offset;
    const int64_t *ints;
    const double *reals;
    const unsigned char *padding;
    axes_t outer, inner;
    ptrdiff_t outer_count, inner_count;
    ptrdiff_t rows_per_chunk, groups;
    ptrdiff_t inner_parts, inner_per_part;
    ptrdiff_t tile_freqs, ntiles;
    uint32_t residues;
    int threads;
    ptrdiff_t cancel_period;
    double *scratch;
    size_t scratch_per_worker;
    ptrdiff_t *built_tile;
    /* adds at explicit positions that repeat (see attach_pe_rows): the
     * table's rows for positions pe_first .. in doubles, d per row */
    double *pe_rows;
    int64_t pe_first;
    /* explicit positions with pe_rows: a chunk is a window of the innermost
     * row axis times a part of the leading rows */
    ptrdiff_t pe_window, pe_windows, lead_count, lead_per_part, lead_parts;
} plan_t;

static ptrdiff_t min_ptrdiff(ptrdiff_t a, ptrdiff_t b)
{
    return a < b ? a : b;
}

/* ------------------------------------------------------------------ */
/* Anchors and segments. */

/* Per worker, for one tile of `count` frequencies: sin and cos of the block
 * start (or of a non-integral position), and the arrangements the kinds
 * use.  Each array is filled only when the plan's kinds need it. */
typedef struct {
    double *sin, *cos, *negsin;  /* [count] */
    double *a, *b;               /* [2 count] interleaved table lanes */
    double *sdup, *cdup, *nsdup; /* [2 count] RoPE pairs */
} anchors_t;

static void arrange_anchors(const plan_t *plan, const anchors_t *an, ptrdiff_t count)
{
    int table_interleaved = 0, rope_interleaved = 0;
    for (int t = 0; t < plan->ntargets; ++t) {
        table_interleaved |= plan->target[t].kind == KIND_TABLE_INTERLEAVED;
        rope_interleaved |= plan->target[t].kind == KIND_COS_INTERLEAVED ||
                            plan->target[t].kind == KIND_SIN_INTERLEAVED;
    }
    for (ptrdiff_t k = 0; k < count; ++k) {
        an->negsin[k] = -an->sin[k]; /* exact */
    }
    if (table_interleaved) {
        for (ptrdiff_t k = 0; k < count; ++k) {
            an->a[2 * k] = an->sin[k];
            an->b[2 * k] = an->cos[k];
            an->a[2 * k + 1] = an->cos[k];
            an->b[2 * k + 1] = an->negsin[k];
        }
    }
    if (rope_interleaved) {
        for (ptrdiff_t k = 0; k < count; ++k) {
            an->sdup[2 * k] = an->sdup[2 * k + 1] = an->sin[k];
            an->cdup[2 * k] = an->cdup[2 * k + 1] = an->cos[k];
            an->nsdup[2 * k] = an->nsdup[2 * k + 1] = an->negsin[k];
        }
    }
}

typedef struct {
    ptrdiff_t col, count;
    const double *a, *b;
} segment_t;

/* The segments of one target for frequencies [k0, k1) (see the top). */
static int segments_of(const plan_t *plan, int kind, ptrdiff_t k0, ptrdiff_t k1,
                       const anchors_t *an, segment_t seg[2])
{
    const ptrdiff_t m = plan->nfreq, d = plan->d, count = k1 - k0;
    if (plan->table == NULL) {
        return 0;
    }
    switch (kind) {
    case KIND_TABLE_INTERLEAVED: /* an odd d ends with a sine */
        seg[0] = (segment_t){2 * k0, min_ptrdiff(2 * k1, d) - 2 * k0, an->a, an->b};
        return 1;
    case KIND_TABLE_CONCATENATED: {
        seg[0] = (segment_t){k0, count, an->sin, an->cos};
        const ptrdiff_t ncos = min_ptrdiff(k1, d - m) - k0; /* odd d: one sine more */
        seg[1] = (segment_t){m + k0, ncos, an->cos, an->negsin};
        return ncos > 0 ? 2 : 1;
    }
    case KIND_COS_CONCATENATED:
        seg[0] = (segment_t){k0, count, an->cos, an->negsin};
        seg[1] = (segment_t){m + k0, count, an->cos, an->negsin};
        return 2;
    case KIND_SIN_CONCATENATED:
        seg[0] = (segment_t){k0, count, an->sin, an->cos};
        seg[1] = (segment_t){m + k0, count, an->sin, an->cos};
        return 2;
    case KIND_COS_INTERLEAVED:
        seg[0] = (segment_t){2 * k0, 2 * count, an->cdup, an->nsdup};
        return 1;
    default: /* KIND_SIN_INTERLEAVED */
        seg[0] = (segment_t){2 * k0, 2 * count, an->sdup, an->cdup};
        return 1;
    }
}

/* ------------------------------------------------------------------ */
/* Element runs that are not a fused store: adds, zeros, and the values of
 * non-integral positions.  Native contiguous float32/float64 runs take a
 * loop compiled per SIMD width; anything else goes element by element
 * through memcpy (exact, free of alignment UB).  A store is one rounding
 * of the double; an add is x = scale * x + v in double, rounded once
 * (scale == 1 skips the multiply, which gives the same bits). */
#define DEFINE_FAST_PUT(name, T)                                                           \
    SINPE_CLONES                                                                           \
    static void name(T *restrict out, const double *restrict v, ptrdiff_t count, int adding, \
                     double scale)                                                         \
    {                                                                                      \
        if (!adding) {                                                                     \
            for (ptrdiff_t i = 0; i < count; ++i) {                                        \
                out[i] = (T)v[i];                                                          \
            }                                                                              \
        } else if (scale == 1.0) {                                                         \
            for (ptrdiff_t i = 0; i < count; ++i) {                                        \
                out[i] = (T)((double)out[i] + v[i]);                                       \
            }                                                                              \
        } else {                                                                           \
            for (ptrdiff_t i = 0; i < count; ++i) {                                        \
                out[i] = (T)(scale * (double)out[i] + v[i]);                               \
            }                                                                              \
        }                                                                                  \
    }

DEFINE_FAST_PUT(put_f32, float)
DEFINE_FAST_PUT(put_f64, double)

/* Columns col0 .. col0 + count - 1 of a row get v[i * lane_step] (lane_step
 * 0 or 1), stored or added. */
static void put(const target_t *tg, int adding, double scale, char *row, ptrdiff_t col0,
                const double *v, ptrdiff_t lane_step, ptrdiff_t count)
{
    const sinpe_row_format *fmt = &tg->fmt;
    char *dst = row + col0 * fmt->col_stride;
    if (lane_step == 1 && !fmt->swapped) {
        if (fmt->dtype == SINPE_FLOAT32 && fmt->col_stride == 4 && (uintptr_t)dst % 4 == 0) {
            put_f32((float *)(void *)dst, v, count, adding, scale);
            return;
        }
        if (fmt->dtype == SINPE_FLOAT64 && fmt->col_stride == 8 && (uintptr_t)dst % 8 == 0) {
            put_f64((double *)(void *)dst, v, count, adding, scale);
            return;
        }
    }
    for (ptrdiff_t i = 0; i < count; ++i) {
        char *elem = dst + i * fmt->col_stride;
        const double value = adding ? scale * sinpe_load_elem(elem, fmt->dtype, fmt->swapped) + v[i * lane_step]
                                    : v[i * lane_step];
        sinpe_store_elem(elem, fmt->dtype, fmt->swapped, value);
    }
}

static const double zero_value = 0.0;

/* Columns that no frequency feeds: fairseq's zero column of an odd d (m
 * sines and min(m, d - m) cosines; any column left is zero).  Written by the
 * chunks of tile 0 only, so each element is written exactly once. */
static void put_unused_columns(const plan_t *plan, const target_t *tg, char *row)
{
    const ptrdiff_t m = plan->nfreq, d = plan->d;
    const ptrdiff_t used = m + min_ptrdiff(m, d - m);
    if (used < d) {
        put(tg, plan->adding, plan->scale, row, used, &zero_value, 0, d - used);
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

/* Per-worker scratch of one chunk. */
typedef struct {
    anchors_t an;
    double *vals; /* adds: [2][2 * tile_freqs], one per segment */
    double *tmp;  /* [2 * tile_freqs]: sinpe_store_rows' generic rows */
    double *step_buffer;
} scratch_t;

static scratch_t scratch_of(const plan_t *plan, int worker)
{
    const ptrdiff_t f = plan->tile_freqs;
    double *p = plan->scratch + (size_t)worker * plan->scratch_per_worker;
    scratch_t s;
    s.an.sin = p, p += f;
    s.an.cos = p, p += f;
    s.an.negsin = p, p += f;
    s.an.a = p, p += 2 * f;
    s.an.b = p, p += 2 * f;
    s.an.sdup = p, p += 2 * f;
    s.an.cdup = p, p += 2 * f;
    s.an.nsdup = p, p += 2 * f;
    s.vals = p, p += 4 * f;
    s.tmp = p, p += 2 * f;
    s.step_buffer = p;
    return s;
}

/* Doubles of scratch per worker: scratch_of's arrays, then a wide table's
 * step rows (full ones are the larger). */
static size_t scratch_doubles(const plan_t *plan)
{
    const size_t f = (size_t)plan->tile_freqs;
    const size_t step_rows =
        plan->table != NULL && plan->table->step_c == NULL ? 2 * SINPE_BLOCK_ROWS * 2 * f : 0;
    return 19 * f + step_rows + 1;
}

/* The position of outer row i: *p for an integer (or integral float)
 * position, else *x; returns 1 for an integer. */
static int position_of(const plan_t *plan, ptrdiff_t i, int64_t *p, double *x)
{
    if (plan->ints != NULL) {
        *p = plan->ints[i];
        return 1;
    }
    if (plan->reals != NULL) {
        *x = plan->reals[i];
        if (*x == floor(*x)) { /* integral: the integer path, bits of the table */
            *p = (int64_t)*x;
            return 1;
        }
        return 0;
    }
    *p = plan->offset + i;
    return 1;
}

/* Stores rows r0 .. r1 - 1 of the steps into rows base + q * row_stride of
 * target t (every segment, and tile 0 its unused columns). */
static void store_segments(const plan_t *plan, int t, const segment_t *segs, int nsegs,
                           const sinpe_steps *steps, char *base, ptrdiff_t row_stride, int r0,
                           int r1, double *tmp, int first_tile)
{
    const target_t *tg = &plan->target[t];
    for (int g = 0; g < nsegs; ++g) {
        sinpe_store_rows(&tg->fmt, base + segs[g].col * tg->fmt.col_stride, row_stride, steps, r0,
                         r1, segs[g].count, segs[g].a, segs[g].b, tmp);
    }
    for (int q = 0; first_tile && q < r1 - r0; ++q) {
        put_unused_columns(plan, tg, base + q * row_stride);
    }
}

/* How many outer rows from i on hold the positions p, p + 1, .. of one
 * block (p = block start + r) at a constant stride, so that one fused call
 * per segment stores them all; 0 when row i takes the one-row path (adds,
 * padding masks).  Positions along an axis always run; explicit ones while
 * they count up along the innermost axis. */
static int block_run(const plan_t *plan, ptrdiff_t i, ptrdiff_t i1, int64_t p, int r,
                     const cursor_t *oc)
{
    if (plan->adding || plan->padding != NULL) {
        return 0;
    }
    ptrdiff_t most = min_ptrdiff(i1 - i, SINPE_BLOCK_ROWS - r);
    if (plan->ints == NULL && plan->reals == NULL) {
        return (int)most;
    }
    const int last = plan->outer.naxes - 1;
    most = min_ptrdiff(most, plan->outer.shape[last] - oc->index[last]);
    int run = 1;
    while (run < most && (plan->ints != NULL ? plan->ints[i + run] == p + run
                                             : plan->reals[i + run] == (double)(p + run))) {
        ++run;
    }
    return run;
}

/* Rows i0 .. i1 - 1 of the outer axes times rows j0 .. j1 - 1 of the inner
 * ones, frequencies of tile `tile`. */
static void run_range(const plan_t *plan, int worker, ptrdiff_t tile, ptrdiff_t i0, ptrdiff_t i1,
                      ptrdiff_t j0, ptrdiff_t j1)
{
    const ptrdiff_t k0 = tile * plan->tile_freqs;
    const ptrdiff_t k1 = min_ptrdiff(k0 + plan->tile_freqs, plan->nfreq);
    const int first_tile = tile == 0;
    const int adding = plan->adding;
    const double scale = plan->scale;
    const scratch_t s = scratch_of(plan, worker);

    sinpe_steps steps = {NULL, NULL, 0};
    if (plan->table != NULL) {
        /* tile-major chunk order: a worker on a wide table rebuilds its
         * step rows only when its tile changes */
        const int rebuild = plan->built_tile[worker] != tile;
        plan->built_tile[worker] = tile;
        const uint32_t residues = rebuild ? plan->residues : 0;
        steps = plan->half_steps
                    ? sinpe_half_steps_for(plan->table, k0, k1, residues, s.step_buffer)
                    : sinpe_steps_for(plan->table, k0, k1, residues, s.step_buffer);
    }
    segment_t segs[2][2];
    int nsegs[2];
    for (int t = 0; t < plan->ntargets; ++t) {
        nsegs[t] = segments_of(plan, plan->target[t].kind, k0, k1, &s.an, segs[t]);
    }
    int have_anchor = 0, anchor_int = 0, have_vals = 0;
    int64_t anchor_p0 = 0, vals_p = 0;
    double anchor_x = 0.0;
    cursor_t oc, ic;
    cursor_seek(&plan->outer, &oc, i0);
    for (ptrdiff_t i = i0; i < i1;) {
        int64_t p = 0;
        double x = 0.0;
        const int is_int = position_of(plan, i, &p, &x);
        const int64_t p0 = is_int ? sinpe_block_start(p) : 0;
        if (plan->table != NULL &&
            !(have_anchor && anchor_int == is_int && (is_int ? anchor_p0 == p0 : anchor_x == x))) {
            if (is_int) {
                sinpe_anchor_sincos(plan->table, p0, k0, k1, s.an.sin, s.an.cos);
            } else {
                for (ptrdiff_t k = k0; k < k1; ++k) { /* the angle's own sincos, one rounding */
                    sinpe_sincos(x * plan->table->freq[k], &s.an.sin[k - k0], &s.an.cos[k - k0]);
                }
            }
            arrange_anchors(plan, &s.an, k1 - k0);
            have_anchor = 1;
            anchor_int = is_int;
            anchor_p0 = p0;
            anchor_x = x;
            have_vals = 0;
        }
        const int r = (int)(p - p0);

        const int run = is_int ? block_run(plan, i, i1, p, r, &oc) : 0;
        if (run > 0) {
            /* rows i .. i + run - 1: positions p .. p + run - 1 of one block */
            const int last = plan->outer.naxes - 1, inner_last = plan->inner.naxes - 1;
            cursor_seek(&plan->inner, &ic, j0);
            for (ptrdiff_t j = j0; j < j1;) {
                /* One position and many copies (a grid's leading axis): one
                 * call per run of copies along the innermost inner axis,
                 * with the step row held (stride 0). */
                const ptrdiff_t copies =
                    run == 1 && inner_last >= 0
                        ? min_ptrdiff(min_ptrdiff(j1 - j, 1 << 20),
                                      plan->inner.shape[inner_last] - ic.index[inner_last])
                        : 1;
                for (int t = 0; t < plan->ntargets; ++t) {
                    char *base = plan->target[t].data + oc.off[t] + ic.off[t];
                    if (copies > 1) {
                        sinpe_steps held = {NULL, NULL, 0}; /* no table: no segments */
                        if (plan->table != NULL) {
                            held.c = steps.c + r * steps.stride;
                            held.s = steps.s + r * steps.stride;
                        }
                        store_segments(plan, t, segs[t], nsegs[t], &held, base,
                                       plan->inner.bstride[t][inner_last], 0, (int)copies, s.tmp,
                                       first_tile);
                    } else {
                        store_segments(plan, t, segs[t], nsegs[t], &steps, base,
                                       plan->outer.bstride[t][last], r, r + run, s.tmp, first_tile);
                    }
                }
                for (ptrdiff_t q = 0; q < copies; ++q) {
                    cursor_step(&plan->inner, &ic);
                }
                j += copies;
            }
            for (int q = 0; q < run; ++q) {
                cursor_step(&plan->outer, &oc);
            }
            i += run;
            continue;
        }

        /* One row at a time: explicit positions, padding masks, adds.  An
         * add makes each segment's values once and reuses them while the
         * position repeats (across the inner copies and equal positions). */
        if (adding && plan->table != NULL && !(have_vals && is_int && vals_p == p)) {
            for (int g = 0; g < nsegs[0]; ++g) {
                double *v = s.vals + g * 2 * plan->tile_freqs;
                if (is_int) {
                    sinpe_values(&steps, r, segs[0][g].count, segs[0][g].a, segs[0][g].b, v);
                } else {
                    memcpy(v, segs[0][g].a, (size_t)segs[0][g].count * sizeof *v);
                }
            }
            have_vals = is_int; /* a non-integral x is recomputed: anchors tell */
            vals_p = p;
        }
        cursor_seek(&plan->inner, &ic, j0);
        for (ptrdiff_t j = j0; j < j1; ++j, cursor_step(&plan->inner, &ic)) {
            const int padded = plan->padding != NULL && plan->padding[oc.flat + ic.flat];
            for (int t = 0; t < plan->ntargets; ++t) {
                const target_t *tg = &plan->target[t];
                char *row = tg->data + oc.off[t] + ic.off[t];
                if (padded) {
                    if (first_tile) {
                        put(tg, adding, scale, row, 0, &zero_value, 0, plan->d);
                    }
                    continue;
                }
                for (int g = 0; g < nsegs[t]; ++g) {
                    const segment_t *sg = &segs[t][g];
                    if (adding) {
                        put(tg, 1, scale, row, sg->col, s.vals + g * 2 * plan->tile_freqs, 1,
                            sg->count);
                    } else if (is_int) {
                        sinpe_store_rows(&tg->fmt, row + sg->col * tg->fmt.col_stride, 0, &steps,
                                         r, r + 1, sg->count, sg->a, sg->b, s.tmp);
                    } else {
                        put(tg, 0, 1.0, row, sg->col, sg->a, 1, sg->count);
                    }
                }
                if (first_tile) {
                    put_unused_columns(plan, tg, row);
                }
            }
        }
        cursor_step(&plan->outer, &oc);
        ++i;
    }
}

/* Adds from plan->pe_rows to outer rows i0 .. i1 - 1 times inner rows
 * j0 .. j1 - 1: each element gets the double its segment would have made,
 * and zero columns and padding rows add 0.0, so the bits are the row
 * path's.  Runs of rows go to rows.c's add loop (rows inside the call),
 * walked in address order as the default add_ is. */
static void add_pe_rows(const plan_t *plan, ptrdiff_t i0, ptrdiff_t i1, ptrdiff_t j0,
                        ptrdiff_t j1)
{
    const target_t *tg = &plan->target[0];
    const ptrdiff_t d = plan->d;
    const int last = plan->outer.naxes - 1, inner_last = plan->inner.naxes - 1;
    const ptrdiff_t outer_stride = plan->outer.bstride[0][last];
    cursor_t oc, ic;
    if (plan->ints == NULL) { /* positions along an axis, no padding */
        const double *pe = plan->pe_rows + (plan->offset + i0 - plan->pe_first) * d;
        cursor_seek(&plan->outer, &oc, i0);
        cursor_seek(&plan->inner, &ic, j0);
        const ptrdiff_t inner_stride = inner_last >= 0 ? plan->inner.bstride[0][inner_last] : 0;
        if (inner_last < 0 || llabs((long long)outer_stride) <= llabs((long long)inner_stride)) {
            for (ptrdiff_t j = j0; j < j1; ++j, cursor_step(&plan->inner, &ic)) {
                sinpe_add_rows(&tg->fmt, tg->data + oc.off[0] + ic.off[0], outer_stride, pe, d,
                               i1 - i0, d, plan->scale);
            }
            return;
        }
        /* a position's copies are closer together than its neighbours:
         * rows outer, runs of copies inner (seq-first) */
        for (ptrdiff_t i = i0; i < i1; ++i, pe += d) {
            cursor_seek(&plan->inner, &ic, j0);
            for (ptrdiff_t j = j0; j < j1;) {
                const ptrdiff_t run =
                    min_ptrdiff(j1 - j, plan->inner.shape[inner_last] - ic.index[inner_last]);
                sinpe_add_rows(&tg->fmt, tg->data + (i - i0) * outer_stride + oc.off[0] + ic.off[0],
                               inner_stride, pe, 0, run, d, plan->scale);
                for (ptrdiff_t q = 0; q < run; ++q) {
                    cursor_step(&plan->inner, &ic);
                }
                j += run;
            }
        }
        return;
    }
    /* explicit positions: runs that count up along the innermost axis */
    cursor_seek(&plan->outer, &oc, i0);
    for (ptrdiff_t i = i0; i < i1;) {
        char *row = tg->data + oc.off[0];
        ptrdiff_t run = 1;
        if (plan->padding != NULL && plan->padding[oc.flat]) {
            put(tg, 1, plan->scale, row, 0, &zero_value, 0, d);
        } else {
            const int64_t p = plan->ints[i];
            const ptrdiff_t most =
                min_ptrdiff(i1 - i, plan->outer.shape[last] - oc.index[last]);
            while (run < most && plan->ints[i + run] == p + run &&
                   (plan->padding == NULL || !plan->padding[oc.flat + run])) {
                ++run;
            }
            sinpe_add_rows(&tg->fmt, row, outer_stride, plan->pe_rows + (p - plan->pe_first) * d,
                           d, run, d, plan->scale);
        }
        for (ptrdiff_t q = 0; q < run; ++q) {
            cursor_step(&plan->outer, &oc);
        }
        i += run;
    }
}

static void run_chunk(void *context, ptrdiff_t chunk, int worker)
{
    const plan_t *plan = context;
    if (plan->pe_rows != NULL && plan->ints != NULL) {
        const ptrdiff_t length = plan->outer.shape[plan->outer.naxes - 1];
        const ptrdiff_t l0 = chunk / plan->lead_parts * plan->pe_window;
        const ptrdiff_t l1 = min_ptrdiff(l0 + plan->pe_window, length);
        const ptrdiff_t b0 = chunk % plan->lead_parts * plan->lead_per_part;
        const ptrdiff_t b1 = min_ptrdiff(b0 + plan->lead_per_part, plan->lead_count);
        for (ptrdiff_t b = b0; b < b1; ++b) {
            add_pe_rows(plan, b * length + l0, b * length + l1, 0, 1);
        }
        return;
    }
    const ptrdiff_t per_tile = plan->groups * plan->inner_parts;
    const ptrdiff_t group = chunk % per_tile / plan->inner_parts;
    const ptrdiff_t part = chunk % plan->inner_parts;
    const ptrdiff_t i0 = group * plan->rows_per_chunk;
    const ptrdiff_t i1 = min_ptrdiff(i0 + plan->rows_per_chunk, plan->outer_count);
    const ptrdiff_t j0 = part * plan->inner_per_part;
    const ptrdiff_t j1 = min_ptrdiff(j0 + plan->inner_per_part, plan->inner_count);
    if (plan->pe_rows != NULL) {
        add_pe_rows(plan, i0, i1, j0, j1);
    } else {
        run_range(plan, worker, chunk / per_tile, i0, i1, j0, j1);
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
        table = sinpe_table_fairseq(freqs->n, d);
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
    free(plan->pe_rows);
    sinpe_table_release(plan->table);
    free(plan);
}

/* Checks everything, takes the table and the scratch: after this only a
 * cancel can stop the call.  threads: the workers to plan for (0: chosen
 * from the size).  *out_plan is NULL (with SINPE_OK) for an
 * empty output. */
static int plan_make(plan_t **out_plan, const sinpe_array *const *outs, const int *kinds,
                     int ntargets, const sinpe_freqs *freqs, const sinpe_positions *pos,
                     int adding, double scale, unsigned flags, int threads)
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
        const sinpe_row_format fmt = {outs[t]->dtype, outs[t]->byteswapped != 0,
                                      outs[t]->strides[nrow_axes], 0};
        plan->target[t] = (target_t){outs[t]->data, fmt, kinds[t]};
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
    if (plan->outer.naxes == 0) {
        /* a scalar position: one row, given an axis of length 1 so that
         * every walk has an innermost outer axis */
        plan->outer.naxes = 1;
        plan->outer.shape[0] = 1;
    }
    plan->outer_count = outer_count;
    plan->inner_count = rows / outer_count;
    const double inner_rows = (double)plan->inner_count;
    plan->half_steps = kinds[0] == KIND_TABLE_CONCATENATED || kinds[0] == KIND_COS_CONCATENATED;

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
    plan->threads = threads > 0 ? threads : total < PARALLEL_MIN_BYTES ? 1 : sinpe_threads_get();
    /* The inner rows (the other grid axes, the batch) in parts too, when a
     * group of outer rows alone is more than a chunk (few positions, many
     * copies: a 3-D grid's time axis) or there are too few groups to keep
     * every thread busy. */
    const double group_bytes = outer_bytes * (double)plan->rows_per_chunk;
    double parts = ceil(group_bytes / CHUNK_BYTES);
    const double busy = ceil(4.0 * plan->threads / ((double)plan->groups * (double)plan->ntiles));
    parts = plan->threads > 1 && busy > parts ? busy : parts;
    parts = parts < 1.0 ? 1.0 : parts > inner_rows ? inner_rows : parts;
    plan->inner_per_part = plan->inner_count / (ptrdiff_t)parts +
                           (plan->inner_count % (ptrdiff_t)parts != 0);
    plan->inner_parts = plan->inner_count / plan->inner_per_part +
                        (plan->inner_count % plan->inner_per_part != 0);
    const int fresh = (flags & SINPE_FRESH_OUTPUT) != 0;
    for (int t = 0; t < ntargets; ++t) {
        plan->target[t].fmt.streaming = !adding && total >= STREAM_MIN_BYTES &&
                                        (!fresh || total < FRESH_PLAIN_MIN_BYTES);
    }
    const double period = ceil(CANCEL_BYTES / (group_bytes / (double)plan->inner_parts + 1.0));
    plan->cancel_period = period > 1e9 ? 1000000000 : (ptrdiff_t)period;

    /* Per worker: anchors, values and a wide table's step rows, all bounded
     * by TILE_FREQS whatever d is. */
    plan->scratch_per_worker = scratch_doubles(plan);
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
    if (plan->pe_rows != NULL && plan->ints != NULL) {
        return sinpe_run_chunks(plan->pe_windows * plan->lead_parts, plan->threads, run_chunk,
                                plan, cancel, cancel_context, plan->cancel_period);
    }
    return sinpe_run_chunks(plan->groups * plan->inner_parts * plan->ntiles, plan->threads, run_chunk, plan, cancel,
                            cancel_context, plan->cancel_period);
}

/* An add's positions repeat across the batch (range positions always,
 * per-token ones of packed documents or left padding too): when they span
 * few enough distinct rows, the rows of their range are made once (as a float64 table through a plan of their own, so with
 * the same doubles) and the add becomes a pass of plain row adds, as the
 * default add_ is.  Kept only while that table stays cache-sized and is
 * reused at least twice per row; otherwise, or without memory for it, the
 * rows are computed in place. */
#define PE_ROWS_MAX_BYTES ((double)(8 << 20))
#define PE_WINDOW_BYTES ((double)(256 << 10))

static void attach_pe_rows(plan_t *plan, const sinpe_freqs *freqs, int kind)
{
    int64_t lo = INT64_MAX, hi = INT64_MIN;
    const double total_rows = (double)plan->outer_count * (double)plan->inner_count;
    if (plan->ints == NULL) { /* along an axis: each position has inner_count copies */
        lo = plan->offset;
        hi = plan->offset + plan->outer_count - 1;
    }
    for (ptrdiff_t i = 0; plan->ints != NULL && i < plan->outer_count; ++i) {
        if (plan->padding == NULL || !plan->padding[i]) {
            lo = plan->ints[i] < lo ? plan->ints[i] : lo;
            hi = plan->ints[i] > hi ? plan->ints[i] : hi;
        }
    }
    if (lo > hi) {
        return; /* every row padded: the row path only writes zeros */
    }
    const double count = (double)(hi - lo) + 1.0; /* |positions| <= 2**24: exact */
    if (count * (double)plan->d * 8.0 > PE_ROWS_MAX_BYTES || 2.0 * count > total_rows) {
        return;
    }
    ptrdiff_t shape[2] = {(ptrdiff_t)count, plan->d};
    ptrdiff_t strides[2] = {plan->d * 8, 8};
    double *rows = malloc((size_t)shape[0] * (size_t)plan->d * sizeof *rows);
    const sinpe_array table = {(char *)rows, SINPE_FLOAT64, 0, 2, shape, strides};
    const sinpe_array *views[1] = {&table};
    const sinpe_positions range = {0, lo, NULL, NULL, NULL};
    plan_t *maker = NULL;
    if (rows == NULL ||
        plan_make(&maker, views, &kind, 1, freqs, &range, 0, 1.0, 0, 0) != SINPE_OK ||
        maker == NULL) {
        free(rows);
        plan_free(maker);
        return;
    }
    maker->target[0].fmt.streaming = 0; /* read right after: keep it cached */
    plan_run(maker, NULL, NULL);        /* cannot fail without a cancel callback */
    plan_free(maker);
    plan->pe_rows = rows;
    plan->pe_first = lo;
    plan->ntiles = 1;
    /* A chunk's rows of the table are read once per copy: parts of the
     * copies now only to keep the threads busy, so each chunk adds its
     * rows to as many copies as it can while they are in L2. */
    const double busy = ceil(4.0 * plan->threads / (double)plan->groups);
    const ptrdiff_t parts = plan->threads == 1 || busy < 1.0 ? 1
                            : busy >= (double)plan->inner_count ? plan->inner_count
                                                                : (ptrdiff_t)busy;
    plan->inner_per_part = plan->inner_count / parts + (plan->inner_count % parts != 0);
    plan->inner_parts = plan->inner_count / plan->inner_per_part +
                        (plan->inner_count % plan->inner_per_part != 0);
    if (plan->ints != NULL) {
        /* Per-token positions walk their rows in C order, a sequence after
         * another: a chunk takes a window of each sequence (so the rows of
         * the table it reads stay in L2 when the sequences' positions are
         * alike) across a part of the sequences. */
        const ptrdiff_t length = plan->outer.shape[plan->outer.naxes - 1];
        const double window = ceil(PE_WINDOW_BYTES / ((double)plan->d * 8.0));
        plan->pe_window = window >= (double)length ? length : (ptrdiff_t)window;
        plan->pe_windows = length / plan->pe_window + (length % plan->pe_window != 0);
        plan->lead_count = plan->outer_count / length;
        const double lead_busy = ceil(4.0 * plan->threads / (double)plan->pe_windows);
        const ptrdiff_t lead_parts = lead_busy >= (double)plan->lead_count ? plan->lead_count
                                                                           : (ptrdiff_t)lead_busy;
        plan->lead_per_part = plan->lead_count / lead_parts + (plan->lead_count % lead_parts != 0);
        plan->lead_parts = plan->lead_count / plan->lead_per_part +
                           (plan->lead_count % plan->lead_per_part != 0);
    }
}

/* ------------------------------------------------------------------ */

int sinpe_variant_table(const sinpe_array *out, const sinpe_freqs *freqs, sinpe_layout layout,
                        const sinpe_positions *pos, int adding, double scale, unsigned flags,
                        sinpe_cancel_fn cancel, void *cancel_context)
{
    if (layout != SINPE_INTERLEAVED && layout != SINPE_CONCATENATED) {
        return SINPE_ERR_INVALID;
    }
    const int kind = layout == SINPE_INTERLEAVED ? KIND_TABLE_INTERLEAVED : KIND_TABLE_CONCATENATED;
    plan_t *plan;
    int status = plan_make(&plan, &out, &kind, 1, freqs, pos, adding != 0, adding ? scale : 1.0,
                           flags, 0);
    if (status == SINPE_OK && plan != NULL && adding &&
        (plan->ints != NULL || (plan->reals == NULL && plan->padding == NULL))) {
        attach_pe_rows(plan, freqs, kind);
    }
    if (status == SINPE_OK) {
        status = plan_run(plan, cancel, cancel_context);
    }
    plan_free(plan);
    return status;
}

int sinpe_variant_rope(const sinpe_array *cos_out, const sinpe_array *sin_out,
                       const sinpe_freqs *freqs, sinpe_layout layout,
                       const sinpe_positions *pos, unsigned flags, sinpe_cancel_fn cancel,
                       void *cancel_context)
{
    if (layout != SINPE_INTERLEAVED && layout != SINPE_CONCATENATED) {
        return SINPE_ERR_INVALID;
    }
    const sinpe_array *outs[2] = {cos_out, sin_out};
    const int kinds[2] = {
        layout == SINPE_CONCATENATED ? KIND_COS_CONCATENATED : KIND_COS_INTERLEAVED,
        layout == SINPE_CONCATENATED ? KIND_SIN_CONCATENATED : KIND_SIN_INTERLEAVED};
    plan_t *plan;
    int status = plan_make(&plan, outs, kinds, 2, freqs, pos, 0, 1.0, flags, 0);
    if (status == SINPE_OK) {
        status = plan_run(plan, cancel, cancel_context);
    }
    plan_free(plan);
    return status;
}

/* A grid is written band by band: a band is a few hundred KB of whole rows
 * (fixed indices on the leading axes, a span of axis `q`, every index of
 * the axes after it), and each axis' plan writes its columns of the band
 * while the band is in the caches, so memory is written in one pass, as
 * the default table is.  In each plan's terms a band is a range of its outer
 * rows times a contiguous range of its inner rows (see band_ranges). */
#define BAND_BYTES ((double)(1 << 20))

typedef struct {
    int r, q;
    ptrdiff_t shape[SINPE_MAX_DIMS];
    ptrdiff_t span, spans; /* band length on axis q, bands per leading index */
    plan_t *plans[SINPE_MAX_DIMS];
    int axis_of[SINPE_MAX_DIMS]; /* plans[i] is the chunk of grid axis axis_of[i] */
} grid_t;

/* Plan i's outer range [o[0], o[1]) and inner range [j[0], j[1]) in band b. */
static void band_ranges(const grid_t *g, int i, ptrdiff_t b, ptrdiff_t o[2], ptrdiff_t j[2])
{
    const int a = g->axis_of[i], q = g->q;
    ptrdiff_t lead = b / g->spans;
    const ptrdiff_t q0 = b % g->spans * g->span;
    const ptrdiff_t q1 = min_ptrdiff(q0 + g->span, g->shape[q]);
    ptrdiff_t index[SINPE_MAX_DIMS];
    for (int k = q - 1; k >= 0; --k) {
        index[k] = lead % g->shape[k];
        lead /= g->shape[k];
    }
    index[q] = q0;
    /* C-order strides of the inner axes (every axis but a), and the rows a
     * band holds after axis q */
    ptrdiff_t stride = 1, start = 0, trailing = 1;
    for (int k = g->r - 1; k >= 0; --k) {
        if (k == a) {
            continue;
        }
        if (k <= q) {
            start += index[k] * stride;
        } else {
            trailing *= g->shape[k];
        }
        stride *= g->shape[k];
    }
    o[0] = a < q ? index[a] : a == q ? q0 : 0;
    o[1] = a < q ? index[a] + 1 : a == q ? q1 : g->shape[a];
    j[0] = start;
    j[1] = start + trailing * (a == q ? 1 : q1 - q0);
}

static void run_band(void *context, ptrdiff_t band, int worker)
{
    const grid_t *g = context;
    for (int i = 0; i < g->r; ++i) {
        ptrdiff_t o[2], j[2];
        band_ranges(g, i, band, o, j);
        if (g->plans[i] == NULL) {
            continue;
        }
        for (ptrdiff_t tile = 0; tile < g->plans[i]->ntiles; ++tile) {
            run_range(g->plans[i], worker, tile, o[0], o[1], j[0], j[1]);
        }
    }
}

int sinpe_variant_grid(const sinpe_array *out, const ptrdiff_t *split, const int *order,
                       const sinpe_freqs *freqs, sinpe_layout layout, unsigned flags,
                       sinpe_cancel_fn cancel, void *cancel_context)
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
    grid_t *g = calloc(1, sizeof *g);
    if (g == NULL) {
        return SINPE_ERR_NOMEM;
    }
    g->r = r;
    double rows = 1.0;
    for (int a = 0; a < r; ++a) {
        g->shape[a] = out->shape[a];
        rows *= (double)out->shape[a];
    }
    const double row_bytes = (double)d * (double)sinpe_itemsize(out->dtype);
    const double bytes = rows * row_bytes;
    const int threads = bytes < PARALLEL_MIN_BYTES ? 1 : sinpe_threads_get();
    const int fresh = (flags & SINPE_FRESH_OUTPUT) != 0;
    const int streaming = bytes >= STREAM_MIN_BYTES && (!fresh || bytes < FRESH_PLAIN_MIN_BYTES);

    /* Every chunk planned (tables, scratch) before any is written, so a
     * failure leaves out untouched. */
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
        status = plan_make(&g->plans[i], views, &kind, 1, freqs, &pos, 0, 1.0, flags, threads);
        g->axis_of[i] = a;
        if (g->plans[i] != NULL) {
            g->plans[i]->target[0].fmt.streaming = streaming;
        }
        col += split[a];
    }
    if (status == SINPE_OK && rows > 0.0) {
        /* the band: the first axis q whose trailing rows fit, and a span of it */
        double trailing = rows;
        int q = 0;
        for (; q < r - 1; ++q) {
            trailing /= (double)g->shape[q];
            if (trailing * row_bytes <= BAND_BYTES) {
                break;
            }
        }
        if (q == r - 1) {
            trailing = 1.0;
        }
        const double span = floor(BAND_BYTES / (trailing * row_bytes));
        g->q = q;
        g->span = span < 1.0 ? 1 : span >= (double)g->shape[q] ? g->shape[q] : (ptrdiff_t)span;
        g->spans = g->shape[q] / g->span + (g->shape[q] % g->span != 0);
        const double band_bytes = trailing * (double)g->span * row_bytes;
        const double period = ceil(CANCEL_BYTES / (band_bytes + 1.0));
        /* bands = rows / (trailing * span) at most: fits, as rows does */
        ptrdiff_t bands = g->spans;
        for (int k = 0; k < q; ++k) {
            bands *= g->shape[k];
        }
        status = sinpe_run_chunks(bands, threads, run_band, g, cancel, cancel_context,
                                  period > 1e9 ? 1000000000 : (ptrdiff_t)period);
    }
    for (int i = 0; i < r; ++i) {
        plan_free(g->plans[i]);
    }
    free(g);
    return status;
}
