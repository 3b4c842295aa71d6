/*
 * Fuzz target for the variant kernels (csrc/layouts.h), called directly:
 * sinpe_variant_table (store and add), sinpe_variant_rope,
 * sinpe_variant_grid and sinpe_check_freq.  The sibling of fuzz_kernels.c,
 * which covers the core API of sinpe.h; same structure, same build
 * (fuzz/run.sh), no Python anywhere.
 *
 * Each input describes one call: the operation; dtype and byte order of
 * each output (a RoPE call's cos and sin outputs are independent); a shape
 * (1-D scalar-position rows, 0-length axes, odd d, wide tables of more than
 * 2048 frequencies and several 512-frequency tiles, rarely outputs past the
 * thread and streaming thresholds); a memory layout (axes in any order,
 * gaps, negative strides, a misaligned start, rarely a zero stride); the
 * frequencies (paper or fairseq schedule with a base n, or an explicit
 * array whose angles reach SINPE_MAX_ANGLE); the positions (offset + i
 * along an axis, or one int64 or double per row: runs, repeats, the
 * +-2**24 bounds, fractions), an optional padding mask; the layout; a
 * grid's split and order; scale, flags, thread count and a cancel callback.
 * Every so often one of these is made invalid.  Outputs live inside
 * buffers with guard zones, filled with random bytes; positions, padding
 * and frequencies are allocated to their exact size (ASan sees overreads).
 * After the call:
 *   - an invalid call must return SINPE_ERR_INVALID and leave every byte of
 *     every buffer as it was;
 *   - a valid one must return SINPE_OK (or SINPE_ERR_NOMEM, nothing
 *     written), change no byte outside the addressed elements, and give
 *     every element within a derived bound of a libm double reference
 *     (docs/variants.md section 1; bounds at element_bound below);
 *   - a cancelled one may leave elements untouched, but never wrong;
 *   - bit identity: a second call computes some of the same values another
 *     way (a shard of rows at explicit or shifted range positions, the
 *     other column layout, the schedule's frequencies as an explicit array,
 *     another thread count; RoPE caches against the table; a grid's chunk
 *     against the 1-D table of its axis) and every shared element must have
 *     the same bits: each value is a function of (position, frequency) only.
 * Calls whose output is empty are held to the structural checks only: past
 * those, layouts.c returns SINPE_OK without looking at positions, data or
 * explicit frequencies (the binding checks those itself), and either
 * answer leaves nothing written.
 *
 * Two ways to run it (fuzz/run.sh does either):
 *   libFuzzer:  clang -fsanitize=fuzzer,address,undefined ...
 *   plain:      cc -DSINPE_FUZZ_MAIN -fsanitize=address,undefined ...; ./a.out SECONDS SEED
 *               (random inputs from a seeded generator; files as arguments
 *               are replayed instead, e.g. a crash input from libFuzzer).
 */
#include "layouts.h"
#include "sinpe.h"
#include "fuzz_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Statistics and failure reports. */

/* What the inputs checked, for the plain driver's report. */
static struct {
    long invalid, valid, empty, cancelled, elements, identical, check_freq;
} stats;

static const uint8_t *current_input;
static size_t current_size;
static char summary[640]; /* the call being checked, for failure reports */

static void fail(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "fuzz_variants: ");
    vfprintf(stderr, format, args);
    va_end(args);
    fprintf(stderr, "\ncall: %s\ninput (%zu bytes):", summary, current_size);
    for (size_t i = 0; i < current_size; ++i) {
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", current_input[i]);
    }
    fprintf(stderr, "\n");
    abort();
}

static void *checked_malloc(size_t size)
{
    void *p = malloc(size > 0 ? size : 1);
    if (p == NULL) fail("out of memory in the driver (%zu bytes)", size);
    return p;
}

/* Same bits once decoded (decoding is injective on non-NaN elements, and
 * both sides are of one dtype, so this is bit identity of the stored
 * rounding whatever the byte order). */
static int same_value(const char *a, int swapped_a, const char *b, int swapped_b, sinpe_dtype dtype)
{
    const double x = load(a, dtype, swapped_a), y = load(b, dtype, swapped_b);
    return memcmp(&x, &y, sizeof x) == 0;
}

/* ------------------------------------------------------------------ */
/* Size classes and outputs (memory layouts: fuzz_common.h). */

/* The large class (streaming stores, 8 MB and more) is slow; fuzz/run.sh
 * turns it off for libFuzzer, whose mutations would pick it too often. */
#ifndef SINPE_FUZZ_LARGE
#define SINPE_FUZZ_LARGE 1
#endif
#define SMALL_ELEMENTS 4096 /* per target, small class */
#define COMPARE_ELEMENTS 8192 /* the most elements one check looks at */

/* One output: its buffer (guard zones around the array), a copy of it from
 * before the call, and which bytes belong to elements. */
typedef struct {
    memory_layout lay;
    sinpe_dtype dtype; /* as allocated; view.dtype may be made invalid */
    int swapped;
    size_t itemsize;
    char *buffer, *before;
    unsigned char *addressed;
    ptrdiff_t call_shape[MAX_AXES]; /* what the call sees */
    sinpe_array view;
} target;

/* Allocates and fills the buffer (random bytes; exact inputs for adds). */
static void target_fill(target *tg, int exact_inputs, uint64_t *seed)
{
    tg->buffer = checked_malloc(tg->lay.size);
    tg->before = checked_malloc(tg->lay.size);
    tg->addressed = calloc(tg->lay.size, 1);
    if (tg->addressed == NULL) fail("out of memory in the driver");
    for (size_t i = 0; i < tg->lay.size; i += 8) {
        const uint64_t word = splitmix(seed);
        memcpy(tg->buffer + i, &word, tg->lay.size - i < 8 ? tg->lay.size - i : 8);
    }
    const ptrdiff_t total = element_count(&tg->lay);
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t e = 0; e < total; ++e) {
        const size_t at = element_at(&tg->lay, e, index);
        memset(tg->addressed + at, 1, tg->itemsize);
        if (exact_inputs) {
            store_exact(tg->buffer + at, tg->dtype, tg->swapped,
                        (double)((int64_t)(splitmix(seed) % 4096) - 2048) / 64.0);
        }
    }
    memcpy(tg->before, tg->buffer, tg->lay.size);
    memcpy(tg->call_shape, tg->lay.shape, sizeof tg->call_shape);
    tg->view = (sinpe_array){tg->buffer + tg->lay.offset, tg->dtype, tg->swapped, tg->lay.ndim,
                             tg->call_shape, tg->lay.strides};
}

static void target_free(target *tg)
{
    free(tg->buffer);
    free(tg->before);
    free(tg->addressed);
}

static void check_untouched(const char *what, const target *tg, int allow_addressed)
{
    for (size_t block = 0; block < tg->lay.size; block += 64) {
        const size_t length = tg->lay.size - block < 64 ? tg->lay.size - block : 64;
        if (memcmp(tg->buffer + block, tg->before + block, length) == 0) {
            continue;
        }
        for (size_t i = block; i < block + length; ++i) {
            if (tg->buffer[i] != tg->before[i] && !(allow_addressed && tg->addressed[i])) {
                fail("%s: byte %zu of %zu changed%s", what, i, tg->lay.size,
                     allow_addressed ? " (outside the array)" : "");
            }
        }
    }
}

/* ------------------------------------------------------------------ */
/* A call. */

enum { OP_TABLE, OP_ADD, OP_ROPE, OP_GRID };
enum { SIZE_SMALL, SIZE_WIDE, SIZE_MEDIUM, SIZE_LARGE };
enum { POS_RANGE, POS_INTS, POS_REALS };
enum { ROLE_SIN, ROLE_COS, ROLE_ZERO };
enum { EXPECT_OK, EXPECT_INVALID, EXPECT_EITHER };

