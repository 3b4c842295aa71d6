"""Inputs for one forward of a tiny model, synthesised from its signature and config.

Owns the sizes (``BATCH``, ``GRID``, ``FRAMES``, ``TOKENS``, ``TIMESTEPS``), the
layouts of the main input (``LAYOUTS``) and ``INPUT_RULES``: what a forward parameter
gets, by its *name* (and annotation), with widths and lengths read from the config by
the names of its keys, never from the model's name.  :mod:`.probe` tries the layouts and
repairs what an error names (``Sizes.widths``, ``Sizes.forced``, ...).

The main input is the forward's first parameter (``hidden_states``, ``sample``, ``x``,
``latents``...): an image ``(B, C, H, W)``, a video ``(B, C, F, H, W)`` or
``(B, F, C, H, W)``, packed tokens ``(B, N, C)`` (Flux-style, with ``img_ids``), video
tokens ``(B, F*N, C)`` with ``num_frames``/``height``/``width``, a sequence ``(B, C, L)``
or ``(B, L, C)``, a vector ``(B, C)``; a parameter annotated as a list gets a list of
per-sample tensors.  ``C`` is the config's input channels, ``H = W = GRID * patch *
2**(blocks - 1)`` (a UNet halves it per block; at most ``MAX_SIDE``), ``F = FRAMES *
temporal patch``.
"""
from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field
from typing import Any

import torch

from .caller import caller_value
from .docshapes import bind, channel_axis, doc_constants, doc_entry, evaluate, meaning
from .keys import LAYERS_RE, is_int, is_int_list

BATCH = 2                 # two samples: two timesteps, one fractional and one large
TIMESTEPS = (0.5, 999.0)  # timestep embeddings take real t
GRID = 2                  # latent tokens per side (2x2 after patching)
FRAMES = 2                # latent frames of a video input (after temporal patching)
TOKENS = 4                # text tokens (unless the config fixes the text length)
SEQUENCE = 16             # length of a 1-D (audio) input
MAX_SIDE = 32             # the main input's height and width at most (a forward stays fast)
VOCAB_FALLBACK = 16       # token ids below this when the config has no vocabulary

LAYOUTS = ("image", "video", "video_fc", "video_cl", "tokens", "video_tokens", "sequence",
           "sequence_t", "vector")
# "doc": the main input in the shape the forward's docstring gives it, tried first when no
# layout above has that rank and channel axis (a patchified (B, N, C, pt, ph, pw) input)

INPUT_RULES = [
    "the main input (the first parameter): one of LAYOUTS, C = in_channels (in_dim, "
    "in_visual_dim, ...; 4 if none), a GRID x GRID latent grid (more when an error asks), "
    "sizes from patch_size (int or (t, h, w)), patch_size_t and the number of blocks (at most "
    "MAX_SIDE); video layouts first when the patch size has three entries or the config "
    "counts frames",
    "timesteps (timestep, t, timestep_r, r_timestep, *_timestep, timestep_ratio, *_time, "
    "decoder_noise_time): float (B,) = TIMESTEPS (0.5 and 999.0)",
    "text inputs (encoder_hidden_states*, cap_feats, text_*, context*, *_embeds): (B, T, D); D "
    "= the text width key the name points to (*_t5 -> a t5 key, *_2 -> a *_2 key, image -> "
    "an image key), else caption_channels, joint_attention_dim, text_dim, ..., "
    "cross_attention_dim; T = a text length key of the config (text_len_t5 for *_t5, "
    "max_text_seq_length, text_len: position tables are made for it), else TOKENS",
    "pooled inputs (pooled_*, *_pooled, global_hidden_states): (B, D) from a pooled key",
    "position ids: img_ids/txt_ids (N, axes) grids (axis 0 the frame, then row, column, "
    "zeros; axes = len(axes_dims_rope)), text ids zeros; position_ids: text rows then the "
    "grid's; *rope_pos: aranges per axis",
    "masks: ones, (B, T) for text masks, bool when annotated so or after an error asks",
    "img_shapes: [[(frames, GRID, GRID)]] * B; original_size/target_size/crop_coords: (B, 2); "
    "resolution (B, 2), aspect_ratio (B, 1); added_time_ids: (B, "
    "projection_class_embeddings_input_dim // addition_time_embed_dim); class_labels: (B,) ints "
    "when the config counts classes; guidance: (B,) = 3.5 when the config embeds guidance; "
    "fps: (B,) = 24; *_lens: (B,) = T; *partition*: [frames]; *_latents, control inputs: like "
    "the main input; controlnet_cond: conditioning_channels at the main input's size times "
    "2**(len(conditioning_embedding_out_channels) - 1); *input_ids/token ids: ints below the "
    "vocabulary; audio_hidden_states: (B, SEQUENCE, audio_in_channels)",
    "num_frames/height/width ints: the video-tokens layout's sizes; <stream>_num_frames: the "
    "token count of <stream>_hidden_states; return_dict: False; other optional parameters are "
    "left out until an error shows the forward reads them (probe: then they get these rules, "
    "else the main input's shape)",
    "the forward's docstring shapes (docshapes): the main input's documented rank and channel "
    "axis choose the first layout ('doc': the documented shape itself, e.g. a patchified "
    "(B, N, C, pt, ph, pw) input or token ids (B, H, W)); a required parameter no rule names "
    "gets its documented shape (names bound by the main input's sizes, config keys and "
    "expressions such as 2C + 4 or 1 + len(injection_layer_ids)): ids, tags and segments "
    "zeros (or the module constants the entry names, in turn), drop flags False, masks ones, "
    "positions the latent grid's rows, timesteps broadcast, others random; after an error, "
    "any input whose value differs from its documented shape takes it (probe)",
    "required parameters no rule or docstring shapes: one named like a built input (the "
    "longest shared prefix, prior_token_drop ~ prior_token_id) takes its shape; a rotary table "
    "(*rotary*, *rope*, *freqs*) is made by the call a diffusers pipeline makes for it "
    "(caller); by annotation: an int sequence length -> the latent tokens of a sample, a str "
    "-> the first quoted option of its docstring entry, a diffusers class (a cache container) "
    "-> an instance made from the config values its constructor names",
    "lists: per-sample tensors, a *_layers list one batched tensor per layer of the model, "
    "(after an error) lists of items one batched tensor; list[int] -> [0]; a list of "
    "(encoding, mask) pairs: one pair of the model's width; *grid_sizes: (B, 3) patch grids; "
    "img_shapes, shape_list, *_shapes: per sample [(frames, GRID, GRID)]; micro_conds: (B, 5) "
    "micro-conditioning values; inputs the forward indexes by a config list "
    "(x[k] for k in self.config.llama_layers) are stacked in front",
]

