"""What the batteries of tests/families and tests/diffusers share: a model's outputs,
their exact comparisons, and the worker processes each model runs in.

Each stage runs one model per task in two spawned worker processes (a fresh
interpreter: one model's state, threads or swapped globals cannot reach another's),
each with the stage's folder and tests/ on its path, and judges plain data.
"""
from __future__ import annotations

import multiprocessing
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, Callable

import torch

TESTS = Path(__file__).resolve().parents[1]


def tensors(out: Any) -> list[torch.Tensor]:
    """The tensors of a model's output, in order (ModelOutput, dict, tuple, nested)."""
    if isinstance(out, torch.Tensor):
        return [out]
    if hasattr(out, "to_tuple"):
        out = out.to_tuple()
    if isinstance(out, dict):
        out = list(out.values())
    if isinstance(out, (tuple, list)):
        return [t for value in out for t in tensors(value)]
    return []


def first(out: Any) -> torch.Tensor:
    """The model's first floating output (logits, hidden states, a sample), else its first."""
    found = tensors(out)
    if not found:
        raise TypeError("no tensor in the model's output")
    return next((t for t in found if t.is_floating_point()), found[0])


def gap(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def bits(t: torch.Tensor) -> torch.Tensor:
    if not t.is_floating_point():
        return t
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(a), bits(b))


def library_globals(model: torch.nn.Module, prefix: str) -> dict[str, Any]:
    """The callables of the library's modules that ``model``'s classes come from."""
    modules = {sys.modules[type(m).__module__] for m in model.modules()
               if type(m).__module__.startswith(prefix)}
    return {f"{m.__name__}.{k}": v for m in modules for k, v in vars(m).items() if callable(v)}


class Snapshot:
    """What ``undo()`` must give back of a model (taken before the patch): its
    state_dict's values, its module tree, the globals of the library's modules
    (``prefix``: their package's, with the dot)."""

    def __init__(self, model: torch.nn.Module, prefix: str) -> None:
        self.prefix = prefix
        self.state = {k: v.detach().clone() for k, v in model.state_dict().items()}
        self.modules = [(name, id(m)) for name, m in model.named_modules()]
        self.globals = library_globals(model, prefix)

    def undone(self, model: torch.nn.Module) -> dict[str, bool]:
        """Whether each is given back."""
        return {
            "state_dict": all(same(v, model.state_dict()[k]) for k, v in self.state.items()),
            "modules": self.modules == [(name, id(m)) for name, m in model.named_modules()],
            "globals": library_globals(model, self.prefix) == self.globals,
        }


class CannotBuild(Exception):
    """The library itself cannot build the model here: ``result`` says why."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(result["why"])
        self.result = result


def started(build: Callable[[], Any]) -> tuple[Any, float]:
    """A battery's run begun: one torch thread (two worker processes share the CPU), the
    clock, and what ``build()`` gives; :class:`CannotBuild` where it raises."""
    torch.set_num_threads(1)
    start = time.time()
    try:
        return build(), start
    except Exception as exc:  # noqa: BLE001 - the library itself cannot build it here
        raise CannotBuild({"status": "cannot build",
                           "why": str(exc).splitlines()[0][:300]}) from None


# the paths each model is patched on, in turn: the CPU kernel's, and the device path
# (every device but the CPU; sinpe.torch._tensors.DEVICE_PATH_FORCED, as
# SINPE_TORCH_PATH=device sets it) on the CPU: one build and one reference for both
PATHS = ("kernel", "device")


def on_paths(common: dict[str, Any], parts: dict[str, dict[str, Any]], outputs: tuple[str, ...],
             start: float) -> dict[str, Any]:
    """A model's result: ``common`` (what both paths share) with the kernel path's
    ``part``, and the device path's under ``"device"``; the parts' ``outputs`` (tensors
    kept for the comparisons) dropped, the seconds since ``start`` added."""
    import time

    for part in parts.values():
        for name in outputs:
            part.pop(name, None)
    result = {**common, **parts["kernel"], "device": {**common, **parts["device"]}}
    result["seconds"] = round(time.time() - start, 2)
    return result


def on_path(result: dict[str, Any], path: str) -> dict[str, Any]:
    """A model's result on ``path`` (:func:`on_paths`' kernel result, or its device
    path's)."""
    return result if path == "kernel" or "device" not in result else result["device"]


def _worker_path(folder: str) -> None:
    sys.path[:0] = [folder, str(TESTS)]


def reported(run: Callable[[str], dict], name: str) -> dict:
    """``run(name)``; an exception anywhere in it is the result ``"crash"`` with its
    traceback (the test of that model reports it)."""
    try:
        return run(name)
    except Exception:  # noqa: BLE001 - reported as data
        import traceback

        return {"status": "crash", "why": traceback.format_exc()[-3000:]}


def run_all(folder: Path, names: list[str], run: Callable[[str], dict]) -> dict[str, dict]:
    """``run(name)`` for every name (:func:`reported`), in two worker processes, by name."""
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=context, initializer=_worker_path,
                             initargs=(str(folder),)) as pool:
        futures = {name: pool.submit(reported, run, name) for name in names}
        return {name: future.result() for name, future in futures.items()}


def write_table(table: Path, render: Callable[[dict], str], folder: Path, names: str,
                battery: str) -> None:
    """A stage's documentation page, rendered from its battery's run (``battery``: the
    module of the stage's folder whose ``run`` runs a model) of every model ``names``
    lists (``"module.function"`` of the stage's folder).  The stages' modules have names
    of their own: pytest runs both folders in one process, where one ``table`` or
    ``battery`` would stand for the other's."""
    import importlib

    sys.path[:0] = [str(folder), str(TESTS)]
    module, function = names.rsplit(".", 1)
    listed = getattr(importlib.import_module(module), function)()
    table.write_text(render(run_all(folder, listed, importlib.import_module(battery).run)))
    print(f"wrote {table}")
