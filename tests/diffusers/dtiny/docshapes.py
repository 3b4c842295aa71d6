"""Shapes a forward's docstring gives its parameters, read as expressions over named sizes.

Owns ``doc_shapes`` (parameter -> the dimensions of the first shape its docstring entry
gives, as expression strings: ``(batch_size, 1 + len(injection_layer_ids), text_len,
cap_feat_dim)``, ``(B, F, C, H, W)``, ``(batch_size, num_video_tokens)``), ``evaluate``
(each dimension's value in an environment of named sizes, None where a name is unknown)
and ``SYMBOLS`` (what a dimension's name means: the batch, channels, frames, height,
width, latent tokens, text tokens).  diffusers documents shapes in several styles (Google
``name (`type` of shape `(...)`)``, ``name: ``(...)`` text``, a shape on the lines under
the name); a parameter's entry runs from its name to the next parameter's, and its shape
is the first parenthesised tuple after the word "shape", else the first tuple in
backquotes.  Nothing is keyed on a model: only the words of the docstring and the
config's key names.
"""
from __future__ import annotations

import functools
import inspect
import math
import re
from typing import Any, Callable

# what the names of dimensions mean (a name is matched whole, lower case, spaces as _)
SYMBOLS = {
    "batch": ("b", "batch", "batch_size", "bs", "bsz", "n_batch"),
    "channels": ("c", "channels", "channel", "num_channels", "in_channels", "latent_channels",
                 "input_channels", "in_dim"),
    "frames": ("f", "t", "frames", "num_frames", "video_length", "latent_frames",
               "num_latent_frames", "frame"),
    "height": ("h", "height", "latent_height"),
    "width": ("w", "width", "latent_width"),
    "patch_height": ("patch_height", "post_patch_height", "grid_h"),
    "patch_width": ("patch_width", "post_patch_width", "grid_w"),
    "tokens": ("seq_len", "sequence_length", "seq_length", "num_tokens", "tokens", "n_tokens",
               "num_video_tokens", "image_sequence_length", "num_image_tokens", "l_img",
               "image_seq_len", "video_seq_len", "num_patches", "max_patches",
               "max_num_patches"),
    "patch_t": ("pt", "patch_t", "p_t"),
    "patch_h": ("ph", "patch_h", "p_h"),
    "patch_w": ("pw", "patch_w", "p_w"),
    "text": ("text_seq_len", "encoder_seq_len", "num_text_tokens", "text_sequence_length",
             "text_len", "key_tokens", "sequence_len", "text_length", "prompt_len", "l",
             "s", "encoder_sequence_length", "max_sequence_length"),
}
_MEANING = {word: meaning for meaning, words in SYMBOLS.items() for word in words}

_SHAPE_AFTER = re.compile(r"shape[^(`\n]{0,20}?[`(]*\(((?:[^()]|\([^()]*\))*)\)")
_QUOTED = re.compile(r"``?\(((?:[^()`]|\([^()`]*\))*)\)``?")
_BRACKETED = re.compile(r"^\s*\w+\s*:\s*\[([\w\s,*+]+)\]")  # name: [B, N, C] - text


def _blocks(doc: str, params: list[str]) -> dict[str, str]:
    """The text of each parameter's docstring entry (from its name to the next one's)."""
    starts = []
    for m in re.finditer(r"^\s*(\w+)\s*(?:\(|:)", doc, re.MULTILINE):
        if m.group(1) in params:
            starts.append((m.start(), m.group(1)))
    end = re.search(r"^\s*(Returns?|Examples?|Yields?|Raises?)\s*:", doc, re.MULTILINE)
    out = {}
    for i, (start, name) in enumerate(starts):
        stop = starts[i + 1][0] if i + 1 < len(starts) else (end.start() if end and
                                                            end.start() > start else len(doc))
        out.setdefault(name, doc[start:stop])
    return out


def _split(inner: str) -> tuple[str, ...]:
    dims, depth, cur = [], 0, ""
    for ch in inner:
        if ch == "," and depth == 0:
            dims.append(cur.strip())
            cur = ""
            continue
        depth += ch == "("
        depth -= ch == ")"
        cur += ch
    dims.append(cur.strip())
    return tuple(d for d in dims if d)


@functools.lru_cache(maxsize=None)
def _doc_shapes(fn: Callable) -> dict[str, tuple[str, ...]]:
    doc = inspect.getdoc(fn) or ""
    params = [n for n in inspect.signature(fn).parameters if n != "self"]
    out = {}
    for name, text in _blocks(doc, params).items():
        m = _SHAPE_AFTER.search(text) or _QUOTED.search(text) or _BRACKETED.search(text)
        if m:
            dims = _split(m.group(1))
            if dims and all(len(d) < 60 for d in dims):
                out[name] = dims
    return out


def doc_shapes(model_or_fn: Any) -> dict[str, tuple[str, ...]]:
    """parameter -> the dimensions (expression strings) of the shape the forward's docstring
    gives it; parameters without one are absent."""
    fn = getattr(model_or_fn, "forward", model_or_fn)
    fn = getattr(fn, "__func__", fn)
    try:
        return _doc_shapes(fn)
    except (TypeError, ValueError):
        return {}


