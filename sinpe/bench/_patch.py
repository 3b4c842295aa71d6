"""bench --rope's model rows: a small Llama's forward, HF's own and patched by sinpe.

One randomly initialised ``LlamaForCausalLM`` (4 layers, hidden size 512, 8 heads of
64 features, 2 key-value heads), in float32: a prefill of 512 tokens without a cache,
and a decoding step at position 1024 (one token after a KV cache of 1024, the cache
cropped back after each step).  The same model object is timed unpatched and under
``sinpe.torch.patch`` (entered around each of its blocks, outside the timing: the
blocks take turns, sinpe/bench/_timing.py), on one thread and on all.  The apply
function's global is HF's again between sinpe's blocks, so HF's blocks run HF's code.

``compiled=True`` (bench --compiled) times the forward under
``torch.compile(model, fullgraph=True)`` (inductor): the patched model's graph holds
one ``sinpe::rope_cache`` op (the caches by sinpe's kernel) and HF's rotation
expression, which inductor fuses as it fuses HF's own; HF's graph computes its caches
with torch's ops.  Two model objects of the same weights then, each compiled once in
the warm-up: HF's, and a copy patched for the whole run (a patch entered around each
block would be a new forward for torch.compile's guards, a recompilation each time);
HF's apply global is put back around HF's blocks.  Each model is compiled through a
function of its own (:func:`_own_code`): otherwise each call also checked the guards of
the other model's graphs.
"""
from __future__ import annotations

import contextlib
import copy
import sys
from typing import Any, Callable, ContextManager, Dict, Iterator, List

import sinpe
from sinpe.bench._timing import _us, print_rows

SMALL_LLAMA: Dict[str, Any] = dict(vocab_size=2048, hidden_size=512, intermediate_size=1408,
                   num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=2,
                   max_position_embeddings=4096)
PREFILL, CONTEXT = 512, 1024


def patched_model_cases(quick: bool, blocks: Callable[..., Dict[str, float]],
                        compiled: bool = False) -> List[Dict[str, Any]]:
    """Rows {"case", "threads", "times": {"hf", "sinpe"}}; none without transformers.
    ``blocks`` is the bench's blocks_in_turn (the tests stub it); ``compiled``: the
    forward under torch.compile."""
    try:
        import torch
        import transformers
    except ImportError:
        return []
    import sinpe.torch as st

    torch.manual_seed(0)
    model: Any = transformers.LlamaForCausalLM(transformers.LlamaConfig(**SMALL_LLAMA))
    model.eval()
    generator = torch.Generator().manual_seed(1)
    prompt = torch.randint(0, SMALL_LLAMA["vocab_size"], (1, PREFILL), generator=generator)
    context = torch.randint(0, SMALL_LLAMA["vocab_size"], (1, CONTEXT), generator=generator)
    rounds, seconds = (5, 1.0) if quick else (11, 4.0)
    results: List[Dict[str, Any]] = []
    everyone, torch_threads = sinpe.get_num_threads(), torch.get_num_threads()
    contexts: Dict[str, Callable[[], ContextManager[Any]]]
    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.no_grad())
        if compiled:
            patched = copy.deepcopy(model)
            modeling = sys.modules[type(model).__module__]
            hf_apply = modeling.apply_rotary_pos_emb
            stack.enter_context(st.patch(patched))
            # static shapes: graphs for each model's prefill and step, on each thread
            # count (a guard), for the step's first cache and its cropped views
            stack.enter_context(torch._dynamo.config.patch(recompile_limit=64))
            hf = _timers(torch.compile(_own_code(model, "hf"), fullgraph=True, dynamic=False),
                         model, prompt, context)
            ours = _timers(torch.compile(_own_code(patched, "patched"), fullgraph=True,
                                         dynamic=False), patched, prompt, context)
            contexts = {"hf": lambda: _global(modeling, "apply_rotary_pos_emb", hf_apply)}
        else:
            hf = ours = _timers(model, model, prompt, context)
            contexts = {"sinpe": lambda: st.patch(model)}
        try:
            for threads in sorted({1, everyone}):
                sinpe.set_num_threads(threads)
                torch.set_num_threads(threads)
                for label in hf:
                    times = blocks({"hf": hf[label], "sinpe": ours[label]}, rounds, seconds,
                                   contexts=contexts)
                    results.append({"case": ("compiled " if compiled else "")
                                    + f"small Llama, {label}", "threads": threads,
                                    "times": times})
        finally:
            sinpe.set_num_threads(everyone)
            torch.set_num_threads(torch_threads)
    return results


def _own_code(model: Any, name: str) -> Callable[..., Any]:
    """``model``'s call by a function whose code object is its own.  torch.compile keeps
    the graphs of one code object in one list, and each call checks their guards in turn
    until one holds: compiled as they are, the two models share transformers' forward,
    and a call of one checked the other's graphs first, each nearly to the end of its
    guards (the models differ only deep in the module tree), ~0.4 ms a graph here: a
    decoding step's tenth, charged to whichever model's graphs came later."""
    def forward(*args: Any, **kwargs: Any) -> Any:
        return model(*args, **kwargs)

    forward.__code__ = forward.__code__.replace(co_name=f"{name}_forward")
    return forward


def _timers(forward: Callable[..., Any], model: Any, prompt: Any, context: Any
            ) -> Dict[str, Callable[[], None]]:
    """The prefill and the decoding step by ``forward`` (``model`` or its compiled
    form), with a KV cache of its own."""
    cache = model(context, use_cache=True).past_key_values
    token = context[:, -1:]

    def step() -> None:
        forward(token, past_key_values=cache, use_cache=True)
        cache.crop(-1)  # back to CONTEXT tokens: every step is the same one

    def prefill() -> None:
        forward(prompt, use_cache=False)

    return {f"prefill of {PREFILL} tokens": prefill,
            f"decoding step at position {CONTEXT}": step}


@contextlib.contextmanager
def _global(module: Any, name: str, value: Any) -> Iterator[None]:
    """``module.name`` is ``value`` inside, what it was before outside."""
    before = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, before)


def print_patched(results: List[Dict[str, Any]], file: Any, compiled: bool = False) -> None:
    """One row per case and thread count: HF's forward, the patched one, their ratio."""
    if not results:
        return
    print("\n" + ("torch.compile(fullgraph=True) of " if compiled else "sinpe.torch.patch: ")
          + "a small Llama's forward (float32, 4 layers, 8 heads of 64), "
          "HF's own and the same model patched; medians of blocks taken in turn; "
          "ratio = patched / HF", file=file)
    rows = [["case", "threads", "HF", "patched", "patched/HF"]]
    for r in results:
        t = r["times"]
        rows.append([r["case"], str(r["threads"]), _us(t["hf"]), _us(t["sinpe"]),
                     f"{t['sinpe'] / t['hf']:.2f}x"])
    print_rows(rows, file)