typedef struct {
    int op, size_class;
    int ntargets;
    target tg[2];
    int nrow;           /* row axes: every axis but the last */
    ptrdiff_t rows, d;  /* rows (C order over the row axes), features */
    int layout;         /* as passed: rarely neither enumerator */
    /* frequencies */
    int explicit_freq;
    sinpe_freqs freqs;
    double *freq; /* the explicit array, exactly freqs.nfreq entries */
    /* positions */
    int pos_mode;
    sinpe_positions pos;
    int64_t *ints;
    double *reals;
    unsigned char *padding;
    int null_pos, null_freqs;
    /* grids */
    ptrdiff_t split[MAX_AXES];
    int order[MAX_AXES];
    int null_split;
    /* adds */
    int adding;
    double scale;
    unsigned flags;
    /* the reference's frequencies: per grid chunk i (in order), else [0] */
    ptrdiff_t m[MAX_AXES], col0[MAX_AXES];
    double *w[MAX_AXES];
} call_t;

static void call_free(call_t *c)
{
    for (int t = 0; t < c->ntargets; ++t) target_free(&c->tg[t]);
    free(c->freq);
    free(c->ints);
    free(c->reals);
    free(c->padding);
    for (int i = 0; i < MAX_AXES; ++i) free(c->w[i]);
}

static void row_index(const call_t *c, ptrdiff_t flat, ptrdiff_t *index)
{
    for (int i = c->nrow - 1; i >= 0; --i) {
        index[i] = flat % c->tg[0].lay.shape[i];
        flat /= c->tg[0].lay.shape[i];
    }
}

static ptrdiff_t row_flat(const call_t *c, const ptrdiff_t *index)
{
    ptrdiff_t flat = 0;
    for (int i = 0; i < c->nrow; ++i) flat = flat * c->tg[0].lay.shape[i] + index[i];
    return flat;
}

/* Element (row f, column j) of target t. */
static char *element(const call_t *c, int t, ptrdiff_t f, ptrdiff_t j)
{
    ptrdiff_t index[MAX_AXES];
    row_index(c, f, index);
    const target *tg = &c->tg[t];
    ptrdiff_t at = (ptrdiff_t)tg->lay.offset + j * tg->lay.strides[c->nrow];
    for (int i = 0; i < c->nrow; ++i) at += index[i] * tg->lay.strides[i];
    return tg->buffer + at;
}

/* The position of row f (index: its row index), as a double: integers up
 * to 2**24 are exact, and the kernel's integer path and angle (double)p * w
 * are the same numbers. */
static double position_of(const call_t *c, ptrdiff_t f, const ptrdiff_t *index)
{
    if (c->pos_mode == POS_RANGE) return (double)c->pos.offset + (double)index[c->pos.pos_axis];
    if (c->pos_mode == POS_INTS) return (double)c->ints[f];
    return c->reals[f];
}

/* ------------------------------------------------------------------ */
/* The math of docs/variants.md section 1. */

/* Frequencies of a schedule for width d: paper n**(-2k/d), k < ceil(d/2);
 * fairseq n**(-k / max(d/2 - 1, 1)), k < d/2 (as table.c spells them, so
 * the doubles agree; an ulp off would stay inside the bounds anyway). */
static double *schedule_freq(sinpe_schedule schedule, double n, ptrdiff_t d, ptrdiff_t *m)
{
    *m = schedule == SINPE_PAPER ? (d + 1) / 2 : d / 2;
    double *w = checked_malloc(sizeof(double) * (size_t)*m);
    const double denominator = *m - 1 > 1 ? (double)(*m - 1) : 1.0;
    for (ptrdiff_t k = 0; k < *m; ++k) {
        w[k] = schedule == SINPE_PAPER ? pow(n, -(2.0 * (double)k) / (double)d)
                                       : pow(n, -(double)k / denominator);
    }
    return w;
}

/* What column j of a width-d table with m frequencies holds: the sine or
 * cosine of pair *k, or zero.  Interleaved: 2k sine, 2k + 1 cosine;
 * concatenated: k sine, m + k cosine; min(m, d - m) cosines (an odd d ends
 * with a sine when 2m = d + 1, with a zero column when 2m = d - 1). */
static int column_role(int layout, ptrdiff_t d, ptrdiff_t m, ptrdiff_t j, ptrdiff_t *k)
{
    const ptrdiff_t ncos = m < d - m ? m : d - m;
    if (layout == SINPE_INTERLEAVED) {
        *k = j / 2;
        return *k >= m ? ROLE_ZERO : j % 2 == 0 ? ROLE_SIN : ROLE_COS;
    }
    if (j < m) {
        *k = j;
        return ROLE_SIN;
    }
    *k = j - m;
    return *k < ncos ? ROLE_COS : ROLE_ZERO;
}

/* The column of (role, k) in `layout` (the inverse of column_role; the
 * zero column, when there is one, is the last in both layouts). */
static ptrdiff_t column_of(int layout, ptrdiff_t d, ptrdiff_t m, int role, ptrdiff_t k)
{
    if (role == ROLE_ZERO) return d - 1;
    if (layout == SINPE_INTERLEAVED) return 2 * k + (role == ROLE_COS);
    return role == ROLE_SIN ? k : m + k;
}

/* Where column j of a `from` table sits in the `to` layout. */
static ptrdiff_t map_column(int from, int to, ptrdiff_t d, ptrdiff_t m, ptrdiff_t j)
{
    ptrdiff_t k;
    const int role = column_role(from, d, m, j, &k);
    return column_of(to, d, m, role, k);
}

/* RoPE: the pair of column j, k = j mod d/2 (concatenated) or j / 2. */
static ptrdiff_t rope_pair(int layout, ptrdiff_t d, ptrdiff_t j)
{
    return layout == SINPE_CONCATENATED ? j % (d / 2) : j / 2;
}

/* |kernel's double - libm's double| for the value at position x and
 * frequency w.  The kernel makes sin/cos(x w) from the anchor of its block,
 * p0 = x - r (|p0| <= |x| + 31, |r| <= 31), and the step r:
 * angle roundings 2**-53 |p0 w| and 2**-53 |r w|, then sinpe_sincos (about
 * 2**-51.5 each) and the rotation's two products and sum (2**-53 each);
 * libm rounds the angle x w once (2**-53 |x w|) and is within half an ulp.
 * So the gap is below 2**-53 (2 |x| + 62) w + ~2**-49: 2**-52 (2 (|x| + 32)
 * w + 256) covers it with a margin of two on the angle term and far more on
 * the constant (2**-44, 6e-14: float64 results may be that far off libm,
 * the other dtypes never notice).  Non-integral positions are one sincos of
 * x w: inside the same bound. */
static double value_error(double x, double w)
{
    return ldexp(2.0 * (fabs(x) + 32.0) * w + 256.0, -52);
}

static double role_value(int role, double x, double w)
{
    return role == ROLE_SIN ? sin(x * w) : role == ROLE_COS ? cos(x * w) : 0.0;
}

/* The value element (row f, column j) of target t should get before any
 * add, and its error bound (value_error). */
