/*
 * Sections' share of the plan (plan/sections.c): sinpe.h's sections, whose
 * chunks exec/sections.c runs on a rotation's cut.  Not public API.
 */
#ifndef SINPE_PLAN_SECTIONS_H
#define SINPE_PLAN_SECTIONS_H

#include <stddef.h>

#include "exec/work.h"
#include "sinpe.h"

/* Their structure, for empty outputs too (pos_axis, padding, grids, adds
 * and given caches excluded), and their counts for m frequencies (SINPE_OK
 * or SINPE_ERR_INVALID). */
int sinpe_plan_check_section_form(const sinpe_plan *p);
int sinpe_plan_check_sections(const sinpe_plan *p, ptrdiff_t m);

/* The section of each of m frequencies into plan->sections, for `rows`
 * rows of positions per section (SINPE_ERR_NOMEM). */
int sinpe_plan_sections(plan_t *plan, const sinpe_plan *p, ptrdiff_t m, ptrdiff_t rows);

#endif /* SINPE_PLAN_SECTIONS_H */
