"""The shrinker: a model class's default config made tiny by generic rules.

Owns the size limits, ``SHRINK_RULES`` (the rules in words) and ``shrink``, which
applies them to the keyword arguments of a model's ``__init__`` (its registered
config).  The rules are written against the *names* diffusers gives those arguments
(``keys``) and never against a model: there is no table of per-model values.  The
positional configuration (``keys.POSITIONAL_RE``: per-head widths, rope axes and
thetas, timestep sinusoid widths, patch and sample sizes, position limits) is never
touched, which is why the head count falls while the head width stays.
"""
from __future__ import annotations

import re
from typing import Any

from .keys import (AXES_RE, CHANNEL_LIST_RE, EXPERTS_RE, FFN_RE, FOLLOW_RE, HEAD_DIM_RE, HEAD_RE,
                   INDEX_LIST_RE, KV_RE, LAYERS_RE, OTHER_HEADS_RE, TEXT_RE, TEXT_SUFFIX_RE,
                   TOKEN_RE, TOPK_RE, VOCAB_RE, WIDTH_KEYS, is_int, is_int_list, positional)

HEADS = 2       # attention heads kept (each head's width kept)
LAYERS = 1      # layers / blocks of every stack
CHANNELS = 32   # the narrowest width of a per-block channel list
WIDTH = 64      # other widths (single channel counts, feed-forward widths), upper bound
TEXT = 32       # widths of text and condition inputs, upper bound
EXPERTS = 4     # experts (upper bound)
TOPK = 2        # experts per token (upper bound)
VOCAB = 256     # vocabularies and codebooks (upper bound)

SHRINK_RULES = [
    "never changed: the positional keys (keys.POSITIONAL_RE: rope/rotary/theta/axes, per-head "
    "widths, timestep sinusoid widths and periods, patch and sample sizes, position limits, "
    "interpolation scales), and the input/output channel counts (in/out/latent channels)",
    "heads: the main head count -> min(h, 2) (a per-block list of them: each); with a "
    "per-head width key (attention_head_dim, "
    "head_dim) the width keys equal to h * head_dim become 2 * head_dim; without one, the "
    "model width (hidden_size, dim, model_dim, ...) becomes 2 * (width // h); kv heads keep "
    "the GQA ratio; other head counts (a prefix of their own: audio_, decoder_, cross_attn_, "
    "...) -> min(v, 2), their prefixed width scaled the same way when they have no head width",
    "legacy UNet naming: when num_attention_heads is absent or None and the config has a "
    "per-block channel list, attention_head_dim counts heads (diffusers reads it so) -> "
    "min(v, 2), element-wise",
    "layers and blocks (num_layers, num_single_layers, depth, n_layers, layers_per_block, "
    "transformer_layers_per_block, *_layers, num_*_blocks, ... ints and per-block int lists) "
    "-> 1; lists of layer indices (*_layers/_ids/_places/_blocks of sorted ints) -> their first "
    "index mapped to 0",
    "per-block channel lists (block_out_channels, *_channels lists) scaled by one factor so "
    "their narrowest entry is 32 (ratios and GroupNorm(32) divisibility kept); other channel "
    "counts -> min(v, 64), or the shrunk value of a list entry they equal (a block's width)",
    "feed-forward widths (ffn_dim, ff_inner_dim, intermediate_size, *hidden_dim, ...) -> "
    "min(v, 64)",
    "text / condition widths (joint_attention_dim, cross_attention_dim, text_dim, "
    "caption_channels, pooled_projection_dim, cap_feat_dim, context_in_dim, ...) -> min(v, 32), "
    "except one equal to a model width the head rule changed: it follows that width (a "
    "transformer's cross_attention_dim or caption_projection_dim is its own inner width)",
    "experts -> min(v, 4), experts per token -> min(v, 2); vocabularies and codebooks -> "
    "min(v, 256), token ids >= 256 -> 255; the input side of a side image's encoder "
    "(*encoder_size) -> min(v, 32)",
    "widths equal to a changed model width (time_embed_dim = inner width, ...) follow it",
]

# why a positional key was changed, for the reports (configs.tiny_config's "changed")
WHY = {"attention_head_dim": "legacy UNet naming: with num_attention_heads None diffusers "
                             "reads attention_head_dim as the head count, not a head width"}

_HEAD_SUFFIX = re.compile(r"(num_attention_heads|num_heads|n_heads|attention_heads|heads|"
                          r"num_head|head)$")
