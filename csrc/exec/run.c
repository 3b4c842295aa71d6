/*
 * The executor: one chunk of a plan (plan.h), for every table sinpe makes.
 *
 * Stores.  A chunk walks its outer rows in order.  Where positions count up
 * within a block (always for range positions, in runs for explicit ones),
 * the rows of a block (of two whole blocks of range positions: one pass
 * over the steps) are one call to rows.c's pair writer, with the anchors
 * computed once per block; a position with many copies (a grid's leading
 * axis) holds its step row and strides over the copies.  Other rows
 * (padding, non-integral positions) are written one at a time.  Grids into
 * plain rows are assembled instead: each group's rows made once per band
 * into a tile, then whole rows copied from the tiles (assemble_band).
 *
 * Adds.  A chunk makes the table rows of a range of positions, as elements
 * of the array's own dtype, in a tile of at most a few hundred KB per
 * worker (the same writer as stores), then adds that tile to every copy of
 * those positions in address order with rows.c's plain add loop: the table
 * is made once per chunk, never batch-sized, and the add runs in the
 * array's arithmetic.  Positions one per row (windows cut) look their row
 * up in the tile when the window's positions fit, else get a row of their
 * own.
 *
 * Columns.  Every layout takes each frequency's sine and cosine (table.h),
 * computed once per frequency and row, to the columns it wants: the table
 * interleaved (2k, 2k + 1) or split (sin_col + k, cos_col + k), a RoPE
 * cache one of them twice, and RoPE's two caches from one computation
 * (pairs_of; the writers are rows.c's).  A value so depends only on (p, w)
 * and lands where the layout wants it.  A non-integral position has no
 * block: its sin/cos are computed directly and stored as they are.
 */
#include "core/platform.h"

#include "core/elements.h"
#include "plan/plan.h"
#include "core/sincos.h"
#include "exec/walk.h"

#include <math.h>
#include <string.h>


static const double zero_value = 0.0;

/* ------------------------------------------------------------------ */
/* Scratch and columns (the helpers run.c shares with rotate.c are walk.h's). */

size_t sinpe_plan_scratch_doubles(const plan_t *plan)
{
    int wide = 0;
    for (int g = 0; g < plan->ngroups; ++g) {
        wide |= plan->groups[g].table != NULL && plan->groups[g].table->step_c == NULL;
    }
    const size_t f = (size_t)plan->tile_freqs;
    return 8 * f + (wide ? 2 * SINPE_BLOCK_ROWS * f : 0) + 1;
}

/* The columns a target of `kind` receives from tile [k0, k1) of group g,
 * its values times scale. */
static sinpe_pairs pairs_of(const group_t *g, int kind, ptrdiff_t k0, ptrdiff_t k1, double scale)
{
    sinpe_pairs p;
    p.scale = scale;
    p.kind = kind == KIND_TABLE ? SINPE_PAIRS_TABLE : kind == KIND_COS ? SINPE_PAIRS_COS
                                                                       : SINPE_PAIRS_SIN;
    p.interleaved = g->interleaved;
    p.count = k1 - k0;
    p.first = g->interleaved ? g->col + 2 * k0 : g->sin_col + k0;
    p.second = g->interleaved ? p.first + 1 : g->cos_col + k0;
    /* a table of odd width has a sine more than cosines */
    const ptrdiff_t cosines = g->interleaved ? g->width / 2 : g->width - g->nfreq;
    p.seconds = kind != KIND_TABLE ? p.count : min_ptrdiff(k1, cosines) - k0;
    p.seconds = p.seconds < 0 ? 0 : p.seconds;
    return p;
}

/* Columns no frequency feeds (fairseq's zero column of an odd width): the
 * last `*count` of the group, written by tile 0 only. */
static ptrdiff_t unused_columns(const group_t *g, ptrdiff_t *count)
{
    const ptrdiff_t m = g->nfreq;
    const ptrdiff_t used = g->interleaved ? min_ptrdiff(2 * m, g->width)
                                          : m + min_ptrdiff(m, g->width - m);
    *count = g->width - used;
    return g->col + used;
}

