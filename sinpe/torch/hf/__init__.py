"""sinpe.torch.hf: sinpe's RoPE inside transformers models, the adapter of ``patch`` and
what exact angles change in a model (``drift``).

``_adapter`` finds a transformers model's rotary modules, apply functions and sin/cos
tables and plans sinpe's stand-ins (``sinpe.torch.patch`` applies the plan, by the
machinery of :mod:`sinpe.torch.patching`), ``_checks`` verifies a rotary module's
stand-in, ``_drift`` is :func:`drift`.  They stand on sinpe.torch's modules (the rotary
module, the multi-axis pieces, HF's apply functions) and on :mod:`sinpe.torch.patching`;
nothing below imports this package, and nothing here imports transformers.
"""

from sinpe.torch.hf._drift import drift

__all__ = ["drift"]
