"""sinpe's custom ops: what ``torch.compile`` and ``torch.export`` see of its kernels.

Eager calls never go through these ops: a ``torch.library`` op costs tens of
microseconds of Python dispatch per call, more than a decoding step's whole
rotary forward.  The public functions and the rotary module take them only
while torch traces (:func:`_tensors._is_compiling`: under ``torch.compile`` and
``torch.export``), so that a traced graph holds one opaque node per kernel call,
whose fake implementation gives its outputs' shapes, dtypes and devices (also
for tensors on the ``meta`` device): no ``.item()``, no data-dependent Python
branch, no call into the extension outside an op.

- ``sinpe::rope_cache(positions, width, n, freq, scale, layout, dtype, sections,
  sections_layout) -> (cos, sin)``: RoPE caches for explicit positions, on the
  positions' device; ``layout`` "concatenated", "interleaved" or "half" (the
  ``r/2`` distinct columns, of which the complex ``freqs_cis`` form is made).
- ``sinpe::rope(x, ...) -> Tensor``: ``sinpe.torch.rope``, differentiable (its
  backward pass is the same op with the inverse rotation).
- ``sinpe::rope_(x!, ...) -> ()``: ``sinpe.torch.rope_``, in place.

Each op is a pure function of its inputs, so an exported program runs in any
process that has imported :mod:`sinpe.torch` (which registers them).  The
values are checked by the real implementations when the op runs (positions
beyond ``sinpe.MAX_POSITION``: ``ValueError``), the arguments known at trace
time by the fake ones too, with sinpe's messages, before anything is traced.
Values are those of the eager functions, bit for bit: a row of a cache depends
only on its position, the frequencies, the scale and the dtype.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import torch

import sinpe
from sinpe.torch import _angles
from sinpe.torch._rotation import _Rotation
from sinpe.torch._tensors import (
    _DTYPES,
    _SUPPORTED,
    _device_path,
    _host_array,
    _is_compiling,
    _kernel_view,
)

Tensor = torch.Tensor
# whether torch traces (torch.compile, torch.export): the callers' branch to these ops
is_compiling = _is_compiling

# The caches' layouts: sinpe's two pair layouts, and "half": the r/2 distinct
# columns (concatenated's first half), from which HF's complex freqs_cis is made.
LAYOUTS = ("concatenated", "interleaved", "half")
OUTPUTS = ("pair", "complex")
_COMPLEX_PARTS = {torch.complex64: torch.float32, torch.complex128: torch.float64}
_NUMPY_DTYPES = {torch.float32: np.float32, torch.float64: np.float64}
# The ops are defined on one library, their real implementations registered for every
# backend (CompositeExplicitAutograd: caches are computed on the CPU and moved, a rotation
# runs the kernel on CPU memory and torch's ops elsewhere), their fake ones for tracing
# and the meta device.  torch.library.custom_op would add ~100 us of Python dispatch to
# each call (measured), which a compiled model pays once a forward.
_LIBRARY: Any = torch.library.Library("sinpe", "DEF")  # type: ignore[no-untyped-call]
_ROTATION_ARGS = ("Tensor? positions, SymInt? offset, SymInt? axis, float? n, Tensor? freq, "
                  "str layout, SymInt? rotary_dim, float scale, bool exact, SymInt[]? sections, "
                  "str? sections_layout")
_LIBRARY.define("rope_cache(Tensor positions, SymInt width, float? n, Tensor? freq, float scale, "
                "str layout, ScalarType dtype, SymInt[]? sections, str? sections_layout) "
                "-> (Tensor, Tensor)")
_LIBRARY.define(f"rope(Tensor x, {_ROTATION_ARGS}, bool inverse) -> Tensor")
_LIBRARY.define(f"rope_(Tensor(a!) x, {_ROTATION_ARGS}) -> ()")


def _register(name: str, impl: Callable[..., Any], fake: Callable[..., Any]) -> Any:
    """The op ``sinpe::name`` with its real and fake implementations."""
    _LIBRARY.impl(name, impl, "CompositeExplicitAutograd")
    torch.library.register_fake(f"sinpe::{name}", fake, lib=_LIBRARY)
    return getattr(torch.ops.sinpe, name).default


# -- sinpe::rope_cache ---------------------------------------------------------------------


def _check_positions(positions: Tensor, name: str) -> None:
    if positions.dtype is torch.bool or positions.is_complex():
        raise TypeError(f"{name} must be integer or real, got {positions.dtype}")


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(map(repr, LAYOUTS))}, "
                         f"got layout={layout!r}")


def _cache_rows(positions: Tensor, sections: Optional[Sequence[int]]) -> tuple[Any, ...]:
    """The caches' rows: the positions' shape, without its leading section axis."""
    if sections is None:
        return tuple(positions.shape)
    if positions.dim() < 1 or positions.shape[0] != len(sections):
        raise ValueError(f"positions must lead with one row per section ({len(sections)}), "
                         f"got shape {tuple(positions.shape)}")
    return tuple(positions.shape[1:])


def _values(tensor: Tensor, name: str) -> object:
    """A tensor's values as sinpe reads them: a CPU tensor's own memory as an array (sinpe
    copies what it reads), else :func:`_host_array`'s host copy (other devices, half
    types, tensors NumPy cannot view)."""
    if tensor.dtype is not torch.float16 and tensor.dtype is not torch.bfloat16:
        try:
            return tensor.numpy()
        except (RuntimeError, TypeError):
            pass
    return _host_array(tensor.resolve_neg(), name)


def _rope_cache_impl(positions: Tensor, width: int, n: Optional[float], freq: Optional[Tensor],
                     scale: float, layout: str, dtype: torch.dtype,
                     sections: Optional[list[int]], sections_layout: Optional[str]
                     ) -> tuple[Tensor, Tensor]:
    """The caches by the kernel on the CPU (sinpe checks every argument, the positions'
    values too, before it writes); on the device path by device operations on the
    positions' device (:mod:`sinpe.torch._angles`: no host read, no copy).  (Once a
    compiled forward: its Python is kept short, ~10 us here besides the kernel.)"""
    if layout not in LAYOUTS:
        _check_layout(layout)
    if _device_path(positions):
        _rope_cache_fake(positions, width, n, freq, scale, layout, dtype, sections,
                         sections_layout)
        frequencies = (_angles.schedule_frequencies(10000.0 if n is None else n, width)
                       if freq is None else _angles.frequencies_of(freq))
        angles = _angles.angles_of(frequencies[: width // 2], scale)
        ids = positions
        if sections is not None:
            rows = _angles.pair_rows(tuple(sections), sections_layout or "contiguous")
            ids = ids.index_select(0, torch.from_numpy(rows).to(ids.device)).movedim(0, -1)
        caches = _angles.pair_caches(angles.values(ids, dtype, sections is not None), layout)
        return caches[0].clone(), caches[1].clone()  # (an op's outputs may not alias)
    given: dict[str, Any] = {"positions": _values(positions, "positions"), "scale": scale}
    if layout == "interleaved":
        given["layout"] = layout
    if n is not None:
        given["n"] = n
    if freq is not None:
        given["freq"] = _values(freq, "freq")
    if sections is not None:
        given["sections"] = sections
        if sections_layout is not None:
            given["sections_layout"] = sections_layout
    if dtype is torch.float32 or dtype is torch.float64:  # NumPy's arrays, shared
        cos_array, sin_array = sinpe.rope(None, width, **given, dtype=_NUMPY_DTYPES[dtype])
        cos, sin = torch.from_numpy(cos_array), torch.from_numpy(sin_array)
    else:  # half types: the kernel writes the tensors' memory
        if dtype not in _DTYPES:
            raise TypeError(f"dtype must be {_SUPPORTED}, got {dtype}")
        shape = (*_cache_rows(positions, sections), width)
        cos, sin = torch.empty(shape, dtype=dtype), torch.empty(shape, dtype=dtype)
        sinpe.rope(None, width, **given, out=(_kernel_view(cos), _kernel_view(sin)))
    if layout == "half":
        cos, sin = cos[..., : width // 2].contiguous(), sin[..., : width // 2].contiguous()
    if positions.is_cpu:
        return cos, sin
    return cos.to(positions.device), sin.to(positions.device)


def _rope_cache_fake(positions: Tensor, width: int, n: Optional[float], freq: Optional[Tensor],
                     scale: float, layout: str, dtype: torch.dtype,
                     sections: Optional[list[int]], sections_layout: Optional[str]
                     ) -> tuple[Tensor, Tensor]:
    """The caches' shapes, after the checks that need no values: sinpe's own, on a
    call of no rows with stand-ins for the frequencies."""
    _check_positions(positions, "positions")
    _check_layout(layout)
    if dtype not in _DTYPES:
        raise TypeError(f"dtype must be {_SUPPORTED}, got {dtype}")
    columns: dict[str, Any] = {"scale": scale}
    if n is not None:
        columns["n"] = n
    if freq is not None:
        if freq.dim() != 1:
            raise ValueError(f"freq must have one dimension, got shape {tuple(freq.shape)}")
        columns["freq"] = np.ones(freq.shape[0])
    sinpe.rope(0, width, **columns)
    shape = (*_cache_rows(positions, sections), width // 2 if layout == "half" else width)
    return positions.new_empty(shape, dtype=dtype), positions.new_empty(shape, dtype=dtype)


_rope_cache_op = _register("rope_cache", _rope_cache_impl, _rope_cache_fake)


def rope_cache(positions: Tensor, width: int, *, n: Optional[float] = None,
               freq: Optional[Tensor] = None, scale: float = 1.0,
               layout: str = "concatenated", dtype: torch.dtype = torch.float32,
               sections: Optional[Sequence[int]] = None, sections_layout: Optional[str] = None,
               output: str = "pair") -> Union[tuple[Tensor, Tensor], Tensor]:
    """RoPE caches for explicit ``positions`` by ``sinpe::rope_cache``, on their device.

    ``output="pair"``: ``(cos, sin)`` of shape ``positions.shape + (width,)`` (the
    leading section axis left out with ``sections``; ``width // 2`` columns for
    ``layout="half"``) in ``dtype``.  ``output="complex"``: HF's ``freqs_cis`` form,
    ``cos + i sin`` of the ``width // 2`` frequencies, one tensor of the complex
    ``dtype`` (``torch.complex64``: float32 parts, each rounded once).  ``freq`` (a
    real tensor, read in double) or ``n``; ``scale`` multiplies both parts before
    their rounding.  For traced code: eager callers compute the same values
    without the op's dispatch."""
    if output not in OUTPUTS:
        raise ValueError(f"output must be one of {', '.join(map(repr, OUTPUTS))}, "
                         f"got output={output!r}")
    listed = None if sections is None else [int(s) for s in sections]
    if output == "pair":
        cos, sin = _rope_cache_op(positions, width, n, freq, scale, layout, dtype, listed,
                                  sections_layout)
        return cos, sin
    part = _COMPLEX_PARTS.get(dtype)
    if part is None:
        raise TypeError(f"output='complex' needs dtype torch.complex64 or torch.complex128, "
                        f"got {dtype}")
    cos, sin = _rope_cache_op(positions, width, n, freq, scale, "half", part, listed,
                              sections_layout)
    return torch.complex(cos, sin)