/* ------------------------------------------------------------------ */
/* Stores. */

/* Rows r0 .. r1 - 1 of the steps into rows base[t] + q * stride[t] of every
 * target (RoPE's two caches in one pass), and on tile 0 the unused columns.
 * blocks = 2: and the same rows of the next block, after them (rows.h).
 * is_int = 0: one row of a non-integral position, whose values are the
 * anchors themselves. */
static void store_rows(const plan_t *plan, const group_t *g, const scratch_t *s, ptrdiff_t k0,
                       ptrdiff_t k1, char *const *base, const ptrdiff_t *stride,
                       const sinpe_steps *steps, int r0, int r1, int blocks, int is_int,
                       int first_tile)
{
    sinpe_pair_target targets[2];
    for (int t = 0; t < plan->ntargets; ++t) {
        const double scale = plan->target[t].kind == KIND_TABLE ? 1.0 : plan->scale;
        targets[t] = (sinpe_pair_target){&plan->target[t].fmt, base[t], stride[t],
                                         pairs_of(g, plan->target[t].kind, k0, k1, scale)};
    }
    if (g->table != NULL && is_int) {
        sinpe_store_pairs(targets, plan->ntargets, steps, r0, r1, blocks, s->s0, s->c0,
                          s->tmp);
    } else if (g->table != NULL) {
        sinpe_store_pair_values(targets, plan->ntargets, s->s0, s->c0);
    }
    ptrdiff_t zeros;
    const ptrdiff_t col = unused_columns(g, &zeros);
    for (int t = 0; first_tile && zeros > 0 && t < plan->ntargets; ++t) {
        const sinpe_row_format *fmt = &plan->target[t].fmt;
        for (int q = 0; q < blocks * (r1 - r0); ++q) {
            sinpe_store_values(fmt, base[t] + q * stride[t] + col * fmt->col_stride, &zero_value,
                               0, zeros);
        }
    }
}

/* How many outer rows from i on hold the positions p, p + 1, .. of one
 * block (r = p - block start) at a constant stride, so that one call
 * stores them all; 0 when row i takes the one-row path. */
static int block_run(const plan_t *plan, const group_t *g, ptrdiff_t i, ptrdiff_t i1, int64_t p,
                     int r, const cursor_t *oc)
{
    if (plan->padding != NULL) {
        return 0;
    }
    ptrdiff_t most = min_ptrdiff(i1 - i, SINPE_BLOCK_ROWS - r);
    if (g->axis >= 0) {
        return (int)most;
    }
    const int last = g->outer.naxes - 1;
    most = min_ptrdiff(most, g->outer.shape[last] - oc->index[last]);
    int run = 1;
    while (run < most && (plan->ints != NULL ? plan->ints[i + run] == p + run
                                             : plan->reals[i + run] == (double)(p + run))) {
        ++run;
    }
    return run;
}

/* Whether the 32 rows after the whole block of rows i .. i + 31 (positions
 * p .. p + 31) hold the next block, p + 32 .. p + 63, at the same stride:
 * always for range positions with rows left, and for explicit positions
 * that count up along the last row axis (packed sequences). */
static int next_block_follows(const plan_t *plan, const group_t *g, ptrdiff_t i, ptrdiff_t i1,
                              int64_t p, const cursor_t *oc)
{
    if (i + 2 * SINPE_BLOCK_ROWS > i1) {
        return 0;
    }
    if (g->axis >= 0) {
        return 1;
    }
    const int last = g->outer.naxes - 1;
    if (g->outer.shape[last] - oc->index[last] < 2 * SINPE_BLOCK_ROWS) {
        return 0;
    }
    for (ptrdiff_t k = SINPE_BLOCK_ROWS; k < 2 * SINPE_BLOCK_ROWS; ++k) {
        if (plan->ints != NULL ? plan->ints[i + k] != p + k
                               : plan->reals[i + k] != (double)(p + k)) {
            return 0;
        }
    }
    return 1;
}

