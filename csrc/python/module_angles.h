/*
 * sinpe._core's evaluation of sinpe.torch's exact angle tables on the CPU
 * (python/module_angles.c), listed by module.c.
 */
#ifndef SINPE_PYTHON_MODULE_ANGLES_H
#define SINPE_PYTHON_MODULE_ANGLES_H

#include "python/binding.h"

PyObject *sinpe_py_angle_values(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif /* SINPE_PYTHON_MODULE_ANGLES_H */
