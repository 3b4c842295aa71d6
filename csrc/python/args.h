/*
 * Internal: the CPython binding's argument parsing and validation (args.c),
 * used by the Python-facing functions (module.c).  Every helper that fails
 * sets an exception naming the argument and its value and returns -1 (or
 * NULL); nothing here writes an output.
 */
#ifndef SINPE_ARGS_H
#define SINPE_ARGS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_7_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL sinpe_ARRAY_API
#ifndef SINPE_IMPORTS_NUMPY
#define NO_IMPORT_ARRAY /* module.c imports NumPy's API; the other files share it */
#endif
#include <numpy/arrayobject.h>

#include "sinpe.h"

/* Prefixes the pending exception's message with "name: " (the argument it
 * came from). */
void sinpe_prefix_error(const char *name);

/* Scalars.  An integer is int-like and not a bool (NumPy's rule for shapes
 * and axes); a real is any int, float or NumPy real scalar. */
int sinpe_integer_arg(PyObject *obj, const char *name, long long *value);
int sinpe_size_arg(PyObject *obj, const char *name, Py_ssize_t *value);
int sinpe_real_arg(PyObject *obj, const char *name, double *value);
int sinpe_check_base(double n);
/* The positions offset .. offset + rows - 1 are all within the bound. */
int sinpe_check_range(long long offset, Py_ssize_t rows, const char *rows_name);
/* A sequence of integers: exactly *count of them, or any number (1 to
 * SINPE_MAX_DIMS - 1) when *count < 0, which is then set. */
int sinpe_int_sequence_arg(PyObject *obj, const char *name, Py_ssize_t *count, long long *values);

/* The module's state (sinpe._core), set once by its exec function and only
 * read afterwards, so calls on any thread, with or without a GIL, may read
 * it: the ident of the thread that runs Python signal handlers. */
typedef struct {
    unsigned long main_thread;
} sinpe_module_state;

/* One call being assembled: the C plan and the arrays it points into
 * (private snapshots, owned).  Start with SINPE_CALL_INIT (module: the
 * sinpe._core module object the function was called on); release with
 * sinpe_call_release whatever happened. */
typedef struct {
    sinpe_plan plan;
    ptrdiff_t sections[SINPE_MAX_SECTIONS]; /* plan.sections, when given */
    PyArrayObject *freq, *positions, *padding;
    double most;              /* the largest |position| of the call */
    unsigned long main_thread; /* sinpe_module_state's, for run_call */
} sinpe_call;

#define SINPE_CALL_INIT(c, module)                                                           \
    ((c)->plan = sinpe_plan_default(), (c)->freq = (c)->positions = (c)->padding = NULL,     \
     (c)->most = 0.0,                                                                        \
     (c)->main_thread = ((sinpe_module_state *)PyModule_GetState(module))->main_thread)
void sinpe_call_release(sinpe_call *c);

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

/* layout=, schedule= (obj NULL: not given, the plan's value stays), freq=
 * (a snapshot; excludes n= and schedule=) for rows of d columns; rope: RoPE
 * widths and no schedule.  allow_sines_first: the layout only grids have. */
int sinpe_columns_arg(sinpe_call *c, PyObject *n_obj, PyObject *layout_obj, PyObject *schedule_obj,
                      PyObject *freq_obj, Py_ssize_t d, int rope, int allow_sines_first);
/* Range positions along `axis` (Python's: negative counts from the end; not
 * the last, the features) of view from offset: messages name the array
 * `name` and its length `rows_name`. */
int sinpe_axis_positions_arg(sinpe_call *c, const sinpe_array *view, const char *name,
                             long long axis, long long offset, const char *rows_name);
/* Range positions offset + i along axis `axis` of `rows` rows. */
int sinpe_range_arg(sinpe_call *c, int axis, long long offset, Py_ssize_t rows,
                    const char *rows_name);
