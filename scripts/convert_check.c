/*
 * Every vector conversion of one SIMD level (csrc/kernels/vec.h, through
 * scripts/convert_level.c) against float16.h's scalar definitions, for
 * every float (2**32) and every 16-bit value (2**16), bfloat16 and
 * float16:
 *   widen    exact, the same bits; a NaN may come out another NaN of the
 *            same sign (arithmetic quiets it anyway)
 *   narrow   the same bits, or the vector is reported (its elements then
 *            computed by the scalar definition in the loops); only a vector
 *            with a NaN, or with the hardware bfloat16 conversion a
 *            subnormal, may be reported, and every NaN is (or has the
 *            scalar's bits)
 *   round    to the format and back: the same bits for every non-NaN; a
 *            NaN stays a NaN (for bfloat16 the NaNs the loops make, whose
 *            low 16 bits are zero); a report only for a NaN or subnormal
 *   split    the rotations' bfloat16 rounding of products (Veltkamp's
 *            split): the same bits, or reported (bits in the low 16; a
 *            NaN, which the narrowing reports) only where allowed
 * A reported vector's elements are each checked again alone (every lane
 * holding it), so that no element escapes because a neighbour was
 * reported.  The exact rotations' conversions (kernels/vec.h's doubles)
 * too: their widening and narrowing of VF_LANES elements in order, the same
 * way, and their rounding of doubles to odd floats against sinpe_float_odd for
 * every float f as a double, the midpoint between f and the next float
 * (a tie) and the doubles one step on either side of that midpoint, and
 * for doubles past the float range and the specials.  Run by scripts/convert.sh; prints counts, exits 1 on any
 * mismatch.
 */
#include "core/platform.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/float16.h"

int level_lanes(void);
void level_seq_widen(int f16, const uint16_t *in, float *out, size_t n);
void level_seq_narrow(int f16, const float *in, uint16_t *out, unsigned char *bad, size_t n);
void level_odd(const double *in, float *out, size_t n);
void level_widen(int f16, const uint16_t *in, float *out, size_t n);
void level_narrow(int f16, const float *in, uint16_t *out, unsigned char *bad, size_t n);
void level_round(int f16, const float *in, float *out, unsigned char *bad, size_t n);
void level_round_split(const float *in, float *out, unsigned char *low, size_t n);

enum { CHUNK = 1 << 20 };

static int is_nan_bits(uint32_t b)
{
    return (b & 0x7fffffffu) > 0x7f800000u;
}

static int is_subnormal_bits(uint32_t b)
{
    return (b & 0x7f800000u) == 0 && (b & 0x007fffffu) != 0;
}

static uint32_t bits_of(float f)
{
    uint32_t b;
    memcpy(&b, &f, 4);
    return b;
}

static float float_of(uint32_t b)
{
    float f;
    memcpy(&f, &b, 4);
    return f;
}

static uint16_t scalar_narrow(int f16, float v)
{
    return f16 ? sinpe_float_to_half(v) : sinpe_float_to_bfloat16(v);
}

static float scalar_widen(int f16, uint16_t h)
{
    return f16 ? sinpe_half_to_float(h) : sinpe_bfloat16_to_float(h);
}

static long failures;

static void fail(const char *what, int f16, uint32_t in, uint32_t got, uint32_t want)
{
    if (failures++ < 20) {
        printf("  MISMATCH %s %s: input 0x%08x got 0x%08x want 0x%08x\n", what,
               f16 ? "float16" : "bfloat16", in, got, want);
    }
}

/* A reported vector's element v alone, in every lane: it must be the
 * scalar's bits, or be reported and special (NaN; subnormal). */
static void recheck_narrow(int f16, float v, float *lanes, uint16_t *out, unsigned char *bad,
                           int lanes_n, long *reported)
{
    for (int l = 0; l < lanes_n; ++l) {
        lanes[l] = v;
    }
    level_narrow(f16, lanes, out, bad, (size_t)lanes_n);
    const uint32_t b = bits_of(v);
    if (bad[0]) {
        ++*reported;
        if (!is_nan_bits(b) && !is_subnormal_bits(b)) {
            fail("narrow reported an ordinary value", f16, b, out[0], scalar_narrow(f16, v));
        }
        return;
    }
    for (int l = 0; l < lanes_n; ++l) {
        if (out[l] != scalar_narrow(f16, v)) {
            fail("narrow", f16, b, out[l], scalar_narrow(f16, v));
            return;
        }
    }
}

