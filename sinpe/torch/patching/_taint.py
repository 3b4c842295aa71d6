"""A module's own code with its angles formed in double: the model's frequencies and
positions as its code makes them (those it makes from ranges of integers in double),
their products exact, cos and sin in double.

A positional module (a timestep embedding, a rotary module, a sin-cos table made at
construction or from a grid's size) forms each angle as the product of factors it
computes itself: positions (timesteps, ids, grid indices, ``linspace`` coordinates) and
frequencies (``1 / theta ** (2k / d)`` in float32 for most, float64 for some, buffers,
parameters), perhaps times a scale.  sinpe's promise for such code is the model's own
frequencies (float32 values where it computes them in float32, float64 where in
float64) with the angles exact.  :class:`ExactAngles` runs the code as it is, and at
each trigonometric call (``cos``, ``sin``, ``polar``, ``exp`` of an imaginary value)
forms its angle again in double from its factors: the arithmetic that made the angle
tensor (products, quotients, sums, negations; with ``layouts`` also the moves after
them that take each value once: transposes, reshapes, concatenations, slices, and
those that repeat or look up by index rows of a table of angles made here, never a
vector of frequencies) is recorded as it runs, and the call's angle is recomputed in double down to the operands that have
fewer elements than the angle (the broadcast factors: a frequency vector, a column of
positions), whose values are the code's own.  Two float32 factors' product is exact in double (24 + 24 bits fit
in 53); anything further is rounded once in double.

With ``ranges`` (the default), the ranges of integers the code makes (``torch.arange``:
float32 and float64 ones, and integer ones once cast to float or mixed with floats) are
positions too, carried in double through what carries values (arithmetic, moves,
casts, in-place writes: LTX-Video scales its grid's axes in place), each beside the
code's own value; any other function of them (a power, an exponential: frequencies) is
given the code's own values and returns its own, so the model's frequencies stay its
float32 values while its positions are exact.

From a trigonometric result on, values are ``tainted``: an operation with a tainted
operand runs in double (float32, float16 and bfloat16 operands widened, complex64 to
complex128; ``.float()``, ``.half()``, ``.to(dtype)``, ``.type(dtype)``,
``.type_as(y)`` keep a tainted value in double), so the caller rounds each output
once.  Tensors given as ``inputs`` start tainted (their values stay whatever they
are: positions are exact as given).  The largest angle is recorded: it bounds how far
the code's own float32 result may be from the double one.
"""

from typing import Any, Callable, Iterable

import torch
from torch.overrides import TorchFunctionMode
from torch.utils import _pytree

from sinpe.torch._tensors import _writes_in_place
from sinpe.torch.patching._pairs import _JOINS, _MOVES, integer_bound

_WIDER = {torch.float32: torch.float64, torch.float16: torch.float64,
          torch.bfloat16: torch.float64, torch.complex64: torch.complex128,
          torch.complex32: torch.complex128}
_NARROWING = {torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16}
_CASTS = {torch.Tensor.to, torch.Tensor.type}
# the arithmetic an angle is made by, recomputed in double at a trigonometric call
_ARITHMETIC = {torch.mul, torch.Tensor.mul, torch.Tensor.__mul__, torch.Tensor.__rmul__,
               torch.div, torch.Tensor.div, torch.true_divide, torch.Tensor.__truediv__,
               torch.Tensor.__rtruediv__, torch.outer, torch.Tensor.outer, torch.einsum,
               torch.add, torch.Tensor.add, torch.Tensor.__add__, torch.Tensor.__radd__,
               torch.sub, torch.Tensor.sub, torch.Tensor.__sub__, torch.Tensor.__rsub__,
               torch.neg, torch.Tensor.neg, torch.Tensor.__neg__, torch.matmul,
               torch.Tensor.__matmul__}
# operations that move an angle's values without computing or repeating them (with
# ``layouts``): made again from their operands made again, each in its own shape
_LAYOUTS = {torch.Tensor.unsqueeze, torch.unsqueeze, torch.Tensor.squeeze, torch.squeeze,
            torch.Tensor.reshape, torch.reshape, torch.Tensor.view, torch.Tensor.flatten,
            torch.flatten, torch.Tensor.transpose, torch.transpose, torch.Tensor.permute,
            torch.permute, torch.Tensor.movedim, torch.movedim, torch.Tensor.swapaxes,
            torch.swapaxes, torch.Tensor.contiguous, torch.Tensor.clone, torch.Tensor.t,
            torch.Tensor.flip, torch.flip, torch.cat, torch.concat, torch.concatenate,
            torch.stack, torch.Tensor.__getitem__, torch.Tensor.expand,
            torch.Tensor.expand_as, torch.Tensor.repeat, torch.Tensor.index_select,
            torch.index_select}
