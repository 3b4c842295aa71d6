/*
 * Row writers (see rows.h).  Native-order contiguous float32/float64 rows,
 * the case that must run at memory speed, get loops fused with the value
 * expression and compiled per SIMD width; everything else (float16, swapped
 * bytes, any stride, unaligned data) goes element by element through
 * memcpy, which is slower but exact and free of alignment UB.
 */
#include "rows.h"
#include "elements.h"
#include "simd.h"

#include <stdint.h>
#include <string.h>

#if SINPE_X86_DISPATCH
#include <immintrin.h>
#include <stdatomic.h>
#endif

/* The fast case: native, aligned, contiguous float32 or float64 rows. */
static int is_plain(const sinpe_row_format *fmt, const char *dst, ptrdiff_t row_stride,
                    size_t itemsize)
{
    return !fmt->swapped && fmt->col_stride == (ptrdiff_t)itemsize &&
           (uintptr_t)dst % itemsize == 0 && row_stride % (ptrdiff_t)itemsize == 0;
}

SINPE_CLONES
static void store_f32(char *dst, ptrdiff_t row_stride, int rows, ptrdiff_t lanes,
                      const double *restrict a, const double *restrict b, sinpe_steps steps)
{
    for (int i = 0; i < rows; ++i) {
        float *restrict out = (float *)(void *)(dst + i * row_stride);
        const double *restrict c = steps.c + i * steps.stride;
        const double *restrict s = steps.s + i * steps.stride;
        for (ptrdiff_t l = 0; l < lanes; ++l) {
            out[l] = (float)sinpe_value(a[l], b[l], c[l], s[l]);
        }
    }
}

SINPE_CLONES
static void store_f64(char *dst, ptrdiff_t row_stride, int rows, ptrdiff_t lanes,
                      const double *restrict a, const double *restrict b, sinpe_steps steps)
{
    for (int i = 0; i < rows; ++i) {
        double *restrict out = (double *)(void *)(dst + i * row_stride);
        const double *restrict c = steps.c + i * steps.stride;
        const double *restrict s = steps.s + i * steps.stride;
        for (ptrdiff_t l = 0; l < lanes; ++l) {
            out[l] = sinpe_value(a[l], b[l], c[l], s[l]);
        }
    }
}

#if SINPE_X86_DISPATCH
/* Streaming (non-temporal) float32 stores for tables much larger than the
 * caches.  A plain store first reads each line it writes (read for
 * ownership) and the table then evicts everything else; streaming stores
 * write whole lines straight to memory.  Measured here on a 256 MB table:
 * 0.33 ns per element instead of 0.78.  The arithmetic is the same IEEE
 * multiply, multiply, add and round-to-float as sinpe_value in store_f32, so
 * the bits are the same; only where they are written to differs.  Heads and
 * tails of rows that are not 64-byte aligned use ordinary stores. */
__attribute__((target("avx512f")))
static void stream_f32_avx512(char *dst, ptrdiff_t row_stride, int rows, ptrdiff_t lanes,
                              const double *restrict a, const double *restrict b,
                              sinpe_steps steps)
{
    for (int i = 0; i < rows; ++i) {
        float *out = (float *)(void *)(dst + i * row_stride);
        const double *c = steps.c + i * steps.stride;
        const double *s = steps.s + i * steps.stride;
        ptrdiff_t l = 0;
        for (; l < lanes && (uintptr_t)(out + l) % 64 != 0; ++l) {
            out[l] = (float)sinpe_value(a[l], b[l], c[l], s[l]);
        }
        for (; l + 16 <= lanes; l += 16) {
            const __m512d lo = _mm512_add_pd(_mm512_mul_pd(_mm512_loadu_pd(a + l), _mm512_loadu_pd(c + l)),
                                             _mm512_mul_pd(_mm512_loadu_pd(b + l), _mm512_loadu_pd(s + l)));
            const __m512d hi =
                _mm512_add_pd(_mm512_mul_pd(_mm512_loadu_pd(a + l + 8), _mm512_loadu_pd(c + l + 8)),
                              _mm512_mul_pd(_mm512_loadu_pd(b + l + 8), _mm512_loadu_pd(s + l + 8)));
            const __m256 lo32 = _mm512_cvtpd_ps(lo), hi32 = _mm512_cvtpd_ps(hi);
            const __m512d both = _mm512_insertf64x4(_mm512_castpd256_pd512(_mm256_castps_pd(lo32)),
                                                    _mm256_castps_pd(hi32), 1);
            _mm512_stream_ps(out + l, _mm512_castpd_ps(both));
        }
        for (; l < lanes; ++l) {
            out[l] = (float)sinpe_value(a[l], b[l], c[l], s[l]);
        }
    }
    _mm_sfence(); /* streaming stores are weakly ordered: publish them */
}

