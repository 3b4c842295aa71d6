/*
 * How close can one core get to the write floor?  Writes a float32 table of
 * `rows` x 512 (the paper's interleaved layout, n = 10000) into the same
 * array with these loops, timed in alternation (medians of the rounds):
 *
 *   fill        out[i] = 1: the floor the bench compares against;
 *   convert     each row the float32 rounding of one double row kept in L1:
 *               the least any "computed in double, rounded once" loop does;
 *   product     sinpe's formula, sin(p0 w) cos(r w) + cos(p0 w) sin(r w) and
 *               its cosine, two 32-row blocks per pass over the steps (the
 *               anchors are made before timing: this is the loop alone);
 *   recurrence  the three-term recurrence x[r+1] = 2 cos(w) x[r] - x[r-1]
 *               inside sub-blocks of 8 or 32 rows (rows 0 and 1 of each by
 *               the product formula), one multiply and one subtract per
 *               element, the sine and cosine lanes interleaved as stored (no
 *               shuffles); and its recurrence rows alone (8-row sub-blocks).
 *
 * Times are per element each loop writes.  It also prints each formula's
 * worst float32 error against long double sin/cos, in units of 2**-24, and
 * how many elements the recurrence rounds differently from the product.
 * Build and run: scripts/floor.sh.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BLOCK 32
#define FREQS 256 /* d = 512 */
#define D (2 * FREQS)

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *alloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (p == NULL) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    memset(p, 0, bytes);
    return p;
}

typedef struct {
    int blocks;
    double *anchor_s, *anchor_c; /* [blocks][FREQS] */
    double *step_c, *step_s;     /* [BLOCK][FREQS] */
    double *coef;                /* [D]: 2 cos(w), once per lane */
    double *x0, *x1;             /* [D]: rows 0 and 1 of a sub-block, lanes interleaved */
    double *row;                 /* [D]: a double row for `convert` */
    float *out;                  /* [blocks * BLOCK][D] */
} tables;

__attribute__((noinline)) static void fill(const tables *t)
{
    const size_t n = (size_t)t->blocks * BLOCK * D;
    float *out = t->out;
    for (size_t i = 0; i < n; ++i) {
        out[i] = 1.0f;
    }
    __asm__ volatile("" ::"r"(out) : "memory");
}

__attribute__((noinline)) static void convert(const tables *t)
{
    const double *restrict src = t->row;
    for (int r = 0; r < t->blocks * BLOCK; ++r) {
        float *restrict o = t->out + (size_t)r * D;
        for (int j = 0; j < D; ++j) {
            o[j] = (float)src[j];
        }
    }
    __asm__ volatile("" ::"r"(t->out) : "memory");
}

/* Rows of blocks b and b + 1 from one load of each step row. */
__attribute__((noinline)) static void product_pair(const tables *t, int b)
{
    const double *restrict s0 = t->anchor_s + (size_t)b * FREQS;
    const double *restrict c0 = t->anchor_c + (size_t)b * FREQS;
    const double *restrict s1 = s0 + FREQS, *restrict c1 = c0 + FREQS;
    for (int i = 0; i < BLOCK; ++i) {
        const double *restrict c = t->step_c + i * FREQS;
        const double *restrict s = t->step_s + i * FREQS;
        float *restrict o = t->out + ((size_t)b * BLOCK + i) * D;
        float *restrict o2 = o + (size_t)BLOCK * D;
        for (int j = 0; j < FREQS; ++j) {
            const double cj = c[j], sj = s[j];
            o[2 * j] = (float)(s0[j] * cj + c0[j] * sj);
            o[2 * j + 1] = (float)(c0[j] * cj - s0[j] * sj);
            o2[2 * j] = (float)(s1[j] * cj + c1[j] * sj);
            o2[2 * j + 1] = (float)(c1[j] * cj - s1[j] * sj);
        }
    }
}

__attribute__((noinline)) static void product(const tables *t)
{
    for (int b = 0; b + 1 < t->blocks; b += 2) {
        product_pair(t, b);
    }
    __asm__ volatile("" ::"r"(t->out) : "memory");
}

