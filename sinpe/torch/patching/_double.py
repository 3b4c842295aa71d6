"""A rotary module's own forward, in double precision: exact caches for any module.

sinpe's :class:`sinpe.torch.RotaryEmbedding` stands in for the rotary modules of
transformers' text models (a ``forward(x, position_ids)`` returning ``(cos, sin)`` or
``freqs_cis``), from kept tables.  Other rotary modules compute their caches their own
way: vision towers' 2-D grids from the image size, audio encoders' relative
positions, modules whose positions are fractions.  For those, :class:`DoubleForward`
runs the module's own code with every float32 value it makes computed in float64
instead: its float32 frequencies (exact in double) times positions made in double,
cos and sin in double, the result rounded once to the dtype the module returns.  That
is sinpe's promise (the module's frequencies, the angles exact) for any code, at the
price of running it (a few times HF's time: these modules run once per forward).

Which values change: tensors made or converted to float32 (``.float()``,
``.to(torch.float32)``, ``.type``, tensor factories with ``dtype=torch.float32`` or
torch's default float dtype) are made in float64, complex64 in complex128; nothing
else (no ``view`` of bits, no other dtype).  The module's buffers keep their dtypes
(a buffer the forward reassigns is cast back after the call).  The largest angle
given to ``cos``/``sin``/``polar`` is recorded while a module is checked (a value read
on the host: at patch, or at the first call): it bounds how far HF's float32 result may
be from the double one, which the check uses.  Checked calls read nothing on the host.

This is the one place where sinpe computes in float64 on a model's device:
:func:`sinpe.torch.patch` names the modules it serves this way
(``Patch.double_precision``), and refuses them on a device without float64 (Apple's
MPS).
"""

import copy
import types
from typing import Any, Callable, Optional

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from sinpe.torch._tensors import _is_compiling

_FACTORIES = {torch.arange, torch.zeros, torch.ones, torch.full, torch.empty, torch.tensor,
              torch.linspace, torch.logspace, torch.eye, torch.as_tensor, torch.zeros_like,
              torch.ones_like, torch.full_like, torch.empty_like, torch.rand, torch.randn}
_WIDER = {torch.float32: torch.float64, torch.complex64: torch.complex128}
_NARROWER = {torch.float64: torch.float32, torch.complex128: torch.complex64}
_ANGLES = {torch.cos, torch.sin, torch.polar, torch.Tensor.cos, torch.Tensor.sin,
           torch.exp, torch.Tensor.exp}


def _wider(dtype: Any) -> Any:
    if isinstance(dtype, torch.dtype):
        return _WIDER.get(dtype, dtype)
    return dtype


class InDouble(TorchFunctionMode):
    """float32 made float64 (complex64 complex128) wherever a value is made or cast."""

    def __init__(self, record: bool = True) -> None:
        super().__init__()
        self.angle = 0.0
        self.record = record  # the largest angle (a value read: not while torch traces)

    def __torch_function__(self, func: Callable[..., Any], types: Any, args: Any = (),
                           kwargs: Any = None) -> Any:
        kwargs = dict(kwargs or {})
        if func is torch.Tensor.float:
            return args[0].to(torch.float64)
        if func in (torch.Tensor.to, torch.Tensor.type):
            args = tuple(_wider(a) for a in args)
            if "dtype" in kwargs:
                kwargs["dtype"] = _wider(kwargs["dtype"])
            if func is torch.Tensor.type and args[1:] and args[1] in ("torch.FloatTensor",):
                args = (args[0], torch.float64)
        elif func in _FACTORIES:
            if "dtype" in kwargs:
                kwargs["dtype"] = _wider(kwargs["dtype"])
            result = func(*args, **kwargs)
            if isinstance(result, torch.Tensor) and result.dtype in _WIDER and (
                    "dtype" not in kwargs):
                return result.to(_WIDER[result.dtype])
            return result
        elif func in _ANGLES and self.record:
            angles = args[1] if func is torch.polar else args[0]
            if isinstance(angles, torch.Tensor) and angles.numel() and not angles.is_complex():
                self.angle = max(self.angle, float(angles.detach().abs().max()))
            elif isinstance(angles, torch.Tensor) and angles.numel():  # exp(i * angle)
                self.angle = max(self.angle, float(angles.detach().imag.abs().max()))
        return func(*args, **kwargs)


def _narrowed(value: Any, keep_double: bool) -> Any:
    """Outputs rounded once to the dtype the module returns for float32 work."""
    if isinstance(value, torch.Tensor):
        if keep_double or value.dtype not in _NARROWER:
            return value
        return value.to(_NARROWER[value.dtype])
    if isinstance(value, tuple):
        return tuple(_narrowed(v, keep_double) for v in value)
    if isinstance(value, list):
        return [_narrowed(v, keep_double) for v in value]
    return value


def _has_double(values: Any) -> bool:
    return any(isinstance(v, torch.Tensor) and v.dtype in (torch.float64, torch.complex128)
               for v in values)


