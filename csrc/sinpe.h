/*
 * sinpe: the sinusoidal positional encoding of "Attention Is All You Need",
 * written straight into caller-owned strided memory.  Plain C, no Python.
 *
 *     w_k      = n ** (-2k / d)           k = j / 2 (integer division)
 *     PE[p, j] = sin(p * w_k)  for even j,  cos(p * w_k)  for odd j
 *
 * Every table is one call, sinpe_run, of one plan: which frequencies, which
 * column layout, which positions, store or add.  The defaults
 * (sinpe_plan_default) are the table above with rows along axis 0.
 *
 * Angles and values are computed in double and rounded once to the element
 * type.  Every element is a pure function of (position, frequency): any
 * sub-range of rows, computed alone or in any thread, has the same bits as
 * the full table.
 */
#ifndef SINPE_H
#define SINPE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Positions p with |p| <= SINPE_MAX_POSITION are supported.  Up to here the
 * double-precision angle p * w_k is off by at most ~2**-27, so float32 output
 * stays within 2**-24 of the exact value; beyond it that promise would fail. */
#define SINPE_MAX_POSITION ((int64_t)1 << 24)

/* The base n must lie in [SINPE_MIN_BASE, SINPE_MAX_BASE].  n >= 1 keeps every
 * frequency <= 1 rad/position, so |angle| <= |p| and the bound above holds;
 * the upper limit is far past any base in use and catches nonsense like 1e300. */
#define SINPE_MIN_BASE 1.0
#define SINPE_MAX_BASE 1e30

/* The most any angle |p * w| may reach: the range where the kernel's sincos
 * reduces exactly.  Explicit frequencies must keep freq[k] * (P + 32) within
 * it, P the largest |position| of the call (a position's block start lies
 * up to 32 rows below it). */
#define SINPE_MAX_ANGLE 67108864.0

/* The most axes an array may have (NumPy 2 allows 64). */
#define SINPE_MAX_DIMS 64

/* The most threads one call may use. */
#define SINPE_MAX_THREADS 1024

/* The most sections (rows of positions) a plan may have. */
#define SINPE_MAX_SECTIONS 64

/* The element types, in the order of their codes: X(ID, name, bytes) gives
 * SINPE_<ID> = its code, its name (NumPy's and torch's), and its size. */
#define SINPE_DTYPES(X)                                                                       \
    X(FLOAT16, float16, 2) /* IEEE binary16 */                                                \
    X(FLOAT32, float32, 4)                                                                    \
    X(FLOAT64, float64, 8)                                                                    \
    X(BFLOAT16, bfloat16, 2) /* the top 16 bits of a float32 */

#define SINPE_DTYPE_CODE(id, name, bytes) SINPE_##id,
typedef enum { SINPE_DTYPES(SINPE_DTYPE_CODE) } sinpe_dtype; /* 0, 1, 2, 3 */
#undef SINPE_DTYPE_CODE

enum {
    SINPE_OK = 0,
    SINPE_ERR_NOMEM = 1,    /* scratch memory could not be allocated */
    SINPE_ERR_INVALID = 2,  /* an argument violates the contract below */
    SINPE_ERR_CANCELLED = 3 /* the cancel callback asked to stop */
};

/* A strided view of caller memory.  The last axis holds the features; every
 * other index is a row.  Its element count must fit in a ptrdiff_t. */
typedef struct {
    char *data;               /* address of element (0, ..., 0) */
    sinpe_dtype dtype;
    int byteswapped;          /* nonzero: elements are in non-native byte order */
    int ndim;                 /* 1 <= ndim <= SINPE_MAX_DIMS */
    const ptrdiff_t *shape;   /* each >= 0 */
    const ptrdiff_t *strides; /* in bytes, any sign */
} sinpe_array;

/* Where the two values of frequency k go among the d columns (m = number
 * of frequencies). */
typedef enum {
    SINPE_INTERLEAVED = 0,  /* sin at 2k, cos at 2k + 1 (the paper) */
    SINPE_CONCATENATED = 1, /* sin at k, cos at m + k */
    /* grids: every axis' sines (in `order`), then every axis' cosines in the
     * same order; elsewhere the same as SINPE_CONCATENATED */
    SINPE_SINES_FIRST = 2
} sinpe_layout;

typedef enum {
    SINPE_PAPER = 0,  /* w_k = n**(-2k/d), k < ceil(d/2): an odd d ends with a sine */
    SINPE_FAIRSEQ = 1 /* w_k = n**(-k/max(d/2 - 1, 1)), k < d/2: an odd d ends with a zero */
} sinpe_schedule;

