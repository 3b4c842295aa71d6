/*
 * The frequency tables of a plan (plan/frequencies.h): their frequencies,
 * correctly rounded (core/pow.h's passes, the fast one by the SIMD level's
 * loop), their step rows and kept anchors, by the level's sincos loop
 * (kernels/kernels.h), and the cache (core/table.c) that keeps them for
 * later calls.
 */
#include "core/platform.h"

#include <math.h>
#include <string.h>

#include "core/pow.h"
#include "core/table.h"
#include "kernels/kernels.h"
#include "plan/frequencies.h"

/* Once the frequencies are in: their largest (for the calls' angle check,
 * NaN when one is negative or NaN) and the step rows: row r holds cos and
 * sin of r * freq[k]. */
static void finish_table(sinpe_table *table)
{
    const ptrdiff_t nfreq = table->nfreq;
    double most = 0.0;
    for (ptrdiff_t k = 0; k < nfreq; ++k) {
        const double w = table->freq[k];
        if (!(w >= 0.0)) { /* negative or NaN */
            most = NAN;
            break;
        }
        most = w > most ? w : most;
    }
    table->max_freq = most;
    for (int r = 0; table->step_c != NULL && r < SINPE_BLOCK_ROWS; ++r) {
        sinpe_sincos_row(table->freq, (double)r, nfreq, (double *)table->step_s + r * nfreq,
                         (double *)table->step_c + r * nfreq);
    }
}

/* freq[k] = n**e for k < nfreq, e = -(step * k) / divisor (the schedules'
 * exponents: step * k is exact, one rounding in the division), correctly
 * rounded: the fast pass for all, then the accurate pass for the few
 * (about 1 in 700) that the fast pass could not round surely and left
 * negative. */
static void fill_powers(double n, double step, double divisor, double *freq, ptrdiff_t nfreq)
{
    const sinpe_pow_base base = sinpe_pow_prepare(n);
    const ptrdiff_t chunk = (ptrdiff_t)1 << 20;
    for (ptrdiff_t k0 = 0; k0 < nfreq; k0 += chunk) {
        const int count = (int)(nfreq - k0 < chunk ? nfreq - k0 : chunk);
        sinpe_kernels_active()->powers(base, step, divisor, k0, count, freq + k0);
    }
    for (ptrdiff_t k = 0; k < nfreq; ++k) {
        if (freq[k] < 0.0) {
            freq[k] = sinpe_pow_accurate(&base, -(step * (double)k) / divisor);
        }
    }
}

/* A schedule's table: nfreq frequencies n**(-(step * k) / divisor), keyed
 * by (kind, n, d). */
static sinpe_table *build(int kind, double n, ptrdiff_t d, ptrdiff_t nfreq, double step,
                          double divisor)
{
    sinpe_table *table = sinpe_table_alloc(nfreq);
    if (table == NULL) {
        return NULL;
    }
    fill_powers(n, step, divisor, (double *)table->freq, nfreq);
    finish_table(table);
    table->key_kind = kind;
    table->key_n = n;
    table->key_d = d;
    return table;
}

/* From the cache, or built (outside its lock: another thread may build the
 * same table meanwhile; the first one kept wins).  Wide tables are built
 * for the call alone. */
static sinpe_table *cached(int kind, double n, ptrdiff_t d, ptrdiff_t nfreq, double step,
                           double divisor)
{
    if (sinpe_table_is_wide(nfreq)) {
        return build(kind, n, d, nfreq, step, divisor);
    }
    sinpe_table *table = sinpe_table_lookup(kind, n, d);
    if (table != NULL) {
        return table;
    }
    sinpe_table *built = build(kind, n, d, nfreq, step, divisor);
    return built != NULL ? sinpe_table_keep(built) : NULL;
}

sinpe_table *sinpe_frequencies_paper(double n, ptrdiff_t d)
{
    /* an odd d ends with a lone sine */
    return cached(SINPE_TABLE_PAPER, n, d, d / 2 + d % 2, 2.0, (double)d);
}

sinpe_table *sinpe_frequencies_fairseq(double n, ptrdiff_t d)
{
    const ptrdiff_t nfreq = d / 2;
    const double denominator = nfreq - 1 > 1 ? (double)(nfreq - 1) : 1.0;
    return cached(SINPE_TABLE_FAIRSEQ, n, d, nfreq, 1.0, denominator);
}

sinpe_table *sinpe_frequencies_given(const double *freq, ptrdiff_t nfreq)
{
    sinpe_table *table = sinpe_table_alloc(nfreq);
    if (table == NULL) {
        return NULL;
    }
    memcpy((double *)table->freq, freq, (size_t)nfreq * sizeof(double));
    finish_table(table);
    return table;
}

const sinpe_anchors *sinpe_frequencies_anchors(sinpe_table *table, int64_t p0)
{
    int make;
    sinpe_anchors *slot = sinpe_anchors_claim(table, p0, &make);
    if (make) {
        sinpe_sincos_row(table->freq, (double)p0, table->nfreq, slot->sin, slot->cos);
        sinpe_anchors_made(slot, p0);
    }
    return slot;
}
