"""A positional module's (or function's) own code, exact, kept: a stand-in for any form.

Modules that compute positional values come in many forms (interleaved or halved cos
and sin, 2x2 rotation matrices, complex ``freqs_cis``, timestep embeddings, tables
sliced by a grid) and signatures.  :class:`ExactCall` stands in for any of them without
knowing the form: it runs the module's own code on the CPU with its angles formed in
double (:class:`sinpe.torch.patching._taint.ExactAngles`: the model's own frequencies
and positions, those made from ranges in double, their products exact, cos and sin in
double), on the branch
the code takes on the CPU (the float64 one where the code would drop to float32 on
MPS: ``torch.backends.mps.is_available()`` reads False there), rounds each output once
(to the dtype the module returns, float32 where it returns a 16-bit float: a model
cast to bfloat16 keeps exact float32 tables), and moves it to the device once.

- **The same bits on every device**: the values are computed on the CPU whatever the
  model's device, so CPU, CUDA and MPS get the same bits.
- **Kept**: outputs are kept per call key, least recently used out (:data:`KEPT`): the
  shapes, dtypes and devices of the tensor arguments and the other arguments' values,
  and the tensors' values where the output depends on them.  Whether it does is seen at
  the first call (the module's own code on other values of the same shapes): a module
  that reads only its arguments' shapes (a grid's size) is keyed by shapes alone, so a
  denoising loop pays for its tables once per resolution and its steps read nothing.
  Otherwise a CPU tensor's values are part of the key (read on the host, as the kernel
  path reads positions), and a tensor on another device is known by identity (the same
  tensor object, unchanged): a new tensor is read on the host once.
- **Checked**: the first call also runs the module's own code and compares (the same
  structure, shapes and devices; values within the rounding of its own float32 angles:
  :func:`sinpe.torch.patching._double.caches_differ`).  If they differ, that call and
  every later one return the module's own result, ``failed`` says why and
  ``on_failure`` is told: never silently wrong.
- **Learned forms** for code that reads values: outputs that are cosines and sines of
  its positions become :mod:`._columns` (the exact angle tables, on any device); code
  whose every angle is a float32 value it was given or looked up (an attention
  processor, a float32 table of angles), which its run in double would take as it
  is, runs as itself on its device with cos and sin exact (:mod:`._inline`); angles it
  forms from its float32 inputs, from ranges it makes, or from angles a stand-in gave it
  with their errors (:mod:`._sources`) by float32 arithmetic have that arithmetic
  carried exactly (:mod:`._pairs`; checked against the code in double, or where its
  outputs cannot be held to that, an attention after the cosines, each cos and sin),
  float32 buffers of angles are formed again (:mod:`._position_tables`).
"""

import contextlib
import threading
from collections import OrderedDict
from typing import Any, Callable, Iterator, Optional, Union

import torch
from torch.utils import _pytree

from sinpe.torch._tensors import _device_path, _round_once, _version
from sinpe.torch.patching import _columns, _inline, _pairs, _position_tables
from sinpe.torch.patching._double import caches_differ
from sinpe.torch.patching._taint import ExactAngles

KEPT = 8  # call keys kept per stand-in
# CPU positions (a learned columns form) computed at every call up to this many, kept
# per value above (Flux's ids: the same at every denoising step, dearer to compute)
COMPUTED = 1024
_EXACT = (torch.float32, torch.float64, torch.complex64, torch.complex128)
_CPU = torch.device("cpu")


@contextlib.contextmanager
def _cpu_branches() -> Iterator[None]:
    """Code that drops to float32 where MPS exists (``torch.backends.mps.is_available()``,
    even for CPU tensors) takes its float64 branch."""
    available = torch.backends.mps.is_available
    torch.backends.mps.is_available = lambda: False  # type: ignore[assignment]
    try:
        yield
    finally:
        torch.backends.mps.is_available = available  # type: ignore[assignment]


def _on_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return value.detach().to(_CPU)
    if isinstance(value, torch.device):
        return _CPU
    return value


def _plain(leaves: list[Any]) -> tuple[Any, ...]:
    """A call's leaves as plain values, tensors by shape, dtype and device (what a traced
    call looks kept outputs up by: as :meth:`_Shape.plain`)."""
    return tuple((tuple(int(n) for n in leaf.shape), leaf.dtype, str(leaf.device))
                 if isinstance(leaf, torch.Tensor) else leaf for leaf in leaves)


