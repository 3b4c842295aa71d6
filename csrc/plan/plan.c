/*
 * Making a call's plan (plan/plan.h): the checks of sinpe.h's contract in
 * the order that gives each call its error, private copies of positions
 * and padding, the groups of columns and their frequency tables, tables
 * kept from earlier calls, and the cut (plan/cut.c, plan/grid.c,
 * plan/rotation.c).  Everything that can fail (a bad argument, no memory)
 * fails here, before any output is written; after it only a cancel can
 * stop the call.
 */
#include "core/platform.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/elements.h"
#include "core/row_cache.h"
#include "core/table.h"
#include "core/threads.h"
#include "exec/exec.h"
#include "plan/checks.h"
#include "plan/cut.h"
#include "plan/frequencies.h"
#include "plan/grid.h"
#include "plan/plan.h"
#include "plan/rotation.h"
#include "plan/sections.h"

void sinpe_plan_free(plan_t *plan)
{
    if (plan == NULL) {
        return;
    }
    sinpe_anchors_release(plan->anchors); /* before its table */
    for (int g = 0; plan->groups != NULL && g < plan->ngroups; ++g) {
        sinpe_table_release(plan->groups[g].table);
    }
    sinpe_rows_release(plan->made);
    if (plan->groups != &plan->one_group) {
        free(plan->groups);
    }
    sinpe_plan_free_scratch(plan); /* with built and adds' tiles */
    if (plan->cut == CUT_BANDS) { /* assembled bands' tiles are their own */
        free(plan->tiles);
    }
    free(plan->held);
    free(plan->snapshot);
    free(plan->sections.of);
    free(plan);
}

/* Private copies of positions and padding (sinpe.h: they may share memory
 * with an output, which is written while they are read). */
static int take_inputs(plan_t *plan, const sinpe_plan *p, ptrdiff_t rows)
{
    plan->ints = p->ints;
    plan->reals = p->reals;
    plan->padding = p->padding;
    if ((p->flags & SINPE_PRIVATE_INPUTS) || (p->ints == NULL && p->reals == NULL && p->padding == NULL)) {
        return SINPE_OK;
    }
    const size_t values = p->ints != NULL || p->reals != NULL ? (size_t)rows * 8 : 0;
    const size_t flags = p->padding != NULL ? (size_t)rows : 0;
    char *copy = malloc(values + flags + 1);
    if (copy == NULL) {
        return SINPE_ERR_NOMEM;
    }
    plan->snapshot = copy;
    if (p->ints != NULL) {
        plan->ints = memcpy(copy, p->ints, values);
    } else if (p->reals != NULL) {
        plan->reals = memcpy(copy, p->reals, values);
    }
    if (p->padding != NULL) {
        plan->padding = memcpy(copy + values, p->padding, flags);
    }
    return SINPE_OK;
}

static sinpe_table *group_table(const sinpe_plan *p, ptrdiff_t width, ptrdiff_t nfreq)
{
    if (p->freq != NULL) {
        return sinpe_frequencies_given(p->freq, nfreq);
    }
    return p->schedule == SINPE_PAPER ? sinpe_frequencies_paper(p->n, width)
                                      : sinpe_frequencies_fairseq(p->n, width);
}

/* Group g: `width` columns from `col`, positions along row `axis` (or per
 * row), the row axes split into outer and inner (exec/work.h). */
