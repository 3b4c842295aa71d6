"""Faithful re-implementations of the sinusoidal tables of other codebases.

One function per codebase recipe, written with the same operations in the same dtypes
as the original (torch where the original is torch, NumPy where it is NumPy; TF and
keras ops are re-typed in NumPy with the same float32 steps).  Each docstring cites the
original and says what it does with odd widths, dtypes and padding.  These are test
oracles: they reproduce the originals' rounding on purpose, quirks included.

The last section, ``spec_*``, is the float64 formula of docs/variants.md: sinpe's
proposed parameters (layout, schedule, freq, positions, padding, grids, RoPE) written
the obvious way.  tests/test_variant_recipes.py proves every recipe equals it within
the recipe's own float32 rounding.

torch is imported lazily, so the NumPy recipes and the spec work without it.
"""
from __future__ import annotations

import math

import numpy as np


def _torch():
    import torch

    return torch


# ---------------------------------------------------------------------------------------
# fairseq
# ---------------------------------------------------------------------------------------
def fairseq_get_embedding(num_embeddings, embedding_dim, padding_idx=None):
    """fairseq ``SinusoidalPositionalEmbedding.get_embedding`` (torch, float32).

    facebookresearch/fairseq, fairseq/modules/sinusoidal_positional_embedding.py,
    staticmethod ``get_embedding``.  ``half_dim = d // 2`` frequencies
    ``exp(-k * log(10000) / (half_dim - 1))`` (the scalar in double, the product and exp
    in float32), angle ``float32(p) * freq`` in float32, columns ``[sin | cos]``
    concatenated.  Odd ``d``: a zero column is appended at the end.  ``padding_idx``:
    that whole row is set to zero.  ``d`` in (2, 3) divides by zero (``half_dim - 1 == 0``):
    Python raises ZeroDivisionError, as fairseq does.  The base is hard-coded 10000.
    The module casts the buffer to its own dtype later (``weights.to(_float_tensor)``),
    so a half-precision model gets this float32 table rounded to float16.
    """
    torch = _torch()
    half_dim = embedding_dim // 2
    emb = math.log(10000) / (half_dim - 1)
    emb = torch.exp(torch.arange(half_dim, dtype=torch.float) * -emb)
    emb = torch.arange(num_embeddings, dtype=torch.float).unsqueeze(1) * emb.unsqueeze(0)
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=1).view(num_embeddings, -1)
    if embedding_dim % 2 == 1:
        emb = torch.cat([emb, torch.zeros(num_embeddings, 1)], dim=1)
    if padding_idx is not None:
        emb[padding_idx, :] = 0
    return emb


def fairseq_make_positions(tensor, padding_idx):
    """fairseq ``utils.make_positions`` (torch, int64).

    facebookresearch/fairseq, fairseq/utils.py, ``make_positions``: non-padding tokens
    get ``padding_idx + (number of non-padding tokens up to and including this one)``,
    so positions start at ``padding_idx + 1`` and skip over left padding; padding tokens
    get ``padding_idx`` itself (the zeroed row of ``get_embedding``).
    """
    torch = _torch()
    mask = tensor.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


def fairseq_forward(tokens, embedding_dim, padding_idx):
    """fairseq ``SinusoidalPositionalEmbedding.forward`` without incremental state.

    The same file, ``forward``: builds ``get_embedding(padding_idx + 1 + seq_len, d,
    padding_idx)``, then looks rows up at ``make_positions(tokens, padding_idx)``.
    Returns ``(bsz, seq_len, d)`` float32; rows of padding tokens are zero.
    """
    bsz, seq_len = tokens.shape
    weights = fairseq_get_embedding(padding_idx + 1 + seq_len, embedding_dim, padding_idx)
    positions = fairseq_make_positions(tokens, padding_idx)
    return weights.index_select(0, positions.view(-1)).view(bsz, seq_len, -1)


