/*
 * One call's chunks as threads take them (core/threads.c's pool and the
 * OpenMP team both run it): cut into runs, one a thread, each taken in turn
 * by its own thread first, then by any; and the calling thread's part, with
 * its cancel checks.  Internal to core/threads.c.
 */
#ifndef SINPE_CORE_JOB_H
#define SINPE_CORE_JOB_H

#include "core/platform.h"

#include <stddef.h>

#include "core/threads.h"

/* A call's chunks are cut into `ranges` runs, one a thread, as OpenMP's
 * static schedule cuts its loops: each thread takes the chunks of its own
 * run in turn, then what is left of the others' (a late or slow thread's
 * share goes to the others, as from one counter).  A chunk's bits never
 * depend on who runs it.  Why runs: an add of 32 MB on two threads took
 * 1.5x torch's time with every chunk handed out from one counter (the two
 * threads' chunks interleaved through memory) and 0.8x in two runs (the
 * AMD EPYC, Zen 5), as torch's ops cut it: each core then finds its own
 * half where it left it, in its own caches. */
#define MAX_RANGES 64

typedef struct {
    sinpe_chunk_fn fn;
    void *context;
    ptrdiff_t chunks;
    int ranges;                   /* 1 .. MAX_RANGES */
    sinpe_atomic next[MAX_RANGES]; /* each run's next chunk to hand out */
    sinpe_atomic stop;            /* set on cancel: start no new chunk */
} job_t;

/* Where run r starts (r == ranges: the end), without overflow. */
static inline ptrdiff_t range_start(const job_t *job, int r)
{
    const ptrdiff_t each = job->chunks / job->ranges, extra = job->chunks % job->ranges;
    return each * r + (r < extra ? r : extra);
}

static inline void job_init(job_t *job, sinpe_chunk_fn fn, void *context, ptrdiff_t chunks,
                            int threads)
{
    job->fn = fn;
    job->context = context;
    job->chunks = chunks;
    job->ranges = threads < 1 ? 1 : threads > MAX_RANGES ? MAX_RANGES : threads;
    for (int r = 0; r < job->ranges; ++r) {
        sinpe_atomic_store(&job->next[r], range_start(job, r));
    }
    sinpe_atomic_store(&job->stop, 0);
}

/* The next chunk for a thread: from run `*range` while it lasts, then from
 * the next runs in turn (`*left` of them not yet found empty); -1 when none
 * is left. */
static inline ptrdiff_t take_chunk(job_t *job, int *range, int *left)
{
    while (*left > 0) {
        const ptrdiff_t chunk = sinpe_atomic_fetch_add(&job->next[*range], 1);
        if (chunk < range_start(job, *range + 1)) {
            return chunk;
        }
        *range = *range + 1 == job->ranges ? 0 : *range + 1;
        --*left;
    }
    return -1;
}

/* How many chunks have been handed out. */
static inline ptrdiff_t chunks_taken(job_t *job)
{
    ptrdiff_t taken = 0;
    for (int r = 0; r < job->ranges; ++r) {
        const ptrdiff_t next = sinpe_atomic_load(&job->next[r]), end = range_start(job, r + 1);
        taken += (next < end ? next : end) - range_start(job, r);
    }
    return taken;
}

/* Takes chunks until none are left or the job is stopped. */
static inline void run_job(job_t *job, int worker)
{
    int range = worker % job->ranges, left = job->ranges;
    for (;;) {
        if (sinpe_atomic_load(&job->stop)) {
            return;
        }
        const ptrdiff_t chunk = take_chunk(job, &range, &left);
        if (chunk < 0) {
            return;
        }
        job->fn(job->context, chunk, worker);
    }
}

/* The calling thread's part of a call: chunks until none are left, asking
 * `cancel` every `period` of them; then the time it finished. */
typedef struct {
    sinpe_cancel_fn cancel;
    void *context;
    ptrdiff_t period;
    ptrdiff_t mine; /* chunks it ran */
    int cancelled;
    int64_t done;
} caller_t;

static inline void run_callers_chunks(job_t *job, caller_t *caller)
{
    ptrdiff_t since_check = 0;
    int range = 0, left = job->ranges;
    for (;;) {
        const ptrdiff_t chunk = take_chunk(job, &range, &left);
        if (chunk < 0) {
            break;
        }
        job->fn(job->context, chunk, 0);
        ++caller->mine;
        if (caller->cancel != NULL && ++since_check >= caller->period &&
            chunks_taken(job) < job->chunks) {
            since_check = 0;
            if (caller->cancel(caller->context)) {
                caller->cancelled = 1;
                sinpe_atomic_store(&job->stop, 1);
                break;
            }
        }
    }
    caller->done = sinpe_now_ns();
}

#endif /* SINPE_CORE_JOB_H */
