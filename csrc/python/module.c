/*
 * sinpe._core: the Python-facing functions.  Each one parses its arguments
 * into a sinpe_call (args.c: validation, snapshots, messages), makes or
 * checks its output, and runs the one kernel entry point, sinpe_run, without
 * the GIL.  No math here; docstrings in docstrings.h.
 */
#define SINPE_IMPORTS_NUMPY
#include "python/args.h"
#include "python/docstrings.h"
#include "call.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static PyObject *encode(PyObject *module, PyObject *args, PyObject *kwargs)
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

static PyObject *add_(PyObject *module, PyObject *args, PyObject *kwargs)
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
static PyObject *add_tensor(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
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

static PyObject *encode_at(PyObject *module, PyObject *args, PyObject *kwargs)
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

static PyObject *rope(PyObject *module, PyObject *args, PyObject *kwargs)
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

static PyObject *encode_grid(PyObject *module, PyObject *args, PyObject *kwargs)
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
static PyObject *frequencies(PyObject *module, PyObject *args, PyObject *kwargs)
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

static PyObject *set_num_threads(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long long threads;
    if (sinpe_integer_arg(arg, "threads", &threads) < 0) {
        return NULL;
    }
    if (threads < 1 || threads > SINPE_MAX_THREADS) {
        return PyErr_Format(PyExc_ValueError, "threads must be between 1 and %d, got threads=%lld",
                            SINPE_MAX_THREADS, threads);
    }
    (void)sinpe_set_num_threads((int)threads); /* in range: cannot fail */
    Py_RETURN_NONE;
}

static PyObject *get_num_threads(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    return PyLong_FromLong(sinpe_get_num_threads());
}

/* _share_openmp(library): large calls on a loaded OpenMP runtime's threads
 * (sinpe.torch shares torch's), or on sinpe's own again with None. */
static PyObject *share_openmp(PyObject *Py_UNUSED(module), PyObject *arg)
{
    if (arg == Py_None) {
        (void)sinpe_share_openmp(NULL); /* cannot fail */
        Py_RETURN_NONE;
    }
    PyObject *path = NULL;
    if (!PyUnicode_Check(arg)) {
        return PyErr_Format(PyExc_TypeError, "library must be a str or None, got %.200s",
                            Py_TYPE(arg)->tp_name);
    }
    if (!PyUnicode_FSConverter(arg, &path)) {
        return NULL; /* a NUL in it, or not encodable */
    }
    const int status = sinpe_share_openmp(PyBytes_AS_STRING(path));
    Py_DECREF(path);
    if (status != SINPE_OK) {
        return PyErr_Format(PyExc_ValueError,
                            "library=%R: no library of that name is loaded with OpenMP's "
                            "GOMP_parallel and omp_get_thread_num", arg);
    }
    Py_RETURN_NONE;
}

static PyObject *sharing_openmp(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    return PyBool_FromLong(sinpe_sharing_openmp());
}

static PyObject *clear_cache(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    sinpe_clear_caches();
    Py_RETURN_NONE;
}

/* (tables, bytes) that the cache of made tables keeps (tests). */
static PyObject *row_cache(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    int tables;
    size_t bytes;
    sinpe_kept_tables(&tables, &bytes);
    return Py_BuildValue("(in)", tables, (Py_ssize_t)bytes);
}

/* SINPE_NUM_THREADS, read once at import.  A bad value warns and is ignored
 * rather than making the import fail. */
static int threads_from_environment(void)
{
    const char *text = getenv("SINPE_NUM_THREADS");
    if (text == NULL || text[0] == '\0') {
        return 0;
    }
    char *end = NULL;
    errno = 0;
    const long threads = strtol(text, &end, 10);
    if (errno != 0 || end == text || *end != '\0' || threads < 1 ||
        threads > SINPE_MAX_THREADS) {
        return PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                                "ignoring SINPE_NUM_THREADS=%.100s: expected an integer from 1 "
                                "to %d",
                                text, SINPE_MAX_THREADS);
    }
    (void)sinpe_set_num_threads((int)threads);
    return 0;
}

