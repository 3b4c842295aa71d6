/*
 * The checks of a call that every action shares (plan/checks.h), the
 * contract of sinpe.h.  Everything that can fail fails at plan time,
 * before any output is written.
 */
#include "core/platform.h"

#include <math.h>

#include "core/elements.h"
#include "plan/checks.h"

int sinpe_plan_check_outputs(const sinpe_plan *p, const sinpe_array *out, const sinpe_array *out2)
{
    if (sinpe_check_view(out) != SINPE_OK || (p->rope != 0) != (out2 != NULL)) {
        return SINPE_ERR_INVALID;
    }
    if (out2 != NULL) {
        if (sinpe_check_view(out2) != SINPE_OK || out2->ndim != out->ndim) {
            return SINPE_ERR_INVALID;
        }
        for (int i = 0; i < out->ndim; ++i) {
            if (out2->shape[i] != out->shape[i]) {
                return SINPE_ERR_INVALID;
            }
        }
    }
    return SINPE_OK;
}

int sinpe_plan_check_columns(const sinpe_plan *p, ptrdiff_t d)
{
    if (d < 1 || (p->rope && (d % 2 != 0 || p->split != NULL)) ||
        (unsigned)p->layout > SINPE_SINES_FIRST ||
        (p->add && (p->rope || p->split != NULL)) ||
        ((p->add || p->rope) && !isfinite(p->scale))) {
        return SINPE_ERR_INVALID;
    }
    if (p->freq != NULL) {
        const ptrdiff_t m = p->nfreq;
        return p->split == NULL &&
                       (p->rope ? m == d / 2 : (m == d / 2 || m == (d + 1) / 2))
                   ? SINPE_OK
                   : SINPE_ERR_INVALID;
    }
    return p->n >= SINPE_MIN_BASE && p->n <= SINPE_MAX_BASE && /* also rejects NaN */
                   (p->schedule == SINPE_PAPER || (p->schedule == SINPE_FAIRSEQ && !p->rope))
               ? SINPE_OK
               : SINPE_ERR_INVALID;
}

int sinpe_plan_check_positions(const sinpe_plan *p, int nrow_axes)
{
    if (p->split != NULL) {
        return SINPE_OK;
    }
    if (p->pos_axis >= 0) {
        return p->pos_axis < nrow_axes && p->ints == NULL && p->reals == NULL ? SINPE_OK
                                                                              : SINPE_ERR_INVALID;
    }
    return (p->ints == NULL) != (p->reals == NULL) ? SINPE_OK : SINPE_ERR_INVALID;
}

/* Whether every explicit position is within the supported range (a NaN is
 * not).  Loops without an exit, branch or conversion, which vectorise: a
 * call's positions (broadcast over the heads, and one per section) can be
 * as many as its rows. */
static int positions_in_range(const plan_t *plan, ptrdiff_t rows)
{
    const uint64_t bound = (uint64_t)SINPE_MAX_POSITION;
    if (plan->ints != NULL) {
        /* p + bound in [0, 2 bound] exactly when p is in range; the bits of
         * all of them stay below 2 bound (a power of two) unless one is
         * out of range or at +bound itself, which the exact loop tells */
        uint64_t bits = 0;
        for (ptrdiff_t i = 0; i < rows; ++i) {
            bits |= (uint64_t)plan->ints[i] + bound;
        }
        int outside = 0;
        for (ptrdiff_t i = 0; bits >= 2 * bound && i < rows; ++i) {
            outside |= (uint64_t)plan->ints[i] + bound > 2 * bound;
        }
        return !outside;
    }
    int outside = 0;
    for (ptrdiff_t i = 0; i < rows; ++i) {
        outside |= !(fabs(plan->reals[i]) <= (double)bound);
    }
    return !outside;
}

/* Explicit positions and a schedule's frequencies (none above 1, so that
 * every position in range keeps every angle in range): the bound itself,
 * all the checks need. */
double sinpe_plan_max_abs_position(const plan_t *plan, const sinpe_plan *p, ptrdiff_t rows,
                                   ptrdiff_t outer_count)
{
    const double bound = (double)SINPE_MAX_POSITION;
    if (p->split != NULL) {
        return 0.0; /* indices, checked per axis (plan/grid.c) */
    }
    if (p->pos_axis >= 0) {
        const double lo = (double)p->offset, hi = (double)p->offset + (double)(outer_count - 1);
        const double most = fabs(lo) > fabs(hi) ? fabs(lo) : fabs(hi);
        return most <= bound ? most : -1.0;
    }
    if (!positions_in_range(plan, rows)) {
        return -1.0;
    }
    double most = p->freq == NULL ? bound : 0.0;
    for (ptrdiff_t i = 0; p->freq != NULL && i < rows; ++i) {
        const double a = plan->ints != NULL ? fabs((double)plan->ints[i]) : fabs(plan->reals[i]);
        most = a > most ? a : most;
    }
    return most;
}
