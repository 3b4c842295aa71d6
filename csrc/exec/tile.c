/*
 * A worker's tile of table rows (exec/tile.h): its layout, the rows of a
 * range of positions made into it by the pair writer every table uses
 * (kernels/rows.h), and a kept table's rows (core/row_cache.h) seen as one.
 */
#include "core/platform.h"

#include <string.h>

#include "core/elements.h"
#include "exec/tile.h"
#include "exec/walk.h"

void sinpe_tile_layout(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
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

void sinpe_tile_fill(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
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
    const sinpe_pair_target target = {&t->fmt, base, t->row_bytes, t->pairs};
    if (!is_int) {
        anchor(plan, g, &s, k0, k1, 0, 0, x);
        sinpe_store_pair_values(&target, 1, s.s0, s.c0);
        return;
    }
    store_positions(plan, g, &s, &steps, k0, k1, &target, 1, first, rows);
}

void sinpe_tile_of_made(const plan_t *plan, int64_t first, tile_t *t)
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
