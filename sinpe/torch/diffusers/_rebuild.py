"""A positional module made again on the CPU, with the tables its constructor makes.

Some positional modules compute their tables once, in ``__init__`` (Wan's and
SkyReels-V2's cos and sin of every position up to ``max_seq_len``), and their forward
slices them.  ``model.to(torch.bfloat16)`` casts those buffers (2e-3 off), and on a Mac
their constructor took the float32 branch.  :func:`rebuilt` makes the module again on
the CPU from its constructor's arguments (read back from the attributes of the same
name, as diffusers' modules keep them), on the float64 branch and with its angles formed
in double (:class:`sinpe.torch.patching._taint.ExactAngles`: its tables exact, rounded
once when the stand-in returns them), and gives it the model's parameters and
persistent buffers; it is held against the model's module
(the same buffers' shapes, and their values where they were not cast).  A module
without floating buffers is copied as it is.
"""

import copy
import inspect
from typing import Any

import torch
from torch import nn

from sinpe.torch.patching._exact import _cpu_branches
from sinpe.torch.patching._taint import ExactAngles

_EXACT_TABLES = (torch.float32, torch.float64, torch.complex64, torch.complex128)


def rebuilt(module: nn.Module) -> tuple[nn.Module, float]:
    """``module`` on the CPU with exact tables (module docstring), and the largest angle
    its constructor took the cosine or sine of (0.0 where it was copied); ValueError
    where its tables were cast and the constructor's arguments cannot be found."""
    tables = {name: b for name, b in [*module.named_buffers(), *vars(module).items()]
              if isinstance(b, torch.Tensor) and (b.is_floating_point() or b.is_complex())}
    copied = copy.deepcopy(module).to("cpu")
    if not tables:
        return copied, 0.0
    try:
        fresh, angle = _constructed(module)
    except Exception as exc:
        if all(t.dtype in _EXACT_TABLES for t in tables.values()):
            return copied, 0.0  # its tables as its constructor made them
        kinds = sorted({str(t.dtype) for t in tables.values()})
        raise ValueError(f"holds tables cast to {', '.join(kinds)} that sinpe cannot make "
                         f"again (its constructor's arguments are not its attributes: "
                         f"{exc}); patch the model before casting it") from None
    own = {**dict(fresh.named_buffers()), **{k: v for k, v in vars(fresh).items()
                                             if isinstance(v, torch.Tensor)}}
    for name, table in tables.items():
        mine = own.get(name)
        if mine is None or mine.shape != table.shape:
            raise ValueError(f"made again from its constructor's arguments, its buffer "
                             f"{name!r} is not the model's (shape "
                             f"{None if mine is None else tuple(mine.shape)}, the model's "
                             f"{tuple(table.shape)})")
    # the model's parameters and persistent buffers (a checkpoint's), the tables made anew
    fresh.load_state_dict(module.state_dict(), strict=False)
    return fresh, angle


def _constructed(module: nn.Module) -> tuple[nn.Module, float]:
    """A new module of ``module``'s class from its constructor's arguments, on the CPU,
    and the largest angle its constructor took the cosine or sine of."""
    cls = type(module)
    arguments: dict[str, Any] = {}
    for parameter in list(inspect.signature(cls.__init__).parameters.values())[1:]:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        if hasattr(module, parameter.name):
            arguments[parameter.name] = getattr(module, parameter.name)
        elif parameter.default is inspect.Parameter.empty:
            raise TypeError(f"no attribute for the argument {parameter.name!r}")
    mode = ExactAngles()
    with _cpu_branches(), torch.device("cpu"), mode:
        made = cls(**arguments)
    return made, mode.angle
