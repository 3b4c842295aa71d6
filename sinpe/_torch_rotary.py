"""sinpe.torch's rotary position embeddings (RoPE): ``rope_``, ``rope``,
``apply_rotary_pos_emb`` and ``apply_rotary_pos_emb_vision``, which
:mod:`sinpe.torch` re-exports (use them from there).

The kernel on the CPU (``sinpe.rope_`` and its private forms), torch's own ops
with the same formula elsewhere.  sinpe.torch's helpers (which tensors the
kernel can write, its views of their memory) are looked up there at each
call, so that the test suite can force torch's path by replacing them; and
sinpe.torch hands itself over when it imports this module (``_base``), so that
neither import has to come first.
"""

import operator
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray
import torch

import sinpe

_base: Any = None  # sinpe.torch, set by sinpe.torch

# -- rotary position embeddings ---------------------------------------------------------


def _host_array(value: object, name: str) -> object:
    """``positions``/``freq`` as the kernel reads them: a tensor's values as a NumPy array."""
    if isinstance(value, torch.Tensor):  # a tensor's values
        if value.is_complex():
            raise TypeError(f"{name} must be real, got a tensor of dtype {value.dtype}")
        value = value.detach().cpu()
        if value.dtype in (torch.float16, torch.bfloat16):
            value = value.double()
        return value.numpy()
    return value


def _host_sections(sections: object) -> object:
    """``sections`` as sinpe reads it: a tensor's values as a list."""
    if isinstance(sections, torch.Tensor):
        return sections.tolist()
    return sections


