"""A positional module whose outputs are cosines and sines of its positions, learned from
its own code and computed by the exact angle tables on any device.

A module that reads its positions' values (a timestep embedding, Flux's rotary module
of ``(N, axes)`` ids) gets new ones at every denoising step, so an
:class:`~sinpe.torch.patching._exact.ExactCall` would read them on the host at every
step.  Most such modules compute, for each output column, ``cos`` or ``sin`` of one
position (one axis of the ids) times a frequency, or a constant (a zero pad), in some
order (sines then cosines, flipped, interleaved, halves, complex ``freqs_cis``, 2x2
matrices with a negated sine).  :func:`learn` finds that structure by running the
module's own code with its angles in double
(:class:`~sinpe.torch.patching._taint.ExactAngles`, the probe positions tainted) on
probe positions:

- all ones: the angle of each trigonometric call's column is its frequency, exactly;
  all zeros: no angle may remain (no offset);
- one axis at a time: which axis each column's angle follows;
- random positions: each output column must equal one trigonometric call's column
  (or its negation) bit for bit in double, or be a constant: the same value in
  every row of every probe (a zero pad, a table made at construction beside the
  embedding).

A negative frequency (a Gaussian Fourier projection's random ones) is its absolute
value with the sine negated.  Columns are given in the module's dtype, float64 and
complex128 included (the tables' float64 digits, a few float64 ulps from exact), 16-bit
ones in float32.

:class:`Columns` then computes the outputs from the positions by device operations
alone (:class:`sinpe.torch._angles.AngleTables`, the values rounded once): no host
read, no float64, the same bits on every device, the CPU included.  A module whose
outputs are anything else (a scale after the sine, an offset in the angle, angles
that depend on the row rather than the position) is not learned, and keeps its
ExactCall.
"""

from typing import Any, Callable, Optional

import numpy as np
import torch
from torch.utils import _pytree

from sinpe.torch._angles import AngleTables, kernel_positions, kernel_reads
from sinpe.torch.patching._taint import ExactAngles

# the axes of an (N, axes) positions argument at most (Flux's ids have 3 or 4)
MAX_AXES = 8
_COS, _SIN, _ZERO, _ONE = 0, 1, 2, 3


class _Recording(ExactAngles):
    """The mode that also keeps each trigonometric call's angles and results (cos and
    sin of a real angle; ``polar`` and ``exp`` of an imaginary one as their two parts)."""

    def __init__(self, inputs: list[torch.Tensor]) -> None:
        super().__init__(inputs)
        self.calls: list[tuple[int, torch.Tensor, torch.Tensor]] = []  # (kind, A, R)

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        out = super().__torch_function__(func, types, args, kwargs)
        name = getattr(func, "__name__", "")
        if not (isinstance(out, torch.Tensor) and self.tainted(out)):
            return out
        if name in ("cos", "sin") and isinstance(args[0], torch.Tensor):
            self.calls.append((_COS if name == "cos" else _SIN, args[0].double(), out))
        elif name == "polar" and isinstance(args[1], torch.Tensor):
            self.calls += [(_COS, args[1].double(), out.real), (_SIN, args[1].double(), out.imag)]
        elif name == "exp" and out.is_complex():
            angle = args[0].imag.double()
            self.calls += [(_COS, angle, out.real), (_SIN, angle, out.imag)]
        return out


