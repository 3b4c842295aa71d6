/*
 * Fuzz target for the C kernels alone, through the one entry point the
 * CPython binding calls: sinpe_run (sinpe.h), with sinpe_set_num_threads.
 * No Python anywhere.
 *
 * Each input describes one call, every knob of sinpe_plan: the kind (table
 * store, add, RoPE caches, grid, rotation: in place or from a source, by
 * its own caches or given ones, exact, inverse, a rotary width); per output
 * the dtype (float16, float32,
 * float64, bfloat16) and byte order; a shape (1-D rows, 0-length axes, d = 0
 * and odd d, up to 64 axes, wide tables of several 512-frequency tiles and
 * more than 2048 frequencies, rarely outputs past the thread and streaming
 * thresholds); a memory layout per output (axes in any order, gaps,
 * negative strides, a misaligned start, rarely a zero stride); the
 * frequencies (paper or fairseq schedule with a base n, or an explicit
 * array whose angles reach SINPE_MAX_ANGLE); the positions (offset + i
 * along an axis, or one int64 or double per row: runs, repeats, the
 * +-2**24 bounds, fractions), sections (RoPE caches and rotations: 1 to
 * 64 rows of positions per row, each its own, a text token's or an image
 * patch's; counts contiguous or interleaved, now and then broken), a
 * padding mask; the layout (interleaved,
 * concatenated, sines first); a grid's split and order; scale and the
 * add's input elements (any bits: NaN, inf, subnormals, ties); flags,
 * thread count and a cancel callback.  The inputs sinpe_run reads
 * (positions, padding, frequencies) live in their own exactly-sized
 * allocations or inside an output's buffer: among its elements, partly
 * over them, or in its guard zone.  Every so often a knob is made invalid.
 *
 * fuzz_pick.h draws the call from the input.  What is checked
 * (fuzz_model.h says what is valid and what every element holds;
 * fuzz_checks.h does the checking):
 *   - an invalid call returns SINPE_ERR_INVALID and leaves every byte of
 *     every buffer as it was (positions read from an output's memory too);
 *   - a valid call returns SINPE_OK (or SINPE_ERR_NOMEM, nothing written),
 *     changes no byte outside the elements, and every element is within
 *     the derived bound of a libm double reference; stores are the one
 *     rounding of the float64 companion's doubles; adds are bit for bit
 *     x * scale + T in the output's own arithmetic, T the companion store;
 *     rotations are bit for bit x * C + rotate_half(x) * S in the output's
 *     arithmetic (or in double, rounded once: exact), C and S the RoPE
 *     caches of the same plan (checked against libm) times scale, or the
 *     given caches; columns past the rotary width keep their bits, and a
 *     source is never written;
 *   - a cancelled store may leave elements untouched, never wrong; an add
 *     or a rotation never calls the cancel callback, and no call calls it
 *     off its thread;
 *   - bit identity across shards and offsets, layouts, explicit vs
 *     scheduled frequencies, thread counts, byte orders, RoPE vs table,
 *     grid axis vs the 1-D table of its axis, a section's pairs vs the
 *     RoPE caches of its positions alone;
 *   - a call with inputs inside an output equals the same call with
 *     private copies, byte for byte.
 *
 * Two ways to run it (fuzz/run.sh does either):
 *   libFuzzer:  clang -fsanitize=fuzzer,address,undefined ...
 *   plain:      cc -fsanitize=address,undefined ... fuzz/driver.c; ./a.out SECONDS SEED
 *               (random inputs from a seeded generator; files as arguments
 *               are replayed instead, e.g. a crash input from libFuzzer).
 */
#include "sinpe.h"

#include "fuzz_checks.h"
#include "fuzz_pick.h"
#include "fuzz_target.h"

/* ------------------------------------------------------------------ */
/* One input. */

static void call_free(call_t *c)
{
    for (int t = 0; t < c->ntargets; ++t) {
        free(c->tg[t].buffer);
        free(c->tg[t].before);
        free(c->tg[t].addressed);
        free(c->role[t]);
        free(c->group[t]);
        free(c->pair[t]);
    }
    free(c->ints);
    free(c->reals);
    free(c->padding);
    free(c->freq);
    free(c->cache[0]);
    free(c->cache[1]);
    free(c->section_of);
    for (int g = 0; g < c->ngroups; ++g) free(c->w[g]);
}

