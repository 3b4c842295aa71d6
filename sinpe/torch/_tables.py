"""sinpe.torch's sinusoidal tables: ``encode``, ``add_`` and ``PositionalEncoding``,
which :mod:`sinpe.torch` re-exports (use them from there).

The table of "Attention Is All You Need" as a tensor (:func:`encode`), added to
a tensor in place (:func:`add_`: the kernel on the tensor's own CPU memory,
torch's ops with a kept table elsewhere), and the tutorials' module
(:class:`PositionalEncoding`).  Built on the tensor helpers of
:mod:`sinpe.torch._tensors`; ``_kernel_writes`` is read there at each call, so
that the tests can force torch's path.
"""

import collections
import operator
import threading
from typing import Callable, Optional

import numpy as np
import torch
from torch import nn

import sinpe
from sinpe import _core
from sinpe.torch import _tensors
from sinpe.torch._angles import angles_of, schedule_frequencies, sinusoid_table
from sinpe.torch._tensors import (
    _DTYPE_CODES,
    _DTYPES,
    _SUPPORTED,
    Device,
    _check_dtype,
    _device,
    _empty,
    _increment_versions,
    _kernel_view,
    _moved,
)

# Typed names for forward (TorchScript reads "# type:" comments inside it).
_is_scripting: Callable[[], bool] = torch.jit.is_scripting  # type: ignore[attr-defined]
_is_tracing: Callable[[], bool] = torch.jit.is_tracing  # type: ignore[attr-defined]

_STRIDED = torch.strided


def _check_table(L: int, d: int, n: float, offset: int) -> None:
    """sinpe's own checks, with its messages, of an ``(L, d)`` table's arguments.

    A zero-row table checks ``d``, ``n`` and ``offset``; a one-column float16
    table (``1/d`` of the table's work) checks ``L``: its type, its sign, and
    that the last position is in range.  This runs before torch allocates
    anything of shape ``(L, d)``.
    """
    sinpe.encode(0, d, n, offset=offset)
    sinpe.encode(L, 1, n, offset=offset, dtype=np.float16)


def _table(
    L: int, d: int, n: float, offset: int, dtype: torch.dtype, device: torch.device
) -> torch.Tensor:
    """The ``(L, d)`` table in a new tensor on ``device`` (checked arguments first).

    meta: an empty meta tensor (no values).  Any other device: written by the
    kernel into a new CPU tensor, then moved to ``device``.
    """
    _check_table(L, d, n, offset)
    if device.type == "meta":
        return _empty((L, d), dtype, device)
    table = _empty((L, d), dtype, torch.device("cpu"))
    sinpe.encode(L, d, n, offset=offset, out=_kernel_view(table))
    return _moved(table, device)


def encode(
    L: int,
    d: int,
    n: float = 10000.0,
    *,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: Optional[Device] = None,
) -> torch.Tensor:
    """The ``(L, d)`` sinusoidal table as a new tensor: ``sinpe.encode`` for PyTorch.

    Rows are positions ``offset .. offset + L - 1``; each value is computed in
    double precision and rounded once to ``dtype`` (float16, bfloat16,
    float32 or float64), by sinpe's kernel writing the tensor's own memory.

    ``device`` defaults to torch's default device (``torch.set_default_device``
    or a ``with torch.device(...)`` context).  On the CPU the kernel writes
    the result itself; on ``meta`` the result is an empty meta tensor (shape
    and dtype; the arguments are checked, no table is computed); on any other
    device the table is written on the CPU and copied there.

    Raises, before allocating the result: ``TypeError`` for a wrong kind of
    argument (a float ``L``, a dtype that is not one of the four),
    ``ValueError`` for a wrong value (sinpe's messages: ``L < 0``, ``d < 1``,
    ``n`` or positions out of range; an unknown or unusable device),
    ``OverflowError``/``MemoryError`` for a table that cannot be represented
    or allocated.
    """
    dtype = _check_dtype(dtype)
    return _table(L, d, n, offset, dtype, _device(device))


