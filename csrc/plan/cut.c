/*
 * The cut of tables and adds (plan/cut.h), and the pieces every cut
 * shares: threads, the windows of explicit positions, each worker's
 * scratch.
 */
#include "core/platform.h"

#include <math.h>
#include <stdlib.h>

#include "core/elements.h"
#include "core/threads.h"
#include "plan/cut.h"

/* An add's tile of table rows per worker: a quarter of L2 or less, so it
 * stays there while the array streams past it. */
#ifndef ADD_TILE_BYTES /* overridable for measurements, as STREAM_MIN_BYTES */
#define ADD_TILE_BYTES ((double)(256 << 10))
#endif
/* Tables this large are written with streaming stores (kernels/rows.c),
 * which skip the read-for-ownership of every line and do not evict the rest
 * of the caches.  Only well beyond the last-level cache: into an array that
 * is still cached (a buffer rewritten in a loop), a streaming store must first
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

void sinpe_plan_free_scratch(plan_t *plan)
{
    scratch_release(plan->scratch); /* with built and adds' tiles */
}

void sinpe_plan_clear_scratch(void)
{
    free((void *)(uintptr_t)sinpe_atomic_exchange(&spare_scratch, 0));
}

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

/* In one allocation: a decoding step's add spent a fifth of its time in
 * malloc. */
int sinpe_plan_alloc_scratch(plan_t *plan, int with_tiles)
{
    plan->scratch_doubles = sinpe_scratch_doubles(plan);
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

double sinpe_plan_row_bytes(const plan_t *plan)
{
    double row_bytes = 0.0;
    for (int t = 0; t < plan->ntargets; ++t) {
        row_bytes += (double)plan->d * (double)sinpe_itemsize(plan->target[t].fmt.dtype);
    }
    return row_bytes;
}

int sinpe_plan_threads(double total)
{
    return total < PARALLEL_MIN_BYTES ? 1 : sinpe_threads_get();
}

void sinpe_plan_tile_freqs(plan_t *plan)
{
    plan->tile_freqs = 0;
    for (int g = 0; g < plan->ngroups; ++g) {
        const ptrdiff_t f = min_ptrdiff(plan->groups[g].nfreq, SINPE_TILE_FREQS);
        plan->tile_freqs = f > plan->tile_freqs ? f : plan->tile_freqs;
    }
}

int sinpe_plan_cut(plan_t *plan, const sinpe_plan *p, const sinpe_array *out, ptrdiff_t rows)
{
    const double itemsize = (double)sinpe_itemsize(out->dtype);
    const double row_bytes = sinpe_plan_row_bytes(plan);
    const double total = row_bytes * (double)rows;
    plan->threads = sinpe_plan_threads(total);
    const int fresh = (p->flags & SINPE_FRESH_OUTPUT) != 0;
    for (int t = 0; t < plan->ntargets; ++t) {
        plan->target[t].fmt.streaming =
            !plan->adding && !fresh && plan->ntargets == 1 && total >= STREAM_MIN_BYTES;
    }
    sinpe_plan_tile_freqs(plan);
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
    if (plan->adding && plan->groups[0].axis < 0) {
        plan->cut = CUT_WINDOWS;
        sinpe_plan_cut_windows(plan, HUGE_VAL);
    } else {
        plan->cut = CUT_SPANS;
        cut_spans(plan, row_bytes);
    }
    return sinpe_plan_alloc_scratch(plan, plan->adding && plan->made == NULL);
}
