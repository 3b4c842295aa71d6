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
 *
 * Or another runtime's threads (sinpe_threads_share_openmp): see "An OpenMP
 * runtime's team" below.
 */
#include "core/platform.h"

#include "core/job.h"
#include "core/threads.h"

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

/* How long a thread polls before it sleeps: a helper after its job, for
 * the next one (a loop of calls then finds it awake, as OpenMP's threads
 * are), and the caller for its helpers' last chunks.  Waking a sleeping
 * thread costs tens of microseconds on a VM, as much as a call of a few
 * hundred KB.  A polling thread gives its core away every few microseconds
 * (sinpe_thread_yield): to a helper the OS put beside its caller, or to
 * another library's worker (torch's OpenMP pool) that needs the core for
 * its next op; alone on its core it polls on. */
#define SPIN_NS 200000
#define POLLS_PER_YIELD 64

/* Calls that would have been faster on one thread.  A helper that shares
 * its core with another busy thread (torch's OpenMP workers spin for
 * milliseconds after each op; any other process) runs in slices: when it is
 * switched out holding a chunk, the caller waits for it, and the call can
 * take longer than the caller alone would have.  Such a call (judged after
 * it, by the caller's own pace) makes the next calls run on the caller alone
 * for a while, SOLO_MIN_US at first, doubling while each retry is slower
 * again, at most SOLO_MAX_US; a call that gains from its helpers ends it.
 * A call that had to wake its helpers is not judged: after a while alone
 * they sleep, and their wake-up alone would make every retry look slower
 * (it kept a quiet machine on one thread for good).  The bits never
 * depend on it. */
#define SOLO_MIN_US 2000
#define SOLO_MAX_US 128000
/* A while without some threads: `until` in microseconds of sinpe_now_ns(),
 * wrapping (a ptrdiff_t may have 32 bits): compared by the sign of the
 * difference, as whiles are short; `length` the last while's. */
typedef struct {
    sinpe_atomic until;
    sinpe_atomic length;
} backoff_t;
static backoff_t solo_backoff = {SINPE_ATOMIC_INIT(0), SINPE_ATOMIC_INIT(0)};

static ptrdiff_t microseconds(int64_t ns)
{
    return (ptrdiff_t)(size_t)(uint64_t)(ns / 1000);
}

/* Whether time `now` (microseconds) is at or past `until`. */
static int reached(ptrdiff_t now, ptrdiff_t until)
{
    return (ptrdiff_t)((size_t)now - (size_t)until) >= 0;
}

/* The hot path (a job posted, seats taken, helpers leaving) is atomics; the
 * lock and condition variables serve only threads that stopped polling. */
static struct {
    sinpe_mutex lock;
    sinpe_cond wake;     /* sleeping helpers wait here for a job */
    sinpe_cond idle;     /* a sleeping caller waits here for its helpers */
    int workers;         /* helpers started (lock) */
    int sleeping;        /* helpers waiting on wake (lock) */
    int waiting;         /* the caller waits on idle (lock) */
    sinpe_atomic busy;   /* a call owns the pool */
    sinpe_atomic epoch;  /* one per job, so a helper takes a seat once */
    sinpe_atomic job;    /* the job_t, while its seats are open */
    sinpe_atomic seats;  /* helpers that may still join the job */
    sinpe_atomic joined; /* helpers that did: their worker numbers */
    sinpe_atomic active; /* helpers inside the job, or deciding whether to join it */
} pool = {SINPE_MUTEX_INIT, SINPE_COND_INIT, SINPE_COND_INIT, 0, 0, 0,
          SINPE_ATOMIC_INIT(0), SINPE_ATOMIC_INIT(0), SINPE_ATOMIC_INIT(0),
          SINPE_ATOMIC_INIT(0), SINPE_ATOMIC_INIT(0), SINPE_ATOMIC_INIT(0)};

/* Polls until fn(arg) holds or SPIN_NS pass; whether it holds. */
static int spin_until(int (*fn)(ptrdiff_t), ptrdiff_t arg)
{
    const int64_t start = sinpe_now_ns();
    for (int i = 1;; ++i) {
        if (fn(arg)) {
            return 1;
        }
        sinpe_cpu_relax();
        if (i % POLLS_PER_YIELD == 0) {
            if (sinpe_now_ns() - start > SPIN_NS) {
                return 0;
            }
            sinpe_thread_yield();
        }
    }
}

static int new_epoch(ptrdiff_t seen)
{
    return sinpe_atomic_load(&pool.epoch) != seen;
}

