/*
 * Compiler and OS differences, all of them: overflow-checked sizes, byte
 * swaps, fabs, the CPU's SIMD features, atomics, threads, locks, one-time
 * initialisation and fork handlers.  Every other file of the library is
 * plain C11 and calls no compiler builtin.
 *
 * Branches:
 *  - GCC and Clang (Linux glibc and musl, macOS, mingw-w64): builtins;
 *  - MSVC: its intrinsics, or portable C where it has none.  Defining
 *    SINPE_FORCE_PORTABLE makes GCC and Clang take those portable branches
 *    too, so that the code MSVC compiles is built and fuzzed on Linux;
 *  - threads, locks and atomics: POSIX threads and C11 atomics, or on
 *    Windows (MSVC and mingw alike) SRW locks, condition variables and
 *    Interlocked operations, so the Windows pool runs under wine here.
 */
#ifndef SINPE_PLATFORM_H
#define SINPE_PLATFORM_H

/* sched_getaffinity: glibc declares it only if this comes before its first
 * header, so every .c file of the library includes platform.h first. */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE
#endif

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#if defined(_MSC_VER) && !defined(__clang__)
#define SINPE_MSVC 1
#endif
#if defined(SINPE_MSVC) || defined(SINPE_FORCE_PORTABLE)
#define SINPE_PORTABLE_BUILTINS 1
#endif

#if defined(__x86_64__) || defined(_M_X64) || defined(_M_AMD64)
#define SINPE_X86_64 1
/* the avx512_bf16 level: GCC and Clang only (the bfloat16 vector types of
 * their intrinsics); MSVC builds, and the portable branches that stand for
 * them, leave it out */
#if !defined(SINPE_PORTABLE_BUILTINS)
#define SINPE_BF16_LOOPS 1
#endif
#endif

/* Small vector helpers whose pointer arguments (a report flag) must stay
 * in registers: inlined whatever the compiler's size heuristics say. */
#if defined(SINPE_MSVC)
#define SINPE_INLINE __forceinline
#else
#define SINPE_INLINE inline __attribute__((always_inline))
#endif

/* No fused multiply-adds: a*b + c rounded twice, in every loop and at every
 * SIMD level, so that every path gives the same bits (the builds also pass
 * -ffp-contract=off or /fp:precise; these hold whatever flags are used). */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(SINPE_MSVC)
#pragma fp_contract(off)
#endif

/* ------------------------------------------------------------------ */
/* Overflow-checked sizes: nonzero when a * b (a + b) does not fit; the
 * result is then unspecified.  Operands are counts, never negative. */

static inline int sinpe_mul_overflow(size_t a, size_t b, size_t *product)
{
#if defined(SINPE_PORTABLE_BUILTINS)
    *product = a * b; /* unsigned: wraps, no UB */
    return b != 0 && a > SIZE_MAX / b;
#else
    return __builtin_mul_overflow(a, b, product);
#endif
}

static inline int sinpe_add_overflow(size_t a, size_t b, size_t *sum)
{
#if defined(SINPE_PORTABLE_BUILTINS)
    *sum = a + b;
    return *sum < a;
#else
    return __builtin_add_overflow(a, b, sum);
#endif
}

/* The same for counts held in a ptrdiff_t (a, b >= 0). */
static inline int sinpe_mul_overflow_ptrdiff(ptrdiff_t a, ptrdiff_t b, ptrdiff_t *product)
{
#if defined(SINPE_PORTABLE_BUILTINS)
    const int over = b != 0 && a > PTRDIFF_MAX / b;
    *product = over ? 0 : a * b;
    return over;
#else
    return __builtin_mul_overflow(a, b, product);
#endif
}

/* ------------------------------------------------------------------ */
/* Byte swaps and fabs (branch free, so the loops around them vectorise). */

#if defined(SINPE_MSVC) && !defined(SINPE_FORCE_PORTABLE)
#include <stdlib.h>
#define sinpe_bswap32(x) ((uint32_t)_byteswap_ulong(x))
#define sinpe_bswap64(x) ((uint64_t)_byteswap_uint64(x))
#elif defined(SINPE_PORTABLE_BUILTINS)
static inline uint32_t sinpe_bswap32(uint32_t x)
{
    return (x >> 24) | ((x >> 8) & 0xff00u) | ((x << 8) & 0xff0000u) | (x << 24);
}

