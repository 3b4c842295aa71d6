/*
 * A rotation's tile of RoPE cache rows, per worker and frequency tile
 * (exec/rot_tile.c): exec/rotate.c makes it and rotates rows by it;
 * exec/sections.c merges the rows of several positions from it, and
 * plan/rotation.c fills a kept table through it.  Not public API.
 */
#ifndef SINPE_EXEC_ROT_TILE_H
#define SINPE_EXEC_ROT_TILE_H

#include <stddef.h>
#include <stdint.h>

#include "exec/work.h"

/* A worker's tile for frequencies [k0, k0 + count): row i holds the cos
 * row, then the sin row, of one position, `cols` elements each: split, one
 * value per frequency (both columns of a pair read it: c_second 0), so the
 * tile is no larger than the rows of x it rotates; interleaved, each value
 * twice (2j, 2j + 1), as the rotation loop reads a cache.  After tile_rows
 * rows of a range of positions come the spare rows (one, or one per
 * section), then (staged) the float64 rows, then (sections) the merged
 * rows. */
typedef struct {
    char *data;
    ptrdiff_t row_bytes, cols;
    double *stage;        /* staged: float64 rows of the same columns */
    ptrdiff_t stage_row;  /* doubles per staged row */
    sinpe_row_format fmt; /* the tile's elements, native and contiguous */
    ptrdiff_t k0, count;
    int first_tile;
} rot_tile_t;

/* Worker `worker`'s tile of frequency tile `tile` of group g. */
void sinpe_rot_tile_layout(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                           rot_tile_t *t);

/* Tile rows from `slot` on: the rows of positions first .. first + rows - 1
 * (is_int), or slot alone with the row of non-integral x; scaled, negated
 * (inverse) and rounded once as the rotation wants them. */
void sinpe_rot_tile_fill(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                         const rot_tile_t *t, ptrdiff_t slot, int is_int, int64_t first,
                         ptrdiff_t rows, double x);

/* The tile laid out, and the rows of positions lo .. hi made from slot 0
 * when they fit in its tile_rows (lo > hi: no position); returns whether
 * they did. */
int sinpe_rot_tile_range(const plan_t *plan, const group_t *g, int worker, ptrdiff_t tile,
                         rot_tile_t *t, int64_t lo, int64_t hi);

/* `rows` rows of x at dst (stride dst_stride; from src at src_stride, or
 * in place) rotated by the tile-format rows at cache (cache_stride: the
 * row bytes, or 0: one row for all), pairs of the tile's frequencies; with
 * a source, frequency tile 0 copies the columns past the rotary ones. */
void sinpe_rot_tile_rotate(const plan_t *plan, const group_t *g, const rot_tile_t *t,
                           const char *cache, ptrdiff_t cache_stride, char *dst,
                           ptrdiff_t dst_stride, const char *src, ptrdiff_t src_stride,
                           sinpe_rotate_shape shape);

#endif /* SINPE_EXEC_ROT_TILE_H */
