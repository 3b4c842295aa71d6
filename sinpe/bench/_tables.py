"""The bench's default rows: sinpe's tables and adds against the floor of writing the
same bytes, NumPy's float64 recipe and the tutorials' PyTorch recipes.

``encode`` of a new float32 table against ``numpy.full`` of the same shape;
``encode(out=)`` and ``rope(out=)`` against ``ndarray.fill``; ``add_`` against
``numpy.add(x, pe, out=x)`` and torch's ``x.add_(pe)``, and ``add_(x,
scale=sqrt(d))`` against ``add_(x)``.  sinpe and its floor take turns
(:func:`sinpe.bench._timing._measure`); the slower recipes are timed after them,
apart, so that torch's spinning OpenMP threads cannot steal sinpe's cores.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Dict, List, Sequence

import numpy as np

import sinpe
from sinpe.bench._machine import _print_versions
from sinpe.bench._timing import _format_time, _measure, _settle, print_rows
from sinpe.reference import table_float64


def _torch_recipes() -> Dict[str, Callable[[int, int], object]]:
    """The five tutorials' PyTorch code, as written there (float32)."""
    try:
        import torch
    except ImportError:
        return {}

    def seed000(L: int, d: int) -> object:  # torch.pow denominator, float32 positions
        pe = torch.zeros((1, L, d))
        coeffs = torch.arange(L, dtype=torch.float32).reshape(-1, 1)
        coeffs = coeffs / torch.pow(10000, torch.arange(0, d, 2, dtype=torch.float32) / d)
        pe[:, :, 0::2] = torch.sin(coeffs)
        pe[:, :, 1::2] = torch.cos(coeffs)
        return pe

    def seed001(L: int, d: int) -> object:  # the PyTorch word_language_model example
        pe = torch.zeros(L, d)
        position = torch.arange(0, L, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d, 2).float() * (-math.log(10000.0) / d))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        return pe.unsqueeze(0).transpose(0, 1)

    def seed002(L: int, d: int) -> object:  # integer positions times a float32 div_term
        pe = torch.zeros(L, d)
        k = torch.arange(0, L).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d, 2) * -(math.log(10000.0) / d))
        pe[:, 0::2] = torch.sin(k * div_term)
        pe[:, 1::2] = torch.cos(k * div_term)
        return pe.unsqueeze(0)

    def seed003(L: int, d: int) -> object:  # stack + flatten of sin and cos halves
        even_i = torch.arange(0, d, 2).float()
        denominator = torch.pow(10000, even_i / d)
        position = torch.arange(L).reshape(L, 1)
        even_pe = torch.sin(position / denominator)
        odd_pe = torch.cos(position / denominator)
        stacked = torch.stack([even_pe, odd_pe], dim=2)
        return torch.flatten(stacked, start_dim=1, end_dim=2)

    def seed004(L: int, d: int) -> object:  # exp(-i / d * log n)
        pe = torch.zeros(L, d)
        pos = torch.arange(L).unsqueeze(1)
        i = torch.arange(0, d, 2)
        div_term = torch.exp(-i / d * math.log(10000.0))
        pe[:, 0::2] = torch.sin(pos * div_term)
        pe[:, 1::2] = torch.cos(pos * div_term)
        return pe

    return {"seed000": seed000, "seed001": seed001, "seed002": seed002,
            "seed003": seed003, "seed004": seed004}


def _encode_case(L: int, d: int, quick: bool, with_numpy: bool, torch_recipes: Dict[str, Any]
                 ) -> Dict[str, Any]:
    small = L * d <= 1 << 16
    if small:
        rounds, budget, inner = 30, 1.0, 2000
    else:
        rounds, budget, inner = (15, 4.0, 1) if quick else (41, 20.0, 1)
    # sinpe and its floor take turns; the slow recipes are timed apart, so
    # their threads (torch's OpenMP pool spins after each op) cannot steal
    # the cores sinpe is timed on.
    _settle()
    times = _measure({"sinpe": lambda: sinpe.encode(L, d),
                      "floor": lambda: np.full((L, d), 1.0, np.float32)}, rounds, budget, inner)
    slow_rounds, slow_budget, slow_inner = (rounds, budget / 2, 20 if small else 1)
    if with_numpy:
        times.update(_measure({"numpy_f64": lambda: table_float64(L, d)},
                              slow_rounds, slow_budget, slow_inner))
    for name, recipe in torch_recipes.items():
        times.update(_measure({name: (lambda r: lambda: r(L, d))(recipe)},
                              slow_rounds, slow_budget, slow_inner))
    return {"case": f"encode({L}, {d}) float32, new array", "floor_name": "numpy.full",
            "times": times}


