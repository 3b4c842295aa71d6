/*
 * sinpe_run: checks a call (sinpe.h), makes its plan (plan.h) and runs the
 * chunks on the thread pool.  Everything that can fail (a bad argument, no
 * memory) fails here, before any output is written; after it only a cancel
 * can stop the call.  The cut, the one place where a call is split into
 * chunks, threads, streaming stores and cancel points, is `cut` below.
 */
#include "core/platform.h"

#include "core/elements.h"
#include "plan/plan.h"
#include "core/threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* An add's tile of table rows per worker: a quarter of L2 or less, so it
 * stays there while the array streams past it. */
#ifndef ADD_TILE_BYTES /* overridable for measurements, as STREAM_MIN_BYTES */
#define ADD_TILE_BYTES ((double)(256 << 10))
#endif
/* Tables this large are written with streaming stores (rows.c), which skip
 * the read-for-ownership of every line and do not evict the rest of the
 * caches.  Only well beyond the last-level cache: into an array that is
 * still cached (a buffer rewritten in a loop), a streaming store must first
 * evict its line, and on the AMD EPYC (Zen 4) we measured plain stores
 * faster up to 32 MB (encode(5000, 512, out=): 1.50x the fill instead of
 * 1.74x); at 256 MB streaming is even there (interleaved) or far ahead
 * (the concatenated layout: 1.54x instead of 1.97x).  One target only: RoPE's
 * two caches streamed row by row in turn ran 5-16x slower than the fill on
 * that machine, plain stores 1.1-1.3x.  Fresh arrays (sinpe's own, that
 * large) are written plainly as well: they come straight from the OS,
 * whose page zeroing leaves their lines in the caches (65 ms instead of
 * 93 ms for 256 MB).  Not grids: their rows are copied from per-group
 * tiles, or written in pieces group by group, while the band is cached. */
#ifndef STREAM_MIN_BYTES /* overridable for measurements: -DSTREAM_MIN_BYTES=... */
#define STREAM_MIN_BYTES ((double)(64 << 20))
#endif


/* One spare scratch block (below), kept from the last call: musl's malloc
 * maps a block of a few hundred KB afresh each time and unmaps it on free,
 * so every call paid page faults in every thread's part (a 16 MB table on
 * two threads gained 1.25x there, 1.5x to 1.9x with glibc's malloc, which
 * keeps such blocks).  A block starts with its capacity, a cache line
 * before the scratch; the slot holds at most one, taken by exchange. */
#define SCRATCH_HEADER 64
static sinpe_atomic spare_scratch = SINPE_ATOMIC_INIT(0);

static char *scratch_take(size_t bytes)
{
    char *block = (char *)(uintptr_t)sinpe_atomic_exchange(&spare_scratch, 0);
    if (block != NULL && *(size_t *)(void *)block >= bytes) {
        return block + SCRATCH_HEADER;
    }
    free(block);
    if (bytes > SIZE_MAX - SCRATCH_HEADER) {
        return NULL;
    }
    block = malloc(SCRATCH_HEADER + bytes);
    if (block == NULL) {
        return NULL;
    }
    *(size_t *)(void *)block = bytes;
    return block + SCRATCH_HEADER;
}

static void scratch_release(void *scratch)
{
    if (scratch != NULL) {
        char *block = (char *)scratch - SCRATCH_HEADER;
        free((void *)(uintptr_t)sinpe_atomic_exchange(&spare_scratch, (ptrdiff_t)(uintptr_t)block));
    }
}

static void plan_free(plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    sinpe_anchors_release(plan->anchors); /* before its table */
    for (int g = 0; plan->groups != NULL && g < plan->ngroups; ++g) {
        sinpe_table_release(plan->groups[g].table);
    }
    sinpe_rows_release(plan->made);
    if (plan->groups != &plan->one_group) {
        free(plan->groups);
    }
    scratch_release(plan->scratch); /* with built and adds' tiles */
    if (plan->cut == CUT_BANDS) { /* assembled bands' tiles are their own */
        free(plan->tiles);
    }
    free(plan->held);
    free(plan->snapshot);
    free(plan->sections.of);
    free(plan);
}

