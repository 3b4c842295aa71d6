"""Fill-ins and repairs: default configs that transformers itself cannot build from.

Owns ``FILL_RULES`` (the rules in words) and the code that applies them to the dict of a
default config before it is shrunk.  Some default configs leave a value None that their
model reads (a rope_theta, an expert count, a layer_types list), or name an attribute
that only a related config of the tree defines.  The static fill-ins are always applied;
a repair only after an attempt failed with the error that names it (``repair_for``), so
a config that builds is never changed by one.  Like the shrink rules, every value is
derived from the config itself or is a plain generic value, never a per-family table.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

import transformers

from .keys import (BASE_FIELDS, EXPERT_RE, FFN_RE, GROUP_RE, LAYER_MAIN, TOKEN_RE, TOPK_RE,
                   VOCAB_RE, is_int, is_subconfig)
from .shrink import EXPERTS, FFN, TOPK, VOCAB

SLIDING_FILL = 4096

FILL_RULES = [
    "static: rope_parameters['rope_theta'] None -> the config's rope_theta or 10000.0 "
    "(transformers' default_theta); num_key_value_heads None -> num_attention_heads (MHA, as "
    "Llama's config derives it)",
    "static: ints the default config derived in __post_init__ (dataclass field default None or "
    "no field, e.g. a state-space head width, hrm's num_layers_per_stack) are dropped from the "
    "dict so the shrunk config derives them again (head_dim, kv heads, rope/window/vocab/token "
    "keys kept)",
    "repair on a NoneType error ('NoneType' in the message, torch.empty/clamp given None): None "
    "fields get plain values: experts 4, experts per token 2, expert groups / shared experts 1, "
    "expert ffn widths 128, vocab_size 256, layer_types ['full_attention']*n, mlp_layer_types "
    "['dense']*n, clip/clamp values 1e4, dict-typed fields {}, list-typed fields []",
    "repair on \"'XConfig' object has no attribute 'a'\": a copied from a related config of the "
    "tree (rope_theta from a rope_parameters dict)",
    "repair on KeyError '<layer type>' (rope_parameters keyed by layer type lacking that type): "
    "{'rope_type': config.default_rope_type, 'rope_theta': config.default_theta}",
    "repair on 'sliding_window ... not set' while layer_types has sliding layers: sliding_window "
    "None -> 4096",
]


def fill(d: dict) -> list[str]:
    """Static fill-ins for defaults that transformers itself cannot use."""
    notes = []
    for value in d.values():
        if is_subconfig(value):
            notes += fill(value)
    rp = d.get("rope_parameters")
    groups = [rp] if isinstance(rp, dict) and ("rope_type" in rp or "rope_theta" in rp) else \
        (list(rp.values()) if isinstance(rp, dict) else [])  # one dict, or one per layer type
    for g in groups:
        if isinstance(g, dict) and "rope_theta" in g and g["rope_theta"] is None:
            theta = d.get("rope_theta")
            theta = theta if isinstance(theta, (int, float)) else 10000.0
            g["rope_theta"] = theta
            notes.append(f"rope_parameters.rope_theta None -> {theta}")
    if d.get("num_key_value_heads", 0) is None and is_int(d.get("num_attention_heads")):
        d["num_key_value_heads"] = d["num_attention_heads"]
        notes.append("num_key_value_heads None -> num_attention_heads (MHA, as Llama derives it)")
    return notes


def repair_for(error: str) -> tuple | None:
    """The repair an attempt's error calls for, as a hashable tuple (None: no repair)."""
    m = re.search(r"'(\w+)' object has no attribute '(\w+)'", error)
    if m and m.group(1).endswith("Config"):
        return ("copy_attr", m.group(1), m.group(2))
    if re.search(r"`sliding_window`.*not set", error):
        return ("sliding_window",)
    m = re.search(r"KeyError: '(\w+_attention|\w+attention\w*)'", error)
    if m:
        return ("rope_layer_type", m.group(1))
    if "NoneType" in error or re.search(r"empty\(\) takes 1 positional|must not be None", error):
        return ("fill_none",)
    return None


def apply_repairs(d: dict, base: Any, repairs: tuple) -> list[str]:
    """Apply the repairs (tuples of repair_for) to the default config dict d of base."""
    notes = []
    for r in repairs:
        if r[0] == "fill_none":
            notes += _fill_none(d, base)
        elif r[0] == "copy_attr":
            notes += _copy_attr(config_tree(base, d), r[1], r[2])
        elif r[0] == "sliding_window":
            for obj, dd, path in config_tree(base, d):
                if "sliding_window" in dd and dd["sliding_window"] is None:
                    dd["sliding_window"] = SLIDING_FILL
                    notes.append(f"{path or type(obj).__name__}.sliding_window None -> "
                                 f"{SLIDING_FILL} (layer_types has sliding layers)")
        elif r[0] == "rope_layer_type":
            notes += _rope_layer_type(config_tree(base, d), r[1])
    return notes


