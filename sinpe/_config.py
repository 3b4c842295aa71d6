"""``sinpe.__version__`` and ``sinpe.show_config()``: what this installation is and runs,
for bug reports and benchmarks.

The version is written here, below the package's face, so that ``show_config`` reads
it without importing ``sinpe`` back (``sinpe/__init__.py`` hands it on).
"""
from __future__ import annotations

import platform
import sys
from typing import Any, Dict

import sinpe._core as _core

__version__ = "0.1.0"

# How people write a level's name.  The levels themselves, their names and order, are
# the extension's (_core._simd_levels(), from csrc/sinpe.h's list): a level without a
# label here shows its own name.  The baseline's label depends on the CPU family.
_LEVEL_LABELS = {"avx2": "AVX2", "avx512": "AVX-512", "avx512_bf16": "AVX-512 with AVX512_BF16"}
_BASELINE_LABELS = {"x86_64": "x86-64 baseline (SSE2)", "AMD64": "x86-64 baseline (SSE2)",
                    "aarch64": "NEON", "arm64": "NEON", "ARM64": "NEON"}


def simd_label(level: str) -> str:
    """A level's name as people say it: "AVX-512", "AVX2", "NEON", ..."""
    if level == "baseline":
        machine = platform.machine()
        return _BASELINE_LABELS.get(machine, f"{machine} baseline")
    return _LEVEL_LABELS.get(level, level)


def show_config(*, print_it: bool = True) -> Dict[str, Any]:
    """Print and return sinpe's build and run-time configuration.

    Like ``numpy.show_config()``: the version, the compiler that built the C
    kernels, the SIMD level whose loops run (``simd``; the ``SINPE_SIMD``
    environment variable can lower it) and the levels this CPU has, the
    threads large calls use and whose threads they are (``thread_pool``:
    with ``sinpe.torch`` imported, torch's own OpenMP threads where torch
    runs on GNU libgomp), and the platform.  Every SIMD level and thread
    count gives the same bits; they change only speed.

    >>> config = sinpe.show_config(print_it=False)
    >>> config["simd"] in config["simd_available"]
    True
    """
    level, available = _core._simd_levels()
    config = {
        "version": __version__,
        "compiler": _core._compiler,
        "simd": level,
        "simd_label": simd_label(level),
        "simd_available": list(available),
        "threads": _core.get_num_threads(),
        "thread_pool": "torch's OpenMP threads" if _core._sharing_openmp()
                       else "sinpe's own threads",
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": f"{platform.python_implementation()} {platform.python_version()}"
                  + (" (free-threaded)" if not getattr(sys, "_is_gil_enabled", lambda: True)()
                     else ""),
    }
    if print_it:
        width = max(map(len, config))
        for key, value in config.items():
            shown = ", ".join(value) if isinstance(value, list) else value
            print(f"{key.ljust(width)}  {shown}")
    return config
