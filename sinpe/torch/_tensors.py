"""The bottom of sinpe.torch: what sinpe's kernels see of a torch tensor.

Every other module of sinpe.torch imports these helpers, and this module imports
none of them, so the layers above it (tables, rotations, caches, the rotary
module, the transformers integration) stand on it one way:

- the dtypes sinpe computes in, and their codes in the C library's enum;
- which tensors the kernel may write (:func:`_kernel_writes`) and its views of
  their memory (a NumPy array, or the address, shape, strides and code its
  private entries take);
- allocation and moves to a device with sinpe's exceptions instead of torch's;
- host copies of tensor arguments (positions, frequencies, sections);
- float64 values rounded once to a tensor's dtype;
- the path a tensor takes (:func:`_device_path`): the kernel on the CPU, device
  operations only anywhere else, or everywhere with ``SINPE_TORCH_PATH=device``.

:func:`_kernel_writes` is read from this module at each call by the modules that
use it (``_tensors._kernel_writes(t)``): the tests force torch's own path on the
CPU by replacing it here, in one place.
"""

import contextlib
import os
import signal
import sys
import threading
from typing import Any, Callable, Iterator, Optional, Union

import numpy as np
from numpy.typing import NDArray
import torch
from torch import nn

from sinpe import _core

Device = Union[str, torch.device]

_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_SUPPORTED = "torch.float16, torch.bfloat16, torch.float32 or torch.float64"
# sinpe_dtype's codes by torch dtype, for the kernel's entries on tensor memory: the
# binding's table (_core._dtype_codes, by name, from csrc/sinpe.h's SINPE_DTYPES list),
# the one source of truth.  Read once: a decode step's add takes ~2 us.
_DTYPE_CODES = {dtype: _core._dtype_codes[str(dtype).removeprefix("torch.")] for dtype in _DTYPES}
_PLAIN_TENSORS = (torch.Tensor, nn.Parameter)
_is_functorch_wrapped: Callable[[torch.Tensor], bool] = (
    torch._C._functorch.is_functorch_wrapped_tensor)
_is_functional: Callable[[torch.Tensor], bool] = torch._is_functional_tensor
# Whether torch is tracing: then sinpe's functions take its custom ops (sinpe.torch._ops)
# or torch's expressions instead of the eager kernel calls.  _is_compiling: under
# torch.compile and torch.export (~100-200 ns a call, measured); _is_dynamo_compiling:
# under torch.compile only (~50 ns: `return False`, which torch.compile folds to True),
# for the decoding step's paths, where torch.export's fake tensors fail the kernel's
# checks anyway and the slower check comes after them.  Bound once (each lookup of the
# dotted name costs more); torch.compile knows the functions by identity.
_is_compiling: Callable[[], bool] = torch.compiler.is_compiling
_is_dynamo_compiling: Callable[[], bool] = torch.compiler.is_dynamo_compiling
# torch.autograd.graph.increment_version's own call, without its Python frame
_increment_versions: Callable[[tuple[torch.Tensor, ...]], None] = getattr(
    torch._C, "_increment_version", torch.autograd.graph.increment_version)

# The kernel's view of a torch half-type tensor: the tensor's own memory, with
# NumPy dtype metadata naming the torch element type, so that sinpe stores
# bfloat16 (which NumPy lacks) and computes add_ with torch's rule for half
# types (each operation in float32, the scale rounded to float32).
# (NumPy 1's stubs lack dtype's metadata argument.)
_FLOAT16_VIEW = np.dtype(np.float16,  # type: ignore[call-overload, unused-ignore]
                         metadata={"sinpe": "torch.float16"})
_BFLOAT16_VIEW = np.dtype(np.int16,  # type: ignore[call-overload, unused-ignore]
                          metadata={"sinpe": "torch.bfloat16"})


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
    """Whether the kernel may write ``tensor``'s memory (else torch's own ops write it).

    The kernel writes plain CPU memory: a CPU tensor of class ``torch.Tensor``
    (or an ``nn.Parameter``) whose memory holds its values, i.e. not a
    negative or conjugate view, nor a wrapper without memory of its own
    (``torch.vmap``'s batched tensors, functionalized tensors).  Tests force
    torch's path on the CPU by replacing this function.
    """
    return (
        tensor.is_cpu
        and not DEVICE_PATH_FORCED
        and type(tensor) in _PLAIN_TENSORS
        and not tensor.is_neg()  # (the conjugate bit exists only on complex dtypes)
        and not _is_functorch_wrapped(tensor)
        and not _is_functional(tensor)
    )


