/*
 * The public entry points: check arguments, cut the call into chunks, run
 * the chunks on the thread pool.  The values come from table.h (block
 * rotation with exact restarts), the element formats from rows.h.
 *
 * How a call is cut.  Rows are grouped in blocks of SINPE_BLOCK_ROWS aligned
 * to absolute positions (so a row's bits never depend on the cut), features
 * in tiles of at most TILE_FREQS frequencies, and for add_ the batch in
 * parts.  A chunk is (a run of blocks) x (one tile) x (one batch part).
 * encode chunks hold about a megabyte of output: big enough that the pool
 * hand-off vanishes, small enough to balance the threads and to check for
 * Ctrl-C often.
 *
 * Per block, a chunk computes the anchors once (sincos of the tile's
 * frequencies at the block start), then
 *  - encode: writes each row straight from the anchors and the step rows;
 *  - add_:   appends the block's rows to the chunk's PE tile (doubles, at
 *            most ADD_TILE_BYTES, so it stays in L2), which is then added
 *            to every batch element of the part, walking memory in address
 *            order (batch-first: a batch element's rows are contiguous, so
 *            batch outer; seq-first: a position's batch is contiguous, so
 *            rows outer).  The PE never exists beyond one tile per thread,
 *            and is computed once per batch part, not per batch element.
 */
#include "sinpe.h"
#include "elements.h"
#include "rows.h"
#include "table.h"
#include "threads.h"

#include <math.h>
#include <stdlib.h>

/* Feature tiles of 512 frequencies = 1024 lanes: the anchors (16 KB) stay
 * in L1, a tile's step rows (512 KB) and an add_ PE tile (256 KB) in L2, and
 * rows are walked in runs of 4 KB or more (hardware prefetch).  Narrower
 * tiles that keep the step rows in L1 were measured no faster: the loop is
 * bound by its multiplies and conversions, not by L2 (about 6.5 cycles per
 * 16 float32 with AVX-512, where only two ports take 512-bit FP uops). */
#define TILE_FREQS 512
/* add_: the PE tile of a chunk, in doubles.  A quarter of L2, so that it
 * stays there while the embeddings stream past it, and several blocks long,
 * so a batch-first walk runs over long contiguous stretches of each batch
 * element (measured on one thread, (32, 512, 512) float32: 1.9 ms instead of
 * 2.3 ms with one-block tiles; NumPy's add takes 1.6 ms). */
#define ADD_TILE_BYTES ((double)(512 << 10))
#define CHUNK_MAX_BYTES ((double)(1 << 20))
#define CHUNK_MIN_BYTES ((double)(64 << 10))
/* Below this much output a call stays on one thread: waking a helper
 * (~4 us) would cost more than it saves. */
#define PARALLEL_MIN_BYTES ((double)(256 << 10))
/* Tables this large are written with streaming stores (rows.c), which
 * skip the read-for-ownership of every line and do not evict the rest of
 * the caches: measured 7-12% faster at 10 MB, 2x at 256 MB (into an
 * existing array).  Except fresh arrays of FRESH_PLAIN_MIN_BYTES or more:
 * the allocator maps those straight from the OS, whose page zeroing leaves
 * their lines in the caches, so plain stores are faster there (measured:
 * 65 ms instead of 93 ms for 256 MB). */
#ifndef STREAM_MIN_BYTES
#define STREAM_MIN_BYTES ((double)(8 << 20))
#endif
#ifndef FRESH_PLAIN_MIN_BYTES
#define FRESH_PLAIN_MIN_BYTES ((double)(32 << 20))
#endif
/* The calling thread asks the cancel callback about this often. */
#define CANCEL_BYTES ((double)(8 << 20))

