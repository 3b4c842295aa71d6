/*
 * Internal: the value generator that every table shares.  Not public API.
 *
 * A table holds frequencies freq[0 .. nfreq) and their step rows.  Values
 * come from block rotation with exact restarts: positions are grouped in
 * blocks of SINPE_BLOCK_ROWS aligned to absolute multiples of it,
 * p = p0 + r, and with the anchors s0 = sin(p0 w), c0 = cos(p0 w)
 * (sinpe_anchor_sincos, per block) and the steps C = cos(r w), S = sin(r w)
 * (in the table, one row per r):
 *
 *     sin(p w) = s0 * C + c0 * S          (sinpe_sin_value)
 *     cos(p w) = c0 * C - s0 * S          (sinpe_cos_value)
 *
 * Nothing is carried from row to row (no accumulation with position), and
 * a value depends only on (p, w): which call, thread, tile, layout or row
 * range made it cannot change its bits.  Every writer computes a frequency's
 * sine and cosine together, from one load of its steps, through these two
 * expressions, or in vector code the same multiplies and add/subtract in the
 * same order (IEEE operations with -ffp-contract=off round alike at every
 * SIMD width, and c0 * C - s0 * S is bit for bit c0 * C + (-s0) * S), so
 * float16/float32 outputs are the rounding of the float64 output.
 *
 * What callers choose: the frequencies (sinpe_table_standard(n, d), the
 * paper's n**(-2k/d), cached; sinpe_table_fairseq; sinpe_table_from_freq for
 * any array), which columns receive the sine and the cosine (the row
 * writers, rows.h), and the positions: any p whose block start p0 has
 * |p0 * freq[k]| <= SINPE_SINCOS_MAX_ANGLE (2**26).
 */
#ifndef SINPE_TABLE_H
#define SINPE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define SINPE_BLOCK_ROWS 32

/* Tables with more frequencies than this are "wide": their step rows
 * (32 * nfreq * 16 bytes) are not kept but built per frequency tile into the
 * caller's buffer (sinpe_steps_for), so encode(1, 2**24) needs memory in
 * proportion to its output, not gigabytes of step rows. */
#define SINPE_TABLE_MAX_STEP_FREQS 2048

typedef struct sinpe_table sinpe_table;

/* The anchors of one block, every frequency, kept by a table for calls
 * that write rows of a single block (a decoding loop asks for the same
 * block 32 times in a row): sin[k], cos[k] of p0 * freq[k]. */
typedef struct {
    int64_t p0; /* SINPE_NO_BLOCK while being made */
    int refs;   /* calls using them: only an unused slot is made again */
    double *sin, *cos;
} sinpe_anchors;

#define SINPE_KEPT_ANCHORS 2
#define SINPE_NO_BLOCK INT64_MIN

struct sinpe_table {
    ptrdiff_t nfreq;
    const double *freq; /* [nfreq] */
    double max_freq;    /* the largest; NaN if any is negative or NaN (invalid) */
    /* [SINPE_BLOCK_ROWS][nfreq]: cos and sin of r * freq[k]; NULL if wide */
    const double *step_c;
    const double *step_s;
    sinpe_anchors kept[SINPE_KEPT_ANCHORS]; /* none (NULL arrays) if wide */
    /* bookkeeping, private to table.c */
    size_t bytes;
    int refs, cached;
    int key_kind; /* what key_n, key_d built: TABLE_PAPER or TABLE_FAIRSEQ (table.c) */
    double key_n;
    ptrdiff_t key_d;
    uint64_t last_use;
};

/* Step rows of a run of frequencies: row r of frequency k0 + j is
 * c[r * stride + j] = cos(r w), s[r * stride + j] = sin(r w). */
typedef struct {
    const double *c, *s;
    ptrdiff_t stride;
} sinpe_steps;

/* The expressions that turn a block's anchors and a row's steps into the
 * values (see the top). */
static inline double sinpe_sin_value(double s0, double c0, double c, double s)
{
    return s0 * c + c0 * s;
}

static inline double sinpe_cos_value(double s0, double c0, double c, double s)
{
    /* c0 * c - s0 * s, written as a sum: the same bits, but GCC 12's
     * vectoriser fuses an interleaved "add here, subtract there" of products
     * into vfmsubadd (an FMA) even under -ffp-contract=off, which changed the
     * AVX-512 loops' bits; a sum of products has no such pattern. */
    return c0 * c + (-s0) * s;
}

/* The block start of position p: floor(p / SINPE_BLOCK_ROWS) * SINPE_BLOCK_ROWS. */
static inline int64_t sinpe_block_start(int64_t p)
{
    const int64_t rem = p % SINPE_BLOCK_ROWS;
    return rem < 0 ? p - rem - SINPE_BLOCK_ROWS : p - rem;
}

/* The paper's frequencies n**(-2k/d), k < ceil(d/2): for the double
 * e = -(2k)/d, the correctly rounded n**e (pow.h), the same bits on every
 * platform.  Shared through a small thread-safe cache unless wide.  NULL
 * when out of memory.  Release with sinpe_table_release. */
sinpe_table *sinpe_table_standard(double n, ptrdiff_t d);

/* fairseq / tensor2tensor / Whisper frequencies n**(-k / max(d/2 - 1, 1)),
 * k < d/2 (d >= 2): log-spaced from 1 down to exactly 1/n; t2t's max(., 1)
 * defines d = 2, 3.  Correctly rounded and cached as the paper's are. */
sinpe_table *sinpe_table_fairseq(double n, ptrdiff_t d);

/* A table for any frequencies (copied), never cached.  NULL when out of
 * memory. */
sinpe_table *sinpe_table_from_freq(const double *freq, ptrdiff_t nfreq);

void sinpe_table_release(sinpe_table *table);

/* Drops every cached table (those in use are freed when released). */
void sinpe_table_cache_clear(void);

/* Bit r set for each residue r = p - sinpe_block_start(p) of the positions
 * first .. first + count - 1. */
uint32_t sinpe_residues(int64_t first, int64_t count);

/* Step rows of frequencies [k0, k1) for the residues in `residues`: a view
 * into the table, or for a wide table built into buffer
 * (2 * SINPE_BLOCK_ROWS * (k1 - k0) doubles). */
sinpe_steps sinpe_steps_for(const sinpe_table *table, ptrdiff_t k0, ptrdiff_t k1,
                            uint32_t residues, double *buffer);

/* The table's kept anchors of block p0, made now into an unused slot if
 * none holds them; NULL when every slot is in use (or the table is wide):
 * compute them instead.  Release with sinpe_anchors_release. */
const sinpe_anchors *sinpe_anchors_hold(sinpe_table *table, int64_t p0);
void sinpe_anchors_release(const sinpe_anchors *anchors);

/* sin_out[j] = sin(p0 w), cos_out[j] = cos(p0 w) for w = freq[k0 + j],
 * j < k1 - k0: the anchors of the block at p0. */
void sinpe_anchor_sincos(const sinpe_table *table, int64_t p0, ptrdiff_t k0, ptrdiff_t k1,
                         double *sin_out, double *cos_out);

#endif /* SINPE_TABLE_H */
