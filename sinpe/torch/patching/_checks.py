"""What sinpe.torch.patch verifies of a function or a table before it changes anything:
never silently wrong.  Shared by the libraries' adapters (:mod:`sinpe.torch.hf`,
:mod:`sinpe.torch.diffusers`).

- An apply function is recognised by what it does: it runs on every probe of
  :mod:`sinpe.torch.patching._probes`, and the first form of
  :data:`sinpe.torch.patching._forms.FORMS` that gives its result (bits, dtype, shape,
  strides and device) on every probe it accepts stands in for it.  None: the function
  stays the library's own, and the reason says what differed.
- A table kept in a module (GPT-J's sin/cos ``embed_positions``): a 2-D float buffer
  holding the values of such a table within the float32 rounding of its own angles.

Each check returns the reason it failed ("" when it passed); the adapters turn the
reasons into the handle's report or the ValueError that refuses a model.
"""

import inspect
from dataclasses import dataclass
from typing import Any, Callable, Optional

import numpy as np
import torch

import sinpe
from sinpe.torch._verify import tolerance
from sinpe.torch.patching._forms import FORMS, Form
from sinpe.torch.patching._probes import Probe, probes

# parameters an apply function may take that no form needs: transformers passes them
# and ignores them (``position_ids``), or collects anything (``**kwargs``)
_IGNORED = ("position_ids",)


def same(got: Any, want: Any) -> bool:
    """Bits, dtype, shape, strides and device; tuples element by element."""
    if isinstance(want, (tuple, list)):
        return (type(got) is type(want) and len(got) == len(want)
                and all(same(g, w) for g, w in zip(got, want)))
    if not isinstance(want, torch.Tensor) or not isinstance(got, torch.Tensor):
        return got is want
    if (got.dtype != want.dtype or got.shape != want.shape or got.device != want.device
            or got.stride() != want.stride()):
        return False
    if not want.is_floating_point():
        return torch.equal(got, want)
    width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[want.element_size()]
    return torch.equal(got.view(width), want.view(width))


@dataclass
class Recognised:
    """An apply function and the form that stands in for it (None: no form does)."""

    form: Optional[Form]
    replacement: Optional[Callable[..., Any]]
    reason: str = ""


def recognise_function(original: Callable[..., Any], device: torch.device) -> Recognised:
    """The first form that gives ``original``'s result on every probe it accepts."""
    accepted: list[tuple[Probe, Any]] = []
    with torch.no_grad():
        for probe in probes(device):
            try:
                accepted.append((probe, original(*probe.args, **probe.kwargs)))
            except Exception:  # the function does not take this kind of call
                continue
    if not accepted:
        return Recognised(None, None, "takes none of the calls apply functions take")
    reasons = []
    for form in FORMS:
        replacement = adapted(form.function, original)
        if replacement is None:
            continue
        why = _differs(replacement, accepted)
        if not why:
            return Recognised(form, replacement)
        reasons.append(f"{form.name}: {why}")
    return Recognised(None, None, "no form of sinpe gives its result ("
                      + "; ".join(reasons[:3]) + (", ..." if len(reasons) > 3 else "") + ")")


def _differs(replacement: Callable[..., Any], accepted: list[tuple[Probe, Any]]) -> str:
    with torch.no_grad():
        for probe, want in accepted:
            try:
                got = replacement(*probe.args, **probe.kwargs)
            except Exception as exc:
                return f"raised {type(exc).__name__} on {probe.describe()}"
            if not same(got, want):
                return f"another result on {probe.describe()}"
    return ""


def adapted(form: Callable[..., Any], original: Callable[..., Any]
            ) -> Optional[Callable[..., Any]]:
    """``form`` callable as ``original`` is called: ``form`` itself where their
    parameters have the same names, order and defaults; else a function that takes
    ``original``'s arguments and passes ``form`` those it names (by name), dropping
    the ones transformers ignores; None where ``original`` takes an argument ``form``
    has no place for."""
    try:
        mine = inspect.signature(form).parameters
        theirs = inspect.signature(original).parameters
    except (TypeError, ValueError):
        return None
    if [(p.name, p.kind, p.default) for p in mine.values()] == [
            (p.name, p.kind, p.default) for p in theirs.values()]:
        return form
    names = []
    for parameter in theirs.values():
        if parameter.kind is inspect.Parameter.VAR_KEYWORD:
            continue
        if parameter.kind is inspect.Parameter.VAR_POSITIONAL:
            return None
        if parameter.name not in mine and parameter.name not in _IGNORED:
            return None
        names.append(parameter.name)
    defaults = {p.name: p.default for p in theirs.values()
                if p.default is not inspect.Parameter.empty}
    takes = {name for name in mine}
    swallow = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in theirs.values())

    def adapter(*args: Any, **kwargs: Any) -> Any:
        if len(args) > len(names):
            raise TypeError(f"{original.__name__}() takes {len(names)} positional arguments "
                            f"but {len(args)} were given")
        given = dict(defaults)
        given.update(zip(names, args))
        for key, value in kwargs.items():
            if key not in names and not swallow:
                raise TypeError(f"{original.__name__}() got an unexpected keyword argument "
                                f"{key!r}")
            given[key] = value
        return form(**{key: value for key, value in given.items() if key in takes})

    adapter.__name__ = original.__name__
    adapter.__qualname__ = getattr(original, "__qualname__", original.__name__)
    adapter.__doc__ = form.__doc__
    return adapter


def sinusoid_table(table: torch.Tensor) -> Optional[torch.Tensor]:
    """GPT-J's sin/cos table exact, if ``table`` is one (else None): ``cat(sin, cos)`` of
    ``p * w`` for rows ``p``, with the frequencies ``w`` of its
    ``create_sinusoidal_positions`` (``10000 ** (-2k / r)`` in float32), the angles in
    double; float64, on the CPU.  ``table`` is one if it has those values within the
    float32 rounding of its own angles."""
    rows, width = table.shape
    if width % 2:
        return None
    inv_freq = 1.0 / (10000 ** (torch.arange(0, width, 2, dtype=torch.int64) / width).float())
    cos, sin = sinpe.rope(rows, width, freq=inv_freq.double().numpy(), dtype=np.float64)
    half = width // 2
    exact = torch.from_numpy(np.concatenate([sin[:, :half], cos[:, :half]], axis=1))
    bound = tolerance(torch.arange(rows), inv_freq, 1.0, table.dtype)
    if not bool(((exact - table.detach().to("cpu", torch.float64)).abs() <= bound).all()):
        return None
    return exact