/* positions= (a snapshot of int64 or float64); *ndim, dims: its shape. */
int sinpe_positions_arg(sinpe_call *c, PyObject *obj, int *ndim, npy_intp *dims);
/* positions= of add_ and rope_: any shape that broadcasts against the rows
 * nrow/rows (NumPy's rule), snapshotted as one position per row.
 * rows_name names the rows' shape in messages ("x.shape[:-1] =").  With
 * sections (sinpe_sections_arg first), a leading axis of one row per
 * section, then a shape that broadcasts: a snapshot of (S, *rows). */
int sinpe_row_positions_arg(sinpe_call *c, PyObject *obj, int nrow, const npy_intp *rows,
                            const char *rows_name);
/* sections= and sections_layout= (args_sections.c) for m frequency pairs
 * (m_name: where m comes from, for messages: "rotary_dim // 2"): a
 * sequence of counts >= 0 summing to m, and "contiguous" or "interleaved"
 * whose rule the counts satisfy.  sections_obj NULL or None: none (then
 * sections_layout must not be given either). */
int sinpe_sections_arg(sinpe_call *c, PyObject *sections_obj, PyObject *layout_obj, Py_ssize_t m,
                       const char *m_name);
/* positions of ndim/dims (with sections given): a leading axis of one row
 * per section, or a ValueError naming both. */
int sinpe_section_axis_check(const sinpe_call *c, int ndim, const npy_intp *dims);
/* An argument that names one of `count` choices: *choice its index (obj
 * NULL: not given, *choice unchanged). */
int sinpe_choice_arg(PyObject *obj, const char *name, const char *const *choices, int count,
                     int *choice);
/* padding= (a snapshot of bools) of exactly ndim/dims. */
int sinpe_padding_arg(sinpe_call *c, PyObject *obj, int ndim, const npy_intp *dims,
                      const char *expected_name);
/* Once the positions are known: explicit frequencies keep every angle in
 * the range where sincos is exact. */
int sinpe_check_angles(const sinpe_call *c);

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
/* view's strides broadcast to the shape ndim/dims (NumPy's rule: length-1
 * and missing leading axes get stride 0) into strides; a ValueError naming
 * name and target_name when they do not broadcast. */
int sinpe_broadcast_strides(const sinpe_array *view, const char *name, int ndim,
                            const npy_intp *dims, const char *target_name, ptrdiff_t *strides);
/* out= of shape ndim/dims (a new reference to it), or a new array of dtype=
 * (default float32).  expected: the shape as messages should name it (e.g.
 * "(L=5, d=4)"), or NULL for the tuple.  *fresh: the array is new. */
PyArrayObject *sinpe_output_arg(PyObject *out_obj, PyObject *dtype_obj, const char *name, int ndim,
                                const npy_intp *dims, const char *expected, sinpe_target *target,
                                int *fresh);
/* The two outputs of one call may not share memory. */
int sinpe_check_disjoint(const sinpe_array *a, const char *a_name, const sinpe_array *b,
                         const char *b_name);
/* scale= as the add uses it: x.dtype.type(scale) for a NumPy array, the
 * float32 value for a torch half-type tensor; finite after that rounding. */
int sinpe_scale_arg(PyObject *obj, const sinpe_target *x, double *scale);

/* Runs the plan without the GIL (Ctrl-C stops stores; adds run to the end)
 * and maps its status to an exception.  0 or -1. */
int sinpe_run_call(sinpe_call *c, const sinpe_array *out, const sinpe_array *out2, int fresh);

/* The ident of the thread that runs Python signal handlers (module exec). */
int sinpe_find_main_thread(unsigned long *ident);

/* The Python-facing rotations (module_rope.c), listed by module.c. */
PyObject *sinpe_py_rope_(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_rope_into(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_rotate_by(PyObject *module, PyObject *args, PyObject *kwargs);
PyObject *sinpe_py_apply_rotary(PyObject *module, PyObject *const *args, Py_ssize_t nargs);

#endif /* SINPE_ARGS_H */
