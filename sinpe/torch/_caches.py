"""sinpe.torch's RoPE caches: ``rope_cache``, which :mod:`sinpe.torch` re-exports
(use it from there).

``rope_cache`` is ``sinpe.rope`` for torch: the caches written by the kernel into a
CPU tensor's memory and moved once to the device; while torch traces, one
``sinpe::rope_cache`` node (:mod:`sinpe.torch._ops`) with the same values.  The
rotary module (:mod:`sinpe.torch._rotary_module`) makes its tables with it, and the
multi-axis pieces (:mod:`sinpe.torch._multi_axis`) their caches off the CPU.
"""
from __future__ import annotations

import operator
from typing import Any, Optional

import numpy as np
import torch

import sinpe
from sinpe.torch import _ops
from sinpe.torch._angles import (
    angles_of,
    frequencies_of,
    pair_caches,
    pair_rows,
    schedule_frequencies,
)
from sinpe.torch._tensors import (
    _check_dtype,
    _device,
    _device_path_on,
    _empty,
    _host_array,
    _host_sections,
    _is_compiling,
    _kernel_view,
    _moved,
)


def rope_cache(
    L: Optional[int],
    d: int,
    n: Optional[float] = None,
    *,
    offset: Optional[int] = None,
    positions: object = None,
    layout: str = "concatenated",
    freq: object = None,
    scale: float = 1.0,
    dtype: Optional[torch.dtype] = None,
    device: Any = None,
    sections: object = None,
    sections_layout: Optional[str] = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """RoPE caches ``(cos, sin)`` as tensors: ``sinpe.rope`` for PyTorch.

    Arguments as ``sinpe.rope`` (``n`` defaults to 10000 unless ``freq`` is
    given, ``offset`` to 0; ``positions``, ``freq`` and ``sections`` may be
    tensors or arrays): rows are positions ``offset .. offset + L - 1``, or
    ``positions`` (``L`` None; each result then has shape ``positions.shape +
    (d,)``); each value is ``cos(p * w)`` or ``sin(p * w)`` with the angle in
    double, times ``scale`` in double, rounded once to ``dtype`` (float16,
    bfloat16, float32 or float64; default torch's default dtype).

    With ``sections`` (multi-axis RoPE, as ``sinpe.rope``: Qwen2-VL's
    ``mrope_section``, ``sections_layout="interleaved"`` for Qwen3-VL's) the
    positions lead with one row per section (HF's ``position_ids`` of shape
    ``(3, B, L)``), each frequency pair takes its angle from its section's row,
    and the results have shape ``positions.shape[1:] + (d,)``.

    A row's values depend only on its position and the frequencies: rows made for
    explicit ``positions`` have the bits of a table's rows of the same positions
    (:class:`sinpe.torch.RotaryEmbedding` keeps tables made by this function, and
    computes positions past their memory cap call by call, with it too).

    ``device`` defaults to torch's default device.  The kernel writes the
    caches into a new CPU tensor's own memory; they are moved to any other
    device once.  On ``meta`` the caches are empty meta tensors (the arguments
    are checked).  Bad arguments raise sinpe's ``TypeError``/``ValueError``
    before anything is allocated.

    Under ``torch.compile`` (``fullgraph=True`` too) and ``torch.export`` the
    caches are one custom op, ``sinpe::rope_cache``, of the positions (``offset
    .. offset + L - 1`` by ``torch.arange``: ``L`` may be a dynamic length), with
    the same values; ``positions`` and ``freq`` are best given as tensors,
    ``sections`` as a list.  The positions' values are checked when the op runs
    (``ValueError``); an exported program runs wherever :mod:`sinpe.torch` is
    imported.

    >>> import torch, sinpe.torch
    >>> cos, sin = sinpe.torch.rope_cache(4, 8, 500000.0, offset=10, dtype=torch.bfloat16)
    >>> cos.shape, sin.dtype
    (torch.Size([4, 8]), torch.bfloat16)
    """
    dtype = _check_dtype(torch.get_default_dtype() if dtype is None else dtype)
    if _is_compiling():  # torch.compile, torch.export
        # (torch's default device, as a new tensor's: get_default_device breaks the graph)
        device = torch.empty(0).device if device is None else torch.device(device)
        return _traced(L, d, n, offset, positions, layout, freq, scale, dtype, device,
                       sections, sections_layout)
    device = _device(device)
    if device.type != "meta" and _device_path_on(device):
        return _on_device(L, d, n, offset, positions, layout, freq, scale, dtype, device,
                          sections, sections_layout)
    columns: dict[str, Any] = {"layout": layout, "scale": scale}
    if n is not None:
        columns["n"] = n
    if freq is not None:
        columns["freq"] = _host_array(freq, "freq")
    rows: dict[str, Any] = {}
    if positions is not None:
        rows["positions"] = np.asarray(_host_array(positions, "positions"))
    if offset is not None:
        rows["offset"] = offset
    if sections is not None or sections_layout is not None:
        rows.update(_section_kwargs(sections, sections_layout))
        shape_rows = _section_rows(L, d, columns, rows)
    else:
        # sinpe's own checks and messages, on calls of 0 columns' work: the columns'
        # arguments on no rows, then L (or the positions) on a width-2 float16 cache
        first: dict[str, Any] = {} if offset is None else {"offset": offset}
        sinpe.rope(0 if L is None else _zero_like(L), d, **columns, **first)
        shape_rows = sinpe.rope(L, 2, **rows, dtype=np.float16)[0].shape[:-1]
    shape = (*shape_rows, operator.index(d))
    target = device if device.type == "meta" else torch.device("cpu")
    cos, sin = _empty(shape, dtype, target), _empty(shape, dtype, target)
    if target.type != "meta" and cos.numel():
        view = _kernel_view
        sinpe.rope(L, d, **columns, **rows, out=(view(cos), view(sin)))
    return _moved(cos, device), _moved(sin, device)


def _on_device(L: Any, d: int, n: Optional[float], offset: Optional[int], positions: object,
               layout: str, freq: object, scale: float, dtype: torch.dtype,
               device: torch.device, sections: object, sections_layout: Optional[str]
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """rope_cache on the device path: device operations from the exact angle tables of
    :mod:`sinpe.torch._angles` (no host read of the positions: their values are not
    checked, a position beyond ``sinpe.MAX_POSITION`` gives NaN), after sinpe's checks
    of everything else on calls of no work."""
    columns: dict[str, Any] = {"layout": layout, "scale": scale}
    if n is not None:
        columns["n"] = n
    frequencies = None if freq is None else frequencies_of(freq)
    if frequencies is not None:
        columns["freq"] = frequencies
    width = operator.index(d)
    if positions is None:
        first: dict[str, Any] = {} if offset is None else {"offset": offset}
        if sections is not None or sections_layout is not None:
            sinpe.rope(L, d, **columns, **first, **_section_kwargs(sections, sections_layout))
        sinpe.rope(0 if L is None else _zero_like(L), d, **columns, **first)
        sinpe.rope(L, 2, **first, dtype=np.float16)  # L and the last position (1/d's work)
        start = 0 if offset is None else offset
        ids = torch.arange(start, start + L, device=device)
        listed: Optional[list[int]] = None
    else:
        if L is not None or offset is not None:  # sinpe's error
            sinpe.rope(L, d, positions=np.zeros(0), **columns,
                       **({} if offset is None else {"offset": offset}))
        ids = positions if isinstance(positions, torch.Tensor) else torch.as_tensor(
            np.asarray(positions))
        if ids.dtype is torch.bool or ids.is_complex():
            raise TypeError(f"positions must be integer or real, got {ids.dtype}")
        listed = None
        if sections is not None or sections_layout is not None:
            given = _section_kwargs(sections, sections_layout)
            listed = given["sections"]
            if not isinstance(listed, (list, tuple)) or ids.dim() < 1 or (
                    ids.shape[0] != len(listed)):
                sinpe.rope(None, d, positions=np.zeros(tuple(ids.shape)), **columns, **given)
            sinpe.rope(None, d, positions=np.zeros((ids.shape[0], 0)), **columns, **given)
        else:
            sinpe.rope(None, d, positions=np.zeros(0), **columns)
        ids = ids.to(device)
    if frequencies is None:
        frequencies = schedule_frequencies(10000.0 if n is None else n, width)
    angles = angles_of(frequencies[: width // 2], scale)
    per_pair = listed is not None
    if per_pair:
        assert listed is not None
        rows = pair_rows(tuple(int(s) for s in listed), sections_layout or "contiguous")
        ids = ids.index_select(0, torch.from_numpy(rows).to(device)).movedim(0, -1)
    caches = pair_caches(angles.values(ids, dtype, per_pair), layout)
    assert isinstance(caches, tuple)
    return caches


def _traced(L: Any, d: int, n: Optional[float], offset: Optional[int], positions: object,
            layout: str, freq: object, scale: float, dtype: torch.dtype, device: torch.device,
            sections: object, sections_layout: Optional[str]
            ) -> tuple[torch.Tensor, torch.Tensor]:
    """rope_cache while torch traces: one ``sinpe::rope_cache`` node for the positions
    (``offset .. offset + L - 1`` made by ``torch.arange``: a row's values depend only
    on its position, so they are the table's), on ``device``.  The rows' arguments
    are checked here with sinpe's messages, the others by the op's fake
    implementation, the positions' values when it runs."""
    if positions is None:
        if L is None:
            raise ValueError("rope needs L, or L=None and positions=")
        if sections is not None:
            raise ValueError("sections need L=None and positions= with a leading axis of "
                             "one row per section")
        start = 0 if offset is None else offset
        rows = torch.arange(start, start + L, device=device)
    else:
        if L is not None:
            raise ValueError(f"L must be None when positions is given (the rows are the "
                             f"positions), got L={L}")
        if offset is not None:
            raise ValueError(f"offset and positions are exclusive (add the offset to the "
                             f"positions), got offset={offset}")
        given, _, _ = _ops.rotation_args(positions, None, None)
        assert given is not None
        rows = given.to(device)
    _, frequencies, listed = _ops.rotation_args(None, freq, sections)
    caches = _ops.rope_cache(rows, operator.index(d), n=n, freq=frequencies, scale=scale,
                             layout=layout, dtype=dtype, sections=listed,
                             sections_layout=sections_layout)
    assert isinstance(caches, tuple)
    return caches


def _section_kwargs(sections: object, sections_layout: Optional[str]) -> dict[str, Any]:
    """``sections`` (a list, for a tensor or an array; as given otherwise, for sinpe's
    checks) and ``sections_layout`` if given."""
    if isinstance(sections, np.ndarray):
        sections = sections.tolist()
    given: dict[str, Any] = {"sections": _host_sections(sections)}
    if sections_layout is not None:
        given["sections_layout"] = sections_layout
    return given


def _section_rows(L: Any, d: int, columns: dict[str, Any], rows: dict[str, Any]
                  ) -> tuple[int, ...]:
    """The rows' shape of caches with sections (``rows``: the positions and sections),
    after sinpe's own checks and messages on calls of no columns' work: everything
    but the positions' values on no rows (each section's row cut to length 0), then
    the values on a width-2 float16 cache whose one pair takes the first row."""
    positions, sections = rows.get("positions"), rows.get("sections")
    if (positions is None or L is not None or positions.ndim == 0
            or not isinstance(sections, (list, tuple)) or len(sections) != positions.shape[0]):
        sinpe.rope(L, d, **columns, **rows)  # sinpe's error, raised before any work
    assert positions is not None
    empty = positions.reshape(positions.shape[0], -1)[:, :0]
    sinpe.rope(None, d, **columns, **dict(rows, positions=empty))
    first = (1,) + (0,) * (positions.shape[0] - 1)
    one = sinpe.rope(None, 2, positions=positions, sections=first, dtype=np.float16)
    return tuple(one[0].shape[:-1])


def _zero_like(L: Any) -> Any:
    """0 for an int L, L itself otherwise (so that sinpe names its wrong type)."""
    try:
        operator.index(L)
    except TypeError:
        return L
    return 0