# (dtype, d, n) -> the table of positions 0 .. rows - 1, least recently used first
_Tables = collections.OrderedDict[tuple[torch.dtype, int, float], torch.Tensor]
# the rows of a first table at least (a decoding loop's offsets then grow it rarely)
MIN_ROWS = 64


class _TableCache:
    """Tables for :func:`add_` off the CPU, least recently used first out.

    One table per ``(device, dtype, d, n)``, of positions ``0 .. rows - 1``: a call
    takes its rows as a slice, so that a decoding loop's rising offset reuses it; a
    call beyond it grows it to the next power of two (at least double), made by the
    kernel on the CPU and moved to the device once.  Each device keeps at most
    ``max_tables`` tables of at most ``max_bytes`` bytes in all; rows a table of
    ``max_bytes`` cannot hold (and negative offsets) come from the device's exact
    angles (:mod:`sinpe.torch._angles`), by device operations for the call.
    """

    def __init__(self, max_tables: int, max_bytes: int) -> None:
        self.max_tables = max_tables
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._tables: dict[torch.device, _Tables] = {}

    def get(
        self, device: torch.device, dtype: torch.dtype, L: int, d: int, n: float, offset: int
    ) -> torch.Tensor:
        """The rows ``offset .. offset + L - 1`` of the table on ``device``."""
        key = (dtype, d, n)
        need = offset + L
        with self._lock:
            tables = self._tables.get(device)
            table = None if tables is None else tables.get(key)
            if table is not None and offset >= 0 and table.shape[0] >= need:
                assert tables is not None
                tables.move_to_end(key)
                return table[offset:need]
        rows = max(MIN_ROWS, 1 << max(need - 1, 0).bit_length(),
                   2 * (0 if table is None else table.shape[0]))
        if offset < 0 or rows * d * dtype.itemsize > self.max_bytes:
            rows = need
        if offset < 0 or rows * d * dtype.itemsize > self.max_bytes:
            return _angle_table(L, d, n, offset, dtype, device)
        table = _table(rows, d, n, 0, dtype, device)
        with self._lock:
            tables = self._tables.setdefault(device, _Tables())
            tables[key] = table
            tables.move_to_end(key)
            while len(tables) > self.max_tables or self.nbytes(device) > self.max_bytes:
                tables.popitem(last=False)
        return table[offset:need]

    def nbytes(self, device: torch.device) -> int:
        tables = self._tables.get(device, _Tables())
        return sum(t.numel() * t.element_size() for t in tables.values())

    def __len__(self) -> int:
        return sum(len(tables) for tables in self._tables.values())

    def clear(self) -> None:
        with self._lock:
            self._tables.clear()


# A training or decoding loop adds the same few tables again and again.
_TABLES = _TableCache(max_tables=8, max_bytes=64 << 20)


