"""Float32 buffers of angles or frequencies that a module made at construction: the
angles its code takes from them formed again, exactly, with no host read.

Kandinsky 5 and 6 keep, per axis, a non-persistent buffer ``outer(arange(n), freq)`` in
float32, look its rows up by the positions they are given, and reshape, concatenate (and
divide by a scale) before the cosine; Helios multiplies float32 vectors of frequencies
by a grid of positions in an ``einsum``.  Their run in double takes those float32 angles
as they are, so the inline form (:mod:`._inline`) gives the exact cosine of the float32
angle, its rounding and all.  This form gives the exact cosine of the angle the code
stands for: the position times the model's own float32 frequency, in double.

- :func:`angle_tables` finds the buffers by their values: float32, not persistent (a
  persistent one comes from a checkpoint), a vector of frequencies, or a table whose row
  ``i`` is ``i`` times its row 1, each product rounded once.
- :func:`learn` runs the code three times more, each buffer swapped for its positions
  (a table's row ``i`` all ``i``, exact; ones for a vector), then for its columns'
  numbers, then for ones.  Each cos and sin call then shows, along one axis of its
  angle, the position and which frequency each element carries (its number over what
  the code made of a one: a scale it divides by, a position it multiplies by).  The form
  holds where every angle the code took is that position times that frequency rounded
  to float32, each frequency the same along the other axes: the swap changes nothing
  but that rounding.
- :class:`PositionTables` runs the code with the buffers swapped for their positions,
  under :class:`._inline.ExactTrig` with each call's frequencies: the exact angle tables
  per pair (the kernel on the CPU, device operations elsewhere), rounded once.

The caller checks the outputs against the code's own (``ExactCall._learn_inline``).
The buffers are swapped only for the length of a call, under a lock: the module keeps
its own, and ``undo`` has nothing to give back.
"""

import contextlib
import threading
from typing import Any, Callable, Iterator, Optional

import numpy as np
import torch

from sinpe.torch._angles import AngleTables
from sinpe.torch.patching import _inline

_MAX_ROWS = 2**24  # positions exact in float32


def angle_tables(module: Any) -> list[tuple[torch.nn.Module, str]]:
    """The (owner, name) of each non-persistent float32 buffer of ``module`` (and its
    submodules) that may hold angles: a vector of frequencies, or a table whose row ``i``
    is ``i`` times its row 1, rounded once (``outer(arange(n), freq)``)."""
    found: list[tuple[torch.nn.Module, str]] = []
    if not isinstance(module, torch.nn.Module):
        return found
    for owner in module.modules():
        for name, table in owner._buffers.items():
            if (table is None or name not in owner._non_persistent_buffers_set
                    or table.dtype is not torch.float32 or table.dim() not in (1, 2)
                    or not table.numel() or table.device.type == "meta"):
                continue
            with torch.no_grad():
                if table.dim() == 1:
                    if bool(table.isfinite().all()):
                        found.append((owner, name))
                    continue
                if not 2 <= table.shape[0] <= _MAX_ROWS:
                    continue
                rows = torch.arange(table.shape[0], dtype=torch.float32, device=table.device)
                if torch.equal(table, rows[:, None] * table[1]):  # (float32 products)
                    found.append((owner, name))
    return found


def _buffer(owner: torch.nn.Module, name: str) -> torch.Tensor:
    """The buffer ``name`` of ``owner`` (one :func:`angle_tables` found: not None)."""
    table = owner._buffers[name]
    assert table is not None
    return table


@contextlib.contextmanager
def _swapped(tables: list[tuple[torch.nn.Module, str]],
             values: list[torch.Tensor]) -> Iterator[None]:
    """The buffers of ``tables`` replaced by ``values`` for the length of the block."""
    kept = [_buffer(owner, name) for owner, name in tables]
    for (owner, name), value in zip(tables, values):
        owner._buffers[name] = value
    try:
        yield
    finally:
        for (owner, name), value in zip(tables, kept):
            owner._buffers[name] = value


def _recorded(own: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
              tables: list[tuple[torch.nn.Module, str]],
              values: list[torch.Tensor]) -> list[tuple[torch.Tensor, bool]]:
    """Each cos and sin call's (angle, cosine) with the tables swapped for ``values``."""
    mode = _inline.ExactTrig(record=True)
    with torch.no_grad(), _swapped(tables, values), mode:
        own(*args, **kwargs)
    return [(angle, cosine) for angle, cosine, _, _ in mode.calls]


