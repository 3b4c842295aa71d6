"""Type stubs for the C extension sinpe._core (see csrc/python/docstrings.h for the docstrings)."""
# The overload-overlap ignores below are needed with NumPy 2's type stubs and
# unused with NumPy 1's; CI type-checks under both.
# mypy: disable-error-code="unused-ignore"

from collections.abc import Sequence
from typing import Any, Final, Literal, TypeAlias, TypeVar, overload

import numpy as np
from numpy.typing import ArrayLike, DTypeLike, NDArray

MAX_POSITION: Final[int]
MIN_BASE: Final[float]
_MAX_ANGLE: Final[float]  # the largest |p * w| in radians the kernels take (2**26)
MAX_BASE: Final[float]
_compiler: Final[str]  # the compiler that built the kernels (show_config)
# sinpe.h's dtype codes by name ({"float16": 0, "float32": 1, ...}): what a tensor's memory
# carries to the private entries below
_dtype_codes: Final[dict[str, int]]

def _simd_levels() -> tuple[str, list[str]]: ...  # (level in use, levels the CPU has)
def _select_simd(level: str, /) -> bool: ...  # tests: run another level's loops
def _row_cache() -> tuple[int, int]: ...  # tests: (tables, bytes) kept for adds and rotations
# large calls on a loaded OpenMP runtime's threads (sinpe.torch shares torch's), or own with None
def _share_openmp(library: str | None, /) -> None: ...
def _sharing_openmp() -> bool: ...
def _add_tensor(address: int, shape: Sequence[int], strides: Sequence[int], dtype: int,
                n: float, offset: int, axis: int, scale: float, /) -> None: ...
# sinpe.torch's exact angle tables evaluated on the CPU: [cos, sin] per pair, float32
def _angle_values(positions: np.ndarray[Any, Any], per_pair: bool, high: np.ndarray[Any, Any],
                  low: np.ndarray[Any, Any], fractions: tuple[np.ndarray[Any, Any], ...] | None,
                  scalings: np.ndarray[Any, Any], limit: int, half: bool, /
                  ) -> np.ndarray[Any, np.dtype[np.float32]]: ...
MAX_THREADS: Final[int]

_ArrayT = TypeVar("_ArrayT", bound=np.ndarray[Any, Any])
_Layout: TypeAlias = Literal["interleaved", "concatenated"]
_GridLayout: TypeAlias = Literal["interleaved", "concatenated", "sines_first"]
_Schedule: TypeAlias = Literal["paper", "fairseq"]
_SectionsLayout: TypeAlias = Literal["contiguous", "interleaved"]

_Float16Spelling: TypeAlias = (
    type[np.float16] | np.dtype[np.float16] | Literal["float16", "f2", "half", "e"]
)
_Float32Spelling: TypeAlias = (
    type[np.float32] | np.dtype[np.float32] | Literal["float32", "f4", "single", "f"]
)
_Float64Spelling: TypeAlias = (
    type[np.float64] | type[float] | np.dtype[np.float64] | Literal["float64", "f8", "double", "d"]
)