# ---------------------------------------------------------------------------------------
# tensor2tensor
# ---------------------------------------------------------------------------------------
def t2t_get_timing_signal_1d(length, channels, min_timescale=1.0, max_timescale=1.0e4,
                             start_index=0):
    """tensor2tensor ``get_timing_signal_1d``, TF float32 ops re-typed in NumPy float32.

    tensorflow/tensor2tensor, tensor2tensor/layers/common_attention.py,
    ``get_timing_signal_1d``: ``num_timescales = channels // 2``;
    ``log_timescale_increment = log(max/min) / max(num_timescales - 1, 1)`` (the log in
    double, converted to a float32 tensor, the division in float32);
    ``inv_timescales = min_timescale * exp(k * -increment)`` in float32 (it *multiplies* by
    ``min_timescale``: the docstring's "timescales starting with min_timescale" would be
    ``1/min_timescale``; the default 1.0 hides it); positions
    ``float32(range(length) + start_index)``; ``[sin | cos]`` concatenated; odd
    ``channels``: one zero column padded at the end (``tf.pad ... tf.mod(channels, 2)``).
    The ``max(..., 1)`` makes ``channels`` 2 and 3 well defined (frequency
    ``min_timescale``) where fairseq divides by zero.  Returns ``(1, length, channels)``
    float32; ``add_timing_signal_1d`` casts it to the input's dtype.  NumPy's float32
    ``exp/sin/cos`` stand in for TF's; both are within a few ulp of exact, which is all
    the tests assume.
    """
    f32 = np.float32
    position = (np.arange(length) + start_index).astype(f32)
    num_timescales = channels // 2
    log_timescale_increment = f32(math.log(float(max_timescale) / float(min_timescale))) / \
        np.maximum(f32(num_timescales) - f32(1), f32(1))
    inv_timescales = f32(min_timescale) * np.exp(
        np.arange(num_timescales).astype(f32) * -log_timescale_increment)
    scaled_time = position[:, None] * inv_timescales[None, :]
    signal = np.concatenate([np.sin(scaled_time), np.cos(scaled_time)], axis=1)
    signal = np.pad(signal, [[0, 0], [0, channels % 2]])
    return signal.reshape(1, length, channels)


