/*
 * Sections of a call (python/args_sections.c): multi-axis RoPE's counts
 * and layout, and the leading axis they give the positions.  Every helper
 * that fails sets an exception naming the argument and its value and
 * returns -1.
 */
#ifndef SINPE_PYTHON_ARGS_SECTIONS_H
#define SINPE_PYTHON_ARGS_SECTIONS_H

#include "python/args.h"
#include "python/binding.h"

/* sections= and sections_layout= for m frequency pairs (m_name: where m
 * comes from, for messages: "rotary_dim // 2"): a sequence of counts >= 0
 * summing to m, and "contiguous" or "interleaved" whose rule the counts
 * satisfy.  sections_obj NULL or None: none (then sections_layout must not
 * be given either). */
int sinpe_sections_arg(sinpe_call *c, PyObject *sections_obj, PyObject *layout_obj, Py_ssize_t m,
                       const char *m_name);
/* positions of ndim/dims (with sections given): a leading axis of one row
 * per section, or a ValueError naming both. */
int sinpe_section_axis_check(const sinpe_call *c, int ndim, const npy_intp *dims);

#endif /* SINPE_PYTHON_ARGS_SECTIONS_H */
