"""sinpe.torch.patch's transformers adapter: where a transformers model keeps its RoPE,
and sinpe's stand-ins for it.

:func:`plan` finds the model's rotary modules, the apply functions its attention calls
and sin/cos tables kept in attention modules (:mod:`sinpe.torch.patching._discover`,
no list of families), checks each swap (the apply forms and tables by
:mod:`sinpe.torch.patching._checks`, the rotary modules by :mod:`._checks`), and
returns the :class:`~sinpe.torch.patching.Plan` that ``sinpe.torch.patch`` applies.
A rotary module's stand-in is :class:`sinpe.torch.RotaryEmbedding` made from it (or
:class:`sinpe.torch._multi_axis.AxialRotary` for a vision tower's axial one), else the
module's own code in double precision (:class:`sinpe.torch.patching.DoubleForward`).
transformers is never imported here: its code is reached through the model's own
classes.
"""

import inspect
from typing import Any, Callable, Optional

import torch
from torch import nn

from sinpe.torch._multi_axis import AxialRotary
from sinpe.torch._rotary_module import RotaryEmbedding
from sinpe.torch._tensors import _float64_on
from sinpe.torch.hf import _checks as checks
from sinpe.torch.patching import _discover as discover
from sinpe.torch.patching._double import DoubleForward
from sinpe.torch.patching._handle import (
    NOT_CHANGED,
    SWAPS,
    MethodSwap,
    NothingFound,
    Patch,
    Plan,
    made,
    model_place,
    refuse_patched,
)

LIBRARY = "transformers"


def claims(model: Any) -> bool:
    """Whether ``model`` is this adapter's: an ``nn.Module`` (transformers' models, and
    any module of the user's: its rotary modules are found alike)."""
    return isinstance(model, nn.Module)


def patch_model(model: nn.Module, frequencies: str) -> Patch:
    """``sinpe.torch.patch`` of a model this adapter claims (arguments checked)."""
    return made(lambda: plan(model, frequencies), LIBRARY)


def plan(model: nn.Module, frequencies: str) -> Plan:
    """Everything ``sinpe.torch.patch`` will change in a transformers model, checked;
    ValueError (the model unchanged) for a model without rotary embeddings or one none
    of whose caches sinpe can make."""
    device = model_place(model)
    made = Plan()
    caches_found = _rotary_modules(made, model, frequencies, device)
    caches_found += made.add_tables(model)
    globals_found = discover.apply_globals(model, LIBRARY, SWAPS)
    if not caches_found and not globals_found:
        raise NothingFound(f"sinpe.torch.patch: {type(model).__name__} has no rotary "
                         "position embedding that sinpe finds (no rotary module, sin/cos "
                         f"table or apply function); {NOT_CHANGED}")
    if not made.methods and not made.tables:
        reasons = "; ".join(f"{what} {why}" for what, why in made.kept.items()) or (
            "its attention calls "
            + ", ".join(place.qualname for place in globals_found)
            + ", but no rotary module or sin/cos table of the model makes their caches "
            "(they are made inside attention, or this configuration does not use RoPE)")
        family = _families_of(model)
        raise ValueError(f"sinpe.torch.patch refuses the {family} family: {reasons}; "
                         f"{NOT_CHANGED}")
    for place in globals_found:
        made.add_function(place, device)
    return made


def _rotary_modules(made: Plan, model: nn.Module, frequencies: str,
                    device: torch.device) -> int:
    """Plans a forward override for each rotary module sinpe stands in for (its device
    path's tables made on the model's ``device``); returns how many rotary modules
    were found."""
    found = 0
    shared: dict[Any, Callable[..., Any]] = {}  # one stand-in for modules alike
    for name, module in discover.rotary_modules(model):
        found += 1
        refuse_patched(module, name)
        what = f"the rotary module {name or 'model'} ({type(module).__name__})"
        key = _stand_in_key(module)
        forward = shared.get(key) if key is not None else None
        if forward is None:
            forward, why = _stand_in(module, what, frequencies, made.deferred, device)
            if forward is None:
                made.kept[what] = why
                continue
            _prepare(forward, device)
            if key is not None:
                shared[key] = forward
        kind = "double precision" if isinstance(forward, DoubleForward) else "rotary module"
        made.methods.append(MethodSwap(name, module, "forward", forward, kind))
        made.families.add(discover.family_of(type(module).__module__))
    return found


