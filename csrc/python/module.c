/*
 * The module sinpe._core: its functions (the tables' in module_tables.c,
 * the rotations' in module_rope.c, their docstrings in docstrings.h), the
 * threads, caches and SIMD level it sets and reports, its constants, and
 * its initialisation (NumPy's API, SINPE_NUM_THREADS and SINPE_SIMD).
 */
#define SINPE_IMPORTS_NUMPY
#include "python/binding.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "call.h"
#include "python/args.h"
#include "python/args_scalars.h"
#include "python/docstrings.h"
#include "python/module_angles.h"
#include "python/module_rope.h"
#include "python/module_tables.h"

static PyObject *set_num_threads(PyObject *Py_UNUSED(module), PyObject *arg)
{
    long long threads;
    if (sinpe_integer_arg(arg, "threads", &threads) < 0) {
        return NULL;
    }
    if (threads < 1 || threads > SINPE_MAX_THREADS) {
        return PyErr_Format(PyExc_ValueError, "threads must be between 1 and %d, got threads=%lld",
                            SINPE_MAX_THREADS, threads);
    }
    (void)sinpe_set_num_threads((int)threads); /* in range: cannot fail */
    Py_RETURN_NONE;
}

static PyObject *get_num_threads(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    return PyLong_FromLong(sinpe_get_num_threads());
}

/* _share_openmp(library): large calls on a loaded OpenMP runtime's threads
 * (sinpe.torch shares torch's), or on sinpe's own again with None. */
static PyObject *share_openmp(PyObject *Py_UNUSED(module), PyObject *arg)
{
    if (arg == Py_None) {
        (void)sinpe_share_openmp(NULL); /* cannot fail */
        Py_RETURN_NONE;
    }
    PyObject *path = NULL;
    if (!PyUnicode_Check(arg)) {
        return PyErr_Format(PyExc_TypeError, "library must be a str or None, got %.200s",
                            Py_TYPE(arg)->tp_name);
    }
    if (!PyUnicode_FSConverter(arg, &path)) {
        return NULL; /* a NUL in it, or not encodable */
    }
    const int status = sinpe_share_openmp(PyBytes_AS_STRING(path));
    Py_DECREF(path);
    if (status != SINPE_OK) {
        return PyErr_Format(PyExc_ValueError,
                            "library=%R: no library of that name is loaded with OpenMP's "
                            "GOMP_parallel and omp_get_thread_num", arg);
    }
    Py_RETURN_NONE;
}

static PyObject *sharing_openmp(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    return PyBool_FromLong(sinpe_sharing_openmp());
}

static PyObject *clear_cache(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    sinpe_clear_caches();
    Py_RETURN_NONE;
}

