/*
 * Internal: the value generator that every path shares (encode, out=, add_,
 * and later layouts, schedules, RoPE caches, grids).  Not public API.
 *
 * A table holds, for frequencies freq[0 .. nfreq), everything needed to make
 * the *canonical row* of a position p: 2 * nfreq doubles, lane 2k =
 * sin(p * freq[k]) and lane 2k + 1 = cos(p * freq[k]).
 *
 * Values come from block rotation with exact restarts.  Positions are grouped
 * in blocks of SINPE_BLOCK_ROWS aligned to absolute multiples of it,
 * p = p0 + r, and with the anchors sin/cos(p0 w) (sinpe_sincos, per block)
 * and the steps sin/cos(r w) (in the table):
 *
 *     lane 2k:     A = sin(p0 w), B =  cos(p0 w)   A*C + B*S = sin(p w)
 *     lane 2k + 1: A = cos(p0 w), B = -sin(p0 w)   A*C + B*S = cos(p w)
 *     C = cos(r w), S = sin(r w) on both lanes of the pair
 *
 * so every lane is the same expression, sinpe_value(A, B, C, S), with no
 * shuffles: loops over lanes vectorise plainly.  Nothing is carried from row
 * to row (no accumulation with position), and a value depends only on
 * (p, freq[k]): which call, thread, tile or row range made it cannot change
 * its bits.  Every writer must compute values through sinpe_value, or in
 * intrinsics code the same two multiplies and one add in the same order
 * (IEEE mul/add with -ffp-contract=off round identically at every SIMD
 * width), so float16/float32 outputs are the rounding of the float64 output.
 *
 * What callers choose (this is the interface issue 6 builds on):
 *  - the frequencies: sinpe_table_standard(n, d) is the paper's n**(-2k/d),
 *    cached; sinpe_table_from_freq() takes any frequency array.
 *  - the layout: which output column receives which canonical lane is the
 *    row writer's business (kernels.c writes lane j to column j: the paper's
 *    interleaved layout; a concatenated layout writes lane 2k to column k and
 *    lane 2k + 1 to column nfreq + k; a RoPE cos cache writes lane 2k + 1 to
 *    columns k and k + nfreq).
 *  - the positions: any p whose block start p0 has |p0 * freq[k]| <=
 *    SINPE_SINCOS_MAX_ANGLE (2**26; the paper's frequencies are <= 1 and
 *    |p| <= 2**24); a row of an arbitrary position is sinpe_anchor(p0 =
 *    sinpe_block_start(p)) followed by sinpe_values(r = p - p0) with the
 *    steps of sinpe_steps_for().  Blocks, tiles and threads: kernels.c.
 */
#ifndef SINPE_TABLE_H
#define SINPE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define SINPE_BLOCK_ROWS 32

/* Tables with more frequencies than this are "wide": their step rows
 * (32 * 2 * nfreq * 16 bytes) are not kept but built per feature tile into
 * the caller's buffer (sinpe_steps_for), so encode(1, 2**24) needs memory
 * in proportion to its output, not 8 GB of step rows. */
#define SINPE_TABLE_MAX_STEP_FREQS 2048

typedef struct sinpe_table sinpe_table;

struct sinpe_table {
    ptrdiff_t nfreq;
    const double *freq;   /* [nfreq] */
    /* [SINPE_BLOCK_ROWS][2 * nfreq]: cos and sin of r * freq[lane / 2];
     * NULL for a wide table */
    const double *step_c;
    const double *step_s;
    /* [SINPE_BLOCK_ROWS][nfreq]: the same steps once per frequency, for
     * writers that keep sines and cosines apart (layouts.c); NULL if wide */
    const double *half_c;
    const double *half_s;
    /* bookkeeping, private to table.c */
    size_t bytes;
    int refs, cached;
    int key_kind; /* what key_n, key_d built: TABLE_PAPER or TABLE_FAIRSEQ (table.c) */
    double key_n;
    ptrdiff_t key_d;
    uint64_t last_use;
};

/* Step rows of a run of lanes: row r of lane lane0 + j is c[r * stride + j]
 * and s[r * stride + j]. */