/* Stores outer rows i0 .. i1 - 1 times inner rows j0 .. j1 - 1 of group g,
 * frequencies of tile `tile`. */
static void store_range(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                        ptrdiff_t i0, ptrdiff_t i1, ptrdiff_t j0, ptrdiff_t j1)
{
    const ptrdiff_t k0 = tile * plan->tile_freqs;
    const ptrdiff_t k1 = min_ptrdiff(k0 + plan->tile_freqs, g->nfreq);
    const int first_tile = tile == 0;
    scratch_t s = scratch_of(plan, worker);
    const sinpe_steps steps = steps_of(plan, g, worker, tile, k0, k1, s.step_buffer);
    const int last = g->outer.naxes - 1, inner_last = g->inner.naxes - 1;
    int have_anchor = 0, anchor_int = 0;
    int64_t anchor_p0 = 0;
    double anchor_x = 0.0;
    char *base[2];
    ptrdiff_t stride[2];
    cursor_t oc, ic;
    cursor_seek(&g->outer, &oc, i0);
    for (ptrdiff_t i = i0; i < i1;) {
        int64_t p;
        double x;
        const int is_int = position_of(plan, g, i, &p, &x);
        const int64_t p0 = is_int ? sinpe_block_start(p) : 0;
        if (g->table != NULL &&
            !(have_anchor && anchor_int == is_int && (is_int ? anchor_p0 == p0 : anchor_x == x))) {
            anchor(plan, g, &s, k0, k1, is_int, p0, x);
            have_anchor = 1, anchor_int = is_int, anchor_p0 = p0, anchor_x = x;
        }
        const int r = (int)(p - p0);
        int run = is_int ? block_run(plan, g, i, i1, p, r, &oc) : 0, blocks = 1;
        if (run == SINPE_BLOCK_ROWS && g->table != NULL && s.s0 == s.sin &&
            next_block_follows(plan, g, i, i1, p, &oc)) { /* one pass over the steps */
            sinpe_anchor_sincos(g->table, p0 + SINPE_BLOCK_ROWS, k0, k1, s.sin + (k1 - k0),
                                s.cos + (k1 - k0));
            run = 2 * SINPE_BLOCK_ROWS;
            blocks = 2;
            have_anchor = 0;
        }
        if (run > 0) {
            /* rows i .. i + run - 1: positions p .. p + run - 1 of one block (or two) */
            cursor_seek(&g->inner, &ic, j0);
            for (ptrdiff_t j = j0; j < j1;) {
                /* One position and many copies (a grid's leading axis): one
                 * call per run of copies along the innermost inner axis,
                 * with the step row held (stride 0). */
                const ptrdiff_t copies =
                    run == 1 && inner_last >= 0
                        ? min_ptrdiff(min_ptrdiff(j1 - j, 1 << 20),
                                      g->inner.shape[inner_last] - ic.index[inner_last])
                        : 1;
                for (int t = 0; t < plan->ntargets; ++t) {
                    base[t] = plan->target[t].data + oc.off[t] + ic.off[t];
                    stride[t] = copies > 1 ? g->inner.bstride[t][inner_last]
                                           : g->outer.bstride[t][last];
                }
                if (copies > 1) {
                    sinpe_steps held = steps;
                    if (g->table != NULL) {
                        held.c += r * steps.stride;
                        held.s += r * steps.stride;
                    }
                    held.stride = 0;
                    store_rows(plan, g, &s, k0, k1, base, stride, &held, 0, (int)copies, 1, 1,
                               first_tile);
                } else {
                    store_rows(plan, g, &s, k0, k1, base, stride, &steps, r, r + run / blocks,
                               blocks, 1,
                               first_tile);
                }
                cursor_advance(&g->inner, &ic, copies);
                j += copies;
            }
            cursor_advance(&g->outer, &oc, run);
            i += run;
            continue;
        }
        /* One row at a time: padding masks, non-integral positions. */
        cursor_seek(&g->inner, &ic, j0);
        for (ptrdiff_t j = j0; j < j1; ++j, cursor_step(&g->inner, &ic)) {
            for (int t = 0; t < plan->ntargets; ++t) {
                base[t] = plan->target[t].data + oc.off[t] + ic.off[t];
                stride[t] = 0;
            }
            if (plan->padding == NULL || !plan->padding[oc.flat + ic.flat]) {
                store_rows(plan, g, &s, k0, k1, base, stride, &steps, r, r + 1, 1, is_int,
                           first_tile);
                continue;
            }
            for (int t = 0; first_tile && t < plan->ntargets; ++t) {
                const sinpe_row_format *fmt = &plan->target[t].fmt;
                sinpe_store_values(fmt, base[t] + g->col * fmt->col_stride, &zero_value, 0,
                                   g->width);
            }
        }
        cursor_step(&g->outer, &oc);
        ++i;
    }
}

