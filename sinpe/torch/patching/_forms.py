"""The apply forms: transformers' ways of applying RoPE, by sinpe's kernel with HF's bits.

transformers' families apply their caches with one formula, ``x * cos + rot(x) * sin``
(``rot``: rotate_half, or its interleaved twin for pairs ``(2i, 2i + 1)``), written a
few dozen ways: all features rotated or the first ``r`` of them, caches used as given
or their first half repeated pairwise, in the inputs' dtype or in float32 and cast
back, one tensor or a query and a key.  Each form below reproduces one of them with
the same result (bits, dtype, shape and strides) for any input, built from the
helpers of :mod:`sinpe.torch._apply`, so that the kernel writes each rotated element
once on the CPU and HF's own expression runs elsewhere.

:data:`FORMS` is the one list of them.  :func:`sinpe.torch.patch` does not know which
family uses which: it runs each apply function it finds in a model and each form on
the same random inputs (:mod:`sinpe.torch.patching._probes`), and swaps in the first form
that gives the function's result bit for bit on every input the function takes.  A
function no form reproduces stays transformers' own.  Nothing here imports
transformers.
"""

from dataclasses import dataclass
from typing import Callable, Optional

import torch

from sinpe.torch._apply import (
    _cache_views,
    _hf_partial,
    _hf_rotation,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_vision,
)

_Pair = tuple[torch.Tensor, torch.Tensor]


def _pairwise(cache: torch.Tensor) -> torch.Tensor:
    """A concatenated cache's first half, each value twice: the interleaved cache."""
    return cache[..., : cache.shape[-1] // 2].repeat_interleave(2, dim=-1)


def _both(rotate: Callable[..., torch.Tensor], q: torch.Tensor, k: torch.Tensor,
          cos: torch.Tensor, sin: torch.Tensor, layout: str, widen: bool = False) -> _Pair:
    """``rotate`` (:func:`_hf_rotation` or :func:`_hf_partial`) of q and of k by the
    caches as given, with one set of the kernel's views; with ``widen``, q and k in
    float32 and both results cast to q's dtype."""
    views = _cache_views(cos, sin)
    if not widen:
        return rotate(q, cos, sin, layout, views), rotate(k, cos, sin, layout, views)
    dtype = q.dtype
    return (rotate(q.float(), cos, sin, layout, views).to(dtype),
            rotate(k.float(), cos, sin, layout, views).to(dtype))


def neox(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
         unsqueeze_dim: int = 1) -> _Pair:
    """The first ``cos.shape[-1]`` features rotated, the others passed through, joined by
    ``torch.cat`` (a new contiguous tensor, also when all features rotate)."""
    return _both(_hf_partial, q, k, cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim),
                 "concatenated")


def cast_back(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              unsqueeze_dim: int = 1) -> _Pair:
    """The Llama formula (in torch's promoted dtype), each result cast back to its
    input's dtype (caches kept in float32 for a bfloat16 model)."""
    q_embed, k_embed = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
    assert k_embed is not None
    return q_embed.to(q.dtype), k_embed.to(k.dtype)


def float_then_cast(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                    unsqueeze_dim: int = 1) -> _Pair:
    """q and k widened to float32, the Llama formula, both results cast to q's dtype."""
    return _both(_hf_rotation, q, k, cos.unsqueeze(unsqueeze_dim),
                 sin.unsqueeze(unsqueeze_dim), "concatenated", widen=True)


def all_float_then_cast(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                        sin: torch.Tensor, unsqueeze_dim: int = 1) -> _Pair:
    """q, k and the caches in float32, the Llama formula, both results cast to q's dtype."""
    return _both(_hf_rotation, q, k, cos.unsqueeze(unsqueeze_dim).float(),
                 sin.unsqueeze(unsqueeze_dim).float(), "concatenated", widen=True)


def interleaved(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                unsqueeze_dim: int = 1) -> _Pair:
    """Interleaved pairs ``(2i, 2i + 1)`` (rotate_half's interleaved twin), caches as given."""
    return _both(_hf_rotation, q, k, cos.unsqueeze(unsqueeze_dim),
                 sin.unsqueeze(unsqueeze_dim), "interleaved")


def interleaved_float(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                      unsqueeze_dim: int = 1) -> _Pair:
    """Interleaved pairs (caches as given), q and k in float32, both results cast to
    q's dtype."""
    return _both(_hf_rotation, q, k, cos.unsqueeze(unsqueeze_dim),
                 sin.unsqueeze(unsqueeze_dim), "interleaved", widen=True)


def pairwise_partial(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                     unsqueeze_dim: int = 1) -> _Pair:
    """The caches' first half repeated pairwise, interleaved pairs on the first
    ``cos.shape[-1]`` features, the rest passed through (``torch.cat``)."""
    return _both(_hf_partial, q, k, _pairwise(cos.unsqueeze(unsqueeze_dim)),
                 _pairwise(sin.unsqueeze(unsqueeze_dim)), "interleaved")


def pairwise(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
             unsqueeze_dim: int = 1) -> _Pair:
    """The caches' first half repeated pairwise, interleaved pairs on every feature."""
    return _both(_hf_rotation, q, k, _pairwise(cos.unsqueeze(unsqueeze_dim)),
                 _pairwise(sin.unsqueeze(unsqueeze_dim)), "interleaved")


