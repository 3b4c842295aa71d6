/*
 * SINPE_CLONES: compile a hot loop for AVX-512, AVX2 and baseline x86-64 and
 * pick one at load time (GCC/Clang function multiversioning, an ifunc).  The
 * loops use only IEEE +, -, *, compares and conversions, and the build has
 * -ffp-contract=off, so every clone gives the same bits: the choice changes
 * speed, never values.  Elsewhere (other CPUs, other compilers, sanitizer
 * builds that define SINPE_NO_CLONES) the portable build is used as is.
 */
#ifndef SINPE_SIMD_H
#define SINPE_SIMD_H

/* ThreadSanitizer instruments the ifunc resolvers, which the dynamic loader
 * runs before the sanitizer is initialised (a crash at start-up): no clones
 * under TSan. */
#if defined(__SANITIZE_THREAD__)
#define SINPE_NO_CLONES 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SINPE_NO_CLONES 1
#endif
#endif

#if defined(__x86_64__) && defined(__ELF__) && !defined(SINPE_NO_CLONES) && \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8) || \
     (defined(__clang__) && __clang_major__ >= 14))
#define SINPE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
/* x86 intrinsics behind target attributes and a run-time CPU check (the
 * streaming stores of rows.c, which no C loop can express). */
#define SINPE_X86_DISPATCH 1
#else
#define SINPE_CLONES
#define SINPE_X86_DISPATCH 0
#endif

#ifdef __clang__
/* GCC has no such pragma but honours -ffp-contract=off; Clang honours both. */
#pragma STDC FP_CONTRACT OFF
#endif

#endif /* SINPE_SIMD_H */