def _angle_table(L: int, d: int, n: float, offset: int, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
    """Rows ``offset .. offset + L - 1`` of the table by the device's exact angles
    (device operations: within half an ulp plus ``2**-30`` of the exact values)."""
    if device.type == "meta":
        return _empty((L, d), dtype, device)
    angles = angles_of(schedule_frequencies(n, d))
    positions = torch.arange(offset, offset + L, device=device)
    return sinusoid_table(angles.values(positions, dtype), d)


def add_(
    tensor: torch.Tensor,
    n: float = 10000.0,
    *,
    offset: int = 0,
    axis: int = -2,
    scale: float = 1.0,
) -> torch.Tensor:
    """Add the positional encoding to ``tensor`` in place: ``sinpe.add_`` for PyTorch.

    Positions run along ``axis`` (``offset`` first), features along the last
    axis, every other axis is batch: ``axis=-2`` for ``(B, L, d)``, ``axis=0``
    for ``(L, B, d)``.  Returns ``tensor``, which afterwards holds exactly the
    bits of torch's ``tensor * scale + table`` (``tensor + table`` when
    ``scale == 1``), ``table`` being ``encode(L, d, n, offset=offset,
    dtype=tensor.dtype)`` broadcast along the batch axes: float32/float64 in
    their own precision, float16/bfloat16 with each operation in float32
    (``scale`` rounded to float32) and rounded to the half type.

    Devices: a CPU tensor is written in place by sinpe's kernel, which bumps
    the tensor's autograd version by hand (a graph that saved the tensor
    refuses to backprop through it).  On any other device, and for tensors
    whose memory the kernel cannot address (negative views such as
    ``z.conj().imag``, tensor subclasses, ``torch.vmap``'s batched tensors),
    torch's own ops do the writing in place, ``tensor.mul_(scale).add_(table)``
    (a Ctrl-C between the two is raised after both), with ``table`` rows of a table kept per
    device, dtype, width and base: positions ``0 .. rows - 1``, written by the
    kernel on the CPU and moved to the device once, grown (doubled) when a call
    goes past it, so that a decoding loop's rising ``offset`` costs a slice.
    Each device keeps 8 tables, at most 64 MiB in all; rows beyond (and
    negative offsets) are made for the call by device operations from the
    device's exact angles, within half an ulp plus ``2**-30`` of the exact
    values (the kernel's table's bits but in the last bit of about 1.5% of
    float32 values).  A meta tensor gets a meta table: arguments and shapes are
    checked, no values exist.

    Raises, before anything is written: ``TypeError`` for a non-tensor, a
    non-strided layout or another dtype; ``ValueError`` for a tensor that
    requires grad (use ``x = x + encode(...)``), an inference tensor outside
    ``torch.inference_mode()`` (torch refuses to change those), a tensor whose
    elements share memory (``expand``), or sinpe's bad values (fewer than 2
    axes, ``axis`` out of range or the feature axis, ``n``, positions or
    ``scale`` out of range); ``OverflowError``/``MemoryError`` for a table that
    cannot be represented or allocated.
    """
    # the common case in as few steps as possible (a decode step's add is ~2 us)
    code = _DTYPE_CODES.get(tensor.dtype) if isinstance(tensor, torch.Tensor) else None
    if code is None or tensor.layout is not _STRIDED or tensor.requires_grad or tensor.is_inference():
        _check_writable(tensor)
    if _tensors._kernel_writes(tensor):
        # the tensor's memory straight to the kernel: a NumPy view of it
        # would cost more than a decode step's whole add
        # (code is not None here: _check_writable raised for any other dtype)
        _core._add_tensor(tensor.data_ptr(), tensor.shape, tensor.stride(),
                          code, n, offset, axis, scale)  # type: ignore[arg-type]
        _increment_versions((tensor,))
    else:
        _add_by_torch(tensor, n, offset, axis, scale)
    return tensor


def _check_writable(tensor: object) -> None:
    """Raises what add_ refuses (in this order); returns for an inference
    tensor inside inference_mode, which may be changed."""
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.layout != torch.strided:
        raise TypeError(f"tensor must be a dense (strided) tensor, got layout {tensor.layout}")
    if tensor.dtype not in _DTYPES:
        raise TypeError(f"tensor must have dtype {_SUPPORTED}, got {tensor.dtype}")
    if tensor.requires_grad:
        raise ValueError(
            "tensor requires grad: an in-place add would break autograd; "
            "use x = x + sinpe.torch.encode(L, d, dtype=x.dtype, device=x.device) instead"
        )
    if tensor.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            "tensor is an inference tensor and torch.inference_mode() is off: torch forbids "
            "changing it in place; add inside inference_mode(), or to a .clone()"
        )


