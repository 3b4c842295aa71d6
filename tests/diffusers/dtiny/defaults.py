"""A model class's default config, and the repairs for defaults that cannot build.

Owns ``default_kwargs`` (the keyword arguments of ``__init__`` with their defaults: the
config ``register_to_config`` records), ``FILL_RULES`` (the repairs in words),
``repair_for`` (which repair an error calls for), ``apply_repairs`` and ``instantiate``.

Some defaults leave a value None that ``__init__`` computes with (``in_channels``,
``patch_size``, a list of layer indices, a rope-scaling dict), and a few arguments have
no default.  A repair is applied only after an attempt failed with the error that
names the argument, so a config that builds is never changed by one: the argument is
the one the error message quotes, else the ones the failing statements name (read from
the traceback, innermost diffusers frame first), else the ones a "missing required
argument" error lists.  Its value comes from its name (FILL_RULES), never from the
model's name.
"""
from __future__ import annotations

import inspect
import linecache
import re
import traceback
from typing import Any

import torch

from .keys import HEAD_RE, is_int

FILL_RULES = [
    "which argument: one quoted in the error message (`in_channels` must be provided), else "
    "those the failing statements name (innermost diffusers frame first; e.g. "
    "`rope_scaling[\"short_factor\"]`, `addition_time_embed_dim * num_control_type`), else "
    "those a 'missing required positional argument' error lists; only arguments that are None "
    "or have no default",
    "values by name: kv heads -> the head count; *in_channels -> 4, *out_channels -> the "
    "in_channels value or 4; patch_size_t -> 1, patch_size -> 2; lists of layer indices "
    "(annotated list/tuple: *_layers, *_places, *_ids, ...) -> [0]; head counts -> 2; "
    "widths and sizes (*dim, *channels, *size, *len) -> 32; a dict the failing statement "
    "subscripts (rope_scaling['short_factor']) -> a dict of the keys subscripted so far, "
    "*factor keys -> [1.0] (a factor of one, broadcast over the frequencies); a width annotated "
    "as a list, or subscripted by index -> [32] * (largest index + 1); in_channels -> "
    "norm_num_groups when the config has one (a GroupNorm over the input)",
]

MAX_REPAIRS = 8


def default_kwargs(cls: type) -> dict[str, Any]:
    """The keyword arguments of cls.__init__ with defaults (required ones absent)."""
    out = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        if name == "self" or p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            continue
        if p.default is not inspect.Parameter.empty:
            out[name] = p.default
    return out


def _annotation(cls: type, name: str) -> str:
    p = inspect.signature(cls.__init__).parameters.get(name)
    return str(p.annotation) if p is not None else ""


def _statements(error: BaseException) -> list[tuple[str, str]]:
    """(failing statement, source of its function) for each diffusers frame of the
    traceback, innermost first.  A statement spans lineno..end_lineno: a call's arguments
    sit on the lines below its first."""
    out = []
    tb, frames = error.__traceback__, []
    while tb is not None:
        frames.append(tb)
        tb = tb.tb_next
    for tb, frame in zip(reversed(frames), reversed(traceback.extract_tb(error.__traceback__))):
        if "diffusers" not in frame.filename:
            continue
        last = frame.end_lineno or frame.lineno
        statement = "".join(linecache.getline(frame.filename, n)
                            for n in range(frame.lineno, min(last, frame.lineno + 40) + 1))
        try:
            source = inspect.getsource(tb.tb_frame.f_code)
        except (OSError, TypeError):
            source = statement
        out.append((statement, source))
    return out


