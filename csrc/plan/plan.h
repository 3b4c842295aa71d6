/*
 * Internal: the plan of one sinpe_run call, made by plan.c and executed
 * chunk by chunk by run.c.  Not public API.
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
 * (run.c's pairs_of, rows.c's pair writer).
 *
 * The cut (plan.c's cut; a grid's bands plan_grid.c's, a rotation's and
 * sections' plan_rotate.c's) is one of:
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
#ifndef SINPE_PLAN_H
#define SINPE_PLAN_H

#include <stddef.h>
#include <stdint.h>

#include "core/row_cache.h"
#include "kernels/rows.h"
#include "sinpe.h"
#include "core/table.h"

/* Frequency tiles: anchors stay in L1 whatever d is, and a wide table's
 * step rows are built per tile (table.h). */
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

/* A rotation (sinpe.h's rotate; rotate.c runs it): what it reads besides
 * the target and how its caches are made. */
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

/* Sections (sinpe.h; sections.c runs them): rows of RoPE caches or of a
 * rotation whose frequencies take their positions from S rows of
 * positions.  They reuse a rotation's tile (rotate.c) and its windows cut:
 * the cache rows of the window's positions, of every section, are made
 * once into the tile, then each row's merged cache row (each frequency
 * from its section's position) is gathered into the merged rows after it. */
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
                                  * (tile's) rows, made before (row_cache.h), or NULL:
                                  * made per chunk */
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

    int rotating;                 /* the target is rotated (rotate.c), on spans, windows or
                                   * rows (given caches) */
    rotation_t rot;               /* rotations; with sections, caches too (their tile) */
    sections_t sections;
} plan_t;

/* The calling thread asks the cancel callback about this often. */
#define CANCEL_BYTES ((double)(8 << 20))
/* Output bytes per chunk: big enough that the pool hand-off vanishes, small
 * enough to balance two threads and to check for Ctrl-C often. */
#define CHUNK_BYTES ((double)(256 << 10))
/* Below this much output a call stays on one thread: waking a helper
 * (~4 us) would cost more than it saves. */
#define PARALLEL_MIN_BYTES ((double)(256 << 10))

static inline ptrdiff_t min_ptrdiff(ptrdiff_t a, ptrdiff_t b)
{
    return a < b ? a : b;
}

static inline ptrdiff_t abs_ptrdiff(ptrdiff_t a)
{
    return a < 0 ? -a : a;
}

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

/* The elements of a view's rows: dtype, byte order, column stride. */
static inline sinpe_row_format row_format_of(const sinpe_array *a)
{
    const sinpe_row_format fmt = {a->dtype, a->byteswapped != 0, a->strides[a->ndim - 1], 0};
    return fmt;
}

/* plan.c's pieces that plan_rotate.c shares: per-worker scratch (with_tiles:
 * and a tile of tile_bytes each), and the windows cut of explicit positions
 * (windows of at most most_window rows of the innermost axis, and half the
 * tile). */
int sinpe_plan_alloc_scratch(plan_t *plan, int with_tiles);
void sinpe_plan_cut_windows(plan_t *plan, double most_window);

/* A grid (plan_grid.c): its split and order (SINPE_OK or SINPE_ERR_INVALID),
 * and its cut into bands (SINPE_ERR_NOMEM when their tiles cannot be had). */
int sinpe_plan_check_grid(const sinpe_plan *p, const sinpe_array *out);
int sinpe_plan_cut_bands(plan_t *plan, const sinpe_array *out, double row_bytes, double rows);

/* A rotation (plan_rotate.c): the views it reads besides out, its columns
 * and values (SINPE_OK or SINPE_ERR_INVALID), and its cut. */
int sinpe_plan_check_rotation_views(const sinpe_plan *p, const sinpe_array *out);
int sinpe_plan_check_rotation(const sinpe_plan *p, const sinpe_array *out, ptrdiff_t d);
int sinpe_plan_cut_rotation(plan_t *plan, const sinpe_plan *p, const sinpe_array *out,
                            ptrdiff_t rows);

/* Runs chunk `chunk` of the plan on worker `worker` (sinpe_chunk_fn). */
void sinpe_plan_chunk(void *plan, ptrdiff_t chunk, int worker);

/* A rotation's kept tile rows (rotate.c), into plan->made when the cache of
 * made tables has them or they are asked for again; after the cut. */
void sinpe_rotation_find_made_rows(plan_t *plan, const sinpe_plan *p);

/* Runs chunk `chunk` of a rotating plan on worker `worker` (rotate.c). */
void sinpe_rotate_chunk(const plan_t *plan, ptrdiff_t chunk, int worker);

/* Sections (sections.c): their structure, for empty outputs too (pos_axis,
 * padding, grids, adds and given caches excluded), and their counts for m
 * frequencies (SINPE_OK or SINPE_ERR_INVALID); the section of each
 * frequency into plan->sections (SINPE_ERR_NOMEM); and a chunk of a plan
 * with sections, on the cut sinpe_plan_cut_rotation makes. */
int sinpe_plan_check_section_form(const sinpe_plan *p);
int sinpe_plan_check_sections(const sinpe_plan *p, ptrdiff_t m);
int sinpe_plan_sections(plan_t *plan, const sinpe_plan *p, ptrdiff_t m, ptrdiff_t rows);
void sinpe_sections_chunk(const plan_t *plan, ptrdiff_t chunk, int worker);

/* Doubles of per-worker scratch run.c needs for the plan's tiles. */
size_t sinpe_plan_scratch_doubles(const plan_t *plan);

#endif /* SINPE_PLAN_H */
