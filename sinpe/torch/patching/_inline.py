"""Code that takes the cosine and sine of the angles it is given, with those two exact.

An attention processor that rotates its queries and keys inline (Stable Audio 3's,
Ernie-Image's) takes ``cos`` and ``sin`` of an angle tensor it is given, and does the
rest of its work (projections, the rotation's products, attention) on values that change
at every step.  Its stand-in cannot keep outputs, nor compute them on the host in double
at every step.  :class:`ExactTrig` runs such code as it is, on its own device, with each
``cos`` and ``sin`` of a float32 (float16, bfloat16) tensor replaced by the exact value
of the angle given, rounded once: :class:`sinpe.torch._angles.AngleTables` with the one
frequency 1 and the angles as real positions (the kernel on the CPU, device operations
elsewhere; the same bits on every device, no host read, no float64).  An angle beyond
the tables' range (``2**24`` radians) or not finite keeps the code's own value.

Only cos and sin change: the angles stay what the code was given (float32 values, drift
and all: the code that made them is not this one), or with ``pairs``
(:class:`._pairs.Pairs`) what the code formed from its inputs plus the rounding error of
that arithmetic, and everything else stays the model's own arithmetic.  :func:`differs`
is the check: each value given is within the rounding of the code's own cos or sin of
the same angle.
"""

import threading
from typing import Any, Callable, Optional

import numpy as np
import torch
from torch.overrides import TorchFunctionMode

from sinpe.torch._angles import AngleTables
from sinpe.torch._tensors import _version
from sinpe.torch.patching._pairs import Pairs
from sinpe.torch.patching._double import caches_differ

_COS = {torch.cos, torch.Tensor.cos}
_SIN = {torch.sin, torch.Tensor.sin}
_NARROW = (torch.float32, torch.float16, torch.bfloat16)
# cos and sin of p * 1 for real p: the angle itself
UNIT = AngleTables(np.ones(1))
_RUNNING = threading.local()  # how many ExactTrig with pairs this thread is inside


def following() -> bool:
    """Whether this thread runs code under an :class:`ExactTrig` that follows values
    (:mod:`._pairs`): code called inside is followed already."""
    return getattr(_RUNNING, "depth", 0) > 0


def exact_trig(angle: torch.Tensor, cosine: bool) -> torch.Tensor:
    """cos (``cosine``) or sin of each of ``angle``'s values, exact, rounded once to its
    dtype; its own value where an angle is beyond the tables' range."""
    return _chosen(_unit_pairs(angle), angle, angle, cosine, UNIT.limit)


def _unit_pairs(angle: torch.Tensor, low: Optional[torch.Tensor] = None) -> torch.Tensor:
    """``[cos, sin]`` of each of ``angle``'s values (plus ``low``'s: :mod:`._pairs`) (a
    last axis of 2), exact, rounded once to its dtype (NaN beyond the tables' range)."""
    rest = None if low is None else low.expand(angle.shape).reshape(-1)
    return UNIT.values(angle.reshape(-1), angle.dtype, rest=rest)[:, 0].reshape(
        angle.shape + (2,))


def _chosen(pairs: torch.Tensor, positions: torch.Tensor, angle: torch.Tensor, cosine: bool,
            limit: int) -> torch.Tensor:
    """The cosines (``cosine``) or sines of ``pairs``; torch's own of ``angle`` where a
    position is beyond ``limit`` (False for NaN)."""
    own = torch.cos(angle) if cosine else torch.sin(angle)
    return torch.where(positions.abs() <= limit, pairs[..., 0 if cosine else 1], own)


class Unlearned(Exception):
    """A cos or sin call that a :class:`PerCall` was not learned for."""


class PerCall:
    """The frequencies of each cos and sin call of one run of a code, in order
    (:mod:`._position_tables`): call ``c`` is given positions, one a pair along axis
    ``axes[c]``, and takes their angles with ``tables[c]``'s frequencies (``freqs[c]``:
    them in float32, for the code's own value beyond the tables' range; calls of the
    same frequencies share one ``AngleTables``)."""

    def __init__(self, tables: list[AngleTables], freqs: list[torch.Tensor],
                 axes: list[int]) -> None:
        self.tables = tables
        self.freqs = freqs
        self.axes = axes
        self._on: dict[tuple[int, torch.device], torch.Tensor] = {}

    def pairs(self, call: int, positions: torch.Tensor) -> torch.Tensor:
        """``[cos, sin]`` of call ``call``'s angles (its pairs' axis last, then a last axis
        of 2), exact, rounded once; raises :class:`Unlearned` for a call not learned."""
        if call >= len(self.tables) or positions.dim() <= self.axes[call] or (
                positions.shape[self.axes[call]] != self.tables[call].count):
            raise Unlearned(f"cos or sin call {call} of shape {tuple(positions.shape)}")
        moved = positions.movedim(self.axes[call], -1)
        return self.tables[call].values(moved, positions.dtype, per_pair=True)

    def chosen(self, call: int, positions: torch.Tensor, pairs: torch.Tensor, cosine: bool
               ) -> torch.Tensor:
        """The cosines or sines of :meth:`pairs`, laid out as ``positions``."""
        axis = self.axes[call]
        freq = self._on.get((call, positions.device))
        if freq is None:
            freq = self._on[(call, positions.device)] = self.freqs[call].to(positions.device)
        moved = positions.movedim(axis, -1)
        angle = moved * freq  # the code's own, beyond the range
        return _chosen(pairs, moved, angle, cosine, self.tables[call].limit).movedim(-1, axis)