TIME_RE = re.compile(r"^(timesteps?|t|timestep_r|r_timestep|\w+_timesteps?|timestep_ratio|"
                     r"\w+_time|decoder_noise_time)$")
TEXT_NAME_RE = re.compile(r"^(encoder_hidden_states\w*|cap_feats|text_bth|clip_text|"
                          r"source_hidden_states|audio_encoder_hidden_states|"
                          r"context(?!\w*latents)\w*|"
                          r"image_embeddings|image_embeds|\w+_embeds)$")
POOLED_NAME_RE = re.compile(r"(pooled|global_hidden_states|proj_embedding)")
MASK_RE = re.compile(r"mask(_t5|_\d)?$")  # a mask, or the mask of a second encoder's text
# config keys holding the width of text inputs, most specific first (a text encoder's
# width before the model's own projection: caption_channels is PixArt's T5 width while
# its cross_attention_dim is the inner width)
TEXT_KEYS = ("caption_channels", "joint_attention_dim", "text_dim", "text_embed_dim",
             "cap_feat_dim", "context_in_dim", "in_text_dim", "text_hidden_dim", "text_in_dim",
             "text_emb_dim", "encoder_hid_dim", "text_encoder_dim", "encoder_hidden_size",
             "cross_attention_input_dim", "cond_token_dim", "cross_attention_dim",
             "text_embed_2_dim")
POOLED_KEYS = ("pooled_projection_dim", "clip_text_pooled_in_channels", "global_states_input_dim",
               "pooled_embed_dim", "in_text_dim2", "cond_embed_dim", "global_cond_dim",
               "embedding_dim")
IN_KEYS = ("in_channels", "in_dim", "in_visual_dim", "input_channels", "num_channels",
           "latent_channels", "io_channels", "in_audio_dim", "embedding_dim")
TEXT_LEN_KEYS = ("max_text_seq_length", "text_len")


_IDS_RE = re.compile(r"(^|_)(input_ids|token_ids?|tokens)$")


def _vocab(kwargs: dict) -> int:
    return next((v for k, v in kwargs.items() if re.search(r"vocab_size$", k) and is_int(v)),
                VOCAB_FALLBACK)


def _first_int(kwargs: dict, keys: tuple, default: int | None = None) -> int | None:
    for key in keys:
        v = kwargs.get(key)
        if is_int(v) and v > 0:
            return v
        if is_int_list(v):
            return v[0]
    return default


def _pair(v: Any) -> tuple[int, int, int]:
    """(temporal, height, width) patch sizes from an int, a pair or a triple."""
    if is_int(v):
        return 1, v, v
    if is_int_list(v):
        v = list(v)
        return (1, v[0], v[-1]) if len(v) == 2 else (v[0], v[1], v[2])
    return 1, 1, 1