/* ------------------------------------------------------------------ */
/* Adds. */

/* A tile of table rows in the target's own dtype (native order, contiguous):
 * the tile's columns packed (interleaved from column 0, or the sines then
 * the cosines), then on tile 0 the unused columns (zeros).  runs map tile
 * columns to runs of the array's columns, merged where they are adjacent in
 * both (a whole row for a table of one tile). */
typedef struct {
    char *data;
    ptrdiff_t row_bytes;
    size_t itemsize;
    sinpe_row_format fmt;
    sinpe_pairs pairs; /* the columns, in the tile */
    ptrdiff_t zeros_at, zeros;
    int nruns;
    struct {
        ptrdiff_t col, off, count;
    } runs[3];
} tile_t;

static void tile_layout(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                        tile_t *t)
{
    const ptrdiff_t k0 = tile * plan->tile_freqs;
    const ptrdiff_t k1 = min_ptrdiff(k0 + plan->tile_freqs, g->nfreq);
    t->fmt = (sinpe_row_format){plan->target[0].fmt.dtype, 0, 0, 0};
    t->itemsize = sinpe_itemsize(t->fmt.dtype);
    t->fmt.col_stride = (ptrdiff_t)t->itemsize;
    const sinpe_pairs in_x = pairs_of(g, KIND_TABLE, k0, k1, 1.0);
    t->pairs = in_x;
    t->pairs.first = 0;
    t->pairs.second = in_x.interleaved ? 1 : in_x.count;
    ptrdiff_t cols[3], offs[3], counts[3];
    int n = 0;
    if (g->table != NULL && in_x.interleaved) {
        cols[n] = in_x.first, offs[n] = 0, counts[n++] = in_x.count + in_x.seconds;
    } else if (g->table != NULL) {
        cols[n] = in_x.first, offs[n] = 0, counts[n++] = in_x.count;
        cols[n] = in_x.second, offs[n] = in_x.count, counts[n++] = in_x.seconds;
    }
    t->zeros_at = n > 0 ? offs[n - 1] + counts[n - 1] : 0;
    t->zeros = 0;
    if (tile == 0) {
        cols[n] = unused_columns(g, &t->zeros);
        offs[n] = t->zeros_at, counts[n++] = t->zeros;
    }
    t->nruns = 0;
    for (int q = 0; q < n; ++q) {
        const int r = t->nruns;
        if (counts[q] == 0) {
            continue;
        }
        if (r > 0 && t->runs[r - 1].col + t->runs[r - 1].count == cols[q] &&
            t->runs[r - 1].off + t->runs[r - 1].count == offs[q]) {
            t->runs[r - 1].count += counts[q];
        } else {
            t->runs[r].col = cols[q], t->runs[r].off = offs[q], t->runs[r].count = counts[q];
            t->nruns++;
        }
    }
    t->row_bytes = (t->zeros_at + t->zeros) * (ptrdiff_t)t->itemsize;
    t->data = plan->tiles + (size_t)worker * plan->tile_bytes;
}

