/*
 * Row writers (see rows.h).  Native-order contiguous float32/float64 rows,
 * the case that must run at memory speed, get loops fused with the value
 * expression (stores) or NumPy's own loop (adds) compiled per SIMD width;
 * everything else (the 16-bit types, swapped bytes, any stride, unaligned
 * data) goes element by element through memcpy, which is slower but exact
 * and free of alignment UB.
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

void sinpe_store_values(const sinpe_row_format *fmt, char *dst, const double *v, ptrdiff_t step,
                        ptrdiff_t count)
{
    for (ptrdiff_t i = 0; i < count; ++i) {
        sinpe_store_elem(dst + i * fmt->col_stride, fmt->dtype, fmt->swapped, v[i * step]);
    }
}

/* The fast adds: native contiguous float32/float64, the loop NumPy's add
 * runs (one multiply unless scale is 1, one add, in the elements' type).
 * The row loop is inside so that short rows (d = 512 is 2 KB) are not each
 * a call through the clone dispatcher. */
#define DEFINE_FAST_ADD(name, T)                                                             \
    SINPE_CLONES                                                                             \
    static void name(char *dst, ptrdiff_t dst_stride, const char *src, ptrdiff_t src_stride,  \
                     ptrdiff_t rows, ptrdiff_t count, T scale)                               \
    {                                                                                        \
        for (ptrdiff_t i = 0; i < rows; ++i) {                                               \
            T *restrict x = (T *)(void *)(dst + i * dst_stride);                             \
            const T *restrict t = (const T *)(const void *)(src + i * src_stride);           \
            if (scale == (T)1) {                                                             \
                for (ptrdiff_t l = 0; l < count; ++l) {                                      \
                    x[l] = x[l] + t[l];                                                      \
                }                                                                            \
            } else {                                                                         \
                for (ptrdiff_t l = 0; l < count; ++l) {                                      \
                    x[l] = x[l] * scale + t[l];                                              \
                }                                                                            \
            }                                                                                \
        }                                                                                    \
    }

DEFINE_FAST_ADD(add_f32, float)
DEFINE_FAST_ADD(add_f64, double)

void sinpe_add_rows(const sinpe_row_format *fmt, char *dst, ptrdiff_t dst_stride, const char *src,
                    ptrdiff_t src_stride, ptrdiff_t rows, ptrdiff_t count, double scale)
{
    const size_t itemsize = sinpe_itemsize(fmt->dtype);
    if (src != NULL && (uintptr_t)src % itemsize == 0 && src_stride % (ptrdiff_t)itemsize == 0) {
        if (fmt->dtype == SINPE_FLOAT32 && is_plain(fmt, dst, dst_stride, 4)) {
            add_f32(dst, dst_stride, src, src_stride, rows, count, (float)scale);
            return;
        }
        if (fmt->dtype == SINPE_FLOAT64 && is_plain(fmt, dst, dst_stride, 8)) {
            add_f64(dst, dst_stride, src, src_stride, rows, count, scale);
            return;
        }
    }
    const sinpe_dtype dtype = fmt->dtype;
    for (ptrdiff_t i = 0; i < rows; ++i) {
        for (ptrdiff_t j = 0; j < count; ++j) {
            char *elem = dst + i * dst_stride + j * fmt->col_stride;
            double t = 0.0;
            if (src != NULL) {
                t = sinpe_load_elem(src + i * src_stride + (ptrdiff_t)itemsize * j, dtype, 0);
            }
            const double x = sinpe_load_elem(elem, dtype, fmt->swapped);
            sinpe_store_elem(elem, dtype, fmt->swapped,
                             sinpe_add_elem(dtype, x, src != NULL ? &t : NULL, scale));
        }
    }
}
