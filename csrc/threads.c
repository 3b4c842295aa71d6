/*
 * A small persistent thread pool for the chunks of one call.
 *
 * Why a pool and not threads per call: creating and joining a thread costs
 * ~35 us here, a wake-up of a parked one ~4 us; a 10 MB table takes ~300 us,
 * so per-call threads would eat a tenth of it.  The helpers are created on
 * first need (never at import), park on a condition variable, and serve one
 * call at a time; a call that finds the pool busy (another Python thread is
 * running one) simply runs its chunks itself, which is what two cores want
 * anyway.  Chunks are handed out by an atomic counter, so the split between
 * threads is dynamic; values never depend on it (table.h).
 *
 * Threads, locks and atomics are platform.h's: POSIX threads, or Win32's on
 * Windows.  Signals: POSIX helpers block every signal, so SIGINT reaches the
 * main thread, where the binding's cancel callback turns it into
 * KeyboardInterrupt.  fork(): the locks are held across fork() and the child
 * forgets the helpers (they do not exist there), so a forked child
 * (multiprocessing, DataLoader workers) starts a fresh pool instead of
 * waiting for ghosts.
 */
#include "platform.h"

#include "threads.h"

typedef struct {
    sinpe_chunk_fn fn;
    void *context;
    ptrdiff_t chunks;
    sinpe_atomic next; /* the next chunk to hand out */
    sinpe_atomic stop; /* set on cancel: start no new chunk */
} job_t;

/* Takes chunks until none are left or the job is stopped. */
static void run_job(job_t *job, int worker)
{
    for (;;) {
        if (sinpe_atomic_load(&job->stop)) {
            return;
        }
        const ptrdiff_t chunk = sinpe_atomic_fetch_add(&job->next, 1);
        if (chunk >= job->chunks) {
            return;
        }
        job->fn(job->context, chunk, worker);
    }
}

static sinpe_atomic requested_threads = SINPE_ATOMIC_INIT(0); /* 0: the default */

static int clamp_threads(long threads)
{
    return threads < 1 ? 1 : threads > SINPE_MAX_THREADS ? SINPE_MAX_THREADS : (int)threads;
}

/* The cores this process may run on (taskset / cpusets respected). */
static int default_threads(void)
{
    static sinpe_atomic cached = SINPE_ATOMIC_INIT(0); /* every racer stores the same */
    ptrdiff_t threads = sinpe_atomic_load(&cached);
    if (threads <= 0) {
        threads = clamp_threads(sinpe_cpu_count());
        sinpe_atomic_store(&cached, threads);
    }
    return (int)threads;
}

int sinpe_threads_get(void)
{
    const ptrdiff_t threads = sinpe_atomic_load(&requested_threads);
    return threads > 0 ? (int)threads : default_threads();
}

void sinpe_threads_set(int threads)
{
    sinpe_atomic_store(&requested_threads, clamp_threads(threads));
}

static struct {
    sinpe_mutex lock;
    sinpe_cond wake; /* helpers wait here for a job */
    sinpe_cond idle; /* the caller waits here for its helpers */
    int workers;     /* helpers started */
    int busy;        /* a call owns the pool */
    job_t *job;
    unsigned long epoch; /* one per job, so a helper joins a job once */
    int seats;           /* helpers that may still join the job */
    int joined;          /* helpers that did: their worker numbers */
    int active;          /* helpers inside the job */
} pool = {SINPE_MUTEX_INIT, SINPE_COND_INIT, SINPE_COND_INIT, 0, 0, NULL, 0, 0, 0, 0};

static void helper_main(void)
{
    unsigned long seen = 0;
    sinpe_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.job == NULL || pool.seats == 0 || pool.epoch == seen) {
            sinpe_cond_wait(&pool.wake, &pool.lock);
        }
        seen = pool.epoch;
        job_t *job = pool.job;
        pool.seats--;
        const int worker = ++pool.joined;
        pool.active++;
        sinpe_mutex_unlock(&pool.lock);
        run_job(job, worker);
        sinpe_mutex_lock(&pool.lock);
        if (--pool.active == 0) {
            sinpe_cond_signal(&pool.idle);
        }
    }
}

