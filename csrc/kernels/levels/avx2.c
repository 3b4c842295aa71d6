/*
 * The avx2 level (sinpe.h's list): the hot loops (kernels/loops.h) for
 * x86-64 CPUs with AVX2 and F16C, chosen at run time (kernels/dispatch.c).
 * GCC and Clang compile this file for them by the pragmas below, MSVC by
 * /arch:AVX2 (setup.py).  Elsewhere the level is left out.
 */
#include "kernels/kernels.h"

#if defined(SINPE_X86_64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c"))), apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,f16c")
#endif

#define SINPE_LOOPS sinpe_loops_avx2
#define SINPE_ISA_AVX2 1
#include "kernels/loops.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
SINPE_LEVEL_LEFT_OUT(avx2);
#endif