/* Rows q and q + 1 of block b by the product formula, also kept as doubles. */
__attribute__((noinline)) static void two_product_rows(const tables *t, int b, int q)
{
    const double *restrict s0 = t->anchor_s + (size_t)b * FREQS;
    const double *restrict c0 = t->anchor_c + (size_t)b * FREQS;
    const double *restrict ca = t->step_c + q * FREQS, *restrict sa = t->step_s + q * FREQS;
    const double *restrict cb = ca + FREQS, *restrict sb = sa + FREQS;
    double *restrict x0 = t->x0, *restrict x1 = t->x1;
    float *restrict o = t->out + ((size_t)b * BLOCK + q) * D;
    float *restrict o1 = o + D;
    for (int j = 0; j < FREQS; ++j) {
        const double a = s0[j] * ca[j] + c0[j] * sa[j], c = c0[j] * ca[j] - s0[j] * sa[j];
        const double a1 = s0[j] * cb[j] + c0[j] * sb[j], c1 = c0[j] * cb[j] - s0[j] * sb[j];
        x0[2 * j] = a, x0[2 * j + 1] = c, x1[2 * j] = a1, x1[2 * j + 1] = c1;
        o[2 * j] = (float)a, o[2 * j + 1] = (float)c;
        o1[2 * j] = (float)a1, o1[2 * j + 1] = (float)c1;
    }
}

/* Rows q + 2 .. q + sub - 1, two per pass over the lanes.  The faster of
 * the orders tried: 16 lanes in registers down all rows of the sub-block
 * (64 bytes into each of six rows per step) ran slower.  On the AMD EPYC
 * these rows alone cost as much per element as the product formula's: the
 * conversions and stores bound both, not the multiplies. */
static void recurrence_rows(const tables *t, int b, int q, int sub)
{
    const double *restrict k = t->coef;
    double *restrict x0 = t->x0, *restrict x1 = t->x1;
    for (int r = q + 2; r + 1 < q + sub; r += 2) {
        float *restrict o = t->out + ((size_t)b * BLOCK + r) * D;
        float *restrict o1 = o + D;
        for (int j = 0; j < D; ++j) {
            const double a = k[j] * x1[j] - x0[j];
            const double c = k[j] * a - x1[j];
            o[j] = (float)a, o1[j] = (float)c;
            x0[j] = a, x1[j] = c;
        }
    }
}

static void recurrence(const tables *t, int sub)
{
    for (int b = 0; b < t->blocks; ++b) {
        for (int q = 0; q < BLOCK; q += sub) {
            two_product_rows(t, b, q);
            recurrence_rows(t, b, q, sub);
        }
    }
    __asm__ volatile("" ::"r"(t->out) : "memory");
}

/* The recurrence rows of 8-row sub-blocks alone (6 of every 8 rows), from
 * fixed rows 0 and 1: what the recurrence itself costs per element. */
__attribute__((noinline)) static void recurrence_rows_only(const tables *t)
{
    for (int b = 0; b < t->blocks; ++b) {
        for (int q = 0; q < BLOCK; q += 8) {
            recurrence_rows(t, b, q, 8);
        }
    }
    __asm__ volatile("" ::"r"(t->out) : "memory");
}

__attribute__((noinline)) static void recurrence8(const tables *t)
{
    recurrence(t, 8);
}

__attribute__((noinline)) static void recurrence32(const tables *t)
{
    recurrence(t, 32);
}

static double frequency(int j)
{
    return pow(10000.0, -2.0 * j / D);
}