def _add_by_torch(tensor: torch.Tensor, n: float, offset: int, axis: int, scale: float) -> None:
    # sinpe checks n, offset, axis and scale (and the rank) with its own
    # messages on an array of the tensor's shape without features: no element,
    # nothing computed, nothing of the tensor's touched.
    probe = np.empty(tuple(tensor.shape[:-1]) + (0,), np.float32)
    sinpe.add_(probe, n, offset=offset, axis=axis, scale=scale)
    if any(stride == 0 and size > 1 for size, stride in zip(tensor.shape, tensor.stride())):
        raise ValueError(
            f"tensor has elements that share memory (shape {list(tensor.shape)}, strides "
            f"{list(tensor.stride())}, as from expand); writing it in place is ambiguous"
        )
    if tensor.numel() == 0:
        return
    ndim = tensor.dim()
    position_axis = operator.index(axis) % ndim
    length, features = tensor.shape[position_axis], tensor.shape[-1]
    table = _TABLES.get(
        tensor.device, tensor.dtype, length, features, float(n), operator.index(offset)
    )
    shape = [1] * ndim
    shape[position_axis], shape[-1] = length, features
    scale = float(scale)
    if scale != 1.0:
        # torch's own two ops in place: the bits of ``tensor * scale + table`` and no
        # copy of the tensor; a Ctrl-C between them is raised after both
        with _tensors.interrupts_after():
            tensor.mul_(scale).add_(table.view(shape))
    else:
        tensor.add_(table.view(shape))