static void check_format(int f16)
{
    const int lanes_n = level_lanes();
    float *in = malloc(CHUNK * sizeof *in), *rounded = malloc(CHUNK * sizeof *rounded);
    uint16_t *out = malloc(CHUNK * sizeof *out);
    unsigned char *bad = malloc(CHUNK), *rbad = malloc(CHUNK);
    float *lanes = malloc((size_t)lanes_n * sizeof *lanes);
    uint16_t *lanes_out = malloc((size_t)lanes_n * sizeof *lanes_out);
    unsigned char lanes_bad[1];
    if (!in || !rounded || !out || !bad || !rbad || !lanes || !lanes_out) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    long reported = 0, round_reported = 0, vectors_reported = 0;
    /* widen: every 16-bit value */
    uint16_t all[65536];
    float widened[65536];
    for (uint32_t h = 0; h < 65536; ++h) {
        all[h] = (uint16_t)h;
    }
    level_widen(f16, all, widened, 65536);
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint32_t got = bits_of(widened[h]), want = bits_of(scalar_widen(f16, (uint16_t)h));
        const int nan_ok = is_nan_bits(want) && is_nan_bits(got) && (got >> 31) == (want >> 31);
        if (got != want && !nan_ok) {
            fail("widen", f16, h, got, want);
        }
    }
    /* narrow and round: every float */
    for (uint64_t start = 0; start < (UINT64_C(1) << 32); start += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; ++i) {
            in[i] = float_of((uint32_t)(start + i));
        }
        level_narrow(f16, in, out, bad, CHUNK);
        level_round(f16, in, rounded, rbad, CHUNK);
        for (uint32_t v = 0; v < CHUNK / (uint32_t)lanes_n; ++v) {
            const uint32_t i0 = v * (uint32_t)lanes_n;
            if (bad[v]) {
                ++vectors_reported;
                for (int l = 0; l < lanes_n; ++l) {
                    recheck_narrow(f16, in[i0 + (uint32_t)l], lanes, lanes_out, lanes_bad, lanes_n,
                                   &reported);
                }
                continue;
            }
            for (int l = 0; l < lanes_n; ++l) {
                const uint32_t i = i0 + (uint32_t)l;
                if (out[i] != scalar_narrow(f16, in[i])) {
                    fail("narrow (not reported)", f16, bits_of(in[i]), out[i],
                         scalar_narrow(f16, in[i]));
                }
            }
        }
        const uint32_t per = (uint32_t)lanes_n / 2; /* VF_LANES */
        for (uint32_t i = 0; i < CHUNK; ++i) {
            const uint32_t b = bits_of(in[i]), got = bits_of(rounded[i]);
            const uint32_t want = bits_of(scalar_widen(f16, scalar_narrow(f16, in[i])));
            if (rbad[i / per]) {
                round_reported += i % per == 0;
                if (!is_nan_bits(b) && !is_subnormal_bits(b) && i % per == 0) {
                    /* some lane of the register must be special */
                    int special = 0;
                    for (uint32_t l = i; l < i + per; ++l) {
                        special |= is_nan_bits(bits_of(in[l])) || is_subnormal_bits(bits_of(in[l]));
                    }
                    if (!special) {
                        fail("round reported ordinary values", f16, b, got, want);
                    }
                }
                continue;
            }
            if (is_nan_bits(b)) {
                /* bfloat16: only NaNs with zero low 16 bits must stay NaNs */
                if ((f16 || (b & 0xffffu) == 0) && !is_nan_bits(got)) {
                    fail("round lost a NaN", f16, b, got, want);
                }
                continue;
            }
            if (got != want) {
                fail("round", f16, b, got, want);
            }
        }
    }
    printf("  %-8s widen 65536 values; narrow and round 4294967296 floats: %ld vectors reported "
           "(%ld of their elements alone), %ld rounding registers reported\n",
           f16 ? "float16" : "bfloat16", vectors_reported, reported, round_reported);
    free(in);
    free(rounded);
    free(out);
    free(bad);
    free(rbad);
    free(lanes);
    free(lanes_out);
}

