/*
 * A grid's bands (sinpe.h's split and order; the bands cut of
 * plan/grid.c): whole rows, a span of one row axis with every index of the
 * axes after it, written by every group while the band is in the caches.
 * Into plain rows a band is assembled: each group's rows of the band's
 * positions made once into its tile (exec/tile.h), then every row copied
 * together from the tiles in address order; otherwise each group stores
 * its columns of the band (exec/store.c).
 */
#include "core/platform.h"

#include <string.h>

#include "exec/actions.h"
#include "exec/tile.h"
#include "exec/walk.h"

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

/* Band `band`, assembled (plan/grid.c's plan_assembly): each group's rows of the
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
        sinpe_tile_layout(plan, g, worker, 0, &tiles[i]);
        tiles[i].data += g->tile_at;
        ptrdiff_t *held = plan->held + 2 * ((size_t)worker * (size_t)plan->ngroups + (size_t)i);
        if (held[0] != o[0] || held[1] != o[1]) {
            sinpe_tile_fill(plan, g, worker, 0, &tiles[i], 0, 1, g->offset + o[0], o[1] - o[0], 0.0);
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

void sinpe_band_chunk(const plan_t *plan, ptrdiff_t chunk, int worker)
{
    if (plan->assemble) {
        assemble_band(plan, worker, chunk);
        return;
    }
    for (int i = 0; i < plan->ngroups; ++i) {
        const group_t *g = &plan->groups[i];
        ptrdiff_t o[2], j[2];
        band_ranges(plan, g, chunk, o, j);
        for (ptrdiff_t tile = 0; tile < g->ntiles; ++tile) {
            sinpe_store_range(plan, g, worker, tile, o[0], o[1], j[0], j[1]);
        }
    }
}
