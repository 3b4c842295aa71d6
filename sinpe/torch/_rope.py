"""sinpe.torch's rotations of a tensor by sinpe's own angles: ``rope_`` (in place) and
``rope`` (out of place, differentiable), which :mod:`sinpe.torch` re-exports (use
them from there).

The kernel on the CPU (``sinpe.rope_`` and its private forms), torch's own ops
with the same formula elsewhere, and :func:`_rotate_half`, the partner of each
feature in either pair layout, which HF's apply functions
(:mod:`sinpe.torch._apply`) use too.  ``_kernel_writes`` is read from
:mod:`sinpe.torch._tensors` at each call, so that the tests can force torch's path.
"""

import operator
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray
import torch

import sinpe
from sinpe.torch import _tensors
from sinpe.torch._tensors import (
    _DTYPES,
    _SUPPORTED,
    _host_array,
    _host_sections,
    _increment_versions,
    _memory,
    _round_once,
)


def _check_rotatable(tensor: object, name: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {tensor.layout}")
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"{name} must have dtype {_SUPPORTED}, got {tensor.dtype}")


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
        if out is None and _tensors._kernel_writes(source):  # in place (never inverse)
            sinpe._core._rope_into(_memory(source), None, **self.kwargs())
            torch.autograd.graph.increment_version(source)
            return
        if out is not None and _tensors._kernel_writes(out) and _tensors._kernel_writes(source):
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
    if _tensors._kernel_writes(tensor):  # a decoding step's path: a few microseconds in all
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
        _increment_versions((tensor,))
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
