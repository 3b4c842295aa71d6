"""The accuracy table of rotary embeddings (docs/accuracy.md), computed (not typed).

``python tests/test_rope_accuracy.py`` prints it; the test checks that docs/accuracy.md
holds exactly that table, and the claims the page makes of it.

Each row rotates one float32 query, 8 heads of 128 features drawn from a
standard normal (seed 0), at one position p with base theta, and reports the
largest absolute error against the exact rotation: mpmath at 40 digits, angle
``p * theta**(-2k/128)`` with the exact frequency, rotating x's float32 values.
The columns:

* HF's float32 recipe: transformers' own ``LlamaRotaryEmbedding`` (inv_freq and
  angles in float32, cos/sin of them) and ``apply_rotary_pos_emb``, float32;
* sinpe default: ``sinpe.rope_(q)``, which is HF's formula with sinpe's exact
  caches rounded once to float32;
* sinpe exact: ``sinpe.rope_(q, exact=True)``, the rotation in double rounded
  once: at most half an ulp of the result (values of magnitude below 8 here:
  ``2**-22``, 2.4e-7).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from conftest import require_module

import sinpe

ACCURACY_PAGE = Path(__file__).resolve().parents[1] / "docs" / "accuracy.md"
HEADS, D = 8, 128
ROWS = [(8191, 10000.0), (2**20, 500000.0)]
HEADER = ("| position, theta | HF's float32 recipe | sinpe default | sinpe `exact=True` |\n"
          "|---|---|---|---|")


def query() -> np.ndarray:
    return np.random.default_rng(0).standard_normal((1, HEADS, 1, D)).astype(np.float32)


def exact_rotation(q: np.ndarray, p: int, theta: float) -> np.ndarray:
    import mpmath

    mpmath.mp.dps = 40
    half = D // 2
    out = np.empty(q.shape, np.float64)
    for k in range(half):
        angle = mpmath.mpf(p) * mpmath.power(mpmath.mpf(theta), mpmath.mpf(-2 * k) / D)
        c, s = mpmath.cos(angle), mpmath.sin(angle)
        for h in range(HEADS):
            a, b = mpmath.mpf(float(q[0, h, 0, k])), mpmath.mpf(float(q[0, h, 0, k + half]))
            out[0, h, 0, k] = float(a * c - b * s)
            out[0, h, 0, k + half] = float(b * c + a * s)
    return out


def hf_float32(q: np.ndarray, p: int, theta: float) -> np.ndarray:
    torch = require_module("torch")

    llama = require_module("transformers.models.llama.modeling_llama")
    LlamaConfig = require_module("transformers").LlamaConfig

    config = LlamaConfig(hidden_size=HEADS * D, num_attention_heads=HEADS,
                         max_position_embeddings=p + 1, rope_theta=theta)
    rotary = llama.LlamaRotaryEmbedding(config)
    t = torch.from_numpy(q)
    cos, sin = rotary(t, torch.tensor([[p]]))
    rotated, _ = llama.apply_rotary_pos_emb(t, t, cos, sin)
    return rotated.numpy()


def errors(p: int, theta: float) -> dict[str, float]:
    q = query()
    exact = exact_rotation(q, p, theta)
    results = {
        "hf": hf_float32(q, p, theta),
        "default": sinpe.rope_(q.copy(), theta, offset=p),
        "exact": sinpe.rope_(q.copy(), theta, offset=p, exact=True),
    }
    return {name: float(np.max(np.abs(got.astype(np.float64) - exact)))
            for name, got in results.items()}


def accuracy_table() -> str:
    lines = [HEADER]
    for p, theta in ROWS:
        e = errors(p, theta)
        where = f"{p} = 2**20" if p == 2**20 else f"{p}"
        lines.append(f"| {where}, {theta:g} | {e['hf']:.1e} | {e['default']:.1e} "
                     f"| {e['exact']:.1e} |")
    return "\n".join(lines)


def test_the_accuracy_page_holds_the_computed_table(torch):
    table = accuracy_table()
    assert table in ACCURACY_PAGE.read_text(), (
        f"docs/accuracy.md's table is stale; it should read:\n{table}")


def test_the_claims_of_the_table(torch):
    for p, theta in ROWS:
        e = errors(p, theta)
        assert e["exact"] <= 2.0**-22  # half an ulp of values below 8
        assert e["default"] <= 4 * 2.0**-22  # the formula's own roundings: a few ulps
        assert e["hf"] > 100 * e["default"]


if __name__ == "__main__":
    print(accuracy_table())