@dataclass
class Sizes:
    """The sizes of one probe, read from the config, and what errors asked for: ``widths``
    (input name -> last width, or channels of the main input), ``forced`` (optional inputs
    the forward turned out to read), ``extra_tokens`` (text tokens a position table wants),
    ``bool_masks``, ``dict_keys`` (entries of dict inputs)."""

    channels: int
    patch: tuple[int, int, int]
    down: int
    text: int
    pooled: int
    axes: int
    video: bool
    text_len: int
    layout: str = "image"
    batch: int = BATCH
    widths: dict[str, int] = field(default_factory=dict)
    forced: set[str] = field(default_factory=set)
    extra_tokens: int = 0
    frames_override: int | None = None
    grid: int = GRID
    bool_masks: bool = False
    ranks: dict[str, int] = field(default_factory=dict)
    lengths: dict[str, int] = field(default_factory=dict)
    ints: set[str] = field(default_factory=set)
    dict_keys: dict[str, tuple[str, ...]] = field(default_factory=dict)
    docs: dict[str, tuple[str, ...]] = field(default_factory=dict)
    dropped: set[str] = field(default_factory=set)
    stacks: dict[str, int] = field(default_factory=dict)
    batched_lists: bool = False
    text_per_frame: bool = False
    sides: dict[str, tuple[int, int]] = field(default_factory=dict)
    searched: dict[str, tuple[int, int]] = field(default_factory=dict)
    caller_made: set[str] = field(default_factory=set)
    doc_inputs: set[str] = field(default_factory=set)
    bound: dict[str, int] = field(default_factory=dict)

    @property
    def latent_frames(self) -> int:
        return self.frames_override or FRAMES

    @property
    def frames(self) -> int:
        return self.latent_frames * self.patch[0]

    @property
    def side(self) -> int:
        return min(max(MAX_SIDE, self.grid * self.patch[1]), self.grid * self.patch[1] * self.down)

    main_doc: tuple[str, ...] = ()
    main_ids: bool = False
    config: dict = field(default_factory=dict)

    @property
    def video_layout(self) -> bool:
        return self.layout.startswith("video") or (self.layout == "doc" and self.video)


def sizes(kwargs: dict) -> Sizes:
    pt, ph, pw = _pair(kwargs.get("patch_size"))
    if is_int(kwargs.get("patch_size_t")):
        pt = kwargs["patch_size_t"]
    blocks = next((len(v) for k, v in kwargs.items() if re.search(r"down_block_types$", k)
                   and isinstance(v, (list, tuple))), None)
    if blocks is None:
        blocks = next((len(v) for k, v in kwargs.items() if k.endswith("block_out_channels")
                       and is_int_list(v)), 1)
    video = is_int_list(kwargs.get("patch_size")) and len(kwargs["patch_size"]) == 3 or \
        any(re.search(r"(frames|patch_size_t|temporal)", k) for k in kwargs)
    axes = next((len(v) for k, v in kwargs.items() if re.search(r"axes_dims?(_rope)?$", k)
                 and is_int_list(v)), 3)
    return Sizes(channels=_first_int(kwargs, IN_KEYS, 4), patch=(pt, ph, pw),
                 down=2 ** max(0, blocks - 1), text=_first_int(kwargs, TEXT_KEYS, 32),
                 pooled=_first_int(kwargs, POOLED_KEYS, 32), axes=axes, video=bool(video),
                 text_len=_first_int(kwargs, TEXT_LEN_KEYS, TOKENS), config=kwargs)


def layouts(s: Sizes, main_doc: tuple[str, ...] | None = None, main: str = "") -> list[str]:
    video = [x for x in LAYOUTS if x.startswith("video")]
    rest = [x for x in LAYOUTS if not x.startswith("video")]
    order = video + rest if s.video else rest[:2] + video + rest[2:]
    first = doc_layouts(main_doc, s.video) if main_doc else []
    if main_doc and _IDS_RE.search(main):  # token ids in their documented shape
        first = ["doc"]
    if main_doc and not first:
        first = ["doc"]
    return first + [x for x in order if x not in first]


def doc_layouts(dims: tuple[str, ...], video: bool) -> list[str]:
    """The layouts the main input's documented shape names (its rank and where its channels
    sit), most likely first."""
    axis = channel_axis(dims)
    if len(dims) == 5:
        return {1: ["video"], 2: ["video_fc"], 4: ["video_cl"]}.get(axis, [])
    if len(dims) == 4:
        return ["image"] if axis in (1, None) else []
    if len(dims) == 3:
        if axis == 1:
            return ["sequence"]
        if meaning(dims[1]) == "tokens" or "token" in dims[1]:
            return ["video_tokens", "tokens"] if video else ["tokens", "video_tokens"]
        return ["sequence_t", "tokens"]
    if len(dims) == 2:
        return ["vector"]
    return []


