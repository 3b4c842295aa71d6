"""PyTorch drop-in: the ``PositionalEncoding`` module of the tutorials, filled by sinpe.

``import sinpe`` never imports torch; this module does, and needs it installed
(``pip install torch==2.13.0`` on the sinpe machines).

- :class:`PositionalEncoding` replaces the classes of The Annotated Transformer
  (batch-first, buffer ``pe`` of shape ``(1, max_len, d_model)``) and of
  pytorch/examples ``word_language_model`` (seq-first, ``(max_len, 1, d_model)``):
  their ``state_dict`` loads with ``strict=True``.
- :func:`encode` returns the table as a tensor; :func:`add_` adds it to a CPU
  tensor in place.

Values are computed in double precision by sinpe's C kernel and rounded once
(float16/32/64 directly; bfloat16 from the float64 values).
"""

from __future__ import annotations

import operator

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

__all__ = ["PositionalEncoding", "add_", "encode"]

# torch dtypes that share memory with a NumPy dtype sinpe writes directly.
_NUMPY_DTYPES = {
    torch.float16: np.float16,
    torch.float32: np.float32,
    torch.float64: np.float64,
}
_SUPPORTED = "torch.float16, torch.bfloat16, torch.float32 or torch.float64"

# add_ on bfloat16 works through a float64 copy; this many elements at a time
# keeps that copy at most 8 MiB whatever the tensor's size.
_BF16_CHUNK_ELEMENTS = 1 << 20


def encode(
    L: int,
    d: int,
    n: float = 10000.0,
    *,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu",
) -> torch.Tensor:
    """The ``(L, d)`` sinusoidal table as a tensor: ``sinpe.encode`` for PyTorch.

    Rows are positions ``offset .. offset + L - 1``.  float16/float32/float64
    are written by sinpe's kernel straight into the tensor's memory; bfloat16
    (which NumPy lacks) is rounded once from the float64 table.  On another
    ``device`` the table is built on the CPU and copied there.  Bad arguments
    raise sinpe's ``ValueError``/``TypeError``, naming the argument.
    """
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype ({_SUPPORTED}), got {dtype!r}")
    if dtype is torch.bfloat16:
        table = torch.from_numpy(sinpe.encode(L, d, n, offset=offset, dtype=np.float64))
        table = table.to(torch.bfloat16)
    elif dtype in _NUMPY_DTYPES:
        # sinpe validates every argument (with its own messages) before allocating.
        table = torch.from_numpy(sinpe.encode(L, d, n, offset=offset, dtype=_NUMPY_DTYPES[dtype]))
    else:
        raise TypeError(f"dtype must be {_SUPPORTED}, got {dtype}")
    return table.to(device)


def add_(
    tensor: torch.Tensor,
    n: float = 10000.0,
    *,
    offset: int = 0,
    axis: int = -2,
    scale: float = 1.0,
) -> torch.Tensor:
    """Add the positional encoding to a CPU tensor in place: ``sinpe.add_`` for PyTorch.

    ``tensor = scale * tensor + PE``, positions along ``axis``, features along
    the last axis (``axis=-2`` for ``(B, L, d)``, ``axis=0`` for ``(L, B, d)``),
    computed in double and rounded once.  Returns ``tensor``.

    Refused, before anything is written: a non-tensor (``TypeError``), a
    non-CPU or non-strided tensor, an integer/complex dtype (``TypeError``), a
    tensor that requires grad or has overlapping (expanded) memory
    (``ValueError``: an in-place write would corrupt autograd or write one
    element twice; use ``x = x + sinpe.torch.encode(...)`` instead).  The
    write goes around torch's dispatcher, so the tensor's autograd version
    counter is bumped by hand: a graph that saved it will refuse to backprop.

    bfloat16 is computed through float64 copies of at most 1M elements: the
    float64 result ``scale * x + PE`` is exact up to double rounding, and is
    rounded once to bfloat16 when copied back.
    """
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"tensor must be a torch.Tensor, got {type(tensor).__name__}")
    if tensor.device.type != "cpu":
        raise ValueError(
            f"tensor must be on the CPU for an in-place add, got device {tensor.device}; "
            "use x = x + sinpe.torch.encode(L, d, device=x.device, dtype=x.dtype)"
        )
    if tensor.layout != torch.strided:
        raise TypeError(f"tensor must be a dense (strided) tensor, got layout {tensor.layout}")
    if tensor.dtype not in _NUMPY_DTYPES and tensor.dtype is not torch.bfloat16:
        raise TypeError(f"tensor must have dtype {_SUPPORTED}, got {tensor.dtype}")
    if tensor.requires_grad:
        raise ValueError(
            "tensor requires grad: an in-place add would break autograd; "
            "use x = x + sinpe.torch.encode(L, d, dtype=x.dtype) instead"
        )
    if any(stride == 0 and size > 1 for size, stride in zip(tensor.shape, tensor.stride())):
        raise ValueError(
            f"tensor has overlapping memory (shape {tuple(tensor.shape)}, "
            f"strides {tensor.stride()}): several elements share one address; "
            "call .contiguous() first"
        )
    if tensor.dtype is torch.bfloat16:
        _add_bfloat16(tensor, n, offset, axis, scale)
    else:
        sinpe.add_(tensor.numpy(), n, offset=offset, axis=axis, scale=scale)
    torch.autograd.graph.increment_version(tensor)
    return tensor


