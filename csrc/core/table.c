/*
 * Tables of the value generator (see table.h): frequencies, step rows,
 * anchors, and the cache that makes small calls cheap.
 *
 * Why a cache: a small call such as encode(16, 64) must finish in about a
 * microsecond, but its frequencies need d/2 correctly rounded pows (pow.h,
 * ~5-10 ns each, plus ~0.2 us for ln n) and its step rows 32 * d/2 sincos
 * (~1.5 ns each).  Tables are immutable once built, so one built for (n, d)
 * serves every later call and thread; a mutex guards only the lookup and
 * the reference count.
 */
#include "core/platform.h"

#include "kernels/kernels.h"
#include "core/table.h"
#include "core/threads.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The cache keeps at most CACHE_SLOTS tables and CACHE_BYTES in all (a
 * table of d = 4096 is 1 MB), least recently used out first. */
#define CACHE_BYTES ((size_t)8 << 20)
#define CACHE_SLOTS 8

enum { TABLE_OTHER, TABLE_PAPER, TABLE_FAIRSEQ };

static int is_wide(ptrdiff_t nfreq)
{
    return nfreq > SINPE_TABLE_MAX_STEP_FREQS;
}

/* One allocation: header, freq, then step_c and step_s unless wide.  NULL
 * on overflow or OOM. */
static sinpe_table *table_alloc(ptrdiff_t nfreq)
{
    if (nfreq < 1 || (size_t)nfreq > (SIZE_MAX - sizeof(sinpe_table)) / sizeof(double)) {
        return NULL;
    }
    /* not wide: nfreq <= 2048, so this product is small; freq, the step
     * rows, then the kept anchors */
    const size_t doubles =
        (size_t)nfreq *
        (is_wide(nfreq) ? 1 : 1 + 2 * SINPE_BLOCK_ROWS + 2 * SINPE_KEPT_ANCHORS);
    const size_t bytes = sizeof(sinpe_table) + doubles * sizeof(double);
    sinpe_table *table = malloc(bytes);
    if (table == NULL) {
        return NULL;
    }
    double *freq = (double *)(table + 1);
    table->nfreq = nfreq;
    table->freq = freq;
    table->step_c = is_wide(nfreq) ? NULL : freq + nfreq;
    table->step_s = is_wide(nfreq) ? NULL : table->step_c + (size_t)SINPE_BLOCK_ROWS * nfreq;
    for (int i = 0; i < SINPE_KEPT_ANCHORS; ++i) {
        double *kept = is_wide(nfreq) ? NULL
                                      : (double *)table->step_s +
                                            (size_t)(SINPE_BLOCK_ROWS + 2 * i) * nfreq;
        table->kept[i] = (sinpe_anchors){SINPE_NO_BLOCK, 0, kept, kept != NULL ? kept + nfreq : NULL};
    }
    table->bytes = bytes;
    table->refs = 1;
    table->cached = 0;
    table->key_kind = TABLE_OTHER;
    table->key_n = 0.0;
    table->key_d = 0;
    table->last_use = 0;
    return table;
}

/* Step row r of frequencies freq[0 .. count): cos and sin of r * freq[k]. */
static void fill_step_row(const double *freq, ptrdiff_t count, int r, double *c, double *s)
{
    sinpe_kernels_active()->sincos(freq, (double)r, count, s, c);
}

/* Once the frequencies are in: their largest (for the calls' angle check,
 * NaN when one is negative or NaN) and the step rows. */
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
        fill_step_row(table->freq, nfreq, r, (double *)table->step_c + r * nfreq,
                      (double *)table->step_s + r * nfreq);
    }
}

uint32_t sinpe_residues(int64_t first, int64_t count)
{
    if (count >= SINPE_BLOCK_ROWS) {
        return 0xffffffffu;
    }
    uint32_t mask = 0;
    for (int64_t p = first; p < first + count; ++p) {
        mask |= 1u << (p - sinpe_block_start(p));
    }
    return mask;
}

