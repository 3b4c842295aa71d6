/*
 * The positions of a call and its padding (python/args_positions.c).
 * Every helper that fails sets an exception naming the argument and its
 * value and returns -1.
 */
#ifndef SINPE_PYTHON_ARGS_POSITIONS_H
#define SINPE_PYTHON_ARGS_POSITIONS_H

#include "python/args.h"
#include "python/binding.h"

/* Range positions along `axis` (Python's: negative counts from the end; not
 * the last, the features) of view from offset: messages name the array
 * `name` and its length `rows_name`. */
int sinpe_axis_positions_arg(sinpe_call *c, const sinpe_array *view, const char *name,
                             long long axis, long long offset, const char *rows_name);
/* Range positions offset + i along axis `axis` of `rows` rows. */
int sinpe_range_arg(sinpe_call *c, int axis, long long offset, Py_ssize_t rows,
                    const char *rows_name);
/* positions= (a snapshot of int64 or float64); *ndim, dims: its shape. */
int sinpe_positions_arg(sinpe_call *c, PyObject *obj, int *ndim, npy_intp *dims);
/* positions= of add_ and rope_: any shape that broadcasts against the rows
 * nrow/rows (NumPy's rule), snapshotted as one position per row.
 * rows_name names the rows' shape in messages ("x.shape[:-1] =").  With
 * sections (sinpe_sections_arg first), a leading axis of one row per
 * section, then a shape that broadcasts: a snapshot of (S, *rows). */
int sinpe_row_positions_arg(sinpe_call *c, PyObject *obj, int nrow, const npy_intp *rows,
                            const char *rows_name);
/* padding= (a snapshot of bools) of exactly ndim/dims. */
int sinpe_padding_arg(sinpe_call *c, PyObject *obj, int ndim, const npy_intp *dims,
                      const char *expected_name);

#endif /* SINPE_PYTHON_ARGS_POSITIONS_H */
