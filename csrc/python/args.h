/*
 * The call being assembled by a binding function (python/args.c): the C
 * plan and the snapshots it points into, its frequencies and columns, the
 * checks that need every argument, and its run without the GIL.  Every
 * helper that fails sets an exception naming the argument and its value
 * and returns -1 (or NULL); nothing here writes an output.
 */
#ifndef SINPE_PYTHON_ARGS_H
#define SINPE_PYTHON_ARGS_H

#include "python/arrays.h"
#include "python/binding.h"

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

/* A private copy of an array the kernel reads (positions, padding, freq),
 * of type_num, taken while the GIL is held: an input that shares memory
 * with an output, or that another thread writes while the kernel runs
 * without the GIL, would otherwise change under the kernel. */
PyArrayObject *sinpe_snapshot(PyObject *array, int type_num, const char *name);
/* A real (integer or float) NumPy array from any array-like, or a
 * TypeError naming the argument (what: what it must be) and its dtype. */
PyArrayObject *sinpe_real_array_arg(PyObject *obj, const char *name, const char *what);

/* layout=, schedule= (obj NULL: not given, the plan's value stays), freq=
 * (a snapshot; excludes n= and schedule=) for rows of d columns; rope: RoPE
 * widths and no schedule.  allow_sines_first: the layout only grids have. */
int sinpe_columns_arg(sinpe_call *c, PyObject *n_obj, PyObject *layout_obj, PyObject *schedule_obj,
                      PyObject *freq_obj, Py_ssize_t d, int rope, int allow_sines_first);
/* Once the positions are known: explicit frequencies keep every angle in
 * the range where sincos is exact. */
int sinpe_check_angles(const sinpe_call *c);
/* scale= as the add uses it: x.dtype.type(scale) for a NumPy array, the
 * float32 value for a torch half-type tensor; finite after that rounding. */
int sinpe_scale_arg(PyObject *obj, const sinpe_target *x, double *scale);

/* Runs the plan without the GIL (Ctrl-C stops stores; adds run to the end)
 * and maps its status to an exception.  0 or -1. */
int sinpe_run_call(sinpe_call *c, const sinpe_array *out, const sinpe_array *out2, int fresh);

/* The ident of the thread that runs Python signal handlers (module exec). */
int sinpe_find_main_thread(unsigned long *ident);

#endif /* SINPE_PYTHON_ARGS_H */
