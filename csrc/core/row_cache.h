/*
 * Internal: recently made tables of values, for adds and rotations.  Not
 * public API.
 *
 * Why: an add makes its table rows and adds them to every copy of a
 * position.  With a large batch that is nothing, but a training loop that
 * adds (2, 1024, 2048) or (4, 256, 256) every step would make the whole
 * table for every two or four copies: the making then costs more than the
 * add.  Tables asked for again are kept (rows of positions in one element
 * type and layout, exactly the values a store writes), and later adds of
 * positions they cover only add.  Rotations at range positions (rope_ of
 * a small batch, every step) keep their tile's rows the same way.  Values
 * depend only on (position, frequency): a table from the cache has the bits
 * of one made anew.
 *
 * Bounds: at most SINPE_ROW_CACHE_SLOTS tables and SINPE_ROW_CACHE_BYTES in
 * all, SINPE_ROW_CACHE_MAX_BYTES each, least recently used out first; a
 * table is kept only when asked for a second time (one-off calls never pay
 * for filling the cache) and only if at least SINPE_ROW_CACHE_MIN_BYTES
 * (smaller ones cost less to make than to look up and keep).
 */
#ifndef SINPE_ROW_CACHE_H
#define SINPE_ROW_CACHE_H

#include <stddef.h>
#include <stdint.h>

#include "sinpe.h"

#define SINPE_ROW_CACHE_SLOTS 8
#define SINPE_ROW_CACHE_BYTES ((size_t)64 << 20)
#define SINPE_ROW_CACHE_MAX_BYTES ((size_t)16 << 20)
#define SINPE_ROW_CACHE_MIN_BYTES ((size_t)16 << 10)

/* What a table's values are made from: everything but the positions.  An
 * add's table has d columns of the layout; a rotation's (exec/rot_tile.h)
 * has its tile's rows of d elements (cos and sin of its frequencies, scaled
 * and with the sines negated for the inverse, as the rotation reads them).
 * Adds leave the last three zero. */
typedef struct {
    sinpe_schedule schedule;
    double n;
    ptrdiff_t d;
    sinpe_layout layout;
    sinpe_dtype dtype;
    int rotation, inverse;
    double scale;
} sinpe_rows_key;

/* Rows of positions first .. first + count - 1, d native elements each,
 * contiguous (row_bytes apart). */
typedef struct sinpe_rows {
    sinpe_rows_key key;
    int64_t first, count;
    size_t row_bytes, bytes;
    char *data;
    int refs;
    uint64_t last_use;
} sinpe_rows;

/* A kept table holding the rows of positions first .. first + count - 1,
 * referenced (release it); NULL if there is none. */
sinpe_rows *sinpe_rows_find(const sinpe_rows_key *key, int64_t first, int64_t count);

/* A kept table holding the rows of positions first .. first + count - 1
 * (*fresh 0), or, when that table was asked for before (and not kept) and
 * is of a size the cache keeps, room for it (*fresh 1: data uninitialised;
 * fill it, then keep or release it); NULL otherwise or when out of memory.
 * Records the request.  Referenced: release it. */
sinpe_rows *sinpe_rows_find_or_new(const sinpe_rows_key *key, int64_t first, int64_t count,
                                   int *fresh);

/* Keeps a filled table (the cache takes a reference of its own). */
void sinpe_rows_keep(sinpe_rows *rows);

void sinpe_rows_release(sinpe_rows *rows);

/* Drops every kept table (those in use are freed when released). */
void sinpe_rows_clear(void);

/* How many tables are kept, and their bytes (tests). */
void sinpe_rows_stats(int *tables, size_t *bytes);

#endif /* SINPE_ROW_CACHE_H */
