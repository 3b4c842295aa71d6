/*
 * A rotation's share of the plan (sinpe.h's rotate; exec/work.h): its
 * checks (the views it reads besides out must not overlap it, its columns
 * and values), its cut, whose chunks exec/rotate.c runs, and its kept tile
 * rows.  Everything else of the call (views, positions, frequencies) is
 * plan/plan.c's, as for every other action.
 */
#include "core/platform.h"

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "core/elements.h"
#include "core/row_cache.h"
#include "exec/rot_tile.h"
#include "plan/cut.h"
#include "plan/rotation.h"

/* A rotation's tile of cos and sin cache rows per worker (exec/rot_tile.h), at
 * most: each copy of its positions (a head) is rotated whole, in address
 * order, while the tile stays in L2.  On the AMD EPYC (Zen 4, 1 MB of L2 a
 * core), rope_ of (1, 32, 2048, 128) float32 on one thread took 2.7x an
 * in-place multiply with 128 KB tiles (heads visited 64 KB at a time),
 * 2.3x with 512 KB and 1.7x with 1 MB (each head in one pass); larger
 * tiles gained nothing more. */
#ifndef ROTATE_TILE_BYTES /* overridable for measurements, as STREAM_MIN_BYTES */
#define ROTATE_TILE_BYTES ((double)(1 << 20))
#endif


/* The bytes a view can touch, [*lo, *hi) (lo == hi: none), or -1 when
 * they do not all lie in the address space (no array can be such a view;
 * the products and sums are overflow-checked, as a zero-stride view can
 * describe any number of rows). */
static int byte_extent(const sinpe_array *v, uintptr_t *lo, uintptr_t *hi)
{
    ptrdiff_t low = 0, high = (ptrdiff_t)sinpe_itemsize(v->dtype);
    *lo = *hi = (uintptr_t)v->data;
    for (int i = 0; i < v->ndim; ++i) {
        if (v->shape[i] == 0) {
            return 0;
        }
    }
    for (int i = 0; i < v->ndim; ++i) {
        ptrdiff_t reach;
        if (sinpe_mul_overflow_ptrdiff(v->strides[i], v->shape[i] - 1, &reach) ||
            (reach < 0 ? low < PTRDIFF_MIN - reach : high > PTRDIFF_MAX - reach)) {
            return -1;
        }
        *(reach < 0 ? &low : &high) += reach;
    }
    const uintptr_t base = (uintptr_t)v->data, below = (uintptr_t)0 - (uintptr_t)low;
    if (below > base || (uintptr_t)high > UINTPTR_MAX - base) {
        return -1;
    }
    *lo = base - below;
    *hi = base + (uintptr_t)high;
    return 0;
}

/* Whether two views may touch a common byte (a view that cannot lie in
 * memory counts as sharing: sinpe.h). */
static int views_overlap(const sinpe_array *a, const sinpe_array *b)
{
    uintptr_t lo0, hi0, lo1, hi1;
    if (byte_extent(a, &lo0, &hi0) < 0 || byte_extent(b, &lo1, &hi1) < 0) {
        return 1;
    }
    return lo0 < hi0 && lo1 < hi1 && lo0 < hi1 && lo1 < hi0;
}

/* The arrays a rotation reads besides out (sinpe.h): views of out's shape
 * and dtype that share no memory with it, and what they exclude.  Part of
 * the structure: checked for empty outputs too. */
int sinpe_plan_check_rotation_views(const sinpe_plan *p, const sinpe_array *out)
{
    const int given = p->cos_cache != NULL;
    if (p->add || p->rope || p->split != NULL || p->padding != NULL ||
        (p->layout != SINPE_INTERLEAVED && p->layout != SINPE_CONCATENATED) ||
        given != (p->sin_cache != NULL) ||
        (given && (p->freq != NULL || p->ints != NULL || p->reals != NULL))) {
        return SINPE_ERR_INVALID;
    }
    const sinpe_array *views[3] = {p->source, p->cos_cache, p->sin_cache};
    for (int v = 0; v < 3; ++v) {
        const sinpe_array *a = views[v];
        if (a == NULL) {
            continue;
        }
        if (sinpe_check_view(a) != SINPE_OK || a->ndim != out->ndim || a->dtype != out->dtype) {
            return SINPE_ERR_INVALID;
        }
        for (int i = 0; i < out->ndim; ++i) {
            if (a->shape[i] != out->shape[i]) {
                return SINPE_ERR_INVALID;
            }
        }
        if (views_overlap(a, out)) {
            return SINPE_ERR_INVALID;
        }
    }
    return SINPE_OK;
}