# -- sinpe::rope and sinpe::rope_ ------------------------------------------------------------


def _rotation(positions: object, offset: Optional[int], axis: Optional[int],
              n: Optional[float], freq: object, layout: str,
              rotary_dim: Optional[int], scale: float, exact: bool,
              sections: Optional[list[int]], sections_layout: Optional[str]) -> _Rotation:
    return _Rotation(n, offset, axis, positions, layout, freq, rotary_dim, scale, exact,
                     sections, sections_layout)


def _check_rotation(x: Tensor, positions: Optional[Tensor], offset: Optional[int],
                    axis: Optional[int], n: Optional[float], freq: Optional[Tensor],
                    layout: str, rotary_dim: Optional[int], scale: float, exact: bool,
                    sections: Optional[list[int]], sections_layout: Optional[str]) -> None:
    """sinpe's checks of a rotation that need no values, where the shapes are static
    (a dynamic one is checked when the op runs), on a probe of ``x``'s shape with
    stand-ins for the tensors' values."""
    shapes = [x.shape] + [t.shape for t in (positions, freq) if t is not None]
    if not all(type(size) is int for shape in shapes for size in shape):
        return
    _rotation(None if positions is None else np.zeros(tuple(positions.shape)), offset, axis, n,
              None if freq is None else np.ones(tuple(freq.shape)), layout, rotary_dim, scale,
              exact, sections, sections_layout).check(x)


