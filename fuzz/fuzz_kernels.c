/*
 * Fuzz target for the C kernels alone, through the public API (sinpe.h):
 * sinpe_encode, sinpe_encode_ex (with a cancel callback), sinpe_add and
 * sinpe_set_num_threads.  No Python anywhere.
 *
 * Each input describes one call: the dtype and byte order, a shape (0-length
 * axes, odd d, up to 4 axes for add), a memory layout (axes in any order,
 * gaps between elements, negative strides, a misaligned start, rarely a
 * zero stride that makes elements overlap), the offset (often at or beyond
 * the position bound), the base n, the scale and the thread count.  The
 * array lives inside a buffer with guard zones, filled with random bytes.
 * After the call:
 *   - an invalid call must return SINPE_ERR_INVALID and leave every byte of
 *     the buffer as it was;
 *   - a valid one must return SINPE_OK (or SINPE_ERR_NOMEM), change no byte
 *     outside the addressed elements, and give every element within the
 *     derived bound of a libm double reference (as tests/test_properties.py);
 *   - a cancelled one may leave elements untouched, but never wrong.
 *
 * Two ways to run it (fuzz/run.sh does either):
 *   libFuzzer:  clang -fsanitize=fuzzer,address,undefined ...
 *   plain:      cc -DSINPE_FUZZ_MAIN -fsanitize=address,undefined ...; ./a.out SECONDS SEED
 *               (random inputs from a seeded generator; files as arguments
 *               are replayed instead, e.g. a crash input from libFuzzer).
 */
#include "sinpe.h"
#include "fuzz_common.h"

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Failure reports: the message and the input that caused it. */

static const uint8_t *current_input;
static size_t current_size;

static void fail(const char *format, ...)
{
    va_list args;
    va_start(args, format);
    fprintf(stderr, "fuzz_kernels: ");
    vfprintf(stderr, format, args);
    va_end(args);
    fprintf(stderr, "\ninput (%zu bytes):", current_size);
    for (size_t i = 0; i < current_size; ++i) {
        fprintf(stderr, "%s%02x", i % 32 ? "" : "\n  ", current_input[i]);
    }
    fprintf(stderr, "\n");
    abort();
}

/* ------------------------------------------------------------------ */
/* The error bound and the reference. */

/* |double PE - exact| for libm and for any honest double method (see
 * tests/test_properties.py: angle roundings of 2**-53 |p| w, w <= 1). */
static double pe_error(int64_t p)
{
    return ldexp((double)(p < 0 ? -p : p) + 256.0, -52);
}

/* w_k = n ** (-2k / d), computed as DESIGN.md says (and NumPy does). */
static double *frequencies(ptrdiff_t d, double n)
{
    double *freq = malloc(sizeof(double) * (size_t)(d / 2 + 1));
    for (ptrdiff_t k = 0; freq != NULL && k <= d / 2; ++k) {
        freq[k] = pow(n, -(2.0 * (double)k) / (double)d);
    }
    return freq;
}

static double reference(int64_t p, ptrdiff_t j, const double *freq)
{
    const double angle = (double)p * freq[j / 2];
    return j % 2 == 0 ? sin(angle) : cos(angle);
}

/* ------------------------------------------------------------------ */
/* One call. */

/* The large class (32 MB and more: streaming stores) is slow; fuzz/run.sh
 * turns it off for libFuzzer, whose mutations would pick it too often. */
#ifndef SINPE_FUZZ_LARGE
#define SINPE_FUZZ_LARGE 1
#endif

static double pick_base(reader *r, int *valid)
{
    static const double bad[] = {0.0, -1.0, 0.5, 0.999999, 1e-300, 1e300, 1.0000001e30, NAN, INFINITY, -INFINITY};
    static const double good[] = {10000.0, 1.0, 2.0, 1e30, 500000.0, 10.0};
    const unsigned kind = below(r, 16);
    if (kind == 0) {
        *valid = 0;
        return bad[below(r, sizeof bad / sizeof bad[0])];
    }
    *valid = 1;
    if (kind < 8) return good[below(r, sizeof good / sizeof good[0])];
    return pow(10.0, 30.0 * (double)bits(r, 16) / 65535.0); /* 1 .. 1e30 */
}