static inline uint64_t sinpe_bswap64(uint64_t x)
{
    return ((uint64_t)sinpe_bswap32((uint32_t)x) << 32) | sinpe_bswap32((uint32_t)(x >> 32));
}
#else
#define sinpe_bswap32(x) ((uint32_t)__builtin_bswap32(x))
#define sinpe_bswap64(x) ((uint64_t)__builtin_bswap64(x))
#endif

static inline double sinpe_fabs(double x)
{
#if defined(SINPE_PORTABLE_BUILTINS)
    uint64_t bits;
    memcpy(&bits, &x, 8);
    bits &= ~((uint64_t)1 << 63);
    memcpy(&x, &bits, 8);
    return x;
#else
    return __builtin_fabs(x);
#endif
}

/* ------------------------------------------------------------------ */
/* The CPU features the SIMD levels use (sinpe.h's SINPE_SIMD_LIST names
 * each level's), where the CPU has them and the OS saves their registers.
 * x86-64: cpuid for the instructions and xgetbv for the register state the
 * OS saves (a CPU with AVX-512 under an OS that does not save the ZMM
 * registers must not run AVX-512 code); macOS enables the AVX-512 state
 * only on first use, so there the kernel's own answer (sysctl) replaces
 * xgetbv for it.  aarch64: NEON is baseline, no feature. */
enum {
    SINPE_CPU_AVX2 = 1 << 0,       /* AVX2 and F16C (every AVX2 CPU has it; a hypervisor
                                    * hiding it gets the baseline), YMM state */
    SINPE_CPU_AVX512 = 1 << 1,     /* AVX-512 F, DQ, BW, VL (every AVX-512 CPU since
                                    * Skylake-X), ZMM state */
    SINPE_CPU_AVX512_BF16 = 1 << 2 /* AVX512_BF16 */
};

#if defined(SINPE_X86_64)
#if defined(SINPE_MSVC)
#include <intrin.h>
static inline void sinpe_cpuid(unsigned leaf, unsigned sub, unsigned r[4])
{
    int regs[4];
    __cpuidex(regs, (int)leaf, (int)sub);
    for (int i = 0; i < 4; ++i) {
        r[i] = (unsigned)regs[i];
    }
}

static inline uint64_t sinpe_xgetbv(void)
{
    return _xgetbv(0);
}
#else
#include <cpuid.h>
static inline void sinpe_cpuid(unsigned leaf, unsigned sub, unsigned r[4])
{
    r[0] = r[1] = r[2] = r[3] = 0;
    if (leaf <= (unsigned)__get_cpuid_max(0, NULL)) {
        __cpuid_count(leaf, sub, r[0], r[1], r[2], r[3]);
    }
}

static inline uint64_t sinpe_xgetbv(void)
{
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return ((uint64_t)hi << 32) | lo;
}
#endif
#if defined(__APPLE__)
#include <sys/sysctl.h>
static inline int sinpe_macos_has_avx512(void)
{
    int value = 0;
    size_t size = sizeof value;
    return sysctlbyname("hw.optional.avx512f", &value, &size, NULL, 0) == 0 && value != 0;
}
#endif

static inline unsigned sinpe_cpu_features(void)
{
    unsigned features = 0, r1[4], r7[4], r71[4];
    sinpe_cpuid(1, 0, r1);
    const int osxsave = (r1[2] >> 27) & 1, avx = (r1[2] >> 28) & 1, f16c = (r1[2] >> 29) & 1;
    if (!osxsave || !avx) {
        return features;
    }
    const uint64_t xcr0 = sinpe_xgetbv();
    if ((xcr0 & 0x6) != 0x6) { /* the XMM and YMM state */
        return features;
    }
    sinpe_cpuid(7, 0, r7);
    if (((r7[1] >> 5) & 1) && f16c) {
        features |= SINPE_CPU_AVX2;
    }
    const unsigned avx512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
#if defined(__APPLE__)
    const int zmm_state = sinpe_macos_has_avx512();
#else
    const int zmm_state = (xcr0 & 0xe0) == 0xe0; /* opmask, upper ZMM, ZMM16-31 */
#endif
    if ((r7[1] & avx512) == avx512 && zmm_state) {
        features |= SINPE_CPU_AVX512;
    }
    /* AVX512_BF16: leaf 7, subleaf 1, EAX bit 5 (when leaf 7 has subleaf 1) */
    if (r7[0] >= 1) {
        sinpe_cpuid(7, 1, r71);
        if ((r71[0] >> 5) & 1) {
            features |= SINPE_CPU_AVX512_BF16;
        }
    }
    return features;
}
#else
static inline unsigned sinpe_cpu_features(void)
{
    return 0;
}
#endif

