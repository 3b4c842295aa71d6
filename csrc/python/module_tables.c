/*
 * sinpe._core's tables: encode, encode_at, encode_grid, add_ (and
 * sinpe.torch's _add_tensor), rope's caches, and the tests' _frequencies.
 * Each parses its arguments into a sinpe_call (python/args*.c: validation,
 * snapshots, messages), makes or checks its output, and runs the one
 * kernel entry point, sinpe_run, without the GIL.  No math here.
 * module.c lists them.
 */
#include "python/binding.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "call.h"
#include "python/args.h"
#include "python/args_positions.h"
#include "python/args_scalars.h"
#include "python/args_sections.h"
#include "python/arrays.h"
#include "python/module_tables.h"

PyObject *sinpe_py_encode(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"L", "d", "n", "offset", "dtype", "out",
                               "layout", "schedule", "freq", NULL};
    PyObject *rows_obj, *cols_obj, *n_obj = NULL, *offset_obj = NULL, *dtype_obj = Py_None,
             *out_obj = Py_None, *layout_obj = NULL, *schedule_obj = NULL, *freq_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$OOOOOO:encode", keywords, &rows_obj,
                                     &cols_obj, &n_obj, &offset_obj, &dtype_obj, &out_obj,
                                     &layout_obj, &schedule_obj, &freq_obj)) {
        return NULL;
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    Py_ssize_t rows, cols;
    long long offset = 0;
    if (sinpe_size_arg(rows_obj, "L", &rows) < 0 || sinpe_size_arg(cols_obj, "d", &cols) < 0 ||
        (n_obj != NULL && sinpe_real_arg(n_obj, "n", &c.plan.n) < 0) ||
        (offset_obj != NULL && sinpe_integer_arg(offset_obj, "offset", &offset) < 0)) {
        return NULL;
    }
    if (rows < 0) {
        return PyErr_Format(PyExc_ValueError, "L must be >= 0, got L=%zd", rows);
    }
    if (cols < 1) {
        return PyErr_Format(PyExc_ValueError, "d must be >= 1, got d=%zd", cols);
    }
    PyArrayObject *result = NULL;
    const npy_intp dims[2] = {rows, cols};
    sinpe_target out;
    int fresh;
    if (sinpe_check_base(c.plan.n) == 0 && sinpe_range_arg(&c, 0, offset, rows, "L") == 0 &&
        sinpe_columns_arg(&c, n_obj, layout_obj, schedule_obj, freq_obj, cols, 0, 0) == 0 &&
        sinpe_check_angles(&c) == 0) {
        char expected[96];
        snprintf(expected, sizeof expected, "(L=%zd, d=%zd)", rows, cols);
        result = sinpe_output_arg(out_obj, dtype_obj, "out", 2, dims, expected, &out, &fresh);
    }
    /* On Ctrl-C the kernel stops; a new array is dropped half-filled (never
     * returned), an out= array keeps the rows already written. */
    if (result != NULL && sinpe_run_call(&c, &out.array, NULL, fresh) < 0) {
        Py_CLEAR(result);
    }
    sinpe_call_release(&c);
    return (PyObject *)result;
}

/* The add of add_ and of sinpe.torch's add_, once the array (`name`) and
 * the scalars are known: positions (along axis from offset, or given),
 * padding, then the kernel.  0, or -1 with an exception set. */
/* The array's name in add_'s messages, as the caller knows it. */
typedef struct {
    const char *array, *rows, *row_shape;
} add_names;
static const add_names embeddings_names = {"embeddings", "embeddings.shape[axis]",
                                           "embeddings.shape[:-1] ="};
static const add_names tensor_names = {"tensor", "tensor.shape[axis]", "tensor.shape[:-1] ="};

