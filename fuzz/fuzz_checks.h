/*
 * The checks of one call (fuzz_kernels.c chooses it): status and bytes,
 * every element against the model (fuzz_model.h), and second calls of the
 * same values made another way, which must agree bit for bit:
 *  - companions: the same plan stored into dense arrays on another thread
 *    count: in float64, whose doubles the call's elements must be the one
 *    rounding of (stores), or in the add's own dtype, which is the T the
 *    add's arithmetic is checked with (then sometimes as a 2-D table with
 *    the positions spelled out per row: the same values);
 *  - identities: a shard of rows at shifted or explicit positions, in
 *    another layout, with the schedule's frequencies as an explicit array;
 *    RoPE caches against the table; a grid's chunk against the 1-D table
 *    of its axis; a rotation again in place in a dense copy (out of place
 *    against in place); with sections, each section's pairs against the
 *    caches of its positions alone;
 *  - rotations: every element against this file's arithmetic on the
 *    elements from before the call and the RoPE caches of the same plan
 *    (a float64 companion, itself checked against libm), bit for bit;
 *  - the aliasing twin: the same call with every input in private memory.
 */
#ifndef SINPE_FUZZ_CHECKS_H
#define SINPE_FUZZ_CHECKS_H

#include "fuzz_model.h"

/* What the inputs checked, for the plain driver's report. */
static struct {
    long valid, invalid, either, empty, nomem, cancelled;
    long bounded;   /* elements within the bound of the libm reference */
    long rounded;   /* elements that are the rounding of the float64 companion's */
    long added;     /* add elements equal to this file's arithmetic, bit for bit */
    long rotated;   /* rotated (or kept) elements equal to this file's arithmetic */
    long identical; /* elements bit-identical in identity calls */
    long sections;  /* valid calls with sections checked against one section's positions alone */
    long aliased, aliased_over, aliased_invalid; /* calls with inputs inside an output's buffer */
} stats;

#define COMPARE_ELEMENTS 8192 /* the most elements one check looks at */

/* A second call's output: C-contiguous, exactly allocated (ASan guards
 * both ends). */
typedef struct {
    char *data;
    int ndim;
    ptrdiff_t shape[MAX_AXES], strides[MAX_AXES];
    sinpe_dtype dtype;
    int swapped;
    sinpe_array view;
} dense_t;

static void dense_alloc(dense_t *a, int ndim, const ptrdiff_t *shape, sinpe_dtype dtype, int swapped)
{
    const size_t itemsize = itemsize_of(dtype);
    size_t count = 1;
    a->ndim = ndim;
    for (int i = ndim - 1; i >= 0; --i) {
        a->shape[i] = shape[i];
        a->strides[i] = (ptrdiff_t)(count * itemsize);
        count *= (size_t)shape[i];
    }
    a->data = checked_malloc(count * itemsize);
    a->dtype = dtype;
    a->swapped = swapped;
    a->view = (sinpe_array){a->data, dtype, swapped, ndim, a->shape, a->strides};
}

/* Element (row f, column j) of a dense array. */
static char *dense_at(const dense_t *a, ptrdiff_t f, ptrdiff_t j)
{
    return a->data + (f * a->shape[a->ndim - 1] + j) * (ptrdiff_t)itemsize_of(a->dtype);
}

/* Element (row f, column j) of target t of the call. */
static char *element(const call_t *c, int t, ptrdiff_t f, ptrdiff_t j)
{
    ptrdiff_t index[MAX_AXES];
    row_index(c, f, index);
    const target *tg = &c->tg[t];
    ptrdiff_t at = (ptrdiff_t)tg->lay.offset + j * tg->lay.strides[c->nrow];
    for (int i = 0; i < c->nrow; ++i) at += index[i] * tg->lay.strides[i];
    return tg->buffer + at;
}

/* The plan with every input in the fuzzer's private arrays (second calls
 * must not read an output the first call wrote). */
static sinpe_plan private_plan(const call_t *c)
{
    sinpe_plan p = c->plan;
    p.ints = p.ints != NULL ? c->ints : NULL;
    p.reals = p.reals != NULL ? c->reals : NULL;
    p.padding = p.padding != NULL ? c->padding : NULL;
    p.freq = p.freq != NULL ? c->freq : NULL;
    p.cancel = NULL;
    return p;
}

