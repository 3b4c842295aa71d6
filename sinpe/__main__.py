"""``python -m sinpe``: a small table, and sinpe's error against the float64 recipe."""
from __future__ import annotations

import numpy as np

import sinpe
from sinpe.reference import table_float64


def accuracy_rows() -> list[tuple[str, float]]:
    """Max |sinpe float32 - float64 reference| for a few tables, in units of 2**-24."""
    cases = [
        ("L=5000, d=512 (the usual buffer)", 5000, 512, 0),
        ("L=1024, d=512 at positions 2**24-1023 .. 2**24", 1024, 512, sinpe.MAX_POSITION - 1023),
        ("L=1024, d=513 at positions -2**24 ..", 1024, 513, -sinpe.MAX_POSITION),
    ]
    rows = []
    for label, L, d, offset in cases:
        error = np.abs(sinpe.encode(L, d, offset=offset) - table_float64(L, d, offset=offset)).max()
        rows.append((label, float(error) / 2.0**-24))
    return rows


def main() -> None:
    np.set_printoptions(precision=4, suppress=True, linewidth=100)
    print(f"sinpe {sinpe.__version__}: sinpe.encode(6, 8)")
    print(sinpe.encode(6, 8))
    print("\nmax |float32 error| vs the float64 reference, in units of 2**-24 (promise: <= 1)")
    for label, units in accuracy_rows():
        print(f"  {units:6.3f}  {label}")


if __name__ == "__main__":
    main()
