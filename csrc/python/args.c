/*
 * The call being assembled (python/args.h): its frequencies and columns,
 * the snapshots of the arrays the kernel reads (taken while the GIL is
 * held), the checks that need every argument, the scale of an add, and
 * the run, without the GIL, whose status codes become exceptions here
 * alone.
 */
#include "python/binding.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "python/args.h"
#include "python/args_scalars.h"

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
PyArrayObject *sinpe_snapshot(PyObject *array, int type_num, const char *name)
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
PyArrayObject *sinpe_real_array_arg(PyObject *obj, const char *name, const char *what)
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

/* freq: a 1-D array of finite frequencies >= 0 with d // 2 or ceil(d / 2)
 * entries (RoPE: d / 2), as a float64 snapshot. */
static PyArrayObject *freq_arg(PyObject *obj, Py_ssize_t d, int rope)
{
    PyArrayObject *array = sinpe_real_array_arg(obj, "freq", "a 1-D array of real frequencies");
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
        PyErr_Occurred() ? NULL : sinpe_snapshot((PyObject *)array, NPY_DOUBLE, "freq");
    Py_DECREF(array);
    const double *w = values != NULL ? PyArray_DATA(values) : NULL;
    for (Py_ssize_t k = 0; values != NULL && k < count; ++k) {
        if (!(isfinite(w[k]) && w[k] >= 0.0)) {
            PyObject *value = PyFloat_FromDouble(w[k]);
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
        PyObject *value = PyFloat_FromDouble(given);
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
