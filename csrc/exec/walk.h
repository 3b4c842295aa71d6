/*
 * The walks every action of the executor shares (stores, adds, bands,
 * rotations, sections): the anchors and step rows of a frequency tile, the
 * columns a target receives from it, cursors over row axes, the position
 * of an outer row, which rows a chunk of each cut holds, and the rows of a
 * run of positions made block by block.  Inline: they run per block or
 * per row.  Not public API.
 */
#ifndef SINPE_EXEC_WALK_H
#define SINPE_EXEC_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "core/sincos.h"
#include "core/table.h"
#include "exec/work.h"
#include "kernels/kernels.h"
#include "kernels/rows.h"

/* ------------------------------------------------------------------ */
/* Anchors and step rows. */

/* The anchors of tile [k0, k1) for an integer position's block start p0, or
 * for a non-integral position x itself (then they are its values). */
static inline void anchor(const plan_t *plan, const group_t *g, scratch_t *s, ptrdiff_t k0,
                          ptrdiff_t k1, int is_int, int64_t p0, double x)
{
    const sinpe_anchors *kept = plan->anchors;
    if (is_int && kept != NULL && kept->p0 == p0 && g->table == plan->groups[0].table) {
        s->s0 = kept->sin + k0, s->c0 = kept->cos + k0;
        return;
    }
    s->s0 = s->sin, s->c0 = s->cos;
    if (is_int) {
        sinpe_sincos_row(g->table->freq + k0, (double)p0, k1 - k0, s->sin, s->cos);
        return;
    }
    for (ptrdiff_t k = k0; k < k1; ++k) { /* the angle's own sincos, one rounding */
        sinpe_sincos(x * g->table->freq[k], &s->sin[k - k0], &s->cos[k - k0]);
    }
}

/* The step rows of tile [k0, k1) of group g: a view into the table, or for a
 * wide table (core/table.h) the rows of the residues it needs built into
 * the worker's buffer (tile-major chunk order: a worker rebuilds them only
 * when its group or tile changes). */
static inline sinpe_steps steps_of(const plan_t *plan, const group_t *g, int worker,
                                   ptrdiff_t tile, ptrdiff_t k0, ptrdiff_t k1, double *buffer)
{
    sinpe_steps steps = {NULL, NULL, 0};
    const sinpe_table *table = g->table;
    if (table == NULL) {
        return steps;
    }
    const ptrdiff_t key = tile * plan->ngroups + (g - plan->groups);
    const uint32_t residues = plan->built[worker] != key ? g->residues : 0;
    plan->built[worker] = key;
    if (table->step_c != NULL) {
        steps.c = table->step_c + k0;
        steps.s = table->step_s + k0;
        steps.stride = table->nfreq;
        return steps;
    }
    const ptrdiff_t stride = k1 - k0;
    double *c = buffer, *s = buffer + SINPE_BLOCK_ROWS * stride;
    for (int r = 0; r < SINPE_BLOCK_ROWS; ++r) {
        if (residues & (1u << r)) {
            sinpe_sincos_row(table->freq + k0, (double)r, stride, s + r * stride, c + r * stride);
        }
    }
    steps.c = c;
    steps.s = s;
    steps.stride = stride;
    return steps;
}

/* The columns a target of `kind` receives from tile [k0, k1) of group g,
 * its values times scale. */
static inline sinpe_pairs pairs_of(const group_t *g, int kind, ptrdiff_t k0, ptrdiff_t k1,
                                   double scale)
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
static inline ptrdiff_t unused_columns(const group_t *g, ptrdiff_t *count)
{
    const ptrdiff_t m = g->nfreq;
    const ptrdiff_t used = g->interleaved ? min_ptrdiff(2 * m, g->width)
                                          : m + min_ptrdiff(m, g->width - m);
    *count = g->width - used;
    return g->col + used;
}

/* The rows of integer positions first .. first + rows - 1 of tile [k0, k1),
 * block by block (each block's anchors, then its rows in one pass), into
 * the targets, whose rows start at position first's. */
static inline void store_positions(const plan_t *plan, const group_t *g, scratch_t *s,
                                   const sinpe_steps *steps, ptrdiff_t k0, ptrdiff_t k1,
                                   const sinpe_pair_target *targets, int ntargets, int64_t first,
                                   ptrdiff_t rows)
{
    for (int64_t p = first; p < first + rows;) {
        const int64_t p0 = sinpe_block_start(p);
        const int r0 = (int)(p - p0);
        const int r1 = (int)min_ptrdiff(SINPE_BLOCK_ROWS, first + rows - p0);
        anchor(plan, g, s, k0, k1, 1, p0, 0.0);
        sinpe_pair_target at[2];
        for (int t = 0; t < ntargets; ++t) {
            at[t] = targets[t];
            at[t].row += (p - first) * targets[t].row_stride;
        }
        sinpe_store_pairs(at, ntargets, steps, r0, r1, 1, s->s0, s->c0, s->tmp);
        p = p0 + r1;
    }
}