static int add_into(sinpe_call *c, const sinpe_array *view, const add_names *names, PyObject *n_obj,
                    PyObject *offset_obj, long long offset, long long axis, PyObject *layout_obj,
                    PyObject *schedule_obj, PyObject *freq_obj, PyObject *positions_obj,
                    PyObject *padding_obj)
{
    const char *name = names->array;
    if (view->ndim < 2) {
        PyErr_Format(PyExc_ValueError,
                     "%s must have at least 2 axes (positions, features), got ndim=%d", name,
                     view->ndim);
        return -1;
    }
    if (positions_obj != Py_None && offset_obj != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "offset and positions are exclusive (add the offset to the positions), "
                     "got offset=%R",
                     offset_obj);
        return -1;
    }
    const int nrow = view->ndim - 1;
    int status = sinpe_columns_arg(c, n_obj, layout_obj, schedule_obj, freq_obj,
                                   view->shape[nrow], 0, 0);
    if (status == 0 && positions_obj != Py_None) { /* per-token positions, broadcast: no axis */
        status = sinpe_row_positions_arg(c, positions_obj, nrow, view->shape, names->row_shape);
    } else if (status == 0) {
        status = sinpe_axis_positions_arg(c, view, name, axis, offset, names->rows);
    }
    if (status == 0 && padding_obj != Py_None) {
        status = sinpe_padding_arg(c, padding_obj, nrow, view->shape, names->row_shape);
    }
    if (status == 0 && sinpe_check_angles(c) == 0) {
        c->plan.add = 1;
        return sinpe_run_call(c, view, NULL, 0);
    }
    return -1;
}

PyObject *sinpe_py_add_(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"embeddings", "n", "offset", "axis", "scale", "layout",
                               "schedule", "freq", "positions", "padding", NULL};
    PyObject *x_obj, *n_obj = NULL, *offset_obj = NULL, *axis_obj = NULL, *scale_obj = NULL,
                     *layout_obj = NULL, *schedule_obj = NULL, *freq_obj = NULL,
                     *positions_obj = Py_None, *padding_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$OOOOOOOO:add_", keywords, &x_obj,
                                     &n_obj, &offset_obj, &axis_obj, &scale_obj, &layout_obj,
                                     &schedule_obj, &freq_obj, &positions_obj, &padding_obj)) {
        return NULL;
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    long long offset = 0, axis = -2;
    sinpe_target x;
    if ((n_obj != NULL && sinpe_real_arg(n_obj, "n", &c.plan.n) < 0) ||
        (offset_obj != NULL && sinpe_integer_arg(offset_obj, "offset", &offset) < 0) ||
        (axis_obj != NULL && sinpe_integer_arg(axis_obj, "axis", &axis) < 0) ||
        sinpe_writable_arg(x_obj, "embeddings", &x) < 0 ||
        sinpe_check_base(c.plan.n) < 0 ||
        sinpe_scale_arg(scale_obj, &x, &c.plan.scale) < 0) {
        return NULL;
    }
    const int status = add_into(&c, &x.array, &embeddings_names, n_obj, offset_obj, offset, axis,
                                layout_obj, schedule_obj, freq_obj, positions_obj, padding_obj);
    sinpe_call_release(&c);
    if (status < 0) {
        return NULL;
    }
    Py_INCREF(x_obj);
    return x_obj;
}

/* sinpe.torch's add_ on a CPU tensor, given by its memory rather than by a
 * NumPy view (making one costs more than a decode step's add):
 * _add_tensor(address, shape, strides, dtype, n, offset, axis, scale), the
 * strides in elements, dtype a sinpe_dtype.  sinpe.torch guarantees a live
 * strided tensor whose memory holds its values; the rest is checked here,
 * as add_ checks an array, with torch's scalar rule (scale rounded to
 * float32 but for float64). */