/* A rotation's columns and values, for rows of d columns. */
int sinpe_plan_check_rotation(const sinpe_plan *p, const sinpe_array *out, ptrdiff_t d)
{
    const ptrdiff_t r = p->rotary_dim == 0 ? d : p->rotary_dim;
    if (r < 2 || r > d || r % 2 != 0 || !isfinite(p->scale)) {
        return SINPE_ERR_INVALID;
    }
    if (p->cos_cache != NULL) {
        return p->scale == 1.0 && !p->exact && !p->inverse && p->cos_cache->data != NULL &&
                       p->sin_cache->data != NULL && (p->source == NULL || p->source->data != NULL) &&
                       out->data != NULL
                   ? SINPE_OK
                   : SINPE_ERR_INVALID;
    }
    if (out->data == NULL || (p->source != NULL && p->source->data == NULL)) {
        return SINPE_ERR_INVALID;
    }
    if (p->freq != NULL) {
        return p->nfreq == r / 2 ? SINPE_OK : SINPE_ERR_INVALID;
    }
    return p->n >= SINPE_MIN_BASE && p->n <= SINPE_MAX_BASE && p->schedule == SINPE_PAPER
               ? SINPE_OK
               : SINPE_ERR_INVALID; /* the base check also rejects NaN */
}

/* ------------------------------------------------------------------ */
/* The cut. */

/* Given caches: runs of C-order rows of about a chunk's bytes, at least
 * four per thread. */
static void cut_given_rows(plan_t *plan, const sinpe_plan *p, const sinpe_array *out,
                           double row_bytes, ptrdiff_t rows)
{
    rotation_t *rot = &plan->rot;
    const sinpe_array *x = p->source != NULL ? p->source : out;
    plan->cut = CUT_ROWS;
    rot->cos = p->cos_cache->data;
    rot->sin = p->sin_cache->data;
    rot->cos_fmt = sinpe_row_format_of(p->cos_cache);
    rot->sin_fmt = sinpe_row_format_of(p->sin_cache);
    rot->rows = rows;
    /* axes of length 1 left out: a decoding step's (B, H, 1, D) is then one
     * run of H rows along the heads (one loop call), not H runs of one */
    rot->naxes = 0;
    for (int i = 0; i < out->ndim - 1; ++i) {
        if (out->shape[i] == 1) {
            continue;
        }
        const int a = rot->naxes++;
        rot->shape[a] = out->shape[i];
        rot->bstride[0][a] = out->strides[i];
        rot->bstride[1][a] = x->strides[i];
        rot->bstride[2][a] = p->cos_cache->strides[i];
        rot->bstride[3][a] = p->sin_cache->strides[i];
    }
    double span = ceil(CHUNK_BYTES / row_bytes);
    const double busy = ceil((double)rows / (4.0 * plan->threads));
    span = plan->threads > 1 && busy < span ? busy : span;
    plan->span = count_in(span, rows);
    plan->chunks = ceil_div(rows, plan->span);
}

/* Rotations by their own caches: each worker's tile holds the cos and sin
 * rows of up to tile_rows positions (ROTATE_TILE_BYTES, or what the call
 * can use: a small call allocates little), plus a spare row (one per
 * section); staged tiles have float64 rows beside them; with sections, the
 * merged rows of a window follow (exec/sections.c; caches with sections use
 * this tile and cut too).  Range positions are cut in spans of whole
 * blocks, at most a thread's share of them, so that each span's rows are
 * made once and each copy is rotated a span at a time in address order;
 * the copies are cut in parts only when there are fewer spans than threads
 * (each part makes its span's rows again).  Explicit positions: windows. */
