"""How far transformers' rotary caches may be from sinpe's exact ones, and the check
that sinpe's caches stand for a transformers module's: the one place both the rotary
module (:mod:`sinpe.torch._rotary_module`, at construction) and the transformers
integration (:mod:`sinpe.torch.hf`, before a patch) take this from.

A transformers rotary module returns its caches in one of these forms (sinpe serves
each):

- ``(cos, sin)``, each of shape ``position_ids.shape + (r,)``, columns
  ``"concatenated"`` (``cat(f, f)``, Llama's) or ``"interleaved"`` (each value
  twice in a row, Cohere's);
- ``(cos, sin)`` of width ``r/2``, the frequencies once (``"half"``: GPT-OSS's,
  DeepSeek-V4's);
- one complex tensor ``freqs_cis = cos + i sin`` of width ``r/2``, complex64
  (``"complex"``: Llama 4's, DeepSeek-V2's ``torch.polar``).

Nothing here imports another module of sinpe.torch: it stands on torch, NumPy and
sinpe's rope types.
"""
from __future__ import annotations

import math
from typing import Any, Mapping, Optional

import numpy as np
from numpy.typing import NDArray
import torch
from torch import nn

from sinpe._rope_types import yarn_correction_range

# the forms of a rotary module's caches (module docstring); one source for the modules
# that serve and check them
PAIR_FORMS = ("concatenated", "interleaved", "half")
FORMS = PAIR_FORMS + ("complex",)

# positions a check gives a module at most (more find nothing new: each is one angle)
CHECKED_POSITIONS = 48
_U = 2.0**-24  # the unit roundoff of float32


def tolerance(positions: torch.Tensor, inv_freq: torch.Tensor, scaling: float,
              dtype: torch.dtype) -> torch.Tensor:
    """How far transformers' caches may be from exact ones of the same frequencies, per
    position (``positions``: the largest of each cache row, broadcasting against the
    caches' last axis).  transformers rounds the angle ``p * w`` to float32 (at most
    ``2**-24 * p * w``), takes float32 cos/sin (within 1 ulp: 2**-23) and rounds the
    product by the attention factor ``s`` (2**-24 relative); each side rounds to the
    output dtype (half an ulp of values up to ``s``: ``s * eps``).  A complex dtype
    counts as its real components'."""
    if dtype.is_complex:
        dtype = torch.float32 if dtype is torch.complex64 else torch.float64
    eps = torch.finfo(dtype).eps
    top = float(inv_freq.abs().max()) if inv_freq.numel() else 0.0
    angle = positions.double().abs()[..., None] * top * _U
    return abs(scaling) * (angle + 2 * _U + _U) + 2 * max(abs(scaling), 1.0) * eps


def caches_differ(got: Any, want: Any, largest: torch.Tensor, inv_freq: torch.Tensor,
                  scaling: float) -> str:
    """Why sinpe's caches ``got`` do not stand for transformers' ``want`` (at positions
    whose largest per cache row is ``largest``; ``inv_freq`` and ``scaling`` those of
    transformers' module), or "": the same form (a ``(cos, sin)`` pair or one complex
    tensor), shape, dtype and device, and values within :func:`tolerance`."""
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            return ("returns one tensor (freqs_cis), where sinpe's returns "
                    f"{type(got).__name__}")
        pairs = [(got, want, "freqs_cis")]
    elif (isinstance(want, tuple) and len(want) == 2
          and all(isinstance(w, torch.Tensor) for w in want)):
        if not (isinstance(got, tuple) and len(got) == 2):
            return "returns (cos, sin), where sinpe's returns another form"
        pairs = [(got[0], want[0], "cos"), (got[1], want[1], "sin")]
    else:
        return f"returns {type(want).__name__}, neither (cos, sin) nor freqs_cis"
    for g, w, part in pairs:
        if g.shape != w.shape or g.dtype != w.dtype or g.device != w.device:
            return (f"gives {part} of shape {tuple(w.shape)}, {w.dtype} on {w.device}, where "
                    f"sinpe's gives {tuple(g.shape)}, {g.dtype} on {g.device}")
        bound = tolerance(largest, inv_freq, scaling, w.dtype)
        if w.is_complex():
            g, w, bound = torch.view_as_real(g), torch.view_as_real(w), bound[..., None]
        if not bool(((g.double() - w.double()).abs() <= bound.to(g.device)).all()):
            return (f"gives {part} that sinpe's caches do not reproduce (other frequencies, "
                    "sections, layout or scaling)")
    return ""


def unswitched_positions(module: nn.Module, layer_type: Optional[str]) -> int:
    """How many positions (from 0) a check may give a rotary module without making it
    switch its frequencies (dynamic: beyond ``max_position_embeddings``; longrope: beyond
    ``original_max_position_embeddings``): a switch would change its state.  One short
    of the switch, so that a copy of a module that dynamic rope has moved returns to its
    first frequencies (transformers resets them below the trained length).  At most
    :data:`CHECKED_POSITIONS`."""
    limits: list[Any] = [CHECKED_POSITIONS + 1]
    config = getattr(module, "config", None)
    limits.append(getattr(module, "original_max_seq_len", None)
                  or getattr(config, "max_position_embeddings", None) or CHECKED_POSITIONS)
    parameters: Any = getattr(config, "rope_parameters", None) or {}
    if layer_type is not None:
        parameters = parameters.get(layer_type) or {}
    limits.append(parameters.get("original_max_position_embeddings") or CHECKED_POSITIONS)
    counts = []
    for limit in limits:
        try:
            counts.append(int(limit))
        except (TypeError, ValueError, OverflowError):
            continue  # not a length: the others bound the check
    return max(1, min(counts) - 1)


