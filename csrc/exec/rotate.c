/*
 * Rotations: the plan's action beside stores and adds (sinpe.h's rotate:
 * rope_, and apply_rotary_pos_emb's given caches), run chunk by chunk on
 * the cut plan/rotation.c makes.
 *
 * By its own caches.  A chunk (a span of range positions, or a window of
 * explicit ones, as for adds) makes the RoPE cache rows of its positions
 * into the worker's tile (exec/rot_tile.h), or finds them kept
 * (core/row_cache.h); then every copy of those positions (the batch, the
 * heads) is rotated from the tile in address order by the rotation loop
 * (kernels/rows.h): caches made once per chunk, never batch-sized, and the
 * rotation about one pass over x.
 *
 * By given caches.  No tile: each run of rows along the last row axis is
 * one call of the same loop, reading the caches through their (broadcast)
 * strides.
 *
 * Out of place (a source), the columns past the rotary ones are copied
 * from the source by frequency tile 0.
 */
#include "core/platform.h"

#include "exec/actions.h"
#include "exec/rot_tile.h"
#include "exec/walk.h"

/* Range positions: outer rows i0 .. i1 - 1 (one tile of them) of every
 * copy j0 .. j1 - 1, one call of the rotation loop per run of copies along
 * the innermost copy axis.  When a copy's rows are closer together than a
 * row's copies ((B, H, L, D)) the call walks the tile's rows for the run's
 * heads (the loop takes a few heads at a time, each cache row read once for
 * them); else (the heads of (B, L, H, D) with axis=1) it is one call per
 * position, the run's rows sharing one cache row.  A single position (a
 * decoding step) takes the second way: one call for the heads. */
static void rotate_span(const plan_t *plan, int worker, ptrdiff_t tile, ptrdiff_t i0,
                        ptrdiff_t i1, ptrdiff_t j0, ptrdiff_t j1)
{
    const group_t *g = &plan->groups[0];
    rot_tile_t t;
    sinpe_rot_tile_layout(plan, g, worker, tile, &t);
    if (plan->made != NULL) { /* the kept rows of these positions (one frequency tile) */
        t.data = plan->made->data + (g->offset + i0 - plan->made->first) * t.row_bytes;
    } else {
        sinpe_rot_tile_fill(plan, g, worker, tile, &t, 0, 1, g->offset + i0, i1 - i0, 0.0);
    }
    const int inner_last = g->inner.naxes - 1;
    const ptrdiff_t outer_stride = g->outer.bstride[0][0], src_outer = g->outer.bstride[1][0];
    const ptrdiff_t inner_stride = inner_last >= 0 ? g->inner.bstride[0][inner_last] : 0;
    const ptrdiff_t src_inner = inner_last >= 0 ? g->inner.bstride[1][inner_last] : 0;
    char *data = plan->target[0].data;
    const char *source = plan->rot.source;
    cursor_t oc, ic;
    cursor_seek(&g->outer, &oc, i0);
    cursor_seek(&g->inner, &ic, j0);
    if (inner_last < 0 || (i1 - i0 > 1 && abs_ptrdiff(outer_stride) <= abs_ptrdiff(inner_stride))) {
        /* each run of copies along the innermost copy axis in one call: the
         * loop rotates a cache row's copies one after the other */
        for (ptrdiff_t j = j0; j < j1;) {
            const ptrdiff_t run = inner_last < 0 ? 1
                                  : min_ptrdiff(j1 - j, g->inner.shape[inner_last] -
                                                            ic.index[inner_last]);
            const sinpe_rotate_shape shape = {i1 - i0, run, inner_stride, src_inner};
            sinpe_rot_tile_rotate(plan, g, &t, t.data, t.row_bytes,
                                  data + oc.off[0] + ic.off[0], outer_stride,
                                  source != NULL ? source + oc.off[1] + ic.off[1] : NULL,
                                  src_outer, shape);
            if (inner_last < 0) {
                break;
            }
            cursor_advance(&g->inner, &ic, run);
            j += run;
        }
        return;
    }
    for (ptrdiff_t j = j0; j < j1;) {
        const ptrdiff_t run = min_ptrdiff(j1 - j, g->inner.shape[inner_last] - ic.index[inner_last]);
        const sinpe_rotate_shape shape = {run, 1, 0, 0};
        for (ptrdiff_t i = i0; i < i1; ++i) {
            const ptrdiff_t o = (i - i0) * outer_stride + oc.off[0] + ic.off[0];
            const ptrdiff_t os = (i - i0) * src_outer + oc.off[1] + ic.off[1];
            sinpe_rot_tile_rotate(plan, g, &t, t.data + (i - i0) * t.row_bytes, 0, data + o,
                                  inner_stride, source != NULL ? source + os : NULL, src_inner,
                                  shape);
        }
        cursor_advance(&g->inner, &ic, run);
        j += run;
    }
}

/* Explicit positions: window [l0, l1) of the innermost row axis in the
 * leading rows b0 .. b1 - 1.  The window's integer positions are made once
 * as one range when they fit in the tile, and each row finds its cache row
 * there: a run of rows whose positions count up, or repeat (the heads of a
 * broadcast position), is one call.  A row outside the range, or at a
 * non-integral position, gets the tile's spare row. */
