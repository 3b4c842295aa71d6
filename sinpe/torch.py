"""PyTorch drop-in: the ``PositionalEncoding`` module of the tutorials, filled by sinpe.

``import sinpe`` never imports torch; this module does, and needs it installed
(the tests pin ``torch==2.13.0``; the README says how to get the CPU-only build).

- :class:`PositionalEncoding` replaces the classes of The Annotated Transformer
  (batch-first, buffer ``pe`` of shape ``(1, max_len, d_model)``) and of
  pytorch/examples ``word_language_model`` (seq-first, ``(max_len, 1, d_model)``):
  their ``state_dict`` loads with ``strict=True``.  It works with
  ``torch.jit.script``, ``torch.jit.trace``, ``torch.compile``, ``torch.export``
  and ONNX export, and builds under a default-device context (``meta`` too).
- :func:`encode` returns the table as a tensor on any device.
- :func:`add_` adds the table to a tensor in place, on any device.
- :func:`rope_` applies rotary position embeddings (RoPE) to queries or keys in
  place (inference), :func:`rope` out of place and differentiable (training),
  and :func:`apply_rotary_pos_emb` is HF's function of that name, bit for bit,
  without its temporaries, to patch into a model.

Tables are computed in double precision by sinpe's C kernel on the CPU and
rounded once to the tensor's dtype (float16, bfloat16, float32 or float64),
written straight into the tensor's own memory.  Every invalid call raises
``TypeError``, ``ValueError``, ``OverflowError`` or ``MemoryError`` before
anything is written.
"""

import collections
import operator
import sys
import threading
from typing import Any, Callable, Optional, Union

import numpy as np

import sinpe

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "sinpe.torch needs PyTorch, which is not installed: "
        "pip install torch==2.13.0 (sinpe itself works without it)"
    ) from exc

__all__ = ["PositionalEncoding", "add_", "apply_rotary_pos_emb", "encode", "rope", "rope_"]

# Typed names for forward (TorchScript reads "# type:" comments inside it).
_is_scripting: Callable[[], bool] = torch.jit.is_scripting  # type: ignore[attr-defined]
_is_tracing: Callable[[], bool] = torch.jit.is_tracing  # type: ignore[attr-defined]

Device = Union[str, torch.device]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SUPPORTED = "torch.float16, torch.bfloat16, torch.float32 or torch.float64"

# The kernel's view of a torch half-type tensor: the tensor's own memory, with
# NumPy dtype metadata naming the torch element type, so that sinpe stores
# bfloat16 (which NumPy lacks) and computes add_ with torch's rule for half
# types (each operation in float32, the scale rounded to float32).
_FLOAT16_VIEW = np.dtype(np.float16, metadata={"sinpe": "torch.float16"})
_BFLOAT16_VIEW = np.dtype(np.int16, metadata={"sinpe": "torch.bfloat16"})


def _kernel_view(tensor: torch.Tensor) -> np.ndarray:
    """A NumPy array over ``tensor``'s own memory, as sinpe's kernel reads and writes it.

    ``tensor`` is a strided CPU tensor of one of the four dtypes, without the
    negative or conjugate bit.  float32/float64: ``tensor.numpy()``; float16
    and bfloat16: the same memory with a dtype whose metadata names the torch
    type.  Writing through the view writes the tensor, bypassing autograd.
    """
    tensor = tensor.detach()
    if tensor.dtype is torch.bfloat16:
        return tensor.view(torch.int16).numpy().view(_BFLOAT16_VIEW)
    array = tensor.numpy()
    if tensor.dtype is torch.float16:
        return array.view(_FLOAT16_VIEW)
    return array


def _kernel_writes(tensor: torch.Tensor) -> bool:
    """Whether :func:`add_` hands ``tensor`` to the kernel (else torch's own ops write it).

    The kernel writes plain CPU memory: a CPU tensor of class ``torch.Tensor``
    (or an ``nn.Parameter``) whose memory holds its values, i.e. not a
    negative or conjugate view, nor a wrapper without memory of its own
    (``torch.vmap``'s batched tensors, functionalized tensors).  Tests force
    torch's path on the CPU by replacing this function.
    """
    return (
        tensor.is_cpu  # tensor.device.type == "cpu", without making a device object
        and type(tensor) in (torch.Tensor, nn.Parameter)
        and not tensor.is_neg()
        and not tensor.is_conj()
        and not torch._C._functorch.is_functorch_wrapped_tensor(tensor)
        and not torch._is_functional_tensor(tensor)
    )


