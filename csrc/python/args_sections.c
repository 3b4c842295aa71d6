/*
 * The binding's sections (sinpe.h's multi-axis RoPE): sections= and
 * sections_layout= of rope_, rope and _rope_into, and the leading axis of
 * positions they add.  Every check of the C plan is made here first, with a
 * message naming the argument and its value (python/args_sections.h).
 */
#include "python/binding.h"

#include <stdio.h>

#include "python/args.h"
#include "python/args_scalars.h"
#include "python/args_sections.h"

/* The counts as a tuple, for messages. */
static PyObject *counts_tuple(const sinpe_call *c)
{
    PyObject *counts = PyTuple_New(c->plan.nsections);
    for (int s = 0; counts != NULL && s < c->plan.nsections; ++s) {
        PyObject *item = PyLong_FromSsize_t(c->sections[s]);
        if (item == NULL) {
            Py_CLEAR(counts);
            break;
        }
        PyTuple_SET_ITEM(counts, s, item);
    }
    return counts;
}

/* The counts of sections= (not yet their sum): an owned tuple of integers
 * >= 0, 1 to SINPE_MAX_SECTIONS of them, into c->sections. */
static int counts_arg(sinpe_call *c, PyObject *obj)
{
    /* a tuple of the items (owned): an item's __index__ may change a list */
    PyObject *seq = PySequence_Check(obj) && !PyUnicode_Check(obj) && !PyBytes_Check(obj)
                        ? PySequence_Tuple(obj)
                        : NULL;
    if (seq == NULL) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError,
                     "sections must be a sequence of integers (frequency pairs per section), "
                     "not %.200s",
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    const Py_ssize_t count = PyTuple_GET_SIZE(seq);
    int status = 0;
    if (count < 1 || count > SINPE_MAX_SECTIONS) {
        PyErr_Format(PyExc_ValueError, "sections=%R must have 1 to %d entries", obj,
                     SINPE_MAX_SECTIONS);
        status = -1;
    }
    for (Py_ssize_t s = 0; status == 0 && s < count; ++s) {
        PyObject *item = PyTuple_GET_ITEM(seq, s);
        int overflow = 0;
        /* a Python int (the common case) read directly; the generic reader,
         * and the argument's name for its messages, cost a decoding step
         * more than its rotation */
        long long value = PyLong_CheckExact(item) ? PyLong_AsLongLongAndOverflow(item, &overflow)
                                                  : -1;
        if (PyLong_CheckExact(item) && overflow == 0 && value >= 0) {
            c->sections[s] = (ptrdiff_t)value; /* <= LLONG_MAX: a size on 64-bit builds */
            if (value <= PY_SSIZE_T_MAX) {
                continue;
            }
        }
        PyErr_Clear();
        char name[48];
        snprintf(name, sizeof name, "sections[%zd]", s);
        status = sinpe_integer_arg(item, name, &value);
        if (status == 0 && value < 0) {
            PyErr_Format(PyExc_ValueError,
                         "sections=%R has a negative count: %s=%lld (each counts the frequency "
                         "pairs of a section)",
                         obj, name, value);
            status = -1;
        }
        if (status == 0 && value > PY_SSIZE_T_MAX) {
            PyErr_Format(PyExc_OverflowError, "%s=%lld is too large", name, value);
            status = -1;
        }
        c->sections[s] = status == 0 ? (ptrdiff_t)value : 0;
    }
    Py_DECREF(seq);
    c->plan.nsections = status == 0 ? (int)count : 0;
    return status;
}

/* Interleaved: the pairs section s >= 1 gets of m (sinpe.h's rule). */
static Py_ssize_t interleaved_count(int S, int s, Py_ssize_t count, Py_ssize_t m)
{
    const Py_ssize_t end = count > m / S ? m : S * count;
    return end > s ? (end - s - 1) / S + 1 : 0;
}

int sinpe_sections_arg(sinpe_call *c, PyObject *sections_obj, PyObject *layout_obj, Py_ssize_t m,
                       const char *m_name)
{
    static const char *const layouts[] = {"contiguous", "interleaved"};
    if (sections_obj == NULL || sections_obj == Py_None) {
        if (layout_obj != NULL && layout_obj != Py_None) {
            PyErr_Format(PyExc_ValueError,
                         "sections_layout is given without sections (it says which frequency "
                         "pairs each section takes), got sections_layout=%R",
                         layout_obj);
            return -1;
        }
        return 0;
    }
    int layout = SINPE_SECTIONS_CONTIGUOUS;
    if (sinpe_choice_arg(layout_obj == Py_None ? NULL : layout_obj, "sections_layout", layouts, 2,
                         &layout) < 0 ||
        counts_arg(c, sections_obj) < 0) {
        c->plan.nsections = 0;
        return -1;
    }
    const int S = c->plan.nsections;
    Py_ssize_t total = 0;
    for (int s = 0; s < S; ++s) {
        total = c->sections[s] > PY_SSIZE_T_MAX - total ? PY_SSIZE_T_MAX : total + c->sections[s];
    }
    if (total != m) {
        PyErr_Format(PyExc_ValueError,
                     "sections=%R count %zd frequency pairs in all; %s = %zd pairs must each "
                     "take one section",
                     sections_obj, total, m_name, m);
        c->plan.nsections = 0;
        return -1;
    }
    for (int s = 1; layout == SINPE_SECTIONS_INTERLEAVED && s < S; ++s) {
        const Py_ssize_t got = interleaved_count(S, s, c->sections[s], m);
        if (got != c->sections[s]) {
            PyErr_Format(PyExc_ValueError,
                         "sections=%R with sections_layout='interleaved': section s >= 1 takes "
                         "the pairs j < %zd with j %% %d == s and j < %d * sections[s], which "
                         "gives section %d %zd pairs, not sections[%d]=%zd",
                         sections_obj, m, S, S, s, got, s, c->sections[s]);
            c->plan.nsections = 0;
            return -1;
        }
    }
    c->plan.sections = c->sections;
    c->plan.sections_layout = (sinpe_sections_layout)layout;
    return 0;
}

int sinpe_section_axis_check(const sinpe_call *c, int ndim, const npy_intp *dims)
{
    if (ndim >= 1 && dims[0] == c->plan.nsections) {
        return 0;
    }
    PyObject *shape = PyArray_IntTupleFromIntp(ndim, dims);
    PyObject *counts = counts_tuple(c);
    if (shape != NULL && counts != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "positions has shape %R; with sections=%R it needs a leading axis of "
                     "length %d (one row of positions per section)",
                     shape, counts, c->plan.nsections);
    }
    Py_XDECREF(shape);
    Py_XDECREF(counts);
    return -1;
}