static int64_t pick_offset(reader *r, ptrdiff_t rows, int *valid)
{
    const int64_t bound = SINPE_MAX_POSITION;
    int64_t offset;
    switch (below(r, 12)) {
    case 0: offset = bound - rows + 1; break;           /* last row exactly at the bound */
    case 1: offset = -bound; break;
    case 2: offset = bound - rows + 2; break;           /* one past */
    case 3: offset = (below(r, 2) ? 1 : -1) * (bound + 1 + (int64_t)below(r, 3)); break;
    case 4: offset = (int64_t)bits(r, 64); break;       /* anything, mostly far out */
    case 5: case 6: offset = (int64_t)(bits(r, 25) % (2 * bound + 1)) - bound; break;
    default: offset = (int64_t)below(r, 200) - 100; break;
    }
    *valid = offset >= -bound && offset <= bound && (rows == 0 || offset <= bound - rows + 1);
    return offset;
}

static void check_untouched(const char *what, const char *buffer, const char *before, size_t size,
                            const unsigned char *addressed)
{
    for (size_t block = 0; block < size; block += 64) {
        const size_t length = size - block < 64 ? size - block : 64;
        if (memcmp(buffer + block, before + block, length) == 0) {
            continue;
        }
        for (size_t i = block; i < block + length; ++i) {
            if (buffer[i] != before[i] && (addressed == NULL || !addressed[i])) {
                fail("%s: byte %zu of %zu changed (outside the array)", what, i, size);
            }
        }
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    current_input = data;
    current_size = size;
    reader r = {data, size, 0};

    const unsigned op = below(&r, 3); /* 0 encode, 1 encode_ex with cancel, 2 add */
    const sinpe_dtype dtype = (sinpe_dtype)below(&r, 3);
    const int swapped = below(&r, 4) == 0;
    const size_t itemsize = itemsize_of(dtype);
    /* size class: small (every path), medium (past the thread threshold,
     * 256 KB), large (past the streaming threshold, 32 MB; slow, so rare) */
    const unsigned size_class = below(&r, 128);
    const int large = SINPE_FUZZ_LARGE && size_class == 127; /* not 0: short inputs read zeros */
    const int medium = size_class >= 112 && !large;

    memory_layout lay = {0};
    lay.ndim = op == 2 ? 1 + (int)below(&r, MAX_AXES) : (below(&r, 32) == 0 ? 3 : 2);
    for (int i = 0; i < lay.ndim; ++i) {
        const unsigned kind = below(&r, 10);
        lay.shape[i] = kind == 0 ? 0 : kind < 6 ? 1 + below(&r, 6) : below(&r, 80);
    }
    const int pos_axis = op == 2 ? (int)below(&r, (unsigned)lay.ndim + 1) - (below(&r, 16) == 0) : 0;
    if (large || medium) {
        lay.ndim = 2;
        lay.shape[0] = large ? 90000 + below(&r, 40000) : 1000 + below(&r, 8000);
        lay.shape[1] = large ? 96 - below(&r, 8) : 1 + below(&r, 96);
    }
    ptrdiff_t total = element_count(&lay);
    if (!large && !medium && total > 4000) {
        lay.shape[lay.ndim - 1] = 1 + lay.shape[lay.ndim - 1] % 7;
        total = element_count(&lay);
        if (total > 4000) return 0;
    }
    make_layout(&r, &lay, itemsize, !large, 24);
    if (lay.size > ((size_t)192 << 20)) {
        return 0; /* three buffers of this size are allocated below */
    }

    const int rows_axis = op == 2 ? pos_axis : 0;
    const ptrdiff_t rows = rows_axis >= 0 && rows_axis < lay.ndim ? lay.shape[rows_axis] : 0;
    int n_valid, offset_valid;
    const double n = pick_base(&r, &n_valid);
    const int64_t offset = pick_offset(&r, rows, &offset_valid);
    const unsigned scale_kind = below(&r, 16);
    const double scale = scale_kind == 0 ? NAN : scale_kind == 1 ? INFINITY
                         : scale_kind < 5 ? 1.0 : ((double)bits(&r, 16) - 32768.0) / 4096.0;
    const int threads = 1 + (int)below(&r, 4);
    cancel_state cancel = {0, (int)below(&r, 4)};
    const unsigned flags = below(&r, 2) ? SINPE_FRESH_OUTPUT : 0u;
    uint64_t seed = bits(&r, 64);

    int valid = n_valid && offset_valid;
    if (op == 2) {
        valid = valid && lay.ndim >= 2 && pos_axis >= 0 && pos_axis < lay.ndim - 1 && isfinite(scale);
    } else {
        valid = valid && lay.ndim == 2;
    }

    if (sinpe_set_num_threads(threads) != SINPE_OK) fail("set_num_threads(%d) refused", threads);
    if (sinpe_get_num_threads() != threads) fail("get_num_threads() != %d", threads);
    if (sinpe_set_num_threads(0) != SINPE_ERR_INVALID || sinpe_set_num_threads(SINPE_MAX_THREADS + 1) != SINPE_ERR_INVALID)
        fail("set_num_threads accepted an out-of-range count");

    char *buffer = malloc(lay.size), *before = malloc(lay.size);
    unsigned char *addressed = calloc(lay.size, 1);
    if (buffer == NULL || before == NULL || addressed == NULL) {
        free(buffer), free(before), free(addressed);
        return 0;
    }
    for (size_t i = 0; i < lay.size; i += 8) {
        const uint64_t word = splitmix(&seed);
        memcpy(buffer + i, &word, lay.size - i < 8 ? lay.size - i : 8);
    }
    ptrdiff_t index[MAX_AXES];
    for (ptrdiff_t e = 0; e < total; ++e) {
        const size_t at = element_at(&lay, e, index);
        memset(addressed + at, 1, itemsize);
        if (op == 2) { /* exact inputs in [-32, 32) */
            store_exact(buffer + at, dtype, swapped, (double)((int64_t)(splitmix(&seed) % 4096) - 2048) / 64.0);
        }
    }
    memcpy(before, buffer, lay.size);

    const sinpe_array view = {buffer + lay.offset, dtype, swapped, lay.ndim, lay.shape, lay.strides};
    int status;
    if (op == 0) {
        status = sinpe_encode(&view, n, offset);
    } else if (op == 1) {
        status = sinpe_encode_ex(&view, n, offset, flags, cancel_after, &cancel);
    } else {
        status = sinpe_add(&view, pos_axis, n, offset, scale);
    }

    if (!valid) {
        if (status != SINPE_ERR_INVALID) fail("invalid call returned status %d, not SINPE_ERR_INVALID", status);
        check_untouched("invalid call", buffer, before, lay.size, NULL);
    } else if (status == SINPE_ERR_NOMEM) {
        check_untouched("SINPE_ERR_NOMEM", buffer, before, lay.size, NULL);
    } else if (status != SINPE_OK && !(status == SINPE_ERR_CANCELLED && op == 1 && cancel.calls > cancel.stop_after)) {
        fail("valid call returned status %d", status);
    } else {
        check_untouched("valid call", buffer, before, lay.size, addressed);
        /* Values: every element of a small call, a sample of a large one. */
        const ptrdiff_t d = lay.shape[lay.ndim - 1];
        double *freq = frequencies(d, n);
        if (freq == NULL) fail("out of memory in the driver");
        const ptrdiff_t stride = large || medium ? 1 + total / 4096 : 1;
        for (ptrdiff_t e = 0; e < total && !lay.overlapping; e += stride) {
            const size_t at = element_at(&lay, e, index);
            const int64_t p = offset + index[rows_axis];
            const ptrdiff_t j = index[lay.ndim - 1];
            const double pe = reference(p, j, freq), err = pe_error(p);
            const double got = load(buffer + at, dtype, swapped);
            double want, tolerance;
            if (op == 2) {
                const double scaled = scale * load(before + at, dtype, swapped);
                want = scaled + pe;
                const double delta = 2 * err + ldexp(fabs(scaled) + fabs(want), -52);
                tolerance = half_ulp(fabs(want) + delta, dtype) + delta;
            } else {
                want = pe;
                tolerance = dtype == SINPE_FLOAT32 ? ldexp(1, -24) + err : half_ulp(fabs(pe) + 2 * err, dtype) + 2 * err;
            }
            if (status == SINPE_ERR_CANCELLED && memcmp(buffer + at, before + at, itemsize) == 0) {
                continue; /* not reached before the cancel: allowed */
            }
            if (!(fabs(got - want) <= tolerance)) {
                fail("op %u dtype %d swapped %d: element p=%lld j=%td d=%td n=%.17g scale=%.17g: got %.17g, "
                     "want %.17g, error %.3g > %.3g",
                     op, (int)dtype, swapped, (long long)p, j, d, n, scale, got, want, fabs(got - want), tolerance);
            }
        }
        free(freq);
    }
    free(buffer);
    free(before);
    free(addressed);
    return 0;
}

#ifdef SINPE_FUZZ_MAIN
int main(int argc, char **argv)
{
    double seconds = 0.0;
    const long runs = plain_driver("fuzz_kernels", argc, argv, 128, &seconds);
    if (runs >= 0) printf("fuzz_kernels: %ld random inputs in %.0f s, no failure\n", runs, seconds);
    return 0;
}
#endif
