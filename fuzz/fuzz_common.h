/*
 * The parts of the fuzz target (fuzz_kernels.c) that know nothing about a
 * plan: reading the input, failure reports, element formats with a
 * reference of their own, memory layouts inside guard zones and a cancel
 * callback.  Included once (one translation unit), so everything here is
 * static.
 *
 * Nothing here may come from csrc/ but the public header: the element
 * decoders and the rounding to each dtype are written independently of
 * csrc/core/float16.h and csrc/core/elements.h, so that a wrong rounding
 * there cannot hide behind the same wrong rounding here.
 */
#ifndef SINPE_FUZZ_COMMON_H
#define SINPE_FUZZ_COMMON_H

#include "sinpe.h"

#include "fuzz_random.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__)
#define FUZZ_UNUSED __attribute__((unused))
#else
#define FUZZ_UNUSED
#endif

/* ------------------------------------------------------------------ */
/* Reading the input: missing bytes read as zero, so every input is a call
 * (and all-zero tails pick the common, valid choices). */

typedef struct {
    const uint8_t *data;
    size_t size, at;
} reader;

static unsigned byte(reader *r)
{
    return r->at < r->size ? r->data[r->at++] : 0u;
}

static uint64_t bits(reader *r, int count)
{
    uint64_t value = 0;
    for (int i = 0; i < count; i += 8) {
        value |= (uint64_t)byte(r) << i;
    }
    return count >= 64 ? value : value & ((UINT64_C(1) << count) - 1);
}

static unsigned below(reader *r, unsigned limit) /* 0 .. limit - 1 */
{
    return limit <= 256 ? byte(r) % limit : (unsigned)(bits(r, 32) % limit);
}

static ptrdiff_t below_size(reader *r, ptrdiff_t limit) /* 0 .. limit - 1, limit >= 1 */
{
    return (ptrdiff_t)(bits(r, 32) % (uint64_t)limit);
}

/* Bulk data (element bytes, positions, frequencies) comes from a generator
 * (fuzz_random.h) seeded by the input: a few input bytes then steer
 * kilobytes of data. */

static double unit(uint64_t *state) /* uniform in [0, 1) */
{
    return (double)(splitmix(state) >> 11) * 0x1p-53;
}

/* ------------------------------------------------------------------ */
/* Failure reports: the message, what the call was, and the input that made
 * it (hex, to replay: write the bytes to a file and pass it to the binary). */

static const uint8_t *fuzz_input;
static size_t fuzz_input_size;
static char fuzz_summary[1024]; /* the call being checked */

static int fuzz_reported; /* the input was printed: once is enough */

static void report_input(void)
{
    if (fuzz_reported++) return;
    fprintf(stderr, "call: %s\ninput (%zu bytes):", fuzz_summary, fuzz_input_size);
    for (size_t i = 0; i < fuzz_input_size; ++i) {
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", fuzz_input[i]);
    }
    fprintf(stderr, "\n");
}

static void fail(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "fuzz_kernels: ");
    vfprintf(stderr, format, args);
    va_end(args);
    fprintf(stderr, "\n");
    report_input();
    abort();
}

/* Driver memory is never the kernel's business: running out is the
 * driver's failure, not a finding. */
static void *checked_malloc(size_t size)
{
    void *p = malloc(size > 0 ? size : 1);
    if (p == NULL) fail("out of memory in the driver (%zu bytes)", size);
    return p;
}

/* ------------------------------------------------------------------ */
/* Elements. */

#define NDTYPES 4 /* float16, float32, float64, bfloat16 */

static size_t itemsize_of(sinpe_dtype dtype)
{
    return dtype == SINPE_FLOAT32 ? 4 : dtype == SINPE_FLOAT64 ? 8 : 2;
}

static const char *dtype_name(int dtype)
{
    static const char *names[] = {"float16", "float32", "float64", "bfloat16"};
    return dtype >= 0 && dtype < NDTYPES ? names[dtype] : "invalid";
}