def _check_dtype(dtype: object) -> torch.dtype:
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype ({_SUPPORTED}), got {dtype!r}")
    if dtype not in _DTYPES:
        raise TypeError(f"dtype must be {_SUPPORTED}, got {dtype}")
    return dtype


def _device(device: Optional[Device]) -> torch.device:
    """``device`` as a torch.device; None is torch's default device (a context counts)."""
    if device is None:
        return torch.get_default_device()
    try:
        return torch.device(device)
    except RuntimeError as exc:  # an unknown device string
        raise ValueError(f"device={device!r} is not a torch device: {exc}") from None


def _check_table(L: int, d: int, n: float, offset: int) -> None:
    """sinpe's own checks, with its messages, of an ``(L, d)`` table's arguments.

    A zero-row table checks ``d``, ``n`` and ``offset``; a one-column float16
    table (``1/d`` of the table's work) checks ``L``: its type, its sign, and
    that the last position is in range.  This runs before torch allocates
    anything of shape ``(L, d)``.
    """
    sinpe.encode(0, d, n, offset=offset)
    sinpe.encode(L, 1, n, offset=offset, dtype=np.float16)


def _empty(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``torch.empty`` raising OverflowError/MemoryError instead of torch's RuntimeError."""
    size = dtype.itemsize
    for extent in shape:
        size *= extent
    if size > sys.maxsize:
        raise OverflowError(
            f"a tensor of shape {shape} and dtype {dtype} ({size} bytes) is too large to represent"
        )
    try:
        return torch.empty(shape, dtype=dtype, device=device)
    except RuntimeError as exc:
        raise MemoryError(
            f"cannot allocate a {dtype} tensor of shape {shape} on {device}: {exc}"
        ) from None


def _moved(tensor: torch.Tensor, device: torch.device) -> torch.Tensor:
    """``tensor.to(device)``, with torch's failures as MemoryError/ValueError."""
    if tensor.device == device:
        return tensor
    try:
        return tensor.to(device)
    except torch.OutOfMemoryError as exc:
        raise MemoryError(f"cannot allocate the table on {device}: {exc}") from None
    except (RuntimeError, AssertionError) as exc:  # e.g. "Torch not compiled with CUDA enabled"
        raise ValueError(f"cannot place the table on device {device}: {exc}") from None


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


# (dtype, L, d, n, offset) -> table, least recently used first
_Tables = collections.OrderedDict[tuple[torch.dtype, int, int, float, int], torch.Tensor]


class _TableCache:
    """Tables for :func:`add_` off the CPU, least recently used first out.

    One table per ``(device, dtype, L, d, n, offset)``.  Each device keeps at
    most ``max_tables`` tables of at most ``max_bytes`` bytes in all; a table
    larger than ``max_bytes`` is built for its call and not kept.
    """

    def __init__(self, max_tables: int, max_bytes: int) -> None:
        self.max_tables = max_tables
        self.max_bytes = max_bytes
        self._lock = threading.Lock()
        self._tables: dict[torch.device, _Tables] = {}

    def get(
        self, device: torch.device, dtype: torch.dtype, L: int, d: int, n: float, offset: int
    ) -> torch.Tensor:
        key = (dtype, L, d, n, offset)
        with self._lock:
            tables = self._tables.get(device)
            if tables is not None and key in tables:
                tables.move_to_end(key)
                return tables[key]
        table = _table(L, d, n, offset, dtype, device)
        size = table.numel() * table.element_size()
        if size > self.max_bytes:
            return table
        with self._lock:
            tables = self._tables.setdefault(device, _Tables())
            tables[key] = table
            tables.move_to_end(key)
            while len(tables) > self.max_tables or self.nbytes(device) > self.max_bytes:
                tables.popitem(last=False)
        return table

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
    torch's own ops do the writing, as ``tensor.mul_(scale).add_(table)``
    (no ``mul_`` when ``scale == 1``), with ``table`` written by the kernel on
    the CPU and moved to the tensor's device once: each device keeps its last
    8 tables, at most 64 MiB in all, for later calls (a larger table is not
    kept).  A meta tensor gets a meta table: arguments and shapes are checked,
    no values exist.

    Raises, before anything is written: ``TypeError`` for a non-tensor, a
    non-strided layout or another dtype; ``ValueError`` for a tensor that
    requires grad (use ``x = x + encode(...)``), an inference tensor outside
    ``torch.inference_mode()`` (torch refuses to change those), a tensor whose
    elements share memory (``expand``), or sinpe's bad values (fewer than 2
    axes, ``axis`` out of range or the feature axis, ``n``, positions or
    ``scale`` out of range); ``OverflowError``/``MemoryError`` for a table that
    cannot be represented or allocated.
    """
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
    if _kernel_writes(tensor):
        sinpe.add_(_kernel_view(tensor), n, offset=offset, axis=axis, scale=scale)
        torch.autograd.graph.increment_version(tensor)
    else:
        _add_by_torch(tensor, n, offset, axis, scale)
    return tensor


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
        tensor.mul_(scale)
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
        if _kernel_writes(rows):
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


# -- rotary position embeddings ---------------------------------------------------------


def _host_array(value: object, name: str) -> object:
    """``positions``/``freq`` as the kernel reads them: a tensor's values as a NumPy array."""
    if isinstance(value, torch.Tensor):  # a tensor's values
        if value.is_complex():
            raise TypeError(f"{name} must be real, got a tensor of dtype {value.dtype}")
        value = value.detach().cpu()
        if value.dtype in (torch.float16, torch.bfloat16):
            value = value.double()
        return value.numpy()
    return value


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
                 "exact")

    def __init__(self, n: Optional[float], offset: Optional[int], axis: Optional[int],
                 positions: object, layout: str, freq: object, rotary_dim: Optional[int],
                 scale: float, exact: bool) -> None:
        self.n = n
        self.offset = offset
        self.axis = axis
        self.positions = None if positions is None else _host_array(positions, "positions")
        self.layout = layout
        self.freq = None if freq is None else _host_array(freq, "freq")
        self.rotary_dim = rotary_dim
        self.scale = scale
        self.exact = exact

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
        if out is None and _kernel_writes(source):  # in place (never inverse)
            sinpe.rope_(_kernel_view(source), **self.kwargs())
            torch.autograd.graph.increment_version(source)
            return
        if out is not None and _kernel_writes(out) and _kernel_writes(source):
            sinpe._core._rope_into(_kernel_view(out), _kernel_view(source), inverse=inverse,
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

    def caches(self, tensor: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
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
        else:
            positions = np.asarray(self.positions)
            cos, sin = sinpe.rope(None, width, positions=positions, **common)
            shape = [1] * (ndim - 1 - positions.ndim) + list(positions.shape) + [width]
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


def _round_once(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """float64 ``values`` rounded once (to nearest, ties to even) to ``dtype``.

    torch rounds float64 to float16/bfloat16 through float32, which can round
    twice; rounding to float32 by round-to-odd first (toward zero, the last bit
    set when anything was dropped) makes the second rounding the only one.
    """
    if dtype is torch.float64 or dtype is torch.float32:
        return values.to(dtype)
    narrow = values.float()
    inexact = narrow.double() != values
    bits = narrow.view(torch.int32)
    bits = bits - (inexact & (narrow.double().abs() > values.abs())).to(torch.int32)
    bits = bits | inexact.to(torch.int32)
    return bits.view(torch.float32).to(dtype)


def _rotation_checks(tensor: object, name: str) -> None:
    _check_rotatable(tensor, name)
    assert isinstance(tensor, torch.Tensor)
    if tensor.is_inference() and not torch.is_inference_mode_enabled():
        raise ValueError(
            f"{name} is an inference tensor and torch.inference_mode() is off: torch forbids "
            "changing it in place; rotate inside inference_mode(), or use sinpe.torch.rope"
        )


def rope_(
    tensor: torch.Tensor,
    n: Optional[float] = None,
    *,
    offset: Optional[int] = None,
    axis: Optional[int] = None,
    positions: object = None,
    layout: str = "concatenated",
    freq: object = None,
    rotary_dim: Optional[int] = None,
    scale: float = 1.0,
    exact: bool = False,
) -> torch.Tensor:
    """Apply rotary position embeddings to ``tensor`` in place: ``sinpe.rope_`` for PyTorch.

    For inference (queries and keys of a forward pass without autograd); for
    training use :func:`rope`.  Arguments as ``sinpe.rope_`` (``n`` defaults
    to 10000, ``offset`` to 0, ``axis`` to -2; ``positions`` and ``freq`` may be
    tensors): positions run along ``axis`` or come from ``positions``, which
    broadcast against ``tensor.shape[:-1]`` (HF's ``position_ids[:, None, :]``
    for ``(B, H, L, D)``).  ``tensor`` afterwards holds exactly the bits of
    torch's ``t * C + rotate_half(t) * S``, ``C, S`` being sinpe's float64
    caches times ``scale`` rounded once to ``tensor.dtype`` (float16/bfloat16
    in torch's arithmetic: each operation in float32, rounded to the type);
    with ``exact=True``, the rotation computed in float64 and rounded once.

    On the CPU the kernel rotates the tensor's memory and bumps its autograd
    version; on other devices (and for tensors whose memory the kernel cannot
    address) torch's own ops compute the same formula on the tensor's device
    and copy it in.

    Raises, before anything is written: ``TypeError`` for a non-tensor, a
    non-strided layout or another dtype; ``ValueError`` for a tensor that
    requires grad (use :func:`rope`), an inference tensor outside
    ``torch.inference_mode()``, an expanded tensor, or sinpe's bad values.
    Returns ``tensor``.

    >>> import torch, sinpe.torch
    >>> q = torch.ones(1, 2, 3, 4)                      # (B, H, L, D)
    >>> sinpe.torch.rope_(q, offset=5) is q
    True
    """
    _rotation_checks(tensor, "tensor")
    if tensor.requires_grad:
        raise ValueError(
            "tensor requires grad: rotating it in place would break autograd; use "
            "q = sinpe.torch.rope(q, ...) instead"
        )
    if _kernel_writes(tensor):  # a decoding step's path: a few microseconds in all
        # Only the arguments given: CPython parses each keyword passed, and at
        # this size that costs as much as the rotation.
        given: dict[str, Any] = {} if offset is None else {"offset": offset}
        if n is not None:
            given["n"] = n
        if axis is not None:
            given["axis"] = axis
        if positions is not None:
            given["positions"] = _host_array(positions, "positions")
        if layout != "concatenated":
            given["layout"] = layout
        if freq is not None:
            given["freq"] = _host_array(freq, "freq")
        if rotary_dim is not None:
            given["rotary_dim"] = rotary_dim
        if scale != 1.0 or type(scale) is not float:
            given["scale"] = scale
        if exact is not False:
            given["exact"] = exact
        sinpe.rope_(tensor.numpy() if tensor.dtype in _NUMPY_DTYPES else _kernel_view(tensor),
                    **given)
        torch.autograd.graph.increment_version(tensor)
        return tensor
    if any(
        stride == 0 and size > 1 for size, stride in zip(tensor.shape, tensor.stride())
    ):
        raise ValueError(
            f"tensor has elements that share memory (shape {list(tensor.shape)}, strides "
            f"{list(tensor.stride())}, as from expand); writing it in place is ambiguous"
        )
    rotation = _Rotation(n, offset, axis, positions, layout, freq, rotary_dim, scale, exact)
    rotation.run(None, tensor, False)
    return tensor


# NumPy's own view of these is the kernel's (no metadata, no detach: rope_
# refuses tensors that require grad)
_NUMPY_DTYPES = (torch.float32, torch.float64)


class _Rope(torch.autograd.Function):
    """``y = rotate(x)``; its backward pass is the rotation by the negated angles
    (the transpose), the same kernel, itself differentiable the same way."""

    @staticmethod
    def forward(ctx: Any, tensor: torch.Tensor, rotation: _Rotation,
                inverse: bool) -> torch.Tensor:
        ctx.rotation = rotation
        ctx.inverse = inverse
        out = torch.empty_like(tensor)
        rotation.run(out, tensor, inverse)
        return out

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None]:
        back: torch.Tensor = _Rope.apply(  # type: ignore[no-untyped-call]
            grad, ctx.rotation, not ctx.inverse)
        return back, None, None


def rope(
    tensor: torch.Tensor,
    n: Optional[float] = None,
    *,
    offset: Optional[int] = None,
    axis: Optional[int] = None,
    positions: object = None,
    layout: str = "concatenated",
    freq: object = None,
    rotary_dim: Optional[int] = None,
    scale: float = 1.0,
    exact: bool = False,
) -> torch.Tensor:
    """Rotary position embeddings out of place and differentiable: a new tensor.

    The result has the bits :func:`rope_` would leave in ``tensor`` (which is
    not changed).  Gradients flow to ``tensor``: the backward pass is the
    rotation by the negated angles (the transpose of the forward one, ``scale``
    included), by the same kernel on the CPU, so training works and
    ``torch.autograd.gradcheck`` passes; higher derivatives too.  ``positions``
    and ``freq`` are constants (no gradient).

    >>> import torch, sinpe.torch
    >>> q = torch.randn(2, 4, 8, 16, dtype=torch.float64, requires_grad=True)
    >>> y = sinpe.torch.rope(q, offset=3)
    >>> y.square().sum().backward()                     # a rotation keeps norms:
    >>> torch.allclose(q.grad, 2 * q.detach())
    True
    """
    _rotation_checks(tensor, "tensor")
    rotation = _Rotation(n, offset, axis, positions, layout, freq, rotary_dim, scale, exact)
    rotation.check(tensor)
    out: torch.Tensor = _Rope.apply(tensor, rotation, False)  # type: ignore[no-untyped-call]
    return out


# -- HF's apply_rotary_pos_emb -----------------------------------------------------------


def _rotate_half_transposed(x: torch.Tensor) -> torch.Tensor:
    """The transpose of HF's ``rotate_half`` (its backward pass): ``cat(x2, -x1)``."""
    half = x.shape[-1] // 2
    return torch.cat((x[..., half:], -x[..., :half]), dim=-1)


def _hf_by_kernel(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> bool:
    """Whether the kernel can compute HF's formula for these tensors: the CPU, one
    dtype of the four, an even head dimension, and caches that broadcast to ``x``'s
    shape without enlarging it (else torch's type promotion or broadcasting would
    make a result the kernel does not write)."""
    if not (x.dtype in _DTYPES and cos.dtype is x.dtype and sin.dtype is x.dtype
            and x.dim() >= 1 and x.shape[-1] % 2 == 0
            and x.layout == torch.strided and cos.layout == torch.strided
            and sin.layout == torch.strided):
        return False
    try:
        broadcast = torch.broadcast_shapes
        if (broadcast(x.shape, cos.shape) != x.shape  # type: ignore[no-untyped-call]
                or broadcast(x.shape, sin.shape) != x.shape):  # type: ignore[no-untyped-call]
            return False
    except RuntimeError:
        return False
    return _kernel_writes(x) and _kernel_writes(cos) and _kernel_writes(sin)


def _hf_forward(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """``x * cos + rotate_half(x) * sin``: each output element written once by the
    kernel, in x's arithmetic, or by HF's own expression."""
    if _hf_by_kernel(x, cos, sin):
        out = torch.empty_like(x)
        if out.numel():
            sinpe._core._rotate_by(_kernel_view(out), _kernel_view(x), _kernel_view(cos),
                                   _kernel_view(sin))
        return out
    return x * cos + _rotate_half(x, "concatenated") * sin


class _ApplyRotary(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, cos, sin)
        return _hf_forward(x, cos, sin)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[Optional[torch.Tensor], ...]:
        x, cos, sin = ctx.saved_tensors
        grad_x = grad_cos = grad_sin = None
        if ctx.needs_input_grad[0]:
            grad_x = (grad * cos + _rotate_half_transposed(grad * sin)).sum_to_size(x.shape)
        if ctx.needs_input_grad[1]:
            grad_cos = (grad * x).sum_to_size(cos.shape)
        if ctx.needs_input_grad[2]:
            grad_sin = (grad * _rotate_half(x, "concatenated")).sum_to_size(sin.shape)
        return grad_x, grad_cos, grad_sin


def _hf_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        out: torch.Tensor = _ApplyRotary.apply(x, cos, sin)  # type: ignore[no-untyped-call]
        return out
    return _hf_forward(x, cos, sin)


def apply_rotary_pos_emb(
    q: torch.Tensor,
    k: torch.Tensor,
    cos: torch.Tensor,
    sin: torch.Tensor,
    position_ids: Optional[torch.Tensor] = None,
    unsqueeze_dim: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """HF's ``apply_rotary_pos_emb``, bit for bit, each output written once.

    Returns ``(q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin)``
    with ``cos`` and ``sin`` unsqueezed at ``unsqueeze_dim``, exactly as
    ``transformers``' Llama (and Qwen, Mistral, ...) compute it, for any
    ``cos, sin`` (each column its own value, not necessarily halves that repeat).
    On the CPU, when ``q``/``k``, ``cos`` and ``sin`` share one of the four dtypes
    and the caches broadcast to the query's shape, sinpe's kernel writes each
    result element once, in the tensors' arithmetic, with no temporaries; anything
    else (other devices, mixed dtypes that torch would promote) runs HF's own
    expression.  Differentiable: gradients reach ``q``, ``k``, ``cos`` and ``sin``
    (by torch's ops).  ``position_ids`` is accepted and unused, as in HF.

    Patch it into a model (its logits do not change)::

        import transformers.models.llama.modeling_llama as llama
        llama.apply_rotary_pos_emb = sinpe.torch.apply_rotary_pos_emb
    """
    del position_ids  # unused, as in HF's own function
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return _hf_rotate(q, cos, sin), _hf_rotate(k, cos, sin)