def _tokens(s: Sizes) -> int:
    return s.grid * s.grid * (s.latent_frames if s.layout == "video_tokens" or (
        s.layout == "doc" and s.video) else 1)


def main_input(s: Sizes, g: torch.Generator, width: int | None = None) -> torch.Tensor:
    c = width or s.channels
    b, side, f = s.batch, s.side, s.frames
    shape = {"image": (b, c, side, side), "video": (b, c, f, side, side),
             "video_fc": (b, f, c, side, side), "video_cl": (b, f, side, side, c),
             "tokens": (b, _tokens(s), c),
             "video_tokens": (b, _tokens(s), c), "sequence": (b, c, SEQUENCE * s.patch[1] * s.down),
             "sequence_t": (b, SEQUENCE * s.patch[1] * s.down, c), "vector": (b, c),
             "doc": None}[s.layout]
    if shape is None:  # the documented shape, its names read from the sizes and the config
        env = {"batch": b, "channels": c, "frames": f, "height": side, "width": side,
               "patch_height": s.grid, "patch_width": s.grid, "tokens": _tokens(s),
               "text": s.text_len, "patch_t": s.patch[0], "patch_h": s.patch[1],
               "patch_w": s.patch[2]}
        dims = [evaluate(d, env, s.config) for d in s.main_doc]
        if any(d is None for d in dims):
            raise ValueError(f"the documented shape {s.main_doc} cannot be read")
        shape = tuple(dims)
        if s.main_ids:  # token ids below the vocabulary
            return torch.randint(0, _vocab(s.config), shape, generator=g)
    return torch.randn(shape, generator=g)


def _hinted(name: str, kwargs: dict, pattern: str, default: int) -> int:
    """The int of a config key that the input's name points to (a t5, image, audio, llama
    or second text encoder), else default."""
    for hint, key_re in (("t5", r"t5"), ("_2", r"_2"), ("image", r"image|img"),
                         ("audio", r"audio"), ("llama", r"llama|llm"), ("clip", r"clip")):
        if hint in name:
            key = next((k for k in kwargs if re.search(key_re, k) and re.search(pattern, k)
                        and (is_int(kwargs[k]) or is_int_list(kwargs[k]))), None)
            if key is not None:
                return kwargs[key] if is_int(kwargs[key]) else kwargs[key][0]
    return default


def text_tokens(name: str, kwargs: dict, s: Sizes) -> int:
    return _hinted(name, kwargs, r"_len", s.text_len) + s.extra_tokens


def _ids(n_rows: int, s: Sizes, grid: bool) -> torch.Tensor:
    """(n, axes) float positions: (frame, row, column, 0...) for a latent grid, zeros for
    text."""
    ids = torch.zeros(n_rows, s.axes)
    if grid and s.axes >= 3:
        frames = n_rows // (s.grid * s.grid)
        f, r, c = torch.meshgrid(torch.arange(frames), torch.arange(s.grid), torch.arange(s.grid),
                                 indexing="ij")
        ids[:, 0], ids[:, 1], ids[:, 2] = f.flatten(), r.flatten(), c.flatten()
    return ids


MISSING = object()


def _like_main(name: str, x: Any, s: Sizes, g: torch.Generator) -> torch.Tensor | None:
    """A tensor of the main input's shape (its channels as ``widths`` asks)."""
    if not isinstance(x, torch.Tensor):
        return None
    shape = list(x.shape)
    if name in s.widths and len(shape) >= 3:
        shape[2 if s.layout == "video_fc" else -1 if s.layout in (
            "tokens", "video_tokens", "sequence_t", "video_cl") else 1] = s.widths[name]
    if name in s.sides and len(shape) >= 4:
        shape[-2:] = s.sides[name]
    return torch.randn(shape, generator=g)