def run_in_double(module: nn.Module, forward: Callable[..., Any], args: tuple[Any, ...],
                  kwargs: dict[str, Any], record: bool = True) -> tuple[Any, float]:
    """``forward(*args, **kwargs)`` in double precision, its outputs rounded once, and
    the largest angle it took the cosine or sine of (0.0 unless ``record``)."""
    dtypes = {name: b.dtype for name, b in module.named_buffers()}
    mode = InDouble(record)
    try:
        with torch.no_grad(), mode:
            result = forward(*args, **kwargs)
    finally:
        for name, buffer in module.named_buffers():  # reassigned in double: as it was
            if name in dtypes and buffer.dtype != dtypes[name]:
                owner, _, attribute = name.rpartition(".")
                module.get_submodule(owner)._buffers[attribute] = buffer.to(dtypes[name])
    keep = _has_double([*args, *kwargs.values()])
    return _narrowed(result, keep), mode.angle


def caches_differ(got: Any, want: Any, angle: float) -> str:
    """Why ``got`` (the double run's outputs) does not stand for ``want`` (the module's
    own), or "": the same structure, shapes, dtypes and devices, and values within the
    rounding of the module's own float32 arithmetic on angles up to ``angle``: a chain
    of up to 16 float32 roundings of the angle (2**-24 each, relative), float32 cos and
    sin (1 ulp), and the output's half ulp on each side, for values up to the largest
    the module returns."""
    if isinstance(want, (tuple, list)):
        if type(got) is not type(want) or len(got) != len(want):
            return f"returns a {type(want).__name__} of {len(want)}, not as its own run does"
        for g, w in zip(got, want):
            why = caches_differ(g, w, angle)
            if why:
                return why
        return ""
    if not isinstance(want, torch.Tensor):
        return "" if got == want else f"returns {type(want).__name__}s that differ"
    if not isinstance(got, torch.Tensor) or (got.shape, got.dtype, got.device) != (
            want.shape, want.dtype, want.device):
        return "returns tensors of another shape or dtype in double precision"
    if not (want.is_floating_point() or want.is_complex()):
        return "" if torch.equal(got, want) else "returns integers that differ"
    if not want.numel():
        return ""
    g, w = torch.view_as_real(got) if got.is_complex() else got, (
        torch.view_as_real(want) if want.is_complex() else want)
    top = max(float(w.detach().abs().max()), 1.0)
    eps = torch.finfo(w.dtype).eps
    bound = top * (16 * angle * 2.0**-24 + 2.0**-23) + 2 * top * eps
    if not bool(((g.double() - w.double()).abs() <= bound).all()):
        return "computes values in double precision that differ from its own beyond rounding"
    return ""


class DoubleForward:
    """Stands in for a rotary module's ``forward``: its own code in double precision, run
    on a copy of the module made at patch time (state a forward keeps, as dynamic rope's,
    evolves in the copy: the model's module is never run by sinpe, and after ``undo`` it
    is as it was).

    ``checked`` False: the first call also runs the module's own forward (on another
    copy) and compares (:func:`caches_differ`); if they differ, that call and every later
    one return the module's own result, ``failed`` says why, and ``on_failure`` is told
    (the patch records it and warns): never silently wrong.

    Under torch.compile and torch.export the same code is traced, the mode included:
    one graph, the eager values, no angle recorded.  The first-call check reads values,
    so an unchecked module's first call is a graph break under torch.compile (which
    ``fullgraph=True`` turns into an error: call the model once eagerly first, as
    torch.export needs too)."""

    def __init__(self, module: nn.Module, checked: bool,
                 on_failure: Optional[Callable[[str], None]] = None) -> None:
        self.module = copy.deepcopy(module)
        self.own = types.MethodType(type(module).forward, self.module)
        self.reference = None if checked else copy.deepcopy(module)
        self.checked = checked
        self.failed = ""
        self.on_failure = on_failure

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if _is_compiling():  # torch.compile, torch.export: the same code, traced
            if self.failed:
                return self.own(*args, **kwargs)
            if not self.checked:  # the first-call check reads values: a graph break
                return _eager(self, args, kwargs)
            return run_in_double(self.module, self.own, args, kwargs, record=False)[0]
        return self.eager(args, kwargs)

    def eager(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        """A call, not traced: the first one checked against the module's own."""
        if self.failed:
            return self.own(*args, **kwargs)
        if self.checked or self.reference is None:  # no value read: the angle is not needed
            return run_in_double(self.module, self.own, args, kwargs, record=False)[0]
        got, angle = run_in_double(self.module, self.own, args, kwargs)
        want = types.MethodType(type(self.reference).forward, self.reference)(*args, **kwargs)
        why = caches_differ(got, want, angle)
        if why:
            self.failed = why
            self.module = self.reference  # the module's own state, as HF's moved it
            self.own = types.MethodType(type(self.reference).forward, self.reference)
            if self.on_failure is not None:
                self.on_failure(why)
            return want
        self.checked, self.reference = True, None
        return got

    def run(self, *args: Any) -> tuple[Any, float]:
        """The double run and its largest angle (for the checks)."""
        return run_in_double(self.module, self.own, args, {})


@torch.compiler.disable  # type: ignore[untyped-decorator]
def _eager(double: DoubleForward, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """A call of ``double`` that torch.compile does not trace (its first-call check, which
    reads values): a graph break."""
    return double.eager(args, kwargs)