def _check_rotatable(tensor: object, name: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {tensor.layout}")
    if tensor.dtype not in _base._DTYPES:
        raise TypeError(f"{name} must have dtype {_base._SUPPORTED}, got {tensor.dtype}")


class _Rotation:
    """The arguments of one rotation, checked by sinpe and with host copies of
    ``positions`` and ``freq``: what :func:`rope_` and :class:`_Rope` share."""

    __slots__ = ("n", "offset", "axis", "positions", "layout", "freq", "rotary_dim", "scale",
                 "exact", "sections", "sections_layout")

    def __init__(self, n: Optional[float], offset: Optional[int], axis: Optional[int],
                 positions: object, layout: str, freq: object, rotary_dim: Optional[int],
                 scale: float, exact: bool, sections: object = None,
                 sections_layout: Optional[str] = None) -> None:
        self.n = n
        self.offset = offset
        self.axis = axis
        self.positions = None if positions is None else _host_array(positions, "positions")
        self.layout = layout
        self.freq = None if freq is None else _host_array(freq, "freq")
        self.rotary_dim = rotary_dim
        self.scale = scale
        self.exact = exact
        self.sections = _host_sections(sections)
        self.sections_layout = sections_layout

    def kwargs(self) -> dict[str, Any]:
        """The keywords sinpe takes, only those given (its defaults and exclusions apply)."""
        given: dict[str, Any] = {"layout": self.layout, "rotary_dim": self.rotary_dim,
                                 "scale": self.scale, "exact": self.exact}
        if self.n is not None:
            given["n"] = self.n
        if self.freq is not None:
            given["freq"] = self.freq
        if self.positions is not None:
            given["positions"] = self.positions
        if self.offset is not None:
            given["offset"] = self.offset
        if self.axis is not None:
            given["axis"] = self.axis
        given.update(self.section_kwargs())
        return given

    def section_kwargs(self) -> dict[str, Any]:
        """``sections``/``sections_layout``, only those given."""
        given: dict[str, Any] = {}
        if self.sections is not None:
            given["sections"] = self.sections
        if self.sections_layout is not None:
            given["sections_layout"] = self.sections_layout
        return given

    def check(self, tensor: torch.Tensor) -> None:
        """sinpe's own checks, with its messages, against ``tensor``'s shape and dtype.

        The probe is a zero-stride NumPy view of one element: nothing of the
        tensor's size is allocated, nothing is written.
        """
        probe = np.lib.stride_tricks.as_strided(
            np.zeros(1, np.float64 if tensor.dtype is torch.float64 else np.float32),
            tuple(tensor.shape), (0,) * tensor.dim())
        sinpe._core._rope_into(None, probe, **self.kwargs())

    def run(self, out: Optional[torch.Tensor], source: torch.Tensor, inverse: bool) -> None:
        """``out`` (or ``source`` itself, in place) = the rotation of ``source``."""
        if out is None and _base._kernel_writes(source):  # in place (never inverse)
            sinpe._core._rope_into(_memory(source), None, **self.kwargs())
            torch.autograd.graph.increment_version(source)
            return
        if out is not None and _base._kernel_writes(out) and _base._kernel_writes(source):
            sinpe._core._rope_into(_memory(out), _memory(source), inverse=inverse,
                                   **self.kwargs())
            return
        self.check(source)
        if source.numel() == 0:
            return
        rotated = self.by_torch(source, inverse)
        with torch.no_grad():
            if out is None:
                source[..., : rotated.shape[-1]].copy_(rotated)
            else:
                out[..., : rotated.shape[-1]].copy_(rotated)
                out[..., rotated.shape[-1]:].copy_(source[..., rotated.shape[-1]:])

    def caches(self, tensor: torch.Tensor) -> tuple[NDArray[Any], NDArray[Any]]:
        """float64 ``(cos, sin)`` of sinpe, times scale, shaped to broadcast against
        ``tensor[..., :rotary_dim]``."""
        ndim = tensor.dim()
        width = tensor.shape[-1] if self.rotary_dim is None else operator.index(self.rotary_dim)
        common: dict[str, Any] = {"dtype": np.float64, "layout": self.layout}
        if self.freq is not None:
            common["freq"] = self.freq
        elif self.n is not None:
            common["n"] = self.n
        if self.positions is None:
            axis = operator.index(-2 if self.axis is None else self.axis) % ndim
            offset = 0 if self.offset is None else self.offset
            cos, sin = sinpe.rope(tensor.shape[axis], width, offset=offset, **common)
            shape = [1] * ndim
            shape[axis], shape[-1] = tensor.shape[axis], width
        else:  # with sections, positions lead with one row per section
            positions = np.asarray(self.positions)
            cos, sin = sinpe.rope(None, width, positions=positions, **common,
                                  **self.section_kwargs())
            rows = list(cos.shape[:-1])
            shape = [1] * (ndim - 1 - len(rows)) + rows + [width]
        scale = float(self.scale)
        return (cos * scale).reshape(shape), (sin * scale).reshape(shape)

    def by_torch(self, tensor: torch.Tensor, inverse: bool) -> torch.Tensor:
        """The rotated features of ``tensor``, by torch's ops on its device: the
        kernel's formula, with the caches rounded once to the dtype (default), or
        in float64 with the result rounded once (exact)."""
        cos, sin = self.caches(tensor)
        if inverse:
            sin = -sin
        width = cos.shape[-1]
        x = tensor[..., :width]
        device = tensor.device
        if self.exact or tensor.dtype is torch.float64:
            c, s = (torch.from_numpy(a).to(device) for a in (cos, sin))
            wide = x.double()
            return _round_once(wide * c + _rotate_half(wide, self.layout) * s, tensor.dtype)
        c, s = (_round_once(torch.from_numpy(a), tensor.dtype).to(device) for a in (cos, sin))
        return x * c + _rotate_half(x, self.layout) * s


def _rotate_half(x: torch.Tensor, layout: str) -> torch.Tensor:
    """HF's ``rotate_half`` (concatenated) or GPT-J's ``rotate_every_two`` (interleaved)."""
    if layout == "interleaved":
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def _round_once(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 ``values`` rounded once (to nearest, ties to even) to ``dtype``.

    torch rounds float64 to float16/bfloat16 through float32, which can round
    twice; rounding to float32 by round-to-odd first (toward zero, the last bit
    set when anything was dropped) makes the second rounding the only one.
    """
    if dtype is torch.float64 or dtype is torch.float32:
        return values.to(dtype)
    narrow = values.float()
    inexact = narrow.double() != values
    bits = narrow.view(torch.int32)
    bits = bits - (inexact & (narrow.double().abs() > values.abs())).to(torch.int32)
    bits = bits | inexact.to(torch.int32)
    return bits.view(torch.float32).to(dtype)


def _rotation_checks(tensor: object, name: str) -> None:
    _check_rotatable(tensor, name)
    assert isinstance(tensor, torch.Tensor)
    if tensor.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            f"{name} is an inference tensor and torch.inference_mode() is off: torch forbids "
            "changing it in place; rotate inside inference_mode(), or use sinpe.torch.rope"
        )


def rope_(
    tensor: torch.Tensor,
    n: Optional[float] = None,
    *,
    offset: Optional[int] = None,
    axis: Optional[int] = None,
    positions: object = None,
    layout: str = "concatenated",
    freq: object = None,
    rotary_dim: Optional[int] = None,
    scale: float = 1.0,
    exact: bool = False,
    sections: object = None,
    sections_layout: Optional[str] = None,
) -> torch.Tensor:
    """Apply rotary position embeddings to ``tensor`` in place: ``sinpe.rope_`` for PyTorch.

    For inference (queries and keys of a forward pass without autograd); for
    training use :func:`rope`.  Arguments as ``sinpe.rope_`` (``n`` defaults
    to 10000, ``offset`` to 0, ``axis`` to -2; ``positions`` and ``freq`` may be
    tensors): positions run along ``axis`` or come from ``positions``, which
    broadcast against ``tensor.shape[:-1]`` (HF's ``position_ids[:, None, :]``
    for ``(B, H, L, D)``).  With ``sections`` (multi-axis RoPE: Qwen2-VL's
    ``mrope_section``, ``sections_layout="interleaved"`` for Qwen3-VL) the
    positions lead with one row per section (``position_ids`` of shape
    ``(3, B, L)`` as ``position_ids[:, :, None, :]``) and each frequency pair
    takes its section's position.  ``tensor`` afterwards holds exactly the bits of
    torch's ``t * C + rotate_half(t) * S``, ``C, S`` being sinpe's float64
    caches times ``scale`` rounded once to ``tensor.dtype`` (float16/bfloat16
    in torch's arithmetic: each operation in float32, rounded to the type);
    with ``exact=True``, the rotation computed in float64 and rounded once.

    On the CPU the kernel rotates the tensor's memory and bumps its autograd
    version; on other devices (and for tensors whose memory the kernel cannot
    address) torch's own ops compute the same formula on the tensor's device
    and copy it in.

    Raises, before anything is written: ``TypeError`` for a non-tensor, a
    non-strided layout or another dtype; ``ValueError`` for a tensor that
    requires grad (use :func:`rope`), an inference tensor outside
    ``torch.inference_mode()``, an expanded tensor, or sinpe's bad values.
    Returns ``tensor``.

    >>> import torch, sinpe.torch
    >>> q = torch.ones(1, 2, 3, 4)                      # (B, H, L, D)
    >>> sinpe.torch.rope_(q, offset=5) is q
    True
    """
    _rotation_checks(tensor, "tensor")
    if tensor.requires_grad:
        raise ValueError(
            "tensor requires grad: rotating it in place would break autograd; use "
            "q = sinpe.torch.rope(q, ...) instead"
        )
    if _base._kernel_writes(tensor):  # a decoding step's path: a few microseconds in all
        # Only the arguments given: CPython parses each keyword passed, and at
        # this size that costs as much as the rotation.
        given: dict[str, Any] = {} if offset is None else {"offset": offset}
        if n is not None:
            given["n"] = n
        if axis is not None:
            given["axis"] = axis
        if positions is not None:
            given["positions"] = _host_array(positions, "positions")
        if layout != "concatenated":
            given["layout"] = layout
        if freq is not None:
            given["freq"] = _host_array(freq, "freq")
        if rotary_dim is not None:
            given["rotary_dim"] = rotary_dim
        if scale != 1.0 or type(scale) is not float:
            given["scale"] = scale
        if exact is not False:
            given["exact"] = exact
        if sections is not None:
            given["sections"] = _host_sections(sections)
        if sections_layout is not None:
            given["sections_layout"] = sections_layout
        sinpe._core._rope_into(_memory(tensor), None, **given)
        _base._increment_versions((tensor,))
        return tensor
    if any(
        stride == 0 and size > 1 for size, stride in zip(tensor.shape, tensor.stride())
    ):
        raise ValueError(
            f"tensor has elements that share memory (shape {list(tensor.shape)}, strides "
            f"{list(tensor.stride())}, as from expand); writing it in place is ambiguous"
        )
    rotation = _Rotation(n, offset, axis, positions, layout, freq, rotary_dim, scale, exact,
                         sections, sections_layout)
    rotation.run(None, tensor, False)
    return tensor


class _Rope(torch.autograd.Function):
    """``y = rotate(x)``; its backward pass is the rotation by the negated angles
    (the transpose), the same kernel, itself differentiable the same way."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, rotation: _Rotation,
                inverse: bool) -> torch.Tensor:
        ctx.rotation = rotation
        ctx.inverse = inverse
        out = torch.empty_like(tensor)
        rotation.run(out, tensor, inverse)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        back: torch.Tensor = _Rope.apply(  # type: ignore[no-untyped-call]
            grad, ctx.rotation, not ctx.inverse)
        return back, None, None


def rope(
    tensor: torch.Tensor,
    n: Optional[float] = None,
    *,
    offset: Optional[int] = None,
    axis: Optional[int] = None,
    positions: object = None,
    layout: str = "concatenated",
    freq: object = None,
    rotary_dim: Optional[int] = None,
    scale: float = 1.0,
    exact: bool = False,
    sections: object = None,
    sections_layout: Optional[str] = None,
) -> torch.Tensor:
    """Rotary position embeddings out of place and differentiable: a new tensor.

    The result has the bits :func:`rope_` would leave in ``tensor`` (which is
    not changed).  Gradients flow to ``tensor``: the backward pass is the
    rotation by the negated angles (the transpose of the forward one, ``scale``
    included), by the same kernel on the CPU, so training works and
    ``torch.autograd.gradcheck`` passes; higher derivatives too.  ``positions``
    and ``freq`` are constants (no gradient); ``sections`` as in :func:`rope_`.

    >>> import torch, sinpe.torch
    >>> q = torch.randn(2, 4, 8, 16, dtype=torch.float64, requires_grad=True)
    >>> y = sinpe.torch.rope(q, offset=3)
    >>> y.square().sum().backward()                     # a rotation keeps norms:
    >>> torch.allclose(q.grad, 2 * q.detach())
    True
    """
    _rotation_checks(tensor, "tensor")
    rotation = _Rotation(n, offset, axis, positions, layout, freq, rotary_dim, scale, exact,
                         sections, sections_layout)
    rotation.check(tensor)
    out: torch.Tensor = _Rope.apply(tensor, rotation, False)  # type: ignore[no-untyped-call]
    return out


# -- HF's apply_rotary_pos_emb -----------------------------------------------------------
# transformers' families write one formula, y = x * cos + rot(x) * sin (rot: rotate_half, or
# rotate_every_two for interleaved pairs), in a few shapes: all features rotated, the first
# cos.shape[-1] of them rotated and the rest passed through (torch.cat), caches of another
# dtype than x (torch's type promotion).  The helpers below give each shape HF's result (its
# bits, dtype and strides: the same values with other strides could take other paths in the
# attention's matmul), with the kernel writing each element once on the CPU and HF's own
# expression elsewhere.  sinpe's transformers integration (_hf_forms.py) builds its
# families' forms from them.  They are on a decoding step's path, once per layer: each
# check costs a fraction of a microsecond, and the kernel's own checks are not repeated.

_Memory = tuple[int, torch.Size, tuple[int, ...], int]
_Views = Optional[tuple[_Memory, _Memory]]


def _memory(tensor: torch.Tensor) -> _Memory:
    """A CPU tensor's memory as the kernel's private entries take it: address, shape,
    strides (in elements) and sinpe's dtype code.  Making a NumPy view of it instead
    costs more than a decoding step's rotation.  The tensor must pass
    ``sinpe.torch._kernel_writes`` (its memory holds its values) and stay alive for
    the call."""
    return tensor.data_ptr(), tensor.shape, tensor.stride(), _base._DTYPE_CODES[tensor.dtype]


def _cache_views(cos: torch.Tensor, sin: torch.Tensor) -> _Views:
    """The kernel's views of ``cos`` and ``sin``, made once for the query and the key;
    None where the kernel does not read them.  It reads CPU caches of one dtype of the
    four, with the strides ``torch.empty`` gives (HF's rotary modules make them so):
    :func:`_like` gives HF's strides for those, while caches laid out otherwise can
    change the strides torch gives the size-1 dimensions of its result (HF's expression
    makes those)."""
    if (cos.dtype is sin.dtype and cos.dtype in _base._DTYPES and cos.layout == torch.strided
            and sin.layout == torch.strided and _base._kernel_writes(cos)
            and _base._kernel_writes(sin) and _default_strides(cos) and _default_strides(sin)):
        return _memory(cos), _memory(sin)
    return None


def _default_strides(tensor: torch.Tensor) -> bool:
    """Whether ``tensor`` has the strides ``torch.empty`` gives its shape (also on its
    size-1 dimensions, which ``is_contiguous`` ignores and torch's elementwise ops do not)."""
    step = 1
    for size, stride in zip(reversed(tensor.shape), reversed(tensor.stride())):
        if stride != step:
            return False
        step *= size
    return True


def _like(x: torch.Tensor) -> torch.Tensor:
    """An empty tensor with the shape, dtype and strides of HF's ``x * cos + rot(x) * sin``
    (caches with :func:`_default_strides`): torch allocates ``x * cos`` in the order of
    ``x``'s strides and its sum with the contiguous ``rot(x) * sin`` contiguous when that
    order is the natural one.  So the result is contiguous when ``x``'s dimensions longer
    than 1 are in natural order (a decoding step's ``(B, H, 1, D)`` query, a slice of a
    contiguous tensor), else in ``x``'s order (``empty_like``, dense in that order: a
    prefill's ``(B, H, L, D)`` view of ``(B, L, H, D)`` memory).  The tests hold this
    against torch on random layouts."""
    if x.is_contiguous() or _natural_order(x):
        return torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return torch.empty_like(x)


def _natural_order(x: torch.Tensor) -> bool:
    """Whether the strides of ``x``'s dimensions longer than 1 decrease with the index."""
    strides = [stride for size, stride in zip(x.shape, x.stride()) if size != 1]
    return all(a > b for a, b in zip(strides, strides[1:]))


def _kernel_rotation(out: torch.Tensor, x: torch.Tensor, views: tuple[_Memory, _Memory],
                     layout: Any) -> bool:
    """``out`` = HF's formula of ``x`` by the kernel (``out``, ``x`` and the caches of one
    dtype, in CPU memory); False, with nothing written, where the kernel refuses the
    shapes (an odd width, caches that do not broadcast to ``x`` or would enlarge the
    result): torch's expression decides those.  The kernel's checks, not the same ones
    in Python first: on a decoding step those cost as much as the rotation."""
    try:
        sinpe._core._rotate_by(_memory(out), _memory(x), views[0], views[1], layout=layout)
    except ValueError:
        return False
    return True


def _grad_needed(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad)


def _promoted(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, views: _Views
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, _Views]:
    """``x``, ``cos``, ``sin`` in torch's promoted dtype of the three (cos and sin share
    one: ``views`` is not None), with the caches' views.  Widening is exact, so the
    kernel's formula in that dtype has the bits of torch's mixed-dtype expression,
    which computes each operation in it."""
    wide = torch.promote_types(x.dtype, cos.dtype)
    if wide is not x.dtype:
        x = x.to(wide)  # keeps x's strides (dense) or order (not)
    if wide is not cos.dtype:
        cos, sin = cos.to(wide), sin.to(wide)
        views = _memory(cos), _memory(sin)
    return x, cos, sin, views


def _hf_rotation(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
                 views: _Views) -> torch.Tensor:
    """HF's ``x * cos + rot(x) * sin`` (``rot``: rotate_half, or rotate_every_two when
    ``layout`` is "interleaved"): its bits, dtype and strides, for caches that
    broadcast against ``x``.  ``views``: :func:`_cache_views` of the caches."""
    if _grad_needed(x, cos, sin):
        if layout == "concatenated" and x.dtype is cos.dtype and cos.dtype is sin.dtype:
            out: torch.Tensor = _ApplyRotary.apply(x, cos, sin)  # type: ignore[no-untyped-call]
            return out
        return x * cos + _rotate_half(x, layout) * sin
    if views is not None and x.dtype is not cos.dtype and x.dtype in _base._DTYPES:
        x, cos, sin, views = _promoted(x, cos, sin, views)
    if (views is not None and x.dtype is cos.dtype and x.layout == torch.strided
            and x.numel() and _base._kernel_writes(x)):
        out = _like(x)
        if _kernel_rotation(out, x, views, layout):
            return out
    return x * cos + _rotate_half(x, layout) * sin


def _hf_partial(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
                views: _Views) -> torch.Tensor:
    """GPT-NeoX's partial rotary: the first ``cos.shape[-1]`` features of ``x`` by
    :func:`_hf_rotation`, the others passed through, joined by ``torch.cat`` (a new
    contiguous tensor, also when nothing passes through): its bits, dtype and strides."""
    width = cos.shape[-1]
    if (views is not None and x.dim() >= 1 and width <= x.shape[-1]
            and not _grad_needed(x, cos, sin)):
        if x.dtype is not cos.dtype and x.dtype in _base._DTYPES:
            x, cos, sin, views = _promoted(x, cos, sin, views)
        if (views is not None and x.dtype is cos.dtype and x.layout == torch.strided
                and x.numel() and _base._kernel_writes(x)):
            out = torch.empty(x.shape, dtype=x.dtype, device=x.device)
            if _kernel_rotation(out[..., :width], x[..., :width], views, layout):
                out[..., width:].copy_(x[..., width:])
                return out
    return torch.cat([_hf_rotation(x[..., :width], cos, sin, layout, views), x[..., width:]],
                     dim=-1)


def _hf_rotated(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layout: str,
                views: _Views) -> torch.Tensor:
    """HF's rotation of one of q and k: all features (Llama's form) or, when the caches
    are narrower than ``x``, the first ``cos.shape[-1]`` (GPT-NeoX's form)."""
    if x.dim() >= 1 and cos.dim() >= 1 and cos.shape[-1] < x.shape[-1]:
        return _hf_partial(x, cos, sin, layout, views)
    return _hf_rotation(x, cos, sin, layout, views)


def _rotate_half_transposed(x: torch.Tensor) -> torch.Tensor:
    """The transpose of HF's ``rotate_half`` (its backward pass): ``cat(x2, -x1)``."""
    half = x.shape[-1] // 2
    return torch.cat((x[..., half:], -x[..., :half]), dim=-1)


class _ApplyRotary(torch.autograd.Function):
    """HF's rotation (x, cos and sin of one dtype) with the kernel's forward pass."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, cos, sin)
        return _hf_rotation(x, cos, sin, "concatenated", _cache_views(cos, sin))

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        x, cos, sin = ctx.saved_tensors
        grad_x = grad_cos = grad_sin = None
        if ctx.needs_input_grad[0]:
            grad_x = (grad * cos + _rotate_half_transposed(grad * sin)).sum_to_size(x.shape)
        if ctx.needs_input_grad[1]:
            grad_cos = (grad * x).sum_to_size(cos.shape)
        if ctx.needs_input_grad[2]:
            grad_sin = (grad * _rotate_half(x, "concatenated")).sum_to_size(sin.shape)
        return grad_x, grad_cos, grad_sin


_TENSOR = torch.Tensor
_CONTIGUOUS = torch.contiguous_format
_CONCATENATED = 1  # sinpe_layout's code (csrc/sinpe.h)
_empty_like = torch.empty_like
_grad_enabled = torch.is_grad_enabled


def _apply_by_kernel(q: torch.Tensor, k: Optional[torch.Tensor], cos: torch.Tensor,
                     sin: torch.Tensor, unsqueeze_dim: int
                     ) -> Optional[tuple[torch.Tensor, Optional[torch.Tensor]]]:
    """apply_rotary_pos_emb by one call of the kernel on the tensors' memory, or None
    (nothing written) where the general path must decide.  A decoding step takes this
    path, where each microsecond counts: plain CPU tensors of one dtype of the four
    that need no gradient, a contiguous query and key (HF's results are then new
    contiguous tensors), caches that ``_core._apply_rotary`` takes (it declines the
    others).  The checks of ``sinpe.torch._kernel_writes`` are spelled out: a tensor
    without memory of its own (``vmap``'s) raises from ``data_ptr``, a functionalized
    one has address 0, which the kernel declines."""
    dtype = q.dtype
    if not (type(q) is _TENSOR and type(cos) is _TENSOR and type(sin) is _TENSOR
            and cos.dtype is dtype and sin.dtype is dtype
            and q.is_cpu and cos.is_cpu and sin.is_cpu
            and not (q.is_neg() or cos.is_neg() or sin.is_neg())
            and (k is None or (type(k) is _TENSOR and k.dtype is dtype and k.is_cpu
                               and not k.is_neg()))
            and not (_grad_enabled() and (q.requires_grad or cos.requires_grad
                                          or sin.requires_grad
                                          or (k is not None and k.requires_grad)))):
        return None
    try:
        code = _base._DTYPE_CODES[dtype]
        if not (q.is_contiguous() and (k is None or k.is_contiguous())):
            return None
        q_out = _empty_like(q, memory_format=_CONTIGUOUS)
        k_out = None if k is None else _empty_like(k, memory_format=_CONTIGUOUS)
        done = sinpe._core._apply_rotary(  # the outputs by address: new, contiguous, q's shape
            q_out.data_ptr(), (q.data_ptr(), q.shape, q.stride(), code),
            None if k_out is None else k_out.data_ptr(),
            None if k is None else (k.data_ptr(), k.shape, k.stride(), code),
            (cos.data_ptr(), cos.shape, cos.stride(), code),
            (sin.data_ptr(), sin.shape, sin.stride(), code), unsqueeze_dim, _CONCATENATED)
    except (KeyError, RuntimeError):  # another dtype; no memory of its own; not strided
        return None
    return (q_out, k_out) if done else None


def _unsqueeze_dim(value: object) -> int:
    """``unsqueeze_dim`` that is not a plain int: an integer (``operator.index``), else a
    TypeError that says where ``position_ids`` went."""
    if isinstance(value, (bool, torch.Tensor)) or value is None:
        raise TypeError(
            f"unsqueeze_dim must be an int, got {type(value).__name__}: transformers 5 passes "
            "unsqueeze_dim as the fifth positional argument; position_ids is keyword-only "
            "(and unused)")
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        raise TypeError(f"unsqueeze_dim must be an int, got {type(value).__name__}") from None


def apply_rotary_pos_emb(
    q: torch.Tensor,
    k: Optional[torch.Tensor],
    cos: torch.Tensor,
    sin: torch.Tensor,
    unsqueeze_dim: int = 1,
    *,
    position_ids: Optional[torch.Tensor] = None,
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """HF's ``apply_rotary_pos_emb``, bit for bit, each output written once.

    Returns ``(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)``
    with ``cos`` and ``sin`` unsqueezed at ``unsqueeze_dim``, exactly as
    ``transformers``' Llama (and Qwen, Mistral, ...) compute it, for any
    ``cos, sin`` (each column its own value, not necessarily halves that repeat),
    with transformers 5's signature: a fifth positional argument is
    ``unsqueeze_dim``; ``position_ids`` is keyword-only, accepted and unused.

    - Partial rotary: caches narrower than the head (``cos.shape[-1] < q.shape[-1]``)
      rotate its first ``cos.shape[-1]`` features and pass the others through, as
      GPT-NeoX, Phi-3 and the other partial-rotary families of transformers do
      (their ``torch.cat``: a new contiguous tensor).
    - ``k=None`` returns ``(q's rotation, None)``.
    - Mixed dtypes follow torch's type promotion, as HF's expression does:
      float32 caches with a bfloat16 ``q`` give HF's float32 result, bit for bit.
    - Results have HF's dtype, shape and strides.

    On the CPU sinpe's kernel writes each result element once, in the result's
    arithmetic, with no temporaries (tensors of one of the four dtypes, caches that
    broadcast to the query's shape, an even rotated width); anything else (other
    devices, caches of two different dtypes, odd widths) runs HF's own expression.
    Differentiable: gradients reach ``q``, ``k``, ``cos`` and ``sin`` (by torch's ops).

    Patch it into a model (its logits do not change)::

        import transformers.models.llama.modeling_llama as llama
        llama.apply_rotary_pos_emb = sinpe.torch.apply_rotary_pos_emb

    :func:`sinpe.torch.patch` does that for a model's family (and more), verified.
    """
    del position_ids  # unused, as in HF's own functions that take it
    if type(unsqueeze_dim) is not int:
        unsqueeze_dim = _unsqueeze_dim(unsqueeze_dim)
    fast = _apply_by_kernel(q, k, cos, sin, unsqueeze_dim)
    if fast is not None:
        return fast
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    views = _cache_views(cos, sin)
    q_embed = _hf_rotated(q, cos, sin, "concatenated", views)
    return q_embed, None if k is None else _hf_rotated(k, cos, sin, "concatenated", views)


def apply_rotary_pos_emb_vision(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """transformers' ``apply_rotary_pos_emb_vision`` (Qwen2-VL, Qwen2.5-VL, Qwen3-VL),
    bit for bit: ``q`` and ``k`` of shape ``(N, H, D)`` (a patch's heads), ``cos`` and
    ``sin`` of shape ``(N, D)`` (unsqueezed at -2), everything in float32 —
    ``q * cos + rotate_half(q) * sin`` — and each result cast back to its input's
    dtype.  The same result as transformers' (bits, dtype, shape and strides), with
    sinpe's kernel writing each float32 element once on the CPU (torch's expression
    elsewhere, and for shapes the kernel refuses).  Differentiable, as HF's is."""
    cos = cos.unsqueeze(-2).float()
    sin = sin.unsqueeze(-2).float()
    views = _cache_views(cos, sin)
    q_embed = _hf_rotation(q.float(), cos, sin, "concatenated", views).to(q.dtype)
    k_embed = _hf_rotation(k.float(), cos, sin, "concatenated", views).to(k.dtype)
    return q_embed, k_embed


if _base is None:  # imported on its own: sinpe.torch imports this module and sets _base
    import sinpe.torch  # noqa: F401,E402
