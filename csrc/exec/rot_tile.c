/*
 * A rotation's tile of RoPE cache rows (exec/rot_tile.h): its layout, its
 * rows made by the pair writer that makes rope's two caches
 * (kernels/rows.h: cos and sin of each frequency from one computation), in
 * x's dtype, or in float64 for exact; when scale or inverse change the
 * values before their one rounding, the rows are made in float64 beside
 * the tile ("staged"), scaled and negated there, then rounded into it.  And
 * rows of x rotated by tile rows, with the rotation loop (kernels/rows.h).
 */
#include "core/platform.h"

#include "core/elements.h"
#include "exec/rot_tile.h"
#include "exec/walk.h"

void sinpe_rot_tile_layout(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                           rot_tile_t *t)
{
    const ptrdiff_t k0 = tile * plan->tile_freqs;
    t->k0 = k0;
    t->count = min_ptrdiff(k0 + plan->tile_freqs, g->nfreq) - k0;
    t->first_tile = tile == 0;
    const ptrdiff_t itemsize = (ptrdiff_t)sinpe_itemsize(plan->rot.tile_dtype);
    t->fmt = (sinpe_row_format){plan->rot.tile_dtype, 0, itemsize, 0};
    const ptrdiff_t per_freq = g->interleaved ? 4 : 2; /* elements per frequency and row */
    t->cols = per_freq / 2 * t->count;
    t->row_bytes = 2 * t->cols * itemsize;
    t->data = plan->tiles + (size_t)worker * plan->tile_bytes;
    t->stage_row = 2 * t->cols;
    t->stage = plan->rot.staged ? (double *)(void *)(t->data + plan->rot.stage_at) : NULL;
}

/* The pair writer's targets for tile rows from `row` on: split, one table
 * target (cosines at 0 .. count - 1, sines after them: the concatenated
 * table's writer); interleaved, RoPE's two caches (each value twice).
 * Returns how many. */
static int cache_targets(const group_t *g, const sinpe_row_format *fmt, char *row,
                         ptrdiff_t row_stride, ptrdiff_t count, sinpe_pair_target *targets)
{
    if (!g->interleaved) {
        const sinpe_pairs pairs = {SINPE_PAIRS_TABLE, 0, count, 0, count, count, 1.0};
        targets[0] = (sinpe_pair_target){fmt, row, row_stride, pairs};
        return 1;
    }
    for (int t = 0; t < 2; ++t) {
        const sinpe_pairs pairs = {t == 0 ? SINPE_PAIRS_COS : SINPE_PAIRS_SIN, 1, 0, 1, count,
                                   count, 1.0};
        targets[t] = (sinpe_pair_target){
            fmt, row + t * 2 * count * (ptrdiff_t)sinpe_itemsize(fmt->dtype), row_stride, pairs};
    }
    return 2;
}

/* Rows [slot, slot + rows) of the tile: scale, then the sines negated
 * (inverse), in double, and rounded once into the tile (staged), or in
 * place in a float64 tile. */
static void finish_rows(const plan_t *plan, const rot_tile_t *t, ptrdiff_t slot, ptrdiff_t rows)
{
    const rotation_t *rot = &plan->rot;
    const int f64 = t->fmt.dtype == SINPE_FLOAT64;
    if (!rot->staged && (!f64 || (rot->scale == 1.0 && !rot->inverse))) {
        return;
    }
    const ptrdiff_t half = t->cols;
    for (ptrdiff_t q = slot; q < slot + rows; ++q) {
        double *v = rot->staged ? t->stage + q * t->stage_row
                                : (double *)(void *)(t->data + q * t->row_bytes);
        for (ptrdiff_t e = 0; e < 2 * half; ++e) {
            const double scaled = v[e] * rot->scale;
            v[e] = rot->inverse && e >= half ? -scaled : scaled;
        }
        if (rot->staged) {
            sinpe_store_values(&t->fmt, t->data + q * t->row_bytes, v, 1, 2 * half);
        }
    }
}

void sinpe_rot_tile_fill(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                         const rot_tile_t *t, ptrdiff_t slot, int is_int, int64_t first,
                         ptrdiff_t rows, double x)
{
    const ptrdiff_t k0 = t->k0, k1 = t->k0 + t->count;
    scratch_t s = scratch_of(plan, worker);
    const sinpe_steps steps = steps_of(plan, g, worker, tile, k0, k1, s.step_buffer);
    static const sinpe_row_format stage_fmt = {SINPE_FLOAT64, 0, 8, 0};
    const int staged = plan->rot.staged;
    const sinpe_row_format *fmt = staged ? &stage_fmt : &t->fmt;
    char *base = staged ? (char *)(void *)(t->stage + slot * t->stage_row)
                        : t->data + slot * t->row_bytes;
    const ptrdiff_t stride = staged ? t->stage_row * 8 : t->row_bytes;
    sinpe_pair_target targets[2];
    const int ntargets = cache_targets(g, fmt, base, stride, t->count, targets);
    if (!is_int) {
        anchor(plan, g, &s, k0, k1, 0, 0, x);
        sinpe_store_pair_values(targets, ntargets, s.s0, s.c0);
        finish_rows(plan, t, slot, 1);
        return;
    }
    store_positions(plan, g, &s, &steps, k0, k1, targets, ntargets, first, rows);
    finish_rows(plan, t, slot, rows);
}

int sinpe_rot_tile_range(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                         rot_tile_t *t, int64_t lo, int64_t hi)
{
    sinpe_rot_tile_layout(plan, g, worker, tile, t);
    const int ranged = lo <= hi && hi - lo < plan->tile_rows;
    if (ranged) {
        sinpe_rot_tile_fill(plan, g, worker, tile, t, 0, 1, lo, hi - lo + 1, 0.0);
    }
    return ranged;
}

void sinpe_rot_tile_rotate(const plan_t *plan, const group_t *g, const rot_tile_t *t,
                           const char *cache, ptrdiff_t cache_stride, char *dst,
                           ptrdiff_t dst_stride, const char *src, ptrdiff_t src_stride,
                           sinpe_rotate_shape shape)
{
    const rotation_t *rot = &plan->rot;
    const sinpe_row_format *x_fmt = &plan->target[0].fmt;
    const sinpe_row_format *src_fmt = src != NULL ? &rot->source_fmt : NULL;
    const sinpe_rotation r = {x_fmt, src_fmt, &t->fmt, &t->fmt, g->interleaved, t->count,
                              rot->dim / 2, 0};
    const ptrdiff_t first = g->interleaved ? 2 * t->k0 : t->k0;
    const char *sin = cache + t->cols * (ptrdiff_t)sinpe_itemsize(t->fmt.dtype);
    sinpe_rotate_rows(&r, dst + first * x_fmt->col_stride, dst_stride,
                      src != NULL ? src + first * src_fmt->col_stride : NULL, src_stride, cache,
                      cache_stride, sin, cache_stride, shape);
    for (ptrdiff_t h = 0; src != NULL && t->first_tile && rot->dim < plan->d && h < shape.copies;
         ++h) {
        sinpe_copy_rows(x_fmt, dst + h * shape.dst_copy + rot->dim * x_fmt->col_stride,
                        dst_stride, src_fmt,
                        src + h * shape.src_copy + rot->dim * src_fmt->col_stride, src_stride,
                        shape.rows, plan->d - rot->dim);
    }
}
