/*
 * Internal: what executing a chunk of a plan needs, shared by the stores and
 * adds (run.c) and the rotations (rotate.c): each worker's scratch, the
 * anchors and step rows of a frequency tile, cursors over row axes, and the
 * position of an outer row.  Not public API.
 */
#ifndef SINPE_WALK_H
#define SINPE_WALK_H

#include <stddef.h>
#include <stdint.h>

#include "plan/plan.h"
#include "core/sincos.h"
#include "core/table.h"

/* ------------------------------------------------------------------ */
/* Scratch, anchors and step rows. */

typedef struct {
    double *sin, *cos;   /* [2 * tile_freqs]: anchors (of two blocks), or a
                          * non-integral row's values */
    const double *s0, *c0; /* the anchors anchor() gave: sin, cos, or the
                            * table's kept ones (sinpe_anchors_hold) */
    double *tmp;         /* [4 * tile_freqs]: the row writers' scratch */
    double *step_buffer; /* a wide table's step rows */
} scratch_t;

static inline scratch_t scratch_of(const plan_t *plan, int worker)
{
    const ptrdiff_t f = plan->tile_freqs;
    double *p = plan->scratch + (size_t)worker * plan->scratch_doubles;
    scratch_t s;
    s.sin = p, p += 2 * f;
    s.cos = p, p += 2 * f;
    s.s0 = s.sin, s.c0 = s.cos;
    s.tmp = p, p += 4 * f;
    s.step_buffer = p;
    return s;
}

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
        sinpe_anchor_sincos(g->table, p0, k0, k1, s->sin, s->cos);
        return;
    }
    for (ptrdiff_t k = k0; k < k1; ++k) { /* the angle's own sincos, one rounding */
        sinpe_sincos(x * g->table->freq[k], &s->sin[k - k0], &s->cos[k - k0]);
    }
}

/* The step rows of tile [k0, k1) of group g: a view into the table, or for a
 * wide table built into the worker's buffer (tile-major chunk order: a
 * worker rebuilds them only when its group or tile changes). */
static inline sinpe_steps steps_of(const plan_t *plan, const group_t *g, int worker,
                                   ptrdiff_t tile, ptrdiff_t k0, ptrdiff_t k1, double *buffer)
{
    sinpe_steps steps = {NULL, NULL, 0};
    if (g->table == NULL) {
        return steps;
    }
    const ptrdiff_t key = tile * plan->ngroups + (g - plan->groups);
    const uint32_t residues = plan->built[worker] != key ? g->residues : 0;
    plan->built[worker] = key;
    return sinpe_steps_for(g->table, k0, k1, residues, buffer);
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

/* The rows of chunk `chunk` of a windows cut (plan.c's cut_windows; chunks
 * go tile-major, then windows, then parts): frequency tile *tile, window
 * [l[0], l[1]) of the innermost row axis, leading rows [b[0], b[1]). */
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

#endif /* SINPE_WALK_H */
