"""The bench's hot path: what a training or inference loop calls every step.

``add_`` of the encoding to embeddings of the shapes loops use, on one thread
and on all, against torch's ``x.add_(pe)`` with ``pe`` precomputed (torch's
threads = sinpe's threads) and NumPy's ``np.add(x, pe, out=x)``; the same
through ``sinpe.torch.add_`` (float32 and bfloat16); a decode step; and the
tables whose making is compute-bound, on all threads against one.  Contenders
are timed in blocks that take turns (:func:`sinpe.bench._timing.blocks_in_turn`).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import numpy as np

import sinpe
from sinpe.bench._timing import _us, blocks_in_turn, print_rows

# (shape, position axis): batch-first (B, L, d) and seq-first (L, B, d)
ADD_SHAPES = [
    ((32, 512, 512), -2), ((8, 2048, 1024), -2), ((512, 32, 512), 0), ((2048, 8, 1024), 0),
    ((8, 128, 512), -2), ((4, 256, 256), -2), ((16, 64, 768), -2), ((2, 1024, 2048), -2),
]
# tables whose making is compute-bound: (L, d) of encode(out=), and of rope(out=)
TABLES = [(5000, 512), (65536, 1024)]
ROPE = (4096, 128)


def _with_threads(threads: int, torch: Any) -> None:
    sinpe.set_num_threads(threads)
    if torch is not None:
        torch.set_num_threads(threads)


def hot_path_cases(quick: bool, torch: Optional[Any], seconds: Optional[float] = None
                   ) -> List[Dict[str, Any]]:
    """Every case on one thread and on all (sinpe.get_num_threads()); `seconds`
    per case and thread count (default 0.4 quick, 1.5 otherwise)."""
    rounds, per_case = (7, 0.4) if quick else (15, 1.5)
    seconds = per_case if seconds is None else seconds
    everyone = sinpe.get_num_threads()
    torch_threads = torch.get_num_threads() if torch is not None else None
    thread_counts = [1] if everyone == 1 else [1, everyone]
    results: List[Dict[str, Any]] = []
    rng = np.random.default_rng(0)
    try:
        for shape, axis in ADD_SHAPES:
            x = rng.standard_normal(shape, dtype=np.float32)
            L, d = shape[axis], shape[-1]
            pe = sinpe.encode(L, d)
            pe = pe[:, None, :] if axis == 0 else pe
            label = f"add_ {'seq' if axis == 0 else 'batch'}-first {shape}"
            for threads in thread_counts:
                _with_threads(threads, torch)
                timers: Dict[str, Callable[[], object]] = {
                    "sinpe": lambda: sinpe.add_(x, axis=axis)}
                if torch is not None:
                    import sinpe.torch as st
                    xt, pet = torch.from_numpy(x), torch.from_numpy(np.ascontiguousarray(pe))
                    timers["sinpe.torch"] = lambda: st.add_(xt, axis=axis)
                    timers["torch"] = lambda: xt.add_(pet)
                times = blocks_in_turn(timers, rounds, seconds)
                # NumPy's add in blocks of its own: in turn with the others it made
                # sinpe's (2, 1024, 2048) 1.4x slower on the Zen 5 (32 MB of L3 for a
                # 16 MB array and two 8 MB tables), where a loop runs one or the other
                times.update(blocks_in_turn({"numpy": lambda: np.add(x, pe, out=x)}, rounds,
                                            seconds))
                results.append({"case": label, "threads": threads, "times": times})
            if torch is not None:  # bfloat16: sinpe.torch.add_ against torch's own add
                import sinpe.torch as st
                xb = torch.from_numpy(x).to(torch.bfloat16)
                peb = torch.from_numpy(np.ascontiguousarray(pe)).to(torch.bfloat16)
                for threads in thread_counts:
                    _with_threads(threads, torch)
                    timers = {"sinpe.torch": lambda: st.add_(xb, axis=axis),
                              "torch": lambda: xb.add_(peb)}
                    results.append({"case": label + " bfloat16", "threads": threads,
                                    "times": blocks_in_turn(timers, rounds, seconds)})
        # a decode step: one token at position 1000
        x = rng.standard_normal((1, 1, 512), dtype=np.float32)
        pe = sinpe.encode(2048, 512)
        _with_threads(everyone, torch)
        timers = {"sinpe": lambda: sinpe.add_(x, offset=1000),
                  "numpy": lambda: np.add(x, pe[1000], out=x)}
        if torch is not None:
            import sinpe.torch as st
            xt, pet = torch.from_numpy(x), torch.from_numpy(pe)
            timers["sinpe.torch"] = lambda: st.add_(xt, offset=1000)
            timers["torch"] = lambda: xt.add_(pet[1000])
        results.append({"case": "decode step (1, 1, 512), offset=1000", "threads": everyone,
                        "times": blocks_in_turn(timers, rounds, seconds)})
        # tables whose making is compute-bound: all threads against one
        cases: List[Any] = []
        for L, d in TABLES:
            out = np.empty((L, d), np.float32)
            cases.append((f"encode({L}, {d}, out=)", (lambda o: lambda: sinpe.encode(
                o.shape[0], o.shape[1], out=o))(out)))
        cos, sin = np.empty(ROPE, np.float32), np.empty(ROPE, np.float32)
        cases.append((f"rope({ROPE[0]}, {ROPE[1]}, out=)",
                      lambda: sinpe.rope(ROPE[0], ROPE[1], out=(cos, sin))))
        for label, fn in cases:
            times = {}
            for threads in thread_counts:
                _with_threads(threads, None)
                times[f"{threads} threads"] = blocks_in_turn({"sinpe": fn}, rounds, seconds)["sinpe"]
            results.append({"case": label, "threads": everyone, "times": times})
    finally:
        sinpe.set_num_threads(everyone)
        if torch is not None:
            torch.set_num_threads(torch_threads)
    return results


def print_hot_path(results: List[Dict[str, Any]], file: Any) -> None:
    """One row per case and thread count: times, the ratios to torch, and all
    threads against one (>1 would mean more threads are slower)."""
    print("\nhot path: medians of blocks taken in turn; ratio = sinpe / torch's x.add_(pe) "
          "(pe precomputed, same threads); all/1 = all threads' time / one thread's", file=file)
    one: Dict[str, Dict[str, float]] = {}
    rows = [["case", "threads", "sinpe", "sinpe.torch", "torch", "numpy", "sinpe/torch",
             "sinpe.torch/torch", "all/1"]]
    for r in results:
        t = r["times"]
        if "1 threads" in t:  # compute-bound tables
            ratio = [f"{t[k] / t['1 threads']:.2f}" for k in t if k != "1 threads"]
            rows.append([r["case"], "1 vs all", _us(t["1 threads"]),
                         "-", "-", "-", "-", "-", ratio[0] if ratio else "-"])
            continue
        key = r["case"]
        if r["threads"] == 1:
            one[key] = t
        all_over_one = (f"{t['sinpe'] / one[key]['sinpe']:.2f}"
                        if r["threads"] > 1 and key in one and "sinpe" in t else "-")
        if "sinpe" not in t and "sinpe.torch" in t and r["threads"] > 1 and key in one:
            all_over_one = f"{t['sinpe.torch'] / one[key]['sinpe.torch']:.2f}"
        cells = [_us(t[k]) if k in t else "-" for k in ("sinpe", "sinpe.torch", "torch", "numpy")]
        rows.append([key, str(r["threads"]), *cells,
                     f"{t['sinpe'] / t['torch']:.2f}x" if "sinpe" in t and "torch" in t else "-",
                     f"{t['sinpe.torch'] / t['torch']:.2f}x" if "sinpe.torch" in t and "torch" in t
                     else "-", all_over_one])
    print_rows(rows, file)
