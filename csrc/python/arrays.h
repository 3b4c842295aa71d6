/*
 * The array arguments of the binding's functions (python/arrays.c): the
 * arrays sinpe writes in place or reads, torch tensors' memory, new
 * outputs.  Every helper that fails sets an exception naming the argument
 * and returns -1 (or NULL); nothing here writes an output.
 */
#ifndef SINPE_PYTHON_ARRAYS_H
#define SINPE_PYTHON_ARRAYS_H

#include "python/binding.h"

/* An array sinpe writes, as the kernel will see it.  Its shape and strides
 * are copies, not NumPy's own arrays: Python code that runs later in the
 * same call (an argument's __index__, __float__ or dtype conversion), or
 * another thread, may set the array's .shape or .dtype, which frees NumPy's
 * copies (and NumPy hands the memory to the next array).  The scale of an
 * add is rounded by scalar_type, the scalar type of the dtype the element
 * type was taken from; borrowed, as every dtype's scalar type is
 * registered with NumPy and never freed. */
typedef struct {
    sinpe_array array;
    ptrdiff_t shape[SINPE_MAX_DIMS], strides[SINPE_MAX_DIMS];
    PyObject *scalar_type;
    int torch_scalar; /* a torch half-type tensor's memory (see sinpe_writable_arg) */
} sinpe_target;

/* An array sinpe writes in place (out=, embeddings): a supported dtype,
 * writeable, no two elements sharing memory.  Fills the target;
 * torch_scalar: the array is a torch tensor's half-type memory, whose
 * scalars torch rounds to float32 (not to the dtype as NumPy does). */
int sinpe_writable_arg(PyObject *obj, const char *name, sinpe_target *target);
/* A torch tensor's memory as sinpe.torch hands it over (a CPU tensor whose
 * memory holds its values, alive for the call): its address, shape and
 * strides (tuples; strides in elements) and a sinpe_dtype code.  Checked
 * like an array (writing: no two elements sharing memory).  torch's scalar
 * rule. */
int sinpe_tensor_arg(PyObject *address_obj, PyObject *shape_obj, PyObject *strides_obj,
                     PyObject *dtype_obj, const char *name, int writing, sinpe_target *target);
/* The rest of a tensor's target once its shape and strides (in bytes) are
 * in target->shape/strides: the memory at address_obj, ndim axes, dtype,
 * torch's scalar rule. */
int sinpe_tensor_memory(PyObject *address_obj, sinpe_dtype dtype, int ndim, sinpe_target *target);
/* An array sinpe only reads (a rotation's source and given caches): a
 * supported dtype, any strides; fills the target (shape and strides copied,
 * as sinpe_writable_arg's). */
int sinpe_readable_arg(PyObject *obj, const char *name, sinpe_target *target);
/* The array arguments of the private entries sinpe.torch calls: an array
 * (as sinpe_writable_arg or sinpe_readable_arg), or a tensor's memory as
 * the tuple (address, shape, strides, dtype code) of sinpe_tensor_arg: on
 * a decoding step, making NumPy views of the tensors costs more than the
 * rotation. */
int sinpe_array_or_tensor_arg(PyObject *obj, const char *name, int writing,
                              sinpe_target *target);
/* out= of shape ndim/dims (a new reference to it), or a new array of dtype=
 * (default float32).  expected: the shape as messages should name it (e.g.
 * "(L=5, d=4)"), or NULL for the tuple.  *fresh: the array is new. */
PyArrayObject *sinpe_output_arg(PyObject *out_obj, PyObject *dtype_obj, const char *name, int ndim,
                                const npy_intp *dims, const char *expected, sinpe_target *target,
                                int *fresh);
/* The two outputs of one call may not share memory. */
int sinpe_check_disjoint(const sinpe_array *a, const char *a_name, const sinpe_array *b,
                         const char *b_name);

/* NumPy's broadcasting of `shape` (ndim axes, byte strides) to `target`,
 * read-only: the strides of the result into out, or -1 (no exception) when
 * it does not broadcast; and the ValueError that says so, naming the
 * arrays name and target_name. */
int sinpe_broadcast_to(int ndim, const npy_intp *shape, const npy_intp *strides, int target_ndim,
                       const npy_intp *target, ptrdiff_t *out);
void sinpe_broadcast_error(const char *name, int ndim, const npy_intp *dims,
                           const char *target_name, int target_ndim, const npy_intp *target);
/* view's strides broadcast to the shape ndim/dims (length-1 and missing
 * leading axes get stride 0) into strides, or that ValueError. */
int sinpe_broadcast_strides(const sinpe_array *view, const char *name, int ndim,
                            const npy_intp *dims, const char *target_name, ptrdiff_t *strides);

#endif /* SINPE_PYTHON_ARRAYS_H */