# ---------------------------------------------------------------------------------------
# Whisper
# ---------------------------------------------------------------------------------------
def whisper_sinusoids(length, channels, max_timescale=10000):
    """OpenAI Whisper ``sinusoids`` (torch, float32).

    openai/whisper, whisper/model.py, ``sinusoids``: asserts even ``channels``;
    ``log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)`` (float64),
    ``inv_timescales = exp(-increment * arange(channels // 2))`` (the float64 scalar times
    an int64 tensor gives float32), ``arange(length) * inv_timescales`` float32,
    ``[sin | cos]`` concatenated.  Used as the audio encoder's ``positional_embedding``
    buffer.  ``channels == 2`` divides a NumPy float64 by zero: inf, then ``-inf * 0``,
    so the table is all NaN (with a RuntimeWarning), not an error.
    """
    torch = _torch()
    assert channels % 2 == 0
    log_timescale_increment = np.log(max_timescale) / (channels // 2 - 1)
    inv_timescales = torch.exp(-log_timescale_increment * torch.arange(channels // 2))
    scaled_time = torch.arange(length)[:, np.newaxis] * inv_timescales[np.newaxis, :]
    return torch.cat([torch.sin(scaled_time), torch.cos(scaled_time)], dim=1)


# ---------------------------------------------------------------------------------------
# Hugging Face Marian and DistilBERT (float64 NumPy, copied into float32)
# ---------------------------------------------------------------------------------------
def _xlm_position_enc(n_pos, dim):
    # The same list comprehension in both models: pos / 10000**(2*(j//2)/dim), float64.
    return np.array(
        [[pos / np.power(10000, 2 * (j // 2) / dim) for j in range(dim)] for pos in range(n_pos)]
    )


def marian_create_weight(n_pos, dim):
    """Hugging Face ``MarianSinusoidalPositionalEmbedding(n_pos, dim).create_weight()``.

    huggingface/transformers 5, src/transformers/models/marian/modeling_marian.py,
    ``MarianSinusoidalPositionalEmbedding.create_weight`` (``_init_weight`` before
    transformers 5; the model's ``_init_weights`` copies it into the frozen
    ``nn.Embedding`` weight, float32): angles
    ``pos / 10000**(2*(j//2)/dim)`` in float64 NumPy; ``sin`` of the even columns goes
    to ``[0, sentinel)`` and ``cos`` of the odd columns to ``[sentinel, dim)``, with
    ``sentinel = ceil(dim/2)``, each rounded once to float32 (``torch.FloatTensor``).
    Odd ``dim``: one more sine than cosine (the sine of frequency ``k = dim//2`` sits at
    column ``sentinel - 1``); no zero column.  That is exactly the paper's interleaved
    table with its even columns moved first, odd columns after.
    """
    torch = _torch()
    position_enc = _xlm_position_enc(n_pos, dim)
    out = torch.empty(n_pos, dim, dtype=torch.float32, requires_grad=False)
    sentinel = dim // 2 if dim % 2 == 0 else (dim // 2) + 1
    out[:, 0:sentinel] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    out[:, sentinel:] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    return out


def marian_forward(weight, seq_len, past_key_values_length=0):
    """``MarianSinusoidalPositionalEmbedding.forward(input_ids_shape, past_key_values_length)``.

    Same file: the embedding rows at ``arange(past, past + seq_len)``, i.e. the
    table's rows of a decoding step that has ``past`` tokens behind it.
    """
    torch = _torch()
    position_ids = torch.arange(past_key_values_length, past_key_values_length + seq_len,
                                dtype=torch.long)
    return torch.nn.functional.embedding(position_ids, weight)


def distilbert_create_sinusoidal_embeddings(n_pos, dim):
    """Hugging Face DistilBERT ``create_sinusoidal_embeddings`` (torch float32).

    huggingface/transformers, src/transformers/models/distilbert/modeling_distilbert.py,
    ``_create_sinusoidal_embeddings(n_pos, dim, out)`` (``out`` is the float32
    ``nn.Embedding`` weight): the same float64 angles as Marian, ``out[:, 0::2] = sin``,
    ``out[:, 1::2] = cos``, each rounded once to float32.  Interleaved, the paper's
    schedule; odd ``dim`` ends with a sine column.
    """
    torch = _torch()
    position_enc = _xlm_position_enc(n_pos, dim)
    out = torch.empty(n_pos, dim, dtype=torch.float32)
    out[:, 0::2] = torch.FloatTensor(np.sin(position_enc[:, 0::2]))
    out[:, 1::2] = torch.FloatTensor(np.cos(position_enc[:, 1::2]))
    return out


# ---------------------------------------------------------------------------------------
# keras-hub
# ---------------------------------------------------------------------------------------
def keras_hub_sine_position_encoding(seq_length, hidden_size, max_wavelength=10000,
                                     start_index=0, compute_dtype=np.float32):
    """keras-hub ``SinePositionEncoding.call``, keras ops re-typed in NumPy.

    keras-team/keras-hub, keras_hub/src/layers/modeling/sine_position_encoding.py,
    ``SinePositionEncoding.call``: everything in the layer's ``compute_dtype`` (float32,
    or float16 under a ``mixed_float16`` policy): ``min_freq = cast(1/max_wavelength)``,
    ``timescales = min_freq ** (cast(2*(j//2)) / cast(hidden_size))`` for every column
    ``j``, ``angles = cast(arange(L) + start_index) * timescales``, then
    ``sin(angles) * sin_mask + cos(angles) * cos_mask`` with ``cos_mask = j % 2``:
    interleaved (even columns sine), the paper's schedule, odd widths end with a sine.
    Returns ``(seq_length, hidden_size)``; the layer broadcasts it to the input's shape.
    """
    cd = np.dtype(compute_dtype).type
    positions = (np.arange(seq_length) + start_index).astype(cd)
    min_freq = cd(1 / max_wavelength)
    timescales = np.power(min_freq,
                          (2 * (np.arange(hidden_size) // 2)).astype(cd) / cd(hidden_size))
    angles = positions[:, None] * timescales[None, :]
    cos_mask = (np.arange(hidden_size) % 2).astype(cd)
    sin_mask = cd(1) - cos_mask
    return np.sin(angles) * sin_mask + np.cos(angles) * cos_mask


# ---------------------------------------------------------------------------------------
# tatp22 positional-encodings (torch versions)
# ---------------------------------------------------------------------------------------
def _tatp22_inv_freq(channels):
    torch = _torch()
    return 1.0 / (10000 ** (torch.arange(0, channels, 2).float() / channels))


def _tatp22_get_emb(sin_inp):
    # positional_encodings.torch_encodings.get_emb: sin and cos intertwined
    torch = _torch()
    emb = torch.stack((sin_inp.sin(), sin_inp.cos()), dim=-1)
    return torch.flatten(emb, -2, -1)


def _tatp22_axis(size, inv_freq):
    torch = _torch()
    pos = torch.arange(size, dtype=inv_freq.dtype)
    return _tatp22_get_emb(torch.einsum("i,j->ij", pos, inv_freq))


def tatp22_positional_encoding_1d(x, org_channels, dtype=None):
    """tatp22 ``PositionalEncoding1D`` (torch): the ``(x, org_channels)`` table.

    tatp22/multidim-positional-encoding, positional_encodings/torch_encodings.py,
    ``PositionalEncoding1D``: ``channels = ceil(org/2)*2``; ``inv_freq =
    1/(10000**(arange(0, channels, 2).float()/channels))`` float32; positions float32;
    ``einsum`` outer product; ``get_emb`` interleaves (stack(sin, cos) + flatten); the
    float32 result is written into ``zeros(..., dtype=tensor.dtype)`` and truncated to
    ``org_channels``.  Odd ``org``: the table is built for ``org + 1`` columns (the
    exponent's denominator is ``org + 1``, not ``org``) and its last cosine dropped.
    ``forward`` returns this repeated over the batch.
    """
    torch = _torch()
    dtype = torch.float32 if dtype is None else dtype
    channels = int(np.ceil(org_channels / 2) * 2)
    emb = torch.zeros((x, channels), dtype=dtype)
    emb[:, :channels] = _tatp22_axis(x, _tatp22_inv_freq(channels))
    return emb[:, :org_channels]


def tatp22_positional_encoding_2d(x, y, org_channels, dtype=None):
    """tatp22 ``PositionalEncoding2D`` (torch): the ``(x, y, org_channels)`` table.

    Same file, ``PositionalEncoding2D``: ``channels = ceil(org/4)*2`` per axis (every
    axis's exponent uses this ``channels``); features ``[0, channels)`` encode the first
    grid axis ``x``, ``[channels, 2*channels)`` the second ``y``, each interleaved as in
    1-D; truncated to ``org``.  When ``org`` is not a multiple of 4 the ``y`` chunk loses
    its last columns (``org = 2``: ``y`` is not encoded at all).
    """
    torch = _torch()
    dtype = torch.float32 if dtype is None else dtype
    channels = int(np.ceil(org_channels / 4) * 2)
    inv_freq = _tatp22_inv_freq(channels)
    emb_x = _tatp22_axis(x, inv_freq).unsqueeze(1)
    emb_y = _tatp22_axis(y, inv_freq)
    emb = torch.zeros((x, y, channels * 2), dtype=dtype)
    emb[:, :, :channels] = emb_x
    emb[:, :, channels:2 * channels] = emb_y
    return emb[:, :, :org_channels]


def tatp22_positional_encoding_3d(x, y, z, org_channels, dtype=None):
    """tatp22 ``PositionalEncoding3D`` (torch): the ``(x, y, z, org_channels)`` table.

    Same file, ``PositionalEncoding3D``: ``channels = ceil(org/6)*2`` per axis (the
    ``if channels % 2: channels += 1`` that follows can never fire); chunks ``x``, ``y``,
    ``z`` in that order, each interleaved with the exponent's denominator ``channels``;
    truncated to ``org``.  ``org = 4``: ``z`` is not encoded at all.
    """
    torch = _torch()
    dtype = torch.float32 if dtype is None else dtype
    channels = int(np.ceil(org_channels / 6) * 2)
    if channels % 2:
        channels += 1
    inv_freq = _tatp22_inv_freq(channels)
    emb_x = _tatp22_axis(x, inv_freq).unsqueeze(1).unsqueeze(1)
    emb_y = _tatp22_axis(y, inv_freq).unsqueeze(1)
    emb_z = _tatp22_axis(z, inv_freq)
    emb = torch.zeros((x, y, z, channels * 3), dtype=dtype)
    emb[:, :, :, :channels] = emb_x
    emb[:, :, :, channels:2 * channels] = emb_y
    emb[:, :, :, 2 * channels:] = emb_z
    return emb[:, :, :, :org_channels]


# ---------------------------------------------------------------------------------------
# MAE (NumPy)
# ---------------------------------------------------------------------------------------
def mae_get_1d_sincos_pos_embed_from_grid(embed_dim, pos, omega_dtype=np.float64):
    """MAE ``get_1d_sincos_pos_embed_from_grid`` (NumPy).

    facebookresearch/mae, util/pos_embed.py, ``get_1d_sincos_pos_embed_from_grid``:
    asserts even ``embed_dim``; ``omega = arange(D/2) / (D/2)``, ``1/10000**omega``
    (the paper's schedule for width D); ``einsum('m,d->md', pos, omega)``; ``[sin | cos]``
    concatenated.  ``omega_dtype``: the original commit used ``np.float``
    (= float64; pretrained MAE/ViT checkpoints were initialised with it); the current
    HEAD uses ``np.float32`` since ``np.float`` was removed from NumPy, which changes
    the whole computation to float32 when ``pos`` is float32 (as MAE's grid is).
    """
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=omega_dtype)
    omega /= embed_dim / 2.
    omega = 1. / 10000**omega
    pos = pos.reshape(-1)
    out = np.einsum("m,d->md", pos, omega)
    emb_sin = np.sin(out)
    emb_cos = np.cos(out)
    return np.concatenate([emb_sin, emb_cos], axis=1)


def mae_get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False, omega_dtype=np.float64):
    """MAE ``get_2d_sincos_pos_embed`` (NumPy), ``(grid_h*grid_w [+1], embed_dim)``.

    Same file, ``get_2d_sincos_pos_embed`` and ``get_2d_sincos_pos_embed_from_grid``:
    ``grid = meshgrid(grid_w, grid_h)`` ("here w goes first"), so ``grid[0]`` holds the
    column (w) index; ``emb_h = 1d(D/2, grid[0])``, ``emb_w = 1d(D/2, grid[1])``,
    ``concatenate([emb_h, emb_w])``.  Despite the names, the first ``D/2`` features
    encode the column index and the last ``D/2`` the row index; tokens are row-major.
    Each half is the concatenated 1-D table of width ``D/2``.  ``cls_token``: a float64
    zero row is prepended (which also makes the result float64 for either omega dtype).
    ``grid_size`` is an int: MAE's grids are square.
    """
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0)
    grid = grid.reshape([2, 1, grid_size, grid_size])
    assert embed_dim % 2 == 0
    emb_h = mae_get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0], omega_dtype)
    emb_w = mae_get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1], omega_dtype)
    pos_embed = np.concatenate([emb_h, emb_w], axis=1)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


# ---------------------------------------------------------------------------------------
# RoPE caches
# ---------------------------------------------------------------------------------------
def llama_rotary_cos_sin(position_ids, dim, base=10000.0, dtype=None, attention_scaling=1.0):
    """Hugging Face ``LlamaRotaryEmbedding`` default RoPE: ``(cos, sin)``.

    huggingface/transformers 5, src/transformers/models/llama/modeling_llama.py,
    ``LlamaRotaryEmbedding.compute_default_rope_parameters`` (``inv_freq = 1/(base **
    (arange(0, dim, 2, dtype=float) / dim))``, float32) and ``forward``: ``freqs =
    position_ids[..., None].float() * inv_freq`` in float32 (transformers 4 formed the
    same products as a matmul with inner size 1), ``emb = cat((freqs, freqs), -1)`` (the
    half-split layout that ``rotate_half`` expects), ``cos = emb.cos() *
    attention_scaling`` (1.0 for default RoPE), then cast to ``x.dtype``.
    ``position_ids``: ``(batch, seq)`` int64.  Returns ``(batch, seq, dim)`` twice.
    """
    torch = _torch()
    dtype = torch.float32 if dtype is None else dtype
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float) / dim))
    freqs = position_ids[..., None].float() * inv_freq.to(dtype=torch.float)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos = emb.cos() * attention_scaling
    sin = emb.sin() * attention_scaling
    return cos.to(dtype=dtype), sin.to(dtype=dtype)


