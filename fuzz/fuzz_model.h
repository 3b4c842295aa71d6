/*
 * What sinpe.h promises, written as code the fuzz target checks calls
 * against: which calls are valid (expect_status), which value every column
 * holds (the column map and a libm double reference with a derived error
 * bound), and an add's and a rotation's arithmetic, bit for bit.  Independent of csrc/ but
 * for the schedules' frequencies: the public header and csrc/core/pow.h are
 * included, and the add is this file's own arithmetic, not csrc's
 * sinpe_add_elem.
 */
#ifndef SINPE_FUZZ_MODEL_H
#define SINPE_FUZZ_MODEL_H

#include "fuzz_common.h"
#include "core/pow.h"

enum { OP_TABLE, OP_ADD, OP_ROPE, OP_GRID, OP_ROTATE };
enum { POS_RANGE, POS_INTS, POS_REALS, POS_GRID };
enum { ROLE_SIN, ROLE_COS, ROLE_ZERO };
enum { EXPECT_OK, EXPECT_INVALID, EXPECT_EITHER };
enum { IN_POSITIONS, IN_PADDING, IN_FREQ, NINPUTS }; /* the arrays sinpe_run reads */

/* One output: its buffer (guard zones around the elements), a copy from
 * before the call, and which bytes belong to elements. */
typedef struct {
    memory_layout lay;
    sinpe_dtype dtype; /* as allocated; view.dtype may be made invalid */
    int swapped;
    size_t itemsize;
    char *buffer, *before;
    unsigned char *addressed;
    ptrdiff_t shape[MAX_AXES]; /* what the call sees (may be made invalid) */
    sinpe_array view;
} target;

/* Where an input array lives during the call: its own allocation (exact
 * size, so ASan sees overreads), or inside an output's buffer. */
typedef struct {
    int target; /* -1: its own allocation */
    size_t offset, bytes;
    int shared; /* overlaps bytes of the output's elements */
} home_t;

typedef struct {
    int op, size_class;
    sinpe_plan plan; /* as passed */
    int null_plan;
    const sinpe_array *out, *out2; /* as passed */
    int ntargets;
    target tg[2];
    int nrow;          /* row axes: every axis but the last */
    ptrdiff_t rows, d; /* rows (C order over the row axes), features */
    /* the inputs as the fuzzer chose them: what the kernel must read */
    int pos_mode;
    int64_t *ints;
    double *reals;
    unsigned char *padding;
    double *freq;
    ptrdiff_t nfreq;
    ptrdiff_t split[MAX_AXES];
    int order[MAX_AXES];
    home_t home[NINPUTS];
    int threads, use_cancel;
    cancel_state cancel;
    /* sections (multi-axis RoPE): S rows of positions per row (ints and
     * reals hold S * rows values, section-major), the counts as chosen
     * (sections_count of them: the plan may be given another number) and
     * the model's section of each pair (model_prepare) */
    int nsections;
    ptrdiff_t sections[SINPE_MAX_SECTIONS + 2];
    int sections_count;
    unsigned char *section_of;
    /* rotations: out of place (the source is target 1), given caches (cos
     * and sin: dense native arrays of out's dtype, viewed with out's shape and
     * zero strides on the broadcast axes) */
    int source, given;
    char *cache[2];
    ptrdiff_t cache_shape[MAX_AXES], cache_strides[2][MAX_AXES]; /* their own: a break of out's
                                                                  * shape must not reach them */
    sinpe_array cache_view[2];
    /* the reference (model_prepare): frequencies per group (a grid's axes
     * in `order`, else one), and per target which group, role and pair
     * each column holds */
    int ngroups;
    ptrdiff_t m[MAX_AXES];
    double *w[MAX_AXES];
    signed char *role[2];
    int *group[2];
    ptrdiff_t *pair[2];
} call_t;

/* ------------------------------------------------------------------ */
/* Columns. */