/* ------------------------------------------------------------------ */
/* Checks of the call (the contract of sinpe.h). */

static int check_outputs(const sinpe_plan *p, const sinpe_array *out, const sinpe_array *out2)
{
    if (sinpe_check_view(out) != SINPE_OK || (p->rope != 0) != (out2 != NULL)) {
        return SINPE_ERR_INVALID;
    }
    if (out2 != NULL) {
        if (sinpe_check_view(out2) != SINPE_OK || out2->ndim != out->ndim) {
            return SINPE_ERR_INVALID;
        }
        for (int i = 0; i < out->ndim; ++i) {
            if (out2->shape[i] != out->shape[i]) {
                return SINPE_ERR_INVALID;
            }
        }
    }
    return SINPE_OK;
}

/* Frequencies, layout and what is done, for a row of d columns. */
static int check_columns(const sinpe_plan *p, ptrdiff_t d)
{
    if (d < 1 || (p->rope && (d % 2 != 0 || p->split != NULL)) ||
        (unsigned)p->layout > SINPE_SINES_FIRST ||
        (p->add && (p->rope || p->split != NULL)) ||
        ((p->add || p->rope) && !isfinite(p->scale))) {
        return SINPE_ERR_INVALID;
    }
    if (p->freq != NULL) {
        const ptrdiff_t m = p->nfreq;
        return p->split == NULL &&
                       (p->rope ? m == d / 2 : (m == d / 2 || m == (d + 1) / 2))
                   ? SINPE_OK
                   : SINPE_ERR_INVALID;
    }
    return p->n >= SINPE_MIN_BASE && p->n <= SINPE_MAX_BASE && /* also rejects NaN */
                   (p->schedule == SINPE_PAPER || (p->schedule == SINPE_FAIRSEQ && !p->rope))
               ? SINPE_OK
               : SINPE_ERR_INVALID;
}

static int check_positions(const sinpe_plan *p, int nrow_axes)
{
    if (p->split != NULL) {
        return SINPE_OK;
    }
    if (p->pos_axis >= 0) {
        return p->pos_axis < nrow_axes && p->ints == NULL && p->reals == NULL ? SINPE_OK
                                                                              : SINPE_ERR_INVALID;
    }
    return (p->ints == NULL) != (p->reals == NULL) ? SINPE_OK : SINPE_ERR_INVALID;
}

/* Whether every explicit position is within the supported range (a NaN is
 * not).  Loops without an exit, branch or conversion, which vectorise: a
 * call's positions (broadcast over the heads, and one per section) can be
 * as many as its rows. */
static int positions_in_range(const plan_t *plan, ptrdiff_t rows)
{
    const uint64_t bound = (uint64_t)SINPE_MAX_POSITION;
    if (plan->ints != NULL) {
        /* p + bound in [0, 2 bound] exactly when p is in range; the bits of
         * all of them stay below 2 bound (a power of two) unless one is
         * out of range or at +bound itself, which the exact loop tells */
        uint64_t bits = 0;
        for (ptrdiff_t i = 0; i < rows; ++i) {
            bits |= (uint64_t)plan->ints[i] + bound;
        }
        int outside = 0;
        for (ptrdiff_t i = 0; bits >= 2 * bound && i < rows; ++i) {
            outside |= (uint64_t)plan->ints[i] + bound > 2 * bound;
        }
        return !outside;
    }
    int outside = 0;
    for (ptrdiff_t i = 0; i < rows; ++i) {
        outside |= !(fabs(plan->reals[i]) <= (double)bound);
    }
    return !outside;
}

/* The largest |position| of the call, or -1 when one is out of the
 * supported range (or not finite).  Explicit positions and a schedule's
 * frequencies (none above 1, so that every position in range keeps every
 * angle in range): the bound itself, all the checks need. */
