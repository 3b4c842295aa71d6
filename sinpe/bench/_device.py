"""``python -m sinpe.bench --device DEVICE``: sinpe.torch's device path on a device.

The device path (every device but the CPU; ``--device cpu`` takes it on the CPU, as
``SINPE_TORCH_PATH=device`` does) makes a patched model's caches by device operations
alone.  Measured here, on ``DEVICE``:

- a decoding step of a Llama-shaped model (float32 on the CPU, bfloat16 elsewhere; a
  KV cache of :data:`CONTEXT` tokens, cropped back after each step), transformers' own
  and the same model patched: eager; compiled (``torch.compile(fullgraph=True)``); and
  with CUDA graphs (``mode="reduce-overhead"``) on CUDA;
- the first call at 128k, 1M and 10M ``max_position_embeddings`` (a new model each,
  its prompt of 16 tokens at the last positions): the time of ``patch`` and of the
  first call, and the memory they add, against transformers' own first call.

Every timing synchronises the device after each block (the blocks take turns, as in
the rest of the bench).
"""
from __future__ import annotations

import contextlib
import copy
import sys
import time
from typing import Any, Callable, Dict, List

from sinpe.bench._patch import _global, _own_code
from sinpe.bench._timing import _format_time, _us, print_rows

# Llama-shaped: heads of 128 as Llama 3's; small enough for a CPU, a real step on a GPU
MODELS: Dict[str, Dict[str, Any]] = {
    "cpu": dict(vocab_size=2048, hidden_size=512, intermediate_size=1408, num_hidden_layers=4,
                num_attention_heads=4, num_key_value_heads=2, head_dim=128),
    "other": dict(vocab_size=32000, hidden_size=2048, intermediate_size=5632,
                  num_hidden_layers=16, num_attention_heads=16, num_key_value_heads=4,
                  head_dim=128),
}
CONTEXT = 1024
LENGTHS = (131_072, 1_048_576, 10_485_760)


def _sync(device: Any) -> Callable[[], None]:
    import torch

    if device.type == "cuda":
        return torch.cuda.synchronize
    if device.type == "mps":
        return torch.mps.synchronize
    return lambda: None


def device_cases(device_name: str, quick: bool, blocks: Callable[..., Dict[str, float]]
                 ) -> Dict[str, List[Dict[str, Any]]]:
    """{"steps": rows {"case", "times": {"hf", "sinpe"}}, "first_calls": rows}; empty
    without transformers."""
    try:
        import torch
        import transformers
    except ImportError:
        return {"steps": [], "first_calls": []}
    import sinpe.torch as st
    from sinpe.torch import _tensors

    device = torch.device(device_name)
    if device.type == "cpu":
        _tensors.DEVICE_PATH_FORCED = True  # SINPE_TORCH_PATH=device, for this process
    shape = MODELS["cpu" if device.type == "cpu" else "other"]
    dtype = torch.float32 if device.type == "cpu" else torch.bfloat16
    config = transformers.LlamaConfig(**shape, max_position_embeddings=8192)
    torch.manual_seed(0)
    model: Any = transformers.LlamaForCausalLM(config).eval().to(device=device, dtype=dtype)
    context = torch.randint(0, shape["vocab_size"], (1, CONTEXT),
                            generator=torch.Generator().manual_seed(1)).to(device)
    rounds, seconds = (5, 1.0) if quick else (11, 4.0)
    sync = _sync(device)
    steps: List[Dict[str, Any]] = []
    modeling = sys.modules[type(model).__module__]
    hf_apply = modeling.apply_rotary_pos_emb
    with torch.no_grad():
        patched = copy.deepcopy(model)
        with st.patch(patched):
            modes = [("eager", None)] + [("compiled", "default")] + (
                [("CUDA graphs", "reduce-overhead")] if device.type == "cuda" else [])
            for label, mode in modes:
                hf_forward, ours_forward = model, patched
                if mode is not None:
                    torch._dynamo.reset()
                    hf_forward = torch.compile(_own_code(model, "hf"), fullgraph=True,
                                               mode=mode)
                    ours_forward = torch.compile(_own_code(patched, "patched"), fullgraph=True,
                                                 mode=mode)
                timers = {"hf": _step(hf_forward, model, context, sync),
                          "sinpe": _step(ours_forward, patched, context, sync)}
                times = blocks(timers, rounds, seconds, contexts={
                    "hf": lambda: _global(modeling, "apply_rotary_pos_emb", hf_apply)})
                steps.append({"case": f"decoding step at position {CONTEXT}, {label}",
                              "times": times})
    return {"steps": steps, "first_calls": [_first_call(device, dtype, length, sync)
                                            for length in LENGTHS]}