def gptj_create_sinusoidal_positions(num_pos, dim):
    """Hugging Face GPT-J ``create_sinusoidal_positions`` (torch float32): ``[sin | cos]``.

    huggingface/transformers, src/transformers/models/gptj/modeling_gptj.py,
    ``create_sinusoidal_positions``: ``inv_freq = 1/(10000 ** (arange(0, dim, 2,
    dtype=int64) / dim))`` (true division gives float32), ``einsum`` with float32
    positions, ``cat(sin, cos)``: this stored buffer is the concatenated paper table of
    width ``rotary_dim``.  The base is hard-coded 10000.
    """
    torch = _torch()
    inv_freq = 1.0 / (10000 ** (torch.arange(0, dim, 2, dtype=torch.int64) / dim))
    sinusoid_inp = torch.einsum("i , j -> i j",
                                torch.arange(num_pos, dtype=torch.int64).float(), inv_freq).float()
    return torch.cat((torch.sin(sinusoid_inp), torch.cos(sinusoid_inp)), dim=1)


def gptj_rotary_cos_sin(position_ids, rotary_dim, max_positions=2048):
    """GPT-J's effective interleaved-pairs ``(cos, sin)`` for ``position_ids``.

    Same file, ``GPTJAttention.forward`` + ``apply_rotary_pos_emb``: gather rows of
    ``embed_positions`` at ``position_ids``, ``sin, cos = split(sincos, dim//2)``, then
    ``repeat_interleave(..., 2)`` along features, the layout ``rotate_every_two``
    expects: ``cos[..., 2k] = cos[..., 2k+1] = cos(p * w_k)``.  Returns
    ``(batch, seq, rotary_dim)`` float32 twice (the head axis of the original dropped).
    """
    torch = _torch()
    embed_positions = gptj_create_sinusoidal_positions(max_positions, rotary_dim)
    embed_positions = embed_positions.repeat(position_ids.shape[0], 1, 1)
    repeated_position_ids = position_ids.unsqueeze(-1).repeat(1, 1, embed_positions.shape[-1])
    sincos = torch.gather(embed_positions, 1, repeated_position_ids)
    sin, cos = torch.split(sincos, sincos.shape[-1] // 2, dim=-1)
    sin = torch.repeat_interleave(sin[:, :, None, :], 2, 3)[:, :, 0, :]
    cos = torch.repeat_interleave(cos[:, :, None, :], 2, 3)[:, :, 0, :]
    return cos, sin


def rotary_embedding_torch_cos_sin(seq_len, dim, theta=10000, offset=0, dtype=None,
                                   interpolate_factor=1.0, theta_rescale_factor=1.0):
    """lucidrains rotary-embedding-torch ``RotaryEmbedding``: ``(cos, sin)`` for a sequence.

    lucidrains/rotary-embedding-torch, rotary_embedding_torch/rotary_embedding_torch.py:
    ``__init__`` (``theta *= theta_rescale_factor ** (dim/(dim-2))``; ``freqs = 1/(theta **
    (arange(0, dim, 2)[:dim//2].float() / dim))``, float32), ``get_seq_pos``
    (``(arange(seq_len, dtype=t.dtype) + offset) / interpolate_factor``: the positions
    are formed in the *input's* dtype, so a float16/bfloat16 input rounds positions past
    2048/256), ``forward`` (``einsum`` in float32, ``repeat '... n -> ... (n r)', r=2``:
    interleaved pairs) and ``apply_rotary_emb`` (``freqs.cos()``, ``freqs.sin()`` in
    float32).  Returns ``(seq_len, 2*(dim//2))`` float32 twice.
    """
    torch = _torch()
    dtype = torch.float32 if dtype is None else dtype
    if dim > 2:
        theta *= theta_rescale_factor ** (dim / (dim - 2))
    freqs = 1.0 / (theta ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    seq = (torch.arange(seq_len, dtype=dtype) + offset) / interpolate_factor
    angles = torch.einsum("..., f -> ... f", seq.type(freqs.dtype), freqs)
    angles = torch.repeat_interleave(angles, 2, dim=-1)  # einops repeat '... n -> ... (n r)'
    return angles.cos(), angles.sin()


def torchtune_rope_cache(dim, max_seq_len=4096, base=10_000):
    """torchtune ``RotaryPositionalEmbeddings(dim, max_seq_len, base).cache`` (float32).

    pytorch/torchtune 0.6, torchtune/modules/position_embeddings.py,
    ``RotaryPositionalEmbeddings.rope_init`` (``theta = 1/(base ** (arange(0, dim,
    2)[:dim//2].float() / dim))``, float32) and ``build_rope_cache`` (float32 positions,
    ``einsum`` outer product, ``stack([cos, sin], -1)``).  Returns ``(max_seq_len,
    dim//2, 2)``: ``[..., 0]`` the cosines, ``[..., 1]`` the sines of pair ``k``.
    """
    torch = _torch()
    theta = 1.0 / (base ** (torch.arange(0, dim, 2)[: (dim // 2)].float() / dim))
    seq_idx = torch.arange(max_seq_len, dtype=theta.dtype)
    idx_theta = torch.einsum("i, j -> ij", seq_idx, theta).float()
    return torch.stack([torch.cos(idx_theta), torch.sin(idx_theta)], dim=-1)


def torchtune_rope_forward(x, cache, input_pos=None):
    """torchtune ``RotaryPositionalEmbeddings.forward(x, input_pos=...)``.

    Same file: ``x`` is ``(b, s, n_h, h_d)``; the cache rows at ``input_pos`` (``(b, s)``)
    or ``0 .. s-1``; features taken in pairs ``(2k, 2k+1)`` (``reshape(..., -1, 2)``),
    each rotated by its pair's angle in float32: ``(x0 c - x1 s, x1 c + x0 s)``.
    """
    torch = _torch()
    seq_len = x.size(1)
    rope_cache = cache[:seq_len] if input_pos is None else cache[input_pos]
    xshaped = x.float().reshape(*x.shape[:-1], -1, 2)
    rope_cache = rope_cache.view(-1, xshaped.size(1), 1, xshaped.size(3), 2)
    x_out = torch.stack(
        [
            xshaped[..., 0] * rope_cache[..., 0] - xshaped[..., 1] * rope_cache[..., 1],
            xshaped[..., 1] * rope_cache[..., 0] + xshaped[..., 0] * rope_cache[..., 1],
        ],
        -1,
    )
    return x_out.flatten(3).type_as(x)


# ---------------------------------------------------------------------------------------
# timm, x-transformers
# ---------------------------------------------------------------------------------------
def timm_build_sincos2d_pos_embed(feat_shape, dim=64, temperature=10000.0, reverse_coord=False,
                                  interleave_sin_cos=False):
    """timm ``build_sincos2d_pos_embed`` (torch float32): ``(H*W, dim)``.

    huggingface/pytorch-image-models (timm 1.0), timm/layers/pos_embed_sincos.py,
    ``freq_bands(dim // 4, temperature, step=1)`` (``exp = arange(pos_dim).float() /
    pos_dim``, ``bands = 1 / temperature ** exp``: the paper's frequencies of a width
    ``dim/2`` table) and ``build_sincos2d_pos_embed``: asserts ``dim % 4 == 0``; the grid
    of ``feat_shape`` (``(H, W)``; reversed to ``(W, H)`` by ``reverse_coord``) with
    ``ndgrid`` ('ij' indexing, tokens in row-major order), float32 coordinates times the
    bands, then ``stack([sin, cos], dim=1)``: all axes' sines ``[sin_h, sin_w]``, then
    all axes' cosines ``[cos_h, cos_w]``; with ``interleave_sin_cos``, ``dim=2``:
    ``[sin_h, cos_h, sin_w, cos_w]``, each axis's own concatenated table.
    """
    torch = _torch()
    assert dim % 4 == 0
    pos_dim = dim // 4
    exp = torch.arange(0, pos_dim, 1, dtype=torch.int64).to(torch.float32) / pos_dim
    bands = 1.0 / (temperature ** exp)
    if reverse_coord:
        feat_shape = feat_shape[::-1]  # stack W, H instead of H, W
    grid = torch.stack(torch.meshgrid(
        [torch.arange(s, dtype=torch.int64).to(torch.float32) for s in feat_shape],
        indexing="ij")).flatten(1).transpose(0, 1)
    pos2 = grid.unsqueeze(-1) * bands.unsqueeze(0)
    stack_dim = 2 if interleave_sin_cos else 1
    return torch.stack([torch.sin(pos2), torch.cos(pos2)], dim=stack_dim).flatten(1)


def x_transformers_scaled_sinusoidal(seq_len, dim, theta=10000, offset=0):
    """x-transformers ``ScaledSinusoidalEmbedding(dim, theta)(x, offset=offset)``, at init.

    lucidrains/x-transformers 2.x, x_transformers/x_transformers.py,
    ``ScaledSinusoidalEmbedding``: asserts even ``dim``; ``scale = ones(1) * dim **
    -0.5`` (a learned parameter, float32); ``inv_freq = theta ** -(arange(dim//2).float()
    / (dim//2))`` (the paper's frequencies); ``forward``: int64 positions ``arange(L) +
    offset``, ``einsum`` outer product with ``inv_freq`` (float32), ``cat(sin, cos)``
    (concatenated), times ``scale``.  Returns ``(seq_len, dim)`` float32.
    """
    torch = _torch()
    assert dim % 2 == 0
    scale = torch.ones(1) * dim ** -0.5
    half_dim = dim // 2
    freq_seq = torch.arange(half_dim).float() / half_dim
    inv_freq = theta ** -freq_seq
    pos = torch.arange(seq_len) + offset
    emb = torch.einsum("i, j -> i j", pos, inv_freq)
    emb = torch.cat((emb.sin(), emb.cos()), dim=-1)
    return emb * scale


# ---------------------------------------------------------------------------------------
# sinpe's API as a float64 formula (docs/variants.md)
# ---------------------------------------------------------------------------------------
def spec_freq(d, n=10000.0, schedule="paper"):
    """Per-pair frequencies ``w_k`` (float64) of a width-``d`` table.

    paper:   ``w_k = n**(-2k/d)``,            ``k < ceil(d/2)``
    fairseq: ``w_k = n**(-k/max(d//2-1, 1))``, ``k < d//2``
    """
    if schedule == "paper":
        k = np.arange((d + 1) // 2, dtype=np.float64)
        return n ** (-2.0 * k / d)
    if schedule == "fairseq":
        h = d // 2
        k = np.arange(h, dtype=np.float64)
        return n ** (-k / max(h - 1, 1))
    raise ValueError(f"schedule must be 'paper' or 'fairseq', not {schedule!r}")


def spec_encode_at(positions, d, n=10000.0, *, layout="interleaved", schedule="paper",
                   freq=None, padding=None):
    """``positions.shape + (d,)`` float64 table for the proposed ``sinpe.encode_at``.

    ``m = len(freq)`` pairs, ``d - 1 <= 2m <= d + 1``.  Pair ``k`` gives ``sin(p w_k)``
    (every ``k < m``) and ``cos(p w_k)`` (``k < d - m``); a column left over (``2m = d-1``)
    is zero.  interleaved: sin at column ``2k``, cos at ``2k+1``.  concatenated: sines at
    ``0..m-1``, cosines from column ``m``.  ``padding``: rows where it is True are zero.
    """
    positions = np.asarray(positions, dtype=np.float64)
    w = spec_freq(d, n, schedule) if freq is None else np.asarray(freq, dtype=np.float64)
    m = w.shape[0]
    if not d - 1 <= 2 * m <= d + 1:
        raise ValueError(f"freq has {m} entries; a width-{d} table needs {d // 2} or {(d + 1) // 2}")
    angles = positions[..., None] * w
    n_cos = min(m, d - m)
    out = np.zeros(positions.shape + (d,))
    if layout == "interleaved":
        out[..., 0:2 * m:2] = np.sin(angles)
        out[..., 1:2 * n_cos:2] = np.cos(angles[..., :n_cos])
    elif layout == "concatenated":
        out[..., :m] = np.sin(angles)
        out[..., m:m + n_cos] = np.cos(angles[..., :n_cos])
    else:
        raise ValueError(f"layout must be 'interleaved' or 'concatenated', not {layout!r}")
    if padding is not None:
        out[np.asarray(padding, dtype=bool)] = 0.0
    return out


def spec_encode(L, d, n=10000.0, *, offset=0, **kw):
    """The proposed ``sinpe.encode``: rows are positions ``offset .. offset+L-1``."""
    return spec_encode_at(np.arange(offset, offset + L), d, n, **kw)


def spec_rope(positions, d, n=10000.0, *, layout="concatenated", freq=None):
    """The proposed ``sinpe.rope``: ``(cos, sin)``, each ``positions.shape + (d,)``, float64.

    concatenated (HF ``rotate_half``): column ``j`` uses ``w_{j mod d/2}``;
    interleaved (GPT-J ``rotate_every_two``): column ``j`` uses ``w_{j // 2}``.
    Default ``w_k = n**(-2k/d)``, ``k < d/2``.
    """
    if d % 2:
        raise ValueError(f"RoPE needs an even d, got {d}")
    positions = np.asarray(positions, dtype=np.float64)
    w = spec_freq(d, n, "paper") if freq is None else np.asarray(freq, dtype=np.float64)
    if layout == "concatenated":
        w_col = np.concatenate([w, w])
    elif layout == "interleaved":
        w_col = np.repeat(w, 2)
    else:
        raise ValueError(f"layout must be 'concatenated' or 'interleaved', not {layout!r}")
    angles = positions[..., None] * w_col
    return np.cos(angles), np.sin(angles)


def spec_encode_grid(shape, d, n=10000.0, *, layout="interleaved", schedule="paper",
                     split=None, order=None):
    """The proposed ``sinpe.encode_grid``: ``shape + (d,)`` float64.

    ``split[a]`` features encode grid axis ``a`` (default ``d // len(shape)`` each), as a
    1-D table of width ``split[a]`` with its own schedule; the chunks are concatenated
    along features in the axis order ``order`` (default ``0, 1, ...``).  ``"sines_first"``
    (timm): every ``split[a]`` even; the concatenated chunks' sine halves first, in axis
    order, then their cosine halves in the same order.
    """
    shape = tuple(shape)
    ndim = len(shape)
    if split is None:
        if d % ndim:
            raise ValueError(f"d={d} does not split evenly over {ndim} axes; pass split=")
        split = (d // ndim,) * ndim
    order = tuple(range(ndim)) if order is None else tuple(order)
    if sum(split) != d or sorted(order) != list(range(ndim)) or len(split) != ndim:
        raise ValueError(f"bad split={split} / order={order} for shape={shape}, d={d}")
    out = np.zeros(shape + (d,))
    chunks = []
    for axis in order:
        width = split[axis]
        one_d = "concatenated" if layout == "sines_first" else layout
        table = spec_encode(shape[axis], width, n, layout=one_d, schedule=schedule)
        view = [1] * ndim + [width]
        view[axis] = shape[axis]
        chunks.append(np.broadcast_to(table.reshape(view), shape + (width,)))
    if layout == "sines_first":
        if any(c.shape[-1] % 2 for c in chunks):
            raise ValueError(f"layout='sines_first' needs even split entries, got {split}")
        chunks = ([c[..., :c.shape[-1] // 2] for c in chunks]
                  + [c[..., c.shape[-1] // 2:] for c in chunks])
    out[...] = np.concatenate(chunks, axis=-1)
    return out
