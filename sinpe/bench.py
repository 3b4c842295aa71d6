"""Side-by-side timings: sinpe against the memory floor, NumPy and PyTorch.

Run ``python -m sinpe.bench`` (``--quick`` for a short run, ``--json PATH``
to save the figures).  One row per case:

* ``encode`` of a new float32 table vs ``numpy.full`` of the same shape
  (allocating and writing the same bytes is the floor), the NumPy float64
  recipe (``sinpe.reference.table_float64``) and each tutorial's
  PyTorch recipe (when torch is installed);
* ``encode(out=)`` and ``rope(out=)`` vs ``ndarray.fill`` of the same bytes;
* ``add_`` vs ``numpy.add(x, pe, out=x)`` and torch's ``x.add_(pe)`` with
  ``pe`` already computed, and ``add_(x, scale=sqrt(d))`` vs ``add_(x)``;
* the hot path (``--hot-path`` for it alone): ``add_`` and ``sinpe.torch.add_``
  on the shapes training and decoding loops use, one thread and all, against
  torch and NumPy, and the compute-bound tables on all threads against one
  (sinpe/_bench_hot.py).

The first line names the CPU and the SIMD level sinpe's loops run at (and
torch's, ``torch.backends.cpu.get_cpu_capability()``, where torch is loaded;
``ATEN_CPU_CAPABILITY=avx2`` or ``default`` holds torch to a lower level as
``SINPE_SIMD`` holds sinpe): the ratios differ between CPUs and levels.

``--variants`` times the variants instead (layouts, schedules, explicit
frequencies and positions, RoPE caches, grids), each against the default
table that writes the same number of bytes: the promise is that a variant
costs what the core table costs.

``--rope`` times rotary embeddings instead (needs torch): ``sinpe.torch.rope_``
on query-shaped tensors against the in-place pass over the same tensor
(``t.mul_(1.0)``, timed in alternation), ``exact=True``, and HF's
``apply_rotary_pos_emb`` with HF's ``rotary_emb`` (``LlamaRotaryEmbedding``,
when transformers is installed), on one thread and then on all threads
(sinpe's and torch's alike); then multi-axis RoPE: ``rope_`` with three
sections (Qwen2-VL's time, height and width ids of text and an image;
Qwen3-VL's interleaved sections) against the single-axis ``rope_`` of the same
tensor, at range positions (``offset=``) and at explicit ones
(``positions=``); then ``sinpe.torch.RotaryEmbedding`` against
transformers' ``LlamaRotaryEmbedding``, forward alone, for a decoding step and a
2048-token prefill (sinpe/_bench_rotary.py); and a small Llama's forward (a
prefill and a decoding step) unpatched and under ``sinpe.torch.patch``
(sinpe/_bench_patch.py).

Every figure is a median over repeated rounds.  sinpe and its floor take
turns round by round (a change of machine load hits both alike); the slower
NumPy and torch recipes are timed after them, apart, so that torch's
spinning OpenMP threads cannot steal sinpe's cores.  All ratios are between
medians measured in this one process.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

import sinpe
from sinpe._bench_hot import (ADD_SHAPES, blocks_in_turn, hot_path_cases, print_hot_path,
                              print_rows)
from sinpe._bench_decode import decode_cases, print_decode
from sinpe._bench_pool import (add_pairs, alternation_cases, neighbour_cases,
                               print_alternation, print_neighbour, rope_pairs)
from sinpe._bench_patch import patched_model_cases, print_patched
from sinpe._bench_rotary import print_rotary_module, rotary_module_cases
from sinpe._config import simd_label
from sinpe.reference import table_float64

Timer = Callable[[], object]


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


def _variant_cases(quick: bool) -> List[Dict[str, Any]]:
    """Each variant timed in alternation with the default call that writes as
    many bytes (a RoPE pair of (L, d) caches against encode(L, 2 d))."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 512, 512), dtype=np.float32)
    packed = np.concatenate([np.arange(n) for n in rng.integers(1, 300, 100)])[:5000]
    packed = np.pad(packed, (0, 5000 - packed.size))
    per_token = np.tile(np.arange(512), (32, 1))
    left_pad = per_token - 7
    padding = left_pad < 0
    freq = 1.0 / 10000 ** (np.arange(256) / 256)
    cases: List[Any] = [
        # small calls: the default spelled with the same keyword, since CPython's
        # keyword parsing alone costs ~0.3 us, more than the variant's own work
        ("encode(16, 64) concatenated vs layout='interleaved'",
         lambda: sinpe.encode(16, 64, layout="concatenated"),
         lambda: sinpe.encode(16, 64, layout="interleaved")),
        ("encode(16, 64) fairseq vs schedule='paper'",
         lambda: sinpe.encode(16, 64, schedule="fairseq"),
         lambda: sinpe.encode(16, 64, schedule="paper")),
        ("encode(5000, 512) concatenated",
         lambda: sinpe.encode(5000, 512, layout="concatenated"), lambda: sinpe.encode(5000, 512)),
        ("encode(5000, 512) fairseq, concatenated",
         lambda: sinpe.encode(5000, 512, schedule="fairseq", layout="concatenated"),
         lambda: sinpe.encode(5000, 512)),
        ("encode(5000, 512, freq=...)", lambda: sinpe.encode(5000, 512, freq=freq),
         lambda: sinpe.encode(5000, 512)),
        ("encode(65536, 1024) concatenated",
         lambda: sinpe.encode(65536, 1024, layout="concatenated"),
         lambda: sinpe.encode(65536, 1024)),
        ("encode_at(packed positions (5000,), 512)", lambda: sinpe.encode_at(packed, 512),
         lambda: sinpe.encode(5000, 512)),
        ("rope(4096, 128) half-split vs encode(4096, 256)", lambda: sinpe.rope(4096, 128),
         lambda: sinpe.encode(4096, 256)),
        ("rope(4096, 128) pairs vs encode(4096, 256)",
         lambda: sinpe.rope(4096, 128, layout="interleaved"), lambda: sinpe.encode(4096, 256)),
        ("rope(65536, 128) half-split vs encode(65536, 256)", lambda: sinpe.rope(65536, 128),
         lambda: sinpe.encode(65536, 256)),
        ("encode_grid((64, 64), 512) vs encode(4096, 512)",
         lambda: sinpe.encode_grid((64, 64), 512), lambda: sinpe.encode(4096, 512)),
        ("encode_grid((8, 32, 32), 768) vs encode(8192, 768)",
         lambda: sinpe.encode_grid((8, 32, 32), 768), lambda: sinpe.encode(8192, 768)),
        ("add_ (32, 512, 512) concatenated", lambda: sinpe.add_(x, layout="concatenated"),
         lambda: sinpe.add_(x)),
        ("add_ (32, 512, 512) positions=(32, 512)",
         lambda: sinpe.add_(x, positions=per_token), lambda: sinpe.add_(x)),
        ("add_ (32, 512, 512) left padding",
         lambda: sinpe.add_(x, positions=left_pad, padding=padding), lambda: sinpe.add_(x)),
    ]
    results = []
    for label, variant, default in cases:
        small = "(16, 64)" in label
        rounds, budget, inner = ((30, 1.0, 2000) if small else
                                 (15, 3.0, 1) if quick else (41, 10.0, 1))
        _settle()
        times = _measure({"variant": variant, "default": default}, rounds, budget, inner)
        results.append({"case": label, "times": times,
                        "variant_over_default": times["variant"] / times["default"]})
    return results


