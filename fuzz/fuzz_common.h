/*
 * What both fuzz targets (fuzz_kernels.c, fuzz_variants.c) need alike:
 * reading the input, element formats with an exact reference for each, and
 * random memory layouts inside guard zones.  Included by each target (one
 * translation unit each), so everything here is static.
 */
#ifndef SINPE_FUZZ_COMMON_H
#define SINPE_FUZZ_COMMON_H

#include "sinpe.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(__GNUC__)
#define FUZZ_MAYBE_UNUSED __attribute__((unused))
#else
#define FUZZ_MAYBE_UNUSED
#endif

/* ------------------------------------------------------------------ */
/* Reading the input: missing bytes read as zero, so every input is valid
 * (and all-zero tails pick the common, valid choices). */

typedef struct {
    const uint8_t *data;
    size_t size, at;
} reader;

static FUZZ_MAYBE_UNUSED unsigned byte(reader *r)
{
    return r->at < r->size ? r->data[r->at++] : 0u;
}

static FUZZ_MAYBE_UNUSED uint64_t bits(reader *r, int count)
{
    uint64_t value = 0;
    for (int i = 0; i < count; i += 8) {
        value |= (uint64_t)byte(r) << i;
    }
    return count >= 64 ? value : value & ((UINT64_C(1) << count) - 1);
}

static FUZZ_MAYBE_UNUSED unsigned below(reader *r, unsigned limit) /* 0 .. limit - 1 */
{
    return limit <= 256 ? byte(r) % limit : (unsigned)(bits(r, 32) % limit);
}

static FUZZ_MAYBE_UNUSED ptrdiff_t below_size(reader *r, ptrdiff_t limit) /* 0 .. limit - 1, limit >= 1 */
{
    return (ptrdiff_t)(bits(r, 32) % (uint64_t)limit);
}

static FUZZ_MAYBE_UNUSED uint64_t splitmix(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------ */
/* Elements: sizes, decoding, exact inputs, and rounding. */

/* Elements: sizes, decoding, exact inputs, and rounding. */

static FUZZ_MAYBE_UNUSED size_t itemsize_of(sinpe_dtype dtype)
{
    return dtype == SINPE_FLOAT16 ? 2 : dtype == SINPE_FLOAT32 ? 4 : 8;
}

static FUZZ_MAYBE_UNUSED double half_to_double(uint16_t h)
{
    const int exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
    double value;
    if (exponent == 0) {
        value = ldexp(fraction, -24);
    } else if (exponent == 31) {
        value = fraction ? NAN : INFINITY;
    } else {
        value = ldexp(fraction + 1024, exponent - 25);
    }
    return (h & 0x8000) ? -value : value;
}

static FUZZ_MAYBE_UNUSED double load(const char *at, sinpe_dtype dtype, int swapped)
{
    uint8_t raw[8];
    const size_t size = itemsize_of(dtype);
    for (size_t i = 0; i < size; ++i) {
        raw[i] = (uint8_t)at[swapped ? size - 1 - i : i];
    }
    if (dtype == SINPE_FLOAT16) {
        uint16_t h;
        memcpy(&h, raw, 2);
        return half_to_double(h);
    }
    if (dtype == SINPE_FLOAT32) {
        float f;
        memcpy(&f, raw, 4);
        return f;
    }
    double d;
    memcpy(&d, raw, 8);
    return d;
}

/* Writes a value that is exact in every dtype (a multiple of 1/64 in
 * [-32, 32): 11 significant bits at most), so an add's input is known
 * exactly whatever the dtype, and can be copied between dtypes. */
static FUZZ_MAYBE_UNUSED void store_exact(char *at, sinpe_dtype dtype, int swapped, double value)
{
    uint8_t raw[8];
    const size_t size = itemsize_of(dtype);
    if (dtype == SINPE_FLOAT16) {
        uint16_t h = 0;
        if (value != 0) {
            int e;
            const double m = frexp(fabs(value), &e); /* value = m * 2**e, m in [0.5, 1) */
            h = (uint16_t)(((e + 14) << 10) | ((uint16_t)(m * 2048.0) & 0x3ff));
            if (value < 0) h |= 0x8000;
        }
        memcpy(raw, &h, 2);
    } else if (dtype == SINPE_FLOAT32) {
        const float f = (float)value;
        memcpy(raw, &f, 4);
    } else {
        memcpy(raw, &value, 8);
    }
    for (size_t i = 0; i < size; ++i) {
        at[i] = (char)raw[swapped ? size - 1 - i : i];
    }
}

static FUZZ_MAYBE_UNUSED int mantissa_bits(sinpe_dtype dtype)
{
    return dtype == SINPE_FLOAT16 ? 10 : dtype == SINPE_FLOAT32 ? 23 : 52;
}

/* Half an ulp of `magnitude` in dtype: the most one rounding moves a value
 * of at most that size (subnormals included). */
static FUZZ_MAYBE_UNUSED double half_ulp(double magnitude, sinpe_dtype dtype)
{
    const double smallest = dtype == SINPE_FLOAT16 ? ldexp(1, -24)
                            : dtype == SINPE_FLOAT32 ? ldexp(1, -149)
                                                     : ldexp(1, -1074);
    const double relative = magnitude * ldexp(1, -(mantissa_bits(dtype) + 1));
    return relative > smallest / 2 ? relative : smallest / 2;
}

/* ------------------------------------------------------------------ */
/* Memory layouts. */

#define MAX_AXES 4 /* add_: up to 3 row axes and the features */
#define GUARD 96   /* bytes of guard zone on each side of an array */

typedef struct {
    int ndim;
    ptrdiff_t shape[MAX_AXES], strides[MAX_AXES];
    size_t size, offset; /* buffer bytes; byte offset of element (0, ..., 0) */
    int overlapping;
} memory_layout;

static FUZZ_MAYBE_UNUSED ptrdiff_t element_count(const memory_layout *lay)
{
    ptrdiff_t count = 1;
    for (int i = 0; i < lay->ndim; ++i) count *= lay->shape[i];
    return count;
}

/* Byte offset of the element with flat C-order index `flat`. */
static FUZZ_MAYBE_UNUSED size_t element_at(const memory_layout *lay, ptrdiff_t flat, ptrdiff_t *index)
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
 * negative strides, a misaligned start, and (1 in overlap_odds axes, when
 * may_overlap) a zero stride. */
static FUZZ_MAYBE_UNUSED void make_layout(reader *r, memory_layout *lay, size_t itemsize, int may_overlap,
                        unsigned overlap_odds)
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
    for (int i = 0; i < lay->ndim; ++i) {
        if (below(r, 4) == 0) lay->strides[i] = -lay->strides[i];
        if (may_overlap && i != lay->ndim - 1 && below(r, overlap_odds) == 0) {
            lay->strides[i] = 0; /* elements overlap: memory safety only */
            lay->overlapping = 1;
        }
        const ptrdiff_t extent = lay->shape[i] > 0 ? lay->strides[i] * (lay->shape[i] - 1) : 0;
        if (extent < 0) low += extent; else high += extent;
    }
    const size_t misalign = below(r, 4) == 0 ? below(r, (unsigned)itemsize) : 0;
    lay->offset = GUARD + misalign + (size_t)(-low);
    lay->size = lay->offset + (size_t)high + itemsize + GUARD;
}

