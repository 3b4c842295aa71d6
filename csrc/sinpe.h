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

/* The most threads one call may use. */
#define SINPE_MAX_THREADS 1024

typedef enum {
    SINPE_FLOAT16 = 0, /* IEEE binary16 */
    SINPE_FLOAT32 = 1,
    SINPE_FLOAT64 = 2,
    SINPE_BFLOAT16 = 3 /* the top 16 bits of a float32 */
} sinpe_dtype;

enum {
    SINPE_OK = 0,
    SINPE_ERR_NOMEM = 1,    /* scratch memory could not be allocated */
    SINPE_ERR_INVALID = 2,  /* an argument violates the contract below */
    SINPE_ERR_CANCELLED = 3 /* the cancel callback asked to stop */
};

/* A cancel callback: the kernel calls it from the calling thread, between
 * chunks of rows (about every 8 MB written by that thread), only while work
 * remains; nonzero stops the call.  It is never called from helper threads
 * and never for small calls.  The CPython binding uses it to take the GIL,
 * run PyErr_CheckSignals() (Ctrl-C) and release the GIL again. */
typedef int (*sinpe_cancel_fn)(void *context);

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
 * columns = the d = shape[1] features).  Returns a SINPE_* status; on
 * SINPE_ERR_NOMEM or SINPE_ERR_INVALID nothing has been written. */
int sinpe_encode(const sinpe_array *out, double n, int64_t offset);

/* Flags of sinpe_encode_ex. */
enum {
    /* `out` was just allocated: a large one (32 MB or more) then comes
     * fresh from the OS, whose page zeroing leaves it in the caches, so it
     * is written with plain stores rather than streaming ones.  Only speed
     * depends on this flag, never values. */
    SINPE_FRESH_OUTPUT = 1
};

/* sinpe_encode with flags and a cancel callback (NULL: none).  On
 * SINPE_ERR_CANCELLED some rows have been written and others not: discard
 * the array.  Every helper thread has stopped when it returns. */
int sinpe_encode_ex(const sinpe_array *out, double n, int64_t offset, unsigned flags,
                    sinpe_cancel_fn cancel, void *cancel_context);

/* x = scale * x + PE in place, in one pass.  Positions run along pos_axis
 * (not the last axis), features along the last axis, every other axis is
 * batch.  Arithmetic is in double, rounded once per element.  Returns a
 * SINPE_* status; on any non-OK status x is unchanged. */
int sinpe_add(const sinpe_array *x, int pos_axis, double n, int64_t offset,
              double scale);

/* Threads used by large calls (small calls always use one).  The default is
 * the number of cores this process may run on.  Returns SINPE_ERR_INVALID
 * (and changes nothing) unless 1 <= threads <= SINPE_MAX_THREADS.  Results
 * are bit-identical for any thread count. */
int sinpe_set_num_threads(int threads);
int sinpe_get_num_threads(void);

#ifdef __cplusplus
}
#endif

#endif /* SINPE_H */