static int set_threads(reader *r)
{
    const int threads = 1 + (int)below(r, 4);
    if (sinpe_set_num_threads(threads) != SINPE_OK) fail("set_num_threads(%d) refused", threads);
    return threads;
}

/* ------------------------------------------------------------------ */
/* Bytes. */

static void check_untouched(const char *what, const target *tg, int allow_addressed)
{
    for (size_t block = 0; block < tg->lay.size; block += 64) {
        const size_t length = tg->lay.size - block < 64 ? tg->lay.size - block : 64;
        if (memcmp(tg->buffer + block, tg->before + block, length) == 0) continue;
        for (size_t i = block; i < block + length; ++i) {
            if (tg->buffer[i] != tg->before[i] && !(allow_addressed && tg->addressed[i])) {
                fail("%s: byte %zu of %zu changed%s (elements at [%zu, %zu))", what, i, tg->lay.size,
                     allow_addressed ? ", not an element's" : "", tg->lay.lo, tg->lay.hi);
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* Values. */

/* Elements e of every stride-th (all of a small output). */
static ptrdiff_t sample_stride(ptrdiff_t total)
{
    return total > COMPARE_ELEMENTS ? 1 + total / COMPARE_ELEMENTS : 1;
}

static void value_fail(const call_t *c, const char *what, int t, ptrdiff_t f, const ptrdiff_t *index, ptrdiff_t j,
                       double got, double want, double bound)
{
    const int g = c->group[t][j];
    fail("%s: target %d row %td (position %.17g) column %td (group %d, role %d, pair %td): got %.17g, want %.17g, "
         "error %.3g > %.3g",
         what, t, f, position_of(c, f, index, position_group(c, t, j)), j, g, c->role[t][j], c->pair[t][j], got, want,
         fabs(got - want), bound);
}

/* A store's elements (sampled when big) against the reference, and, with
 * the float64 companion `wide`, the companion's doubles against the
 * float64 bound and the elements as their one rounding.  A cancelled call
 * may have left elements untouched, never wrong. */
static void check_stores(const call_t *c, int cancelled, const dense_t *wide)
{
    for (int t = 0; t < c->ntargets; ++t) {
        const target *tg = &c->tg[t];
        const ptrdiff_t total = element_count(&tg->lay), step = sample_stride(total);
        ptrdiff_t index[MAX_AXES];
        for (ptrdiff_t e = 0; e < total; e += step) {
            const size_t at = element_at(&tg->lay, e, index);
            if (cancelled && memcmp(tg->buffer + at, tg->before + at, tg->itemsize) == 0) continue;
            const ptrdiff_t f = e / c->d, j = index[c->nrow];
            double err;
            const double pe = reference(c, t, f, index, j, &err);
            const double got = load(tg->buffer + at, tg->dtype, tg->swapped);
            ++stats.bounded;
            if (!(fabs(got - pe) <= store_bound(pe, err, tg->dtype))) {
                value_fail(c, "stored value", t, f, index, j, got, pe, store_bound(pe, err, tg->dtype));
            }
            if (wide == NULL) continue;
            const double v = load(dense_at(&wide[t], f, j), SINPE_FLOAT64, 0);
            if (!(fabs(v - pe) <= store_bound(pe, err, SINPE_FLOAT64))) {
                value_fail(c, "float64 companion", t, f, index, j, v, pe, store_bound(pe, err, SINPE_FLOAT64));
            }
            ++stats.rounded;
            if (!same_double(got, round_to(tg->dtype, v))) {
                value_fail(c, "not the one rounding of the float64 companion's double", t, f, index, j, got,
                           round_to(tg->dtype, v), 0.0);
            }
        }
    }
}

/* An add's elements: T (the companion store in the same dtype) against the
 * reference, then every element against this file's arithmetic on the
 * element from before the call, bit for bit (NaN: any NaN). */
static void check_adds(const call_t *c, const dense_t *table)
{
    const target *tg = &c->tg[0];
    const ptrdiff_t total = element_count(&tg->lay), step = sample_stride(total);
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t e = 0; e < total; e += step) {
        const size_t at = element_at(&tg->lay, e, index);
        const ptrdiff_t f = e / c->d, j = index[c->nrow];
        double err;
        const double pe = reference(c, 0, f, index, j, &err);
        const double t = load(dense_at(table, f, j), tg->dtype, 0);
        ++stats.bounded;
        if (!(fabs(t - pe) <= store_bound(pe, err, tg->dtype))) {
            value_fail(c, "T (the table the add adds)", 0, f, index, j, t, pe, store_bound(pe, err, tg->dtype));
        }
        const double x = load(tg->before + at, tg->dtype, tg->swapped);
        const double got = load(tg->buffer + at, tg->dtype, tg->swapped);
        const double want = add_reference(tg->dtype, x, t, c->plan.scale, padded(c, f));
        ++stats.added;
        if (!same_double(got, want)) {
            fail("add: row %td (position %.17g%s) column %td: x = %.17g, scale = %.17g, T = %.17g: got %.17g, want "
                 "%.17g (%s)",
                 f, position_of(c, f, index, 0), padded(c, f) ? ", padded" : "", j, x, c->plan.scale, t, got, want,
                 dtype_name(tg->dtype));
        }
    }
}

/* The same plan as a store into dense arrays of `dtype` (native order) on
 * another thread count; per_row (tables): the same table as a 2-D store
 * with the positions spelled out one per row (what a range gives each
 * row).  SINPE_OK or SINPE_ERR_NOMEM (nothing to check). */
static int companion(const call_t *c, reader *r, sinpe_dtype dtype, dense_t out[2], int per_row)
{
    sinpe_plan p = private_plan(c);
    p.add = 0;
    p.flags = below(r, 2) ? SINPE_FRESH_OUTPUT : 0u;
    int64_t *ints = NULL;
    if (per_row && c->pos_mode == POS_RANGE) {
        ints = checked_malloc(sizeof(int64_t) * (size_t)c->rows);
        ptrdiff_t index[MAX_AXES];
        for (ptrdiff_t f = 0; f < c->rows; ++f) {
            row_index(c, f, index);
            ints[f] = c->plan.offset + index[c->plan.pos_axis];
        }
        p.pos_axis = -1;
        p.offset = 0;
        p.ints = ints;
    }
    const ptrdiff_t flat[2] = {c->rows, c->d};
    for (int t = 0; t < c->ntargets; ++t) {
        if (per_row) dense_alloc(&out[t], 2, flat, dtype, 0);
        else dense_alloc(&out[t], c->tg[0].lay.ndim, c->tg[0].lay.shape, dtype, 0);
    }
    set_threads(r);
    const int status = sinpe_run(&p, &out[0].view, c->ntargets == 2 ? &out[1].view : NULL);
    free(ints);
    if (status != SINPE_OK && status != SINPE_ERR_NOMEM) fail("companion store returned status %d", status);
    for (int t = 0; status != SINPE_OK && t < c->ntargets; ++t) free(out[t].data);
    return status;
}

/* ------------------------------------------------------------------ */
/* Identities: second calls into dense arrays. */

/* Where the table values of the call are: its own outputs (stores), or the
 * companion T (adds). */
typedef struct {
    const call_t *c;
    const dense_t *dense; /* NULL: the call's outputs */
} result_t;

static const char *result_at(const result_t *s, int t, ptrdiff_t f, ptrdiff_t j)
{
    return s->dense != NULL ? dense_at(&s->dense[t], f, j) : element(s->c, t, f, j);
}

static void compare(const char *what, const result_t *s, int t, ptrdiff_t f, ptrdiff_t j, const dense_t *other,
                    ptrdiff_t q, ptrdiff_t j2)
{
    const sinpe_dtype dtype = s->dense != NULL ? s->dense[t].dtype : s->c->tg[t].dtype;
    const int swapped = s->dense != NULL ? 0 : s->c->tg[t].swapped;
    const double a = load(result_at(s, t, f, j), dtype, swapped);
    const double b = load(dense_at(other, q, j2), dtype, other->swapped);
    ++stats.identical;
    if (!same_double(a, b)) {
        fail("%s: row %td column %td of the call: %.17g; row %td column %td of the second call: %.17g", what, f, j, a,
             q, j2, b);
    }
}

/* Rows of the call recomputed by a second one: rows[q] is the call's row
 * of the second call's row q. */
typedef struct {
    ptrdiff_t count, *rows;
    int64_t offset; /* range shards */
    int64_t *ints;
    double *reals;
    unsigned char *padding;
    int ranged;
} shard_t;

static void shard_free(shard_t *s)
{
    free(s->rows);
    free(s->ints);
    free(s->reals);
    free(s->padding);
}

/* A shard of at most max_rows rows: for range positions sometimes a run of
 * the position axis at one index of the others (offset shifted), else a
 * run of rows in C order, reversed or shuffled now and then, each with its
 * own position (of section `section`, with sections): ints, or reals
 * (always when one is not integral: an integral real must take the integer
 * path). */
static void pick_shard(const call_t *c, reader *r, ptrdiff_t max_rows, shard_t *s, int section)
{
    memset(s, 0, sizeof *s);
    ptrdiff_t index[MAX_AXES];
    if (c->pos_mode == POS_RANGE && below(r, 2)) {
        const int axis = c->plan.pos_axis;
        row_index(c, below_size(r, c->rows), index);
        const ptrdiff_t length = c->tg[0].lay.shape[axis], i0 = below_size(r, length);
        s->count = 1 + below_size(r, length - i0 < max_rows ? length - i0 : max_rows);
        s->rows = checked_malloc(sizeof(ptrdiff_t) * (size_t)s->count);
        for (ptrdiff_t q = 0; q < s->count; ++q) {
            index[axis] = i0 + q;
            s->rows[q] = row_flat(c, index);
        }
        s->ranged = 1;
        s->offset = c->plan.offset + i0;
    } else {
        const ptrdiff_t f0 = below_size(r, c->rows);
        s->count = 1 + below_size(r, c->rows - f0 < max_rows ? c->rows - f0 : max_rows);
        s->rows = checked_malloc(sizeof(ptrdiff_t) * (size_t)s->count);
        const unsigned shuffle = below(r, 4);
        uint64_t state = bits(r, 64);
        for (ptrdiff_t q = 0; q < s->count; ++q) s->rows[q] = shuffle == 1 ? f0 + s->count - 1 - q : f0 + q;
        for (ptrdiff_t q = s->count - 1; shuffle == 2 && q > 0; --q) {
            const ptrdiff_t k = (ptrdiff_t)(splitmix(&state) % (uint64_t)(q + 1)), t = s->rows[q];
            s->rows[q] = s->rows[k];
            s->rows[k] = t;
        }
        s->ints = checked_malloc(sizeof(int64_t) * (size_t)s->count);
        s->reals = checked_malloc(sizeof(double) * (size_t)s->count);
        int integral = below(r, 4) != 0;
        for (ptrdiff_t q = 0; q < s->count; ++q) {
            row_index(c, s->rows[q], index);
            s->reals[q] = position_of(c, s->rows[q], index, section);
            s->ints[q] = (int64_t)s->reals[q];
            integral = integral && s->reals[q] == (double)s->ints[q];
        }
        if (!integral) {
            free(s->ints);
            s->ints = NULL;
        }
    }
    if (c->padding != NULL) {
        s->padding = checked_malloc((size_t)s->count);
        for (ptrdiff_t q = 0; q < s->count; ++q) s->padding[q] = c->padding[s->rows[q]];
    }
}

/* The second call of a shard: a store of `layout`, the call's frequencies
 * (or, for a schedule, sometimes its doubles as an explicit array: the same
 * bits), into a dense (count, width) array of dtype. */
static void shard_call(const char *what, const call_t *c, reader *r, const shard_t *s, int g, int layout,
                       ptrdiff_t width, sinpe_dtype dtype, dense_t *out)
{
    sinpe_plan p = sinpe_plan_default();
    p.n = c->plan.n;
    p.schedule = c->plan.schedule;
    if (c->freq != NULL || below(r, 2)) {
        p.freq = c->w[g];
        p.nfreq = c->m[g];
    }
    p.layout = (sinpe_layout)layout;
    p.offset = s->offset;
    p.pos_axis = s->ranged ? 0 : -1;
    p.ints = s->ranged ? NULL : s->ints;
    p.reals = s->ranged || s->ints != NULL ? NULL : s->reals;
    p.padding = s->padding;
    p.flags = below(r, 2) ? SINPE_PRIVATE_INPUTS : 0u;
    const ptrdiff_t shape[2] = {s->count, width};
    dense_alloc(out, 2, shape, dtype, (int)below(r, 2));
    set_threads(r);
    const int status = sinpe_run(&p, &out->view, NULL);
    if (status != SINPE_OK) fail("%s: second call returned status %d", what, status);
}

/* Tables (and the T of adds): a shard, in any layout, against the call. */
static void identity_table(const call_t *c, reader *r, const result_t *s)
{
    shard_t sh;
    pick_shard(c, r, COMPARE_ELEMENTS / c->d > 0 ? COMPARE_ELEMENTS / c->d : 1, &sh, 0);
    const int layout = (int)below(r, 3);
    dense_t out;
    shard_call("table shard", c, r, &sh, 0, layout, c->d, c->tg[0].dtype, &out);
    for (ptrdiff_t q = 0; q < sh.count; ++q) {
        for (ptrdiff_t j = 0; j < c->d; ++j) {
            const ptrdiff_t j2 = column_of(layout, c->d, c->m[0], c->role[0][j], c->pair[0][j]);
            compare("table shard", s, 0, sh.rows[q], j, &out, q, j2);
        }
    }
    free(out.data);
    shard_free(&sh);
}

/* RoPE: a cache (cos or sin) against the table of the same positions and
 * frequencies (the paper's for width d are RoPE's: d / 2 of them); scaled
 * caches against the float64 table times scale, rounded once (a padded
 * row stays the zero row). */
static void identity_rope(const call_t *c, reader *r, const result_t *s)
{
    const int t = (int)below(r, 2);
    shard_t sh;
    pick_shard(c, r, COMPARE_ELEMENTS / c->d > 0 ? COMPARE_ELEMENTS / c->d : 1, &sh, 0);
    const int layout = (int)below(r, 3);
    const int scaled = c->plan.scale != 1.0;
    const sinpe_dtype dtype = c->tg[t].dtype;
    dense_t out;
    shard_call("rope vs table", c, r, &sh, 0, layout, c->d, scaled ? SINPE_FLOAT64 : dtype, &out);
    for (ptrdiff_t q = 0; q < sh.count; ++q) {
        for (ptrdiff_t j = 0; j < c->d; ++j) {
            const ptrdiff_t j2 = column_of(layout, c->d, c->d / 2, c->role[t][j], c->pair[t][j]);
            if (!scaled) {
                compare(t == 0 ? "rope cos vs table" : "rope sin vs table", s, t, sh.rows[q], j, &out, q, j2);
                continue;
            }
            const double got = load(result_at(s, t, sh.rows[q], j), dtype, c->tg[t].swapped);
            /* padded rows are a zero row, not scaled (+0) */
            const double v = load(dense_at(&out, q, j2), SINPE_FLOAT64, out.swapped);
            const double want = sh.padding != NULL && sh.padding[q] ? v : round_to(dtype, v * c->plan.scale);
            ++stats.identical;
            if (!same_double(got, want)) {
                fail("rope %s vs the float64 table times scale %.17g: row %td column %td: %.17g, want %.17g",
                     t == 0 ? "cos" : "sin", c->plan.scale, sh.rows[q], j, got, want);
            }
        }
    }
    free(out.data);
    shard_free(&sh);
}

/* Sections: the pairs of one section against the RoPE caches of that
 * section's positions alone (a plan without sections), bit for bit; s
 * holds the call's caches (its outputs, or a rotation's float64
 * companion), width columns in the call's layout. */
static void identity_sections(const call_t *c, reader *r, const result_t *s, ptrdiff_t width)
{
    const int section = (int)below(r, (unsigned)c->plan.nsections);
    ++stats.sections;
    shard_t sh;
    pick_shard(c, r, COMPARE_ELEMENTS / width > 0 ? COMPARE_ELEMENTS / width : 1, &sh, section);
    sinpe_plan p = sinpe_plan_default();
    p.rope = 1;
    p.n = c->plan.n;
    p.schedule = c->plan.schedule;
    if (c->freq != NULL || below(r, 2)) {
        p.freq = c->w[0];
        p.nfreq = c->m[0];
    }
    p.layout = c->plan.layout;
    if (c->plan.rope) p.scale = c->plan.scale; /* caches times scale, with sections or not */
    p.pos_axis = -1;
    p.ints = sh.ints;
    p.reals = sh.ints != NULL ? NULL : sh.reals;
    p.flags = below(r, 2) ? SINPE_PRIVATE_INPUTS : 0u;
    const ptrdiff_t shape[2] = {sh.count, width};
    dense_t out[2];
    for (int t = 0; t < 2; ++t) {
        dense_alloc(&out[t], 2, shape, s->dense != NULL ? s->dense[t].dtype : c->tg[t].dtype, (int)below(r, 2));
    }
    set_threads(r);
    const int status = sinpe_run(&p, &out[0].view, &out[1].view);
    if (status != SINPE_OK && status != SINPE_ERR_NOMEM) fail("one section's caches: status %d", status);
    for (ptrdiff_t q = 0; status == SINPE_OK && q < sh.count; ++q) {
        for (ptrdiff_t j = 0; j < width; ++j) {
            const ptrdiff_t k = c->plan.layout == SINPE_INTERLEAVED ? j / 2 : j % (width / 2);
            for (int t = 0; c->section_of[k] == section && t < 2; ++t) {
                compare(t == 0 ? "a section's cos vs its positions alone" : "a section's sin vs its positions alone",
                        s, t, sh.rows[q], j, &out[t], q, j);
            }
        }
    }
    for (int t = 0; t < 2; ++t) free(out[t].data);
    shard_free(&sh);
}

/* Grids: one axis' columns against the 1-D table of that axis (positions
 * 0 .. length - 1, width split[axis]). */
static void identity_grid(const call_t *c, reader *r, const result_t *s)
{
    const int g = (int)below(r, (unsigned)c->ngroups), axis = c->order[g];
    const ptrdiff_t width = grid_width(c, g), length = c->tg[0].lay.shape[axis];
    const int layout = (int)below(r, 3);
    shard_t sh;
    memset(&sh, 0, sizeof sh);
    sh.count = length;
    sh.ranged = 1;
    dense_t out;
    shard_call("grid axis", c, r, &sh, g, layout, width, c->tg[0].dtype, &out);
    const ptrdiff_t step = sample_stride(c->rows * width);
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t f = below_size(r, step); f < c->rows; f += step) {
        row_index(c, f, index);
        for (ptrdiff_t j = 0; j < c->d; ++j) {
            if (c->group[0][j] != g) continue;
            const ptrdiff_t j2 = column_of(layout, width, c->m[g], c->role[0][j], c->pair[0][j]);
            compare("grid axis vs its 1-D table", s, 0, f, j, &out, index[axis], j2);
        }
    }
    free(out.data);
}

/* ------------------------------------------------------------------ */
/* Rotations. */

/* The RoPE caches of a rotation's own plan (its positions and frequencies,
 * width r) into dense float64 arrays of out's rows and r columns, on another
 * thread count; each value checked against libm.  SINPE_OK or
 * SINPE_ERR_NOMEM (nothing to check). */
static int rotation_caches(const call_t *c, reader *r, dense_t out[2])
{
    sinpe_plan p = private_plan(c);
    const ptrdiff_t width = rotary_width(c);
    p.rotate = 0, p.rotary_dim = 0, p.exact = 0, p.inverse = 0, p.scale = 1.0;
    p.source = NULL;
    p.rope = 1;
    p.flags = below(r, 2) ? SINPE_FRESH_OUTPUT : 0u;
    ptrdiff_t shape[MAX_AXES];
    memcpy(shape, c->tg[0].lay.shape, sizeof shape);
    shape[c->nrow] = width;
    for (int t = 0; t < 2; ++t) dense_alloc(&out[t], c->tg[0].lay.ndim, shape, SINPE_FLOAT64, 0);
    set_threads(r);
    const int status = sinpe_run(&p, &out[0].view, &out[1].view);
    if (status != SINPE_OK && status != SINPE_ERR_NOMEM) fail("rotation caches: RoPE store returned %d", status);
    if (status != SINPE_OK) {
        for (int t = 0; t < 2; ++t) free(out[t].data);
        return status;
    }
    const ptrdiff_t step = sample_stride(c->rows * width);
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t e = 0; e < c->rows * width; e += step) {
        const ptrdiff_t f = e / width, j = e % width, k = c->plan.layout == SINPE_INTERLEAVED ? j / 2 : j % (width / 2);
        row_index(c, f, index);
        const double x = position_of(c, f, index, c->plan.nsections > 0 ? c->section_of[k] : 0);
        const double w = c->w[0][k], err = value_error(x, w);
        const double v[2] = {load(dense_at(&out[0], f, j), SINPE_FLOAT64, 0), load(dense_at(&out[1], f, j), SINPE_FLOAT64, 0)};
        const double want[2] = {cos(x * w), sin(x * w)};
        for (int t = 0; t < 2; ++t) {
            ++stats.bounded;
            if (!(fabs(v[t] - want[t]) <= err)) {
                fail("rotation caches: row %td (position %.17g) column %td, %s: %.17g, libm %.17g", f, x, j,
                     t == 0 ? "cos" : "sin", v[t], want[t]);
            }
        }
    }
    return SINPE_OK;
}

/* The element at row f, column j of x as the rotation read it: the source,
 * or out's bytes from before the call. */
static double rotation_input(const call_t *c, ptrdiff_t f, ptrdiff_t j)
{
    const int t = c->plan.source != NULL ? 1 : 0;
    const target *tg = &c->tg[t];
    const char *at = element(c, t, f, j) - tg->buffer + tg->before;
    return load(at, tg->dtype, tg->swapped);
}

/* Every element (sampled when big) of a rotation: columns past r hold the
 * input's bits; each rotated one this file's arithmetic (rotate_reference)
 * on the inputs and the caches: the given ones, or the companion's doubles
 * times scale (the sines negated for inverse), rounded to out's dtype
 * unless exact. */
static void check_rotation(const call_t *c, const dense_t *caches)
{
    const sinpe_plan *p = &c->plan;
    const target *tg = &c->tg[0];
    const ptrdiff_t r = rotary_width(c), total = element_count(&tg->lay), step = sample_stride(total);
    const int interleaved = p->layout == SINPE_INTERLEAVED, exact = p->exact != 0;
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t e = 0; e < total; e += step) {
        const size_t at = element_at(&tg->lay, e, index);
        const ptrdiff_t f = e / c->d, j = index[c->nrow];
        const double got = load(tg->buffer + at, tg->dtype, tg->swapped);
        ++stats.rotated;
        if (j >= r) { /* bits kept: any NaN payload, the same sign of zero */
            const int t = p->source != NULL ? 1 : 0;
            const uint64_t was = read_bits(element(c, t, f, j) - c->tg[t].buffer + c->tg[t].before, tg->itemsize,
                                           c->tg[t].swapped);
            if (read_bits(tg->buffer + at, tg->itemsize, tg->swapped) != was) {
                fail("rotation: row %td column %td past rotary_dim %td changed (%.17g)", f, j, r, got);
            }
            continue;
        }
        ptrdiff_t a, b;
        rotation_pair(interleaved, r, j, &a, &b);
        const double xa = rotation_input(c, f, a), xb = rotation_input(c, f, b);
        const double x = j == a ? xa : xb, w = j == a ? -xb : xa;
        double cs, sn;
        if (p->cos_cache != NULL) { /* through the views' strides: broadcast axes read index 0 */
            ptrdiff_t offset[2] = {j * c->cache_strides[0][c->nrow], j * c->cache_strides[1][c->nrow]};
            for (int i = 0; i < c->nrow; ++i) {
                offset[0] += index[i] * c->cache_strides[0][i];
                offset[1] += index[i] * c->cache_strides[1][i];
            }
            cs = load(c->cache[0] + offset[0], tg->dtype, 0);
            sn = load(c->cache[1] + offset[1], tg->dtype, 0);
        } else {
            cs = load(dense_at(&caches[0], f, j), SINPE_FLOAT64, 0) * p->scale;
            sn = load(dense_at(&caches[1], f, j), SINPE_FLOAT64, 0) * p->scale;
            sn = p->inverse ? -sn : sn;
            if (!exact) cs = round_to(tg->dtype, cs), sn = round_to(tg->dtype, sn);
        }
        const double want = rotate_reference(tg->dtype, exact, x, w, cs, sn);
        if (!same_double(got, want)) {
            fail("rotation: row %td column %td (pair %td, %td): x = %.17g, partner term %.17g, cos %.17g, sin %.17g: "
                 "got %.17g, want %.17g (%s%s)",
                 f, j, a, b, x, w, cs, sn, got, want, dtype_name(tg->dtype), exact ? ", exact" : "");
        }
    }
}

