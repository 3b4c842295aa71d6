/*
 * sinpe._core's rotations: rope_, and the private forms sinpe.torch calls
 * (_rope_into: out of place, by the negated angles for the backward pass, or
 * only checked; _rotate_by: by given caches, HF's apply_rotary_pos_emb).
 * Each parses its arguments (python/args*.c, python/arrays.c) and runs the
 * plan's rotate action through sinpe_run without the GIL.  module.c lists
 * them.
 */
#include "python/binding.h"

#include <math.h>

#include "python/args.h"
#include "python/args_positions.h"
#include "python/args_scalars.h"
#include "python/args_sections.h"
#include "python/arrays.h"
#include "python/module_rope.h"

/* The arguments of a rotation by sinpe's own caches; NULL: not given. */
typedef struct {
    PyObject *x, *source, *n, *offset, *axis, *positions, *layout, *freq, *rotary_dim, *scale,
        *exact, *inverse, *sections, *sections_layout;
    int private_form; /* sinpe.torch's: x and source may be tensors' memory */
} rope_args;

/* A flag argument: a bool (Python's or NumPy's), as NumPy's keyword flags. */
static int flag_arg(PyObject *obj, const char *name, int *value)
{
    if (obj == NULL) {
        return 0;
    }
    if (!PyBool_Check(obj) && !PyArray_IsScalar(obj, Bool)) {
        PyErr_Format(PyExc_TypeError, "%s must be a bool, not %.200s", name,
                     Py_TYPE(obj)->tp_name);
        return -1;
    }
    *value = PyObject_IsTrue(obj);
    return *value < 0 ? -1 : 0;
}

/* rotary_dim= for rows of d features: even, 2 <= r <= d; None: d itself,
 * which must then be even. */
static int rotary_dim_arg(PyObject *obj, Py_ssize_t d, Py_ssize_t *r)
{
    if (obj == NULL || obj == Py_None) {
        if (d % 2 != 0 || d < 2) {
            PyErr_Format(PyExc_ValueError,
                         "x.shape[-1]=%zd is odd or < 2: RoPE rotates pairs of features; pass "
                         "an even rotary_dim <= %zd to rotate only the first ones",
                         d, d);
            return -1;
        }
        *r = d;
        return 0;
    }
    if (sinpe_size_arg(obj, "rotary_dim", r) < 0) {
        return -1;
    }
    if (*r < 2 || *r > d || *r % 2 != 0) {
        PyErr_Format(PyExc_ValueError,
                     "rotary_dim must be even with 2 <= rotary_dim <= x.shape[-1]=%zd, got "
                     "rotary_dim=%zd",
                     d, *r);
        return -1;
    }
    return 0;
}

/* freq= of a rotation: r // 2 entries (the message names rotary_dim; the
 * values are checked by sinpe_columns_arg). */
static int rotation_freq_count(PyObject *obj, Py_ssize_t r)
{
    if (obj == NULL || obj == Py_None) {
        return 0;
    }
    PyArrayObject *array = (PyArrayObject *)PyArray_FROM_O(obj);
    if (array == NULL) {
        PyErr_Clear(); /* sinpe_columns_arg reports it, with its own words */
        return 0;
    }
    const int wrong = PyArray_NDIM(array) == 1 && PyArray_DIM(array, 0) != r / 2;
    if (wrong) {
        PyErr_Format(PyExc_ValueError,
                     "freq has %zd entries; rotary_dim=%zd needs rotary_dim // 2 = %zd",
                     (Py_ssize_t)PyArray_DIM(array, 0), r, r / 2);
    }
    Py_DECREF(array);
    return wrong ? -1 : 0;
}

/* Parses, checks and runs a rotation of a.x (from a.source when given).
 * Everything is checked before the kernel writes anything.  a.x None (the
 * private form only): every check against a.source's shape and dtype, and
 * nothing run, for sinpe.torch's rotations by torch ops. */