/* With pool.lock held: start helpers until there are `wanted`.  A failure
 * (thread limit, no memory) just leaves fewer helpers. */
static void start_helpers(int wanted)
{
    while (pool.workers < wanted && sinpe_thread_start(helper_main) == 0) {
        pool.workers++;
    }
}

#if SINPE_HAVE_FORK
static void before_fork(void)
{
    sinpe_table_cache_prefork();
    sinpe_rows_cache_prefork();
    sinpe_mutex_lock(&pool.lock);
}

static void after_fork_parent(void)
{
    sinpe_mutex_unlock(&pool.lock);
    sinpe_rows_cache_postfork();
    sinpe_table_cache_postfork();
}

static void after_fork_child(void)
{
    pool.workers = 0;
    pool.busy = 0;
    pool.job = NULL;
    pool.seats = 0;
    pool.joined = 0;
    pool.active = 0;
    /* helpers may have been waiting on these in the parent */
    const sinpe_cond fresh = SINPE_COND_INIT;
    pool.wake = fresh;
    pool.idle = fresh;
    sinpe_mutex_unlock(&pool.lock);
    sinpe_rows_cache_postfork();
    sinpe_table_cache_postfork();
}
#endif

static void register_fork_handlers(void)
{
#if SINPE_HAVE_FORK
    sinpe_at_fork(before_fork, after_fork_parent, after_fork_child);
#endif
}

static sinpe_once fork_once = SINPE_ONCE_INIT;

void sinpe_threads_once(void)
{
    sinpe_call_once(&fork_once, register_fork_handlers);
}

/* Claims the pool for a job with up to `helpers` helpers; returns how many
 * were offered seats, or -1 if another call owns the pool. */
static int claim_pool(job_t *job, int helpers)
{
    sinpe_threads_once();
    sinpe_mutex_lock(&pool.lock);
    if (pool.busy) {
        sinpe_mutex_unlock(&pool.lock);
        return -1;
    }
    pool.busy = 1;
    start_helpers(helpers);
    if (helpers > pool.workers) {
        helpers = pool.workers;
    }
    pool.job = job;
    pool.epoch++;
    pool.seats = helpers;
    pool.joined = 0;
    if (helpers > 0) {
        sinpe_cond_broadcast(&pool.wake);
    }
    sinpe_mutex_unlock(&pool.lock);
    return helpers;
}

/* Closes the job to latecomers, waits for the helpers inside it. */
static void release_pool(void)
{
    sinpe_mutex_lock(&pool.lock);
    pool.job = NULL;
    pool.seats = 0;
    while (pool.active > 0) {
        sinpe_cond_wait(&pool.idle, &pool.lock);
    }
    pool.busy = 0;
    sinpe_mutex_unlock(&pool.lock);
}

int sinpe_run_chunks(ptrdiff_t chunks, int threads, sinpe_chunk_fn fn, void *context,
                     sinpe_cancel_fn cancel, void *cancel_context, ptrdiff_t cancel_period)
{
    job_t job;
    job.fn = fn;
    job.context = context;
    job.chunks = chunks;
    sinpe_atomic_store(&job.next, 0);
    sinpe_atomic_store(&job.stop, 0);

    const ptrdiff_t wanted = (threads < chunks ? threads : chunks) - 1;
    const int pooled = wanted > 0 && claim_pool(&job, (int)wanted) >= 0;

    int cancelled = 0;
    ptrdiff_t since_check = 0;
    if (cancel_period < 1) {
        cancel_period = 1;
    }
    for (;;) {
        const ptrdiff_t chunk = sinpe_atomic_fetch_add(&job.next, 1);
        if (chunk >= chunks) {
            break;
        }
        fn(context, chunk, 0);
        if (cancel != NULL && ++since_check >= cancel_period &&
            sinpe_atomic_load(&job.next) < chunks) {
            since_check = 0;
            if (cancel(cancel_context)) {
                cancelled = 1;
                sinpe_atomic_store(&job.stop, 1);
                break;
            }
        }
    }
    if (pooled) {
        release_pool();
    }
    return cancelled ? SINPE_ERR_CANCELLED : SINPE_OK;
}