# (shape, position axis, dtype, offset): heads-first queries, the same in
# bfloat16, small heads, (B, L, H, D) with axis=1, and one decoding step
ROPE_CASES = [((1, 32, 2048, 128), -2, "float32", 0), ((1, 32, 2048, 128), -2, "bfloat16", 0),
              ((1, 32, 2048, 128), -2, "float16", 0), ((4, 8, 512, 64), -2, "float32", 0),
              ((4, 8, 512, 64), -2, "bfloat16", 0), ((8, 2048, 16, 64), 1, "float32", 0),
              ((1, 32, 1, 128), -2, "float32", 2047)]


def _hf_rotation(shape: Sequence[int], axis: int, offset: int, dtype: Any
                 ) -> Optional[Dict[str, Timer]]:
    """HF's own rotation of a query of this shape: "hf", LlamaRotaryEmbedding's
    caches for the positions, then apply_rotary_pos_emb (with a one-head key, so
    that the figure is the query's); "hf_apply" and "sinpe_apply", HF's
    apply_rotary_pos_emb and sinpe.torch's with those caches made beforehand, of
    the query and a key as large.  None without transformers."""
    try:
        import torch
        from transformers import LlamaConfig
        from transformers.models.llama import modeling_llama as llama
    except ImportError:
        return None
    batch, length, heads, dim = ((shape[0], shape[1], shape[2], shape[3]) if axis == 1 else
                                 (shape[0], shape[2], shape[1], shape[3]))
    config = LlamaConfig(hidden_size=heads * dim, num_attention_heads=heads,
                         max_position_embeddings=offset + length,
                         rope_parameters={"rope_type": "default", "rope_theta": 10000.0})
    rotary = llama.LlamaRotaryEmbedding(config)
    q = torch.randn(shape).to(dtype)
    if axis == 1:  # HF's (B, H, L, D) view of (B, L, H, D) memory, as its attention makes it
        q = q.transpose(1, 2)
    k = q[:, :1]
    position_ids = (torch.arange(length) + offset).expand(batch, length)

    def run() -> object:
        cos, sin = rotary(q, position_ids)
        return llama.apply_rotary_pos_emb(q, k, cos, sin)

    import sinpe.torch as st
    cos, sin = rotary(q, position_ids)
    key = torch.randn(q.shape).to(dtype)
    return {"hf": run, "hf_apply": lambda: llama.apply_rotary_pos_emb(q, key, cos, sin),
            "sinpe_apply": lambda: st.apply_rotary_pos_emb(q, key, cos, sin)}