# With out=, the result is out itself.  float16 comes before float32 and float32
# before float64 because NumPy's stubs make the narrower float a subtype of the wider;
# that makes mypy call them overlapping, and the first match is the one we mean.
@overload
def encode(
    L: int,
    d: int,
    n: float = 10000.0,
    *,
    offset: int = 0,
    dtype: DTypeLike | None = None,
    out: _ArrayT,
    layout: _Layout = "interleaved",
    schedule: _Schedule = "paper",
    freq: ArrayLike | None = None,
) -> _ArrayT: ...
@overload
def encode(  # type: ignore[overload-overlap]
    L: int,
    d: int,
    n: float = 10000.0,
    *,
    offset: int = 0,
    dtype: _Float16Spelling,
    out: None = None,
    layout: _Layout = "interleaved",
    schedule: _Schedule = "paper",
    freq: ArrayLike | None = None,
) -> NDArray[np.float16]: ...
@overload
def encode(  # type: ignore[overload-overlap]
    L: int,
    d: int,
    n: float = 10000.0,
    *,
    offset: int = 0,
    dtype: _Float32Spelling | None = None,
    out: None = None,
    layout: _Layout = "interleaved",
    schedule: _Schedule = "paper",
    freq: ArrayLike | None = None,
) -> NDArray[np.float32]: ...
@overload
def encode(
    L: int,
    d: int,
    n: float = 10000.0,
    *,
    offset: int = 0,
    dtype: _Float64Spelling,
    out: None = None,
    layout: _Layout = "interleaved",
    schedule: _Schedule = "paper",
    freq: ArrayLike | None = None,
) -> NDArray[np.float64]: ...
@overload
def encode(
    L: int,
    d: int,
    n: float = 10000.0,
    *,
    offset: int = 0,
    dtype: DTypeLike,
    out: None = None,
    layout: _Layout = "interleaved",
    schedule: _Schedule = "paper",
    freq: ArrayLike | None = None,
) -> NDArray[np.floating[Any]]: ...
def add_(
    embeddings: _ArrayT,
    n: float = 10000.0,
    *,
    offset: int = 0,
    axis: int = -2,
    scale: float = 1.0,
    layout: _Layout = "interleaved",
    schedule: _Schedule = "paper",
    freq: ArrayLike | None = None,
    positions: ArrayLike | None = None,
    padding: ArrayLike | None = None,
) -> _ArrayT: ...
def encode_at(
    positions: ArrayLike,
    d: int,
    n: float = 10000.0,
    *,
    dtype: DTypeLike | None = None,
    out: np.ndarray[Any, Any] | None = None,
    layout: _Layout = "interleaved",
    schedule: _Schedule = "paper",
    freq: ArrayLike | None = None,
    padding: ArrayLike | None = None,
) -> NDArray[np.floating[Any]]: ...
def rope(
    L: int | None,
    d: int,
    n: float = 10000.0,
    *,
    offset: int = 0,
    positions: ArrayLike | None = None,
    dtype: DTypeLike | None = None,
    out: tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]] | None = None,
    layout: _Layout = "concatenated",
    freq: ArrayLike | None = None,
    scale: float = 1.0,
    sections: Sequence[int] | None = None,
    sections_layout: _SectionsLayout | None = "contiguous",
) -> tuple[NDArray[np.floating[Any]], NDArray[np.floating[Any]]]: ...
def rope_(
    x: _ArrayT,
    n: float | None = 10000.0,
    *,
    offset: int | None = 0,
    axis: int | None = -2,
    positions: ArrayLike | None = None,
    layout: _Layout = "concatenated",
    freq: ArrayLike | None = None,
    rotary_dim: int | None = None,
    scale: float = 1.0,
    exact: bool = False,
    sections: Sequence[int] | None = None,
    sections_layout: _SectionsLayout | None = "contiguous",
) -> _ArrayT: ...
# A tensor's memory as sinpe.torch hands it to the private entries below: address,
# shape, strides (in elements), sinpe's dtype code.
_Memory: TypeAlias = tuple[int, Sequence[int], Sequence[int], int]
# sinpe.torch's rotations: rope_ of source into out (source None: in place; out None:
# checks only), and out = source * cos + rotate_half(source) * sin with the caches
# given; each array may be a tensor's memory.
def _rope_into(
    out: _ArrayT | _Memory | None,
    source: np.ndarray[Any, Any] | _Memory | None,
    n: float | None = 10000.0,
    *,
    offset: int | None = 0,
    axis: int | None = -2,
    positions: ArrayLike | None = None,
    layout: _Layout = "concatenated",
    freq: ArrayLike | None = None,
    rotary_dim: int | None = None,
    scale: float = 1.0,
    exact: bool = False,
    inverse: bool = False,
    sections: Sequence[int] | None = None,
    sections_layout: _SectionsLayout | None = "contiguous",
) -> _ArrayT | _Memory | None: ...
def _rotate_by(
    out: _ArrayT | _Memory,
    source: np.ndarray[Any, Any] | _Memory,
    cos: np.ndarray[Any, Any] | _Memory,
    sin: np.ndarray[Any, Any] | _Memory,
    *,
    layout: _Layout = "concatenated",
) -> _ArrayT | _Memory: ...
# apply_rotary_pos_emb's decoding step: q and k rotated by cos and sin unsqueezed at
# unsqueeze_dim, in one call; False (nothing written) where HF's expression decides.
# An output as an int: the address of a new contiguous tensor of its source's shape.
def _apply_rotary(q_out: int | _Memory, q: _Memory, k_out: int | _Memory | None, k: _Memory | None,
                  cos: _Memory, sin: _Memory, unsqueeze_dim: int, layout: int, /) -> bool: ...
def encode_grid(
    shape: Sequence[int],
    d: int,
    n: float = 10000.0,
    *,
    dtype: DTypeLike | None = None,
    out: np.ndarray[Any, Any] | None = None,
    layout: _GridLayout = "interleaved",
    schedule: _Schedule = "paper",
    split: Sequence[int] | None = None,
    order: Sequence[int] | None = None,
) -> NDArray[np.floating[Any]]: ...
def set_num_threads(threads: int, /) -> None: ...
def clear_cache() -> None: ...
def get_num_threads() -> int: ...
