"""The codebase recipes of tests/reference/variants.py against docs/variants.md's formula.

These tests pin down the math that sinpe's variant API reproduces, without calling
sinpe: every recipe (fairseq, tensor2tensor, Whisper, Marian, DistilBERT, keras-hub,
tatp22 1-D/2-D/3-D, MAE 1-D/2-D, timm 2-D, x-transformers, HF Llama / GPT-J /
rotary-embedding-torch / torchtune RoPE) is compared with ``variants.spec_*``, the
float64 formula of docs/variants.md written with sinpe's parameters.  Where two recipes
share operations they are compared bit for bit, and the recipes of tatp22 and
x-transformers are compared bit for bit with the real packages (each installs without
its torch requirement; timm and torchtune do not import without torchvision and
torchao plus datasets, so their recipes are checked against the spec alone).

Bounds (derived, not tuned; U = 2**-24, u = 2**-53; first order in U)
----------------------------------------------------------------------
A float32 recipe computes a frequency w~ = w (1 + t) and the angle fl32(p * w~).  Every
recipe forms w as exp or pow of an argument whose magnitude is |x| = |ln(w / w_0)|
(w_0 = the k = 0 frequency: 1, or tensor2tensor's min_timescale); a relative
error r of that argument becomes a relative error |x| r of w.  So

    |t| <= (a |x| + b) U        a = roundings feeding the argument,
                                b = roundings after it, counting 2 per ulp of exp/pow
                                    (one float32 ulp is <= 2U relative)

and the value error is  |p| w (|t| + U) + TRIG_ULPS * U  (|sin'|, |cos'| <= 1; one ulp of
a float32 in [-1, 1] is <= U), plus the float64 reference's own error
(conftest.double_error_bound's terms: |p| w (|ln w| + 3) u + u).

Library accuracy assumed for float32 transcendental functions: sin/cos <= 2 ulp, exp and
pow <= 3 ulp (torch's CPU kernels are SLEEF's 1.0-ulp variants; NumPy's SIMD float32 exp
is the least accurate in use here, about 2.5 ulp).

    recipe (ops)                                          a    b
    fairseq / Whisper   exp(fl(k * fl(c))), c double       2    2*EXP
    tensor2tensor       exp(fl(k * -fl(fl(ln r) / (h-1))))  3    2*EXP + 1 (min_timescale *)
    pow family          1 / base ** fl(2k / c)              1    2*POW + 1 (the reciprocal)
      (tatp22, MAE float32, HF Llama, GPT-J, rotary-embedding-torch)
    keras-hub           fl(1/n) ** fl(fl(2k) / fl(d))       1    1 (base) + 2*POW

The float64 recipes (Marian, DistilBERT, MAE as released) are within the double bound,
then rounded once to float32 (<= U; MAE as released stays float64).
"""
from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import U32, U64

from reference import variants as V

TRIG_ULPS = 2
EXP_ULPS = 3
POW_ULPS = 3

AB_EXP_TORCH = (2, 2 * EXP_ULPS)
AB_T2T = (3, 2 * EXP_ULPS + 1)
AB_POW = (1, 2 * POW_ULPS + 1)
AB_KERAS = (1, 1 + 2 * POW_ULPS)


def _pair_bound(positions, w, ab, w0=1.0):
    """Element-wise bound, ``positions.shape + (len(w),)``, of one float32 pair (sin or cos)."""
    a, b = ab
    pw = np.abs(np.asarray(positions, dtype=np.float64))[..., None] * w
    x = np.abs(np.log(w / w0))
    recipe = pw * ((a * x + b + 1) * U32) + TRIG_ULPS * U32
    reference = pw * (np.abs(np.log(w)) + 3) * U64 + U64
    return recipe + reference


def _f64_pair_bound(positions, w, rounded_to_f32=True):
    """A recipe evaluated in float64 (within the double bound), then rounded once to float32."""
    pw = np.abs(np.asarray(positions, dtype=np.float64))[..., None] * w
    double = pw * (np.abs(np.log(w)) + 3) * U64 + U64
    return 2 * double + (U32 if rounded_to_f32 else 0.0)  # the recipe's and the reference's