PyObject *sinpe_py_add_tensor(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        return PyErr_Format(PyExc_TypeError, "_add_tensor takes 8 arguments, got %zd", nargs);
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    sinpe_target x;
    long long offset = 0, axis = -2;
    double scale;
    if (sinpe_tensor_arg(args[0], args[1], args[2], args[3], "tensor", 1, &x) < 0 ||
        sinpe_real_arg(args[4], "n", &c.plan.n) < 0 ||
        sinpe_integer_arg(args[5], "offset", &offset) < 0 ||
        sinpe_integer_arg(args[6], "axis", &axis) < 0 || sinpe_check_base(c.plan.n) < 0 ||
        sinpe_real_arg(args[7], "scale", &scale) < 0) {
        return NULL;
    }
    c.plan.scale = x.array.dtype == SINPE_FLOAT64 ? scale : (double)(float)scale;
    if (!isfinite(c.plan.scale)) {
        return PyErr_Format(PyExc_ValueError,
                            "scale must be finite in the tensor's arithmetic, got scale=%R",
                            args[7]);
    }
    const int status = add_into(&c, &x.array, &tensor_names, args[4], args[5], offset, axis, NULL, NULL,
                                NULL, Py_None, Py_None);
    sinpe_call_release(&c);
    if (status < 0) {
        return NULL;
    }
    Py_RETURN_NONE;
}

PyObject *sinpe_py_encode_at(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"positions", "d", "n", "dtype", "out", "layout",
                               "schedule", "freq", "padding", NULL};
    PyObject *positions_obj, *cols_obj, *n_obj = NULL, *dtype_obj = Py_None, *out_obj = Py_None,
             *layout_obj = NULL, *schedule_obj = NULL, *freq_obj = NULL, *padding_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$OOOOOO:encode_at", keywords,
                                     &positions_obj, &cols_obj, &n_obj, &dtype_obj, &out_obj,
                                     &layout_obj, &schedule_obj, &freq_obj, &padding_obj)) {
        return NULL;
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    Py_ssize_t cols;
    if (sinpe_size_arg(cols_obj, "d", &cols) < 0 ||
        (n_obj != NULL && sinpe_real_arg(n_obj, "n", &c.plan.n) < 0)) {
        return NULL;
    }
    if (cols < 1) {
        return PyErr_Format(PyExc_ValueError, "d must be >= 1, got d=%zd", cols);
    }
    PyArrayObject *result = NULL;
    int ndim, fresh;
    npy_intp dims[SINPE_MAX_DIMS];
    sinpe_target out;
    if (sinpe_check_base(c.plan.n) == 0 &&
        sinpe_columns_arg(&c, n_obj, layout_obj, schedule_obj, freq_obj, cols, 0, 0) == 0 &&
        sinpe_positions_arg(&c, positions_obj, &ndim, dims) == 0 &&
        (padding_obj == Py_None ||
         sinpe_padding_arg(&c, padding_obj, ndim, dims, "positions.shape =") == 0) &&
        sinpe_check_angles(&c) == 0) {
        dims[ndim] = cols;
        result = sinpe_output_arg(out_obj, dtype_obj, "out", ndim + 1, dims, NULL, &out, &fresh);
    }
    if (result != NULL && sinpe_run_call(&c, &out.array, NULL, fresh) < 0) {
        Py_CLEAR(result);
    }
    sinpe_call_release(&c);
    return (PyObject *)result;
}

