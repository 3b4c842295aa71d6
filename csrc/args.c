/*
 * The binding's argument parsing and validation (args.h): every message
 * names the argument and its value, every array the kernel reads is a
 * private snapshot taken while the GIL is held, and the kernel's status
 * codes become exceptions in one place (run_call).
 */
#include "args.h"
#include "elements.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------ */
/* Scalars. */

/* Re-raises the pending exception with "name: " in front of its message, so
 * NumPy's precise wording ("data type 'x' not understood") is kept. */
static void prefix_pending_error(const char *name)
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
        prefix_pending_error(name);
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
        prefix_pending_error(name);
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
        prefix_pending_error(name);
    }
    return copy;
}

/* A real (integer or float) NumPy array from any array-like, or a
 * TypeError naming the argument and the dtype it got. */
static PyArrayObject *real_array_arg(PyObject *obj, const char *name, const char *what)
{
    PyArrayObject *array = (PyArrayObject *)PyArray_FROM_O(obj);
    if (array == NULL) {
        prefix_pending_error(name);
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

static int choice_arg(PyObject *obj, const char *name, const char *const *choices, int count,
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
    if (choice_arg(layout_obj, "layout", layouts, allow_sines_first ? 3 : 2, &layout) < 0 ||
        choice_arg(schedule_obj, "schedule", schedules, 2, &schedule) < 0) {
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
    npy_intp dims[SINPE_MAX_DIMS];
    ptrdiff_t strides[SINPE_MAX_DIMS];
    if (sinpe_positions_arg(c, obj, &ndim, dims) < 0) {
        return -1;
    }
    if (ndim == nrow && PyArray_CompareLists(dims, rows, nrow)) {
        return 0;
    }
    if (broadcast_to(ndim, dims, PyArray_STRIDES(c->positions), nrow, rows, strides) < 0) {
        broadcast_error("positions", ndim, dims, rows_name, nrow, rows);
        return -1;
    }
    /* One position per row (the snapshot broadcast and copied): the plan
     * then reuses each position's rows across the broadcast axes as it does
     * across the batch.  8 bytes a row, beside rows of d elements. */
    PyArray_Descr *descr = PyArray_DESCR(c->positions);
    Py_INCREF(descr);
    PyObject *view = PyArray_NewFromDescr(&PyArray_Type, descr, nrow, (npy_intp *)rows,
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
        prefix_pending_error("padding");
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

/* ------------------------------------------------------------------ */
/* Arrays sinpe writes. */

static const char *const supported_dtypes =
    "float16, float32, float64 or bfloat16 (ml_dtypes.bfloat16)";

/* The label a private view carries in its dtype metadata ({"sinpe": label}):
 * sinpe.torch passes torch tensors' memory this way, bfloat16 as int16 bits
 * since NumPy has no bfloat16 of its own.  A new reference to the str (its
 * UTF-8 text lives as long as it), or NULL when there is none. */
static PyObject *torch_label(PyArray_Descr *descr)
{
    PyObject *metadata = PyDataType_METADATA(descr);
    PyObject *label = NULL;
    if (metadata != NULL && PyDict_Check(metadata)) {
#if PY_VERSION_HEX >= 0x030D0000
        /* a strong reference taken under the dict's lock (free-threaded builds) */
        if (PyDict_GetItemStringRef(metadata, "sinpe", &label) < 0) {
            PyErr_Clear();
        }
#else
        label = PyDict_GetItemString(metadata, "sinpe"); /* the GIL is held until the incref */
        Py_XINCREF(label);
#endif
    }
    if (label != NULL && !PyUnicode_Check(label)) {
        Py_CLEAR(label);
    }
    return label;
}

/* ml_dtypes.bfloat16, if ml_dtypes is imported: an array of it can exist
 * only then, so sinpe never imports it (it stays optional). */
static int is_ml_dtypes_bfloat16(PyArray_Descr *descr)
{
    PyObject *name = PyUnicode_FromString("ml_dtypes");
    PyObject *module = name != NULL ? PyImport_GetModule(name) : NULL; /* never imports */
    Py_XDECREF(name);
    PyObject *type = module != NULL ? PyObject_GetAttrString(module, "bfloat16") : NULL;
    Py_XDECREF(module);
    PyErr_Clear(); /* absent module or attribute: simply not bfloat16 */
    const int same = type != NULL && (PyObject *)descr->typeobj == type;
    Py_XDECREF(type);
    return same;
}

/* The element type of descr; -1 (no exception) when sinpe cannot write it.
 * *torch_scalar: a torch half-type view (torch_label). */
static int dtype_code(PyArray_Descr *descr, sinpe_dtype *code, int *torch_scalar)
{
    PyObject *label_obj = torch_label(descr);
    *torch_scalar = label_obj != NULL;
    if (label_obj != NULL) {
        const char *label = PyUnicode_AsUTF8(label_obj);
        PyErr_Clear(); /* PyUnicode_AsUTF8 cannot fail on a str, but be sure */
        int found = -1;
        if (label != NULL && strcmp(label, "torch.bfloat16") == 0 &&
            PyDataType_ELSIZE(descr) == 2 && PyTypeNum_ISINTEGER(descr->type_num)) {
            *code = SINPE_BFLOAT16;
            found = 0;
        } else if (label != NULL && strcmp(label, "torch.float16") == 0 &&
                   descr->type_num == NPY_HALF) {
            *code = SINPE_FLOAT16;
            found = 0;
        }
        Py_DECREF(label_obj);
        return found;
    }
    switch (descr->type_num) {
    case NPY_HALF: *code = SINPE_FLOAT16; return 0;
    case NPY_FLOAT: *code = SINPE_FLOAT32; return 0;
    case NPY_DOUBLE: *code = SINPE_FLOAT64; return 0;
    default:
        *code = SINPE_BFLOAT16;
        return is_ml_dtypes_bfloat16(descr) ? 0 : -1;
    }
}

/* True when no two elements of the array share a byte, by a sufficient
 * test: with the axes sorted by |stride|, each one must step past all that
 * the smaller ones span.  Every layout NumPy itself makes (C or Fortran
 * order, transposes, slices, negative steps) passes; views that repeat
 * elements (zero strides, as_strided overlaps) fail, and writing those in
 * place would add the table several times into the same memory. */
static int elements_are_distinct(const sinpe_array *view, npy_intp itemsize)
{
    for (int axis = 0; axis < view->ndim; ++axis) {
        if (view->shape[axis] == 0) {
            return 1;
        }
    }
    npy_intp steps[SINPE_MAX_DIMS], lengths[SINPE_MAX_DIMS];
    int count = 0;
    for (int axis = 0; axis < view->ndim; ++axis) {
        const npy_intp length = view->shape[axis];
        if (length < 2) {
            continue; /* never stepped along */
        }
        const npy_intp stride = view->strides[axis];
        const npy_intp step = stride < 0 ? -stride : stride;
        int at = count++;
        for (; at > 0 && steps[at - 1] > step; --at) { /* insertion sort: few axes */
            steps[at] = steps[at - 1];
            lengths[at] = lengths[at - 1];
        }
        steps[at] = step;
        lengths[at] = length;
    }
    npy_intp span = itemsize; /* bytes covered by the smaller axes */
    for (int i = 0; i < count; ++i) {
        if (steps[i] < span) {
            return 0;
        }
        /* as_strided accepts absurd strides: saturate rather than overflow
         * (an array that large is then reported as overlapping, never UB) */
        const npy_intp reach = lengths[i] - 1;
        span = steps[i] > (NPY_MAX_INTP - span) / reach ? NPY_MAX_INTP : span + steps[i] * reach;
    }
    return 1;
}

/* Fills target's view from NumPy's shape and strides (copied) and descr. */
static void fill_target(sinpe_target *target, char *data, sinpe_dtype code, PyArray_Descr *descr,
                        int ndim, const npy_intp *shape, const npy_intp *strides)
{
    for (int i = 0; i < ndim; ++i) {
        target->shape[i] = shape[i];
        target->strides[i] = strides[i];
    }
    target->array = (sinpe_array){data, code, PyDataType_ISBYTESWAPPED(descr), ndim,
                                  target->shape, target->strides};
    target->scalar_type = (PyObject *)descr->typeobj;
}

int sinpe_writable_arg(PyObject *obj, const char *name, sinpe_target *target)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a numpy.ndarray written in place, not %.200s "
                     "(for a torch tensor use sinpe.torch, or pass tensor.numpy())",
                     name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyArrayObject *array = (PyArrayObject *)obj;
    /* Everything read from one descriptor, held: setting .dtype replaces it */
    PyArray_Descr *descr = PyArray_DESCR(array);
    Py_INCREF(descr);
    sinpe_dtype code;
    int status = -1;
    if (dtype_code(descr, &code, &target->torch_scalar) < 0) {
        PyErr_Format(PyExc_TypeError, "%s has dtype %R; sinpe writes only %s", name,
                     (PyObject *)descr, supported_dtypes);
    } else if (!PyArray_ISWRITEABLE(array)) {
        PyErr_Format(PyExc_ValueError, "%s is read-only", name);
    } else if (PyArray_NDIM(array) > SINPE_MAX_DIMS) { /* NumPy's own limit: cannot happen */
        PyErr_Format(PyExc_ValueError, "%s has %d axes; at most %d are supported", name,
                     PyArray_NDIM(array), SINPE_MAX_DIMS);
    } else {
        fill_target(target, PyArray_BYTES(array), code, descr, PyArray_NDIM(array),
                    PyArray_DIMS(array), PyArray_STRIDES(array));
        if (!elements_are_distinct(&target->array, PyDataType_ELSIZE(descr))) {
            PyErr_Format(PyExc_ValueError,
                         "%s has elements that share memory (a zero or overlapping stride, as "
                         "from as_strided or tensor.expand); writing it in place is ambiguous",
                         name);
        } else {
            status = 0;
        }
    }
    Py_DECREF(descr);
    return status;
}

int sinpe_readable_arg(PyObject *obj, const char *name, sinpe_target *target)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray, not %.200s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyArrayObject *array = (PyArrayObject *)obj;
    /* Everything read from one descriptor, held: setting .dtype replaces it */
    PyArray_Descr *descr = PyArray_DESCR(array);
    Py_INCREF(descr);
    sinpe_dtype code;
    int status = -1;
    if (dtype_code(descr, &code, &target->torch_scalar) < 0) {
        PyErr_Format(PyExc_TypeError, "%s has dtype %R; sinpe reads only %s", name,
                     (PyObject *)descr, supported_dtypes);
    } else if (PyArray_NDIM(array) > SINPE_MAX_DIMS) { /* NumPy's own limit: cannot happen */
        PyErr_Format(PyExc_ValueError, "%s has %d axes; at most %d are supported", name,
                     PyArray_NDIM(array), SINPE_MAX_DIMS);
    } else {
        fill_target(target, PyArray_BYTES(array), code, descr, PyArray_NDIM(array),
                    PyArray_DIMS(array), PyArray_STRIDES(array));
        status = 0;
    }
    Py_DECREF(descr);
    return status;
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

/* The expected shape for a message: `expected`, or the tuple of dims. */
int sinpe_tensor_arg(PyObject *address_obj, PyObject *shape_obj, PyObject *strides_obj,
                     PyObject *dtype_obj, const char *name, sinpe_target *target)
{
    long long dtype;
    if (sinpe_integer_arg(dtype_obj, "dtype", &dtype) < 0) {
        return -1;
    }
    /* tuples: their items cannot change or go away while they are read */
    if (dtype < SINPE_FLOAT16 || dtype > SINPE_BFLOAT16 || !PyTuple_Check(shape_obj) ||
        !PyTuple_Check(strides_obj) || PyTuple_GET_SIZE(shape_obj) != PyTuple_GET_SIZE(strides_obj) ||
        PyTuple_GET_SIZE(shape_obj) > SINPE_MAX_DIMS) {
        PyErr_Format(PyExc_ValueError, "%s: not a tensor's dtype, shape and strides", name);
        return -1;
    }
    const int ndim = (int)PyTuple_GET_SIZE(shape_obj);
    const ptrdiff_t itemsize = (ptrdiff_t)sinpe_itemsize((sinpe_dtype)dtype);
    for (int i = 0; i < ndim; ++i) {
        const Py_ssize_t length = PyLong_AsSsize_t(PyTuple_GET_ITEM(shape_obj, i));
        const Py_ssize_t stride = PyLong_AsSsize_t(PyTuple_GET_ITEM(strides_obj, i));
        if ((length == -1 || stride == -1) && PyErr_Occurred()) {
            return -1;
        }
        if (length < 0 || stride > PTRDIFF_MAX / itemsize || stride < -(PTRDIFF_MAX / itemsize)) {
            PyErr_Format(PyExc_ValueError, "%s: not a tensor's shape and strides", name);
            return -1;
        }
        target->shape[i] = length;
        target->strides[i] = stride * itemsize;
    }
    char *data = PyLong_AsVoidPtr(address_obj);
    if (data == NULL && PyErr_Occurred()) {
        return -1;
    }
    target->array = (sinpe_array){data, (sinpe_dtype)dtype, 0, ndim, target->shape,
                                  target->strides};
    target->scalar_type = NULL;
    target->torch_scalar = 1;
    if (!elements_are_distinct(&target->array, itemsize)) {
        PyErr_Format(PyExc_ValueError,
                     "%s has elements that share memory (a zero or overlapping stride, as from "
                     "as_strided or tensor.expand); writing it in place is ambiguous",
                     name);
        return -1;
    }
    return 0;
}

static PyObject *expected_shape(int ndim, const npy_intp *dims, const char *expected)
{
    return expected != NULL ? PyUnicode_FromString(expected) : PyArray_IntTupleFromIntp(ndim, dims);
}

PyArrayObject *sinpe_output_arg(PyObject *out_obj, PyObject *dtype_obj, const char *name, int ndim,
                                const npy_intp *dims, const char *expected, sinpe_target *target,
                                int *fresh)
{
    PyArray_Descr *descr = NULL;
    if (dtype_obj != NULL && dtype_obj != Py_None && !PyArray_DescrConverter2(dtype_obj, &descr)) {
        prefix_pending_error("dtype");
        return NULL;
    }
    *fresh = out_obj == NULL || out_obj == Py_None;
    if (!*fresh) {
        if (sinpe_writable_arg(out_obj, name, target) < 0) {
            Py_XDECREF(descr);
            return NULL;
        }
        PyArrayObject *out = (PyArrayObject *)out_obj;
        if (descr != NULL && !PyArray_EquivTypes(descr, PyArray_DESCR(out))) {
            PyErr_Format(PyExc_TypeError, "dtype=%R does not match %s.dtype=%R", (PyObject *)descr,
                         name, (PyObject *)PyArray_DESCR(out));
            Py_DECREF(descr);
            return NULL;
        }
        Py_XDECREF(descr);
        if (target->array.ndim != ndim ||
            !PyArray_CompareLists(target->array.shape, dims, ndim)) {
            PyObject *shape = PyObject_GetAttrString(out_obj, "shape");
            PyObject *want = expected_shape(ndim, dims, expected);
            if (shape != NULL && want != NULL) {
                PyErr_Format(PyExc_ValueError, "%s has shape %R, expected %S", name, shape, want);
            }
            Py_XDECREF(shape);
            Py_XDECREF(want);
            return NULL;
        }
        Py_INCREF(out_obj);
        return out;
    }
    if (descr == NULL) {
        descr = PyArray_DescrFromType(NPY_FLOAT);
    }
    sinpe_dtype code;
    if (dtype_code(descr, &code, &target->torch_scalar) < 0) {
        PyErr_Format(PyExc_TypeError, "dtype=%R is not supported; sinpe writes only %s",
                     (PyObject *)descr, supported_dtypes);
        Py_DECREF(descr);
        return NULL;
    }
    /* every axis counted, zero-length ones as 1, so an empty result whose
     * other axes alone overflow is refused too (NumPy would refuse it with
     * a message that does not name the argument) */
    Py_ssize_t bytes = PyDataType_ELSIZE(descr);
    for (int i = 0; i < ndim; ++i) {
        const Py_ssize_t length = dims[i] > 0 ? dims[i] : 1;
        if (length > PY_SSIZE_T_MAX / bytes) {
            PyObject *want = expected_shape(ndim, dims, expected);
            if (want != NULL) {
                PyErr_Format(PyExc_OverflowError,
                             "a result of shape %S and dtype %R is too large to represent", want,
                             (PyObject *)descr);
                Py_DECREF(want);
            }
            Py_DECREF(descr);
            return NULL;
        }
        bytes *= length;
    }
    PyArrayObject *result = (PyArrayObject *)PyArray_NewFromDescr(
        &PyArray_Type, descr, ndim, (npy_intp *)dims, NULL, NULL, 0, NULL); /* steals descr */
    if (result == NULL) {
        return NULL;
    }
    fill_target(target, PyArray_BYTES(result), code, PyArray_DESCR(result), ndim,
                PyArray_DIMS(result), PyArray_STRIDES(result));
    return result;
}

/* The first and one-past-last byte a view can touch (lo == hi: none). */
static void byte_extent(const sinpe_array *view, char **lo, char **hi)
{
    char *low = view->data, *high = view->data;
    for (int i = 0; i < view->ndim; ++i) {
        if (view->shape[i] == 0) {
            *lo = *hi = view->data;
            return;
        }
        const ptrdiff_t reach = view->strides[i] * (view->shape[i] - 1);
        *(reach < 0 ? &low : &high) += reach;
    }
    *lo = low;
    *hi = high + (view->dtype == SINPE_FLOAT32 ? 4 : view->dtype == SINPE_FLOAT64 ? 8 : 2);
}

int sinpe_check_disjoint(const sinpe_array *a, const char *a_name, const sinpe_array *b,
                         const char *b_name)
{
    char *lo0, *hi0, *lo1, *hi1;
    byte_extent(a, &lo0, &hi0);
    byte_extent(b, &lo1, &hi1);
    if (lo0 < hi0 && lo1 < hi1 && lo0 < hi1 && lo1 < hi0) {
        PyErr_Format(PyExc_ValueError,
                     "%s and %s share memory; they must be separate arrays", a_name,
                     b_name);
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
            prefix_pending_error("scale");
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