def value_for(name: str, param: inspect.Parameter, kwargs: dict, s: Sizes, x: Any,
              g: torch.Generator) -> Any:
    """The value INPUT_RULES give a forward parameter, or MISSING."""
    need = param.default is inspect.Parameter.empty or name in s.forced
    b = s.batch
    annotation = str(param.annotation)
    if name == "return_dict":
        return False
    if name in s.dropped:
        return MISSING
    if name in s.lengths:
        return torch.ones(s.lengths[name])
    if name in s.ints:
        return torch.zeros(b, dtype=torch.int64)
    if name in s.dict_keys:
        entries = {key: value_for(key, inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY),
                                  kwargs, s, x, g) for key in s.dict_keys[name]}
        return {key: value for key, value in entries.items() if value is not MISSING}
    if TIME_RE.match(name) and (need or name in ("timestep", "timesteps", "t")):
        return torch.tensor(TIMESTEPS[:b] if b <= len(TIMESTEPS) else [0.5] * b)
    if MASK_RE.search(name):
        if not need:
            return MISSING
        dtype = torch.bool if s.bool_masks or "bool" in annotation.lower() else torch.int64
        if any(w in name for w in ("encoder", "text", "cap", "prompt")) or name == "mask":
            return torch.ones(b, text_tokens(name, kwargs, s), dtype=dtype)
        if isinstance(x, torch.Tensor) and x.dim() >= 4:  # a mask over the main input: one
            shape = list(x.shape)                          # channel of its shape
            shape[2 if s.layout == "video_fc" else 1] = 1
            return torch.ones(shape, dtype=dtype)
        return torch.ones(b, _tokens(s), dtype=dtype)
    if POOLED_NAME_RE.search(name) and (need or name.startswith("pooled")):
        return torch.randn(b, s.widths.get(name, s.pooled), generator=g)
    if TEXT_NAME_RE.match(name) and (need or name == "encoder_hidden_states"
                                     or name.endswith("_t5") or "llama" in name):
        width = s.widths.get(name) or _hinted(name, kwargs, r"(dim|channels|size)", s.text)
        text = torch.randn(b, text_tokens(name, kwargs, s), width, generator=g)
        return text.repeat_interleave(s.latent_frames, 0) if s.text_per_frame else text
    if name in ("img_ids", "txt_ids"):
        return _ids(_tokens(s), s, True) if name == "img_ids" else \
            _ids(text_tokens(name, kwargs, s), s, False)
    if name == "position_ids" and need:  # text rows, then the latent grid's
        return torch.cat([_ids(text_tokens(name, kwargs, s), s, False),
                          _ids(_tokens(s), s, True)])
    if name.endswith("rope_pos"):
        if "tuple" in annotation or "list" in annotation:
            return (torch.arange(s.latent_frames if s.video_layout else 1), torch.arange(s.grid),
                    torch.arange(s.grid))
        return torch.arange(text_tokens(name, kwargs, s))
    if re.search(r"grid_sizes$", name) and need:  # the patch grid per sample: (t, h, w)
        return torch.tensor([[s.latent_frames if s.video_layout else 1, s.grid, s.grid]] * b)
    if re.fullmatch(r"img_shapes|shape_list|\w*_shapes", name):  # per sample, (t, h, w) each
        return [[(s.latent_frames if s.video_layout else 1, s.grid, s.grid)]] * b
    if name in ("num_frames", "height", "width") and s.layout == "video_tokens":
        return s.latent_frames if name == "num_frames" else s.grid
    if name in ("original_size", "target_size", "crop_coords", "resolution"):
        return torch.tensor([[64.0, 64.0]] * b) if name != "crop_coords" else torch.zeros(b, 2)
    if name == "aspect_ratio":
        return torch.ones(b, 1)
    if re.search(r"(^micro_cond\w*|\w_conds)$", name) and need:  # micro-conditioning values
        n = s.widths.get(name, 5)                    # (h, w, crop top, crop left, score)
        return torch.tensor([[64.0, 64.0, 0.0, 0.0, 6.0][i % 5] for i in range(n)]).repeat(b, 1)
    if re.search(r"(meta_size$|^time_ids$)", name) and need:  # SDXL-style size conditioning:
        return torch.tensor([[64.0, 64.0, 64.0, 64.0, 0.0, 0.0]] * b)  # h, w, target, crop
    if name == "added_time_ids":
        n = (kwargs.get("projection_class_embeddings_input_dim") or 3) // \
            (kwargs.get("addition_time_embed_dim") or 1)
        return torch.tensor([[6.0, 127.0, 0.02][i % 3] for i in range(n)]).repeat(b, 1)
    if name == "class_labels" and any(re.search(r"num_class|num_embeds_ada_norm", k) and
                                      is_int(v) for k, v in kwargs.items()):
        return torch.arange(b) % 2
    if name == "guidance" and (need or any("guidance" in k and v is True
                                           for k, v in kwargs.items())):
        return torch.full((b,), 3.5)
    if name == "fps" and need:
        return torch.full((b,), 24.0)
    if not need:
        return MISSING
    if param.annotation is int and re.search(r"(seq_len|sequence_length|num_tokens)$", name):
        return s.grid * s.grid * (s.latent_frames if s.video_layout else 1)  # tokens per sample
    if re.search(r"(_lens|_lengths|_len)$", name):
        return torch.full((b,), text_tokens(name, kwargs, s), dtype=torch.int64)
    if re.search(r"partition", name):
        return [s.latent_frames if s.video_layout else 1]
    if re.search(r"(list|List|tuple|Tuple)\[int", annotation) and \
            not re.match(r"(typing\.)?(dict|Dict)\b", annotation):
        return [0]  # indices into a table: the first
    cond = next((k for k in kwargs if k.endswith("conditioning_channels") and is_int(kwargs[k])),
                None)
    if name == "controlnet_cond" and cond and s.layout == "image" and name not in s.widths:
        prefix = cond[: -len("conditioning_channels")]  # ctrl_conditioning_channels and its
        up = 2 ** max(0, len(kwargs.get(prefix + "conditioning_embedding_out_channels")  # list
                             or [0]) - 1)
        return torch.randn(b, kwargs[cond], s.side * up, s.side * up, generator=g)
    if re.search(r"(^|_)(indices|index)(_|$)", name):  # frame indices, shared by the batch
        return torch.arange(s.latent_frames if s.video_layout else 1)
    if _IDS_RE.search(name) and len(s.docs.get(name, ())) < 3:
        return torch.randint(0, _vocab(kwargs), (b, text_tokens(name, kwargs, s)), generator=g)
    if name == "audio_hidden_states":
        width = s.widths.get(name) or next(
            (v for k, v in kwargs.items() if re.search(r"audio_in_channels$", k) and is_int(v)),
            s.channels)
        return torch.randn(b, SEQUENCE, width, generator=g)
    if "dict" in annotation.lower():
        return {}
    if re.fullmatch(r"\w+_and_\w+", name) and s.docs.get(name):  # a list of (encoding, mask)
        width = next((kwargs[k] for k in ("d_model", "hidden_size", "dim", "model_dim")  # pairs
                      if is_int(kwargs.get(k))), s.text)           # of the model's own encoder
        pair = tuple(torch.ones(b, TOKENS) if MASK_RE.search(d) or "mask" in d else
                     torch.randn(b, TOKENS, width, generator=g) for d in s.docs[name])
        return [pair]
    if name in s.forced or re.search(r"(latents|control|cond|_hidden_states|pixel_values)", name):
        like = _like_main(name, x, s, g)  # another input of the main input's kind
        return like if like is not None else MISSING
    return MISSING


