"""The bench's view of sharing the CPU: sinpe's calls alternated call by call with
torch's own op, and sinpe beside a busy neighbour.

Blocks of calls taken in turn (``blocks_in_turn``) time each library alone: the
pause between blocks lets the other one's threads go to sleep.  A training loop
does not pause: right after a torch op, torch's OpenMP workers spin for a while on
the other cores, and sinpe's helpers then share those cores with them (and
torch's next op shares them with sinpe's polling helpers).  So these cases time
each call of a loop that alternates ``torch_op(); sinpe_op()`` (medians of the
calls), and a call on all threads against one while another process keeps a core
busy: a call on k threads must never be slower than on one.
"""
from __future__ import annotations

import statistics
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

import numpy as np

import sinpe
from sinpe.bench._timing import _us, print_rows


def alternated(ours: Callable[[], object], theirs: Callable[[], object], seconds: float
               ) -> Dict[str, float]:
    """Median seconds per call of ``ours`` and ``theirs`` called in turn, one call each,
    for about ``seconds``: what each costs right after the other."""
    for _ in range(3):
        theirs()
        ours()
    t0 = time.perf_counter()
    theirs()
    ours()
    pairs = max(15, min(20000, int(seconds / max(time.perf_counter() - t0, 1e-7))))
    ours_t: List[float] = []
    theirs_t: List[float] = []
    clock = time.perf_counter
    for _ in range(pairs):
        t0 = clock()
        theirs()
        t1 = clock()
        ours()
        t2 = clock()
        theirs_t.append(t1 - t0)
        ours_t.append(t2 - t1)
    return {"ours": statistics.median(ours_t), "theirs": statistics.median(theirs_t)}


def _thread_counts() -> List[int]:
    everyone = sinpe.get_num_threads()
    return [1] if everyone == 1 else [1, everyone]


Pair = tuple[str, Callable[[], object], Callable[[], object]]


def add_pairs(torch: Any, shapes: List[Any]) -> List[Pair]:
    """``sinpe.torch.add_`` and torch's ``y.add_(pe)`` of the same shape (y a copy),
    float32 and bfloat16."""
    import sinpe.torch as st

    pairs: List[Pair] = []
    rng = np.random.default_rng(1)
    for shape, axis in shapes:
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.from_numpy(rng.standard_normal(shape, dtype=np.float32)).to(dtype)
            y = x.clone()
            pe = st.encode(shape[axis], shape[-1], dtype=dtype)
            pe = pe[:, None, :] if axis == 0 else pe
            name = f"add_ {'seq' if axis == 0 else 'batch'}-first {shape}"
            name += "" if dtype is torch.float32 else " bfloat16"
            pairs.append((name, (lambda x, a: lambda: st.add_(x, axis=a))(x, axis),
                          (lambda y, pe: lambda: y.add_(pe))(y, pe)))
    return pairs


def rope_pairs(torch: Any) -> List[Pair]:
    """``sinpe.torch.rope_`` of a query and torch's in-place pass over another of the
    same shape (``mul_(1.0)``), float32, bfloat16 and float16."""
    import sinpe.torch as st

    pairs: List[Pair] = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        q, other = torch.randn(1, 32, 2048, 128).to(dtype), torch.randn(1, 32, 2048, 128).to(dtype)
        pairs.append((f"rope_ (1, 32, 2048, 128) {str(dtype).split('.')[-1]}",
                      (lambda q: lambda: st.rope_(q))(q), (lambda t: lambda: t.mul_(1.0))(other)))
    return pairs


def alternation_cases(quick: bool, torch: Any, pairs: List[Pair]) -> List[Dict[str, Any]]:
    """Each pair's sinpe call right after torch's op and torch's right after sinpe's, on
    one thread and on all (sinpe's and torch's alike): one row per pair and thread count."""
    seconds = 0.25 if quick else 1.0
    everyone, torch_threads = sinpe.get_num_threads(), torch.get_num_threads()
    results: List[Dict[str, Any]] = []
    try:
        for name, ours, theirs in pairs:
            for threads in _thread_counts():
                sinpe.set_num_threads(threads)
                torch.set_num_threads(threads)
                results.append({"case": name, "threads": threads,
                                "times": alternated(ours, theirs, seconds)})
    finally:
        sinpe.set_num_threads(everyone)
        torch.set_num_threads(torch_threads)
    return results


