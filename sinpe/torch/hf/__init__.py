"""sinpe.torch.hf: sinpe's RoPE inside transformers models, the layer above sinpe.torch's own.

:func:`patch` (exported as ``sinpe.torch.patch``) swaps a loaded model's rotary
modules, sin/cos tables and apply functions for sinpe's, each recognised by what it
does and checked first.  The modules: ``_discover`` (where a model keeps its RoPE),
``_forms`` (:data:`FORMS`: the ways of applying RoPE, with HF's bits), ``_probes``
(the inputs functions are held against the forms on), ``_checks`` (what ``patch``
verifies before it changes anything), ``_patch`` (the plan and the handle), ``_drift``
(:func:`drift`: what exact angles change in a model's outputs).  They
stand on sinpe.torch's modules (the rotary module, the multi-axis pieces, HF's apply
functions); nothing below imports this package, and nothing here imports
transformers.
"""

from sinpe.torch.hf._drift import drift
from sinpe.torch.hf._forms import FORMS
from sinpe.torch.hf._patch import Patch, patch

__all__ = ["FORMS", "Patch", "drift", "patch"]
