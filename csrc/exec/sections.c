/*
 * Sections (sinpe.h): multi-axis RoPE, where each frequency takes its
 * angle from one of a row's S positions (Qwen2-VL's time, height and width;
 * axial 2-D RoPE's row and column).  The chunks of a plan with sections:
 * RoPE caches and rotations by their own caches, on a rotation's tile
 * (exec/rot_tile.h) and windows cut (plan/rotation.c; their checks and the
 * section of each frequency are plan/sections.c's).
 *
 * A chunk is a window of the innermost row axis in some leading rows.  The
 * cache rows of every integer position the window holds, in any section,
 * are made once as one range in the worker's tile (text tokens have one
 * position in every section; an image's patches a fixed time and small
 * ranges of height and width), exactly as for a single position per row.
 * Each row's merged cache row then gathers each frequency's cos and sin
 * from the tile row of its section's position (a copy of one tile row when
 * the sections agree); a position outside the range, or non-integral, gets
 * its section's spare row.  The merged rows of a window serve every
 * leading row with the same positions (the heads of a token: positions
 * broadcast over them are equal copies), and are rotated, or copied into
 * the caches, in address order.  A window of text tokens alone (one
 * integer position in every section) needs no merged rows: it is rotated
 * straight from the range's rows, as without sections.  No value is made
 * another way: a tile row is the row of its position (a value depends on
 * (p, w) only: core/table.h), so a merged row has, frequency by frequency,
 * the bits of its section's position alone.
 */
#include "core/platform.h"

#include <string.h>

#include "core/elements.h"
#include "exec/actions.h"
#include "exec/rot_tile.h"
#include "exec/walk.h"

/* ------------------------------------------------------------------ */
/* Positions. */

/* Whether leading rows b and c hold the same positions, bit for bit, in
 * window [l0, l1) of every section (then they share merged rows). */
static int same_positions(const plan_t *plan, ptrdiff_t b, ptrdiff_t c, ptrdiff_t l0,
                          ptrdiff_t l1)
{
    const char *values = plan->ints != NULL ? (const char *)plan->ints
                                            : (const char *)plan->reals;
    const sections_t *sec = &plan->sections;
    for (int s = 0; s < sec->count; ++s) {
        const ptrdiff_t at = s * sec->stride + l0;
        const char *one = values + 8 * (at + b * plan->length);
        const char *other = values + 8 * (at + c * plan->length);
        if (l1 - l0 == 1 ? memcmp(one, other, 8) != 0 /* a decoding step: inlined */
                         : memcmp(one, other, 8 * (size_t)(l1 - l0)) != 0) {
            return 0;
        }
    }
    return 1;
}

/* The integer positions of every section in window [l0, l1) of leading
 * rows b0 .. b1 - 1: [*lo, *hi], or lo > hi when there is none.
 * same[b - b0]: whether leading row b has the positions of the one before
 * (then it adds nothing here, and shares its merged rows). */
