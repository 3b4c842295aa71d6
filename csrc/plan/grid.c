/*
 * A grid's share of the plan (sinpe.h's split and order; exec/work.h's
 * bands cut): its checks, and its cut into bands of whole rows, assembled
 * from per-group tiles when the rows are plain (exec/bands.c runs them).
 * Everything else of the call is plan/plan.c's.
 */
#include "core/platform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/elements.h"
#include "plan/cut.h"
#include "plan/grid.h"

/* A grid's band of whole rows, written by every axis while it is cached:
 * a quarter of L2 (1 MB bands ran 1.18x encode's time for (8, 32, 32) x
 * 768 on the AMD EPYC, 256 KB 1.05x). */
#ifndef BAND_BYTES /* overridable for measurements, as STREAM_MIN_BYTES */
#define BAND_BYTES ((double)(256 << 10))
#endif

/* The grid of a call (sinpe.h): every row axis a grid axis, encoded by a
 * width split[a] >= 1 (even for SINPE_SINES_FIRST) in the order `order`,
 * the widths summing to d, no other positions. */
int sinpe_plan_check_grid(const sinpe_plan *p, const sinpe_array *out)
{
    const int r = out->ndim - 1;
    if (p->order == NULL || r < 1 || p->pos_axis != 0 || p->offset != 0 || p->ints != NULL ||
        p->reals != NULL || p->padding != NULL) {
        return SINPE_ERR_INVALID;
    }
    int seen[SINPE_MAX_DIMS] = {0};
    ptrdiff_t total = 0;
    for (int a = 0; a < r; ++a) {
        const ptrdiff_t w = p->split[a];
        if (p->order[a] < 0 || p->order[a] >= r || seen[p->order[a]]++ || w < 1 ||
            w > out->shape[r] || (p->layout == SINPE_SINES_FIRST && w % 2 != 0) ||
            out->shape[a] > SINPE_MAX_POSITION + 1) {
            return SINPE_ERR_INVALID;
        }
        total += w; /* each <= d, at most 63 terms: no overflow */
    }
    return total == out->shape[r] ? SINPE_OK : SINPE_ERR_INVALID;
}

static void cut_bands(plan_t *plan, const sinpe_array *out, double row_bytes, double rows)
{
    plan->cut = CUT_BANDS;
    /* the band: the first axis q whose trailing rows fit, and a span of it */
    const int r = out->ndim - 1;
    double trailing = rows;
    int q = 0;
    for (; q < r - 1; ++q) {
        trailing /= (double)out->shape[q];
        if (trailing * row_bytes <= BAND_BYTES) {
            break;
        }
    }
    if (q == r - 1) {
        trailing = 1.0;
    }
    plan->band_axis = q;
    plan->row_axes = r;
    memcpy(plan->row_shape, out->shape, (size_t)r * sizeof(ptrdiff_t));
    plan->span = count_in(floor(BAND_BYTES / (trailing * row_bytes)), out->shape[q]);
    plan->spans = ceil_div(out->shape[q], plan->span);
    plan->chunks = plan->spans; /* bands = rows / (trailing * span) at most: fits */
    for (int k = 0; k < q; ++k) {
        plan->chunks *= out->shape[k];
    }
    const double band_bytes = trailing * (double)plan->span * row_bytes;
    plan->cancel_period = count_in(ceil(CANCEL_BYTES / (band_bytes + 1.0)), 1000000000);
}

/* Bands whose rows are assembled from per-group tiles (exec/bands.c): one target
 * of plain elements (native order, contiguous columns) and one frequency
 * tile per group.  A group's tile holds the rows of the positions a band
 * can need: one (its axis before the band's), the span, or its whole axis
 * (after the band's, whose rows the band holds all of): at most about two
 * bands' bytes.  On the AMD EPYC a grid's rows written group by group over
 * the band (1 KB pieces) ran about 1.4x the default table of the same
 * bytes; copied whole in address order they run as fast as it. */
static int plan_assembly(plan_t *plan, const sinpe_array *out)
{
    const sinpe_row_format *fmt = &plan->target[0].fmt;
    const size_t itemsize = sinpe_itemsize(fmt->dtype);
    int plain = plan->ntargets == 1 && !fmt->swapped && fmt->col_stride == (ptrdiff_t)itemsize;
    for (int g = 0; g < plan->ngroups; ++g) {
        plain &= plan->groups[g].ntiles == 1;
    }
    if (!plain) {
        return SINPE_OK;
    }
    /* Overflow-checked: a view with zero strides can describe far more
     * rows than memory holds (such a call fails here, as NOMEM). */
    size_t bytes = 0, group_bytes, all_bytes;
    int overflow = 0;
    for (int i = 0; i < plan->ngroups; ++i) {
        group_t *g = &plan->groups[i];
        const ptrdiff_t rows = g->axis < plan->band_axis    ? 1
                               : g->axis == plan->band_axis ? plan->span
                                                            : out->shape[g->axis];
        g->tile_at = bytes;
        overflow |= sinpe_mul_overflow((size_t)rows, (size_t)g->width * itemsize, &group_bytes);
        overflow |= sinpe_add_overflow(group_bytes, 63, &group_bytes); /* whole lines */
        overflow |= sinpe_add_overflow(bytes, group_bytes - group_bytes % 64, &bytes);
    }
    overflow |= sinpe_mul_overflow((size_t)plan->threads, bytes, &all_bytes);
    if (overflow) {
        return SINPE_ERR_NOMEM;
    }
    plan->tile_bytes = bytes;
    plan->tiles = malloc(all_bytes);
    plan->held = malloc((size_t)plan->threads * (size_t)plan->ngroups * 2 * sizeof(ptrdiff_t));
    if (plan->tiles == NULL || plan->held == NULL) {
        return SINPE_ERR_NOMEM;
    }
    for (size_t k = 0; k < (size_t)plan->threads * (size_t)plan->ngroups * 2; ++k) {
        plan->held[k] = -1;
    }
    memcpy(plan->row_bstride, out->strides, (size_t)plan->row_axes * sizeof(ptrdiff_t));
    plan->assemble = 1;
    return SINPE_OK;
}

int sinpe_plan_cut_grid(plan_t *plan, const sinpe_array *out, ptrdiff_t rows)
{
    const double row_bytes = sinpe_plan_row_bytes(plan);
    plan->threads = sinpe_plan_threads(row_bytes * (double)rows);
    sinpe_plan_tile_freqs(plan);
    cut_bands(plan, out, row_bytes, (double)rows);
    if (plan_assembly(plan, out) != SINPE_OK) {
        return SINPE_ERR_NOMEM;
    }
    return sinpe_plan_alloc_scratch(plan, 0);
}