/* The rotations' bfloat16 rounding of products by Veltkamp's split: for
 * every float, the scalar's bits; or bits in the result's low 16 (the
 * loops report the vector); or a NaN (it reaches the narrowing, which
 * reports it): allowed only for NaNs, where v * (2**16 + 1) overflows
 * (from 2**128 / 65537, just under 2**112) and, for the low bits,
 * subnormals.  vf_low16_any must agree
 * with the lanes. */
static void check_round_split(void)
{
    float *in = malloc(CHUNK * sizeof *in), *out = malloc(CHUNK * sizeof *out);
    unsigned char *low = malloc(CHUNK);
    if (!in || !out || !low) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    long lows = 0, nans = 0;
    for (uint64_t start = 0; start < (UINT64_C(1) << 32); start += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; ++i) {
            in[i] = float_of((uint32_t)(start + i));
        }
        level_round_split(in, out, low, CHUNK);
        for (uint32_t i = 0; i < CHUNK; ++i) {
            const uint32_t b = bits_of(in[i]), got = bits_of(out[i]);
            const uint32_t want = bits_of(scalar_widen(0, scalar_narrow(0, in[i])));
            if (low[i] == 2) {
                fail("split: vf_low16_any disagrees with the lanes", 0, b, got, want);
            }
            if (is_nan_bits(got)) {
                ++nans;
                /* v * (2**16 + 1) in double is exact; as a float it overflows */
                if (!is_nan_bits(b) && !isinf((float)(fabs((double)in[i]) * 65537.0))) {
                    fail("split made a NaN where it does not overflow", 0, b, got, want);
                }
                continue;
            }
            if (is_nan_bits(b)) {
                fail("split lost a NaN", 0, b, got, want);
                continue;
            }
            if (low[i]) {
                ++lows;
                if (!is_subnormal_bits(b)) {
                    fail("split reported an ordinary value", 0, b, got, want);
                }
                continue;
            }
            if (got != want) {
                fail("split", 0, b, got, want);
            }
        }
    }
    printf("  bfloat16 split rounding of 4294967296 floats: %ld subnormals reported, %ld NaNs "
           "out\n",
           lows, nans);
    free(in);
    free(out);
    free(low);
}

/* The exact rotations' widening and narrowing in order: as check_format's,
 * a reported vector's elements again one by one. */
static void check_sequential(int f16)
{
    const int lanes_n = level_lanes() / 2;
    float *in = malloc(CHUNK * sizeof *in), widened[65536];
    uint16_t *out = malloc(CHUNK * sizeof *out), all[65536], one_out[64];
    unsigned char *bad = malloc(CHUNK), one_bad[1];
    float one[64];
    if (!in || !out || !bad) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    for (uint32_t h = 0; h < 65536; ++h) {
        all[h] = (uint16_t)h;
    }
    level_seq_widen(f16, all, widened, 65536);
    for (uint32_t h = 0; h < 65536; ++h) {
        const uint32_t got = bits_of(widened[h]), want = bits_of(scalar_widen(f16, (uint16_t)h));
        const int nan_ok = is_nan_bits(want) && is_nan_bits(got) && (got >> 31) == (want >> 31);
        if (got != want && !nan_ok) {
            fail("widen in order", f16, h, got, want);
        }
    }
    long reported = 0;
    for (uint64_t start = 0; start < (UINT64_C(1) << 32); start += CHUNK) {
        for (uint32_t i = 0; i < CHUNK; ++i) {
            in[i] = float_of((uint32_t)(start + i));
        }
        level_seq_narrow(f16, in, out, bad, CHUNK);
        for (uint32_t v = 0; v < CHUNK / (uint32_t)lanes_n; ++v) {
            for (int l = 0; l < lanes_n; ++l) {
                const uint32_t i = v * (uint32_t)lanes_n + (uint32_t)l;
                const uint32_t b = bits_of(in[i]);
                if (!bad[v]) {
                    if (out[i] != scalar_narrow(f16, in[i])) {
                        fail("narrow in order (not reported)", f16, b, out[i],
                             scalar_narrow(f16, in[i]));
                    }
                    continue;
                }
                for (int k = 0; k < lanes_n; ++k) {
                    one[k] = in[i];
                }
                level_seq_narrow(f16, one, one_out, one_bad, (size_t)lanes_n);
                if (one_bad[0]) {
                    reported += 1;
                    if (!is_nan_bits(b) && !is_subnormal_bits(b)) {
                        fail("narrow in order reported an ordinary value", f16, b, one_out[0],
                             scalar_narrow(f16, in[i]));
                    }
                } else if (one_out[0] != scalar_narrow(f16, in[i])) {
                    fail("narrow in order", f16, b, one_out[0], scalar_narrow(f16, in[i]));
                }
            }
        }
    }
    printf("  %-8s in order: widen 65536 values, narrow 4294967296 floats (%ld reported)\n",
           f16 ? "float16" : "bfloat16", reported);
    free(in);
    free(out);
    free(bad);
}