def _static(tensor: torch.Tensor) -> None:
    try:
        torch._dynamo.mark_static_address(tensor, guard=False)
    except Exception:  # pragma: no cover - an older torch: CUDA graphs copy it
        pass


def _zeros_on_cpu(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return torch.zeros(value.shape, dtype=value.dtype)
    if isinstance(value, torch.device):
        return _CPU
    return value


class _Shape:
    """A tensor argument in a key: what its output depends on."""

    __slots__ = ("shape", "dtype", "device", "tensor", "version", "values")

    def __init__(self, tensor: torch.Tensor, by_value: bool) -> None:
        self.shape, self.dtype, self.device = tuple(tensor.shape), tensor.dtype, tensor.device
        self.tensor: Optional[torch.Tensor] = None
        self.version: Any = None
        self.values: Optional[bytes] = None
        if by_value:
            if not _device_path(tensor):  # a CPU tensor: its values (the host has them)
                self.values = _bytes(tensor)
            else:  # by identity: the object kept (its id cannot be reused while kept)
                self.tensor, self.version = tensor, _version(tensor)
                if self.version is None:  # an inference tensor: no version, never kept
                    self.version = object()

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, _Shape) and (self.shape, self.dtype, self.device,
                                               self.version, self.values)
                == (other.shape, other.dtype, other.device, other.version, other.values)
                and self.tensor is other.tensor)

    def __hash__(self) -> int:
        return hash((self.shape, self.dtype, str(self.device), self.version, self.values,
                     id(self.tensor)))

    def plain(self) -> tuple[Any, ...]:
        return (tuple(int(n) for n in self.shape), self.dtype, str(self.device))