def _columns(pair_bound, d, layout):
    """Map per-pair bounds onto the columns of a width-d table (zero column: bound 0)."""
    m = pair_bound.shape[-1]
    n_cos = min(m, d - m)
    out = np.zeros(pair_bound.shape[:-1] + (d,))
    if layout == "interleaved":
        out[..., 0:2 * m:2] = pair_bound
        out[..., 1:2 * n_cos:2] = pair_bound[..., :n_cos]
    else:
        out[..., :m] = pair_bound
        out[..., m:m + n_cos] = pair_bound[..., :n_cos]
    return out


def _assert_within(got, want, bound):
    got = np.asarray(got, dtype=np.float64)
    assert got.shape == want.shape
    err = np.abs(got - want)
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (
        f"error {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst}")


# ---------------------------------------------------------------------------------------
# fairseq, tensor2tensor, Whisper: the n**(-k/(d//2 - 1)) schedule, concatenated
# ---------------------------------------------------------------------------------------
L_1D = 1024
WIDTHS = [4, 5, 8, 64, 65, 512]


@pytest.mark.parametrize("d", WIDTHS)
def test_fairseq_get_embedding_is_the_fairseq_schedule_concatenated(torch, d):
    got = V.fairseq_get_embedding(L_1D, d).numpy()
    want = V.spec_encode(L_1D, d, layout="concatenated", schedule="fairseq")
    w = V.spec_freq(d, schedule="fairseq")
    bound = _columns(_pair_bound(np.arange(L_1D), w, AB_EXP_TORCH), d, "concatenated")
    _assert_within(got, want, bound)
    if d % 2:
        assert np.all(got[:, -1] == 0.0)  # odd d: a zero column, exactly


def test_fairseq_zeroes_the_padding_row_and_cannot_do_width_2_or_3(torch):
    table = V.fairseq_get_embedding(16, 8, padding_idx=1).numpy()
    assert np.all(table[1] == 0.0) and np.all(table[2] != 0.0)
    for d in (2, 3):  # half_dim - 1 == 0
        with pytest.raises(ZeroDivisionError):
            V.fairseq_get_embedding(4, d)


def test_fairseq_forward_is_encode_at_make_positions_with_padding(torch):
    pad = 1
    tokens = torch.tensor([
        [5, 6, 7, 8, 9, pad, pad],    # right padding
        [pad, pad, pad, 5, 6, 7, 8],  # left padding: positions still start at pad + 1
        [5, pad, 6, pad, 7, 8, 9],    # padding inside: skipped, positions keep counting
    ])
    d = 16
    got = V.fairseq_forward(tokens, d, pad).numpy()
    mask = tokens.numpy() != pad
    positions = pad + np.cumsum(mask, axis=1) * mask  # docs/variants.md's NumPy spelling
    assert np.array_equal(positions, V.fairseq_make_positions(tokens, pad).numpy())
    want = V.spec_encode_at(positions, d, layout="concatenated", schedule="fairseq",
                            padding=~mask)
    w = V.spec_freq(d, schedule="fairseq")
    _assert_within(got, want, _columns(_pair_bound(positions, w, AB_EXP_TORCH), d, "concatenated"))
    assert np.all(got[~mask] == 0.0)


@pytest.mark.parametrize("d", [2, 3] + WIDTHS)
@pytest.mark.parametrize("start", [0, 37])
@pytest.mark.parametrize("timescales", [(1.0, 1.0e4), (2.0, 5.0e3)])
def test_t2t_timing_signal_is_the_fairseq_schedule_concatenated(d, start, timescales):
    lo, hi = timescales
    got = V.t2t_get_timing_signal_1d(L_1D, d, lo, hi, start_index=start)
    assert got.shape == (1, L_1D, d) and got.dtype == np.float32
    h = d // 2
    # docs/variants.md: n = max/min and a factor min_timescale (t2t *multiplies* by it,
    # although its docstring says the timescales start at min_timescale); max(h - 1, 1)
    # makes widths 2 and 3 well defined (w_0 = min_timescale).
    w = lo * V.spec_freq(d, hi / lo, "fairseq")
    want = V.spec_encode(L_1D, d, offset=start, layout="concatenated", freq=w)
    if lo == 1.0:
        assert np.array_equal(want, V.spec_encode(L_1D, d, hi, offset=start,
                                                  layout="concatenated", schedule="fairseq"))
    pos = np.arange(start, start + L_1D)
    bound = _columns(_pair_bound(pos, w, AB_T2T, w0=lo), d, "concatenated")
    _assert_within(got[0], want, bound)
    if h and d % 2:
        assert np.all(got[0, :, -1] == 0.0)


