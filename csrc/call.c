/*
 * The call layer: sinpe.h's functions, and call.h's for the binding's
 * private ones, the one entry below the CPython binding (and the C API's
 * users: fuzz/, scripts/platforms_check.c).  A
 * call is made into a plan (plan/), run on the threads and freed; the
 * threads (core/threads.h), the caches and the SIMD level (kernels/) are
 * set here too, so that everything sinpe.h promises is kept in one file
 * and the layers below keep names of their own.
 */
#include "core/platform.h"

#include <string.h>

#include "call.h"
#include "core/row_cache.h"
#include "core/table.h"
#include "core/threads.h"
#include "kernels/kernels.h"
#include "plan/frequencies.h"
#include "plan/plan.h"
#include "sinpe.h"

int sinpe_run(const sinpe_plan *p, const sinpe_array *out, const sinpe_array *out2)
{
    plan_t *plan;
    int status = sinpe_plan_make(&plan, p, out, out2);
    if (status != SINPE_OK || plan == NULL) {
        return status;
    }
    status = sinpe_plan_run(plan, p);
    sinpe_plan_free(plan);
    return status;
}

int sinpe_set_num_threads(int threads)
{
    if (threads < 1 || threads > SINPE_MAX_THREADS) {
        return SINPE_ERR_INVALID;
    }
    sinpe_threads_set(threads);
    return SINPE_OK;
}

int sinpe_get_num_threads(void)
{
    return sinpe_threads_get();
}

int sinpe_share_openmp(const char *library)
{
    return sinpe_threads_share_openmp(library);
}

int sinpe_sharing_openmp(void)
{
    return sinpe_threads_sharing_openmp();
}

void sinpe_clear_caches(void)
{
    sinpe_plan_clear_caches();
}

int sinpe_simd_select(const char *level)
{
    return sinpe_dispatch_select(level);
}

int sinpe_simd_level(void)
{
    return sinpe_dispatch_level();
}

int sinpe_simd_available(int level)
{
    return sinpe_dispatch_available(level);
}

const char *sinpe_simd_name(int level)
{
    return sinpe_dispatch_name(level);
}

int sinpe_schedule_frequencies(double n, ptrdiff_t d, sinpe_schedule schedule, double *freq)
{
    const int paper = schedule == SINPE_PAPER;
    sinpe_table *table = paper ? sinpe_frequencies_paper(n, d) : sinpe_frequencies_fairseq(n, d);
    if (table == NULL) {
        return SINPE_ERR_NOMEM;
    }
    memcpy(freq, table->freq, (size_t)(paper ? (d + 1) / 2 : d / 2) * sizeof(double));
    sinpe_table_release(table);
    return SINPE_OK;
}

void sinpe_kept_tables(int *tables, size_t *bytes)
{
    sinpe_rows_stats(tables, bytes);
}