static int run_rope(PyObject *module, const rope_args *given)
{
    /* None is "not given" for the optional arguments: sinpe.torch passes its
     * own through as they came */
    rope_args args = *given;
    rope_args *a = &args;
    PyObject **optional[] = {&a->n,    &a->offset,     &a->axis,    &a->positions,
                             &a->freq, &a->rotary_dim, &a->sections, &a->sections_layout};
    for (size_t i = 0; i < sizeof optional / sizeof optional[0]; ++i) {
        *optional[i] = *optional[i] == Py_None ? NULL : *optional[i];
    }
    const int check_only = a->x == Py_None && a->source != NULL;
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    c.plan.rotate = 1;
    c.plan.layout = SINPE_CONCATENATED;
    long long offset = 0, axis = -2;
    int exact = 0, inverse = 0;
    sinpe_target x_target, source_target;
    if ((a->n != NULL && sinpe_real_arg(a->n, "n", &c.plan.n) < 0) ||
        (a->offset != NULL && sinpe_integer_arg(a->offset, "offset", &offset) < 0) ||
        (a->axis != NULL && sinpe_integer_arg(a->axis, "axis", &axis) < 0) ||
        (a->scale != NULL && sinpe_real_arg(a->scale, "scale", &c.plan.scale) < 0) ||
        flag_arg(a->exact, "exact", &exact) < 0 || flag_arg(a->inverse, "inverse", &inverse) < 0 ||
        (a->source != NULL &&
         sinpe_array_or_tensor_arg(a->source, "source", 0, &source_target) < 0) ||
        (!check_only && (a->private_form ? sinpe_array_or_tensor_arg(a->x, "x", 1, &x_target)
                                         : sinpe_writable_arg(a->x, "x", &x_target)) < 0) ||
        sinpe_check_base(c.plan.n) < 0) {
        return -1;
    }
    /* their shapes and strides point into the targets, which outlive them */
    const sinpe_array source = a->source != NULL ? source_target.array : (sinpe_array){0};
    const sinpe_array view = check_only ? source : x_target.array;
    if (view.ndim < 2) {
        PyErr_Format(PyExc_ValueError,
                     "x must have at least 2 axes (positions, features), got ndim=%d", view.ndim);
        return -1;
    }
    if (a->source != NULL &&
        (source.ndim != view.ndim || !PyArray_CompareLists(source.shape, view.shape, view.ndim) ||
         source.dtype != view.dtype)) {
        PyErr_SetString(PyExc_ValueError, "source must have the shape and dtype of x");
        return -1;
    }
    if (a->source != NULL && !check_only &&
        sinpe_check_disjoint(&view, "x", &source, "source") < 0) {
        return -1;
    }
    if (!isfinite(c.plan.scale)) {
        PyObject *value = PyFloat_FromDouble(c.plan.scale);
        if (value != NULL) {
            PyErr_Format(PyExc_ValueError, "scale must be finite, got scale=%R", value);
            Py_DECREF(value);
        }
        return -1;
    }
    const char *positional = a->offset != NULL ? "offset" : a->axis != NULL ? "axis" : NULL;
    if (a->positions != NULL && positional != NULL) {
        PyErr_Format(PyExc_ValueError,
                     "%s and positions are exclusive (positions give every row's position), "
                     "got %s=%R",
                     positional, positional, a->offset != NULL ? a->offset : a->axis);
        return -1;
    }
    const int nrow = view.ndim - 1;
    Py_ssize_t r;
    if (rotary_dim_arg(a->rotary_dim, view.shape[nrow], &r) < 0 ||
        rotation_freq_count(a->freq, r) < 0) {
        return -1;
    }
    c.plan.rotary_dim = r;
    c.plan.exact = exact;
    c.plan.inverse = inverse;
    c.plan.source = a->source != NULL && !check_only ? &source : NULL;
    int status = sinpe_columns_arg(&c, a->n, a->layout, NULL, a->freq, r, 1, 0);
    if (status == 0) {
        status = sinpe_sections_arg(&c, a->sections, a->sections_layout, r / 2,
                                    a->rotary_dim != NULL ? "rotary_dim // 2" : "x.shape[-1] // 2");
    }
    if (status == 0 && c.plan.nsections > 0 && a->positions == NULL) {
        PyErr_Format(PyExc_ValueError,
                     "sections need positions= with a leading axis of %d rows (one position per "
                     "section for every row of x)",
                     c.plan.nsections);
        status = -1;
    }
    if (status == 0 && a->positions != NULL) {
        status = sinpe_row_positions_arg(&c, a->positions, nrow, view.shape, "x.shape[:-1] =");
    } else if (status == 0) {
        status = sinpe_axis_positions_arg(&c, &view, "x", axis, offset, "x.shape[axis]");
    }
    if (status == 0 && sinpe_check_angles(&c) == 0) {
        status = check_only ? 0 : sinpe_run_call(&c, &view, NULL, 0);
    } else {
        status = -1;
    }
    sinpe_call_release(&c);
    return status;
}