class ExactCall:
    """Stands in for ``own`` (a module's bound ``forward``, or a function): its code on
    the CPU in ``cpu_call`` (the module rebuilt on the CPU with exact tables, or the
    function), inputs' values in double, each output rounded once; kept per call key;
    checked at the first call (module docstring)."""

    def __init__(self, own: Callable[..., Any], cpu_call: Callable[..., Any],
                 state: Callable[[], tuple[Any, ...]] = tuple, angle: float = 0.0) -> None:
        self.own = own
        self.cpu_call = cpu_call
        self.state = state  # what else the outputs depend on (parameters' versions)
        # the largest angle of the tables cpu_call's module made at construction: the
        # module's own tables may be off by their float32 rounding
        self.angle = angle
        self.checked = False
        self.failed = ""
        self.by_value = True  # until the first call shows the outputs depend on shapes only
        self.on_failure: Optional[Callable[[str], None]] = None
        self._kept: OrderedDict[Any, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._dtypes: list[Optional[torch.dtype]] = []
        self.columns: Optional[_columns.Columns] = None  # (learned at the first call)
        self._by_shape: dict[Any, Any] = {}
        self._position = -1  # the tensor argument the columns read
        # cos and sin of the angles it is given, exact, the rest its own code on its
        # device (:mod:`._inline`): where it reads values that change at every call
        # (an attention processor's hidden states, a float32 table's angles looked up)
        # and its angles in double would be those float32 values again
        self.inline = False
        # with float32 tables of angles looked up by position, formed again exactly
        self.tables: Optional[_position_tables.PositionTables] = None
        # the inputs (leaf numbers) whose arithmetic forms its angles, carried exactly;
        # ``follows_made``: the same of the ranges its code makes (``_pairs.MADE``)
        self.followed: list[int] = []
        self.follows_made = False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if torch.compiler.is_compiling():
            return self._traced(args, kwargs)
        return self.call(args, kwargs)

    def _traced(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call while torch.compile traces: the columns' device operations, or the
        outputs kept for these shapes (constants of the graph, at fixed addresses for
        CUDA graphs), else (before the first eager call of a grid) an eager call outside
        the graph: a graph break."""
        if self.failed:
            return self.own(*args, **kwargs)
        if self.checked and self.columns is not None:  # (the bits the eager path keeps)
            positions = _leaf(args, kwargs, self._position)
            if self.columns.fits(positions):
                return self.columns(positions)
        if self.checked and not self.by_value:
            kept = self._by_shape.get(_plain(_pytree.tree_leaves((args, kwargs))))
            if kept is not None:
                return kept
        return _untraced(self, args, kwargs)

    def call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.failed:
            return self.own(*args, **kwargs)
        if self.inline:
            return self._run_inline(args, kwargs)
        positions = None
        if self.columns is not None:
            positions = _leaf(args, kwargs, self._position)
            if not self.columns.fits(positions) or not (
                    _device_path(positions) or self.columns.in_range(positions)):
                # not the layout learned, or (on the CPU) positions beyond the tables'
                # range: kept or computed as any call
                positions = None
            # device operations (no host read); on the CPU, the kernel's few microseconds
            # for a few positions (a timestep), else the outputs kept for these values
            elif _device_path(positions) or positions.numel() <= COMPUTED:
                return self.columns(positions)
        key = self._key(args, kwargs)
        with self._lock:
            kept = self._kept.get(key)
            if kept is not None:
                self._kept.move_to_end(key)
                return kept
        if not self.checked:
            return self._first(args, kwargs)
        if positions is not None:
            value = self.columns(positions)
        else:
            value = self._exact(args, kwargs, self._device(args, kwargs))
        self._keep(key, value)
        return value

    # -- the first call: the module's own result, the check, what the key holds

    def _first(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        with torch.no_grad():
            want = self.own(*args, **kwargs)
        if any(isinstance(leaf, torch.Tensor) and not leaf.numel()
               for leaf in _pytree.tree_leaves((args, kwargs))):
            # an empty tensor shows nothing of how the module reads values (every check
            # would pass): its own outputs, and the check waits for a call with values
            return want
        self._dtypes = [leaf.dtype if isinstance(leaf, torch.Tensor) else None
                        for leaf in _pytree.tree_leaves(want)]
        device = next((leaf.device for leaf in _pytree.tree_leaves(want)
                       if isinstance(leaf, torch.Tensor)), _CPU)
        try:
            got, mode = self._exact(args, kwargs, device, angle=True)
        except Exception as exc:
            return self._fail(f"cannot be run with its inputs' values in double precision "
                              f"({exc!r})", want)
        why = _differs(got, want, max(mode.angle, self.angle))
        if why:
            return self._fail(why, want)
        self.checked = True
        self.by_value = not _shapes_alone(self.own, args, kwargs, want)
        if self.by_value:
            got = self._learn(args, kwargs, got)
            if self.columns is None:
                inline = self._learn_inline(args, kwargs, want, mode.as_given)
                if inline is not None:
                    return inline
        self._keep(self._key(args, kwargs), got)
        return got

    def _run_inline(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if self.tables is not None:
            try:
                return self.tables.run(self.own, args, kwargs)
            except _inline.Unlearned:
                pass  # another branch of the code than the one learned: its own angles
        pairs = self._follow(args, kwargs, self.followed, self.follows_made)
        with _inline.ExactTrig(pairs=pairs):
            return self.own(*args, **kwargs)

    @staticmethod
    def _follow(args: tuple[Any, ...], kwargs: dict[str, Any],
                followed: Optional[list[int]], made: bool) -> Optional[_pairs.Pairs]:
        """The inputs ``followed`` (leaf numbers; None: every one), and with ``made`` the
        ranges the code makes, carried exactly through the arithmetic that forms the
        angles from them (:mod:`._pairs`)."""
        if followed == [] and not made:
            return None
        leaves = _pytree.tree_leaves((args, kwargs))
        return _pairs.Pairs([(i, leaf) for i, leaf in enumerate(leaves)
                             if isinstance(leaf, torch.Tensor)
                             and (followed is None or i in followed)], made=made)

    def _learn_inline(self, args: tuple[Any, ...], kwargs: dict[str, Any], want: Any,
                      as_given: bool) -> Any:
        """The outputs of the inline form (:mod:`._inline`), which serves every later call,
        if each cos and sin it gives is within the rounding of the code's own and the
        outputs are laid out as ``want``; else None.  Where the angles are formed from
        the inputs' float32 values, that arithmetic is carried exactly (:mod:`._pairs`);
        where they come from float32 tables of position times frequency
        (:mod:`._position_tables`), those are formed again exactly, if the outputs are
        then within the rounding of the code's own.  Otherwise the inline form takes the
        angles as given: only where the code's run in double would too (``as_given``)."""
        out, mode = self._followed(args, kwargs, want)
        if mode is None or _inline.differs(mode.calls) or not _same_layout(out, want):
            return None
        if self.followed or self.follows_made:  # angles formed exactly: no buffers to swap
            self.inline = True
            return out
        tables = _position_tables.angle_tables(getattr(self.own, "__self__", None))
        form = _position_tables.learn(self.own, args, kwargs, tables, [
            (angle, cosine) for angle, cosine, _, _ in mode.calls]) if tables else None
        if form is not None:
            try:
                exact = form.run(self.own, args, kwargs)
            except Exception:
                exact = None
            angle = max(float(a.abs().max()) if a.numel() else 0.0 for a, _, _, _ in mode.calls)
            if exact is not None and _same_layout(exact, want) and not _differs(
                    exact, want, angle):
                self.inline, self.tables = True, form
                return exact
        if not as_given:
            return None
        self.inline = True
        return out

    def _followed(self, args: tuple[Any, ...], kwargs: dict[str, Any], want: Any
                  ) -> tuple[Any, Optional[_inline.ExactTrig]]:
        """The inline form's outputs and its recording mode (None: the code fails under
        it), the angles it forms from its inputs and the ranges it makes carried exactly
        (:mod:`._pairs`) if that gives the exact outputs (those of its code with those
        inputs' values taken in double, :class:`ExactAngles`) to within the two
        roundings' difference, or each cosine and sine to within it (a processor's
        attention after them runs in float32); else without, ``followed`` then empty."""
        pairs = self._follow(args, kwargs, None, True)
        assert pairs is not None
        mode = _inline.ExactTrig(record=True, pairs=pairs)
        try:
            with mode:
                out = self.own(*args, **kwargs)
        except Exception:
            out = None
        used = sorted(pairs.used - {_pairs.MADE})
        self.followed, self.follows_made = [], False
        if not pairs.used and out is not None:  # no angle formed: the plain run's values
            return out, mode
        if out is not None and _same_layout(out, want):
            try:
                exact, angles = self._exact(args, kwargs, self._device(args, kwargs),
                                            angle=True, positions=used)
            except Exception:
                exact = angles = None
            if angles is not None and (_within_an_ulp(out, exact)
                                       or _each_within_an_ulp(mode.calls, angles.trig)):
                self.followed, self.follows_made = used, _pairs.MADE in pairs.used
                return out, mode
        mode = _inline.ExactTrig(record=True)
        try:
            with mode:
                return self.own(*args, **kwargs), mode
        except Exception:
            return None, None

    def _learn(self, args: tuple[Any, ...], kwargs: dict[str, Any], got: Any) -> Any:
        """The columns form, if the module's outputs are one (and it gives the exact
        outputs to within the two roundings' difference: one ulp plus ``2**-29``); the
        outputs it gives for this call, else ``got``."""
        cpu_args, cpu_kwargs = _pytree.tree_map(_on_cpu, (args, kwargs))
        try:
            with _cpu_branches():
                form = _columns.learn(self.cpu_call, cpu_args, cpu_kwargs, self._dtypes)
        except Exception:
            return got
        if form is None:
            return got
        position = form.position
        try:
            mine = form(_pytree.tree_leaves((args, kwargs))[position])
        except Exception:
            return got
        try:  # against the exact outputs with these positions in double: the code's own
            # angles in double where its arithmetic is recorded, as in ``got``, else more
            exact = self._exact(args, kwargs, self._device(args, kwargs), positions=position)
        except Exception:
            return got
        if not _within_an_ulp(mine, exact):
            return got
        self.columns, self._position = form, position
        return mine

    def _fail(self, why: str, want: Any) -> Any:
        self.failed = why
        if self.on_failure is not None:
            self.on_failure(why)
        return want

    # -- the exact values

    def _exact(self, args: tuple[Any, ...], kwargs: dict[str, Any], device: torch.device,
               angle: bool = False, positions: Optional[Union[int, list[int]]] = None
               ) -> Any:
        """The outputs in double, each rounded once (module docstring); with ``angle``
        also the :class:`ExactAngles` that ran (its trigonometric results recorded)."""
        # (a module that reads its arguments' shapes alone gets zeros of their shapes on
        # the CPU: nothing is read or copied from the device)
        place = _on_cpu if self.by_value or not self.checked else _zeros_on_cpu
        cpu_args, cpu_kwargs = _pytree.tree_map(place, (args, kwargs))
        # (``positions``: the leaves whose values every operation then takes in double)
        numbers = [] if positions is None else (
            [positions] if isinstance(positions, int) else positions)
        cpu_leaves, tree = _pytree.tree_flatten((cpu_args, cpu_kwargs))
        if numbers:
            given = _pytree.tree_leaves((args, kwargs))
            for i in numbers:  # angles a stand-in gave with their rounding errors: in double
                lo = _pairs.given_low(given[i])
                if lo is not None:
                    cpu_leaves[i] = cpu_leaves[i].double() + lo.cpu().double()
            cpu_args, cpu_kwargs = _pytree.tree_unflatten(cpu_leaves, tree)
        mode = ExactAngles([cpu_leaves[i] for i in numbers], layouts=True, record=angle)
        with _cpu_branches(), torch.no_grad(), mode:
            out = self.cpu_call(*cpu_args, **cpu_kwargs)
        leaves, spec = _pytree.tree_flatten(out)
        dtypes = self._dtypes or [None] * len(leaves)
        rounded = [_rounded(leaf, dtype, device) for leaf, dtype in zip(leaves, dtypes)]
        value = _pytree.tree_unflatten(rounded, spec)
        return (value, mode) if angle else value

    def _device(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> torch.device:
        for leaf in _pytree.tree_leaves((args, kwargs)):
            if isinstance(leaf, torch.Tensor):
                return leaf.device
            if isinstance(leaf, torch.device):
                return leaf
        return _CPU

    # -- the kept outputs

    def _key(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        leaves, spec = _pytree.tree_flatten((args, kwargs))
        parts = []
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                parts.append(_Shape(leaf, self.by_value))
            else:
                try:
                    hash(leaf)
                    parts.append(leaf)
                except TypeError:
                    parts.append(repr(leaf))
        return (str(spec), tuple(parts), self.state())

    def _keep(self, key: Any, value: Any) -> None:
        for leaf in _pytree.tree_leaves(value):
            if isinstance(leaf, torch.Tensor):
                _static(leaf)
        with self._lock:
            self._kept[key] = value
            self._kept.move_to_end(key)
            while len(self._kept) > KEPT:
                self._kept.popitem(last=False)
            # (the same outputs by plain shapes, for a compiled graph's lookup)
            self._by_shape = {} if self.by_value else {
                tuple(p.plain() if isinstance(p, _Shape) else p for p in k[1]): v
                for k, v in self._kept.items()}


def _leaf(args: tuple[Any, ...], kwargs: dict[str, Any], position: int) -> Any:
    """``tree_leaves((args, kwargs))[position]``, without pytree's cost where no argument
    is a container (a timestep embedding's call: a denoising step's few microseconds)."""
    flat = [*args, *kwargs.values()]
    if any(isinstance(a, (list, tuple, dict)) for a in flat):
        return _pytree.tree_leaves((args, kwargs))[position]
    return flat[position]


def _rounded(value: Any, dtype: Optional[torch.dtype], device: torch.device) -> Any:
    """A double output rounded once to the module's dtype (float32 for a 16-bit one,
    the complex of float32 for complex32), on ``device``."""
    if not isinstance(value, torch.Tensor):
        return value
    if dtype is None or not (dtype.is_floating_point or dtype.is_complex):
        return value.to(device) if dtype is None else value.to(device=device, dtype=dtype)
    target = dtype if dtype in _EXACT else (torch.complex64 if dtype.is_complex
                                            else torch.float32)
    if value.is_complex():
        return value.to(target).to(device)
    return _round_once(value.to(torch.float64), target).to(device)


def _within_an_ulp(mine: Any, got: Any) -> bool:
    """The same structure, shapes, dtypes and devices, and each value within one ulp of
    its dtype plus ``2**-29`` (two roundings of one exact value, each within half an ulp
    plus ``2**-30``)."""
    a, spec_a = _pytree.tree_flatten(mine)
    b, spec_b = _pytree.tree_flatten(got)
    if spec_a != spec_b:
        return False
    for x, y in zip(a, b):
        if not isinstance(x, torch.Tensor) or (x.shape, x.dtype, x.device) != (
                y.shape, y.dtype, y.device):
            return False
        x, y = (torch.view_as_real(t) if t.is_complex() else t for t in (x, y))
        if x.numel():
            ulp = torch.finfo(y.dtype).eps * y.double().abs()
            if not bool(((x.double() - y.double()).abs() <= ulp + 2.0**-29).all()):
                return False
    return True


def _each_within_an_ulp(calls: list[tuple[torch.Tensor, bool, torch.Tensor, torch.Tensor]],
                        trig: list[torch.Tensor]) -> bool:
    """Whether each cos and sin the inline form gave (``calls``: :class:`_inline.ExactTrig`'s
    record) is within :func:`_within_an_ulp` of the same call's in double (``trig``:
    :class:`ExactAngles`' record of the same code), rounded once."""
    return len(calls) == len(trig) and all(
        exact.shape == value.shape and _within_an_ulp(
            exact.detach().cpu(), _round_once(value, exact.dtype))
        for (_, _, exact, _), value in zip(calls, trig))


def _same_layout(a: Any, b: Any) -> bool:
    """The same structure, and tensors of the same shapes, dtypes and devices."""
    la, spec_a = _pytree.tree_flatten(a)
    lb, spec_b = _pytree.tree_flatten(b)
    return spec_a == spec_b and all(
        (x.shape, x.dtype, x.device) == (y.shape, y.dtype, y.device)
        if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) else
        not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor)
        for x, y in zip(la, lb))


def _differs(got: Any, want: Any, angle: float) -> str:
    """Why the exact outputs do not stand for the module's own, or "": the same
    structure, shapes and devices, and values within the rounding of the module's own
    arithmetic (:func:`sinpe.torch.patching._double.caches_differ`'s bound, with the
    unit of the module's own dtype: a 16-bit table, which sinpe gives in float32, is
    held to its own rounding)."""
    got_leaves, got_spec = _pytree.tree_flatten(got)
    want_leaves, want_spec = _pytree.tree_flatten(want)
    if got_spec != want_spec:
        return f"returns {want_spec}, not as its own run does"
    for g, w in zip(got_leaves, want_leaves):
        if isinstance(w, torch.Tensor) and w.dtype in (torch.float16, torch.bfloat16):
            if not isinstance(g, torch.Tensor) or g.shape != w.shape or g.device != w.device:
                return "returns tensors of another shape or device in double precision"
            top = max(float(w.detach().abs().max()), 1.0) if w.numel() else 1.0
            bound = top * (16 * angle * 2.0**-24 + 2.0**-23) + 2 * top * torch.finfo(w.dtype).eps
            if w.numel() and not bool(((g.double() - w.double()).abs() <= bound).all()):
                return ("computes values in double precision that differ from its own "
                        "beyond rounding")
            continue
        why = caches_differ(g, w, angle)
        if why:
            return why
    return ""


def _bytes(tensor: torch.Tensor) -> bytes:
    """A tensor's values as bytes, whatever its strides (an expanded timestep's are 0)."""
    values = tensor.detach()
    if values.dtype is torch.bfloat16:  # (no NumPy dtype: its bits)
        values = values.view(torch.int16)
    return values.numpy().tobytes()


def _shapes_alone(own: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                  want: Any) -> bool:
    """Whether the module's outputs depend on its tensor arguments' shapes alone: its
    own code on other values of every tensor gives the same bits."""
    leaves, spec = _pytree.tree_flatten((args, kwargs))
    tensors = [i for i, leaf in enumerate(leaves) if isinstance(leaf, torch.Tensor)]
    return _columns.values_unread(own, leaves, spec, tensors, want)


@torch.compiler.disable  # type: ignore[untyped-decorator]
def _untraced(call: ExactCall, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A call under torch.compile: outside the graph (the kept outputs are looked up by
    Python keys), as a graph break."""
    return call.call(args, kwargs)
