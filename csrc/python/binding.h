/*
 * What every file of the CPython binding includes first: Python's and
 * NumPy's C APIs (this folder is the only place that includes Python.h),
 * sinpe.h, the state of the module sinpe._core, and the element sizes of
 * sinpe.h's dtype codes.  The binding reaches the library through sinpe.h
 * and call.h alone.
 */
#ifndef SINPE_PYTHON_BINDING_H
#define SINPE_PYTHON_BINDING_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL sinpe_ARRAY_API
#ifndef SINPE_IMPORTS_NUMPY
#define NO_IMPORT_ARRAY /* module.c imports NumPy's API; the other files share it */
#endif
#include <numpy/arrayobject.h>

#include "sinpe.h"

/* The module's state (sinpe._core), set once by its exec function and only
 * read afterwards, so calls on any thread, with or without a GIL, may read
 * it: the ident of the thread that runs Python signal handlers. */
typedef struct {
    unsigned long main_thread;
} sinpe_module_state;

/* The bytes of an element of a sinpe_dtype code (a valid one). */
static inline Py_ssize_t sinpe_dtype_bytes(sinpe_dtype dtype)
{
#define SINPE_DTYPE_BYTES(id, name, bytes) bytes,
    static const unsigned char bytes[] = {SINPE_DTYPES(SINPE_DTYPE_BYTES)};
#undef SINPE_DTYPE_BYTES
    return bytes[dtype];
}

#endif /* SINPE_PYTHON_BINDING_H */
