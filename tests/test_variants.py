"""Every sinusoidal variant from sinpe's own kernel (docs/variants.md).

* ``EQUIVALENCES`` is the single source of docs/variants.md's "Equivalence table": each
  entry's call string is executed here and compared with the codebase's recipe
  (tests/reference/variants.py) within that recipe's own float32 rounding plus
  sinpe's rounding (the bounds derived in tests/test_variant_recipes.py), and with the
  float64 ``spec_*`` formula within the 2**-24 float32 promise.
  ``test_the_equivalence_table_is_this_list`` keeps the page in step;
  ``python tests/test_variants.py`` prints the table.
* Shards: rows computed alone (``offset``, ``encode_at`` subsets, any thread count)
  are bit-identical to the full table, for every variant (hypothesis, derandomized
  under CI like tests/test_properties.py).
* Bad input: every new argument, exact exception types, nothing written.
"""
from __future__ import annotations

import math
import os
import re
from pathlib import Path

import numpy as np
import pytest
import test_variant_recipes as R
from conftest import SINPE_VALUE_ERROR, U32, U64, assert_bits_equal, numpy_add, optional
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sinpe
from reference import variants as V

VARIANTS_PAGE = Path(__file__).resolve().parents[1] / "docs" / "variants.md"

# ---------------------------------------------------------------------------------------
# The equivalence table: (to get, call).  The call is evaluated with the names the
# matching test defines (d, N, L, M, ...).
# ---------------------------------------------------------------------------------------
EQUIVALENCES = [
    ("fairseq `get_embedding(N, d, padding_idx)`",
     'sinpe.encode_at(np.arange(N), d, layout="concatenated", schedule="fairseq", '
     'padding=np.arange(N) == padding_idx)'),
    ("fairseq `SinusoidalPositionalEmbedding(d, pad)(tokens)`",
     'sinpe.encode_at(pad + np.cumsum(m, 1) * m, d, layout="concatenated", '
     'schedule="fairseq", padding=~m)'),
    ("tensor2tensor `get_timing_signal_1d(L, C, 1.0, M, start_index=s)[0]`",
     'sinpe.encode(L, C, M, offset=s, layout="concatenated", schedule="fairseq")'),
    ("tensor2tensor with `min_timescale=a`",
     'sinpe.encode(L, C, offset=s, layout="concatenated", '
     'freq=a * (M / a) ** (-np.arange(C // 2) / max(C // 2 - 1, 1)))'),
    ("Whisper `sinusoids(L, C, M)`",
     'sinpe.encode(L, C, M, layout="concatenated", schedule="fairseq")'),
    ("Marian `MarianSinusoidalPositionalEmbedding(N, d).create_weight()`",
     'sinpe.encode(N, d, layout="concatenated")'),
    ("Marian `embed_positions((B, L), past_key_values_length=past)`",
     'sinpe.encode(L, d, offset=past, layout="concatenated")'),
    ("DistilBERT `create_sinusoidal_embeddings(N, d, out)`",
     'sinpe.encode(N, d, out=out.detach().numpy())'),
    ("keras-hub `SinePositionEncoding(M)(x, start_index=s)`",
     'sinpe.encode(L, d, M, offset=s)'),
    ("tatp22 `PositionalEncoding1D(ch)`",
     'sinpe.encode(X, ch, freq=10000.0 ** (-np.arange(0, c, 2) / c))'),
    ("tatp22 `PositionalEncoding2D(ch)`",
     'sinpe.encode_grid((X, Y), 2 * c, split=(c, c))[..., :ch]'),
    ("tatp22 `PositionalEncoding3D(ch)`",
     'sinpe.encode_grid((X, Y, Z), 3 * c, split=(c, c, c))[..., :ch]'),
    ("MAE `get_1d_sincos_pos_embed_from_grid(D, pos)`",
     'sinpe.encode_at(pos.reshape(-1), D, layout="concatenated", dtype=np.float64)'),
    ("MAE `get_2d_sincos_pos_embed(D, G)`",
     'sinpe.encode_grid((G, G), D, layout="concatenated", order=(1, 0), '
     'dtype=np.float64).reshape(G * G, D)'),
    ("MAE with `cls_token=True`",
     'sinpe.encode_grid((G, G), D, layout="concatenated", order=(1, 0), '
     'out=pe[1:].reshape(G, G, D))'),
    ("timm `build_sincos2d_pos_embed((H, W), dim, T)`",
     'sinpe.encode_grid((H, W), dim, T, layout="sines_first").reshape(H * W, dim)'),
    ("timm with `interleave_sin_cos=True`",
     'sinpe.encode_grid((H, W), dim, T, layout="concatenated").reshape(H * W, dim)'),
    ("timm with `reverse_coord=True`",
     'sinpe.encode_grid((W, H), dim, T, layout="sines_first").reshape(W * H, dim)'),
    ("x-transformers `ScaledSinusoidalEmbedding(dim, theta)(x, offset=o)` at initialisation",
     'sinpe.encode(L, dim, theta, offset=o, layout="concatenated") * dim ** -0.5'),
    ("HF Llama `rotary_emb(x, position_ids)`",
     '[torch.from_numpy(t).to(x.dtype) for t in '
     'sinpe.rope(None, head_dim, rope_theta, positions=position_ids)]'),
    ("HF GPT-J `embed_positions` buffer",
     'sinpe.encode(max_positions, rotary_dim, layout="concatenated")'),
    ("HF GPT-J `apply_rotary_pos_emb`'s `cos, sin`",
     'sinpe.rope(None, rotary_dim, positions=position_ids, layout="interleaved")'),
    ("rotary-embedding-torch `RotaryEmbedding(dim, theta)`, `offset`",
     'sinpe.rope(L, dim, theta, offset=offset, layout="interleaved")'),
    ("rotary-embedding-torch with `interpolate_factor=f`",
     'sinpe.rope(None, dim, theta, positions=(np.arange(L) + offset) / f, layout="interleaved")'),
    ("torchtune `RotaryPositionalEmbeddings(dim, max_seq_len, base).cache`",
     'sinpe.encode(max_seq_len, dim, base).reshape(max_seq_len, dim // 2, 2)[..., ::-1]'),
    ("torchtune `RotaryPositionalEmbeddings(dim, base=base)(x, input_pos=p)`'s `cos, sin`",
     'sinpe.rope(None, dim, base, positions=p, layout="interleaved")'),
]
CALLS = dict(EQUIVALENCES)


def run(label, **names):
    return eval(CALLS[label], {"sinpe": sinpe, "np": np, **names})  # noqa: S307


def markdown_table():
    rows = ["| to get | call |", "|---|---|"]
    rows += [f"| {label} | `{call}` |" for label, call in EQUIVALENCES]
    return "\n".join(rows)


