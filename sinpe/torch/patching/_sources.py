"""Modules that return angles for other code to take the cosine of, their rounding
errors kept beside them.

Stable Audio 3's model calls its rotary module once per step for
``cat(outer(arange(n), inv_freq))`` and hands those float32 angles to every attention
processor, which takes their cosine and sine (Ernie-Image's embedder, an ``einsum`` of
the ids and its frequencies, likewise).  The processor's stand-in (the inline form of
:mod:`._exact`) can only take the cosine of the float32 angles it is given: each product
already rounded, up to half an ulp of an angle of hundreds of radians.

:class:`AngleSource` stands in for such a module: its own code runs as it is, followed
by :class:`._pairs.Pairs` (its float32 inputs and the ranges it makes), and each float32
output it returns is the module's own, bit for bit, with the rounding error of the
arithmetic that made it kept beside it (:func:`._pairs.remember`) for as long as the
output lives.  A processor's stand-in that follows that output as an input then starts
from it, and takes the cosine and sine of the angle in double.  Nothing else changes:
code that is given the angles and takes no cosine of them (or a model whose processors
are not patched) sees the module's own values.

The first call checks that the outputs are angles formed by a product: each output's
value plus its error within ``2**-40`` (relative) of the module's code run with its
inputs in double and its products made again in double (:class:`._taint.ExactAngles`).
Otherwise the stand-in gives the module's own outputs with nothing kept, and says why.
"""

from typing import Any, Callable, Optional

import torch
from torch.utils import _pytree

from sinpe.torch.patching import _inline, _pairs
from sinpe.torch.patching._exact import _on_cpu
from sinpe.torch.patching._taint import ExactAngles

_F32 = torch.float32
_RELATIVE = 2.0**-40  # far below the 2**-30 the angle tables promise, far above 2**-48


class AngleSource:
    """Stands in for ``own`` (a module's bound ``forward``), ``cpu_call`` its code on the
    CPU (module docstring); ``on_failure`` is told why a first call's check failed."""

    def __init__(self, own: Callable[..., Any], cpu_call: Callable[..., Any]) -> None:
        self.own = own
        self.cpu_call = cpu_call
        self.checked = False
        self.failed = ""
        self.on_failure: Optional[Callable[[str], None]] = None

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.failed or torch.compiler.is_compiling() or _inline.following():
            # (inside a stand-in that follows values already: its run follows these too)
            return self.own(*args, **kwargs)
        leaves = _pytree.tree_leaves((args, kwargs))
        pairs = _pairs.Pairs([(i, leaf) for i, leaf in enumerate(leaves)
                              if isinstance(leaf, torch.Tensor)], made=True)
        with _inline.ExactTrig(pairs=pairs):
            out = self.own(*args, **kwargs)
        outs = [t for t in _pytree.tree_leaves(out)
                if isinstance(t, torch.Tensor) and t.dtype is _F32]
        lows = [pairs.low(t) for t in outs]
        if not self.checked:
            why = self._differs(args, kwargs, outs, lows)
            if why:
                self.failed = why
                if self.on_failure is not None:
                    self.on_failure(why)
                return out
            self.checked = True
        for tensor, lo in zip(outs, lows):
            if lo is not None:
                _pairs.remember(tensor, lo)
        return out

    def _differs(self, args: tuple[Any, ...], kwargs: dict[str, Any],
                 outs: list[torch.Tensor], lows: list[Optional[torch.Tensor]]) -> str:
        """Why the outputs and their errors do not stand for angles formed in double, or ""."""
        if all(lo is None for lo in lows):
            return "returns no angles it forms by a product"
        cpu_args, cpu_kwargs = _pytree.tree_map(_on_cpu, (args, kwargs))
        inputs = [leaf for leaf in _pytree.tree_leaves((cpu_args, cpu_kwargs))
                  if isinstance(leaf, torch.Tensor) and leaf.dtype is _F32]
        mode = ExactAngles(inputs, layouts=True)
        try:
            with torch.no_grad(), mode:
                exact = self.cpu_call(*cpu_args, **cpu_kwargs)
                wanted = [mode.again(t) for t in _pytree.tree_leaves(exact)
                          if isinstance(t, torch.Tensor) and t.dtype in (_F32, torch.float64)]
        except Exception as exc:
            return f"cannot be run with its inputs' values in double precision ({exc!r})"
        if len(wanted) != len(outs):
            return "returns other tensors when run in double precision"
        for tensor, lo, want in zip(outs, lows, wanted):
            mine = tensor.detach().cpu().double()
            if lo is not None:
                mine = mine + lo.cpu().double()
            want = want.double()
            if mine.shape != want.shape or not bool(
                    ((mine - want).abs() <= _RELATIVE * want.abs() + 2.0**-100).all()):
                return "forms angles that differ from its code's in double beyond rounding"
        return ""