def config_tree(obj: Any, d: dict, path: str = "") -> list:
    """(config object, its dict, path) for a config and every sub-config below it."""
    out = [(obj, d, path)]
    for key, value in d.items():
        sub = getattr(obj, key, None)
        if is_subconfig(value) and isinstance(sub, transformers.PreTrainedConfig):
            out += config_tree(sub, value, f"{path}.{key}")
    return out


def _typed_fields(obj: Any, prefix: str) -> set[str]:
    """Dataclass fields of obj's class annotated as dict/list (by the annotation's text)."""
    if obj is None or not dataclasses.is_dataclass(obj):
        return set()
    return {f.name for f in dataclasses.fields(obj)
            if str(f.type).startswith(prefix) and f.name not in BASE_FIELDS}


def _fill_none(d: dict, obj: Any = None) -> list[str]:
    """Repair after a NoneType failure: None counts/lists/dicts the model reads get plain values."""
    notes = []
    for key, value in list(d.items()):
        if is_subconfig(value):
            notes += _fill_none(value, getattr(obj, key, None))
    dict_fields = {f for f in _typed_fields(obj, "dict") if "rope" not in f}
    list_fields = {f for f in _typed_fields(obj, "list") if not TOKEN_RE.search(f)}
    layers = next((d[k] for k in LAYER_MAIN if is_int(d.get(k))), None)
    experts = any(is_int(d.get(k)) or d.get(k, 0) is None for k in d if EXPERT_RE.match(k))
    for key, value in list(d.items()):
        if value is not None:
            continue
        new: Any = None
        if EXPERT_RE.match(key):
            new = EXPERTS
        elif TOPK_RE.match(key) and experts:
            new = TOPK
        elif (GROUP_RE.match(key) or "shared_expert" in key and "size" not in key) and experts:
            new = 1
        elif FFN_RE.search(key) and experts:
            new = FFN
        elif re.search(r"(clip|clamp)", key):
            new = 1e4
        elif VOCAB_RE.search(key) and key == "vocab_size":
            new = VOCAB
        elif key == "layer_types" and layers:
            new = ["full_attention"] * layers
        elif key == "mlp_layer_types" and layers:
            new = ["dense"] * layers
        elif key in dict_fields:
            new = {}
        elif key in list_fields and not key.endswith("layer_types"):
            new = []
        if new is not None:
            d[key] = new
            shown = str(new[:1]) + "*n" if isinstance(new, list) else new
            notes.append(f"{key} None -> {shown}")
    return notes


def _copy_attr(tree: list, cls_name: str, attr: str) -> list[str]:
    """Repair after "'Cls' object has no attribute 'attr'": copy attr from a related config of
    the tree (or rope_theta from a rope_parameters dict)."""
    target = next((dd for obj, dd, _ in tree if type(obj).__name__ == cls_name), None)
    if target is None:
        return []
    value = None
    for obj, dd, path in tree:
        if dd is target:
            continue
        if attr in dd and dd[attr] is not None:
            value = dd[attr]
            break
        rp = dd.get("rope_parameters")
        if attr in ("rope_theta", "partial_rotary_factor") and isinstance(rp, dict) and attr in rp:
            value = rp[attr]
            break
    if value is None and attr == "rope_theta":
        rp = target.get("rope_parameters")
        value = rp.get(attr) if isinstance(rp, dict) else None
    if value is None:
        return []
    target[attr] = value
    return [f"{cls_name}.{attr} missing -> {value!r} (from a related config)"]


def _rope_layer_type(tree: list, layer_type: str) -> list[str]:
    """Repair after KeyError '<layer type>': rope_parameters keyed by layer type that lacks a
    type of layer_types gets the config class's own defaults (default_rope_type, default_theta)."""
    notes = []
    for obj, dd, path in tree:
        rp = dd.get("rope_parameters")
        if isinstance(dd.get("layer_types"), list) and layer_type in dd["layer_types"] and \
                isinstance(rp, dict) and layer_type not in rp and \
                all(isinstance(v, dict) for v in rp.values()):
            rp[layer_type] = {"rope_type": getattr(obj, "default_rope_type", "default"),
                              "rope_theta": getattr(obj, "default_theta", 10000.0)}
            notes.append(f"{path or type(obj).__name__}.rope_parameters[{layer_type!r}] missing -> "
                         f"{rp[layer_type]} (the config class defaults)")
    return notes