def doc_entry(model_or_fn: Any, name: str) -> str:
    """The text of a parameter's docstring entry ('' when none)."""
    fn = getattr(model_or_fn, "forward", model_or_fn)
    fn = inspect.unwrap(getattr(fn, "__func__", fn))
    try:
        params = [n for n in inspect.signature(fn).parameters if n != "self"]
    except (TypeError, ValueError):
        return ""
    return _blocks(inspect.getdoc(fn) or "", params).get(name, "")


def doc_constants(model_or_fn: Any, name: str) -> tuple[int, ...]:
    """The int constants of the forward's module that the parameter's docstring entry names
    (``LLM_TOKEN_INDICATOR`` (text) or ``OUTPUT_IMAGE_INDICATOR`` (image)): the values a
    tag input takes."""
    fn = getattr(model_or_fn, "forward", model_or_fn)
    fn = getattr(fn, "__func__", fn)
    fn = inspect.unwrap(fn)
    try:
        params = [n for n in inspect.signature(fn).parameters if n != "self"]
    except (TypeError, ValueError):
        return ()
    text = _blocks(inspect.getdoc(fn) or "", params).get(name, "")
    module = inspect.getmodule(fn)
    words = dict.fromkeys(re.findall(r"\b[A-Z][A-Z0-9_]{3,}\b", text))
    values = [getattr(module, w) for w in words if isinstance(getattr(module, w, None), int)
              and not isinstance(getattr(module, w), bool)]
    return tuple(values)


def meaning(dim: str) -> str | None:
    """What a dimension's name means (SYMBOLS), or None."""
    return _MEANING.get(_name(dim))


def _name(dim: str) -> str:
    return re.sub(r"\s+", "_", dim.strip().strip("`").lower())


_SAFE = {"len": len, "prod": math.prod, "min": min, "max": max, "int": int}


def evaluate(dim: str, env: dict[str, int], config: dict[str, Any],
             bound: dict[str, int] | None = None) -> int | None:
    """The value of one dimension: a name bound by the main input's shape (``bound``), a
    config key, a name SYMBOLS knows (``env`` holds the value of each meaning), or an
    expression over them and integers (``2C + 4``, ``1 + len(injection_layer_ids)``,
    ``in_channels * prod(patch_size)``); None when a name is unknown."""
    value, unknown = _eval(dim, env, config, bound or {})
    return value if not unknown else None


def _eval(dim: str, env: dict[str, int], config: dict[str, Any], bound: dict[str, int],
          trial: tuple[str, int] | None = None) -> tuple[int | None, list[str]]:
    """(value, the names that are unknown)."""
    key = _name(dim)
    if key in bound:
        return bound[key], []
    if trial is not None and key == trial[0]:
        return trial[1], []
    if meaning(dim) is not None and key not in config:
        v = env.get(meaning(dim))
        return (v, []) if v is not None else (None, [key])
    text = re.sub(r"self\.config\.|config\.", "", dim.strip().strip("`"))
    text = re.sub(r"(\d)\s*([A-Za-z_(])", r"\1*\2", text)  # 2C -> 2*C
    names, unknown = {}, []
    for word in set(re.findall(r"[A-Za-z_]\w*'?", text)):
        if word in _SAFE:
            continue
        low = word.lower()
        if trial is not None and low == trial[0]:
            names[word] = trial[1]
        elif low in bound:
            names[word] = bound[low]
        elif word in config and config[word] is not None and not isinstance(config[word], str):
            names[word] = config[word]
        elif meaning(word) is not None and env.get(meaning(word)) is not None:
            names[word] = env[meaning(word)]
        else:
            unknown.append(low)
    if unknown:
        return None, unknown
    try:
        value = eval(text, {"__builtins__": {}}, {**_SAFE, **names})  # noqa: S307 - docstring
    except Exception:  # noqa: BLE001 - not an expression we can read
        return None, ["?"]
    ok = isinstance(value, int) and not isinstance(value, bool) and value > 0
    return (value, []) if ok else (None, ["?"])


def bind(dims: tuple[str, ...], shape: tuple[int, ...], config: dict[str, Any]) -> dict[str, int]:
    """The names of a shape's dimensions bound to the sizes of a tensor of that shape: a
    plain name takes its size, an expression of one unknown name (``T + 1``, ``2C + 4``)
    the value that solves it."""
    bound: dict[str, int] = {}
    if len(dims) != len(shape):
        return bound
    for dim, size in zip(dims, shape):
        value, unknown = _eval(dim, {}, config, bound)
        if value is not None or not unknown:
            continue
        if len(set(unknown)) != 1:
            continue
        name = unknown[0]
        if re.fullmatch(r"[a-z_][\w ]*", _name(dim)) and _name(dim) == name:
            bound[name] = size
            continue
        for trial in range(1, 4097):
            if _eval(dim, {}, config, bound, (name, trial))[0] == size:
                bound[name] = trial
                break
    return bound


def channel_axis(dims: tuple[str, ...]) -> int | None:
    """The axis of a shape that holds channels (a channels name, a config width such as
    in_visual_dim or io_channels, an expression of one), or None."""
    for i, dim in enumerate(dims):
        if i == 0:
            continue
        if meaning(dim) == "channels" or \
                re.search(r"(channel|_dim\b|^dim$|(^|[\W\d])C(\W|$))", dim):
            return i
    return None
