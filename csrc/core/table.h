/*
 * The value generator that every table shares, and the tables it reads.
 * Not public API.
 *
 * A table holds frequencies freq[0 .. nfreq) and their step rows.  Values
 * come from block rotation with exact restarts: positions are grouped in
 * blocks of SINPE_BLOCK_ROWS aligned to absolute multiples of it,
 * p = p0 + r, and with the anchors s0 = sin(p0 w), c0 = cos(p0 w)
 * (made per block by the SIMD level's sincos loop) and the steps
 * C = cos(r w), S = sin(r w)
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
 * What callers choose: the frequencies (plan/frequencies.h: the paper's
 * n**(-2k/d) or fairseq's schedule, correctly rounded and cached here, or
 * any array), which columns receive the sine and the cosine (the row
 * writers, kernels/rows.h), and the positions: any p whose block start p0
 * has |p0 * freq[k]| <= SINPE_SINCOS_MAX_ANGLE (2**26).
 *
 * Here: a table's memory, its cache (core/table.c) and the anchors it
 * keeps; what goes into it is made above the kernels, which compute it.
 */
#ifndef SINPE_TABLE_H
#define SINPE_TABLE_H

#include <stddef.h>
#include <stdint.h>

#define SINPE_BLOCK_ROWS 32

/* Tables with more frequencies than this are "wide": their step rows
 * (32 * nfreq * 16 bytes) are not kept but built per frequency tile into the
 * caller's buffer (exec/walk.h's steps_of), so encode(1, 2**24) needs memory in
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
    /* bookkeeping: the cache's (core/table.c), and the key its maker sets */
    size_t bytes;
    int refs, cached;
    int key_kind; /* what key_n, key_d built: SINPE_TABLE_PAPER or _FAIRSEQ */
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

static inline int sinpe_table_is_wide(ptrdiff_t nfreq)
{
    return nfreq > SINPE_TABLE_MAX_STEP_FREQS;
}

/* What a table's frequencies are, for the cache's key. */
enum { SINPE_TABLE_OTHER, SINPE_TABLE_PAPER, SINPE_TABLE_FAIRSEQ };

/* A table of nfreq frequencies, uninitialised but for its bookkeeping (one
 * reference, no key); NULL on overflow or when out of memory.  Whoever
 * makes it fills freq, max_freq and (unless wide) the step rows. */
sinpe_table *sinpe_table_alloc(ptrdiff_t nfreq);

/* The cached table of (kind, n, d), referenced, or NULL. */
sinpe_table *sinpe_table_lookup(int kind, double n, ptrdiff_t d);

/* Caches a table just made and keyed (key_kind, key_n, key_d): returns it,
 * or the same table another thread cached meanwhile (and frees this one);
 * referenced either way. */
sinpe_table *sinpe_table_keep(sinpe_table *built);

void sinpe_table_release(sinpe_table *table);

/* Drops every cached table (those in use are freed when released). */
void sinpe_table_cache_clear(void);

/* Bit r set for each residue r = p - sinpe_block_start(p) of the positions
 * first .. first + count - 1. */
uint32_t sinpe_residues(int64_t first, int64_t count);

/* The table's kept anchors of block p0, referenced (release them), or NULL
 * when every slot is in use or the table is wide.  *make: the slot is the
 * caller's to fill (sin and cos of p0 * freq[k], every k), then to publish
 * with sinpe_anchors_made; until then no one else reads it. */
sinpe_anchors *sinpe_anchors_claim(sinpe_table *table, int64_t p0, int *make);
void sinpe_anchors_made(sinpe_anchors *anchors, int64_t p0);
void sinpe_anchors_release(const sinpe_anchors *anchors);

#endif /* SINPE_TABLE_H */