/* ------------------------------------------------------------------ */
/* Atomics: a counter shared by the threads of one call, and flags. */

#if defined(_WIN32)
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#ifndef NOMINMAX
#define NOMINMAX
#endif
#include <windows.h>
typedef struct {
    volatile LONG64 value;
} sinpe_atomic;
#define SINPE_ATOMIC_INIT(v) {(v)}
static inline ptrdiff_t sinpe_atomic_load(sinpe_atomic *a)
{
    return (ptrdiff_t)InterlockedCompareExchange64(&a->value, 0, 0);
}
static inline void sinpe_atomic_store(sinpe_atomic *a, ptrdiff_t v)
{
    (void)InterlockedExchange64(&a->value, (LONG64)v);
}
static inline ptrdiff_t sinpe_atomic_fetch_add(sinpe_atomic *a, ptrdiff_t v)
{
    return (ptrdiff_t)InterlockedExchangeAdd64(&a->value, (LONG64)v);
}
static inline ptrdiff_t sinpe_atomic_exchange(sinpe_atomic *a, ptrdiff_t v)
{
    return (ptrdiff_t)InterlockedExchange64(&a->value, (LONG64)v);
}
#else
#include <stdatomic.h>
typedef struct {
    atomic_ptrdiff_t value;
} sinpe_atomic;
#define SINPE_ATOMIC_INIT(v) {(v)}
static inline ptrdiff_t sinpe_atomic_load(sinpe_atomic *a)
{
    return atomic_load(&a->value);
}
static inline void sinpe_atomic_store(sinpe_atomic *a, ptrdiff_t v)
{
    atomic_store(&a->value, v);
}
static inline ptrdiff_t sinpe_atomic_fetch_add(sinpe_atomic *a, ptrdiff_t v)
{
    return atomic_fetch_add(&a->value, v);
}
static inline ptrdiff_t sinpe_atomic_exchange(sinpe_atomic *a, ptrdiff_t v)
{
    return atomic_exchange(&a->value, v);
}
#endif

/* A hint inside a spin-wait loop: yields the core's pipeline (and an SMT
 * sibling) while the loop polls. */
#if defined(_WIN32)
#define sinpe_cpu_relax() YieldProcessor()
#elif defined(SINPE_X86_64)
#include <emmintrin.h>
#define sinpe_cpu_relax() _mm_pause()
#elif defined(__aarch64__)
#define sinpe_cpu_relax() __asm__ volatile("yield" ::: "memory")
#else
#define sinpe_cpu_relax() ((void)0)
#endif

/* ------------------------------------------------------------------ */
/* Threads, locks, condition variables, once, fork. */

#if defined(_WIN32)
typedef SRWLOCK sinpe_mutex;
#define SINPE_MUTEX_INIT SRWLOCK_INIT
typedef CONDITION_VARIABLE sinpe_cond;
#define SINPE_COND_INIT CONDITION_VARIABLE_INIT
typedef INIT_ONCE sinpe_once;
#define SINPE_ONCE_INIT INIT_ONCE_STATIC_INIT

static inline void sinpe_mutex_lock(sinpe_mutex *m)
{
    AcquireSRWLockExclusive(m);
}
static inline void sinpe_mutex_unlock(sinpe_mutex *m)
{
    ReleaseSRWLockExclusive(m);
}
static inline void sinpe_cond_wait(sinpe_cond *c, sinpe_mutex *m)
{
    SleepConditionVariableSRW(c, m, INFINITE, 0);
}
static inline void sinpe_cond_signal(sinpe_cond *c)
{
    WakeConditionVariable(c);
}
static inline void sinpe_cond_broadcast(sinpe_cond *c)
{
    WakeAllConditionVariable(c);
}

