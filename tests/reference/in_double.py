"""A model's own code with every float32 value computed in float64: the exact reference
the batteries of tests/families and tests/diffusers hold float32 models against.

:class:`InDouble` makes every float32 (complex64) value made or cast inside in float64
(complex128): tensor factories, ``.float()``, ``.to(dtype)``, ``.type(dtype)`` and any
``dtype=``.  Run in a model converted with ``.double()``, whose positional code (rotary
modules, timestep embeddings, sin-cos tables) makes float32 values of its own, it gives
that code's function with exact angles, and nothing of sinpe is in it.
"""
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

_WIDE = {torch.float32: torch.float64, torch.complex64: torch.complex128}


class InDouble(TorchFunctionMode):
    """Every float32 (complex64) value made or cast inside is made in float64 (complex128)."""

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.float:
            return args[0].double()
        if func in (torch.Tensor.to, torch.Tensor.type):
            args = tuple(_WIDE.get(a, a) if isinstance(a, torch.dtype) else a for a in args)
        if isinstance(kwargs.get("dtype"), torch.dtype):
            kwargs["dtype"] = _WIDE.get(kwargs["dtype"], kwargs["dtype"])
        result = func(*args, **kwargs)
        if (func in _FACTORIES and isinstance(result, torch.Tensor)
                and result.dtype in _WIDE and "dtype" not in kwargs):
            result = result.to(_WIDE[result.dtype])
        return result


_FACTORIES = {torch.arange, torch.zeros, torch.ones, torch.full, torch.tensor, torch.linspace,
              torch.empty}
