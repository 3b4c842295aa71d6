/*
 * A grid's share of the plan (plan/grid.c): sinpe.h's split and order.
 * Not public API.
 */
#ifndef SINPE_PLAN_GRID_H
#define SINPE_PLAN_GRID_H

#include <stddef.h>

#include "exec/work.h"
#include "sinpe.h"

/* Its split and order (SINPE_OK or SINPE_ERR_INVALID). */
int sinpe_plan_check_grid(const sinpe_plan *p, const sinpe_array *out);

/* Its cut into bands, with threads and scratch (SINPE_ERR_NOMEM when the
 * bands' tiles cannot be had). */
int sinpe_plan_cut_grid(plan_t *plan, const sinpe_array *out, ptrdiff_t rows);

#endif /* SINPE_PLAN_GRID_H */