static double max_abs_position(const plan_t *plan, const sinpe_plan *p, ptrdiff_t rows,
                               ptrdiff_t outer_count)
{
    const double bound = (double)SINPE_MAX_POSITION;
    if (p->split != NULL) {
        return 0.0; /* indices, checked per axis (check_grid) */
    }
    if (p->pos_axis >= 0) {
        const double lo = (double)p->offset, hi = (double)p->offset + (double)(outer_count - 1);
        const double most = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
        return most <= bound ? most : -1.0;
    }
    if (!positions_in_range(plan, rows)) {
        return -1.0;
    }
    double most = p->freq == NULL ? bound : 0.0;
    for (ptrdiff_t i = 0; p->freq != NULL && i < rows; ++i) {
        const double a = plan->ints != NULL ? fabs((double)plan->ints[i]) : fabs(plan->reals[i]);
        most = a > most ? a : most;
    }
    return most;
}

/* ------------------------------------------------------------------ */
/* Making the plan. */

/* Private copies of positions and padding (sinpe.h: they may share memory
 * with an output, which is written while they are read). */
static int take_inputs(plan_t *plan, const sinpe_plan *p, ptrdiff_t rows)
{
    plan->ints = p->ints;
    plan->reals = p->reals;
    plan->padding = p->padding;
    if ((p->flags & SINPE_PRIVATE_INPUTS) || (p->ints == NULL && p->reals == NULL && p->padding == NULL)) {
        return SINPE_OK;
    }
    const size_t values = p->ints != NULL || p->reals != NULL ? (size_t)rows * 8 : 0;
    const size_t flags = p->padding != NULL ? (size_t)rows : 0;
    char *copy = malloc(values + flags + 1);
    if (copy == NULL) {
        return SINPE_ERR_NOMEM;
    }
    plan->snapshot = copy;
    if (p->ints != NULL) {
        plan->ints = memcpy(copy, p->ints, values);
    } else if (p->reals != NULL) {
        plan->reals = memcpy(copy, p->reals, values);
    }
    if (p->padding != NULL) {
        plan->padding = memcpy(copy + values, p->padding, flags);
    }
    return SINPE_OK;
}

static sinpe_table *group_table(const sinpe_plan *p, ptrdiff_t width, ptrdiff_t nfreq)
{
    if (p->freq != NULL) {
        return sinpe_table_from_freq(p->freq, nfreq);
    }
    return p->schedule == SINPE_PAPER ? sinpe_table_standard(p->n, width)
                                      : sinpe_table_fairseq(p->n, width);
}

/* Group g: `width` columns from `col`, positions along row `axis` (or per
 * row), the row axes split into outer and inner (plan.h). */
static int make_group(plan_t *plan, const sinpe_plan *p, const sinpe_array *const *outs,
                      group_t *g, int axis, ptrdiff_t col, ptrdiff_t width, ptrdiff_t sines_before,
                      double most)
{
    const int nrow_axes = outs[0]->ndim - 1;
    g->width = width;
    g->nfreq = p->freq != NULL ? p->nfreq : p->schedule == SINPE_PAPER ? (width + 1) / 2 : width / 2;
    g->col = col;
    g->interleaved = p->layout == SINPE_INTERLEAVED;
    g->sin_col = p->layout == SINPE_SINES_FIRST && p->split != NULL ? sines_before : col;
    g->cos_col = p->layout == SINPE_SINES_FIRST && p->split != NULL ? plan->d / 2 + sines_before
                                                                   : col + g->nfreq;
    g->axis = axis;
    g->offset = p->split != NULL ? 0 : p->offset;
    if (g->nfreq > 0) {
        g->table = group_table(p, width, g->nfreq);
        if (g->table == NULL) {
            return SINPE_ERR_NOMEM;
        }
        const double reach = most + SINPE_BLOCK_ROWS; /* block starts below negative positions */
        if (!(g->table->max_freq * reach <= SINPE_MAX_ANGLE)) {
            return SINPE_ERR_INVALID; /* NaN, negative, inf, or angles out of range */
        }
    }
    g->ntiles = g->nfreq == 0 ? 1 : ceil_div(g->nfreq, SINPE_TILE_FREQS);
    ptrdiff_t cstride[SINPE_MAX_DIMS], rows = 1; /* C-order element strides of the row axes */
    for (int i = nrow_axes - 1; i >= 0; --i) {
        cstride[i] = rows;
        rows *= outs[0]->shape[i];
    }
    for (int i = 0; i < nrow_axes; ++i) {
        axes_t *ax = axis < 0 || i == axis ? &g->outer : &g->inner;
        const int at = ax->naxes++;
        ax->shape[at] = outs[0]->shape[i];
        ax->cstride[at] = cstride[i];
        for (int t = 0; t < 2; ++t) {
            ax->bstride[t][at] = outs[t] != NULL ? outs[t]->strides[i] : 0;
        }
    }
    if (g->outer.naxes == 0) { /* a scalar position: one row, given an axis of length 1 */
        g->outer.naxes = 1;
        g->outer.shape[0] = 1;
    }
    g->outer_count = 1;
    for (int i = 0; i < g->outer.naxes; ++i) {
        g->outer_count *= g->outer.shape[i];
    }
    g->inner_count = rows / g->outer_count;
    g->residues = axis >= 0 ? sinpe_residues(g->offset, g->outer_count) : 0xffffffffu;
    return SINPE_OK;
}