class Columns:
    """Outputs as columns of cos and sin of positions times frequencies (module
    docstring): ``freq`` (double) and ``axis`` per pair, and per output leaf its
    shape after the rows, dtype and source columns (into ``[c_0, s_0, c_1, s_1, ...,
    0, 1]``) with their signs."""

    def __init__(self, freq: np.ndarray, axis: np.ndarray, spec: Any,
                 leaves: list[tuple[tuple[int, ...], torch.dtype, np.ndarray, np.ndarray]],
                 constants: np.ndarray) -> None:
        # cos is even and sin odd: a negative frequency's sines negated
        trig = 2 * len(freq)
        odd = np.zeros(trig + 2 + len(constants), bool)
        odd[1:trig:2] = freq < 0
        leaves = [(rest, dtype, source, np.where(odd[source], -sign, sign).astype(np.float32))
                  for rest, dtype, source, sign in leaves]
        self.angles = AngleTables(np.abs(freq))
        self.axis = axis
        self.position = 0  # which leaf of the call's arguments holds the positions
        self.lead = 0  # positions' leading axes that are rows (0: the first alone)
        self.axes = 0  # the axes of (rows, axes) positions (0: one position a row)
        self.spec = spec  # the outputs' structure
        self.leaves = leaves
        # per output, how its first axes hold the rows' axes (lead: :func:`_row_axes`)
        self.templates: list[tuple[int, ...]] = []
        self.constants = constants  # (double) the source columns after [..., 0, 1]
        self._fixed = np.concatenate([[0.0, 1.0], constants])  # the sources from column trig on
        self._device: dict[torch.device, tuple[torch.Tensor, ...]] = {}
        self._constants: dict[tuple[torch.device, torch.dtype], torch.Tensor] = {}
        # the CPU kernel gives float32 (complex64): wider outputs take the tables' digits
        self._narrow = all(dtype in (torch.float32, torch.complex64) for _, dtype, _, _ in leaves)
        # per leaf, for the CPU: the pairs' columns to take, those negated, the constants
        self._cpu = [(np.where(source < trig, source, 0), np.flatnonzero(sign < 0),
                      np.flatnonzero(source >= trig),
                      self._fixed[source[source >= trig] - trig])
                     for _, _, source, sign in leaves]

    def _on(self, device: torch.device) -> tuple[torch.Tensor, ...]:
        made = self._device.get(device)
        if made is None:
            made = (torch.from_numpy(self.axis).to(device),) + tuple(
                t for _, dtype, source, sign in self.leaves
                for t in (torch.from_numpy(source).to(device),
                          torch.from_numpy(sign).to(device, _real(dtype))))
            self._device[device] = made
        return made

    def prepare(self, device: torch.device) -> None:
        self.angles.on(device)
        self._on(device)

    def fits(self, positions: torch.Tensor) -> bool:
        """Whether ``positions`` have the layout learned (another number of axes, or
        of the ids' columns, is another module's call: not these columns)."""
        rows = max(self.lead, 1)
        if self.axes:
            return positions.dim() == rows + 1 and positions.shape[-1] == self.axes
        return positions.dim() == rows

    def in_range(self, positions: torch.Tensor) -> bool:
        """Whether the tables serve every one of ``positions`` (a host read: the CPU's
        path only; a device gives NaN beyond, as :class:`AngleTables` says)."""
        if not positions.numel():
            return True
        return bool(positions.abs().max() <= self.angles.limit)  # (False for NaN)

    def __call__(self, positions: torch.Tensor) -> Any:
        if self.lead:  # the rows' axes first: the outputs keep them
            rows = [_rows_shape(template, tuple(positions.shape[:self.lead]))
                    for template in self.templates]
            flat = positions.reshape(-1, self.axes) if self.axes else positions.reshape(-1)
            leaves, spec = _pytree.tree_flatten(self._rows(flat))
            return _pytree.tree_unflatten(
                [out.reshape(*axes, *out.shape[1:]) for out, axes in zip(leaves, rows)], spec)
        return self._rows(positions)

    def _constant_columns(self, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """``[0, 1, constants...]`` in ``dtype`` on ``device``, each rounded once."""
        made = self._constants.get((device, dtype))
        if made is None:
            values = torch.from_numpy(self._fixed)
            made = self._constants[(device, dtype)] = values.to(dtype).to(device)
        return made

    def _rows(self, positions: torch.Tensor) -> Any:
        if self._narrow and kernel_reads(positions):
            return self._on_cpu(positions)
        device = positions.device
        axis, *indices = self._on(device)
        per_pair = positions[:, axis] if positions.dim() == 2 else (
            positions[:, None].expand(-1, len(self.axis)))
        sources: dict[torch.dtype, torch.Tensor] = {}
        outputs = []
        for n, (rest, dtype, _, _) in enumerate(self.leaves):
            source, sign = indices[2 * n], indices[2 * n + 1]
            real = _real(dtype)
            values = sources.get(real)
            if values is None:  # [c_0, s_0, c_1, s_1, ..., 0, 1, constants]: once per dtype
                pairs = self.angles.values(per_pair, real, per_pair=True).flatten(-2)
                fixed = self._constant_columns(device, real)
                values = torch.cat([pairs, fixed.expand(pairs.shape[0], -1)], -1)
                sources[real] = values
            rows = values.shape[0]
            columns = values.index_select(-1, source) * sign
            if dtype.is_complex:
                columns = torch.view_as_complex(
                    columns.reshape(rows, columns.shape[1] // 2, 2).contiguous())
            outputs.append(columns.reshape(rows, *rest))
        return _pytree.tree_unflatten(outputs, self.spec)

    def _on_cpu(self, positions: torch.Tensor) -> Any:
        """The outputs of a CPU tensor's positions: the same bits, by the kernel and
        NumPy (a denoising step's timestep embedding in microseconds, not in the dozens
        of small torch operations of the device path).  The columns are all in float32
        or complex64 (see :func:`learn`)."""
        array = kernel_positions(positions)
        per_pair = array.ndim == 2
        if per_pair:
            array = np.ascontiguousarray(array[:, self.axis])
        rows = array.shape[0]
        values = self.angles.array_values(array, per_pair, False)  # (rows, pairs, 2)
        pairs = values.reshape(rows, 2 * values.shape[1])
        outputs = []
        for (rest, dtype, _, _), (take, negated, fixed, value) in zip(self.leaves, self._cpu):
            columns = pairs.take(take, axis=1)
            if negated.size:
                columns[:, negated] = -columns[:, negated]
            if fixed.size:  # (each rounded once to float32)
                columns[:, fixed] = value.astype(np.float32)
            out = torch.from_numpy(columns)
            if dtype.is_complex:
                out = torch.view_as_complex(out.reshape(rows, out.shape[1] // 2, 2))
            outputs.append(out.reshape(rows, *rest))
        return _pytree.tree_unflatten(outputs, self.spec)


def learn(cpu_call: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
          dtypes: list[Optional[torch.dtype]]) -> Optional[Columns]:
    """The columns of ``cpu_call`` (a positional module's code on the CPU) for calls like
    ``args, kwargs``, or None where its outputs are not such columns.  ``dtypes``: the
    module's own output dtypes (the columns are given in them, 16-bit ones in float32).

    The positions are one tensor argument whose values the outputs follow; the other
    tensor arguments' values must change nothing (Anima's ``rotary_emb(x, position_ids)``
    reads ``x``'s dtype alone).  Positions of shape ``(N,)``, ``(N, axes)``, of any
    shape whose every element is a row (``(1, N)`` position ids), or ``(..., axes)``
    (``(B, N, axes)`` ids): then the outputs' first axes are the positions' rows'.""" 
    leaves, spec = _pytree.tree_flatten((args, kwargs))
    tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    for position in tensors:
        if leaves[position].is_complex() or leaves[position].dtype is torch.bool:
            continue
        real = leaves[position]
        # each element a row first: it serves (1, N) ids of any N, where (N, axes) serves
        # only as many axes as learned
        for lead, axes in _layouts(real):
            form = _learn_at(cpu_call, leaves, spec, position, lead, axes, dtypes)
            if form is not None and values_unread(cpu_call, leaves, spec,
                                                  [i for i in tensors if i != position]):
                form.position, form.lead, form.axes = position, lead, axes
                return form
    return None


def _layouts(positions: torch.Tensor) -> list[tuple[int, int]]:
    """The layouts ``(lead, axes)`` a positions tensor may have, in the order tried:
    ``lead`` leading axes are the rows (0: the first alone), ``axes`` the positions of
    a row (0: one).  Each element a row; ``(..., axes)``; ``(N,)`` or ``(N, axes)``."""
    dim, last = positions.dim(), positions.shape[-1] if positions.dim() else 0
    if dim <= 1:
        return [(0, 0)]
    layouts = [(dim, 0)]
    if dim > 2 and 1 <= last <= MAX_AXES:
        layouts.append((dim - 1, last))
    if dim == 2 and 1 <= last <= MAX_AXES:
        layouts.append((0, last))
    return layouts


def _learn_at(cpu_call: Callable[..., Any], leaves: list[Any], spec: Any, position: int,
              lead: int, axes: int, dtypes: list[Optional[torch.dtype]]) -> Optional[Columns]:
    """:func:`learn` with ``leaves[position]`` as the positions, of the layout ``(lead,
    axes)`` (:func:`_layouts`)."""
    real = leaves[position]
    shape = tuple(real.shape)
    rows = real.numel() // max(axes, 1)
    if rows == 0:  # no values: every column would match every other, and the constants
        return None
    lead_shape = shape[:lead]
    templates: list[tuple[int, ...]] = []  # per output, its rows' axes (:func:`_row_axes`)

    def run(positions: torch.Tensor) -> tuple[Any, list[tuple[int, Any, Any]]]:
        given = list(leaves)
        given[position] = positions
        call_args, call_kwargs = _pytree.tree_unflatten(given, spec)
        mode = _Recording([positions])
        with torch.no_grad(), mode:
            out = cpu_call(*call_args, **call_kwargs)
        if not lead:
            return out, mode.calls
        # the rows' axes: the calls' and outputs' first axes must be the positions' rows'
        calls = [(kind, angle.reshape(rows, -1), result.reshape(rows, -1))
                 for kind, angle, result in mode.calls
                 if _row_axes(angle.shape, lead_shape) and _row_axes(result.shape, lead_shape)]
        outputs = []
        templates.clear()
        for t in _pytree.tree_leaves(out):
            template = _row_axes(t.shape, lead_shape) if isinstance(t, torch.Tensor) else None
            if template is None:
                raise ValueError("an output without the positions' rows first")
            templates.append(template)
            outputs.append(t.reshape(rows, *t.shape[len(template):]))
        if len(calls) != len(mode.calls):
            raise ValueError("an angle without the positions' rows first")
        return _pytree.tree_unflatten(outputs, _pytree.tree_flatten(out)[1]), calls

    dtype = real.dtype if real.is_floating_point() else torch.int64
    unit_shape = (rows, axes) if axes else (rows,)
    try:
        zero_out, zero_calls = run(torch.zeros(shape, dtype=dtype))
        one_out, one_calls = run(torch.ones(shape, dtype=dtype))
        axis_calls = [run(_unit(unit_shape, a, dtype).reshape(shape))[1]
                      for a in range(max(axes, 1))]
        probe = _random(shape, dtype)
        outputs, probe_calls = run(probe)
    except Exception:
        return None
    pairs = _pairs(zero_calls, one_calls, axis_calls, rows)
    if pairs is None or len(probe_calls) != len(one_calls):
        return None
    out_leaves, out_spec = _pytree.tree_flatten(outputs)
    others = [_pytree.tree_leaves(zero_out), _pytree.tree_leaves(one_out)]
    try:  # far positions too (a column such as ``p > 1000`` is constant below 1000)
        others.append(_pytree.tree_leaves(run((probe * 61 + 1000).to(dtype))[0]))
        any_constant = True
    except Exception:  # (a table the positions index, say): the zeros and ones alone
        any_constant = False
    form = _columns(pairs, probe_calls, out_leaves, out_spec, dtypes, rows, others,
                    any_constant)
    if form is not None and lead:
        form.templates = list(templates)
    return form


def _rows_shape(template: tuple[int, ...], rows: tuple[int, ...]) -> tuple[int, ...]:
    """The first axes of an output of ``template`` (:func:`_row_axes`) for ``rows``."""
    given = iter(rows)
    return tuple(next(given) if n < 0 else 1 for n in template)


def _row_axes(shape: Any, rows: tuple[int, ...]) -> Optional[tuple[int, ...]]:
    """How a tensor of ``shape`` holds the positions' rows ``rows`` in its first axes:
    -1 for each row axis, in order, and 1 for a singleton axis between them (PRX's
    ``unsqueeze(1)`` for the heads); None where it does not, or where a row axis of one
    could be taken for a singleton (which one it is would be a guess)."""
    template: list[int] = []
    left = list(rows)
    for n in shape:
        if not left:
            break
        if n == left[0]:
            template.append(-1)
            left.pop(0)
        elif n == 1:
            template.append(1)
        else:
            return None
    if left or (1 in template and 1 in rows):
        return None
    return tuple(template)


def values_unread(call: Callable[..., Any], leaves: list[Any], spec: Any, indices: list[int],
                  want: Any = None) -> bool:
    """Whether ``call``'s outputs (``want``, else its outputs on ``leaves``) keep their
    bits when every tensor leaf at ``indices`` holds other values: each element
    changed (twice plus one: plus one alone leaves a bfloat16 1000 as it was; negated
    for bool).  Empty tensors have no values to change."""
    changed = list(leaves)
    for i in indices:
        tensor = leaves[i]
        if not tensor.numel():
            continue
        changed[i] = ~tensor if tensor.dtype is torch.bool else tensor * 2 + 1
        if not bool((changed[i] != tensor).all()):  # (infinities, NaNs, wrapped integers)
            return False
    if all(a is b for a, b in zip(changed, leaves)):  # no values to change
        return True
    try:
        with torch.no_grad():
            if want is None:
                args, kwargs = _pytree.tree_unflatten(leaves, spec)
                want = call(*args, **kwargs)
            args, kwargs = _pytree.tree_unflatten(changed, spec)
            again = call(*args, **kwargs)
    except Exception:
        return False
    return _same(again, want)


def _same(a: Any, b: Any) -> bool:
    """The same structure and the same bits (tensors: shape, dtype and values)."""
    la, lb = _pytree.tree_leaves(a), _pytree.tree_leaves(b)
    if len(la) != len(lb):
        return False
    for x, y in zip(la, lb):
        if isinstance(x, torch.Tensor) != isinstance(y, torch.Tensor):
            return False
        if isinstance(x, torch.Tensor):
            if x.shape != y.shape or x.dtype != y.dtype or not torch.equal(x, y):
                return False
        elif x != y:
            return False
    return True


def _unit(shape: tuple[int, ...], axis: int, dtype: torch.dtype) -> torch.Tensor:
    unit = torch.zeros(shape, dtype=dtype)
    if len(shape) == 1:
        unit += 1
    else:
        unit[:, axis] = 1
    return unit


def _random(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(0)
    values = torch.randint(1, 1000, shape, generator=generator)
    if dtype.is_floating_point:
        values = values + torch.rand(shape, generator=generator, dtype=torch.float64)
    return values.to(dtype)


def _pairs(zero: list[Any], one: list[Any], axes: list[list[Any]], rows: int
           ) -> Optional[list[tuple[np.ndarray, np.ndarray]]]:
    """Per trigonometric call, its columns' frequencies and axes; None where an angle is
    not a position times a frequency."""
    found = []
    for i, (kind, angle, _) in enumerate(one):
        if (angle.dim() != 2 or angle.shape[0] != rows or len(zero) != len(one)
                or bool(zero[i][1].abs().max() != 0)):
            return None
        freq = angle[0].numpy()
        if not bool((angle == angle[0]).all()):
            return None  # the angle follows the row, not the position
        axis = np.full(len(freq), -1)
        for a, calls in enumerate(axes):
            if len(calls) != len(one):
                return None
            moved = calls[i][1][0].numpy()
            axis[(moved == freq) & (freq != 0)] = a
        if len(axes) > 1 and bool(((axis < 0) & (freq != 0)).any()):
            return None
        found.append((freq, np.maximum(axis, 0)))
    return found


def _real(dtype: torch.dtype) -> torch.dtype:
    return dtype.to_real() if dtype.is_complex else dtype


def _columns(pairs: list[tuple[np.ndarray, np.ndarray]], calls: list[Any], outputs: list[Any],
             out_spec: Any, dtypes: list[Optional[torch.dtype]], rows: int,
             others: list[list[Any]], any_constant: bool = True) -> Optional[Columns]:
    """Each output column as one call's column (or its negation), or a constant: the
    same value in every row of ``outputs`` and of the other probes' outputs
    (``others``: a column that follows the positions differs between the zeros', the
    ones' and the far positions' probes); zeros and ones alone unless
    ``any_constant``."""
    freq = np.concatenate([f for f, _ in pairs]) if pairs else np.zeros(0)
    axis = np.concatenate([a for _, a in pairs]) if pairs else np.zeros(0, np.int64)
    index: dict[bytes, tuple[int, float]] = {}
    start = 0
    for (kind, _, result), (f, _) in zip(calls, pairs):
        values = result.reshape(rows, -1).double()
        for j in range(values.shape[1]):
            column = values[:, j].contiguous().numpy()
            for sign in (1.0, -1.0):
                index.setdefault((sign * column).tobytes(), (2 * (start + j) + kind, sign))
        start += len(f)
    trig = 2 * len(freq)
    constants: dict[bytes, int] = {np.zeros(1).tobytes(): trig, np.ones(1).tobytes(): trig + 1}
    leaves = []
    for n, (leaf, dtype) in enumerate(zip(outputs, dtypes or [None] * len(outputs))):
        if not isinstance(leaf, torch.Tensor) or leaf.dim() < 1 or leaf.shape[0] != rows:
            return None
        target = dtype if dtype is not None else leaf.dtype
        if target in (torch.float16, torch.bfloat16):
            target = torch.float32
        flat = _flat(leaf, rows)
        same = [_flat(other[n], rows) if n < len(other) and isinstance(other[n], torch.Tensor)
                and other[n].shape == leaf.shape else None for other in others]
        if any(other is None for other in same):
            return None
        source, sign = [], []
        for c in range(flat.shape[1]):
            column = flat[:, c].contiguous().numpy()
            match = index.get(column.tobytes())
            if match is None:
                if not all(bool((values[:, c] == float(column[0])).all()) for values in [flat, *same]):
                    return None  # neither a trigonometric column nor a constant
                first = column[:1].tobytes()
                if first not in constants and not any_constant:
                    return None
                match = (constants.setdefault(first, trig + len(constants)), 1.0)
            source.append(match[0])
            sign.append(match[1])
        rest = tuple(leaf.shape[1:])
        leaves.append((rest, target, np.array(source, np.int64), np.array(sign, np.float32)))
    fixed = np.frombuffer(b"".join(sorted(constants, key=constants.get)), np.float64)[2:]
    return Columns(freq, axis.astype(np.int64), out_spec, leaves, fixed.copy()) if leaves else None


def _flat(leaf: torch.Tensor, rows: int) -> torch.Tensor:
    """An output's columns (a complex one's as real and imaginary parts), in double."""
    wide = torch.view_as_real(leaf) if leaf.is_complex() else leaf
    return wide.reshape(rows, -1).double()