_INT_NAME_RE = re.compile(r"(ids?|indices|indexes|index|segment\w*|tags?|types?|indicator|"
                          r"labels?)$")
_BOOL_NAME_RE = re.compile(r"(drop|_bool)$")


def _doc_env(name: str, kwargs: dict, s: Sizes) -> dict[str, int]:
    """The value of each meaning of docshapes.SYMBOLS for the input ``name``: its latent
    tokens are text tokens for a text input."""
    text = text_tokens(name, kwargs, s)
    textual = bool(TEXT_NAME_RE.match(name) or (MASK_RE.search(name) and any(
        w in name for w in ("encoder", "text", "cap", "prompt"))))
    return {"batch": s.batch, "channels": s.channels, "frames": s.frames, "height": s.side,
            "width": s.side, "patch_height": s.grid, "patch_width": s.grid,
            "tokens": text if textual else _tokens(s), "text": text, "patch_t": s.patch[0],
            "patch_h": s.patch[1], "patch_w": s.patch[2]}


def doc_shape(name: str, kwargs: dict, s: Sizes, like: Any = None) -> tuple[int, ...] | None:
    """The shape the forward's docstring gives ``name``, its names evaluated (docshapes); a
    dimension it cannot read is taken from ``like`` (same rank: the same axis; else its last
    axis for the last), else None."""
    dims = s.docs.get(name)
    if not dims:
        return None
    env = _doc_env(name, kwargs, s)
    out = []
    for i, dim in enumerate(dims):
        v = evaluate(dim, env, kwargs, s.bound)
        if v is None and i == 0 and dim.strip() == "N":  # (N, C, H, W): N counts samples
            v = s.batch
        if v is None and isinstance(like, torch.Tensor) and like.dim() >= 1:
            if like.dim() == len(dims):
                v = like.shape[i]
            elif i == len(dims) - 1:
                v = like.shape[-1]
        if v is None:
            return None
        out.append(int(v))
    return tuple(out)


def _positions(shape: tuple[int, ...], s: Sizes) -> torch.Tensor:
    """Position ids of a documented shape (..., rows, axes): the latent grid's rows (frame,
    row, column), after zero rows of text when there are more rows than grid tokens."""
    rows, axes = shape[-2], shape[-1]
    grid = s.grid * s.grid * (s.latent_frames if s.video_layout else 1)
    sub = Sizes(**{**s.__dict__, "axes": axes})
    ids = _ids(min(rows, grid), sub, True) if rows >= grid or rows % (s.grid * s.grid) == 0 \
        else _ids(rows, sub, False)
    if rows > grid:
        ids = torch.cat([torch.zeros(rows - grid, axes), ids])
    return ids.expand(shape).clone()


