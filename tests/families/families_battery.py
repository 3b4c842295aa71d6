"""One family of transformers through sinpe.torch.patch, measured (run in a worker process).

:func:`run` builds the family's tiny random-init model (:mod:`tiny`), runs it as
transformers has it, patches it, runs it patched, undoes the patch and runs it again, on
each path in turn (the CPU kernel's, and the device path's: every device but the CPU,
run here on the CPU), and returns plain numbers and strings for the tests of
``test_every_family`` to judge:

- the outputs at positions ``0 .. 63`` (the model's own inputs: for text models 64
  tokens with ``position_ids`` ``0 .. 63``) and, for models that take ``position_ids``,
  at ``2**17 .. 2**17 + 63``: HF's, the patched model's, and an exact reference's;
- the exact reference: the model in float64 whose rotary modules run their own code with
  every float32 value they make computed in float64 (:class:`InDouble`), and whose
  sin/cos tables (GPT-J's) are made in float64: the model's function with its own
  frequencies and exact angles.  Nothing of sinpe is in it;
- after ``undo()``: whether the outputs, the state_dict, the module tree and the modeling
  modules' globals are transformers' again, bit for bit and object for object.

At positions near 2**17 the query and key projections are scaled by 8, so that
attention is sharp and the positions move the outputs well above float32 noise (at
transformers' default initialisation their effect is of the order of the noise); at
positions 0..63 the model is as built (sharp attention also amplifies float32 noise,
which would blur the comparison with HF's own).
"""
from __future__ import annotations

import copy
from typing import Any

import torch
import tiny
from reference.batteries import PATHS, CannotBuild, Snapshot, first, gap, on_paths, same, started
from reference.in_double import InDouble

FAR = 2**17
LENGTH = 64
def _is_rotary(module: torch.nn.Module) -> bool:
    holds = any(key.endswith("inv_freq") and isinstance(value, torch.Tensor)
                for key, value in [*vars(module).items(), *module._buffers.items()])
    name = type(module).__name__.lower()
    return next(module.parameters(), None) is None and (
        holds or "rotary" in name or "rope" in name)


def _sinusoid_table(rows: int, width: int) -> torch.Tensor:
    """GPT-J's ``create_sinusoidal_positions`` with its float32 frequencies, in float64."""
    inv_freq = 1.0 / (10000 ** (torch.arange(0, width, 2, dtype=torch.int64) / width).float())
    angles = torch.arange(rows, dtype=torch.float64)[:, None] * inv_freq.double()
    return torch.cat((angles.sin(), angles.cos()), dim=1)


def reference(model: torch.nn.Module) -> torch.nn.Module:
    """The exact function the float32 models approximate (see the module's docstring)."""
    exact = copy.deepcopy(model).double()
    if hasattr(exact, "set_experts_implementation"):
        try:  # torch's grouped matmul takes no float64
            exact.set_experts_implementation("eager")
        except Exception:  # noqa: BLE001 - a model without that choice
            pass
    for module in exact.modules():
        if _is_rotary(module):
            forward = module.forward

            def in_double(*args: Any, _forward: Any = forward, **kwargs: Any) -> Any:
                with InDouble():
                    return _forward(*args, **kwargs)

            module.forward = in_double
        table = module._buffers.get("embed_positions")
        if isinstance(table, torch.Tensor) and table.dim() == 2:
            module._buffers["embed_positions"] = _sinusoid_table(*table.shape)
    return exact


def _projections(model: torch.nn.Module) -> list[torch.nn.Parameter]:
    """The query and key projections' weights (by the names transformers gives them)."""
    return [module.weight for name, module in model.named_modules()
            if isinstance(module, torch.nn.Linear) and name.rsplit(".", 1)[-1] in (
                "q_proj", "k_proj", "query", "key", "wq", "wk", "q", "k")]


