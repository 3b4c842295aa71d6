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
- :func:`rope_cache` makes RoPE's ``(cos, sin)`` caches as tensors, and
  :class:`RotaryEmbedding` stands in for a transformers model's rotary module
  (every rope type, the model's frequencies, exact angles, kept tables; the
  multi-axis sections of vision-language text models), and
  :func:`apply_rotary_pos_emb_vision` is the vision towers' apply function of
  Qwen2-VL, Qwen2.5-VL and Qwen3-VL, bit for bit.
- :func:`patch` makes a loaded transformers model use both (its rotary modules
  and its family's apply function), checked before it changes anything, undoable.

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
from numpy.typing import NDArray

import sinpe
from sinpe import _core

try:
    import torch
    from torch import nn
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "sinpe.torch needs PyTorch, which is not installed: "
        "pip install torch==2.13.0 (sinpe itself works without it)"
    ) from exc

from sinpe._openmp import share_torch_threads  # noqa: E402

# Large calls run on torch's own OpenMP threads from now on (sinpe/_openmp.py).
share_torch_threads(torch)

__all__ = ["PositionalEncoding", "RotaryEmbedding", "add_", "apply_rotary_pos_emb",
           "apply_rotary_pos_emb_vision", "encode", "patch", "rope", "rope_", "rope_cache"]

# Typed names for forward (TorchScript reads "# type:" comments inside it).
_is_scripting: Callable[[], bool] = torch.jit.is_scripting  # type: ignore[attr-defined]
_is_tracing: Callable[[], bool] = torch.jit.is_tracing  # type: ignore[attr-defined]

Device = Union[str, torch.device]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SUPPORTED = "torch.float16, torch.bfloat16, torch.float32 or torch.float64"
# sinpe_dtype's codes (csrc/sinpe.h), for the kernel's entry on tensor memory;
# the names below are looked up once: a decode step's add takes ~2 us
_DTYPE_CODES = {torch.float16: 0, torch.float32: 1, torch.float64: 2, torch.bfloat16: 3}
_STRIDED = torch.strided
_PLAIN_TENSORS = (torch.Tensor, nn.Parameter)
_is_functorch_wrapped: Callable[[torch.Tensor], bool] = (
    torch._C._functorch.is_functorch_wrapped_tensor)
_is_functional: Callable[[torch.Tensor], bool] = torch._is_functional_tensor
# torch.autograd.graph.increment_version's own call, without its Python frame
_increment_versions: Callable[[tuple[torch.Tensor, ...]], None] = getattr(
    torch._C, "_increment_version", torch.autograd.graph.increment_version)

# The kernel's view of a torch half-type tensor: the tensor's own memory, with
# NumPy dtype metadata naming the torch element type, so that sinpe stores
# bfloat16 (which NumPy lacks) and computes add_ with torch's rule for half
# types (each operation in float32, the scale rounded to float32).
_FLOAT16_VIEW = np.dtype(np.float16, metadata={"sinpe": "torch.float16"})
_BFLOAT16_VIEW = np.dtype(np.int16, metadata={"sinpe": "torch.bfloat16"})


def _kernel_view(tensor: torch.Tensor) -> NDArray[Any]:
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
        tensor.is_cpu
        and type(tensor) in _PLAIN_TENSORS
        and not tensor.is_neg()  # (the conjugate bit exists only on complex dtypes)
        and not _is_functorch_wrapped(tensor)
        and not _is_functional(tensor)
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
    # the common case in as few steps as possible (a decode step's add is ~2 us)
    code = _DTYPE_CODES.get(tensor.dtype) if isinstance(tensor, torch.Tensor) else None
    if code is None or tensor.layout is not _STRIDED or tensor.requires_grad or tensor.is_inference():
        _check_writable(tensor)
    if _kernel_writes(tensor):
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


# Rotary embeddings (rope_, rope, apply_rotary_pos_emb) live in their own
# module, which reads this module's helpers (_kernel_writes, _kernel_view, ...)
# at each call: it gets this module here, once they are all defined.
from sinpe import _torch_rotary  # noqa: E402

_torch_rotary._base = sys.modules[__name__]
from sinpe._torch_rotary import (  # noqa: E402
    apply_rotary_pos_emb,
    apply_rotary_pos_emb_vision,
    rope,
    rope_,
)

from sinpe import _rotary_embedding  # noqa: E402

_rotary_embedding._base = sys.modules[__name__]
from sinpe._rotary_embedding import RotaryEmbedding, rope_cache  # noqa: E402

# patch(model): transformers models with sinpe's RoPE (imports no transformers itself)
from sinpe._transformers import patch  # noqa: E402