def print_alternation(results: List[Dict[str, Any]], theirs: str, file: Any) -> None:
    """One row per case and thread count; all/1: sinpe's time after torch's op on all
    threads over its time on one (more than 1: more threads made the loop slower)."""
    print(f"\nin a loop with torch: sinpe.torch's call and torch's {theirs} called in turn, "
          "each call timed (medians); all/1 = sinpe's time on all threads / on one",
          file=file)
    one: Dict[str, float] = {}
    rows = [["case", "threads", "sinpe.torch after torch", "torch after sinpe.torch",
             "sinpe.torch/torch", "all/1"]]
    for r in results:
        t = r["times"]
        if r["threads"] == 1:
            one[r["case"]] = t["ours"]
        ratio = (f"{t['ours'] / one[r['case']]:.2f}"
                 if r["threads"] > 1 and r["case"] in one else "-")
        rows.append([r["case"], str(r["threads"]), _us(t["ours"]), _us(t["theirs"]),
                     f"{t['ours'] / t['theirs']:.2f}x", ratio])
    print_rows(rows, file)


def _on_threads(threads: int, fn: Callable[[], object]) -> Callable[[], object]:
    def timed() -> object:
        sinpe.set_num_threads(threads)
        return fn()
    return timed


_SPINNER = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end:\n pass\n"


def neighbour_cases(quick: bool, blocks_in_turn: Callable[..., Dict[str, float]]
                    ) -> List[Dict[str, Any]]:
    """``add_`` and ``rope_`` on one thread and on all, timed in blocks taken in turn
    while another process spins on one core (a neighbour that does not yield, as
    OpenMP's waiting workers): all/1 must not exceed 1."""
    everyone = sinpe.get_num_threads()
    if everyone == 1:
        return []
    rounds, seconds = (7, 0.6) if quick else (15, 2.0)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((8, 2048, 1024), dtype=np.float32)
    small = rng.standard_normal((16, 64, 768), dtype=np.float32)
    q = rng.standard_normal((1, 32, 2048, 128), dtype=np.float32)
    cases = [("add_ (8, 2048, 1024)", lambda: sinpe.add_(x)),
             ("add_ (16, 64, 768)", lambda: sinpe.add_(small)),
             ("rope_ (1, 32, 2048, 128)", lambda: sinpe.rope_(q, offset=0))]
    results: List[Dict[str, Any]] = []
    spinner: Optional[subprocess.Popen[bytes]] = None
    try:
        budget = 2 * len(cases) * seconds + 30
        spinner = subprocess.Popen([sys.executable, "-c", _SPINNER.format(seconds=budget)])
        time.sleep(0.2)  # it runs
        for name, fn in cases:
            timers = {f"{k} threads": _on_threads(k, fn) for k in (1, everyone)}
            results.append({"case": name, "threads": everyone,
                            "times": blocks_in_turn(timers, rounds, seconds)})
    finally:
        sinpe.set_num_threads(everyone)
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    return results


def print_neighbour(results: List[Dict[str, Any]], file: Any) -> None:
    if not results:
        return
    print("\nbeside a busy neighbour (another process spinning on one core): one thread "
          "and all, blocks taken in turn; all/1 above 1 would mean more threads are slower",
          file=file)
    rows = [["case", "1 thread", "all threads", "all/1"]]
    for r in results:
        t = r["times"]
        one, every = t["1 threads"], t[f"{r['threads']} threads"]
        rows.append([r["case"], _us(one), _us(every), f"{every / one:.2f}"])
    print_rows(rows, file)
