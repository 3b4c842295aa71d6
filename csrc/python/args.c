/*
 * The binding's argument parsing and validation (args.h): every message
 * names the argument and its value, every array the kernel reads is a
 * private snapshot taken while the GIL is held, and the kernel's status
 * codes become exceptions in one place (run_call).  The arrays sinpe
 * writes or reads in place are arrays.c's.
 */
#include "python/args.h"
#include "core/elements.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Scalars. */

/* Re-raises the pending exception with "name: " in front of its message, so
 * NumPy's precise wording ("data type 'x' not understood") is kept. */
void sinpe_prefix_error(const char *name)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    PyObject *message = value != NULL ? PyObject_Str(value) : NULL;
    if (message == NULL) {
        PyErr_Restore(type, value, traceback); /* keep the original */
        return;
    }
    PyErr_Format(type, "%s: %U", name, message);
    Py_DECREF(message);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
}

/* A double in a message: PyErr_Format has no %g. */
static PyObject *shown(double value)
{
    return PyFloat_FromDouble(value);
}

int sinpe_integer_arg(PyObject *obj, const char *name, long long *value)
{
    if (PyBool_Check(obj) || PyArray_IsScalar(obj, Bool) || PyFloat_Check(obj) ||
        !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer, not %.200s (%s=%R)", name,
                     Py_TYPE(obj)->tp_name, name, obj);
        return -1;
    }
    PyObject *index = PyNumber_Index(obj);
    if (index == NULL) {
        sinpe_prefix_error(name);
        return -1;
    }
    int overflow = 0;
    *value = PyLong_AsLongLongAndOverflow(index, &overflow);
    if (overflow != 0) {
        PyErr_Format(PyExc_OverflowError, "%s=%S does not fit in 64 bits", name, index);
        Py_DECREF(index);
        return -1;
    }
    Py_DECREF(index);
    return (*value == -1 && PyErr_Occurred()) ? -1 : 0;
}

int sinpe_size_arg(PyObject *obj, const char *name, Py_ssize_t *value)
{
    long long wide;
    if (sinpe_integer_arg(obj, name, &wide) < 0) {
        return -1;
    }
    if (wide > PY_SSIZE_T_MAX) {
        PyErr_Format(PyExc_OverflowError, "%s=%lld is larger than the largest array size", name,
                     wide);
        return -1;
    }
    *value = (Py_ssize_t)wide;
    return 0;
}