# of those, the ones that repeat values or look them up by index: only of a table of
# angles made here (a frequency vector expanded to the angles' shape stays a factor)
_REPEATS = {torch.Tensor.expand, torch.Tensor.expand_as, torch.Tensor.repeat,
            torch.Tensor.index_select, torch.index_select}
# what carries a range's values (with ``ranges``): arithmetic, moves, casts, writes of
# them; any other function of them is the code's own (its frequencies, by powers and
# exponentials)
_IN_PLACE_ARITHMETIC = {torch.Tensor.__setitem__, torch.Tensor.mul_, torch.Tensor.add_,
                        torch.Tensor.sub_, torch.Tensor.div_, torch.Tensor.neg_,
                        torch.Tensor.copy_, torch.Tensor.__imul__, torch.Tensor.__iadd__,
                        torch.Tensor.__isub__, torch.Tensor.__itruediv__}
_TO_FLOAT = {torch.Tensor.float, torch.Tensor.double, torch.Tensor.to, torch.Tensor.type,
             torch.Tensor.type_as}
_CARRIES = (_ARITHMETIC | _LAYOUTS | _MOVES | _JOINS | _IN_PLACE_ARITHMETIC | _TO_FLOAT
            | {torch.meshgrid})
# of those, the ones whose other operands are indices: only the first carries
_LOOKUPS = {torch.Tensor.__getitem__, torch.Tensor.index_select, torch.index_select}
_EXACT_INTEGERS = {torch.float32: 2**24, torch.float64: 2**53}
_REAL_ANGLES = {torch.cos, torch.sin, torch.Tensor.cos, torch.Tensor.sin}
_NARROW_ANGLES = (torch.float32, torch.float16, torch.bfloat16)


def _wide(value: Any) -> Any:
    if isinstance(value, torch.dtype):
        return _WIDER.get(value, value)
    if isinstance(value, torch.Tensor) and value.dtype in _WIDER:
        return value.to(_WIDER[value.dtype])
    return value