class _Sharp:
    """Within the block the query and key projections are 8 times larger (sharp attention:
    the positions move the outputs well above float32 noise).  8 is a power of two, so
    the weights are the same bits again after the block."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.weights = _projections(model)

    def __enter__(self) -> None:
        with torch.no_grad():
            for weight in self.weights:
                weight.mul_(8)

    def __exit__(self, *exc: object) -> None:
        with torch.no_grad():
            for weight in self.weights:
                weight.div_(8)


def _outputs(model: torch.nn.Module, inputs: dict[str, Any], far: bool = False,
             double: bool = False) -> torch.Tensor:
    feed = dict(inputs)
    if far:
        feed = {k: (v + FAR if k.endswith("position_ids") else v) for k, v in feed.items()}
    if double:
        feed = {k: (v.double() if isinstance(v, torch.Tensor) and v.is_floating_point() else v)
                for k, v in feed.items()}
    with torch.no_grad():
        return first(model(**feed)).detach().clone()


def _through_patch(model: torch.nn.Module, inputs: Any, sharp: _Sharp, hf: Any,
                   far: bool, before: Snapshot) -> dict[str, Any]:
    """The model patched on the path :data:`PATHS` set, run (at positions 0..63, and
    near 2**17 with ``far``) and undone: what the tests judge of that path, and the
    outputs (``patched``, ``patched_far``) for the comparisons."""
    import sinpe.torch as st

    try:
        handle = st.patch(model)
    except ValueError as exc:
        return {"status": "refused", "why": str(exc)}
    part: dict[str, Any] = {
        "status": "served", "rotary": list(handle.rotary), "forms": dict(handle.forms),
        "caches": dict(handle.caches), "first_call": list(handle.checked_at_first_call),
        "patched": None, "patched_far": None}
    try:
        part["patched"] = _outputs(model, inputs) if inputs else None
        if far:
            with sharp:
                part["patched_far"] = _outputs(model, inputs, far=True)
    finally:
        handle.undo()
    part["kept"] = dict(handle.kept)
    part["undo"] = {
        "outputs": hf is None or same(_outputs(model, inputs), hf),
        **before.undone(model),
        "overrides": not any("forward" in vars(m) and "sinpe" in type(vars(m)["forward"]).__module__
                             for m in model.modules()),
    }
    return part


def run(family: str) -> dict[str, Any]:
    """What the stage's tests judge about one family (plain data): the kernel path's
    result, with the device path's (the same model and references, patched again) under
    ``"device"``."""
    from sinpe.torch import _tensors

    try:
        (model, _, info), start = started(lambda: tiny.build(family, length=LENGTH))
    except CannotBuild as exc:
        return exc.result
    inputs = info.get("inputs") if info.get("forward_ok") else None
    common: dict[str, Any] = {"kind": info.get("kind", "none"), "class": type(model).__name__}
    before = Snapshot(model, "transformers.models.")
    sharp = _Sharp(model)
    hf = _outputs(model, inputs) if inputs else None
    hf_far = None
    if inputs and info.get("position_ids"):
        try:
            with sharp:
                hf_far = _outputs(model, inputs, far=True)
        except Exception as exc:  # noqa: BLE001 - beyond the model's positions (GPT-J's table)
            common["far"] = f"transformers' own model raises there ({type(exc).__name__})"
    parts = {}
    for path in PATHS:
        _tensors.DEVICE_PATH_FORCED = path == "device"
        parts[path] = _through_patch(model, inputs, sharp, hf, hf_far is not None, before)
    served = [part for part in parts.values() if part["status"] == "served"]
    if hf is not None and not hf.is_floating_point():
        common["output"] = f"{hf.dtype} (codes: no float32 noise to hold it to)"
    elif hf is not None and served and served[0]["patched"] is not None:
        eps = torch.finfo(hf.dtype).eps
        try:
            exact = reference(model)
            ref = _outputs(exact, inputs, double=True)
            common["floor"] = 2 * eps * float(ref.abs().max())
            common["hf_error"] = gap(hf, ref)
            for part in served:
                part["finite"] = bool(torch.isfinite(part["patched"]).all())
                part["patched_error"] = gap(part["patched"], ref)
            if served[0]["patched_far"] is not None:
                with _Sharp(exact):
                    ref_far = _outputs(exact, inputs, far=True, double=True)
                    ref_sharp = _outputs(exact, inputs, double=True)
                with sharp:
                    hf_sharp = _outputs(model, inputs)
                common["far_floor"] = 2 * eps * float(ref_far.abs().max())
                common["far_hf_error"] = gap(hf_far, ref_far)
                common["sharp_noise"] = gap(hf_sharp, ref_sharp)
                for part in served:
                    part["far_patched_error"] = gap(part["patched_far"], ref_far)
        except Exception as exc:  # noqa: BLE001 - a model that cannot run in float64
            common["reference"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return on_paths(common, parts, ("patched", "patched_far"), start)
