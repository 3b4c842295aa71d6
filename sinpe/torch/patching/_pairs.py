"""Positions a module's code forms from its float32 inputs, carried exactly: each value
as the code's own float32 ``hi`` and the error ``lo`` of its arithmetic, in float32.

LTX-2's rotary modules take float32 coordinates, and form each angle in float32 as
``((start + end) / 2 / base * 2 - 1) * freq``: five roundings before the cosine, each
up to half an ulp of an angle that reaches ``theta * pi / 2`` radians.  Their run in
double cannot form those angles again on the device (no float64 there), so the inline
form (:mod:`._inline`) gave the exact cosine of the float32 angle, drift and all.

:class:`Pairs` follows the inputs it is given through the code, without changing what
the code computes: every float32 tensor derived from them by

- sums, differences, products (``einsum`` too, where it sums over no index), quotients
  (with each other, with float32 tensors the code made otherwise, which are taken as
  they are: the model's own frequencies, and with Python numbers, taken in double), and
  negation: ``lo`` by the error-free transformations (Knuth's TwoSum, Dekker's
  TwoProduct with Veltkamp's splitting, the exact remainder of a quotient), the
  operands' own ``lo`` carried to first order;
- reshaping, indexing, splitting, stacking, moving, casting to float32: ``lo`` moved
  alike,

keeps its ``lo``.  An input that a stand-in gave with its ``lo`` (:func:`remember`:
angles a module returns for other code to take the cosine of, :mod:`._sources`) starts
from it.  With ``made``, it also follows the ranges of integers the code makes in
float32 (``torch.arange``: exact; source :data:`MADE`) as positions, through the same
arithmetic (AutoencoderSAME's processor forms ``cat(outer(arange(n), inv_freq))`` in
every call), as :class:`._taint.ExactAngles` carries them in double; a power or an
exponential of them (frequencies) is the code's own float32 value.  Anything else (another dtype, another operation, an operand written
in place since) is taken as it is.  ``hi + lo`` is then the value the
code stands for, within about ``2**-48`` of it relative to the operands: the angle in
double, to far below the ``2**-30`` sinpe's angle tables promise.  Every step is
float32 device operations run as the code runs them (eagerly: torch.compile's graph
would fuse them, and the errors they compute are those of unfused operations).
"""

import functools
import math
import weakref
from typing import Any, Callable, Optional, Union

import numpy as np
import torch
from torch.utils import _pytree

from sinpe.torch._tensors import _version, _writes_in_place

_F32 = torch.float32
Number = Union[torch.Tensor, float]
_SPLIT = 4097.0  # 2**12 + 1: Veltkamp's splitting of 24 bits into two of 12
_ADD = {torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__}
_SUB = {torch.sub, torch.Tensor.sub, torch.Tensor.__sub__}
_RSUB = {torch.Tensor.__rsub__}
_MUL = {torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__}
_DIV = {torch.div, torch.Tensor.div, torch.true_divide, torch.Tensor.__truediv__}
_RDIV = {torch.Tensor.__rtruediv__}
_NEG = {torch.neg, torch.Tensor.neg, torch.Tensor.__neg__}
# operations that move values without computing: the same one moves ``lo``
_MOVES = {torch.Tensor.__getitem__, torch.Tensor.chunk, torch.chunk, torch.Tensor.split,
          torch.split, torch.Tensor.unbind, torch.unbind, torch.Tensor.squeeze,
          torch.squeeze, torch.Tensor.unsqueeze, torch.unsqueeze, torch.Tensor.view,
          torch.Tensor.reshape, torch.reshape, torch.Tensor.flatten, torch.flatten,
          torch.Tensor.unflatten, torch.Tensor.transpose, torch.transpose,
          torch.Tensor.permute, torch.permute, torch.Tensor.movedim, torch.movedim,
          torch.Tensor.swapaxes, torch.swapaxes, torch.Tensor.expand, torch.Tensor.repeat,
          torch.Tensor.repeat_interleave, torch.repeat_interleave, torch.Tensor.contiguous,
          torch.Tensor.clone, torch.clone, torch.Tensor.narrow, torch.narrow,
          torch.Tensor.select, torch.select, torch.Tensor.flip, torch.flip, torch.Tensor.t,
          torch.Tensor.detach, torch.Tensor.to, torch.Tensor.float, torch.Tensor.type}
