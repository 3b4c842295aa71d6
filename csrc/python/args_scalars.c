/*
 * Scalar arguments (python/args_scalars.h): every message names the
 * argument and its value, and a message NumPy or Python already wrote is
 * kept, with the argument's name in front.
 */
#include "python/binding.h"

#include <stdio.h>
#include <string.h>

#include "python/args_scalars.h"

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
