"""Multi-axis rotary embeddings of vision-language models (Qwen2-VL, Qwen2.5-VL, Qwen3-VL).

A token of these models' text has a temporal, a height and a width position
(``position_ids`` of shape ``(3, B, L)``), and each frequency pair takes its angle
from one of them: transformers' text rotary module computes the three single-axis
caches and recombines their columns (``recomposition_frequencies``: consecutive
chunks of ``mrope_section`` pairs for Qwen2-VL and Qwen2.5-VL, Qwen3-VL's
interleaved rule), so the apply function is the plain Llama one.  sinpe's
:class:`sinpe.torch.RotaryEmbedding` does the same in one kernel call with
``sections=``: this module finds the sections a transformers module uses
(:func:`module_sections`, by calling it), and computes a call's caches
(:func:`section_caches`).  Their vision towers' apply function is
:func:`sinpe.torch.apply_rotary_pos_emb_vision` (:mod:`sinpe.torch._apply`).

Their vision towers use axial 2-D RoPE: ``*VisionRotaryEmbedding`` maps a patch's
``(row, column)`` positions (``position_ids`` of shape ``(N, 2)``) to float32
caches whose first half of the pairs takes the row, the second half the column,
the same frequencies in each half.  :class:`AxialRotary` is sinpe's exact
stand-in for that forward: two sections of the frequencies twice.

Nothing here imports transformers: its modules are handed in.
"""
from __future__ import annotations

from typing import Any, Optional, cast

import numpy as np
from numpy.typing import NDArray
import torch
from torch import nn

import sinpe
from sinpe.torch._angles import AngleTables, pair_caches, pair_rows
from sinpe.torch._caches import rope_cache
from sinpe.torch._tensors import (
    _DTYPES,
    _SUPPORTED,
    _device_path,
    _device_path_on,
    _empty,
    _kernel_view,
)

# transformers' text modules broadcast position_ids to this many rows: time, height, width
AXES = 3


# -- the text module's sections ------------------------------------------------------------