# multi-axis RoPE: (shape, dtype); a prefill of text around an image, and a decoding step
SECTION_CASES = [((1, 28, 2048, 128), "float32"), ((1, 28, 2048, 128), "bfloat16"),
                 ((1, 28, 1, 128), "float32")]


def _qwen2vl_ids(length: int, torch: Any) -> Any:
    """(3, 1, length) time, height and width ids as Qwen2-VL makes them: 64 text
    tokens, a 32 x 32 image (time fixed, height and width over the grid), text
    after it from the largest id + 1; one token alone: a decoding step at 2047."""
    if length == 1:
        return torch.full((3, 1, 1), 2047)
    t = torch.cat([torch.arange(64), torch.full((1024,), 64)])
    h = torch.cat([torch.arange(64), 64 + torch.arange(32).repeat_interleave(32)])
    w = torch.cat([torch.arange(64), 64 + torch.arange(32).repeat(32)])
    after = 96 + torch.arange(length - 1088)
    return torch.stack([torch.cat([a, after]) for a in (t, h, w)])[:, None, :]


def _section_cases(quick: bool) -> List[Dict[str, Any]]:
    """rope_ with sections against the single-axis rope_ of the same tensor, blocks
    taken in turn, on one thread and all: offset= (range positions), positions=
    (explicit, the text ids: the same work per token as one section), three
    contiguous sections (16, 24, 24) and Qwen3-VL's interleaved (24, 20, 20)."""
    import torch

    import sinpe.torch as st

    results = []
    all_threads = sinpe.get_num_threads()
    try:
        for threads in sorted({1, all_threads}):
            sinpe.set_num_threads(threads)
            for shape, dtype_name in SECTION_CASES:
                t = torch.randn(shape).to(getattr(torch, dtype_name))
                length = shape[2]
                ids = _qwen2vl_ids(length, torch)[:, :, None, :]  # over the heads
                single = ids[0]
                offset = 2047 if length == 1 else 0
                rounds, seconds = (7, 1.0) if quick else (15, 4.0)
                times = blocks_in_turn({
                    "offset": lambda: st.rope_(t, offset=offset),
                    "positions": lambda: st.rope_(t, positions=single),
                    "sections": lambda: st.rope_(t, positions=ids, sections=(16, 24, 24)),
                    "interleaved": lambda: st.rope_(t, positions=ids, sections=(24, 20, 20),
                                                    sections_layout="interleaved"),
                }, rounds, seconds)
                results.append({"case": f"rope_ {tuple(shape)} {dtype_name}",
                                "threads": threads, "times": times})
    finally:
        sinpe.set_num_threads(all_threads)
    return results