PyObject *sinpe_py_rope(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"L",      "d",    "n",      "offset", "positions",
                               "dtype",  "out",  "layout", "freq",   "scale",
                               "sections", "sections_layout", NULL};
    PyObject *rows_obj, *cols_obj, *n_obj = NULL, *offset_obj = NULL, *positions_obj = Py_None,
             *dtype_obj = Py_None, *out_obj = Py_None, *layout_obj = NULL, *freq_obj = NULL,
             *scale_obj = NULL, *sections_obj = NULL, *sections_layout_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$OOOOOOOOO:rope", keywords, &rows_obj,
                                     &cols_obj, &n_obj, &offset_obj, &positions_obj,
                                     &dtype_obj, &out_obj, &layout_obj, &freq_obj, &scale_obj,
                                     &sections_obj, &sections_layout_obj)) {
        return NULL;
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    c.plan.rope = 1;
    c.plan.layout = SINPE_CONCATENATED;
    Py_ssize_t rows = 0, cols;
    long long offset = 0;
    if ((rows_obj != Py_None && sinpe_size_arg(rows_obj, "L", &rows) < 0) ||
        sinpe_size_arg(cols_obj, "d", &cols) < 0 ||
        (n_obj != NULL && sinpe_real_arg(n_obj, "n", &c.plan.n) < 0) ||
        (offset_obj != NULL && sinpe_integer_arg(offset_obj, "offset", &offset) < 0) ||
        (scale_obj != NULL && sinpe_real_arg(scale_obj, "scale", &c.plan.scale) < 0)) {
        return NULL;
    }
    if (!isfinite(c.plan.scale)) {
        return PyErr_Format(PyExc_ValueError, "scale must be finite, got scale=%R", scale_obj);
    }
    if (cols >= 2 && cols % 2 == 0 &&
        sinpe_sections_arg(&c, sections_obj, sections_layout_obj, cols / 2, "d // 2") < 0) {
        return NULL;
    }
    if (c.plan.nsections > 0 && positions_obj == Py_None) {
        return PyErr_Format(PyExc_ValueError,
                            "sections need L=None and positions= with a leading axis of %d rows "
                            "(one position per section for every row)",
                            c.plan.nsections);
    }
    if ((positions_obj == Py_None) == (rows_obj == Py_None)) {
        return positions_obj == Py_None
                   ? PyErr_Format(PyExc_ValueError, "rope needs L, or L=None and positions=")
                   : PyErr_Format(PyExc_ValueError,
                                  "L must be None when positions is given (the rows are the "
                                  "positions), got L=%R",
                                  rows_obj);
    }
    if (positions_obj != Py_None && offset_obj != NULL) {
        return PyErr_Format(PyExc_ValueError,
                            "offset and positions are exclusive (add the offset to the "
                            "positions), got offset=%R",
                            offset_obj);
    }
    if (rows < 0) {
        return PyErr_Format(PyExc_ValueError, "L must be >= 0, got L=%zd", rows);
    }
    if (cols < 2 || cols % 2 != 0) {
        return PyErr_Format(PyExc_ValueError,
                            "d must be even and >= 2 (RoPE rotates pairs), got d=%zd", cols);
    }
    if (out_obj != Py_None && (!PyTuple_Check(out_obj) || PyTuple_GET_SIZE(out_obj) != 2)) {
        return PyErr_Format(PyExc_TypeError,
                            "out must be a tuple (cos_out, sin_out) of two arrays, not %.200s",
                            Py_TYPE(out_obj)->tp_name);
    }
    PyObject *outs[2] = {NULL, NULL};
    if (out_obj != Py_None) { /* borrowed: a tuple never changes, and the call holds it */
        outs[0] = PyTuple_GET_ITEM(out_obj, 0);
        outs[1] = PyTuple_GET_ITEM(out_obj, 1);
    }
    PyArrayObject *results[2] = {NULL, NULL};
    sinpe_target targets[2];
    int ndim = 1, fresh;
    npy_intp dims[SINPE_MAX_DIMS] = {rows};
    int status =
        sinpe_check_base(c.plan.n) < 0 ||
                (positions_obj == Py_None ? sinpe_range_arg(&c, 0, offset, rows, "L")
                                          : sinpe_positions_arg(&c, positions_obj, &ndim, dims)) < 0 ||
                (c.plan.nsections > 0 && sinpe_section_axis_check(&c, ndim, dims) < 0) ||
                sinpe_columns_arg(&c, n_obj, layout_obj, NULL, freq_obj, cols, 1, 0) < 0 ||
                sinpe_check_angles(&c) < 0
            ? -1
            : 0;
    if (status == 0 && c.plan.nsections > 0) { /* the rows: positions.shape[1:] */
        memmove(dims, dims + 1, (size_t)--ndim * sizeof(npy_intp));
    }
    dims[ndim] = cols;
    static const char *const names[2] = {"out[0]", "out[1]"};
    for (int t = 0; status == 0 && t < 2; ++t) {
        results[t] = sinpe_output_arg(outs[t], dtype_obj, names[t], ndim + 1, dims, NULL, &targets[t],
                                      &fresh);
        status = results[t] == NULL ? -1 : 0;
    }
    if (status == 0 && !fresh) {
        status = sinpe_check_disjoint(&targets[0].array, names[0], &targets[1].array, names[1]);
    }
    PyObject *pair = NULL;
    if (status == 0 && sinpe_run_call(&c, &targets[0].array, &targets[1].array, fresh) == 0) {
        pair = PyTuple_Pack(2, (PyObject *)results[0], (PyObject *)results[1]);
    }
    Py_XDECREF(results[0]);
    Py_XDECREF(results[1]);
    sinpe_call_release(&c);
    return pair;
}

