/*
 * The baseline level (sinpe.h's list): the hot loops (kernels/loops.h) for
 * every CPU of the architecture, x86-64's SSE2 and aarch64's NEON.  The only
 * level on aarch64 and other CPUs.
 */
#include "kernels/kernels.h"

#define SINPE_LOOPS sinpe_loops_baseline
#include "kernels/loops.h"
