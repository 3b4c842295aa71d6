/*
 * What scripts/platforms_check.c needs from the operating system, for
 * POSIX and for Windows (mingw-w64 here, MSVC alike): a clock, threads, a
 * lock with a condition, this process' thread count, and crash reports.
 * Included once, so everything is static.
 */
#ifndef SINPE_PLATFORMS_SHIM_H
#define SINPE_PLATFORMS_SHIM_H

#if !defined(_WIN32) && !defined(_POSIX_C_SOURCE)
#define _POSIX_C_SOURCE 200809L /* clock_gettime */
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef _WIN32
#include <windows.h>
#include <tlhelp32.h>
#else
#include <pthread.h>
#include <time.h>
#endif

/* Seconds on a monotonic clock. */
static double now(void)
{
#ifdef _WIN32
    LARGE_INTEGER f, c;
    QueryPerformanceFrequency(&f);
    QueryPerformanceCounter(&c);
    return (double)c.QuadPart / (double)f.QuadPart;
#else
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
#endif
}

/* ------------------------------------------------------------------ */
/* Threads: fn(args[i]) on n threads (n <= 16) at once, then joined. */

typedef struct {
    void (*fn)(void *arg);
    void *arg;
#ifdef _WIN32
    HANDLE handle;
#else
    pthread_t handle;
#endif
} thread_t;

#ifdef _WIN32
static DWORD WINAPI trampoline(LPVOID t)
{
    ((thread_t *)t)->fn(((thread_t *)t)->arg);
    return 0;
}
#else
static void *trampoline(void *t)
{
    ((thread_t *)t)->fn(((thread_t *)t)->arg);
    return NULL;
}
#endif

static void threads_start(thread_t *t, int n, void (*fn)(void *), void *const *args)
{
    for (int i = 0; i < n; ++i) {
        t[i].fn = fn;
        t[i].arg = args[i];
#ifdef _WIN32
        t[i].handle = CreateThread(NULL, 0, trampoline, &t[i], 0, NULL);
        const int started = t[i].handle != NULL;
#else
        const int started = pthread_create(&t[i].handle, NULL, trampoline, &t[i]) == 0;
#endif
        if (!started) {
            fprintf(stderr, "FAIL: could not start a thread\n");
            exit(2);
        }
    }
}

static void threads_join(thread_t *t, int n)
{
#ifdef _WIN32
    HANDLE handles[16];
    for (int i = 0; i < n; ++i) handles[i] = t[i].handle;
    WaitForMultipleObjects((DWORD)n, handles, TRUE, INFINITE);
    for (int i = 0; i < n; ++i) CloseHandle(handles[i]);
#else
    for (int i = 0; i < n; ++i) pthread_join(t[i].handle, NULL);
#endif
}

/* ------------------------------------------------------------------ */
/* A lock with a condition (the primitives a thread pool parks on). */

typedef struct {
#ifdef _WIN32
    SRWLOCK lock;
    CONDITION_VARIABLE cond;
#else
    pthread_mutex_t lock;
    pthread_cond_t cond;
#endif
} monitor_t;

#ifdef _WIN32
static void monitor_init(monitor_t *m) { InitializeSRWLock(&m->lock); InitializeConditionVariable(&m->cond); }
static void monitor_free(monitor_t *m) { (void)m; }
static void monitor_lock(monitor_t *m) { AcquireSRWLockExclusive(&m->lock); }
static void monitor_unlock(monitor_t *m) { ReleaseSRWLockExclusive(&m->lock); }
static void monitor_wait(monitor_t *m) { SleepConditionVariableSRW(&m->cond, &m->lock, INFINITE, 0); }
static void monitor_wake(monitor_t *m) { WakeConditionVariable(&m->cond); }
#else
static void monitor_init(monitor_t *m) { pthread_mutex_init(&m->lock, NULL); pthread_cond_init(&m->cond, NULL); }
static void monitor_free(monitor_t *m) { pthread_cond_destroy(&m->cond); pthread_mutex_destroy(&m->lock); }
static void monitor_lock(monitor_t *m) { pthread_mutex_lock(&m->lock); }
static void monitor_unlock(monitor_t *m) { pthread_mutex_unlock(&m->lock); }
static void monitor_wait(monitor_t *m) { pthread_cond_wait(&m->cond, &m->lock); }
static void monitor_wake(monitor_t *m) { pthread_cond_signal(&m->cond); }
#endif

/* ------------------------------------------------------------------ */

/* This process' threads, or -1 where that is unknown (no /proc). */
static int count_threads(void)
{
    int n = -1;
#ifdef _WIN32
    const HANDLE snap = CreateToolhelp32Snapshot(TH32CS_SNAPTHREAD, 0);
    if (snap == INVALID_HANDLE_VALUE) return -1;
    THREADENTRY32 entry = {.dwSize = sizeof entry};
    n = 0;
    for (BOOL more = Thread32First(snap, &entry); more; more = Thread32Next(snap, &entry)) {
        n += entry.th32OwnerProcessID == GetCurrentProcessId();
    }
    CloseHandle(snap);
#else
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    while (f != NULL && fgets(line, sizeof line, f) != NULL) {
        if (strncmp(line, "Threads:", 8) == 0) n = atoi(line + 8);
    }
    if (f != NULL) fclose(f);
#endif
    return n;
}

#ifdef _WIN32
static LONG WINAPI crashed(EXCEPTION_POINTERS *e)
{
    fprintf(stderr, "FAIL: exception 0x%08lx\n", (unsigned long)e->ExceptionRecord->ExceptionCode);
    fflush(stdout);
    ExitProcess(3);
}
#endif

/* A crash ends the process with a line on stderr and a failing status: on
 * Windows (wine) exit status 3 rather than a debugger, which under wine
 * prints its backtrace to stdout and exits 0.  POSIX signals need nothing. */
static void report_crashes(void)
{
#ifdef _WIN32
    SetUnhandledExceptionFilter(crashed);
#endif
}

#endif /* SINPE_PLATFORMS_SHIM_H */
