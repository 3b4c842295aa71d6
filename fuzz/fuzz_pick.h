/*
 * The call an input describes (fuzz_kernels.c reads it): the kind and the
 * dtypes, a shape, a memory layout per output, the frequencies, the
 * positions and sections, the homes of the inputs sinpe_run reads (their
 * own allocations, or an output's memory), the elements before the call,
 * and now and then a knob made invalid.  Everything here is drawn from the
 * input's bytes (reader) or from the seed they give.
 */
#ifndef SINPE_FUZZ_PICK_H
#define SINPE_FUZZ_PICK_H

#include "fuzz_model.h"

/* The large class (streaming stores, 8 MB and more) is slow; fuzz/run.sh
 * turns it off for libFuzzer, whose mutations would pick it too often. */
#ifndef SINPE_FUZZ_LARGE
#define SINPE_FUZZ_LARGE 1
#endif
enum { SIZE_SMALL, SIZE_WIDE, SIZE_MEDIUM, SIZE_LARGE };
enum { HOME_INSIDE, HOME_ACROSS, HOME_GUARD, HOME_ANYWHERE };
#define SMALL_ELEMENTS 4096 /* per output, small class */

/* ------------------------------------------------------------------ */
/* Shapes. */

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

static ptrdiff_t row_length(reader *r)
{
    const unsigned kind = below(r, 16);
    return kind == 15 ? 0 : kind < 10 ? 1 + (ptrdiff_t)below(r, 6) : 1 + (ptrdiff_t)below(r, 40);
}

/* Width of a wide table: > 1024 features (several tiles of 512
 * frequencies) or > 4096 (more than 2048 frequencies: step rows built per
 * tile). */
static ptrdiff_t wide_width(reader *r)
{
    return below(r, 2) ? 4097 + (ptrdiff_t)below(r, 104) : 1025 + (ptrdiff_t)below(r, 80);
}

/* A grid's split and order; the features are their sum.  Even widths for
 * sines first (each axis' sines and cosines split even); now and then one
 * broken: a split, the sum, the order. */