/* ------------------------------------------------------------------ */
/* Adds at range positions of a schedule's table: its rows from the cache
 * of made tables (row_cache.h), made now (by a store of the same plan into
 * the cache's memory, on every thread) if the table is asked for again.
 * Nothing here can fail the call: without a made table, each chunk makes
 * its rows. */
static void find_made_rows(plan_t *plan, const sinpe_plan *p, const sinpe_array *out)
{
    const group_t *g = &plan->groups[0];
    if (!plan->adding || p->freq != NULL || g->table == NULL) {
        return;
    }
    const sinpe_rows_key key = {p->schedule, p->n, plan->d, p->layout, out->dtype};
    if (g->axis < 0) { /* integer positions, one per row: a kept table covering them all */
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (ptrdiff_t i = 0; plan->ints != NULL && i < g->outer_count; ++i) {
            if (plan->padding == NULL || !plan->padding[i]) {
                lo = plan->ints[i] < lo ? plan->ints[i] : lo;
                hi = plan->ints[i] > hi ? plan->ints[i] : hi;
            }
        }
        if (lo <= hi) {
            plan->made = sinpe_rows_find(&key, lo, hi - lo + 1);
        }
        return; /* never made for them: a repeated range is what a kept table serves */
    }
    int fresh;
    sinpe_rows *rows = sinpe_rows_find_or_new(&key, g->offset, g->outer_count, &fresh);
    if (!fresh) {
        plan->made = rows;
        return;
    }
    sinpe_plan store = sinpe_plan_default();
    store.n = p->n;
    store.schedule = p->schedule;
    store.layout = p->layout;
    store.offset = g->offset;
    const ptrdiff_t shape[2] = {(ptrdiff_t)rows->count, plan->d};
    const ptrdiff_t strides[2] = {(ptrdiff_t)rows->row_bytes,
                                  (ptrdiff_t)sinpe_itemsize(out->dtype)};
    const sinpe_array view = {rows->data, out->dtype, 0, 2, shape, strides};
    if (sinpe_run(&store, &view, NULL) != SINPE_OK) {
        sinpe_rows_release(rows);
        return;
    }
    sinpe_rows_keep(rows);
    plan->made = rows;
}

/* Rows of one block of range positions (a decoding step, a short table):
 * the table's kept anchors of the block, so that a loop of such calls
 * computes them once per block rather than once per call. */
static void hold_anchors(plan_t *plan)
{
    const group_t *g = &plan->groups[0];
    if (plan->ngroups != 1 || g->axis < 0 || g->table == NULL || g->ntiles != 1 ||
        plan->padding != NULL) {
        return;
    }
    const int64_t p0 = sinpe_block_start(g->offset);
    if (p0 == sinpe_block_start(g->offset + g->outer_count - 1)) {
        plan->anchors = sinpe_anchors_hold(g->table, p0);
    }
}

/* ------------------------------------------------------------------ */
/* The cut (plan.h).  Sizes are estimated in double: they only steer the
 * cut, and a strided view may describe more bytes than a size_t counts. */