/* Which frequencies take which section's position (sinpe_plan.sections). */
typedef enum {
    SINPE_SECTIONS_CONTIGUOUS = 0, /* runs in order: Qwen2-VL's mrope_section */
    SINPE_SECTIONS_INTERLEAVED = 1 /* in turn: Qwen3-VL's interleaved M-RoPE */
} sinpe_sections_layout;

/* A cancel callback: the kernel calls it from the calling thread, between
 * chunks (about every 8 MB written by that thread), only while work
 * remains; nonzero stops the call.  It is never called from helper threads
 * and never for small calls.  The CPython binding uses it to take the GIL,
 * run PyErr_CheckSignals() (Ctrl-C) and release the GIL again. */
typedef int (*sinpe_cancel_fn)(void *context);

/* Flags of a plan. */
enum {
    /* The outputs were just allocated: a large one (32 MB or more) then
     * comes fresh from the OS, whose page zeroing leaves it in the caches,
     * so it is written with plain stores rather than streaming ones.  Only
     * speed depends on this flag, never values. */
    SINPE_FRESH_OUTPUT = 1,
    /* The caller guarantees that positions and padding are private to this
     * call (nothing writes them while it runs, and they share no memory
     * with an output): sinpe_run then reads them in place instead of
     * taking its own copy first. */
    SINPE_PRIVATE_INPUTS = 2
};

/* One call.  Start from sinpe_plan_default() and set what differs. */
typedef struct {
    /* The frequencies: freq[0 .. nfreq) when freq is not NULL (finite,
     * >= 0; nfreq = d / 2 or (d + 1) / 2, RoPE d / 2), else `schedule`
     * with base n. */
    double n;
    sinpe_schedule schedule;
    const double *freq;
    ptrdiff_t nfreq;

    /* The columns: `layout` of the table, or with rope set RoPE caches: out
     * gets cos and out2 sin of p * w_k at columns k and m + k
     * (concatenated) or 2k and 2k + 1 (interleaved); d even.  The caches
     * are those values times `scale` (below: finite, used as given),
     * computed in double and rounded once to the output dtype. */
    sinpe_layout layout;
    int rope;

    /* The positions of the rows (every index but the last, C order):
     * pos_axis >= 0: the row at index i along that axis is position
     * offset + i, the same on every other axis; pos_axis < 0: one position
     * per row, exactly one of ints and reals (finite; integral reals take
     * the integer path, others are evaluated directly).  padding: NULL, or
     * one flag per row; flagged rows get a zero table row (adds: x * scale). */
    int pos_axis;
    int64_t offset;
    const int64_t *ints;
    const double *reals;
    const unsigned char *padding;

    /* A grid, when split is not NULL: the rows' indices are the positions,
     * one per axis; axis a is encoded by the width-split[a] table of its
     * index (split[a] >= 1, even for SINPE_SINES_FIRST, sum d), the axes'
     * columns in the order order[0], order[1], ...  pos_axis, offset, ints,
     * reals and padding must then be left at their defaults. */
    const ptrdiff_t *split;
    const int *order;

    /* add (tables only: not RoPE, not grids): out = out * scale + T in out's
     * own arithmetic, T the table in out's dtype (float16/bfloat16: each
     * operation in float32, rounded to the type).  scale is used as given
     * for float64 and rounded to float32 otherwise; pass it already rounded
     * to get another scalar rule (NumPy rounds it to the array's dtype).
     * scale == 1: out + T.  (RoPE caches and rotations use scale too, as
     * they say; other tables ignore it.) */
    int add;
    double scale;

    unsigned flags;          /* SINPE_FRESH_OUTPUT | SINPE_PRIVATE_INPUTS */
    sinpe_cancel_fn cancel;  /* stores only: adds and rotations are all or nothing */
    void *cancel_context;

    /* rotate (RoPE applied, not with add, rope, a grid or padding): out's
     * first r = rotary_dim columns (0: all d; even, 2 <= r <= d) are rotated
     * pair by pair, the rest keep their bits.  Pair k is the columns
     * (a, b) = (k, k + r/2) with SINPE_CONCATENATED (HF's rotate_half) or
     * (2k, 2k + 1) with SINPE_INTERLEAVED, and with C, S the cosine and sine
     * of p * w_k (the row's position p, as above; the frequencies of width r:
     * freq with r / 2 entries, or SINPE_PAPER with base n) times scale (used
     * as given, finite; S negated when `inverse` is set: the transpose, which
     * is the backward pass):
     *     y[a] = x[a] * C + (-x[b]) * S        y[b] = x[b] * C + x[a] * S
     * exact = 0: C and S rounded once from double to out's dtype, and each
     * operation in out's arithmetic (float16/bfloat16: in float32, rounded
     * to the type), so y is NumPy's x * C + rotate_half(x) * S bit for bit;
     * exact != 0: the two products and the sum in double from x's values,
     * rounded once to out's dtype.
     * source: NULL (in place), or a view of out's shape and dtype (any byte
     * order) that is read and whose rotation is written into out (its
     * columns from r on copied); it may not share memory with out.
     * cos_cache, sin_cache: both NULL, or the caches themselves, views of
     * out's shape and dtype (zero strides broadcast), and then every column
     * j < r has its own: y[j] = x[j] * cos[j] + rotate_half(x)[j] * sin[j]
     * (HF's apply_rotary_pos_emb); no frequencies or positions are read
     * (freq, ints, reals NULL), scale is 1, exact and inverse 0, and they
     * may not share memory with out.  (A view whose elements cannot all lie
     * in the address space counts as sharing memory.) */
    int rotate;
    ptrdiff_t rotary_dim;
    int exact, inverse;
    const sinpe_array *source;
    const sinpe_array *cos_cache, *sin_cache;

    /* Sections (multi-axis RoPE: Qwen2-VL's M-RoPE, Qwen3-VL's interleaved
     * M-RoPE, axial 2-D RoPE), for RoPE caches (rope) and rotations by
     * their own caches (rotate without cos_cache): each row has
     * nsections = S positions (1 <= S <= SINPE_MAX_SECTIONS), and each
     * frequency takes its angle from one of them.  The positions are then
     * explicit (pos_axis < 0; not with padding): ints or reals hold
     * S * rows values, the position of row i (C order over out's rows) in
     * section s at [s * rows + i].  sections[s] >= 0 counts the frequencies
     * of section s; the counts sum to the number of frequencies m (r / 2 of
     * a rotation, d / 2 of caches).  Frequency k takes section:
     *   SINPE_SECTIONS_CONTIGUOUS: the s with sections[0] + ... +
     *     sections[s - 1] <= k < sections[0] + ... + sections[s];
     *   SINPE_SECTIONS_INTERLEAVED: s >= 1 when k % S == s and
     *     k < S * sections[s], else 0; each section must then receive
     *     exactly sections[s] frequencies (else SINPE_ERR_INVALID).
     * Every value is the one the same plan without sections gives at that
     * frequency's position: a frequency of section s has the bits it has in
     * the caches or rotation of section s's positions alone.
     * SINPE_ERR_INVALID (for empty outputs too, but for the counts' sum and
     * rule): nsections out of range, sections NULL, an unknown layout, a
     * negative count, sections with an add, a table, a grid, given caches,
     * range positions or padding; and for a non-empty output, counts that
     * do not sum to m or that the interleaved rule does not give.
     * nsections = 0 (the default): no sections, and sections is NULL. */
    const ptrdiff_t *sections;
    int nsections;
    sinpe_sections_layout sections_layout;
} sinpe_plan;

