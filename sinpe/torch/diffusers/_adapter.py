"""sinpe.torch.patch's diffusers adapter: a diffusers model's or pipeline's positional
code, found by what it does, and sinpe's exact stand-ins for it.

What is found (:mod:`sinpe.torch.patching._code` reads the code; no list of models):

- **positional modules**: the model's modules of diffusers whose own code (their
  ``forward`` and the functions it calls, not their submodules') takes a cosine, a
  sine or ``polar`` (timestep embeddings, rotary modules of every form: interleaved or
  halved cos and sin, 2x2 rotation matrices, complex ``freqs_cis``; Fourier
  projections), or whose constructor does and who keep floating tensors (sin-cos
  tables sliced by the forward, as buffers or plain attributes); leaves only: a module with submodules holding
  parameters (an attention, a whole embedder) is not one;
- **positional functions** that the rest of the model's code or the pipeline's code
  calls by a global name (``get_timestep_embedding`` in a model's forward,
  ``get_3d_rotary_pos_embed`` in CogVideoX's pipeline, which computes the model's RoPE
  itself);
- **angle sources**: the model's parameterless leaf modules of diffusers whose code
  makes a range and a table by a product (``outer``, ``einsum``), and takes no cosine:
  Stable Audio 3's and Ernie-Image's rotary modules, whose angles the attention
  processors take the cosine of (:mod:`sinpe.torch.patching._sources`);
- the **apply functions** its attention calls (``apply_rotary_emb`` and the models'
  own), recognised by the forms of :mod:`sinpe.torch.patching` where one gives their
  bits, else listed as kept: they apply whatever tables they are given, sinpe's now.

Each positional module's ``forward`` becomes an
:class:`~sinpe.torch.patching._exact.ExactCall`: its own code on the CPU with its angles
formed in double, from the module made again with exact tables
(:mod:`._rebuild`), each output rounded once, kept per grid, the same bits on every
device; checked against the module's own at its first call.  A positional function
becomes the same, acting only inside a patched model's or pipeline's own call
(:class:`~sinpe.torch.patching._scoped.Scoped`): other models keep diffusers' bits.
diffusers is never imported here.
"""

import copy
import inspect
from typing import Any, Callable, Optional

import torch
from torch import nn

from sinpe.torch.diffusers._rebuild import rebuilt
from sinpe.torch.patching import _code as code
from sinpe.torch.patching import _discover as discover
from sinpe.torch.patching._exact import ExactCall
from sinpe.torch.patching import _handle as handle
from sinpe.torch.patching._handle import MethodSwap, Plan
from sinpe.torch.patching._scoped import Entered, Scoped
from sinpe.torch.patching._sources import AngleSource

LIBRARY = "diffusers"
# parameters a positional module may hold itself (learned frequencies, a Fourier
# projection's weights): more is a layer, not a positional module
OWN_PARAMETERS = 1 << 20
EXACT = "exact, kept"  # the handle's word for these stand-ins' caches
SOURCE = "angles and their errors"  # and for the angle sources

def _of_library(obj: Any) -> bool:
    return (type(obj).__module__ or "").startswith(LIBRARY + ".")


def claims(obj: Any) -> bool:
    """Whether ``obj`` is this adapter's: a diffusers pipeline, or a module holding
    diffusers modules."""
    if isinstance(obj, nn.Module):
        return any(_of_library(m) for m in obj.modules())
    return _of_library(obj) and isinstance(getattr(obj, "components", None), dict)


def patch_model(obj: Any, frequencies: str) -> handle.Patch:
    """``sinpe.torch.patch`` of a diffusers model (arguments checked)."""
    return handle.made(lambda: plan(obj, frequencies), LIBRARY)


def plan(obj: Any, frequencies: str) -> Plan:
    """Everything ``sinpe.torch.patch`` will change in a diffusers model or in a
    pipeline's own code (its components are planned by their adapters); ValueError (the
    model unchanged) where sinpe finds no positional code."""
    if frequencies != "model":
        raise ValueError(f'frequencies={frequencies!r}: diffusers models are served with '
                         'their own frequencies (frequencies="model")')
    if isinstance(obj, nn.Module):
        changes = _model_plan(obj)
        if not changes.methods and not changes.functions:
            reasons = "; ".join(f"{what} {why}" for what, why in changes.kept.items())
            raise handle.NothingFound(f"sinpe.torch.patch: {type(obj).__name__} has no positional "
                             f"code that sinpe stands in for" + (f" ({reasons})" if reasons
                                                                  else "")
                             + f"; {handle.NOT_CHANGED}")
        return changes
    return _entries_plan(obj, type(obj).__name__)


