"""The drift of transformers' RoPE in attention scores and logits, measured.

    python examples/drift/measure.py --write docs/_generated

writes ``drift_attention.json`` / ``.md`` and ``drift_families.json`` / ``.md``, the
tables the documentation includes.  Nothing is downloaded: every model is built here
from a config.

Attention scores (``drift_attention``): the attention shapes of Llama 3.1 8B (heads of
128, theta 500000, llama3 rope scaling), Qwen2.5 7B (theta 1e6, YaRN factor 4 as its
long-context instructions set it) and Llama 4 Scout (theta 500000, llama3 scaling
factor 16, 10M positions; its rotary module returns complex ``freqs_cis``).  Random
``q, k`` (8 heads of 128, 64 tokens, seeded) are rotated by the family's own apply
function with the caches of transformers' rotary module, or with sinpe's, at positions
``s .. s + 63`` and ``0 .. 63``; the table gives the largest change of any score
``q . k / sqrt(128)``.  sinpe's caches: ``sinpe.torch.RotaryEmbedding(config)`` (what
``sinpe.torch.patch`` puts in the model) for Llama 3.1 and Qwen2.5; for Llama 4, whose
llama3 parameters (``low_freq_factor == high_freq_factor``) ``sinpe.rope_frequencies``
refuses, ``sinpe.torch.rope_cache`` with the frequencies of transformers' module
(``inv_freq``, float32, as the patch would use) and its attention factor, made into
``freqs_cis = cos + i sin``.  In float32, and in bfloat16 (q, k, the caches, the
rotation and the product in bfloat16, as a bfloat16 model computes them).

Logits (``drift_families``): :func:`sinpe.torch.drift` on tiny random models of several
families (2 layers, 8 heads of 128, each family's own rope theta, the query and key
projections scaled by 8 so that attention is sharp), 128 random tokens.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import torch
import transformers
from transformers.models.llama import modeling_llama
from transformers.models.llama4 import modeling_llama4
from transformers.models.qwen2 import modeling_qwen2

import sinpe.torch

OFFSETS = (2**10, 2**14, 2**17, 2**20, 2**22, 2**23)
HEADS, TOKENS, HEAD = 8, 64, 128


def llama3_scaling(factor: float, low: float, high: float) -> dict:
    return {"rope_type": "llama3", "rope_theta": 500000.0, "factor": factor,
            "low_freq_factor": low, "high_freq_factor": high,
            "original_max_position_embeddings": 8192}


SHAPES = {
    "Llama 3.1 8B": (lambda: transformers.LlamaConfig(
        hidden_size=4096, num_attention_heads=32, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=131072, rope_parameters=llama3_scaling(8.0, 1.0, 4.0)),
        modeling_llama.LlamaRotaryEmbedding, modeling_llama.apply_rotary_pos_emb),
    "Qwen2.5 7B (YaRN x4)": (lambda: transformers.Qwen2Config(
        hidden_size=3584, num_attention_heads=28, num_key_value_heads=4,
        max_position_embeddings=32768, rope_parameters={
            "rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
            "original_max_position_embeddings": 32768}),
        modeling_qwen2.Qwen2RotaryEmbedding, modeling_qwen2.apply_rotary_pos_emb),
    "Llama 4 Scout": (lambda: transformers.Llama4TextConfig(
        hidden_size=5120, num_attention_heads=40, num_key_value_heads=8, head_dim=128,
        max_position_embeddings=10485760, rope_parameters=llama3_scaling(16.0, 1.0, 1.0)),
        modeling_llama4.Llama4TextRotaryEmbedding, modeling_llama4.apply_rotary_emb),
}


def rotate(name: str, apply, caches, q: torch.Tensor, k: torch.Tensor):
    """q and k rotated by the family's own apply function."""
    if name == "Llama 4 Scout":  # (B, L, H, D) and complex freqs_cis
        qr, kr = apply(q.transpose(1, 2), k.transpose(1, 2), caches)
        return qr.transpose(1, 2), kr.transpose(1, 2)
    cos, sin = caches
    return apply(q, k, cos, sin)


