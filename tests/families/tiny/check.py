"""The rope check: are a shrunk config's rope-relevant values those of the default config?

The shrink rules are meant never to touch what decides a model's rotary embedding, and a
test built on a tiny model is only worth as much as that promise.  ``rope_diff`` checks
it on the configs themselves, for the whole tree of sub-configs: rope parameters, theta,
partial factors, rotary dims, position limits and per-head widths (per layer, for
configs whose layers differ).  ``build`` records the differences in ``info["rope_check"]``
and prefers a variant without any.
"""
from __future__ import annotations

import json
from typing import Any

import transformers

from .inputs import error_line
from .keys import HEAD_KEYS, WIDTH_KEYS, is_int

_ROPE_KEYS = ("rope_parameters", "rope_theta", "partial_rotary_factor", "rotary_dim", "rotary_pct",
              "qk_rope_head_dim", "max_position_embeddings", "rope_scaling", "mrope_section")


def _get(c: Any, key: str) -> Any:
    try:
        return getattr(c, key, None)
    except Exception:  # noqa: BLE001 - a per-layer attribute that differs between layers
        g = getattr(c, "_getattr_without_heterogeneous_validation", None)
        return g(key, None) if g else None


def _head_width(c: Any) -> Any:
    """Per-head width as the shrinker sees it (explicit head_dim, else the smallest width
    divisible by the head count, floor-divided)."""
    hd = _get(c, "head_dim")
    if is_int(hd):
        return hd
    heads = next((_get(c, k) for k in HEAD_KEYS if is_int(_get(c, k)) and _get(c, k) > 0), None)
    widths = [_get(c, k) for k in WIDTH_KEYS if is_int(_get(c, k)) and _get(c, k) > 0]
    if not heads or not widths:
        return None
    divisible = [w for w in widths if w % heads == 0]
    return min(divisible or widths) // heads


def rope_diff(default: Any, shrunk: Any, path: str = "") -> list[str]:
    """Differences in rope-relevant values (rope_parameters, rope_theta, partial factor, rotary
    dims, max_position_embeddings, per-head width) between the default and the shrunk config."""
    out = []
    name = path or type(shrunk).__name__
    for key in _ROPE_KEYS:
        a = _get(default, key) if hasattr(type(default), key) or key in vars(default) else None
        b = _get(shrunk, key) if hasattr(type(shrunk), key) or key in vars(shrunk) else None
        if json.dumps(a, sort_keys=True, default=str) != json.dumps(b, sort_keys=True, default=str):
            out.append(f"{name}.{key}: {a!r} -> {b!r}"[:300])
    ha, hb = _head_width(default), _head_width(shrunk)
    if ha != hb:
        out.append(f"{name}.head width: {ha} -> {hb}")
    if getattr(default, "is_heterogeneous", False) or getattr(shrunk, "is_heterogeneous", False):
        def per_layer(c: Any) -> list:  # distinct (layer type, head width) over the layers
            types = _get(c, "layer_types") or [None] * c.num_hidden_layers
            return sorted({(str(types[i]), _head_width(c.per_layer_config[i]))
                           for i in range(c.num_hidden_layers)})
        try:
            pa, pb = per_layer(default), per_layer(shrunk)
            if pa != pb:
                out.append(f"{name}.per-layer head widths: {pa} -> {pb}")
        except Exception as e:  # noqa: BLE001 - recorded as a difference
            out.append(f"per-layer check failed: {error_line(e)}")
    for key, value in vars(shrunk).items():
        other = vars(default).get(key)
        if isinstance(value, transformers.PreTrainedConfig) and \
                isinstance(other, transformers.PreTrainedConfig):
            out += rope_diff(other, value, f"{name}.{key}")
    return out