def doc_value(name: str, value: Any, kwargs: dict, s: Sizes, g: torch.Generator,
              constants: tuple[int, ...] = ()) -> Any:
    """``value`` in the shape the docstring gives ``name`` (unchanged when it has it or no
    shape can be read): timesteps broadcast along the new axes, position ids over the grid,
    integer inputs keep their fill (ones for masks; tags cycle through the module constants
    the docstring names), others are drawn again."""
    shape = doc_shape(name, kwargs, s, value)
    if shape is None or (isinstance(value, torch.Tensor) and tuple(value.shape) == shape) or \
            (value is not MISSING and not isinstance(value, torch.Tensor)):
        return value
    if isinstance(value, torch.Tensor) and TIME_RE.match(name) and value.dim() == 1 and \
            shape[0] == value.shape[0]:
        return value.reshape(-1, *[1] * (len(shape) - 1)).expand(shape).clone()
    if re.search(r"position|_ids$|coords", name) and value is not MISSING and \
            not _INT_NAME_RE.search(name.replace("position_ids", "")) and len(shape) >= 2 and \
            shape[-1] <= 4:
        return _positions(shape, s)
    if value is MISSING or not value.is_floating_point():
        if _BOOL_NAME_RE.search(name):
            return torch.zeros(shape, dtype=torch.bool)
        if MASK_RE.search(name) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool):
            return torch.ones(shape, dtype=value.dtype if isinstance(value, torch.Tensor)
                              else torch.int64)
        if constants:  # tags: the values the docstring names, in turn along the last axis
            row = torch.tensor([constants[i % len(constants)] for i in range(shape[-1])])
            return row.expand(shape).clone()
        if value is MISSING and not _INT_NAME_RE.search(name):
            return torch.randn(shape, generator=g)
        return torch.zeros(shape, dtype=torch.int64)
    return torch.randn(shape, generator=g)


def typed_value(model: torch.nn.Module, name: str, param: inspect.Parameter, kwargs: dict,
                s: Sizes) -> Any:
    """A required parameter no other rule names, by its annotation: an int sequence length
    (``seq_len``) -> the latent tokens of one sample; a str -> the first quoted option its
    docstring entry names (``"extract"``); a diffusers class (a cache container) -> an
    instance made with the config values its constructor's parameters name; else MISSING."""
    annotation = param.annotation
    if annotation is int and re.search(r"(seq_len|sequence_length|num_tokens)$", name):
        return s.grid * s.grid * (s.latent_frames if s.video_layout else 1)
    if annotation is str:
        options = re.findall(r"[`]*\"(\w+)\"", doc_entry(model, name))
        return options[0] if options else MISSING
    if inspect.isclass(annotation) and annotation.__module__.startswith("diffusers"):
        try:
            sig = inspect.signature(annotation.__init__)
            args = {p: kwargs[p] for p in sig.parameters if p != "self" and p in kwargs}
            if all(p in args or q.default is not inspect.Parameter.empty or
                   q.kind in (q.VAR_POSITIONAL, q.VAR_KEYWORD)
                   for p, q in sig.parameters.items() if p != "self"):
                return annotation(**args)
        except Exception:  # noqa: BLE001 - a class the rule cannot make
            return MISSING
    return MISSING


def sibling_value(name: str, built: dict) -> Any:
    """A required input no rule or docstring shapes, named like one already built (the
    longest shared prefix, 4 characters at least: prior_token_drop, prior_token_id): a
    tensor of its shape, bool zeros for a drop flag, ones for a mask, zeros for ids, else
    random; MISSING when there is none."""
    def shared(other: str) -> int:
        n = 0
        while n < min(len(name), len(other)) and name[n] == other[n]:
            n += 1
        return n
    others = [(shared(n), n) for n, v in built.items() if isinstance(v, torch.Tensor)]
    n, other = max(others, default=(0, ""))
    if n < 4:
        return MISSING
    shape = built[other].shape
    if _BOOL_NAME_RE.search(name):
        return torch.zeros(shape, dtype=torch.bool)
    if MASK_RE.search(name):
        return torch.ones(shape, dtype=torch.int64)
    if _INT_NAME_RE.search(name):
        return torch.zeros(shape, dtype=torch.int64)
    return torch.randn(shape)


def stacked_inputs(model: torch.nn.Module, kwargs: dict) -> dict[str, int]:
    """Inputs the forward indexes by the entries of a config list (``x[k] for k in
    self.config.llama_layers``: one tensor per layer of a text encoder, stacked in front):
    name -> the length of the stack (the largest entry + 1)."""
    try:
        source = inspect.getsource(type(model).forward)
    except (OSError, TypeError):
        return {}
    out = {}
    for name, var, key in re.findall(r"(\w+)\[(\w+)\]\s+for\s+(?:\w+,\s*)?\2\s+in\s+"
                                     r"self\.config\.(\w+)", source):
        if is_int_list(kwargs.get(key)):
            out[name] = max(kwargs[key]) + 1
    return out