static void expected(const call_t *c, int t, ptrdiff_t f, const ptrdiff_t *index, ptrdiff_t j,
                     double *pe, double *err)
{
    *pe = 0.0;
    *err = 0.0;
    ptrdiff_t k, chunk = 0, width = c->d;
    int role;
    double x;
    if (c->op == OP_GRID) {
        while (chunk + 1 < c->nrow && j >= c->col0[chunk + 1]) ++chunk;
        const int axis = c->order[chunk];
        width = c->split[axis];
        x = (double)index[axis];
        role = column_role(c->layout, width, c->m[chunk], j - c->col0[chunk], &k);
    } else {
        if (c->padding != NULL && c->padding[f]) return; /* a padded row: zeros */
        x = position_of(c, f, index);
        if (c->op == OP_ROPE) {
            k = rope_pair(c->layout, c->d, j);
            role = t == 0 ? ROLE_COS : ROLE_SIN;
        } else {
            role = column_role(c->layout, c->d, c->m[0], j, &k);
        }
    }
    if (role == ROLE_ZERO) return;
    const double w = c->w[chunk][k];
    *pe = role_value(role, x, w);
    *err = value_error(x, w);
}

/* The bound of one element.  Store: the kernel's double is within err of
 * the reference pe and is rounded once to the dtype: half an ulp of
 * |pe| + err, plus err.  Add: x' = fl(fl(scale x) + v) with |v - pe| <=
 * err, two roundings of 2**-53 relative (|scale x| and |sum| <= |want| +
 * err), so delta = err + 2**-52 (|scale x| + |want|) bounds the double,
 * then one rounding to the dtype.  Zero columns and padded rows: err = 0,
 * so a store must give exactly +-0. */
static double element_bound(double want, double err, double scaled, int adding, sinpe_dtype dtype)
{
    const double delta = adding ? err + ldexp(fabs(scaled) + fabs(want), -52) : err;
    return half_ulp(fabs(want) + delta, dtype) + delta;
}

/* Every element of target t (a sample of a big one) against the reference. */
static void check_values(const call_t *c, int t, int status)
{
    const target *tg = &c->tg[t];
    const ptrdiff_t total = element_count(&tg->lay);
    const ptrdiff_t stride = total > COMPARE_ELEMENTS ? 1 + total / COMPARE_ELEMENTS : 1;
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t e = 0; e < total; e += stride) {
        const size_t at = element_at(&tg->lay, e, index);
        if (status == SINPE_ERR_CANCELLED && memcmp(tg->buffer + at, tg->before + at, tg->itemsize) == 0) {
            continue; /* not reached before the cancel: allowed */
        }
        const ptrdiff_t f = e / c->d, j = index[c->nrow];
        double pe, err;
        expected(c, t, f, index, j, &pe, &err);
        const double scaled = c->adding ? c->scale * load(tg->before + at, tg->dtype, tg->swapped) : 0.0;
        const double want = scaled + pe;
        const double bound = element_bound(want, err, scaled, c->adding, tg->dtype);
        const double got = load(tg->buffer + at, tg->dtype, tg->swapped);
        ++stats.elements;
        if (!(fabs(got - want) <= bound)) {
            fail("target %d element row %td (position %.17g) column %td: got %.17g, want %.17g, "
                 "error %.3g > %.3g",
                 t, f, c->op == OP_GRID ? NAN : position_of(c, f, index), j, got, want,
                 fabs(got - want), bound);
        }
    }
}

/* ------------------------------------------------------------------ */
/* What the call must return (layouts.h, layouts.c's checks). */

static int view_valid(const target *tg)
{
    if ((unsigned)tg->view.dtype > SINPE_FLOAT64) return 0;
    for (int i = 0; i < tg->view.ndim; ++i) {
        if (tg->call_shape[i] < 0) return 0;
    }
    return 1;
}

static int empty_rows(const call_t *c)
{
    for (int i = 0; i < c->nrow; ++i) {
        if (c->tg[0].call_shape[i] == 0) return 1;
    }
    return 0;
}

/* Positions within +-SINPE_MAX_POSITION (padded rows included); *most
 * gets the largest |position|. */
static int positions_valid(const call_t *c, double *most)
{
    const double bound = (double)SINPE_MAX_POSITION;
    *most = 0.0;
    if (c->pos_mode == POS_RANGE) {
        const double lo = (double)c->pos.offset;
        const double hi = lo + (double)(c->tg[0].lay.shape[c->pos.pos_axis] - 1);
        *most = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
        return fabs(lo) <= bound && fabs(hi) <= bound;
    }
    for (ptrdiff_t f = 0; f < c->rows; ++f) {
        const double p = c->pos_mode == POS_INTS ? (double)c->ints[f] : c->reals[f];
        if (c->pos_mode == POS_INTS ? c->ints[f] < -SINPE_MAX_POSITION || c->ints[f] > SINPE_MAX_POSITION
                                    : !(fabs(p) <= bound)) {
            return 0;
        }
        *most = fabs(p) > *most ? fabs(p) : *most;
    }
    return 1;
}

/* Every angle in range: (|position| + the anchor slack) * w <= the most
 * sinpe_sincos reduces exactly, w >= 0 and finite (sinpe_check_freq). */
static int freq_model(const double *freq, ptrdiff_t nfreq, double most)
{
    for (ptrdiff_t k = 0; k < nfreq; ++k) {
        if (!(freq[k] >= 0.0) || !(freq[k] * (most + SINPE_ANCHOR_SLACK) <= SINPE_MAX_ANGLE)) return 0;
    }
    return 1;
}

static int schedule_valid(const sinpe_freqs *freqs, int rope)
{
    return freqs->n >= SINPE_MIN_BASE && freqs->n <= SINPE_MAX_BASE &&
           (freqs->schedule == SINPE_PAPER || (freqs->schedule == SINPE_FAIRSEQ && !rope));
}

static int expect_table(const call_t *c)
{
    const int rope = c->op == OP_ROPE;
    if (c->layout != SINPE_INTERLEAVED && c->layout != SINPE_CONCATENATED) return EXPECT_INVALID;
    for (int t = 0; t < c->ntargets; ++t) {
        if (!view_valid(&c->tg[t])) return EXPECT_INVALID;
        for (int i = 0; i < c->tg[0].view.ndim; ++i) {
            if (c->tg[t].call_shape[i] != c->tg[0].call_shape[i]) return EXPECT_INVALID;
        }
    }
    if (c->null_pos || c->null_freqs || (c->adding && !isfinite(c->scale))) return EXPECT_INVALID;
    const ptrdiff_t d = c->tg[0].call_shape[c->nrow];
    if (d < 1 || (rope && d % 2 != 0)) return EXPECT_INVALID;
    const sinpe_positions *pos = &c->pos;
    if (pos->pos_axis >= 0 ? pos->pos_axis >= c->nrow || pos->ints != NULL || pos->reals != NULL
                           : (pos->ints == NULL) == (pos->reals == NULL)) {
        return EXPECT_INVALID;
    }
    if (c->explicit_freq) {
        const ptrdiff_t nfreq = c->freqs.nfreq;
        if (rope ? nfreq != d / 2 : nfreq != d / 2 && nfreq != (d + 1) / 2) return EXPECT_INVALID;
    } else if (!schedule_valid(&c->freqs, rope)) {
        return EXPECT_INVALID;
    }
    double most;
    int valid = 1;
    for (int t = 0; t < c->ntargets; ++t) valid = valid && c->tg[t].view.data != NULL;
    valid = valid && positions_valid(c, &most);
    valid = valid && (!c->explicit_freq || freq_model(c->freq, c->freqs.nfreq, most));
    return valid ? EXPECT_OK : empty_rows(c) ? EXPECT_EITHER : EXPECT_INVALID;
}

