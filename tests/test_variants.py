"""Every sinusoidal variant from sinpe's own kernel (docs/variants.md).

* ``EQUIVALENCES`` is the single source of docs/variants.md's "Equivalence table": each
  entry's call string is executed here and compared with the codebase's recipe
  (tests/reference/variants.py) within that recipe's own float32 rounding plus
  sinpe's rounding (the bounds derived in tests/test_variant_recipes.py), and with the
  float64 ``spec_*`` formula within the 2**-24 float32 promise.
  ``test_the_equivalence_table_is_this_list`` keeps the page in step;
  ``python tests/test_variants.py`` prints the table.
* Structure: layouts, schedules, ``freq=``, dtypes, strides and ``add_`` against the
  formula.  Shards, grids and bad input: tests/test_variant_shards.py.
"""
from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
import test_variant_recipes as R
from conftest import SINPE_VALUE_ERROR, U32, U64, assert_bits_equal, numpy_add

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


if __name__ == "__main__":
    print(markdown_table())