/* A cancel callback that says stop after stop_after polls. */
typedef struct {
    int calls, stop_after;
} cancel_state;

static FUZZ_MAYBE_UNUSED int cancel_after(void *context)
{
    cancel_state *state = context;
    return ++state->calls > state->stop_after;
}

/* ------------------------------------------------------------------ */
/* The plain driver (no libFuzzer): replay the files given, or run random
 * inputs of up to max_length bytes from a seeded generator for SECONDS.
 * Returns the number of random inputs run, or -1 after a replay. */
#ifdef SINPE_FUZZ_MAIN
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Replay when the first argument is a file (corpus files are often named
 * by a hash that starts with a digit), else SECONDS [SEED]. */
static int is_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f != NULL) fclose(f);
    return f != NULL;
}

static long plain_driver(const char *name, int argc, char **argv, size_t max_length,
                         double *seconds)
{
    if (argc > 1 && is_file(argv[1])) {
        for (int i = 1; i < argc; ++i) {
            FILE *f = fopen(argv[i], "rb");
            if (f == NULL) { perror(argv[i]); exit(2); }
            uint8_t input[4096];
            const size_t got = fread(input, 1, sizeof input, f);
            fclose(f);
            LLVMFuzzerTestOneInput(input, got);
        }
        printf("%s: %d inputs replayed, no failure\n", name, argc - 1);
        return -1;
    }
    *seconds = argc > 1 ? atof(argv[1]) : 60.0;
    uint64_t state = argc > 2 ? strtoull(argv[2], NULL, 0) : 1;
    const time_t start = time(NULL);
    long runs = 0;
    uint8_t input[256];
    max_length = max_length < sizeof input ? max_length : sizeof input;
    while (difftime(time(NULL), start) < *seconds) {
        const size_t length = 16 + splitmix(&state) % (max_length - 16);
        for (size_t i = 0; i < length; ++i) input[i] = (uint8_t)splitmix(&state);
        LLVMFuzzerTestOneInput(input, length);
        ++runs;
    }
    return runs;
}
#endif

#endif /* SINPE_FUZZ_COMMON_H */