/* SINPE_SIMD, applied at import: a name that is not a level, or a level
 * this CPU lacks, warns and the best available level runs instead. */
static int simd_from_environment(void)
{
    const char *text = getenv("SINPE_SIMD");
    if (sinpe_simd_select(text) == SINPE_OK) {
        return 0;
    }
    return PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                            "ignoring SINPE_SIMD=%.100s: expected one of baseline, avx2, avx512, avx512_bf16 "
                            "that this CPU has; using %s",
                            text, sinpe_simd_name(sinpe_simd_level()));
}

/* The SIMD level in use and the levels this CPU has, by name (show_config). */
static PyObject *simd_levels(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    PyObject *available = PyList_New(0);
    for (int level = 0; available != NULL && level < SINPE_SIMD_LEVELS; ++level) {
        PyObject *name = sinpe_simd_available(level)
                             ? PyUnicode_FromString(sinpe_simd_name(level))
                             : NULL;
        if (sinpe_simd_available(level) && (name == NULL || PyList_Append(available, name) < 0)) {
            Py_CLEAR(available);
        }
        Py_XDECREF(name);
    }
    if (available == NULL) {
        return NULL;
    }
    return Py_BuildValue("(sN)", sinpe_simd_name(sinpe_simd_level()), available);
}

/* Runs the loops of another level from now on (tests compare the levels'
 * bits in one process); True if the CPU has it, else the best level runs
 * and the result is False. */
static PyObject *select_simd(PyObject *Py_UNUSED(module), PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) {
        return NULL;
    }
    return PyBool_FromLong(sinpe_simd_select(name) == SINPE_OK);
}

/* The compiler that built the extension, as show_config reports it. */
static const char *compiler_name(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#elif defined(_MSC_VER)
#define SINPE_STRINGIFY(x) #x
#define SINPE_VERSION_TEXT(x) SINPE_STRINGIFY(x)
    return "MSVC " SINPE_VERSION_TEXT(_MSC_FULL_VER);
#else
    return "unknown C compiler";
#endif
}