static void sections_range(const plan_t *plan, const group_t *g, ptrdiff_t l0, ptrdiff_t l1,
                           ptrdiff_t b0, ptrdiff_t b1, int64_t *lo, int64_t *hi,
                           unsigned char *same)
{
    const sections_t *sec = &plan->sections;
    *lo = INT64_MAX, *hi = INT64_MIN;
    for (ptrdiff_t b = b0; b < b1; ++b) {
        same[b - b0] = b > b0 && same_positions(plan, b, b - 1, l0, l1);
        if (same[b - b0]) {
            continue;
        }
        for (int s = 0; s < sec->count; ++s) {
            const ptrdiff_t first = s * sec->stride + b * plan->length;
            for (ptrdiff_t i = first + l0; i < first + l1; ++i) {
                int64_t p;
                double x;
                if (position_of(plan, g, i, &p, &x)) {
                    *lo = p < *lo ? p : *lo;
                    *hi = p > *hi ? p : *hi;
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* Merged rows. */

/* dst's units j < count (cos part, and the sin part `half` bytes after it)
 * from the row of frequency j's section: rows[of[j]].  A unit is a cache
 * value (split tiles) or its two copies (interleaved); a constant size per
 * case lets the copies compile to plain loads and stores. */
#define GATHER_UNITS(bytes)                                                                   \
    for (ptrdiff_t j = 0; j < count; ++j) {                                                   \
        const char *row = rows[of[j]] + j * (bytes);                                          \
        memcpy(dst + j * (bytes), row, bytes);                                                \
        memcpy(dst + half + j * (bytes), row + half, bytes);                                  \
    }
static void gather(char *dst, const char *const *rows, const unsigned char *of, ptrdiff_t count,
                   size_t unit, ptrdiff_t half)
{
    switch (unit) {
    case 2:
        GATHER_UNITS(2)
        break;
    case 4:
        GATHER_UNITS(4)
        break;
    case 8:
        GATHER_UNITS(8)
        break;
    default: /* 16: an interleaved float64 tile */
        GATHER_UNITS(16)
        break;
    }
}
#undef GATHER_UNITS

/* The merged rows of window [l0, l1) of leading row b, into `merged` (a
 * tile row each), from the tile's range [lo, hi] (ranged) or the spare
 * rows of each section. */
static void merge_rows(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                       const rot_tile_t *t, ptrdiff_t b, ptrdiff_t l0, ptrdiff_t l1, int64_t lo,
                       int64_t hi, int ranged, char *merged)
{
    const sections_t *sec = &plan->sections;
    const unsigned char *of = sec->of + t->k0;
    const size_t itemsize = sinpe_itemsize(t->fmt.dtype);
    const size_t unit = g->interleaved ? 2 * itemsize : itemsize;
    const ptrdiff_t half = t->cols * (ptrdiff_t)itemsize;
    const char *rows[SINPE_MAX_SECTIONS];
    int64_t ints[SINPE_MAX_SECTIONS];
    double reals[SINPE_MAX_SECTIONS];
    int integral[SINPE_MAX_SECTIONS];
    for (ptrdiff_t l = l0; l < l1; ++l) {
        const ptrdiff_t i = b * plan->length + l;
        int same = 1;
        for (int s = 0; s < sec->count; ++s) {
            int64_t p;
            double x;
            const int is_int = position_of(plan, g, s * sec->stride + i, &p, &x);
            ints[s] = p, reals[s] = x, integral[s] = is_int;
            rows[s] = NULL;
            if (ranged && is_int && p >= lo && p <= hi) {
                rows[s] = t->data + (p - lo) * t->row_bytes;
            }
            for (int q = 0; rows[s] == NULL && q < s; ++q) { /* a spare row made already */
                if (integral[q] == is_int && (is_int ? ints[q] == p : reals[q] == x)) {
                    rows[s] = rows[q];
                }
            }
            if (rows[s] == NULL) {
                sinpe_rot_tile_fill(plan, g, worker, tile, t, plan->tile_rows + s, is_int, p, 1,
                                    x);
                rows[s] = t->data + (plan->tile_rows + s) * t->row_bytes;
            }
            same &= rows[s] == rows[0];
        }
        char *dst = merged + (l - l0) * t->row_bytes;
        if (same) {
            memcpy(dst, rows[0], (size_t)t->row_bytes);
        } else {
            gather(dst, rows, of, t->count, unit, half);
        }
    }
}

/* Whether every row of window [l0, l1) of leading row b has one integer
 * position in all its sections, inside the tile's range (text tokens):
 * then the range's rows are the rows themselves, and no merged row is
 * made. */
static int text_window(const plan_t *plan, const group_t *g, ptrdiff_t b, ptrdiff_t l0,
                       ptrdiff_t l1, int ranged)
{
    const sections_t *sec = &plan->sections;
    for (ptrdiff_t i = b * plan->length + l0; ranged && i < b * plan->length + l1; ++i) {
        int64_t p, q;
        double x;
        if (!position_of(plan, g, i, &p, &x)) {
            return 0;
        }
        for (int s = 1; s < sec->count; ++s) {
            if (!position_of(plan, g, s * sec->stride + i, &q, &x) || q != p) {
                return 0;
            }
        }
    }
    return ranged;
}

/* ------------------------------------------------------------------ */
/* What is done with them. */

/* `rows` cache rows (tile-format, from `cache` at cache_stride) into the
 * caches' rows from `off` (per target, stride per target): cos then sin,
 * each value in the columns of its layout (interleaved: both of a pair, as
 * the tile holds them; concatenated: k and m + k), copied when the tile
 * has the target's dtype, else rounded once from the tile's float64. */
static void store_caches(const plan_t *plan, const group_t *g, const rot_tile_t *t,
                         const char *cache, ptrdiff_t cache_stride, const ptrdiff_t *off,
                         const ptrdiff_t *stride, ptrdiff_t rows)
{
    const ptrdiff_t itemsize = (ptrdiff_t)sinpe_itemsize(t->fmt.dtype);
    const ptrdiff_t cols[2] = {g->interleaved ? 2 * t->k0 : t->k0, g->nfreq + t->k0};
    const int copies = g->interleaved ? 1 : 2;
    for (int k = 0; k < 2; ++k) {
        const sinpe_row_format *fmt = &plan->target[k].fmt;
        const char *from = cache + k * t->cols * itemsize;
        for (int c = 0; c < copies; ++c) {
            char *to = plan->target[k].data + off[k] + cols[c] * fmt->col_stride;
            if (fmt->dtype == t->fmt.dtype) {
                sinpe_copy_rows(fmt, to, stride[k], &t->fmt, from, cache_stride, rows, t->cols);
                continue;
            }
            for (ptrdiff_t q = 0; q < rows; ++q) {
                sinpe_store_values(fmt, to + q * stride[k],
                                   (const double *)(const void *)(from + q * cache_stride), 1,
                                   t->cols);
            }
        }
    }
}

/* `rows` rows from `off` (per target; stride per target) rotated by, or
 * (caches) stored from, the tile-format rows at cache (cache_stride);
 * rotations: of `copies` copies, step[k] apart in target k (the heads of a
 * token, side by side in the rotation loop, each cache row read once for
 * them; caches: one copy). */
static void act(const plan_t *plan, const group_t *g, const rot_tile_t *t, const char *cache,
                ptrdiff_t cache_stride, const ptrdiff_t *off, const ptrdiff_t *stride,
                ptrdiff_t rows, ptrdiff_t copies, const ptrdiff_t *step)
{
    if (!plan->rotating) {
        store_caches(plan, g, t, cache, cache_stride, off, stride, rows);
        return;
    }
    const char *source = plan->rot.source;
    const sinpe_rotate_shape shape = {rows, copies, copies > 1 ? step[0] : 0,
                                      copies > 1 ? step[1] : 0};
    sinpe_rot_tile_rotate(plan, g, t, cache, cache_stride, plan->target[0].data + off[0],
                          stride[0], source != NULL ? source + off[1] : NULL, stride[1], shape);
}

/* The leading rows from b on (b's included, at most b1 - b) that hold b's
 * positions and lie at one stride from each other in every target: how
 * many, and that stride (step). */
static ptrdiff_t same_leads(const plan_t *plan, const group_t *g, const unsigned char *same,
                            ptrdiff_t b, ptrdiff_t b0, ptrdiff_t b1, ptrdiff_t l0,
                            const cursor_t *oc, ptrdiff_t *step)
{
    ptrdiff_t leads = 1;
    step[0] = step[1] = 0;
    cursor_t at;
    while (b + leads < b1 && same[b + leads - b0]) {
        cursor_seek(&g->outer, &at, (b + leads) * plan->length + l0);
        if (leads == 1) {
            step[0] = at.off[0] - oc->off[0], step[1] = at.off[1] - oc->off[1];
        }
        if (at.off[0] - oc->off[0] != leads * step[0] || at.off[1] - oc->off[1] != leads * step[1]) {
            break;
        }
        ++leads;
    }
    return leads;
}

/* Window [l0, l1) of the leading rows b0 .. b1 - 1, frequency tile `tile`:
 * the range made, then each leading row's merged rows (kept while the next
 * leading rows have the same positions) rotated or stored; text rows from
 * the range's rows, in runs of positions that count up. */
static void sections_window(const plan_t *plan, int worker, ptrdiff_t tile, ptrdiff_t l0,
                            ptrdiff_t l1, ptrdiff_t b0, ptrdiff_t b1)
{
    const group_t *g = &plan->groups[0];
    char *own = plan->tiles + (size_t)worker * plan->tile_bytes;
    char *merged = own + plan->sections.merged_at;
    unsigned char *same = (unsigned char *)own + plan->sections.same_at;
    int64_t lo, hi;
    sections_range(plan, g, l0, l1, b0, b1, &lo, &hi, same);
    rot_tile_t t;
    const int ranged = sinpe_rot_tile_range(plan, g, worker, tile, &t, lo, hi);
    const int last = g->outer.naxes - 1;
    const ptrdiff_t stride[2] = {g->outer.bstride[0][last], g->outer.bstride[1][last]};
    int text = 0;
    cursor_t oc;
    for (ptrdiff_t b = b0; b < b1;) {
        if (!same[b - b0]) { /* else the rows made last are this row's too */
            text = text_window(plan, g, b, l0, l1, ranged);
            if (!text) {
                merge_rows(plan, g, worker, tile, &t, b, l0, l1, lo, hi, ranged, merged);
            }
        }
        cursor_seek(&g->outer, &oc, b * plan->length + l0);
        ptrdiff_t step[2];
        if (l1 - l0 == 1) { /* a row per leading row (a decoding step): one call for the
                             * leading rows of its positions that lie at one stride */
            const ptrdiff_t leads = same_leads(plan, g, same, b, b0, b1, l0, &oc, step);
            int64_t p = lo;
            double x;
            (void)(text && position_of(plan, g, b * plan->length + l0, &p, &x));
            const char *cache = text ? t.data + (p - lo) * t.row_bytes : merged;
            act(plan, g, &t, cache, 0, oc.off, step, leads, 1, NULL);
            b += leads;
            continue;
        }
        /* rotations: the leading rows with these positions (the heads) together */
        const ptrdiff_t leads =
            plan->rotating ? same_leads(plan, g, same, b, b0, b1, l0, &oc, step) : 1;
        if (!text) {
            act(plan, g, &t, merged, t.row_bytes, oc.off, stride, l1 - l0, leads, step);
            b += leads;
            continue;
        }
        for (ptrdiff_t l = l0; l < l1;) {
            int64_t p, q;
            double x;
            (void)position_of(plan, g, b * plan->length + l, &p, &x);
            ptrdiff_t run = 1;
            while (l + run < l1 && position_of(plan, g, b * plan->length + l + run, &q, &x) &&
                   q == p + run) {
                ++run;
            }
            const ptrdiff_t off[2] = {oc.off[0] + (l - l0) * stride[0],
                                      oc.off[1] + (l - l0) * stride[1]};
            act(plan, g, &t, t.data + (p - lo) * t.row_bytes, t.row_bytes, off, stride, run,
                leads, step);
            l += run;
        }
        b += leads;
    }
}

void sinpe_sections_chunk(const plan_t *plan, ptrdiff_t chunk, int worker)
{
    ptrdiff_t l[2], b[2];
    const ptrdiff_t tile = window_of_chunk(plan, chunk, l, b);
    sections_window(plan, worker, tile, l[0], l[1], b[0], b[1]);
}