/* split= (default: d spread evenly) and order= (default: the axes in turn)
 * of an r-axis grid of d features. */
static int grid_columns_arg(PyObject *split_obj, PyObject *order_obj, Py_ssize_t r, Py_ssize_t d,
                            ptrdiff_t *split, int *order)
{
    long long values[SINPE_MAX_DIMS];
    if (split_obj == Py_None) {
        if (d % r != 0) {
            PyErr_Format(PyExc_ValueError,
                         "d=%zd does not split evenly over %zd grid axes; pass split=", d, r);
            return -1;
        }
        for (Py_ssize_t a = 0; a < r; ++a) {
            values[a] = d / r;
        }
    } else if (sinpe_int_sequence_arg(split_obj, "split", &r, values) < 0) {
        return -1;
    }
    long long total = 0;
    for (Py_ssize_t a = 0; a < r; ++a) {
        if (values[a] < 1 || values[a] > d) {
            PyErr_Format(PyExc_ValueError, "split=%R: every entry must be between 1 and d=%zd",
                         split_obj, d);
            return -1;
        }
        split[a] = (ptrdiff_t)values[a];
        total += values[a];
    }
    if (total != d) {
        PyErr_Format(PyExc_ValueError, "split=%R sums to %lld, not d=%zd", split_obj, total, d);
        return -1;
    }
    if (order_obj != Py_None && sinpe_int_sequence_arg(order_obj, "order", &r, values) < 0) {
        return -1;
    }
    int seen[SINPE_MAX_DIMS] = {0};
    for (Py_ssize_t a = 0; a < r; ++a) {
        const long long axis = order_obj == Py_None ? a : values[a];
        if (axis < 0 || axis >= r || seen[axis]++) {
            PyErr_Format(PyExc_ValueError,
                         "order=%R must be a permutation of the grid axes 0 .. %zd", order_obj,
                         r - 1);
            return -1;
        }
        order[a] = (int)axis;
    }
    return 0;
}