static int expect_grid(const call_t *c)
{
    const target *tg = &c->tg[0];
    if (!view_valid(tg) || tg->view.ndim < 2 || c->null_split || c->null_freqs ||
        c->explicit_freq || (c->layout != SINPE_INTERLEAVED && c->layout != SINPE_CONCATENATED)) {
        return EXPECT_INVALID;
    }
    const ptrdiff_t d = tg->call_shape[c->nrow];
    int seen[MAX_AXES] = {0};
    ptrdiff_t total = 0;
    for (int a = 0; a < c->nrow; ++a) {
        if (c->order[a] < 0 || c->order[a] >= c->nrow || seen[c->order[a]]++ || c->split[a] < 1 ||
            c->split[a] > d) {
            return EXPECT_INVALID;
        }
        total += c->split[a];
    }
    if (total != d || !schedule_valid(&c->freqs, 0)) return EXPECT_INVALID;
    if (tg->view.data == NULL) return empty_rows(c) ? EXPECT_EITHER : EXPECT_INVALID;
    return EXPECT_OK;
}

/* ------------------------------------------------------------------ */
/* Choosing the call. */

static double pick_base(reader *r, int *valid)
{
    static const double bad[] = {0.0, -1.0, 0.5, 0.999999, 1e-300, 1e300, 1.0000001e30, NAN, INFINITY, -INFINITY};
    static const double good[] = {10000.0, 1.0, 2.0, 1e30, 500000.0, 10.0};
    const unsigned kind = below(r, 48);
    *valid = kind != 47;
    if (kind == 47) return bad[below(r, sizeof bad / sizeof bad[0])];
    if (kind < 16) return good[below(r, sizeof good / sizeof good[0])];
    return pow(10.0, 30.0 * (double)bits(r, 16) / 65535.0); /* 1 .. 1e30 */
}

static int64_t pick_offset(reader *r, ptrdiff_t rows)
{
    const int64_t bound = SINPE_MAX_POSITION;
    switch (below(r, 24)) {
    case 0: return bound - rows + 1;                    /* last row exactly at the bound */
    case 1: return -bound;
    case 2: return bound - rows + 2;                    /* one past */
    case 3: return (below(r, 2) ? 1 : -1) * (bound + 1 + (int64_t)below(r, 3));
    case 4: return (int64_t)bits(r, 64);                /* anything, mostly far out */
    case 5: case 6: return (int64_t)(bits(r, 25) % (2 * bound + 1)) - bound;
    case 7: return -bound + (int64_t)below(r, 64);      /* blocks below -2**24 */
    default: return (int64_t)below(r, 200) - 100;
    }
}

static ptrdiff_t row_length(reader *r, int allow_zero)
{
    const unsigned kind = below(r, 16);
    return kind == 0 && allow_zero ? 0 : kind < 10 ? 1 + (ptrdiff_t)below(r, 6) : (ptrdiff_t)below(r, 40) + 1;
}

/* Width of a wide table: > 1024 features (several tiles of 512
 * frequencies) or > 4096 (more than 2048 frequencies: step rows built per
 * tile). */
static ptrdiff_t wide_width(reader *r)
{
    return below(r, 2) ? 4097 + (ptrdiff_t)below(r, 104) : 1025 + (ptrdiff_t)below(r, 80);
}

static void pick_grid_split(reader *r, call_t *c, memory_layout *lay, ptrdiff_t wide)
{
    ptrdiff_t d = 0;
    const int big = (int)below(r, (unsigned)(c->nrow > 0 ? c->nrow : 1));
    for (int a = 0; a < c->nrow; ++a) {
        c->split[a] = wide > 0 && a == big ? wide : 1 + (ptrdiff_t)below(r, below(r, 4) ? 8 : 40);
        d += c->split[a];
        c->order[a] = a;
    }
    for (int a = c->nrow - 1; a > 0; --a) { /* order: a permutation */
        const int k = (int)below(r, (unsigned)a + 1), t = c->order[a];
        c->order[a] = c->order[k];
        c->order[k] = t;
    }
    if (c->nrow > 0 && below(r, 24) == 0) { /* broken: a split, the sum or the order */
        const int a = (int)below(r, (unsigned)c->nrow);
        switch (below(r, 4)) {
        case 0: c->split[a] = below(r, 2) ? 0 : -1; break;
        case 1: d += below(r, 2) ? 1 : -1; break;
        case 2: c->order[a] = c->order[(a + 1) % c->nrow]; break;
        default: c->order[a] = below(r, 2) ? c->nrow : -1; break;
        }
    }
    lay->shape[c->nrow] = d;
}

/* Shape of the output(s) in `lay` (ndim and every length). */
static void pick_shape(reader *r, call_t *c, memory_layout *lay, size_t itemsize)
{
    const int grid = c->op == OP_GRID, rope = c->op == OP_ROPE;
    if (c->size_class == SIZE_MEDIUM || c->size_class == SIZE_LARGE) {
        /* past the thread threshold (256 KB) or the streaming one (8 MB) */
        /* medium: now and then past a grid's 1 MB band, so bands split an inner axis */
        const double bytes = c->size_class == SIZE_LARGE ? 8.5e6 : below(r, 4) == 0 ? 1.1e6 : 3.0e5;
        const ptrdiff_t d = (c->size_class == SIZE_LARGE ? 64 : 16) + (ptrdiff_t)below(r, 33);
        ptrdiff_t rows = (ptrdiff_t)(bytes / ((double)d * (double)itemsize)) + 1;
        rows += below_size(r, rows / 2 + 1);
        lay->ndim = grid || below(r, 2) ? 3 : 2;
        c->nrow = lay->ndim - 1;
        lay->shape[0] = lay->ndim == 3 ? 1 + (ptrdiff_t)below(r, 24) : rows;
        if (lay->ndim == 3) lay->shape[1] = rows / lay->shape[0] + 1;
        lay->shape[c->nrow] = d + (rope && d % 2);
        if (grid) {
            c->split[0] = 1 + below_size(r, d - 1);
            c->split[1] = d - c->split[0];
            c->order[0] = (int)below(r, 2);
            c->order[1] = 1 - c->order[0];
        }
        return;
    }
    const int wide = c->size_class == SIZE_WIDE;
    if (grid) {
        lay->ndim = below(r, 32) == 0 ? 1 : 2 + (int)below(r, wide ? 2 : 3);
    } else {
        const unsigned k = below(r, 8);
        lay->ndim = k == 0 ? 1 : k < 5 || wide ? 2 : k < 7 ? 3 : 4;
    }
    c->nrow = lay->ndim - 1;
    for (int i = 0; i < c->nrow; ++i) {
        lay->shape[i] = wide ? 1 + (ptrdiff_t)below(r, lay->ndim == 2 ? 3 : 2) : row_length(r, 1);
    }
    if (grid) {
        pick_grid_split(r, c, lay, wide ? wide_width(r) : 0);
    } else if (wide) {
        lay->shape[c->nrow] = wide_width(r);
    } else {
        const unsigned k = below(r, 32);
        lay->shape[c->nrow] = k == 0 ? 0 : k < 20 ? 1 + (ptrdiff_t)below(r, 12)
                                 : k < 30 ? 1 + (ptrdiff_t)below(r, 80) : 1 + (ptrdiff_t)below(r, 300);
    }
    if (rope && below(r, 16) != 0) lay->shape[c->nrow] += lay->shape[c->nrow] % 2; /* mostly even */
    for (int shrink = 4; !wide && element_count(lay) > SMALL_ELEMENTS && shrink > 1; shrink /= 2) {
        for (int i = 0; i < c->nrow; ++i) lay->shape[i] = 1 + lay->shape[i] % shrink;
    }
}

/* Explicit positions: runs (block runs), repeats (an add's shared rows),
 * anything, the bounds, rarely one out of range; reals add fractions. */