def _print_sections(results: List[Dict[str, Any]], file: Any) -> None:
    print("\nmulti-axis RoPE: rope_ with three sections (Qwen2-VL's contiguous (16, 24, 24), "
          "Qwen3-VL's interleaved (24, 20, 20)) against the single-axis rope_ of the same "
          "tensor at offset= and at positions=; medians of blocks taken in turn", file=file)
    rows = [["case", "threads", "offset=", "positions=", "3 sections", "/positions", "/offset",
             "interleaved", "/positions", "/offset"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], str(r["threads"]), _format_time(t["offset"]),
                     _format_time(t["positions"]), _format_time(t["sections"]),
                     f"{t['sections'] / t['positions']:.2f}x",
                     f"{t['sections'] / t['offset']:.2f}x",
                     _format_time(t["interleaved"]),
                     f"{t['interleaved'] / t['positions']:.2f}x",
                     f"{t['interleaved'] / t['offset']:.2f}x"])
    print_rows(rows, file)


def _rope_cases(quick: bool) -> List[Dict[str, Any]]:
    import torch

    import sinpe.torch as st

    results = []
    all_threads = sinpe.get_num_threads()
    torch_threads = torch.get_num_threads()
    try:
        for threads in sorted({1, all_threads}):
            sinpe.set_num_threads(threads)
            torch.set_num_threads(threads)
            for shape, axis, dtype_name, offset in ROPE_CASES:
                dtype = getattr(torch, dtype_name)
                t = torch.randn(shape).to(dtype)
                # blocks taken in turn (sinpe/_bench_hot.py): torch's spinning OpenMP
                # threads after its mul_ would steal the cores of a rope_ timed right after
                rounds, seconds = (7, 1.0) if quick else (15, 4.0)
                timers: Dict[str, Timer] = {
                    "sinpe": lambda: st.rope_(t, offset=offset, axis=axis),
                    "floor": lambda: t.mul_(1.0),
                    "exact": lambda: st.rope_(t, offset=offset, axis=axis, exact=True),
                }
                hf = _hf_rotation(shape, axis, offset, dtype)
                if hf is not None:
                    timers.update(hf)
                times = blocks_in_turn(timers, rounds, seconds)
                label = f"rope_ {tuple(shape)} {dtype_name}" + (" axis=1" if axis == 1 else "")
                results.append({"case": label, "threads": threads, "times": times})
    finally:
        sinpe.set_num_threads(all_threads)
        torch.set_num_threads(torch_threads)
    return results


def _print_rope(results: List[Dict[str, Any]], header: Dict[str, Any], file: Any) -> None:
    _print_cpu(header, file)
    print(f"sinpe {header['sinpe']}  numpy {header['numpy']}  torch {header['torch']}  "
          f"{header['python']}  load average "
          f"{header['load_average'][0]} -> {header['load_average'][1]}", file=file)
    print("medians of blocks taken in turn; ratio = rope_ / "
          "mul_; HF = its rotary_emb + apply_rotary_pos_emb; apply = apply_rotary_pos_emb of "
          "q and k, HF's and sinpe.torch's, with the caches made", file=file)
    rows = [["case", "threads", "rope_", "t.mul_(1.0)", "ratio", "exact=True", "exact/rope_",
             "HF", "HF/rope_", "HF apply", "sinpe apply", "HF/sinpe apply"]]
    for r in results:
        t = r["times"]
        hf, hf_apply, apply = t.get("hf"), t.get("hf_apply"), t.get("sinpe_apply")
        rows.append([r["case"], str(r["threads"]), _format_time(t["sinpe"]),
                     _format_time(t["floor"]), f"{t['sinpe'] / t['floor']:.2f}x",
                     _format_time(t["exact"]), f"{t['exact'] / t['sinpe']:.2f}x",
                     _format_time(hf) if hf else "-", f"{hf / t['sinpe']:.1f}x" if hf else "-",
                     _format_time(hf_apply) if hf_apply else "-",
                     _format_time(apply) if apply else "-",
                     f"{hf_apply / apply:.1f}x" if hf_apply and apply else "-"])
    print_rows(rows, file)


