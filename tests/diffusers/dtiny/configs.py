"""The tiny config of a model class: its default, repaired as its errors ask, shrunk.

Owns ``tiny_config``: the search that turns a class's default keyword arguments
(``defaults.default_kwargs``) into a tiny config that builds.  Each attempt applies the
repairs earlier attempts called for to the *default* (``defaults.apply_repairs``), then
the shrink rules (``shrink.shrink``), and builds the model on the meta device (no memory
is allocated, so nothing default-sized is ever made; a meta build also counts the
parameters before a real one).  An error that names a repair (``defaults.repair_for``)
is retried with it; the first config that builds is the answer.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any

from .defaults import MAX_REPAIRS, apply_repairs, default_kwargs, instantiate, repair_for
from .keys import positional
from .shrink import WHY, shrink


def error_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0][:240] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"


@functools.lru_cache(maxsize=None)
def _search(cls: type) -> tuple[dict, dict, tuple, list[str], Any]:
    """(kwargs, changes, repairs, notes, meta model) of the first tiny config that builds
    on meta; RuntimeError (every attempt's error) when none does.  Cached, the meta model
    with it (it holds no memory): discovery walks it, build() counts its parameters."""
    base = default_kwargs(cls)
    repairs: tuple = ()
    errors = []
    while True:
        filled, notes = apply_repairs(cls, base, repairs)
        kwargs, changes = shrink(filled)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                model = instantiate(cls, kwargs, "meta")
            return kwargs, changes, repairs, notes, model
        except Exception as e:  # noqa: BLE001 - the error may name a repair
            errors.append(error_line(e))
            fix = repair_for(cls, kwargs, e)
            if fix is None or fix in repairs or len(repairs) >= MAX_REPAIRS:
                raise RuntimeError(" | ".join(errors)) from e
            repairs += (fix,)


def tiny_config(cls: type) -> tuple[dict, dict[str, Any]]:
    """(kwargs, info) of the class's tiny config.  info: ``changes`` ({key: (default,
    tiny)} for every key the shrink rules changed), ``repairs`` (a note per value a repair
    filled), ``changed`` (the positional keys among them: filled by a repair, with why),
    ``params`` (the parameter count, from the meta build)."""
    kwargs, changes, repairs, notes, model = _search(cls)
    base = default_kwargs(cls)
    filled, _ = apply_repairs(cls, base, repairs)
    changed = [f"{key}: {base.get(key, 'required')!r} -> {filled[key]!r} (a repair: the "
               f"default cannot build)" for key in filled
               if positional(key) and filled[key] != base.get(key, object())]
    changed += [f"{key}: {old!r} -> {new!r} ({WHY.get(key, 'a shrink rule')})"
                for key, (old, new) in changes.items() if positional(key)]
    return dict(kwargs), {"changes": dict(changes), "repairs": list(notes), "changed": changed,
                          "params": sum(p.numel() for p in model.parameters())}


def tiny_meta_model(cls: type) -> Any:
    """The tiny config's model on the meta device (shared: do not change it)."""
    return _search(cls)[4]