/* The bits of an element, byte order undone (or done). */
static uint64_t read_bits(const char *at, size_t size, int swapped)
{
    uint8_t raw[8];
    for (size_t i = 0; i < size; ++i) raw[i] = (uint8_t)at[swapped ? size - 1 - i : i];
    uint64_t value = 0;
    for (size_t i = 0; i < size; ++i) value |= (uint64_t)raw[i] << (8 * i); /* little-endian host */
    return value;
}

static void write_bits(char *at, size_t size, int swapped, uint64_t value)
{
    for (size_t i = 0; i < size; ++i) at[swapped ? size - 1 - i : i] = (char)(value >> (8 * i));
}

/* The value of an element's bits (every NaN decodes to NAN: payloads are
 * never compared). */
static double decode(sinpe_dtype dtype, uint64_t raw)
{
    switch (dtype) {
    case SINPE_FLOAT16: {
        const int exponent = (int)(raw >> 10) & 0x1f, fraction = (int)(raw & 0x3ff);
        const double magnitude = exponent == 0    ? ldexp(fraction, -24)
                                 : exponent == 31 ? (fraction ? NAN : INFINITY)
                                                  : ldexp(fraction + 1024, exponent - 25);
        return (raw & 0x8000) ? -magnitude : magnitude;
    }
    case SINPE_BFLOAT16: { /* the top half of a float32 */
        const uint32_t wide = (uint32_t)raw << 16;
        float f;
        memcpy(&f, &wide, 4);
        return f;
    }
    case SINPE_FLOAT32: {
        const uint32_t narrow = (uint32_t)raw;
        float f;
        memcpy(&f, &narrow, 4);
        return f;
    }
    default: {
        double d;
        memcpy(&d, &raw, 8);
        return d;
    }
    }
}

static double load(const char *at, sinpe_dtype dtype, int swapped)
{
    return decode(dtype, read_bits(at, itemsize_of(dtype), swapped));
}

/* A value of a format with `precision` significant bits, exponents down to
 * emin (subnormals below) and largest finite value `largest`, rounded to
 * nearest, ties to even: scale by the quantum of v's binade (a power of two,
 * so exact), let rint round in the default mode, scale back.  Independent
 * of the kernel's bit manipulation (csrc/core/float16.h). */
static double round_format(double v, int precision, int emin, double largest)
{
    if (!isfinite(v) || v == 0.0) return v;
    int e = ilogb(v);
    if (e < emin) e = emin;
    const double quantum = ldexp(1.0, e - (precision - 1));
    const double r = rint(v / quantum) * quantum;
    return fabs(r) > largest ? copysign(INFINITY, v) : r;
}

/* v rounded once to dtype (the one rounding sinpe.h promises for stores,
 * and each operation's rounding in an add).  float32: C's conversion,
 * which rounds to nearest even. */
static double round_to(sinpe_dtype dtype, double v)
{
    switch (dtype) {
    case SINPE_FLOAT16: return round_format(v, 11, -14, 65504.0);
    case SINPE_BFLOAT16: return round_format(v, 8, -126, ldexp(255.0, 120));
    case SINPE_FLOAT32: return (double)(float)v;
    default: return v;
    }
}

/* Same value, signed zeros told apart; any NaN equals any NaN. */
static int same_double(double a, double b)
{
    return (isnan(a) && isnan(b)) || memcmp(&a, &b, sizeof a) == 0;
}

/* round_to checked once against the 16-bit formats' own grids (decode
 * enumerates them): every finite value rounds to itself; the midpoint of
 * two neighbours (exact in double) goes to the one with the even pattern,
 * the doubles either side of it to the nearer one; past the largest
 * finite value's midpoint is infinity; the same negated. */