# SINPE_TORCH_PATH=device: CPU tensors take the path of other devices (device
# operations only: no kernel, no host read), so that every CPU machine tests it.
_PATHS = ("auto", "device")
_PATH = os.environ.get("SINPE_TORCH_PATH", "") or "auto"
if _PATH not in _PATHS:
    raise ValueError(f"SINPE_TORCH_PATH must be one of {', '.join(_PATHS)} (or unset), "
                     f"got SINPE_TORCH_PATH={_PATH!r}")
DEVICE_PATH_FORCED = _PATH == "device"


def _version(tensor: torch.Tensor) -> Optional[int]:
    """``tensor``'s version counter, or None for an inference tensor (made under
    ``torch.inference_mode``), which has none: an in-place write to it cannot be seen,
    so nothing may be kept by its identity."""
    return None if tensor.is_inference() else tensor._version


_IN_PLACE = {"__setitem__", "__iadd__", "__isub__", "__imul__", "__itruediv__"}


def _writes_in_place(func: Callable[..., Any]) -> bool:
    """Whether a torch function (as a ``__torch_function__`` mode sees it) writes its
    first argument in place: ``add_``, ``copy_``, ``x[i] = v``, ``x += y``."""
    name = getattr(func, "__name__", "")
    return name in _IN_PLACE or (name.endswith("_") and not name.endswith("__"))


def _device_path(tensor: torch.Tensor) -> bool:
    """Whether sinpe.torch serves ``tensor`` by device operations alone (no kernel call,
    no host read of its values, nothing copied per call): every device but the CPU,
    and the CPU too with ``SINPE_TORCH_PATH=device``."""
    return DEVICE_PATH_FORCED or tensor.device.type != "cpu"


def _device_path_on(device: torch.device) -> bool:
    """:func:`_device_path` of the tensors of ``device``."""
    return DEVICE_PATH_FORCED or device.type != "cpu"


@contextlib.contextmanager
def interrupts_after() -> Iterator[None]:
    """Holds a Ctrl-C that comes inside the block until the block is done (then Python's
    handler, or the one in place, runs): torch's ops that write a tensor in two steps
    are all or nothing.  Signals reach Python's main thread only; elsewhere, and where
    SIGINT is not Python's to handle, the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    if not callable(previous):  # ignored, or the default action: nothing to hold
        yield
        return
    held: list[tuple[int, Any]] = []
    signal.signal(signal.SIGINT, lambda number, frame: held.append((number, frame)))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
        if held:
            previous(*held[0])


_FLOAT64: dict[str, bool] = {}


def _float64_on(device: torch.device) -> bool:
    """Whether ``device`` has float64 tensors (Apple's MPS has none), probed once per
    kind of device."""
    known = _FLOAT64.get(device.type)
    if known is None:
        try:
            torch.zeros(1, dtype=torch.float64, device=device)
            known = True
        except (TypeError, RuntimeError):
            known = False
        _FLOAT64[device.type] = known
    return known


_Memory = tuple[int, torch.Size, tuple[int, ...], int]


def _memory(tensor: torch.Tensor) -> _Memory:
    """A CPU tensor's memory as the kernel's private entries take it: address, shape,
    strides (in elements) and sinpe's dtype code.  Making a NumPy view of it instead
    costs more than a decoding step's rotation.  The tensor must pass
    :func:`_kernel_writes` (its memory holds its values) and stay alive for the call."""
    return tensor.data_ptr(), tensor.shape, tensor.stride(), _DTYPE_CODES[tensor.dtype]


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


def _host_sections(sections: object) -> object:
    """``sections`` as sinpe reads it: a tensor's values as a list."""
    if isinstance(sections, torch.Tensor):
        return sections.tolist()
    return sections


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


class _one_torch_thread:
    """Within the block torch runs its ops on one thread: the checks of a rotary module's
    caches run transformers' forward on a few hundred elements a few dozen times, which
    on two OpenMP threads beside a busy neighbour take 7-20 ms each, on one 0.05 ms."""

    def __enter__(self) -> None:
        self.threads = torch.get_num_threads()
        if self.threads != 1:
            torch.set_num_threads(1)

    def __exit__(self, *exc: object) -> None:
        if self.threads != 1:
            torch.set_num_threads(self.threads)