_IO = re.compile(r"^(\w+_)?(in|out)_channels$|^(latent|conditioning|input|output)_?channels?$|"
                 r"^channels$|^(in|out)_(dim|audio_dim|visual_dim)$|^latent_dim$|^out_dim$|"
                 r"^num_channels$")
_NOT_IO = re.compile(r"block_out_channels$")  # a per-block width, named like an output


def _kept(key: str, value: Any = 0) -> bool:
    """Positional keys, and the input/output channel counts (ints: a per-block list named
    block_out_channels is a width, not an input)."""
    return positional(key) or (is_int(value) and bool(_IO.search(key))
                               and not _NOT_IO.search(key))


class Shrinker:
    """Applies SHRINK_RULES to a kwargs dict in place; ``changes`` records each key changed."""

    def __init__(self, d: dict):
        self.d = d
        self.before = dict(d)
        self.width_map: dict[int, int] = {}

    def run(self) -> dict:
        self._heads()
        self._other_heads()
        self._legacy_heads()
        self._layers()
        self._channels()
        self._sizes()
        self._follow()
        return {k: (self.before[k], v) for k, v in self.d.items() if self.before[k] != v}

    def _set_width(self, key: str, new: int) -> None:
        old = self.d[key]
        if old != new:
            self.width_map.setdefault(old, new)
            self.d[key] = new

    def _heads(self) -> None:
        d = self.d
        hk = next((k for k in d if HEAD_RE.match(k) and is_int(d[k]) and d[k] > 0), None)
        per_block = next((k for k in d if HEAD_RE.match(k) and is_int_list(d[k])), None)
        if hk is None and per_block is not None:  # a head count per block: each min(h, HEADS)
            d[per_block] = type(d[per_block])(min(x, HEADS) for x in d[per_block])
            return
        if hk is None:
            self._headless_width()
            return
        heads = d[hk]
        new = min(heads, HEADS)
        if new == heads:
            return
        hd = next((d[k] for k in ("attention_head_dim", "head_dim", "dim_head", "dim_heads")
                   if is_int(d.get(k)) and d[k] > 0), None)
        widths = [k for k in WIDTH_KEYS if is_int(d.get(k)) and d[k] > 0]
        if hd is not None:  # the widths made of head widths (heads * hd, or a projection
            for k in widths:  # of its own that is a multiple of hd)
                if d[k] % hd == 0 and d[k] // hd > new:
                    self._set_width(k, new * hd)
            # the inner width the model derives (heads * hd) is no key, but other keys may
            # hold it (caption_projection_dim, a transformer's cross_attention_dim)
            self.width_map.setdefault(heads * hd, new * hd)
        elif widths:
            k = min(widths, key=lambda k: (d[k] % heads != 0, d[k]))
            self._set_width(k, new * (d[k] // heads))
        d[hk] = new
        for k, v in list(d.items()):
            if KV_RE.match(k) and is_int(v) and v > 0:
                d[k] = new if v >= heads else max(1, new // max(1, heads // v))

    def _headless_width(self) -> None:
        """No head count: the head width is the rope's (the sum of its axes widths), the heads
        width // head width; the width becomes HEADS head widths."""
        d = self.d
        axes = next((d[k] for k in d if AXES_RE.match(k) and is_int_list(d[k])), None)
        if axes is None:
            return
        hd = sum(axes)
        for k in WIDTH_KEYS:
            if is_int(d.get(k)) and d[k] % hd == 0 and d[k] // hd > HEADS:
                self._set_width(k, HEADS * hd)

    def _other_heads(self) -> None:
        d = self.d
        for k, v in list(d.items()):
            if not (is_int(v) and v > HEADS and OTHER_HEADS_RE.search(k)) or HEAD_RE.match(k) \
                    or KV_RE.match(k) or HEAD_DIM_RE.search(k) or positional(k):
                continue
            prefix = _HEAD_SUFFIX.sub("", k).removeprefix("num_")
            own_hd = [x for x in d if x.startswith(prefix) and HEAD_DIM_RE.search(x)] if prefix \
                else []
            for x in own_hd[:1]:  # its inner width (heads * head width) may be held by other
                if is_int(d[x]) and d[x] > 0:  # keys (its own cross_attention_dim): they follow
                    self.width_map.setdefault(v * d[x], HEADS * d[x])
            if not own_hd and prefix:
                widths = [x for x in d if x.startswith(prefix) and is_int(d[x]) and d[x] > 0
                          and re.search(r"(dim|hidden_size|width)$", x) and not _kept(x, d[x])
                          and d[x] % v == 0 and not FFN_RE.search(x)]
                for x in widths[:1]:
                    self._set_width(x, HEADS * (d[x] // v))
            d[k] = HEADS

    def _legacy_heads(self) -> None:
        d = self.d
        if "num_attention_heads" not in d or d["num_attention_heads"] is not None or \
                "attention_head_dim" not in d:
            return
        if not any(CHANNEL_LIST_RE.search(k) and is_int_list(v) for k, v in d.items()):
            return
        v = d["attention_head_dim"]
        if is_int(v):
            d["attention_head_dim"] = min(v, HEADS)
        elif is_int_list(v):
            d["attention_head_dim"] = type(v)(min(x, HEADS) for x in v)

    def _layers(self) -> None:
        d = self.d
        for k, v in list(d.items()):
            if positional(k):
                continue
            if LAYERS_RE.search(k) and is_int(v) and v > LAYERS:
                d[k] = LAYERS
            elif LAYERS_RE.search(k) and is_int_list(v) and "per" in k:
                d[k] = type(v)(min(x, LAYERS) for x in v)
            elif INDEX_LIST_RE.search(k) and is_int_list(v) and list(v) == sorted(set(v)) \
                    and len(v) > 1:
                d[k] = type(v)([0])
            elif re.search(r"depths$", k) and is_int_list(v):
                d[k] = type(v)(min(x, LAYERS) for x in v)

    def _channels(self) -> None:
        d = self.d
        # the narrowest channel count: 32 (GroupNorm(32)), or a head width of the config
        # (a block's attention splits its channels into heads of that width)
        floor = max([CHANNELS] + [v for k, v in d.items() if HEAD_DIM_RE.search(k) and is_int(v)
                                  and v == self.before[k] and v <= 256])
        entries: dict[int, int] = {}  # a list entry's default -> its shrunk value
        for k, v in list(d.items()):
            if not _kept(k, v) and CHANNEL_LIST_RE.search(k) and is_int_list(v) and min(v) > floor:
                low = min(v)
                d[k] = type(v)(max(floor, round(x / low) * floor) for x in v)
                for old, new in zip(v, d[k]):
                    entries.setdefault(old, new)
        for k, v in list(d.items()):
            if not _kept(k, v) and re.search(r"channels?$", k) and is_int(v) and v > WIDTH:
                # a channel count equal to a per-block width (a block's own) follows it
                self._set_width(k, entries.get(v, WIDTH))

    def _sizes(self) -> None:
        d = self.d
        for k, v in list(d.items()):
            if _kept(k, v):
                continue
            if FFN_RE.search(k) and is_int(v) and v > WIDTH:
                d[k] = WIDTH
            elif FFN_RE.search(k) and is_int_list(v):
                d[k] = type(v)(min(x, WIDTH) for x in v)
            elif TEXT_RE.search(k) and TEXT_SUFFIX_RE.search(k) and is_int(v) and \
                    v in self.width_map:  # a "text" width that is the model's own (Allegro's,
                d[k] = self.width_map[v]  # PixArt's cross_attention_dim) follows it
            elif TEXT_RE.search(k) and TEXT_SUFFIX_RE.search(k) and is_int(v) and v > TEXT:
                d[k] = TEXT
            elif TEXT_RE.search(k) and TEXT_SUFFIX_RE.search(k) and is_int_list(v):
                d[k] = type(v)(min(x, TEXT) for x in v)
            elif EXPERTS_RE.match(k) and is_int(v) and v > EXPERTS:
                d[k] = EXPERTS
            elif TOPK_RE.match(k) and is_int(v) and v > TOPK:
                d[k] = TOPK
            elif VOCAB_RE.search(k) and is_int(v) and v > VOCAB:
                d[k] = VOCAB
            elif TOKEN_RE.search(k) and is_int(v) and v >= VOCAB:
                d[k] = VOCAB - 1
            elif re.search(r"encoder_size$", k) and is_int(v) and v > CHANNELS:
                d[k] = CHANNELS  # the input side of an encoder of a side image (a face)

    def _follow(self) -> None:
        d = self.d
        for k, v in list(d.items()):
            if is_int(v) and v == self.before.get(k) and v in self.width_map and \
                    FOLLOW_RE.search(k) and not _kept(k, v) and not HEAD_DIM_RE.search(k):
                d[k] = self.width_map[v]


def shrink(kwargs: dict) -> tuple[dict, dict]:
    """(the shrunk kwargs, {key: (default, shrunk)} for every key changed)."""
    d = dict(kwargs)
    changes = Shrinker(d).run()
    return d, changes