static void pick_grid_split(reader *r, call_t *c, memory_layout *lay, ptrdiff_t wide)
{
    const int even = c->plan.layout == SINPE_SINES_FIRST && below(r, 16) != 15;
    const int big = (int)below(r, (unsigned)(c->nrow > 0 ? c->nrow : 1));
    ptrdiff_t d = 0;
    for (int a = 0; a < c->nrow; ++a) {
        ptrdiff_t w = wide > 0 && a == big ? wide : 1 + (ptrdiff_t)below(r, below(r, 4) ? 8 : 40);
        c->split[a] = even ? w + w % 2 : w;
        d += c->split[a];
        c->order[a] = a;
    }
    for (int a = c->nrow - 1; a > 0; --a) {
        const int k = (int)below(r, (unsigned)a + 1), t = c->order[a];
        c->order[a] = c->order[k];
        c->order[k] = t;
    }
    if (c->nrow > 0 && below(r, 24) == 23) {
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

static void pick_shape(reader *r, call_t *c, memory_layout *lay, size_t itemsize)
{
    const int grid = c->op == OP_GRID, rope = c->op == OP_ROPE || c->op == OP_ROTATE;
    if (c->size_class == SIZE_MEDIUM || c->size_class == SIZE_LARGE) {
        /* past the thread threshold (256 KB), now and then past a grid's
         * 1 MB band or an add's tiles; or past streaming (8 MB) */
        const double bytes = c->size_class == SIZE_LARGE ? 8.5e6 : below(r, 4) == 0 ? 1.1e6 : 3.0e5;
        ptrdiff_t d = (c->size_class == SIZE_LARGE ? 64 : 16) + (ptrdiff_t)below(r, 33);
        d += (rope || (grid && c->plan.layout == SINPE_SINES_FIRST)) && d % 2;
        ptrdiff_t rows = (ptrdiff_t)(bytes / ((double)d * (double)itemsize)) + 1;
        rows += below_size(r, rows / 2 + 1);
        lay->ndim = grid || below(r, 2) ? 3 : 2;
        c->nrow = lay->ndim - 1;
        lay->shape[0] = lay->ndim == 3 ? 1 + (ptrdiff_t)below(r, 24) : rows;
        if (lay->ndim == 3) lay->shape[1] = rows / lay->shape[0] + 1;
        lay->shape[c->nrow] = d;
        if (grid) {
            const int even = c->plan.layout == SINPE_SINES_FIRST;
            c->split[0] = even ? 2 + 2 * below_size(r, d / 2 - 1) : 1 + below_size(r, d - 1);
            c->split[1] = d - c->split[0];
            c->order[0] = (int)below(r, 2);
            c->order[1] = 1 - c->order[0];
        }
        return;
    }
    const int wide = c->size_class == SIZE_WIDE;
    const unsigned k = below(r, 64);
    if (k == 63 && !wide) { /* many axes, mostly of length 1 */
        lay->ndim = 5 + (int)below(r, SINPE_MAX_DIMS - 4);
    } else if (grid) {
        lay->ndim = k == 1 ? 1 : 2 + (int)below(r, wide ? 2 : 3);
    } else {
        lay->ndim = k < 8 ? 1 : k < 40 || wide ? 2 : k < 56 ? 3 : 4;
    }
    c->nrow = lay->ndim - 1;
    ptrdiff_t twos = 1; /* many axes: a few of length 2, at most 64 rows */
    for (int i = 0; i < c->nrow; ++i) {
        const int two = lay->ndim > 4 && twos < 64 && below(r, 8) == 0;
        twos *= 1 + two;
        lay->shape[i] = lay->ndim > 4 ? 1 + two
                        : wide ? 1 + (ptrdiff_t)below(r, c->op == OP_ADD && i == c->nrow - 1 ? 40 : 3)
                               : row_length(r);
    }
    if (grid) {
        pick_grid_split(r, c, lay, wide ? wide_width(r) : 0);
    } else if (wide) {
        lay->shape[c->nrow] = wide_width(r);
    } else {
        const unsigned w = below(r, 32);
        lay->shape[c->nrow] = w == 31 ? 0 : w < 20 ? 1 + (ptrdiff_t)below(r, 12)
                                     : w < 30 ? 1 + (ptrdiff_t)below(r, 80) : 1 + (ptrdiff_t)below(r, 300);
    }
    if (rope && below(r, 16) != 0) lay->shape[c->nrow] += lay->shape[c->nrow] % 2; /* mostly even */
    for (int shrink = 4; !wide && element_count(lay) > SMALL_ELEMENTS && shrink >= 1; shrink /= 2) {
        for (int i = 0; i < c->nrow; ++i) { /* only ever shorter (keep the 0-length axes) */
            if (lay->shape[i] > shrink) lay->shape[i] = 1 + (lay->shape[i] - 1) % shrink;
        }
    }
}

/* ------------------------------------------------------------------ */
/* Frequencies, positions, padding. */

static double pick_base(reader *r)
{
    static const double bad[] = {0.0, -1.0, 0.5, 0.999999, 1e-300, 1e300, 1.0000001e30, NAN, INFINITY, -INFINITY};
    static const double good[] = {10000.0, 1.0, 2.0, 1e30, 500000.0, 10.0};
    const unsigned kind = below(r, 48);
    if (kind == 47) return bad[below(r, sizeof bad / sizeof bad[0])];
    if (kind < 16) return good[below(r, sizeof good / sizeof good[0])];
    return pow(10.0, 30.0 * (double)bits(r, 16) / 65535.0); /* 1 .. 1e30 */
}

static int64_t pick_offset(reader *r, ptrdiff_t length)
{
    const int64_t bound = SINPE_MAX_POSITION;
    switch (below(r, 24)) {
    case 0: return bound - length + 1;                  /* last row exactly at the bound */
    case 1: return -bound;
    case 2: return bound - length + 2;                  /* one past */
    case 3: return (below(r, 2) ? 1 : -1) * (bound + 1 + (int64_t)below(r, 3));
    case 4: return (int64_t)bits(r, 64);                /* anything, mostly far out */
    case 5: case 6: return (int64_t)(bits(r, 25) % (2 * bound + 1)) - bound;
    case 7: return -bound + (int64_t)below(r, 64);      /* blocks below -2**24 */
    default: return (int64_t)below(r, 200) - 100;
    }
}

/* Explicit positions: runs (block runs), per-sequence runs with jumps,
 * repeats (an add's shared rows), the bounds, anything; reals add halves or
 * random fractions (non-integral: evaluated directly), -0.0; rarely one
 * out of range or not finite.  With sections, one row of them per section:
 * each its own, or a text token's (every section the first's), or an
 * image patch's (the first's, a small step further in the others). */
static void pick_positions(reader *r, call_t *c, uint64_t *seed)
{
    const int64_t bound = SINPE_MAX_POSITION;
    const unsigned kind = below(r, 8), fraction = below(r, 4), bad = below(r, 16) == 15;
    const int64_t start = kind == 4 ? bound - (int64_t)below(r, 128) : (int64_t)below(r, 200) - 100;
    const ptrdiff_t length = c->nrow > 0 ? c->tg[0].lay.shape[c->nrow - 1] : 1;
    const ptrdiff_t values = c->rows * (c->nsections > 0 ? c->nsections : 1);
    c->ints = checked_malloc(sizeof(int64_t) * (size_t)(values > 0 ? values : 1));
    c->reals = checked_malloc(sizeof(double) * (size_t)(values > 0 ? values : 1));
    for (ptrdiff_t f = 0; f < values; ++f) {
        const uint64_t u = splitmix(seed);
        int64_t p;
        switch (kind) {
        case 0: case 1: p = start + f; break;                             /* one run */
        case 2: p = start + f % length + (int64_t)(u % 4 == 0); break;     /* per sequence, a jump */
        case 3: p = start + (int64_t)(u % 8); break;                       /* repeats */
        case 4: p = (u % 2 ? 1 : -1) * (start + (int64_t)(f % 40)); break; /* near +-2**24 */
        default: p = (int64_t)(u % (uint64_t)(2 * bound + 1)) - bound; break;
        }
        if (p > bound || p < -bound) p = p > 0 ? bound : -bound;
        c->ints[f] = p;
        const double x = (double)p;
        const double frac = fraction == 1 ? 0.5 : fraction == 2 || (fraction == 3 && u % 3 == 0)
                                                   ? (double)(u >> 11) * 0x1p-53 : 0.0;
        c->reals[f] = fabs(x + frac) <= (double)bound ? x + frac : x - frac;
        if (c->reals[f] == 0.0 && u % 5 == 0) c->reals[f] = -0.0;
    }
    const unsigned tokens = below(r, 4); /* sections: 0, 1 their own; 2 text; 3 text and image */
    for (ptrdiff_t f = c->rows; tokens >= 2 && f < values; ++f) {
        const uint64_t u = splitmix(seed);
        const ptrdiff_t first = f % c->rows;
        const int64_t step = tokens == 3 && u % 2 ? (int64_t)(u % 16) : 0;
        c->ints[f] = c->ints[first] + (c->ints[first] + step <= bound ? step : -step);
        c->reals[f] = step == 0 ? c->reals[first] : (double)c->ints[f];
    }
    if (bad && values > 0) {
        static const double bad_reals[] = {NAN, INFINITY, -INFINITY, 16777216.5, -16777217.0};
        static const int64_t bad_ints[] = {INT64_MIN, INT64_MAX, (1 << 24) + 1, -(1 << 24) - 1};
        const ptrdiff_t f = below_size(r, values);
        c->ints[f] = bad_ints[below(r, 4)];
        c->reals[f] = bad_reals[below(r, 5)];
    }
}

/* Explicit frequencies: schedule-like, uniform in [0, 1], up to the angle
 * limits of these positions (exactly at them and one ulp either side: the
 * must-accept limit with the block slack, the must-reject one without),
 * zeros and subnormals, rarely a wrong count or one bad entry. */
static void pick_freq(reader *r, call_t *c, uint64_t *seed)
{
    const ptrdiff_t d = c->tg[0].lay.shape[c->nrow];
    ptrdiff_t nfreq = c->op == OP_ROPE || below(r, 2) ? d / 2 : (d + 1) / 2;
    if (below(r, 24) == 23) nfreq += below(r, 2) || nfreq == 0 ? 1 : -1; /* a wrong count */
    double most = 0.0; /* the positions' reach, valid or not */
    if (c->pos_mode != POS_GRID) (void)positions_ok(c, c->pos_mode == POS_RANGE ? c->tg[0].lay.shape[c->plan.pos_axis] : 0, &most);
    const double safe = SINPE_MAX_ANGLE / (most + 32.0), edge = most > 0 ? SINPE_MAX_ANGLE / most : safe;
    const unsigned kind = below(r, 8);
    const double base = pow(10.0, 6.0 * (double)below(r, 256) / 255.0);
    c->nfreq = nfreq;
    c->freq = checked_malloc(sizeof(double) * (size_t)(nfreq > 0 ? nfreq : 1));
    for (ptrdiff_t k = 0; k < nfreq; ++k) {
        const double u = unit(seed), limit = u < 0.5 ? safe : edge;
        switch (kind) {
        case 0: case 1: case 2: c->freq[k] = pow(base, -(2.0 * (double)k) / (double)d); break;
        case 3: c->freq[k] = u; break;
        case 4: c->freq[k] = u * safe; break;
        case 5: c->freq[k] = (u * 8 - (int)(u * 8)) < 0.5 ? limit : nextafter(limit, u < 0.25 || u >= 0.75 ? INFINITY : 0.0); break;
        case 6: c->freq[k] = u < 0.5 ? 0.0 : u < 0.75 ? ldexp(u, -1060) : -0.0; break;
        default: c->freq[k] = u * (safe < 1.0 ? safe : 1.0); break;
        }
    }
    if (nfreq > 0 && below(r, 16) == 15) {
        static const double bad[] = {NAN, INFINITY, -1.0, -1e-300, 1e300};
        c->freq[below_size(r, nfreq)] = bad[below(r, 5)];
    }
}

/* A rotation's own knobs: the rotary width (0: all of d, else even; now and
 * then odd, past d or negative), exact, inverse, the layout (sines first:
 * rarely, invalid). */
static void pick_rotation(reader *r, call_t *c)
{
    sinpe_plan *p = &c->plan;
    const ptrdiff_t d = c->tg[0].lay.shape[c->nrow];
    const unsigned k = below(r, 16);
    p->rotate = 1;
    p->rotary_dim = k < 8 || d < 2 ? 0 : k < 14 ? 2 * (1 + below_size(r, d / 2))
                    : k == 14 ? 2 * below_size(r, d / 2 + 2) + 1 : -2 * (ptrdiff_t)below(r, 3) + (d + 2) * (k % 2);
    p->exact = below(r, 3) == 0;
    p->inverse = below(r, 4) == 0;
    if (p->layout == SINPE_SINES_FIRST && below(r, 8) != 0) p->layout = SINPE_CONCATENATED;
}

/* Sections' counts for the call's pairs (sinpe.h): contiguous, any counts
 * >= 0 summing to m; interleaved, section s >= 1 at most the pairs k < m
 * with k % S == s (any such count satisfies the rule), section 0 the rest.
 * Rarely broken: a count one off (the sum, or the rule), a negative count,
 * an unknown layout. */
static void pick_section_counts(reader *r, call_t *c)
{
    sinpe_plan *p = &c->plan;
    const int S = c->nsections;
    const ptrdiff_t m = section_pairs(c) > 0 ? section_pairs(c) : 0;
    const int interleaved = below(r, 2);
    ptrdiff_t left = m;
    for (int s = S - 1; s >= 1; --s) {
        const ptrdiff_t most = interleaved ? (m > s ? (m - s - 1) / S + 1 : 0) : left;
        const ptrdiff_t pick = below(r, 4) == 0 ? most : below_size(r, most + 1);
        c->sections[s] = pick < left ? pick : left;
        left -= c->sections[s];
    }
    c->sections[0] = left;
    c->sections_count = S;
    p->sections = c->sections;
    p->nsections = S;
    p->sections_layout = interleaved ? SINPE_SECTIONS_INTERLEAVED : SINPE_SECTIONS_CONTIGUOUS;
    if (below(r, 24) == 23) {
        const int s = (int)below(r, (unsigned)S);
        switch (below(r, 4)) {
        case 0: c->sections[s] += below(r, 2) ? 1 : -1; break;
        case 1: c->sections[s] = -1 - (ptrdiff_t)below(r, 2); break;
        case 2: if (S > 1) c->sections[s] += 1, c->sections[(s + 1) % S] -= 1; break;
        default: p->sections_layout = (sinpe_sections_layout)(below(r, 2) ? 2 : -1); break;
        }
    }
}

/* A rotation by given caches: cos and sin of out's dtype, dense and
 * native, viewed with out's shape and zero strides on some row axes (HF's
 * (B, 1, L, D) against (B, H, L, D)); no positions or frequencies, scale 1,
 * neither exact nor inverse (now and then not: invalid); rarely of another
 * dtype. */
static void pick_given(reader *r, call_t *c, uint64_t *seed)
{
    sinpe_plan *p = &c->plan;
    const sinpe_dtype dtype = c->tg[0].dtype;
    const size_t itemsize = c->tg[0].itemsize;
    c->given = 1;
    p->ints = NULL, p->reals = NULL, p->freq = NULL, p->nfreq = 0;
    if (below(r, 8) != 0) p->sections = NULL, p->nsections = 0; /* else invalid */
    if (below(r, 8) != 0) p->scale = 1.0, p->exact = 0, p->inverse = 0;
    const ptrdiff_t count = c->rows * c->d;
    memcpy(c->cache_shape, c->tg[0].lay.shape, sizeof c->cache_shape);
    for (int t = 0; t < 2; ++t) {
        c->cache[t] = checked_malloc(itemsize * (size_t)(count > 0 ? count : 1));
        for (ptrdiff_t e = 0; e < count; ++e) write_bits(c->cache[t] + (size_t)e * itemsize, itemsize, 0, input_bits(dtype, seed));
        ptrdiff_t step = (ptrdiff_t)itemsize;
        for (int i = c->nrow; i >= 0; --i) {
            c->cache_strides[t][i] = i < c->nrow && below(r, 3) == 0 ? 0 : step;
            step *= c->tg[0].lay.shape[i] > 0 ? c->tg[0].lay.shape[i] : 1;
        }
        c->cache_view[t] = (sinpe_array){c->cache[t], dtype, 0, c->tg[0].lay.ndim, c->cache_shape, c->cache_strides[t]};
    }
    if (below(r, 24) == 23) c->cache_view[1].dtype = (sinpe_dtype)((dtype + 1) % NDTYPES);
    p->cos_cache = &c->cache_view[0];
    p->sin_cache = &c->cache_view[1];
}

/* Every knob of the plan but the outputs. */
static void pick_plan(reader *r, call_t *c, uint64_t *seed)
{
    sinpe_plan *p = &c->plan;
    const unsigned fk = below(r, 8);
    p->n = pick_base(r);
    p->schedule = below(r, 64) == 63 ? (sinpe_schedule)2 : fk >= 4 && fk < 6 ? SINPE_FAIRSEQ : SINPE_PAPER;
    if (c->op == OP_ROPE && p->schedule == SINPE_FAIRSEQ && below(r, 8) != 0) p->schedule = SINPE_PAPER;
    const int explicit_freq = c->op != OP_GRID ? fk >= 6 : below(r, 32) == 31;
    p->rope = c->op == OP_ROPE;
    p->add = c->op == OP_ADD ? (below(r, 8) == 7 ? 2 + (int)below(r, 5) : 1) : 0; /* any nonzero adds */
    /* 1, any, or the specials: non-finite (invalid for adds), zeros, a
     * float32 overflow, a float32 underflow, one that rounds to 1 in float32 */
    const unsigned scale_kind = below(r, 16);
    static const double scales[] = {-0.0, 0.0, 1e300, 0x1p-1074, 1.0 + 0x1p-30, NAN, INFINITY};
    p->scale = scale_kind < 3 ? 1.0 : scale_kind < 9 ? ((double)bits(r, 16) - 32768.0) / 4096.0 : scales[scale_kind - 9];
    p->flags = (below(r, 2) ? SINPE_FRESH_OUTPUT : 0u) | (below(r, 2) ? SINPE_PRIVATE_INPUTS : 0u);
    if (c->op == OP_GRID) {
        c->pos_mode = POS_GRID;
        p->split = c->split;
        p->order = c->order;
    } else {
        const unsigned pk = below(r, 8);
        c->pos_mode = pk < 4 && c->nrow > 0 ? POS_RANGE : pk < 6 ? POS_INTS : POS_REALS;
        if (c->pos_mode == POS_RANGE) {
            p->pos_axis = (int)below(r, (unsigned)c->nrow);
            p->offset = pick_offset(r, c->tg[0].lay.shape[p->pos_axis]);
        } else {
            /* sections: RoPE caches and rotations, now and then many */
            if ((c->op == OP_ROPE || c->op == OP_ROTATE) && below(r, 3) == 0) {
                c->nsections = below(r, 32) == 31 ? 5 + (int)below(r, SINPE_MAX_SECTIONS - 4) : 1 + (int)below(r, 4);
            }
            pick_positions(r, c, seed);
            p->pos_axis = below(r, 2) ? -1 : -1 - (int)below(r, 200);
            p->ints = c->pos_mode == POS_INTS ? c->ints : NULL;
            p->reals = c->pos_mode == POS_REALS ? c->reals : NULL;
        }
        if (below(r, c->op == OP_ROTATE ? 24 : 3) == 0) { /* rotations take none: rarely */
            const unsigned density = below(r, 8); /* 0: none padded, 7: all, else 1 in 4 */
            c->padding = checked_malloc((size_t)(c->rows > 0 ? c->rows : 1));
            for (ptrdiff_t f = 0; f < c->rows; ++f) {
                c->padding[f] = density == 7 ? (unsigned char)(1 + f % 255) : density == 0 ? 0 : splitmix(seed) % 4 == 0;
            }
            p->padding = c->padding;
        }
    }
    if (c->op == OP_ROTATE) pick_rotation(r, c);
    if (c->nsections > 0) pick_section_counts(r, c); /* after the rotary width */
    if (explicit_freq) { /* after the positions: their reach */
        pick_freq(r, c, seed);
        p->freq = c->freq;
        p->nfreq = c->nfreq;
    }
}

/* ------------------------------------------------------------------ */
/* Where the inputs live (aliasing). */

static size_t input_bytes(const call_t *c, int input)
{
    const sinpe_plan *p = &c->plan;
    switch (input) {
    case IN_POSITIONS:
        return p->ints != NULL || p->reals != NULL ? (size_t)c->rows * 8 * (size_t)(c->nsections > 0 ? c->nsections : 1)
                                                   : 0;
    case IN_PADDING: return p->padding != NULL ? (size_t)c->rows : 0;
    default: return p->freq != NULL ? (size_t)c->nfreq * 8 : 0;
    }
}

/* Which inputs go into which output (1 in 4 calls with inputs), and the
 * spare room a guard-zone home needs after that output. */
static void pick_homes(reader *r, call_t *c, int *kind, size_t *room)
{
    const int share = below(r, 4) == 0;
    for (int i = 0; i < NINPUTS; ++i) {
        home_t *h = &c->home[i];
        h->target = -1;
        h->bytes = input_bytes(c, i);
        const int present = i == IN_POSITIONS ? c->plan.ints != NULL || c->plan.reals != NULL
                            : i == IN_PADDING ? c->plan.padding != NULL : c->plan.freq != NULL;
        if (!present || !share || below(r, 4) == 0) continue;
        h->target = (int)below(r, (unsigned)c->ntargets);
        kind[i] = (int)below(r, 4);
        if (kind[i] == HOME_GUARD) room[h->target] += h->bytes + 8;
    }
}

/* An offset in the output's buffer: among the elements, across either end
 * of them, in the guard zone or room after them, or anywhere; 8-aligned
 * for int64 and double arrays.  Another input already there: private. */
static void place_home(reader *r, call_t *c, int input, int kind)
{
    home_t *h = &c->home[input];
    const memory_layout *lay = &c->tg[h->target].lay;
    const size_t size = lay->size, b = h->bytes, align = input == IN_PADDING ? 1 : 8;
    if (b > size) {
        h->target = -1;
        return;
    }
    size_t lo = 0, hi = size - b;
    if (kind == HOME_INSIDE && lay->hi - lay->lo >= b) {
        lo = lay->lo, hi = lay->hi - b;
    } else if (kind == HOME_INSIDE || kind == HOME_ACROSS) {
        const size_t edge = below(r, 2) ? lay->lo : lay->hi;
        lo = edge >= b ? edge - b + 1 : 0;
        hi = edge < size - b ? edge : size - b;
    } else if (kind == HOME_GUARD) {
        lo = lay->hi < size - b ? lay->hi : size - b;
    }
    lo = lo < hi ? lo : hi;
    size_t offset = lo + (size_t)below_size(r, (ptrdiff_t)(hi - lo + 1));
    offset -= offset % align;
    h->offset = offset;
    for (int i = 0; i < input; ++i) {
        const home_t *o = &c->home[i];
        if (o->target == h->target && offset < o->offset + o->bytes && o->offset < offset + b) {
            h->target = -1;
            return;
        }
    }
}

/* Copies each shared input into its output's buffer (before the snapshot
 * of the buffer is taken) and points the plan at it. */
static void install_homes(call_t *c)
{
    const void *source[NINPUTS] = {c->plan.ints != NULL ? (const void *)c->ints : (const void *)c->reals, c->padding,
                                   c->freq};
    for (int i = 0; i < NINPUTS; ++i) {
        home_t *h = &c->home[i];
        if (h->target < 0) continue;
        const target *tg = &c->tg[h->target];
        char *at = tg->buffer + h->offset;
        memcpy(at, source[i], h->bytes);
        for (size_t b = 0; b < h->bytes; ++b) h->shared |= tg->addressed[h->offset + b];
        if (i == IN_POSITIONS && c->plan.ints != NULL) c->plan.ints = (const int64_t *)(const void *)at;
        if (i == IN_POSITIONS && c->plan.reals != NULL) c->plan.reals = (const double *)(const void *)at;
        if (i == IN_PADDING) c->plan.padding = (const unsigned char *)at;
        if (i == IN_FREQ) c->plan.freq = (const double *)(const void *)at;
    }
    /* sinpe.h: SINPE_PRIVATE_INPUTS promises positions and padding share
     * no memory with an output (frequencies may) */
    if (c->home[IN_POSITIONS].shared || c->home[IN_PADDING].shared) c->plan.flags &= ~(unsigned)SINPE_PRIVATE_INPUTS;
}

/* ------------------------------------------------------------------ */
/* Outputs. */

static void fill_elements(target *tg, int adding, uint64_t *seed)
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
        if (adding) write_bits(tg->buffer + at, tg->itemsize, tg->swapped, input_bits(tg->dtype, seed));
    }
    memcpy(tg->shape, tg->lay.shape, sizeof tg->shape);
    for (int i = tg->lay.ndim; i < MAX_AXES; ++i) tg->shape[i] = 1; /* an invalid ndim of 65 reads them */
    tg->view = (sinpe_array){tg->buffer + tg->lay.offset, tg->dtype, tg->swapped, tg->lay.ndim, tg->shape,
                             tg->lay.strides};
}

