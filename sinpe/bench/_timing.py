"""How the bench times and prints: the two ways of taking turns, and its tables' cells.

Contenders are timed in turn, never one after the other: a change of machine load
then hits both alike.  :func:`_measure` alternates single timings round by round
(sinpe against its floor); :func:`blocks_in_turn` times blocks that take turns (a
block of one, a pause, a block of the other, ...; each round starts with the next
contender): calls alternated one by one would let one library's spinning worker
threads (torch's OpenMP pool, sinpe's helpers polling for the next call) steal the
cores the other is timed on.  Figures are medians of the per-call times.
"""
from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Callable, ContextManager, Dict, List, Optional

Timer = Callable[[], object]


def _measure(timers: Dict[str, Timer], rounds: int, budget: float, inner: int = 1
             ) -> Dict[str, float]:
    """Median seconds per call of each timer; the timers take turns each round.

    Stops after `rounds` rounds or once `budget` seconds are spent (but runs
    at least 3 rounds).  `inner` calls per sample keep tiny calls above the
    clock's resolution.
    """
    samples: Dict[str, List[float]] = {name: [] for name in timers}
    for fn in timers.values():  # warm-up: caches, pools, page tables, lazy imports
        fn()
    started = time.perf_counter()
    for done in range(rounds):
        for name, fn in timers.items():
            t0 = time.perf_counter()
            for _ in range(inner):
                fn()
            samples[name].append((time.perf_counter() - t0) / inner)
        if done >= 2 and time.perf_counter() - started > budget:
            break
    return {name: statistics.median(values) for name, values in samples.items()}


def _settle() -> None:
    """Lets other libraries' spinning worker threads (OpenMP after a torch op,
    OpenBLAS) go to sleep before the next contender is timed."""
    time.sleep(0.3)


def blocks_in_turn(timers: Dict[str, Callable[[], object]], rounds: int, seconds: float,
                   contexts: Optional[Dict[str, Callable[[], ContextManager[Any]]]] = None
                   ) -> Dict[str, float]:
    """Median per-call seconds of each timer, timed in blocks that take turns;
    a block lasts about `seconds` / (rounds * timers) (at least one call).
    `contexts` gives a timer a context manager entered around each of its blocks
    (and its warm-up), outside the timing: sinpe.torch.patch for a patched model."""
    around = contexts or {}
    per_block = seconds / (rounds * len(timers))
    calls = {}
    for name, fn in timers.items():  # warm-up, and how many calls fill a block
        with around.get(name, contextlib.nullcontext)():
            fn()
            t0 = time.perf_counter()
            fn()
            calls[name] = max(1, min(10000, int(per_block / max(time.perf_counter() - t0, 1e-7))))
    samples: Dict[str, List[float]] = {name: [] for name in timers}
    names = list(timers)
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:  # each goes first in turn
            fn = timers[name]
            with around.get(name, contextlib.nullcontext)():
                time.sleep(0.005)  # the other contender's spinning threads go to sleep
                t0 = time.perf_counter()
                for _ in range(calls[name]):
                    fn()
                samples[name].append((time.perf_counter() - t0) / calls[name])
    return {name: statistics.median(values) for name, values in samples.items()}


def print_rows(rows: List[List[str]], file: Any) -> None:
    """A table: the first row is the header, columns padded to their widest cell."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for n, row in enumerate(rows):
        print(" | ".join(c.ljust(w) for c, w in zip(row, widths)), file=file)
        if n == 0:
            print("-+-".join("-" * w for w in widths), file=file)


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} us" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


def _format_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"