def _step(forward: Callable[..., Any], model: Any, context: Any, sync: Callable[[], None]
          ) -> Callable[[], None]:
    cache = model(context, use_cache=True).past_key_values
    token = context[:, -1:]

    def step() -> None:
        forward(token, past_key_values=cache, use_cache=True)
        cache.crop(-1)  # back to CONTEXT tokens: every step is the same one
        sync()
    return step


def _first_call(device: Any, dtype: Any, length: int, sync: Callable[[], None]
                ) -> Dict[str, Any]:
    """transformers' first call and sinpe's patch + first call of a new model with
    ``max_position_embeddings = length``, its prompt at the last positions."""
    import torch
    import transformers

    import sinpe.torch as st

    shape = dict(MODELS["cpu"], num_hidden_layers=1, vocab_size=256)
    config = transformers.LlamaConfig(**shape, max_position_embeddings=length)
    ids = torch.randint(0, 256, (1, 16), generator=torch.Generator().manual_seed(2)).to(device)
    positions = torch.arange(length - 16, length, device=device)[None]
    row: Dict[str, Any] = {"length": length}
    for side in ("hf", "sinpe"):
        torch.manual_seed(0)
        model = transformers.LlamaForCausalLM(config).eval().to(device=device, dtype=dtype)
        before = _memory(device)
        start = time.perf_counter()
        handle = st.patch(model) if side == "sinpe" else contextlib.nullcontext()
        patched_at = time.perf_counter()
        with torch.no_grad(), handle:
            model(ids, position_ids=positions)
            sync()
            row[side] = {"patch": patched_at - start, "first": time.perf_counter() - patched_at,
                         "memory": _memory(device) - before}
        del model
    return row


def _memory(device: Any) -> int:
    """Bytes in use: the device's allocator, or the process's resident set on the CPU."""
    import torch

    if device.type == "cuda":
        return int(torch.cuda.memory_allocated(device))
    if device.type == "mps":
        return int(torch.mps.current_allocated_memory())
    try:
        with open("/proc/self/statm") as statm:
            import os
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return 0


def print_device(results: Dict[str, List[Dict[str, Any]]], device_name: str, file: Any) -> None:
    if results["steps"]:
        print(f"\nsinpe.torch's device path on {device_name}: a Llama-shaped model's decoding "
              "step, transformers' own and patched; medians of blocks taken in turn, the "
              "device synchronised after each; ratio = patched / HF", file=file)
        rows = [["case", "HF", "patched", "patched/HF"]]
        for r in results["steps"]:
            t = r["times"]
            rows.append([r["case"], _us(t["hf"]), _us(t["sinpe"]),
                         f"{t['sinpe'] / t['hf']:.2f}x"])
        print_rows(rows, file)
    if results["first_calls"]:
        print(f"\nfirst call on {device_name} by max_position_embeddings (a new model, its "
              "16-token prompt at the last positions): patch, the first call, the memory "
              "they add (the device's allocator; the resident set on the CPU)", file=file)
        rows = [["max_position_embeddings", "HF first call", "HF memory", "sinpe patch",
                 "sinpe first call", "sinpe memory"]]
        for r in results["first_calls"]:
            hf, ours = r["hf"], r["sinpe"]
            rows.append([f"{r['length']:,}", _format_time(hf["first"]),
                         f"{hf['memory'] / 2**20:.1f} MiB", _format_time(ours["patch"]),
                         _format_time(ours["first"]), f"{ours['memory'] / 2**20:.1f} MiB"])
        print_rows(rows, file)