def test_t2t_start_index_rows_are_the_rows_of_a_longer_table():
    # The same float32 ops element by element: a shard is bit-identical to the full table.
    full = V.t2t_get_timing_signal_1d(300, 64)[0]
    shard = V.t2t_get_timing_signal_1d(100, 64, start_index=200)[0]
    assert np.array_equal(shard, full[200:])


@pytest.mark.parametrize("d", [4, 5, 64, 512])
def test_fairseq_and_t2t_agree_up_to_their_float32_rounding(torch, d):
    f = V.fairseq_get_embedding(L_1D, d).numpy().astype(np.float64)
    t = V.t2t_get_timing_signal_1d(L_1D, d)[0].astype(np.float64)
    w = V.spec_freq(d, schedule="fairseq")
    pos = np.arange(L_1D)
    bound = _columns(_pair_bound(pos, w, AB_EXP_TORCH) + _pair_bound(pos, w, AB_T2T), d,
                     "concatenated")
    _assert_within(f, t, bound)


@pytest.mark.parametrize("d", [4, 8, 64, 384, 512])
def test_whisper_sinusoids_are_bitwise_fairseq(torch, d):
    # np.log(...) / (h - 1) times an int64 arange is the same float32 product and exp
    # as fairseq's math.log(...) / (h - 1) times a float32 arange.
    assert torch.equal(V.whisper_sinusoids(L_1D, d), V.fairseq_get_embedding(L_1D, d))


def test_whisper_width_2_is_all_nan(torch):
    with np.errstate(divide="ignore"):
        assert torch.isnan(V.whisper_sinusoids(5, 2)).all()


# ---------------------------------------------------------------------------------------
# Marian, DistilBERT, keras-hub: the paper's schedule
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [4, 5, 63, 64, 512])
def test_marian_is_distilbert_with_even_columns_first(torch, d):
    marian = V.marian_create_weight(L_1D, d).numpy()
    distil = V.distilbert_create_sinusoidal_embeddings(L_1D, d).numpy()
    # Both round the same float64 array once: a column permutation, bit for bit.
    perm = np.concatenate([np.arange(0, d, 2), np.arange(1, d, 2)])
    assert np.array_equal(marian, distil[:, perm])
    w = V.spec_freq(d)
    pair = _f64_pair_bound(np.arange(L_1D), w)
    _assert_within(distil, V.spec_encode(L_1D, d), _columns(pair, d, "interleaved"))
    _assert_within(marian, V.spec_encode(L_1D, d, layout="concatenated"),
                   _columns(pair, d, "concatenated"))


@pytest.mark.parametrize("d", [4, 5, 64, 65, 512])
@pytest.mark.parametrize("start", [0, 100])
def test_keras_hub_is_the_paper_table_interleaved(d, start):
    got = V.keras_hub_sine_position_encoding(L_1D, d, start_index=start)
    assert got.dtype == np.float32
    w = V.spec_freq(d)
    pos = np.arange(start, start + L_1D)
    bound = _columns(_pair_bound(pos, w, AB_KERAS), d, "interleaved")
    _assert_within(got, V.spec_encode(L_1D, d, offset=start), bound)


# ---------------------------------------------------------------------------------------
# tatp22 positional-encodings
# ---------------------------------------------------------------------------------------
TATP22_CHANNELS = [1, 2, 3, 4, 5, 6, 7, 10, 11, 12, 13, 64, 65]