typedef struct {
    /* what to write */
    const sinpe_table *table;
    sinpe_row_format fmt;
    char *data;           /* element 0 on every axis */
    ptrdiff_t row_stride; /* bytes between positions */
    int64_t first;        /* position of row 0 */
    ptrdiff_t rows, d;
    int adding;
    int fresh;            /* encode into an array just allocated */
    double scale;
    /* the batch axes of add_ (none for encode) */
    int batch_ndim;
    ptrdiff_t batch;      /* product of batch_shape */
    int rows_outer;       /* walk rows outer, batch inner */
    ptrdiff_t batch_shape[SINPE_MAX_DIMS];
    ptrdiff_t batch_strides[SINPE_MAX_DIMS];
    /* the cut */
    int64_t block0;       /* start of the first block */
    ptrdiff_t nblocks, blocks_per_chunk;
    ptrdiff_t tile_freqs, tile_lanes, ntiles;
    ptrdiff_t groups, batch_parts, batch_per_part;
    ptrdiff_t tile_rows;  /* rows of the per-worker value tile */
    uint32_t residues;    /* the step rows the call needs */
    /* scratch, one slice per worker */
    double *scratch;
    size_t scratch_per_worker;
    ptrdiff_t *built_tile; /* wide tables: the tile whose steps a worker holds */
} plan_t;

typedef struct {
    ptrdiff_t index[SINPE_MAX_DIMS];
    ptrdiff_t offset; /* bytes */
} batch_cursor;

static ptrdiff_t min_ptrdiff(ptrdiff_t a, ptrdiff_t b)
{
    return a < b ? a : b;
}

/* For a, b >= 1, without the overflow of (a + b - 1) / b. */
static ptrdiff_t ceil_div(ptrdiff_t a, ptrdiff_t b)
{
    return a / b + (a % b != 0);
}

static void batch_seek(const plan_t *plan, batch_cursor *cur, ptrdiff_t flat)
{
    cur->offset = 0;
    for (int axis = plan->batch_ndim - 1; axis >= 0; --axis) {
        cur->index[axis] = flat % plan->batch_shape[axis];
        flat /= plan->batch_shape[axis];
        cur->offset += cur->index[axis] * plan->batch_strides[axis];
    }
}

static void batch_step(const plan_t *plan, batch_cursor *cur)
{
    for (int axis = plan->batch_ndim - 1; axis >= 0; --axis) {
        cur->offset += plan->batch_strides[axis];
        if (++cur->index[axis] < plan->batch_shape[axis]) {
            return;
        }
        cur->offset -= plan->batch_strides[axis] * plan->batch_shape[axis];
        cur->index[axis] = 0;
    }
}

/* Adds the PE tile (rows i < nrows of `tile`) to every batch element of
 * `part`; base is row 0 of the tile in batch element 0.  Batch-first: one
 * call per batch element covers all the tile's rows.  Seq-first: one call
 * per tile row covers a run of the innermost batch axis (pe_stride 0). */
static void add_tile(const plan_t *plan, char *base, const double *tile, int nrows,
                     ptrdiff_t lanes, ptrdiff_t part)
{
    const ptrdiff_t b0 = part * plan->batch_per_part;
    const ptrdiff_t b1 = min_ptrdiff(b0 + plan->batch_per_part, plan->batch);
    batch_cursor cur;
    if (!plan->rows_outer) {
        batch_seek(plan, &cur, b0);
        for (ptrdiff_t bi = b0; bi < b1; ++bi) {
            sinpe_add_rows(&plan->fmt, base + cur.offset, plan->row_stride, tile,
                           plan->tile_lanes, nrows, lanes, plan->scale);
            batch_step(plan, &cur);
        }
        return;
    }
    const int inner = plan->batch_ndim - 1; /* rows_outer implies a batch axis */
    for (int i = 0; i < nrows; ++i) {
        char *row = base + i * plan->row_stride;
        const double *pe = tile + i * plan->tile_lanes;
        for (ptrdiff_t bi = b0; bi < b1;) {
            batch_seek(plan, &cur, bi);
            const ptrdiff_t run = min_ptrdiff(b1 - bi, plan->batch_shape[inner] - cur.index[inner]);
            sinpe_add_rows(&plan->fmt, row + cur.offset, plan->batch_strides[inner], pe, 0, run,
                           lanes, plan->scale);
            bi += run;
        }
    }
}

