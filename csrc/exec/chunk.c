/*
 * The executor's entry: which action runs a chunk.  Everything a chunk
 * does was decided when the plan was made (plan/): here only the cut and
 * what the plan does to its target choose the file that walks its rows.
 */
#include "core/platform.h"

#include "exec/actions.h"
#include "exec/exec.h"
#include "exec/work.h"

void sinpe_exec_chunk(void *context, ptrdiff_t chunk, int worker)
{
    const plan_t *plan = context;
    if (plan->sections.count > 0) {
        sinpe_sections_chunk(plan, chunk, worker);
    } else if (plan->rotating) {
        sinpe_rotate_chunk(plan, chunk, worker);
    } else if (plan->cut == CUT_BANDS) {
        sinpe_band_chunk(plan, chunk, worker);
    } else if (plan->adding) {
        sinpe_add_chunk(plan, chunk, worker);
    } else {
        sinpe_store_chunk(plan, chunk, worker);
    }
}
