"""transformers' side of :class:`sinpe.torch.RotaryEmbedding`: the rotary module of a
config's family, how it is called and what it returns, its own frequencies, and the
checks that sinpe's caches stand for its.

Every failure of transformers' code here (building the family's module from the
config, calling it) becomes a ``ValueError`` that names the module and what it
could not do; a module whose caches sinpe's do not reproduce is refused naming
what differs.  transformers is imported lazily, by the functions that need it.
"""
from __future__ import annotations

import copy
import importlib
import inspect
from typing import Any, Callable, Optional

import numpy as np
from numpy.typing import NDArray
import torch
from torch import nn

from sinpe._rope_types import _config_head_dim
from sinpe.torch._verify import (
    caches_differ,
    check_positions,
    frequency_error,
    unswitched_positions,
)

Frequencies = tuple[NDArray[np.float64], float]


def family_module(config: Any) -> Optional[nn.Module]:
    """A new instance (on the CPU) of the rotary module of the family that ``config``
    configures: its ``modeling_*`` module's first ``*RotaryEmbedding`` class that
    computes default frequencies and builds from the config, vision towers' ones
    (``*VisionRotaryEmbedding``) left out.
    None without transformers or without such a class; ValueError where every such
    class fails on the config."""
    name = type(config).__module__
    if not name.startswith("transformers.models.") or ".configuration_" not in name:
        return None
    try:
        modeling = importlib.import_module(name.replace(".configuration_", ".modeling_"))
    except ImportError:
        return None
    classes = [value for attribute, value in vars(modeling).items()
               if attribute.endswith("RotaryEmbedding")
               and not attribute.endswith("VisionRotaryEmbedding")  # (Granite4VisionText's is text)
               and isinstance(value, type) and issubclass(value, nn.Module)
               and value.__module__ == modeling.__name__
               and hasattr(value, "compute_default_rope_parameters")]
    failures = []
    for cls in classes:
        try:
            with torch.device("cpu"):  # sinpe reads its values (a meta default too)
                module: nn.Module = cls(config)
            return module
        except Exception as exc:  # another class of the file (a text config for a vision one, ...)
            failures.append((cls, exc))
    if failures:
        first, error = failures[0]
        raise ValueError(f"transformers' {first.__name__} cannot be built from this config "
                         f"({type(config).__name__}): {_why(error)}; RotaryEmbedding stands "
                         "in for it and checks its caches against it") from error
    return None


def rebuilt(module: nn.Module) -> nn.Module:
    """A new module of ``module``'s class and config on the CPU (as it starts: without
    the state dynamic rope keeps, float32 frequencies where ``model.to(dtype)`` cast
    the model's), else a copy of it moved to the CPU.  The module itself is not
    called or changed."""
    try:
        with torch.device("cpu"):
            fresh: nn.Module = type(module)(module.config)
        return fresh
    except Exception as exc:
        if any(t.is_meta for t in module.buffers()):
            raise ValueError(f"{type(module).__name__} on the meta device cannot be made "
                             f"again from its config ({_why(exc)}): nothing to read its "
                             "caches from") from exc
        return copy.deepcopy(module).to("cpu")


def _why(exc: BaseException) -> str:
    """An exception of transformers' code, naming the config key it lacked if it says."""
    if isinstance(exc, KeyError) and exc.args:
        return f"it reads the key {exc.args[0]!r}, which the config does not have ({exc!r})"
    name = getattr(exc, "name", None)
    if isinstance(exc, AttributeError) and name:
        return f"it reads the config attribute {name!r}, which is missing ({exc!r})"
    return repr(exc)


# -- what the module holds ----------------------------------------------------------------


def layer_types(hf: nn.Module) -> Optional[list[str]]:
    """The layer types a module holds rope for (None: one rope, no layer types)."""
    rope_type = getattr(hf, "rope_type", None)
    return list(rope_type) if isinstance(rope_type, dict) else None


def rope_type(hf: nn.Module, layer_type: Optional[str]) -> Optional[str]:
    """The rope type whose switches the module makes (transformers' dynamic_rope_update
    reads the module's own, which may differ from the config's)."""
    kind = getattr(hf, "rope_type", None)
    if isinstance(kind, dict):
        kind = kind.get(layer_type)
    return kind if isinstance(kind, str) else None


