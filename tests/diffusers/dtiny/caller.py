"""Inputs the caller computes: the call a diffusers pipeline makes to produce one, made again.

Owns ``caller_value``.  Some forwards take a value only their pipeline makes, such as a
rotary table (``image_rotary_emb``, ``video_rotary_emb``) computed by a diffusers function
or a method of the model.  The rule reads the pipelines' source as text: a pipeline module
that names the model class and passes ``name=VAR`` to a call, and the statement ``VAR =
callee(...)`` before it; the callee (``self.transformer.method`` or a function the module
imports) is called again with the arguments the pipeline gives it where they are
constants or read from the model (``self.transformer.head_dim``,
``self.transformer.config.x``), else by their parameter's name (``CALL_ARGUMENTS``: the
batch, the latent grid's height and width, the frames and their positions, the device);
arguments left with a default keep it.  Nothing is keyed on a model's name beyond finding
the pipelines that use it.
"""
from __future__ import annotations

import ast
import functools
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import torch

CALL_ARGUMENTS = [
    "batch_size -> the batch; height, width, len_h, len_w -> the latent grid times the patch "
    "size; num_frames -> the latent frames; frame_positions, *positions, *indices -> "
    "range(latent frames); device -> cpu; dtype -> float32; fps -> 24.0",
]

_UNKNOWN = object()


@functools.lru_cache(maxsize=None)
def _pipeline_files() -> tuple[tuple[str, str], ...]:
    """(module name, source) of every module under diffusers.pipelines."""
    import diffusers.pipelines as pipelines
    root = Path(pipelines.__file__).parent
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root.parent).with_suffix("")
        out.append(("diffusers." + ".".join(rel.parts), path.read_text(errors="replace")))
    return tuple(out)


def _call_text(source: str, start: int) -> str | None:
    """The call expression starting at ``start`` (the callee's first character), balanced."""
    depth, i = 0, source.index("(", start)
    for j in range(i, min(len(source), i + 4000)):
        depth += source[j] == "("
        depth -= source[j] == ")"
        if depth == 0:
            return source[start:j + 1]
    return None


def _producer(cls_name: str, name: str) -> tuple[str, str] | None:
    """(module, call text) of the statement that makes the value a pipeline passes as
    ``name`` to the model ``cls_name``."""
    for module, source in _pipeline_files():
        if cls_name not in source:
            continue
        for m in re.finditer(rf"\b{re.escape(name)}\s*=\s*(\w+)\s*[,)]", source):
            var = m.group(1)
            assigns = [a for a in re.finditer(rf"^\s*{re.escape(var)}\s*=\s*([\w.]+)\s*\(",
                                              source, re.MULTILINE) if a.start() < m.start()]
            if assigns:
                a = assigns[-1]
                text = _call_text(source, a.start(1))
                if text:
                    return module, text
    return None


def _resolve(callee: str, module: str, model: torch.nn.Module) -> Any:
    parts = callee.split(".")
    if parts[:2] == ["self", "transformer"] or (parts[0] == "self" and len(parts) == 3):
        obj: Any = model
        for p in parts[2:]:
            obj = getattr(obj, p, None)
        return obj
    if len(parts) == 1:
        try:
            return getattr(importlib.import_module(module), parts[0], None)
        except Exception:  # noqa: BLE001 - a pipeline that needs an optional backend
            return None
    return None


def _known(node: ast.AST, model: torch.nn.Module) -> Any:
    """A constant, or a value read from the model (self.transformer.x, .config.x)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool)):
        return node.value
    chain = []
    while isinstance(node, ast.Attribute):
        chain.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name) and node.id == "self" and chain:
        chain = chain[::-1][1:]  # drop the model's attribute name (transformer, unet, ...)
        obj: Any = model
        for attr in chain:
            if not hasattr(obj, attr):
                return _UNKNOWN
            obj = getattr(obj, attr)
        return obj
    return _UNKNOWN


def _by_name(param: str, s: Any) -> Any:
    frames = s.latent_frames if s.video_layout else 1
    side = s.grid * s.patch[1]
    if param == "batch_size":
        return s.batch
    if param in ("height", "width", "len_h", "len_w"):
        return side
    if param == "num_frames":
        return frames
    if re.search(r"(positions|indices)$", param):
        return list(range(frames))
    if param == "device":
        return torch.device("cpu")
    if param == "dtype":
        return torch.float32
    if param == "fps":
        return 24.0
    return _UNKNOWN


def caller_value(model: torch.nn.Module, name: str, s: Any) -> Any:
    """The value a pipeline computes for the model's parameter ``name``, made the same way
    for the probe's sizes; None when no pipeline shows how."""
    found = _producer(type(model).__name__, name)
    if found is None:
        return None
    module, text = found
    try:
        call = ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(call, ast.Call):
        return None
    fn = _resolve(ast.unparse(call.func), module, model)
    if not callable(fn):
        return None
    try:
        params = [p for p in inspect.signature(fn).parameters.values()
                  if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    except (TypeError, ValueError):
        return None
    given = {p.name: a for p, a in zip(params, call.args)}
    given.update({k.arg: k.value for k in call.keywords if k.arg})
    args = {}
    for p in params:
        value = _known(given[p.name], model) if p.name in given else _UNKNOWN
        if value is _UNKNOWN:
            if p.name not in given and p.default is not inspect.Parameter.empty:
                continue
            value = _by_name(p.name, s)
            if value is _UNKNOWN:
                if p.default is not inspect.Parameter.empty:
                    continue
                return None
        args[p.name] = value
    try:
        with torch.no_grad():
            return fn(**args)
    except Exception:  # noqa: BLE001 - the call needs what the rule cannot give
        return None