/* Fills tile row `slot` onwards with the rows of positions first ..
 * first + rows - 1 (is_int), or slot with the row of non-integral x. */
static void fill_tile(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                      const tile_t *t, ptrdiff_t slot, int is_int, int64_t first, ptrdiff_t rows,
                      double x)
{
    const ptrdiff_t k0 = tile * plan->tile_freqs;
    const ptrdiff_t k1 = min_ptrdiff(k0 + plan->tile_freqs, g->nfreq);
    scratch_t s = scratch_of(plan, worker);
    const sinpe_steps steps = steps_of(plan, g, worker, tile, k0, k1, s.step_buffer);
    char *base = t->data + slot * t->row_bytes;
    for (ptrdiff_t q = 0; q < rows && t->zeros > 0; ++q) {
        memset(base + q * t->row_bytes + t->zeros_at * (ptrdiff_t)t->itemsize, 0,
               (size_t)t->zeros * t->itemsize); /* +0.0 in every format */
    }
    if (g->table == NULL) {
        return;
    }
    sinpe_pair_target target = {&t->fmt, base, t->row_bytes, t->pairs};
    if (!is_int) {
        anchor(plan, g, &s, k0, k1, 0, 0, x);
        sinpe_store_pair_values(&target, 1, s.s0, s.c0);
        return;
    }
    for (int64_t p = first; p < first + rows;) {
        const int64_t p0 = sinpe_block_start(p);
        const int r0 = (int)(p - p0);
        const int r1 = (int)min_ptrdiff(SINPE_BLOCK_ROWS, first + rows - p0);
        anchor(plan, g, &s, k0, k1, 1, p0, 0.0);
        target.row = base + (p - first) * t->row_bytes;
        sinpe_store_pairs(&target, 1, &steps, r0, r1, 1, s.s0, s.c0, s.tmp);
        p = p0 + r1;
    }
}

/* The made table's rows (plan->made) as a tile whose slot 0 is position
 * `first`: every column in one run. */
static void made_tile(const plan_t *plan, int64_t first, tile_t *t)
{
    const sinpe_rows *made = plan->made;
    t->fmt = (sinpe_row_format){made->key.dtype, 0, 0, 0};
    t->itemsize = sinpe_itemsize(made->key.dtype);
    t->fmt.col_stride = (ptrdiff_t)t->itemsize;
    t->zeros_at = t->zeros = 0;
    t->nruns = 1;
    t->runs[0].col = 0, t->runs[0].off = 0, t->runs[0].count = plan->d;
    t->row_bytes = (ptrdiff_t)made->row_bytes;
    t->data = made->data + (first - made->first) * t->row_bytes;
}

/* rows of the array from x (stride x_stride) += tile rows from `slot`
 * (tile_stride: the row bytes, or 0 to add one row to many). */
static void add_tile(const plan_t *plan, const tile_t *t, ptrdiff_t slot, ptrdiff_t tile_stride,
                     char *x, ptrdiff_t x_stride, ptrdiff_t rows)
{
    const sinpe_row_format *fmt = &plan->target[0].fmt;
    for (int q = 0; q < t->nruns; ++q) {
        sinpe_add_rows(fmt, x + t->runs[q].col * fmt->col_stride, x_stride,
                       t->data + slot * t->row_bytes + t->runs[q].off * (ptrdiff_t)t->itemsize,
                       tile_stride, rows, t->runs[q].count, plan->scale);
    }
}

/* A padded row: x * scale, once (tile 0). */
static void scale_row(const plan_t *plan, ptrdiff_t tile, char *x)
{
    if (tile == 0 && plan->scale != 1.0) {
        sinpe_add_rows(&plan->target[0].fmt, x, 0, NULL, 0, 1, plan->d, plan->scale);
    }
}

/* Adds at range positions: outer rows i0 .. i1 - 1 (one tile of them) to
 * each copy j0 .. j1 - 1, walking memory in address order: a copy's rows
 * are closer together than a row's copies (batch-first) or the reverse
 * (seq-first). */
