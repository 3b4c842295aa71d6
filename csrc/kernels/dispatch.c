/*
 * Which SIMD level's loops run (kernels.h): the best the CPU and the OS
 * support, or the one SINPE_SIMD names, capped at what the CPU has.  The
 * levels are sinpe.h's list (SINPE_SIMD_LIST): their names, their order
 * and the CPU features each needs come from there alone, and their loops
 * from kernels/levels/<name>.c, NULL where a build leaves a level out.
 * The choice is made once, at the first call (the CPython binding makes it
 * at import, to warn about a bad SINPE_SIMD), and is held atomically: a
 * call reads it once per block, so choosing again (tests) is safe at any
 * time.
 */
#include "core/platform.h"

#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"

#define LEVEL_NAME(id, name, cpu) #name,
static const char *const level_names[SINPE_SIMD_LEVELS] = {SINPE_SIMD_LIST(LEVEL_NAME)};
#undef LEVEL_NAME

#define LEVEL_CPU(id, name, cpu) (cpu),
static const unsigned level_cpu[SINPE_SIMD_LEVELS] = {SINPE_SIMD_LIST(LEVEL_CPU)};
#undef LEVEL_CPU

#define LEVEL_LOOPS(id, name, cpu) &sinpe_loops_##name,
static const sinpe_kernels *const *const level_loops[SINPE_SIMD_LEVELS] = {
    SINPE_SIMD_LIST(LEVEL_LOOPS)};
#undef LEVEL_LOOPS

/* -1 and 0 until chosen */
static sinpe_atomic chosen = SINPE_ATOMIC_INIT(-1);
static sinpe_atomic chosen_loops = SINPE_ATOMIC_INIT(0); /* its sinpe_kernels */

/* The levels this build has and this CPU runs, a bit each. */
static unsigned levels_here(void)
{
    static sinpe_atomic known = SINPE_ATOMIC_INIT(-1); /* every racer stores the same */
    ptrdiff_t levels = sinpe_atomic_load(&known);
    if (levels < 0) {
        const unsigned features = sinpe_cpu_features();
        levels = 0;
        for (int level = 0; level < SINPE_SIMD_LEVELS; ++level) {
            if (*level_loops[level] != NULL && (features & level_cpu[level]) == level_cpu[level]) {
                levels |= (ptrdiff_t)1 << level;
            }
        }
        sinpe_atomic_store(&known, levels);
    }
    return (unsigned)levels;
}

static int best_level(void)
{
    const unsigned levels = levels_here();
    int best = SINPE_SIMD_BASELINE;
    for (int level = 0; level < SINPE_SIMD_LEVELS; ++level) {
        best = (levels >> level) & 1u ? level : best;
    }
    return best;
}

int sinpe_dispatch_available(int level)
{
    return level >= 0 && level < SINPE_SIMD_LEVELS && ((levels_here() >> level) & 1u);
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
    sinpe_atomic_store(&chosen_loops, (ptrdiff_t)(uintptr_t)*level_loops[level]);
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
    ptrdiff_t loops = sinpe_atomic_load(&chosen_loops);
    if (loops == 0) {
        (void)sinpe_dispatch_select(getenv("SINPE_SIMD"));
        loops = sinpe_atomic_load(&chosen_loops);
    }
    return (const sinpe_kernels *)(uintptr_t)loops;
}