def _rope_impl(x: Tensor, positions: Optional[Tensor], offset: Optional[int],
               axis: Optional[int], n: Optional[float], freq: Optional[Tensor], layout: str,
               rotary_dim: Optional[int], scale: float, exact: bool,
               sections: Optional[list[int]], sections_layout: Optional[str],
               inverse: bool) -> Tensor:
    out = torch.empty_like(x)
    _rotation(positions, offset, axis, n, freq, layout, rotary_dim, scale, exact, sections,
              sections_layout).run(out, x, inverse)
    return out


def _rope_fake(x: Tensor, positions: Optional[Tensor], offset: Optional[int],
               axis: Optional[int], n: Optional[float], freq: Optional[Tensor], layout: str,
               rotary_dim: Optional[int], scale: float, exact: bool,
               sections: Optional[list[int]], sections_layout: Optional[str],
               inverse: bool) -> Tensor:
    _check_rotation(x, positions, offset, axis, n, freq, layout, rotary_dim, scale, exact,
                    sections, sections_layout)
    return torch.empty_like(x)


_rope_op = _register("rope", _rope_impl, _rope_fake)


def _rope_setup(ctx: Any, inputs: tuple[Any, ...], output: Tensor) -> None:
    ctx.save_for_backward(inputs[1], inputs[5])  # positions, freq
    ctx.others = inputs[2:5] + inputs[6:12]
    ctx.inverse = inputs[12]


