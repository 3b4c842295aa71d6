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
 * Signals: helpers block every signal, so SIGINT reaches the main thread,
 * where the binding's cancel callback turns it into KeyboardInterrupt.
 * fork(): the locks are held across fork() and the child forgets the helpers
 * (they do not exist there), so a forked child (multiprocessing, DataLoader
 * workers) starts a fresh pool instead of waiting for ghosts.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity */
#endif
#include "threads.h"

#include <stdatomic.h>

#if SINPE_HAVE_PTHREADS
#include <sched.h>
#include <signal.h>
#include <unistd.h>
#endif

typedef struct {
    sinpe_chunk_fn fn;
    void *context;
    ptrdiff_t chunks;
    atomic_ptrdiff_t next; /* the next chunk to hand out */
    atomic_int stop;       /* set on cancel: start no new chunk */
} job_t;

/* Takes chunks until none are left or the job is stopped. */
static void run_job(job_t *job, int worker)
{
    for (;;) {
        if (atomic_load_explicit(&job->stop, memory_order_relaxed)) {
            return;
        }
        const ptrdiff_t chunk = atomic_fetch_add_explicit(&job->next, 1, memory_order_relaxed);
        if (chunk >= job->chunks) {
            return;
        }
        job->fn(job->context, chunk, worker);
    }
}

static atomic_int requested_threads; /* 0: the default */

static int clamp_threads(long threads)
{
    return threads < 1 ? 1 : threads > SINPE_MAX_THREADS ? SINPE_MAX_THREADS : (int)threads;
}

/* The cores this process may run on (taskset / cpusets respected). */
static int default_threads(void)
{
    static atomic_int cached;
    int threads = atomic_load(&cached);
    if (threads > 0) {
        return threads;
    }
    long count = 1;
#if defined(__linux__)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        count = CPU_COUNT(&set);
    } else {
        count = sysconf(_SC_NPROCESSORS_ONLN);
    }
#elif SINPE_HAVE_PTHREADS
    count = sysconf(_SC_NPROCESSORS_ONLN);
#endif
    threads = clamp_threads(count);
    atomic_store(&cached, threads);
    return threads;
}

int sinpe_threads_get(void)
{
    const int threads = atomic_load(&requested_threads);
    return threads > 0 ? threads : default_threads();
}

void sinpe_threads_set(int threads)
{
    atomic_store(&requested_threads, clamp_threads(threads));
}

#if SINPE_HAVE_PTHREADS

static struct {
    pthread_mutex_t lock;
    pthread_cond_t wake; /* helpers wait here for a job */
    pthread_cond_t idle; /* the caller waits here for its helpers */
    int workers;         /* helpers started */
    int busy;            /* a call owns the pool */
    job_t *job;
    unsigned long epoch; /* one per job, so a helper joins a job once */
    int seats;           /* helpers that may still join the job */
    int joined;          /* helpers that did: their worker numbers */
    int active;          /* helpers inside the job */
} pool = {.lock = PTHREAD_MUTEX_INITIALIZER,
          .wake = PTHREAD_COND_INITIALIZER,
          .idle = PTHREAD_COND_INITIALIZER};

static void *helper_main(void *unused)
{
    (void)unused;
    unsigned long seen = 0;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.job == NULL || pool.seats == 0 || pool.epoch == seen) {
            pthread_cond_wait(&pool.wake, &pool.lock);
        }
        seen = pool.epoch;
        job_t *job = pool.job;
        pool.seats--;
        const int worker = ++pool.joined;
        pool.active++;
        pthread_mutex_unlock(&pool.lock);
        run_job(job, worker);
        pthread_mutex_lock(&pool.lock);
        if (--pool.active == 0) {
            pthread_cond_signal(&pool.idle);
        }
    }
    return NULL;
}

/* With pool.lock held: start helpers until there are `wanted`.  A failure
 * (thread limit, no memory) just leaves fewer helpers. */
static void start_helpers(int wanted)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the helper */
    while (pool.workers < wanted) {
        pthread_t thread;
        if (pthread_create(&thread, NULL, helper_main, NULL) != 0) {
            break;
        }
        pthread_detach(thread);
        pool.workers++;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static void before_fork(void)
{
    sinpe_table_cache_prefork();
    pthread_mutex_lock(&pool.lock);
}

static void after_fork_parent(void)
{
    pthread_mutex_unlock(&pool.lock);
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
    pthread_cond_init(&pool.wake, NULL);
    pthread_cond_init(&pool.idle, NULL);
    pthread_mutex_unlock(&pool.lock);
    sinpe_table_cache_postfork();
}

static pthread_once_t fork_once = PTHREAD_ONCE_INIT;

static void register_fork_handlers(void)
{
    pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

void sinpe_threads_once(void)
{
    pthread_once(&fork_once, register_fork_handlers);
}

/* Claims the pool for a job with up to `helpers` helpers; returns how many
 * were offered seats, or -1 if another call owns the pool. */
static int claim_pool(job_t *job, int helpers)
{
    sinpe_threads_once();
    pthread_mutex_lock(&pool.lock);
    if (pool.busy) {
        pthread_mutex_unlock(&pool.lock);
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
        pthread_cond_broadcast(&pool.wake);
    }
    pthread_mutex_unlock(&pool.lock);
    return helpers;
}

/* Closes the job to latecomers, waits for the helpers inside it. */
static void release_pool(void)
{
    pthread_mutex_lock(&pool.lock);
    pool.job = NULL;
    pool.seats = 0;
    while (pool.active > 0) {
        pthread_cond_wait(&pool.idle, &pool.lock);
    }
    pool.busy = 0;
    pthread_mutex_unlock(&pool.lock);
}

#else /* no pthreads: everything runs in the caller */

void sinpe_threads_once(void)
{
}

static int claim_pool(job_t *job, int helpers)
{
    (void)job;
    (void)helpers;
    return -1;
}

static void release_pool(void)
{
}

#endif

int sinpe_run_chunks(ptrdiff_t chunks, int threads, sinpe_chunk_fn fn, void *context,
                     sinpe_cancel_fn cancel, void *cancel_context, ptrdiff_t cancel_period)
{
    job_t job;
    job.fn = fn;
    job.context = context;
    job.chunks = chunks;
    atomic_init(&job.next, 0);
    atomic_init(&job.stop, 0);

    const ptrdiff_t wanted = (threads < chunks ? threads : chunks) - 1;
    const int pooled = wanted > 0 && claim_pool(&job, (int)wanted) >= 0;

    int cancelled = 0;
    ptrdiff_t since_check = 0;
    if (cancel_period < 1) {
        cancel_period = 1;
    }
    for (;;) {
        const ptrdiff_t chunk = atomic_fetch_add_explicit(&job.next, 1, memory_order_relaxed);
        if (chunk >= chunks) {
            break;
        }
        fn(context, chunk, 0);
        if (cancel != NULL && ++since_check >= cancel_period &&
            atomic_load_explicit(&job.next, memory_order_relaxed) < chunks) {
            since_check = 0;
            if (cancel(cancel_context)) {
                cancelled = 1;
                atomic_store(&job.stop, 1);
                break;
            }
        }
    }
    if (pooled) {
        release_pool();
    }
    return cancelled ? SINPE_ERR_CANCELLED : SINPE_OK;
}