static int helpers_gone(ptrdiff_t unused)
{
    (void)unused;
    return sinpe_atomic_load(&pool.active) == 0;
}

/* A helper is done with a job (or did not get a seat). */
static void leave_job(void)
{
    if (sinpe_atomic_fetch_add(&pool.active, -1) == 1) {
        sinpe_mutex_lock(&pool.lock);
        if (pool.waiting) {
            sinpe_cond_signal(&pool.idle);
        }
        sinpe_mutex_unlock(&pool.lock);
    }
}

static void helper_main(void)
{
    ptrdiff_t seen = -1; /* a new helper joins the job being posted */
    for (;;) {
        if (!spin_until(new_epoch, seen)) {
            sinpe_mutex_lock(&pool.lock);
            pool.sleeping++;
            while (!new_epoch(seen)) {
                sinpe_cond_wait(&pool.wake, &pool.lock);
            }
            pool.sleeping--;
            sinpe_mutex_unlock(&pool.lock);
        }
        seen = sinpe_atomic_load(&pool.epoch);
        /* Counted in active before taking a seat: a caller that sees no
         * helper active after closing the seats has none that will touch
         * its job; a late one finds the seats closed (or those of the
         * next job, whose fields were stored before its seats). */
        sinpe_atomic_fetch_add(&pool.active, 1);
        if (sinpe_atomic_fetch_add(&pool.seats, -1) > 0) {
            job_t *job = (job_t *)(uintptr_t)sinpe_atomic_load(&pool.job);
            const int worker = (int)sinpe_atomic_fetch_add(&pool.joined, 1) + 1;
            run_job(job, worker);
        }
        leave_job();
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

/* An OpenMP runtime's team.  torch runs its ops on OpenMP threads that spin
 * for a while after each op (libgomp's GOMP_SPINCOUNT), holding the other
 * cores: sinpe's own helpers then get none, and a call right after a torch
 * op runs at one thread's pace while torch's next op gets every core.
 * Shared, the runtime runs sinpe's chunks on that team: its spinning
 * threads take them at once, and spin on for torch's next op.  GNU
 * libgomp's ABI: GOMP_parallel(fn, data, threads, flags) runs fn(data) on
 * a team whose thread 0 is the caller, and returns when every member has;
 * omp_get_thread_num() says which member runs. */
typedef void (*omp_parallel_fn)(void (*fn)(void *), void *data, unsigned threads,
                                unsigned flags);
typedef int (*omp_thread_num_fn)(void);
typedef struct {
    omp_parallel_fn parallel;
    omp_thread_num_fn thread_num;
} openmp_t;
#define OPENMP_RUNTIMES 4

static struct {
    sinpe_mutex lock;
    openmp_t known[OPENMP_RUNTIMES]; /* each set once and never changed: calls hold them */
    int count;                       /* (lock) */
    sinpe_atomic current;            /* the openmp_t shared, or 0 */
} openmp = {SINPE_MUTEX_INIT, {{NULL, NULL}}, 0, SINPE_ATOMIC_INIT(0)};

static void threads_once(void);

int sinpe_threads_share_openmp(const char *library)
{
    if (library == NULL) {
        sinpe_atomic_store(&openmp.current, 0);
        return SINPE_OK;
    }
    threads_once(); /* the fork handlers, which forget the runtime in a child */
    const openmp_t found = {
        (omp_parallel_fn)sinpe_loaded_function(library, "GOMP_parallel"),
        (omp_thread_num_fn)sinpe_loaded_function(library, "omp_get_thread_num")};
    if (found.parallel == NULL || found.thread_num == NULL) {
        return SINPE_ERR_INVALID;
    }
    int status = SINPE_ERR_INVALID; /* more runtimes than it keeps */
    sinpe_mutex_lock(&openmp.lock);
    for (int i = 0; i < OPENMP_RUNTIMES; ++i) {
        openmp_t *known = &openmp.known[i];
        if (i == openmp.count) {
            *known = found;
            openmp.count++;
        }
        if (known->parallel == found.parallel && known->thread_num == found.thread_num) {
            sinpe_atomic_store(&openmp.current, (ptrdiff_t)(uintptr_t)known);
            status = SINPE_OK;
            break;
        }
    }
    sinpe_mutex_unlock(&openmp.lock);
    return status;
}

int sinpe_threads_sharing_openmp(void)
{
    return sinpe_atomic_load(&openmp.current) != 0;
}

/* The locks registered with the fork handlers (sinpe_fork_lock), taken
 * in turn before fork(), before the pool's own. */
static struct {
    sinpe_mutex lock;
    sinpe_fork_lock *first; /* (lock) */
} fork_locks = {SINPE_MUTEX_INIT, NULL};

#if SINPE_HAVE_FORK
static void before_fork(void)
{
    sinpe_mutex_lock(&fork_locks.lock);
    for (sinpe_fork_lock *l = fork_locks.first; l != NULL; l = l->next) {
        sinpe_mutex_lock(&l->mutex);
    }
    sinpe_mutex_lock(&openmp.lock);
    sinpe_mutex_lock(&pool.lock);
}

static void release_fork_locks(void)
{
    for (sinpe_fork_lock *l = fork_locks.first; l != NULL; l = l->next) {
        sinpe_mutex_unlock(&l->mutex);
    }
    sinpe_mutex_unlock(&fork_locks.lock);
}

static void after_fork_parent(void)
{
    sinpe_mutex_unlock(&pool.lock);
    sinpe_mutex_unlock(&openmp.lock);
    release_fork_locks();
}

static void after_fork_child(void)
{
    pool.workers = 0;
    pool.sleeping = 0;
    pool.waiting = 0;
    sinpe_atomic_store(&pool.busy, 0);
    sinpe_atomic_store(&pool.job, 0);
    sinpe_atomic_store(&pool.seats, 0);
    sinpe_atomic_store(&pool.joined, 0);
    sinpe_atomic_store(&pool.active, 0);
    /* helpers may have been waiting on these in the parent */
    const sinpe_cond fresh = SINPE_COND_INIT;
    pool.wake = fresh;
    pool.idle = fresh;
    sinpe_mutex_unlock(&pool.lock);
    /* an OpenMP runtime's threads do not exist in the child either, and
     * libgomp would wait for them: the child uses sinpe's own helpers */
    sinpe_atomic_store(&openmp.current, 0);
    sinpe_mutex_unlock(&openmp.lock);
    release_fork_locks();
}
#endif

static void register_fork_handlers(void)
{
#if SINPE_HAVE_FORK
    sinpe_at_fork(before_fork, after_fork_parent, after_fork_child);
#endif
}

static sinpe_once fork_once = SINPE_ONCE_INIT;

/* The fork handlers, registered once per process (where fork exists).
 * Cheap after the first call. */
static void threads_once(void)
{
    sinpe_call_once(&fork_once, register_fork_handlers);
}

void sinpe_fork_lock_acquire(sinpe_fork_lock *lock)
{
    if (!sinpe_atomic_load(&lock->registered)) { /* registered before it is first held */
        threads_once();
        sinpe_mutex_lock(&fork_locks.lock);
        if (!sinpe_atomic_load(&lock->registered)) {
            lock->next = fork_locks.first;
            fork_locks.first = lock;
            sinpe_atomic_store(&lock->registered, 1);
        }
        sinpe_mutex_unlock(&fork_locks.lock);
    }
    sinpe_mutex_lock(&lock->mutex);
}

void sinpe_fork_lock_release(sinpe_fork_lock *lock)
{
    sinpe_mutex_unlock(&lock->mutex);
}

/* Claims the pool for a job with up to `helpers` helpers; returns how many
 * were offered seats, or -1 if another call owns the pool.  *woken: a
 * helper had to be started or woken (it polled no more), which costs the
 * call tens of microseconds that say nothing of its neighbours. */
static int claim_pool(job_t *job, int helpers, int *woken)
{
    threads_once();
    if (sinpe_atomic_exchange(&pool.busy, 1) != 0) {
        return -1;
    }
    sinpe_mutex_lock(&pool.lock);
    *woken = pool.workers < helpers || pool.sleeping > 0;
    start_helpers(helpers);
    if (helpers > pool.workers) {
        helpers = pool.workers;
    }
    sinpe_mutex_unlock(&pool.lock);
    /* the job's fields before its seats, the seats before the epoch */
    sinpe_atomic_store(&pool.job, (ptrdiff_t)(uintptr_t)job);
    sinpe_atomic_store(&pool.joined, 0);
    sinpe_atomic_store(&pool.seats, helpers);
    sinpe_atomic_fetch_add(&pool.epoch, 1);
    sinpe_mutex_lock(&pool.lock);
    if (pool.sleeping > 0) {
        sinpe_cond_broadcast(&pool.wake);
    }
    sinpe_mutex_unlock(&pool.lock);
    return helpers;
}

/* Closes the job to latecomers, waits for the helpers inside it. */
static void release_pool(void)
{
    sinpe_atomic_store(&pool.seats, 0);
    if (!spin_until(helpers_gone, 0)) {
        sinpe_mutex_lock(&pool.lock);
        pool.waiting = 1;
        while (!helpers_gone(0)) {
            sinpe_cond_wait(&pool.idle, &pool.lock);
        }
        pool.waiting = 0;
        sinpe_mutex_unlock(&pool.lock);
    }
    sinpe_atomic_store(&pool.job, 0);
    sinpe_atomic_store(&pool.busy, 0);
}

/* After a call with helpers, from `start` to `end`, whose caller ran `mine`
 * of its `ran` chunks until `done`: how much longer than the caller alone
 * would have taken at its own pace (negative: less).  0 if that pace is
 * unknown (the caller ran no chunk). */
static double time_over_alone(int64_t start, int64_t done, int64_t end, ptrdiff_t mine,
                              ptrdiff_t ran)
{
    if (mine < 1) {
        return 0.0;
    }
    return (double)(end - start) - (double)(done - start) / (double)mine * (double)ran;
}

/* A slower call: a while without those threads from `end`, `least`
 * microseconds at first and `grow` times longer at each slower retry, at
 * most `most`. */
static void back_off(backoff_t *b, ptrdiff_t least, ptrdiff_t most, ptrdiff_t grow, int64_t end)
{
    const ptrdiff_t last = sinpe_atomic_load(&b->length);
    const ptrdiff_t next = last < least ? least : last >= most / grow ? most : grow * last;
    sinpe_atomic_store(&b->length, next);
    sinpe_atomic_store(&b->until, (ptrdiff_t)((size_t)microseconds(end) + (size_t)next));
}

/* Whether the while is over at `now` (microseconds). */
static int back_on(backoff_t *b, ptrdiff_t now)
{
    return reached(now, sinpe_atomic_load(&b->until));
}

/* Solo mode (above), after a call with sinpe's own helpers. */
static void judge_pooled_call(int64_t start, int64_t done, int64_t end, ptrdiff_t mine,
                              ptrdiff_t ran)
{
    const double over = time_over_alone(start, done, end, mine, ran);
    if (over > 0.0) {
        back_off(&solo_backoff, SOLO_MIN_US, SOLO_MAX_US, 2, end);
    } else if (mine > 0) {
        sinpe_atomic_store(&solo_backoff.length, 0);
    }
}

/* A shared OpenMP team cannot leave a member out: its call returns when
 * every member has come and gone, also one that the OS left waiting for a
 * core for a time slice of milliseconds.  That happens when the cores are
 * oversubscribed (another process busy on one; the team's own threads spin
 * for milliseconds after each call), and then such stalls cost more than
 * the calls that gain save.  A team call stalled if a member started
 * TEAM_STALL_NS late (more than waking a sleeping one costs), if the caller
 * spent that long off its core, or if the call took that much longer than
 * the caller alone would have at its own pace.  A stall leaves the team to
 * sinpe's own helpers (and their solo mode) for a while, TEAM_MIN_US at
 * first, four times longer at each stall (each costs milliseconds: few
 * should be tried), at most TEAM_MAX_US.  Calls that gain
 * TEAM_CREDIT_US in all since the last stall halve the while.  Beside
 * torch's ops, whose threads spin for the next call, the team gains call
 * after call. */
#define TEAM_STALL_NS 250000
#define TEAM_CREDIT_US 50000
#define TEAM_MIN_US 8000
#define TEAM_MAX_US 1000000
static backoff_t team_backoff = {SINPE_ATOMIC_INIT(0), SINPE_ATOMIC_INIT(0)};
static sinpe_atomic team_credit = SINPE_ATOMIC_INIT(0); /* microseconds */
static sinpe_atomic team_call_was_long = SINPE_ATOMIC_INIT(0); /* TEAM_STALL_NS / 4 or more */

/* A team call from `start` to `end`: its caller spent `off_core` ns off its
 * core, ran `mine` of the `ran` chunks until `done`; `late`: a member
 * started late. */
static void judge_team_call(int64_t start, int64_t done, int64_t end, int64_t off_core,
                            ptrdiff_t late, ptrdiff_t mine, ptrdiff_t ran)
{
    const double over = time_over_alone(start, done, end, mine, ran);
    if (late || off_core > TEAM_STALL_NS || over > TEAM_STALL_NS) {
        back_off(&team_backoff, TEAM_MIN_US, TEAM_MAX_US, 4, end);
        sinpe_atomic_store(&team_credit, 0);
        return;
    }
    if (over < 0.0) {
        const ptrdiff_t credit = sinpe_atomic_load(&team_credit) + (ptrdiff_t)(-over / 1000.0);
        if (credit >= TEAM_CREDIT_US) {
            sinpe_atomic_store(&team_backoff.length, sinpe_atomic_load(&team_backoff.length) / 2);
            sinpe_atomic_store(&team_credit, 0);
        } else {
            sinpe_atomic_store(&team_credit, credit);
        }
    }
}

/* A member of the OpenMP team: thread 0 is the calling thread. */
typedef struct {
    job_t *job;
    caller_t *caller;
    omp_thread_num_fn thread_num;
    int64_t start;
    sinpe_atomic late; /* a member started TEAM_STALL_NS after start */
} team_call_t;

static void team_member(void *data)
{
    team_call_t *call = (team_call_t *)data;
    const int worker = call->thread_num();
    if (worker == 0) {
        run_callers_chunks(call->job, call->caller);
        return;
    }
    if (sinpe_now_ns() - call->start > TEAM_STALL_NS) {
        sinpe_atomic_store(&call->late, 1);
    }
    run_job(call->job, worker);
}

/* Runs the call on the shared team and judges it; 0 if another call owns
 * the threads. */
static int run_on_team(const openmp_t *team, job_t *job, caller_t *caller, int threads,
                       int64_t start)
{
    if (sinpe_atomic_exchange(&pool.busy, 1) != 0) {
        return 0;
    }
    /* The caller's CPU clock is a system call (0.36 us each in a KVM
     * guest, two a call: a tenth of a small call's cost on two threads).
     * Only a call that lasts TEAM_STALL_NS can have spent that long off its
     * core, and a call most often lasts as long as the one before it: the
     * clock is read after a long call only.  A first long call after short
     * ones goes unjudged on this count (its member's lateness and its pace
     * still count); the next one is judged. */
    const int timed = sinpe_atomic_load(&team_call_was_long) != 0;
    const int64_t cpu = timed ? sinpe_thread_cpu_ns() : 0;
    team_call_t call;
    call.job = job;
    call.caller = caller;
    call.thread_num = team->thread_num;
    call.start = start;
    sinpe_atomic_store(&call.late, 0);
    team->parallel(team_member, &call, (unsigned)threads, 0);
    sinpe_atomic_store(&pool.busy, 0);
    const int64_t end = sinpe_now_ns();
    sinpe_atomic_store(&team_call_was_long, end - start >= TEAM_STALL_NS / 4);
    const int64_t off_core = timed ? (end - start) - (sinpe_thread_cpu_ns() - cpu) : 0;
    judge_team_call(start, caller->done, end, off_core,
                    sinpe_atomic_load(&call.late), caller->mine, chunks_taken(job));
    return 1;
}

int sinpe_run_chunks(ptrdiff_t chunks, int threads, sinpe_chunk_fn fn, void *context,
                     sinpe_cancel_fn cancel, void *cancel_context, ptrdiff_t cancel_period)
{
    const ptrdiff_t wanted = (threads < chunks ? threads : chunks) - 1;
    job_t job;
    job_init(&job, fn, context, chunks, (int)wanted + 1);
    caller_t caller = {cancel, cancel_context, cancel_period < 1 ? 1 : cancel_period, 0, 0, 0};

    const int64_t start = wanted > 0 ? sinpe_now_ns() : 0;
    const ptrdiff_t now = microseconds(start);
    const int helped = wanted > 0 && back_on(&solo_backoff, now);
    const openmp_t *team = (const openmp_t *)(uintptr_t)sinpe_atomic_load(&openmp.current);
    int woken = 0, ran = 0;
    if (wanted > 0 && team != NULL && back_on(&team_backoff, now) &&
        run_on_team(team, &job, &caller, (int)wanted + 1, start)) {
        ran = 1;
    } else if (helped && claim_pool(&job, (int)wanted, &woken) >= 0) {
        run_callers_chunks(&job, &caller);
        release_pool();
        ran = 1;
        if (!woken) { /* else its helpers' wake-up, not a neighbour, may have slowed it */
            judge_pooled_call(start, caller.done, sinpe_now_ns(), caller.mine,
                              chunks_taken(&job));
        }
    }
    if (!ran) {
        run_callers_chunks(&job, &caller); /* alone */
    }
    return caller.cancelled ? SINPE_ERR_CANCELLED : SINPE_OK;
}