/* ------------------------------------------------------------------ */
/* Cursors over row axes. */

static inline void cursor_seek(const axes_t *ax, cursor_t *c, ptrdiff_t flat)
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

static inline void cursor_step(const axes_t *ax, cursor_t *c)
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

static inline void cursor_advance(const axes_t *ax, cursor_t *c, ptrdiff_t steps)
{
    for (ptrdiff_t q = 0; q < steps; ++q) {
        cursor_step(ax, c);
    }
}

/* The position of outer row i of group g: *p for an integer (or integral
 * float) position, else *x; returns 1 for an integer. */
static inline int position_of(const plan_t *plan, const group_t *g, ptrdiff_t i, int64_t *p,
                              double *x)
{
    *x = 0.0;
    if (g->axis >= 0) {
        *p = g->offset + i;
        return 1;
    }
    if (plan->ints != NULL) {
        *p = plan->ints[i];
        return 1;
    }
    *x = plan->reals[i];
    *p = (int64_t)*x; /* |x| <= 2**24: defined */
    return *x == (double)*p; /* integral: the integer path, bits of the table */
}

/* The rows of chunk `chunk` of a windows cut (plan/cut.c's
 * sinpe_plan_cut_windows; chunks go tile-major, then windows, then parts):
 * window [l[0], l[1]) of the innermost row axis, leading rows [b[0], b[1]);
 * returns the frequency tile. */
static inline ptrdiff_t window_of_chunk(const plan_t *plan, ptrdiff_t chunk, ptrdiff_t l[2],
                                        ptrdiff_t b[2])
{
    const ptrdiff_t per_tile = plan->windows * plan->parts;
    const ptrdiff_t w = chunk % per_tile / plan->parts, part = chunk % plan->parts;
    l[0] = w * plan->window;
    l[1] = min_ptrdiff(l[0] + plan->window, plan->length);
    b[0] = part * plan->per_part;
    b[1] = min_ptrdiff(b[0] + plan->per_part, plan->leads);
    return chunk / per_tile;
}

/* The rows of chunk `chunk` of a spans cut (plan/cut.c; chunks go
 * tile-major, then span by span, or part by part with parts_first): outer
 * rows [i[0], i[1]) and inner rows [j[0], j[1]) of group g; returns the
 * frequency tile. */
static inline ptrdiff_t span_of_chunk(const plan_t *plan, const group_t *g, ptrdiff_t chunk,
                                      ptrdiff_t i[2], ptrdiff_t j[2])
{
    const ptrdiff_t per_tile = plan->spans * plan->parts;
    const ptrdiff_t within = chunk % per_tile;
    const ptrdiff_t span = plan->parts_first ? within % plan->spans : within / plan->parts;
    const ptrdiff_t part = plan->parts_first ? within / plan->spans : within % plan->parts;
    i[0] = span == 0 ? 0 : span * plan->span - plan->shift;
    i[1] = min_ptrdiff((span + 1) * plan->span - plan->shift, g->outer_count);
    j[0] = part * plan->per_part;
    j[1] = min_ptrdiff(j[0] + plan->per_part, g->inner_count);
    return chunk / per_tile;
}

/* The integer positions of window [l0, l1) of the innermost row axis in the
 * leading rows b0 .. b1 - 1 (padded rows left out): [*lo, *hi], or lo > hi
 * when there is none. */
static inline void window_range(const plan_t *plan, const group_t *g, ptrdiff_t l0, ptrdiff_t l1,
                                ptrdiff_t b0, ptrdiff_t b1, int64_t *lo, int64_t *hi)
{
    const ptrdiff_t length = plan->length;
    *lo = INT64_MAX, *hi = INT64_MIN;
    for (ptrdiff_t b = b0; b < b1; ++b) {
        for (ptrdiff_t i = b * length + l0; i < b * length + l1; ++i) {
            int64_t p;
            double x;
            if ((plan->padding == NULL || !plan->padding[i]) && position_of(plan, g, i, &p, &x)) {
                *lo = p < *lo ? p : *lo;
                *hi = p > *hi ? p : *hi;
            }
        }
    }
}

#endif /* SINPE_EXEC_WALK_H */