/* The call in words, for failure reports. */
static void describe(const call_t *c, int expect)
{
    static const char *ops[] = {"table", "add", "rope", "grid", "rotate"};
    static const char *modes[] = {"range", "ints", "reals", "grid"};
    const sinpe_plan *p = &c->plan;
    char *s = fuzz_summary;
    size_t left = sizeof fuzz_summary;
#define SAY(...) do { const int n_ = snprintf(s, left, __VA_ARGS__); if (n_ > 0 && (size_t)n_ < left) s += n_, left -= (size_t)n_; } while (0)
    SAY("%s, class %d, expect %s, shape (", ops[c->op], c->size_class,
        expect == EXPECT_OK ? "ok" : expect == EXPECT_INVALID ? "invalid" : "either");
    for (int i = 0; i < c->tg[0].lay.ndim; ++i) SAY("%td%s", c->tg[0].shape[i], i + 1 < c->tg[0].lay.ndim ? ", " : ")");
    for (int t = 0; t < c->ntargets; ++t) {
        SAY(", out%d %s%s%s strides (", t, dtype_name(c->tg[t].view.dtype), c->tg[t].swapped ? " swapped" : "",
            c->tg[t].lay.overlapping ? " overlapping" : "");
        for (int i = 0; i < c->tg[t].lay.ndim; ++i) SAY("%td%s", c->tg[t].lay.strides[i], i + 1 < c->tg[t].lay.ndim ? ", " : ")");
    }
    SAY(", layout %d, %s n=%.17g schedule %d nfreq %td, positions %s axis %d offset %lld%s, add %d scale %.17g, "
        "flags %u, threads %d, cancel %d after %d",
        (int)p->layout, p->freq != NULL ? "explicit freq" : "schedule", p->n, (int)p->schedule, p->nfreq,
        modes[c->pos_mode], p->pos_axis, (long long)p->offset, p->padding != NULL ? " padding" : "", p->add, p->scale,
        p->flags, c->threads, c->use_cancel, c->cancel.stop_after);
    if (p->rotate) {
        SAY(", rotary_dim %td exact %d inverse %d%s%s", p->rotary_dim, p->exact, p->inverse,
            p->source != NULL ? ", from a source" : "", p->cos_cache != NULL ? ", given caches" : "");
    }
    if (p->nsections != 0 || p->sections != NULL) {
        SAY(", %d sections%s %s", p->nsections, p->sections == NULL ? " (NULL)" : "",
            p->sections_layout == SINPE_SECTIONS_CONTIGUOUS ? "contiguous" : p->sections_layout == SINPE_SECTIONS_INTERLEAVED ? "interleaved" : "(unknown layout)");
        for (int k = 0; p->sections != NULL && k < c->sections_count && k < 8; ++k) SAY(" %td", c->sections[k]);
    }
    if (c->op == OP_GRID) {
        SAY(", split/order");
        for (int a = 0; a < c->nrow; ++a) SAY(" %td/%d", c->split[a], c->order[a]);
    }
    static const char *inputs[] = {"positions", "padding", "freq"};
    for (int i = 0; i < NINPUTS; ++i) {
        const home_t *h = &c->home[i];
        if (h->target >= 0) SAY(", %s in out%d at byte %zu (%zu bytes%s)", inputs[i], h->target, h->offset, h->bytes,
                                h->shared ? ", over elements" : "");
    }
    if (c->null_plan) SAY(", plan NULL");
    if (c->out == NULL) SAY(", out NULL");
    if ((c->out2 != NULL) != (c->ntargets == 2)) SAY(", out2 %s", c->out2 != NULL ? "given" : "NULL");
#undef SAY
}

static int aliased(const call_t *c)
{
    for (int i = 0; i < NINPUTS; ++i) {
        if (c->home[i].target >= 0) return 1;
    }
    return 0;
}

