/*
 * The work of one sinpe_run call as the executor runs it (plan_t): what
 * plan/ makes of a call (its checks passed, its inputs snapshotted, its
 * tables found and its cut made) and what exec/ reads, chunk by chunk, on
 * any thread.  Defined here, below the planner, so that the executor needs
 * nothing of how a plan is made.  Not public API.
 *
 * Rows and columns.  The rows of the outputs are every index but the
 * feature one.  The columns fall into groups: one group is the columns fed
 * by one table of frequencies, with its positions along one row axis (or
 * one per row).  A plain table, an encode_at or RoPE call has one group; a
 * grid has one per axis.  For each group the row axes split into outer
 * (the positions' axis, or every row axis for explicit positions) and
 * inner (the copies of a position: the batch of an add, the other axes of
 * a grid).
 *
 * Columns.  For a tile of frequencies [k0, k1), a target receives each
 * frequency's sine and cosine in the columns its layout gives them
 * (exec/walk.h's pairs_of, kernels/rows.h's pair writer).
 *
 * The cut (plan/cut.c; a grid's bands plan/grid.c's, a rotation's and
 * sections' plan/rotation.c's) is one of:
 *  - spans: a chunk is a span of outer rows (whole 32-row blocks at
 *    absolute positions for range positions) x a part of the inner rows x a
 *    tile of frequencies;
 *  - windows (adds at explicit positions): a window of the innermost row
 *    axis x a part of the leading rows, so the rows of a tile of positions
 *    are reused across sequences;
 *  - bands (grids): whole rows, a span of one axis with every index of the
 *    axes after it.  Into plain rows, each group makes the rows of the
 *    band's positions once into a tile and the band's rows are copied
 *    together from the tiles in address order (assembled); otherwise each
 *    group writes its columns while the band is in the caches;
 *  - rows (rotations by given caches): a run of C-order rows.
 * Rotations by their own caches use spans (range positions) and windows
 * (explicit ones), as adds do; RoPE caches with sections use a rotation's
 * tile and windows.
 */
#ifndef SINPE_EXEC_WORK_H
#define SINPE_EXEC_WORK_H

#include <stddef.h>
#include <stdint.h>

#include "core/row_cache.h"
#include "core/table.h"
#include "kernels/rows.h"
#include "sinpe.h"

/* Frequency tiles: anchors stay in L1 whatever d is, and a wide table's
 * step rows are built per tile (core/table.h). */
#define SINPE_TILE_FREQS 512

enum { KIND_TABLE, KIND_COS, KIND_SIN }; /* what a target receives */
enum { CUT_SPANS, CUT_WINDOWS, CUT_BANDS, CUT_ROWS };

typedef struct {
    char *data;
    sinpe_row_format fmt;
    int kind;
} target_t;

/* A set of row axes: lengths, byte strides per target, and element strides
 * in the C order of all row axes (the index of positions and padding). */
typedef struct {
    int naxes;
    ptrdiff_t rows;
    ptrdiff_t shape[SINPE_MAX_DIMS];
    ptrdiff_t bstride[2][SINPE_MAX_DIMS];
    ptrdiff_t cstride[SINPE_MAX_DIMS];
} axes_t;

typedef struct {
    ptrdiff_t index[SINPE_MAX_DIMS];
    ptrdiff_t off[2]; /* bytes, per target */
    ptrdiff_t flat;   /* C-order row number */
} cursor_t;

typedef struct {
    sinpe_table *table;          /* NULL: no frequencies (every column zero) */
    ptrdiff_t nfreq, width;      /* frequencies; columns of the group */
    ptrdiff_t col;               /* interleaved: sin k at col + 2k, cos at col + 2k + 1 */
    ptrdiff_t sin_col, cos_col;  /* otherwise: sin k at sin_col + k, cos k at cos_col + k */
    int interleaved;
    int axis;                    /* >= 0: positions offset + index along this row axis */
    int64_t offset;
    axes_t outer, inner;
    ptrdiff_t outer_count, inner_count;
    ptrdiff_t ntiles;
    uint32_t residues;           /* the step rows the group needs */
    size_t tile_at;              /* assembled bands: its rows in a worker's tile (bytes) */
} group_t;

/* A rotation (sinpe.h's rotate; exec/rotate.c runs it): what it reads
 * besides the target and how its caches are made. */
typedef struct {
    ptrdiff_t dim;            /* the rotary columns r: pairs (k, k + r/2) or (2k, 2k + 1) */
    int interleaved;
    int staged;               /* cache rows made in float64, then scaled or negated and
                               * rounded to the tile's dtype */
    size_t stage_at;          /* staged: where a worker's float64 rows start in its tile
                               * (bytes; whole lines after the cache rows) */
    int inverse;
    double scale;             /* as given (sinpe_plan.scale), not rounded */
    sinpe_dtype tile_dtype;   /* the target's, or float64 (exact) */
    char *source;             /* NULL: in place; its byte strides are the axes' bstride[1] */
    sinpe_row_format source_fmt;
    /* given caches (CUT_ROWS): every row axis of the target, with the byte
     * strides of the target, the source (or the target) and the caches */
    const char *cos, *sin;
    sinpe_row_format cos_fmt, sin_fmt;
    int naxes;
    ptrdiff_t rows;
    ptrdiff_t shape[SINPE_MAX_DIMS];
    ptrdiff_t bstride[4][SINPE_MAX_DIMS];
} rotation_t;

