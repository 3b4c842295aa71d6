/*
 * The hot loops (loops.h) for x86-64 CPUs with AVX2, chosen at run time
 * (dispatch.c).  GCC and Clang compile this file for AVX2 by the pragmas
 * below, MSVC by /arch:AVX2 (setup.py).  Elsewhere the file is empty.
 */
#include "kernels/kernels.h"

#if defined(SINPE_X86_64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,f16c")
#endif

#define SINPE_LOOPS sinpe_loops_avx2
#define SINPE_LOOPS_AVX 1
#include "kernels/loops.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
typedef int sinpe_no_avx2_loops; /* ISO C wants something in a file */
#endif