/* Worst |out - exact| in units of 2**-24 over the whole table. */
static double worst_error(const tables *t)
{
    double worst = 0.0;
    for (int j = 0; j < FREQS; ++j) {
        const long double w = powl(10000.0L, -2.0L * j / D);
        for (int r = 0; r < t->blocks * BLOCK; ++r) {
            const float *o = t->out + (size_t)r * D + 2 * j;
            const double es = fabs((double)((long double)o[0] - sinl(r * w)));
            const double ec = fabs((double)((long double)o[1] - cosl(r * w)));
            worst = fmax(worst, fmax(es, ec));
        }
    }
    return worst / ldexp(1.0, -24);
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
    const int rows = argc > 1 ? atoi(argv[1]) : 5000;
    const int rounds = argc > 2 ? atoi(argv[2]) : 41;
    tables t = {.blocks = (rows + 2 * BLOCK - 1) / (2 * BLOCK) * 2}; /* whole block pairs */
    const size_t elements = (size_t)t.blocks * BLOCK * D;
    t.anchor_s = alloc(sizeof(double) * t.blocks * FREQS);
    t.anchor_c = alloc(sizeof(double) * t.blocks * FREQS);
    t.step_c = alloc(sizeof(double) * BLOCK * FREQS);
    t.step_s = alloc(sizeof(double) * BLOCK * FREQS);
    t.coef = alloc(sizeof(double) * D);
    t.x0 = alloc(sizeof(double) * D);
    t.x1 = alloc(sizeof(double) * D);
    t.row = alloc(sizeof(double) * D);
    t.out = alloc(sizeof(float) * elements);
    for (int j = 0; j < FREQS; ++j) {
        const double w = frequency(j);
        for (int r = 0; r < BLOCK; ++r) {
            t.step_c[r * FREQS + j] = cos(r * w);
            t.step_s[r * FREQS + j] = sin(r * w);
        }
        for (int b = 0; b < t.blocks; ++b) {
            t.anchor_s[(size_t)b * FREQS + j] = sin((double)b * BLOCK * w);
            t.anchor_c[(size_t)b * FREQS + j] = cos((double)b * BLOCK * w);
        }
        t.coef[2 * j] = t.coef[2 * j + 1] = 2.0 * t.step_c[FREQS + j];
        t.row[2 * j] = sin(w), t.row[2 * j + 1] = cos(w);
    }

    static const char *const names[] = {"fill",         "convert",       "product",
                                        "recurrence/8", "recurrence/32", "its rows only"};
    void (*const loops[])(const tables *) = {fill,        convert,      product,
                                             recurrence8, recurrence32, recurrence_rows_only};
    static const double written[] = {1.0, 1.0, 1.0, 1.0, 1.0, 0.75}; /* of the elements */
    enum { LOOPS = 6 };
    double *times = alloc(sizeof(double) * LOOPS * rounds);
    for (int k = 0; k < LOOPS; ++k) {
        loops[k](&t); /* warm up: pages, caches */
    }
    for (int i = 0; i < rounds; ++i) {
        for (int k = 0; k < LOOPS; ++k) {
            const double t0 = now();
            loops[k](&t);
            times[k * rounds + i] = now() - t0;
        }
    }
    printf("%d x %d float32 (%.1f MB), %d rounds, medians:\n", t.blocks * BLOCK, D,
           elements * 4.0 / 1e6, rounds);
    double floor_time = 0.0;
    for (int k = 0; k < LOOPS; ++k) {
        qsort(times + k * rounds, (size_t)rounds, sizeof(double), cmp_double);
        const double median = times[k * rounds + rounds / 2];
        floor_time = k == 0 ? median : floor_time;
        printf("  %-13s %8.3f ms  %.3f ns/element written  %.2fx fill\n", names[k],
               median * 1e3, median / (written[k] * (double)elements) * 1e9,
               median / floor_time);
    }
    product(&t);
    float *product_out = alloc(sizeof(float) * elements);
    memcpy(product_out, t.out, sizeof(float) * elements);
    const double product_error = worst_error(&t);
    printf("worst float32 error (units of 2**-24): product %.3f", product_error);
    size_t differ[2] = {0, 0};
    for (int k = 0; k < 2; ++k) {
        (k == 0 ? recurrence8 : recurrence32)(&t);
        for (size_t i = 0; i < elements; ++i) {
            differ[k] += product_out[i] != t.out[i];
        }
        printf(", %s %.3f", names[3 + k], worst_error(&t));
    }
    printf("\nelements rounded differently from the product: %zu (recurrence/8), %zu "
           "(recurrence/32) of %zu\n",
           differ[0], differ[1], elements);
    free(product_out);
    free(times);
    free(t.out), free(t.row), free(t.x1), free(t.x0), free(t.coef);
    free(t.step_s), free(t.step_c), free(t.anchor_c), free(t.anchor_s);
    return 0;
}