def repair_for(cls: type, kwargs: dict, error: BaseException) -> tuple | None:
    """The repair an error calls for: ("fill", names, subscripts) or None."""
    message = f"{error}"
    signature = inspect.signature(cls.__init__).parameters
    fillable = {k for k in signature if k != "self" and (kwargs.get(k, None) is None)}
    fillable -= {k for k, p in signature.items() if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
    quoted = [q for q in re.findall(r"`(\w+)`", message) if q in fillable]
    if quoted:
        return ("fill", (quoted[0],), ())
    missing = re.search(r"missing \d+ required positional arguments?: (.*)", message)
    if missing:
        names = tuple(n for n in re.findall(r"'(\w+)'", missing.group(1)) if n in fillable)
        return ("fill", names, ()) if names else None
    if not isinstance(error, (TypeError, ValueError, AttributeError, KeyError, AssertionError)):
        return None
    for statement, source in _statements(error):
        names = tuple(sorted(n for n in set(re.findall(r"\w+", statement)) & fillable))
        if names:  # the keys the function subscripts them with, all at once
            subscripts = tuple(sorted(set(re.findall(
                r"(\w+)\[\s*['\"](\w+)['\"]\s*\]", source)) | set(re.findall(
                r"(\w+)\[\s*(\d+)\s*\]", source))))
            return ("fill", names, subscripts)
    return None


def fill_value(cls: type, kwargs: dict, name: str, subscripts: tuple = ()) -> Any:
    """The value FILL_RULES give the argument ``name`` (None: no rule)."""
    annotation = _annotation(cls, name)
    keys = [key for owner, key in subscripts if owner == name and not key.isdigit()]
    if keys or "dict" in annotation:
        value = dict(kwargs.get(name) or {})
        for key in keys:
            value.setdefault(key, [1.0] if "factor" in key else None)
        return value
    if re.search(r"(kv_heads|key_value_heads)$", name):
        heads = next((v for k, v in kwargs.items() if HEAD_RE.match(k) and is_int(v)), None)
        return heads
    if re.search(r"in_channels$", name):  # a GroupNorm over the input needs its groups
        groups = kwargs.get("norm_num_groups")
        return groups if is_int(groups) and groups > 4 else 4
    if re.search(r"out_channels$", name):
        return kwargs.get("in_channels") or 4
    if name.endswith("patch_size_t"):
        return 1
    if name.endswith("patch_size"):
        return 2
    if re.search(r"(list|tuple|List|Tuple)", annotation) and \
            re.search(r"(_layers|_places|_ids|_indices|_blocks)$", name):
        return [0]
    if re.search(r"heads$", name):
        return 2
    if re.search(r"(dim|channels|size|_len)$", name):
        indices = [int(i) for owner, i in subscripts if owner == name and i.isdigit()]
        if indices or re.search(r"(list|tuple|List|Tuple)", annotation):
            return [32] * (max(indices, default=0) + 1)
        return 32
    return None


def apply_repairs(cls: type, kwargs: dict, repairs: tuple) -> tuple[dict, list[str]]:
    """kwargs with the repairs applied (a new dict), and a note for each value filled."""
    d, notes = dict(kwargs), []
    for _, names, subscripts in repairs:
        for name in names:
            value = fill_value(cls, d, name, subscripts)
            if value is not None:
                d[name] = value
                notes.append(f"{name}: {kwargs.get(name, 'required')!r} -> {value!r}")
    return d, notes


def instantiate(cls: type, kwargs: dict, device: str | torch.device = "cpu") -> Any:
    with torch.device(device):
        return cls(**kwargs)


def instantiate_default(cls: type, device: str = "meta") -> tuple[Any, dict, tuple]:
    """(model, kwargs, repairs): the default config, repaired as its errors ask, built."""
    repairs: tuple = ()
    base = default_kwargs(cls)
    while True:
        kwargs, _ = apply_repairs(cls, base, repairs)
        try:
            return instantiate(cls, kwargs, device), kwargs, repairs
        except Exception as e:  # noqa: BLE001 - the error may name a repair
            fix = repair_for(cls, kwargs, e)
            if fix is None or fix in repairs or len(repairs) >= MAX_REPAIRS:
                raise
            repairs += (fix,)