#define KEYWORDS_METHOD(name) \
    {#name, (PyCFunction)(void (*)(void))name, METH_VARARGS | METH_KEYWORDS, name##_doc}

static PyMethodDef core_methods[] = {
    KEYWORDS_METHOD(encode),
    KEYWORDS_METHOD(add_),
    KEYWORDS_METHOD(encode_at),
    KEYWORDS_METHOD(rope),
    KEYWORDS_METHOD(encode_grid),
    {"rope_", (PyCFunction)(void (*)(void))sinpe_py_rope_, METH_VARARGS | METH_KEYWORDS,
     rope__doc},
    {"_rope_into", (PyCFunction)(void (*)(void))sinpe_py_rope_into, METH_VARARGS | METH_KEYWORDS,
     "_rope_into(out, source, n=10000.0, *, offset=0, axis=-2, positions=None, "
     "layout='concatenated', freq=None, rotary_dim=None, scale=1.0, exact=False, "
     "inverse=False, sections=None, sections_layout='contiguous')\n--\n\nrope_ of source "
     "written into out (source None: in place); inverse: by the negated angles "
     "(sinpe.torch.rope's backward pass).  out None: only check the arguments against "
     "source's shape and dtype.  out and source: arrays, or a tensor's memory as "
     "(address, shape, strides, dtype code)."},
    {"_rotate_by", (PyCFunction)(void (*)(void))sinpe_py_rotate_by, METH_VARARGS | METH_KEYWORDS,
     "_rotate_by(out, source, cos, sin, *, layout='concatenated')\n--\n\nout = source * cos "
     "+ rotate_half(source) * sin, cos and sin broadcast (sinpe.torch.apply_rotary_pos_emb).  "
     "Each an array, or a tensor's memory as (address, shape, strides, dtype code)."},
    {"_apply_rotary", (PyCFunction)(void (*)(void))sinpe_py_apply_rotary, METH_FASTCALL,
     "_apply_rotary(q_out, q, k_out, k, cos, sin, unsqueeze_dim, layout, /)\n--\n\n"
     "sinpe.torch.apply_rotary_pos_emb's decoding step on tensors' memory (private): True "
     "once written, False (nothing written) where HF's expression must decide; an output "
     "may be given by its address alone (a new contiguous tensor of its source's shape)."},
    {"set_num_threads", set_num_threads, METH_O, set_num_threads_doc},
    {"get_num_threads", get_num_threads, METH_NOARGS, get_num_threads_doc},
    {"clear_cache", clear_cache, METH_NOARGS, clear_cache_doc},
    {"_share_openmp", share_openmp, METH_O,
     "_share_openmp(library, /)\n--\n\nRuns large calls on the threads of the loaded OpenMP "
     "runtime `library` (a path; sinpe.torch shares torch's), or on sinpe's own with None."},
    {"_sharing_openmp", sharing_openmp, METH_NOARGS,
     "_sharing_openmp()\n--\n\nWhether large calls run on a shared OpenMP runtime's threads."},
    {"_row_cache", row_cache, METH_NOARGS,
     "_row_cache()\n--\n\n(tables, bytes) kept for adds (tests)."},
    {"_add_tensor", (PyCFunction)(void (*)(void))add_tensor, METH_FASTCALL,
     "_add_tensor(address, shape, strides, dtype, n, offset, axis, scale, /)\n--\n\n"
     "sinpe.torch's add_ on a CPU tensor's memory (private)."},
    {"_simd_levels", simd_levels, METH_NOARGS,
     "_simd_levels()\n--\n\n(level in use, [levels this CPU has]), by SINPE_SIMD's names."},
    {"_select_simd", select_simd, METH_O,
     "_select_simd(level, /)\n--\n\nRuns another SIMD level's loops from now on (tests)."},
    {"_frequencies", (PyCFunction)(void (*)(void))frequencies, METH_VARARGS | METH_KEYWORDS,
     frequencies_doc},
    {NULL, NULL, 0, NULL},
};

static int add_float(PyObject *module, const char *name, double value)
{
    PyObject *number = PyFloat_FromDouble(value);
    if (number == NULL) {
        return -1;
    }
    const int added = PyModule_AddObjectRef(module, name, number);
    Py_DECREF(number);
    return added;
}

static int core_exec(PyObject *module)
{
    sinpe_module_state *state = PyModule_GetState(module);
    if (PyArray_ImportNumPyAPI() < 0 || sinpe_find_main_thread(&state->main_thread) < 0 ||
        PyModule_AddIntConstant(module, "MAX_POSITION", (long)SINPE_MAX_POSITION) < 0 ||
        PyModule_AddIntConstant(module, "MAX_THREADS", SINPE_MAX_THREADS) < 0 ||
        add_float(module, "MIN_BASE", SINPE_MIN_BASE) < 0 ||
        add_float(module, "MAX_BASE", SINPE_MAX_BASE) < 0 ||
        PyModule_AddStringConstant(module, "_compiler", compiler_name()) < 0 ||
        threads_from_environment() < 0 || simd_from_environment() < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
#ifdef Py_mod_gil
    /* Free-threaded builds may run the functions without a GIL: the binding
     * keeps no borrowed reference across code that can change what it points
     * to (args.c: sequences copied to tuples, arrays' shapes copied, dtype
     * descriptors held), its module state is written only by core_exec, and
     * the kernels already run without the GIL (threads.c, table.c and
     * row_cache.c lock and use atomics; dispatch.c's level is atomic). */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sinpe._core",
    .m_doc = "C kernels of sinpe: sinusoidal positional encodings into NumPy arrays.",
    .m_size = sizeof(sinpe_module_state),
    .m_methods = core_methods,
    .m_slots = core_slots,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&core_module);
}
