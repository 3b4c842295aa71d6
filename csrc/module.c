/*
 * sinpe._core: the CPython binding.  It only parses and validates arguments
 * (so every bad call fails before anything is written), allocates the
 * result, describes the NumPy array to the C kernel as a sinpe_array, and
 * releases the GIL around the kernel.  All math lives in kernels.c.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#include <numpy/arrayobject.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sinpe.h"

/* ------------------------------------------------------------------ */
/* Argument conversion: every message names the argument and its value. */

/* Re-raises the pending exception with "name: " in front of its message, so
 * NumPy's precise wording ("data type 'x' not understood") is kept. */
static void prefix_pending_error(const char *name)
{
    PyObject *type, *value, *traceback;
    PyErr_Fetch(&type, &value, &traceback);
    PyErr_NormalizeException(&type, &value, &traceback);
    PyObject *message = value != NULL ? PyObject_Str(value) : NULL;
    if (message != NULL) {
        PyErr_Format(type, "%s: %U", name, message);
        Py_DECREF(message);
    } else {
        PyErr_Restore(type, value, traceback); /* keep the original */
        return;
    }
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(traceback);
}

/* An integer argument: int-like objects only (as NumPy's shape arguments). */
static int integer_arg(PyObject *obj, const char *name, long long *value)
{
    if (PyFloat_Check(obj) || !PyIndex_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an integer, not %.200s", name,
                     Py_TYPE(obj)->tp_name);
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

static int size_arg(PyObject *obj, const char *name, Py_ssize_t *value)
{
    long long wide;
    if (integer_arg(obj, name, &wide) < 0) {
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

/* A real number: ints, floats, NumPy scalars; not complex, not str. */
static int real_arg(PyObject *obj, const char *name, double *value)
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

static int check_base(double n)
{
    if (!(n >= SINPE_MIN_BASE && n <= SINPE_MAX_BASE)) {
        /* PyErr_Format has no %g: the bounds go through snprintf */
        char bounds[64];
        snprintf(bounds, sizeof bounds, "%g <= n <= %g", SINPE_MIN_BASE, SINPE_MAX_BASE);
        PyObject *shown = PyFloat_FromDouble(n);
        if (shown != NULL) {
            PyErr_Format(PyExc_ValueError, "n must be a finite base with %s, got n=%R", bounds,
                         shown);
            Py_DECREF(shown);
        }
        return -1;
    }
    return 0;
}

/* Rows are positions offset .. offset + rows - 1; all must be in the bound. */
static int check_positions(long long offset, Py_ssize_t rows, const char *rows_name)
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

static const char *const supported_dtypes =
    "float16, float32, float64 or bfloat16 (ml_dtypes.bfloat16)";

/* The label a private view carries in its dtype metadata ({"sinpe": label}):
 * sinpe.torch passes torch tensors' memory this way, bfloat16 as int16 bits
 * since NumPy has no bfloat16 of its own.  NULL when there is none. */
static const char *torch_label(PyArray_Descr *descr)
{
    PyObject *metadata = PyDataType_METADATA(descr);
    if (metadata == NULL || !PyDict_Check(metadata)) {
        return NULL;
    }
    PyObject *label = PyDict_GetItemString(metadata, "sinpe"); /* borrowed */
    return label != NULL && PyUnicode_Check(label) ? PyUnicode_AsUTF8(label) : NULL;
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

static int dtype_code(PyArray_Descr *descr, sinpe_dtype *code)
{
    const char *label = torch_label(descr);
    if (label != NULL) {
        if (strcmp(label, "torch.bfloat16") == 0 && PyDataType_ELSIZE(descr) == 2 &&
            PyTypeNum_ISINTEGER(descr->type_num)) {
            *code = SINPE_BFLOAT16;
            return 0;
        }
        if (strcmp(label, "torch.float16") == 0 && descr->type_num == NPY_HALF) {
            *code = SINPE_FLOAT16;
            return 0;
        }
        PyErr_Clear(); /* PyUnicode_AsUTF8 cannot fail on a str, but be sure */
        return -1;
    }
    switch (descr->type_num) {
    case NPY_HALF: *code = SINPE_FLOAT16; return 0;
    case NPY_FLOAT: *code = SINPE_FLOAT32; return 0;
    case NPY_DOUBLE: *code = SINPE_FLOAT64; return 0;
    default:
        if (is_ml_dtypes_bfloat16(descr)) {
            *code = SINPE_BFLOAT16;
            return 0;
        }
        return -1;
    }
}

/* True when no two elements of the array share a byte, by a sufficient
 * test: with the axes sorted by |stride|, each one must step past all that
 * the smaller ones span.  Every layout NumPy itself makes (C or Fortran
 * order, transposes, slices, negative steps) passes; views that repeat
 * elements (zero strides, as_strided overlaps) fail, and writing those in
 * place would add the table several times into the same memory. */
static int elements_are_distinct(PyArrayObject *array)
{
    if (PyArray_SIZE(array) == 0) {
        return 1;
    }
    npy_intp steps[NPY_MAXDIMS], lengths[NPY_MAXDIMS];
    int count = 0;
    for (int axis = 0; axis < PyArray_NDIM(array); ++axis) {
        const npy_intp length = PyArray_DIM(array, axis);
        if (length < 2) {
            continue; /* never stepped along */
        }
        const npy_intp stride = PyArray_STRIDE(array, axis);
        const npy_intp step = stride < 0 ? -stride : stride;
        int at = count++;
        for (; at > 0 && steps[at - 1] > step; --at) { /* insertion sort: few axes */
            steps[at] = steps[at - 1];
            lengths[at] = lengths[at - 1];
        }
        steps[at] = step;
        lengths[at] = length;
    }
    npy_intp span = PyArray_ITEMSIZE(array); /* bytes covered by the smaller axes */
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

/* A float16/32/64 ndarray that may be written: the shared checks of out= and
 * embeddings.  Fills the kernel's view of it. */
static int writable_float_array(PyObject *obj, const char *name, sinpe_array *view)
{
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError,
                     "%s must be a numpy.ndarray written in place, not %.200s "
                     "(for a torch tensor pass tensor.numpy())",
                     name, Py_TYPE(obj)->tp_name);
        return -1;
    }
    PyArrayObject *array = (PyArrayObject *)obj;
    if (dtype_code(PyArray_DESCR(array), &view->dtype) < 0) {
        PyErr_Format(PyExc_TypeError, "%s has dtype %R; sinpe writes only %s", name,
                     (PyObject *)PyArray_DESCR(array), supported_dtypes);
        return -1;
    }
    if (!PyArray_ISWRITEABLE(array)) {
        PyErr_Format(PyExc_ValueError, "%s is read-only", name);
        return -1;
    }
    if (!elements_are_distinct(array)) {
        PyErr_Format(PyExc_ValueError,
                     "%s has elements that share memory (a zero or overlapping stride, as "
                     "from as_strided or tensor.expand); writing it in place is ambiguous",
                     name);
        return -1;
    }
    view->data = PyArray_BYTES(array);
    view->byteswapped = PyArray_ISBYTESWAPPED(array);
    view->ndim = PyArray_NDIM(array);
    view->shape = PyArray_DIMS(array);
    view->strides = PyArray_STRIDES(array);
    return 0;
}

/* One place maps kernel status codes to exceptions. */
static int kernel_failed(int status)
{
    switch (status) {
    case SINPE_OK:
        return 0;
    case SINPE_ERR_NOMEM:
        PyErr_NoMemory();
        return -1;
    case SINPE_ERR_CANCELLED:
        /* check_signals() stopped the kernel: its exception is pending */
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

/* ------------------------------------------------------------------ */
/* Ctrl-C during long kernels.  The kernel calls check_signals() from the
 * calling thread between chunks (about every 8 MB); it takes the GIL back
 * just long enough to run the signal handlers.  Only the main thread runs
 * Python signal handlers, so other threads pass no callback at all. */

static unsigned long main_thread_ident;

typedef struct {
    PyThreadState *thread_state;
} signal_check;

static int check_signals(void *context)
{
    signal_check *check = context;
    PyEval_RestoreThread(check->thread_state);
    const int failed = PyErr_CheckSignals() < 0;
    check->thread_state = PyEval_SaveThread();
    return failed;
}

/* encode_at, rope, encode_grid and the variant paths of encode and add_ */
#include "variants_binding.inc"

/* ------------------------------------------------------------------ */

PyDoc_STRVAR(encode_doc,
"encode($module, /, L, d, n=10000.0, *, offset=0, dtype=None, out=None, layout='interleaved',\n"
"       schedule='paper', freq=None)\n"
"--\n"
"\n"
"Sinusoidal positional encoding table of \"Attention Is All You Need\".\n"
"\n"
"Row ``i`` is position ``p = offset + i``; column ``j`` is\n"
"``sin(p * w)`` for even ``j`` and ``cos(p * w)`` for odd ``j``, with\n"
"``w = n ** (-2 * (j // 2) / d)``.  An odd ``d`` ends with a sine column.\n"
"Angles and values are computed in double precision and rounded once to\n"
"the output dtype: float32 output is within 2**-24 of the exact value.\n"
"\n"
"Parameters\n"
"----------\n"
"L : int\n"
"    Number of positions (rows), ``L >= 0``.\n"
"d : int\n"
"    Number of features (columns), ``d >= 1``.\n"
"n : float, optional\n"
"    Base of the wavelengths, ``1 <= n <= 1e30``.  Default 10000.\n"
"offset : int, optional\n"
"    Position of the first row.  All positions must satisfy\n"
"    ``|p| <= sinpe.MAX_POSITION`` (2**24).\n"
"dtype : data-type, optional\n"
"    float16, float32 or float64, any spelling NumPy accepts.  None (the\n"
"    default) means float32, or ``out.dtype`` when ``out`` is given; an\n"
"    explicit dtype must match ``out.dtype``.\n"
"out : numpy.ndarray, optional\n"
"    A writeable ``(L, d)`` array of a supported dtype, with any strides,\n"
"    to fill instead of allocating.\n"
"layout : {'interleaved', 'concatenated'}, optional\n"
"    ``'interleaved'`` (the paper): sin at column 2k, cos at 2k+1.\n"
"    ``'concatenated'``: all sines, then all cosines (fairseq, t2t, Whisper,\n"
"    Marian, MAE, GPT-J's stored table).\n"
"schedule : {'paper', 'fairseq'}, optional\n"
"    ``'paper'``: ``w_k = n**(-2k/d)``, ``ceil(d/2)`` pairs (odd ``d`` ends\n"
"    with a sine).  ``'fairseq'`` (fairseq, tensor2tensor, Whisper):\n"
"    ``w_k = n**(-k/max(d//2 - 1, 1))``, ``d//2`` pairs (odd ``d``: a zero\n"
"    last column).\n"
"freq : array_like, optional\n"
"    Explicit frequencies instead of ``n`` and ``schedule``: ``d // 2``\n"
"    (odd ``d``: zero last column) or ``ceil(d/2)`` finite values >= 0.\n"
"    Any rows computed alone (``offset``) equal the same rows of the full\n"
"    table bit for bit, for every layout, schedule and thread count.\n"
"\n"
"Returns\n"
"-------\n"
"numpy.ndarray\n"
"    A new C-contiguous ``(L, d)`` array, or ``out``.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    An argument of the wrong kind (a float for ``L``, an integer dtype,\n"
"    ``out`` not an ndarray).\n"
"ValueError\n"
"    A wrong value (``L < 0``, ``d < 1``, ``n`` out of range, positions\n"
"    beyond the bound, ``out`` of the wrong shape or read-only).\n"
"OverflowError, MemoryError\n"
"    A table too large to represent or allocate.\n"
"\n"
"Examples\n"
"--------\n"
">>> import sinpe\n"
">>> sinpe.encode(3, 4).round(4)\n"
"array([[0.    , 1.    , 0.    , 1.    ],\n"
"       [0.8415, 0.5403, 0.01  , 1.    ],\n"
"       [0.9093, -0.4161, 0.02  , 0.9998]], dtype=float32)\n");

static PyObject *encode(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"L", "d", "n", "offset", "dtype", "out",
                               "layout", "schedule", "freq", NULL};
    PyObject *rows_obj, *cols_obj, *base_obj = NULL, *offset_obj = NULL, *dtype_obj = Py_None,
                                   *out_obj = Py_None, *layout_obj = NULL, *schedule_obj = NULL,
                                   *freq_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$OOOOOO:encode", keywords, &rows_obj,
                                     &cols_obj, &base_obj, &offset_obj, &dtype_obj, &out_obj,
                                     &layout_obj, &schedule_obj, &freq_obj)) {
        return NULL;
    }
    Py_ssize_t rows, cols;
    long long offset = 0;
    double n = 10000.0;
    if (size_arg(rows_obj, "L", &rows) < 0 || size_arg(cols_obj, "d", &cols) < 0 ||
        (base_obj != NULL && real_arg(base_obj, "n", &n) < 0) ||
        (offset_obj != NULL && integer_arg(offset_obj, "offset", &offset) < 0)) {
        return NULL;
    }
    if (rows < 0) {
        return PyErr_Format(PyExc_ValueError, "L must be >= 0, got L=%zd", rows);
    }
    if (cols < 1) {
        return PyErr_Format(PyExc_ValueError, "d must be >= 1, got d=%zd", cols);
    }
    if (check_base(n) < 0 || check_positions(offset, rows, "L") < 0) {
        return NULL;
    }
    variant_args va = {SINPE_INTERLEAVED, SINPE_PAPER, NULL, n};
    if (variant_args_parse(&va, base_obj, layout_obj, schedule_obj, freq_obj, cols, 0) < 0) {
        return NULL;
    }
    if (va.layout != SINPE_INTERLEAVED || va.schedule != SINPE_PAPER || va.freq != NULL) {
        PyObject *table = encode_variant(rows, cols, offset, &va, dtype_obj, out_obj);
        Py_XDECREF(va.freq);
        return table;
    }

    PyArray_Descr *descr = NULL; /* owned */
    if (dtype_obj != Py_None) {
        if (!PyArray_DescrConverter2(dtype_obj, &descr)) {
            prefix_pending_error("dtype");
            return NULL;
        }
    }
    PyArrayObject *result = NULL;
    sinpe_array view;
    if (out_obj != Py_None) {
        if (writable_float_array(out_obj, "out", &view) < 0) {
            goto fail;
        }
        PyArrayObject *out = (PyArrayObject *)out_obj;
        if (descr != NULL && !PyArray_EquivTypes(descr, PyArray_DESCR(out))) {
            PyErr_Format(PyExc_TypeError, "dtype=%R does not match out.dtype=%R",
                         (PyObject *)descr, (PyObject *)PyArray_DESCR(out));
            goto fail;
        }
        if (view.ndim != 2 || view.shape[0] != rows || view.shape[1] != cols) {
            PyObject *shape = PyObject_GetAttrString(out_obj, "shape");
            if (shape != NULL) {
                PyErr_Format(PyExc_ValueError, "out has shape %R, expected (L, d) = (%zd, %zd)",
                             shape, rows, cols);
                Py_DECREF(shape);
            }
            goto fail;
        }
        Py_INCREF(out_obj);
        result = out;
    } else {
        if (descr == NULL) {
            descr = PyArray_DescrFromType(NPY_FLOAT);
        }
        sinpe_dtype code;
        if (dtype_code(descr, &code) < 0) {
            PyErr_Format(PyExc_TypeError, "dtype=%R is not supported; sinpe writes only %s",
                         (PyObject *)descr, supported_dtypes);
            goto fail;
        }
        const Py_ssize_t itemsize = PyDataType_ELSIZE(descr);
        /* NumPy sizes ignore zero-length axes, so an empty (0, d) table is
         * still refused when d alone overflows: say so before it does. */
        if (cols > PY_SSIZE_T_MAX / itemsize / (rows > 0 ? rows : 1)) {
            PyErr_Format(PyExc_OverflowError,
                         "a table of L=%zd by d=%zd elements of %zd bytes is too large to "
                         "represent",
                         rows, cols, itemsize);
            goto fail;
        }
        npy_intp dims[2] = {rows, cols};
        result = (PyArrayObject *)PyArray_NewFromDescr(&PyArray_Type, descr, 2, dims, NULL, NULL,
                                                       0, NULL);
        descr = NULL; /* stolen, even on failure */
        if (result == NULL) {
            goto fail;
        }
        view = (sinpe_array){PyArray_BYTES(result), code, PyArray_ISBYTESWAPPED(result), 2,
                             PyArray_DIMS(result), PyArray_STRIDES(result)};
    }
    Py_XDECREF(descr);
    descr = NULL;

    /* On Ctrl-C the kernel stops; a new array is dropped half-filled (never
     * returned), an out= array keeps the rows already written. */
    const int on_main_thread = PyThread_get_thread_ident() == main_thread_ident;
    signal_check check;
    check.thread_state = PyEval_SaveThread();
    const int status = sinpe_encode_ex(&view, n, (int64_t)offset,
                                       out_obj == Py_None ? SINPE_FRESH_OUTPUT : 0,
                                       on_main_thread ? check_signals : NULL, &check);
    PyEval_RestoreThread(check.thread_state);
    if (kernel_failed(status) < 0) {
        goto fail;
    }
    return (PyObject *)result;

fail:
    Py_XDECREF(descr);
    Py_XDECREF(result);
    return NULL;
}

PyDoc_STRVAR(add_doc,
"add_($module, /, embeddings, n=10000.0, *, offset=0, axis=-2, scale=1.0,\n"
"     layout='interleaved', schedule='paper', freq=None, positions=None, padding=None)\n"
"--\n"
"\n"
"Add the positional encoding to ``embeddings`` in place.\n"
"\n"
"Computes ``embeddings = scale * embeddings + PE`` in one pass, in double\n"
"precision, rounded once per element.  Positions run along ``axis``,\n"
"features along the last axis, and every other axis is batch: use\n"
"``axis=-2`` for batch-first ``(B, L, d)`` and ``axis=0`` for seq-first\n"
"``(L, B, d)``.  The table is produced row by row inside the add; no\n"
"table of the batch's size is ever allocated.\n"
"\n"
"Parameters\n"
"----------\n"
"embeddings : numpy.ndarray\n"
"    Writeable float16, float32 or float64 array with at least 2 axes and\n"
"    any strides (``tensor.numpy()`` for a CPU torch tensor).\n"
"n : float, optional\n"
"    Base of the wavelengths, ``1 <= n <= 1e30``.  Default 10000.\n"
"offset : int, optional\n"
"    Position of index 0 along ``axis`` (for incremental decoding).\n"
"axis : int, optional\n"
"    The position axis; any axis but the last.  Default -2.\n"
"scale : float, optional\n"
"    Finite factor applied to ``embeddings`` first, e.g. ``sqrt(d)``.\n"
"layout : {'interleaved', 'concatenated'}, optional\n"
"    Column layout, as for ``encode``.\n"
"schedule : {'paper', 'fairseq'}, optional\n"
"    Frequency schedule, as for ``encode``.\n"
"freq : array_like, optional\n"
"    Explicit frequencies, as for ``encode``.\n"
"positions : array_like of int or float, optional\n"
"    One position per token, shape ``embeddings.shape[:-1]`` (packed\n"
"    sequences, left padding, negative positions); replaces ``offset`` and\n"
"    ``axis``.\n"
"padding : array_like of bool, optional\n"
"    Shape ``embeddings.shape[:-1]``; True tokens get ``scale * x`` only\n"
"    (their table row is zero, as in fairseq).\n"
"\n"
"Returns\n"
"-------\n"
"numpy.ndarray\n"
"    ``embeddings`` itself.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    ``embeddings`` is not an ndarray or has an unsupported dtype.\n"
"ValueError\n"
"    Read-only array, fewer than 2 axes, ``axis`` out of range or naming\n"
"    the feature axis, ``n``/``scale``/positions out of range.  On any\n"
"    error ``embeddings`` is left unchanged.\n"
"\n"
"Examples\n"
"--------\n"
">>> import numpy as np, sinpe\n"
">>> x = np.zeros((2, 3, 4), np.float32)\n"
">>> sinpe.add_(x) is x\n"
"True\n");

static PyObject *add_(PyObject *Py_UNUSED(module), PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"embeddings", "n", "offset", "axis", "scale", "layout",
                               "schedule", "freq", "positions", "padding", NULL};
    PyObject *x_obj, *base_obj = NULL, *offset_obj = NULL, *axis_obj = NULL, *scale_obj = NULL,
                     *layout_obj = NULL, *schedule_obj = NULL, *freq_obj = NULL,
                     *positions_obj = Py_None, *padding_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$OOOOOOOO:add_", keywords, &x_obj,
                                     &base_obj, &offset_obj, &axis_obj, &scale_obj, &layout_obj,
                                     &schedule_obj, &freq_obj, &positions_obj, &padding_obj)) {
        return NULL;
    }
    long long offset = 0, axis = -2;
    double n = 10000.0, scale = 1.0;
    sinpe_array view;
    if ((base_obj != NULL && real_arg(base_obj, "n", &n) < 0) ||
        (offset_obj != NULL && integer_arg(offset_obj, "offset", &offset) < 0) ||
        (axis_obj != NULL && integer_arg(axis_obj, "axis", &axis) < 0) ||
        (scale_obj != NULL && real_arg(scale_obj, "scale", &scale) < 0) ||
        writable_float_array(x_obj, "embeddings", &view) < 0 || check_base(n) < 0) {
        return NULL;
    }
    if (!isfinite(scale)) {
        PyObject *shown = PyFloat_FromDouble(scale);
        if (shown != NULL) {
            PyErr_Format(PyExc_ValueError, "scale must be finite, got scale=%R", shown);
            Py_DECREF(shown);
        }
        return NULL;
    }
    if (view.ndim < 2) {
        return PyErr_Format(PyExc_ValueError,
                            "embeddings must have at least 2 axes (positions, features), got "
                            "ndim=%d",
                            view.ndim);
    }
    if (positions_obj != Py_None && offset_obj != NULL) {
        return PyErr_Format(PyExc_ValueError,
                            "offset and positions are exclusive (add the offset to the "
                            "positions), got offset=%R",
                            offset_obj);
    }
    variant_args va = {SINPE_INTERLEAVED, SINPE_PAPER, NULL, n};
    if (variant_args_parse(&va, base_obj, layout_obj, schedule_obj, freq_obj,
                           view.shape[view.ndim - 1], 0) < 0) {
        return NULL;
    }
    if (positions_obj != Py_None) { /* per-token positions: no axis */
        PyObject *done = add_variant(x_obj, &view, -1, 0, scale, &va, positions_obj, padding_obj);
        Py_XDECREF(va.freq);
        return done;
    }
    if (axis < -view.ndim || axis >= view.ndim) {
        Py_XDECREF(va.freq);
        return PyErr_Format(PyExc_ValueError, "axis=%lld is out of range for embeddings with %d axes",
                            axis, view.ndim);
    }
    const int pos_axis = (int)(axis < 0 ? axis + view.ndim : axis);
    if (pos_axis == view.ndim - 1) {
        Py_XDECREF(va.freq);
        return PyErr_Format(PyExc_ValueError,
                            "axis=%lld names the feature axis (the last); positions must run "
                            "along another axis",
                            axis);
    }
    if (check_positions(offset, view.shape[pos_axis], "embeddings.shape[axis]") < 0) {
        Py_XDECREF(va.freq);
        return NULL;
    }
    if (va.layout != SINPE_INTERLEAVED || va.schedule != SINPE_PAPER || va.freq != NULL ||
        padding_obj != Py_None) {
        PyObject *done = add_variant(x_obj, &view, pos_axis, offset, scale, &va, NULL,
                                     padding_obj);
        Py_XDECREF(va.freq);
        return done;
    }

    int status;
    Py_BEGIN_ALLOW_THREADS
    status = sinpe_add(&view, pos_axis, n, (int64_t)offset, scale);
    Py_END_ALLOW_THREADS
    if (kernel_failed(status) < 0) {
        return NULL;
    }
    Py_INCREF(x_obj);
    return x_obj;
}

