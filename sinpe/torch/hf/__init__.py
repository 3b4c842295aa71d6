"""sinpe.torch.hf: sinpe's RoPE inside transformers models, the layer above sinpe.torch's own.

:func:`patch` (exported as ``sinpe.torch.patch``) swaps a loaded model's rotary
modules and its family's apply functions for sinpe's, checked first; ``FAMILIES``
says how each family applies RoPE.  The modules: ``_patch`` (the families, the plan,
the handle), ``_forms`` (each family's apply form with HF's bits), ``_checks`` (what
``patch`` verifies before it changes anything).  They stand on sinpe.torch's modules
(the rotary module, the multi-axis pieces, HF's apply functions); nothing below
imports this package, and nothing here imports transformers.
"""

from sinpe.torch.hf._patch import FAMILIES, Patch, patch
from sinpe.torch.hf._drift import drift

__all__ = ["FAMILIES", "Patch", "drift", "patch"]