# the same, of a list of tensors
_JOINS = {torch.stack, torch.cat, torch.concat, torch.concatenate}
# products of every element of a vector with every element of another
_OUTER = {torch.outer, torch.Tensor.outer, torch.ger, torch.Tensor.ger}
# the source of the ranges the code makes (``made``), beside the inputs' numbers
MADE = -1
_EXACT_INTEGERS = 2**24  # float32 holds every integer up to it


def _split(x: Number) -> tuple[Number, Number]:
    """``x = high + low``, each of at most 12 significant bits (exact): Veltkamp's in
    float32 for a tensor; a float32 value given as a Python float, on the host."""
    if isinstance(x, float):
        mantissa, exponent = math.frexp(x)
        top = math.ldexp(round(mantissa * 2.0**12), exponent - 12)
        return top, x - top
    c = x * _SPLIT
    high = c - (c - x)
    return high, x - high


def _times(x: Any, y: Any) -> Any:
    return x * y


def _product_error(a: Number, b: Number, p: Any,
                   times: Callable[[Any, Any], Any] = _times) -> Any:
    """Dekker: ``a * b - p`` exactly, ``p`` the float32 product ``a * b`` (the partial
    products of 12-bit halves are exact); ``times``: the product (elementwise, or an
    ``einsum`` that sums over no index)."""
    ah, al = _split(a)
    bh, bl = _split(b)
    return ((times(ah, bh) - p) + times(ah, bl) + times(al, bh)) + times(al, bl)


