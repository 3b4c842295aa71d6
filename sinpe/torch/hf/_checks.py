"""What sinpe.torch.patch verifies of a transformers rotary module before it changes
anything: never silently wrong.

sinpe's forward (its rotary module made from the module, or the module's own code in
double precision) and a new module of the same class and config (as sinpe's starts:
without the state dynamic rope keeps from the model's earlier calls, with float32
frequencies where ``model.to(dtype)`` cast the model's) give caches of the same
structure, shape, dtype and device, and values within the float32 rounding of HF's own
angles, at positions short of any switch of dynamic or longrope frequencies (which
would move the state of sinpe's module).  Each check returns the reason it failed (""
when it passed).
"""

import copy
import inspect
from typing import Any, Callable, Iterator, Optional

import torch
from torch import nn

from sinpe.torch._verify import caches_differ, check_positions, unswitched_positions
from sinpe.torch.patching._double import caches_differ as double_differs


def _reference(module: nn.Module, device: torch.device) -> nn.Module:
    """A new module of ``module``'s class and config: the caches sinpe's must give (the
    model's may hold dynamic rope's state, or frequencies ``model.to(dtype)`` cast); a
    copy of the module where its class is not made from a config alone."""
    try:
        return type(module)(module.config).to(device)
    except Exception:
        return copy.deepcopy(module)


class _ReferenceFails(Exception):
    """The reference module itself fails on positions a stand-in must take."""


def _layer_types(module: nn.Module) -> list[Optional[str]]:
    """The layer types ``module.forward`` takes (Gemma 3's), else ``[None]``."""
    takes_layer = "layer_type" in inspect.signature(type(module).forward).parameters
    layer_types = sorted(set(getattr(module, "layer_types", None) or [])) if takes_layer else []
    return list(layer_types) or [None]


def _probe_calls(module: nn.Module, reference: nn.Module, layer_type: Optional[str],
                 device: torch.device) -> Iterator[tuple[torch.Tensor, torch.Tensor,
                                                         torch.Tensor, tuple[str, ...], Any]]:
    """``(x, positions, largest, extra, want)`` for each probe of one layer type:
    ``reference(x, positions, *extra)`` is ``want``, float32 and bfloat16 ``x``, positions
    short of any switch; raises :class:`_ReferenceFails` where the reference fails on
    positions it must take (others it does not take are passed over)."""
    extra = () if layer_type is None else (layer_type,)
    count = unswitched_positions(module, layer_type)
    for positions, largest, required in check_positions(module, count, device):
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.zeros((*largest.shape, 8), dtype=dtype, device=device)
            try:
                with torch.no_grad():
                    want = reference(x, positions, *extra)
            except Exception as exc:
                if not required:
                    break  # the module does not take positions of that shape
                raise _ReferenceFails(
                    f"raised {exc!r} on positions {tuple(positions.shape)}") from exc
            yield x, positions, largest, extra, want


def check_double(module: nn.Module, double: Callable[..., Any]) -> str:
    """Why ``double`` (the module's forward in double precision) does not stand in for
    the text rotary ``module`` (``forward(x, position_ids)``), or "": against a copy of
    the module as the model holds it (the double run is its own code)."""
    buffers = list(module.buffers())
    device = buffers[0].device if buffers else torch.device("cpu")
    reference = copy.deepcopy(module)
    try:
        for layer_type in _layer_types(module):
            for x, positions, _, extra, want in _probe_calls(module, reference, layer_type,
                                                             device):
                try:
                    with torch.no_grad():
                        got, angle = double(x, positions, *extra)
                except Exception as exc:
                    return f"cannot be run in double precision ({exc!r})"
                why = double_differs(got, want, angle)
                if why:
                    return why
    except _ReferenceFails as exc:
        return str(exc)
    return ""


def check_rotary(module: nn.Module, forward: Callable[..., Any], fresh: bool = True) -> str:
    """Why ``forward`` does not stand in for the rotary ``module``, or "": a new module of
    its class and config (``fresh``), and the model's module itself where its
    frequencies are still float32 (frequencies changed after loading are the model's)."""
    buffers = list(module.buffers())
    device = buffers[0].device if buffers else torch.device("cpu")
    why = ""
    if fresh:
        try:  # a new one: the model's may hold dynamic rope's state, or cast frequencies
            reference = _reference(module, device)
        except Exception as exc:
            return (f"cannot be made again from its config to check sinpe's caches against "
                    f"({exc!r})")
        why = _check_rotary_against(module, reference, forward, device)
    frequencies = [b for n, b in module.named_buffers() if n.endswith("inv_freq")]
    if not why and frequencies and all(b.dtype is torch.float32 for b in frequencies):
        why = _check_rotary_against(module, copy.deepcopy(module), forward, device)
        if why:
            why = f"(as the model holds it, not as its config makes it) {why}"
    return why


def _check_rotary_against(module: nn.Module, reference: nn.Module, forward: Callable[..., Any],
                          device: torch.device) -> str:
    try:
        for layer_type in _layer_types(module):
            prefix = "" if layer_type is None else f"{layer_type}_"
            inv_freq = getattr(reference, f"{prefix}inv_freq", None)
            scaling = getattr(reference, f"{prefix}attention_scaling", None)
            if not isinstance(inv_freq, torch.Tensor) or not isinstance(scaling, (int, float)):
                return (f"has no {prefix}inv_freq and {prefix}attention_scaling to check "
                        "sinpe's caches against")
            for x, positions, largest, extra, want in _probe_calls(module, reference,
                                                                   layer_type, device):
                try:
                    with torch.no_grad():
                        got = forward(x, positions, *extra)
                except Exception as exc:
                    return f"cannot be stood in for by sinpe's rotary module ({exc!r})"
                why = caches_differ(got, want, largest, inv_freq, float(scaling))
                if why:
                    return why
    except _ReferenceFails as exc:
        return str(exc)
    return ""