def _model_plan(model: nn.Module) -> Plan:
    device = handle.model_place(model)
    changes = Plan()
    positional = positional_modules(model)
    for name, module in positional:
        handle.refuse_patched(module, name)
        what = f"the positional module {name or 'model'} ({type(module).__name__})"
        try:
            cpu, angle = rebuilt(module)
        except ValueError as exc:
            changes.kept[what] = str(exc)
            continue
        call = ExactCall(_own(module, "forward"), _own(cpu, "forward"), _versions(module),
                         angle)
        changes.methods.append(MethodSwap(name, module, "forward", call, EXACT))
        changes.deferred.append((what, call))
        changes.families.add(discover.family_of(type(module).__module__))
    for name, module in angle_sources(model, positional):
        handle.refuse_patched(module, name)
        source = AngleSource(_own(module, "forward"),
                             _own(copy.deepcopy(module).to("cpu"), "forward"))
        changes.methods.append(MethodSwap(name, module, "forward", source, SOURCE))
        changes.deferred.append((f"the angle source {name} ({type(module).__name__})",
                                 source))
    skip = {id(m) for _, m in positional}
    inner = [(name, m) for name, m in model.named_modules() if id(m) not in skip and not any(
        name.startswith(taken + ".") for taken, _ in positional if taken)]
    for name, module in inner:
        _helpers(changes, name, module)
    others = [m for _, m in inner]
    changes.extend(_entries_plan(model, type(model).__name__, classes={type(m) for m in others},
                                 entry=model if others else None))
    for place in discover.apply_globals(model, LIBRARY, handle.SWAPS):
        if not isinstance(getattr(place.module, place.name), Scoped):
            changes.add_function(place, device)
    return changes


def _helpers(changes: Plan, name: str, module: nn.Module) -> None:
    """Plans the stand-ins of a module's positional helpers: the static methods and the
    methods that its ``forward`` calls (Z-Image's ``timestep_embedding``, Stable
    Cascade's ``get_timestep_ratio_embedding``), and the callable objects it holds that
    are no modules (Z-Image's ``RopeEmbedder``), whose code takes a cosine, a sine or
    ``polar``.  A method is one only where its code reads none of the module's tensors
    or submodules: it runs on the CPU on a :func:`_shell` of the module."""
    cls = type(module)
    forward = code.function_of(getattr(cls, "forward", None), LIBRARY)
    called = code.reached(forward, cls, LIBRARY) if forward is not None else set()
    for attribute in dir(cls):
        value = inspect.getattr_static(cls, attribute, None)
        function = code.function_of(value, LIBRARY)
        if (function is None or attribute.startswith("__") or function is forward
                or function not in called or isinstance(value, property)):
            continue
        walked = code.reached(function, cls, LIBRARY)
        if not code.calls_trigonometry(walked):
            continue
        where = f"{name + '.' if name else ''}{attribute}"
        if isinstance(value, (staticmethod, classmethod)):
            cpu_call = getattr(cls, attribute)
        elif not code.names(walked) & _held_names(module):
            cpu_call = function.__get__(_shell(module))
        else:
            continue
        call = ExactCall(getattr(module, attribute), cpu_call)
        changes.methods.append(MethodSwap(where, module, attribute, call, EXACT))
        changes.deferred.append((f"the positional helper {where} of {cls.__name__}", call))
    for attribute, value in list(vars(module).items()):
        if isinstance(value, (nn.Module, torch.Tensor)) or not _of_library(value):
            continue
        if not code.method_reaches_trigonometry(type(value), "__call__", LIBRARY):
            continue
        what = (f"the positional helper {name + '.' if name else ''}{attribute} "
                f"({type(value).__name__})")
        call = ExactCall(value.__call__, _own(copy.deepcopy(value), "__call__"))
        changes.methods.append(MethodSwap(f"{name + '.' if name else ''}{attribute}", module,
                                          attribute, call, EXACT, original=value))
        changes.deferred.append((what, call))


def _held_names(module: nn.Module) -> set[str]:
    """The names of what a module holds that a CPU run must not read: its parameters,
    buffers, submodules and tensors."""
    return {*module._parameters, *module._buffers, *module._modules,
            *(k for k, v in vars(module).items() if isinstance(v, torch.Tensor))}


def _shell(module: nn.Module) -> nn.Module:
    """A module of the same class holding the module's plain attributes (its config,
    its numbers) and no tensor or submodule: what its tensor-free methods run on."""
    shell = type(module).__new__(type(module))
    shell.__dict__.update({k: v for k, v in vars(module).items()
                           if not isinstance(v, torch.Tensor)})
    shell.__dict__.update(_parameters={}, _buffers={}, _modules={})
    return shell