def integer_bound(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Optional[float]:
    """The largest magnitude among a ``torch.arange`` call's ends and step where all are
    integers (its values then exact integers), else None."""
    given = [kwargs.get(name) for name in ("start", "end", "step")] + list(args)
    bounds = [b for b in given if b is not None]
    if not all(isinstance(b, (int, float)) and not isinstance(b, bool)
               and float(b).is_integer() for b in bounds):
        return None
    return max((abs(float(b)) for b in bounds), default=0.0)


def _products_only(equation: Any) -> bool:
    """Whether an ``einsum`` equation of two operands sums over no index (every index of
    its operands is in its output): each output value is one product."""
    if not isinstance(equation, str) or "->" not in equation:
        return False
    inputs, output = equation.replace(" ", "").split("->")
    operands = inputs.split(",")
    return len(operands) == 2 and set(inputs.replace(",", "").replace(".", "")) <= set(output)


# The angles stand-ins gave with their rounding errors (:mod:`._sources`: a module that
# returns angles for other code to take the cosine of), by identity, each with a copy of
# the values given: an element written since (in place, by any code, an inference tensor
# included) loses its error.
_GIVEN: dict[int, tuple["weakref.ref[torch.Tensor]", torch.Tensor, torch.Tensor]] = {}


def _drop_given(key: int, held: Any) -> None:
    entry = _GIVEN.get(key)
    if entry is not None and entry[0] is held:
        del _GIVEN[key]


def remember(tensor: torch.Tensor, lo: torch.Tensor) -> None:
    """Keeps ``lo`` (the rounding error of the float32 arithmetic that made ``tensor``)
    for as long as ``tensor`` lives: :class:`Pairs` given ``tensor`` starts from it."""
    key = id(tensor)
    held = weakref.ref(tensor, functools.partial(_drop_given, key))
    with torch.no_grad():
        _GIVEN[key] = (held, tensor.detach().clone(), lo.detach())


def given_low(tensor: Any) -> Optional[torch.Tensor]:
    """The ``lo`` :func:`remember` kept for ``tensor`` (zero where its values changed
    since), else None."""
    if not isinstance(tensor, torch.Tensor):
        return None
    entry = _GIVEN.get(id(tensor))
    if entry is None or entry[0]() is not tensor:
        return None
    _, values, lo = entry
    if (values.shape, values.dtype, values.device) != (tensor.shape, tensor.dtype,
                                                       tensor.device):
        return None
    with torch.no_grad():
        return torch.where(tensor.detach() == values, lo, 0.0)


def _sum_error(a: Number, b: Number, s: Any) -> Any:
    """Knuth: ``a + b - s`` exactly, ``s`` the float32 sum ``a + b``."""
    bb = s - a
    return (a - (s - bb)) + (b - bb)


class _Lows(dict):  # type: ignore[type-arg]
    """What :class:`Pairs` follows (a dict that a weak reference can name)."""


def _forget(lows: "weakref.ref[_Lows]", key: int, held: Any) -> None:
    """A followed tensor was freed: its entry goes (unless its id names another since)."""
    table = lows()
    if table is not None and key in table and table[key][0] is held:
        del table[key]


class Pairs:
    """The ``lo`` of every float32 tensor derived from the inputs (module docstring),
    by the tensor's identity and version; ``used``: the inputs (their numbers) that a
    value asked for by :meth:`low` derived from."""

    def __init__(self, inputs: list[tuple[int, torch.Tensor]], made: bool = False) -> None:
        # id -> (the tensor, weakly: a value the code drops takes its lo with it; its
        # version; lo, or None for exactly the tensor; the inputs it derives from)
        self._lows = _Lows()
        self.used: set[int] = set()
        self.made = made
        for number, tensor in inputs:
            if tensor.dtype is _F32:
                self._keep(tensor, given_low(tensor), frozenset((number,)))

    def _keep(self, tensor: torch.Tensor, lo: Optional[torch.Tensor],
              sources: frozenset[int]) -> None:
        key = id(tensor)
        held = weakref.ref(tensor, functools.partial(_forget, weakref.ref(self._lows), key))
        self._lows[key] = (held, _version(tensor), lo, sources)

    def _entry(self, value: Any) -> Optional[tuple[Optional[torch.Tensor], frozenset[int]]]:
        if not isinstance(value, torch.Tensor):
            return None
        entry = self._lows.get(id(value))
        if entry is None or entry[0]() is not value:
            return None
        if entry[1] is not None and _version(value) != entry[1]:  # written in place since
            return None
        return entry[2], entry[3]

    def _written(self, func: Callable[..., Any], args: tuple[Any, ...]) -> None:
        """Forget what an in-place operation writes to (an inference tensor has no
        version to show it): every value kept in the same memory."""
        if not _writes_in_place(func):
            return
        if not args or not isinstance(args[0], torch.Tensor):
            return
        memory = args[0].untyped_storage().data_ptr()
        for key in [key for key, (held, *_) in self._lows.items()
                    if (tensor := held()) is None
                    or tensor.untyped_storage().data_ptr() == memory]:
            del self._lows[key]

    def low(self, value: torch.Tensor) -> Optional[torch.Tensor]:
        """``value``'s ``lo`` if it derives from the inputs by arithmetic that rounded,
        else None (its float32 value is what the code stands for)."""
        entry = self._entry(value)
        if entry is None or entry[0] is None:
            return None
        self.used |= entry[1]
        return entry[0]

    def follow(self, func: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
        """``func(*args, **kwargs)`` as the code runs it, its outputs followed where an
        operand is."""
        self._written(func, args)
        if self.made and func is torch.arange:
            return self._range(args, kwargs)
        leaves = _pytree.tree_leaves((args, kwargs))
        entries = [self._entry(leaf) for leaf in leaves]
        if all(entry is None for entry in entries):
            return func(*args, **kwargs)
        # (the code's own operation gives each output, its gradient kept; the errors
        # beside it are computed without one)
        if func in _MOVES or func in _JOINS:
            return self._moved(func, args, kwargs)
        if not kwargs and len(args) == 2 and (func in _ADD | _SUB | _RSUB | _MUL
                                              | _DIV | _RDIV | _OUTER):
            return self._arithmetic(func, args)
        if func is torch.einsum and not kwargs and len(args) == 3 and _products_only(args[0]):
            return self._arithmetic(func, args)
        if func in _NEG and len(args) == 1 and not kwargs:
            out = func(*args)
            entry = self._entry(args[0])
            assert entry is not None
            with torch.no_grad():
                lo = None if entry[0] is None else -entry[0]
            self._keep(out, lo, entry[1])
            return out
        return func(*args, **kwargs)

    def _range(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``torch.arange``'s float32 or integer output, followed (exact, source
        :data:`MADE`) where its ends and step are integers within float32's exact ones."""
        out = torch.arange(*args, **kwargs)
        largest = integer_bound(args, kwargs)
        if ((out.dtype is _F32 or not out.is_floating_point()) and largest is not None
                and largest <= _EXACT_INTEGERS):
            self._keep(out, None, frozenset((MADE,)))
        return out

    def _moved(self, func: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> Any:
        out = func(*args, **kwargs)
        outs = _pytree.tree_leaves(out)
        sources: frozenset[int] = frozenset()
        exact = True
        for leaf in _pytree.tree_leaves((args, kwargs)):
            entry = self._entry(leaf)
            if entry is not None:
                sources |= entry[1]
                exact = exact and entry[0] is None
        if outs and exact and all(isinstance(t, torch.Tensor) and not t.is_floating_point()
                                  and not t.is_complex() for t in outs):
            for tensor in outs:  # a range of integers moved: still one
                self._keep(tensor, None, sources)
            return out
        if not outs or not all(isinstance(t, torch.Tensor) and t.dtype is _F32 for t in outs):
            return out  # another dtype: taken as it is

        def low_of(value: Any) -> Any:
            if not isinstance(value, torch.Tensor):
                return value
            entry = self._entry(value)
            if entry is not None and entry[0] is not None:
                return entry[0]
            return torch.zeros_like(value) if value.dtype is _F32 else value

        lows = None
        if not exact:
            with torch.no_grad():
                lows = _pytree.tree_leaves(func(*_pytree.tree_map(low_of, args),
                                                **_pytree.tree_map(low_of, kwargs)))
            if len(lows) != len(outs) or any(lo.shape != t.shape for lo, t in zip(lows, outs)):
                return out
        for i, tensor in enumerate(outs):
            self._keep(tensor, None if lows is None else lows[i], sources)
        return out

    def _operand(self, value: Any) -> Optional[tuple[Number, Optional[Number], frozenset[int]]]:
        """(hi, lo, sources) of an operand: a float32 tensor (followed, or as it is), or a
        Python number in double: its float32 value and the rest, as Python floats (which
        torch takes as float32 scalars: no copy to the device); None otherwise."""
        if isinstance(value, torch.Tensor):
            entry = self._entry(value)
            if value.dtype is not _F32:
                if entry is None or value.is_floating_point() or value.is_complex():
                    return None
                return value.float(), None, entry[1]  # a range of integers: exact
            return (value, None, frozenset()) if entry is None else (value, *entry)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            hi = float(np.float32(value))
            if not math.isfinite(hi):
                return None
            rest = float(value) - hi
            return hi, (None if rest == 0.0 else rest), frozenset()
        return None

    def _arithmetic(self, func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        out = func(*args)  # the code's own (float32 sums, products, quotients: rounded once)
        times = _times
        if func is torch.einsum:
            equation, args = args[0], args[1:]
            times = functools.partial(torch.einsum, equation)
            if not all(isinstance(x, torch.Tensor) for x in args):
                return out
        a, b = (self._operand(x) for x in args)
        if a is None or b is None or not isinstance(out, torch.Tensor):
            return out
        if not out.is_floating_point() and not out.is_complex():  # integers: exact
            if a[1] is None and b[1] is None:
                self._keep(out, None, a[2] | b[2])
            return out
        if out.dtype is not _F32:
            return out
        if func in _RSUB or func in _RDIV:  # b - a, b / a
            a, b = b, a
        (ah, al, sa), (bh, bl, sb) = a, b
        if func in _OUTER:  # a[:, None] * b[None, :]
            if not (isinstance(ah, torch.Tensor) and isinstance(bh, torch.Tensor)
                    and ah.dim() == bh.dim() == 1):
                return out
            ah, al = ah[:, None], (al[:, None] if isinstance(al, torch.Tensor) else al)
            bh, bl = bh[None, :], (bl[None, :] if isinstance(bl, torch.Tensor) else bl)
        with torch.no_grad():
            hi = out.detach()
            if func in _ADD or func in _SUB or func in _RSUB:
                if func not in _ADD:
                    bh, bl = -bh, (None if bl is None else -bl)
                lo = _sum_error(ah, bh, hi)
                for rest in (al, bl):
                    if rest is not None:
                        lo = lo + rest
            elif func in _MUL or func in _OUTER or func is torch.einsum:
                lo = _product_error(ah, bh, hi, times)
                if al is not None:
                    lo = lo + times(al, bh)
                if bl is not None:
                    lo = lo + times(ah, bl)
            else:  # a quotient: q + (a - q b) / b, the remainder exact whatever q is
                p = hi * bh
                remainder = (ah - p) - _product_error(hi, bh, p)
                if al is not None:
                    remainder = remainder + al
                if bl is not None:
                    remainder = remainder - hi * bl
                lo = remainder / bh
        self._keep(out, lo, sa | sb)
        return out
