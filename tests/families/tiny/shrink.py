"""The shrinker: a family's default config made tiny by generic rules.

Owns the size limits, ``SHRINK_RULES`` (the rules in words) and ``Shrinker``, which
applies them to the dict of a default config (``config.to_dict()``).  The rules are
written against the *names* transformers gives config keys (head counts, widths,
per-layer lists, expert counts, vocabularies, token ids) and never against a family:
there is no table of per-family values, so a family added to transformers is shrunk
by the same rules.  What a rope check must see unchanged (rope parameters, rotary
dims, per-head widths, position limits, windows) is never touched, which is why the
head count falls while the head width stays.
"""
from __future__ import annotations

import dataclasses
import functools
import json
import re
from typing import Any

from .keys import (BASE_FIELDS, EXPERT_RE, FFN_RE, GROUP_RE, HEAD_KEYS, INDEX_LIST_RE, KV_RE,
                   LAYER_MAIN, MAMBA_HD_RE, MAMBA_HEADS_RE, NOT_TOKEN_RE, PROTECT_RE,
                   SECONDARY_HEADS_RE, STACK_RE, SUBCOUNT_RE, TOKEN_RE, TOPK_RE, VOCAB_RE,
                   WIDTH_FOLLOW_RE, WIDTH_KEYS, WIDTH_NOFOLLOW_RE, is_int, is_subconfig)

HEADS = 2          # attention heads kept (head width kept)
VOCAB = 256        # vocabulary size (upper bound)
LAYERS = 2         # layers kept when no per-layer list says otherwise
SUB_LAYERS = 1     # secondary stacks (adapters, predictors, memory blocks, ...)
FFN = 128          # feed-forward widths (upper bound)
EXPERTS = 4        # routed experts (upper bound)
TOPK = 2           # experts per token (upper bound)

SHRINK_RULES = [
    "heads: the main head count of each (sub-)config -> min(h, 2); its per-head width is kept: "
    "width = new_heads * head_dim, head_dim = the explicit head_dim, else width // heads (floor, "
    "as the modeling code derives it; with several width keys, the smallest one divisible by the "
    "head count, e.g. a vision tower's embed_dim rather than its output hidden_size)",
    "kv heads keep the GQA ratio: kv = max(1, new_heads // (h // kv)); per-layer head lists scale",
    "other head counts of the config (indexers, linear attention, ...) -> min(v, new heads), "
    "their head widths kept; state-space (mamba/ssm) heads tied to the width (heads * head width "
    "== expand * width) scale with the width, untied ones are left alone",
    "widths elsewhere equal to a changed width (e.g. a vision tower's out_hidden_size = the text "
    "hidden_size, conv groups = width) follow the change (width map old->new, text config first)",
    "feed-forward widths (intermediate/ffn/mlp_dim/moe_inter/projector_hidden/... keys, ints and "
    "per-layer lists) -> min(v, 128)",
    "layers: per-layer lists (len == layer count: layer_types, mlp_layer_types, no_rope_layers, "
    "layer_rope_theta, ...), layer-index lists (sorted ints < layer count under a "
    "*layer*/*index*/*ids*/*blocks* key), per-layer lists of layer indices (kv sources) and "
    "per_layer_config overrides define a signature per layer; one layer of each distinct signature "
    "is kept (first occurrence; a kept layer's kv-source layer too) and the lists re-indexed; "
    "without such lists 2 layers. Read-only per-layer properties of the config (derived from "
    "periods/counts) are re-derived from the shrunk values; if they then lose a distinct value, "
    "the shortest prefix of layers holding every signature is kept instead",
    "per_layer_config overrides get the same head/width/count rules as the global values",
    "secondary stack counts (other *_layers / depth keys) -> min(v, 1) (2 for encoder/decoder "
    "stacks); counts of special layers "
    "(first_k_dense_replace, num_dense*, kv_shared*, ...) -> min(v, 1); counts that equal the "
    "length of a list of the same config (e.g. conv feature-extractor layers) are kept; backbone "
    "stage_names/out_features/out_indices are re-derived",
    "experts -> min(v, 4), experts per token -> min(v, 2), expert groups -> 1",
    "vocabularies (*vocab_size / *vocab keys) -> min(v, 256); token ids >= 256 mapped to distinct "
    "ids counted down from 255 (same old id -> same new id across the config tree)",
    "kept as the default config has them: rope_parameters (rope_theta, rope_type, "
    "partial_rotary_factor, mrope_section, scaling factors), rotary dims, per-head widths, "
    "max_position_embeddings, sliding_window, image/patch sizes; build() checks this "
    "(info['rope_check'] lists any difference from the default config)",
    "variants tried in order until one builds and runs: (ffn 128, 2 heads), (ffn 128, 4 heads), "
    "(ffn kept, 4 heads), (ffn kept, heads kept); variants are skipped when the error repeats; a "
    "variant that runs but changes a rope value (rope_check) is kept in reserve while the milder "
    "shrunk variants of the same class are tried (not the full-width one); the reserve is used if "
    "none is clean",
    "probe: use_cache=False when accepted; ids avoid every special token id of the config",
]

