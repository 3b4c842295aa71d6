/*
 * The call layer's entries beyond sinpe.h (call.c), for the binding's
 * private functions that the tests use.  Not public API.
 */
#ifndef SINPE_CALL_H
#define SINPE_CALL_H

#include <stddef.h>

#include "sinpe.h"

/* The frequencies of a schedule's table of d columns, bit for bit, into
 * freq[0 .. m) (m: (d + 1) / 2 for SINPE_PAPER, d / 2 for SINPE_FAIRSEQ;
 * d >= 1, n a valid base).  SINPE_OK or SINPE_ERR_NOMEM. */
int sinpe_schedule_frequencies(double n, ptrdiff_t d, sinpe_schedule schedule, double *freq);

/* How many tables the cache of made tables keeps, and their bytes. */
void sinpe_kept_tables(int *tables, size_t *bytes);

#endif /* SINPE_CALL_H */
