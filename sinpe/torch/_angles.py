"""Exact cos and sin of ``p * w`` on any device, by the device's own integer operations.

sinpe's C kernel makes the exact values on the CPU.  A tensor on another device
(CUDA, MPS, any torch device) cannot use it in a forward pass without reading the
positions on the host and copying the result back at every call, nor compute them
in float64 (MPS has none; consumer GPUs run it at 1/32 to 1/64 of float32's rate).
So each device keeps a few exact angles, made once by the kernel, and combines
them by the angle-addition formula, whose error does not grow with the position:

- an integer position's magnitude is split as ``|p| = h * 2**12 + l``; the tables
  hold ``cos`` and ``sin`` of ``h * 2**12 * w`` (``h`` in 0 .. 4096) and of ``l * w``
  (``l`` in 0 .. 4095): every ``|p| <= sinpe.MAX_POSITION`` (2**24) in two gathers
  (a negative position's sine is negated: the angles, and their rounding in the
  tables, are those of ``|p|``, as small as the position);
- a real position's magnitude is split exactly as ``n + f``, ``n = trunc(|p|)`` by
  those two digits, ``f`` read to 48 bits (exact for every float32 ``f`` of at least
  ``2**-25``, within ``2**-49`` below) in six digits of 8 bits (weights ``2**-8`` ..
  ``2**-48``), whose tables are made the first time real positions are seen.

Each table value is ``round(v * 2**31)``, a 64-bit integer within ``2**-32`` of the
double value, and ``cos(A + B) = cos A cos B - sin A sin B`` (``sin(A + B)`` alike)
is computed in 64-bit integer arithmetic, exactly (a product is below ``2**62``,
a sum below ``2**63``).  The one rounding is the last: the integer, rounded to odd
below ``2**-52`` (every dropped bit kept as a sticky bit), is converted to float32
by the device's correctly rounded integer conversion (below ``2**53``, so exact in
a double too), and to float16 or bfloat16 through float32 rounded to odd, which
makes the second rounding the only one.  A value is so within half an ulp of its
dtype plus ``2**-30`` of the exact one (float32: ``2**-25 + 2**-30``, against the
kernel's ``2**-25``), whatever the position; it differs from the kernel's in the
last bit only where the exact value lies within ``2**-30`` of a rounding boundary.

On the CPU the kernel runs the same integer steps (``_core._angle_values``,
``csrc/core/angles.c``) in one call instead of the few dozen small operations: the same
bits (the tests hold them to each other's).  On any other device no value of a tensor
is read on the host, nothing is copied per call, no float64
operation runs on the device (but for float64 results, and positions given in
float64, which are read in their own dtype), and the same operations serve
``torch.compile``, ``torch.export`` and CUDA graphs: the tables are marked as
static addresses, made before the first compiled call (at construction, at
``patch``, or at the first eager call on the device).  Positions beyond
``+-MAX_POSITION``, or beyond those the kernel takes at the largest frequency
(:attr:`AngleTables.limit`: angles within ``2**26`` radians, with its blocks' reach),
or NaN, infinite, give NaN caches instead of the CPU path's ``ValueError``: a check
would need a host read.
"""
from __future__ import annotations

import math
import threading
import weakref
from collections import OrderedDict
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray
import torch

import sinpe
from sinpe.torch import _tensors

MAX_POSITION = sinpe.MAX_POSITION
_CPU = torch.device("cpu")
_MAX_ANGLE = sinpe._core._MAX_ANGLE
_REACH = 32  # (csrc/python/args.c: sinpe_check_angles)
# Integer magnitudes: a high digit of 2**12 positions (4097 rows for 0 .. 2**24) and a
# low digit of 12 bits.
LOW_BITS = 12
LOW_ROWS = 1 << LOW_BITS
HIGH_ROWS = (MAX_POSITION >> LOW_BITS) + 1
# Real positions: n + f, n = trunc(p) by the integer digits, f's 48 bits in six of 8 bits.
FRACTION_BITS = 48
FRACTION_DIGIT = 8
FRACTION_ROWS = 1 << FRACTION_DIGIT
# Table values are round(v * 2**ONE): Q1.31 fixed point in int64.
ONE = 31
# Rounded to odd at 2**-(2 * ONE - STICKY) before the conversion: below 2**53.
STICKY = 10
_STICKY_MASK = (1 << STICKY) - 1
_UNIT = 2.0 ** -(2 * ONE - STICKY)