PyObject *sinpe_py_encode_grid(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"shape", "d", "n", "dtype", "out", "layout",
                               "schedule", "split", "order", NULL};
    PyObject *shape_obj, *cols_obj, *n_obj = NULL, *dtype_obj = Py_None, *out_obj = Py_None,
             *layout_obj = NULL, *schedule_obj = NULL, *split_obj = Py_None, *order_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$OOOOOO:encode_grid", keywords,
                                     &shape_obj, &cols_obj, &n_obj, &dtype_obj, &out_obj,
                                     &layout_obj, &schedule_obj, &split_obj, &order_obj)) {
        return NULL;
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    Py_ssize_t cols, r = -1;
    long long shape[SINPE_MAX_DIMS];
    if (sinpe_int_sequence_arg(shape_obj, "shape", &r, shape) < 0 ||
        sinpe_size_arg(cols_obj, "d", &cols) < 0 ||
        (n_obj != NULL && sinpe_real_arg(n_obj, "n", &c.plan.n) < 0)) {
        return NULL;
    }
    if (cols < 1) {
        return PyErr_Format(PyExc_ValueError, "d must be >= 1, got d=%zd", cols);
    }
    npy_intp dims[SINPE_MAX_DIMS];
    for (Py_ssize_t a = 0; a < r; ++a) {
        if (shape[a] < 0 || shape[a] > SINPE_MAX_POSITION + 1) {
            return PyErr_Format(PyExc_ValueError,
                                "shape=%R: every axis needs 0 <= length <= %lld (positions up "
                                "to sinpe.MAX_POSITION)",
                                shape_obj, (long long)SINPE_MAX_POSITION + 1);
        }
        dims[a] = (npy_intp)shape[a];
    }
    dims[r] = cols;
    ptrdiff_t split[SINPE_MAX_DIMS];
    int order[SINPE_MAX_DIMS];
    if (sinpe_check_base(c.plan.n) < 0 ||
        sinpe_columns_arg(&c, NULL, layout_obj, schedule_obj, NULL, cols, 0, 1) < 0 ||
        grid_columns_arg(split_obj, order_obj, r, cols, split, order) < 0) {
        return NULL;
    }
    for (Py_ssize_t a = 0; c.plan.layout == SINPE_SINES_FIRST && a < r; ++a) {
        if (split[a] % 2 != 0) {
            return PyErr_Format(PyExc_ValueError,
                                "layout='sines_first' needs an even split for every axis (a "
                                "sine and a cosine per frequency), got split[%zd]=%zd",
                                a, (Py_ssize_t)split[a]);
        }
    }
    c.plan.split = split;
    c.plan.order = order;
    sinpe_target out;
    int fresh;
    PyArrayObject *result = sinpe_output_arg(out_obj, dtype_obj, "out", (int)r + 1, dims, NULL,
                                             &out, &fresh);
    if (result != NULL && sinpe_run_call(&c, &out.array, NULL, fresh) < 0) {
        Py_CLEAR(result);
    }
    return (PyObject *)result;
}

/* Private, for the tests: the frequencies of a schedule's table, bit for bit. */
PyObject *sinpe_py_frequencies(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"n", "d", "schedule", NULL};
    PyObject *n_obj, *cols_obj, *schedule_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O:_frequencies", keywords, &n_obj,
                                     &cols_obj, &schedule_obj)) {
        return NULL;
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    Py_ssize_t cols;
    if (sinpe_real_arg(n_obj, "n", &c.plan.n) < 0 || sinpe_size_arg(cols_obj, "d", &cols) < 0) {
        return NULL;
    }
    if (cols < 1) {
        return PyErr_Format(PyExc_ValueError, "d must be >= 1, got d=%zd", cols);
    }
    /* the schedule parsed as encode's (no freq=, so nothing to release) */
    if (sinpe_check_base(c.plan.n) < 0 ||
        sinpe_columns_arg(&c, n_obj, NULL, schedule_obj, NULL, cols, 0, 0) < 0) {
        return NULL;
    }
    const int paper = c.plan.schedule == SINPE_PAPER;
    const npy_intp nfreq = paper ? (cols + 1) / 2 : cols / 2;
    PyArrayObject *result = (PyArrayObject *)PyArray_SimpleNew(1, &nfreq, NPY_FLOAT64);
    if (result == NULL || nfreq == 0) {
        return (PyObject *)result;
    }
    if (sinpe_schedule_frequencies(c.plan.n, cols, c.plan.schedule, PyArray_DATA(result)) !=
        SINPE_OK) {
        Py_DECREF(result);
        return PyErr_NoMemory();
    }
    return (PyObject *)result;
}
