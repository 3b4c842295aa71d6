/*
 * Scalar arguments of the binding's functions (python/args_scalars.c).
 * Every helper that fails sets an exception naming the argument and its
 * value and returns -1.
 */
#ifndef SINPE_PYTHON_ARGS_SCALARS_H
#define SINPE_PYTHON_ARGS_SCALARS_H

#include "python/binding.h"

/* Prefixes the pending exception's message with "name: " (the argument it
 * came from). */
void sinpe_prefix_error(const char *name);

/* An integer is int-like and not a bool (NumPy's rule for shapes and
 * axes); a real is any int, float or NumPy real scalar. */
int sinpe_integer_arg(PyObject *obj, const char *name, long long *value);
int sinpe_size_arg(PyObject *obj, const char *name, Py_ssize_t *value);
int sinpe_real_arg(PyObject *obj, const char *name, double *value);
int sinpe_check_base(double n);
/* The positions offset .. offset + rows - 1 are all within the bound. */
int sinpe_check_range(long long offset, Py_ssize_t rows, const char *rows_name);
/* A sequence of integers: exactly *count of them, or any number (1 to
 * SINPE_MAX_DIMS - 1) when *count < 0, which is then set. */
int sinpe_int_sequence_arg(PyObject *obj, const char *name, Py_ssize_t *count, long long *values);
/* An argument that names one of `count` choices: *choice its index (obj
 * NULL: not given, *choice unchanged). */
int sinpe_choice_arg(PyObject *obj, const char *name, const char *const *choices, int count,
                     int *choice);

#endif /* SINPE_PYTHON_ARGS_SCALARS_H */