/* Rarely one invalid knob the picks above do not make: a missing plan or
 * output, out2 where RoPE wants none or none where it wants one, a broken
 * view, a combination sinpe.h gives no values for, a grid given positions,
 * positions given twice or not at all, a huge axis (at stride 0) whose
 * positions leave the range.  Each one is invalid whatever else the call
 * is, so no break turns the call into another valid one. */
static void break_call(reader *r, call_t *c)
{
    static const int64_t dummy_ints[1];
    static const double dummy_reals[1], dummy_freq[1];
    static const unsigned char dummy_padding[1];
    if (below(r, 12) != 11) return;
    sinpe_plan *p = &c->plan;
    target *tg = &c->tg[below(r, (unsigned)c->ntargets)];
    const int axis = (int)below(r, (unsigned)tg->lay.ndim), grid = c->op == OP_GRID;
    switch (below(r, 14)) {
    case 0: c->null_plan = 1; break;
    case 1: c->out = NULL; break;
    case 2: c->out2 = c->out2 != NULL ? NULL : &c->tg[0].view; break;
    case 3: tg->view.dtype = (sinpe_dtype)(below(r, 2) ? 4 : -1); break;
    case 4: tg->view.ndim = below(r, 2) ? 0 : SINPE_MAX_DIMS + 1; break;
    case 5: tg->shape[axis] = -1 - (ptrdiff_t)below(r, 2); break;
    case 6: if (below(r, 2)) tg->view.shape = NULL; else tg->view.strides = NULL; break;
    case 7: tg->view.data = NULL; break;
    case 8: /* RoPE: cos and sin of different shapes or ndims */
        if (c->ntargets == 2 && below(r, 2)) tg->shape[axis] += tg->shape[axis] > 0 ? -1 : 1;
        else if (c->ntargets == 2) tg->view.ndim = tg->lay.ndim + 1;
        else tg->view.ndim = 0;
        break;
    case 9: /* combinations without values */
        if (c->op == OP_ROPE && below(r, 2)) p->add = 1;
        else if (c->op == OP_ROPE) p->schedule = SINPE_FAIRSEQ, p->freq = NULL;
        else if (grid && below(r, 3) == 0) p->add = 1;
        else if (grid && below(r, 2)) p->rope = 1, c->out2 = &c->tg[0].view;
        else if (grid) p->freq = dummy_freq, p->nfreq = c->d / 2;
        else c->null_plan = 1;
        break;
    case 10: /* positions where they cannot be */
        if (grid) {
            switch (below(r, 5)) {
            case 0: p->pos_axis = 1; break;
            case 1: p->offset = 1; break;
            case 2: p->ints = dummy_ints; break;
            case 3: p->reals = dummy_reals; break;
            default: p->padding = dummy_padding; break;
            }
        } else if (below(r, 2)) { /* along an axis that is not a row axis */
            p->pos_axis = c->nrow + (int)below(r, 2);
        } else { /* one per row, from both arrays or from neither */
            p->pos_axis = -1;
            if (p->ints == NULL && p->reals == NULL) break;
            if (below(r, 2)) p->ints = NULL, p->reals = NULL;
            else if (p->ints == NULL) p->ints = dummy_ints;
            else p->reals = dummy_reals;
        }
        break;
    case 12: /* more rows than ptrdiff_t counts: 2**62 copies of at least 2 rows, at stride 0 */
        if (c->nrow >= 2 && view_count(&c->tg[0].view) > 0) {
            const int a = (int)below(r, (unsigned)c->nrow), b = (a + 1) % c->nrow;
            for (int t = 0; t < c->ntargets; ++t) {
                c->tg[t].shape[a] = (ptrdiff_t)1 << 62;
                c->tg[t].lay.strides[a] = 0;
                if (c->tg[t].shape[b] < 2) c->tg[t].shape[b] = 2, c->tg[t].lay.strides[b] = 0;
            }
        }
        break;
    case 13: /* sections where they cannot be, or of a broken form */
        switch (below(r, 5)) {
        case 0: /* on a table, an add or a grid; on given caches, range positions or padding */
            if (c->op == OP_ROTATE ? p->cos_cache == NULL && p->pos_axis < 0 && p->padding == NULL
                                   : c->op == OP_ROPE && p->pos_axis < 0 && p->padding == NULL) {
                p->pos_axis = c->nrow > 0 ? 0 : 1;
            }
            c->sections[0] = c->d / 2;
            p->sections = c->sections, p->nsections = 1;
            break;
        case 1: p->nsections = 0, p->sections = c->sections; break;
        case 2: p->nsections = below(r, 2) ? SINPE_MAX_SECTIONS + 1 : -1, p->sections = c->sections; break;
        case 3: p->nsections = 1 + (int)below(r, 3), p->sections = NULL; break;
        default:
            p->nsections = p->nsections > 0 ? p->nsections : 1, p->sections = c->sections;
            p->sections_layout = (sinpe_sections_layout)(below(r, 2) ? 2 : -1);
            break;
        }
        break;
    default: /* the huge axis: 2**25 + 2 positions along it, or a grid axis of 2**24 + 2, at stride 0
              * (not with padding: that holds one flag per row, and may be read before the positions) */
        if (grid || (c->pos_mode == POS_RANGE && p->padding == NULL)) {
            const int a = grid ? (int)below(r, (unsigned)(c->nrow > 0 ? c->nrow : 1)) : p->pos_axis;
            for (int t = 0; a < c->nrow && t < c->ntargets; ++t) {
                c->tg[t].shape[a] = grid ? SINPE_MAX_POSITION + 2 : 2 * SINPE_MAX_POSITION + 2;
                c->tg[t].lay.strides[a] = 0;
            }
        }
        break;
    }
}

#endif /* SINPE_FUZZ_PICK_H */
