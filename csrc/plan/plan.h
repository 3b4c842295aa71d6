/*
 * The planner's entry, for the call layer (csrc/call.c): a sinpe_run call
 * made into the work the executor runs (exec/work.h), run on the threads,
 * and freed.  Not public API.
 */
#ifndef SINPE_PLAN_PLAN_H
#define SINPE_PLAN_PLAN_H

#include "exec/work.h"
#include "sinpe.h"

/* Checks the call (sinpe.h's contract) and makes its plan: SINPE_OK,
 * SINPE_ERR_INVALID or SINPE_ERR_NOMEM, nothing written.  *plan stays NULL
 * (with SINPE_OK) when the outputs are empty: nothing to run. */
int sinpe_plan_make(plan_t **plan, const sinpe_plan *p, const sinpe_array *out,
                    const sinpe_array *out2);

/* Runs every chunk of the plan made of p on the threads: SINPE_OK, or
 * SINPE_ERR_CANCELLED when p's cancel callback (stores only) stopped it. */
int sinpe_plan_run(plan_t *plan, const sinpe_plan *p);

void sinpe_plan_free(plan_t *plan);

/* Drops what making plans keeps for later calls: frequency tables, kept
 * tables and the spare scratch (tables in use are freed when released). */
void sinpe_plan_clear_caches(void);

#endif /* SINPE_PLAN_PLAN_H */