__attribute__((target("avx2")))
static void stream_f32_avx2(char *dst, ptrdiff_t row_stride, int rows, ptrdiff_t lanes,
                            const double *restrict a, const double *restrict b, sinpe_steps steps)
{
    for (int i = 0; i < rows; ++i) {
        float *out = (float *)(void *)(dst + i * row_stride);
        const double *c = steps.c + i * steps.stride;
        const double *s = steps.s + i * steps.stride;
        ptrdiff_t l = 0;
        for (; l < lanes && (uintptr_t)(out + l) % 32 != 0; ++l) {
            out[l] = (float)sinpe_value(a[l], b[l], c[l], s[l]);
        }
        for (; l + 8 <= lanes; l += 8) {
            const __m256d lo = _mm256_add_pd(_mm256_mul_pd(_mm256_loadu_pd(a + l), _mm256_loadu_pd(c + l)),
                                             _mm256_mul_pd(_mm256_loadu_pd(b + l), _mm256_loadu_pd(s + l)));
            const __m256d hi =
                _mm256_add_pd(_mm256_mul_pd(_mm256_loadu_pd(a + l + 4), _mm256_loadu_pd(c + l + 4)),
                              _mm256_mul_pd(_mm256_loadu_pd(b + l + 4), _mm256_loadu_pd(s + l + 4)));
            const __m256 both = _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)),
                                                     _mm256_cvtpd_ps(hi), 1);
            _mm256_stream_ps(out + l, both);
        }
        for (; l < lanes; ++l) {
            out[l] = (float)sinpe_value(a[l], b[l], c[l], s[l]);
        }
    }
    _mm_sfence();
}

/* 2: AVX-512F, 1: AVX2, 0: neither (plain stores).  Every thread that
 * races here stores the same answer. */
static int stream_level(void)
{
    static atomic_int level = -1;
    int known = atomic_load_explicit(&level, memory_order_relaxed);
    if (known < 0) {
        known = __builtin_cpu_supports("avx512f") ? 2 : __builtin_cpu_supports("avx2") ? 1 : 0;
        atomic_store_explicit(&level, known, memory_order_relaxed);
    }
    return known;
}

static int stream_f32(char *dst, ptrdiff_t row_stride, int rows, ptrdiff_t lanes,
                      const double *a, const double *b, sinpe_steps steps)
{
    switch (stream_level()) {
    case 2:
        stream_f32_avx512(dst, row_stride, rows, lanes, a, b, steps);
        return 1;
    case 1:
        stream_f32_avx2(dst, row_stride, rows, lanes, a, b, steps);
        return 1;
    default:
        return 0;
    }
}
#else
static int stream_f32(char *dst, ptrdiff_t row_stride, int rows, ptrdiff_t lanes,
                      const double *a, const double *b, sinpe_steps steps)
{
    (void)dst, (void)row_stride, (void)rows, (void)lanes, (void)a, (void)b, (void)steps;
    return 0;
}
#endif