static void pick_positions(reader *r, call_t *c, uint64_t *seed)
{
    const int64_t bound = SINPE_MAX_POSITION;
    const unsigned kind = below(r, 8), fraction = below(r, 4), bad = below(r, 16) == 0;
    const int64_t start = kind == 4 ? bound - (int64_t)below(r, 128) : (int64_t)below(r, 200) - 100;
    const ptrdiff_t length = c->nrow > 0 ? c->tg[0].lay.shape[c->nrow - 1] : 1;
    c->ints = checked_malloc(sizeof(int64_t) * (size_t)c->rows);
    c->reals = checked_malloc(sizeof(double) * (size_t)c->rows);
    for (ptrdiff_t f = 0; f < c->rows; ++f) {
        const uint64_t u = splitmix(seed);
        int64_t p;
        switch (kind) {
        case 0: case 1: p = start + f; break;                            /* one run */
        case 2: p = start + f % length + (int64_t)(u % 4 == 0); break;    /* per sequence, a jump */
        case 3: p = start + (int64_t)(u % 8); break;                      /* repeats */
        case 4: p = (u % 2 ? 1 : -1) * (start + (int64_t)(f % 40)); break; /* near +-2**24 */
        default: p = (int64_t)(u % (uint64_t)(2 * bound + 1)) - bound; break;
        }
        if (p > bound || p < -bound) p = p > 0 ? bound : -bound;
        c->ints[f] = p;
        const double x = (double)p;
        /* fraction: 0 integral, 1 halves, 2 random fractions, 3 mixed */
        const double frac = fraction == 1 ? 0.5 : fraction == 2 || (fraction == 3 && u % 3 == 0)
                                                   ? (double)(u >> 11) * 0x1p-53 : 0.0;
        c->reals[f] = fabs(x + frac) <= (double)bound ? x + frac : x - frac;
        if (c->reals[f] == 0.0 && u % 5 == 0) c->reals[f] = -0.0;
    }
    if (bad && c->rows > 0) {
        static const double bad_reals[] = {NAN, INFINITY, -INFINITY, 16777216.5, -16777217.0};
        static const int64_t bad_ints[] = {INT64_MIN, INT64_MAX, (1 << 24) + 1, -(1 << 24) - 1};
        const ptrdiff_t f = below_size(r, c->rows);
        c->ints[f] = bad_ints[below(r, 4)];
        c->reals[f] = bad_reals[below(r, 5)];
    }
}

/* Explicit frequencies: schedule-like, uniform in [0, 1], up to the angle
 * limit of these positions (and exactly at it, or one ulp past), zeros and
 * subnormals, rarely one bad entry. */
static void pick_freq(reader *r, call_t *c, uint64_t *seed)
{
    const ptrdiff_t d = c->tg[0].lay.shape[c->nrow];
    ptrdiff_t nfreq = c->op == OP_ROPE || below(r, 2) ? d / 2 : (d + 1) / 2;
    if (below(r, 24) == 0) nfreq += below(r, 2) || nfreq == 0 ? 1 : -1; /* wrong count */
    double most = 0.0;
    if (c->pos_mode != POS_RANGE || c->nrow > 0) (void)positions_valid(c, &most);
    const double limit = SINPE_MAX_ANGLE / (most + SINPE_ANCHOR_SLACK);
    const unsigned kind = below(r, 8);
    const double base = pow(10.0, 6.0 * (double)below(r, 256) / 255.0);
    c->freq = checked_malloc(sizeof(double) * (size_t)nfreq);
    for (ptrdiff_t k = 0; k < nfreq; ++k) {
        const double u = (double)(splitmix(seed) >> 11) * 0x1p-53;
        switch (kind) {
        case 0: case 1: case 2: c->freq[k] = pow(base, -(2.0 * (double)k) / (double)d); break;
        case 3: c->freq[k] = u; break;
        case 4: c->freq[k] = u * limit; break;
        case 5: c->freq[k] = u < 0.5 ? limit : u < 0.75 ? nextafter(limit, INFINITY) : nextafter(limit, 0.0); break;
        case 6: c->freq[k] = u < 0.5 ? 0.0 : u < 0.75 ? ldexp(u, -1060) : -0.0; break;
        default: c->freq[k] = u * (limit < 1.0 ? limit : 1.0); break;
        }
    }
    if (nfreq > 0 && below(r, 16) == 0) {
        static const double bad[] = {NAN, INFINITY, -1.0, -1e-300, 1e300};
        c->freq[below_size(r, nfreq)] = bad[below(r, 5)];
    }
    c->freqs.freq = c->freq;
    c->freqs.nfreq = nfreq;
}

/* Frequencies (schedule or explicit) and, for tables and RoPE, positions
 * and padding. */
static void pick_inputs(reader *r, call_t *c, uint64_t *seed)
{
    const unsigned fk = below(r, 8);
    int n_valid;
    c->freqs.n = pick_base(r, &n_valid);
    c->freqs.schedule = below(r, 64) == 0 ? (sinpe_schedule)2 : fk >= 4 && fk < 6 ? SINPE_FAIRSEQ : SINPE_PAPER;
    if (c->op == OP_ROPE && c->freqs.schedule == SINPE_FAIRSEQ && below(r, 8) != 0) c->freqs.schedule = SINPE_PAPER;
    c->explicit_freq = c->op == OP_GRID ? below(r, 32) == 0 : fk >= 6;
    c->null_freqs = below(r, 64) == 0;
    c->layout = below(r, 64) == 0 ? (below(r, 2) ? 2 : -1) : (int)below(r, 2);
    c->flags = below(r, 2) ? SINPE_FRESH_OUTPUT : 0u;
    if (c->op == OP_GRID) {
        c->null_split = below(r, 64) == 0;
        if (c->explicit_freq) pick_freq(r, c, seed);
        return;
    }
    const unsigned pk = below(r, 8);
    c->pos_mode = pk < 4 ? POS_RANGE : pk < 6 ? POS_INTS : POS_REALS;
    if (c->pos_mode == POS_RANGE && c->nrow == 0) c->pos_mode = POS_INTS; /* no axis to run along */
    if (c->pos_mode == POS_RANGE) {
        c->pos.pos_axis = (int)below(r, (unsigned)c->nrow);
        c->pos.offset = pick_offset(r, c->tg[0].lay.shape[c->pos.pos_axis]);
    } else {
        pick_positions(r, c, seed);
        c->pos.pos_axis = -1 - (int)below(r, 2);
        c->pos.ints = c->pos_mode == POS_INTS ? c->ints : NULL;
        c->pos.reals = c->pos_mode == POS_REALS ? c->reals : NULL;
    }
    if (below(r, 3) == 0) {
        const unsigned density = below(r, 8); /* 0: none padded, 7: all, else 1 in 4 */
        c->padding = checked_malloc((size_t)c->rows);
        for (ptrdiff_t f = 0; f < c->rows; ++f) {
            c->padding[f] = density == 7 ? (unsigned char)(1 + f % 255)
                            : density == 0 ? 0 : splitmix(seed) % 4 == 0;
        }
        c->pos.padding = c->padding;
    }
    if (c->explicit_freq) pick_freq(r, c, seed); /* after the positions: their reach */
    if (below(r, 48) == 0) { /* broken: the axis, or both/neither arrays */
        static const int64_t dummy_ints[1];
        static const double dummy_reals[1];
        switch (below(r, 3)) {
        case 0: c->pos.pos_axis = c->nrow + (int)below(r, 2); break;
        case 1: c->pos.ints = c->pos.ints == NULL ? dummy_ints : NULL; break;
        default: c->pos.reals = c->pos.reals == NULL ? dummy_reals : NULL; break;
        }
    }
    c->null_pos = below(r, 64) == 0;
}