int sinpe_real_arg(PyObject *obj, const char *name, double *value)
{
    if (PyComplex_Check(obj) || PyArray_IsScalar(obj, ComplexFloating) || PyUnicode_Check(obj) ||
        PyBytes_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a real number, not %.200s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *value = PyFloat_AsDouble(obj);
    if (*value == -1.0 && PyErr_Occurred()) {
        sinpe_prefix_error(name);
        return -1;
    }
    return 0;
}

int sinpe_check_base(double n)
{
    if (n >= SINPE_MIN_BASE && n <= SINPE_MAX_BASE) { /* also rejects nan */
        return 0;
    }
    char bounds[64];
    snprintf(bounds, sizeof bounds, "%g <= n <= %g", SINPE_MIN_BASE, SINPE_MAX_BASE);
    PyObject *value = shown(n);
    if (value != NULL) {
        PyErr_Format(PyExc_ValueError, "n must be a finite base with %s, got n=%R", bounds, value);
        Py_DECREF(value);
    }
    return -1;
}

int sinpe_check_range(long long offset, Py_ssize_t rows, const char *rows_name)
{
    const long long bound = SINPE_MAX_POSITION;
    if (offset < -bound || offset > bound) {
        PyErr_Format(PyExc_ValueError,
                     "offset=%lld is outside the supported positions -%lld .. %lld", offset,
                     bound, bound);
        return -1;
    }
    if ((long long)rows > bound - offset + 1) {
        PyErr_Format(PyExc_ValueError,
                     "%s=%zd with offset=%lld reaches position %lld, beyond the supported "
                     "bound %lld",
                     rows_name, rows, offset, offset + (long long)rows - 1, bound);
        return -1;
    }
    return 0;
}

int sinpe_int_sequence_arg(PyObject *obj, const char *name, Py_ssize_t *count, long long *values)
{
    /* A tuple of the items, owned, rather than the list's own items: each
     * item's __index__ is Python code that may change the list (so may
     * another thread, with or without a GIL), which would free an item read
     * as a borrowed reference, or shorten the list under the loop.  A list
     * is copied in one step under its own lock (free-threaded builds). */
    PyObject *seq = PySequence_Check(obj) && !PyUnicode_Check(obj) && !PyBytes_Check(obj)
                        ? PySequence_Tuple(obj)
                        : NULL;
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s must be a sequence of integers, not %.200s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    const Py_ssize_t length = PyTuple_GET_SIZE(seq);
    int status = 0;
    if (*count >= 0 && length != *count) {
        PyErr_Format(PyExc_ValueError, "%s=%R has %zd entries, expected one per grid axis (%zd)",
                     name, obj, length, *count);
        status = -1;
    } else if (length < 1 || length >= SINPE_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s=%R must have 1 to %d entries", name, obj,
                     SINPE_MAX_DIMS - 1);
        status = -1;
    }
    for (Py_ssize_t i = 0; status == 0 && i < length; ++i) {
        status = sinpe_integer_arg(PyTuple_GET_ITEM(seq, i), name, &values[i]);
    }
    Py_DECREF(seq);
    *count = status == 0 ? length : *count;
    return status;
}

/* ------------------------------------------------------------------ */
/* Frequencies and positions. */

void sinpe_call_release(sinpe_call *c)
{
    Py_CLEAR(c->freq);
    Py_CLEAR(c->positions);
    Py_CLEAR(c->padding);
}

/* Arrays the kernel reads (positions, padding, freq) are private copies,
 * taken while the GIL is held: an input that shares memory with an output,
 * or that another thread writes while the kernel runs without the GIL,
 * would otherwise change under the kernel. */
static PyArrayObject *snapshot(PyObject *array, int type_num, const char *name)
{
    PyArrayObject *copy = (PyArrayObject *)PyArray_FROM_OTF(
        array, type_num, NPY_ARRAY_IN_ARRAY | NPY_ARRAY_ENSURECOPY | NPY_ARRAY_FORCECAST);
    if (copy == NULL) {
        sinpe_prefix_error(name);
    }
    return copy;
}

/* A real (integer or float) NumPy array from any array-like, or a
 * TypeError naming the argument and the dtype it got. */
static PyArrayObject *real_array_arg(PyObject *obj, const char *name, const char *what)
{
    PyArrayObject *array = (PyArrayObject *)PyArray_FROM_O(obj);
    if (array == NULL) {
        sinpe_prefix_error(name);
        return NULL;
    }
    const int type = PyArray_TYPE(array);
    if (!PyTypeNum_ISINTEGER(type) && !PyTypeNum_ISFLOAT(type)) {
        PyErr_Format(PyExc_TypeError, "%s must be %s, got an array of dtype %R", name, what,
                     (PyObject *)PyArray_DESCR(array));
        Py_DECREF(array);
        return NULL;
    }
    return array;
}

int sinpe_choice_arg(PyObject *obj, const char *name, const char *const *choices, int count,
                     int *choice)
{
    if (obj == NULL) {
        return 0;
    }
    for (int i = 0; PyUnicode_Check(obj) && i < count; ++i) {
        if (PyUnicode_CompareWithASCIIString(obj, choices[i]) == 0) {
            *choice = i;
            return 0;
        }
    }
    char listed[128] = "";
    for (int i = 0; i < count; ++i) {
        snprintf(listed + strlen(listed), sizeof listed - strlen(listed), "%s'%s'",
                 i == 0 ? "" : i + 1 == count ? " or " : ", ", choices[i]);
    }
    if (!PyUnicode_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a str, %s, not %.200s", name, listed,
                     Py_TYPE(obj)->tp_name);
    } else {
        PyErr_Format(PyExc_ValueError, "%s must be %s, got %s=%R", name, listed, name, obj);
    }
    return -1;
}

