/*
 * sinpe._core's rotations (python/module_rope.c), listed by module.c.
 */
#ifndef SINPE_PYTHON_MODULE_ROPE_H
#define SINPE_PYTHON_MODULE_ROPE_H

#include "python/binding.h"

PyObject *sinpe_py_rope_(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_rope_into(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_rotate_by(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_apply_rotary(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif /* SINPE_PYTHON_MODULE_ROPE_H */