static void check_call(call_t *c, reader *r, int expect, int status)
{
    stats.either += expect == EXPECT_EITHER;
    if (expect == EXPECT_INVALID || (expect == EXPECT_EITHER && status != SINPE_OK)) {
        if (status != SINPE_ERR_INVALID) fail("invalid call returned status %d, not SINPE_ERR_INVALID", status);
        ++stats.invalid;
        stats.aliased_invalid += aliased(c);
        for (int t = 0; t < c->ntargets; ++t) check_untouched("invalid call", &c->tg[t], 0);
        return;
    }
    if (status == SINPE_ERR_NOMEM) {
        ++stats.nomem;
        for (int t = 0; t < c->ntargets; ++t) check_untouched("SINPE_ERR_NOMEM", &c->tg[t], 0);
        return;
    }
    const int stopped = c->use_cancel && c->cancel.calls > c->cancel.stop_after;
    if ((c->plan.add || c->plan.rotate) && c->cancel.calls != 0) {
        fail("an add or a rotation called the cancel callback (%d times)", c->cancel.calls);
    }
    if (stopped != (status == SINPE_ERR_CANCELLED)) {
        fail("status %d, but the cancel callback %s asked to stop", status, stopped ? "had" : "never");
    }
    if (status != SINPE_OK && !stopped) fail("valid call returned status %d", status);
    for (int t = 0; t < c->ntargets; ++t) { /* a rotation's source: not one byte */
        check_untouched(c->plan.rotate && t == 1 ? "a rotation's source" : "valid call", &c->tg[t],
                        !(c->plan.rotate && t == 1));
    }
    ++stats.valid;
    stats.cancelled += stopped;
    if (c->rows == 0 || c->d == 0) {
        ++stats.empty;
        return;
    }
    if (c->plan.rotate) {
        if (!c->tg[0].lay.overlapping) {
            model_prepare(c);
            dense_t caches[2];
            const int given = c->plan.cos_cache != NULL;
            if (given || rotation_caches(c, r, caches) == SINPE_OK) {
                check_rotation(c, caches);
                if (c->plan.nsections > 0) {
                    const result_t s = {c, caches};
                    identity_sections(c, r, &s, rotary_width(c));
                }
                for (int t = 0; !given && t < 2; ++t) free(caches[t].data);
            }
            identity_rotate(c, r);
        }
        if (aliased(c)) {
            check_twin(c, status);
            ++stats.aliased;
        }
        return;
    }
    for (int t = 0; t < c->ntargets; ++t) {
        if (c->tg[t].lay.overlapping) return; /* elements share bytes: memory safety only */
    }
    model_prepare(c);
    result_t s = {c, NULL};
    dense_t made[2];
    int have = 0;
    if (c->plan.add) { /* T: the table in the add's dtype, the same plan stored */
        const int per_row = below(r, 2);
        have = companion(c, r, c->tg[0].dtype, made, per_row) == SINPE_OK;
        if (have) check_adds(c, made);
        s.dense = have ? made : NULL;
    } else {
        have = c->size_class != SIZE_LARGE && companion(c, r, SINPE_FLOAT64, made, 0) == SINPE_OK;
        check_stores(c, stopped, have ? made : NULL);
    }
    if (!stopped && (!c->plan.add || have)) {
        if (c->op == OP_GRID) identity_grid(c, r, &s);
        else if (c->op == OP_ROPE && c->plan.nsections > 0) identity_sections(c, r, &s, c->d);
        else if (c->op == OP_ROPE) identity_rope(c, r, &s);
        else identity_table(c, r, &s);
    }
    for (int t = 0; have && t < c->ntargets; ++t) free(made[t].data);
    if (aliased(c) && !stopped) {
        check_twin(c, status);
        ++stats.aliased;
        stats.aliased_over += c->home[IN_POSITIONS].shared || c->home[IN_PADDING].shared || c->home[IN_FREQ].shared;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int checked;
    if (!checked) { /* the reference the add and store checks round with */
        check_round_to();
        checked = 1;
    }
    fuzz_input = data;
    fuzz_input_size = size;
    reader r = {data, size, 0};
    call_t c;
    memset(&c, 0, sizeof c);
    c.plan = sinpe_plan_default();
    const unsigned pick = below(&r, 40);
    c.op = pick < 11 ? OP_TABLE : pick < 19 ? OP_ADD : pick < 25 ? OP_ROPE : pick < 32 ? OP_GRID : OP_ROTATE;
    c.source = c.op == OP_ROTATE && below(&r, 3) == 0; /* out of place: the source is target 1 */
    c.ntargets = c.op == OP_ROPE || c.source ? 2 : 1;
    c.size_class = pick_size_class(&r);
    for (int t = 0; t < c.ntargets; ++t) {
        c.tg[t].dtype = (sinpe_dtype)below(&r, NDTYPES);
        if (c.source && t == 1 && below(&r, 24) != 23) c.tg[1].dtype = c.tg[0].dtype; /* else invalid */
        c.tg[t].swapped = below(&r, 4) == 0;
        c.tg[t].itemsize = itemsize_of(c.tg[t].dtype);
    }
    const unsigned lk = below(&r, 64); /* before the shape: sines first wants a grid's splits even */
    c.plan.layout = lk == 63 ? (sinpe_layout)(below(&r, 2) ? 3 : -1) : (sinpe_layout)(lk % 3);
    pick_shape(&r, &c, &c.tg[0].lay, c.tg[0].itemsize);
    c.tg[1].lay.ndim = c.tg[0].lay.ndim;
    memcpy(c.tg[1].lay.shape, c.tg[0].lay.shape, sizeof c.tg[0].lay.shape);
    c.d = c.tg[0].lay.shape[c.nrow];
    c.rows = 1;
    for (int i = 0; i < c.nrow; ++i) c.rows *= c.tg[0].lay.shape[i];
    uint64_t seed = bits(&r, 64);
    pick_plan(&r, &c, &seed);
    if (c.op == OP_ROTATE && below(&r, 5) == 0) pick_given(&r, &c, &seed);

    int kind[NINPUTS] = {0};
    size_t room[2] = {0, 0};
    pick_homes(&r, &c, kind, room);
    for (int t = 0; t < c.ntargets; ++t) {
        make_layout(&r, &c.tg[t].lay, c.tg[t].itemsize, c.size_class == SIZE_SMALL, 32, room[t]);
        if (c.tg[t].lay.size > ((size_t)96 << 20)) { /* 3 buffers of this size */
            c.ntargets = t;
            call_free(&c);
            return 0;
        }
    }
    for (int i = 0; i < NINPUTS; ++i) {
        if (c.home[i].target >= 0) place_home(&r, &c, i, kind[i]);
    }
    for (int t = 0; t < c.ntargets; ++t) fill_elements(&c.tg[t], c.plan.add || c.op == OP_ROTATE, &seed);
    if (c.source) c.plan.source = below(&r, 32) == 31 ? &c.tg[0].view /* out itself: invalid */ : &c.tg[1].view;
    install_homes(&c);
    for (int t = 0; t < c.ntargets; ++t) memcpy(c.tg[t].before, c.tg[t].buffer, c.tg[t].lay.size);
    c.out = &c.tg[0].view;
    c.out2 = c.op == OP_ROPE ? &c.tg[1].view : NULL;

    /* a large store reaches the cancel callback (every ~8 MB the calling
     * thread writes) mostly on one thread */
    c.threads = below(&r, 32) == 31 ? 5 + (int)below(&r, 12) : 1 + (int)below(&r, c.size_class == SIZE_LARGE ? 2 : 4);
    c.use_cancel = below(&r, 2);
    c.cancel = (cancel_state){0, (int)below(&r, 4), pthread_self()};
    c.plan.cancel = c.use_cancel ? cancel_after : NULL;
    c.plan.cancel_context = &c.cancel;
    break_call(&r, &c);
    const int expect = expect_status(&c);
    describe(&c, expect);

    if (below(&r, 64) == 63 && (sinpe_set_num_threads(SINPE_MAX_THREADS) != SINPE_OK ||
                                sinpe_get_num_threads() != SINPE_MAX_THREADS)) {
        fail("set_num_threads(SINPE_MAX_THREADS) refused"); /* set only: no call runs on it */
    }
    if (sinpe_set_num_threads(c.threads) != SINPE_OK) fail("set_num_threads(%d) refused", c.threads);
    static const int bad_threads[] = {0, -1, SINPE_MAX_THREADS + 1, -2147483647 - 1};
    if (sinpe_set_num_threads(bad_threads[below(&r, 4)]) != SINPE_ERR_INVALID) fail("set_num_threads accepted a bad count");
    if (sinpe_get_num_threads() != c.threads) fail("get_num_threads() != %d", c.threads);

    const int status = sinpe_run(c.null_plan ? NULL : &c.plan, c.out, c.out2);
    check_call(&c, &r, expect, status);
    call_free(&c);
    return 0;
}

/* ------------------------------------------------------------------ */
/* For the plain driver (fuzz/fuzz_target.h). */

const char fuzz_target_name[] = "fuzz_kernels";

void fuzz_report_input(void)
{
    report_input();
}

void fuzz_print_summary(long runs, double seconds)
{
    printf("fuzz_kernels: %ld random inputs in %.0f s, no failure: %ld valid calls (%ld empty, %ld cancelled, %ld "
           "out of memory), %ld invalid, %ld where either was allowed; %ld valid with inputs inside an output (%ld "
           "over its elements) equal to private copies, %ld invalid; %ld elements within bounds, %ld the one rounding of float64, %ld add "
           "elements and %ld rotation elements bit for bit, %ld bit-identical in second calls (%ld calls with sections "
           "against one section's positions alone)\n",
           runs, seconds, stats.valid, stats.empty, stats.cancelled, stats.nomem, stats.invalid, stats.either,
           stats.aliased, stats.aliased_over, stats.aliased_invalid, stats.bounded, stats.rounded, stats.added,
           stats.rotated, stats.identical, stats.sections);
}
