/*
 * The avx512_bf16 level (sinpe.h's list): the hot loops (kernels/loops.h)
 * for x86-64 CPUs with AVX-512 and AVX512_BF16 (Cooper Lake, Sapphire
 * Rapids, Zen 4 and later), chosen at run time (kernels/dispatch.c): the
 * avx512 level's loops, with the bfloat16 stores narrowed by
 * vcvtne2ps2bf16 (kernels/isa/avx512.h).  GCC and Clang compile this file by
 * the pragmas below; MSVC, whose intrinsics lack the bfloat16 vector types
 * here, and the portable build leave the level out (SINPE_BF16_LOOPS).
 */
#include "kernels/kernels.h"

#if defined(SINPE_BF16_LOOPS)
#if defined(__clang__)
#pragma clang attribute push(                                                                   \
    __attribute__((target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16"))),          \
    apply_to = function)
#elif defined(__GNUC__)
#pragma GCC target("avx2,f16c,avx512f,avx512bw,avx512dq,avx512vl,avx512bf16")
#endif

#define SINPE_LOOPS sinpe_loops_avx512_bf16
#define SINPE_ISA_AVX512 1
#define SINPE_ISA_BF16 1
#include "kernels/loops.h"

#if defined(__clang__)
#pragma clang attribute pop
#endif
#else
SINPE_LEVEL_LEFT_OUT(avx512_bf16);
#endif