static void add_span(const plan_t *plan, int worker, ptrdiff_t tile, ptrdiff_t i0, ptrdiff_t i1,
                     ptrdiff_t j0, ptrdiff_t j1)
{
    const group_t *g = &plan->groups[0];
    tile_t t;
    if (plan->made != NULL) {
        made_tile(plan, g->offset + i0, &t);
    } else {
        tile_layout(plan, g, worker, tile, &t);
        fill_tile(plan, g, worker, tile, &t, 0, 1, g->offset + i0, i1 - i0, 0.0);
    }
    const int inner_last = g->inner.naxes - 1;
    const ptrdiff_t outer_stride = g->outer.bstride[0][0];
    const ptrdiff_t inner_stride = inner_last >= 0 ? g->inner.bstride[0][inner_last] : 0;
    char *data = plan->target[0].data;
    cursor_t oc, ic;
    cursor_seek(&g->outer, &oc, i0);
    if (plan->padding != NULL) { /* row by row, each with its flag */
        for (ptrdiff_t i = i0; i < i1; ++i, cursor_step(&g->outer, &oc)) {
            cursor_seek(&g->inner, &ic, j0);
            for (ptrdiff_t j = j0; j < j1; ++j, cursor_step(&g->inner, &ic)) {
                char *row = data + oc.off[0] + ic.off[0];
                if (plan->padding[oc.flat + ic.flat]) {
                    scale_row(plan, tile, row);
                } else {
                    add_tile(plan, &t, i - i0, 0, row, 0, 1);
                }
            }
        }
        return;
    }
    cursor_seek(&g->inner, &ic, j0);
    if (inner_last < 0 || abs_ptrdiff(outer_stride) <= abs_ptrdiff(inner_stride)) {
        for (ptrdiff_t j = j0; j < j1; ++j, cursor_step(&g->inner, &ic)) {
            add_tile(plan, &t, 0, t.row_bytes, data + oc.off[0] + ic.off[0], outer_stride, i1 - i0);
        }
        return;
    }
    for (ptrdiff_t i = i0; i < i1; ++i) {
        cursor_seek(&g->inner, &ic, j0);
        for (ptrdiff_t j = j0; j < j1;) {
            const ptrdiff_t run =
                min_ptrdiff(j1 - j, g->inner.shape[inner_last] - ic.index[inner_last]);
            add_tile(plan, &t, i - i0, 0, data + (i - i0) * outer_stride + oc.off[0] + ic.off[0],
                     inner_stride, run);
            cursor_advance(&g->inner, &ic, run);
            j += run;
        }
    }
}

/* Adds at explicit positions: window [l0, l1) of the innermost row axis in
 * the leading rows b0 .. b1 - 1.  The window's integer positions are made
 * once as one range when they fit in the tile, and each row looks its row
 * up there (runs of positions that count up are one call); a row outside
 * it, or at a non-integral position, gets the tile's spare row. */