def with_rank(value: torch.Tensor, rank: int, s: Sizes) -> torch.Tensor:
    """value with ``rank`` axes: a (B,) vector repeated per frame, else axes of one inserted
    before the last; fewer axes: the first entry of the axes after the batch (pooled)."""
    if value.dim() == 1 and rank == 2:
        return value[:, None].repeat(1, s.latent_frames if s.video_layout else 1)
    while value.dim() > rank:  # pooled: the first token of each sample
        value = value[:, 0]
    while value.dim() < rank:
        value = value.unsqueeze(-2)
    return value


def as_list(value: Any) -> Any:
    """A batched tensor as the list of its samples (for a parameter annotated as a list)."""
    if isinstance(value, torch.Tensor) and value.dim() >= 2:
        return list(value.unbind(0))
    return value


def list_value(name: str, value: torch.Tensor, kwargs: dict, s: Sizes) -> list:
    """The value of a parameter annotated as a list: one batched tensor per layer for a
    ``*_layers`` name (the config's layer counts added up), else the samples of the batch, or
    (``batched_lists``, after an error) a list of one batched tensor."""
    if name.endswith("_layers"):
        n = sum(v for k, v in kwargs.items() if LAYERS_RE.search(k) and is_int(v)) or 1
        return [value.clone() for _ in range(n)]
    return [value] if s.batched_lists else as_list(value)


def forward_parameters(model: torch.nn.Module) -> list[tuple[str, inspect.Parameter]]:
    return [(n, p) for n, p in inspect.signature(model.forward).parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def synthesise(model: torch.nn.Module, kwargs: dict, s: Sizes, seed: int) -> tuple[dict, str]:
    """(forward kwargs, '' or the first required parameter no rule names) for one layout."""
    g = torch.Generator().manual_seed(seed)
    params = forward_parameters(model)
    if not params:
        return {}, "the forward takes no named parameters"
    main, main_param = params[0]
    if re.fullmatch(r"\w+_and_\w+", main) and s.docs.get(main):  # a list of pairs first
        pairs = value_for(main, inspect.Parameter(main, inspect.Parameter.KEYWORD_ONLY), kwargs,
                          s, None, g)
        x = pairs[0][0]
        s.bound = {}
        out = {main: pairs}
        return _rest(model, params, kwargs, s, x, g, out)
    try:
        x = main_input(s, g, s.widths.get(main))
    except ValueError as e:
        return {}, str(e)
    s.bound = bind(s.docs[main], tuple(x.shape), kwargs) if main in s.docs else {}
    out: dict[str, Any] = {main: as_list(x) if "list" in str(main_param.annotation) else x}
    return _rest(model, params, kwargs, s, x, g, out)


def _rest(model: torch.nn.Module, params: list, kwargs: dict, s: Sizes, x: Any,
          g: torch.Generator, out: dict) -> tuple[dict, str]:
    """The inputs after the main one (synthesise)."""
    for name, param in params[1:]:
        value = value_for(name, param, kwargs, s, x, g)
        required = param.default is inspect.Parameter.empty
        counted = re.fullmatch(r"(\w+?)_num_(frames|tokens)", name)
        if counted and (required or name in s.forced):  # audio_num_frames: the length of the
            value = next((v.shape[1] for n, v in out.items() if n.startswith(counted.group(1))
                          and isinstance(v, torch.Tensor) and v.dim() >= 2), value)  # audio
        if name in s.doc_inputs or (value is MISSING and required):
            value = doc_value(name, value, kwargs, s, g, doc_constants(model, name))
        if value is MISSING and required:
            value = sibling_value(name, out)
        if value is MISSING and required and re.search(r"rotary|rope|freqs", name):
            made = caller_value(model, name, s)  # a table the pipeline computes
            value = MISSING if made is None else made
            if made is not None:
                s.caller_made.add(name)
        if value is MISSING and required:
            value = typed_value(model, name, param, kwargs, s)
        if name in s.stacks and isinstance(value, torch.Tensor):
            value = value.expand(s.stacks[name], *value.shape).clone()
        if value is MISSING:
            if required:
                return out, f"no input rule for the required argument {name!r}"
            continue
        if name in s.ranks and isinstance(value, torch.Tensor):
            value = with_rank(value, s.ranks[name], s)
        if "list" in str(param.annotation).lower() and isinstance(value, torch.Tensor):
            value = list_value(name, value, kwargs, s)
        out[name] = value
    return out, ""