static BOOL CALLBACK sinpe_once_trampoline(PINIT_ONCE once, PVOID fn, PVOID *unused)
{
    (void)once;
    (void)unused;
    ((void (*)(void))(uintptr_t)fn)(); /* a function pointer carried as data */
    return TRUE;
}
static inline void sinpe_call_once(sinpe_once *once, void (*fn)(void))
{
    InitOnceExecuteOnce(once, sinpe_once_trampoline, (PVOID)(uintptr_t)fn, NULL);
}

/* Starts a detached thread running fn(NULL); 0 on success.  Windows
 * delivers Ctrl-C on a thread of its own, so there is no mask to set. */
typedef void (*sinpe_thread_fn)(void);
static DWORD WINAPI sinpe_thread_trampoline(LPVOID fn)
{
    ((sinpe_thread_fn)(uintptr_t)fn)();
    return 0;
}
static inline int sinpe_thread_start(sinpe_thread_fn fn)
{
    HANDLE thread = CreateThread(NULL, 0, sinpe_thread_trampoline, (LPVOID)(uintptr_t)fn, 0, NULL);
    if (thread == NULL) {
        return -1;
    }
    CloseHandle(thread);
    return 0;
}

/* Gives the core to another thread that is ready to run on it, if any
 * (else returns at once). */
static inline void sinpe_thread_yield(void)
{
    (void)SwitchToThread();
}

/* A monotonic clock, in nanoseconds (spin-waits). */
static inline int64_t sinpe_now_ns(void)
{
    LARGE_INTEGER count, frequency;
    QueryPerformanceCounter(&count);
    QueryPerformanceFrequency(&frequency);
    return (int64_t)((double)count.QuadPart * (1e9 / (double)frequency.QuadPart));
}

/* The calling thread's CPU time, in nanoseconds (whether the OS left it
 * waiting for a core: threads.c). */
static inline int64_t sinpe_thread_cpu_ns(void)
{
    FILETIME created, exited, kernel, user;
    if (!GetThreadTimes(GetCurrentThread(), &created, &exited, &kernel, &user)) {
        return 0;
    }
    const uint64_t k = ((uint64_t)kernel.dwHighDateTime << 32) | kernel.dwLowDateTime;
    const uint64_t u = ((uint64_t)user.dwHighDateTime << 32) | user.dwLowDateTime;
    return (int64_t)(k + u) * 100;
}

/* The logical processors this process may run on. */
static inline long sinpe_cpu_count(void)
{
    DWORD_PTR process, system;
    long count = 0;
    if (GetProcessAffinityMask(GetCurrentProcess(), &process, &system)) {
        for (; process != 0; process &= process - 1) {
            ++count;
        }
    }
    return count > 0 ? count : (long)GetActiveProcessorCount(ALL_PROCESSOR_GROUPS);
}

/* No fork on Windows. */
#define SINPE_HAVE_FORK 0
static inline void sinpe_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    (void)prepare, (void)parent, (void)child;
}

#else /* POSIX */
#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
#include <sched.h>
typedef pthread_mutex_t sinpe_mutex;
#define SINPE_MUTEX_INIT PTHREAD_MUTEX_INITIALIZER
typedef pthread_cond_t sinpe_cond;
#define SINPE_COND_INIT PTHREAD_COND_INITIALIZER
typedef pthread_once_t sinpe_once;
#define SINPE_ONCE_INIT PTHREAD_ONCE_INIT

static inline void sinpe_mutex_lock(sinpe_mutex *m)
{
    (void)pthread_mutex_lock(m);
}
static inline void sinpe_mutex_unlock(sinpe_mutex *m)
{
    (void)pthread_mutex_unlock(m);
}
static inline void sinpe_cond_wait(sinpe_cond *c, sinpe_mutex *m)
{
    (void)pthread_cond_wait(c, m);
}
static inline void sinpe_cond_signal(sinpe_cond *c)
{
    (void)pthread_cond_signal(c);
}
static inline void sinpe_cond_broadcast(sinpe_cond *c)
{
    (void)pthread_cond_broadcast(c);
}
static inline void sinpe_call_once(sinpe_once *once, void (*fn)(void))
{
    (void)pthread_once(once, fn);
}

typedef void (*sinpe_thread_fn)(void);
static void *sinpe_thread_trampoline(void *fn)
{
    ((sinpe_thread_fn)(uintptr_t)fn)();
    return NULL;
}
/* Starts a detached thread running fn; 0 on success.  The thread blocks
 * every signal, so SIGINT reaches the main thread (where Python's handler
 * runs) and never a helper. */
