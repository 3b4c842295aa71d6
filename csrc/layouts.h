/*
 * Internal: every table variant of issue 6 (docs/variants.md) from the one
 * value generator of table.h.  Not public API; the binding (module.c,
 * bind_variants.c) is the only caller.
 *
 * A variant is three independent choices:
 *  - frequencies: the paper's n**(-2k/d), fairseq's n**(-k/max(d/2-1, 1)),
 *    or an explicit array (sinpe_freqs);
 *  - positions: offset + i along one axis, broadcast over the others (encode,
 *    add_, grids), or one position per row (encode_at, add_ positions=, RoPE
 *    at positions), optionally with rows zeroed by a padding mask
 *    (sinpe_positions);
 *  - what a row receives: the table in the interleaved or concatenated
 *    layout, or a RoPE cos/sin cache in either pair layout.
 *
 * Integer positions (and float positions with an integral value) go through
 * block anchors + sinpe_values, so any row computed alone has the bits of
 * the same row of the full table, whatever the call, cut or thread count.
 * Non-integral float positions are evaluated directly (sinpe_sincos of the
 * double angle p * w, one rounding): they have no integer row to agree with.
 */
#ifndef SINPE_LAYOUTS_H
#define SINPE_LAYOUTS_H

#include <stddef.h>
#include <stdint.h>

#include "sinpe.h"

typedef enum { SINPE_INTERLEAVED = 0, SINPE_CONCATENATED = 1 } sinpe_layout;
typedef enum { SINPE_PAPER = 0, SINPE_FAIRSEQ = 1 } sinpe_schedule;

/* The most an angle |p * w| may reach anywhere (block starts included):
 * sincos.h's exact-reduction range. */
#define SINPE_MAX_ANGLE 67108864.0
/* Block starts lie up to this many rows below a negative position. */
#define SINPE_ANCHOR_SLACK 32

typedef struct {
    const double *freq; /* explicit frequencies, or NULL: the schedule with n */
    ptrdiff_t nfreq;    /* entries of freq: d / 2 or (d + 1) / 2 (RoPE: d / 2) */
    sinpe_schedule schedule;
    double n;
} sinpe_freqs;

/* Rows are the indices of every axis but the last (the features), C order. */
typedef struct {
    int pos_axis;    /* >= 0: the row at index i along it is position offset + i */
    int64_t offset;
    /* pos_axis < 0: one position per row, C order; exactly one of these */
    const int64_t *ints;
    const double *reals; /* finite; integral values take the integer path */
    /* NULL, or one flag per row (C order): nonzero rows get a zero table */
    const unsigned char *padding;
} sinpe_positions;

/* Frequencies (explicit or scheduled) are finite, >= 0, and every angle up
 * to max_abs_position stays in range.  SINPE_OK or SINPE_ERR_INVALID. */
int sinpe_check_freq(const double *freq, ptrdiff_t nfreq, double max_abs_position);

/* The table of out.shape[-1] = d columns in `layout` with `freqs`, stored
 * into out (adding = 0) or added as out = scale * out + PE (adding = 1).
 * flags: SINPE_FRESH_OUTPUT when every output was just allocated (it only
 * steers the choice of stores, as in sinpe_encode_ex).  Returns a SINPE_*
 * status; NOMEM/INVALID: nothing written. */
int sinpe_variant_table(const sinpe_array *out, const sinpe_freqs *freqs, sinpe_layout layout,
                        const sinpe_positions *pos, int adding, double scale, unsigned flags,
                        sinpe_cancel_fn cancel, void *cancel_context);

/* RoPE caches: cos_out and sin_out (same shape, even d) get cos/sin of
 * p * w_k at column j, k = j mod d/2 (concatenated) or j / 2 (interleaved). */
int sinpe_variant_rope(const sinpe_array *cos_out, const sinpe_array *sin_out,
                       const sinpe_freqs *freqs, sinpe_layout layout,
                       const sinpe_positions *pos, unsigned flags, sinpe_cancel_fn cancel,
                       void *cancel_context);

/* A grid table: out has shape (S_0, .., S_{r-1}, d); the chunks for the axes
 * order[0], order[1], .. are concatenated along the features, axis a's chunk
 * being the width-split[a] table of the index along axis a (sum(split) = d,
 * each split >= 1; freqs.freq must be NULL). */
int sinpe_variant_grid(const sinpe_array *out, const ptrdiff_t *split, const int *order,
                       const sinpe_freqs *freqs, sinpe_layout layout, unsigned flags,
                       sinpe_cancel_fn cancel, void *cancel_context);

#endif /* SINPE_LAYOUTS_H */
