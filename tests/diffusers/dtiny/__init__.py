"""Tiny random-init instances of every diffusers model class with positional code.

    from dtiny import build, positional_classes
    model, info = build("FluxTransformer2DModel")   # float32, eval mode, seeded
    model(**info["inputs"])                          # a forward that runs (info["forward_ok"])

``positional_classes()`` lists the model classes of the installed diffusers whose code
has positional code (timestep embeddings, sin-cos tables, rotary embeddings, Fourier
projections), found by walking the code an instance holds (:mod:`.discover`, rule in
its docstring); ``positional_kinds(name)`` says which kinds and where.  ``build(name,
seed=0)`` shrinks the class's default config by generic rules written against the names
of config keys (no per-model values: ``SHRINK_RULES``, ``FILL_RULES``), builds it, and
finds inputs for one forward (``INPUT_RULES``, ``PROBE_RULES``); ``build``'s docstring
lists every key of ``info``.  Nothing default-sized is ever allocated: configs are tried
on the meta device first.

The package is split by idea: ``codewalk`` (reading code: sites and their kinds),
``discover`` (which classes, module trees), ``keys`` (config keys by meaning), ``shrink``
(the config rules), ``defaults`` (default configs and the repairs of those that cannot
build), ``configs`` (the tiny config search), ``docshapes`` (the shapes a forward's
docstring gives its parameters), ``caller`` (inputs a pipeline computes, such as rotary
tables, made by the same call), ``inputs`` (forward inputs by parameter name), ``probe``
(a forward that runs: layouts and error-driven repairs) and ``builder`` (``build``, the
forward-time config repairs, modules shared from a partner transformer, session hygiene,
the derived-positional check).  It is imported as ``dtiny``
(tests/diffusers on sys.path) so as not to clash with tests/families' ``tiny``.
"""
from .builder import build, derived_changes
from .defaults import FILL_RULES
from .discover import model_classes, positional_classes, positional_kinds
from .inputs import BATCH, FRAMES, GRID, INPUT_RULES, TIMESTEPS, TOKENS
from .probe import PROBE_RULES
from .shrink import HEADS, SHRINK_RULES

__all__ = [
    "BATCH", "FILL_RULES", "FRAMES", "GRID", "HEADS", "INPUT_RULES", "PROBE_RULES",
    "SHRINK_RULES", "TIMESTEPS", "TOKENS", "build", "derived_changes", "model_classes",
    "positional_classes", "positional_kinds",
]
