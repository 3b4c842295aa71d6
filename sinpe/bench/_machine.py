"""What the bench's figures were measured on: the CPU, the SIMD levels of sinpe's loops
and of torch's ops, the versions, the load; the header every report starts with."""
from __future__ import annotations

import argparse
import os
import platform
import sys
from typing import Any, Dict, Optional

import numpy as np

import sinpe
from sinpe._config import simd_label


def _cpu_model() -> str:
    """The CPU's marketing name (Linux: /proc/cpuinfo), else what platform knows."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def _simd_label() -> str:
    """The SIMD level sinpe's loops run at, as people say it ("AVX-512")."""
    return simd_label(sinpe._core._simd_levels()[0])


def _torch_simd_label() -> Optional[str]:
    """The level torch's CPU ops run at ("AVX512", "AVX2", "DEFAULT"), when torch
    is loaded: ``ATEN_CPU_CAPABILITY`` holds it below the CPU's best, as
    ``SINPE_SIMD`` holds sinpe's, and a ratio compares the two."""
    torch = sys.modules.get("torch")
    try:
        return str(torch.backends.cpu.get_cpu_capability()) if torch is not None else None
    except AttributeError:  # an older torch
        return None


def _load_average() -> Optional[float]:
    """The 1-minute load average (other work competing for the cores), if known."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _print_cpu(header: Dict[str, Any], file: Any) -> None:
    torch_simd = header.get("torch_simd")
    theirs = f", torch's ops at {torch_simd}" if torch_simd else ""
    print(f"CPU: {header['cpu']}, sinpe's loops at {header['simd']}{theirs}, "
          f"{header['cpu_count']} CPUs", file=file)


def _print_versions(header: Dict[str, Any], versions: str, file: Any) -> None:
    """A report's first two lines: the CPU, then ``versions`` (what ran, on how many
    threads), Python's version and the load before and after."""
    _print_cpu(header, file)
    print(f"{versions}  {header['python']}  load average "
          f"{header['load_average'][0]} -> {header['load_average'][1]}", file=file)


def _header(args: argparse.Namespace, load_before: Optional[float], torch_version: str,
            torch_threads: str) -> Dict[str, Any]:
    return {
        "sinpe": sinpe.__version__, "sinpe_threads": sinpe.get_num_threads(),
        "numpy": np.__version__, "torch": torch_version, "torch_threads": torch_threads,
        "cpu": _cpu_model(), "simd": _simd_label(), "torch_simd": _torch_simd_label(),
        "config": sinpe.show_config(print_it=False),
        "cpu_count": os.cpu_count(), "machine": platform.machine(),
        "python": platform.python_version(), "quick": args.quick,
        "load_average": [load_before, _load_average()],
        "command": " ".join(["python -m sinpe.bench", *args.argv]),
    }
