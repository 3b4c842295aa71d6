"""``python -m sinpe.bench --rope``'s rotary-module rows: sinpe.torch.RotaryEmbedding
against transformers' own rotary modules, both called as a model calls them.

The cases are a decoding step (one position, batch 1) and a 2048-token prefill, for
a Llama 3.1 config (head_dim 128, ``llama3`` rope, max_position_embeddings 131072)
against LlamaRotaryEmbedding, and for a Qwen2-VL 7B text config (multi-axis RoPE:
``mrope_section`` [16, 24, 24], position_ids of shape (3, 1, L)) against
Qwen2VLRotaryEmbedding: a decoding step (a text token: its three positions alike)
and 2048 tokens holding a 32 x 32 image (distinct time, height and width
positions), with float32 and bfloat16 hidden states, on one thread and on all.
sinpe's first table is made by the warm-up call at position 0 (its one-time cost
is reported apart, ``first call``; multi-axis caches keep no table), then grown
untimed to the cases' positions; the timed calls are what every later forward
costs.  The contenders are timed in blocks of calls taken in turn
(sinpe/bench/_timing.py), medians.

The first-call rows: a model's first decoding step (position 5, float32, head 128)
at ``max_position_embeddings`` 131072 (Llama 3.1), 1048576 and 10485760 (Llama 4
Scout), each module built and called once in a new Python process, so that no
earlier case's memory hides a later one's: the construction, the first call, and
the process's peak resident memory, HF's module against RotaryEmbedding.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import Any, Callable, Dict, List, Optional

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
                module(x, torch.tensor([[0]]))  # makes its first table (256 positions)
                first = time.perf_counter() - t0
                module(x, torch.tensor([[2047]]))  # grows it to the cases' positions
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


# max_position_embeddings of the first-call rows: Llama 3.1's, 1M, Llama 4 Scout's
FIRST_CALL_LENGTHS = [131_072, 1_048_576, 10_485_760]

# One case in a new process: argv = (which module, max_position_embeddings); prints
# the seconds to build it and to make its first call, and the peak RSS in bytes
# (None where the platform's resource module is missing: Windows).
_FIRST_CALL = """
import json, sys, time
import torch, transformers
from transformers.models.llama import modeling_llama
import sinpe.torch as st
which, length = sys.argv[1], int(sys.argv[2])
config = transformers.LlamaConfig(
    hidden_size=4096, num_attention_heads=32, max_position_embeddings=length,
    rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                     "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                     "original_max_position_embeddings": 8192})
x, position_ids = torch.zeros(1, 1, 4096), torch.tensor([[5]])
start = time.perf_counter()
module = (st.RotaryEmbedding(config) if which == "sinpe"
          else modeling_llama.LlamaRotaryEmbedding(config))
built = time.perf_counter() - start
start = time.perf_counter()
module(x, position_ids)
first = time.perf_counter() - start
try:
    import resource
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    peak *= 1 if sys.platform == "darwin" else 1024  # (Linux: KiB)
except ImportError:
    peak = None
print(json.dumps({"built": built, "first": first, "peak": peak}))
"""


def first_call(which: str, length: int) -> Dict[str, Any]:
    """One first-call case (``which``: "hf" or "sinpe") in a new Python process:
    {"built", "first", "peak"}, or {"error": its last line} where it failed."""
    # run where this sinpe is (the child imports the same one, not a source tree's)
    home = os.path.dirname(os.path.dirname(os.path.abspath(sinpe.__file__)))
    proc = subprocess.run([sys.executable, "-c", _FIRST_CALL, which, str(length)], cwd=home,
                          capture_output=True, text=True, timeout=600, check=False)
    lines = (proc.stdout if proc.returncode == 0 else proc.stderr).strip().splitlines()
    if proc.returncode != 0 or not lines:
        return {"error": lines[-1] if lines else f"exit status {proc.returncode}"}
    result: Dict[str, Any] = json.loads(lines[-1])
    return result


def first_call_cases() -> List[Dict[str, Any]]:
    """The first-call rows: HF's module and RotaryEmbedding at each length of
    :data:`FIRST_CALL_LENGTHS`, each in its own process; [] without transformers."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return []
    return [{"length": length, "hf": first_call("hf", length),
             "sinpe": first_call("sinpe", length)} for length in FIRST_CALL_LENGTHS]


def _peak(case: Dict[str, Any]) -> Optional[float]:
    return case.get("peak")


def print_first_calls(rows: List[Dict[str, Any]], file: Any) -> None:
    if not rows:
        return
    print("\nfirst call: a decoding step (position 5, float32, head 128, Llama 3.1's llama3 "
          "rope) of a new module in a new process, by max_position_embeddings; build = the "
          "module's construction (sinpe's checks its caches against HF's module), peak = the "
          "process's peak RSS", file=file)
    table = [["max_position_embeddings", "HF build", "HF first call", "HF peak",
              "sinpe build", "sinpe first call", "sinpe peak", "sinpe - HF"]]
    for r in rows:
        cells = [f"{r['length']:,}"]
        for side in ("hf", "sinpe"):
            case = r[side]
            if "error" in case:
                cells += [case["error"][:40], "-", "-"]
                continue
            peak = _peak(case)
            cells += [_format_time(case["built"]), _format_time(case["first"]),
                      "-" if peak is None else f"{peak / 2**20:.0f} MiB"]
        hf, ours = r["hf"], r["sinpe"]
        if "error" in hf or "error" in ours:
            cells.append("-")
        else:
            peaks = (_peak(hf), _peak(ours))
            memory = ("" if peaks[0] is None or peaks[1] is None
                      else f", {(peaks[1] - peaks[0]) / 2**20:+.0f} MiB")
            cells.append(f"{(ours['first'] - hf['first']) * 1e3:+.2f} ms{memory}")
        table.append(cells)
    print_rows(table, file)


def print_rotary_module(results: List[Dict[str, Any]], file: Any) -> None:
    if not results:
        print("RotaryEmbedding: transformers is not installed", file=file)
        return
    print("\nsinpe.torch.RotaryEmbedding vs transformers' LlamaRotaryEmbedding (Llama 3.1 "
          "config, head_dim 128) and Qwen2VLRotaryEmbedding (M-RoPE: Qwen2-VL 7B text config, "
          "position_ids (3, 1, L)), forward only; medians of blocks taken in turn; first call "
          "= sinpe's first table (the positions asked for, at least 256), made once (M-RoPE: "
          "no table)", file=file)
    rows = [["case", "threads", "RotaryEmbedding", "HF", "sinpe / HF", "first call"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], str(r["threads"]), _format_time(t["sinpe"]),
                     _format_time(t["hf"]), f"{t['sinpe'] / t['hf']:.2f}x",
                     "-" if r["first_call"] is None else _format_time(r["first_call"])])
    print_rows(rows, file)
