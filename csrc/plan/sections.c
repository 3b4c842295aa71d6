/*
 * Sections (sinpe.h): multi-axis RoPE, where each frequency takes its
 * angle from one of a row's S positions.  Their checks and the section of
 * each frequency, computed once per call; their chunks are
 * exec/sections.c's, on the cut plan/rotation.c makes.
 */
#include "core/platform.h"

#include <stdlib.h>
#include <string.h>

#include "plan/sections.h"

int sinpe_plan_check_section_form(const sinpe_plan *p)
{
    if (p->nsections == 0) {
        return p->sections == NULL ? SINPE_OK : SINPE_ERR_INVALID;
    }
    if (p->nsections < 1 || p->nsections > SINPE_MAX_SECTIONS || p->sections == NULL ||
        (unsigned)p->sections_layout > SINPE_SECTIONS_INTERLEAVED ||
        !(p->rope || (p->rotate && p->cos_cache == NULL)) || p->add || p->split != NULL ||
        p->pos_axis >= 0 || p->padding != NULL) {
        return SINPE_ERR_INVALID;
    }
    for (int s = 0; s < p->nsections; ++s) {
        if (p->sections[s] < 0) {
            return SINPE_ERR_INVALID;
        }
    }
    return SINPE_OK;
}

/* Interleaved: the frequencies k < m with k % S == s and k < S * count
 * (s >= 1), without the overflow of S * count. */
static ptrdiff_t interleaved_end(int S, ptrdiff_t count, ptrdiff_t m)
{
    return count > m / S ? m : S * count;
}

int sinpe_plan_check_sections(const sinpe_plan *p, ptrdiff_t m)
{
    const int S = p->nsections;
    ptrdiff_t total = 0;
    for (int s = 0; s < S; ++s) { /* each >= 0 (the form) */
        if (p->sections[s] > m - total) {
            return SINPE_ERR_INVALID;
        }
        total += p->sections[s];
    }
    if (total != m) {
        return SINPE_ERR_INVALID;
    }
    for (int s = 1; p->sections_layout == SINPE_SECTIONS_INTERLEAVED && s < S; ++s) {
        const ptrdiff_t end = interleaved_end(S, p->sections[s], m);
        if ((end > s ? (end - s - 1) / S + 1 : 0) != p->sections[s]) {
            return SINPE_ERR_INVALID; /* section 0 then gets the rest: its own count */
        }
    }
    return SINPE_OK;
}

int sinpe_plan_sections(plan_t *plan, const sinpe_plan *p, ptrdiff_t m, ptrdiff_t rows)
{
    sections_t *sec = &plan->sections;
    const int S = p->nsections;
    sec->of = malloc(m > 0 ? (size_t)m : 1);
    if (sec->of == NULL) {
        return SINPE_ERR_NOMEM;
    }
    sec->count = S;
    sec->stride = rows;
    if (p->sections_layout == SINPE_SECTIONS_CONTIGUOUS) {
        ptrdiff_t k = 0;
        for (int s = 0; s < S; ++s) {
            memset(sec->of + k, s, (size_t)p->sections[s]);
            k += p->sections[s];
        }
        return SINPE_OK;
    }
    for (ptrdiff_t k = 0; k < m; ++k) {
        const int s = (int)(k % S);
        sec->of[k] = (unsigned char)(s >= 1 && k < interleaved_end(S, p->sections[s], m) ? s : 0);
    }
    return SINPE_OK;
}
