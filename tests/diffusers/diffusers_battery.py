"""One diffusers model class through sinpe.torch.patch, measured (run in a worker process).

:func:`run` builds the class's tiny random-init model (:mod:`dtiny`: generic rules, no
per-model values), runs it as diffusers has it, patches it, runs it patched (two
denoising steps: the model's own inputs, then again at other timesteps), undoes the
patch and runs it again, on each path in turn (the CPU kernel's, and the device path's:
every device but the CPU, run here on the CPU), and returns plain numbers and strings
for ``test_every_model`` to judge:

- the outputs: diffusers' own, the patched model's, and an exact reference's: the
  model in float64 running its own code with every float32 value it makes computed in
  float64 (:class:`reference.in_double.InDouble`: its positional code with exact
  angles), nothing of sinpe in it;
- what the patch did: the modules it stands in for and how (``caches``), the functions
  it swapped, what it kept and why;
- the host reads (``aten._local_scalar_dense``, ``Tensor.numpy``, ``Tensor.tolist``)
  of a later step, patched and diffusers' own: a denoising step on the device path
  reads nothing more than diffusers' own;
- after ``undo()``: whether the outputs, the state_dict, the module tree and the
  modeling modules' globals are diffusers' again, bit for bit and object for object.
"""
from __future__ import annotations

import copy
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import dtiny
from reference.batteries import (
    PATHS, CannotBuild, Snapshot, first, gap, on_paths, same, started, tensors,
)
from reference.in_double import InDouble



