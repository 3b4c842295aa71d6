"""Large calls on torch's own threads: sinpe.torch shares torch's OpenMP runtime.

torch runs its ops on an OpenMP team whose threads spin for a while after
each op.  In a loop that calls torch and sinpe in turn, sinpe's own helpers
would find those cores taken, and a call on two threads would run at one
thread's pace.  Shared, torch's spinning threads take sinpe's chunks at once.
Only GNU libgomp is shared (torch's Linux wheels bundle it); elsewhere, or
with ``SINPE_OWN_THREADS=1`` in the environment, sinpe keeps its own threads.
"""
from __future__ import annotations

import os
from typing import List, Optional

from sinpe import _core


def _loaded_libgomps() -> List[str]:
    """The files of the GNU OpenMP runtimes this process has loaded (Linux)."""
    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            lines = maps.read().splitlines()
    except OSError:
        return []
    paths = {line.split(None, 5)[5] for line in lines if len(line.split(None, 5)) == 6}
    return sorted(p for p in paths if os.path.basename(p).startswith("libgomp"))


def torch_openmp_library(torch: object) -> Optional[str]:
    """The file of the OpenMP runtime torch runs its ops on, if sinpe can share it."""
    config = getattr(torch, "__config__", None)
    if config is None or "ATen parallel backend: OpenMP" not in config.parallel_info():
        return None
    loaded = _loaded_libgomps()
    package = os.path.dirname(getattr(torch, "__file__", "") or "")
    # torch/lib (torch's own wheels) or torch.libs (auditwheel's), not another
    # package's copy (scikit-learn bundles one too)
    homes = (package + os.sep, package + ".libs" + os.sep) if package else ()
    own = [p for p in loaded if p.startswith(homes)]
    if len(own) == 1:
        return own[0]
    return loaded[0] if len(loaded) == 1 and not own else None


def share_torch_threads(torch: object) -> bool:
    """Runs sinpe's large calls on torch's OpenMP threads; whether it does."""
    if os.environ.get("SINPE_OWN_THREADS", "") not in ("", "0"):
        return False
    library = torch_openmp_library(torch)
    if library is None:
        return False
    try:
        _core._share_openmp(library)
    except ValueError:
        return False
    return True