PyDoc_STRVAR(set_num_threads_doc,
"set_num_threads($module, threads, /)\n"
"--\n"
"\n"
"Set how many threads large calls of ``encode`` and ``add_`` use.\n"
"\n"
"``threads`` is an integer from 1 to sinpe.MAX_THREADS; the default is the\n"
"number of cores this process may run on, or the ``SINPE_NUM_THREADS``\n"
"environment variable read at import.  Small calls always use one thread.\n"
"Results are bit-identical for any thread count.  The setting is\n"
"process-wide.\n"
"\n"
"Raises\n"
"------\n"
"TypeError\n"
"    ``threads`` is not an integer.\n"
"ValueError\n"
"    ``threads`` is below 1 or above sinpe.MAX_THREADS.\n");

static PyObject *set_num_threads(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long long threads;
    if (PyBool_Check(arg)) {
        PyErr_Format(PyExc_TypeError, "threads must be an integer, not bool (threads=%R)", arg);
        return NULL;
    }
    if (integer_arg(arg, "threads", &threads) < 0) {
        return NULL;
    }
    if (threads < 1 || threads > SINPE_MAX_THREADS) {
        return PyErr_Format(PyExc_ValueError, "threads must be between 1 and %d, got threads=%lld",
                            SINPE_MAX_THREADS, threads);
    }
    if (sinpe_set_num_threads((int)threads) != SINPE_OK) {
        return PyErr_Format(PyExc_SystemError, "sinpe kernel rejected threads=%lld", threads);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(get_num_threads_doc,
"get_num_threads($module, /)\n"
"--\n"
"\n"
"The number of threads large calls use (see ``set_num_threads``).\n");

static PyObject *get_num_threads(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    return PyLong_FromLong(sinpe_get_num_threads());
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

/* The ident of the thread that runs Python signal handlers. */
static int find_main_thread(void)
{
    PyObject *threading = PyImport_ImportModule("threading");
    if (threading == NULL) {
        return -1;
    }
    PyObject *main_thread = PyObject_CallMethod(threading, "main_thread", NULL);
    Py_DECREF(threading);
    if (main_thread == NULL) {
        return -1;
    }
    PyObject *ident = PyObject_GetAttrString(main_thread, "ident");
    Py_DECREF(main_thread);
    if (ident == NULL) {
        return -1;
    }
    main_thread_ident = PyLong_AsUnsignedLong(ident);
    Py_DECREF(ident);
    return PyErr_Occurred() ? -1 : 0;
}

static PyMethodDef core_methods[] = {
    {"encode", (PyCFunction)(void (*)(void))encode, METH_VARARGS | METH_KEYWORDS, encode_doc},
    {"add_", (PyCFunction)(void (*)(void))add_, METH_VARARGS | METH_KEYWORDS, add_doc},
    {"encode_at", (PyCFunction)(void (*)(void))encode_at, METH_VARARGS | METH_KEYWORDS,
     encode_at_doc},
    {"rope", (PyCFunction)(void (*)(void))rope, METH_VARARGS | METH_KEYWORDS, rope_doc},
    {"encode_grid", (PyCFunction)(void (*)(void))encode_grid, METH_VARARGS | METH_KEYWORDS,
     encode_grid_doc},
    {"set_num_threads", set_num_threads, METH_O, set_num_threads_doc},
    {"get_num_threads", get_num_threads, METH_NOARGS, get_num_threads_doc},
    {NULL, NULL, 0, NULL},
};

static int core_exec(PyObject *module)
{
    if (PyArray_ImportNumPyAPI() < 0) {
        return -1;
    }
    if (PyModule_AddIntConstant(module, "MAX_POSITION", (long)SINPE_MAX_POSITION) < 0 ||
        PyModule_AddIntConstant(module, "MAX_THREADS", SINPE_MAX_THREADS) < 0 ||
        find_main_thread() < 0 || threads_from_environment() < 0) {
        return -1;
    }
    PyObject *min_base = PyFloat_FromDouble(SINPE_MIN_BASE);
    if (min_base == NULL) {
        return -1;
    }
    int added = PyModule_AddObjectRef(module, "MIN_BASE", min_base);
    Py_DECREF(min_base);
    if (added < 0) {
        return -1;
    }
    PyObject *max_base = PyFloat_FromDouble(SINPE_MAX_BASE);
    if (max_base == NULL) {
        return -1;
    }
    added = PyModule_AddObjectRef(module, "MAX_BASE", max_base);
    Py_DECREF(max_base);
    return added;
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sinpe._core",
    .m_doc = "C kernels of sinpe: sinusoidal positional encodings into NumPy arrays.",
    .m_size = 0,
    .m_methods = core_methods,
    .m_slots = core_slots,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&core_module);
}
