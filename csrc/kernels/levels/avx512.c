/*
 * The avx512 level (sinpe.h's list): the hot loops (kernels/loops.h) for
 * x86-64 CPUs with AVX-512 (F, BW, DQ, VL: Skylake-X, Ice Lake, Sapphire
 * Rapids, Zen 4 and later), chosen at run time (kernels/dispatch.c).  GCC
 * and Clang compile this file for AVX-512 by the pragmas below, MSVC by
 * /arch:AVX512 (setup.py).  Elsewhere the level is left out.
 */
#include "kernels/kernels.h"

#if defined(SINPE_X86_64)
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl"))), \
                             apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl")
#endif

#define SINPE_LOOPS sinpe_loops_avx512
#define SINPE_ISA_AVX512 1
#include "kernels/loops.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
SINPE_LEVEL_LEFT_OUT(avx512);
#endif