def _tatp22_pairs(c):
    return 10000.0 ** (-2.0 * np.arange(c // 2) / c)


@pytest.mark.parametrize("ch", TATP22_CHANNELS)
@pytest.mark.needs("positional-encodings")
def test_tatp22_recipes_match_the_real_package_bitwise(torch, ch):
    import positional_encodings.torch_encodings as pe
    for dtype in (torch.float32, torch.float64, torch.float16):
        got = pe.PositionalEncoding1D(ch)(torch.zeros(2, 17, ch, dtype=dtype))
        want = V.tatp22_positional_encoding_1d(17, ch, dtype)
        assert got.dtype == want.dtype and torch.equal(got[0], want) and torch.equal(got[1], want)
        got = pe.PositionalEncoding2D(ch)(torch.zeros(2, 5, 7, ch, dtype=dtype))
        assert torch.equal(got[1], V.tatp22_positional_encoding_2d(5, 7, ch, dtype))
        got = pe.PositionalEncoding3D(ch)(torch.zeros(2, 3, 5, 4, ch, dtype=dtype))
        assert torch.equal(got[1], V.tatp22_positional_encoding_3d(3, 5, 4, ch, dtype))


@pytest.mark.parametrize("ch", TATP22_CHANNELS)
def test_tatp22_1d_is_the_paper_table_of_even_width_truncated(torch, ch):
    c = 2 * math.ceil(ch / 2)
    got = V.tatp22_positional_encoding_1d(L_1D, ch).numpy()
    assert np.array_equal(got, V.tatp22_positional_encoding_1d(L_1D, c).numpy()[:, :ch])
    w = _tatp22_pairs(c)
    want = V.spec_encode(L_1D, c)[:, :ch]
    assert np.array_equal(want, V.spec_encode(L_1D, ch, freq=w))  # the same via freq=
    bound = _columns(_pair_bound(np.arange(L_1D), w, AB_POW), c, "interleaved")[:, :ch]
    _assert_within(got, want, bound)


@pytest.mark.parametrize("ch", TATP22_CHANNELS)
def test_tatp22_2d_and_3d_are_grids_split_evenly_then_truncated(torch, ch):
    for shape, recipe, per in (((40, 30), V.tatp22_positional_encoding_2d, 4),
                               ((12, 10, 9), V.tatp22_positional_encoding_3d, 6)):
        c = 2 * math.ceil(ch / per)
        ndim = len(shape)
        got = recipe(*shape, ch).numpy()
        want = V.spec_encode_grid(shape, ndim * c, split=(c,) * ndim)[..., :ch]
        pair = _pair_bound(np.arange(max(shape)), _tatp22_pairs(c), AB_POW)
        bound = np.tile(_columns(pair, c, "interleaved")[-1], ndim)[:ch]
        _assert_within(got, want, np.broadcast_to(bound, got.shape))
        # Chunk a (features a*c .. a*c + c) is the 1-D recipe along axis a, bit for bit.
        for axis in range(ndim):
            lo, hi = axis * c, min((axis + 1) * c, ch)
            if lo >= hi:
                continue
            one_d = V.tatp22_positional_encoding_1d(shape[axis], c).numpy()[:, :hi - lo]
            view = [1] * ndim + [hi - lo]
            view[axis] = shape[axis]
            assert np.array_equal(got[..., lo:hi], np.broadcast_to(one_d.reshape(view), got[..., lo:hi].shape))


def test_tatp22_3d_with_4_channels_ignores_the_third_axis(torch):
    got = V.tatp22_positional_encoding_3d(3, 4, 5, 4).numpy()
    assert np.array_equal(got, np.broadcast_to(got[:, :, :1], got.shape))


# ---------------------------------------------------------------------------------------
# MAE
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("D", [8, 16, 64, 768])
@pytest.mark.parametrize("omega_dtype", [np.float64, np.float32])
@pytest.mark.parametrize("grid", [14, 5])
def test_mae_2d_is_a_concatenated_grid_with_the_column_axis_first(D, omega_dtype, grid):
    gh = gw = grid
    got = V.mae_get_2d_sincos_pos_embed(D, grid, omega_dtype=omega_dtype)
    assert got.shape == (gh * gw, D) and got.dtype == omega_dtype
    grid3 = got.reshape(gh, gw, D)
    half = D // 2
    # "emb_h" (features [:D/2]) varies only along the columns, "emb_w" only along the rows.
    assert np.array_equal(grid3[:, :, :half], np.broadcast_to(grid3[:1, :, :half], grid3[:, :, :half].shape))
    assert np.array_equal(grid3[:, :, half:], np.broadcast_to(grid3[:, :1, half:], grid3[:, :, half:].shape))
    # ... and each half is MAE's own 1-D table, bit for bit.
    cols = V.mae_get_1d_sincos_pos_embed_from_grid(half, np.arange(gw, dtype=np.float32), omega_dtype)
    rows = V.mae_get_1d_sincos_pos_embed_from_grid(half, np.arange(gh, dtype=np.float32), omega_dtype)
    assert np.array_equal(grid3[0, :, :half], cols) and np.array_equal(grid3[:, 0, half:], rows)

    want = V.spec_encode_grid((gh, gw), D, layout="concatenated", order=(1, 0))
    w = V.spec_freq(half)
    pos = np.arange(max(gh, gw))
    if omega_dtype is np.float64:
        pair = _f64_pair_bound(pos, w, rounded_to_f32=False)
    else:
        pair = _pair_bound(pos, w, AB_POW)
    bound = np.tile(_columns(pair, half, "concatenated")[-1], 2)
    _assert_within(grid3, want, np.broadcast_to(bound, grid3.shape))


def test_mae_cls_token_is_a_float64_zero_row():
    got = V.mae_get_2d_sincos_pos_embed(16, 4, cls_token=True, omega_dtype=np.float32)
    assert got.dtype == np.float64 and got.shape == (17, 16) and np.all(got[0] == 0.0)
    assert np.array_equal(got[1:], V.mae_get_2d_sincos_pos_embed(16, 4, omega_dtype=np.float32))


# ---------------------------------------------------------------------------------------
# RoPE caches
# ---------------------------------------------------------------------------------------
def _rope_bound(positions, d, n, layout):
    pair = _pair_bound(positions, V.spec_freq(d, n), AB_POW)
    return np.concatenate([pair, pair], -1) if layout == "concatenated" else np.repeat(pair, 2, -1)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("base", [10000.0, 500000.0])
def test_llama_rope_is_the_concatenated_rope_table(torch, d, base):
    # Row 0: a plain sequence; row 1: a decode window at an offset; row 2: packed
    # documents whose positions restart.
    pos = np.stack([np.arange(512), np.arange(3000, 3512),
                    np.concatenate([np.arange(200), np.arange(312)])])
    cos, sin = V.llama_rotary_cos_sin(torch.from_numpy(pos), d, base)
    want_cos, want_sin = V.spec_rope(pos, d, base, layout="concatenated")
    bound = _rope_bound(pos, d, base, "concatenated")
    _assert_within(cos.numpy(), want_cos, bound)
    _assert_within(sin.numpy(), want_sin, bound)


@pytest.mark.parametrize("d", [32, 64])
def test_gptj_rope_is_the_interleaved_rope_table(torch, d):
    L = 2048
    table = V.gptj_create_sinusoidal_positions(L, d).numpy()
    pair = _pair_bound(np.arange(L), V.spec_freq(d), AB_POW)
    _assert_within(table, V.spec_encode(L, d, layout="concatenated"), _columns(pair, d, "concatenated"))

    pos = np.stack([np.arange(1000), np.arange(1000, 2000)])
    cos, sin = V.gptj_rotary_cos_sin(torch.from_numpy(pos), d, max_positions=L)
    want_cos, want_sin = V.spec_rope(pos, d, layout="interleaved")
    bound = _rope_bound(pos, d, 10000.0, "interleaved")
    _assert_within(cos.numpy(), want_cos, bound)
    _assert_within(sin.numpy(), want_sin, bound)
    # The same float32 frequencies and products as HF Llama: its pairs, bit for bit.
    lcos, lsin = V.llama_rotary_cos_sin(torch.from_numpy(pos), d)
    assert torch.equal(cos[..., 0::2], lcos[..., :d // 2])
    assert torch.equal(sin[..., 1::2], lsin[..., d // 2:])


@pytest.mark.parametrize("offset, factor", [(0, 1.0), (777, 1.0), (0, 4.0)])
def test_rotary_embedding_torch_is_the_interleaved_rope_table(torch, offset, factor):
    L, d = 1024, 64
    cos, sin = V.rotary_embedding_torch_cos_sin(L, d, offset=offset, interpolate_factor=factor)
    pos = (np.arange(L) + offset) / factor  # float positions: exact in float32 here
    want_cos, want_sin = V.spec_rope(pos, d, layout="interleaved")
    bound = _rope_bound(pos, d, 10000.0, "interleaved")
    _assert_within(cos.numpy(), want_cos, bound)
    _assert_within(sin.numpy(), want_sin, bound)


def test_rotary_embedding_torch_rounds_positions_in_the_input_dtype(torch):
    # get_seq_pos forms arange(seq_len, dtype=t.dtype): float16 cannot hold 2049.
    cos, _ = V.rotary_embedding_torch_cos_sin(2050, 8, dtype=torch.float16)
    assert torch.equal(cos[2049], cos[2048])
    cos32, _ = V.rotary_embedding_torch_cos_sin(2050, 8)
    assert not torch.equal(cos32[2049], cos32[2048])


# ---------------------------------------------------------------------------------------
# The spec itself: the layouts are one table, the odd-width rules are the recipes'
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("d", [1, 2, 3, 4, 5, 6, 7, 64, 65])
@pytest.mark.parametrize("schedule", ["paper", "fairseq"])
def test_spec_layouts_are_a_column_permutation(d, schedule):
    inter = V.spec_encode(50, d, schedule=schedule)
    concat = V.spec_encode(50, d, layout="concatenated", schedule=schedule)
    m = V.spec_freq(d, schedule=schedule).shape[0]
    n_cos = min(m, d - m)
    sin_cols = np.arange(0, 2 * m, 2)
    cos_cols = np.arange(1, 2 * n_cos, 2)
    rest = np.arange(2 * m if 2 * m > 2 * n_cos else 2 * n_cos, d)
    perm = np.concatenate([sin_cols, cos_cols, rest]).astype(int)
    assert np.array_equal(concat, inter[:, perm])


def test_spec_rope_layouts_are_encode_columns():
    pos = np.arange(-20, 80)
    cos_h, sin_h = V.spec_rope(pos, 16)
    table = V.spec_encode_at(pos, 16, layout="concatenated")  # [sin | cos], paper schedule
    assert np.array_equal(sin_h, np.tile(table[:, :8], 2)) and np.array_equal(cos_h, np.tile(table[:, 8:], 2))
    cos_i, sin_i = V.spec_rope(pos, 16, layout="interleaved")
    assert np.array_equal(cos_i, np.repeat(table[:, 8:], 2, -1))
    assert np.array_equal(sin_i, np.repeat(table[:, :8], 2, -1))


def test_marian_forward_is_rows_from_past_of_the_table(torch):
    weight = V.marian_create_weight(64, 16)
    assert torch.equal(V.marian_forward(weight, 10, past_key_values_length=7), weight[7:17])


# ---------------------------------------------------------------------------------------
# timm, x-transformers, torchtune
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dim", [4, 8, 64, 768])
@pytest.mark.parametrize("interleave_sin_cos", [False, True])
@pytest.mark.parametrize("reverse_coord", [False, True])
def test_timm_2d_is_a_grid_of_half_width_tables(torch, dim, interleave_sin_cos, reverse_coord):
    H, W, T = 7, 5, 10000.0
    got = V.timm_build_sincos2d_pos_embed((H, W), dim, T, reverse_coord=reverse_coord,
                                          interleave_sin_cos=interleave_sin_cos).numpy()
    shape = (W, H) if reverse_coord else (H, W)  # reverse_coord: the grid is (W, H)
    layout = "concatenated" if interleave_sin_cos else "sines_first"
    want = V.spec_encode_grid(shape, dim, T, layout=layout).reshape(H * W, dim)
    w = V.spec_freq(dim // 2, T)  # each axis: the paper's frequencies of width dim/2
    pair = _pair_bound(np.arange(max(H, W)), w, AB_POW)[-1]
    _assert_within(got, want, np.broadcast_to(np.tile(pair, 4), got.shape))
    # the default puts every axis's sines before every axis's cosines
    table = got.reshape(*shape, dim)
    q = dim // 4
    first = table[..., :q]  # axis 0's sines in either layout
    assert np.array_equal(first, np.broadcast_to(table[:, :1, :q], first.shape))
    second = table[..., q:2 * q]  # interleaved: axis 0's cosines; default: axis 1's sines
    if interleave_sin_cos:
        assert np.array_equal(second, np.broadcast_to(table[:, :1, q:2 * q], second.shape))
    else:
        assert np.array_equal(second, np.broadcast_to(table[:1, :, q:2 * q], second.shape))


@pytest.mark.parametrize("dim", [2, 8, 64, 512])
@pytest.mark.parametrize("offset", [0, 300])
def test_x_transformers_is_the_concatenated_table_scaled(torch, dim, offset):
    L, theta = 1024, 10000
    got = V.x_transformers_scaled_sinusoidal(L, dim, theta, offset=offset).numpy()
    scale = np.float32(dim ** -0.5)
    pos = np.arange(offset, offset + L)
    want = scale * V.spec_encode(L, dim, theta, offset=offset, layout="concatenated")
    pair = _pair_bound(pos, V.spec_freq(dim, theta), AB_POW)
    _assert_within(got, want, scale * _columns(pair + U32, dim, "concatenated"))


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("dim", [8, 64])
@pytest.mark.parametrize("offset", [0, 300])
@pytest.mark.needs("x-transformers")
def test_x_transformers_recipe_matches_the_real_package_bitwise(torch, dim, offset):
    # Installed without its torch requirement (tests/requirements-nodeps.txt); its
    # import decorates functions with torch.jit.script, which torch now deprecates.
    from x_transformers.x_transformers import ScaledSinusoidalEmbedding

    module = ScaledSinusoidalEmbedding(dim)
    got = module(torch.zeros(2, 100, dim), offset=offset)
    assert torch.equal(got, V.x_transformers_scaled_sinusoidal(100, dim, offset=offset))


@pytest.mark.parametrize("dim", [8, 64, 128])
@pytest.mark.parametrize("base", [10_000, 500_000])
def test_torchtune_cache_is_the_paper_table_with_cos_and_sin_swapped(torch, dim, base):
    L = 4096
    cache = V.torchtune_rope_cache(dim, L, base).numpy()
    assert cache.shape == (L, dim // 2, 2)
    table = V.spec_encode(L, dim, base)  # interleaved: [sin0, cos0, sin1, cos1, ...]
    want = table.reshape(L, dim // 2, 2)[..., ::-1]
    pair = _pair_bound(np.arange(L), V.spec_freq(dim, base), AB_POW)
    _assert_within(cache, want, np.repeat(pair[..., None], 2, -1))


def test_torchtune_rotates_pairs_of_neighbouring_features(torch):
    # forward rotates features (2k, 2k+1): rotate_every_two with interleaved cos/sin
    # (GPT-J's layout), bit for bit with the same float32 cos and sin.
    dim, heads = 16, 3
    cache = V.torchtune_rope_cache(dim, 64)
    x = torch.randn(2, 10, heads, dim, generator=torch.Generator().manual_seed(0))
    input_pos = torch.tensor([list(range(10)), list(range(30, 40))])
    got = V.torchtune_rope_forward(x, cache, input_pos)
    cos = cache[input_pos][..., 0].repeat_interleave(2, -1)[:, :, None, :]
    sin = cache[input_pos][..., 1].repeat_interleave(2, -1)[:, :, None, :]
    rotated = torch.stack([-x[..., 1::2], x[..., 0::2]], -1).flatten(-2)
    assert torch.equal(got, x * cos + rotated * sin)