PyObject *sinpe_py_rope_(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"x",        "n",     "offset",   "axis",
                               "positions", "layout", "freq",   "rotary_dim",
                               "scale",    "exact", "sections", "sections_layout",
                               NULL};
    rope_args a = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$OOOOOOOOOO:rope_", keywords, &a.x, &a.n,
                                     &a.offset, &a.axis, &a.positions, &a.layout, &a.freq,
                                     &a.rotary_dim, &a.scale, &a.exact, &a.sections,
                                     &a.sections_layout)) {
        return NULL;
    }
    if (run_rope(module, &a) < 0) {
        return NULL;
    }
    Py_INCREF(a.x);
    return a.x;
}

/* rope_ of source into out (out of place), optionally by the negated
 * angles (the backward pass): for sinpe.torch.rope. */
PyObject *sinpe_py_rope_into(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"out",    "source",  "n",        "offset",
                               "axis",   "positions", "layout", "freq",
                               "rotary_dim", "scale", "exact",  "inverse",
                               "sections", "sections_layout", NULL};
    rope_args a = {NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OO|O$OOOOOOOOOOO:_rope_into", keywords,
                                     &a.x, &a.source, &a.n, &a.offset, &a.axis, &a.positions,
                                     &a.layout, &a.freq, &a.rotary_dim, &a.scale, &a.exact,
                                     &a.inverse, &a.sections, &a.sections_layout)) {
        return NULL;
    }
    if (a.source == Py_None) {
        a.source = NULL;
    }
    a.private_form = 1;
    if (run_rope(module, &a) < 0) {
        return NULL;
    }
    Py_INCREF(a.x);
    return a.x;
}

/* A rotation by given caches (HF's apply_rotary_pos_emb, in the arrays'
 * arithmetic): out = source * cos + rotate_half(source) * sin, cos and sin
 * broadcast to source's shape.  Made by given_rotation_check, which holds
 * pointers into itself and into the targets: neither may move before
 * given_rotation_run. */
typedef struct {
    sinpe_array view, source, caches[2];
    ptrdiff_t strides[2][SINPE_MAX_DIMS];
} given_rotation;

/* Checks out, source and the caches (targets[0..3]); -1 with an exception. */
static int given_rotation_check(given_rotation *g, const sinpe_target *targets)
{
    g->view = targets[0].array;
    g->source = targets[1].array;
    g->caches[0] = targets[2].array;
    g->caches[1] = targets[3].array;
    const sinpe_array *view = &g->view, *source = &g->source;
    const Py_ssize_t d = view->ndim > 0 ? view->shape[view->ndim - 1] : 0;
    if (view->ndim < 1 || d % 2 != 0) {
        PyErr_Format(PyExc_ValueError, "out must have an even number of features, got shape[-1]=%zd",
                     d);
        return -1;
    }
    if (source->ndim != view->ndim ||
        !PyArray_CompareLists(source->shape, view->shape, view->ndim) ||
        source->dtype != view->dtype || g->caches[0].dtype != view->dtype ||
        g->caches[1].dtype != view->dtype) {
        PyErr_SetString(PyExc_ValueError,
                        "source must have out's shape, and source, cos and sin out's dtype");
        return -1;
    }
    static const char *const names[2] = {"cos", "sin"};
    for (int t = 0; t < 2; ++t) {
        if (sinpe_broadcast_strides(&g->caches[t], names[t], view->ndim, view->shape,
                                    "out.shape =", g->strides[t]) < 0 ||
            sinpe_check_disjoint(view, "out", &g->caches[t], names[t]) < 0) {
            return -1;
        }
        g->caches[t].ndim = view->ndim;
        g->caches[t].shape = view->shape;
        g->caches[t].strides = g->strides[t];
    }
    return sinpe_check_disjoint(view, "out", source, "source");
}