def _print_variants(results: List[Dict[str, Any]], header: Dict[str, Any], file: Any) -> None:
    _print_cpu(header, file)
    print(f"sinpe {header['sinpe']} threads={header['sinpe_threads']}  numpy {header['numpy']}  "
          f"{header['python']}  load average "
          f"{header['load_average'][0]} -> {header['load_average'][1]}", file=file)
    print("medians, timed in alternation; ratio = variant / default table of the same bytes",
          file=file)
    rows = [["case", "variant", "default", "ratio"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], _format_time(t["variant"]), _format_time(t["default"]),
                     f"{r['variant_over_default']:.2f}x"])
    print_rows(rows, file)


def _format_time(seconds: float) -> str:
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} us"
    if seconds < 1.0:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds:.2f} s"


def _summarise(result: Dict[str, Any]) -> None:
    times = result["times"]
    result["sinpe_over_floor"] = times["sinpe"] / times["floor"]
    others = {k: v for k, v in times.items() if k.startswith(("seed", "torch"))}
    if others:
        best = min(others, key=others.__getitem__)
        result["fastest_torch"] = best
        result["fastest_torch_over_sinpe"] = others[best] / times["sinpe"]


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


def _print_cpu(header: Dict[str, Any], file: Any) -> None:
    torch_simd = header.get("torch_simd")
    theirs = f", torch's ops at {torch_simd}" if torch_simd else ""
    print(f"CPU: {header['cpu']}, sinpe's loops at {header['simd']}{theirs}, "
          f"{header['cpu_count']} CPUs", file=file)