static inline int sinpe_thread_start(sinpe_thread_fn fn)
{
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old); /* inherited by the new thread */
    pthread_t thread;
    const int status = pthread_create(&thread, NULL, sinpe_thread_trampoline, (void *)(uintptr_t)fn);
    if (status == 0) {
        pthread_detach(thread);
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return status == 0 ? 0 : -1;
}

/* Gives the core to another thread that is ready to run on it, if any
 * (else returns at once). */
static inline void sinpe_thread_yield(void)
{
    (void)sched_yield();
}

/* A monotonic clock, in nanoseconds (spin-waits). */
static inline int64_t sinpe_now_ns(void)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

/* The calling thread's CPU time, in nanoseconds (whether the OS left it
 * waiting for a core: threads.c). */
static inline int64_t sinpe_thread_cpu_ns(void)
{
    struct timespec used;
    if (clock_gettime(CLOCK_THREAD_CPUTIME_ID, &used) != 0) {
        return 0;
    }
    return (int64_t)used.tv_sec * 1000000000 + used.tv_nsec;
}

/* The cores this process may run on (taskset and cpusets respected). */
static inline long sinpe_cpu_count(void)
{
#if defined(__linux__) && defined(CPU_COUNT)
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        return CPU_COUNT(&set);
    }
#endif
    return sysconf(_SC_NPROCESSORS_ONLN);
}

#define SINPE_HAVE_FORK 1
static inline void sinpe_at_fork(void (*prepare)(void), void (*parent)(void), void (*child)(void))
{
    (void)pthread_atfork(prepare, parent, child);
}
#endif

/* ------------------------------------------------------------------ */
/* A function of a shared library the process has already loaded (its
 * file, as the loader knows it), or NULL: never loads one (RTLD_NOLOAD).
 * The reference taken is kept, so the library stays while sinpe may call
 * it.  None on Windows (no OpenMP runtime sinpe knows there). */
#if defined(_WIN32)
static inline void (*sinpe_loaded_function(const char *library, const char *name))(void)
{
    (void)library, (void)name;
    return NULL;
}
#else
#include <dlfcn.h>
static inline void (*sinpe_loaded_function(const char *library, const char *name))(void)
{
    void *handle = dlopen(library, RTLD_LAZY | RTLD_NOLOAD);
    void *function = handle != NULL ? dlsym(handle, name) : NULL;
    return (void (*)(void))(uintptr_t)function; /* POSIX: a function's address */
}
#endif

/* ------------------------------------------------------------------ */
/* Memory straight from the OS, page aligned, and given back to it when
 * freed: the kept tables (row_cache.c).  From malloc, glibc's dynamic mmap
 * threshold (raised by every large free) can place a large table inside the
 * heap, where its pages stay resident after the free, so clear_cache would
 * not shrink the process.  Under AddressSanitizer malloc is kept, so that
 * its redzones still guard the table's ends. */

#if defined(__SANITIZE_ADDRESS__)
#define SINPE_PAGES_FROM_MALLOC 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define SINPE_PAGES_FROM_MALLOC 1
#endif
#endif

#if defined(SINPE_PAGES_FROM_MALLOC)
#include <stdlib.h>
static inline void *sinpe_pages_alloc(size_t bytes)
{
    return malloc(bytes);
}
static inline void sinpe_pages_free(void *pages, size_t bytes)
{
    (void)bytes;
    free(pages);
}
#elif defined(_WIN32)
static inline void *sinpe_pages_alloc(size_t bytes)
{
    return VirtualAlloc(NULL, bytes, MEM_RESERVE | MEM_COMMIT, PAGE_READWRITE);
}
static inline void sinpe_pages_free(void *pages, size_t bytes)
{
    (void)bytes;
    VirtualFree(pages, 0, MEM_RELEASE);
}
#else
#include <sys/mman.h>
static inline void *sinpe_pages_alloc(size_t bytes)
{
    void *pages = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return pages == MAP_FAILED ? NULL : pages;
}
static inline void sinpe_pages_free(void *pages, size_t bytes)
{
    (void)munmap(pages, bytes);
}
#endif

#endif /* SINPE_PLATFORM_H */
