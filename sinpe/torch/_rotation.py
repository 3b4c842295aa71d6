"""One rotation's arguments and how it runs: what sinpe.torch's rotations share.

:class:`_Rotation` holds the arguments of one call of :func:`sinpe.torch.rope_` or
:func:`sinpe.torch.rope` (with host copies of ``positions`` and ``freq``) and runs
it: by the kernel on CPU memory, by torch's own ops with the same formula
elsewhere.  :func:`_rotate_half` is the partner of each feature in either pair
layout, which HF's apply functions (:mod:`sinpe.torch._apply`) use too.  Below
both the eager functions (:mod:`sinpe.torch._rope`) and the custom ops that
torch.compile and torch.export see (:mod:`sinpe.torch._ops`).
``_kernel_writes`` is read from :mod:`sinpe.torch._tensors` at each call, so that
the tests can force torch's path.
"""

import operator
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray
import torch

import sinpe
from sinpe.torch import _tensors
from sinpe.torch._tensors import (
    _DTYPES,
    _SUPPORTED,
    _host_array,
    _host_sections,
    _memory,
    _round_once,
)


def _check_rotatable(tensor: object, name: str) -> None:
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout is not torch.strided:
        raise TypeError(f"{name} must be a dense (strided) tensor, got layout {tensor.layout}")
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"{name} must have dtype {_SUPPORTED}, got {tensor.dtype}")


class _Rotation:
    """The arguments of one rotation, checked by sinpe and with host copies of
    ``positions`` and ``freq``: what :func:`rope_` and :class:`_Rope` share."""

    __slots__ = ("n", "offset", "axis", "positions", "layout", "freq", "rotary_dim", "scale",
                 "exact", "sections", "sections_layout")

    def __init__(self, n: Optional[float], offset: Optional[int], axis: Optional[int],
                 positions: object, layout: str, freq: object, rotary_dim: Optional[int],
                 scale: float, exact: bool, sections: object = None,
                 sections_layout: Optional[str] = None) -> None:
        self.n = n
        self.offset = offset
        self.axis = axis
        self.positions = None if positions is None else _host_array(positions, "positions")
        self.layout = layout
        self.freq = None if freq is None else _host_array(freq, "freq")
        self.rotary_dim = rotary_dim
        self.scale = scale
        self.exact = exact
        self.sections = _host_sections(sections)
        self.sections_layout = sections_layout

    def kwargs(self) -> dict[str, Any]:
        """The keywords sinpe takes, only those given (its defaults and exclusions apply)."""
        given: dict[str, Any] = {"layout": self.layout, "rotary_dim": self.rotary_dim,
                                 "scale": self.scale, "exact": self.exact}
        if self.n is not None:
            given["n"] = self.n
        if self.freq is not None:
            given["freq"] = self.freq
        if self.positions is not None:
            given["positions"] = self.positions
        if self.offset is not None:
            given["offset"] = self.offset
        if self.axis is not None:
            given["axis"] = self.axis
        given.update(self.section_kwargs())
        return given

    def section_kwargs(self) -> dict[str, Any]:
        """``sections``/``sections_layout``, only those given."""
        given: dict[str, Any] = {}
        if self.sections is not None:
            given["sections"] = self.sections
        if self.sections_layout is not None:
            given["sections_layout"] = self.sections_layout
        return given

    def check(self, tensor: torch.Tensor) -> None:
        """sinpe's own checks, with its messages, against ``tensor``'s shape and dtype.

        The probe is a zero-stride NumPy view of one element: nothing of the
        tensor's size is allocated, nothing is written.
        """
        probe = np.lib.stride_tricks.as_strided(
            np.zeros(1, np.float64 if tensor.dtype is torch.float64 else np.float32),
            tuple(tensor.shape), (0,) * tensor.dim())
        sinpe._core._rope_into(None, probe, **self.kwargs())

    def run(self, out: Optional[torch.Tensor], source: torch.Tensor, inverse: bool) -> None:
        """``out`` (or ``source`` itself, in place) = the rotation of ``source``."""
        if out is None and _tensors._kernel_writes(source):  # in place (never inverse)
            sinpe._core._rope_into(_memory(source), None, **self.kwargs())
            torch.autograd.graph.increment_version(source)
            return
        if out is not None and _tensors._kernel_writes(out) and _tensors._kernel_writes(source):
            sinpe._core._rope_into(_memory(out), _memory(source), inverse=inverse,
                                   **self.kwargs())
            return
        self.check(source)
        if source.numel() == 0:
            return
        rotated = self.by_torch(source, inverse)
        with torch.no_grad():
            if out is None:
                source[..., : rotated.shape[-1]].copy_(rotated)
            else:
                out[..., : rotated.shape[-1]].copy_(rotated)
                out[..., rotated.shape[-1]:].copy_(source[..., rotated.shape[-1]:])

    def caches(self, tensor: torch.Tensor) -> tuple[NDArray[Any], NDArray[Any]]:
        """float64 ``(cos, sin)`` of sinpe, times scale, shaped to broadcast against
        ``tensor[..., :rotary_dim]``."""
        ndim = tensor.dim()
        width = tensor.shape[-1] if self.rotary_dim is None else operator.index(self.rotary_dim)
        common: dict[str, Any] = {"dtype": np.float64, "layout": self.layout}
        if self.freq is not None:
            common["freq"] = self.freq
        elif self.n is not None:
            common["n"] = self.n
        if self.positions is None:
            axis = operator.index(-2 if self.axis is None else self.axis) % ndim
            offset = 0 if self.offset is None else self.offset
            cos, sin = sinpe.rope(tensor.shape[axis], width, offset=offset, **common)
            shape = [1] * ndim
            shape[axis], shape[-1] = tensor.shape[axis], width
        else:  # with sections, positions lead with one row per section
            positions = np.asarray(self.positions)
            cos, sin = sinpe.rope(None, width, positions=positions, **common,
                                  **self.section_kwargs())
            rows = list(cos.shape[:-1])
            shape = [1] * (ndim - 1 - len(rows)) + rows + [width]
        scale = float(self.scale)
        return (cos * scale).reshape(shape), (sin * scale).reshape(shape)

    def by_torch(self, tensor: torch.Tensor, inverse: bool) -> torch.Tensor:
        """The rotated features of ``tensor``, by torch's ops on its device: the
        kernel's formula, with the caches rounded once to the dtype (default), or
        in float64 with the result rounded once (exact)."""
        cos, sin = self.caches(tensor)
        if inverse:
            sin = -sin
        width = cos.shape[-1]
        x = tensor[..., :width]
        device = tensor.device
        if self.exact or tensor.dtype is torch.float64:
            c, s = (torch.from_numpy(a).to(device) for a in (cos, sin))
            wide = x.double()
            return _round_once(wide * c + _rotate_half(wide, self.layout) * s, tensor.dtype)
        c, s = (_round_once(torch.from_numpy(a), tensor.dtype).to(device) for a in (cos, sin))
        return x * c + _rotate_half(x, self.layout) * s


def _rotate_half(x: torch.Tensor, layout: str) -> torch.Tensor:
    """HF's ``rotate_half`` (concatenated) or GPT-J's ``rotate_every_two`` (interleaved)."""
    if layout == "interleaved":
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
