/*
 * Internal: a small persistent thread pool that runs the chunks of one call.
 * Not public API.  Its threads and locks are platform.h's.
 */
#ifndef SINPE_CORE_THREADS_H
#define SINPE_CORE_THREADS_H

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

/* A lock that fork() never leaves held in a child (the caches': core/table.c,
 * core/row_cache.c): at its first use it registers with the pool's fork
 * handlers, which take it before fork() and release it after, in the parent
 * and in the child, so that no child inherits it from a thread that does
 * not exist there.  The pool takes its own locks after every registered
 * one, and forgets its helpers in the child.  Where there is no fork
 * (Windows) it is a plain mutex. */
typedef struct sinpe_fork_lock {
    sinpe_mutex mutex;
    sinpe_atomic registered;
    struct sinpe_fork_lock *next; /* the registered ones, newest first */
} sinpe_fork_lock;
#define SINPE_FORK_LOCK_INIT {SINPE_MUTEX_INIT, SINPE_ATOMIC_INIT(0), NULL}

void sinpe_fork_lock_acquire(sinpe_fork_lock *lock);
void sinpe_fork_lock_release(sinpe_fork_lock *lock);

#endif /* SINPE_CORE_THREADS_H */