static int given_rotation_run(sinpe_call *c, const given_rotation *g)
{
    c->plan.rotate = 1;
    c->plan.source = &g->source;
    c->plan.cos_cache = &g->caches[0];
    c->plan.sin_cache = &g->caches[1];
    return sinpe_run_call(c, &g->view, NULL, 0);
}

/* _rotate_by(out, source, cos, sin, *, layout): for sinpe.torch's rotations
 * by given caches. */
PyObject *sinpe_py_rotate_by(PyObject *module, PyObject *args, PyObject *kwargs)
{
    static char *keywords[] = {"out", "source", "cos", "sin", "layout", NULL};
    PyObject *objs[4], *layout_obj = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "OOOO|$O:_rotate_by", keywords, &objs[0],
                                     &objs[1], &objs[2], &objs[3], &layout_obj)) {
        return NULL;
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    c.plan.layout = SINPE_CONCATENATED;
    static const char *const names[4] = {"out", "source", "cos", "sin"};
    sinpe_target targets[4];
    for (int t = 0; t < 4; ++t) {
        if (sinpe_array_or_tensor_arg(objs[t], names[t], t == 0, &targets[t]) < 0) {
            return NULL;
        }
    }
    given_rotation g;
    if (sinpe_columns_arg(&c, NULL, layout_obj, NULL, NULL, 2, 1, 0) < 0 ||
        given_rotation_check(&g, targets) < 0 || given_rotation_run(&c, &g) < 0) {
        return NULL;
    }
    Py_INCREF(objs[0]);
    return objs[0];
}

/* A unit axis inserted into a tensor's view at `dim` (torch's unsqueeze:
 * -ndim - 1 <= dim <= ndim), with the stride torch gives it; 0, or -1
 * when dim is out of range or the view would have too many axes. */
static int unsqueezed(sinpe_target *t, long long dim)
{
    const int n = t->array.ndim;
    if (dim < -(long long)n - 1 || dim > n || n + 1 > SINPE_MAX_DIMS) {
        return -1;
    }
    const int at = (int)(dim < 0 ? dim + n + 1 : dim);
    const ptrdiff_t stride = at < n ? t->shape[at] * t->strides[at]
                                    : sinpe_dtype_bytes(t->array.dtype);
    for (int i = n; i > at; --i) {
        t->shape[i] = t->shape[i - 1];
        t->strides[i] = t->strides[i - 1];
    }
    t->shape[at] = 1;
    t->strides[at] = stride;
    t->array.ndim = n + 1;
    return 0;
}

/* The strides in bytes torch gives a new tensor of a's shape (a zero
 * length steps as one) into strides; -1 where the tensor's size would
 * overflow (no such tensor exists). */
static int new_tensor_strides(const sinpe_array *a, ptrdiff_t *strides)
{
    ptrdiff_t step = sinpe_dtype_bytes(a->dtype);
    for (int i = a->ndim - 1; i >= 0; --i) {
        strides[i] = step;
        const ptrdiff_t length = a->shape[i] > 0 ? a->shape[i] : 1;
        if (step > PTRDIFF_MAX / length) {
            return -1;
        }
        step *= length;
    }
    return 0;
}

/* Whether a view has the strides a new tensor of its shape has (HF's
 * rotary modules make their caches so; other strides change the strides
 * torch's elementwise ops give their results, which HF's bits include). */