/* The reference's frequencies (the explicit array, or the schedule's;
 * per chunk for a grid) and a grid's chunk columns. */
static void reference_freq(call_t *c)
{
    if (c->op != OP_GRID) {
        if (c->explicit_freq) {
            c->m[0] = c->freqs.nfreq;
            c->w[0] = checked_malloc(sizeof(double) * (size_t)c->m[0]);
            memcpy(c->w[0], c->freq, sizeof(double) * (size_t)c->m[0]);
        } else {
            c->w[0] = schedule_freq(c->freqs.schedule, c->freqs.n, c->d, &c->m[0]);
        }
        return;
    }
    ptrdiff_t col = 0;
    for (int i = 0; i < c->nrow; ++i) {
        const ptrdiff_t width = c->split[c->order[i]];
        c->col0[i] = col;
        c->w[i] = schedule_freq(c->freqs.schedule, c->freqs.n, width, &c->m[i]);
        col += width;
    }
}

/* ------------------------------------------------------------------ */
/* Bit identity: second calls into dense arrays. */

typedef struct {
    char *data;
    ptrdiff_t shape[2], strides[2];
    sinpe_dtype dtype;
    int swapped;
    sinpe_array view;
} dense_t;

static void dense_alloc(dense_t *a, ptrdiff_t rows, ptrdiff_t d, sinpe_dtype dtype, int swapped)
{
    const size_t itemsize = itemsize_of(dtype);
    a->data = checked_malloc((size_t)rows * (size_t)d * itemsize); /* exact: ASan guards it */
    a->shape[0] = rows;
    a->shape[1] = d;
    a->strides[0] = d * (ptrdiff_t)itemsize;
    a->strides[1] = (ptrdiff_t)itemsize;
    a->dtype = dtype;
    a->swapped = swapped;
    a->view = (sinpe_array){a->data, dtype, swapped, 2, a->shape, a->strides};
}

static char *dense_at(const dense_t *a, ptrdiff_t row, ptrdiff_t col)
{
    return a->data + row * a->strides[0] + col * a->strides[1];
}

/* Rows of the first call recomputed by a second one: rows[q] is the
 * original row of the second call's row q. */
typedef struct {
    ptrdiff_t count, *rows;
    sinpe_positions pos;
    int64_t *ints;
    double *reals;
    unsigned char *padding;
} shard_t;

static void shard_free(shard_t *s)
{
    free(s->rows);
    free(s->ints);
    free(s->reals);
    free(s->padding);
}

/* Range positions: a run of the position axis at one index of the others,
 * as offset + i0 along axis 0 of a 2-D array. */
static void shard_range(const call_t *c, reader *r, ptrdiff_t max_rows, shard_t *s)
{
    const int axis = c->pos.pos_axis;
    ptrdiff_t index[MAX_AXES];
    row_index(c, below_size(r, c->rows), index);
    const ptrdiff_t length = c->tg[0].lay.shape[axis], i0 = below_size(r, length);
    const ptrdiff_t most = length - i0 < max_rows ? length - i0 : max_rows;
    s->count = 1 + below_size(r, most);
    s->rows = checked_malloc(sizeof(ptrdiff_t) * (size_t)s->count);
    for (ptrdiff_t q = 0; q < s->count; ++q) {
        index[axis] = i0 + q;
        s->rows[q] = row_flat(c, index);
    }
    s->pos = (sinpe_positions){0, c->pos.offset + i0, NULL, NULL, NULL};
}

/* Explicit positions: a run of rows in C order, sometimes reversed or
 * shuffled, each with its own position (ints, or the reals when a
 * non-integral one is among them: integral reals must equal ints). */
static void shard_explicit(const call_t *c, reader *r, ptrdiff_t max_rows, shard_t *s)
{
    const ptrdiff_t f0 = below_size(r, c->rows);
    const ptrdiff_t most = c->rows - f0 < max_rows ? c->rows - f0 : max_rows;
    s->count = 1 + below_size(r, most);
    s->rows = checked_malloc(sizeof(ptrdiff_t) * (size_t)s->count);
    const unsigned shuffle = below(r, 4);
    uint64_t state = bits(r, 64);
    for (ptrdiff_t q = 0; q < s->count; ++q) {
        s->rows[q] = shuffle == 1 ? f0 + s->count - 1 - q : f0 + q;
    }
    for (ptrdiff_t q = s->count - 1; shuffle == 2 && q > 0; --q) {
        const ptrdiff_t k = (ptrdiff_t)(splitmix(&state) % (uint64_t)(q + 1)), t = s->rows[q];
        s->rows[q] = s->rows[k];
        s->rows[k] = t;
    }
    s->ints = checked_malloc(sizeof(int64_t) * (size_t)s->count);
    s->reals = checked_malloc(sizeof(double) * (size_t)s->count);
    int integral = 1;
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t q = 0; q < s->count; ++q) {
        row_index(c, s->rows[q], index);
        const double x = position_of(c, s->rows[q], index);
        s->reals[q] = x;
        s->ints[q] = (int64_t)x;
        integral = integral && x == floor(x);
    }
    s->pos = (sinpe_positions){-1, 0, integral ? s->ints : NULL, integral ? NULL : s->reals, NULL};
}

static void pick_shard(const call_t *c, reader *r, ptrdiff_t max_rows, shard_t *s)
{
    memset(s, 0, sizeof *s);
    if (c->pos_mode == POS_RANGE && below(r, 2)) {
        shard_range(c, r, max_rows, s);
    } else {
        shard_explicit(c, r, max_rows, s);
    }
    if (c->padding != NULL) {
        s->padding = checked_malloc((size_t)s->count);
        for (ptrdiff_t q = 0; q < s->count; ++q) s->padding[q] = c->padding[s->rows[q]];
        s->pos.padding = s->padding;
    }
}

/* Frequencies for a second call: the same, or (schedules) the schedule's
 * own doubles as an explicit array, which must not change a bit. */
static sinpe_freqs second_freqs(const call_t *c, reader *r, int chunk)
{
    sinpe_freqs freqs = c->freqs;
    if (c->op == OP_GRID || (!c->explicit_freq && below(r, 3) == 0)) {
        if (below(r, 2)) {
            freqs.freq = c->w[chunk];
            freqs.nfreq = c->m[chunk];
        }
    }
    return freqs;
}

static void second_call(const char *what, const dense_t *out, const sinpe_freqs *freqs, int layout,
                        const sinpe_positions *pos, int adding, double scale, reader *r)
{
    if (sinpe_set_num_threads(1 + (int)below(r, 4)) != SINPE_OK) fail("set_num_threads refused");
    const int status = sinpe_variant_table(&out->view, freqs, (sinpe_layout)layout, pos, adding, scale,
                                           below(r, 2) ? SINPE_FRESH_OUTPUT : 0u, NULL, NULL);
    if (status != SINPE_OK) fail("%s: second call returned status %d", what, status);
}

static void compare(const char *what, const char *first, int swapped, const dense_t *second,
                    ptrdiff_t row, ptrdiff_t col, sinpe_dtype dtype)
{
    const char *other = dense_at(second, row, col);
    ++stats.identical;
    if (!same_value(first, swapped, other, second->swapped, dtype)) {
        fail("%s: row %td column %td of the second call: %.17g, the first call: %.17g (bits differ)",
             what, row, col, load(other, dtype, second->swapped), load(first, dtype, swapped));
    }
}