/* An add of a made table makes nothing per chunk, so its chunks follow the
 * array's memory: each copy's rows in turn where the copies of a row lie
 * further apart than the rows (batch-first), else spans of rows with all
 * their copies (seq-first); about CHUNK_BYTES of the array each, in address
 * order.  (Span by span over all copies, with the copies in parts, it took
 * 1.45x NumPy's add of (32, 512, 512) and 1.2x of (512, 32, 512) on the AMD
 * EPYC.) */
static void cut_made_rows(plan_t *plan, double row_bytes)
{
    const group_t *g = &plan->groups[0];
    const int inner_last = g->inner.naxes - 1;
    const int copies_apart =
        inner_last >= 0 && llabs((long long)g->outer.bstride[0][0]) <
                               llabs((long long)g->inner.bstride[0][inner_last]);
    const double copies = copies_apart ? 1.0 : (double)g->inner_count;
    plan->span = count_in(ceil(CHUNK_BYTES / (row_bytes * copies)), g->outer_count);
    plan->shift = 0;
    plan->spans = ceil_div(g->outer_count, plan->span);
    plan->per_part = copies_apart ? 1 : g->inner_count;
    plan->parts = ceil_div(g->inner_count, plan->per_part);
    plan->parts_first = copies_apart;
    plan->chunks = plan->spans * plan->parts; /* each holds an element: fits */
    plan->cancel_period = 1; /* adds take no cancel callback */
}

static void cut_spans(plan_t *plan, double row_bytes)
{
    const group_t *g = &plan->groups[0];
    if (plan->made != NULL) {
        cut_made_rows(plan, row_bytes);
        return;
    }
    const double outer_bytes = row_bytes * (double)g->inner_count;
    double span;
    if (plan->adding && plan->made == NULL) {
        /* The tile bounds the span, in whole blocks when it can.  Every
         * chunk makes its own rows, so threads get their chunks from
         * shorter spans (down to a block) before they would split the
         * copies into parts that each make the same rows again. */
        span = (double)plan->tile_rows;
        span = span >= SINPE_BLOCK_ROWS ? SINPE_BLOCK_ROWS * floor(span / SINPE_BLOCK_ROWS) : span;
        const double shared = SINPE_BLOCK_ROWS *
                              ceil((double)g->outer_count / (4.0 * plan->threads) / SINPE_BLOCK_ROWS);
        span = span >= SINPE_BLOCK_ROWS && shared < span ? shared : span;
    } else { /* a chunk's bytes, in whole blocks (one anchor each) */
        span = SINPE_BLOCK_ROWS * ceil(CHUNK_BYTES / (outer_bytes > 1.0 ? outer_bytes : 1.0) /
                                       SINPE_BLOCK_ROWS);
    }
    plan->span = count_in(span, g->outer_count);
    /* range positions: spans start at absolute block boundaries */
    plan->shift = g->axis >= 0 && plan->span % SINPE_BLOCK_ROWS == 0
                      ? (ptrdiff_t)(g->offset - sinpe_block_start(g->offset))
                      : 0;
    plan->spans = ceil_div(g->outer_count + plan->shift, plan->span);
    /* The inner rows in parts too: stores when a span of outer rows alone
     * is more than a chunk (few positions, many copies), and both so that
     * every thread gets about four chunks. */
    const double span_bytes = outer_bytes * (double)plan->span;
    double parts = plan->adding && plan->made == NULL ? 1.0 : ceil(span_bytes / CHUNK_BYTES);
    const double busy = ceil(4.0 * plan->threads / ((double)plan->spans * (double)g->ntiles));
    parts = plan->threads > 1 && busy > parts ? busy : parts;
    plan->per_part = ceil_div(g->inner_count, count_in(parts, g->inner_count));
    plan->parts = ceil_div(g->inner_count, plan->per_part);
    plan->chunks = plan->spans * plan->parts * g->ntiles; /* each holds an element: fits */
    plan->cancel_period = count_in(ceil(CANCEL_BYTES * plan->parts / (span_bytes + 1.0)), 1000000000);
}

