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
from sinpe.torch._angles import (
    angles_of,
    frequencies_of,
    pair_caches,
    pair_rows,
    schedule_frequencies,
)
from sinpe.torch._tensors import (
    _DTYPES,
    _SUPPORTED,
    _device_path,
    _float64_on,
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
    """The arguments of one rotation, checked by sinpe: what :func:`rope_` and
    :class:`_Rope` share.  ``positions`` stays as given (read on the host for the
    kernel, on its device for the device path); ``freq`` is read as a double array
    (a tensor on a device once: :func:`sinpe.torch._angles.frequencies_of`)."""

    __slots__ = ("n", "offset", "axis", "positions", "layout", "freq", "rotary_dim", "scale",
                 "exact", "sections", "sections_layout")

    def __init__(self, n: Optional[float], offset: Optional[int], axis: Optional[int],
                 positions: object, layout: str, freq: object, rotary_dim: Optional[int],
                 scale: float, exact: bool, sections: object = None,
                 sections_layout: Optional[str] = None) -> None:
        self.n = n
        self.offset = offset
        self.axis = axis
        self.positions = positions
        self.layout = layout
        self.freq = None if freq is None else frequencies_of(freq)
        self.rotary_dim = rotary_dim
        self.scale = scale
        self.exact = exact
        self.sections = _host_sections(sections)
        self.sections_layout = sections_layout

    def kwargs(self, values: bool = True) -> dict[str, Any]:
        """The keywords sinpe takes, only those given (its defaults and exclusions
        apply); ``values`` False: zeros stand in for the positions (their shape is
        checked, not their values: no host read)."""
        given: dict[str, Any] = {"layout": self.layout, "rotary_dim": self.rotary_dim,
                                 "scale": self.scale, "exact": self.exact}
        if self.n is not None:
            given["n"] = self.n
        if self.freq is not None:
            given["freq"] = self.freq
        if self.positions is not None:
            given["positions"] = (_host_array(self.positions, "positions") if values
                                  else np.zeros(_shape(self.positions)))
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
        """sinpe's own checks, with its messages, against ``tensor``'s shape and dtype
        (on the device path, of the positions' shape, not their values).

        The probe is a zero-stride NumPy view of one element: nothing of the
        tensor's size is allocated, nothing is written.
        """
        probe = np.lib.stride_tricks.as_strided(
            np.zeros(1, np.float64 if tensor.dtype is torch.float64 else np.float32),
            tuple(tensor.shape), (0,) * tensor.dim())
        sinpe._core._rope_into(None, probe, **self.kwargs(not _device_path(tensor)))

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
        width = self.width(tensor)
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

    def width(self, tensor: torch.Tensor) -> int:
        return tensor.shape[-1] if self.rotary_dim is None else operator.index(self.rotary_dim)

    def device_caches(self, tensor: torch.Tensor, dtype: torch.dtype
                      ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(cos, sin)`` times scale in ``dtype`` on ``tensor``'s device, shaped as
        :meth:`caches`, by device operations alone (:mod:`sinpe.torch._angles`: the
        positions are not read on the host)."""
        ndim = tensor.dim()
        width = self.width(tensor)
        device = tensor.device
        freq = (self.freq if self.freq is not None
                else schedule_frequencies(10000.0 if self.n is None else self.n, width))
        angles = angles_of(freq[: width // 2], self.scale)
        sections = _host_sections(self.sections)
        if self.positions is None:
            axis = operator.index(-2 if self.axis is None else self.axis) % ndim
            start = 0 if self.offset is None else operator.index(self.offset)
            ids = torch.arange(start, start + tensor.shape[axis], device=device)
            cos, sin = pair_caches(angles.values(ids, dtype), self.layout)
            shape = [1] * ndim
            shape[axis], shape[-1] = tensor.shape[axis], width
            return cos.reshape(shape), sin.reshape(shape)
        ids = self.positions if isinstance(self.positions, torch.Tensor) else torch.as_tensor(
            np.asarray(self.positions))
        ids = ids.to(device)
        per_pair = sections is not None
        if per_pair:  # (S, ...) -> (..., m): each pair's own position
            rows = pair_rows(tuple(int(s) for s in sections),  # type: ignore[attr-defined]
                             self.sections_layout or "contiguous")
            ids = ids.index_select(0, torch.from_numpy(rows).to(device)).movedim(0, -1)
        cos, sin = pair_caches(angles.values(ids, dtype, per_pair), self.layout)
        rows_shape = list(cos.shape[:-1])
        shape = [1] * (ndim - 1 - len(rows_shape)) + rows_shape + [width]
        return cos.reshape(shape), sin.reshape(shape)

    def by_torch(self, tensor: torch.Tensor, inverse: bool) -> torch.Tensor:
        """The rotated features of ``tensor``, by torch's ops on its device: the
        kernel's formula, with the caches rounded once to the dtype (default), or
        in float64 with the result rounded once (exact: float64 on the device too).
        On the device path the caches come from device operations alone."""
        exact = self.exact or tensor.dtype is torch.float64
        if exact and not _float64_on(tensor.device):
            raise ValueError(f"exact=True rotates in float64, which {tensor.device.type} does "
                             "not have: use exact=False (the caches rounded once to the "
                             "tensor's dtype)")
        if _device_path(tensor):
            c, s = self.device_caches(tensor, torch.float64 if exact else tensor.dtype)
        else:
            cos, sin = self.caches(tensor)
            c, s = torch.from_numpy(cos), torch.from_numpy(sin)
            if not exact:
                c, s = _round_once(c, tensor.dtype), _round_once(s, tensor.dtype)
            c, s = c.to(tensor.device), s.to(tensor.device)
        if inverse:
            s = -s
        x = tensor[..., : c.shape[-1]]
        if exact:
            wide = x.double()
            return _round_once(wide * c + _rotate_half(wide, self.layout) * s, tensor.dtype)
        return x * c + _rotate_half(x, self.layout) * s


def _shape(positions: object) -> tuple[int, ...]:
    if isinstance(positions, torch.Tensor):
        return tuple(positions.shape)
    return tuple(np.shape(positions))  # type: ignore[arg-type]


def _rotate_half(x: torch.Tensor, layout: str) -> torch.Tensor:
    """HF's ``rotate_half`` (concatenated) or GPT-J's ``rotate_every_two`` (interleaved)."""
    if layout == "interleaved":
        pairs = x.reshape(*x.shape[:-1], -1, 2)
        return torch.stack((-pairs[..., 1], pairs[..., 0]), dim=-1).flatten(-2)
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)