def check_positions(module: nn.Module, count: int, device: torch.device
                    ) -> list[tuple[torch.Tensor, torch.Tensor, bool]]:
    """The position_ids a rotary module is checked on, each with the largest position of
    each cache row and whether the module must take them: ``(B, L)`` (every module: two
    rows, one reversed), and ``(S, B, L)`` for S = 2 and 3 with rows that differ (the
    time, height and width positions of vision-language models, or any other number of
    axes a module takes: where the module takes them, sinpe's must give what it gives);
    for an axial vision module (rope type "axial") only ``(N, 2)``, each patch's row and
    column."""
    steps = torch.arange(count)
    if getattr(module, "rope_type", None) == "axial":
        patches = torch.stack([steps // 7, steps % 7 + steps // 5], dim=1).to(device)
        return [(patches, patches.amax(-1), True)]
    text = torch.stack([steps, steps.flip(0)]).to(device)
    checks = [(text, text, True)]
    for rows in (torch.stack([text, text // 3 + 1]),
                 torch.stack([text, text // 3 + 1, text.flip(-1) // 2 + 2])):
        checks.append((rows, rows.amax(0), False))
    return checks


def frequency_error(params: Mapping[str, Any], head_dim: int, freq: NDArray[np.float64],
                    max_position_embeddings: Optional[float]) -> NDArray[np.float64]:
    """A bound of ``|transformers' float32 inv_freq - the exact one|``, per frequency,
    for the rope types of :func:`sinpe.rope_frequencies` (``freq``: the exact ones).

    In units of ``u = 2**-24`` relative to each frequency:

    - the powers ``theta ** (2k/dim)``: the exponent ``e`` rounded to float32
      (``e ln(theta) u`` of the power), theta rounded to float32 (``e u``), powf
      within one ulp (2u): ``P = e (ln theta + 1) + 2``;
    - each further float32 operation (a reciprocal, a product, a quotient, a Python
      float rounded to float32 as an operand) adds one rounding: 1;
    - YaRN's blend ``a (1 - f) + b f`` keeps the larger relative error of ``a`` and
      ``b`` plus its two products and the sum (2), and the ramp's own error moves it
      by ``|b - a|`` times that error: the ramp ``(j - low) / (high - low)`` rounds its
      quotient, and ``1 - ramp`` and ``1 - f`` round (3u absolute); with
      ``truncate=False`` the correction range is not integral, so ``low`` rounds to
      float32 (``|low| u / (high - low)``), ``j - low`` and ``high - low`` round (2u);
    - Llama 3's smoothing ``(1 - s) w/f + s w`` adds its three operations and the
      rounding of ``1 - s`` (4), and the error of ``s`` moves it by
      ``w (1 - 1/f) ds``, where ``s = (q - low)/(high - low)``, ``q = L w / 2 pi``
      (``P + 1 + 3`` relative), the subtraction rounds by ``u |q - low|`` and the
      quotient by ``u s (high - low)``.
    """
    rope_type = params.get("rope_type", params.get("type", "default"))
    partial = params.get("partial_rotary_factor") or 1.0
    dim = head_dim if rope_type == "proportional" else int(head_dim * partial)
    e = np.arange(0, 2 * len(freq), 2) / dim
    theta = float(params.get("rope_theta", 10000.0))
    log_theta = math.log(theta)
    if rope_type == "dynamic" and len(freq) > 1 and freq[1] > 0:
        log_theta = -math.log(freq[1]) / e[1]  # the grown base, which w_1 gives
    power = e * (log_theta + 1.0) + 2.0
    if rope_type in ("default", "dynamic"):
        return (power + 1.0) * _U * freq
    if rope_type in ("linear", "longrope", "proportional"):
        return (power + 3.0) * _U * freq
    if rope_type == "yarn":
        factor = params.get("factor") or (
            (max_position_embeddings or 0) / params["original_max_position_embeddings"])
        low, high = yarn_correction_range(dim, theta, params)
        ramp = 3.0 if params.get("truncate", True) else 5.0 + abs(low) / (high - low)
        b = np.power(theta, -e)
        return np.asarray((power + 7.0) * _U * freq + ramp * _U * b * abs(1.0 - 1.0 / factor),
                          np.float64)
    if rope_type != "llama3":
        raise ValueError(f"rope type {rope_type!r} has no float32 error bound here")
    factor, low, high = params["factor"], params["low_freq_factor"], params["high_freq_factor"]
    w0 = np.power(theta, -e)
    q = params["original_max_position_embeddings"] * w0 / (2 * math.pi)
    medium = (q >= low) & (q <= high)
    if not medium.any():  # (high <= low: no band to smooth, nothing divides by high - low)
        return (power + 3.0) * _U * freq
    s = (q - low) / (high - low)
    ds = _U * (q * (power + 4.0) + np.abs(q - low) + low) / (high - low) + 2.0 * _U * np.abs(s)
    smoothing = np.where(medium, w0 * (1.0 - 1.0 / factor) * ds, 0.0)
    return np.asarray((power + 1.0 + np.where(medium, 6.0, 2.0)) * _U * freq + smoothing,
                      np.float64)