static void check_round_to(void)
{
    static const sinpe_dtype formats[] = {SINPE_FLOAT16, SINPE_BFLOAT16};
    for (int f = 0; f < 2; ++f) {
        const sinpe_dtype dtype = formats[f];
        for (uint64_t b = 0;; ++b) {
            const double x = decode(dtype, b), y = decode(dtype, b + 1);
            const double m = isfinite(y) ? (x + y) / 2 : x + (x - decode(dtype, b - 1)) / 2;
            const double near[3] = {x, b % 2 == 0 ? x : isfinite(y) ? y : INFINITY, isfinite(y) ? y : INFINITY};
            const double at[3] = {nextafter(m, 0.0), m, nextafter(m, INFINITY)};
            for (int i = 0; i < 3; ++i) {
                if (!same_double(round_to(dtype, at[i]), near[i]) || !same_double(round_to(dtype, -at[i]), -near[i]) ||
                    !same_double(round_to(dtype, x), x)) {
                    fail("the fuzzer's own rounding to %s is wrong at %.17g (pattern %#llx)", dtype_name(dtype), at[i],
                         (unsigned long long)b);
                }
            }
            if (!isfinite(y)) break;
        }
    }
}


static int mantissa_bits(sinpe_dtype dtype)
{
    return dtype == SINPE_FLOAT16 ? 10 : dtype == SINPE_BFLOAT16 ? 7 : dtype == SINPE_FLOAT32 ? 23 : 52;
}

/* Half an ulp of `magnitude` in dtype: the most one rounding moves a value
 * of at most that size (subnormals included). */
static double half_ulp(double magnitude, sinpe_dtype dtype)
{
    const double smallest = dtype == SINPE_FLOAT16    ? ldexp(1, -24)
                            : dtype == SINPE_BFLOAT16 ? ldexp(1, -133)
                            : dtype == SINPE_FLOAT32  ? ldexp(1, -149)
                                                      : ldexp(1, -1074);
    const double relative = magnitude * ldexp(1, -(mantissa_bits(dtype) + 1));
    return relative > smallest / 2 ? relative : smallest / 2;
}

/* The bits of an add's input element: mostly moderate values (exponents
 * near 0, where x * scale + T rounds interestingly and ties happen), else
 * anything, else the specials (zeros, infinities, NaNs with payloads, the
 * extremes, subnormals). */
static uint64_t input_bits(sinpe_dtype dtype, uint64_t *state)
{
    const uint64_t u = splitmix(state);
    const int exp_bits = dtype == SINPE_FLOAT16 ? 5 : dtype == SINPE_FLOAT64 ? 11 : 8;
    const int frac_bits = mantissa_bits(dtype), width = 1 + exp_bits + frac_bits;
    const uint64_t sign = (u >> 63) << (width - 1), fraction = (u >> 8) & ((UINT64_C(1) << frac_bits) - 1);
    const uint64_t bias = (UINT64_C(1) << (exp_bits - 1)) - 1, all_ones = (UINT64_C(1) << exp_bits) - 1;
    switch (u % 16) {
    case 0: return u & (((UINT64_C(1) << (width - 1)) << 1) - 1);         /* anything */
    case 1: return sign | (all_ones << frac_bits) | (fraction | 1);        /* NaN, some payload */
    case 2: return sign | (all_ones << frac_bits);                         /* +-inf */
    case 3: return sign;                                                   /* +-0 */
    case 4: return sign | fraction;                                        /* subnormal */
    case 5: return sign | ((all_ones - 1) << frac_bits) | fraction;        /* near the largest */
    default: return sign | ((bias - 6 + (u >> 4) % 13) << frac_bits) | fraction; /* 2**-6 .. 2**6 */
    }
}

/* ------------------------------------------------------------------ */
/* Memory layouts. */

#define MAX_AXES (SINPE_MAX_DIMS + 1) /* room for an invalid ndim of 65 */
#define GUARD 96                      /* bytes of guard zone on each side of an array */

