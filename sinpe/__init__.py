"""sinpe: exact, fast sinusoidal positional encodings into NumPy arrays.

``encode(L, d)`` builds the table of "Attention Is All You Need";
``add_(embeddings)`` adds it in place.  See ``help(sinpe.encode)``.
"""
from sinpe._core import (
    MAX_BASE,
    MAX_POSITION,
    MAX_THREADS,
    MIN_BASE,
    add_,
    encode,
    encode_at,
    encode_grid,
    get_num_threads,
    rope,
    set_num_threads,
)

__version__ = "0.1.0"
__all__ = [
    "encode",
    "add_",
    "encode_at",
    "rope",
    "encode_grid",
    "set_num_threads",
    "get_num_threads",
    "MAX_POSITION",
    "MIN_BASE",
    "MAX_BASE",
    "MAX_THREADS",
    "__version__",
]
