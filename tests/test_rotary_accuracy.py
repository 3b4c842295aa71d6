"""The accuracy table of rotary modules in transformers models, computed (not typed).

``python tests/test_rotary_accuracy.py`` prints it; the test checks that README.md and
docs/accuracy.md hold exactly that table, and the claims they make of it.

Each row is a model's rope type, as its transformers config sets it, and one
position p; each column the largest absolute error, over the ``(cos, sin)``
columns the model's rotary module returns for p in float32, against the exact
values: ``s * cos(p * w)`` and ``s * sin(p * w)`` for the model's own
frequencies ``w`` (the float32 ``inv_freq`` transformers computes, taken as
exact binary numbers) and its attention factor ``s``, in mpmath at 40 digits.

* transformers' float32 recipe: the family's own ``*RotaryEmbedding`` module
  (the angle ``p * w`` formed in float32, cos and sin of it);
* sinpe: ``sinpe.torch.RotaryEmbedding(config)``, the same frequencies with the
  angle in double and the values rounded once to float32: within half an ulp
  (``2**-25`` for values below 1, ``2**-24`` below 2: LongRoPE's and YaRN's
  factors are above 1).
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
from conftest import require, require_module

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", REPO / "docs" / "accuracy.md"]  # the README shows this table
POSITIONS = [2**17 - 1, 2**20 - 1]
HEADER = ("| rope type (model) | position | transformers' float32 module | "
          "`sinpe.torch.RotaryEmbedding` |\n|---|---|---|---|")


def models():
    """(rope type, the model its config follows, config): realistic configs."""
    tf = require("transformers")
    return [
        ("default", "Llama 2", tf.LlamaConfig(hidden_size=4096, num_attention_heads=32,
                                              max_position_embeddings=4096)),
        ("llama3", "Llama 3.1", tf.LlamaConfig(
            hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
            rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                             "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                             "original_max_position_embeddings": 8192})),
        ("yarn", "Qwen2.5", tf.Qwen2Config(
            hidden_size=5120, num_attention_heads=40, max_position_embeddings=131072,
            rope_parameters={"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 4.0,
                             "original_max_position_embeddings": 32768})),
        ("longrope", "Phi-3 128k", tf.Phi3Config(
            hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
            original_max_position_embeddings=4096, rope_parameters={
                "rope_type": "longrope", "rope_theta": 10000.0,
                "short_factor": [1.0 + 0.01 * k for k in range(48)],
                "long_factor": [1.0 + 1.25 * k for k in range(48)]})),
    ]


def hf_module(config):
    modeling = require_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    return next(v for k, v in vars(modeling).items() if k.endswith("RotaryEmbedding"))(config)


def exact(p: int, freq: np.ndarray, scaling: float) -> tuple[np.ndarray, np.ndarray]:
    import mpmath

    mpmath.mp.dps = 40
    s = mpmath.mpf(scaling)
    angles = [mpmath.mpf(p) * mpmath.mpf(float(w)) for w in freq]
    cos = np.array([float(s * mpmath.cos(a)) for a in angles])
    sin = np.array([float(s * mpmath.sin(a)) for a in angles])
    return np.concatenate([cos, cos]), np.concatenate([sin, sin])


@functools.cache
def errors() -> dict[tuple[str, int], dict[str, float]]:
    """{(rope type, p): {"hf": error, "sinpe": error}}: both positions in one call of
    each module (the sequence length of LongRoPE's switch: both are past it)."""
    torch = require("torch")
    import sinpe.torch as st

    found = {}
    x, position_ids = torch.zeros(1), torch.tensor([POSITIONS])
    for rope_type, _, config in models():
        hf = hf_module(config)
        results = {"hf": hf(x, position_ids),
                   "sinpe": st.RotaryEmbedding(config)(x, position_ids)}
        freq = hf.inv_freq.double().numpy()  # after longrope's switch
        for i, p in enumerate(POSITIONS):
            cos, sin = exact(p, freq, hf.attention_scaling)
            found[rope_type, p] = {
                name: max(float(np.max(np.abs(c[0, i].double().numpy() - cos))),
                          float(np.max(np.abs(s[0, i].double().numpy() - sin))))
                for name, (c, s) in results.items()}
    return found


def accuracy_table() -> str:
    lines = [HEADER]
    for rope_type, model, _ in models():
        for p in POSITIONS:
            e = errors()[rope_type, p]
            where = f"{p} = 2**{(p + 1).bit_length() - 1} - 1"
            lines.append(f"| {rope_type} ({model}) | {where} | {e['hf']:.1e} | {e['sinpe']:.1e} |")
    return "\n".join(lines)


def test_the_readme_and_the_accuracy_page_hold_the_computed_table(torch):
    table = accuracy_table()
    for document in DOCUMENTS:
        assert table in document.read_text(), (
            f"{document.relative_to(REPO)}'s table is stale; it should read:\n{table}")


def test_the_claims_of_the_table(torch):
    for e in errors().values():
        assert e["sinpe"] <= 2.0**-24  # half an ulp of float32 values below 2
        assert e["hf"] >= 100 * e["sinpe"]


if __name__ == "__main__":
    print(accuracy_table())
