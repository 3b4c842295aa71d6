/*
 * Tables of the value generator (core/table.h): their memory, the cache
 * that makes small calls cheap, and the anchors a table keeps.  What goes
 * into a table (correctly rounded frequencies, step rows) is made above,
 * by the SIMD level's loops (plan/frequencies.c); here only memory and
 * locks.
 *
 * Why a cache: a small call such as encode(16, 64) must finish in about a
 * microsecond, but its frequencies need d/2 correctly rounded pows (pow.h,
 * ~5-10 ns each, plus ~0.2 us for ln n) and its step rows 32 * d/2 sincos
 * (~1.5 ns each).  Tables are immutable once built, so one built for (n, d)
 * serves every later call and thread; a mutex guards only the lookup and
 * the reference count.
 */
#include "core/platform.h"

#include <stdlib.h>
#include <string.h>

#include "core/table.h"
#include "core/threads.h"

/* The cache keeps at most CACHE_SLOTS tables and CACHE_BYTES in all (a
 * table of d = 4096 is 1 MB), least recently used out first. */
#define CACHE_BYTES ((size_t)8 << 20)
#define CACHE_SLOTS 8

/* One allocation: header, freq, then step_c and step_s unless wide. */
sinpe_table *sinpe_table_alloc(ptrdiff_t nfreq)
{
    if (nfreq < 1 || (size_t)nfreq > (SIZE_MAX - sizeof(sinpe_table)) / sizeof(double)) {
        return NULL;
    }
    /* not wide: nfreq <= 2048, so this product is small; freq, the step
     * rows, then the kept anchors */
    const size_t doubles =
        (size_t)nfreq *
        (sinpe_table_is_wide(nfreq) ? 1 : 1 + 2 * SINPE_BLOCK_ROWS + 2 * SINPE_KEPT_ANCHORS);
    const size_t bytes = sizeof(sinpe_table) + doubles * sizeof(double);
    sinpe_table *table = malloc(bytes);
    if (table == NULL) {
        return NULL;
    }
    double *freq = (double *)(table + 1);
    table->nfreq = nfreq;
    table->freq = freq;
    table->step_c = sinpe_table_is_wide(nfreq) ? NULL : freq + nfreq;
    table->step_s = sinpe_table_is_wide(nfreq) ? NULL : table->step_c + (size_t)SINPE_BLOCK_ROWS * nfreq;
    for (int i = 0; i < SINPE_KEPT_ANCHORS; ++i) {
        double *kept = sinpe_table_is_wide(nfreq) ? NULL
                                      : (double *)table->step_s +
                                            (size_t)(SINPE_BLOCK_ROWS + 2 * i) * nfreq;
        table->kept[i] = (sinpe_anchors){SINPE_NO_BLOCK, 0, kept, kept != NULL ? kept + nfreq : NULL};
    }
    table->bytes = bytes;
    table->refs = 1;
    table->cached = 0;
    table->key_kind = SINPE_TABLE_OTHER;
    table->key_n = 0.0;
    table->key_d = 0;
    table->last_use = 0;
    return table;
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

/* ------------------------------------------------------------------ */
/* The cache. */

static sinpe_fork_lock cache_lock = SINPE_FORK_LOCK_INIT; /* taken around fork() too */
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

/* Called with cache_lock held: the cached table of (kind, n, d), referenced
 * and its use recorded, or NULL. */
static sinpe_table *find(int kind, double n, ptrdiff_t d)
{
    for (int i = 0; i < CACHE_SLOTS; ++i) {
        if (cache[i] != NULL && same_key(cache[i], kind, n, d)) {
            cache[i]->refs++;
            cache[i]->last_use = ++cache_clock;
            return cache[i];
        }
    }
    return NULL;
}

sinpe_table *sinpe_table_lookup(int kind, double n, ptrdiff_t d)
{
    sinpe_fork_lock_acquire(&cache_lock);
    sinpe_table *found = find(kind, n, d);
    sinpe_fork_lock_release(&cache_lock);
    return found;
}

sinpe_table *sinpe_table_keep(sinpe_table *built)
{
    sinpe_fork_lock_acquire(&cache_lock);
    sinpe_table *table = find(built->key_kind, built->key_n, built->key_d);
    if (table == NULL) {
        table = built;
        built = NULL;
        insert(table);
        table->last_use = ++cache_clock;
    }
    sinpe_fork_lock_release(&cache_lock);
    if (built != NULL) {
        table_free(built);
    }
    return table;
}

void sinpe_table_release(sinpe_table *table)
{
    if (table == NULL) {
        return;
    }
    /* The count changes under the lock only: a cached table is shared, and
     * an evicted one may still be in use by other calls. */
    sinpe_fork_lock_acquire(&cache_lock);
    const int last = --table->refs == 0;
    sinpe_fork_lock_release(&cache_lock);
    if (last) {
        table_free(table);
    }
}

void sinpe_table_cache_clear(void)
{
    sinpe_fork_lock_acquire(&cache_lock);
    for (int i = 0; i < CACHE_SLOTS; ++i) {
        if (cache[i] != NULL) {
            evict(i);
        }
    }
    sinpe_fork_lock_release(&cache_lock);
}

/* Kept anchors: found and counted under the cache's lock (shared by every
 * table: held for a few instructions), made outside it. */
sinpe_anchors *sinpe_anchors_claim(sinpe_table *table, int64_t p0, int *make)
{
    *make = 0;
    if (table->kept[0].sin == NULL) {
        return NULL;
    }
    sinpe_anchors *found = NULL, *unused = NULL;
    sinpe_fork_lock_acquire(&cache_lock);
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
            *make = 1;
        }
    }
    sinpe_fork_lock_release(&cache_lock);
    return slot;
}

void sinpe_anchors_made(sinpe_anchors *anchors, int64_t p0)
{
    sinpe_fork_lock_acquire(&cache_lock);
    anchors->p0 = p0;
    sinpe_fork_lock_release(&cache_lock);
}

void sinpe_anchors_release(const sinpe_anchors *anchors)
{
    if (anchors != NULL) {
        sinpe_fork_lock_acquire(&cache_lock);
        ((sinpe_anchors *)anchors)->refs--;
        sinpe_fork_lock_release(&cache_lock);
    }
}