sinpe_steps sinpe_steps_for(const sinpe_table *table, ptrdiff_t k0, ptrdiff_t k1,
                            uint32_t residues, double *buffer)
{
    sinpe_steps steps;
    if (table->step_c != NULL) {
        steps.c = table->step_c + k0;
        steps.s = table->step_s + k0;
        steps.stride = table->nfreq;
        return steps;
    }
    const ptrdiff_t stride = k1 - k0;
    double *c = buffer;
    double *s = buffer + SINPE_BLOCK_ROWS * stride;
    for (int r = 0; r < SINPE_BLOCK_ROWS; ++r) {
        if (residues & (1u << r)) {
            fill_step_row(table->freq + k0, stride, r, c + r * stride, s + r * stride);
        }
    }
    steps.c = c;
    steps.s = s;
    steps.stride = stride;
    return steps;
}

sinpe_table *sinpe_table_from_freq(const double *freq, ptrdiff_t nfreq)
{
    sinpe_table *table = table_alloc(nfreq);
    if (table == NULL) {
        return NULL;
    }
    memcpy((double *)table->freq, freq, (size_t)nfreq * sizeof(double));
    finish_table(table);
    return table;
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

static sinpe_table *build_standard(double n, ptrdiff_t d)
{
    const ptrdiff_t nfreq = d / 2 + d % 2; /* an odd d ends with a lone sine */
    sinpe_table *table = table_alloc(nfreq);
    if (table == NULL) {
        return NULL;
    }
    fill_powers(n, 2.0, (double)d, (double *)table->freq, nfreq);
    finish_table(table);
    table->key_kind = TABLE_PAPER;
    table->key_n = n;
    table->key_d = d;
    return table;
}

static sinpe_table *build_fairseq(double n, ptrdiff_t d)
{
    const ptrdiff_t nfreq = d / 2;
    sinpe_table *table = table_alloc(nfreq);
    if (table == NULL) {
        return NULL;
    }
    const double denominator = nfreq - 1 > 1 ? (double)(nfreq - 1) : 1.0;
    fill_powers(n, 1.0, denominator, (double *)table->freq, nfreq);
    finish_table(table);
    table->key_kind = TABLE_FAIRSEQ;
    table->key_n = n;
    table->key_d = d;
    return table;
}

/* ------------------------------------------------------------------ */
/* The cache. */

static sinpe_mutex cache_lock = SINPE_MUTEX_INIT;
static sinpe_table *cache[CACHE_SLOTS];
static size_t cache_bytes;
static uint64_t cache_clock;

static int same_key(const sinpe_table *table, int kind, double n, ptrdiff_t d)
{
    /* compare bits, so -0.0/0.0 or NaN could never alias (they are rejected
     * before this anyway) */
    return table->key_kind == kind && table->key_d == d &&
           memcmp(&table->key_n, &n, sizeof n) == 0;
}

static void table_free(sinpe_table *table)
{
    free(table);
}

/* Called with cache_lock held: drop slot i from the cache. */
static void evict(int i)
{
    sinpe_table *table = cache[i];
    cache[i] = NULL;
    cache_bytes -= table->bytes;
    table->cached = 0;
    if (--table->refs == 0) {
        table_free(table);
    }
}

/* Called with cache_lock held: make room for the table, then insert it. */
static void insert(sinpe_table *table)
{
    for (;;) {
        int empty = -1, oldest = -1;
        for (int i = 0; i < CACHE_SLOTS; ++i) {
            if (cache[i] == NULL) {
                empty = i;
            } else if (oldest < 0 || cache[i]->last_use < cache[oldest]->last_use) {
                oldest = i;
            }
        }
        if (empty >= 0 && cache_bytes + table->bytes <= CACHE_BYTES) {
            cache[empty] = table;
            cache_bytes += table->bytes;
            table->cached = 1;
            table->refs++; /* the cache's own reference */
            return;
        }
        if (oldest < 0) {
            return; /* cannot happen (a table is < CACHE_BYTES); stays uncached */
        }
        evict(oldest);
    }
}

static sinpe_table *lookup(int kind, double n, ptrdiff_t d)
{
    sinpe_table *found = NULL;
    sinpe_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; ++i) {
        if (cache[i] != NULL && same_key(cache[i], kind, n, d)) {
            found = cache[i];
            found->refs++;
            found->last_use = ++cache_clock;
            break;
        }
    }
    sinpe_mutex_unlock(&cache_lock);
    return found;
}

static sinpe_table *build(int kind, double n, ptrdiff_t d)
{
    return kind == TABLE_PAPER ? build_standard(n, d) : build_fairseq(n, d);
}