/* freq: a 1-D array of finite frequencies >= 0 with d // 2 or ceil(d / 2)
 * entries (RoPE: d / 2), as a float64 snapshot. */
static PyArrayObject *freq_arg(PyObject *obj, Py_ssize_t d, int rope)
{
    PyArrayObject *array = real_array_arg(obj, "freq", "a 1-D array of real frequencies");
    if (array == NULL) {
        return NULL;
    }
    const Py_ssize_t count = PyArray_NDIM(array) == 1 ? PyArray_DIM(array, 0) : -1;
    if (count < 0) {
        PyObject *shape = PyObject_GetAttrString((PyObject *)array, "shape");
        if (shape != NULL) {
            PyErr_Format(PyExc_ValueError, "freq must be 1-D, got shape %R", shape);
            Py_DECREF(shape);
        }
    } else if (rope && count != d / 2) {
        PyErr_Format(PyExc_ValueError,
                     "freq has %zd entries; RoPE of width d=%zd needs d // 2 = %zd", count, d,
                     d / 2);
    } else if (!rope && count != d / 2 && count != (d + 1) / 2) {
        PyErr_Format(PyExc_ValueError,
                     "freq has %zd entries; a table of width d=%zd needs %zd (odd d: a zero "
                     "last column) or %zd (odd d: a sine last column)",
                     count, d, d / 2, (d + 1) / 2);
    }
    PyArrayObject *values =
        PyErr_Occurred() ? NULL : snapshot((PyObject *)array, NPY_DOUBLE, "freq");
    Py_DECREF(array);
    const double *w = values != NULL ? PyArray_DATA(values) : NULL;
    for (Py_ssize_t k = 0; values != NULL && k < count; ++k) {
        if (!(isfinite(w[k]) && w[k] >= 0.0)) {
            PyObject *value = shown(w[k]);
            if (value != NULL) {
                PyErr_Format(PyExc_ValueError, "freq must be finite and >= 0, got freq[%zd]=%R",
                             k, value);
                Py_DECREF(value);
            }
            Py_CLEAR(values);
        }
    }
    return values;
}

int sinpe_columns_arg(sinpe_call *c, PyObject *n_obj, PyObject *layout_obj, PyObject *schedule_obj,
                      PyObject *freq_obj, Py_ssize_t d, int rope, int allow_sines_first)
{
    static const char *const layouts[] = {"interleaved", "concatenated", "sines_first"};
    static const char *const schedules[] = {"paper", "fairseq"};
    int layout = (int)c->plan.layout, schedule = 0;
    if (sinpe_choice_arg(layout_obj, "layout", layouts, allow_sines_first ? 3 : 2, &layout) < 0 ||
        sinpe_choice_arg(schedule_obj, "schedule", schedules, 2, &schedule) < 0) {
        return -1;
    }
    c->plan.layout = (sinpe_layout)layout;
    c->plan.schedule = (sinpe_schedule)schedule;
    if (freq_obj == NULL || freq_obj == Py_None) {
        return 0;
    }
    const char *other = schedule_obj != NULL ? "schedule" : n_obj != NULL ? "n" : NULL;
    if (other != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "freq and %s are exclusive (freq gives the frequencies), got %s=%R", other,
                     other, schedule_obj != NULL ? schedule_obj : n_obj);
        return -1;
    }
    c->freq = freq_arg(freq_obj, d, rope);
    if (c->freq == NULL) {
        return -1;
    }
    c->plan.freq = PyArray_DATA(c->freq);
    c->plan.nfreq = PyArray_DIM(c->freq, 0);
    return 0;
}