class ExactAngles(TorchFunctionMode):
    """The code's angles formed in double (module docstring); ``angle``: the largest
    angle given to a trigonometric call."""

    def __init__(self, inputs: Iterable[torch.Tensor] = (), layouts: bool = False,
                 record: bool = False, ranges: bool = True) -> None:
        super().__init__()
        self.layouts = layouts
        self.ranges = ranges
        # with ``ranges``: the integer ranges the code made (ids), and each value made
        # from ranges alone by what carries them, in double, with the code's own value
        self._integers: set[int] = set()
        self._shadows: dict[int, torch.Tensor] = {}
        # with ``record``: the double result of each cos and sin of a float32 (16-bit)
        # or tainted angle, in order (what :mod:`._inline` gives, each rounded once)
        self.record = record
        self.trig: list[torch.Tensor] = []
        self._kept: list[Any] = []  # (ids stay unique while the mode runs)
        self._tainted: set[int] = set()
        self._made: dict[int, tuple[Callable[..., Any], Any, Any]] = {}
        for tensor in inputs:
            self._taint(tensor)
        self.angle = 0.0
        # whether every trigonometric call was cos or sin of a float32 (16-bit) angle
        # taken as given, neither formed here by the arithmetic just before it (moves
        # after it count as given) nor tainted: then the exact value of the code's own
        # angle is what :mod:`._inline` gives on any device, without a host read
        self.as_given = True

    def _taint(self, tensor: torch.Tensor) -> None:
        self._kept.append(tensor)
        self._tainted.add(id(tensor))

    def tainted(self, value: Any) -> bool:
        return isinstance(value, torch.Tensor) and id(value) in self._tainted

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        if _writes_in_place(func) and args and isinstance(args[0], torch.Tensor):
            self._written(args[0])
        if self.ranges and func is torch.arange:
            return self._range(args, kwargs)
        angle = self._angle(func, args)
        leaves = _pytree.tree_leaves((args, kwargs))
        if angle is not None:
            out = self._trigonometry(func, args, kwargs, angle)
        elif any(self.tainted(leaf) for leaf in leaves):
            shadows = self._shadowed(func, args, kwargs)
            if shadows is not None and func not in _CARRIES:
                # another function of values made from ranges: the code's own
                own = func(*shadows[0], **shadows[1])
                if not _writes_in_place(func):
                    return own
                # (written in place: the double value becomes the code's own too)
                return args[0].copy_(self._shadows[id(args[0])])
            out = self._in_double(func, args, kwargs)
            if shadows is not None:
                self._shadow_of(out, func(*shadows[0], **shadows[1]))
            elif _writes_in_place(func) and isinstance(args[0], torch.Tensor):
                self._shadows.pop(id(args[0]), None)  # (its own value unknown since)
        elif self._integers and any(id(leaf) in self._integers for leaf in self._carried(
                func, args, kwargs)):
            return self._from_integers(func, args, kwargs)
        else:
            out = func(*args, **kwargs)
            if isinstance(out, torch.Tensor) and (
                    func in _ARITHMETIC or (self.layouts and self._moves(func, args, out))):
                self._kept.append(out)
                self._made[id(out)] = (func, args, kwargs)
            return out
        for leaf in _pytree.tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._taint(leaf)
        return out

    # -- ranges: positions the code makes, carried in double

    def _range(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """``torch.arange``: an integer range kept as made (its casts to float and its
        arithmetic are then in double); a float32 or float64 one of exact integers in
        double, the code's own beside it; any other as made."""
        out = torch.arange(*args, **kwargs)
        largest = integer_bound(args, kwargs)
        if largest is None:
            return out
        self._kept.append(out)
        if not out.is_floating_point():
            self._integers.add(id(out))
            return out
        if largest > _EXACT_INTEGERS.get(out.dtype, 0):
            return out
        wide = out.to(torch.float64, copy=True)  # (never the code's own: each is written apart)
        self._taint(wide)
        self._shadows[id(wide)] = out
        return wide

    def _carried(self, func: Callable[..., Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> list[Any]:
        """The operands whose values ``func`` carries (none where it does not)."""
        if func not in _CARRIES:
            return []
        if func in _LOOKUPS:
            return list(args[:1])
        return _pytree.tree_leaves((args, kwargs))

    def _from_integers(self, func: Callable[..., Any], args: tuple[Any, ...],
                       kwargs: dict[str, Any]) -> Any:
        """What carries an integer range: another integer range, or float values in
        double (the code's own beside them)."""
        out = func(*args, **kwargs)
        outs = [t for t in _pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
        if all(not t.is_floating_point() and not t.is_complex() for t in outs):
            for t in outs:
                self._kept.append(t)
                self._integers.add(id(t))
            return out
        if not all(t.dtype in _EXACT_INTEGERS for t in outs):
            return out

        def wide(value: Any) -> Any:
            if isinstance(value, torch.Tensor) and id(value) in self._integers:
                return value.double()
            return value
        double = self._in_double(func, *_pytree.tree_map(wide, (args, kwargs)))
        for leaf in _pytree.tree_leaves(double):
            if isinstance(leaf, torch.Tensor):
                self._taint(leaf)
        self._shadow_of(double, out)
        return double

    def _shadowed(self, func: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any]) -> Any:
        """``(args, kwargs)`` with the code's own values for those made from ranges, if
        every tainted operand is one (else None: values from the inputs)."""
        missing = False

        def own(value: Any) -> Any:
            nonlocal missing
            if not self.tainted(value):
                return value
            shadow = self._shadows.get(id(value))
            if shadow is None:
                missing = True
                return value
            return shadow
        shadows = _pytree.tree_map(own, (args, kwargs))
        return None if missing else shadows

    def _shadow_of(self, double: Any, own: Any) -> None:
        """Keeps each of ``own``'s tensors as the code's value of ``double``'s (not for an
        operand that the double run gave back as it is: ``x.double()`` of a double)."""
        wide, narrow = _pytree.tree_leaves(double), _pytree.tree_leaves(own)
        if len(wide) != len(narrow):
            return
        for w, n in zip(wide, narrow):
            if (isinstance(w, torch.Tensor) and isinstance(n, torch.Tensor)
                    and id(w) not in self._shadows):
                self._kept.append(n)
                self._shadows[id(w)] = n

    def _written(self, tensor: torch.Tensor) -> None:
        """Forget how the values in ``tensor``'s memory were made: an in-place write
        (``x[i] = y``) changes them after (its values are then its own)."""
        memory = tensor.untyped_storage().data_ptr()
        for kept in self._kept:
            if id(kept) in self._made and kept.untyped_storage().data_ptr() == memory:
                del self._made[id(kept)]

    def _moves(self, func: Callable[..., Any], args: tuple[Any, ...],
               out: torch.Tensor) -> bool:
        """Whether ``func`` moves angles into ``out``: each value once (no dtype view), or
        repeated or looked up by index from a table of angles made here."""
        if func not in _LAYOUTS:
            return False
        leaves = _pytree.tree_leaves(args)
        if any(isinstance(a, torch.dtype) for a in leaves):
            return False
        indexed = func is torch.Tensor.__getitem__ and any(
            isinstance(a, torch.Tensor) for a in leaves[1:])
        if func in _REPEATS or indexed:
            return self._table(args[0])
        if func is torch.Tensor.__getitem__:  # a slice
            return True
        return sum(a.numel() for a in leaves if isinstance(a, torch.Tensor)) == out.numel()

    def _table(self, value: Any) -> bool:
        """Whether ``value`` is a table of angles made here: the product of factors that
        each have fewer elements (an outer product of positions and frequencies), or a
        move of such tables; not a vector of frequencies made from another."""
        made = self._made.get(id(value)) if isinstance(value, torch.Tensor) else None
        if made is None:
            return False
        tensors = [a for a in _pytree.tree_leaves(made[1]) if isinstance(a, torch.Tensor)]
        if made[0] in _LAYOUTS:
            return bool(tensors) and self._table(tensors[0])
        return bool(tensors) and all(t.numel() < value.numel() for t in tensors)

    def again(self, value: Any) -> Any:
        """A value the code made under this mode, in double: made again by the arithmetic
        and moves recorded (an angle its code returns rather than takes the cosine of)."""
        if not isinstance(value, torch.Tensor) or self.tainted(value):
            return value
        return self._again(value, value.shape)

    # -- trigonometric calls: the angle again in double

    @staticmethod
    def _angle(func: Callable[..., Any], args: tuple[Any, ...]) -> Any:
        """The angle argument of a trigonometric call, else None."""
        if func in _REAL_ANGLES and isinstance(args[0], torch.Tensor):
            return args[0]
        if func is torch.polar and isinstance(args[1], torch.Tensor):
            return args[1]
        if (func in (torch.exp, torch.Tensor.exp) and isinstance(args[0], torch.Tensor)
                and args[0].is_complex()):
            return args[0]
        return None

    def _trigonometry(self, func: Callable[..., Any], args: tuple[Any, ...],
                      kwargs: dict[str, Any], angle: torch.Tensor) -> Any:
        made = self._made.get(id(angle))
        given = made is None or made[0] in _LAYOUTS  # (a move after arithmetic: given)
        self.as_given = self.as_given and (
            func in _REAL_ANGLES and angle.dtype in _NARROW_ANGLES and given
            and not self.tainted(angle))
        exact = self._again(angle, angle.shape)
        args = list(args)
        if func is torch.polar:
            args = [_wide(args[0]), exact]
        else:
            args[0] = exact
        real = exact.imag if exact.is_complex() else exact
        if real.numel():
            self.angle = max(self.angle, float(real.detach().abs().max()))
        out = func(*args, **{k: _wide(v) for k, v in kwargs.items()})
        if self.record and func in _REAL_ANGLES and (angle.dtype in _NARROW_ANGLES
                                                     or self.tainted(angle)):
            self.trig.append(out)
        return out

    def _again(self, value: Any, shape: torch.Size) -> Any:
        """``value`` in double: made again by its recorded arithmetic where it has the
        angle's shape (and is not yet double), its own values where not."""
        if not isinstance(value, torch.Tensor):
            return value
        made = self._made.get(id(value))
        if made is None or value.shape != shape or self.tainted(value):
            return _wide(value)
        func, args, kwargs = made
        if func in _LAYOUTS:  # its values moved: each operand's again, in its own shape
            moved = _pytree.tree_map(lambda a: self._again(a, a.shape) if isinstance(
                a, torch.Tensor) else a, args)
            return func(*_pytree.tree_map(_wide, moved), **kwargs)
        again = [self._again(a, shape) if isinstance(a, torch.Tensor) else a for a in args]
        widened = [_wide(a) if isinstance(a, torch.Tensor) else a for a in again]
        return func(*widened, **kwargs)

    # -- everything after: in double

    def _in_double(self, func: Callable[..., Any], args: tuple[Any, ...],
                   kwargs: dict[str, Any]) -> Any:
        if func in _NARROWING:
            return _wide(args[0]) if args[0].is_floating_point() else func(*args, **kwargs)
        if func is torch.Tensor.type_as:
            return args[0].to(_wide(args[1].dtype))
        if func in _CASTS:
            args = tuple(_wide(a) if isinstance(a, torch.dtype) else a for a in args)
        args, kwargs = _pytree.tree_map(_wide, (args, kwargs))
        return func(*args, **kwargs)
