"""The bench's decoding step of rotary embeddings: a few microseconds per layer, where
Python and torch's per-call costs are most of the time.

``sinpe.torch.rope_`` of one token's query against torch's own in-place op on it
(``q.mul_(1.0)``), and ``sinpe.torch.apply_rotary_pos_emb`` of a query and a key
against torch's own out-of-place op on both (``q.mul(1.0)``, ``k.mul(1.0)``: two new
tensors, as apply makes) and against HF's function.  The margin is sinpe's time less
torch's op's.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List

from sinpe.bench._timing import _us, print_rows

SHAPES = {"q": (1, 32, 1, 128), "k": (1, 8, 1, 128), "cos": (1, 1, 128)}


def decode_cases(quick: bool, torch: Any, blocks_in_turn: Callable[..., Dict[str, float]]
                 ) -> List[Dict[str, Any]]:
    import sinpe.torch as st

    try:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb as hf_apply
    except ImportError:
        hf_apply = None
    rounds, seconds = (7, 0.5) if quick else (15, 2.0)
    results = []
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        q, k = torch.randn(SHAPES["q"]).to(dtype), torch.randn(SHAPES["k"]).to(dtype)
        cos, sin = torch.randn(SHAPES["cos"]).to(dtype), torch.randn(SHAPES["cos"]).to(dtype)
        timers = {
            "rope_": lambda: st.rope_(q, offset=2047),
            "mul_": lambda: q.mul_(1.0),
            "apply": lambda: st.apply_rotary_pos_emb(q, k, cos, sin),
            "mul": lambda: (q.mul(1.0), k.mul(1.0)),
        }
        if hf_apply is not None:
            timers["hf_apply"] = lambda: hf_apply(q, k, cos, sin)
        results.append({"case": f"q {SHAPES['q']} {str(dtype).split('.')[-1]}",
                        "times": blocks_in_turn(timers, rounds, seconds)})
    return results


def print_decode(results: List[Dict[str, Any]], file: Any) -> None:
    print(f"\ndecoding step (q {SHAPES['q']}, k {SHAPES['k']}, position 2047), one thread: "
          "rope_ against q.mul_(1.0); apply_rotary_pos_emb of q and k against q.mul(1.0) and "
          "k.mul(1.0); margins = sinpe's time - torch's op's", file=file)
    rows = [["case", "rope_", "q.mul_", "margin", "apply", "q.mul, k.mul", "margin",
             "HF apply"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], _us(t["rope_"]), _us(t["mul_"]),
                     f"{(t['rope_'] - t['mul_']) * 1e6:+.2f} us", _us(t["apply"]),
                     _us(t["mul"]), f"{(t['apply'] - t['mul']) * 1e6:+.2f} us",
                     _us(t["hf_apply"]) if "hf_apply" in t else "-"])
    print_rows(rows, file)
