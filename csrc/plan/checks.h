/*
 * The checks of a call that every action shares (plan/checks.c): its
 * outputs, its columns, the form and range of its positions.  A grid's,
 * a rotation's and sections' own checks are their files'.  Not public API.
 */
#ifndef SINPE_PLAN_CHECKS_H
#define SINPE_PLAN_CHECKS_H

#include <stddef.h>

#include "exec/work.h"
#include "sinpe.h"

/* The outputs: valid views, out2 exactly for RoPE caches, of out's shape. */
int sinpe_plan_check_outputs(const sinpe_plan *p, const sinpe_array *out, const sinpe_array *out2);

/* Frequencies, layout and what is done, for a row of d columns. */
int sinpe_plan_check_columns(const sinpe_plan *p, ptrdiff_t d);

/* The form of the positions for rows of nrow_axes axes. */
int sinpe_plan_check_positions(const sinpe_plan *p, int nrow_axes);

/* The largest |position| of the call (plan->ints or reals: `rows` of them;
 * range positions: outer_count along pos_axis), or -1 when one is out of
 * the supported range (or not finite). */
double sinpe_plan_max_abs_position(const plan_t *plan, const sinpe_plan *p, ptrdiff_t rows,
                                   ptrdiff_t outer_count);

#endif /* SINPE_PLAN_CHECKS_H */
