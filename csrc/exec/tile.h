/*
 * A worker's tile of table rows in the target's own dtype (native order,
 * contiguous): the rows of a range of positions, made once per chunk and
 * then read for every copy of those positions.  Adds (exec/add.c) add it
 * to their rows; assembled bands (exec/bands.c) copy whole rows from the
 * tiles of a grid's groups.  Not public API.
 */
#ifndef SINPE_EXEC_TILE_H
#define SINPE_EXEC_TILE_H

#include <stddef.h>
#include <stdint.h>

#include "exec/work.h"

/* The tile's columns packed (interleaved from column 0, or the sines then
 * the cosines), then on tile 0 the unused columns (zeros).  runs map tile
 * columns to runs of the array's columns, merged where they are adjacent in
 * both (a whole row for a table of one tile). */
typedef struct {
    char *data;
    ptrdiff_t row_bytes;
    size_t itemsize;
    sinpe_row_format fmt;
    sinpe_pairs pairs; /* the columns, in the tile */
    ptrdiff_t zeros_at, zeros;
    int nruns;
    struct {
        ptrdiff_t col, off, count;
    } runs[3];
} tile_t;

/* Worker `worker`'s tile of frequency tile `tile` of group g. */
void sinpe_tile_layout(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                       tile_t *t);

/* Fills tile row `slot` onwards with the rows of positions first ..
 * first + rows - 1 (is_int), or slot with the row of non-integral x. */
void sinpe_tile_fill(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                     const tile_t *t, ptrdiff_t slot, int is_int, int64_t first, ptrdiff_t rows,
                     double x);

/* The made table's rows (plan->made) as a tile whose slot 0 is position
 * `first`: every column in one run. */
void sinpe_tile_of_made(const plan_t *plan, int64_t first, tile_t *t);

#endif /* SINPE_EXEC_TILE_H */