static void run_chunk(void *context, ptrdiff_t chunk, int worker)
{
    const plan_t *plan = context;
    const sinpe_table *table = plan->table;
    double *a = plan->scratch + (size_t)worker * plan->scratch_per_worker;
    double *b = a + plan->tile_lanes;
    double *sin_tmp = b + plan->tile_lanes;
    double *cos_tmp = sin_tmp + plan->tile_freqs;
    double *tile = cos_tmp + plan->tile_freqs; /* add_: the PE tile; encode: one row */
    double *step_buffer = tile + plan->tile_rows * plan->tile_lanes;

    /* Tile-major order: consecutive chunks share a tile, so a worker on a
     * wide table rebuilds its step rows only when its tile changes. */
    const ptrdiff_t per_tile = plan->groups * plan->batch_parts;
    const ptrdiff_t tile_index = chunk / per_tile;
    const ptrdiff_t group = (chunk % per_tile) / plan->batch_parts;
    const ptrdiff_t part = chunk % plan->batch_parts;
    const ptrdiff_t k0 = tile_index * plan->tile_freqs;
    const ptrdiff_t k1 = min_ptrdiff(k0 + plan->tile_freqs, table->nfreq);
    const ptrdiff_t lane0 = 2 * k0;
    const ptrdiff_t lanes = min_ptrdiff(2 * k1, plan->d) - lane0; /* odd d: no last cosine */
    const int rebuild = plan->built_tile[worker] != tile_index;
    plan->built_tile[worker] = tile_index;
    const sinpe_steps steps =
        sinpe_steps_for(table, k0, k1, rebuild ? plan->residues : 0, step_buffer);
    const ptrdiff_t blk_end = min_ptrdiff((group + 1) * plan->blocks_per_chunk, plan->nblocks);
    const int64_t end = plan->first + plan->rows;

    int tile_rows = 0; /* add_: rows of the PE tile filled so far */
    char *tile_base = NULL;
    for (ptrdiff_t blk = group * plan->blocks_per_chunk; blk < blk_end; ++blk) {
        const int64_t p0 = plan->block0 + (int64_t)blk * SINPE_BLOCK_ROWS;
        const int r0 = p0 < plan->first ? (int)(plan->first - p0) : 0;
        const int r1 = p0 + SINPE_BLOCK_ROWS > end ? (int)(end - p0) : SINPE_BLOCK_ROWS;
        char *base = plan->data + (ptrdiff_t)(p0 + r0 - plan->first) * plan->row_stride +
                     lane0 * plan->fmt.col_stride;
        sinpe_anchor(table, p0, k0, k1, a, b, sin_tmp, cos_tmp);
        if (!plan->adding) {
            sinpe_store_rows(&plan->fmt, base, plan->row_stride, &steps, r0, r1, lanes, a, b,
                             tile);
            continue;
        }
        if (tile_rows == 0) {
            tile_base = base;
        }
        for (int r = r0; r < r1; ++r, ++tile_rows) {
            sinpe_values(&steps, r, lanes, a, b, tile + tile_rows * plan->tile_lanes);
        }
    }
    if (plan->adding) {
        add_tile(plan, tile_base, tile, tile_rows, lanes, part);
    }
}

static int check_table_args(double n, int64_t offset, ptrdiff_t rows)
{
    if (!(n >= SINPE_MIN_BASE && n <= SINPE_MAX_BASE)) { /* also rejects nan */
        return SINPE_ERR_INVALID;
    }
    if (offset < -SINPE_MAX_POSITION || offset > SINPE_MAX_POSITION ||
        rows > SINPE_MAX_POSITION - offset + 1) {
        return SINPE_ERR_INVALID;
    }
    return SINPE_OK;
}

/* Chooses the cut and the thread count (see the top of the file).  Sizes
 * are estimated in double: they only steer the cut, and a strided view may
 * describe more bytes than a size_t counts. */
