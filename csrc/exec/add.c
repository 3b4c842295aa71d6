/*
 * Adds: the table added to the rows of an array in place, in the array's
 * own arithmetic (sinpe.h's add).
 *
 * A chunk makes the table rows of a range of positions, as elements of the
 * array's own dtype, in a tile of at most a few hundred KB per worker
 * (exec/tile.h: the same writer as stores), then adds that tile to every
 * copy of those positions in address order with the rows' plain add loop
 * (kernels/rows.h): the table is made once per chunk, never batch-sized,
 * and the add runs in the array's arithmetic.  A table kept from earlier
 * calls (core/row_cache.h) is read as such a tile.  Positions one per row
 * (windows cut) look their row up in the tile when the window's positions
 * fit, else get a row of their own.
 */
#include "core/platform.h"

#include "exec/actions.h"
#include "exec/tile.h"
#include "exec/walk.h"

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
        sinpe_tile_of_made(plan, g->offset + i0, &t);
    } else {
        sinpe_tile_layout(plan, g, worker, tile, &t);
        sinpe_tile_fill(plan, g, worker, tile, &t, 0, 1, g->offset + i0, i1 - i0, 0.0);
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
    if (plan->made != NULL) { /* it holds every row's position (plan/plan.c) */
        lo = plan->made->first;
        hi = lo + plan->made->count - 1;
        ranged = 1;
        sinpe_tile_of_made(plan, lo, &t);
    } else {
        window_range(plan, g, l0, l1, b0, b1, &lo, &hi);
        ranged = lo <= hi && hi - lo < plan->tile_rows;
        sinpe_tile_layout(plan, g, worker, tile, &t);
        if (ranged) {
            sinpe_tile_fill(plan, g, worker, tile, &t, 0, 1, lo, hi - lo + 1, 0.0);
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
                sinpe_tile_fill(plan, g, worker, tile, &t, plan->tile_rows, is_int, p, 1, x);
                add_tile(plan, &t, plan->tile_rows, 0, row, 0, 1);
            }
            cursor_advance(&g->outer, &oc, run);
            i += run;
        }
    }
}

void sinpe_add_chunk(const plan_t *plan, ptrdiff_t chunk, int worker)
{
    if (plan->cut == CUT_WINDOWS) {
        ptrdiff_t l[2], b[2];
        const ptrdiff_t tile = window_of_chunk(plan, chunk, l, b);
        add_window(plan, worker, tile, l[0], l[1], b[0], b[1]);
        return;
    }
    ptrdiff_t i[2], j[2];
    const ptrdiff_t tile = span_of_chunk(plan, &plan->groups[0], chunk, i, j);
    add_span(plan, worker, tile, i[0], i[1], j[0], j[1]);
}