class ExactTrig(TorchFunctionMode):
    """The code's ``cos`` and ``sin`` of float32 and 16-bit tensors, exact (module
    docstring); ``record``: each call's ``(angle, cosine, exact, own)`` is kept in
    ``calls``; ``per_call``: the calls take positions and their frequencies
    (:class:`PerCall`) rather than angles.  The cos and the sin of one tensor (most code
    takes both) share one computation of the pairs, kept for the length of the run."""

    def __init__(self, record: bool = False, per_call: Optional[PerCall] = None,
                 pairs: Optional[Pairs] = None) -> None:
        super().__init__()
        self.record = record
        self.per_call = per_call
        self.pairs = pairs
        self.count = 0
        self.calls: list[tuple[torch.Tensor, bool, torch.Tensor, torch.Tensor]] = []
        # the last pairs made: (tensor, its version, the tables, the pairs)
        self._last: Optional[tuple[torch.Tensor, Optional[int], Any, torch.Tensor]] = None

    def __enter__(self) -> "ExactTrig":
        if self.pairs is not None:
            _RUNNING.depth = getattr(_RUNNING, "depth", 0) + 1
        return super().__enter__()  # type: ignore[no-untyped-call, no-any-return]

    def __exit__(self, *exc: Any) -> None:
        if self.pairs is not None:
            _RUNNING.depth -= 1
        super().__exit__(*exc)  # type: ignore[no-untyped-call]

    def _pairs(self, angle: torch.Tensor, tables: Any, make: Callable[[], torch.Tensor]
               ) -> torch.Tensor:
        last, version = self._last, _version(angle)
        if (last is not None and last[0] is angle and version is not None
                and last[1] == version and last[2] is tables):
            return last[3]
        pairs = make()
        self._last = (angle, version, tables, pairs)
        return pairs

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        cosine = func in _COS
        if ((cosine or func in _SIN) and len(args) == 1 and not kwargs
                and isinstance(args[0], torch.Tensor) and args[0].dtype in _NARROW
                and not (args[0].requires_grad and torch.is_grad_enabled())):
            angle, call, per = args[0], self.count, self.per_call
            with torch.no_grad():
                if per is not None:
                    tables = per.tables[call] if call < len(per.tables) else None
                    pairs = self._pairs(angle, tables, lambda: per.pairs(call, angle))
                    exact = per.chosen(call, angle, pairs, cosine)
                elif self.pairs is not None and (low := self.pairs.low(angle)) is not None:
                    pairs = self._pairs(angle, low, lambda: _unit_pairs(angle, low))
                    # (a low part beyond 1, or NaN: not a rounding error; the own value)
                    inside = torch.where(low.abs() <= 1, angle, torch.inf)
                    exact = _chosen(pairs, inside, angle, cosine, UNIT.limit - 1)
                else:
                    pairs = self._pairs(angle, UNIT, lambda: _unit_pairs(angle))
                    exact = _chosen(pairs, angle, angle, cosine, UNIT.limit)
            self.count += 1
            if self.record:
                self.calls.append((angle, cosine, exact, func(*args)))
            return exact
        if self.pairs is not None:
            return self.pairs.follow(func, args, kwargs or {})
        return func(*args, **(kwargs or {}))


def differs(calls: list[tuple[torch.Tensor, bool, torch.Tensor, torch.Tensor]]) -> str:
    """Why the exact values recorded do not stand for the code's own, or "" (each within
    the rounding of a float32 cos or sin of the same angle)."""
    if not calls:
        return "takes no cos or sin of a float32 tensor"
    for angle, _, exact, own in calls:
        why = caches_differ(exact, own, float(angle.abs().max()) if angle.numel() else 0.0)
        if why:
            return why
    return ""