/* The rotation again, in place in a dense native copy of its input, on
 * another thread count: the same bits as the call (in place against out
 * of place, strided against dense, byte orders, threads). */
static void identity_rotate(const call_t *c, reader *r)
{
    dense_t copy;
    dense_alloc(&copy, c->tg[0].lay.ndim, c->tg[0].lay.shape, c->tg[0].dtype, 0);
    for (ptrdiff_t f = 0; f < c->rows; ++f) {
        for (ptrdiff_t j = 0; j < c->d; ++j) {
            const int t = c->plan.source != NULL ? 1 : 0;
            const uint64_t bits_ = read_bits(element(c, t, f, j) - c->tg[t].buffer + c->tg[t].before,
                                             c->tg[t].itemsize, c->tg[t].swapped);
            write_bits(dense_at(&copy, f, j), c->tg[0].itemsize, 0, bits_);
        }
    }
    sinpe_plan p = private_plan(c);
    p.source = NULL;
    p.flags = below(r, 2) ? SINPE_PRIVATE_INPUTS : 0u;
    set_threads(r);
    const int status = sinpe_run(&p, &copy.view, NULL);
    if (status == SINPE_OK) {
        const result_t s = {c, NULL};
        const ptrdiff_t step = sample_stride(c->rows * c->d);
        for (ptrdiff_t e = below_size(r, step); e < c->rows * c->d; e += step) {
            compare("rotation in place in a dense copy", &s, 0, e / c->d, e % c->d, &copy, e / c->d, e % c->d);
        }
    } else if (status != SINPE_ERR_NOMEM) {
        fail("rotation in a dense copy returned status %d", status);
    }
    free(copy.data);
}