def module_sections(hf: nn.Module, width: int, layout: str, layer_type: Optional[str] = None
                    ) -> tuple[Optional[tuple[int, ...]], Optional[str]]:
    """``(sections, sections_layout)`` of a transformers text rotary module (of its
    ``layer_type``, for a module of several) (None, None: a single-axis module, one
    without ``mrope_section``).  Found by calling it: batch ``b`` of ``position_ids``
    has position 1 in row ``b`` and 0 elsewhere, so that a pair's sine is nonzero in
    the batch of the row it takes.  The rows must follow one of sinpe's two rules:
    else ValueError (sinpe cannot stand in for it)."""
    section = getattr(hf, "mrope_section", None)
    if isinstance(section, dict):  # per layer type (Cohere Compass's)
        section = section.get(layer_type)
    if section is None:
        return None, None
    position_ids = torch.eye(AXES, dtype=torch.int64)[:, :, None]  # (rows, batch, 1)
    x = torch.zeros(1, dtype=torch.float64)
    with torch.no_grad():
        sin = (hf(x, position_ids) if layer_type is None else hf(x, position_ids, layer_type))[1]
    name = type(hf).__name__
    if tuple(sin.shape) != (AXES, 1, width):
        raise ValueError(f"{name} returns sin of shape {tuple(sin.shape)} for position_ids of "
                         f"shape {tuple(position_ids.shape)}: sinpe cannot stand in for it")
    first = sin[:, 0, 0::2] if layout == "interleaved" else sin[:, 0, : width // 2]
    taken = first != 0  # (row, pair)
    if not bool((taken.sum(0) == 1).all()):
        raise ValueError(f"{name}: a frequency pair takes no row or several rows of "
                         "position_ids: sinpe cannot stand in for it")
    rows = taken.to(torch.int64).argmax(0).numpy()
    return sections_of(rows, name)


def sections_of(rows: NDArray[Any], name: str) -> tuple[tuple[int, ...], str]:
    """The sections and layout that give pair ``j`` the row ``rows[j]``: contiguous
    chunks (Qwen2-VL's), or the interleaved rule (row ``s >= 1`` takes the pairs
    ``j % S == s`` below ``S * sections[s]``, row 0 the rest: Qwen3-VL's)."""
    counts = tuple(int(c) for c in np.bincount(rows, minlength=AXES))
    for layout in ("contiguous", "interleaved"):
        if np.array_equal(rows, pair_rows(counts, layout)):
            return counts, layout
    raise ValueError(f"{name} takes the rows {rows.tolist()} of position_ids for its frequency "
                     "pairs: neither contiguous sections nor the interleaved rule; sinpe cannot "
                     "stand in for it")


def config_sections(config: Any, width: int) -> tuple[Optional[tuple[int, ...]], Optional[str]]:
    """Without transformers' module: the config's ``mrope_section`` (and
    ``mrope_interleaved``), else (None, None)."""
    params = getattr(config, "rope_parameters", None) or {}
    section = params.get("mrope_section")
    if section is None:
        return None, None
    sections = tuple(int(s) for s in section)
    if sum(sections) != width // 2:
        raise ValueError(f"rope_parameters['mrope_section']={list(section)} counts "
                         f"{sum(sections)} frequency pairs; the rotary width {width} has "
                         f"{width // 2}")
    return sections, "interleaved" if params.get("mrope_interleaved") else "contiguous"


def broadcast_rows(position_ids: torch.Tensor) -> torch.Tensor:
    """transformers' ``position_ids.expand(3, -1, -1)``: ``(B, L)`` and ``(1, B, L)``
    for every axis alike, ``(3, B, L)`` as they are."""
    dims = position_ids.dim()
    if dims == 3 and position_ids.shape[0] == AXES:
        return position_ids
    if dims != 2 and (dims != 3 or position_ids.shape[0] != 1):
        raise ValueError(f"position_ids must have shape ({AXES}, B, L) (time, height, width "
                         f"positions) or (B, L), got {tuple(position_ids.shape)}")
    return position_ids.expand(AXES, -1, -1)


def section_caches(position_ids: torch.Tensor, freq: NDArray[np.float64], scaling: float,
                   sections: tuple[int, ...], sections_layout: str, layout: str,
                   dtype: torch.dtype, device: torch.device
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)`` of shape ``(B, L, r)`` for ``(3, B, L)`` positions, each pair's
    angle from its section's row, on ``device``: one kernel call into a new CPU tensor
    (on a decoding step that costs less than gathering each section's columns from
    kept tables of single positions), moved once to another device.  cos and sin
    are the two halves of one tensor (one allocation): each is C-contiguous."""
    width = 2 * len(freq)
    if device.type != "cpu":
        return rope_cache(None, width, positions=position_ids, freq=freq, scale=scaling,
                          layout=layout, sections=sections, sections_layout=sections_layout,
                          dtype=dtype, device=device)
    if dtype not in _DTYPES:
        raise TypeError(f"the caches' dtype must be {_SUPPORTED}, got {dtype}")
    both = _empty((2, *position_ids.shape[1:], width), dtype, device)
    if both.numel():
        ids = position_ids.detach()
        if ids.is_floating_point():  # (float16 and bfloat16 have no NumPy dtype)
            ids = ids.to(torch.float64)
        view = both.numpy() if dtype in (torch.float32, torch.float64) else (
            _kernel_view(both))
        sinpe.rope(None, width, positions=ids.cpu().numpy(), freq=freq, scale=scaling,
                   layout=cast(Any, layout), sections=sections,
                   sections_layout=cast(Any, sections_layout), out=(view[0], view[1]))
    cos, sin = both.unbind(0)
    return cos, sin


# -- the vision tower's axial 2-D rope ---------------------------------------------------


class AxialRotary:
    """The forward of a transformers ``*VisionRotaryEmbedding`` (rope type ``axial``:
    Qwen2-VL, Qwen2.5-VL, Qwen3-VL), exact: ``forward(x, position_ids)`` with
    ``position_ids`` of shape ``(N, 2)`` (a patch's row and column) returns float32
    ``(cos, sin)`` of shape ``(N, r)`` on ``x.device``, as transformers' does: pairs
    ``0 .. r/4 - 1`` at the row, ``r/4 .. r/2 - 1`` at the column, each half with the
    module's ``r/4`` frequencies; the angles in double, rounded once.

    The frequencies are the module's own float32 ones (``original_inv_freq``; its
    ``compute_axial_rope_parameters`` again where ``model.to(dtype)`` cast them), or
    with ``frequencies="exact"`` the same formula, ``theta ** (-4k / r)``, in double
    (:func:`sinpe.rope_frequencies` of width ``r/2``).
    """

    def __init__(self, module: nn.Module, frequencies: str = "model") -> None:
        config = getattr(module, "config", None)
        buffer = getattr(module, "original_inv_freq", None)
        if not isinstance(buffer, torch.Tensor) or config is None:
            raise ValueError(f"{type(module).__name__} has no original_inv_freq and config: "
                             "not a transformers axial rotary module")
        if buffer.dtype is not torch.float32:  # cast by model.to(dtype)
            buffer = cast(Any, type(module)).compute_axial_rope_parameters(config)[0]
        freq = buffer.detach().to("cpu", torch.float64).numpy()
        if frequencies == "exact":
            theta = float(config.rope_parameters["rope_theta"])
            freq = sinpe.rope_frequencies(2 * len(freq), {"rope_theta": theta})[0]
        self.freq = np.concatenate([freq, freq])  # the row's half, then the column's
        self.scaling = float(getattr(module, "attention_scaling", 1.0))
        self.sections = (len(freq), len(freq))
        self.angles = AngleTables(self.freq, self.scaling)  # the device path's

    def prepare(self, device: torch.device) -> None:
        """Makes the device path's tables on ``device`` (see ``RotaryEmbedding.prepare``)."""
        if _device_path_on(device):
            self.angles.on(device)

    def __call__(self, x: torch.Tensor, position_ids: torch.Tensor
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        if not isinstance(position_ids, torch.Tensor) or position_ids.dim() != 2 or (
                position_ids.shape[1] != 2):
            got = (tuple(position_ids.shape) if isinstance(position_ids, torch.Tensor)
                   else type(position_ids).__name__)
            raise ValueError(f"position_ids must be a tensor of shape (N, 2) (each patch's row "
                             f"and column), got {got}")
        if _device_path(x):  # device operations only: each pair's own position
            half = len(self.freq) // 2  # the row's pairs, then the column's
            ids = position_ids.to(x.device).unsqueeze(-1).expand(-1, 2, half).flatten(1)
            return cast(tuple[torch.Tensor, torch.Tensor], pair_caches(
                self.angles.values(ids, torch.float32, per_pair=True), "concatenated"))
        return rope_cache(None, 2 * len(self.freq), positions=position_ids.T, freq=self.freq,
                          scale=self.scaling, sections=self.sections, dtype=torch.float32,
                          device=x.device)