int sinpe_axis_positions_arg(sinpe_call *c, const sinpe_array *view, const char *name,
                             long long axis, long long offset, const char *rows_name)
{
    const long long pos_axis = axis < 0 ? axis + view->ndim : axis;
    if (pos_axis < 0 || pos_axis >= view->ndim) {
        PyErr_Format(PyExc_ValueError, "axis=%lld is out of range for %s with %d axes", axis,
                     name, view->ndim);
        return -1;
    }
    if (pos_axis == view->ndim - 1) {
        PyErr_Format(PyExc_ValueError,
                     "axis=%lld names the feature axis (the last); positions must run along "
                     "another axis",
                     axis);
        return -1;
    }
    return sinpe_range_arg(c, (int)pos_axis, offset, view->shape[pos_axis], rows_name);
}

int sinpe_range_arg(sinpe_call *c, int axis, long long offset, Py_ssize_t rows,
                    const char *rows_name)
{
    if (sinpe_check_range(offset, rows, rows_name) < 0) {
        return -1;
    }
    const long long last = offset + (rows > 0 ? rows - 1 : 0);
    c->plan.pos_axis = axis;
    c->plan.offset = offset;
    c->most = fabs((double)offset) > fabs((double)last) ? fabs((double)offset) : fabs((double)last);
    return 0;
}

int sinpe_positions_arg(sinpe_call *c, PyObject *obj, int *ndim, npy_intp *dims)
{
    PyArrayObject *array = real_array_arg(obj, "positions", "an integer or float array");
    if (array == NULL) {
        return -1;
    }
    const int type = PyArray_TYPE(array);
    const int integer = PyTypeNum_ISINTEGER(type);
    /* unsigned values are checked before any cast to int64 could wrap them */
    const int target = !integer ? NPY_DOUBLE : PyTypeNum_ISUNSIGNED(type) ? NPY_UINT64 : NPY_INT64;
    PyArrayObject *values = snapshot((PyObject *)array, target, "positions");
    Py_DECREF(array);
    if (values == NULL) {
        return -1;
    }
    c->positions = values;
    if (PyArray_NDIM(values) >= SINPE_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "positions has %d axes; at most %d are supported",
                     PyArray_NDIM(values), SINPE_MAX_DIMS - 1);
        return -1;
    }
    const npy_intp count = PyArray_SIZE(values);
    const double bound = (double)SINPE_MAX_POSITION;
    for (npy_intp i = 0; i < count; ++i) {
        double p;
        if (target == NPY_DOUBLE) {
            p = ((const double *)PyArray_DATA(values))[i];
        } else if (target == NPY_UINT64) {
            const npy_uint64 u = ((const npy_uint64 *)PyArray_DATA(values))[i];
            p = u > (npy_uint64)SINPE_MAX_POSITION ? bound * 2 : (double)u;
        } else {
            const npy_int64 s = ((const npy_int64 *)PyArray_DATA(values))[i];
            p = s > SINPE_MAX_POSITION || s < -SINPE_MAX_POSITION ? bound * 2 : (double)s;
        }
        if (!(fabs(p) <= bound)) {
            PyObject *item = PyArray_GETITEM(values, (char *)PyArray_DATA(values) +
                                                         i * PyArray_ITEMSIZE(values));
            if (item != NULL) {
                PyErr_Format(PyExc_ValueError,
                             "positions must be finite with |p| <= %lld (sinpe.MAX_POSITION), "
                             "got %R at flat index %zd",
                             (long long)SINPE_MAX_POSITION, item, (Py_ssize_t)i);
                Py_DECREF(item);
            }
            return -1;
        }
        c->most = fabs(p) > c->most ? fabs(p) : c->most;
    }
    if (target == NPY_UINT64) { /* all <= 2**24 now: the cast is exact */
        c->positions = (PyArrayObject *)PyArray_FROM_OTF((PyObject *)values, NPY_INT64,
                                                         NPY_ARRAY_IN_ARRAY | NPY_ARRAY_FORCECAST);
        Py_DECREF(values);
        if (c->positions == NULL) {
            return -1;
        }
    }
    c->plan.pos_axis = -1;
    c->plan.offset = 0;
    if (integer) {
        c->plan.ints = PyArray_DATA(c->positions);
    } else {
        c->plan.reals = PyArray_DATA(c->positions);
    }
    *ndim = PyArray_NDIM(c->positions);
    for (int i = 0; i < *ndim; ++i) { /* a 0-d array has no dims pointer */
        dims[i] = PyArray_DIM(c->positions, i);
    }
    return 0;
}