def _rope_backward(ctx: Any, grad: Tensor) -> tuple[Optional[Tensor], ...]:
    """The rotation by the negated angles (the transpose), by the same op: so its
    own backward pass is the forward one again (higher derivatives)."""
    positions, freq = ctx.saved_tensors
    offset, axis, n, layout, rotary_dim, scale, exact, sections, sections_layout = ctx.others
    back = _rope_op(grad, positions, offset, axis, n, freq, layout, rotary_dim, scale, exact,
                    sections, sections_layout, not ctx.inverse)
    return (back,) + (None,) * 12


torch.library.register_autograd("sinpe::rope", _rope_backward, setup_context=_rope_setup,
                                lib=_LIBRARY)


def _rope_inplace_impl(x: Tensor, positions: Optional[Tensor], offset: Optional[int],
                       axis: Optional[int], n: Optional[float], freq: Optional[Tensor],
                       layout: str, rotary_dim: Optional[int], scale: float, exact: bool,
                       sections: Optional[list[int]], sections_layout: Optional[str]) -> None:
    _rotation(positions, offset, axis, n, freq, layout, rotary_dim, scale, exact, sections,
              sections_layout).run(None, x, False)


def _rope_inplace_fake(x: Tensor, positions: Optional[Tensor], offset: Optional[int],
                       axis: Optional[int], n: Optional[float], freq: Optional[Tensor],
                       layout: str, rotary_dim: Optional[int], scale: float, exact: bool,
                       sections: Optional[list[int]], sections_layout: Optional[str]) -> None:
    _check_rotation(x, positions, offset, axis, n, freq, layout, rotary_dim, scale, exact,
                    sections, sections_layout)


_rope_inplace_op = _register("rope_", _rope_inplace_impl, _rope_inplace_fake)


def rotation_args(positions: object, freq: object, sections: object
                  ) -> tuple[Optional[Tensor], Optional[Tensor], Optional[list[int]]]:
    """The tensor and list arguments of a traced rotation or cache: ``positions`` and
    ``freq`` as tensors (arrays and lists become constants of the graph), ``sections``
    as a list of ints (a tensor's values cannot be read while tracing)."""
    if positions is not None and not isinstance(positions, torch.Tensor):
        positions = torch.as_tensor(np.asarray(positions))
    if freq is not None and not isinstance(freq, torch.Tensor):
        freq = torch.as_tensor(np.asarray(freq, dtype=np.float64))
    if isinstance(sections, torch.Tensor):
        raise TypeError("sections must be a list of ints while torch traces (a tensor's "
                        "values are not known then)")
    listed = None if sections is None else [int(s) for s in sections]  # type: ignore[attr-defined]
    return positions, freq, listed


def rope(x: Tensor, positions: object, offset: Optional[int], axis: Optional[int],
         n: Optional[float], freq: object, layout: str, rotary_dim: Optional[int], scale: float,
         exact: bool, sections: object, sections_layout: Optional[str]) -> Tensor:
    """``sinpe.torch.rope``'s traced form: one ``sinpe::rope`` node."""
    pos, fr, secs = rotation_args(positions, freq, sections)
    out: Tensor = _rope_op(x, pos, offset, axis, n, fr, layout, rotary_dim, float(scale),
                           bool(exact), secs, sections_layout, False)
    return out


def rope_(x: Tensor, positions: object, offset: Optional[int], axis: Optional[int],
          n: Optional[float], freq: object, layout: str, rotary_dim: Optional[int],
          scale: float, exact: bool, sections: object, sections_layout: Optional[str]
          ) -> Tensor:
    """``sinpe.torch.rope_``'s traced form: one ``sinpe::rope_`` node that writes ``x``."""
    pos, fr, secs = rotation_args(positions, freq, sections)
    _rope_inplace_op(x, pos, offset, axis, n, fr, layout, rotary_dim, float(scale),
                     bool(exact), secs, sections_layout)
    return x


# -- the rotary module's traced forward --------------------------------------------------------


