/*
 * The cut (plan/cut.c): where a call is split into chunks, threads,
 * streaming stores and cancel points, for tables and adds; and what the
 * other cuts (plan/grid.c's bands, plan/rotation.c's) take from it:
 * the sizes that steer a cut, the windows of explicit positions, and each
 * worker's scratch.  Sizes are estimated in double: they only steer the
 * cut, and a strided view may describe more bytes than a size_t counts.
 * Not public API.
 */
#ifndef SINPE_PLAN_CUT_H
#define SINPE_PLAN_CUT_H

#include <stddef.h>

#include "exec/work.h"
#include "sinpe.h"

/* The calling thread asks the cancel callback about this often. */
#define CANCEL_BYTES ((double)(8 << 20))
/* Output bytes per chunk: big enough that the pool hand-off vanishes, small
 * enough to balance two threads and to check for Ctrl-C often. */
#define CHUNK_BYTES ((double)(256 << 10))
/* Below this much output a call stays on one thread: waking a helper
 * (~4 us) would cost more than it saves. */
#define PARALLEL_MIN_BYTES ((double)(256 << 10))

/* For a, b >= 1, without the overflow of (a + b - 1) / b. */
static inline ptrdiff_t ceil_div(ptrdiff_t a, ptrdiff_t b)
{
    return a / b + (a % b != 0);
}

/* x clamped to [1, most] as a count (x may be huge or not finite). */
static inline ptrdiff_t count_in(double x, ptrdiff_t most)
{
    return !(x >= 1.0) ? 1 : x >= (double)most ? most : (ptrdiff_t)x;
}

/* A table's or an add's cut (spans, windows, or an add's kept table's
 * rows), with threads, streaming stores and scratch (SINPE_ERR_NOMEM). */
int sinpe_plan_cut(plan_t *plan, const sinpe_plan *p, const sinpe_array *out, ptrdiff_t rows);

/* Bytes of one row of every target, and the threads of a call that
 * writes `total` bytes. */
double sinpe_plan_row_bytes(const plan_t *plan);
int sinpe_plan_threads(double total);

/* plan->tile_freqs: the most frequencies of any group's tile. */
void sinpe_plan_tile_freqs(plan_t *plan);

/* The windows cut of explicit positions: windows of at most most_window
 * rows of the innermost axis, and half the tile. */
void sinpe_plan_cut_windows(plan_t *plan, double most_window);

/* Per-worker scratch, wide tables' step-row keys and (with_tiles: adds',
 * rotations') tiles of plan->tile_bytes, in one allocation
 * (SINPE_ERR_NOMEM); released by sinpe_plan_free_scratch. */
int sinpe_plan_alloc_scratch(plan_t *plan, int with_tiles);
void sinpe_plan_free_scratch(plan_t *plan);

/* Frees the spare scratch block kept from the last call (sinpe_clear_caches). */
void sinpe_plan_clear_scratch(void);

#endif /* SINPE_PLAN_CUT_H */
