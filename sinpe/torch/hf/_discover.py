"""Where a model keeps its RoPE: what sinpe.torch.patch may swap, found in the model itself.

No list of families: the candidates are found in the model's own modules and code,
and :mod:`._checks` then decides, by what each does, which sinpe can stand in for.

- Rotary modules: modules without parameters holding RoPE frequencies (a tensor
  attribute whose name ends in ``inv_freq``) or whose class says it is one
  (``Rotary``/``RoPE`` in its name).
- Apply functions: the functions the model's module classes call by a global name
  (read from the code of their methods), defined in transformers, whose parameters
  take caches (``cos``/``sin``/``freqs_cis``...).  Their home is the module whose
  globals the method reads: swapping that global is what the model then runs.
- Tables kept in attention modules (GPT-J's and CodeGen's sin/cos ``embed_positions``):
  2-D float buffers, which the checks hold against a sinusoid table.

transformers is never imported here: its code is reached through the model's classes.
"""

import inspect
import re
import sys
import types
from dataclasses import dataclass
from typing import Any, Callable, Container, Iterator

import torch
from torch import nn

_ROTARY_CLASS = re.compile(r"rotary|rope", re.IGNORECASE)
_CACHE_PARAMETER = re.compile(r"^(cos|sin|freqs?(_cis)?|sincos|position_embeddings|"
                              r"rotary_pos_emb|rotary_emb|emb)$")
_TRANSFORMERS = "transformers."


def _is_sinpes(obj: Any) -> bool:
    return (getattr(type(obj), "__module__", "") or "").startswith("sinpe.")


def family_of(module_name: str) -> str:
    """"llama" for transformers.models.llama.modeling_llama (the model folder), else the
    module's name."""
    parts = module_name.split(".")
    if module_name.startswith(_TRANSFORMERS + "models.") and len(parts) >= 3:
        return parts[2]
    return module_name


def rotary_modules(model: nn.Module) -> Iterator[tuple[str, nn.Module]]:
    """Every module of ``model`` that computes RoPE caches (not sinpe's own): it has no
    parameters (an attention module whose class name says RoPE is not one)."""
    for name, module in model.named_modules():
        if _is_sinpes(module) or next(module.parameters(), None) is not None:
            continue
        holds = any(key.endswith("inv_freq") and isinstance(value, torch.Tensor)
                    for key, value in _attributes(module))
        if holds or _ROTARY_CLASS.search(type(module).__name__):
            yield name, module


def _attributes(module: nn.Module) -> Iterator[tuple[str, Any]]:
    yield from vars(module).items()
    yield from module._buffers.items()
    yield from module._parameters.items()


@dataclass(frozen=True)
class Global:
    """An apply function as a modeling module's global: ``module.name``."""

    module: types.ModuleType
    name: str

    @property
    def qualname(self) -> str:
        return f"{self.module.__name__}.{self.name}"

    @property
    def family(self) -> str:
        return family_of(self.module.__name__)


def apply_globals(model: nn.Module, swapped: Container[str] = ()) -> list[Global]:
    """The apply functions the model's module classes call by a global name (also those
    whose qualname is in ``swapped``: sinpe's already, by an earlier patch)."""
    found: dict[tuple[str, str], Global] = {}
    for cls in {type(m) for m in model.modules()}:
        for klass in cls.__mro__:
            if not (klass.__module__ or "").startswith(_TRANSFORMERS):
                continue
            for attribute in vars(klass).values():
                function = getattr(attribute, "__func__", attribute)
                if not isinstance(function, types.FunctionType):
                    continue
                home = sys.modules.get(function.__globals__.get("__name__", ""))
                if home is None:
                    continue
                for name in _global_names(function.__code__):
                    value = function.__globals__.get(name)
                    if _takes_caches(value) or f"{home.__name__}.{name}" in swapped:
                        found.setdefault((home.__name__, name), Global(home, name))
    return sorted(found.values(), key=lambda g: g.qualname)


def _global_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _global_names(constant)


def _takes_caches(value: Any) -> bool:
    """A transformers function (not a class) with a parameter for RoPE caches."""
    function = inspect.unwrap(value) if callable(value) else None
    if not isinstance(function, types.FunctionType) or _is_sinpes(function):
        return False
    if not (function.__module__ or "").startswith(_TRANSFORMERS):
        return False
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return any(_CACHE_PARAMETER.match(name) for name in parameters)


def tables(model: nn.Module) -> Iterator[tuple[str, nn.Module, str]]:
    """Every 2-D float buffer of the model's modules, by module name, module and buffer
    name: the candidates for a sin/cos table (GPT-J's and CodeGen's ``embed_positions``);
    :func:`sinpe.torch.hf._checks.sinusoid_table` tells which are."""
    for name, module in model.named_modules():
        if _is_sinpes(module):
            continue
        for buffer, value in module._buffers.items():
            if (isinstance(value, torch.Tensor) and value.dim() == 2
                    and value.is_floating_point() and value.shape[0] > 1):
                yield name, module, buffer


def takes_positions(module: nn.Module) -> bool:
    """Whether the module's forward takes ``(x, position_ids, ...)`` as transformers'
    text rotary modules do (the checks can then call it on positions of their own)."""
    try:
        names = list(inspect.signature(type(module).forward).parameters)
    except (TypeError, ValueError):
        return False
    return names[1:3] == ["x", "position_ids"]