def rotary_forward(module: Any, rotary: Any, x: Tensor, position_ids: Tensor
                   ) -> Optional[Union[tuple[Tensor, Tensor], Tensor]]:
    """:class:`sinpe.torch.RotaryEmbedding`'s forward while torch traces: the caches of
    ``position_ids`` by one ``sinpe::rope_cache`` node, in the layer type's form
    (``rotary.form``: "concatenated", "interleaved", "half", or "complex": complex64
    ``freqs_cis``) and the module's output dtype (``x.dtype`` by default) on
    ``x.device``; the same values as its eager forward (a kept table's rows depend
    only on their positions and frequencies).  longrope's switch on
    ``max(position_ids) + 1`` is traced as HF traces it (``torch.where`` between the
    short and long frequencies, both constants of the graph).  None for ``dynamic``,
    whose frequencies follow the lengths seen so far (state that the eager forward
    keeps, where HF's module breaks the graph too).

    Reads of ``module``: ``output_dtype``; of ``rotary`` (the layer type's rope):
    ``rope_type``, ``form``, ``sections``, ``sections_layout``, ``freq`` and
    ``scaling`` (at construction), ``original`` and ``long`` (longrope's switch length
    and long frequencies; these computed here, once, by ``rotary._compute`` if the
    eager forward has not yet)."""
    if rotary.rope_type == "dynamic":
        return None
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
    dtype = module.output_dtype if module.output_dtype is not None else x.dtype
    if rotary.form != "complex" and dtype not in _DTYPES:
        raise TypeError(f"x must have dtype {_SUPPORTED} (the caches' dtype), got {x.dtype}")
    if not isinstance(position_ids, torch.Tensor):
        raise TypeError(f"position_ids must be a torch.Tensor, got {type(position_ids).__name__}")
    _check_positions(position_ids, "position_ids")
    if _device_path(x):  # device operations, which the compiler traces and fuses
        caches: Union[tuple[Tensor, Tensor], Tensor] = rotary.device_caches(
            position_ids, dtype, x.device)
        return caches
    ids = position_ids.to(x.device)
    constants = _frequencies(rotary)  # (rotary.freq, a NumPy array, is never read here: torch
    # would guard on it as on a tensor, by a Python guard, at every call of the compiled graph)
    freq = torch.tensor(constants, dtype=torch.float64, device=ids.device)
    if rotary.rope_type == "longrope" and rotary.original is not None:
        long = torch.tensor(_long_frequencies(rotary), dtype=torch.float64, device=ids.device)
        freq = torch.where(ids.max() + 1 > rotary.original, long, freq)
    sections = rotary.sections
    if sections is not None:  # HF's position_ids.expand(3, -1, -1) of (B, L) ids
        if ids.dim() == 2 or (ids.dim() == 3 and ids.shape[0] == 1):
            ids = ids.expand(len(sections), *ids.shape[-2:])
        elif ids.dim() != 3 or ids.shape[0] != len(sections):
            raise ValueError(f"position_ids must have shape ({len(sections)}, B, L) (one row "
                             f"per section) or (B, L), got {tuple(ids.shape)}")
    complex_form = rotary.form == "complex"
    return rope_cache(ids, 2 * len(constants), freq=freq, scale=rotary.scaling,
                      layout="half" if complex_form else rotary.form,
                      dtype=torch.complex64 if complex_form else dtype, sections=sections,
                      sections_layout=rotary.sections_layout if sections is not None else None,
                      output="complex" if complex_form else "pair")


# The frequencies as Python floats (doubles), constants of the traced graph computed
# outside the trace: the graph makes its tensor of them.  (A NumPy array turned into a
# tensor inside the trace is a fake constant under strict torch.export, and tensors
# returned by such functions collide in torch.compile's graph when two modules use them.)


@torch.compiler.assume_constant_result  # type: ignore[untyped-decorator]
def _frequencies(rotary: Any) -> tuple[float, ...]:
    """The frequencies at construction."""
    return tuple(float(w) for w in rotary.freq)


@torch.compiler.assume_constant_result  # type: ignore[untyped-decorator]
def _long_frequencies(rotary: Any) -> tuple[float, ...]:
    """longrope's long frequencies, computed here if the eager forward has not yet
    (by the module's own function: transformers' where it has them, on real tensors),
    once."""
    if rotary.long is None:
        with _untraced():
            rotary.long = rotary._compute(rotary.original + 1)
    return tuple(float(w) for w in rotary.long)


def _untraced() -> contextlib.ExitStack:
    """A context in which torch's tracing modes are off (torch.export's fake tensors and
    graph recording), so that a constant is computed on real tensors."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

    stack = contextlib.ExitStack()
    stack.enter_context(unset_fake_temporarily())
    stack.enter_context(disable_proxy_modes_tracing())
    return stack