def schedule_frequencies(n: float, d: int) -> NDArray[np.float64]:
    """The frequencies of sinpe's table of width ``d`` and base ``n``, bit for bit
    (``ceil(d / 2)`` of them: an odd ``d`` has one more sine than cosine)."""
    freq: NDArray[np.float64] = sinpe._core._frequencies(float(n), int(d))  # type: ignore[attr-defined]
    return freq


# AngleTables of the frequency sets rope_cache, rope_, rope and add_ were called with,
# least recently used out (a set's tables take a few MiB per device).
_KEPT = 4
_kept: OrderedDict[tuple[bytes, float], AngleTables] = OrderedDict()
_kept_lock = threading.Lock()
# frequencies given as tensors on a device, read on the host once per tensor and version
_read: "weakref.WeakKeyDictionary[torch.Tensor, tuple[Optional[int], NDArray[np.float64]]]" = (
    weakref.WeakKeyDictionary())


def angles_of(freq: NDArray[np.float64], scale: float = 1.0) -> "AngleTables":
    """The kept :class:`AngleTables` of ``freq`` and ``scale`` (made if new)."""
    freq = np.ascontiguousarray(freq, dtype=np.float64)
    key = (freq.tobytes(), float(scale))
    with _kept_lock:
        tables = _kept.get(key)
        if tables is None:
            tables = AngleTables(freq, scale)
            _kept[key] = tables
            while len(_kept) > _KEPT:
                _kept.popitem(last=False)
        _kept.move_to_end(key)
        return tables


def frequencies_of(freq: object) -> NDArray[np.float64]:
    """Explicit frequencies as a double array: a tensor on a device is read on the
    host once (and again only after it changes), not at every call."""
    if isinstance(freq, torch.Tensor):
        if freq.is_complex():
            raise TypeError(f"freq must be real, got a tensor of dtype {freq.dtype}")
        if freq.device.type != "cpu":
            seen = _read.get(freq)
            version = _tensors._version(freq)  # (None: an inference tensor, read again)
            if seen is not None and version is not None and seen[0] == version:
                return seen[1]
            array = freq.detach().to("cpu", torch.float64).numpy()
            _read[freq] = (version, array)
            return array
        return freq.detach().to(torch.float64).numpy()
    return np.asarray(freq, dtype=np.float64)


def _signs(unit: float, dtype: Any) -> NDArray[Any]:
    """The scalings of ``[cos, sin]`` by row: a positive position, a negative one (the
    sine negated), two out of range (NaN)."""
    return np.array([[unit, unit], [unit, -unit], [math.nan] * 2, [math.nan] * 2], dtype)


def _fixed(values: NDArray[np.float64]) -> NDArray[np.int64]:
    return np.rint(np.ldexp(values, ONE)).astype(np.int64)


def _matrix(cos: NDArray[np.float64], sin: NDArray[np.float64], double: bool
            ) -> NDArray[Any]:
    """Rows of ``[[cos, -sin], [sin, cos]]`` per pair (Q1.31, or float64 with
    ``double``): shape (rows, m, 2, 2), so that a pair ``[c, s]`` times it, summed over
    the last axis, is the rotated pair."""
    c, s = (cos, sin) if double else (_fixed(cos), _fixed(sin))
    return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