static int make_group(plan_t *plan, const sinpe_plan *p, const sinpe_array *const *outs,
                      group_t *g, int axis, ptrdiff_t col, ptrdiff_t width, ptrdiff_t sines_before,
                      double most)
{
    const int nrow_axes = outs[0]->ndim - 1;
    g->width = width;
    g->nfreq = p->freq != NULL ? p->nfreq : p->schedule == SINPE_PAPER ? (width + 1) / 2 : width / 2;
    g->col = col;
    g->interleaved = p->layout == SINPE_INTERLEAVED;
    g->sin_col = p->layout == SINPE_SINES_FIRST && p->split != NULL ? sines_before : col;
    g->cos_col = p->layout == SINPE_SINES_FIRST && p->split != NULL ? plan->d / 2 + sines_before
                                                                   : col + g->nfreq;
    g->axis = axis;
    g->offset = p->split != NULL ? 0 : p->offset;
    if (g->nfreq > 0) {
        g->table = group_table(p, width, g->nfreq);
        if (g->table == NULL) {
            return SINPE_ERR_NOMEM;
        }
        const double reach = most + SINPE_BLOCK_ROWS; /* block starts below negative positions */
        if (!(g->table->max_freq * reach <= SINPE_MAX_ANGLE)) {
            return SINPE_ERR_INVALID; /* NaN, negative, inf, or angles out of range */
        }
    }
    g->ntiles = g->nfreq == 0 ? 1 : ceil_div(g->nfreq, SINPE_TILE_FREQS);
    ptrdiff_t cstride[SINPE_MAX_DIMS], rows = 1; /* C-order element strides of the row axes */
    for (int i = nrow_axes - 1; i >= 0; --i) {
        cstride[i] = rows;
        rows *= outs[0]->shape[i];
    }
    for (int i = 0; i < nrow_axes; ++i) {
        axes_t *ax = axis < 0 || i == axis ? &g->outer : &g->inner;
        const int at = ax->naxes++;
        ax->shape[at] = outs[0]->shape[i];
        ax->cstride[at] = cstride[i];
        for (int t = 0; t < 2; ++t) {
            ax->bstride[t][at] = outs[t] != NULL ? outs[t]->strides[i] : 0;
        }
    }
    if (g->outer.naxes == 0) { /* a scalar position: one row, given an axis of length 1 */
        g->outer.naxes = 1;
        g->outer.shape[0] = 1;
    }
    g->outer_count = 1;
    for (int i = 0; i < g->outer.naxes; ++i) {
        g->outer_count *= g->outer.shape[i];
    }
    g->inner_count = rows / g->outer_count;
    g->residues = axis >= 0 ? sinpe_residues(g->offset, g->outer_count) : 0xffffffffu;
    return SINPE_OK;
}

/* ------------------------------------------------------------------ */
/* Adds at range positions of a schedule's table: its rows from the cache
 * of made tables (core/row_cache.h), made now (by a store of the same plan
 * into the cache's memory, on every thread) if the table is asked for again.
 * Nothing here can fail the call: without a made table, each chunk makes
 * its rows. */
static void find_made_rows(plan_t *plan, const sinpe_plan *p, const sinpe_array *out)
{
    const group_t *g = &plan->groups[0];
    if (!plan->adding || p->freq != NULL || g->table == NULL) {
        return;
    }
    const sinpe_rows_key key = {p->schedule, p->n, plan->d, p->layout, out->dtype};
    if (g->axis < 0) { /* integer positions, one per row: a kept table covering them all */
        int64_t lo = INT64_MAX, hi = INT64_MIN;
        for (ptrdiff_t i = 0; plan->ints != NULL && i < g->outer_count; ++i) {
            if (plan->padding == NULL || !plan->padding[i]) {
                lo = plan->ints[i] < lo ? plan->ints[i] : lo;
                hi = plan->ints[i] > hi ? plan->ints[i] : hi;
            }
        }
        if (lo <= hi) {
            plan->made = sinpe_rows_find(&key, lo, hi - lo + 1);
        }
        return; /* never made for them: a repeated range is what a kept table serves */
    }
    int fresh;
    sinpe_rows *rows = sinpe_rows_find_or_new(&key, g->offset, g->outer_count, &fresh);
    if (!fresh) {
        plan->made = rows;
        return;
    }
    sinpe_plan store = sinpe_plan_default();
    store.n = p->n;
    store.schedule = p->schedule;
    store.layout = p->layout;
    store.offset = g->offset;
    const ptrdiff_t shape[2] = {(ptrdiff_t)rows->count, plan->d};
    const ptrdiff_t strides[2] = {(ptrdiff_t)rows->row_bytes,
                                  (ptrdiff_t)sinpe_itemsize(out->dtype)};
    const sinpe_array view = {rows->data, out->dtype, 0, 2, shape, strides};
    plan_t *fill;
    int status = sinpe_plan_make(&fill, &store, &view, NULL);
    if (status == SINPE_OK && fill != NULL) {
        status = sinpe_plan_run(fill, &store);
        sinpe_plan_free(fill);
    }
    if (status != SINPE_OK) {
        sinpe_rows_release(rows);
        return;
    }
    sinpe_rows_keep(rows);
    plan->made = rows;
}

