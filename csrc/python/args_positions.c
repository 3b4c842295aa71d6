/*
 * Positions and padding (python/args_positions.h): range positions along
 * an axis, explicit positions of any real dtype and any shape that
 * broadcasts against the rows, with sections' leading axis, and padding
 * masks; each a private snapshot (python/args.h).
 */
#include "python/binding.h"

#include <math.h>
#include <string.h>

#include "python/args.h"
#include "python/args_positions.h"
#include "python/args_scalars.h"
#include "python/args_sections.h"
#include "python/arrays.h"

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
    PyArrayObject *array = sinpe_real_array_arg(obj, "positions", "an integer or float array");
    if (array == NULL) {
        return -1;
    }
    const int type = PyArray_TYPE(array);
    const int integer = PyTypeNum_ISINTEGER(type);
    /* unsigned values are checked before any cast to int64 could wrap them */
    const int target = !integer ? NPY_DOUBLE : PyTypeNum_ISUNSIGNED(type) ? NPY_UINT64 : NPY_INT64;
    PyArrayObject *values = sinpe_snapshot((PyObject *)array, target, "positions");
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
    if (sinpe_broadcast_to(ndim - lead, dims + lead, PyArray_STRIDES(c->positions) + lead, nrow,
                           rows, strides + lead) < 0) {
        sinpe_broadcast_error(lead ? "each positions[s]" : "positions", ndim - lead, dims + lead,
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
        c->padding = sinpe_snapshot((PyObject *)array, NPY_BOOL, "padding");
    }
    Py_DECREF(array);
    if (c->padding == NULL) {
        return -1;
    }
    c->plan.padding = PyArray_DATA(c->padding);
    return 0;
}
