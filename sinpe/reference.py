"""The plain-NumPy float64 recipe that sinpe's accuracy is measured against.

This is DESIGN.md's formula written the obvious way: frequencies and angles in
float64, one ``np.sin``/``np.cos`` per element.  It allocates several
temporaries of the table's size; use it to check, not to compute.
"""
from __future__ import annotations

import numpy as np
from numpy.typing import NDArray


def table_float64(L: int, d: int, n: float = 10000.0, offset: int = 0) -> NDArray[np.float64]:
    """Float64 ``(L, d)`` table: column j is sin (even j) or cos (odd j) of p * n**(-2(j//2)/d)."""
    positions = np.arange(offset, offset + L, dtype=np.float64)[:, None]
    freq = n ** (-(2.0 * (np.arange(d) // 2)) / d)
    angles = positions * freq
    table: NDArray[np.float64] = np.where(np.arange(d) % 2 == 0, np.sin(angles), np.cos(angles))
    return table
