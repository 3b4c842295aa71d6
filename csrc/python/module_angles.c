/*
 * _angle_values: sinpe.torch's exact angle tables evaluated on the CPU
 * (sinpe_angle_values), for a CPU tensor's positions: the bits the tables'
 * torch operations give on every device, without their dozens of small
 * operations per call.  Private: sinpe.torch passes its own tables; every
 * array is still checked (dtype, C order, shape), since an index computed
 * from a position must land inside the tables.
 */
#include "python/binding.h"

#include "python/module_angles.h"

/* arr (borrowed) as a C-contiguous, aligned array of type typenum and ndim
 * axes whose shape is dims (-1: any), else a TypeError naming it. */
static const void *table_arg(PyObject *obj, const char *name, int typenum, int ndim,
                             const npy_intp *dims)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a NumPy array", name);
        return NULL;
    }
    PyArrayObject *array = (PyArrayObject *)obj;
    if (PyArray_TYPE(array) != typenum || PyArray_NDIM(array) != ndim ||
        !PyArray_ISCARRAY_RO(array) || PyArray_ISBYTESWAPPED(array)) {
        PyErr_Format(PyExc_TypeError, "%s must be a C-contiguous array of %d axes and dtype %s",
                     name, ndim, typenum == NPY_INT64 ? "int64" : "float32");
        return NULL;
    }
    for (int axis = 0; axis < ndim; axis++) {
        if (dims[axis] >= 0 && PyArray_DIM(array, axis) != dims[axis]) {
            PyErr_Format(PyExc_ValueError, "%s has %zd rows on axis %d, expected %zd", name,
                         (Py_ssize_t)PyArray_DIM(array, axis), axis, (Py_ssize_t)dims[axis]);
            return NULL;
        }
    }
    return PyArray_DATA(array);
}

/* _angle_values(positions, per_pair, high, low, fractions, scalings, limit, half, /) */
PyObject *sinpe_py_angle_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        return PyErr_Format(PyExc_TypeError, "_angle_values takes 8 arguments, got %zd", nargs);
    }
    if (!PyArray_Check(args[0])) {
        return PyErr_Format(PyExc_TypeError, "positions must be a NumPy array");
    }
    PyArrayObject *positions = (PyArrayObject *)args[0];
    const int typenum = PyArray_TYPE(positions);
    const sinpe_position_kind kind = typenum == NPY_FLOAT32   ? SINPE_POSITIONS_FLOAT32
                                     : typenum == NPY_FLOAT64 ? SINPE_POSITIONS_FLOAT64
                                                              : SINPE_POSITIONS_INT64;
    if ((kind == SINPE_POSITIONS_INT64 && typenum != NPY_INT64) ||
        !PyArray_ISCARRAY_RO(positions) || PyArray_ISBYTESWAPPED(positions)) {
        return PyErr_Format(PyExc_TypeError, "positions must be a C-contiguous array of "
                                             "int64, float32 or float64");
    }
    const int per_pair = PyObject_IsTrue(args[1]), half = PyObject_IsTrue(args[7]);
    long long limit = PyLong_AsLongLong(args[6]);
    if (per_pair < 0 || half < 0 || (limit == -1 && PyErr_Occurred())) {
        return NULL;
    }
    if (limit < 0 || limit > SINPE_MAX_POSITION) {
        return PyErr_Format(PyExc_ValueError, "limit must be in [0, 2**24], got %lld", limit);
    }
    if (!PyArray_Check(args[2])) {
        return PyErr_Format(PyExc_TypeError, "high must be a NumPy array");
    }
    const npy_intp m = PyArray_NDIM((PyArrayObject *)args[2]) == 3
                           ? PyArray_DIM((PyArrayObject *)args[2], 1) : 0;
    const npy_intp high_dims[] = {(SINPE_MAX_POSITION >> 12) + 1, m, 2};
    const npy_intp low_dims[] = {1 << 12, m, 2, 2}, fraction_dims[] = {256, m, 2, 2};
    const npy_intp scaling_dims[] = {4, 2};
    sinpe_angle_digits digits = {.pairs = m, .limit = limit};
    digits.high = table_arg(args[2], "high", NPY_INT64, 3, high_dims);
    digits.low = digits.high ? table_arg(args[3], "low", NPY_INT64, 4, low_dims) : NULL;
    digits.scalings = digits.low ? table_arg(args[5], "scalings", NPY_FLOAT32, 2, scaling_dims)
                                 : NULL;
    if (digits.scalings == NULL) {
        return NULL;
    }
    if (kind != SINPE_POSITIONS_INT64) {
        if (!PyTuple_Check(args[4]) || PyTuple_GET_SIZE(args[4]) != SINPE_FRACTION_DIGITS) {
            return PyErr_Format(PyExc_TypeError, "fractions must be a tuple of %d arrays for "
                                "real positions", SINPE_FRACTION_DIGITS);
        }
        for (int k = 0; k < SINPE_FRACTION_DIGITS; k++) {
            digits.fraction[k] = table_arg(PyTuple_GET_ITEM(args[4], k), "fractions[k]",
                                           NPY_INT64, 4, fraction_dims);
            if (digits.fraction[k] == NULL) {
                return NULL;
            }
        }
    }
    /* the output: the positions' shape (less the pairs' axis with per_pair) + (m, 2) */
    int ndim = PyArray_NDIM(positions);
    if (per_pair && (ndim == 0 || PyArray_DIM(positions, ndim - 1) != m)) {
        return PyErr_Format(PyExc_ValueError, "positions' last axis must hold the %zd pairs",
                            (Py_ssize_t)m);
    }
    ndim -= per_pair;
    if (ndim + 2 > NPY_MAXDIMS) {
        return PyErr_Format(PyExc_ValueError, "positions have too many axes");
    }
    npy_intp dims[NPY_MAXDIMS];
    npy_intp rows = 1;
    for (int axis = 0; axis < ndim; axis++) {
        dims[axis] = PyArray_DIM(positions, axis);
        rows *= dims[axis];
    }
    dims[ndim] = m;
    dims[ndim + 1] = 2;
    PyObject *out = PyArray_SimpleNew(ndim + 2, dims, NPY_FLOAT32);
    if (out == NULL) {
        return NULL;
    }
    const void *data = PyArray_DATA(positions);
    float *values = PyArray_DATA((PyArrayObject *)out);
    Py_BEGIN_ALLOW_THREADS
    sinpe_angle_values(&digits, data, kind, rows, per_pair, half, values);
    Py_END_ALLOW_THREADS
    return out;
}