static inline sinpe_plan sinpe_plan_default(void)
{
    sinpe_plan plan = {10000.0, SINPE_PAPER, NULL, 0, SINPE_INTERLEAVED, 0, 0, 0, NULL, NULL,
                       NULL, NULL, NULL, 0, 1.0, 0, NULL, NULL,
                       0, 0, 0, 0, NULL, NULL, NULL,
                       NULL, 0, SINPE_SECTIONS_CONTIGUOUS};
    return plan;
}

/* Runs a plan into out (and out2 for RoPE: same shape).  Returns a SINPE_*
 * status.  An empty output (a zero-length axis) is SINPE_OK once the views,
 * the layout and the form of the positions are valid; nothing else of the
 * plan is looked at.  On SINPE_ERR_NOMEM or SINPE_ERR_INVALID nothing has
 * been written; on SINPE_ERR_CANCELLED some rows have been written and others
 * not (discard or rewrite them).  Positions, padding and frequencies may
 * share memory with the outputs: they are read before anything is written.
 * Every helper thread has stopped when it returns. */
int sinpe_run(const sinpe_plan *plan, const sinpe_array *out, const sinpe_array *out2);

/* Threads used by large calls (small calls always use one).  The default is
 * the number of cores this process may run on.  Returns SINPE_ERR_INVALID
 * (and changes nothing) unless 1 <= threads <= SINPE_MAX_THREADS.  Results
 * are bit-identical for any thread count. */
int sinpe_set_num_threads(int threads);
int sinpe_get_num_threads(void);

/* Runs large calls on the threads of an OpenMP runtime the process has
 * already loaded, instead of sinpe's own: `library` is its file, as the
 * loader knows it, and must have GNU libgomp's GOMP_parallel and
 * omp_get_thread_num.  torch's ops run on such threads, which spin for a
 * while after each op; sharing them, a call right after a torch op gets
 * every core at once (sinpe's own helpers would find them taken).  NULL
 * goes back to sinpe's own threads.  Returns SINPE_OK, or
 * SINPE_ERR_INVALID (and changes nothing) when no loaded library of that
 * name has those functions, and always on Windows.  One call at a time
 * runs on the team; a call made while another runs uses one thread.  A
 * forked child goes back to sinpe's own threads.  Results are
 * bit-identical either way. */