typedef struct {
    int ndim;
    ptrdiff_t shape[MAX_AXES], strides[MAX_AXES];
    size_t size, offset; /* buffer bytes; byte offset of element (0, ..., 0) */
    size_t lo, hi;       /* bytes [lo, hi) hold every element */
    int overlapping;     /* a zero stride: elements share bytes */
} memory_layout;

static ptrdiff_t element_count(const memory_layout *lay)
{
    ptrdiff_t count = 1;
    for (int i = 0; i < lay->ndim; ++i) count *= lay->shape[i];
    return count;
}

/* Byte offset of the element with flat C-order index `flat`; its index in
 * `index`. */
static size_t element_at(const memory_layout *lay, ptrdiff_t flat, ptrdiff_t *index)
{
    ptrdiff_t at = (ptrdiff_t)lay->offset;
    for (int i = lay->ndim - 1; i >= 0; --i) {
        index[i] = flat % lay->shape[i];
        flat /= lay->shape[i];
        at += index[i] * lay->strides[i];
    }
    return (size_t)at;
}

/* A random memory layout of lay->shape: axes in any memory order, gaps,
 * negative strides, a misaligned start, (1 in overlap_odds axes, when
 * may_overlap) a zero stride, and `room` spare bytes after the trailing
 * guard zone for inputs placed there (aliasing). */
static void make_layout(reader *r, memory_layout *lay, size_t itemsize, int may_overlap,
                        unsigned overlap_odds, size_t room)
{
    int order[MAX_AXES];
    for (int i = 0; i < lay->ndim; ++i) order[i] = i;
    for (int i = lay->ndim - 1; i > 0; --i) { /* a permutation: memory order of the axes */
        const int k = (int)below(r, (unsigned)i + 1), t = order[i];
        order[i] = order[k];
        order[k] = t;
    }
    ptrdiff_t step = (ptrdiff_t)itemsize;
    for (int i = lay->ndim - 1; i >= 0; --i) {
        const int axis = order[i];
        const unsigned gap = below(r, 8);
        lay->strides[axis] = step * (gap < 5 ? 1 : gap - 3); /* mostly dense, else gaps of 2-4 */
        step = lay->strides[axis] * (lay->shape[axis] > 0 ? lay->shape[axis] : 1);
    }
    ptrdiff_t low = 0, high = 0;
    lay->overlapping = 0;
    for (int i = 0; i < lay->ndim; ++i) {
        if (below(r, 4) == 0) lay->strides[i] = -lay->strides[i];
        if (may_overlap && i != lay->ndim - 1 && below(r, overlap_odds) == overlap_odds - 1) {
            lay->strides[i] = 0; /* elements overlap: memory safety only */
            lay->overlapping |= lay->shape[i] > 1;
        }
        const ptrdiff_t extent = lay->shape[i] > 0 ? lay->strides[i] * (lay->shape[i] - 1) : 0;
        if (extent < 0) low += extent; else high += extent;
    }
    const size_t misalign = below(r, 4) == 0 ? below(r, (unsigned)itemsize) : 0;
    lay->offset = GUARD + misalign + (size_t)(-low);
    lay->lo = lay->offset - (size_t)(-low);
    lay->hi = lay->offset + (size_t)high + itemsize;
    lay->size = lay->hi + GUARD + room;
}

/* ------------------------------------------------------------------ */
/* A cancel callback that says stop after stop_after polls, and checks that
 * it runs on the calling thread (sinpe.h: never from helper threads). */

typedef struct {
    int calls, stop_after;
    pthread_t caller;
} cancel_state;

static int cancel_after(void *context)
{
    cancel_state *state = context;
    if (!pthread_equal(pthread_self(), state->caller)) fail("the cancel callback ran on a helper thread");
    return ++state->calls > state->stop_after;
}

#endif /* SINPE_FUZZ_COMMON_H */