/* "a shape does not broadcast" for the arrays named name and target_name. */
static void broadcast_error(const char *name, int ndim, const npy_intp *dims,
                            const char *target_name, int target_ndim, const npy_intp *target)
{
    PyObject *shape = PyArray_IntTupleFromIntp(ndim, dims);
    PyObject *want = PyArray_IntTupleFromIntp(target_ndim, target);
    if (shape != NULL && want != NULL) {
        PyErr_Format(PyExc_ValueError, "%s has shape %R, which does not broadcast against %s %R",
                     name, shape, target_name, want);
    }
    Py_XDECREF(shape);
    Py_XDECREF(want);
}

/* NumPy's broadcasting of `shape` (ndim axes) to `target`, read-only: the
 * byte strides of the result, or -1 (no exception) when it does not. */
static int broadcast_to(int ndim, const npy_intp *shape, const npy_intp *strides, int target_ndim,
                        const npy_intp *target, ptrdiff_t *out)
{
    if (ndim > target_ndim) {
        return -1;
    }
    for (int i = 0; i < target_ndim; ++i) {
        const int k = i - (target_ndim - ndim);
        if (k < 0 || (shape[k] == 1 && target[i] != 1)) {
            out[i] = 0;
        } else if (shape[k] == target[i]) {
            out[i] = strides[k];
        } else {
            return -1;
        }
    }
    return 0;
}

int sinpe_row_positions_arg(sinpe_call *c, PyObject *obj, int nrow, const npy_intp *rows,
                            const char *rows_name)
{
    int ndim;
    npy_intp dims[SINPE_MAX_DIMS], shape[SINPE_MAX_DIMS];
    ptrdiff_t strides[SINPE_MAX_DIMS];
    if (sinpe_positions_arg(c, obj, &ndim, dims) < 0) {
        return -1;
    }
    /* with sections, a leading axis of one row per section, kept */
    const int lead = c->plan.nsections > 0;
    if (lead && sinpe_section_axis_check(c, ndim, dims) < 0) {
        return -1;
    }
    if (ndim == nrow + lead && PyArray_CompareLists(dims + lead, rows, nrow)) {
        return 0;
    }
    if (broadcast_to(ndim - lead, dims + lead, PyArray_STRIDES(c->positions) + lead, nrow, rows,
                     strides + lead) < 0) {
        broadcast_error(lead ? "each positions[s]" : "positions", ndim - lead, dims + lead,
                        rows_name, nrow, rows);
        return -1;
    }
    if (nrow + lead > SINPE_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError,
                     "positions with a sections axis and %s of %d axes need %d axes; at most %d "
                     "are supported",
                     rows_name, nrow, nrow + lead, SINPE_MAX_DIMS);
        return -1;
    }
    if (lead) {
        shape[0] = dims[0];
        strides[0] = PyArray_STRIDES(c->positions)[0];
    }
    memcpy(shape + lead, rows, (size_t)nrow * sizeof(npy_intp));
    /* One position per row (the snapshot broadcast and copied): the plan
     * then reuses each position's rows across the broadcast axes as it does
     * across the batch.  8 bytes a row (and section), beside rows of d
     * elements. */
    PyArray_Descr *descr = PyArray_DESCR(c->positions);
    Py_INCREF(descr);
    PyObject *view = PyArray_NewFromDescr(&PyArray_Type, descr, nrow + lead, shape,
                                          (npy_intp *)strides, PyArray_DATA(c->positions), 0,
                                          NULL); /* steals descr */
    Py_INCREF(c->positions);
    if (view == NULL || PyArray_SetBaseObject((PyArrayObject *)view,
                                              (PyObject *)c->positions) < 0) { /* steals it */
        Py_XDECREF(view);
        if (view == NULL) {
            Py_DECREF(c->positions);
        }
        return -1;
    }
    PyArrayObject *copy = (PyArrayObject *)PyArray_NewCopy((PyArrayObject *)view, NPY_CORDER);
    Py_DECREF(view);
    if (copy == NULL) {
        return -1;
    }
    Py_DECREF(c->positions);
    c->positions = copy;
    if (c->plan.ints != NULL) {
        c->plan.ints = PyArray_DATA(copy);
    } else {
        c->plan.reals = PyArray_DATA(copy);
    }
    return 0;
}

