/*
 * Internal: a small persistent thread pool that runs the chunks of one call.
 * Not public API.  Its threads and locks are platform.h's.
 */
#ifndef SINPE_THREADS_H
#define SINPE_THREADS_H

#include "core/platform.h"

#include <stddef.h>

#include "sinpe.h"

/* Work of one call: fn(context, chunk, worker) for every chunk in
 * [0, chunks).  worker is 0 for the calling thread and 1 .. threads - 1 for
 * helpers, so callers can hand each worker its own scratch. */
typedef void (*sinpe_chunk_fn)(void *context, ptrdiff_t chunk, int worker);


/* Runs every chunk on up to `threads` threads (the caller included), in any
 * order.  When another call is using the pool the caller runs all chunks
 * itself (results do not depend on who runs a chunk).  `cancel`, if not
 * NULL, is called from the calling thread after every `cancel_period` of
 * its own chunks while chunks remain; once it returns nonzero no new chunk
 * starts, the helpers are waited for, and SINPE_ERR_CANCELLED is returned.
 * Returns SINPE_OK otherwise.  Every helper has finished when it returns. */
int sinpe_run_chunks(ptrdiff_t chunks, int threads, sinpe_chunk_fn fn, void *context,
                     sinpe_cancel_fn cancel, void *cancel_context, ptrdiff_t cancel_period);

/* Thread count for large calls: 1 .. SINPE_MAX_THREADS. */
int sinpe_threads_get(void);
void sinpe_threads_set(int threads);

/* Large calls on a loaded OpenMP runtime's threads (sinpe.h's
 * sinpe_share_openmp, sinpe_sharing_openmp). */
int sinpe_threads_share_openmp(const char *library);
int sinpe_threads_sharing_openmp(void);

/* Registers the fork handlers (once per process, where fork exists): every
 * lock sinpe holds is taken around fork() and the pool is forgotten in the
 * child, whose helper threads no longer exist.  Cheap after the first call. */
void sinpe_threads_once(void);

/* The caches' fork hooks (table.c, row_cache.c). */
void sinpe_table_cache_prefork(void);
void sinpe_table_cache_postfork(void);
void sinpe_rows_cache_prefork(void);
void sinpe_rows_cache_postfork(void);

#endif /* SINPE_THREADS_H */