static void plan_cut(plan_t *plan, int *threads, ptrdiff_t *cancel_period, int overlapping)
{
    const ptrdiff_t nfreq = plan->table->nfreq;
    plan->tile_freqs = min_ptrdiff(nfreq, TILE_FREQS);
    plan->tile_lanes = 2 * plan->tile_freqs;
    plan->ntiles = ceil_div(nfreq, plan->tile_freqs);
    plan->block0 = sinpe_block_start(plan->first);
    plan->nblocks =
        (ptrdiff_t)((sinpe_block_start(plan->first + plan->rows - 1) - plan->block0) /
                    SINPE_BLOCK_ROWS) + 1;

    const double itemsize = (double)sinpe_itemsize(plan->fmt.dtype);
    const double total = (double)plan->rows * (double)plan->d * (double)plan->batch * itemsize;
    *threads = total < PARALLEL_MIN_BYTES || overlapping ? 1 : sinpe_threads_get();
    plan->fmt.streaming = !plan->adding && total >= STREAM_MIN_BYTES &&
                          (!plan->fresh || total < FRESH_PLAIN_MIN_BYTES);
    double chunk_bytes = total / (8.0 * *threads);
    chunk_bytes = chunk_bytes > CHUNK_MAX_BYTES ? CHUNK_MAX_BYTES
                  : chunk_bytes < CHUNK_MIN_BYTES ? CHUNK_MIN_BYTES : chunk_bytes;

    const double block_bytes = SINPE_BLOCK_ROWS * (double)min_ptrdiff(plan->tile_lanes, plan->d) *
                               (double)plan->batch * itemsize;
    if (plan->adding) {
        /* add_: a chunk is one PE tile of whole blocks (filled once, so its
         * cost is spread over the batch) times a part of the batch; parts
         * only so that each thread gets about four chunks. */
        const ptrdiff_t fit = (ptrdiff_t)(ADD_TILE_BYTES / (SINPE_BLOCK_ROWS * 8.0 * (double)plan->tile_lanes));
        plan->blocks_per_chunk = fit < 1 ? 1 : fit > plan->nblocks ? plan->nblocks : fit;
        const double groups = ceil((double)plan->nblocks / (double)plan->blocks_per_chunk);
        const double parts = ceil(4.0 * *threads / (groups * (double)plan->ntiles));
        plan->batch_parts = *threads == 1 ? 1 : parts >= (double)plan->batch ? plan->batch
                                                                              : (ptrdiff_t)parts;
    } else if (block_bytes >= chunk_bytes) {
        plan->blocks_per_chunk = 1;
        plan->batch_parts = 1;
    } else {
        const double blocks = floor(chunk_bytes / block_bytes);
        plan->blocks_per_chunk =
            blocks >= (double)plan->nblocks ? plan->nblocks : (ptrdiff_t)blocks;
        plan->batch_parts = 1;
    }
    plan->tile_rows = plan->adding ? SINPE_BLOCK_ROWS * plan->blocks_per_chunk : 1;
    plan->batch_per_part = ceil_div(plan->batch, plan->batch_parts);
    plan->batch_parts = ceil_div(plan->batch, plan->batch_per_part);
    plan->groups = ceil_div(plan->nblocks, plan->blocks_per_chunk);

    const double per_chunk = block_bytes * (double)plan->blocks_per_chunk /
                             (double)plan->batch_parts;
    const double period = ceil(CANCEL_BYTES / (per_chunk > 1.0 ? per_chunk : 1.0));
    *cancel_period = period > 1e9 ? 1000000000 : (ptrdiff_t)period;
}

/* A view whose writes could land on one address twice (a zero stride over
 * more than one index) is run on one thread, so it stays deterministic. */
static int may_overlap(const sinpe_array *x)
{
    for (int i = 0; i < x->ndim; ++i) {
        if (x->strides[i] == 0 && x->shape[i] > 1) {
            return 1;
        }
    }
    return 0;
}

enum { MODE_ENCODE, MODE_ENCODE_FRESH, MODE_ADD };