def _load_average() -> Optional[float]:
    """The 1-minute load average (other work competing for the cores), if known."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _print_table(results: List[Dict[str, Any]], header: Dict[str, Any], file: Any) -> None:
    _print_cpu(header, file)
    print(f"sinpe {header['sinpe']} threads={header['sinpe_threads']}  numpy {header['numpy']} "
          f"(1 thread)  torch {header['torch']} threads={header['torch_threads']}  "
          f"{header['python']}  load average "
          f"{header['load_average'][0]} -> {header['load_average'][1]}", file=file)
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
    widths = [max(len(str(x)) for x in col) for col in zip(columns, *rows)]
    line = " | ".join(c.ljust(w) for c, w in zip(columns, widths))
    print(line, file=file)
    print("-+-".join("-" * w for w in widths), file=file)
    for row in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(row, widths)), file=file)


def main(argv: Optional[Sequence[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m sinpe.bench",
        description="Time sinpe against numpy.full/fill, the NumPy float64 recipe and the "
                    "tutorials' PyTorch recipes.")
    parser.add_argument("--quick", action="store_true",
                        help="fewer rounds and no float64 NumPy recipe at the largest size")
    parser.add_argument("--json", metavar="PATH", help="also write the figures to PATH as JSON")
    parser.add_argument("--threads", type=int, metavar="K",
                        help="sinpe threads (default: sinpe.get_num_threads())")
    parser.add_argument("--no-torch", action="store_true", help="skip the PyTorch recipes")
    parser.add_argument("--hot-path", action="store_true",
                        help="time only the hot path (add_ of a training or decoding step, "
                             "on one thread and on all, against torch and NumPy)")
    parser.add_argument("--variants", action="store_true",
                        help="time the variants (layouts, schedules, positions, RoPE, grids) "
                             "against the default table instead")
    parser.add_argument("--rope", action="store_true",
                        help="time rotary embeddings (sinpe.torch.rope_) against an in-place "
                             "pass and HF's rotation instead, on 1 and all threads")
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)

    threads_before = sinpe.get_num_threads()
    if args.threads is not None:
        sinpe.set_num_threads(args.threads)
    try:
        return _run(args)
    finally:
        sinpe.set_num_threads(threads_before)  # main() may be called in-process (sinpe bench)


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


def _run(args: argparse.Namespace) -> int:
    if args.rope:
        import torch

        load_before = _load_average()
        results = _rope_cases(args.quick)
        shared = alternation_cases(args.quick, torch, rope_pairs(torch))
        steps = decode_cases(args.quick, torch, blocks_in_turn)
        sections = _section_cases(args.quick)
        modules = rotary_module_cases(args.quick, blocks_in_turn)
        models = patched_model_cases(args.quick, blocks_in_turn)
        header = _header(args, load_before, str(torch.__version__), "1 and all")
        _print_rope(results, header, sys.stdout)
        print_alternation(shared, "t.mul_(1.0)", sys.stdout)
        print_decode(steps, sys.stdout)
        _print_sections(sections, sys.stdout)
        print_rotary_module(modules, sys.stdout)
        print_patched(models, sys.stdout)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"header": header, "results": results, "alternated": shared,
                           "decoding_steps": steps, "sections": sections, "rotary_module": modules, "models": models}, f,
                          indent=2)
        return 0
    if args.variants:
        load_before = _load_average()
        results = _variant_cases(args.quick)
        header = _header(args, load_before, "-", "-")
        _print_variants(results, header, sys.stdout)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"header": header, "results": results}, f, indent=2)
        return 0
    torch_recipes = {} if args.no_torch else _torch_recipes()
    torch_version, torch_threads = "-", "-"
    if torch_recipes:
        import torch
        torch_version, torch_threads = str(torch.__version__), str(torch.get_num_threads())

    load_before = _load_average()
    torch_module: Any = None
    if torch_recipes:
        import torch
        torch_module = torch
    if args.hot_path:
        header = _header(args, load_before, torch_version, torch_threads)
        hot, shared, beside = _hot_path(args.quick, torch_module)
        _print_cpu(header, sys.stdout)
        _print_hot_path(hot, shared, beside)
        if args.json:
            with open(args.json, "w") as f:
                json.dump({"header": header, "hot_path": hot, "alternated": shared,
                           "neighbour": beside}, f, indent=2)
        return 0
    results = [
        _encode_case(16, 64, args.quick, True, torch_recipes),
        _encode_case(5000, 512, args.quick, True, torch_recipes),
        _encode_case(65536, 1024, args.quick, not args.quick, torch_recipes),
        _out_case(5000, 512, args.quick),
        _out_case(65536, 1024, args.quick),
        _rope_out_case(4096, 128, args.quick),
        _add_case((32, 512, 512), False, args.quick, bool(torch_recipes)),
        _add_case((8, 2048, 1024), False, args.quick, bool(torch_recipes)),
        _add_case((512, 32, 512), True, args.quick, bool(torch_recipes)),
        _add_case((2048, 8, 1024), True, args.quick, bool(torch_recipes)),
        _scale_case((32, 512, 512), args.quick),
        _scale_case((8, 2048, 1024), args.quick),
    ]
    for result in results:
        _summarise(result)
    hot, shared, beside = _hot_path(args.quick, torch_module)
    header = _header(args, load_before, torch_version, torch_threads)
    _print_table(results, header, sys.stdout)
    _print_hot_path(hot, shared, beside)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "results": results, "hot_path": hot,
                       "alternated": shared, "neighbour": beside}, f, indent=2)
    return 0


def _hot_path(quick: bool, torch_module: Any) -> tuple[List[Dict[str, Any]], ...]:
    """The hot path alone (blocks in turn), alternated with torch's own op call by
    call (when torch is there), and beside a busy neighbour."""
    hot = hot_path_cases(quick, torch_module)
    shared = ([] if torch_module is None
              else alternation_cases(quick, torch_module, add_pairs(torch_module, ADD_SHAPES)))
    return hot, shared, neighbour_cases(quick, blocks_in_turn)


def _print_hot_path(hot: List[Dict[str, Any]], shared: List[Dict[str, Any]],
                    beside: List[Dict[str, Any]]) -> None:
    print_hot_path(hot, sys.stdout)
    if shared:
        print_alternation(shared, "y.add_(pe)", sys.stdout)
    print_neighbour(beside, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
