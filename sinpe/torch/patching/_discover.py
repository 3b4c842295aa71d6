"""Where a model keeps its RoPE: what sinpe.torch.patch may swap, found in the model itself.

No list of families or models: the candidates are found in the model's own modules and
code, and the checks (:mod:`sinpe.torch.patching._checks` and each adapter's) then
decide, by what each does, which sinpe can stand in for.  Shared by the libraries'
adapters; the library is a parameter (the package its code lives in).

- Rotary modules: modules without parameters holding RoPE frequencies (a tensor
  attribute whose name ends in ``inv_freq``) or whose class says it is one
  (``Rotary``/``RoPE`` in its name).
- Apply functions: the functions the model's module classes call by a global name
  (read from the code of their methods), defined in the library, whose parameters
  take caches (``cos``/``sin``/``freqs_cis``...).  Their home is the module whose
  globals the method reads: swapping that global is what the model then runs.
- Tables kept in attention modules (GPT-J's and CodeGen's sin/cos ``embed_positions``):
  2-D float buffers, which the checks hold against a sinusoid table.

No library is imported here: its code is reached through the model's classes.
"""

import inspect
import re
import sys
import types
from dataclasses import dataclass
from typing import Any, Container, Iterator

import torch
from torch import nn

_ROTARY_CLASS = re.compile(r"rotary|rope", re.IGNORECASE)
_CACHE_PARAMETER = re.compile(r"^(cos|sin|freqs?(_cis)?|sincos|position_embeddings|"
                              r"rotary_pos_emb|rotary_emb|emb)$")


def _is_sinpes(obj: Any) -> bool:
    return (getattr(type(obj), "__module__", "") or "").startswith("sinpe.")


_MODULE_PREFIXES = ("modeling_", "transformer_", "pipeline_", "unet_", "controlnet_",
                    "autoencoder_")


def family_of(module_name: str) -> str:
    """The family a library's module belongs to, for the handle's report: the model
    folder (``llama`` for transformers.models.llama.modeling_llama, ``flux`` for
    diffusers.pipelines.flux.pipeline_flux), else the module's own name without its
    kind (``flux`` for diffusers.models.transformers.transformer_flux), else the
    module's name."""
    parts = module_name.split(".")
    if len(parts) >= 4 and parts[1] in ("models", "pipelines") and (
            parts[0] == "transformers" or parts[1] == "pipelines"):
        return parts[2]
    if len(parts) >= 3 and parts[1] == "models":
        last = parts[-1]
        for prefix in _MODULE_PREFIXES:
            if last.startswith(prefix):
                return last[len(prefix):]
        return last
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


def apply_globals(model: Any, library: str, swapped: Container[str] = ()) -> list[Global]:
    """The apply functions the library's classes of ``model`` (a module, or any object
    of the library: a pipeline) call by a global name (also those whose qualname is in
    ``swapped``: sinpe's already, by an earlier patch).  ``library``: its package."""
    found: dict[tuple[str, str], Global] = {}
    classes = {type(m) for m in model.modules()} if isinstance(model, nn.Module) else {
        type(model)}
    for cls in classes:
        for klass in cls.__mro__:
            if not (klass.__module__ or "").startswith(library + "."):
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
                    if (_takes_caches(value, library)
                            or f"{home.__name__}.{name}" in swapped):
                        found.setdefault((home.__name__, name), Global(home, name))
    return sorted(found.values(), key=lambda g: g.qualname)


def _global_names(code: types.CodeType) -> Iterator[str]:
    yield from code.co_names
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):
            yield from _global_names(constant)


def _takes_caches(value: Any, library: str) -> bool:
    """A function of the library (not a class) with a parameter for RoPE caches."""
    function = inspect.unwrap(value) if callable(value) else None
    if not isinstance(function, types.FunctionType) or _is_sinpes(function):
        return False
    if not (function.__module__ or "").startswith(library + "."):
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