void sinpe_plan_cut_windows(plan_t *plan, double most_window)
{
    const group_t *g = &plan->groups[0];
    plan->length = g->outer.shape[g->outer.naxes - 1];
    plan->leads = g->outer_count / plan->length;
    /* half the tile, so that positions shifted between sequences (left
     * padding) still fit one range; a kept table holds them all */
    const double half = (double)(plan->tile_rows / 2);
    plan->window = plan->made != NULL ? plan->length
                                      : count_in(most_window < half ? most_window : half,
                                                 plan->length);
    plan->windows = ceil_div(plan->length, plan->window);
    const double busy = ceil(4.0 * plan->threads / ((double)plan->windows * (double)g->ntiles));
    plan->per_part = ceil_div(plan->leads, count_in(plan->threads > 1 ? busy : 1.0, plan->leads));
    plan->parts = ceil_div(plan->leads, plan->per_part);
    plan->chunks = plan->windows * plan->parts * g->ntiles;
    plan->cancel_period = 1; /* adds take no cancel callback */
}

/* Per-worker scratch, wide tables' step-row keys and (with_tiles: adds',
 * rotations') tiles of plan->tile_bytes, in one allocation: a decoding
 * step's add spent a fifth of its time in malloc. */
int sinpe_plan_alloc_scratch(plan_t *plan, int with_tiles)
{
    plan->scratch_doubles = sinpe_plan_scratch_doubles(plan);
    const size_t threads = (size_t)plan->threads;
    const size_t scratch = (threads * plan->scratch_doubles * sizeof(double) +
                            threads * sizeof(ptrdiff_t) + 63) / 64 * 64;
    const size_t tiles = with_tiles ? threads * plan->tile_bytes : 0;
    char *block = scratch_take(scratch + tiles + 64);
    if (block == NULL) {
        return SINPE_ERR_NOMEM;
    }
    plan->scratch = (double *)(void *)block;
    plan->built = (ptrdiff_t *)(void *)(block + threads * plan->scratch_doubles * sizeof(double));
    for (int w = 0; w < plan->threads; ++w) {
        plan->built[w] = -1;
    }
    if (tiles > 0) { /* on a cache line */
        plan->tiles = block + scratch + (64 - (uintptr_t)(block + scratch) % 64) % 64;
    }
    return SINPE_OK;
}

/* Threads, streaming stores, the chunks and the scratch they need. */
static int cut(plan_t *plan, const sinpe_plan *p, const sinpe_array *out, ptrdiff_t rows)
{
    const double itemsize = (double)sinpe_itemsize(out->dtype);
    double row_bytes = 0.0;
    for (int t = 0; t < plan->ntargets; ++t) {
        row_bytes += (double)plan->d * (double)sinpe_itemsize(plan->target[t].fmt.dtype);
    }
    const double total = row_bytes * (double)rows;
    plan->threads = total < PARALLEL_MIN_BYTES ? 1 : sinpe_threads_get();
    const int fresh = (p->flags & SINPE_FRESH_OUTPUT) != 0;
    for (int t = 0; t < plan->ntargets; ++t) {
        plan->target[t].fmt.streaming =
            !plan->adding && !fresh && plan->ntargets == 1 && p->split == NULL &&
            total >= STREAM_MIN_BYTES;
    }
    plan->tile_freqs = 0;
    for (int g = 0; g < plan->ngroups; ++g) {
        const ptrdiff_t f = min_ptrdiff(plan->groups[g].nfreq, SINPE_TILE_FREQS);
        plan->tile_freqs = f > plan->tile_freqs ? f : plan->tile_freqs;
    }
    if (plan->adding && plan->made == NULL) { /* a tile row: two columns per frequency, and a zero column */
        const double width = (double)min_ptrdiff(plan->d, 2 * plan->tile_freqs + 1);
        plan->tile_rows = count_in(floor(ADD_TILE_BYTES / (width * itemsize)), PTRDIFF_MAX / 2);
        if (plan->groups[0].axis >= 0) { /* range positions: no more rows than positions */
            plan->tile_rows = min_ptrdiff(plan->tile_rows, plan->groups[0].outer_count);
        }
        /* whole cache lines, so that workers' tiles never share one */
        plan->tile_bytes = ((size_t)(plan->tile_rows + 1) * (size_t)width * (size_t)itemsize + 63) /
                           64 * 64;
    }
    if (p->split != NULL) {
        if (sinpe_plan_cut_bands(plan, out, row_bytes, (double)rows) != SINPE_OK) {
            return SINPE_ERR_NOMEM;
        }
    } else if (plan->adding && plan->groups[0].axis < 0) {
        plan->cut = CUT_WINDOWS;
        sinpe_plan_cut_windows(plan, HUGE_VAL);
    } else {
        plan->cut = CUT_SPANS;
        cut_spans(plan, row_bytes);
    }
    return sinpe_plan_alloc_scratch(plan, plan->adding && plan->made == NULL);
}

