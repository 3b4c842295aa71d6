/*
 * The executor's actions, one file each, that exec/chunk.c chooses between
 * by the plan's cut and what it does to its target: a chunk of rows to
 * store (exec/store.c), to add to (exec/add.c), of a grid's band
 * (exec/bands.c), to rotate (exec/rotate.c), or of caches or a rotation
 * with sections (exec/sections.c).  Not public API.
 */
#ifndef SINPE_EXEC_ACTIONS_H
#define SINPE_EXEC_ACTIONS_H

#include <stddef.h>

#include "exec/work.h"

/* Stores on a spans cut; outer rows i0 .. i1 - 1 times inner rows
 * j0 .. j1 - 1 of group g, frequencies of tile `tile` (a band's too). */
void sinpe_store_chunk(const plan_t *plan, ptrdiff_t chunk, int worker);
void sinpe_store_range(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                       ptrdiff_t i0, ptrdiff_t i1, ptrdiff_t j0, ptrdiff_t j1);

/* Adds on a spans or a windows cut. */
void sinpe_add_chunk(const plan_t *plan, ptrdiff_t chunk, int worker);

/* A grid's band (bands cut): assembled from per-group tiles, or stored
 * group by group. */
void sinpe_band_chunk(const plan_t *plan, ptrdiff_t chunk, int worker);

/* Rotations on a spans, windows or rows cut. */
void sinpe_rotate_chunk(const plan_t *plan, ptrdiff_t chunk, int worker);

/* RoPE caches and rotations with sections, on a windows cut. */
void sinpe_sections_chunk(const plan_t *plan, ptrdiff_t chunk, int worker);

#endif /* SINPE_EXEC_ACTIONS_H */
