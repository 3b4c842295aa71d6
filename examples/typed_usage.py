"""sinpe's public API under ``mypy --strict`` (tests/test_typing.py checks this file).

The annotations below are what the stubs in sinpe/_core.pyi promise: the
result dtype follows ``dtype=``, ``out=`` and ``add_`` give back the array
they were handed.  Runs as a script too: ``python examples/typed_usage.py``.
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

import sinpe


def table(L: int, d: int) -> NDArray[np.float32]:
    return sinpe.encode(L, d)  # float32 by default


def wide_table(L: int, d: int, base: float) -> NDArray[np.float64]:
    return sinpe.encode(L, d, base, offset=-L // 2, dtype=np.float64)


def half_table(L: int, d: int) -> NDArray[np.float16]:
    return sinpe.encode(L, d, dtype="float16")


def into(buffer: NDArray[np.float64]) -> NDArray[np.float64]:
    L, d = buffer.shape
    return sinpe.encode(L, d, out=buffer)  # out= gives back out, with its type


def embed(x: NDArray[np.float32]) -> NDArray[np.float32]:
    return sinpe.add_(x, offset=0, axis=-2, scale=float(x.shape[-1]) ** 0.5)


def main() -> None:
    threads: int = sinpe.get_num_threads()
    sinpe.set_num_threads(threads)
    bound: int = sinpe.MAX_POSITION
    version: str = sinpe.__version__
    x = np.zeros((2, 16, 8), np.float32)
    print(f"sinpe {version}: {threads} threads, positions up to {bound}")
    print(table(16, 8).dtype, wide_table(16, 8, 100.0).dtype, half_table(16, 8).dtype)
    print(into(np.empty((4, 8))).shape, embed(x)[0, 1, 0])


if __name__ == "__main__":
    main()
