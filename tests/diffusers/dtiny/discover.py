"""Which diffusers model classes have positional code, and of which kinds, found in their code.

Owns ``model_classes`` (every model class the installed diffusers exports),
``positional_classes``, ``positional_kinds`` and the module-level view of a built model
(``positional_modules``, ``settings``).  No list of model names: a class is recognised
by what its code calls (:mod:`.codewalk` reads the code).

The rule.  A class is positional when the code of its *module tree* reaches a site of a
counted kind (``rope``, ``fourier``, ``timestep``, ``sincos``: a code object calling
``cos``/``sin``/``polar``) or a ``rope-applied`` function (:mod:`.codewalk` says how
code is followed and how a site's kind is told).  The module tree is the classes of the
modules an instance holds (``model.modules()``) and the diffusers objects and functions
those modules keep as attributes (attention processors, rope helpers, ``partial``s of
feature functions).  The instance is the class's tiny config (:mod:`.configs`: the
default, repaired, shrunk: the one ``build`` makes) built on the meta device, else its
repaired default config on the meta device (nothing is allocated, so a default of
billions of parameters costs a fraction of a second); only when neither builds (the
multi-controlnet wrappers, which take a list of models) does the walk start from the
class alone and enter every class its code names (``tree="static"``).  That static walk
over-approximates what any instance reaches, so a class it finds nothing for is not
built at all (``tree="static"`` too, with no error): no instance of it can have any.  A tiny config
keeps every kind of block of the default (it shrinks counts and widths, never the
per-block type lists), so its tree has the default's classes.
"""
from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import types
import warnings
from typing import Any, Iterator

import torch

import diffusers
import diffusers.models

from .codewalk import (COUNTED, class_sites, diffusers_function, function_sites, in_diffusers,
                       static_sites)


@functools.lru_cache(maxsize=None)
def _modeling_modules() -> tuple[types.ModuleType, ...]:
    """Every module under diffusers.models, imported (the lazy package imports on use)."""
    mods = []
    for info in pkgutil.walk_packages(diffusers.models.__path__, "diffusers.models."):
        try:
            mods.append(importlib.import_module(info.name))
        except Exception:  # noqa: BLE001 - a module that needs an optional backend
            pass
    return tuple(mods)


@functools.lru_cache(maxsize=None)
def model_classes() -> dict[str, type]:
    """Every model class (a ModelMixin subclass, not ModelMixin itself) that diffusers
    exports at its top level, by name, sorted."""
    out = {}
    for mod in _modeling_modules():
        for name, obj in vars(mod).items():
            if (inspect.isclass(obj) and issubclass(obj, diffusers.ModelMixin)
                    and obj is not diffusers.ModelMixin and obj.__module__ == mod.__name__
                    and getattr(diffusers, name, None) is obj):
                out[name] = obj
    return dict(sorted(out.items()))


def _held(module: torch.nn.Module) -> Iterator[Any]:
    """The diffusers objects and functions a module keeps as plain attributes (in lists,
    tuples and dicts too), not its submodules."""
    for value in vars(module).values():
        items = value.values() if isinstance(value, dict) else \
            value if isinstance(value, (list, tuple)) else (value,)
        for item in items:
            if isinstance(item, torch.nn.Module):
                continue
            if diffusers_function(item) is not None or in_diffusers(type(item)):
                yield item


def module_sites(module: torch.nn.Module) -> set[tuple[str, str]]:
    """The (site, kind) pairs of one module's class and of what it holds."""
    pairs = set(class_sites(type(module)))
    for item in _held(module):
        function = diffusers_function(item)
        pairs |= set(function_sites(function) if function is not None
                     else class_sites(type(item)))
    return pairs


def model_sites(model: torch.nn.Module) -> set[tuple[str, str]]:
    """The (site, kind) pairs of a built model's module tree."""
    pairs: set = set()
    seen: set = set()
    for module in model.modules():
        key = type(module)
        held = tuple(sorted({repr(diffusers_function(i) or type(i)) for i in _held(module)}))
        if (key, held) not in seen:  # modules of one class holding the same things
            seen.add((key, held))
            pairs |= module_sites(module)
    return pairs


def positional_modules(model: torch.nn.Module, computing: bool = False) -> dict[str, torch.nn.Module]:
    """The modules of a built model whose own code (or what they hold) reaches a site of a
    counted kind, by their path in the model ('' is the model).  ``computing``: only those
    whose own class computes positional values (not an attention module whose processor
    applies rotary tables it is given)."""
    if computing:
        return {path: module for path, module in model.named_modules()
                if any(kind in COUNTED and kind != "rope-applied"
                       for _, kind in class_sites(type(module)))}
    return {path: module for path, module in model.named_modules()
            if any(kind in COUNTED for _, kind in module_sites(module))}


def settings(module: torch.nn.Module) -> dict[str, Any]:
    """A module's plain settings: the numbers, strings and short tuples of them it keeps as
    attributes (num_channels, flip_sin_to_cos, theta, axes_dim, ...)."""
    out = {}
    for key, value in vars(module).items():
        if key.startswith("_") or key == "training":
            continue
        if isinstance(value, (int, float, str, bool)) or (
                isinstance(value, (tuple, list)) and len(value) <= 16
                and all(isinstance(x, (int, float, str, bool)) for x in value)):
            out[key] = value
    return out


def meta_model(cls: type) -> tuple[torch.nn.Module, str]:
    """An instance on the meta device: of the tiny config ('tiny'), else of the repaired
    default config ('default'); raises when neither builds."""
    from .configs import tiny_meta_model
    from .defaults import instantiate_default

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return tiny_meta_model(cls), "tiny"
        except Exception:  # noqa: BLE001 - the default may still build
            model, _, _ = instantiate_default(cls, device="meta")
            return model, "default"


@functools.lru_cache(maxsize=None)
def _analyse(name: str) -> tuple[str, frozenset, str]:
    """(tree, (site, kind) pairs, error): tree 'tiny', 'default' or 'static', and the error
    of the meta builds when the walk had to be static."""
    cls = model_classes()[name]
    static = static_sites(cls)
    if not any(kind in COUNTED for kind in static.values()):
        # even the over-approximation finds none: no instance has any (no build needed)
        return "static", frozenset(static.items()), ""
    try:
        model, tree = meta_model(cls)
        pairs, error = model_sites(model), ""
        del model
    except Exception as e:  # noqa: BLE001 - no instance: the static walk
        pairs, tree = set(static.items()), "static"
        error = f"{type(e).__name__}: {e}"[:200]
    return tree, frozenset(pairs), error


def positional_kinds(name: str) -> dict[str, Any]:
    """What the rule finds for the class ``name``: ``kinds`` (the counted kinds, sorted),
    ``sites`` ({qualified name: kinds}, the uncounted 'other' ones too), ``tree`` (the
    instance walked: 'tiny', 'default', or 'static' for none) and ``error`` (why static)."""
    tree, pairs, error = _analyse(name)
    sites: dict[str, list[str]] = {}
    for site, kind in sorted(pairs):
        sites.setdefault(site, []).append(kind)
    kinds = sorted({kind for _, kind in pairs if kind in COUNTED})
    return {"kinds": kinds, "sites": sites, "tree": tree, "error": error}


def positional_classes() -> list[str]:
    """The names of the model classes whose code has positional code, sorted."""
    return [name for name in model_classes() if positional_kinds(name)["kinds"]]