def positional_modules(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The model's positional modules, by name (see the module docstring); a module
    inside one is not listed (the outer one's stand-in runs it)."""
    found: list[tuple[str, nn.Module]] = []
    for name, module in model.named_modules():
        if any(name.startswith(taken + ".") for taken, _ in found if taken):
            continue
        cls = type(module)
        if not _of_library(module):
            continue
        if any(next(child.parameters(), None) is not None for child in module.children()):
            continue
        if sum(p.numel() for p in module.parameters(recurse=False)) > OWN_PARAMETERS:
            continue
        tables = any(isinstance(t, torch.Tensor) and (t.is_floating_point() or t.is_complex())
                     for t in [*module.buffers(), *vars(module).values()])
        if (code.method_reaches_trigonometry(cls, "forward", LIBRARY)
                or (tables and code.method_reaches_trigonometry(cls, "__init__", LIBRARY))):
            found.append((name, module))
    return found


def angle_sources(model: nn.Module, positional: list[tuple[str, nn.Module]]
                  ) -> list[tuple[str, nn.Module]]:
    """The model's angle sources (module docstring), by name; none inside a positional
    module (its stand-in runs it)."""
    found = []
    for name, module in model.named_modules():
        if (not _of_library(module) or any(name.startswith(taken + ".") or name == taken
                                           for taken, _ in positional)
                or next(module.parameters(), None) is not None):
            continue
        forward = code.function_of(getattr(type(module), "forward", None), LIBRARY)
        if forward is None:
            continue
        walked = code.reached(forward, type(module), LIBRARY)
        if code.forms_tables(walked) and not code.calls_trigonometry(walked):
            found.append((name, module))
    return found


def _entries_plan(obj: Any, label: str, classes: Optional[set[type]] = None,
                  entry: Any = None) -> Plan:
    """The positional functions that the library code of ``classes`` (default: ``obj``'s
    class) calls by a global name: swapped, acting inside ``obj``'s own calls (its
    ``forward`` for a model, entered as ``entry``; a pipeline's methods that call them)."""
    changes = Plan()
    methods: list[tuple[Any, str]] = []  # (owner object, method name) to enter
    # (in the classes' names' order: a set's would change the handle's from run to run)
    chosen = classes if classes is not None else {type(obj)}
    for cls in sorted(chosen, key=lambda c: (c.__module__, c.__qualname__)):
        for klass in cls.__mro__:
            if not (klass.__module__ or "").startswith(LIBRARY + "."):
                continue
            for attribute, value in vars(klass).items():
                function = code.function_of(value, LIBRARY)
                if function is None:
                    continue
                calls = False
                for home, name, target in code.named_globals(function, LIBRARY):
                    if not code.calls_trigonometry(code.reached(target, None, LIBRARY)):
                        continue
                    calls = True
                    _scope(changes, discover.Global(home, name), target)
                if calls and entry is None and not isinstance(obj, nn.Module):
                    methods.append((obj, attribute))
    if changes.functions:
        for owner, attribute in ([(entry, "forward")] if entry is not None else methods):
            handle.refuse_patched(owner, label)
            method = getattr(owner, attribute)
            changes.methods.append(MethodSwap(label, owner, attribute, Entered(method), handle.ENTRY))
    return changes


def _scope(changes: Plan, place: discover.Global, original: Callable[..., Any]) -> None:
    """Plans a positional function's scoped swap (once per global; an earlier patch's
    swap is shared)."""
    if place.qualname in {p.qualname for p, *_ in changes.functions}:
        return
    swap = handle.SWAPS.get(place.qualname)
    current = getattr(place.module, place.name)
    if swap is not None and current is swap.replacement:
        changes.functions.append((place, swap.original, swap.replacement, swap.form))
        return
    call = ExactCall(original, original)
    changes.functions.append((place, original, Scoped(original, call), EXACT))
    changes.deferred.append((place.qualname, call))


def _own(module: nn.Module, name: str) -> Callable[..., Any]:
    """``module``'s class's method ``name``, bound to it (not an override)."""
    return getattr(type(module), name).__get__(module)


def _versions(module: nn.Module) -> Callable[[], tuple[Any, ...]]:
    """What a positional module's outputs depend on beside its arguments: its
    parameters (learned frequencies), by identity and version."""
    parameters = list(module.parameters())
    if not parameters:
        return tuple

    def state() -> tuple[Any, ...]:
        return tuple((id(p), p._version) for p in parameters)
    return state
