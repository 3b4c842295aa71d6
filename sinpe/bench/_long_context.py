"""bench --rope's long-context rows: ``patch`` of a 10M-context model, and decoding there.

- ``patch`` of a Llama-shaped model with Llama 4 Scout's context (``max_position_embeddings``
  10,485,760, heads of 128, theta 5e5), in a new process: the time ``patch`` takes and
  the memory it adds (peak resident set size before and after, ``ru_maxrss``).  The
  target: within 2 s and 256 MiB of the unpatched model (sinpe's tables grow with the
  positions asked for, never with ``max_position_embeddings``).
- Greedy decoding near position 10**7: a prompt of 16 tokens at positions
  ``10**7 .. 10**7 + 15``, then 32 steps with a KV cache, on the patched model (its query
  and key projections scaled by 8 for sharp attention); the tokens a full forward over
  the whole sequence picks at each step must be the same: the kept tables, the rows made
  per call and the apply kernel agree between a decoding step and a prefill.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Any, Dict, List

SCOUT: Dict[str, Any] = dict(vocab_size=256, hidden_size=256, intermediate_size=512,
                             num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                             head_dim=128, max_position_embeddings=10_485_760,
                             rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
FAR, PROMPT, STEPS = 10**7, 16, 32

_PATCH = """
import json, resource, time, torch, transformers, sinpe.torch as st
config = transformers.LlamaConfig(**json.loads({config!r}))
torch.manual_seed(0)
model = transformers.LlamaForCausalLM(config).eval()
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.perf_counter()
handle = st.patch(model)
took = time.perf_counter() - start
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
handle.undo()  # a test runs this code in the suite's own process
print(json.dumps({{"seconds": took, "added_mib": (after - before) / 1024,
                  "model_mib": before / 1024}}))
"""


def patch_cost() -> Dict[str, Any]:
    """``patch``'s time and added peak memory at 10M positions (a new process)."""
    import sinpe

    code = _PATCH.format(config=json.dumps(SCOUT))
    # run where this sinpe is (the child imports the same one, not a source tree's)
    home = os.path.dirname(os.path.dirname(os.path.abspath(sinpe.__file__)))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=home, timeout=600, check=True).stdout
    result: Dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def far_decoding() -> Dict[str, Any]:
    """Greedy decoding near 10**7 against the full forward (see the module docstring)."""
    import torch
    import transformers

    import sinpe.torch as st

    torch.manual_seed(0)
    model: Any = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SCOUT))
    model.eval()
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.q_proj.weight.mul_(8)
            layer.self_attn.k_proj.weight.mul_(8)
    prompt = torch.randint(0, SCOUT["vocab_size"], (1, PROMPT),
                           generator=torch.Generator().manual_seed(1))
    with torch.no_grad(), st.patch(model):
        ids = prompt
        out = model(ids, position_ids=FAR + torch.arange(PROMPT)[None], use_cache=True)
        cache, picked = out.past_key_values, []
        for step in range(STEPS):
            token = out.logits[:, -1:].argmax(-1)
            picked.append(int(token))
            ids = torch.cat([ids, token], dim=1)
            position = FAR + PROMPT + step
            out = model(token, position_ids=torch.tensor([[position]]),
                        past_key_values=cache, use_cache=True)
        full = model(ids, position_ids=FAR + torch.arange(ids.shape[1])[None]).logits
        again = full[0, PROMPT - 1:-1].argmax(-1).tolist()
    same = sum(a == b for a, b in zip(picked, again))
    return {"steps": STEPS, "same": same}


def long_context_cases() -> List[Dict[str, Any]]:
    """Rows {"case", "value"}; none without transformers."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError:
        return []
    cost = patch_cost()
    decoding = far_decoding()
    return [
        {"case": "patch at max_position_embeddings 10,485,760 (heads of 128): time",
         "value": f"{cost['seconds']:.2f} s (target 2 s)"},
        {"case": "patch at max_position_embeddings 10,485,760: peak memory added",
         "value": f"{cost['added_mib']:.1f} MiB over the model's {cost['model_mib']:.0f} MiB "
                  "(target 256 MiB)"},
        {"case": f"greedy decoding, {STEPS} steps near position 10**7, patched",
         "value": f"{decoding['same']}/{decoding['steps']} tokens as the full forward's"},
    ]


def print_long_context(results: List[Dict[str, Any]], file: Any) -> None:
    if not results:
        return
    from sinpe.bench._timing import print_rows

    print("\nsinpe.torch.patch at long context (a Llama with Llama 4 Scout's 10M positions)",
          file=file)
    print_rows([["case", "measured"]] + [[r["case"], r["value"]] for r in results], file)