/* Tables and adds: a shard, in either layout, against the full call. */
static void identity_table(const call_t *c, reader *r)
{
    const target *tg = &c->tg[0];
    const ptrdiff_t d = c->d, m = c->m[0];
    shard_t s;
    pick_shard(c, r, COMPARE_ELEMENTS / d > 0 ? COMPARE_ELEMENTS / d : 1, &s);
    const int layout = (int)below(r, 2);
    const sinpe_freqs freqs = second_freqs(c, r, 0);
    dense_t out;
    dense_alloc(&out, s.count, d, tg->dtype, (int)below(r, 2));
    for (ptrdiff_t q = 0; c->adding && q < s.count; ++q) { /* the same inputs, moved */
        for (ptrdiff_t j = 0; j < d; ++j) {
            const ptrdiff_t at = element(c, 0, s.rows[q], j) - tg->buffer;
            const ptrdiff_t j2 = map_column(c->layout, layout, d, m, j);
            store_exact(dense_at(&out, q, j2), tg->dtype, out.swapped, load(tg->before + at, tg->dtype, tg->swapped));
        }
    }
    second_call("table shard", &out, &freqs, layout, &s.pos, c->adding, c->scale, r);
    for (ptrdiff_t q = 0; q < s.count; ++q) {
        for (ptrdiff_t j = 0; j < d; ++j) {
            const ptrdiff_t j2 = map_column(c->layout, layout, d, m, j);
            compare("table shard", element(c, 0, s.rows[q], j), tg->swapped, &out, q, j2, tg->dtype);
        }
    }
    free(out.data);
    shard_free(&s);
}

/* RoPE: a cache (cos or sin) against the table of the same positions. */
static void identity_rope(const call_t *c, reader *r)
{
    const int t = (int)below(r, 2);
    const target *tg = &c->tg[t];
    const ptrdiff_t d = c->d;
    shard_t s;
    pick_shard(c, r, COMPARE_ELEMENTS / d > 0 ? COMPARE_ELEMENTS / d : 1, &s);
    const int layout = (int)below(r, 2);
    sinpe_freqs freqs = second_freqs(c, r, 0);
    if (freqs.freq == NULL) freqs.schedule = SINPE_PAPER;
    dense_t out;
    dense_alloc(&out, s.count, d, tg->dtype, (int)below(r, 2));
    second_call("rope vs table", &out, &freqs, layout, &s.pos, 0, 1.0, r);
    for (ptrdiff_t q = 0; q < s.count; ++q) {
        for (ptrdiff_t j = 0; j < d; ++j) {
            const ptrdiff_t j2 = column_of(layout, d, d / 2, t == 0 ? ROLE_COS : ROLE_SIN, rope_pair(c->layout, d, j));
            compare(t == 0 ? "rope cos vs table" : "rope sin vs table", element(c, t, s.rows[q], j), tg->swapped,
                    &out, q, j2, tg->dtype);
        }
    }
    free(out.data);
    shard_free(&s);
}

/* Grids: one chunk against the 1-D table of its axis (positions 0 ..). */
static void identity_grid(const call_t *c, reader *r)
{
    const target *tg = &c->tg[0];
    const int chunk = (int)below(r, (unsigned)c->nrow), axis = c->order[chunk];
    const ptrdiff_t width = c->split[axis], m = c->m[chunk], length = tg->lay.shape[axis];
    const int layout = (int)below(r, 2);
    const sinpe_freqs freqs = second_freqs(c, r, chunk);
    const sinpe_positions pos = {0, 0, NULL, NULL, NULL};
    dense_t out;
    dense_alloc(&out, length, width, tg->dtype, (int)below(r, 2));
    second_call("grid chunk", &out, &freqs, layout, &pos, 0, 1.0, r);
    const ptrdiff_t step = c->rows * width > COMPARE_ELEMENTS ? 1 + c->rows * width / COMPARE_ELEMENTS : 1;
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t f = below_size(r, step); f < c->rows; f += step) {
        row_index(c, f, index);
        for (ptrdiff_t j = 0; j < width; ++j) {
            const ptrdiff_t j2 = map_column(c->layout, layout, width, m, j);
            compare("grid chunk vs table", element(c, 0, f, c->col0[chunk] + j), tg->swapped, &out, index[axis],
                    j2, tg->dtype);
        }
    }
    free(out.data);
}

/* ------------------------------------------------------------------ */
/* One input. */

static int run_call(const call_t *c, cancel_state *cancel, int use_cancel)
{
    const sinpe_array *out = &c->tg[0].view;
    const sinpe_freqs *freqs = c->null_freqs ? NULL : &c->freqs;
    const sinpe_positions *pos = c->null_pos ? NULL : &c->pos;
    const sinpe_cancel_fn fn = use_cancel ? cancel_after : NULL;
    switch (c->op) {
    case OP_TABLE:
    case OP_ADD:
        return sinpe_variant_table(out, freqs, (sinpe_layout)c->layout, pos, c->adding, c->scale, c->flags, fn,
                                   cancel);
    case OP_ROPE:
        return sinpe_variant_rope(out, &c->tg[1].view, freqs, (sinpe_layout)c->layout, pos, c->flags, fn, cancel);
    default:
        return sinpe_variant_grid(out, c->null_split ? NULL : c->split, c->null_split ? NULL : c->order, freqs,
                                  (sinpe_layout)c->layout, c->flags, fn, cancel);
    }
}

static void describe(const call_t *c, int threads)
{
    static const char *ops[] = {"table", "add", "rope", "grid"};
    static const char *modes[] = {"range", "ints", "reals"};
    int at = snprintf(summary, sizeof summary, "%s class %d shape (", ops[c->op], c->size_class);
    for (int i = 0; i < c->tg[0].lay.ndim && at < (int)sizeof summary; ++i) {
        at += snprintf(summary + at, sizeof summary - (size_t)at, "%td%s", c->tg[0].call_shape[i],
                       i + 1 < c->tg[0].lay.ndim ? ", " : ")");
    }
    for (int t = 0; t < c->ntargets && at < (int)sizeof summary; ++t) {
        at += snprintf(summary + at, sizeof summary - (size_t)at, " dtype%d %d%s%s", t, (int)c->tg[t].view.dtype,
                       c->tg[t].swapped ? " swapped" : "", c->tg[t].lay.overlapping ? " overlapping" : "");
    }
    if (at < (int)sizeof summary) {
        snprintf(summary + at, sizeof summary - (size_t)at,
                 " layout %d %s n=%.17g schedule %d nfreq %td positions %s axis %d offset %lld%s adding %d "
                 "scale %.17g threads %d",
                 c->layout, c->explicit_freq ? "explicit freq" : "schedule", c->freqs.n, (int)c->freqs.schedule,
                 c->freqs.nfreq, modes[c->pos_mode], c->pos.pos_axis, (long long)c->pos.offset,
                 c->padding ? " padding" : "", c->adding, c->scale, threads);
    }
}

/* Rarely an invalid view: an unknown dtype, a negative length, no data,
 * or (RoPE) cos and sin of different shapes. */
static void break_views(reader *r, call_t *c)
{
    if (below(r, 48) != 0) return;
    target *tg = &c->tg[c->ntargets == 2 ? below(r, 2) : 0];
    const int axis = (int)below(r, (unsigned)tg->lay.ndim);
    switch (below(r, 4)) {
    case 0: tg->view.dtype = (sinpe_dtype)3; break;
    case 1: tg->call_shape[axis] = -1 - (ptrdiff_t)below(r, 2); break;
    case 2: tg->view.data = NULL; break;
    default:
        if (c->ntargets == 2) { /* cos and sin of different shapes */
            tg->call_shape[axis] += tg->call_shape[axis] > 0 ? -1 : 1;
        } else {
            tg->view.dtype = (sinpe_dtype)-1;
        }
        break;
    }
}

