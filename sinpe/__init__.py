"""sinpe: exact, fast sinusoidal positional encodings into NumPy arrays.

``encode(L, d)`` builds the table of "Attention Is All You Need";
``add_(embeddings)`` adds it in place; ``rope(L, d)`` makes rotary (RoPE)
caches and ``rope_(x)`` rotates queries or keys by them in place.  See
``help(sinpe.encode)``.
"""
import os as _os

try:
    from sinpe._core import (
        MAX_BASE,
        MAX_POSITION,
        MAX_THREADS,
        MIN_BASE,
        add_,
        clear_cache,
        encode,
        encode_at,
        encode_grid,
        get_num_threads,
        rope,
        rope_,
        set_num_threads,
    )
except ModuleNotFoundError as _exc:
    # Python finds a clone's uncompiled sinpe/ before the installed one; say so
    # and how to fix it (as NumPy does) instead of a bare "No module named".
    if _exc.name != "sinpe._core":
        raise
    _root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    if _os.path.exists(_os.path.join(_root, "setup.py")):
        _where = (
            f"you are importing sinpe from its source tree ({_root}), which has no build "
            "of it. Either build and install it with `pip install .` and run Python from "
            "another directory (so that the installed sinpe is imported), or build it in "
            "place with `pip install -e .`"
        )
    else:
        _where = (
            "this installation is incomplete: reinstall it from sinpe's source tree "
            "with `pip install --force-reinstall .`"
        )
    raise ImportError(f"sinpe's compiled extension sinpe._core is missing: {_where}.") from None

from sinpe._config import __version__, show_config
from sinpe._rope_types import rope_frequencies

__all__ = [
    "encode",
    "add_",
    "encode_at",
    "rope",
    "rope_",
    "rope_frequencies",
    "encode_grid",
    "set_num_threads",
    "get_num_threads",
    "clear_cache",
    "show_config",
    "MAX_POSITION",
    "MIN_BASE",
    "MAX_BASE",
    "MAX_THREADS",
    "__version__",
]