def own_frequencies(module: nn.Module, layer_type: Optional[str]) -> Optional[Frequencies]:
    """A module's own float32 frequencies (its ``original_inv_freq``) and attention
    factor, or None where it has none, or cast or meta ones."""
    prefix = "" if layer_type is None else f"{layer_type}_"
    buffer = getattr(module, f"{prefix}original_inv_freq", None)
    scaling = getattr(module, f"{prefix}attention_scaling", None)
    if (isinstance(buffer, torch.Tensor) and buffer.dtype is torch.float32 and not buffer.is_meta
            and isinstance(scaling, (int, float))):
        return buffer.detach().to("cpu", torch.float64).numpy(), float(scaling)
    return None


def hf_frequencies(hf: nn.Module, config: Any, kind: str, layer_type: Optional[str],
                   seq_len: Optional[float]) -> Frequencies:
    """transformers' own frequencies (float32, as float64) and attention factor, by the
    function its module calls: ROPE_INIT_FUNCTIONS, or the family's
    compute_default_rope_parameters; seq_len as its dynamic_rope_update passes it
    (a tensor)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    function: Any = (getattr(type(hf), "compute_default_rope_parameters", None)
                     if kind == "default" else ROPE_INIT_FUNCTIONS.get(kind))
    if function is None:
        raise ValueError(f"rope type {kind!r} of transformers' {type(hf).__name__} is not one "
                         "transformers' functions compute")
    kwargs: dict[str, Any] = {} if layer_type is None else {"layer_type": layer_type}
    if seq_len is not None and kind != "default":
        kwargs["seq_len"] = torch.tensor(seq_len) if kind == "dynamic" else seq_len
    try:
        with torch.device("cpu"):
            inv_freq, scaling = function(config, **kwargs)
    except Exception as exc:
        key = "rope_parameters" + ("" if layer_type is None else f"[{layer_type!r}]")
        raise ValueError(f"transformers' frequencies of rope type {kind!r} fail at seq_len="
                         f"{seq_len} for {key} ({exc!r})") from exc
    return inv_freq.detach().to("cpu", torch.float64).numpy(), float(scaling)


# -- calling it ---------------------------------------------------------------------------


def call(hf: nn.Module, x: torch.Tensor, position_ids: torch.Tensor,
         layer_type: Optional[str]) -> Any:
    """``hf(x, position_ids[, layer_type])``; its failure a ValueError naming it."""
    name = type(hf).__name__
    parameters = inspect.signature(type(hf).forward).parameters
    if "position_ids" not in parameters:
        raise ValueError(f"transformers' {name}.forward{inspect.signature(type(hf).forward)} "
                         "does not take (x, position_ids): RotaryEmbedding cannot stand in "
                         "for it")
    try:
        with torch.no_grad():
            return hf(x, position_ids) if layer_type is None else hf(x, position_ids, layer_type)
    except Exception as exc:
        # a multi-axis module without sections (HunYuan-VL's default config)
        unset = (" (rope_parameters['mrope_section'] is None: the module's sections)"
                 if getattr(hf, "mrope_section", False) is None else "")
        raise ValueError(f"transformers' {name} fails on position_ids of shape "
                         f"{tuple(position_ids.shape)} with this config{unset}: {_why(exc)}; "
                         "RotaryEmbedding checks its caches against it") from exc


def probe(hf: nn.Module, layer_type: Optional[str], width: int
          ) -> tuple[str, Optional[torch.dtype]]:
    """The form of a module's caches (:data:`sinpe.torch._verify.FORMS`) and their
    fixed dtype (None: ``x.dtype``), seen on positions 0..3 of a float64 ``x``:
    complex ``freqs_cis`` of width ``r/2``; ``(cos, sin)`` of width ``r/2`` ("half"),
    or of width ``r``, "interleaved" where each pair of columns repeats a value,
    else "concatenated".  ``width`` is ``r``, from the module's frequencies."""
    position_ids = torch.arange(4)[None]
    result = call(hf, torch.zeros(1, dtype=torch.float64), position_ids, layer_type)
    name = type(hf).__name__
    rows = tuple(position_ids.shape)
    if isinstance(result, torch.Tensor):
        if result.dtype is torch.complex64 and tuple(result.shape) == (*rows, width // 2):
            return "complex", torch.complex64
        raise ValueError(f"transformers' {name} returns one tensor of shape "
                         f"{tuple(result.shape)} and dtype {result.dtype} for position_ids of "
                         f"shape {rows}: not complex64 freqs_cis of shape {(*rows, width // 2)}; "
                         "sinpe cannot stand in for it")
    if not (isinstance(result, tuple) and len(result) == 2
            and all(isinstance(t, torch.Tensor) and t.dim() == 3 and tuple(t.shape[:2]) == rows
                    and t.shape == result[0].shape and t.dtype == result[0].dtype
                    for t in result)):
        raise ValueError(f"transformers' {name}'s forward does not return (cos, sin) of shape "
                         "position_ids.shape + (columns,): sinpe cannot stand in for it")
    columns = result[0].shape[-1]
    fixed = None if result[0].dtype is torch.float64 else result[0].dtype
    if columns == width // 2:
        return "half", fixed
    if columns != width:
        raise ValueError(f"transformers' {name} returns caches of {columns} columns, where the "
                         f"frequencies of its config give {width} (or {width // 2}, each "
                         "frequency once): sinpe cannot stand in for it")
    cos = result[0][0, 1].double()
    half = width // 2
    interleaved = bool(torch.equal(cos[0::2], cos[1::2])) and not bool(
        torch.equal(cos[:half], cos[half:]))
    return ("interleaved" if interleaved else "concatenated"), fixed


# -- the checks ---------------------------------------------------------------------------


def check_caches(hf: nn.Module, serve: Callable[[torch.Tensor, torch.Tensor, Optional[str]], Any],
                 types: list[Optional[str]]) -> None:
    """ValueError unless ``serve(x, position_ids, layer_type)`` (sinpe's caches of the
    model's frequencies) gives ``hf``'s caches (a module as it starts) for every layer
    type: form, shape, dtype, device, and values within the float32 rounding of
    transformers' angles (:func:`sinpe.torch._verify.caches_differ`), at positions short
    of any switch of its frequencies, in float32 and bfloat16."""
    name = type(hf).__name__
    device = torch.device("cpu")
    for layer_type in types:
        prefix = "" if layer_type is None else f"{layer_type}_"
        inv_freq = getattr(hf, f"{prefix}inv_freq", None)
        scaling = getattr(hf, f"{prefix}attention_scaling", None)
        what = f"transformers' {name}" + ("" if layer_type is None else f" ({layer_type})")
        if not isinstance(inv_freq, torch.Tensor) or not isinstance(scaling, (int, float)):
            raise ValueError(f"{what} has no {prefix}inv_freq and {prefix}attention_scaling to "
                             "check sinpe's caches against: sinpe cannot stand in for it")
        count = unswitched_positions(hf, layer_type)
        for positions, largest, required in check_positions(hf, count, device):
            for dtype in (torch.float32, torch.bfloat16):
                x = torch.zeros((*largest.shape, 8), dtype=dtype, device=device)
                if not required:
                    try:
                        with torch.no_grad():
                            hf(x, positions, *(() if layer_type is None else (layer_type,)))
                    except Exception:  # noqa: BLE001 - the module takes no such positions
                        break
                want = call(hf, x, positions, layer_type)
                why = caches_differ(serve(x, positions, layer_type), want, largest, inv_freq,
                                    float(scaling))
                if why:
                    raise ValueError(f"sinpe's RotaryEmbedding cannot stand in for {what}: it "
                                     f"{why}")


def check_exact(hf: nn.Module, config: Any, layer_type: Optional[str],
                exact: NDArray[np.float64], model: NDArray[np.float64]) -> None:
    """For ``frequencies="exact"``: ValueError unless the module computes the rope type of
    the config, and sinpe's double frequencies of it (``exact``) are the module's float32
    ones (``model``) within their float32 error
    (:func:`sinpe.torch._verify.frequency_error`)."""
    params = config.rope_parameters if layer_type is None else config.rope_parameters[layer_type]
    kind = params.get("rope_type", params.get("type", "default"))
    module_kind = rope_type(hf, layer_type)
    name = type(hf).__name__
    if module_kind is not None and module_kind != kind:
        raise ValueError(f"frequencies='exact': transformers' {name} computes rope type "
                         f"{module_kind!r}, where the config's rope_parameters['rope_type'] is "
                         f"{kind!r}; sinpe has no formula for it (frequencies='model' takes the "
                         "module's own)")
    bound = frequency_error(params, _config_head_dim(config, layer_type), exact,
                            getattr(config, "max_position_embeddings", None))
    off = (exact.shape != model.shape or not bool((np.abs(exact - model) <= bound).all()))
    if off:
        raise ValueError(f"frequencies='exact': transformers' {name} computes other frequencies "
                         f"than sinpe's formula of rope type {kind!r} (beyond their float32 "
                         "rounding); frequencies='model' takes the module's own")
