"""``python -m sinpe.bench --rope``'s first rows: ``sinpe.torch.rope_`` on query-shaped
tensors against torch's in-place pass over the same tensor (``t.mul_(1.0)``),
``exact=True``, and HF's rotation (``LlamaRotaryEmbedding`` and
``apply_rotary_pos_emb``, when transformers is installed), on one thread and on all.
The timer is handed in (:func:`sinpe.bench._timing.blocks_in_turn`; the tests stub it).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence

import sinpe
from sinpe.bench._machine import _print_versions
from sinpe.bench._timing import Timer, _format_time, print_rows


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


def _rope_cases(quick: bool, blocks_in_turn: Callable[..., Dict[str, float]]
                ) -> List[Dict[str, Any]]:
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
                # blocks taken in turn (sinpe/bench/_timing.py): torch's spinning OpenMP
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
    _print_versions(header, f"sinpe {header['sinpe']}  numpy {header['numpy']}  "
                            f"torch {header['torch']}", file)
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