/* ------------------------------------------------------------------ */
/* Aliasing: the same call with every input private, into copies of the
 * buffers as they were before, on the same thread count: every byte of
 * every buffer must come out the same. */
static void check_twin(const call_t *c, int status)
{
    target twin[2];
    for (int t = 0; t < c->ntargets; ++t) {
        twin[t] = c->tg[t];
        twin[t].buffer = checked_malloc(c->tg[t].lay.size);
        memcpy(twin[t].buffer, c->tg[t].before, c->tg[t].lay.size);
        twin[t].view.data = twin[t].buffer + c->tg[t].lay.offset;
    }
    sinpe_plan p = private_plan(c);
    p.flags &= ~(unsigned)SINPE_PRIVATE_INPUTS; /* the first call's flag may not hold for these copies' */
    if (p.rotate && p.source != NULL) p.source = &twin[1].view;
    if (sinpe_set_num_threads(c->threads) != SINPE_OK) fail("set_num_threads refused");
    const int got = sinpe_run(&p, &twin[0].view, c->op == OP_ROPE ? &twin[1].view : NULL);
    if (got != status && got != SINPE_ERR_NOMEM) {
        fail("aliasing: the call returned %d, the same call with private inputs %d", status, got);
    }
    for (int t = 0; got == status && t < c->ntargets; ++t) {
        for (size_t i = 0; i < c->tg[t].lay.size; ++i) {
            if (twin[t].buffer[i] != c->tg[t].buffer[i]) {
                fail("aliasing: byte %zu of output %d differs from the same call with private inputs (%02x, not "
                     "%02x; elements at [%zu, %zu))",
                     i, t, (unsigned char)c->tg[t].buffer[i], (unsigned char)twin[t].buffer[i], c->tg[t].lay.lo,
                     c->tg[t].lay.hi);
            }
        }
    }
    for (int t = 0; t < c->ntargets; ++t) free(twin[t].buffer);
}

#endif /* SINPE_FUZZ_CHECKS_H */
