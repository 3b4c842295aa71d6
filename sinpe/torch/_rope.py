"""sinpe.torch's rotations of a tensor by sinpe's own angles: ``rope_`` (in place) and
``rope`` (out of place, differentiable), which :mod:`sinpe.torch` re-exports (use
them from there).

The kernel on the CPU (``sinpe.rope_`` and its private forms), torch's own ops
with the same formula elsewhere (:class:`sinpe.torch._rotation._Rotation`), and
while torch traces (``torch.compile``, ``torch.export``) one custom op of
:mod:`sinpe.torch._ops` with the same bits.  ``_kernel_writes`` is read from
:mod:`sinpe.torch._tensors` at each call, so that the tests can force torch's path.
"""

from typing import Any, Optional

import torch

import sinpe
from sinpe.torch import _ops, _tensors
from sinpe.torch._rotation import _check_rotatable, _Rotation
from sinpe.torch._tensors import (
    _host_array,
    _host_sections,
    _increment_versions,
    _is_compiling,
    _is_dynamo_compiling,
    _memory,
)


def _rotation_checks(tensor: object, name: str) -> None:
    _check_rotatable(tensor, name)
    assert isinstance(tensor, torch.Tensor)
    if tensor.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            f"{name} is an inference tensor and torch.inference_mode() is off: torch forbids "
            "changing it in place; rotate inside inference_mode(), or use sinpe.torch.rope"
        )


def _no_grad_required(tensor: torch.Tensor) -> None:
    if tensor.requires_grad:
        raise ValueError(
            "tensor requires grad: rotating it in place would break autograd; use "
            "q = sinpe.torch.rope(q, ...) instead"
        )


def _traced_rope_(tensor: torch.Tensor, n: Optional[float], offset: Optional[int],
                  axis: Optional[int], positions: object, layout: str, freq: object,
                  rotary_dim: Optional[int], scale: float, exact: bool, sections: object,
                  sections_layout: Optional[str]) -> torch.Tensor:
    """rope_ while torch traces: the checks torch can trace, then one ``sinpe::rope_``
    node (the rest of sinpe's checks in its fake implementation and when it runs)."""
    _check_rotatable(tensor, "tensor")
    _no_grad_required(tensor)
    return _ops.rope_(tensor, positions, offset, axis, n, freq, layout, rotary_dim, scale,
                      exact, sections, sections_layout)


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
    and copy it in.  Under ``torch.compile`` (``fullgraph=True`` too) and
    ``torch.export`` it is one custom op, ``sinpe::rope_``, that writes
    ``tensor`` with the same bits (``positions``/``freq`` as tensors, ``sections``
    as a list); the positions' values are checked when the op runs.

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
    if _is_dynamo_compiling():
        return _traced_rope_(tensor, n, offset, axis, positions, layout, freq, rotary_dim,
                             scale, exact, sections, sections_layout)
    _rotation_checks(tensor, "tensor")
    _no_grad_required(tensor)
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
    if _is_compiling():  # torch.export (its fake tensors are not the kernel's)
        return _traced_rope_(tensor, n, offset, axis, positions, layout, freq, rotary_dim,
                             scale, exact, sections, sections_layout)
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
    Under ``torch.compile`` (``fullgraph=True`` too) and ``torch.export`` it is one
    custom op, ``sinpe::rope``, with the same bits and gradient.

    >>> import torch, sinpe.torch
    >>> q = torch.randn(2, 4, 8, 16, dtype=torch.float64, requires_grad=True)
    >>> y = sinpe.torch.rope(q, offset=3)
    >>> y.square().sum().backward()                     # a rotation keeps norms:
    >>> torch.allclose(q.grad, 2 * q.detach())
    True
    """
    if _is_compiling():  # torch.compile, torch.export: one custom op, the same bits
        _check_rotatable(tensor, "tensor")
        return _ops.rope(tensor, positions, offset, axis, n, freq, layout, rotary_dim, scale,
                         exact, sections, sections_layout)
    _rotation_checks(tensor, "tensor")
    rotation = _Rotation(n, offset, axis, positions, layout, freq, rotary_dim, scale, exact,
                         sections, sections_layout)
    rotation.check(tensor)
    out: torch.Tensor = _Rope.apply(tensor, rotation, False)  # type: ignore[no-untyped-call]
    return out