/* Frequencies of a schedule for width d: paper n**(-2k/d), k < ceil(d/2);
 * fairseq n**(-k / max(d/2 - 1, 1)), k < d/2.  The same exponents as the
 * kernel's and its correctly rounded pow (csrc/core/pow.h, which
 * tests/test_frequencies.py checks against mpmath), not libm's, whose last
 * bit may differ: an explicit array of them must give the same bits. */
static double *schedule_freq(sinpe_schedule schedule, double n, ptrdiff_t d, ptrdiff_t *m)
{
    *m = schedule == SINPE_PAPER ? (d + 1) / 2 : d / 2;
    double *w = checked_malloc(sizeof(double) * (size_t)(*m > 0 ? *m : 1));
    const double denominator = *m - 1 > 1 ? (double)(*m - 1) : 1.0;
    const sinpe_pow_base base = sinpe_pow_prepare(n);
    for (ptrdiff_t k = 0; k < *m; ++k) {
        w[k] = sinpe_pow(&base, schedule == SINPE_PAPER ? -(2.0 * (double)k) / (double)d
                                                        : -(double)k / denominator);
    }
    return w;
}

/* What column j of a width-d table with m frequencies holds: the sine or
 * cosine of pair *k, or zero.  Interleaved: 2k sine, 2k + 1 cosine;
 * otherwise k sine, m + k cosine, min(m, d - m) cosines (an odd d ends with
 * a sine when 2m = d + 1, with a zero column when 2m = d - 1). */
static int table_role(int layout, ptrdiff_t d, ptrdiff_t m, ptrdiff_t j, ptrdiff_t *k)
{
    if (layout == SINPE_INTERLEAVED) {
        *k = j / 2;
        return *k >= m ? ROLE_ZERO : j % 2 == 0 ? ROLE_SIN : ROLE_COS;
    }
    if (j < m) {
        *k = j;
        return ROLE_SIN;
    }
    *k = j - m;
    return *k < (m < d - m ? m : d - m) ? ROLE_COS : ROLE_ZERO;
}

/* The column of (role, k) in a width-d table of `layout`: the inverse of
 * table_role (a zero column is the last in every layout). */
static ptrdiff_t column_of(int layout, ptrdiff_t d, ptrdiff_t m, int role, ptrdiff_t k)
{
    if (role == ROLE_ZERO) return d - 1;
    if (layout == SINPE_INTERLEAVED) return 2 * k + (role == ROLE_COS);
    return role == ROLE_SIN ? k : m + k;
}

/* The columns a rotation rotates (sinpe.h: rotary_dim, 0 for all). */
static ptrdiff_t rotary_width(const call_t *c)
{
    return c->plan.rotary_dim == 0 ? c->d : c->plan.rotary_dim;
}

/* The frequency pairs sections share: a rotation's r / 2, the caches' d / 2. */
static ptrdiff_t section_pairs(const call_t *c)
{
    return (c->op == OP_ROTATE ? rotary_width(c) : c->d) / 2;
}

/* sinpe.h's rule, written out pair by pair: the section of pair k of m
 * (contiguous: runs of sections[s] in order; interleaved: s >= 1 when
 * k % S == s and k < S * sections[s], else 0).  count[s]: how many each
 * section gets (the interleaved rule can give fewer than asked). */
static int section_rule(const ptrdiff_t *sections, int S, int interleaved, ptrdiff_t k)
{
    if (!interleaved) {
        ptrdiff_t end = 0;
        for (int s = 0; s < S; ++s) {
            end += sections[s];
            if (k < end) return s;
        }
        return -1; /* past the counts' sum */
    }
    const int s = (int)(k % S);
    return s >= 1 && (double)k < (double)S * (double)sections[s] ? s : 0;
}

static ptrdiff_t grid_width(const call_t *c, int g)
{
    return c->split[c->order[g]];
}

/* The reference frequencies and the column map of every target.  Only for
 * calls that may be valid (every knob in range). */