static int run_table(const sinpe_array *x, int pos_axis, double n, int64_t offset, double scale,
                     int mode, sinpe_cancel_fn cancel, void *cancel_context)
{
    const int adding = mode == MODE_ADD;
    int status = sinpe_check_view(x);
    if (status != SINPE_OK) {
        return status;
    }
    const int feature_axis = x->ndim - 1;
    if (pos_axis < 0 || pos_axis >= feature_axis) {
        return SINPE_ERR_INVALID;
    }
    const ptrdiff_t rows = x->shape[pos_axis];
    status = check_table_args(n, offset, rows);
    if (status != SINPE_OK) {
        return status;
    }

    plan_t *plan = malloc(sizeof *plan); /* ~1 KB of batch axes: not on the stack */
    if (plan == NULL) {
        return SINPE_ERR_NOMEM;
    }
    plan->batch_ndim = 0;
    plan->batch = 1;
    int empty = rows == 0 || x->shape[feature_axis] == 0;
    for (int axis = 0; axis < feature_axis; ++axis) {
        if (axis != pos_axis) {
            plan->batch_shape[plan->batch_ndim] = x->shape[axis];
            plan->batch_strides[plan->batch_ndim] = x->strides[axis];
            plan->batch_ndim++;
            if (x->shape[axis] == 0) {
                empty = 1;
            } else if (!empty) {
                plan->batch *= x->shape[axis]; /* <= the element count: fits */
            }
        }
    }
    if (empty) {
        free(plan);
        return SINPE_OK;
    }
    if (x->data == NULL) {
        free(plan);
        return SINPE_ERR_INVALID;
    }
    plan->data = x->data;
    plan->fmt.dtype = x->dtype;
    plan->fmt.swapped = x->byteswapped != 0;
    plan->fmt.col_stride = x->strides[feature_axis];
    plan->fresh = mode == MODE_ENCODE_FRESH;
    plan->fmt.streaming = 0; /* decided by plan_cut */
    plan->row_stride = x->strides[pos_axis];
    plan->first = offset;
    plan->rows = rows;
    plan->d = x->shape[feature_axis];
    plan->adding = adding;
    plan->scale = scale;
    /* Address order: rows outer when a position's stride is the larger one. */
    const ptrdiff_t inner_batch_stride =
        plan->batch_ndim > 0 ? plan->batch_strides[plan->batch_ndim - 1] : 0;
    plan->rows_outer = plan->batch_ndim > 0 &&
                       llabs((long long)plan->row_stride) > llabs((long long)inner_batch_stride);

    sinpe_table *table = sinpe_table_standard(n, plan->d);
    if (table == NULL) {
        free(plan);
        return SINPE_ERR_NOMEM;
    }
    plan->table = table;
    plan->residues = sinpe_residues(offset, rows);
    int threads;
    ptrdiff_t cancel_period;
    plan_cut(plan, &threads, &cancel_period, may_overlap(x));

    /* Per worker: anchors a, b and the sincos temporaries; the PE tile
     * (add_) or one row (generic writers); a wide table's step rows.  All
     * bounded by TILE_FREQS, whatever d is. */
    const size_t step_rows = table->step_c == NULL ? 2 * SINPE_BLOCK_ROWS : 0;
    plan->scratch_per_worker = (2 + (size_t)plan->tile_rows + step_rows) * (size_t)plan->tile_lanes +
                               2 * (size_t)plan->tile_freqs;
    plan->scratch = malloc((size_t)threads * plan->scratch_per_worker * sizeof(double));
    plan->built_tile = malloc((size_t)threads * sizeof(ptrdiff_t));
    if (plan->scratch == NULL || plan->built_tile == NULL) {
        free(plan->scratch);
        free(plan->built_tile);
        sinpe_table_release(table);
        free(plan);
        return SINPE_ERR_NOMEM;
    }
    for (int w = 0; w < threads; ++w) {
        plan->built_tile[w] = -1;
    }
    /* Each chunk holds at least one element, so the count fits. */
    const ptrdiff_t chunks = plan->groups * plan->ntiles * plan->batch_parts;
    status = sinpe_run_chunks(chunks, threads, run_chunk, plan, cancel, cancel_context,
                              cancel_period);
    free(plan->built_tile);
    free(plan->scratch);
    sinpe_table_release(table);
    free(plan);
    return status;
}

int sinpe_encode_ex(const sinpe_array *out, double n, int64_t offset, unsigned flags,
                    sinpe_cancel_fn cancel, void *cancel_context)
{
    if (out == NULL || out->ndim != 2) {
        return SINPE_ERR_INVALID;
    }
    return run_table(out, 0, n, offset, 0.0,
                     (flags & SINPE_FRESH_OUTPUT) ? MODE_ENCODE_FRESH : MODE_ENCODE,
                     cancel, cancel_context);
}

int sinpe_encode(const sinpe_array *out, double n, int64_t offset)
{
    return sinpe_encode_ex(out, n, offset, 0, NULL, NULL);
}

int sinpe_add(const sinpe_array *x, int pos_axis, double n, int64_t offset, double scale)
{
    if (!isfinite(scale)) {
        return SINPE_ERR_INVALID;
    }
    return run_table(x, pos_axis, n, offset, scale, MODE_ADD, NULL, NULL);
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