/* Rows of one block of range positions (a decoding step, a short table):
 * the table's kept anchors of the block, so that a loop of such calls
 * computes them once per block rather than once per call. */
static void hold_anchors(plan_t *plan)
{
    const group_t *g = &plan->groups[0];
    if (plan->ngroups != 1 || g->axis < 0 || g->table == NULL || g->ntiles != 1 ||
        plan->padding != NULL) {
        return;
    }
    const int64_t p0 = sinpe_block_start(g->offset);
    if (p0 == sinpe_block_start(g->offset + g->outer_count - 1)) {
        plan->anchors = sinpe_frequencies_anchors(g->table, p0);
    }
}

int sinpe_plan_make(plan_t **out_plan, const sinpe_plan *p, const sinpe_array *out,
                    const sinpe_array *out2)
{
    *out_plan = NULL;
    if (p == NULL || sinpe_plan_check_outputs(p, out, out2) != SINPE_OK ||
        (p->rotate && sinpe_plan_check_rotation_views(p, out) != SINPE_OK)) {
        return SINPE_ERR_INVALID;
    }
    const int given = p->rotate && p->cos_cache != NULL; /* no positions, no frequencies */
    const int nrow_axes = out->ndim - 1;
    const ptrdiff_t d = out->shape[nrow_axes];
    /* An empty output (d = 0 too) needs no work and no table: only its
     * structure is checked. */
    ptrdiff_t rows = 1, elements = d;
    int overflow = 0, empty = d == 0;
    for (int i = 0; i < nrow_axes; ++i) {
        overflow |= sinpe_mul_overflow_ptrdiff(rows, out->shape[i], &rows);
        overflow |= sinpe_mul_overflow_ptrdiff(elements, out->shape[i], &elements);
        empty |= out->shape[i] == 0;
    }
    /* zero strides let a view describe more elements than ptrdiff_t counts;
     * positions: one per row, or per section and row */
    ptrdiff_t values = rows;
    overflow |= sinpe_mul_overflow_ptrdiff(rows, p->nsections > 1 ? p->nsections : 1, &values);
    if ((!given && sinpe_plan_check_positions(p, nrow_axes) != SINPE_OK) ||
        sinpe_plan_check_section_form(p) != SINPE_OK || (overflow && !empty)) {
        return SINPE_ERR_INVALID;
    }
    if (empty) {
        return (unsigned)p->layout <= SINPE_SINES_FIRST ? SINPE_OK : SINPE_ERR_INVALID;
    }
    const ptrdiff_t width = p->rotate && p->rotary_dim != 0 ? p->rotary_dim : d;
    if ((p->rotate ? sinpe_plan_check_rotation(p, out, d) : sinpe_plan_check_columns(p, d)) != SINPE_OK ||
        (p->split != NULL && sinpe_plan_check_grid(p, out) != SINPE_OK) ||
        (p->nsections > 0 && sinpe_plan_check_sections(p, width / 2) != SINPE_OK)) {
        return SINPE_ERR_INVALID;
    }
    if (out->data == NULL || (out2 != NULL && out2->data == NULL)) {
        return SINPE_ERR_INVALID;
    }
    plan_t *plan = calloc(1, sizeof *plan);
    const int ngroups = p->split != NULL ? nrow_axes : 1;
    group_t *groups = plan == NULL    ? NULL
                      : ngroups == 1 ? &plan->one_group
                                     : calloc((size_t)ngroups, sizeof *groups);
    if (groups == NULL) {
        free(plan);
        return SINPE_ERR_NOMEM;
    }
    plan->groups = groups;
    plan->ngroups = ngroups;
    plan->d = d;
    plan->adding = p->add != 0;
    plan->scale = p->rope || out->dtype == SINPE_FLOAT64 ? p->scale : (double)(float)p->scale;
    /* a rotation's source is read through the second target's strides */
    const sinpe_array *outs[2] = {out, out2 != NULL ? out2 : p->rotate ? p->source : NULL};
    plan->ntargets = out2 != NULL ? 2 : 1;
    for (int t = 0; t < plan->ntargets; ++t) {
        const sinpe_row_format fmt = {outs[t]->dtype, outs[t]->byteswapped != 0,
                                      outs[t]->strides[nrow_axes], 0};
        plan->target[t] = (target_t){outs[t]->data, fmt,
                                     !p->rope ? KIND_TABLE : t == 0 ? KIND_COS : KIND_SIN};
    }
    plan->rotating = p->rotate != 0;
    if (plan->rotating || p->nsections > 0) { /* caches with sections use its tile, as they are */
        rotation_t *rot = &plan->rot;
        rot->dim = width;
        rot->interleaved = p->layout == SINPE_INTERLEAVED;
        rot->tile_dtype = (plan->rotating && p->exact) || (out2 != NULL && out2->dtype != out->dtype)
                              ? SINPE_FLOAT64
                              : out->dtype;
        rot->scale = p->scale; /* a rotation's, or the caches' (sinpe.h's rope) */
        rot->inverse = plan->rotating && p->inverse;
        rot->staged = rot->tile_dtype != SINPE_FLOAT64 && (rot->scale != 1.0 || rot->inverse);
        if (plan->rotating && p->source != NULL) {
            rot->source = p->source->data;
            rot->source_fmt = sinpe_row_format_of(p->source);
        }
    }
    int status = take_inputs(plan, p, values);
    const double most =
        given ? 0.0
              : sinpe_plan_max_abs_position(plan, p, values,
                                            p->pos_axis >= 0 ? out->shape[p->pos_axis] : 0);
    if (status == SINPE_OK && most < 0.0) {
        status = SINPE_ERR_INVALID;
    }
    ptrdiff_t col = 0, sines = 0;
    for (int i = 0; i < ngroups && status == SINPE_OK && !given; ++i) {
        const int axis = p->split != NULL ? p->order[i] : p->pos_axis;
        const ptrdiff_t columns = p->split != NULL ? p->split[axis] : width;
        const double reach = p->split != NULL ? (double)(out->shape[axis] - 1) : most;
        status = make_group(plan, p, outs, &groups[i], axis, col, columns, sines, reach);
        col += columns;
        sines += columns / 2;
    }
    if (status == SINPE_OK && p->nsections > 0) {
        status = sinpe_plan_sections(plan, p, groups[0].nfreq, rows);
    }
    if (status == SINPE_OK) {
        if (p->rotate || p->nsections > 0) {
            hold_anchors(plan);
            status = sinpe_plan_cut_rotation(plan, p, out, rows);
            if (status == SINPE_OK && plan->rotating) {
                sinpe_plan_rotation_made_rows(plan, p);
            }
        } else {
            find_made_rows(plan, p, out);
            if (plan->made != NULL) {
                groups[0].ntiles = 1; /* the made rows hold every column */
            } else {
                hold_anchors(plan);
            }
            status = p->split != NULL ? sinpe_plan_cut_grid(plan, out, rows)
                                      : sinpe_plan_cut(plan, p, out, rows);
        }
    }
    if (status != SINPE_OK) {
        sinpe_plan_free(plan);
        return status;
    }
    *out_plan = plan;
    return SINPE_OK;
}

int sinpe_plan_run(plan_t *plan, const sinpe_plan *p)
{
    return sinpe_run_chunks(plan->chunks, plan->threads, sinpe_exec_chunk, plan,
                            plan->adding || plan->rotating ? NULL : p->cancel, p->cancel_context,
                            plan->cancel_period);
}

void sinpe_plan_clear_caches(void)
{
    sinpe_table_cache_clear();
    sinpe_rows_clear();
    sinpe_plan_clear_scratch();
}