static void model_prepare(call_t *c)
{
    const sinpe_plan *p = &c->plan;
    if (c->op == OP_GRID) {
        c->ngroups = c->nrow;
        for (int g = 0; g < c->ngroups; ++g) c->w[g] = schedule_freq(p->schedule, p->n, grid_width(c, g), &c->m[g]);
    } else {
        c->ngroups = 1;
        if (c->freq != NULL) {
            c->m[0] = c->nfreq;
            c->w[0] = checked_malloc(sizeof(double) * (size_t)(c->nfreq > 0 ? c->nfreq : 1));
            memcpy(c->w[0], c->freq, sizeof(double) * (size_t)c->nfreq);
        } else { /* a rotation's frequencies are those of its rotary width */
            c->w[0] = schedule_freq(p->schedule, p->n, c->op == OP_ROTATE ? rotary_width(c) : c->d, &c->m[0]);
        }
    }
    const int interleaved = p->layout == SINPE_INTERLEAVED;
    if (p->nsections > 0) { /* a valid call's: its counts are the chosen ones */
        const ptrdiff_t m = section_pairs(c);
        c->section_of = checked_malloc((size_t)(m > 0 ? m : 1));
        for (ptrdiff_t k = 0; k < m; ++k) {
            c->section_of[k] = (unsigned char)section_rule(p->sections, p->nsections,
                                                           p->sections_layout == SINPE_SECTIONS_INTERLEAVED, k);
        }
    }
    for (int t = 0; t < c->ntargets; ++t) {
        c->role[t] = checked_malloc((size_t)c->d);
        c->group[t] = checked_malloc(sizeof(int) * (size_t)c->d);
        c->pair[t] = checked_malloc(sizeof(ptrdiff_t) * (size_t)c->d);
        for (ptrdiff_t j = 0; j < c->d; ++j) {
            int g = 0, role;
            ptrdiff_t k;
            if (c->op == OP_ROPE) { /* cos (t = 0) or sin of pair k at k and m + k, or 2k and 2k + 1 */
                k = interleaved ? j / 2 : j % (c->d / 2);
                role = t == 0 ? ROLE_COS : ROLE_SIN;
            } else if (c->op == OP_GRID && p->layout == SINPE_SINES_FIRST) {
                /* every axis' sines in order, then their cosines: each width even */
                const ptrdiff_t half = c->d / 2, jj = j < half ? j : j - half;
                ptrdiff_t before = 0;
                while (before + grid_width(c, g) / 2 <= jj) before += grid_width(c, g++) / 2;
                k = jj - before;
                role = j < half ? ROLE_SIN : ROLE_COS;
            } else if (c->op == OP_GRID) {
                ptrdiff_t col = 0;
                while (col + grid_width(c, g) <= j) col += grid_width(c, g++);
                role = table_role(p->layout, grid_width(c, g), c->m[g], j - col, &k);
            } else {
                role = table_role(p->layout, c->d, c->m[0], j, &k);
            }
            c->role[t][j] = (signed char)role;
            c->group[t][j] = g;
            c->pair[t][j] = k;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Values. */

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

/* The position of row f (index: its row index) for column group g (a
 * grid's axis), or section g (sections), as a double: integers up to 2**24
 * are exact, so the kernel's integer path and libm's angle x * w are the
 * same numbers. */
static double position_of(const call_t *c, ptrdiff_t f, const ptrdiff_t *index, int g)
{
    switch (c->pos_mode) {
    case POS_RANGE: return (double)c->plan.offset + (double)index[c->plan.pos_axis];
    case POS_INTS: return (double)c->ints[(ptrdiff_t)g * c->rows + f];
    case POS_REALS: return c->reals[(ptrdiff_t)g * c->rows + f];
    default: return (double)index[c->order[g]];
    }
}

/* What position_of wants for column j of target t: its grid axis, or the
 * section of its pair. */
static int position_group(const call_t *c, int t, ptrdiff_t j)
{
    return c->plan.nsections > 0 ? c->section_of[c->pair[t][j]] : c->group[t][j];
}

static int padded(const call_t *c, ptrdiff_t f)
{
    return c->padding != NULL && c->padding[f];
}

/* |kernel's double - libm's double| at position x and frequency w.  The
 * kernel makes sin/cos(x w) from the anchor of its block, p0 = x - r
 * (|p0| <= |x| + 31, |r| <= 31), and the step r: angle roundings
 * 2**-53 |p0 w| and 2**-53 |r w|, then its sincos (about 2**-51.5 each)
 * and the rotation's two products and sum (2**-53 each); libm rounds x w
 * once (2**-53 |x w|) and is within half an ulp.  So the gap is below
 * 2**-53 (2 |x| + 62) w + ~2**-49: 2**-52 (2 (|x| + 32) w + 256) covers it
 * with a margin of two on the angle term and far more on the constant.
 * Non-integral positions are one sincos of x w: inside the same bound. */
static double value_error(double x, double w)
{
    return ldexp(2.0 * (fabs(x) + 32.0) * w + 256.0, -52);
}

/* The table value of (row f, column j) of target t, before any rounding,
 * and its error bound; padded rows and zero columns are exactly 0.  RoPE
 * caches are the values times the plan's scale: the kernel's double and
 * this one are each the one rounding of that product (2**-53 relative
 * apiece, or 2**-1075 absolute where it underflows). */
static double reference(const call_t *c, int t, ptrdiff_t f, const ptrdiff_t *index, ptrdiff_t j, double *err)
{
    const int role = c->role[t][j], g = c->group[t][j];
    *err = 0.0;
    if (role == ROLE_ZERO || padded(c, f)) return 0.0;
    const double x = position_of(c, f, index, position_group(c, t, j)), w = c->w[g][c->pair[t][j]];
    *err = value_error(x, w);
    const double v = role == ROLE_SIN ? sin(x * w) : cos(x * w);
    if (!c->plan.rope || c->plan.scale == 1.0) return v;
    const double k = fabs(c->plan.scale);
    *err = k * (*err + ldexp(1.0, -51)) + ldexp(1.0, -1074);
    return v * c->plan.scale;
}

/* A stored element: the kernel's double is within err of pe and is rounded
 * once to the dtype: half an ulp of |pe| + err, plus err (0 for zeros: they
 * must be exact; any value where the rounding may overflow: RoPE caches
 * scaled past the dtype's range, whose bits the companion check holds). */
static double store_bound(double pe, double err, sinpe_dtype dtype)
{
    if (isinf(round_to(dtype, fabs(pe) + err))) return INFINITY;
    return err == 0.0 ? 0.0 : half_ulp(fabs(pe) + err, dtype) + err;
}

/* An add's element (sinpe.h): out * scale + T in out's own arithmetic, T
 * the table element in out's dtype.  float64: x * scale + T; float32: each
 * operation a float operation, scale rounded to float; float16 and
 * bfloat16: each operation in float, rounded to the type, the product
 * skipped when scale (as a float) is 1.  Padded rows: x * scale alone.
 * x and t are values of dtype (exact as floats unless float64). */
static double add_reference(sinpe_dtype dtype, double x, double t, double scale, int padded_row)
{
    if (dtype == SINPE_FLOAT64) return padded_row ? x * scale : x * scale + t;
    const float product = (float)x * (float)scale;
    if (dtype == SINPE_FLOAT32) return padded_row ? (double)product : (double)(product + (float)t);
    const float m = (float)scale == 1.0f ? (float)x : (float)round_to(dtype, product);
    return padded_row ? (double)m : round_to(dtype, (double)(m + (float)t));
}

/* A rotated element (sinpe.h's rotate): x * c + w * s, w being minus the
 * pair's second element (for its first) or the first (for its second).
 * exact, and float64: in double, rounded once; float32: float operations;
 * float16 and bfloat16: each product and the sum in float, rounded to the
 * type.  x, w, c, s are values of the arithmetic's inputs (c, s of dtype
 * unless exact). */
static double rotate_reference(sinpe_dtype dtype, int exact, double x, double w, double c, double s)
{
    if (exact || dtype == SINPE_FLOAT64) return round_to(dtype, x * c + w * s);
    if (dtype == SINPE_FLOAT32) return (double)((float)x * (float)c + (float)w * (float)s);
    const float p = (float)round_to(dtype, (double)((float)x * (float)c));
    const float q = (float)round_to(dtype, (double)((float)w * (float)s));
    return round_to(dtype, (double)(p + q));
}

/* The pair of column j < r of a rotation: its columns (a, b); j is one of them. */
static void rotation_pair(int interleaved, ptrdiff_t r, ptrdiff_t j, ptrdiff_t *a, ptrdiff_t *b)
{
    *a = interleaved ? j - j % 2 : j % (r / 2);
    *b = interleaved ? *a + 1 : *a + r / 2;
}

/* ------------------------------------------------------------------ */
/* Which calls are valid (sinpe.h). */

/* Element count of a view's shape, or -1 when it does not fit ptrdiff_t
 * (a zero-stride view can describe that many). */
static ptrdiff_t view_count(const sinpe_array *a)
{
    ptrdiff_t count = 1;
    for (int i = 0; i < a->ndim; ++i) {
        if (a->shape[i] == 0) return 0;
    }
    for (int i = 0; i < a->ndim; ++i) {
        if (count > PTRDIFF_MAX / a->shape[i]) return -1;
        count *= a->shape[i];
    }
    return count;
}

/* A view: sinpe.h's rules, and (sinpe.h says nothing; an array of more
 * elements than ptrdiff_t counts is no array, and csrc multiplies the
 * lengths in ptrdiff_t) an element count that fits. */
static int view_ok(const sinpe_array *a)
{
    if (a == NULL || a->ndim < 1 || a->ndim > SINPE_MAX_DIMS || a->shape == NULL || a->strides == NULL ||
        (unsigned)a->dtype > SINPE_BFLOAT16) {
        return 0;
    }
    for (int i = 0; i < a->ndim; ++i) {
        if (a->shape[i] < 0) return 0;
    }
    return view_count(a) >= 0;
}

/* The bytes a view spans, from its lowest to past its highest element,
 * in 128-bit arithmetic (no overflow); 0 when it spans nothing (empty). */
static int view_span(const sinpe_array *v, __int128 *lo, __int128 *hi)
{
    *lo = *hi = (__int128)(uintptr_t)v->data;
    for (int i = 0; i < v->ndim; ++i) {
        if (v->shape[i] == 0) return 0;
    }
    for (int i = 0; i < v->ndim; ++i) {
        const __int128 reach = (__int128)v->strides[i] * (v->shape[i] - 1);
        if (reach < 0) *lo += reach; else *hi += reach;
    }
    *hi += (__int128)itemsize_of(v->dtype);
    return 1;
}

/* Whether two views share a byte; sinpe.h: a view whose elements cannot
 * all lie in the address space counts as sharing. */
static int views_share(const sinpe_array *a, const sinpe_array *b)
{
    __int128 lo[2], hi[2];
    const int spans[2] = {view_span(a, &lo[0], &hi[0]), view_span(b, &lo[1], &hi[1])};
    for (int t = 0; t < 2; ++t) {
        if (spans[t] && (lo[t] < 0 || hi[t] > (__int128)UINTPTR_MAX)) return 1;
    }
    return spans[0] && spans[1] && lo[0] < hi[1] && lo[1] < hi[0];
}

/* A rotation's structure (sinpe.h's rotate): not with an add, RoPE caches,
 * a grid or padding; one of the two layouts; the source and the given
 * caches views of out's shape and dtype sharing no memory with it; given
 * caches exclude positions and frequencies.  Positions (when not given
 * caches) as for every call. */
static int rotation_structure_ok(const call_t *c)
{
    const sinpe_plan *p = &c->plan;
    const sinpe_array *out = c->out;
    const int given = p->cos_cache != NULL;
    if (c->out2 != NULL || p->add || p->rope || p->split != NULL || p->padding != NULL ||
        (p->layout != SINPE_INTERLEAVED && p->layout != SINPE_CONCATENATED) || given != (p->sin_cache != NULL) ||
        (given && (p->freq != NULL || p->ints != NULL || p->reals != NULL))) {
        return 0;
    }
    const sinpe_array *read[3] = {p->source, p->cos_cache, p->sin_cache};
    for (int v = 0; v < 3; ++v) {
        if (read[v] == NULL) continue;
        if (!view_ok(read[v]) || read[v]->ndim != out->ndim || read[v]->dtype != out->dtype) return 0;
        for (int i = 0; i < out->ndim; ++i) {
            if (read[v]->shape[i] != out->shape[i]) return 0;
        }
        if (views_share(read[v], out)) return 0;
    }
    if (given) return 1;
    const int nrow = out->ndim - 1;
    return p->pos_axis >= 0 ? p->pos_axis < nrow && p->ints == NULL && p->reals == NULL
                            : (p->ints == NULL) != (p->reals == NULL);
}

/* Sections' structure (sinpe.h): none (NULL counts), or 1 to
 * SINPE_MAX_SECTIONS counts >= 0 of a known layout, for RoPE caches or a
 * rotation by its own caches at explicit positions without padding. */
static int sections_structure_ok(const sinpe_plan *p)
{
    if (p->nsections == 0) return p->sections == NULL;
    if (p->nsections < 1 || p->nsections > SINPE_MAX_SECTIONS || p->sections == NULL ||
        (p->sections_layout != SINPE_SECTIONS_CONTIGUOUS && p->sections_layout != SINPE_SECTIONS_INTERLEAVED) ||
        !(p->rope || (p->rotate && p->cos_cache == NULL)) || p->add || p->split != NULL || p->pos_axis >= 0 ||
        p->padding != NULL) {
        return 0;
    }
    for (int s = 0; s < p->nsections; ++s) {
        if (p->sections[s] < 0) return 0;
    }
    return 1;
}

/* The counts for m pairs: their sum is m, and (interleaved) the rule gives
 * each section its count. */
static int sections_counts_ok(const sinpe_plan *p, ptrdiff_t m)
{
    if (p->nsections == 0) return 1;
    double total = 0.0;
    for (int s = 0; s < p->nsections; ++s) total += (double)p->sections[s];
    if (total != (double)m) return 0;
    ptrdiff_t got[SINPE_MAX_SECTIONS] = {0};
    for (ptrdiff_t k = 0; k < m; ++k) {
        ++got[section_rule(p->sections, p->nsections, p->sections_layout == SINPE_SECTIONS_INTERLEAVED, k)];
    }
    for (int s = 0; s < p->nsections; ++s) {
        if (got[s] != p->sections[s]) return 0;
    }
    return 1;
}

/* Structure: the views, out2 present exactly for RoPE with out's shape,
 * the layout, and how the positions are given.  These fail even for an
 * empty output. */
static int structure_ok(const call_t *c)
{
    const sinpe_plan *p = &c->plan;
    const sinpe_array *out = c->out, *out2 = c->out2;
    if (c->null_plan || !view_ok(out) || !sections_structure_ok(p)) return 0;
    if (p->rotate) return rotation_structure_ok(c);
    if ((p->rope != 0) != (out2 != NULL)) return 0;
    if (out2 != NULL) {
        if (!view_ok(out2) || out2->ndim != out->ndim) return 0;
        for (int i = 0; i < out->ndim; ++i) {
            if (out2->shape[i] != out->shape[i]) return 0;
        }
    }
    if ((unsigned)p->layout > SINPE_SINES_FIRST) return 0;
    if (p->split != NULL) return 1; /* a grid's positions are its indices (checked below) */
    const int nrow = out->ndim - 1;
    return p->pos_axis >= 0 ? p->pos_axis < nrow && p->ints == NULL && p->reals == NULL
                            : (p->ints == NULL) != (p->reals == NULL);
}

/* Positions in range (padded rows too; `length` rows along the axis of
 * range positions; every section's); *most: the largest |position|. */
static int positions_ok(const call_t *c, ptrdiff_t length, double *most)
{
    const int64_t bound = SINPE_MAX_POSITION;
    *most = 0.0;
    if (c->pos_mode == POS_RANGE) {
        const int64_t lo = c->plan.offset;
        if (lo < -bound || lo > bound || lo + (length - 1) > bound) return 0; /* no overflow: lo <= 2**24 */
        *most = fabs((double)lo) > fabs((double)(lo + length - 1)) ? fabs((double)lo) : fabs((double)(lo + length - 1));
        return 1;
    }
    for (ptrdiff_t f = 0; f < c->rows * (c->nsections > 0 ? c->nsections : 1); ++f) {
        const double x = c->pos_mode == POS_INTS ? (double)c->ints[f] : c->reals[f];
        if (c->pos_mode == POS_INTS ? c->ints[f] < -bound || c->ints[f] > bound : !(fabs(x) <= (double)bound)) return 0;
        *most = fabs(x) > *most ? fabs(x) : *most;
    }
    return 1;
}

/* Explicit frequencies against the angle limit.  sinpe.h: finite, >= 0,
 * every angle |p w| within SINPE_MAX_ANGLE "block starts included".  A
 * block start lies up to 31 rows below a negative position, so w with
 * w (most + 32) <= the limit must be accepted and w most > the limit
 * rejected; in between either answer keeps the promise. */
static int freq_expect(const double *freq, ptrdiff_t nfreq, double most)
{
    int expect = EXPECT_OK;
    for (ptrdiff_t k = 0; k < nfreq; ++k) {
        const double w = freq[k];
        if (!(w >= 0.0) || !isfinite(w) || !(w * most <= SINPE_MAX_ANGLE)) return EXPECT_INVALID;
        if (!(w * (most + 32.0) <= SINPE_MAX_ANGLE)) expect = EXPECT_EITHER;
    }
    return expect;
}

static int grid_ok(const call_t *c)
{
    const sinpe_plan *p = &c->plan;
    const int r = c->out->ndim - 1;
    if (p->order == NULL || r < 1 || p->pos_axis != 0 || p->offset != 0 || p->ints != NULL || p->reals != NULL ||
        p->padding != NULL) {
        return 0;
    }
    int seen[MAX_AXES] = {0};
    ptrdiff_t total = 0, d = c->out->shape[r];
    for (int a = 0; a < r; ++a) {
        const ptrdiff_t w = p->split[a];
        if (p->order[a] < 0 || p->order[a] >= r || seen[p->order[a]]++ || w < 1 || w > d ||
            (p->layout == SINPE_SINES_FIRST && w % 2 != 0) || c->out->shape[a] > SINPE_MAX_POSITION + 1) {
            return 0;
        }
        total += w;
    }
    return total == d;
}

/* A rotation's columns and values: an even rotary width 2 <= r <= d, a
 * finite scale; given caches: scale 1, neither exact nor inverse; else the
 * frequencies of width r (freq with r / 2 entries, or the paper's schedule
 * with a base in range) and the positions in range. */
static int rotation_columns_expect(const call_t *c)
{
    const sinpe_plan *p = &c->plan;
    const ptrdiff_t d = c->out->shape[c->out->ndim - 1], r = p->rotary_dim == 0 ? d : p->rotary_dim;
    if (r < 2 || r > d || r % 2 != 0 || !isfinite(p->scale)) return EXPECT_INVALID;
    if (c->out->data == NULL || (p->source != NULL && p->source->data == NULL)) return EXPECT_INVALID;
    if (p->cos_cache != NULL) {
        return p->scale == 1.0 && !p->exact && !p->inverse && p->cos_cache->data != NULL && p->sin_cache->data != NULL
                   ? EXPECT_OK
                   : EXPECT_INVALID;
    }
    if (p->freq != NULL ? p->nfreq != r / 2
                        : !(p->n >= SINPE_MIN_BASE && p->n <= SINPE_MAX_BASE) || p->schedule != SINPE_PAPER) {
        return EXPECT_INVALID;
    }
    if (!sections_counts_ok(p, r / 2)) return EXPECT_INVALID;
    double most;
    if (!positions_ok(c, p->pos_axis >= 0 ? c->out->shape[p->pos_axis] : 0, &most)) return EXPECT_INVALID;
    return p->freq != NULL ? freq_expect(c->freq, c->nfreq, most) : EXPECT_OK;
}

/* Everything but the structure, as if the output were not empty. */
static int columns_expect(const call_t *c)
{
    const sinpe_plan *p = &c->plan;
    if (p->rotate) return rotation_columns_expect(c);
    const int nrow = c->out->ndim - 1;
    const ptrdiff_t d = c->out->shape[nrow];
    if (d < 1 || (p->rope && d % 2 != 0)) return EXPECT_INVALID;
    /* sinpe.h defines an add of "the table" and RoPE caches of a table's
     * pairs: an add of RoPE caches or of a grid, and RoPE caches of a grid,
     * have no defined values (csrc/plan/checks.c rejects the first two). */
    if (p->add && (p->rope || p->split != NULL || !isfinite(p->scale))) return EXPECT_INVALID;
    if (p->rope && !isfinite(p->scale)) return EXPECT_INVALID; /* caches times scale */
    if (p->rope && p->split != NULL) return EXPECT_INVALID;
    if (p->freq != NULL) {
        const ptrdiff_t m = p->nfreq;
        if (p->split != NULL || (p->rope ? m != d / 2 : m != d / 2 && m != (d + 1) / 2)) return EXPECT_INVALID;
    } else if (!(p->n >= SINPE_MIN_BASE && p->n <= SINPE_MAX_BASE) ||
               !(p->schedule == SINPE_PAPER || (p->schedule == SINPE_FAIRSEQ && !p->rope))) {
        return EXPECT_INVALID;
    }
    if (p->split != NULL && !grid_ok(c)) return EXPECT_INVALID;
    if (p->rope && !sections_counts_ok(p, d / 2)) return EXPECT_INVALID;
    if (c->out->data == NULL || (c->out2 != NULL && c->out2->data == NULL)) return EXPECT_INVALID;
    if (p->split != NULL) return EXPECT_OK; /* schedules only: every angle <= 2**24 + 32 */
    double most;
    if (!positions_ok(c, p->pos_axis >= 0 ? c->out->shape[p->pos_axis] : 0, &most)) return EXPECT_INVALID;
    return p->freq != NULL ? freq_expect(c->freq, c->nfreq, most) : EXPECT_OK;
}

static int output_empty(const call_t *c)
{
    for (int i = 0; i < c->out->ndim; ++i) {
        if (c->out->shape[i] == 0) return 1;
    }
    return 0;
}

/* What sinpe_run must return: SINPE_OK (or NOMEM), SINPE_ERR_INVALID, or
 * either (an empty output past the structural checks, whose other checks
 * sinpe.h leaves open, and frequencies in the band of freq_expect). */
static int expect_status(const call_t *c)
{
    if (!structure_ok(c)) return EXPECT_INVALID;
    const int columns = columns_expect(c);
    return output_empty(c) && columns != EXPECT_OK ? EXPECT_EITHER : columns;
}

#endif /* SINPE_FUZZ_MODEL_H */