def pairwise_float(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                   unsqueeze_dim: int = 1) -> _Pair:
    """The caches' first half repeated pairwise, interleaved pairs on every feature of q
    and k in float32, both results cast to q's dtype."""
    return _both(_hf_rotation, q, k, _pairwise(cos.unsqueeze(unsqueeze_dim)),
                 _pairwise(sin.unsqueeze(unsqueeze_dim)), "interleaved", widen=True)


def half_width(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
               unsqueeze_dim: int = 1) -> _Pair:
    """Caches of the frequencies once (width ``r/2``): ``cat(x1 * c - x2 * s, x2 * c + x1 *
    s)`` of the halves ``x1, x2``, i.e. the Llama formula with ``cat(c, c)`` (``a - b``
    and ``a + (-b)`` are one IEEE operation), in a new contiguous tensor."""
    return _both(_hf_partial, q, k, torch.cat((cos, cos), dim=-1).unsqueeze(unsqueeze_dim),
                 torch.cat((sin, sin), dim=-1).unsqueeze(unsqueeze_dim), "concatenated")


def half_width_interleaved(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                           sin: torch.Tensor, unsqueeze_dim: int = 1) -> _Pair:
    """Caches of the frequencies once (width ``r/2``) on interleaved pairs:
    ``stack(x0 * c - x1 * s, x1 * c + x0 * s)`` of the even and odd features, i.e. the
    interleaved rotation by the caches repeated pairwise, in a new contiguous tensor."""
    return _both(_hf_partial, q, k, cos.repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim),
                 sin.repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim), "interleaved")


def single(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           unsqueeze_dim: int = 1) -> torch.Tensor:
    """One tensor, the Llama formula: ``x * cos + rotate_half(x) * sin``."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return _hf_rotation(x, cos, sin, "concatenated", _cache_views(cos, sin))


def single_trailing_pairwise(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
                             unsqueeze_dim: int = 1) -> torch.Tensor:
    """One tensor whose last ``2 * cos.shape[-1]`` features rotate in interleaved pairs by
    the caches repeated pairwise, in float32, cast back; the leading features pass
    through (``torch.cat``)."""
    cos = cos.repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    sin = sin.repeat_interleave(2, dim=-1).unsqueeze(unsqueeze_dim)
    width = cos.shape[-1]
    rotated = _hf_rotation(x[..., x.shape[-1] - width:].float(), cos, sin, "interleaved",
                           _cache_views(cos, sin)).to(x.dtype)
    return torch.cat([x[..., : x.shape[-1] - width], rotated], dim=-1)


def _deinterleaved(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``cat([x1 * c - x2 * s, x2 * c + x1 * s])`` with ``x1, x2`` the even and odd
    features and ``c, s`` half-width caches.  The interleaved rotation by the caches
    repeated pairwise computes the same two products and sum per element (``a - b``
    and ``a + (-b)`` are one IEEE operation), and ``torch.cat`` of its even and odd
    features puts them in HF's order, contiguous."""
    if x.dim() >= 1 and x.shape[-1] == 2 * cos.shape[-1]:
        wide_cos = cos.repeat_interleave(2, dim=-1)
        wide_sin = sin.repeat_interleave(2, dim=-1)
        rotated = _hf_rotation(x, wide_cos, wide_sin, "interleaved",
                               _cache_views(wide_cos, wide_sin))
        return torch.cat([rotated[..., 0::2], rotated[..., 1::2]], dim=-1)
    x1, x2 = x[..., 0::2], x[..., 1::2]  # anything else: HF's expression and its errors
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


def deinterleave(q: torch.Tensor, k: Optional[torch.Tensor], cos: torch.Tensor,
                 sin: torch.Tensor, unsqueeze_dim: int = 1
                 ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Pairs ``(2i, 2i + 1)`` rotated by the caches' first half, the results' even
    features first, then the odd ones (DeepSeek's MLA with ``rope_interleave``);
    ``k=None`` gives None for it."""
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    return (_deinterleaved(q, cos, sin),
            None if k is None else _deinterleaved(k, cos, sin))


def gptj(tensor: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """``(tensor, sin, cos)``: ``(B, L, H, r)`` rotated in interleaved pairs by ``(B, L,
    r/2)`` caches repeated pairwise (GPT-J's argument order)."""
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return _hf_rotation(tensor, cos, sin, "interleaved", _cache_views(cos, sin))


@dataclass(frozen=True)
class Form:
    """One way of applying RoPE: its name (for the patch's handle and messages) and the
    function that does it with HF's bits."""

    name: str
    function: Callable[..., object]


# The forms, most common first (patch tries them in this order).
FORMS: tuple[Form, ...] = (
    Form("llama", apply_rotary_pos_emb),
    Form("neox", neox),
    Form("vision", apply_rotary_pos_emb_vision),
    Form("cast_back", cast_back),
    Form("float_then_cast", float_then_cast),
    Form("all_float_then_cast", all_float_then_cast),
    Form("interleaved", interleaved),
    Form("interleaved_float", interleaved_float),
    Form("pairwise_partial", pairwise_partial),
    Form("pairwise", pairwise),
    Form("pairwise_float", pairwise_float),
    Form("half_width", half_width),
    Form("half_width_interleaved", half_width_interleaved),
    Form("deinterleave", deinterleave),
    Form("single", single),
    Form("single_trailing_pairwise", single_trailing_pairwise),
    Form("gptj", gptj),
)