int sinpe_padding_arg(sinpe_call *c, PyObject *obj, int ndim, const npy_intp *dims,
                      const char *expected_name)
{
    PyArrayObject *array = (PyArrayObject *)PyArray_FROM_O(obj);
    if (array == NULL) {
        sinpe_prefix_error("padding");
        return -1;
    }
    if (PyArray_TYPE(array) != NPY_BOOL) {
        PyErr_Format(PyExc_TypeError, "padding must be a boolean array, got dtype %R",
                     (PyObject *)PyArray_DESCR(array));
    } else if (PyArray_NDIM(array) != ndim || !PyArray_CompareLists(PyArray_DIMS(array), dims, ndim)) {
        PyObject *shape = PyObject_GetAttrString((PyObject *)array, "shape");
        PyObject *want = PyArray_IntTupleFromIntp(ndim, dims);
        if (shape != NULL && want != NULL) {
            PyErr_Format(PyExc_ValueError, "padding has shape %R, expected %s %R", shape,
                         expected_name, want);
        }
        Py_XDECREF(shape);
        Py_XDECREF(want);
    } else {
        c->padding = snapshot((PyObject *)array, NPY_BOOL, "padding");
    }
    Py_DECREF(array);
    if (c->padding == NULL) {
        return -1;
    }
    c->plan.padding = PyArray_DATA(c->padding);
    return 0;
}

int sinpe_check_angles(const sinpe_call *c)
{
    const double reach = c->most + 32.0; /* block starts lie up to 32 rows below a position */
    double largest = 0.0;
    for (ptrdiff_t k = 0; c->plan.freq != NULL && k < c->plan.nfreq; ++k) {
        largest = c->plan.freq[k] > largest ? c->plan.freq[k] : largest;
    }
    if (largest * reach <= SINPE_MAX_ANGLE) {
        return 0;
    }
    char text[160];
    snprintf(text, sizeof text,
             "freq: max(freq)=%.17g at |position| up to %.0f gives angles beyond the "
             "supported %.0f (2**26) radians",
             largest, c->most, SINPE_MAX_ANGLE);
    PyErr_SetString(PyExc_ValueError, text);
    return -1;
}

int sinpe_broadcast_strides(const sinpe_array *view, const char *name, int ndim,
                            const npy_intp *dims, const char *target_name, ptrdiff_t *strides)
{
    if (broadcast_to(view->ndim, view->shape, view->strides, ndim, dims, strides) < 0) {
        broadcast_error(name, view->ndim, view->shape, target_name, ndim, dims);
        return -1;
    }
    return 0;
}