static void rotate_window(const plan_t *plan, int worker, ptrdiff_t tile, ptrdiff_t l0,
                          ptrdiff_t l1, ptrdiff_t b0, ptrdiff_t b1)
{
    const group_t *g = &plan->groups[0];
    const ptrdiff_t length = plan->length;
    int64_t lo, hi;
    window_range(plan, g, l0, l1, b0, b1, &lo, &hi);
    rot_tile_t t;
    const int ranged = sinpe_rot_tile_range(plan, g, worker, tile, &t, lo, hi);
    const int last = g->outer.naxes - 1;
    const ptrdiff_t stride = g->outer.bstride[0][last], src_stride = g->outer.bstride[1][last];
    char *data = plan->target[0].data;
    const char *source = plan->rot.source;
    cursor_t oc;
    for (ptrdiff_t b = b0; b < b1; ++b) {
        cursor_seek(&g->outer, &oc, b * length + l0);
        const ptrdiff_t end = b * length + l1;
        for (ptrdiff_t i = b * length + l0; i < end;) {
            char *row = data + oc.off[0];
            const char *src = source != NULL ? source + oc.off[1] : NULL;
            int64_t p, q;
            double x;
            const int is_int = position_of(plan, g, i, &p, &x);
            ptrdiff_t run = 1;
            if (ranged && is_int) {
                /* a step of 1 (counting) or 0 (repeating), from the next row */
                const int64_t step = i + 1 < end && position_of(plan, g, i + 1, &q, &x) &&
                                             (q == p || q == p + 1)
                                         ? q - p
                                         : 1;
                while (i + run < end && position_of(plan, g, i + run, &q, &x) &&
                       q == p + step * run) {
                    ++run;
                }
                const sinpe_rotate_shape shape = {run, 1, 0, 0};
                sinpe_rot_tile_rotate(plan, g, &t, t.data + (p - lo) * t.row_bytes,
                                      step * t.row_bytes, row, stride, src, src_stride, shape);
            } else {
                sinpe_rot_tile_fill(plan, g, worker, tile, &t, plan->tile_rows, is_int, p, 1, x);
                const sinpe_rotate_shape one = {1, 1, 0, 0};
                sinpe_rot_tile_rotate(plan, g, &t, t.data + plan->tile_rows * t.row_bytes, 0, row,
                                      0, src, 0, one);
            }
            cursor_advance(&g->outer, &oc, run);
            i += run;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Given caches: C-order rows [f0, f1) of every row axis, in runs along the
 * last one. */
static void rotate_given(const plan_t *plan, ptrdiff_t f0, ptrdiff_t f1)
{
    const rotation_t *rot = &plan->rot;
    const sinpe_row_format *x_fmt = &plan->target[0].fmt;
    const sinpe_row_format *src_fmt = rot->source != NULL ? &rot->source_fmt : NULL;
    const ptrdiff_t half = rot->dim / 2;
    const sinpe_rotation r = {x_fmt, src_fmt, &rot->cos_fmt, &rot->sin_fmt, rot->interleaved,
                              half, half, half};
    const int last = rot->naxes - 1;
    ptrdiff_t index[SINPE_MAX_DIMS], off[4] = {0, 0, 0, 0}, stride[4] = {0, 0, 0, 0};
    ptrdiff_t rest = f0;
    for (int i = last; i >= 0; --i) {
        index[i] = rest % rot->shape[i];
        rest /= rot->shape[i];
        for (int a = 0; a < 4; ++a) {
            off[a] += index[i] * rot->bstride[a][i];
            stride[a] = i == last ? rot->bstride[a][i] : stride[a];
        }
    }
    char *data = plan->target[0].data;
    for (ptrdiff_t f = f0; f < f1;) {
        const ptrdiff_t run = last >= 0 ? min_ptrdiff(f1 - f, rot->shape[last] - index[last]) : 1;
        const char *src = rot->source != NULL ? rot->source + off[1] : NULL;
        const sinpe_rotate_shape shape = {run, 1, 0, 0};
        sinpe_rotate_rows(&r, data + off[0], stride[0], src, stride[1], rot->cos + off[2],
                          stride[2], rot->sin + off[3], stride[3], shape);
        if (src != NULL && rot->dim < plan->d) {
            sinpe_copy_rows(x_fmt, data + off[0] + rot->dim * x_fmt->col_stride, stride[0],
                            src_fmt, src + rot->dim * src_fmt->col_stride, stride[1], run,
                            plan->d - rot->dim);
        }
        f += run;
        if (last < 0) {
            break;
        }
        /* past the run along the last axis, carried into the axes before it */
        index[last] += run;
        for (int a = 0; a < 4; ++a) {
            off[a] += run * stride[a];
        }
        for (int i = last; i > 0 && index[i] == rot->shape[i]; --i) {
            index[i] = 0;
            ++index[i - 1];
            for (int a = 0; a < 4; ++a) {
                off[a] += rot->bstride[a][i - 1] - rot->shape[i] * rot->bstride[a][i];
            }
        }
    }
}

/* ------------------------------------------------------------------ */

void sinpe_rotate_chunk(const plan_t *plan, ptrdiff_t chunk, int worker)
{
    if (plan->cut == CUT_ROWS) {
        const ptrdiff_t f0 = chunk * plan->span;
        rotate_given(plan, f0, min_ptrdiff(f0 + plan->span, plan->rot.rows));
        return;
    }
    if (plan->cut == CUT_WINDOWS) {
        ptrdiff_t l[2], b[2];
        const ptrdiff_t tile = window_of_chunk(plan, chunk, l, b);
        rotate_window(plan, worker, tile, l[0], l[1], b[0], b[1]);
        return;
    }
    ptrdiff_t i[2], j[2];
    const ptrdiff_t tile = span_of_chunk(plan, &plan->groups[0], chunk, i, j);
    rotate_span(plan, worker, tile, i[0], i[1], j[0], j[1]);
}