@functools.lru_cache(maxsize=None)
def _readonly_props(cls: type) -> frozenset[str]:
    """Read-only properties of a config class: values the config derives from others."""
    out = set()
    for klass in cls.__mro__:
        for name, value in vars(klass).items():
            if isinstance(value, property) and value.fset is None:
                out.add(name)
    return frozenset(out)


class Shrinker:
    """Applies SHRINK_RULES to a config dict in place: ``shrink`` (heads, counts, layers;
    sub-configs first), then ``follow`` (widths equal to a changed width) and ``tokens``
    (token ids inside the new vocabulary), which need the maps the first pass records
    over the whole tree."""

    def __init__(self, shrink_ffn: bool = True, heads: int | None = HEADS, record: bool = True):
        self.shrink_ffn = shrink_ffn
        self.heads = heads
        self.record = record  # per_layer_config entries must not add to the width map
        self.width_map: dict[int, int] = {}
        self.token_map: dict[int, int] = {}
        self.next_token = VOCAB - 1
        self.notes: list[str] = []

    def shrink(self, d: dict, config_obj: Any, path: str) -> None:
        subs = {k: v for k, v in d.items() if is_subconfig(v)}
        # text config first, so that its widths are the ones the width map holds
        order = sorted(subs, key=lambda k: ("text" not in k, k))
        for key in order:
            self.shrink(d[key], getattr(config_obj, key, None), f"{path}.{key}")
        before = {k: v for k, v in d.items() if not isinstance(v, (dict, list))}
        self._heads(d)
        self._counts(d)
        self._per_layer_config(d, before)
        self._layers(d, config_obj, path)
        self._drop_derived(d, config_obj, before, path)

    def _heads(self, d: dict) -> None:
        if not self.heads:
            return
        hk = next((k for k in HEAD_KEYS if is_int(d.get(k)) and d[k] > 0), None)
        if hk is None:
            return
        heads = d[hk]
        head_dim = d.get("head_dim")
        widths = [k for k in WIDTH_KEYS if is_int(d.get(k)) and d[k] > 0]
        divisible = [k for k in widths if d[k] % heads == 0]
        if is_int(head_dim) and head_dim > 0:
            exact = [k for k in widths if d[k] == heads * head_dim]
            wk = (exact or widths or [None])[0]
        else:  # several widths (a vision tower's embed_dim, output hidden_size): attention's
            wk = min(divisible or widths, key=lambda k: d[k]) if widths else None
        if not (is_int(head_dim) and head_dim > 0):
            if wk is None:
                return
            head_dim = d[wk] // heads  # floor division, as the modeling code derives it
            if head_dim <= 0:
                return
        new_heads = min(heads, self.heads)
        if new_heads == heads:
            return
        d[hk] = new_heads
        for key, value in list(d.items()):
            if KV_RE.match(key) and is_int(value) and value > 0:
                if value >= heads:
                    d[key] = new_heads
                else:
                    ratio = max(1, heads // value)
                    d[key] = max(1, new_heads // ratio)
            if key.endswith("_per_layer") and isinstance(value, list) and \
                    all(is_int(x) for x in value) and ("head" in key):
                d[key] = [max(1, round(x * new_heads / heads)) for x in value]
        handled = set()
        if "head_dim" in d and d.get("head_dim") is None:
            d["head_dim"] = head_dim
        if wk is not None:
            old = d[wk]
            new = new_heads * head_dim
            d[wk] = new
            if old != new:
                if self.record:
                    self.width_map.setdefault(old, new)
                for key, value in list(d.items()):
                    # duplicates of the width under another key in the same config
                    if key != wk and key in WIDTH_KEYS and value == old:
                        d[key] = new
                    # state-space heads tied to the width (heads * head width == expand *
                    # width) scale with it, their head width kept
                    elif MAMBA_HEADS_RE.search(key) and is_int(value) and \
                            (value * new) % old == 0 and value * new // old > 0:
                        hd = next((d[k] for k in d if MAMBA_HD_RE.search(k) and is_int(d[k])), None)
                        ex = next((d[k] for k in d if re.search(r"expand$", k) and is_int(d[k])), 1)
                        if hd is None or value * hd == ex * old:
                            d[key] = value * new // old
                            handled.add(key)
        # other head counts of this config (indexers, linear attention, untied state-space
        # heads, ...): min(v, new heads), their head widths kept
        for key, value in list(d.items()):
            if key != hk and key not in handled and is_int(value) and value > new_heads and \
                    SECONDARY_HEADS_RE.search(key) and not KV_RE.match(key) and \
                    not MAMBA_HEADS_RE.search(key):
                d[key] = new_heads

    def _counts(self, d: dict) -> None:
        lengths = {len(v) for v in d.values() if isinstance(v, list)}
        for key, value in list(d.items()):
            if isinstance(value, list) and self.shrink_ffn and FFN_RE.search(key) and \
                    value and all(is_int(x) for x in value):
                d[key] = [min(x, FFN) if x > 0 else x for x in value]
                continue
            if not is_int(value):
                continue
            if EXPERT_RE.match(key) and value > EXPERTS:
                d[key] = EXPERTS
            elif TOPK_RE.match(key) and value > TOPK:
                d[key] = TOPK
            elif GROUP_RE.match(key) and value > 1:
                d[key] = 1
            elif VOCAB_RE.search(key) and value > VOCAB:
                d[key] = VOCAB
            elif self.shrink_ffn and FFN_RE.search(key) and value > FFN and \
                    ("size" in key or "dim" in key):
                d[key] = FFN
            elif SUBCOUNT_RE.search(key) and value > 1 and value not in lengths:
                d[key] = 1  # a count equal to a list's length describes that list: kept

    def _per_layer_config(self, d: dict, before: dict) -> None:
        """Per-layer override dicts get the same rules, applied to (global defaults + override)."""
        plc = d.get("per_layer_config")
        if not isinstance(plc, dict):
            return
        sub = Shrinker(self.shrink_ffn, self.heads, record=False)
        for key, entry in plc.items():
            if not isinstance(entry, dict):
                continue
            merged = dict(before, **entry)
            sub._heads(merged)
            sub._counts(merged)
            plc[key] = {k: merged[k] for k in entry}

    def _layers(self, d: dict, config_obj: Any, path: str) -> None:
        main = next((k for k in LAYER_MAIN if is_int(d.get(k)) and d[k] > 0), None)
        lengths = {len(v) for v in d.values() if isinstance(v, list)}
        # secondary stacks (not when a list of the same length describes them)
        for key, value in list(d.items()):
            if key != main and is_int(value) and STACK_RE.search(key) \
                    and not SUBCOUNT_RE.search(key) and value > SUB_LAYERS \
                    and not key.startswith(("max_", "num_nextn")) and value not in lengths:
                limit = LAYERS if key in LAYER_MAIN else SUB_LAYERS
                d[key] = min(value, limit)
        if main is None:
            return
        n = d[main]
        per_layer: dict[str, list] = {}
        index_lists: dict[str, list] = {}
        valued: dict[str, list] = {}  # per-layer lists whose values are layer indices
        identity: list[str] = []
        for key, value in d.items():
            if not isinstance(value, list) or not value or TOKEN_RE.search(key) and \
                    not NOT_TOKEN_RE.search(key):
                continue
            ints = all(is_int(x) for x in value)
            if len(value) == n and n > 1:
                if ints and value == list(range(n)):
                    identity.append(key)
                elif ints and ("layer" in key or "source" in key) and \
                        all(0 <= x < n for x in value) and not set(value) <= {0, 1}:
                    valued[key] = value
                else:
                    per_layer[key] = value
            elif ints and INDEX_LIST_RE.search(key) and len(value) < n and \
                    all(0 <= x < n for x in value) and value == sorted(set(value)):
                index_lists[key] = value
        plc = d.get("per_layer_config") if isinstance(d.get("per_layer_config"), dict) else None
        if plc is not None:  # keys are layer indices, possibly zero-padded strings ("05")
            plc = {int(k): v for k, v in plc.items()}
        derived = {}
        if config_obj is not None:
            for name in _readonly_props(type(config_obj)):
                try:
                    value = getattr(config_obj, name)
                except Exception:  # noqa: BLE001 - a property may refuse (per-layer values)
                    continue
                if isinstance(value, list) and len(value) == n and n > 1 and name not in d:
                    derived[name] = value
        if not (per_layer or index_lists or valued or plc or derived):
            new = min(n, LAYERS)
            d[main] = new
            self._other_mains(d, main, new)
            self._stages(d, n, new)
            return

        def sig(i: int, with_derived: bool) -> tuple:
            parts = [json.dumps(v[i], sort_keys=True, default=str) for v in per_layer.values()]
            if with_derived:
                parts += [json.dumps(v[i], default=str) for v in derived.values()]
            parts += [i in v for v in index_lists.values()]
            parts += [v[i] == i for v in valued.values()]
            if plc is not None:
                parts.append(json.dumps(plc.get(i), sort_keys=True, default=str))
            return tuple(parts)

        def subset(with_derived: bool) -> list[int]:
            seen: dict[tuple, int] = {}
            for i in range(n):
                seen.setdefault(sig(i, with_derived), i)
            keep = sorted(seen.values())
            for v in valued.values():  # a layer whose K/V come from another keeps that one too
                keep = sorted(set(keep) | {v[i] for i in keep})
            return keep

        def apply(dd: dict, keep: list[int]) -> None:
            pos = {old: new for new, old in enumerate(keep)}
            for key, value in per_layer.items():
                dd[key] = [value[i] for i in keep]
            for key in identity:
                dd[key] = list(range(len(keep)))
            for key, value in valued.items():
                dd[key] = [pos[value[i]] for i in keep]
            for key, value in index_lists.items():
                dd[key] = [pos[i] for i in value if i in pos]
            if plc is not None:
                dd["per_layer_config"] = {str(new): plc[old] for old, new in pos.items()
                                          if plc.get(old) is not None}
            dd[main] = len(keep)
            self._other_mains(dd, main, len(keep))
            self._stages(dd, n, len(keep))

        keep = subset(with_derived=False)
        if derived:
            # read-only per-layer lists are re-derived by the config from the shrunk values: keep
            # the subset if they still show every distinct value, else keep a prefix of layers
            trial = keep if len(keep) > 1 or n == 1 else list(range(min(n, LAYERS)))
            cand = json.loads(json.dumps(d, default=str))
            apply(cand, trial)
            try:
                obj = type(config_obj).from_dict(cand)
                ok = all(set(map(str, getattr(obj, k))) >= set(map(str, v))
                         for k, v in derived.items())
            except Exception:  # noqa: BLE001 - a config that refuses the subset: use a prefix
                ok = False
            if ok:
                keep = trial
            else:
                keep = list(range(max(subset(with_derived=True)) + 1))
                self.notes.append(f"{path}: prefix of {len(keep)} layers (read-only layer lists "
                                  f"{sorted(derived)})")
        apply(d, keep)

    @staticmethod
    def _other_mains(d: dict, main: str, new: int) -> None:
        for key in LAYER_MAIN:
            if key != main and is_int(d.get(key)) and d[key] > new:
                d[key] = min(d[key], max(new, LAYERS))

    @staticmethod
    def _stages(d: dict, old: int, new: int) -> None:
        """Backbone stage lists (one stage per layer) are re-derived by the config."""
        if old != new and isinstance(d.get("stage_names"), list):
            for key in ("stage_names", "out_features", "out_indices"):
                d.pop(key, None)

    def _drop_derived(self, d: dict, config_obj: Any, before: dict, path: str) -> None:
        """Ints the default config derived in __post_init__ (field default None, or no field)
        and that no rule changed are dropped, so that they are derived again from the shrunk
        values (e.g. a state-space head width = expand * hidden / heads)."""
        if config_obj is None or not dataclasses.is_dataclass(config_obj):
            return
        fields = {f.name: f for f in dataclasses.fields(type(config_obj))}
        for key, value in list(d.items()):
            # only values the default config had and no rule changed
            if not is_int(value) or key in BASE_FIELDS or PROTECT_RE.search(key) or \
                    before.get(key) != value:
                continue
            f = fields.get(key)
            if getattr(config_obj, key, None) is None:
                continue  # not derived by the default config (e.g. filled in above)
            if f is None or (f.default is None and f.default_factory is dataclasses.MISSING):
                d.pop(key)
                if self.record:
                    self.notes.append(f"{path}.{key}: derived, re-derived")

    def follow(self, d: dict) -> None:
        """Widths elsewhere in the tree equal to a width the first pass changed follow it."""
        for key, value in list(d.items()):
            if is_subconfig(value):
                self.follow(value)
            elif is_int(value) and value in self.width_map and key not in WIDTH_KEYS \
                    and key not in HEAD_KEYS and WIDTH_FOLLOW_RE.search(key) \
                    and not WIDTH_NOFOLLOW_RE.search(key):
                d[key] = self.width_map[value]

    def tokens(self, d: dict) -> None:
        """Token ids outside the new vocabulary get distinct ids counted down from its top."""
        for key, value in list(d.items()):
            if is_subconfig(value):
                self.tokens(value)
            elif TOKEN_RE.search(key) and not NOT_TOKEN_RE.search(key):
                if is_int(value) and value >= VOCAB:
                    d[key] = self._token(value)
                elif isinstance(value, list) and all(is_int(x) for x in value):
                    d[key] = [self._token(x) if x >= VOCAB else x for x in value]

    def _token(self, old: int) -> int:
        if old not in self.token_map:
            self.token_map[old] = self.next_token
            self.next_token -= 1
        return self.token_map[old]