class PositionalEncoding(nn.Module):
    """Sinusoidal positional encoding plus dropout, a drop-in for the tutorials' class.

    ``forward(x)`` returns ``dropout(x + pe[positions of x])``.  The buffer
    ``pe`` has the shape the originals register, so their ``state_dict``
    loads with ``strict=True`` (and keeps the loaded values):

    - ``batch_first=True`` (default; The Annotated Transformer):
      ``pe`` is ``(1, max_len, d_model)``, ``x`` is ``(batch, seq, d_model)``.
    - ``batch_first=False`` (pytorch/examples ``word_language_model``,
      the PyTorch transformer tutorial): ``pe`` is ``(max_len, 1, d_model)``,
      ``x`` is ``(seq, batch, d_model)``.

    ``pe`` holds the table computed in double precision by sinpe's kernel and
    rounded once to ``dtype`` (float16, bfloat16, float32 or float64; by
    default torch's default dtype, float32 unless changed, as in the
    originals): float32 within ``2**-24`` of exact, where the float32 recipes
    drift by ~4e-4 at position 5000.

    ``device`` (like ``nn.Linear``'s factory argument) defaults to torch's
    default device, so the module builds under ``torch.set_default_device``
    or ``with torch.device(...)``: on the CPU the kernel writes ``pe`` in
    place; on ``meta`` ``pe`` is an empty meta tensor (shape and dtype, no
    values; after ``to_empty(device=...)`` call :meth:`reset_parameters`, or
    load a ``state_dict``); on any other device ``pe`` is written on the CPU
    and moved there.

    ``forward(x, offset=0)`` adds positions ``offset .. offset + seq - 1``
    (``offset`` for incremental decoding) and returns ``x``'s dtype: for a
    float16/bfloat16/float64 ``x`` the slice of ``pe`` is cast once to
    ``x.dtype``; nothing is computed in half precision.  Positions past
    ``max_len`` raise ``ValueError`` (the table is not extended: that would
    change the buffer's shape and break ``strict`` loading); build the module
    with a larger ``max_len``, or use :func:`sinpe.torch.encode` for any
    position up to ``sinpe.MAX_POSITION``.  A wrong rank or width of ``x``
    raises ``ValueError`` too.

    Deployment: ``forward`` is plain torch code, so the module works with
    ``torch.jit.script`` (also saved and loaded), ``torch.jit.trace``,
    ``torch.compile(fullgraph=True)``, ``torch.export`` and
    ``torch.onnx.export``, exactly like the originals: ``pe`` is a constant
    buffer of the exported program and the sequence length may be dynamic.
    The checks above raise their ``ValueError`` messages inside torch's own
    error types where a path allows no other: ``torch.jit.Error`` from
    TorchScript, ``torch._dynamo.exc.Unsupported`` from a ``fullgraph``
    compile.  A traced module, like a traced original, does not re-check
    ``max_len`` or ``d_model``.
    """

    pe: torch.Tensor

    def __init__(
        self,
        d_model: int,
        dropout: float = 0.1,
        max_len: int = 5000,
        n: float = 10000.0,
        batch_first: bool = True,
        *,
        device: Optional[Device] = None,
        dtype: Optional[torch.dtype] = None,
    ) -> None:
        super().__init__()
        self.d_model = operator.index(d_model)
        self.max_len = operator.index(max_len)
        self.n = float(n)
        self.batch_first = bool(batch_first)
        self.dropout = nn.Dropout(p=dropout)
        # Checked before any tensor exists, which would give torch's vaguer errors.
        if self.d_model < 1:
            raise ValueError(f"d_model must be >= 1, got d_model={self.d_model}")
        if not 0 <= self.max_len <= sinpe.MAX_POSITION + 1:
            raise ValueError(
                f"max_len must be in 0 .. sinpe.MAX_POSITION + 1 = {sinpe.MAX_POSITION + 1}, "
                f"got max_len={self.max_len}"
            )
        sinpe.encode(0, 1, self.n)  # sinpe's own message for a bad base n
        dtype = _check_dtype(torch.get_default_dtype() if dtype is None else dtype)
        table = _table(self.max_len, self.d_model, self.n, 0, dtype, _device(device))
        self.register_buffer("pe", table.unsqueeze(0 if self.batch_first else 1))

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Write the table into ``pe`` again, on ``pe``'s device and in its dtype.

        For deferred initialisation: build under ``torch.device("meta")``,
        ``to_empty(device=...)``, then ``reset_parameters()``.  A meta ``pe``
        is left as it is (it has no values).
        """
        rows = self.pe.select(0 if self.batch_first else 1, 0)  # (max_len, d_model)
        if rows.device.type == "meta":
            return
        if _tensors._kernel_writes(rows):
            sinpe.encode(self.max_len, self.d_model, self.n, out=_kernel_view(rows))
            torch.autograd.graph.increment_version(rows)
        else:
            rows.copy_(_table(self.max_len, self.d_model, self.n, 0, rows.dtype, rows.device))

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, max_len={self.max_len}, n={self.n:g}, "
            f"batch_first={self.batch_first}"
        )

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        if not _is_scripting():
            offset = operator.index(offset)  # TorchScript checks the int itself
        if x.dim() != 3:
            layout = "(batch, seq, d_model)" if self.batch_first else "(seq, batch, d_model)"
            raise ValueError(f"x must be 3-D {layout}, got shape {list(x.shape)}")
        length = x.shape[1] if self.batch_first else x.shape[0]
        # A trace records tensor operations only: these checks would be evaluated
        # once, on the example's sizes, and warned about; the originals have none.
        if not _is_tracing():
            if x.shape[-1] != self.d_model:
                raise ValueError(
                    f"x's last axis must be d_model={self.d_model}, got shape {list(x.shape)}"
                )
            if offset < 0 or offset + length > self.max_len:
                raise ValueError(
                    f"positions offset={offset} .. {offset + length - 1} (sequence length "
                    f"{length}) are outside the table's 0 .. {self.max_len - 1}: "
                    f"build PositionalEncoding with max_len >= {offset + length}"
                )
        if self.batch_first:
            table = self.pe[:, offset : offset + length]
        else:
            table = self.pe[offset : offset + length]
        # One cast of exact values to x's dtype; a non-float x promotes as in the originals.
        dtype = x.dtype if x.is_floating_point() else table.dtype
        out: torch.Tensor = self.dropout(x + table.to(device=x.device, dtype=dtype))
        return out
