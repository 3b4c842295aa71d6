/*
 * The frequency tables of a plan's groups (plan/frequencies.c): made with
 * the SIMD level's loops, kept in core/table.c's cache.  Not public API.
 */
#ifndef SINPE_PLAN_FREQUENCIES_H
#define SINPE_PLAN_FREQUENCIES_H

#include <stddef.h>
#include <stdint.h>

#include "core/table.h"

/* The paper's frequencies n**(-2k/d), k < ceil(d/2): for the double
 * e = -(2k)/d, the correctly rounded n**e (core/pow.h), the same bits on
 * every platform.  Shared through the cache unless wide.  NULL when out of
 * memory.  Release with sinpe_table_release. */
sinpe_table *sinpe_frequencies_paper(double n, ptrdiff_t d);

/* fairseq / tensor2tensor / Whisper frequencies n**(-k / max(d/2 - 1, 1)),
 * k < d/2 (d >= 2): log-spaced from 1 down to exactly 1/n; t2t's max(., 1)
 * defines d = 2, 3.  Correctly rounded and cached as the paper's are. */
sinpe_table *sinpe_frequencies_fairseq(double n, ptrdiff_t d);

/* A table for any frequencies (copied), never cached.  NULL when out of
 * memory. */
sinpe_table *sinpe_frequencies_given(const double *freq, ptrdiff_t nfreq);

/* The table's kept anchors of block p0, made now into an unused slot if
 * none holds them; NULL when every slot is in use (or the table is wide):
 * compute them instead.  Release with sinpe_anchors_release. */
const sinpe_anchors *sinpe_frequencies_anchors(sinpe_table *table, int64_t p0);

#endif /* SINPE_PLAN_FREQUENCIES_H */