def test_the_equivalence_table_is_this_list():
    text = VARIANTS_PAGE.read_text()
    section = re.split(r"^## (?:\d+\. )?Equivalence table$", text, maxsplit=1, flags=re.M)[1]
    section = section.split("\n## ", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| ") and "`" in line]
    found = []
    for line in rows:
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        found.append((cells[0], cells[1][1:-1]))
    assert found == EQUIVALENCES, "regenerate with: python tests/test_variants.py"


def test_every_equivalence_is_tested():
    source = Path(__file__).read_text()
    for label, _ in EQUIVALENCES:
        # once in EQUIVALENCES, once where a test runs it
        assert source.count(f'"{label}"') >= 2, label


# ---------------------------------------------------------------------------------------
# Bounds
# ---------------------------------------------------------------------------------------
def _spec_bound(positions, w):
    """The float32 promise against the float64 spec: 2**-24 plus the spec's own error."""
    pw = np.abs(np.asarray(positions, dtype=np.float64))[..., None] * w
    return U32 + pw * (np.abs(np.log(np.where(w > 0, w, 1.0))) + 3) * U64 + U64


def _sinpe_f64_bound(positions, w):
    """sinpe's double value (conftest.sinpe_double_bound's terms, any sign of p)."""
    pw = np.abs(np.asarray(positions, dtype=np.float64))[..., None] * w
    slack = 2 * 63 * w * U64
    return pw * (np.abs(np.log(w)) + 3) * U64 + slack + SINPE_VALUE_ERROR * U64


def _check(got, recipe, recipe_pair_bound, d, layout, spec, spec_pair_bound=None):
    """sinpe vs the recipe (recipe bound + sinpe's own float32 rounding) and vs the spec."""
    got = np.asarray(got, dtype=np.float64)
    bound = R._columns(recipe_pair_bound + U32, d, layout)
    R._assert_within(got, np.asarray(recipe, dtype=np.float64), bound)
    if spec is not None:
        R._assert_within(got, spec, R._columns(spec_pair_bound, d, layout))


# ---------------------------------------------------------------------------------------
# One test per row of the table
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [4, 5, 8, 64, 65, 512])
def test_fairseq_get_embedding(torch, d):
    N, padding_idx = 1024, 1
    got = run("fairseq `get_embedding(N, d, padding_idx)`", N=N, d=d, padding_idx=padding_idx)
    assert got.dtype == np.float32 and got.shape == (N, d)
    recipe = V.fairseq_get_embedding(N, d, padding_idx).numpy()
    w = V.spec_freq(d, schedule="fairseq")
    pos = np.arange(N)
    spec = V.spec_encode_at(pos, d, layout="concatenated", schedule="fairseq",
                            padding=pos == padding_idx)
    _check(got, recipe, R._pair_bound(pos, w, R.AB_EXP_TORCH), d, "concatenated", spec,
           _spec_bound(pos, w))
    assert np.all(got[padding_idx] == 0) and (d % 2 == 0 or np.all(got[:, -1] == 0))


def test_fairseq_forward(torch):
    pad, d = 1, 16
    tokens = torch.tensor([[5, 6, 7, 8, 9, pad, pad], [pad, pad, pad, 5, 6, 7, 8],
                           [5, pad, 6, pad, 7, 8, 9]])
    m = tokens.numpy() != pad
    got = run("fairseq `SinusoidalPositionalEmbedding(d, pad)(tokens)`", pad=pad, m=m, d=d)
    recipe = V.fairseq_forward(tokens, d, pad).numpy()
    positions = pad + np.cumsum(m, 1) * m
    w = V.spec_freq(d, schedule="fairseq")
    _check(got, recipe, R._pair_bound(positions, w, R.AB_EXP_TORCH), d, "concatenated", None)
    assert np.all(got[~m] == 0)
    # fairseq's embed_scale * tokens + positions, fused and with the pad rows zero
    x = np.ones(m.shape + (d,), np.float32)
    sinpe.add_(x, layout="concatenated", schedule="fairseq", positions=positions, padding=~m,
               scale=2.0)
    pe = sinpe.encode_at(positions, d, layout="concatenated", schedule="fairseq", padding=~m,
                         dtype=np.float32)
    assert_bits_equal(x, numpy_add(np.ones_like(x), pe, 2.0, ~m))


def test_fairseq_incremental_step_is_a_row_of_the_table():
    pad, d, t = 1, 32, 40
    table = sinpe.encode(100, d, layout="concatenated", schedule="fairseq")
    step = sinpe.encode(1, d, offset=pad + t + 1, layout="concatenated", schedule="fairseq")
    assert np.array_equal(step[0], table[pad + t + 1])


@pytest.mark.parametrize("C", [2, 3, 4, 5, 64, 65, 512])
@pytest.mark.parametrize("s", [0, 37])
def test_t2t(C, s):
    L, M = 1024, 1.0e4
    got = run("tensor2tensor `get_timing_signal_1d(L, C, 1.0, M, start_index=s)[0]`",
              L=L, C=C, M=M, s=s)
    recipe = V.t2t_get_timing_signal_1d(L, C, 1.0, M, start_index=s)[0]
    w = V.spec_freq(C, M, "fairseq")
    pos = np.arange(s, s + L)
    spec = V.spec_encode(L, C, M, offset=s, layout="concatenated", schedule="fairseq")
    _check(got, recipe, R._pair_bound(pos, w, R.AB_T2T), C, "concatenated", spec,
           _spec_bound(pos, w))


@pytest.mark.parametrize("C", [4, 5, 64])
def test_t2t_min_timescale(C):
    L, s, a, M = 1024, 5, 2.0, 5.0e3
    got = run("tensor2tensor with `min_timescale=a`", L=L, C=C, s=s, a=a, M=M)
    recipe = V.t2t_get_timing_signal_1d(L, C, a, M, start_index=s)[0]
    w = a * V.spec_freq(C, M / a, "fairseq")
    pos = np.arange(s, s + L)
    spec = V.spec_encode(L, C, offset=s, layout="concatenated", freq=w)
    _check(got, recipe, R._pair_bound(pos, w, R.AB_T2T, w0=a), C, "concatenated", spec,
           _spec_bound(pos, w))


@pytest.mark.parametrize("C", [4, 64, 384])
def test_whisper(torch, C):
    L, M = 1500, 10000
    got = run("Whisper `sinusoids(L, C, M)`", L=L, C=C, M=M)
    recipe = V.whisper_sinusoids(L, C, M).numpy()
    w = V.spec_freq(C, M, "fairseq")
    pos = np.arange(L)
    _check(got, recipe, R._pair_bound(pos, w, R.AB_EXP_TORCH), C, "concatenated",
           V.spec_encode(L, C, M, layout="concatenated", schedule="fairseq"), _spec_bound(pos, w))


@pytest.mark.parametrize("d", [4, 5, 63, 64])
def test_marian_and_distilbert(torch, d):
    N = 512
    weight = V.marian_create_weight(N, d)
    recipe = weight.numpy()
    w = V.spec_freq(d)
    pos = np.arange(N)
    got = run("Marian `MarianSinusoidalPositionalEmbedding(N, d).create_weight()`", N=N, d=d)
    _check(got, recipe, R._f64_pair_bound(pos, w), d, "concatenated",
           V.spec_encode(N, d, layout="concatenated"), _spec_bound(pos, w))
    for past, L in ((0, 40), (100, 12), (N - 1, 1)):  # a prompt, then decoding steps
        got = run("Marian `embed_positions((B, L), past_key_values_length=past)`", L=L, d=d,
                  past=past)
        step = V.marian_forward(weight, L, past_key_values_length=past).numpy()
        rows = pos[past:past + L]
        _check(got, step, R._f64_pair_bound(rows, w), d, "concatenated",
               V.spec_encode(L, d, offset=past, layout="concatenated"), _spec_bound(rows, w))
    out = torch.nn.Embedding(N, d).weight
    got = run("DistilBERT `create_sinusoidal_embeddings(N, d, out)`", N=N, d=d, out=out)
    assert np.shares_memory(got, out.detach().numpy())
    recipe = V.distilbert_create_sinusoidal_embeddings(N, d).numpy()
    _check(out.detach().numpy(), recipe, R._f64_pair_bound(pos, w), d, "interleaved",
           V.spec_encode(N, d), _spec_bound(pos, w))


@pytest.mark.parametrize("d", [4, 5, 64, 65])
@pytest.mark.parametrize("s", [0, 100])
def test_keras_hub(d, s):
    L, M = 1024, 10000
    got = run("keras-hub `SinePositionEncoding(M)(x, start_index=s)`", L=L, d=d, M=M, s=s)
    recipe = V.keras_hub_sine_position_encoding(L, d, M, start_index=s)
    w = V.spec_freq(d, M)
    pos = np.arange(s, s + L)
    _check(got, recipe, R._pair_bound(pos, w, R.AB_KERAS), d, "interleaved",
           V.spec_encode(L, d, M, offset=s), _spec_bound(pos, w))


@pytest.mark.parametrize("ch", R.TATP22_CHANNELS)
def test_tatp22_1d(torch, ch):
    X = 1024
    c = 2 * math.ceil(ch / 2)
    got = run("tatp22 `PositionalEncoding1D(ch)`", X=X, ch=ch, c=c)
    assert np.array_equal(got, sinpe.encode(X, c)[:, :ch])  # the same rows, bit for bit
    recipe = V.tatp22_positional_encoding_1d(X, ch).numpy()
    w = R._tatp22_pairs(c)
    pos = np.arange(X)
    bound = R._columns(R._pair_bound(pos, w, R.AB_POW) + U32, c, "interleaved")[:, :ch]
    R._assert_within(got, recipe, bound)


@pytest.mark.parametrize("ch", R.TATP22_CHANNELS)
def test_tatp22_2d_and_3d(torch, ch):
    for shape, recipe_fn, per, label in (
            ((40, 30), V.tatp22_positional_encoding_2d, 4, "tatp22 `PositionalEncoding2D(ch)`"),
            ((12, 10, 9), V.tatp22_positional_encoding_3d, 6, "tatp22 `PositionalEncoding3D(ch)`")):
        c = 2 * math.ceil(ch / per)
        got = run(label, ch=ch, c=c, **dict(zip("XYZ", shape)))
        recipe = recipe_fn(*shape, ch).numpy()
        pair = R._pair_bound(np.arange(max(shape)), R._tatp22_pairs(c), R.AB_POW) + U32
        bound = np.tile(R._columns(pair, c, "interleaved")[-1], len(shape))[:ch]
        R._assert_within(got, recipe, np.broadcast_to(bound, got.shape))
        want = V.spec_encode_grid(shape, len(shape) * c, split=(c,) * len(shape))[..., :ch]
        assert np.max(np.abs(got - want)) <= U32 + 1e-12


@pytest.mark.parametrize("D", [8, 64, 768])
def test_mae_1d(D):
    pos = np.arange(50, dtype=np.float32).reshape(5, 10)
    got = run("MAE `get_1d_sincos_pos_embed_from_grid(D, pos)`", D=D, pos=pos)
    assert got.dtype == np.float64
    recipe = V.mae_get_1d_sincos_pos_embed_from_grid(D, pos)
    w = V.spec_freq(D)
    p = pos.reshape(-1)
    bound = R._f64_pair_bound(p, w, rounded_to_f32=False) + _sinpe_f64_bound(p, w)
    R._assert_within(got, recipe, R._columns(bound, D, "concatenated"))


@pytest.mark.parametrize("D", [8, 64, 768])
@pytest.mark.parametrize("G", [14, 5])
def test_mae_2d_and_cls_token(D, G):
    got = run("MAE `get_2d_sincos_pos_embed(D, G)`", D=D, G=G)
    recipe = V.mae_get_2d_sincos_pos_embed(D, G)
    w = V.spec_freq(D // 2)
    p = np.arange(G)
    pair = R._f64_pair_bound(p, w, rounded_to_f32=False) + _sinpe_f64_bound(p, w)
    bound = np.tile(R._columns(pair, D // 2, "concatenated")[-1], 2)
    R._assert_within(got, recipe, np.broadcast_to(bound, got.shape))
    pe = np.zeros((1 + G * G, D))
    filled = run("MAE with `cls_token=True`", D=D, G=G, pe=pe)
    assert np.shares_memory(filled, pe) and np.all(pe[0] == 0)
    assert np.array_equal(pe[1:], got)


@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("rope_theta", [10000.0, 500000.0])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_llama_rope(torch, head_dim, rope_theta, dtype):
    position_ids = torch.stack([torch.arange(512), torch.arange(3000, 3512),
                                torch.cat([torch.arange(200), torch.arange(312)])])
    x = torch.zeros(3, 512, head_dim, dtype=getattr(torch, dtype))
    got = run("HF Llama `rotary_emb(x, position_ids)`", head_dim=head_dim,
              rope_theta=rope_theta, position_ids=position_ids, x=x, torch=torch)
    cos, sin = (t.double().numpy() for t in got)
    assert all(t.dtype == x.dtype for t in got)
    rcos, rsin = V.llama_rotary_cos_sin(position_ids, head_dim, rope_theta, dtype=x.dtype)
    bound = R._rope_bound(position_ids.numpy(), head_dim, rope_theta, "concatenated") + U32
    if dtype == "bfloat16":  # both round a float32 value to bfloat16: one ulp apart at most
        bound = bound + 2.0**-8
    R._assert_within(cos, rcos.double().numpy(), bound)
    R._assert_within(sin, rsin.double().numpy(), bound)
    if dtype == "bfloat16":
        return
    pid = position_ids.numpy()
    scos, ssin = V.spec_rope(pid, head_dim, rope_theta)
    w = np.tile(V.spec_freq(head_dim, rope_theta), 2)
    sb = U32 + np.abs(pid)[..., None] * w * (np.abs(np.log(w)) + 3) * U64 + U64
    R._assert_within(cos, scos, sb)
    R._assert_within(sin, ssin, sb)


@pytest.mark.parametrize("rotary_dim", [32, 64])
def test_gptj(torch, rotary_dim):
    max_positions = 2048
    table = run("HF GPT-J `embed_positions` buffer", max_positions=max_positions,
                rotary_dim=rotary_dim)
    recipe = V.gptj_create_sinusoidal_positions(max_positions, rotary_dim).numpy()
    w = V.spec_freq(rotary_dim)
    _check(table, recipe, R._pair_bound(np.arange(max_positions), w, R.AB_POW), rotary_dim,
           "concatenated", None)
    position_ids = np.stack([np.arange(1000), np.arange(1000, 2000)])
    cos, sin = run("HF GPT-J `apply_rotary_pos_emb`'s `cos, sin`", rotary_dim=rotary_dim,
                   position_ids=position_ids)
    rcos, rsin = V.gptj_rotary_cos_sin(torch.from_numpy(position_ids), rotary_dim, max_positions)
    bound = R._rope_bound(position_ids, rotary_dim, 10000.0, "interleaved") + U32
    R._assert_within(cos, rcos.numpy(), bound)
    R._assert_within(sin, rsin.numpy(), bound)
    # the cache is the stored table's columns, bit for bit
    half = rotary_dim // 2
    assert np.array_equal(cos[..., 0::2], table[position_ids][..., half:])
    assert np.array_equal(sin[..., 1::2], table[position_ids][..., :half])


@pytest.mark.parametrize("offset, f", [(0, 1.0), (777, 1.0), (0, 4.0), (3, 2.5)])
def test_rotary_embedding_torch(torch, offset, f):
    L, dim, theta = 1024, 64, 10000
    if f == 1.0:
        cos, sin = run("rotary-embedding-torch `RotaryEmbedding(dim, theta)`, `offset`",
                       L=L, dim=dim, theta=theta, offset=offset)
    else:
        cos, sin = run("rotary-embedding-torch with `interpolate_factor=f`", L=L, dim=dim,
                       theta=theta, offset=offset, f=f)
    rcos, rsin = V.rotary_embedding_torch_cos_sin(L, dim, theta, offset=offset,
                                                  interpolate_factor=f)
    pos = (np.arange(L) + offset) / f
    bound = R._rope_bound(pos, dim, float(theta), "interleaved") + U32
    R._assert_within(cos, rcos.numpy(), bound)
    R._assert_within(sin, rsin.numpy(), bound)
    scos, ssin = V.spec_rope(pos, dim, theta, layout="interleaved")
    w = np.repeat(V.spec_freq(dim, theta), 2)
    sb = U32 + np.abs(pos)[:, None] * w * (np.abs(np.log(w)) + 3) * U64 + U64
    R._assert_within(cos, scos, sb)
    R._assert_within(sin, ssin, sb)


@pytest.mark.parametrize("dim", [4, 64, 768])
@pytest.mark.parametrize("T", [10000.0, 100.0])
def test_timm_interleave_sin_cos(torch, dim, T):
    H, W = 7, 5
    got = run("timm with `interleave_sin_cos=True`", H=H, W=W, dim=dim, T=T)
    _check_timm(got, V.timm_build_sincos2d_pos_embed((H, W), dim, T, interleave_sin_cos=True),
                (H, W), dim, T, "concatenated")
    # with reverse_coord too: the same call on the reversed shape
    got = run("timm with `interleave_sin_cos=True`", H=W, W=H, dim=dim, T=T)
    recipe = V.timm_build_sincos2d_pos_embed((H, W), dim, T, reverse_coord=True,
                                             interleave_sin_cos=True)
    _check_timm(got, recipe, (W, H), dim, T, "concatenated")


@pytest.mark.parametrize("dim", [4, 64, 768])
def test_timm_default_layout_is_sines_first(torch, dim):
    H, W, T = 7, 5, 10000.0
    got = run("timm `build_sincos2d_pos_embed((H, W), dim, T)`", H=H, W=W, dim=dim, T=T)
    _check_timm(got, V.timm_build_sincos2d_pos_embed((H, W), dim, T), (H, W), dim, T,
                "sines_first")
    got = run("timm with `reverse_coord=True`", H=H, W=W, dim=dim, T=T)
    _check_timm(got, V.timm_build_sincos2d_pos_embed((H, W), dim, T, reverse_coord=True),
                (W, H), dim, T, "sines_first")
    # one axis: sines_first is the concatenated table
    assert np.array_equal(sinpe.encode_grid((9,), 12, layout="sines_first"),
                          sinpe.encode(9, 12, layout="concatenated"))


def _check_timm(got, recipe, shape, dim, T, layout):
    assert got.shape == (shape[0] * shape[1], dim) and got.dtype == np.float32
    w = V.spec_freq(dim // 2, T)
    pos = np.arange(max(shape))
    pair = R._pair_bound(pos, w, R.AB_POW)[-1] + U32
    R._assert_within(got, recipe.numpy(), np.broadcast_to(np.tile(pair, 4), got.shape))
    spec = V.spec_encode_grid(shape, dim, T, layout=layout).reshape(got.shape)
    R._assert_within(got, spec, np.broadcast_to(np.tile(_spec_bound(pos, w)[-1], 4), got.shape))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("dim", [2, 8, 64, 512])
@pytest.mark.parametrize("o", [0, 300])
@pytest.mark.needs("x-transformers")
def test_x_transformers(torch, dim, o):
    L, theta = 1024, 10000
    label = "x-transformers `ScaledSinusoidalEmbedding(dim, theta)(x, offset=o)` at initialisation"
    got = run(label, L=L, dim=dim, theta=theta, o=o)
    assert got.dtype == np.float32
    recipe = V.x_transformers_scaled_sinusoidal(L, dim, theta, offset=o)
    # the real module (tests/requirements-nodeps.txt) gives the recipe's bits
    from x_transformers.x_transformers import ScaledSinusoidalEmbedding

    assert torch.equal(ScaledSinusoidalEmbedding(dim, theta)(torch.zeros(1, L, dim), offset=o),
                       recipe)
    # both sides multiply a float32 table by the same float32 scale, each rounding once
    scale = float(np.float32(dim ** -0.5))
    pos = np.arange(o, o + L)
    w = V.spec_freq(dim, theta)
    pair = scale * (R._pair_bound(pos, w, R.AB_POW) + U32) + 2 * scale * U32
    R._assert_within(got, recipe.numpy(), R._columns(pair, dim, "concatenated"))


@pytest.mark.parametrize("dim", [8, 64, 128])
@pytest.mark.parametrize("base", [10_000, 500_000])
def test_torchtune_cache(torch, dim, base):
    max_seq_len = 4096
    got = run("torchtune `RotaryPositionalEmbeddings(dim, max_seq_len, base).cache`",
              max_seq_len=max_seq_len, dim=dim, base=base)
    recipe = V.torchtune_rope_cache(dim, max_seq_len, base).numpy()
    assert got.shape == recipe.shape == (max_seq_len, dim // 2, 2)
    pair = R._pair_bound(np.arange(max_seq_len), V.spec_freq(dim, base), R.AB_POW) + U32
    R._assert_within(got, recipe, np.repeat(pair[..., None], 2, -1))


def test_torchtune_forward(torch):
    dim, base, heads = 64, 10_000, 2
    p = np.array([np.arange(100), np.arange(2000, 2100)])
    label = "torchtune `RotaryPositionalEmbeddings(dim, base=base)(x, input_pos=p)`'s `cos, sin`"
    cos, sin = run(label, dim=dim, base=base, p=p)
    cache = V.torchtune_rope_cache(dim, 4096, base)
    x = torch.randn(2, 100, heads, dim, generator=torch.Generator().manual_seed(1))
    want = V.torchtune_rope_forward(x, cache, torch.from_numpy(p))
    # GPT-J's rotate_every_two with sinpe's cos and sin rotates the same pairs
    rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)
    got = x * torch.from_numpy(cos)[:, :, None] + rotated * torch.from_numpy(sin)[:, :, None]
    # |x| times the cos/sin bound on each of two products, plus three float32 roundings
    pair = R._rope_bound(p, dim, float(base), "interleaved") + U32
    size = x.abs().amax(-1, keepdim=True).numpy()
    bound = 2 * size * pair[:, :, None] + 3 * U32 * 2 * size
    R._assert_within(got.numpy(), want.numpy(), np.broadcast_to(bound, want.shape))


# ---------------------------------------------------------------------------------------
# Structure: layouts, schedules, freq=, dtypes, strides, add_
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 7, 64, 65])
@pytest.mark.parametrize("schedule", ["paper", "fairseq"])
@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
def test_every_variant_is_the_spec_within_the_promise(d, schedule, layout):
    pos = np.concatenate([np.arange(-40, 60), [sinpe.MAX_POSITION, -sinpe.MAX_POSITION, 12345]])
    got = sinpe.encode_at(pos, d, 500.0, layout=layout, schedule=schedule)
    want = V.spec_encode_at(pos, d, 500.0, layout=layout, schedule=schedule)
    w = V.spec_freq(d, 500.0, schedule)
    bound = R._columns(_spec_bound(pos, w), d, layout) if w.size else np.zeros(want.shape)
    R._assert_within(got, want, np.maximum(bound, U32 if w.size == 0 else 0))
    if w.size == 0:
        assert np.all(got == 0)
    # the same rows from encode and from freq=, bit for bit
    assert np.array_equal(sinpe.encode(100, d, 500.0, offset=-40, layout=layout,
                                       schedule=schedule), got[:100])
    # (sinpe's own correctly rounded frequencies: a platform's pow, Python's or
    # NumPy's, may differ in the last bit)
    w_c = sinpe._core._frequencies(500.0, d, schedule)
    assert np.array_equal(sinpe.encode_at(pos, d, layout=layout, freq=w_c), got)
    # float64: the double values, within sinpe's double bound of the spec
    got64 = sinpe.encode_at(pos, d, 500.0, layout=layout, schedule=schedule, dtype=np.float64)
    if w.size:
        R._assert_within(got64, want, R._columns(_sinpe_f64_bound(pos, w) + 2 * U64 +
                                                 np.abs(pos)[:, None] * w *
                                                 (np.abs(np.log(w)) + 3) * U64, d, layout))
        assert np.array_equal(got64.astype(np.float32), got)


def test_default_variant_is_the_fast_path_bit_for_bit():
    for d in (1, 7, 64, 1030):
        table = sinpe.encode(300, d, offset=-100)
        assert np.array_equal(sinpe.encode_at(np.arange(-100, 200), d), table)
        w = sinpe._core._frequencies(10000.0, d)  # correctly rounded, not the platform's pow
        assert np.array_equal(sinpe.encode(300, d, offset=-100, freq=w), table)
        # concatenated is a column permutation of interleaved, bit for bit
        concat = sinpe.encode(300, d, offset=-100, layout="concatenated")
        perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
        assert np.array_equal(concat, table[:, perm])


def test_wide_tables_use_frequency_tiles():
    d = 2 * 2048 + 6  # wide: step rows built per tile
    pos = np.array([-33, 0, 5, 31, 32, 1000])
    got = sinpe.encode_at(pos, d, layout="concatenated", schedule="fairseq")
    want = V.spec_encode_at(pos, d, layout="concatenated", schedule="fairseq")
    assert np.max(np.abs(got - want)) <= 2 * U32
    assert np.array_equal(got[2:4], sinpe.encode(27, d, offset=5, layout="concatenated",
                                                 schedule="fairseq")[[0, 26]])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", ">f4", ">f8", ">f2"])
def test_dtypes_byte_order_and_strides_round_the_double_once(dtype):
    d = 12
    ref = sinpe.encode_at(np.arange(-5, 40), d, layout="concatenated", schedule="fairseq",
                          dtype=np.float64)
    base = np.zeros((45, 2 * d + 3), dtype=dtype)
    view = base[::-1, 1:2 * d + 1:2]
    out = sinpe.encode_at(np.arange(-5, 40)[::-1], d, layout="concatenated",
                          schedule="fairseq", out=view)
    assert out is view
    assert np.array_equal(view[::-1], ref.astype(dtype))
    assert np.all(base[:, 0] == 0) and np.all(base[:, 2::2] == 0)
    cos, sin = sinpe.rope(None, d, positions=np.arange(9), dtype=dtype)
    c64, s64 = sinpe.rope(9, d, dtype=np.float64)
    assert np.array_equal(cos, c64.astype(dtype)) and np.array_equal(sin, s64.astype(dtype))


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_add_with_variants_is_numpy_arithmetic(layout, dtype):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 50, 9)).astype(dtype)
    before = x.copy()
    sinpe.add_(x, offset=7, layout=layout, schedule="fairseq", scale=1.5)
    pe = sinpe.encode(50, 9, offset=7, layout=layout, schedule="fairseq", dtype=dtype)
    assert_bits_equal(x, numpy_add(before, pe, 1.5))
    # seq-first with per-token positions (packed documents, negative, left padding)
    y = rng.standard_normal((6, 2, 9)).astype(dtype)
    before = y.copy()
    positions = np.array([[0, -3], [1, -2], [2, -1], [0, 0], [1, 1], [2, 2]])
    padding = positions < 0
    sinpe.add_(y, layout=layout, positions=positions, padding=padding)
    pe = sinpe.encode_at(positions, 9, layout=layout, padding=padding, dtype=dtype)
    assert_bits_equal(y, numpy_add(before, pe, 1.0, padding))


def test_float_positions():
    p = np.array([0.0, 1.0, 2.5, -3.25, 7.0, 1e6 + 0.5])
    got = sinpe.encode_at(p, 16, dtype=np.float64)
    want = V.spec_encode_at(p, 16)
    assert np.max(np.abs(got - want)) < 1e-9
    # integral floats are the integer rows, bit for bit
    assert np.array_equal(got[[0, 1, 4]], sinpe.encode_at([0, 1, 7], 16, dtype=np.float64))
    assert np.array_equal(sinpe.encode_at(np.arange(10, dtype=np.float16), 8), sinpe.encode(10, 8))


def test_grid_chunks_are_one_d_tables_in_order():
    g = sinpe.encode_grid((3, 4, 5), 20, split=(4, 6, 10), order=(2, 0, 1), layout="concatenated")
    assert g.shape == (3, 4, 5, 20)
    assert np.array_equal(g[1, 2, :, :10], sinpe.encode(5, 10, layout="concatenated"))
    assert np.array_equal(g[:, 3, 4, 10:14], sinpe.encode(3, 4, layout="concatenated"))
    assert np.array_equal(g[2, :, 0, 14:], sinpe.encode(4, 6, layout="concatenated"))
    assert sinpe.encode_grid((0, 3), 4).shape == (0, 3, 4)


def test_empty_and_scalar_positions():
    assert sinpe.encode_at(np.zeros((0, 3), np.int64), 4).shape == (0, 3, 4)
    assert np.array_equal(sinpe.encode_at(5, 6), sinpe.encode(6, 6)[5])
    cos, sin = sinpe.rope(0, 4)
    assert cos.shape == sin.shape == (0, 4)


def test_rope_out_pair_is_filled_and_returned():
    cos_out = np.full((10, 8), np.nan)
    sin_out = np.full((10, 8), np.nan, dtype=np.float32)[:, ::-1]
    cos, sin = sinpe.rope(10, 8, 500.0, offset=-3, out=(cos_out, sin_out))
    assert cos is cos_out and sin is sin_out
    c64, s64 = V.spec_rope(np.arange(-3, 7), 8, 500.0)
    assert np.max(np.abs(cos - c64)) < 1e-15 * 40 and np.max(np.abs(sin - s64)) <= U32


# ---------------------------------------------------------------------------------------
# Shards: rows computed alone are the rows of the full table, bit for bit
# ---------------------------------------------------------------------------------------
_PROFILE = "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"
SHARDS = settings(max_examples=int(os.environ.get("SINPE_VARIANT_EXAMPLES", 40)),
                  derandomize=_PROFILE == "ci" or os.environ.get("SINPE_HYPOTHESIS") == "quick",
                  database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])

variants = st.fixed_dictionaries({
    "layout": st.sampled_from(["interleaved", "concatenated"]),
    "schedule": st.sampled_from(["paper", "fairseq", None]),
    "d": st.integers(1, 80),
    "n": st.sampled_from([10000.0, 2.0, 5e5]),
})


def _kw(v):
    kw = {"layout": v["layout"]}
    if v["schedule"] is None:  # an explicit freq: NTK-like scaled paper frequencies
        kw["freq"] = V.spec_freq(v["d"], v["n"]) * 0.75
    else:
        kw["schedule"], kw["n"] = v["schedule"], v["n"]
    return kw


@SHARDS
@given(v=variants, start=st.integers(-300, 300), data=st.data())
def test_shards_are_bit_identical(v, start, data):
    d, kw = v["d"], _kw(v)
    L = 700
    full = sinpe.encode(L, d, offset=start, **kw)
    lo = data.draw(st.integers(0, L - 1))
    hi = data.draw(st.integers(lo, L))
    assert np.array_equal(sinpe.encode(hi - lo, d, offset=start + lo, **kw), full[lo:hi])
    idx = np.array(data.draw(st.lists(st.integers(0, L - 1), max_size=40)), dtype=np.int64)
    assert np.array_equal(sinpe.encode_at(start + idx, d, **kw), full[idx])
    threads = data.draw(st.integers(1, 4))
    old = sinpe.get_num_threads()
    try:
        sinpe.set_num_threads(threads)
        big = sinpe.encode(4096, d, offset=start, dtype=np.float64, **kw)  # threaded when large
        assert np.array_equal(big[:L].astype(np.float32), full)
        at = sinpe.encode_at(np.arange(start, start + 4096).reshape(64, 64), d, **kw)
        assert np.array_equal(at.reshape(4096, d)[:L], full)
        if "freq" not in kw and d % 2 == 0 and v["layout"] == "concatenated":
            cos, sin = sinpe.rope(4096, d, kw["n"] if v["schedule"] == "paper" else 10000.0,
                                  offset=start)
            part = sinpe.rope(None, d, kw["n"] if v["schedule"] == "paper" else 10000.0,
                              positions=start + idx)
            assert np.array_equal(part[0], cos[idx]) and np.array_equal(part[1], sin[idx])
    finally:
        sinpe.set_num_threads(old)


# bfloat16 is NumPy's only through ml_dtypes: left out only where SINPE_TEST_WITHOUT names it
ml_dtypes = optional("ml_dtypes")
ADD_DTYPES = ["float32", "float64", "float16", ">f4", "<f8", ">f2"] + (["bfloat16"] if ml_dtypes else [])


@SHARDS
@given(v=variants, data=st.data())
def test_add_is_numpy_x_times_scale_plus_the_table(v, data):
    """Every add_ route (positions along an axis or per token; positions that
    repeat across sequences, distinct ones, non-integral ones; padding;
    batch-first or seq-first; any dtype, byte order, stride, scale, thread
    count) leaves x bit-identical to NumPy's x * x.dtype.type(scale) + T, T
    the table encode / encode_at gives in x's dtype; padding rows x * scale."""
    d, kw = v["d"], _kw(v)
    B, L = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 70))
    seq_first = data.draw(st.booleans())
    name = data.draw(st.sampled_from(ADD_DTYPES))
    dtype = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
    scale = data.draw(st.sampled_from([1.0, 0.5, 3.0, -2.0, 0.1, float(np.sqrt(d))]))
    kind = data.draw(st.sampled_from(["range", "repeating", "distinct", "padded", "fractional"]))
    strided = data.draw(st.booleans())
    threads = data.draw(st.integers(1, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    shape = (L, B, d) if seq_first else (B, L, d)
    base = (rng.standard_normal(shape[:2] + (2 * d,)) * 3).astype(dtype)
    x = base[..., ::2] if strided else base[..., :d]
    before = x.copy()
    padding = None
    old = sinpe.get_num_threads()
    try:
        sinpe.set_num_threads(threads)
        if kind == "range":
            offset = data.draw(st.integers(-100, 100))
            sinpe.add_(x, axis=0 if seq_first else 1, offset=offset, scale=scale, **kw)
            pe = sinpe.encode(L, d, offset=offset, dtype=dtype, **kw)
            pe = pe[:, None, :] if seq_first else pe[None, :, :]
        else:
            if kind == "distinct":
                positions = rng.integers(-3000, 3000, (B, L))
            elif kind == "fractional":  # interpolated positions, some integral
                positions = np.round(rng.uniform(-40, 40, (B, L)) * 4) / 4
            else:  # left-padded sequences: the same positions shifted per sequence
                positions = np.arange(L)[None, :] - rng.integers(0, 5, (B, 1))
            padding = positions < 0 if kind == "padded" else None
            if seq_first:
                positions = positions.T
                padding = None if padding is None else padding.T
            sinpe.add_(x, positions=positions, padding=padding, scale=scale, **kw)
            pe = sinpe.encode_at(positions, d, padding=padding, dtype=dtype, **kw)
    finally:
        sinpe.set_num_threads(old)
    assert_bits_equal(x, numpy_add(before, pe, scale, padding), f"{kind} {name}")


def test_add_of_a_wide_table_in_place_and_from_rows_made_once():
    d = 2 * 2048 + 6  # wide: frequency tiles, step rows built per tile
    rng = np.random.default_rng(1)
    for positions in (np.tile(np.arange(-3, 37), (4, 1)),    # repeating: one range per window
                      rng.integers(-5000, 5000, (4, 40))):   # distinct: a row each
        x = rng.standard_normal((4, 40, d)).astype(np.float32)
        before = x.copy()
        sinpe.add_(x, positions=positions, layout="concatenated", schedule="fairseq")
        pe = sinpe.encode_at(positions, d, layout="concatenated", schedule="fairseq",
                             dtype=np.float32)
        assert_bits_equal(x, numpy_add(before, pe))


@SHARDS
@given(v=variants, shape=st.lists(st.integers(1, 9), min_size=1, max_size=3))
def test_grid_chunks_are_shards(v, shape):
    r = len(shape)
    d = r * max(1, v["d"] // r)
    kw = {"layout": v["layout"], "schedule": v["schedule"] or "paper", "n": v["n"]}
    g = sinpe.encode_grid(shape, d, **kw)
    c = d // r
    for a in range(r):
        line = sinpe.encode(shape[a], c, **kw)
        index = [0] * r
        index[a] = slice(None)
        assert np.array_equal(g[tuple(index)][:, a * c:(a + 1) * c], line)


# ---------------------------------------------------------------------------------------
# Bad input: the exact exception, nothing written
# ---------------------------------------------------------------------------------------
BAD = [
    (lambda o: sinpe.encode(4, 8, layout="half", out=o), ValueError, "layout"),
    (lambda o: sinpe.encode(4, 8, layout=1, out=o), TypeError, "layout"),
    (lambda o: sinpe.encode(4, 8, schedule="t2t", out=o), ValueError, "schedule"),
    (lambda o: sinpe.encode(4, 8, freq=[1.0, 0.1, 0.01], out=o), ValueError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=np.ones((2, 2)), out=o), ValueError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=[1, 0.1, np.nan, 0.0], out=o), ValueError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=[1, -0.1, 0.0, 0.0], out=o), ValueError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=[1 + 1j] * 4, out=o), TypeError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=["a"] * 4, out=o), TypeError, "freq"),
    (lambda o: sinpe.encode(4, 8, offset=2**24 - 3, freq=[5.0] * 4, out=o), ValueError,
     "angle"),
    (lambda o: sinpe.encode(4, 8, freq=[1.0] * 4, schedule="paper", out=o), ValueError,
     "exclusive"),
    (lambda o: sinpe.encode(4, 8, 100.0, freq=[1.0] * 4, out=o), ValueError, "exclusive"),
    (lambda o: sinpe.encode_at([1.5, 2], 8, out=o[:2]), None, None),  # a good call: sanity
    (lambda o: sinpe.encode_at([[1, 2]], 8, out=o[:2]), ValueError, "shape"),
    (lambda o: sinpe.encode_at([True, False], 8, out=o[:2]), TypeError, "positions"),
    (lambda o: sinpe.encode_at(["1", "2"], 8, out=o[:2]), TypeError, "positions"),
    (lambda o: sinpe.encode_at([1j, 2], 8, out=o[:2]), TypeError, "positions"),
    (lambda o: sinpe.encode_at([0, 2**24 + 1], 8, out=o[:2]), ValueError, "positions"),
    (lambda o: sinpe.encode_at(np.array([0, 2**63], np.uint64), 8, out=o[:2]), ValueError,
     "positions"),
    (lambda o: sinpe.encode_at([0.0, np.inf], 8, out=o[:2]), ValueError, "positions"),
    (lambda o: sinpe.encode_at([0.0, np.nan], 8, out=o[:2]), ValueError, "positions"),
    (lambda o: sinpe.encode_at([0, 1], 8, padding=[0, 1], out=o[:2]), TypeError, "padding"),
    (lambda o: sinpe.encode_at([0, 1], 8, padding=[True], out=o[:2]), ValueError, "padding"),
    (lambda o: sinpe.rope(2, 8, out=(o[:2], o[2:])), None, None),
    (lambda o: sinpe.rope(2, 7, out=(o[:2, :7], o[2:, :7])), ValueError, "even"),
    (lambda o: sinpe.rope(2, 8, out=o), TypeError, "tuple"),
    (lambda o: sinpe.rope(2, 8, out=(o[:2], o[:2])), ValueError, "share memory"),
    (lambda o: sinpe.rope(2, 8, out=(o[:2], o[1:3])), ValueError, "share memory"),
    (lambda o: sinpe.rope(2, 8, positions=[1, 2], out=(o[:2], o[2:])), ValueError, "None"),
    (lambda o: sinpe.rope(None, 8, offset=1, positions=[1, 2], out=(o[:2], o[2:])),
     ValueError, "exclusive"),
    (lambda o: sinpe.rope(None, 8, out=(o[:2], o[2:])), ValueError, "positions"),
    (lambda o: sinpe.rope(2, 8, layout="half", out=(o[:2], o[2:])), ValueError, "layout"),
    (lambda o: sinpe.rope(2, 8, freq=[1.0] * 3, out=(o[:2], o[2:])), ValueError, "freq"),
    (lambda o: sinpe.encode_grid((2, 2), 8, out=o.reshape(2, 2, 8)), None, None),
    (lambda o: sinpe.encode_grid((2, 2), 8, split=(3, 3), out=o.reshape(2, 2, 8)), ValueError,
     "split"),
    (lambda o: sinpe.encode_grid((2, 2), 8, split=(8, 0), out=o.reshape(2, 2, 8)), ValueError,
     "split"),
    (lambda o: sinpe.encode_grid((2, 2), 8, split=(8,), out=o.reshape(2, 2, 8)), ValueError,
     "split"),
    (lambda o: sinpe.encode_grid((2, 2), 8, order=(0, 0), out=o.reshape(2, 2, 8)), ValueError,
     "order"),
    (lambda o: sinpe.encode_grid((2, 2), 8, order=(0, 2), out=o.reshape(2, 2, 8)), ValueError,
     "order"),
    (lambda o: sinpe.encode_grid((2, 2), 7, out=o.reshape(2, 2, 8)[..., :7]), ValueError,
     "split"),
    (lambda o: sinpe.encode_grid((2, -2), 8, out=o.reshape(2, 2, 8)), ValueError, "shape"),
    (lambda o: sinpe.encode_grid(4, 8, out=o.reshape(4, 8)), TypeError, "shape"),
    (lambda o: sinpe.encode_grid((2.0, 2), 8, out=o.reshape(2, 2, 8)), TypeError, "shape"),
    (lambda o: sinpe.encode_grid((), 8), ValueError, "shape"),
    (lambda o: sinpe.encode_grid((2, 2), 8, out=o.reshape(4, 8)), ValueError, "shape"),
    (lambda o: sinpe.add_(o, layout="x"), ValueError, "layout"),
    (lambda o: sinpe.add_(o, positions=np.arange(3)), ValueError, "positions"),
    (lambda o: sinpe.add_(o, positions=np.arange(4), offset=1), ValueError, "exclusive"),
    (lambda o: sinpe.add_(o, positions=np.arange(4.0) + 0.5, padding=np.ones(3, bool)),
     ValueError, "padding"),
    (lambda o: sinpe.add_(o, padding=np.ones(4, np.int8)), TypeError, "padding"),
    (lambda o: sinpe.add_(o, positions=[0, 1, 2, 2**25]), ValueError, "positions"),
    (lambda o: sinpe.add_(o, freq=[1e9] * 4), ValueError, "angle"),
    (lambda o: sinpe.add_(o, schedule="fairseq", scale=np.inf), ValueError, "scale"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_input_raises_and_writes_nothing(case):
    call, error, words = BAD[case]
    o = np.full((4, 8), 7.0, dtype=np.float32)
    if error is None:
        call(o)
        assert not np.all(o == 7.0)
        return
    with pytest.raises(error, match=words):
        call(o)
    assert np.all(o == 7.0)


def test_bad_input_on_fresh_arrays_raises_before_allocating():
    with pytest.raises(OverflowError):
        sinpe.encode_at(np.zeros(2**20), 2**62, layout="concatenated")
    with pytest.raises(OverflowError):
        sinpe.encode_grid((2**24, 2**24, 2**24), 2**30, split=(2**29, 2**28, 2**28))
    with pytest.raises(TypeError, match="dtype"):
        sinpe.encode_at([1], 4, dtype=np.int32)
    with pytest.raises(TypeError, match="dtype"):
        sinpe.rope(1, 4, out=(np.zeros((1, 4)), np.zeros((1, 4))), dtype=np.float32)
    with pytest.raises(ValueError, match="read-only"):
        a = np.zeros((2, 4))
        a.flags.writeable = False
        sinpe.encode_grid((2,), 4, out=a)


if __name__ == "__main__":
    print(markdown_table())


@pytest.mark.parametrize("shape", [(1, 5), (33, 3), (5, 1, 14, 47), (1, 200)])
def test_grid_axis_with_a_lone_row_in_a_block_repeats_its_own_row(shape):
    """A position alone in its 32-row block with many copies after it (an axis
    of length 1, or 33) is made once and copied to every copy."""
    d = 8 * len(shape)
    g = sinpe.encode_grid(shape, d, dtype=np.float64)
    c = d // len(shape)
    for a in range(len(shape)):
        line = sinpe.encode(shape[a], c, dtype=np.float64)
        moved = np.moveaxis(g[..., a * c:(a + 1) * c], a, 0)
        assert np.array_equal(moved, np.broadcast_to(line.reshape((shape[a],) + (1,) * (len(shape) - 1) + (c,)), moved.shape))


# Grids of several bands (a band holds about 256 KB of rows): rows assembled
# from per-group tiles (plain rows) and rows written group by group (swapped
# bytes, strided columns) are each axis's own table, bit for bit, on any
# number of threads.
GRID_CASES = [((3, 40, 70), 96, "interleaved"),         # bands: spans of axis 1
              ((2, 5, 33, 17), 100, "concatenated"),    # odd column counts per group
              ((12, 30), 2 * 2048 + 8, "interleaved"),  # groups of more than one frequency tile
              ((7, 900), 64, "sines_first")]


def _grid_from_axes(shape, d, dtype, layout):
    """Each axis's own encode, put where the grid's columns for it go."""
    r = len(shape)
    want = np.empty(tuple(shape) + (d,), dtype)
    c = d // r
    for a in range(r):
        flat = "interleaved" if layout == "interleaved" else "concatenated"
        line = sinpe.encode(shape[a], c, dtype=dtype, layout=flat)
        line = line.reshape(tuple(shape[k] if k == a else 1 for k in range(r)) + (c,))
        if layout == "sines_first":  # every axis's sines first, then every axis's cosines
            h = c // 2
            want[..., a * h:(a + 1) * h] = line[..., :h]
            want[..., d // 2 + a * h:d // 2 + (a + 1) * h] = line[..., h:]
        else:
            want[..., a * c:(a + 1) * c] = line
    return want


@pytest.mark.parametrize("shape, d, layout", GRID_CASES)
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, ml_dtypes.bfloat16 if ml_dtypes else
               pytest.param(None, marks=pytest.mark.needs("ml_dtypes"), id="bfloat16")]
)
def test_grid_of_many_bands_is_each_axis_table_on_every_path(shape, d, layout, dtype):
    want = _grid_from_axes(shape, d, dtype, layout)
    before = sinpe.get_num_threads()
    try:
        for threads in (1, 2):
            sinpe.set_num_threads(threads)
            assert_bits_equal(sinpe.encode_grid(shape, d, dtype=dtype, layout=layout), want,
                              f"new array, {threads} threads")
            swapped = np.empty(want.shape, np.dtype(dtype).newbyteorder())
            sinpe.encode_grid(shape, d, layout=layout, out=swapped)
            assert_bits_equal(swapped.astype(dtype), want, f"swapped bytes, {threads} threads")
            wide = np.zeros(tuple(shape) + (2 * d,), dtype)
            sinpe.encode_grid(shape, d, layout=layout, out=wide[..., ::2])
            assert_bits_equal(wide[..., ::2], want, f"strided columns, {threads} threads")
            assert not wide[..., 1::2].any()
    finally:
        sinpe.set_num_threads(before)