typedef struct {
    const double *c, *s;
    ptrdiff_t stride;
} sinpe_steps;

/* The one expression that turns factors into a value. */
static inline double sinpe_value(double a, double b, double c, double s)
{
    return a * c + b * s;
}

/* The block start of position p: floor(p / SINPE_BLOCK_ROWS) * SINPE_BLOCK_ROWS. */
static inline int64_t sinpe_block_start(int64_t p)
{
    const int64_t rem = p % SINPE_BLOCK_ROWS;
    return rem < 0 ? p - rem - SINPE_BLOCK_ROWS : p - rem;
}

/* The paper's frequencies n**(-2k/d), k < ceil(d/2).  Shared through a small
 * thread-safe cache unless wide.  NULL when out of memory.  Release with
 * sinpe_table_release. */
sinpe_table *sinpe_table_standard(double n, ptrdiff_t d);

/* fairseq / tensor2tensor / Whisper frequencies n**(-k / max(d/2 - 1, 1)),
 * k < d/2 (d >= 2): log-spaced from 1 down to exactly 1/n; t2t's max(., 1)
 * defines d = 2, 3.  Cached as the paper's are. */
sinpe_table *sinpe_table_fairseq(double n, ptrdiff_t d);

/* A table for any frequencies (copied), never cached.  NULL when out of
 * memory. */
sinpe_table *sinpe_table_from_freq(const double *freq, ptrdiff_t nfreq);

void sinpe_table_release(sinpe_table *table);

/* Bit r set for each residue r = p - sinpe_block_start(p) of the positions
 * first .. first + count - 1. */
uint32_t sinpe_residues(int64_t first, int64_t count);

/* Step rows of canonical lanes [2 * k0, 2 * k1) for the residues in
 * `residues`: a view into the table, or, for a wide table, built into
 * buffer (2 * SINPE_BLOCK_ROWS * 2 * (k1 - k0) doubles). */
sinpe_steps sinpe_steps_for(const sinpe_table *table, ptrdiff_t k0, ptrdiff_t k1,
                            uint32_t residues, double *buffer);

/* Step rows of frequencies [k0, k1), one entry per frequency: row r of
 * frequency k0 + j is c[r * stride + j] = cos(r w), s[...] = sin(r w).  A
 * view into the table, or, for a wide table, built into buffer
 * (2 * SINPE_BLOCK_ROWS * (k1 - k0) doubles). */
sinpe_steps sinpe_half_steps_for(const sinpe_table *table, ptrdiff_t k0, ptrdiff_t k1,
                                 uint32_t residues, double *buffer);

/* sin_out[j] = sin(p0 w), cos_out[j] = cos(p0 w) for w = freq[k0 + j],
 * j < k1 - k0: the anchors of the block at p0 before sinpe_anchor spreads
 * them over lanes (same bits).  With them, sin(p w) and cos(p w) of
 * p = p0 + r are sinpe_value(sin, cos, C, S) and sinpe_value(cos, -sin, C,
 * S) with C, S the half steps of r. */
void sinpe_anchor_sincos(const sinpe_table *table, int64_t p0, ptrdiff_t k0, ptrdiff_t k1,
                         double *sin_out, double *cos_out);

/* Anchor factors A, B of canonical lanes [2 * k0, 2 * k1) for the block that
 * starts at p0.  a[0], b[0] belong to lane 2 * k0.  sin_tmp and cos_tmp are
 * scratch of k1 - k0 doubles. */
void sinpe_anchor(const sinpe_table *table, int64_t p0, ptrdiff_t k0, ptrdiff_t k1, double *a,
                  double *b, double *sin_tmp, double *cos_tmp);

/* dst[j] = canonical value of lane lane0 + j of position p0 + r, j < lanes,
 * from the anchors of p0 (a[0], b[0] belong to lane0) and the steps of the
 * same lanes. */
void sinpe_values(const sinpe_steps *steps, int r, ptrdiff_t lanes, const double *a,
                  const double *b, double *dst);

#endif /* SINPE_TABLE_H */