/* (tables, bytes) that the cache of made tables keeps (tests). */
static PyObject *row_cache(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    int tables;
    size_t bytes;
    sinpe_kept_tables(&tables, &bytes);
    return Py_BuildValue("(in)", tables, (Py_ssize_t)bytes);
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

/* SINPE_SIMD, applied at import: a name that is not a level, or a level
 * this CPU lacks, warns and the best available level runs instead. */
static int simd_from_environment(void)
{
    const char *text = getenv("SINPE_SIMD");
    if (sinpe_simd_select(text) == SINPE_OK) {
        return 0;
    }
    char levels[256] = ""; /* every level's name, in order */
    for (int level = 0; level < SINPE_SIMD_LEVELS; ++level) {
        snprintf(levels + strlen(levels), sizeof levels - strlen(levels), "%s%s",
                 level > 0 ? ", " : "", sinpe_simd_name(level));
    }
    return PyErr_WarnFormat(PyExc_RuntimeWarning, 1,
                            "ignoring SINPE_SIMD=%.100s: expected one of %s that this CPU has; "
                            "using %s",
                            text, levels, sinpe_simd_name(sinpe_simd_level()));
}

/* The SIMD level in use and the levels this CPU has, by name (show_config). */
static PyObject *simd_levels(PyObject *Py_UNUSED(module), PyObject *Py_UNUSED(unused))
{
    PyObject *available = PyList_New(0);
    for (int level = 0; available != NULL && level < SINPE_SIMD_LEVELS; ++level) {
        PyObject *name = sinpe_simd_available(level)
                             ? PyUnicode_FromString(sinpe_simd_name(level))
                             : NULL;
        if (sinpe_simd_available(level) && (name == NULL || PyList_Append(available, name) < 0)) {
            Py_CLEAR(available);
        }
        Py_XDECREF(name);
    }
    if (available == NULL) {
        return NULL;
    }
    return Py_BuildValue("(sN)", sinpe_simd_name(sinpe_simd_level()), available);
}

/* Runs the loops of another level from now on (tests compare the levels'
 * bits in one process); True if the CPU has it, else the best level runs
 * and the result is False. */
static PyObject *select_simd(PyObject *Py_UNUSED(module), PyObject *arg)
{
    const char *name = PyUnicode_AsUTF8(arg);
    if (name == NULL) {
        return NULL;
    }
    return PyBool_FromLong(sinpe_simd_select(name) == SINPE_OK);
}

/* The compiler that built the extension, as show_config reports it. */
static const char *compiler_name(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#elif defined(_MSC_VER)
#define SINPE_STRINGIFY(x) #x
#define SINPE_VERSION_TEXT(x) SINPE_STRINGIFY(x)
    return "MSVC " SINPE_VERSION_TEXT(_MSC_FULL_VER);
#else
    return "unknown C compiler";
#endif
}

#define KEYWORDS_METHOD(name)                                                                \
    {#name, (PyCFunction)(void (*)(void))sinpe_py_##name, METH_VARARGS | METH_KEYWORDS, name##_doc}

static PyMethodDef core_methods[] = {
    KEYWORDS_METHOD(encode),
    KEYWORDS_METHOD(add_),
    KEYWORDS_METHOD(encode_at),
    KEYWORDS_METHOD(rope),
    KEYWORDS_METHOD(encode_grid),
    KEYWORDS_METHOD(rope_),
    {"_rope_into", (PyCFunction)(void (*)(void))sinpe_py_rope_into, METH_VARARGS | METH_KEYWORDS,
     "_rope_into(out, source, n=10000.0, *, offset=0, axis=-2, positions=None, "
     "layout='concatenated', freq=None, rotary_dim=None, scale=1.0, exact=False, "
     "inverse=False, sections=None, sections_layout='contiguous')\n--\n\nrope_ of source "
     "written into out (source None: in place); inverse: by the negated angles "
     "(sinpe.torch.rope's backward pass).  out None: only check the arguments against "
     "source's shape and dtype.  out and source: arrays, or a tensor's memory as "
     "(address, shape, strides, dtype code)."},
    {"_rotate_by", (PyCFunction)(void (*)(void))sinpe_py_rotate_by, METH_VARARGS | METH_KEYWORDS,
     "_rotate_by(out, source, cos, sin, *, layout='concatenated')\n--\n\nout = source * cos "
     "+ rotate_half(source) * sin, cos and sin broadcast (sinpe.torch.apply_rotary_pos_emb).  "
     "Each an array, or a tensor's memory as (address, shape, strides, dtype code)."},
    {"_apply_rotary", (PyCFunction)(void (*)(void))sinpe_py_apply_rotary, METH_FASTCALL,
     "_apply_rotary(q_out, q, k_out, k, cos, sin, unsqueeze_dim, layout, /)\n--\n\n"
     "sinpe.torch.apply_rotary_pos_emb's decoding step on tensors' memory (private): True "
     "once written, False (nothing written) where HF's expression must decide; an output "
     "may be given by its address alone (a new contiguous tensor of its source's shape)."},
    {"set_num_threads", set_num_threads, METH_O, set_num_threads_doc},
    {"get_num_threads", get_num_threads, METH_NOARGS, get_num_threads_doc},
    {"clear_cache", clear_cache, METH_NOARGS, clear_cache_doc},
    {"_share_openmp", share_openmp, METH_O,
     "_share_openmp(library, /)\n--\n\nRuns large calls on the threads of the loaded OpenMP "
     "runtime `library` (a path; sinpe.torch shares torch's), or on sinpe's own with None."},
    {"_sharing_openmp", sharing_openmp, METH_NOARGS,
     "_sharing_openmp()\n--\n\nWhether large calls run on a shared OpenMP runtime's threads."},
    {"_row_cache", row_cache, METH_NOARGS,
     "_row_cache()\n--\n\n(tables, bytes) kept for adds (tests)."},
    {"_add_tensor", (PyCFunction)(void (*)(void))sinpe_py_add_tensor, METH_FASTCALL,
     "_add_tensor(address, shape, strides, dtype, n, offset, axis, scale, /)\n--\n\n"
     "sinpe.torch's add_ on a CPU tensor's memory (private)."},
    {"_angle_values", (PyCFunction)(void (*)(void))sinpe_py_angle_values, METH_FASTCALL,
     "_angle_values(positions, per_pair, high, low, fractions, scalings, limit, half, /)\n"
     "--\n\nsinpe.torch's exact angle tables evaluated on the CPU (private): the [cos, "
     "sin] of each pair at positions, float32 (rounded to odd with half)."},
    {"_simd_levels", simd_levels, METH_NOARGS,
     "_simd_levels()\n--\n\n(level in use, [levels this CPU has]), by SINPE_SIMD's names."},
    {"_select_simd", select_simd, METH_O,
     "_select_simd(level, /)\n--\n\nRuns another SIMD level's loops from now on (tests)."},
    {"_frequencies", (PyCFunction)(void (*)(void))sinpe_py_frequencies,
     METH_VARARGS | METH_KEYWORDS, frequencies_doc},
    {NULL, NULL, 0, NULL},
};

static int add_float(PyObject *module, const char *name, double value)
{
    PyObject *number = PyFloat_FromDouble(value);
    if (number == NULL) {
        return -1;
    }
    const int added = PyModule_AddObjectRef(module, name, number);
    Py_DECREF(number);
    return added;
}

/* _dtype_codes: sinpe.h's dtype codes by their names ("float16": 0, ...),
 * which sinpe.torch passes with a tensor's memory. */
static int add_dtype_codes(PyObject *module)
{
#define SINPE_DTYPE_ENTRY(id, name, bytes) {#name, SINPE_##id},
    static const struct {
        const char *name;
        int code;
    } dtypes[] = {SINPE_DTYPES(SINPE_DTYPE_ENTRY)};
#undef SINPE_DTYPE_ENTRY
    PyObject *codes = PyDict_New();
    int status = codes != NULL ? 0 : -1;
    for (size_t i = 0; status == 0 && i < sizeof dtypes / sizeof dtypes[0]; ++i) {
        PyObject *code = PyLong_FromLong(dtypes[i].code);
        status = code != NULL ? PyDict_SetItemString(codes, dtypes[i].name, code) : -1;
        Py_XDECREF(code);
    }
    if (status == 0) {
        status = PyModule_AddObjectRef(module, "_dtype_codes", codes);
    }
    Py_XDECREF(codes);
    return status;
}

static int core_exec(PyObject *module)
{
    sinpe_module_state *state = PyModule_GetState(module);
    if (PyArray_ImportNumPyAPI() < 0 || sinpe_find_main_thread(&state->main_thread) < 0 ||
        PyModule_AddIntConstant(module, "MAX_POSITION", (long)SINPE_MAX_POSITION) < 0 ||
        PyModule_AddIntConstant(module, "MAX_THREADS", SINPE_MAX_THREADS) < 0 ||
        add_float(module, "MIN_BASE", SINPE_MIN_BASE) < 0 ||
        add_float(module, "MAX_BASE", SINPE_MAX_BASE) < 0 ||
        add_float(module, "_MAX_ANGLE", SINPE_MAX_ANGLE) < 0 ||
        PyModule_AddStringConstant(module, "_compiler", compiler_name()) < 0 ||
        add_dtype_codes(module) < 0 ||
        threads_from_environment() < 0 || simd_from_environment() < 0) {
        return -1;
    }
    return 0;
}

static PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
#ifdef Py_mod_gil
    /* Free-threaded builds may run the functions without a GIL: the binding
     * keeps no borrowed reference across code that can change what it points
     * to (args*.c: sequences copied to tuples, arrays' shapes copied, dtype
     * descriptors held), its module state is written only by core_exec, and
     * the kernels already run without the GIL (core/threads.c, core/table.c
     * and core/row_cache.c lock and use atomics; kernels/dispatch.c's level
     * is atomic). */
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "sinpe._core",
    .m_doc = "C kernels of sinpe: sinusoidal positional encodings into NumPy arrays.",
    .m_size = sizeof(sinpe_module_state),
    .m_methods = core_methods,
    .m_slots = core_slots,
};

PyMODINIT_FUNC PyInit__core(void)
{
    return PyModuleDef_Init(&core_module);
}