def _families_of(model: nn.Module) -> str:
    names = sorted({discover.family_of(type(m).__module__) for m in model.modules()
                    if (type(m).__module__ or "").startswith("transformers.models.")})
    return ", ".join(names) or type(model).__name__


def _stand_in_key(module: nn.Module) -> Optional[tuple[Any, ...]]:
    """Modules whose stand-in can be shared (one table for all): the same class and the
    same config object, no state of their own beyond it."""
    config = getattr(module, "config", None)
    if config is None:
        return None
    return (type(module), id(config), getattr(module, "layer_type", None),
            getattr(module, "rope_type", None) == "axial")


def _prepare(forward: Callable[..., Any], device: torch.device) -> None:
    """Makes a stand-in's device-path tables on the model's device now (a compiled
    first call could not make them)."""
    owner = getattr(forward, "__self__", forward)
    prepare = getattr(owner, "prepare", None)
    if callable(prepare):
        prepare(device)


def _stand_in(module: nn.Module, what: str, frequencies: str,
              deferred: list[tuple[str, DoubleForward]], device: torch.device
              ) -> tuple[Optional[Callable[..., Any]], str]:
    """sinpe's forward for a rotary module, checked, or None and why not: sinpe's
    rotary module made from it (kept tables) where it stands in, else the module's own
    forward in double precision (:mod:`._double`), checked now on positions of the
    checks' own for a text rotary module, at its first call for any other."""
    try:
        forward = _sinpe_forward(module, frequencies)
        # sinpe's rotary module checked itself against a new module of the family when
        # it was made: only the module as the model holds it is left to check
        why = checks.check_rotary(module, forward, fresh=isinstance(forward, AxialRotary))
    except (TypeError, ValueError) as exc:
        why = f"is not one sinpe's rotary module stands in for ({exc})"
    if not why:
        return forward, ""
    if frequencies == "exact":
        return None, why  # the double run keeps the module's own frequencies
    if not _float64_on(device):
        return None, (f"{why}; sinpe's other way, its own code in double precision, needs "
                      f"float64, which {device.type} does not have")
    if takes_positions(module):
        double = DoubleForward(module, checked=True)
        again = checks.check_double(module, double.run)
        return (double, "") if not again else (None, f"{why}; in double precision it {again}")
    double = DoubleForward(module, checked=False)
    deferred.append((what, double))
    return double, ""


def _sinpe_forward(module: nn.Module, frequencies: str) -> Callable[..., Any]:
    """The forward that replaces ``module``'s: that of sinpe's rotary module made from it
    (:meth:`sinpe.torch.RotaryEmbedding.from_module`: its config, frequencies, attention
    factor, and the form of the caches it returns), or for a vision tower's axial
    module (rope type "axial") :class:`sinpe.torch._multi_axis.AxialRotary`."""
    if getattr(module, "rope_type", None) == "axial":
        return AxialRotary(module, frequencies)
    forward: Callable[..., Any] = RotaryEmbedding.from_module(
        module, frequencies=frequencies).forward
    return forward


def takes_positions(module: nn.Module) -> bool:
    """Whether the module's forward takes ``(x, position_ids, ...)`` as transformers'
    text rotary modules do (the checks can then call it on positions of their own)."""
    try:
        names = list(inspect.signature(type(module).forward).parameters)
    except (TypeError, ValueError):
        return False
    return names[1:3] == ["x", "position_ids"]