def _add_bfloat16(tensor: torch.Tensor, n: float, offset: int, axis: int, scale: float) -> None:
    # Chunks are taken along a batch axis (neither positions nor features), so
    # every chunk covers the same positions: the first chunk's validation by
    # sinpe.add_ holds for all of them, and a bad call writes nothing.
    ndim = tensor.dim()
    position_axis = operator.index(axis)
    if ndim >= 2 and -ndim <= position_axis < ndim:
        position_axis %= ndim
    batch_axes = [a for a in range(ndim - 1) if a != position_axis]
    if not batch_axes or tensor.numel() <= _BF16_CHUNK_ELEMENTS:
        chunks = [tensor]
    else:
        chunk_axis = max(batch_axes, key=lambda a: tensor.shape[a])
        per_index = tensor.numel() // tensor.shape[chunk_axis]
        step = max(1, _BF16_CHUNK_ELEMENTS // per_index)
        chunks = list(torch.split(tensor, step, dim=chunk_axis))
    for chunk in chunks:
        wide = chunk.to(torch.float64)  # exact: every bfloat16 is a float64
        sinpe.add_(wide.numpy(), n, offset=offset, axis=axis, scale=scale)
        chunk.copy_(wide)


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

    ``pe`` is filled by sinpe's kernel through ``out=`` on the tensor's own
    memory: values exact to one rounding (float32 within ``2**-24``), where
    the float32 recipes drift by ~4e-4 at position 5000.  ``dtype`` (default
    float32, as in the originals) and ``device`` choose the buffer's type and
    place, like ``nn.Linear``'s factory arguments.

    ``forward(x, offset=0)`` adds positions ``offset .. offset + seq - 1``
    (``offset`` for incremental decoding) and returns ``x``'s dtype: for a
    float16/bfloat16/float64 ``x`` the slice of ``pe`` is cast once to
    ``x.dtype``; nothing is computed in half precision.  Positions past
    ``max_len`` raise ``ValueError`` (the table is not extended: that would
    change the buffer's shape and break ``strict`` loading); build the module
    with a larger ``max_len``, or use :func:`sinpe.torch.encode` for any
    position up to ``sinpe.MAX_POSITION``.
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
        device: str | torch.device | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.d_model = operator.index(d_model)
        self.max_len = operator.index(max_len)
        self.n = float(n)
        self.batch_first = bool(batch_first)
        self.dropout = nn.Dropout(p=dropout)
        # Checked before torch.empty, which would give its own, vaguer errors.
        if self.d_model < 1:
            raise ValueError(f"d_model must be >= 1, got d_model={self.d_model}")
        if not 0 <= self.max_len <= sinpe.MAX_POSITION + 1:
            raise ValueError(
                f"max_len must be in 0 .. sinpe.MAX_POSITION + 1 = {sinpe.MAX_POSITION + 1}, "
                f"got max_len={self.max_len}"
            )
        sinpe.encode(0, 1, self.n)  # sinpe's own message for a bad base n
        dtype = torch.float32 if dtype is None else dtype
        if dtype is torch.bfloat16:
            table = encode(self.max_len, self.d_model, self.n, dtype=torch.bfloat16)
        elif dtype in _NUMPY_DTYPES:
            table = torch.empty(self.max_len, self.d_model, dtype=dtype)
            sinpe.encode(self.max_len, self.d_model, self.n, out=table.numpy())
        else:
            raise TypeError(f"dtype must be {_SUPPORTED}, got {dtype}")
        pe = table.unsqueeze(0) if self.batch_first else table.unsqueeze(1)
        self.register_buffer("pe", pe.to(device) if device is not None else pe)

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, max_len={self.max_len}, n={self.n:g}, "
            f"batch_first={self.batch_first}"
        )

    def forward(self, x: torch.Tensor, offset: int = 0) -> torch.Tensor:
        seq_axis = 1 if self.batch_first else 0
        if x.dim() != 3:
            layout = "(batch, seq, d_model)" if self.batch_first else "(seq, batch, d_model)"
            raise ValueError(f"x must be 3-D {layout}, got shape {tuple(x.shape)}")
        if x.shape[-1] != self.d_model:
            raise ValueError(
                f"x's last axis must be d_model={self.d_model}, got shape {tuple(x.shape)}"
            )
        offset = operator.index(offset)
        length = x.shape[seq_axis]
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
