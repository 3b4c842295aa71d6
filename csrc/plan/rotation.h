/*
 * A rotation's share of the plan (plan/rotation.c): sinpe.h's rotate.
 * Not public API.
 */
#ifndef SINPE_PLAN_ROTATION_H
#define SINPE_PLAN_ROTATION_H

#include <stddef.h>

#include "exec/work.h"
#include "sinpe.h"

/* The views it reads besides out (part of the structure: checked for
 * empty outputs too), and its columns and values for rows of d columns
 * (SINPE_OK or SINPE_ERR_INVALID). */
int sinpe_plan_check_rotation_views(const sinpe_plan *p, const sinpe_array *out);
int sinpe_plan_check_rotation(const sinpe_plan *p, const sinpe_array *out, ptrdiff_t d);

/* Its cut, with threads and scratch (SINPE_ERR_NOMEM); RoPE caches with
 * sections take it too. */
int sinpe_plan_cut_rotation(plan_t *plan, const sinpe_plan *p, const sinpe_array *out,
                            ptrdiff_t rows);

/* Its kept tile rows, into plan->made when the cache of made tables has
 * them or they are asked for again; after the cut.  Never fails the call. */
void sinpe_plan_rotation_made_rows(plan_t *plan, const sinpe_plan *p);

#endif /* SINPE_PLAN_ROTATION_H */
