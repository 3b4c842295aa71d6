"""The apply functions of transformers' rotary families, by sinpe's kernel with HF's bits.

Every family of transformers 5 applies its caches with one formula, ``x * cos +
rot(x) * sin``, written a few ways; each function here reproduces one of them
(the same arguments, the same result: bits, dtype, shape and strides), built
from the helpers of HF's apply functions (:mod:`sinpe.torch._apply`), so that the
kernel writes each rotated element once on the CPU and torch's expression runs
elsewhere:

- ``llama``: ``(q, k, cos, sin, unsqueeze_dim=1)``, all features rotated:
  :func:`sinpe.torch.apply_rotary_pos_emb` itself (Llama, Mistral, Qwen2/3,
  Gemma 1-3, Phi, DeepSeek-V3 without ``rope_interleave``).
- ``neox``: the first ``cos.shape[-1]`` features rotated, the rest passed
  through, joined by ``torch.cat`` (GPT-NeoX, Phi-3).
- ``cast_back``: the Llama formula, then each result cast to its input's dtype
  (OLMo: its caches stay float32 while the model may be bfloat16).
- ``cohere``: interleaved pairs with caches that repeat each value twice,
  computed in float32 and cast back to the query's dtype (Cohere).
- ``glm``: interleaved pairs, the caches' first half repeated pairwise, partial
  rotary as ``neox`` (GLM).
- ``deepseek_interleave``: interleaved pairs in, half-split out
  (``apply_rotary_pos_emb_interleave`` of DeepSeek-V3 with ``rope_interleave``).
- ``gptj``: ``(tensor, sin, cos)`` with half-width caches repeated pairwise
  (GPT-J, CodeGen).
- ``vision``: ``apply_rotary_pos_emb_vision(q, k, cos, sin)`` of the vision towers
  of Qwen2-VL, Qwen2.5-VL and Qwen3-VL: in float32, cast back
  (:func:`sinpe.torch.apply_rotary_pos_emb_vision` itself).  Their text models use
  ``llama``: their multi-axis sections are in the rotary module's caches.

sinpe.torch.patch swaps these in only after checking, on a random input, that
they give the original function's result bit for bit.  Nothing here imports
transformers.
"""

from typing import Optional

import torch

from sinpe.torch._apply import (
    _cache_views,
    _hf_partial,
    _hf_rotation,
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_vision,
)

llama = apply_rotary_pos_emb
vision = apply_rotary_pos_emb_vision


def neox(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
         unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT-NeoX's and Phi-3's ``apply_rotary_pos_emb``: the first ``cos.shape[-1]``
    features rotated, the others passed through, ``torch.cat``'s contiguous result."""
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    views = _cache_views(cos, sin)
    return (_hf_partial(q, cos, sin, "concatenated", views),
            _hf_partial(k, cos, sin, "concatenated", views))


def cast_back(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
              unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """OLMo's ``apply_rotary_pos_emb``: the Llama formula (in torch's promoted dtype),
    each result cast back to its input's dtype."""
    q_embed, k_embed = apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim)
    assert k_embed is not None
    return q_embed.to(q.dtype), k_embed.to(k.dtype)


def cohere(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
           unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Cohere's ``apply_rotary_pos_emb``: q and k in float32, interleaved pairs
    (``rotate_half`` of pairs ``(2i, 2i + 1)``), both results cast to q's dtype."""
    dtype = q.dtype
    q = q.float()
    k = k.float()
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    views = _cache_views(cos, sin)
    return (_hf_rotation(q, cos, sin, "interleaved", views).to(dtype=dtype),
            _hf_rotation(k, cos, sin, "interleaved", views).to(dtype=dtype))


def _pairwise(cache: torch.Tensor) -> torch.Tensor:
    """A concatenated cache's first half, each value twice: the interleaved cache."""
    return cache[..., : cache.shape[-1] // 2].repeat_interleave(2, dim=-1)


def glm(q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor,
        unsqueeze_dim: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """GLM's ``apply_rotary_pos_emb``: the caches' first half repeated pairwise,
    interleaved pairs on the first ``cos.shape[-1]`` features, the rest passed through."""
    cos = _pairwise(cos.unsqueeze(unsqueeze_dim))
    sin = _pairwise(sin.unsqueeze(unsqueeze_dim))
    views = _cache_views(cos, sin)
    return (_hf_partial(q, cos, sin, "interleaved", views),
            _hf_partial(k, cos, sin, "interleaved", views))


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


def deepseek_interleave(q: torch.Tensor, k: Optional[torch.Tensor], cos: torch.Tensor,
                        sin: torch.Tensor, position_ids: Optional[torch.Tensor] = None,
                        unsqueeze_dim: int = 1
                        ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """DeepSeek-V3's ``apply_rotary_pos_emb_interleave``: pairs ``(2i, 2i + 1)``
    rotated by the caches' first half, the results' even features first, then the
    odd ones.  ``position_ids`` is unused, as in HF's; ``k=None`` gives None for it."""
    del position_ids
    cos = cos[..., : cos.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    sin = sin[..., : sin.shape[-1] // 2].unsqueeze(unsqueeze_dim)
    return (_deinterleaved(q, cos, sin),
            None if k is None else _deinterleaved(k, cos, sin))


def gptj(tensor: torch.Tensor, sin: torch.Tensor, cos: torch.Tensor) -> torch.Tensor:
    """GPT-J's and CodeGen's ``apply_rotary_pos_emb(tensor, sin, cos)``: ``(B, L, H, r)``
    rotated in interleaved pairs by ``(B, L, r/2)`` caches repeated pairwise."""
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)
    return _hf_rotation(tensor, cos, sin, "interleaved", _cache_views(cos, sin))