int sinpe_scale_arg(PyObject *obj, const sinpe_target *x, double *scale)
{
    if (obj == NULL) {
        *scale = 1.0;
        return 0;
    }
    double given;
    if (sinpe_real_arg(obj, "scale", &given) < 0) {
        return -1;
    }
    if (x->torch_scalar) { /* torch rounds the scalar of a half-type op to float32 */
        *scale = (double)(float)given;
    } else { /* NumPy's x.dtype.type(scale), whatever the dtype */
        PyObject *typed = PyObject_CallOneArg(x->scalar_type, obj);
        *scale = typed != NULL ? PyFloat_AsDouble(typed) : -1.0;
        Py_XDECREF(typed);
        if (PyErr_Occurred()) {
            sinpe_prefix_error("scale");
            return -1;
        }
    }
    if (!isfinite(*scale)) {
        PyObject *value = shown(given);
        if (value != NULL) {
            PyErr_Format(PyExc_ValueError,
                         "scale must be finite in the array's arithmetic, got scale=%R "
                         "(%R there)",
                         value, x->scalar_type);
            Py_DECREF(value);
        }
        return -1;
    }
    return 0;
}

/* ------------------------------------------------------------------ */
/* Running the kernel.  It calls check_signals() from the calling thread
 * between chunks (about every 8 MB), which takes the GIL back just long
 * enough to run the signal handlers.  Only the main thread runs Python
 * signal handlers, so other threads pass no callback at all. */

int sinpe_find_main_thread(unsigned long *main_ident)
{
    PyObject *threading = PyImport_ImportModule("threading");
    PyObject *main_thread =
        threading != NULL ? PyObject_CallMethod(threading, "main_thread", NULL) : NULL;
    Py_XDECREF(threading);
    PyObject *ident = main_thread != NULL ? PyObject_GetAttrString(main_thread, "ident") : NULL;
    Py_XDECREF(main_thread);
    if (ident == NULL) {
        return -1;
    }
    *main_ident = PyLong_AsUnsignedLong(ident);
    Py_DECREF(ident);
    return PyErr_Occurred() ? -1 : 0;
}

static int check_signals(void *context)
{
    PyThreadState **thread_state = context;
    PyEval_RestoreThread(*thread_state);
    const int failed = PyErr_CheckSignals() < 0;
    *thread_state = PyEval_SaveThread();
    return failed;
}

/* Calls that write fewer elements keep the GIL (as NumPy's loops do below
 * a size): releasing and taking it back costs more than their work. */
#define GIL_FREE_ELEMENTS 8192

int sinpe_run_call(sinpe_call *c, const sinpe_array *out, const sinpe_array *out2, int fresh)
{
    PyThreadState *thread_state;
    c->plan.flags |= SINPE_PRIVATE_INPUTS | (fresh ? SINPE_FRESH_OUTPUT : 0u);
    double elements = 1.0;
    for (int i = 0; i < out->ndim; ++i) {
        elements *= (double)out->shape[i];
    }
    int status;
    if (elements < GIL_FREE_ELEMENTS) { /* one chunk: never cancelled */
        c->plan.cancel = NULL;
        status = sinpe_run(&c->plan, out, out2);
    } else {
        c->plan.cancel = PyThread_get_thread_ident() == c->main_thread ? check_signals : NULL;
        c->plan.cancel_context = &thread_state;
        thread_state = PyEval_SaveThread();
        status = sinpe_run(&c->plan, out, out2);
        PyEval_RestoreThread(thread_state);
    }
    switch (status) {
    case SINPE_OK:
        return 0;
    case SINPE_ERR_NOMEM:
        PyErr_NoMemory();
        return -1;
    case SINPE_ERR_CANCELLED: /* check_signals() stopped the kernel: its exception is pending */
        if (!PyErr_Occurred()) {
            PyErr_SetString(PyExc_SystemError, "sinpe kernel cancelled without an exception");
        }
        return -1;
    default:
        PyErr_Format(PyExc_SystemError,
                     "sinpe kernel rejected arguments the binding accepted (status %d)", status);
        return -1;
    }
}