/* Sections (sinpe.h; exec/sections.c runs them): rows of RoPE caches or of
 * a rotation whose frequencies take their positions from S rows of
 * positions.  They reuse a rotation's tile (exec/rot_tile.h) and its
 * windows cut: the cache rows of the window's positions, of every section,
 * are made once into the tile, then each row's merged cache row (each
 * frequency from its section's position) is gathered into the merged rows
 * after it. */
typedef struct {
    int count;          /* S; 0: no sections */
    unsigned char *of;  /* [nfreq]: the section of each frequency (owned) */
    ptrdiff_t stride;   /* positions: section s of C-order row i at [s * stride + i] */
    size_t merged_at;   /* where a worker's merged rows start in its tile (bytes) */
    size_t same_at;     /* and a flag per leading row of a chunk: whether it has the
                         * positions of the leading row before it */
} sections_t;

typedef struct {
    int ntargets;
    target_t target[2];
    ptrdiff_t d;
    int ngroups;
    group_t *groups;             /* &one_group, or allocated for grids of several axes */
    group_t one_group;
    int adding;
    double scale;                /* sinpe_plan.scale: adds' already rounded, RoPE caches'
                                  * as given */
    const sinpe_anchors *anchors; /* rows of one block: the table's kept anchors of
                                   * it (held), or NULL */
    sinpe_rows *made;            /* adds (rotations) at range positions: the table's
                                  * (tile's) rows, made before (core/row_cache.h), or
                                  * NULL: made per chunk */
    const int64_t *ints;         /* explicit positions, per C-order row */
    const double *reals;
    const unsigned char *padding;

    /* the cut */
    int cut, threads;
    ptrdiff_t tile_freqs;        /* the most frequencies of any tile */
    ptrdiff_t chunks, cancel_period;
    ptrdiff_t span, spans, shift; /* spans: outer rows per chunk, their count, the
                                   * rows before the first (block alignment) */
    ptrdiff_t parts, per_part;    /* spans: of the inner rows; windows: of the leading rows */
    int parts_first;              /* spans: chunks go part by part (each part's spans in
                                   * turn) rather than span by span */
    ptrdiff_t window, windows, length, leads; /* windows: of the innermost axis */
    int band_axis, row_axes;      /* bands: span `span` of row axis band_axis */
    ptrdiff_t row_shape[SINPE_MAX_DIMS];
    ptrdiff_t row_bstride[SINPE_MAX_DIMS]; /* bands: byte strides of the row axes */
    int assemble;                 /* bands: rows copied together from per-group tiles */
    ptrdiff_t *held;              /* assembled bands: per worker and group, the outer
                                   * range [held[0], held[1]) its tile holds */

    /* scratch, one slice per worker */
    double *scratch;
    size_t scratch_doubles;
    char *tiles;                  /* adds, assembled bands: a tile of elements per worker
                                   * (adds': inside the scratch's allocation) */
    size_t tile_bytes;
    ptrdiff_t tile_rows;          /* rows a tile holds besides one spare row */
    ptrdiff_t *built;             /* wide tables: group * ntiles + tile whose steps a
                                   * worker holds, -1 none */
    void *snapshot;               /* copies of positions and padding (owned) */

    int rotating;                 /* the target is rotated (exec/rotate.c), on spans,
                                   * windows or rows (given caches) */
    rotation_t rot;               /* rotations; with sections, caches too (their tile) */
    sections_t sections;
} plan_t;

static inline ptrdiff_t min_ptrdiff(ptrdiff_t a, ptrdiff_t b)
{
    return a < b ? a : b;
}

static inline ptrdiff_t abs_ptrdiff(ptrdiff_t a)
{
    return a < 0 ? -a : a;
}

/* ------------------------------------------------------------------ */
/* A worker's scratch: its layout and, in one place with it, its size, by
 * which plan/cut.c allocates every worker's slice. */

typedef struct {
    double *sin, *cos;   /* [2 * tile_freqs]: anchors (of two blocks), or a
                          * non-integral row's values */
    const double *s0, *c0; /* the anchors anchor() gave: sin, cos, or the
                            * table's kept ones (plan->anchors) */
    double *tmp;         /* [4 * tile_freqs]: the row writers' scratch */
    double *step_buffer; /* a wide table's step rows */
} scratch_t;

/* Doubles of scratch per worker for the plan's groups and tiles. */
static inline size_t sinpe_scratch_doubles(const plan_t *plan)
{
    int wide = 0;
    for (int g = 0; g < plan->ngroups; ++g) {
        wide |= plan->groups[g].table != NULL && plan->groups[g].table->step_c == NULL;
    }
    const size_t f = (size_t)plan->tile_freqs;
    return 8 * f + (wide ? 2 * SINPE_BLOCK_ROWS * f : 0) + 1;
}

static inline scratch_t scratch_of(const plan_t *plan, int worker)
{
    const ptrdiff_t f = plan->tile_freqs;
    double *p = plan->scratch + (size_t)worker * plan->scratch_doubles;
    scratch_t s;
    s.sin = p, p += 2 * f;
    s.cos = p, p += 2 * f;
    s.s0 = s.sin, s.c0 = s.cos;
    s.tmp = p, p += 4 * f;
    s.step_buffer = p;
    return s;
}

#endif /* SINPE_EXEC_WORK_H */