def _later(inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs of a later denoising step: the timesteps moved, the rest as they are."""
    feed = dict(inputs)
    for key, value in inputs.items():
        if "timestep" in key and isinstance(value, torch.Tensor) and value.is_floating_point():
            feed[key] = value * 0.5 + 3.25
    return feed


def _in_double(value: Any) -> Any:
    """An input in float64: its floating tensors, also inside lists (Z-Image's images)."""
    if isinstance(value, torch.Tensor):
        return value.double() if value.is_floating_point() else value
    if isinstance(value, (list, tuple)):
        return type(value)(_in_double(v) for v in value)
    return value


def _outputs(model: torch.nn.Module, inputs: dict[str, Any], double: bool = False
             ) -> torch.Tensor:
    feed = {k: _in_double(v) for k, v in inputs.items()} if double else dict(inputs)
    with torch.no_grad():
        if double:
            with InDouble():
                return first(model(**feed)).detach().clone()
        return first(model(**feed)).detach().clone()


class _Reads(TorchDispatchMode):
    """Host reads of tensor values: ``aten._local_scalar_dense`` (``.item()``, ``bool``),
    and ``Tensor.numpy``/``Tensor.tolist`` (no dispatch of their own), counted."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __enter__(self) -> "_Reads":
        self._saved = (torch.Tensor.numpy, torch.Tensor.tolist)
        for name, original in zip(("numpy", "tolist"), self._saved):
            def counted(tensor: Any, *a: Any, _original: Any = original, **k: Any) -> Any:
                self.count += 1
                return _original(tensor, *a, **k)
            setattr(torch.Tensor, name, counted)
        return super().__enter__()

    def __exit__(self, *exc: Any) -> Any:
        torch.Tensor.numpy, torch.Tensor.tolist = self._saved  # type: ignore[method-assign]
        return super().__exit__(*exc)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        if func is torch.ops.aten._local_scalar_dense.default:
            self.count += 1
        return func(*args, **(kwargs or {}))


def _reads(model: torch.nn.Module, inputs: dict[str, Any]) -> Any:
    """The host reads of a forward; None where a dispatch mode cannot watch it (flex
    attention's higher-order operator refuses one)."""
    try:
        with torch.no_grad(), _Reads() as reads:
            model(**inputs)
    except Exception:  # noqa: BLE001 - not watchable: the model's own error, outside
        torch._dynamo.reset()  # flex attention's compile, failed under the mode, is cached
        return None
    return reads.count


def _by_value(model: torch.nn.Module) -> list[str]:
    """The stand-ins that read their positions' values and are no columns form: on a
    device they are kept by the positions tensor's identity, and a model that makes its
    positions anew at every step has them computed on the host at every step."""
    import sys

    from sinpe.torch.patching._exact import ExactCall

    held = [(f"{name}.{attr}".strip("."), value) for name, m in model.named_modules()
            for attr, value in vars(m).items()]
    homes = {sys.modules[type(m).__module__] for m in model.modules()}
    held += [(f"{home.__name__}.{attr}", value) for home in homes
             for attr, value in vars(home).items()]
    return sorted({name for name, value in held
                   if isinstance(call := getattr(value, "call", None), ExactCall)
                   and call.checked and call.by_value and call.columns is None
                   and not call.inline})


def _through_patch(model: torch.nn.Module, unrun: str, inputs: Any, later: Any, own: Any,
                   before: Snapshot) -> dict[str, Any]:
    """The model patched on the path :data:`PATHS` set, run for two denoising steps and
    a third (its host reads) and undone: what the tests judge of that path, and the
    outputs (``patched``, ``patched_later``) for the comparisons."""
    import sinpe.torch as st

    attributes = [(n, sorted(vars(m))) for n, m in model.named_modules()]
    try:
        handle = st.patch(model)
    except ValueError as exc:
        return {"status": "refused", "why": str(exc)}
    part: dict[str, Any] = {}
    try:
        if not unrun:
            part["patched"] = _outputs(model, inputs)
            part["patched_later"] = _outputs(model, later)
            part["patched_reads"] = _reads(model, _later(later))  # a third step: all kept
            part["by_value"] = _by_value(model)
            part.update(_forms(model))
    finally:
        handle.undo()
    part.update(status="served", rotary=list(handle.rotary), functions=list(handle.functions),
                forms=dict(handle.forms), caches=dict(handle.caches), kept=dict(handle.kept),
                first_call=list(handle.checked_at_first_call))
    part["undo"] = {
        **before.undone(model),
        "overrides": attributes == [(n, sorted(vars(m))) for n, m in model.named_modules()],
    }
    if not unrun:
        part["undo"]["outputs"] = same(_outputs(model, inputs), own)
    return part


def _forms(model: torch.nn.Module) -> dict[str, list[str]]:
    """The patched modules (their names, as the handle's ``rotary`` gives them) whose
    stand-ins took the columns form or the inline form (with their tables of angles
    formed again: "tables"; with the angles formed from their inputs carried exactly:
    "formed") at their first call, and the angle sources checked ("source")."""
    from sinpe.torch.patching._exact import ExactCall
    from sinpe.torch.patching._sources import AngleSource

    found: dict[str, list[str]] = {"columns": [], "inline": [], "tables": [], "formed": [],
                                   "source": []}
    for name, module in model.named_modules():
        for attribute, value in vars(module).items():
            call = getattr(value, "call", None)
            if not isinstance(call, (ExactCall, AngleSource)) or not call.checked:
                continue
            where = name if attribute == "forward" else f"{name}.{attribute}".strip(".")
            if isinstance(call, AngleSource):
                found["source"].append(where)
            elif call.columns is not None:
                found["columns"].append(where)
            elif call.inline:
                form = ("tables" if call.tables is not None else
                        "formed" if call.followed or call.follows_made else "inline")
                found[form].append(where)
    return found


def run(name: str) -> dict[str, Any]:
    """What the stage's tests judge about one class (plain data): the kernel path's
    result, with the device path's (the same model and references, patched again) under
    ``"device"``."""
    from sinpe.torch import _tensors

    try:
        (model, info), start = started(lambda: dtiny.build(name, compare=False))
    except CannotBuild as exc:
        return exc.result
    unrun = "" if info.get("forward_ok") else str(info.get("error", ""))[:300]
    if not unrun:
        with torch.no_grad():
            if not tensors(model(**info["inputs"])):
                unrun = "its forward returns no tensor"
    common: dict[str, Any] = {"kinds": sorted(info.get("kinds", [])), "class": name}
    if unrun:  # patched and undone all the same: what patch finds needs no forward
        common["unrun"] = unrun
    before = Snapshot(model, "diffusers.")
    inputs = later = own = own_later = own_reads = None
    if not unrun:
        inputs = info["inputs"]
        later = _later(inputs)
        own = _outputs(model, inputs)
        own_later = _outputs(model, later)
        own_reads = _reads(model, later)
    parts = {}
    for path in PATHS:
        _tensors.DEVICE_PATH_FORCED = path == "device"
        parts[path] = _through_patch(model, unrun, inputs, later, own, before)
    served = [part for part in parts.values() if part["status"] == "served"]
    if not unrun:
        for part in served:
            part["reads"] = {"diffusers": own_reads, "patched": part.pop("patched_reads")}
        if not own.is_floating_point():
            common["output"] = f"{own.dtype} (codes: no float32 noise to hold it to)"
        elif served:
            eps = torch.finfo(own.dtype).eps
            for part in served:
                part["finite"] = bool(torch.isfinite(part["patched"]).all()
                                      and torch.isfinite(part["patched_later"]).all())
            try:
                exact = copy.deepcopy(model).double()
                for step, (theirs, feed) in enumerate(((own, inputs), (own_later, later))):
                    ref = _outputs(exact, feed, double=True)
                    common.setdefault("floor", []).append(2 * eps * float(ref.abs().max()))
                    common.setdefault("diffusers_error", []).append(gap(theirs, ref))
                    for part in served:
                        ours = part["patched" if step == 0 else "patched_later"]
                        part.setdefault("patched_error", []).append(gap(ours, ref))
            except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64
                common["reference"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return on_paths(common, parts, ("patched", "patched_later"), start)