def _out_case(L: int, d: int, quick: bool) -> Dict[str, Any]:
    out = np.empty((L, d), np.float32)
    rounds, budget = (15, 3.0) if quick else (41, 15.0)
    _settle()
    times = _measure({"sinpe": lambda: sinpe.encode(L, d, out=out),
                      "floor": lambda: out.fill(1.0)}, rounds, budget)
    return {"case": f"encode({L}, {d}, out=) float32", "floor_name": "ndarray.fill",
            "times": times}


def _rope_out_case(L: int, d: int, quick: bool) -> Dict[str, Any]:
    cos, sin = np.empty((L, d), np.float32), np.empty((L, d), np.float32)
    rounds, budget = (15, 3.0) if quick else (41, 15.0)

    def fill_both() -> None:
        cos.fill(1.0)
        sin.fill(1.0)

    _settle()
    times = _measure({"sinpe": lambda: sinpe.rope(L, d, out=(cos, sin)), "floor": fill_both},
                     rounds, budget)
    return {"case": f"rope({L}, {d}, out=) float32", "floor_name": "ndarray.fill x2",
            "times": times}


def _scale_case(shape: Sequence[int], quick: bool) -> Dict[str, Any]:
    x = np.random.default_rng(0).standard_normal(shape, dtype=np.float32)
    scale = math.sqrt(shape[-1])
    rounds, budget = (15, 3.0) if quick else (41, 15.0)
    _settle()
    times = _measure({"sinpe": lambda: sinpe.add_(x, scale=scale),
                      "floor": lambda: sinpe.add_(x)}, rounds, budget)
    return {"case": f"add_ {tuple(shape)} float32, scale=sqrt(d)", "floor_name": "add_ scale=1",
            "times": times}


def _add_case(shape: Sequence[int], seq_first: bool, quick: bool, with_torch: bool
              ) -> Dict[str, Any]:
    rng = np.random.default_rng(0)
    x = rng.standard_normal(shape, dtype=np.float32)
    if seq_first:
        L, B, d = shape
        axis = 0
        pe = sinpe.encode(L, d)[:, None, :]
        label = f"add_ seq-first ({L}, {B}, {d}) float32"
    else:
        B, L, d = shape
        axis = -2
        pe = sinpe.encode(L, d)
        label = f"add_ batch-first ({B}, {L}, {d}) float32"
    rounds, budget = (15, 3.0) if quick else (41, 15.0)
    _settle()
    times = _measure({"sinpe": lambda: sinpe.add_(x, axis=axis),
                      "floor": lambda: np.add(x, pe, out=x)}, rounds, budget)
    if with_torch:
        import torch
        xt = torch.from_numpy(x)  # the same memory
        pet = torch.from_numpy(np.ascontiguousarray(pe))
        times.update(_measure({"torch_add_": lambda: xt.add_(pet)}, rounds, budget / 2))
    return {"case": label, "floor_name": "numpy.add(x, pe, out=x)", "times": times}


def _summarise(result: Dict[str, Any]) -> None:
    times = result["times"]
    result["sinpe_over_floor"] = times["sinpe"] / times["floor"]
    others = {k: v for k, v in times.items() if k.startswith(("seed", "torch"))}
    if others:
        best = min(others, key=others.__getitem__)
        result["fastest_torch"] = best
        result["fastest_torch_over_sinpe"] = others[best] / times["sinpe"]


def _print_table(results: List[Dict[str, Any]], header: Dict[str, Any], file: Any) -> None:
    _print_versions(header, f"sinpe {header['sinpe']} threads={header['sinpe_threads']}  "
                            f"numpy {header['numpy']} (1 thread)  torch {header['torch']} "
                            f"threads={header['torch_threads']}", file)
    print("medians; ratio = sinpe / floor (timed in alternation); torch/sinpe = fastest torch "
          "recipe / sinpe", file=file)
    extra_names = sorted({k for r in results for k in r["times"] if k not in ("sinpe", "floor")})
    columns = ["case", "sinpe", "floor", "ratio"] + extra_names + ["torch/sinpe"]
    rows = []
    for r in results:
        t = r["times"]
        row = [r["case"], _format_time(t["sinpe"]), f"{_format_time(t['floor'])} ({r['floor_name']})",
               f"{r['sinpe_over_floor']:.2f}x"]
        row += [_format_time(t[name]) if name in t else "-" for name in extra_names]
        row.append(f"{r['fastest_torch_over_sinpe']:.1f}x" if "fastest_torch" in r else "-")
        rows.append(row)
    print_rows([columns, *rows], file)
