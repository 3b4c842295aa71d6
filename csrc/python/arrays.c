/*
 * The binding's array arguments (python/arrays.h): the element types
 * sinpe writes, arrays written in place or read (their shapes and strides
 * copied), a torch tensor's memory, new outputs, the check that two arrays
 * share no memory, and NumPy's broadcasting of strides.
 */
#include "python/binding.h"

#include <string.h>

#include "python/args_scalars.h"
#include "python/arrays.h"

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

/* An array argument, as the kernel will see it: written in place (writing:
 * writeable, no two elements sharing memory) or only read. */
static int array_target(PyObject *obj, const char *name, sinpe_target *target, int writing)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be a numpy.ndarray%s, not %.200s%s", name,
                     writing ? " written in place" : "", Py_TYPE(obj)->tp_name,
                     writing ? " (for a torch tensor use sinpe.torch, or pass tensor.numpy())"
                             : "");
        return -1;
    }
    PyArrayObject *array = (PyArrayObject *)obj;
    /* Everything read from one descriptor, held: setting .dtype replaces it */
    PyArray_Descr *descr = PyArray_DESCR(array);
    Py_INCREF(descr);
    sinpe_dtype code;
    int status = -1;
    if (dtype_code(descr, &code, &target->torch_scalar) < 0) {
        PyErr_Format(PyExc_TypeError, "%s has dtype %R; sinpe %s only %s", name,
                     (PyObject *)descr, writing ? "writes" : "reads", supported_dtypes);
    } else if (writing && !PyArray_ISWRITEABLE(array)) {
        PyErr_Format(PyExc_ValueError, "%s is read-only", name);
    } else if (PyArray_NDIM(array) > SINPE_MAX_DIMS) { /* NumPy's own limit: cannot happen */
        PyErr_Format(PyExc_ValueError, "%s has %d axes; at most %d are supported", name,
                     PyArray_NDIM(array), SINPE_MAX_DIMS);
    } else {
        fill_target(target, PyArray_BYTES(array), code, descr, PyArray_NDIM(array),
                    PyArray_DIMS(array), PyArray_STRIDES(array));
        if (writing && !elements_are_distinct(&target->array, PyDataType_ELSIZE(descr))) {
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

int sinpe_writable_arg(PyObject *obj, const char *name, sinpe_target *target)
{
    return array_target(obj, name, target, 1);
}

int sinpe_readable_arg(PyObject *obj, const char *name, sinpe_target *target)
{
    return array_target(obj, name, target, 0);
}

int sinpe_tensor_memory(PyObject *address_obj, sinpe_dtype dtype, int ndim, sinpe_target *target)
{
    char *data = PyLong_AsVoidPtr(address_obj);
    if (data == NULL && PyErr_Occurred()) {
        return -1;
    }
    target->array = (sinpe_array){data, dtype, 0, ndim, target->shape, target->strides};
    target->scalar_type = NULL;
    target->torch_scalar = 1;
    return 0;
}

int sinpe_tensor_arg(PyObject *address_obj, PyObject *shape_obj, PyObject *strides_obj,
                     PyObject *dtype_obj, const char *name, int writing, sinpe_target *target)
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
    const ptrdiff_t itemsize = (ptrdiff_t)sinpe_dtype_bytes((sinpe_dtype)dtype);
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
    if (sinpe_tensor_memory(address_obj, (sinpe_dtype)dtype, ndim, target) < 0) {
        return -1;
    }
    if (writing && !elements_are_distinct(&target->array, itemsize)) {
        PyErr_Format(PyExc_ValueError,
                     "%s has elements that share memory (a zero or overlapping stride, as from "
                     "as_strided or tensor.expand); writing it in place is ambiguous",
                     name);
        return -1;
    }
    return 0;
}

int sinpe_array_or_tensor_arg(PyObject *obj, const char *name, int writing, sinpe_target *target)
{
    if (PyTuple_Check(obj) && PyTuple_GET_SIZE(obj) == 4) {
        return sinpe_tensor_arg(PyTuple_GET_ITEM(obj, 0), PyTuple_GET_ITEM(obj, 1),
                                PyTuple_GET_ITEM(obj, 2), PyTuple_GET_ITEM(obj, 3), name, writing,
                                target);
    }
    return array_target(obj, name, target, writing);
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
        sinpe_prefix_error("dtype");
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

/* ------------------------------------------------------------------ */
/* Broadcasting. */

void sinpe_broadcast_error(const char *name, int ndim, const npy_intp *dims,
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

int sinpe_broadcast_to(int ndim, const npy_intp *shape, const npy_intp *strides, int target_ndim,
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

int sinpe_broadcast_strides(const sinpe_array *view, const char *name, int ndim,
                            const npy_intp *dims, const char *target_name, ptrdiff_t *strides)
{
    if (sinpe_broadcast_to(view->ndim, view->shape, view->strides, ndim, dims, strides) < 0) {
        sinpe_broadcast_error(name, view->ndim, view->shape, target_name, ndim, dims);
        return -1;
    }
    return 0;
}