class AngleTables:
    """The exact angles of one set of frequencies and one scale, kept per device.

    ``freq``: the ``m`` frequencies (double); ``scale`` multiplies every value (the
    attention factor): its mantissa (in (0.5, 1]) is folded into the low digit's
    table, its power of two applied exactly at the end.  :meth:`on` makes (once) and
    returns a device's tables; :meth:`values` gives the ``[cos, sin]`` of each pair at
    positions.
    """

    def __init__(self, freq: NDArray[np.float64], scale: float = 1.0) -> None:
        self.freq = np.ascontiguousarray(freq, dtype=np.float64)
        self.count = len(self.freq)  # m, the frequency pairs
        # the positions served: the kernel takes angles up to 2**26 radians (at a reach
        # of 32 rows beyond the positions it is given: its blocks' starts)
        top = float(np.max(np.abs(self.freq))) if self.count else 0.0
        self.limit = (MAX_POSITION if top * (MAX_POSITION + _REACH) <= _MAX_ANGLE
                      else max(int(_MAX_ANGLE // top) - _REACH, 0))
        self.scale = float(scale)
        mantissa, exponent = math.frexp(self.scale)
        if abs(mantissa) == 0.5:  # a power of two: all of it in the exponent
            mantissa, exponent = 2 * mantissa, exponent - 1
        self.mantissa = mantissa
        self.unit = math.ldexp(_UNIT, exponent)  # the last, exact, scaling
        self._lock = threading.Lock()
        self._tables: dict[tuple[torch.device, str], tuple[torch.Tensor, ...]] = {}
        # the CPU's tables as the kernel reads them, by whether positions are real
        self._arrays: dict[bool, tuple[Any, ...]] = {}

    def pairs(self, positions: NDArray[Any]) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        """The double cos and sin of each pair at ``positions`` (the kernel's angles)."""
        width = 2 * self.count
        cos, sin = sinpe.rope(None, width, positions=positions, freq=self.freq,
                              dtype=np.float64)
        return cos[..., : self.count], sin[..., : self.count]

    def on(self, device: torch.device, kind: str = "integer") -> tuple[torch.Tensor, ...]:
        """The tables of ``kind`` on ``device``, made on the CPU by the kernel and moved
        once: "integer": the scalings of cos and sin (float32 rows ``[unit, unit]``,
        ``[unit, -unit]`` for negative positions, NaN for positions out of range), the
        pairs' indices, the high and low digits' (Q1.31); "fraction": the six fractional digits' (Q1.31);
        "double", "double fraction": the same digits in float64 (for float64 results)."""
        key = (device, kind)
        tables = self._tables.get(key)
        if tables is None:
            if _tracing():
                raise RuntimeError(
                    f"sinpe's exact angle tables for {device} are made at the first eager "
                    "call on that device (or at construction and patch, on the model's "
                    "device): call the model once without torch.compile first")
            with self._lock:
                tables = self._tables.get(key)
                if tables is None:
                    if device.type == "meta":  # shapes alone: no kernel call, no values
                        tables = tuple(torch.empty(shape, dtype=dtype, device=device)
                                       for shape, dtype in self._shapes(kind))
                    else:
                        tables = tuple(_on_device(array, device) for array in self._make(kind))
                    self._tables[key] = tables
        return tables

    def _shapes(self, kind: str) -> list[tuple[tuple[int, ...], torch.dtype]]:
        """The shapes and dtypes of :meth:`_make`'s arrays."""
        m, values = self.count, torch.float64 if kind.startswith("double") else torch.int64
        if kind.endswith("fraction"):
            return [((FRACTION_ROWS, m, 2, 2), values)] * (FRACTION_BITS // FRACTION_DIGIT)
        scalings = torch.float64 if values is torch.float64 else torch.float32
        return [((4, 2), scalings), ((m,), torch.int64), ((HIGH_ROWS, m, 2), values),
                ((LOW_ROWS, m, 2, 2), values)]

    # copies and pickles (of a model holding a patched module) make their tables again
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        del state["_lock"], state["_tables"], state["_arrays"]
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._lock = threading.Lock()
        self._tables = {}
        self._arrays = {}

    def _make(self, kind: str) -> list[NDArray[Any]]:
        """The arrays of ``kind`` (see :meth:`on`)."""
        double = kind.startswith("double")
        if kind.endswith("fraction"):
            made = []
            for digit in range(FRACTION_BITS // FRACTION_DIGIT):
                step = 2.0 ** -(FRACTION_DIGIT * (digit + 1))
                cos, sin = self.pairs(np.arange(FRACTION_ROWS, dtype=np.float64) * step)
                made.append(_matrix(cos, sin, double))
            return made
        # the rows no position in range reaches stay zero (a frequency beyond 2**26 / 4095,
        # Stable Audio 3's 2*pi*1e4, serves positions up to its limit, below 4096)
        high_cos, high_sin = self._served(np.arange(HIGH_ROWS, dtype=np.int64) << LOW_BITS)
        low_cos, low_sin = self._served(np.arange(LOW_ROWS, dtype=np.int64))
        pairs = np.arange(self.count, dtype=np.int64)
        if double:
            return [_signs(self.scale, np.float64), pairs, np.stack([high_cos, high_sin], -1),
                    _matrix(low_cos, low_sin, True)]
        return [_signs(self.unit, np.float32), pairs,
                np.stack([_fixed(high_cos), _fixed(high_sin)], -1),  # (rows, m, 2)
                _matrix(low_cos * self.mantissa, low_sin * self.mantissa, False)]

    def _served(self, positions: NDArray[np.int64]) -> tuple[NDArray[np.float64], ...]:
        """:meth:`pairs` at the ``positions`` up to :attr:`limit`, zeros beyond."""
        cos = np.zeros((len(positions), self.count))
        sin = np.zeros((len(positions), self.count))
        served = positions <= self.limit
        cos[served], sin[served] = self.pairs(positions[served])
        return cos, sin

    # -- the angles

    def fixed(self, positions: torch.Tensor, per_pair: bool = False,
              double: bool = False, rest: Optional[torch.Tensor] = None
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(V, unit)``: ``V`` of shape ``rows + (m, 2)``, the exact ``[cos, sin]`` of
        each pair of ``|p|``, int64 in units of ``unit`` (float32, shape ``rows + (1,
        2)``: the scaling of cos and of sin, the latter negative for a negative
        position, NaN where a position is out of range) times ``scale``; with
        ``double``, float64 values and the float64 ``scale`` as ``unit``.  ``rows`` is
        ``positions.shape``, or without its last axis (of length m) with ``per_pair``:
        then each pair has its own position (multi-axis sections).  ``rest`` (float32
        positions): each position is ``positions + rest``, ``|rest|`` at most 1 (the
        rounding error of float32 arithmetic that formed it: :mod:`._pairs`), read to
        the same 48 fractional bits."""
        device = positions.device
        real = positions.is_floating_point()
        prefix = "double" if double else "integer"
        factors, pairs, high, low = self.on(device, prefix)
        pair = pairs if per_pair else None
        if real:  # |p| = n + f: n = trunc(|p|) and f exactly, f read as F / 2**48
            wide = positions if positions.dtype is torch.float64 else positions.float()
            magnitude = wide.abs()
            valid = magnitude <= self.limit
            whole = magnitude.trunc()
            ticks = ((magnitude - whole) * 2.0 ** FRACTION_BITS).round().long()
            if rest is not None:  # the sign of p + rest; rest's ticks beside p's (< 2**49)
                negative = (wide < 0) | ((wide == 0) & (rest < 0))
                valid = valid & (magnitude + 1 <= self.limit) & (rest.abs() <= 1)
                rest = torch.where(negative, -rest, rest).clamp(-1, 1)
                ticks = ticks + (rest * 2.0 ** FRACTION_BITS).round().long()
                wide = torch.where(negative, -1.0, 1.0)  # (the sign row below)
            # (ticks below 0 or of 2**48 and more carry into the whole: an arithmetic shift)
            whole = whole.clamp(max=self.limit).long() + (ticks >> FRACTION_BITS)
            ticks = ticks & ((1 << FRACTION_BITS) - 1)
        else:  # (clamped first: the magnitude of the most negative int64 is itself)
            wide = positions.long().clamp(-self.limit - 1, self.limit + 1)
            whole = wide.abs()
            valid = whole <= self.limit
        whole = whole.clamp(0, self.limit)
        value = _combine(_gather(high, whole >> LOW_BITS, pair),
                         _gather(low, whole & (LOW_ROWS - 1), pair))
        if real:
            fractional = self.on(device, "double fraction" if double else "fraction")
            for digit, table in enumerate(fractional):
                shift = FRACTION_BITS - FRACTION_DIGIT * (digit + 1)
                if not double:
                    value = (value + (1 << (ONE - 1))) >> ONE  # back to Q1.31, rounded
                index = (ticks >> shift) & (FRACTION_ROWS - 1)
                value = _combine(value, _gather(table, index, pair))
        row = (wide < 0).long() + 2 * valid.logical_not().long()  # the row of the scalings
        scale = torch.embedding(factors, row)
        return value, (scale if per_pair else scale.unsqueeze(-2))

    def values(self, positions: torch.Tensor, dtype: torch.dtype,
               per_pair: bool = False, rest: Optional[torch.Tensor] = None) -> torch.Tensor:
        """The ``[cos, sin]`` pairs (shape ``rows + (m, 2)``) in ``dtype``, each the exact
        value rounded once (see :meth:`fixed`).  float64: the same digits in float64
        (the caller's dtype), within a few ulps of the double values."""
        if dtype is torch.float64:
            value, scale = self.fixed(positions, per_pair, double=True, rest=rest)
            return value * scale
        if rest is None and kernel_reads(positions):
            return self._on_cpu(positions, dtype, per_pair)
        # (positions with a rest take the device operations on the CPU too: the same
        # bits on every device)
        value, unit = self.fixed(positions, per_pair, rest=rest)
        return rounded(value, unit, dtype)

    def _on_cpu(self, positions: torch.Tensor, dtype: torch.dtype, per_pair: bool
                ) -> torch.Tensor:
        """:meth:`values` of a CPU tensor, by the kernel (:meth:`array_values`)."""
        half = dtype is not torch.float32
        out = torch.from_numpy(self.array_values(kernel_positions(positions), per_pair, half))
        return out if dtype is torch.float32 else out.to(dtype)

    def array_values(self, positions: NDArray[Any], per_pair: bool, half: bool
                     ) -> NDArray[np.float32]:
        """:meth:`values` on the CPU by the kernel (``_core._angle_values``): the same
        integer steps in one call instead of dozens of small operations, the same bits,
        float32 (``half``: rounded to odd, for one rounding to a 16-bit type after).
        ``positions``: :func:`kernel_positions`."""
        real = positions.dtype != np.int64
        arrays = self._arrays.get(real)
        if arrays is None:
            scalings, _, high, low = (t.numpy() for t in self.on(_CPU))
            fractions = tuple(t.numpy() for t in self.on(_CPU, "fraction")) if real else None
            arrays = self._arrays[real] = (high, low, fractions, scalings)
        high, low, fractions, scalings = arrays
        return sinpe._core._angle_values(positions, per_pair, high, low, fractions, scalings,
                                         self.limit, half)


def kernel_reads(positions: torch.Tensor) -> bool:
    """Whether :meth:`AngleTables.values` of ``positions`` runs on the kernel: a plain
    CPU tensor (see ``_tensors._kernel_writes``) outside torch.compile's tracing."""
    return not torch.compiler.is_compiling() and _tensors._kernel_writes(positions)


def kernel_positions(positions: torch.Tensor) -> NDArray[Any]:
    """A CPU tensor's positions as the kernel reads them, in the dtype the device
    operations compute in: float32 or float64 for real ones, int64 for integers."""
    wide = positions.detach()
    if not wide.is_floating_point():
        wide = wide.long()
    elif wide.dtype not in (torch.float32, torch.float64):
        wide = wide.float()
    return wide.contiguous().numpy()


def _on_device(array: NDArray[Any], device: torch.device) -> torch.Tensor:
    tensor = torch.from_numpy(np.ascontiguousarray(array))
    with torch.inference_mode(False):  # ordinary tensors, usable in any mode
        tensor = tensor.to(device)
    _static(tensor)
    return tensor


def _gather(table: torch.Tensor, index: torch.Tensor, pair: Optional[torch.Tensor]
            ) -> torch.Tensor:
    """Rows ``index`` of a table of shape (rows, m, ...) as shape index.shape + (m, ...)
    (``pair`` given: element (index[..., j], j) for each pair j of index's last axis)."""
    rows, m = table.shape[0], table.shape[1]
    tail = tuple(table.shape[2:])
    if pair is None:
        flat = torch.embedding(table.view(rows, -1), index)
        return flat.view(*index.shape, m, *tail)
    flat = torch.embedding(table.view(rows * m, -1), index * m + pair)
    return flat.view(*index.shape, *tail)


def _combine(value: torch.Tensor, matrix: torch.Tensor) -> torch.Tensor:
    """The pairs ``[c, s]`` of ``value`` rotated by ``matrix``'s angles (Q1.31 x Q1.31:
    exact, in units of 2**-62; float64: rounded)."""
    return (value.unsqueeze(-2) * matrix).sum(-1)


def rounded(value: torch.Tensor, unit: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``value * unit`` (int64 ``value``, a power of two or NaN ``unit``) rounded once to
    ``dtype``: rounded to odd below ``2**53`` (a sticky bit), converted by the device's
    correctly rounded integer conversion, scaled exactly."""
    odd = (value >> STICKY) | ((value & _STICKY_MASK) != 0)
    if dtype is torch.float64:
        return odd.double() * unit.double()
    narrow = odd.float()
    if dtype is not torch.float32:  # float32 rounded to odd: the half type's rounding is the only one
        back = narrow.long()
        inexact = back != odd
        bits = narrow.view(torch.int32)
        bits = (bits - (inexact & (back.abs() > odd.abs())).int()) | inexact.int()
        narrow = bits.view(torch.float32)
    return (narrow * unit).to(dtype)


def _static(tensor: torch.Tensor) -> None:
    """A table's address is fixed for CUDA graphs (not copied at each replay)."""
    try:
        torch._dynamo.mark_static_address(tensor, guard=False)
    except Exception:  # pragma: no cover - an older torch without it: only slower
        pass


def _tracing() -> bool:
    return bool(torch.compiler.is_compiling())


def pair_rows(sections: tuple[int, ...], sections_layout: str) -> NDArray[np.int64]:
    """The row of the positions (the section) each frequency pair takes: sinpe's two
    rules, as its kernel applies them ("contiguous": consecutive chunks of
    ``sections[s]`` pairs; "interleaved": row ``s >= 1`` takes the pairs ``j % S == s``
    below ``S * sections[s]``, row 0 the rest)."""
    counts = np.asarray(sections, dtype=np.int64)
    if sections_layout == "contiguous":
        return np.repeat(np.arange(len(counts)), counts)
    pair = np.arange(int(counts.sum()))
    rows = np.zeros(len(pair), np.int64)
    for s in range(1, len(counts)):
        rows[(pair % len(counts) == s) & (pair < len(counts) * counts[s])] = s
    return rows


# -- the forms of the caches

def pair_caches(values: torch.Tensor, form: str) -> Any:
    """``[cos, sin]`` pairs (shape ``rows + (m, 2)``) as the caches of ``form``:
    "concatenated" ``(cos, sin)`` of width ``2m`` (``cat(c, c)``), "interleaved" (each
    value twice in a row), "half" (width ``m``), each contiguous; "complex": one
    complex tensor ``cos + i sin`` of width ``m`` (a view of ``values``)."""
    if form == "complex":
        return torch.view_as_complex(values)
    both = values.movedim(-1, 0)  # (2, rows..., m)
    if form == "concatenated":
        both = torch.cat([both, both], -1)
    elif form == "interleaved":
        both = both.unsqueeze(-1).expand(*both.shape, 2).reshape(*both.shape[:-1], -1)
    elif form == "half":
        both = both.contiguous()
    else:
        raise ValueError(f"unknown form of caches {form!r}")
    cos, sin = both.unbind(0)
    return cos, sin


def sinusoid_table(values: torch.Tensor, d: int) -> torch.Tensor:
    """``[cos, sin]`` pairs (``rows + (m, 2)``) as rows of the sinusoidal table of width
    ``d`` (``[sin_0, cos_0, sin_1, cos_1, ...]``; an odd ``d`` ends with a sine)."""
    table = values.flip(-1).reshape(*values.shape[:-2], -1)
    return table if table.shape[-1] == d else table[..., :d]