def attention(offsets: tuple[int, ...] = OFFSETS) -> dict:
    generator = torch.Generator().manual_seed(0)
    q32 = torch.randn(1, HEADS, TOKENS, HEAD, generator=generator)
    k32 = torch.randn(1, HEADS, TOKENS, HEAD, generator=generator)
    results: dict = {"positions": list(offsets), "shapes": {}}
    for name, (make, module, apply) in SHAPES.items():
        config = make()
        hf = module(config)
        ours = None if name == "Llama 4 Scout" else sinpe.torch.RotaryEmbedding(config)

        def caches(mode: str, x: torch.Tensor, positions: torch.Tensor, hf=hf, ours=ours):
            if mode == "hf":
                return hf(x, positions)
            if ours is not None:
                return ours(x, positions)
            cos, sin = sinpe.torch.rope_cache(None, HEAD, positions=positions,
                                              freq=hf.inv_freq, scale=hf.attention_scaling,
                                              dtype=torch.float32)
            return torch.complex(cos[..., : HEAD // 2], sin[..., : HEAD // 2])

        for dtype in (torch.float32, torch.bfloat16):
            q, k = q32.to(dtype), k32.to(dtype)
            row = {}
            for mode in ("hf", "sinpe"):
                def scores(s: int) -> torch.Tensor:
                    positions = (s + torch.arange(TOKENS))[None]
                    qr, kr = rotate(name, apply, caches(mode, q, positions), q, k)
                    return ((qr @ kr.transpose(-1, -2)) / math.sqrt(HEAD)).double()

                base = scores(0)
                row[f"scores_{mode}"] = [float((scores(s) - base).abs().max()) for s in offsets]
            results["shapes"][f"{name}, {str(dtype).split('.')[1]}"] = row
            print(f"{name} {dtype}: {row}", file=sys.stderr, flush=True)
    return results


FAMILY_SHAPE = dict(vocab_size=256, hidden_size=1024, intermediate_size=1024,
                    num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=8,
                    head_dim=128, pad_token_id=0, bos_token_id=1, eos_token_id=2)


def theta(value: float) -> dict:
    return {"rope_parameters": {"rope_type": "default", "rope_theta": value}}


FAMILIES = {
    "Llama (theta 5e5)": lambda: transformers.LlamaConfig(**FAMILY_SHAPE, **theta(5e5)),
    "Qwen2 (theta 1e6)": lambda: transformers.Qwen2Config(**FAMILY_SHAPE, **theta(1e6)),
    "Gemma 3 (theta 1e6 global, 1e4 local)": lambda: transformers.Gemma3TextConfig(
        **FAMILY_SHAPE, sliding_window=4096,
        layer_types=["sliding_attention", "full_attention"]),
    "Mistral (theta 1e6)": lambda: transformers.MistralConfig(**FAMILY_SHAPE, **theta(1e6)),
    "Phi-3 (theta 1e4)": lambda: transformers.Phi3Config(
        **{k: v for k, v in FAMILY_SHAPE.items() if k != "head_dim"}, **theta(1e4)),
    "Qwen3 (theta 1e6)": lambda: transformers.Qwen3Config(**FAMILY_SHAPE, **theta(1e6)),
}


def sharpen(model: torch.nn.Module, factor: float = 8.0) -> None:
    """Queries and keys ``factor`` times larger, as a trained model's sharp attention:
    the projections' weights, or where a norm follows them (Gemma 3, Qwen3: q_norm,
    k_norm), the norms' scale (Gemma's RMSNorm multiplies by ``1 + weight``)."""
    for module in model.modules():
        norms = [getattr(module, n, None) for n in ("q_norm", "k_norm")]
        if all(isinstance(n, torch.nn.Module) for n in norms):
            for norm in norms:
                gemma = "Gemma" in type(norm).__name__
                norm.weight.copy_((1 + norm.weight) * factor - 1 if gemma
                                  else norm.weight * factor)
            continue
        for name in ("q_proj", "k_proj"):
            if isinstance(getattr(module, name, None), torch.nn.Linear):
                getattr(module, name).weight.mul_(factor)
        fused = getattr(module, "qkv_proj", None)  # Phi-3: rows of q, then k, then v
        if isinstance(fused, torch.nn.Linear):
            config = model.config
            head = config.hidden_size // config.num_attention_heads
            rows = head * (config.num_attention_heads + config.num_key_value_heads)
            fused.weight[:rows].mul_(factor)


def families(offsets: tuple[int, ...] = OFFSETS[:-1]) -> dict:
    results: dict = {"positions": list(offsets), "families": {}}
    for name, make in FAMILIES.items():
        torch.manual_seed(0)
        model = transformers.AutoModelForCausalLM.from_config(make()).eval()
        with torch.no_grad():
            sharpen(model)
            ids = torch.randint(0, 256, (1, 128), generator=torch.Generator().manual_seed(0))
            std = float(model(ids).logits.std())
        result = sinpe.torch.drift(model, ids, positions=offsets)
        result["logit_std"] = std
        results["families"][name] = result
        print(f"{name}: {result}", file=sys.stderr, flush=True)
    return results


def _power(s: int) -> str:
    return f"2^{s.bit_length() - 1}" if s & (s - 1) == 0 else str(s)


def _cell(a: float, b: float) -> str:
    return f"{a:.1e} / {b:.1e}"


def attention_markdown(results: dict) -> str:
    offsets = results["positions"]
    lines = ["<!-- generated by: python examples/drift/measure.py --write docs/_generated -->", "",
             "| attention shape, dtype | " + " | ".join(f"s = {_power(s)}" for s in offsets) + " |",
             "|" + "---|" * (len(offsets) + 1)]
    for name, row in results["shapes"].items():
        lines.append(f"| {name} | " + " | ".join(
            _cell(a, b) for a, b in zip(row["scores_hf"], row["scores_sinpe"])) + " |")
    lines += ["", "Each cell: the largest change of a score `q.k/sqrt(128)` when the same 64 "
              "tokens move from positions 0.. to s.., with transformers' caches / with sinpe's."]
    return "\n".join(lines) + "\n"


def families_markdown(results: dict) -> str:
    offsets = results["positions"]
    lines = ["<!-- generated by: python examples/drift/measure.py --write docs/_generated -->", "",
             "| family | logit std | " + " | ".join(f"s = {_power(s)}" for s in offsets)
             + " | top-1 kept at " + _power(offsets[-1]) + " |",
             "|" + "---|" * (len(offsets) + 3)]
    for name, r in results["families"].items():
        cells = [_cell(a, b) for a, b in zip(r["logits_hf"], r["logits_sinpe"])]
        kept = f"{100 * r['top1_hf'][-1]:.0f}% / {100 * r['top1_sinpe'][-1]:.0f}%"
        lines.append(f"| {name} | {r['logit_std']:.2f} | " + " | ".join(cells) + f" | {kept} |")
    lines += ["", "Each cell: `sinpe.torch.drift`'s largest change of a logit when the same 128 "
              "tokens move from positions 0.. to s.., the model as it is / patched by sinpe."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", type=Path, metavar="DIR",
                        help="write the JSON and Markdown tables into DIR")
    parser.add_argument("--only", choices=("attention", "families"))
    args = parser.parse_args(argv)
    tables = []
    if args.only != "families":
        tables.append(("drift_attention", attention(), attention_markdown))
    if args.only != "attention":
        tables.append(("drift_families", families(), families_markdown))
    for stem, results, render in tables:
        if args.write:
            args.write.mkdir(parents=True, exist_ok=True)
            (args.write / f"{stem}.json").write_text(json.dumps(results, indent=1) + "\n")
            (args.write / f"{stem}.md").write_text(render(results))
            print(f"wrote {args.write / stem}.json and .md", file=sys.stderr)
        else:
            print(render(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
