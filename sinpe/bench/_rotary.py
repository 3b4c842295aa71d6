"""``python -m sinpe.bench --rope``'s rotary-module rows: sinpe.torch.RotaryEmbedding
against transformers' own rotary modules, both called as a model calls them.

The cases are a decoding step (one position, batch 1) and a 2048-token prefill, for
a Llama 3.1 config (head_dim 128, ``llama3`` rope, max_position_embeddings 131072)
against LlamaRotaryEmbedding, and for a Qwen2-VL 7B text config (multi-axis RoPE:
``mrope_section`` [16, 24, 24], position_ids of shape (3, 1, L)) against
Qwen2VLRotaryEmbedding: a decoding step (a text token: its three positions alike)
and 2048 tokens holding a 32 x 32 image (distinct time, height and width
positions), with float32 and bfloat16 hidden states, on one thread and on all.
sinpe's table is made by the warm-up call (its one-time cost is reported apart,
``first call``; multi-axis caches keep no table); the timed calls are what every
later forward costs.  The contenders are timed in blocks of calls taken in turn
(sinpe/bench/_timing.py), medians.
"""
from __future__ import annotations

import time
from typing import Any, Callable, Dict, List

import sinpe
from sinpe.bench._timing import _format_time, print_rows

# (label, positions: decode = the one position 2047, prefill = 0 .. 2047)
CASES = [("decode step", "decode"), ("prefill 2048", "prefill")]
# Qwen2-VL (label, positions: decode = (3, 1, 1) at 2047, image = text, a 32 x 32 image, text)
VL_CASES = [("M-RoPE decoding step", "decode"), ("M-RoPE 2048 with an image", "image")]
DTYPES = ["float32", "bfloat16"]


def _vl_positions(kind: str) -> Any:
    """Qwen2-VL's (3, 1, L) position_ids of a case."""
    import torch

    if kind == "decode":
        return torch.full((3, 1, 1), 2047)
    text, grid = 100, 32
    steps = torch.arange(grid * grid)
    image = torch.stack([torch.full_like(steps, text), text + steps // grid, text + steps % grid])
    after = text + grid + torch.arange(2048 - text - grid * grid)
    rows = [torch.cat([torch.arange(text), image[axis], after]) for axis in range(3)]
    return torch.stack(rows)[:, None, :]


def rotary_module_cases(quick: bool, blocks_in_turn: Callable[..., Dict[str, float]]
                        ) -> List[Dict[str, Any]]:
    """Medians of RotaryEmbedding.forward and HF's forward per case, timed by
    ``blocks_in_turn`` (sinpe/bench/_timing.py's); [] without transformers."""
    try:
        import torch
        from transformers import LlamaConfig, Qwen2VLTextConfig
        from transformers.models.llama import modeling_llama as llama
        from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen2_vl
    except ImportError:
        return []
    import sinpe.torch as st

    config = LlamaConfig(hidden_size=4096, num_attention_heads=32,
                         max_position_embeddings=131072,
                         rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0,
                                          "factor": 8.0, "low_freq_factor": 1.0,
                                          "high_freq_factor": 4.0,
                                          "original_max_position_embeddings": 8192})
    hf = llama.LlamaRotaryEmbedding(config)
    vl_config: Any = Qwen2VLTextConfig(  # Qwen2-VL 7B's text rope
        hidden_size=3584, num_attention_heads=28, max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]})
    vl_hf = qwen2_vl.Qwen2VLRotaryEmbedding(vl_config)
    results = []
    all_threads = sinpe.get_num_threads()
    torch_threads = torch.get_num_threads()
    rounds, seconds = (7, 1.0) if quick else (15, 4.0)
    try:
        for threads in sorted({1, all_threads}):
            sinpe.set_num_threads(threads)
            torch.set_num_threads(threads)
            for dtype_name in DTYPES:
                x = torch.zeros(1, 1, 4096, dtype=getattr(torch, dtype_name))
                module = st.RotaryEmbedding(config)
                t0 = time.perf_counter()
                module(x, torch.tensor([[0]]))  # makes the table (131072 positions)
                first = time.perf_counter() - t0
                cases = [(label, torch.tensor([[2047]]) if kind == "decode"
                          else torch.arange(2048)[None]) for label, kind in CASES]
                vl_cases = [(label, _vl_positions(kind)) for label, kind in VL_CASES]
                for rows, sinpe_module, hf_module, made in (
                        (cases, module, hf, first),
                        (vl_cases, st.RotaryEmbedding(vl_config), vl_hf, None)):
                    for label, position_ids in rows:
                        times = blocks_in_turn({
                            "sinpe": lambda m=sinpe_module, ids=position_ids: m(x, ids),
                            "hf": lambda m=hf_module, ids=position_ids: m(x, ids),
                        }, rounds, seconds)
                        results.append({"case": f"{label} {dtype_name}", "threads": threads,
                                        "times": times, "first_call": made})
    finally:
        sinpe.set_num_threads(all_threads)
        torch.set_num_threads(torch_threads)
    return results


def print_rotary_module(results: List[Dict[str, Any]], file: Any) -> None:
    if not results:
        print("RotaryEmbedding: transformers is not installed", file=file)
        return
    print("\nsinpe.torch.RotaryEmbedding vs transformers' LlamaRotaryEmbedding (Llama 3.1 "
          "config, head_dim 128) and Qwen2VLRotaryEmbedding (M-RoPE: Qwen2-VL 7B text config, "
          "position_ids (3, 1, L)), forward only; medians of blocks taken in turn; first call "
          "= sinpe's table of 131072 positions, made once (M-RoPE: no table)", file=file)
    rows = [["case", "threads", "RotaryEmbedding", "HF", "sinpe / HF", "first call"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], str(r["threads"]), _format_time(t["sinpe"]),
                     _format_time(t["hf"]), f"{t['sinpe'] / t['hf']:.2f}x",
                     "-" if r["first_call"] is None else _format_time(r["first_call"])])
    print_rows(rows, file)