void sinpe_store_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t row_stride,
                      const sinpe_steps *steps, int r0, int r1, ptrdiff_t lanes,
                      const double *a, const double *b, double *tmp)
{
    sinpe_steps from_r0 = *steps;
    from_r0.c += r0 * steps->stride;
    from_r0.s += r0 * steps->stride;
    if (fmt->dtype == SINPE_FLOAT32 && is_plain(fmt, dst, row_stride, 4)) {
        if (!fmt->streaming || !stream_f32(dst, row_stride, r1 - r0, lanes, a, b, from_r0)) {
            store_f32(dst, row_stride, r1 - r0, lanes, a, b, from_r0);
        }
        return;
    }
    if (fmt->dtype == SINPE_FLOAT64 && is_plain(fmt, dst, row_stride, 8)) {
        store_f64(dst, row_stride, r1 - r0, lanes, a, b, from_r0);
        return;
    }
    for (int r = r0; r < r1; ++r) {
        char *row = dst + (r - r0) * row_stride;
        sinpe_values(steps, r, lanes, a, b, tmp);
        for (ptrdiff_t j = 0; j < lanes; ++j) {
            sinpe_store_elem(row + j * fmt->col_stride, fmt->dtype, fmt->swapped, tmp[j]);
        }
    }
}

/* scale == 1 skips the multiply: 1.0 * x == x for every double (a NaN
 * stays the same quiet NaN), so the bits are the same either way.  The row
 * loop is inside so that short rows (d = 512 is 2 KB) are not each a call
 * through the clone dispatcher (measured ~15% of an add_ of d = 512). */
SINPE_CLONES
static void add_f32(char *dst, ptrdiff_t dst_stride, const double *pe, ptrdiff_t pe_stride,
                    ptrdiff_t count, ptrdiff_t lanes, double scale)
{
    for (ptrdiff_t i = 0; i < count; ++i) {
        float *restrict x = (float *)(void *)(dst + i * dst_stride);
        const double *restrict v = pe + i * pe_stride;
        if (scale == 1.0) {
            for (ptrdiff_t l = 0; l < lanes; ++l) {
                x[l] = (float)((double)x[l] + v[l]);
            }
        } else {
            for (ptrdiff_t l = 0; l < lanes; ++l) {
                x[l] = (float)(scale * (double)x[l] + v[l]);
            }
        }
    }
}

SINPE_CLONES
static void add_f64(char *dst, ptrdiff_t dst_stride, const double *pe, ptrdiff_t pe_stride,
                    ptrdiff_t count, ptrdiff_t lanes, double scale)
{
    for (ptrdiff_t i = 0; i < count; ++i) {
        double *restrict x = (double *)(void *)(dst + i * dst_stride);
        const double *restrict v = pe + i * pe_stride;
        if (scale == 1.0) {
            for (ptrdiff_t l = 0; l < lanes; ++l) {
                x[l] = x[l] + v[l];
            }
        } else {
            for (ptrdiff_t l = 0; l < lanes; ++l) {
                x[l] = scale * x[l] + v[l];
            }
        }
    }
}

void sinpe_add_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t dst_stride,
                    const double *pe, ptrdiff_t pe_stride, ptrdiff_t count, ptrdiff_t lanes,
                    double scale)
{
    if (fmt->dtype == SINPE_FLOAT32 && is_plain(fmt, dst, dst_stride, 4)) {
        add_f32(dst, dst_stride, pe, pe_stride, count, lanes, scale);
        return;
    }
    if (fmt->dtype == SINPE_FLOAT64 && is_plain(fmt, dst, dst_stride, 8)) {
        add_f64(dst, dst_stride, pe, pe_stride, count, lanes, scale);
        return;
    }
    for (ptrdiff_t i = 0; i < count; ++i) {
        for (ptrdiff_t j = 0; j < lanes; ++j) {
            char *elem = dst + i * dst_stride + j * fmt->col_stride;
            const double value =
                scale * sinpe_load_elem(elem, fmt->dtype, fmt->swapped) + pe[i * pe_stride + j];
            sinpe_store_elem(elem, fmt->dtype, fmt->swapped, value);
        }
    }
}