int sinpe_plan_cut_rotation(plan_t *plan, const sinpe_plan *p, const sinpe_array *out,
                        ptrdiff_t rows)
{
    rotation_t *rot = &plan->rot;
    const double row_bytes = (double)plan->d * (double)sinpe_itemsize(out->dtype);
    plan->threads = sinpe_plan_threads(row_bytes * (double)rows);
    plan->cancel_period = 1; /* rotations take no cancel callback */
    if (p->cos_cache != NULL) {
        cut_given_rows(plan, p, out, row_bytes, rows);
        return SINPE_OK;
    }
    group_t *g = &plan->groups[0];
    plan->tile_freqs = min_ptrdiff(g->nfreq, SINPE_TILE_FREQS);
    const size_t tile_item = sinpe_itemsize(rot->tile_dtype);
    const double per_freq = rot->interleaved ? 4.0 : 2.0; /* exec/rot_tile.c's layout */
    const double cache_row = per_freq * (double)plan->tile_freqs * (double)tile_item;
    const double stage_row = rot->staged ? per_freq * (double)plan->tile_freqs * 8.0 : 0.0;
    const ptrdiff_t needed = g->axis >= 0 ? g->outer_count + SINPE_BLOCK_ROWS
                                          : 2 * min_ptrdiff(g->outer_count, PTRDIFF_MAX / 4) +
                                                2 * SINPE_BLOCK_ROWS;
    plan->tile_rows = count_in(floor(ROTATE_TILE_BYTES / (cache_row + stage_row)), needed);
    /* a spare row, or one per section; the float64 rows start on a line of
     * their own (the cache rows of a 16-bit type end anywhere) */
    const size_t spares = plan->sections.count > 0 ? (size_t)plan->sections.count : 1;
    const size_t cache_bytes = ((size_t)plan->tile_rows + spares) * (size_t)cache_row;
    rot->stage_at = cache_bytes + 63 - (cache_bytes + 63) % 64;
    plan->tile_bytes = rot->stage_at + ((size_t)plan->tile_rows + spares) * (size_t)stage_row;
    plan->tile_bytes += 63 - (plan->tile_bytes + 63) % 64; /* and each worker's tile */
    if (g->axis < 0) {
        /* Threads share shorter windows rather than parts of the leading
         * rows: each part would make the window's cache rows (and merged
         * rows) again.  Windows of a block at least. */
        const ptrdiff_t length = g->outer.shape[g->outer.naxes - 1];
        const double share = ceil((double)length * (double)g->ntiles / (4.0 * plan->threads));
        plan->cut = CUT_WINDOWS;
        sinpe_plan_cut_windows(plan, plan->threads > 1 && share > SINPE_BLOCK_ROWS
                                         ? share
                                         : plan->threads > 1 ? SINPE_BLOCK_ROWS : HUGE_VAL);
        if (plan->sections.count > 0) { /* a window's merged rows and flags, after the rest */
            plan->sections.merged_at = plan->tile_bytes;
            plan->tile_bytes += (size_t)plan->window * (size_t)cache_row;
            plan->sections.same_at = plan->tile_bytes;
            plan->tile_bytes += (size_t)plan->per_part;
            plan->tile_bytes += 63 - (plan->tile_bytes + 63) % 64;
        }
    } else {
        plan->cut = CUT_SPANS;
        double span = (double)plan->tile_rows;
        const double share = ceil((double)g->outer_count / (double)plan->threads);
        span = share < span ? share : span;
        span = span >= SINPE_BLOCK_ROWS ? SINPE_BLOCK_ROWS * floor(span / SINPE_BLOCK_ROWS) : span;
        plan->span = count_in(span, g->outer_count);
        plan->shift = plan->span % SINPE_BLOCK_ROWS == 0
                          ? (ptrdiff_t)(g->offset - sinpe_block_start(g->offset))
                          : 0;
        plan->spans = ceil_div(g->outer_count + plan->shift, plan->span);
        const double busy = ceil(plan->threads / ((double)plan->spans * (double)g->ntiles));
        plan->per_part = ceil_div(g->inner_count,
                                  count_in(plan->threads > 1 ? busy : 1.0, g->inner_count));
        plan->parts = ceil_div(g->inner_count, plan->per_part);
        plan->chunks = plan->spans * plan->parts * g->ntiles;
    }
    return sinpe_plan_alloc_scratch(plan, 1);
}

/* ------------------------------------------------------------------ */
/* A rotation at range positions with one frequency tile: its tile rows
 * from the cache of made tables (core/row_cache.h), made now into the cache's
 * memory, a tile's rows at a time through worker 0's tile (its float64
 * stage), when asked for again.  Nothing here can fail the call: without
 * them each chunk makes its rows.  Not for explicit frequencies (the key
 * cannot name them) nor sections (their rows are merged per window). */
void sinpe_plan_rotation_made_rows(plan_t *plan, const sinpe_plan *p)
{
    const group_t *g = &plan->groups[0];
    if (plan->cut != CUT_SPANS || plan->sections.count > 0 || p->freq != NULL ||
        g->table == NULL || g->ntiles != 1) {
        return;
    }
    const rotation_t *rot = &plan->rot;
    rot_tile_t t;
    sinpe_rot_tile_layout(plan, g, 0, 0, &t);
    const sinpe_rows_key key = {p->schedule, p->n, 2 * t.cols, p->layout, t.fmt.dtype,
                                1, rot->inverse, rot->scale};
    int fresh;
    sinpe_rows *rows = sinpe_rows_find_or_new(&key, g->offset, g->outer_count, &fresh);
    for (ptrdiff_t done = 0; fresh && done < g->outer_count; done += plan->tile_rows) {
        t.data = rows->data + done * t.row_bytes; /* the worker's stage stays its own */
        sinpe_rot_tile_fill(plan, g, 0, 0, &t, 0, 1, g->offset + done,
                            min_ptrdiff(plan->tile_rows, g->outer_count - done), 0.0);
    }
    if (fresh) {
        sinpe_rows_keep(rows);
    }
    plan->made = rows;
}
