"""A module's own code with the values made from its inputs in double precision.

A positional module (a timestep embedding, a rotary module of grid positions) forms
angles from two things: positions that come from its inputs (timesteps, ids, grid
indices) and frequencies that it computes itself from constants (in float32 for
most, float64 for some, or its buffers and parameters).  sinpe's promise for such a
module is the model's own frequencies with the angles exact: :class:`FromInputsInDouble`
runs the module's code with every value computed from an input (``tainted``) made in
float64 (complex128), and every other value as the code makes it.  So a float32
frequency stays the model's float32 frequency; its product with a position is exact
(24 + 24 bits fit in a double's 53) or rounded once in double; cos and sin are taken
in double; the caller rounds the outputs once.

Which values change: any tensor that an operation makes from a tainted operand is
tainted, and float32, float16 and bfloat16 operands of such an operation (tainted or
not) are widened to float64 first, complex64 to complex128; ``.float()``, ``.half()``,
``.to(dtype)``, ``.type(dtype)`` and ``.type_as(y)`` of a tainted value keep it in
double; a ``dtype=`` of such an operation is widened alike.  Nothing else changes.  The
largest angle given to ``cos``/``sin``/``polar`` (or ``exp`` of an imaginary value) is
recorded: it bounds how far the code's own float32 result may be from the double one.
"""

from typing import Any, Callable, Iterable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree

_WIDER = {torch.float32: torch.float64, torch.float16: torch.float64,
          torch.bfloat16: torch.float64, torch.complex64: torch.complex128,
          torch.complex32: torch.complex128}
_NARROWING = {torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16}
_CASTS = {torch.Tensor.to, torch.Tensor.type}
_ANGLES = {torch.cos, torch.sin, torch.Tensor.cos, torch.Tensor.sin}
_POLAR = {torch.polar}
_EXP = {torch.exp, torch.Tensor.exp}


def _wide(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return _WIDER.get(value, value)
    if isinstance(value, torch.Tensor) and value.dtype in _WIDER:
        return value.to(_WIDER[value.dtype])
    return value


class FromInputsInDouble(TorchFunctionMode):
    """Values made from ``inputs`` (and from values made from them) in double; see the
    module docstring.  ``angle``: the largest angle given to a trigonometric function."""

    def __init__(self, inputs: Iterable[torch.Tensor]) -> None:
        super().__init__()
        self._kept: list[torch.Tensor] = []  # (ids stay unique while the mode runs)
        self._ids: set[int] = set()
        for tensor in inputs:
            self._taint(tensor)
        self.angle = 0.0

    def _taint(self, tensor: torch.Tensor) -> None:
        self._kept.append(tensor)
        self._ids.add(id(tensor))

    def tainted(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and id(value) in self._ids

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        leaves = _pytree.tree_leaves((args, kwargs))
        if not any(self.tainted(leaf) for leaf in leaves):
            return func(*args, **kwargs)
        if func in _NARROWING:
            out = _wide(args[0]) if args[0].is_floating_point() else func(*args, **kwargs)
        elif func is torch.Tensor.type_as:
            out = args[0].to(_wide(args[1].dtype))
        else:
            if func in _CASTS:
                args = tuple(_wide(a) if isinstance(a, torch.dtype) else a for a in args)
            args, kwargs = _pytree.tree_map(_wide, (args, kwargs))
            self._record(func, args)
            out = func(*args, **kwargs)
        for leaf in _pytree.tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._taint(leaf)
        return out

    def _record(self, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """The largest angle of a trigonometric call (a value read: the caller's check
        needs it, on the CPU)."""
        angles = None
        if func in _ANGLES:
            angles = args[0]
        elif func in _POLAR:
            angles = args[1]
        elif func in _EXP and isinstance(args[0], torch.Tensor) and args[0].is_complex():
            angles = args[0].imag
        if isinstance(angles, torch.Tensor) and angles.numel() and not angles.is_complex():
            self.angle = max(self.angle, float(angles.detach().abs().max()))
