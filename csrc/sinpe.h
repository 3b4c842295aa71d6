/*
 * sinpe: the sinusoidal positional encoding of "Attention Is All You Need",
 * written straight into caller-owned strided memory.  Plain C, no Python.
 *
 *     w_k      = n ** (-2k / d)           k = j / 2 (integer division)
 *     PE[p, j] = sin(p * w_k)  for even j,  cos(p * w_k)  for odd j
 *
 * Angles and values are computed in double and rounded once to the element
 * type.  Every element is a pure function of (p, j, d, n): any sub-range of
 * rows, computed alone or in any thread, has the same bits as the full table.
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

/* The most axes an array may have (NumPy 2 allows 64). */
#define SINPE_MAX_DIMS 64

typedef enum {
    SINPE_FLOAT16 = 0, /* IEEE binary16 */
    SINPE_FLOAT32 = 1,
    SINPE_FLOAT64 = 2
} sinpe_dtype;

enum {
    SINPE_OK = 0,
    SINPE_ERR_NOMEM = 1,    /* scratch memory could not be allocated */
    SINPE_ERR_INVALID = 2   /* an argument violates the contract below */
};

/* A strided view of caller memory.  The last axis holds the features. */
typedef struct {
    char *data;               /* address of element (0, ..., 0) */
    sinpe_dtype dtype;
    int byteswapped;          /* nonzero: elements are in non-native byte order */
    int ndim;                 /* 1 <= ndim <= SINPE_MAX_DIMS */
    const ptrdiff_t *shape;   /* each >= 0 */
    const ptrdiff_t *strides; /* in bytes, any sign */
} sinpe_array;

/* Fills a 2-D array (rows = positions offset .. offset + shape[0] - 1,
 * columns = the d = shape[1] features).  Returns a SINPE_* status; on any
 * non-OK status nothing has been written. */
int sinpe_encode(const sinpe_array *out, double n, int64_t offset);

/* x = scale * x + PE in place, in one pass.  Positions run along pos_axis
 * (not the last axis), features along the last axis, every other axis is
 * batch.  Arithmetic is in double, rounded once per element.  Returns a
 * SINPE_* status; on any non-OK status x is unchanged. */
int sinpe_add(const sinpe_array *x, int pos_axis, double n, int64_t offset,
              double scale);

#ifdef __cplusplus
}
#endif

#endif /* SINPE_H */
