/*
 * Stores: the rows of a table, or of RoPE's two caches, written into the
 * outputs (sinpe.h's tables without add, rope's caches, a grid's groups).
 *
 * A chunk walks its outer rows in order.  Where positions count up within
 * a block (always for range positions, in runs for explicit ones), the
 * rows of a block (of two whole blocks of range positions: one pass over
 * the steps) are one call to the pair writer (kernels/rows.h), with the
 * anchors computed once per block; a position with many copies (a grid's
 * leading axis) holds its step row and strides over the copies.  Other
 * rows (padding, non-integral positions) are written one at a time.
 *
 * Columns.  Every layout takes each frequency's sine and cosine
 * (core/table.h), computed once per frequency and row, to the columns it
 * wants: the table interleaved (2k, 2k + 1) or split (sin_col + k,
 * cos_col + k), a RoPE cache one of them twice, and RoPE's two caches from
 * one computation (exec/walk.h's pairs_of).  A value so depends only on
 * (p, w) and lands where the layout wants it.  A non-integral position has
 * no block: its sin/cos are computed directly and stored as they are.
 */
#include "core/platform.h"

#include "core/table.h"
#include "exec/actions.h"
#include "exec/walk.h"

static const double zero_value = 0.0;

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

void sinpe_store_range(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
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
            sinpe_sincos_row(g->table->freq + k0, (double)(p0 + SINPE_BLOCK_ROWS), k1 - k0,
                             s.sin + (k1 - k0), s.cos + (k1 - k0));
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
                               blocks, 1, first_tile);
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

void sinpe_store_chunk(const plan_t *plan, ptrdiff_t chunk, int worker)
{
    const group_t *g = &plan->groups[0];
    ptrdiff_t i[2], j[2];
    const ptrdiff_t tile = span_of_chunk(plan, g, chunk, i, j);
    sinpe_store_range(plan, g, worker, tile, i[0], i[1], j[0], j[1]);
}