static void check_result(call_t *c, reader *r, int expect, int status, const cancel_state *cancel)
{
    if (expect == EXPECT_INVALID || (expect == EXPECT_EITHER && status != SINPE_OK)) {
        if (status != SINPE_ERR_INVALID) fail("invalid call returned status %d, not SINPE_ERR_INVALID", status);
        ++stats.invalid;
        for (int t = 0; t < c->ntargets; ++t) check_untouched("invalid call", &c->tg[t], 0);
        return;
    }
    if (status == SINPE_ERR_NOMEM) {
        for (int t = 0; t < c->ntargets; ++t) check_untouched("SINPE_ERR_NOMEM", &c->tg[t], 0);
        return;
    }
    const int cancelled = status == SINPE_ERR_CANCELLED && cancel->calls > cancel->stop_after;
    if (status != SINPE_OK && !cancelled) fail("valid call returned status %d", status);
    for (int t = 0; t < c->ntargets; ++t) check_untouched("valid call", &c->tg[t], 1);
    ++stats.valid;
    stats.empty += c->rows == 0;
    stats.cancelled += cancelled;
    if (expect == EXPECT_EITHER || c->rows == 0 || c->tg[0].lay.overlapping ||
        (c->ntargets == 2 && c->tg[1].lay.overlapping)) {
        return; /* empty (nothing to check), or overlapping elements: memory safety only */
    }
    for (int t = 0; t < c->ntargets; ++t) check_values(c, t, status);
    if (cancelled) return;
    if (c->op == OP_GRID) {
        identity_grid(c, r);
    } else if (c->op == OP_ROPE) {
        identity_rope(c, r);
    } else {
        identity_table(c, r);
    }
}

static int pick_size_class(reader *r)
{
    /* the rare classes away from 0 (short inputs read zeros) and, but for
     * the large one, from 1023 (libFuzzer's mutations favour 0xff bytes) */
    const unsigned k = below(r, 1024);
    return k == 1023 && SINPE_FUZZ_LARGE ? SIZE_LARGE
           : k >= 480 && k < 512         ? SIZE_MEDIUM /* 1 in 32 */
           : k >= 256 && k < 320         ? SIZE_WIDE   /* 1 in 16 */
                                         : SIZE_SMALL;
}

/* sinpe_check_freq alone: any frequencies, any reach. */
static void fuzz_check_freq(reader *r)
{
    const ptrdiff_t nfreq = (ptrdiff_t)below(r, 9);
    static const double reaches[] = {0.0, 1.0, 16777216.0, 16777215.0, 1e-300, 2097120.0};
    const double most = below(r, 2) ? reaches[below(r, 6)] : (double)bits(r, 25);
    const double limit = SINPE_MAX_ANGLE / (most + SINPE_ANCHOR_SLACK);
    static const double specials[] = {0.0, -0.0, NAN, INFINITY, -1.0, -1e-300, 1.0, 4.9e-324};
    double *freq = checked_malloc(sizeof(double) * (size_t)nfreq);
    for (ptrdiff_t k = 0; k < nfreq; ++k) {
        switch (below(r, 6)) {
        case 0: freq[k] = limit; break;
        case 1: freq[k] = nextafter(limit, INFINITY); break;
        case 2: freq[k] = nextafter(limit, 0.0); break;
        case 3: freq[k] = specials[below(r, 8)]; break;
        default: freq[k] = limit * (double)bits(r, 16) / 32768.0; break; /* 0 .. 2 limit */
        }
    }
    snprintf(summary, sizeof summary, "sinpe_check_freq nfreq %td reach %.17g", nfreq, most);
    const int want = freq_model(freq, nfreq, most) ? SINPE_OK : SINPE_ERR_INVALID;
    const int got = sinpe_check_freq(freq, nfreq, most);
    if (got != want) fail("sinpe_check_freq returned %d, want %d", got, want);
    ++stats.check_freq;
    free(freq);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    current_input = data;
    current_size = size;
    reader r = {data, size, 0};
    const unsigned pick = below(&r, 32);
    if (pick == 31) {
        fuzz_check_freq(&r);
        return 0;
    }
    call_t c;
    memset(&c, 0, sizeof c);
    c.op = pick < 12 ? OP_TABLE : pick < 18 ? OP_ADD : pick < 24 ? OP_ROPE : OP_GRID;
    c.ntargets = c.op == OP_ROPE ? 2 : 1;
    c.size_class = pick_size_class(&r);
    for (int t = 0; t < c.ntargets; ++t) {
        c.tg[t].dtype = (sinpe_dtype)below(&r, 3);
        c.tg[t].swapped = below(&r, 4) == 0;
        c.tg[t].itemsize = itemsize_of(c.tg[t].dtype);
    }
    pick_shape(&r, &c, &c.tg[0].lay, c.tg[0].itemsize);
    for (int t = 0; t < c.ntargets; ++t) {
        memory_layout *lay = &c.tg[t].lay;
        if (t > 0) {
            lay->ndim = c.tg[0].lay.ndim;
            memcpy(lay->shape, c.tg[0].lay.shape, sizeof lay->shape);
        }
        make_layout(&r, lay, c.tg[t].itemsize, c.size_class == SIZE_SMALL, 32);
        if (lay->size > ((size_t)96 << 20)) return 0; /* 3 buffers of this size */
    }
    c.d = c.tg[0].lay.shape[c.nrow];
    c.rows = element_count(&c.tg[0].lay) / (c.d > 0 ? c.d : 1);
    if (c.d == 0) { /* d = 0: still the row count of the (invalid) call */
        c.rows = 1;
        for (int i = 0; i < c.nrow; ++i) c.rows *= c.tg[0].lay.shape[i];
    }
    uint64_t seed = bits(&r, 64);
    pick_inputs(&r, &c, &seed);
    if (c.op == OP_ADD) {
        c.adding = below(&r, 8) == 0 ? 2 + (int)below(&r, 5) : 1;
    }
    const unsigned scale_kind = below(&r, 16);
    c.scale = scale_kind == 0 ? NAN : scale_kind == 1 ? INFINITY : scale_kind == 2 ? -0.0
              : scale_kind < 6 ? 1.0 : ((double)bits(&r, 16) - 32768.0) / 4096.0;
    const int threads = 1 + (int)below(&r, 4);
    cancel_state cancel = {0, (int)below(&r, 4)};
    const int use_cancel = below(&r, 2);
    for (int t = 0; t < c.ntargets; ++t) target_fill(&c.tg[t], c.op == OP_ADD, &seed);
    break_views(&r, &c);
    const int expect = c.op == OP_GRID ? expect_grid(&c) : expect_table(&c);
    if (expect != EXPECT_INVALID) reference_freq(&c);
    describe(&c, threads);

    if (sinpe_set_num_threads(threads) != SINPE_OK) fail("set_num_threads(%d) refused", threads);
    const int status = run_call(&c, &cancel, use_cancel);
    check_result(&c, &r, expect, status, &cancel);
    call_free(&c);
    return 0;
}

#ifdef SINPE_FUZZ_MAIN
int main(int argc, char **argv)
{
    double seconds = 0.0;
    const long runs = plain_driver("fuzz_variants", argc, argv, 256, &seconds);
    if (runs < 0) return 0;
    printf("fuzz_variants: %ld random inputs in %.0f s, no failure: %ld valid calls (%ld empty, %ld cancelled), "
           "%ld invalid, %ld sinpe_check_freq; %ld elements within bounds, %ld bit-identical in second calls\n",
           runs, seconds, stats.valid, stats.empty, stats.cancelled, stats.invalid, stats.check_freq, stats.elements,
           stats.identical);
    return 0;
}
#endif