class PositionTables:
    """The code run with its product tables swapped for their positions, each cos and sin
    exact at each call's frequencies (module docstring)."""

    def __init__(self, tables: list[tuple[torch.nn.Module, str]],
                 positions: list[torch.Tensor], freqs: list[np.ndarray], axes: list[int]
                 ) -> None:
        self.tables = tables
        self._positions = positions
        self._lock = threading.Lock()
        # (one AngleTables per set of frequencies: a cos and a sin of one tensor share it,
        # and ExactTrig makes their pairs once)
        shared: dict[bytes, AngleTables] = {}
        angles = [shared.setdefault(f.tobytes(), AngleTables(f)) for f in freqs]
        self.trig = _inline.PerCall(angles, [torch.from_numpy(f.astype(np.float32))
                                             for f in freqs], axes)

    def _positions_on(self) -> list[torch.Tensor]:
        """The positions tables, where the module's own are now (a model moved after the
        patch: copied once, device to device)."""
        for i, (owner, name) in enumerate(self.tables):
            device = _buffer(owner, name).device
            if self._positions[i].device != device:
                self._positions[i] = self._positions[i].to(device)
        return self._positions

    def run(self, own: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
            ) -> Any:
        """The code's outputs with exact angles; raises :class:`_inline.Unlearned` where
        its cos and sin calls are not those learned (another branch of the code)."""
        with self._lock, _swapped(self.tables, self._positions_on()), \
                _inline.ExactTrig(per_call=self.trig):
            return own(*args, **kwargs)


def _swaps(table: torch.Tensor, first: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """What a table is swapped for: its positions (a table's row ``i`` all ``i``; ones for
    a vector of frequencies), its columns' numbers (from ``first``), ones."""
    width = table.shape[-1]
    column = torch.arange(width, dtype=torch.float32, device=table.device) + first
    if table.dim() == 1:
        return torch.ones_like(table), column, torch.ones_like(table)
    rows = table.shape[0]
    index = torch.arange(rows, dtype=torch.float32, device=table.device)
    return (index[:, None].expand(rows, width).contiguous(),
            column.expand(rows, width).contiguous(), torch.ones_like(table))


def _numbers(n: torch.Tensor, u: torch.Tensor) -> Optional[tuple[int, np.ndarray]]:
    """(axis, numbers): the axis of a call's angle along which its columns' numbers run,
    constant along every other axis (the last axis first), NaN for a column where the
    code made every value of a one 0; else None."""
    ratio = n.double() / u.double()
    valid = u != 0
    for axis in [n.dim() - 1, *range(n.dim() - 1)]:
        r = ratio.movedim(axis, -1).reshape(-1, n.shape[axis])
        v = valid.movedim(axis, -1).reshape(-1, n.shape[axis])
        high = torch.where(v, r, -torch.inf).amax(0)
        low = torch.where(v, r, torch.inf).amin(0)
        some = v.any(0)
        if bool((high[some] == low[some]).all()):
            return axis, torch.where(some, high, torch.nan).cpu().numpy()
    return None


def learn(own: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
          tables: list[tuple[torch.nn.Module, str]],
          angles: list[tuple[torch.Tensor, bool]]) -> Optional[PositionTables]:
    """The form, if every cos and sin call of the code (``angles``: their float32 angles
    with its own tables) takes positions times frequencies from the tables, each product
    rounded once to float32; else None."""
    own_tables = [_buffer(owner, name) for owner, name in tables]
    positions: list[torch.Tensor] = []
    numbers: list[torch.Tensor] = []
    ones: list[torch.Tensor] = []
    first = 2  # (from 2: a column from no table swapped reads 1, its value over itself)
    for table in own_tables:
        swaps = _swaps(table, first)
        for kept, swap in zip((positions, numbers, ones), swaps):
            kept.append(swap)
        first += table.shape[-1]
    # the model's float32 frequencies (a table's row 1), read once here
    every = np.concatenate([(table[1] if table.dim() == 2 else table).double().cpu().numpy()
                            for table in own_tables])
    try:
        at = _recorded(own, args, kwargs, tables, positions)
        which = _recorded(own, args, kwargs, tables, numbers)
        unit = _recorded(own, args, kwargs, tables, ones)
    except Exception:
        return None
    if not (len(at) == len(which) == len(unit) == len(angles)) or not angles:
        return None
    freqs, axes = [], []
    for (angle, cosine), (x, c1), (n, c2), (u, c3) in zip(angles, at, which, unit):
        if not (cosine == c1 == c2 == c3) or not (
                angle.shape == x.shape == n.shape == u.shape) or not x.numel():
            return None
        if x.dtype is not torch.float32 or angle.dtype is not torch.float32:
            return None
        found = _numbers(n, u)
        if found is None:
            return None  # a column that carries other frequencies in other rows
        axis, number = found
        known = ~np.isnan(number)
        if not (np.all(number[known] == np.round(number[known]))
                and np.all(number[known] >= 2) and np.all(number[known] <= len(every) + 1)):
            return None
        # (a column no value of a one reached: its angles are 0 at any frequency)
        freq = np.zeros(len(number))
        freq[known] = every[number[known].astype(np.int64) - 2]
        f32 = torch.from_numpy(freq.astype(np.float32)).to(x.device)
        product = (x.movedim(axis, -1) * f32).movedim(-1, axis)
        if not torch.equal(product, angle):
            return None  # angles that are not position times frequency, rounded once
        freqs.append(freq)
        axes.append(axis)
    return PositionTables(tables, positions, freqs, axes)
