"""HF's apply functions, bit for bit: ``apply_rotary_pos_emb`` and
``apply_rotary_pos_emb_vision``, which :mod:`sinpe.torch` re-exports (use them from
there), and the helpers that the transformers integration builds its families' forms
from (:mod:`sinpe.torch.patching._forms`).

transformers' families write one formula, ``y = x * cos + rot(x) * sin`` (``rot``:
rotate_half, or rotate_every_two for interleaved pairs), in a few shapes: all features
rotated, the first ``cos.shape[-1]`` of them rotated and the rest passed through
(``torch.cat``), caches of another dtype than ``x`` (torch's type promotion).  The
helpers here give each shape HF's result (its bits, dtype and strides: the same values
with other strides could take other paths in the attention's matmul), with the kernel
writing each element once on the CPU and HF's own expression elsewhere.  They are on a
decoding step's path, once per layer: each check costs a fraction of a microsecond, and
the kernel's own checks are not repeated.  While torch traces (``torch.compile``,
``torch.export``) every form is HF's expression, which the compiler fuses.
``_kernel_writes`` is read from :mod:`sinpe.torch._tensors` at each call, so that the
tests can force torch's path.
"""

import operator
from typing import Any, Optional

import torch

import sinpe
from sinpe.torch import _tensors
from sinpe.torch._rotation import _rotate_half
from sinpe.torch._tensors import _DTYPE_CODES, _DTYPES, _is_dynamo_compiling, _Memory, _memory

_Views = Optional[tuple[_Memory, _Memory]]


def _cache_views(cos: torch.Tensor, sin: torch.Tensor) -> _Views:
    """The kernel's views of ``cos`` and ``sin``, made once for the query and the key;
    None where the kernel does not read them.  It reads CPU caches of one dtype of the
    four, with the strides ``torch.empty`` gives (HF's rotary modules make them so):
    :func:`_like` gives HF's strides for those, while caches laid out otherwise can
    change the strides torch gives the size-1 dimensions of its result (HF's expression
    makes those).  None while torch.compile traces: HF's expression then, which inductor
    fuses (under torch.export the fake tensors fail the kernel's checks)."""
    if _is_dynamo_compiling():
        return None
    if (cos.dtype is sin.dtype and cos.dtype in _DTYPES and cos.layout == torch.strided
            and sin.layout == torch.strided and _tensors._kernel_writes(cos)
            and _tensors._kernel_writes(sin) and _default_strides(cos) and _default_strides(sin)):
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
    if views is not None and x.dtype is not cos.dtype and x.dtype in _DTYPES:
        x, cos, sin, views = _promoted(x, cos, sin, views)
    if (views is not None and x.dtype is cos.dtype and x.layout == torch.strided
            and x.numel() and _tensors._kernel_writes(x)):
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
        if x.dtype is not cos.dtype and x.dtype in _DTYPES:
            x, cos, sin, views = _promoted(x, cos, sin, views)
        if (views is not None and x.dtype is cos.dtype and x.layout == torch.strided
                and x.numel() and _tensors._kernel_writes(x)):
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
    others).  The checks of ``_tensors._kernel_writes`` are spelled out: a tensor
    without memory of its own (``vmap``'s) raises from ``data_ptr``, a functionalized
    one has address 0, which the kernel declines; none with ``SINPE_TORCH_PATH=device``."""
    dtype = q.dtype
    if _tensors.DEVICE_PATH_FORCED or not (
            type(q) is _TENSOR and type(cos) is _TENSOR and type(sin) is _TENSOR
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
        code = _DTYPE_CODES[dtype]
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
    Under ``torch.compile`` (``fullgraph=True`` too) and ``torch.export`` it is
    HF's expression, traced: the compiler fuses it as it fuses HF's own (an opaque
    kernel call would be slower there, measured on a compiled Llama forward), so a
    compiled patched model is HF's compiled model with sinpe's caches.

    Patch it into a model (its logits do not change)::

        import transformers.models.llama.modeling_llama as llama
        llama.apply_rotary_pos_emb = sinpe.torch.apply_rotary_pos_emb

    :func:`sinpe.torch.patch` does that for a model's family (and more), verified.
    """
    del position_ids  # unused, as in HF's own functions that take it
    if type(unsqueeze_dim) is not int:
        unsqueeze_dim = _unsqueeze_dim(unsqueeze_dim)
    fast = None if _is_dynamo_compiling() else _apply_by_kernel(q, k, cos, sin, unsqueeze_dim)
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
    elsewhere, and for shapes the kernel refuses).  Differentiable, as HF's is.  Under
    ``torch.compile`` and ``torch.export``: HF's expression, traced."""
    cos = cos.unsqueeze(-2).float()
    sin = sin.unsqueeze(-2).float()
    views = _cache_views(cos, sin)
    q_embed = _hf_rotation(q.float(), cos, sin, "concatenated", views).to(q.dtype)
    k_embed = _hf_rotation(k.float(), cos, sin, "concatenated", views).to(k.dtype)
    return q_embed, k_embed
