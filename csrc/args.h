/*
 * Internal: the CPython binding's argument parsing and validation (args.c),
 * used by the Python-facing functions (module.c).  Every helper that fails
 * sets an exception naming the argument and its value and returns -1 (or
 * NULL); nothing here writes an output.
 */
#ifndef SINPE_ARGS_H
#define SINPE_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL sinpe_ARRAY_API
#ifndef SINPE_IMPORTS_NUMPY
#define NO_IMPORT_ARRAY /* module.c imports NumPy's API; the other files share it */
#endif
#include <numpy/arrayobject.h>

#include "sinpe.h"

/* Scalars.  An integer is int-like and not a bool (NumPy's rule for shapes
 * and axes); a real is any int, float or NumPy real scalar. */
int sinpe_integer_arg(PyObject *obj, const char *name, long long *value);
int sinpe_size_arg(PyObject *obj, const char *name, Py_ssize_t *value);
int sinpe_real_arg(PyObject *obj, const char *name, double *value);
int sinpe_check_base(double n);
/* The positions offset .. offset + rows - 1 are all within the bound. */
int sinpe_check_range(long long offset, Py_ssize_t rows, const char *rows_name);
/* A sequence of integers: exactly *count of them, or any number (1 to
 * SINPE_MAX_DIMS - 1) when *count < 0, which is then set. */
int sinpe_int_sequence_arg(PyObject *obj, const char *name, Py_ssize_t *count, long long *values);

/* One call being assembled: the C plan and the arrays it points into
 * (private snapshots, owned).  Start with SINPE_CALL_INIT; release with
 * sinpe_call_release whatever happened. */
typedef struct {
    sinpe_plan plan;
    PyArrayObject *freq, *positions, *padding;
    double most; /* the largest |position| of the call */
} sinpe_call;

#define SINPE_CALL_INIT(c) ((c)->plan = sinpe_plan_default(), (c)->freq = (c)->positions = \
                            (c)->padding = NULL, (c)->most = 0.0)
void sinpe_call_release(sinpe_call *c);

/* layout=, schedule= (obj NULL: not given, the plan's value stays), freq=
 * (a snapshot; excludes n= and schedule=) for rows of d columns; rope: RoPE
 * widths and no schedule.  allow_sines_first: the layout only grids have. */
int sinpe_columns_arg(sinpe_call *c, PyObject *n_obj, PyObject *layout_obj, PyObject *schedule_obj,
                      PyObject *freq_obj, Py_ssize_t d, int rope, int allow_sines_first);
/* Range positions offset + i along axis `axis` of `rows` rows. */
int sinpe_range_arg(sinpe_call *c, int axis, long long offset, Py_ssize_t rows,
                    const char *rows_name);
/* positions= (a snapshot of int64 or float64); *ndim, dims: its shape. */
int sinpe_positions_arg(sinpe_call *c, PyObject *obj, int *ndim, npy_intp *dims);
/* positions= of add_ and rope_: any shape that broadcasts against the rows
 * nrow/rows (NumPy's rule), snapshotted as one position per row.
 * rows_name names the rows' shape in messages ("x.shape[:-1] ="). */
int sinpe_row_positions_arg(sinpe_call *c, PyObject *obj, int nrow, const npy_intp *rows,
                            const char *rows_name);
/* padding= (a snapshot of bools) of exactly ndim/dims. */
int sinpe_padding_arg(sinpe_call *c, PyObject *obj, int ndim, const npy_intp *dims,
                      const char *expected_name);
/* Once the positions are known: explicit frequencies keep every angle in
 * the range where sincos is exact. */
int sinpe_check_angles(const sinpe_call *c);

/* An array sinpe writes in place (out=, embeddings): a supported dtype,
 * writeable, no two elements sharing memory.  Fills the kernel's view;
 * *torch_scalar: the array is a torch tensor's half-type memory, whose
 * scalars torch rounds to float32 (not to the dtype as NumPy does). */
int sinpe_writable_arg(PyObject *obj, const char *name, sinpe_array *view, int *torch_scalar);
/* An array sinpe only reads (a rotation's source and given caches): a
 * supported dtype, any strides; fills the kernel's view. */
int sinpe_readable_arg(PyObject *obj, const char *name, sinpe_array *view);
/* view's strides broadcast to the shape ndim/dims (NumPy's rule: length-1
 * and missing leading axes get stride 0) into strides; a ValueError naming
 * name and target_name when they do not broadcast. */
int sinpe_broadcast_strides(const sinpe_array *view, const char *name, int ndim,
                            const npy_intp *dims, const char *target_name, ptrdiff_t *strides);
/* out= of shape ndim/dims (a new reference to it), or a new array of dtype=
 * (default float32).  expected: the shape as messages should name it (e.g.
 * "(L=5, d=4)"), or NULL for the tuple.  *fresh: the array is new. */
PyArrayObject *sinpe_output_arg(PyObject *out_obj, PyObject *dtype_obj, const char *name, int ndim,
                                const npy_intp *dims, const char *expected, sinpe_array *view,
                                int *fresh);
/* The two outputs of one call may not share memory. */
int sinpe_check_disjoint(const sinpe_array *a, const char *a_name, const sinpe_array *b,
                         const char *b_name);
/* scale= as the add uses it: x.dtype.type(scale) for a NumPy array, the
 * float32 value for a torch half-type tensor; finite after that rounding. */
int sinpe_scale_arg(PyObject *obj, PyObject *x_obj, int torch_scalar, double *scale);

/* Runs the plan without the GIL (Ctrl-C stops stores; adds run to the end)
 * and maps its status to an exception.  0 or -1. */
int sinpe_run_call(sinpe_call *c, const sinpe_array *out, const sinpe_array *out2, int fresh);

/* The ident of the thread that runs Python signal handlers (module init). */
int sinpe_find_main_thread(void);

#endif /* SINPE_ARGS_H */
