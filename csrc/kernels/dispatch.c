/*
 * Which SIMD level's loops run (kernels.h): the best the CPU and the OS
 * support, or the one SINPE_SIMD names, capped at what the CPU has.  The
 * choice is made once, at the first call (the CPython binding makes it at
 * import, to warn about a bad SINPE_SIMD), and is one atomic index: a call
 * reads it once per block, so choosing again (tests) is safe at any time.
 */
#include "core/platform.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

static const char *const level_names[SINPE_SIMD_LEVELS] = {"baseline", "avx2", "avx512",
                                                            "avx512_bf16"};

/* -1 until chosen */
static sinpe_atomic chosen = SINPE_ATOMIC_INIT(-1);

static unsigned cpu_levels(void)
{
    static sinpe_atomic known = SINPE_ATOMIC_INIT(-1); /* every racer stores the same */
    ptrdiff_t levels = sinpe_atomic_load(&known);
    if (levels < 0) {
        levels = (ptrdiff_t)sinpe_cpu_simd_levels();
#if !defined(SINPE_BF16_LOOPS)
        levels &= ~((ptrdiff_t)1 << SINPE_SIMD_AVX512_BF16); /* not built */
#endif
        sinpe_atomic_store(&known, levels);
    }
    return (unsigned)levels;
}

static int best_level(void)
{
    const unsigned levels = cpu_levels();
    int best = SINPE_SIMD_BASELINE;
    for (int level = 0; level < SINPE_SIMD_LEVELS; ++level) {
        best = (levels >> level) & 1u ? level : best;
    }
    return best;
}

int sinpe_dispatch_available(int level)
{
    return level >= 0 && level < SINPE_SIMD_LEVELS && ((cpu_levels() >> level) & 1u);
}

const char *sinpe_dispatch_name(int level)
{
    return level >= 0 && level < SINPE_SIMD_LEVELS ? level_names[level] : NULL;
}

int sinpe_dispatch_select(const char *name)
{
    int level = best_level(), status = SINPE_OK;
    if (name != NULL && name[0] != '\0') {
        int named = -1;
        for (int i = 0; i < SINPE_SIMD_LEVELS; ++i) {
            named = strcmp(name, level_names[i]) == 0 ? i : named;
        }
        if (sinpe_dispatch_available(named)) {
            level = named;
        } else {
            status = SINPE_ERR_INVALID;
        }
    }
    sinpe_atomic_store(&chosen, level);
    return status;
}

int sinpe_dispatch_level(void)
{
    ptrdiff_t level = sinpe_atomic_load(&chosen);
    if (level < 0) {
        (void)sinpe_dispatch_select(getenv("SINPE_SIMD"));
        level = sinpe_atomic_load(&chosen);
    }
    return (int)level;
}

const sinpe_kernels *sinpe_kernels_active(void)
{
#if defined(SINPE_X86_64)
    static const sinpe_kernels *const loops[SINPE_SIMD_LEVELS] = {
        &sinpe_loops_baseline, &sinpe_loops_avx2, &sinpe_loops_avx512,
#if defined(SINPE_BF16_LOOPS)
        &sinpe_loops_avx512_bf16,
#else
        &sinpe_loops_avx512, /* never chosen: the level is not offered */
#endif
    };
    return loops[sinpe_dispatch_level()];
#else
    return &sinpe_loops_baseline;
#endif
}
