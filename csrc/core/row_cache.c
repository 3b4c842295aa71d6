/*
 * The cache of made tables (row_cache.h).  One lock guards the slots, the
 * reference counts and the list of recent requests; tables are made and
 * read outside it.
 */
#include "core/platform.h"

#include <string.h>

#include "core/elements.h"
#include "core/row_cache.h"
#include "core/threads.h"

/* Requests remembered to tell a repeated table from a one-off. */
#define RECENT 8

static sinpe_fork_lock lock = SINPE_FORK_LOCK_INIT; /* taken around fork() too */
static sinpe_rows *slots[SINPE_ROW_CACHE_SLOTS];
static size_t kept_bytes;
static uint64_t clock_now;
static struct {
    sinpe_rows_key key;
    int64_t first, count;
} recent[RECENT];
static int recent_next, recent_used;

static int same_key(const sinpe_rows_key *a, const sinpe_rows_key *b)
{
    /* n and scale by their bits: the values are a function of them */
    return a->schedule == b->schedule && memcmp(&a->n, &b->n, sizeof a->n) == 0 &&
           a->d == b->d && a->layout == b->layout && a->dtype == b->dtype &&
           a->rotation == b->rotation && a->inverse == b->inverse &&
           memcmp(&a->scale, &b->scale, sizeof a->scale) == 0;
}

static size_t table_bytes(const sinpe_rows_key *key, int64_t count, size_t *row_bytes)
{
    *row_bytes = (size_t)key->d * sinpe_itemsize(key->dtype);
    size_t bytes;
    /* SIZE_MAX: never kept */
    return sinpe_mul_overflow(*row_bytes, (size_t)count, &bytes) ? SIZE_MAX : bytes;
}

/* The header, then the data on a cache line. */
static size_t rows_header(void)
{
    return (sizeof(sinpe_rows) + 63) / 64 * 64;
}

static void rows_free(sinpe_rows *rows)
{
    sinpe_pages_free(rows, rows_header() + rows->bytes);
}

sinpe_rows *sinpe_rows_find(const sinpe_rows_key *key, int64_t first, int64_t count)
{
    sinpe_rows *found = NULL;
    sinpe_fork_lock_acquire(&lock);
    for (int i = 0; i < SINPE_ROW_CACHE_SLOTS; ++i) {
        sinpe_rows *r = slots[i];
        if (r != NULL && same_key(&r->key, key) && r->first <= first &&
            first + count <= r->first + r->count) {
            found = r;
            found->refs++;
            found->last_use = ++clock_now;
            break;
        }
    }
    sinpe_fork_lock_release(&lock);
    return found;
}

/* Whether to make and keep the table of these positions: asked for before
 * (and not kept), and of a size the cache keeps.  Records the request. */
static int rows_wanted(const sinpe_rows_key *key, int64_t first, int64_t count)
{
    size_t row_bytes;
    const size_t bytes = table_bytes(key, count, &row_bytes);
    if (bytes < SINPE_ROW_CACHE_MIN_BYTES || bytes > SINPE_ROW_CACHE_MAX_BYTES) {
        return 0;
    }
    int seen = 0;
    sinpe_fork_lock_acquire(&lock);
    for (int i = 0; i < recent_used; ++i) {
        seen |= same_key(&recent[i].key, key) && recent[i].first == first &&
                recent[i].count == count;
    }
    if (!seen) {
        recent[recent_next].key = *key;
        recent[recent_next].first = first;
        recent[recent_next].count = count;
        recent_next = (recent_next + 1) % RECENT;
        recent_used += recent_used < RECENT;
    }
    sinpe_fork_lock_release(&lock);
    return seen;
}

/* Room for a table of these positions (data uninitialised, one reference),
 * or NULL when out of memory. */
static sinpe_rows *rows_new(const sinpe_rows_key *key, int64_t first, int64_t count)
{
    size_t row_bytes;
    const size_t bytes = table_bytes(key, count, &row_bytes);
    if (bytes > SINPE_ROW_CACHE_MAX_BYTES) {
        return NULL;
    }
    /* pages of their own: clear_cache gives them back (platform.h) */
    sinpe_rows *rows = sinpe_pages_alloc(rows_header() + bytes);
    if (rows == NULL) {
        return NULL;
    }
    rows->key = *key;
    rows->first = first;
    rows->count = count;
    rows->row_bytes = row_bytes;
    rows->bytes = bytes;
    rows->data = (char *)rows + rows_header(); /* a cache line (malloc's 16 bytes under ASan) */
    rows->refs = 1;
    rows->last_use = 0;
    return rows;
}

sinpe_rows *sinpe_rows_find_or_new(const sinpe_rows_key *key, int64_t first, int64_t count,
                                   int *fresh)
{
    sinpe_rows *rows = sinpe_rows_find(key, first, count);
    *fresh = rows == NULL && rows_wanted(key, first, count);
    if (*fresh) {
        rows = rows_new(key, first, count);
        *fresh = rows != NULL;
    }
    return rows;
}

/* With the lock held: drop slot i. */
static void evict(int i)
{
    sinpe_rows *rows = slots[i];
    slots[i] = NULL;
    kept_bytes -= rows->bytes;
    if (--rows->refs == 0) {
        rows_free(rows);
    }
}

void sinpe_rows_keep(sinpe_rows *rows)
{
    sinpe_fork_lock_acquire(&lock);
    for (;;) {
        int empty = -1, oldest = -1;
        for (int i = 0; i < SINPE_ROW_CACHE_SLOTS; ++i) {
            if (slots[i] == NULL) {
                empty = i;
            } else if (oldest < 0 || slots[i]->last_use < slots[oldest]->last_use) {
                oldest = i;
            }
        }
        if (empty >= 0 && kept_bytes + rows->bytes <= SINPE_ROW_CACHE_BYTES) {
            slots[empty] = rows;
            kept_bytes += rows->bytes;
            rows->refs++;
            rows->last_use = ++clock_now;
            break;
        }
        if (oldest < 0) {
            break; /* cannot happen: one table is below the total */
        }
        evict(oldest);
    }
    sinpe_fork_lock_release(&lock);
}

void sinpe_rows_release(sinpe_rows *rows)
{
    if (rows == NULL) {
        return;
    }
    sinpe_fork_lock_acquire(&lock);
    const int last = --rows->refs == 0;
    sinpe_fork_lock_release(&lock);
    if (last) {
        rows_free(rows);
    }
}

void sinpe_rows_clear(void)
{
    sinpe_fork_lock_acquire(&lock);
    for (int i = 0; i < SINPE_ROW_CACHE_SLOTS; ++i) {
        if (slots[i] != NULL) {
            evict(i);
        }
    }
    recent_used = recent_next = 0;
    sinpe_fork_lock_release(&lock);
}

void sinpe_rows_stats(int *tables, size_t *bytes)
{
    sinpe_fork_lock_acquire(&lock);
    *tables = 0;
    for (int i = 0; i < SINPE_ROW_CACHE_SLOTS; ++i) {
        *tables += slots[i] != NULL;
    }
    *bytes = kept_bytes;
    sinpe_fork_lock_release(&lock);
}