static uint64_t double_bits(double d)
{
    uint64_t b;
    memcpy(&b, &d, 8);
    return b;
}

static double double_of(uint64_t b)
{
    double d;
    memcpy(&d, &b, 8);
    return d;
}

/* Rounding doubles to odd floats, against float16.h's sinpe_float_odd. */
static void check_odd(void)
{
    enum { PER = 4 };
    double *in = malloc((size_t)CHUNK * PER * sizeof *in);
    float *out = malloc((size_t)CHUNK * PER * sizeof *out);
    if (!in || !out) {
        fprintf(stderr, "out of memory\n");
        exit(2);
    }
    long checked = 0;
    for (uint64_t start = 0; start < (UINT64_C(1) << 32); start += CHUNK) {
        size_t n = 0;
        for (uint32_t i = 0; i < CHUNK; ++i) {
            const uint32_t b = (uint32_t)(start + i);
            if (is_nan_bits(b) || (b & 0x7fffffffu) == 0x7f800000u) {
                continue; /* below: NaNs; infinities are among the specials */
            }
            const double f = float_of(b), next = float_of(b + 1u); /* the next float away from 0 */
            const double mid = f + (next - f) / 2; /* exact: a double has room */
            in[n++] = f;
            in[n++] = mid;
            in[n++] = double_of(double_bits(mid) - 1u);
            in[n++] = double_of(double_bits(mid) + 1u);
        }
        const size_t lanes_n = (size_t)level_lanes() / 2;
        while (n % lanes_n != 0) {
            in[n] = in[n - 1];
            ++n;
        }
        level_odd(in, out, n);
        for (size_t i = 0; i < n; ++i) {
            const uint32_t got = bits_of(out[i]), want = bits_of(sinpe_float_odd(in[i]));
            if (got != want) {
                fail("odd", 0, (uint32_t)(double_bits(in[i]) >> 32), got, want);
            }
        }
        checked += (long)n;
    }
    /* past the float range, tiny doubles, and the specials */
    const double specials[] = {0.0, -0.0, 1e300, -1e300, 3.4028235677973366e38,
                               3.4028235677973362e38, 3.402823669209385e38, 4e38, -4e38,
                               1e-300, -1e-300, 1e-46, 7e-46, 1.401298464324817e-45 / 2,
                               HUGE_VAL, -HUGE_VAL, 1.7976931348623157e308};
    const size_t count = sizeof specials / sizeof specials[0];
    const size_t lanes_n = (size_t)level_lanes() / 2;
    for (size_t k = 0; k < count; ++k) {
        for (size_t l = 0; l < lanes_n; ++l) {
            in[l] = specials[k];
        }
        level_odd(in, out, lanes_n);
        const uint32_t got = bits_of(out[0]), want = bits_of(sinpe_float_odd(specials[k]));
        if (got != want) {
            fail("odd (specials)", 0, (uint32_t)(double_bits(specials[k]) >> 32), got, want);
        }
    }
    printf("  doubles rounded to odd floats: %ld near every float, %zu specials\n", checked,
           count);
    free(in);
    free(out);
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "?";
    printf("%s (%d elements a vector)\n", name, level_lanes());
    check_format(0);
    check_format(1);
    check_round_split();
    check_sequential(0);
    check_sequential(1);
    check_odd();
    if (failures) {
        printf("%s: %ld mismatches\n", name, failures);
        return 1;
    }
    printf("%s: every conversion as float16.h\n", name);
    return 0;
}
