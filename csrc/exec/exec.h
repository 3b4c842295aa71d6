/*
 * The executor's entry (exec/chunk.c): one chunk of a plan (exec/work.h),
 * on any worker, as core/threads.h's pool hands chunks out.  A chunk's
 * bits never depend on the worker that runs it, nor on the others.  Not
 * public API.
 */
#ifndef SINPE_EXEC_EXEC_H
#define SINPE_EXEC_EXEC_H

#include <stddef.h>

/* Runs chunk `chunk` of the plan_t `plan` on worker `worker` (a
 * sinpe_chunk_fn). */
void sinpe_exec_chunk(void *plan, ptrdiff_t chunk, int worker);

#endif /* SINPE_EXEC_EXEC_H */