/* Checks everything and makes the plan; *out_plan stays NULL (with
 * SINPE_OK) when the outputs are empty. */
static int plan_make(plan_t **out_plan, const sinpe_plan *p, const sinpe_array *out,
                     const sinpe_array *out2)
{
    *out_plan = NULL;
    if (p == NULL || check_outputs(p, out, out2) != SINPE_OK ||
        (p->rotate && sinpe_plan_check_rotation_views(p, out) != SINPE_OK)) {
        return SINPE_ERR_INVALID;
    }
    const int given = p->rotate && p->cos_cache != NULL; /* no positions, no frequencies */
    const int nrow_axes = out->ndim - 1;
    const ptrdiff_t d = out->shape[nrow_axes];
    /* An empty output (d = 0 too) needs no work and no table: only its
     * structure is checked. */
    ptrdiff_t rows = 1, elements = d;
    int overflow = 0, empty = d == 0;
    for (int i = 0; i < nrow_axes; ++i) {
        overflow |= sinpe_mul_overflow_ptrdiff(rows, out->shape[i], &rows);
        overflow |= sinpe_mul_overflow_ptrdiff(elements, out->shape[i], &elements);
        empty |= out->shape[i] == 0;
    }
    /* zero strides let a view describe more elements than ptrdiff_t counts;
     * positions: one per row, or per section and row */
    ptrdiff_t values = rows;
    overflow |= sinpe_mul_overflow_ptrdiff(rows, p->nsections > 1 ? p->nsections : 1, &values);
    if ((!given && check_positions(p, nrow_axes) != SINPE_OK) ||
        sinpe_plan_check_section_form(p) != SINPE_OK || (overflow && !empty)) {
        return SINPE_ERR_INVALID;
    }
    if (empty) {
        return (unsigned)p->layout <= SINPE_SINES_FIRST ? SINPE_OK : SINPE_ERR_INVALID;
    }
    const ptrdiff_t width = p->rotate && p->rotary_dim != 0 ? p->rotary_dim : d;
    if ((p->rotate ? sinpe_plan_check_rotation(p, out, d) : check_columns(p, d)) != SINPE_OK ||
        (p->split != NULL && sinpe_plan_check_grid(p, out) != SINPE_OK) ||
        (p->nsections > 0 && sinpe_plan_check_sections(p, width / 2) != SINPE_OK)) {
        return SINPE_ERR_INVALID;
    }
    if (out->data == NULL || (out2 != NULL && out2->data == NULL)) {
        return SINPE_ERR_INVALID;
    }
    plan_t *plan = calloc(1, sizeof *plan);
    const int ngroups = p->split != NULL ? nrow_axes : 1;
    group_t *groups = plan == NULL    ? NULL
                      : ngroups == 1 ? &plan->one_group
                                     : calloc((size_t)ngroups, sizeof *groups);
    if (groups == NULL) {
        free(plan);
        return SINPE_ERR_NOMEM;
    }
    plan->groups = groups;
    plan->ngroups = ngroups;
    plan->d = d;
    plan->adding = p->add != 0;
    plan->scale = p->rope || out->dtype == SINPE_FLOAT64 ? p->scale : (double)(float)p->scale;
    /* a rotation's source is read through the second target's strides */
    const sinpe_array *outs[2] = {out, out2 != NULL ? out2 : p->rotate ? p->source : NULL};
    plan->ntargets = out2 != NULL ? 2 : 1;
    for (int t = 0; t < plan->ntargets; ++t) {
        const sinpe_row_format fmt = {outs[t]->dtype, outs[t]->byteswapped != 0,
                                      outs[t]->strides[nrow_axes], 0};
        plan->target[t] = (target_t){outs[t]->data, fmt,
                                     !p->rope ? KIND_TABLE : t == 0 ? KIND_COS : KIND_SIN};
    }
    plan->rotating = p->rotate != 0;
    if (plan->rotating || p->nsections > 0) { /* caches with sections use its tile, as they are */
        rotation_t *rot = &plan->rot;
        rot->dim = width;
        rot->interleaved = p->layout == SINPE_INTERLEAVED;
        rot->tile_dtype = (plan->rotating && p->exact) || (out2 != NULL && out2->dtype != out->dtype)
                              ? SINPE_FLOAT64
                              : out->dtype;
        rot->scale = p->scale; /* a rotation's, or the caches' (sinpe.h's rope) */
        rot->inverse = plan->rotating && p->inverse;
        rot->staged = rot->tile_dtype != SINPE_FLOAT64 && (rot->scale != 1.0 || rot->inverse);
        if (plan->rotating && p->source != NULL) {
            rot->source = p->source->data;
            rot->source_fmt = row_format_of(p->source);
        }
    }
    int status = take_inputs(plan, p, values);
    const double most =
        given ? 0.0
              : max_abs_position(plan, p, values, p->pos_axis >= 0 ? out->shape[p->pos_axis] : 0);
    if (status == SINPE_OK && most < 0.0) {
        status = SINPE_ERR_INVALID;
    }
    ptrdiff_t col = 0, sines = 0;
    for (int i = 0; i < ngroups && status == SINPE_OK && !given; ++i) {
        const int axis = p->split != NULL ? p->order[i] : p->pos_axis;
        const ptrdiff_t columns = p->split != NULL ? p->split[axis] : width;
        const double reach = p->split != NULL ? (double)(out->shape[axis] - 1) : most;
        status = make_group(plan, p, outs, &groups[i], axis, col, columns, sines, reach);
        col += columns;
        sines += columns / 2;
    }
    if (status == SINPE_OK && p->nsections > 0) {
        status = sinpe_plan_sections(plan, p, groups[0].nfreq, rows);
    }
    if (status == SINPE_OK) {
        if (p->rotate || p->nsections > 0) {
            hold_anchors(plan);
            status = sinpe_plan_cut_rotation(plan, p, out, rows);
            if (status == SINPE_OK && plan->rotating) {
                sinpe_rotation_find_made_rows(plan, p);
            }
        } else {
            find_made_rows(plan, p, out);
            if (plan->made != NULL) {
                groups[0].ntiles = 1; /* the made rows hold every column */
            } else {
                hold_anchors(plan);
            }
            status = cut(plan, p, out, rows);
        }
    }
    if (status != SINPE_OK) {
        plan_free(plan);
        return status;
    }
    *out_plan = plan;
    return SINPE_OK;
}

int sinpe_run(const sinpe_plan *p, const sinpe_array *out, const sinpe_array *out2)
{
    plan_t *plan;
    int status = plan_make(&plan, p, out, out2);
    if (status != SINPE_OK || plan == NULL) {
        return status;
    }
    status = sinpe_run_chunks(plan->chunks, plan->threads, sinpe_plan_chunk, plan,
                              plan->adding || plan->rotating ? NULL : p->cancel,
                              p->cancel_context,
                              plan->cancel_period);
    plan_free(plan);
    return status;
}

int sinpe_set_num_threads(int threads)
{
    if (threads < 1 || threads > SINPE_MAX_THREADS) {
        return SINPE_ERR_INVALID;
    }
    sinpe_threads_set(threads);
    return SINPE_OK;
}

int sinpe_get_num_threads(void)
{
    return sinpe_threads_get();
}

void sinpe_clear_caches(void)
{
    sinpe_table_cache_clear();
    sinpe_rows_clear();
    free((void *)(uintptr_t)sinpe_atomic_exchange(&spare_scratch, 0));
}