static int default_strides(const sinpe_array *a)
{
    ptrdiff_t strides[SINPE_MAX_DIMS];
    if (new_tensor_strides(a, strides) < 0) {
        return 0;
    }
    for (int i = 0; i < a->ndim; ++i) {
        if (a->strides[i] != strides[i]) {
            return 0;
        }
    }
    return 1;
}

/* An output given by its address alone: a new contiguous tensor of the
 * source's shape and dtype (sinpe.torch's empty_like), whose shape and
 * strides a decoding step then does not gather in Python (0.3 us). */
static int contiguous_like(PyObject *address_obj, const sinpe_target *source, sinpe_target *out)
{
    const int n = source->array.ndim;
    if (new_tensor_strides(&source->array, out->strides) < 0) {
        PyErr_SetString(PyExc_ValueError, "tensor: too large");
        return -1;
    }
    for (int i = 0; i < n; ++i) {
        out->shape[i] = source->shape[i];
    }
    return sinpe_tensor_memory(address_obj, source->array.dtype, n, out);
}

/* _apply_rotary(q_out, q, k_out, k, cos, sin, unsqueeze_dim, layout, /):
 * HF's apply_rotary_pos_emb of a decoding step in one call: q_out = q's
 * rotation by cos and sin unsqueezed at unsqueeze_dim, and k_out = k's (k
 * and k_out None: q's alone).  Tensors' memory as sinpe_tensor_arg's
 * tuples, an output's also as its address alone (contiguous_like), layout
 * a sinpe_layout code.  True once written; False, with
 * nothing written, where a tensor's address is 0 (a functionalized one),
 * the caches do not have a new tensor's strides,
 * are narrower than the heads or do not broadcast to them without
 * enlarging them, or anything else is not as the kernel's rotation by
 * given caches needs: sinpe.torch then runs HF's expression, which decides
 * (and raises what it raises). */
PyObject *sinpe_py_apply_rotary(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 8) {
        return PyErr_Format(PyExc_TypeError, "_apply_rotary takes 8 arguments, got %zd", nargs);
    }
    const int pairs = args[2] == Py_None ? 1 : 2;
    long long dim, layout;
    sinpe_target targets[2][4]; /* per pair: out, source, cos, sin */
    given_rotation g[2];
    int usable = sinpe_integer_arg(args[6], "unsqueeze_dim", &dim) == 0 &&
                 sinpe_integer_arg(args[7], "layout", &layout) == 0 &&
                 (layout == SINPE_INTERLEAVED || layout == SINPE_CONCATENATED);
    for (int p = 0; usable && p < pairs; ++p) {
        PyObject *objs[4] = {args[2 * p], args[2 * p + 1], args[4], args[5]};
        for (int t = 1; usable && t < 4; ++t) {
            usable = PyTuple_Check(objs[t]) &&
                     sinpe_array_or_tensor_arg(objs[t], "tensor", 0, &targets[p][t]) == 0;
        }
        if (usable && PyLong_Check(objs[0])) {
            usable = contiguous_like(objs[0], &targets[p][1], &targets[p][0]) == 0;
        } else if (usable) {
            usable = PyTuple_Check(objs[0]) &&
                     sinpe_array_or_tensor_arg(objs[0], "tensor", 1, &targets[p][0]) == 0;
        }
        for (int t = 0; usable && t < 4; ++t) { /* a tensor without memory of its own */
            usable = targets[p][t].array.data != NULL;
        }
        usable = usable && unsqueezed(&targets[p][2], dim) == 0 &&
                 unsqueezed(&targets[p][3], dim) == 0 && default_strides(&targets[p][2].array) &&
                 default_strides(&targets[p][3].array) &&
                 given_rotation_check(&g[p], targets[p]) == 0;
    }
    if (!usable) {
        PyErr_Clear();
        Py_RETURN_FALSE;
    }
    sinpe_call c;
    SINPE_CALL_INIT(&c, module);
    c.plan.layout = (sinpe_layout)layout;
    for (int p = 0; p < pairs; ++p) {
        if (given_rotation_run(&c, &g[p]) < 0) {
            return NULL;
        }
    }
    Py_RETURN_TRUE;
}
