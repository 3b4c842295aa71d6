/*
 * sinpe._core's tables (python/module_tables.c), listed by module.c.
 */
#ifndef SINPE_PYTHON_MODULE_TABLES_H
#define SINPE_PYTHON_MODULE_TABLES_H

#include "python/binding.h"

PyObject *sinpe_py_encode(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_encode_at(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_encode_grid(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_add_(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_add_tensor(PyObject *module, PyObject *const *args, Py_ssize_t nargs);
PyObject *sinpe_py_rope(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_frequencies(PyObject *module, PyObject *args, PyObject *kwargs);

#endif /* SINPE_PYTHON_MODULE_TABLES_H */