static sinpe_table *cached(int kind, double n, ptrdiff_t d)
{
    if (is_wide(kind == TABLE_PAPER ? d / 2 + d % 2 : d / 2)) {
        return build(kind, n, d);
    }
    sinpe_threads_once();
    sinpe_table *table = lookup(kind, n, d);
    if (table != NULL) {
        return table;
    }
    /* Built outside the lock: another thread may build the same table
     * meanwhile; the first one inserted wins and the other is dropped. */
    sinpe_table *built = build(kind, n, d);
    if (built == NULL) {
        return NULL;
    }
    sinpe_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; ++i) {
        if (cache[i] != NULL && same_key(cache[i], kind, n, d)) {
            table = cache[i];
            table->refs++;
            break;
        }
    }
    if (table == NULL) {
        table = built;
        built = NULL;
        insert(table);
    }
    table->last_use = ++cache_clock;
    sinpe_mutex_unlock(&cache_lock);
    if (built != NULL) {
        table_free(built);
    }
    return table;
}

sinpe_table *sinpe_table_standard(double n, ptrdiff_t d)
{
    return cached(TABLE_PAPER, n, d);
}

sinpe_table *sinpe_table_fairseq(double n, ptrdiff_t d)
{
    return cached(TABLE_FAIRSEQ, n, d);
}

void sinpe_table_release(sinpe_table *table)
{
    if (table == NULL) {
        return;
    }
    /* The count changes under the lock only: a cached table is shared, and
     * an evicted one may still be in use by other calls. */
    sinpe_mutex_lock(&cache_lock);
    const int last = --table->refs == 0;
    sinpe_mutex_unlock(&cache_lock);
    if (last) {
        table_free(table);
    }
}

void sinpe_table_cache_clear(void)
{
    sinpe_mutex_lock(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; ++i) {
        if (cache[i] != NULL) {
            evict(i);
        }
    }
    sinpe_mutex_unlock(&cache_lock);
}

/* Kept anchors: found and counted under the cache's lock (shared by every
 * table: held for a few instructions), made outside it. */
const sinpe_anchors *sinpe_anchors_hold(sinpe_table *table, int64_t p0)
{
    if (table->kept[0].sin == NULL) {
        return NULL;
    }
    sinpe_anchors *found = NULL, *unused = NULL;
    sinpe_mutex_lock(&cache_lock);
    for (int i = 0; i < SINPE_KEPT_ANCHORS; ++i) {
        sinpe_anchors *a = &table->kept[i];
        if (a->p0 == p0) {
            found = a;
        } else if (a->refs == 0) {
            unused = a;
        }
    }
    sinpe_anchors *slot = found != NULL ? found : unused;
    if (slot != NULL) {
        slot->refs++;
        if (found == NULL) {
            slot->p0 = SINPE_NO_BLOCK; /* no one else takes it, or reads it, meanwhile */
        }
    }
    sinpe_mutex_unlock(&cache_lock);
    if (slot != NULL && found == NULL) {
        sinpe_anchor_sincos(table, p0, 0, table->nfreq, slot->sin, slot->cos);
        sinpe_mutex_lock(&cache_lock);
        slot->p0 = p0;
        sinpe_mutex_unlock(&cache_lock);
    }
    return slot;
}

void sinpe_anchors_release(const sinpe_anchors *anchors)
{
    if (anchors != NULL) {
        sinpe_mutex_lock(&cache_lock);
        ((sinpe_anchors *)anchors)->refs--;
        sinpe_mutex_unlock(&cache_lock);
    }
}

/* After fork() in a child, the lock may have been held by a thread that no
 * longer exists; threads.c calls these around fork. */
void sinpe_table_cache_prefork(void)
{
    sinpe_mutex_lock(&cache_lock);
}

void sinpe_table_cache_postfork(void)
{
    sinpe_mutex_unlock(&cache_lock);
}

/* ------------------------------------------------------------------ */
/* Anchors and values. */

void sinpe_anchor_sincos(const sinpe_table *table, int64_t p0, ptrdiff_t k0, ptrdiff_t k1,
                         double *sin_out, double *cos_out)
{
    sinpe_kernels_active()->sincos(table->freq + k0, (double)p0, k1 - k0, sin_out, cos_out);
}