static void add_window(const plan_t *plan, int worker, ptrdiff_t tile, ptrdiff_t l0,
                       ptrdiff_t l1, ptrdiff_t b0, ptrdiff_t b1)
{
    const group_t *g = &plan->groups[0];
    const ptrdiff_t length = plan->length;
    int64_t lo, hi;
    tile_t t;
    int ranged;
    if (plan->made != NULL) { /* it holds every row's position (plan.c) */
        lo = plan->made->first;
        hi = lo + plan->made->count - 1;
        ranged = 1;
        made_tile(plan, lo, &t);
    } else {
        window_range(plan, g, l0, l1, b0, b1, &lo, &hi);
        ranged = lo <= hi && hi - lo < plan->tile_rows;
        tile_layout(plan, g, worker, tile, &t);
        if (ranged) {
            fill_tile(plan, g, worker, tile, &t, 0, 1, lo, hi - lo + 1, 0.0);
        }
    }
    const int last = g->outer.naxes - 1;
    const ptrdiff_t stride = g->outer.bstride[0][last];
    char *data = plan->target[0].data;
    cursor_t oc;
    for (ptrdiff_t b = b0; b < b1; ++b) {
        cursor_seek(&g->outer, &oc, b * length + l0);
        for (ptrdiff_t i = b * length + l0; i < b * length + l1;) {
            char *row = data + oc.off[0];
            int64_t p;
            double x;
            const int is_int = position_of(plan, g, i, &p, &x);
            ptrdiff_t run = 1;
            if (plan->padding != NULL && plan->padding[i]) {
                scale_row(plan, tile, row);
            } else if (ranged && is_int && p >= lo && p <= hi) {
                int64_t q;
                while (i + run < b * length + l1 && (plan->padding == NULL || !plan->padding[i + run]) &&
                       position_of(plan, g, i + run, &q, &x) && q == p + run && q <= hi) {
                    ++run;
                }
                add_tile(plan, &t, p - lo, t.row_bytes, row, stride, run);
            } else {
                fill_tile(plan, g, worker, tile, &t, plan->tile_rows, is_int, p, 1, x);
                add_tile(plan, &t, plan->tile_rows, 0, row, 0, 1);
            }
            cursor_advance(&g->outer, &oc, run);
            i += run;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Bands (grids). */

/* Band `band`'s first row, as its index on every row axis (0 after
 * band_axis); returns the end of its span of band_axis. */
static ptrdiff_t band_start(const plan_t *plan, ptrdiff_t band, ptrdiff_t *index)
{
    const int q = plan->band_axis;
    const ptrdiff_t *shape = plan->row_shape;
    ptrdiff_t lead = band / plan->spans;
    for (int k = plan->row_axes - 1; k > q; --k) {
        index[k] = 0;
    }
    index[q] = band % plan->spans * plan->span;
    for (int k = q - 1; k >= 0; --k) {
        index[k] = lead % shape[k];
        lead /= shape[k];
    }
    return min_ptrdiff(index[q] + plan->span, shape[q]);
}

/* Group g's outer range [o[0], o[1]) and inner range [j[0], j[1]) in band
 * `band`: fixed indices on the axes before band_axis, a span of it, every
 * index of the axes after it. */
static void band_ranges(const plan_t *plan, const group_t *g, ptrdiff_t band, ptrdiff_t o[2],
                        ptrdiff_t j[2])
{
    const int q = plan->band_axis, a = g->axis, r = plan->row_axes;
    const ptrdiff_t *shape = plan->row_shape;
    ptrdiff_t index[SINPE_MAX_DIMS];
    const ptrdiff_t q1 = band_start(plan, band, index), q0 = index[q];
    /* C-order strides of the inner axes (every axis but a), and the rows a
     * band holds after axis q */
    ptrdiff_t stride = 1, start = 0, trailing = 1;
    for (int k = r - 1; k >= 0; --k) {
        if (k == a) {
            continue;
        }
        if (k <= q) {
            start += index[k] * stride;
        } else {
            trailing *= shape[k];
        }
        stride *= shape[k];
    }
    o[0] = a < q ? index[a] : a == q ? q0 : 0;
    o[1] = a < q ? index[a] + 1 : a == q ? q1 : shape[a];
    j[0] = start;
    j[1] = start + trailing * (a == q ? 1 : q1 - q0);
}

/* Band `band`, assembled (plan.c's plan_assembly): each group's rows of the
 * band's positions made into the worker's tile (kept while the next band
 * needs the same), then every row of the band, a run of C-order rows, its
 * groups' columns copied from the tiles in address order. */
static void assemble_band(const plan_t *plan, int worker, ptrdiff_t band)
{
    tile_t tiles[SINPE_MAX_DIMS];
    ptrdiff_t lo[SINPE_MAX_DIMS];
    for (int i = 0; i < plan->ngroups; ++i) {
        const group_t *g = &plan->groups[i];
        ptrdiff_t o[2], j[2];
        band_ranges(plan, g, band, o, j);
        tile_layout(plan, g, worker, 0, &tiles[i]);
        tiles[i].data += g->tile_at;
        ptrdiff_t *held = plan->held + 2 * ((size_t)worker * (size_t)plan->ngroups + (size_t)i);
        if (held[0] != o[0] || held[1] != o[1]) {
            fill_tile(plan, g, worker, 0, &tiles[i], 0, 1, g->offset + o[0], o[1] - o[0], 0.0);
            held[0] = o[0], held[1] = o[1];
        }
        lo[i] = o[0];
    }
    const int q = plan->band_axis, r = plan->row_axes;
    ptrdiff_t index[SINPE_MAX_DIMS], rows = band_start(plan, band, index) - index[q];
    for (int k = r - 1; k > q; --k) {
        rows *= plan->row_shape[k];
    }
    const size_t itemsize = tiles[0].itemsize;
    for (ptrdiff_t f = 0; f < rows; ++f) {
        char *row = plan->target[0].data;
        for (int k = 0; k < r; ++k) {
            row += index[k] * plan->row_bstride[k];
        }
        for (int i = 0; i < plan->ngroups; ++i) {
            const tile_t *t = &tiles[i];
            const char *made = t->data + (index[plan->groups[i].axis] - lo[i]) * t->row_bytes;
            for (int u = 0; u < t->nruns; ++u) {
                memcpy(row + t->runs[u].col * (ptrdiff_t)itemsize,
                       made + t->runs[u].off * (ptrdiff_t)itemsize,
                       (size_t)t->runs[u].count * itemsize);
            }
        }
        for (int k = r - 1; k >= 0 && ++index[k] == plan->row_shape[k]; --k) { /* the next row */
            index[k] = 0;
        }
    }
}

/* ------------------------------------------------------------------ */

void sinpe_plan_chunk(void *context, ptrdiff_t chunk, int worker)
{
    const plan_t *plan = context;
    if (plan->sections.count > 0) { /* sections.c */
        sinpe_sections_chunk(plan, chunk, worker);
        return;
    }
    if (plan->rotating) { /* rotate.c */
        sinpe_rotate_chunk(plan, chunk, worker);
        return;
    }
    if (plan->cut == CUT_BANDS && plan->assemble) {
        assemble_band(plan, worker, chunk);
        return;
    }
    if (plan->cut == CUT_BANDS) {
        for (int i = 0; i < plan->ngroups; ++i) {
            const group_t *g = &plan->groups[i];
            ptrdiff_t o[2], j[2];
            band_ranges(plan, g, chunk, o, j);
            for (ptrdiff_t tile = 0; tile < g->ntiles; ++tile) {
                store_range(plan, g, worker, tile, o[0], o[1], j[0], j[1]);
            }
        }
        return;
    }
    if (plan->cut == CUT_WINDOWS) {
        ptrdiff_t l[2], b[2];
        const ptrdiff_t tile = window_of_chunk(plan, chunk, l, b);
        add_window(plan, worker, tile, l[0], l[1], b[0], b[1]);
        return;
    }
    const group_t *g = &plan->groups[0];
    const ptrdiff_t per_tile = plan->spans * plan->parts;
    const ptrdiff_t within = chunk % per_tile;
    const ptrdiff_t span = plan->parts_first ? within % plan->spans : within / plan->parts;
    const ptrdiff_t part = plan->parts_first ? within / plan->spans : within % plan->parts;
    const ptrdiff_t i0 = span == 0 ? 0 : span * plan->span - plan->shift;
    const ptrdiff_t i1 = min_ptrdiff((span + 1) * plan->span - plan->shift, g->outer_count);
    const ptrdiff_t j0 = part * plan->per_part;
    const ptrdiff_t j1 = min_ptrdiff(j0 + plan->per_part, g->inner_count);
    if (plan->adding) {
        add_span(plan, worker, chunk / per_tile, i0, i1, j0, j1);
    } else {
        store_range(plan, g, worker, chunk / per_tile, i0, i1, j0, j1);
    }
}