int sinpe_share_openmp(const char *library);
/* Whether large calls run on a shared OpenMP runtime's threads. */
int sinpe_sharing_openmp(void);

/* sinpe keeps what later calls can reuse: the frequencies and step rows of
 * recent (n, d) (at most 8 tables, 8 MB), and tables that adds asked for
 * more than once (at most 8, 64 MB in all, 16 MB each).  This frees them
 * (tables in use by running calls are freed when those finish). */
void sinpe_clear_caches(void);

/* SIMD levels.  Every hot loop is compiled once per level and one level is
 * chosen for the process: by default the best the CPU (and the OS) support,
 * or the one the environment variable SINPE_SIMD names ("baseline", "avx2",
 * "avx512", "avx512_bf16"), read at the first call.  Every level gives the
 * same bits; the choice changes only speed.  avx2 includes F16C (every
 * AVX2 CPU has it); avx512_bf16 is avx512 with AVX512_BF16's conversions
 * (Cooper Lake, Sapphire Rapids, Zen 4 and later; not built by MSVC).
 * aarch64 has one level, the baseline (NEON).
 *
 * The levels, from the least to the best: X(ID, name, cpu) gives
 * SINPE_SIMD_<ID> = its number, the name SINPE_SIMD spells, and the CPU
 * features its loops use (core/platform.h's SINPE_CPU_*, which a CPU must
 * have, and its OS save the registers of, for the level to run there).
 * Each level's loops are csrc/kernels/levels/<name>.c. */
#define SINPE_SIMD_LIST(X)                                                                    \
    X(BASELINE, baseline, 0)                                                                  \
    X(AVX2, avx2, SINPE_CPU_AVX2)                                                             \
    X(AVX512, avx512, SINPE_CPU_AVX2 | SINPE_CPU_AVX512)                                      \
    X(AVX512_BF16, avx512_bf16, SINPE_CPU_AVX2 | SINPE_CPU_AVX512 | SINPE_CPU_AVX512_BF16)

#define SINPE_SIMD_NUMBER(id, name, cpu) SINPE_SIMD_##id,
enum { SINPE_SIMD_LIST(SINPE_SIMD_NUMBER) SINPE_SIMD_LEVELS }; /* 0, 1, 2, 3; 4 levels */
#undef SINPE_SIMD_NUMBER

/* Chooses the level by name (NULL or "": the best available), at any time
 * and from any thread; calls already running finish on the level they
 * started with.  Returns SINPE_OK, or SINPE_ERR_INVALID when the name is
 * unknown or the CPU lacks that level: then the best available level is
 * chosen instead, never one the CPU lacks. */
int sinpe_simd_select(const char *level);

/* The level in use (SINPE_SIMD_*), and whether the CPU has a level. */
int sinpe_simd_level(void);
int sinpe_simd_available(int level);

/* A level's name as SINPE_SIMD spells it ("baseline", "avx2", "avx512",
 * "avx512_bf16"), or NULL for a number that is not a level. */
const char *sinpe_simd_name(int level);

/* sinpe.torch's exact angle tables, evaluated on the CPU (core/angles.c):
 * the bits its torch operations give on every other device.  The tables are
 * the arrays sinpe.torch makes (sinpe/torch/_angles.py): for m frequency
 * pairs, Q1.31 integers of cos and sin of h * 2**12 * w (high, [4097][m][2]),
 * rotation matrices of l * w (low, [4096][m][2][2]) and of each 8-bit digit
 * of a 48-bit fraction (fraction[k], [256][m][2][2], for real positions),
 * and the float32 scalings [4][2] of a positive, a negative and an
 * unserved position (NaN).  Positions |p| <= limit are served. */
#define SINPE_FRACTION_DIGITS 6
typedef struct {
    int64_t pairs, limit;
    const int64_t *high, *low, *fraction[SINPE_FRACTION_DIGITS];
    const float *scalings;
} sinpe_angle_digits;

typedef enum {
    SINPE_POSITIONS_INT64,
    SINPE_POSITIONS_FLOAT32,
    SINPE_POSITIONS_FLOAT64
} sinpe_position_kind;

/* out[r][j] = [cos, sin] of pair j at position positions[r] (positions[r][j]
 * with per_pair), as float32 (rounded to odd with half, for the caller to
 * round to a 16-bit type once).  rows * pairs * 2 floats. */
void sinpe_angle_values(const sinpe_angle_digits *digits, const void *positions,
                        sinpe_position_kind kind, int64_t rows, int per_pair, int half,
                        float *out);

#ifdef __cplusplus
}
#endif

#endif /* SINPE_H */
