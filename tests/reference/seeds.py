"""The five seed documents' recipes, reproduced operation for operation.

One function per document in ``../shared/seeds/``, named after its file.  Each
keeps the document's torch operations, their order and their dtypes, because
the point is to measure what those exact float32 programs produce.  The only
change is that a hard-coded base ``10000`` becomes the parameter ``n`` (default:
the document's literal), so the same recipe can be run at other bases.

The documents index columns in pairs (``pe[:, 0::2]`` / ``pe[:, 1::2]``,
``d_model // 2``, stack + flatten), so every recipe here supports even ``d``
only; the docstrings say what each one does with an odd ``d``.

torch is imported at module level: import this module only after
``conftest.require("torch")``.
"""
from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn as nn


# --------------------------------------------------------------------------- 000
def seed_000_052a39587cece21b(max_input_timesteps: int, hidden_size: int, n=10000) -> torch.Tensor:
    """Seed 000 (blog "Deep Learning - Positional Encoding"): the ``pow`` form.

    Reproduces ``PositionalEncoding.__init__``::

        self.time_encodings = torch.zeros((1, max_input_timesteps, hidden_size))
        coeffs = torch.arange(max_input_timesteps, dtype=torch.float32).reshape(-1, 1)
        coeffs = coeffs/torch.pow(
            10000, torch.arange(0, hidden_size, 2, dtype=torch.float32) / hidden_size)
        self.time_encodings [:, :, 0::2] = torch.sin(coeffs)
        self.time_encodings [:, :, 1::2] = torch.cos(coeffs)

    Returns the batch-first ``(1, L, d)`` float32 buffer ``time_encodings``.
    Even ``hidden_size`` only: for an odd one, ``coeffs`` has one column more
    than ``[:, :, 1::2]`` and the cosine assignment raises.
    """
    time_encodings = torch.zeros((1, max_input_timesteps, hidden_size))
    coeffs = torch.arange(max_input_timesteps, dtype=torch.float32).reshape(-1, 1)
    coeffs = coeffs / torch.pow(
        n, torch.arange(0, hidden_size, 2, dtype=torch.float32) / hidden_size
    )
    assert coeffs.dtype == torch.float32
    time_encodings[:, :, 0::2] = torch.sin(coeffs)
    time_encodings[:, :, 1::2] = torch.cos(coeffs)
    return time_encodings


def seed_000_052a39587cece21b_forward(X: torch.Tensor, time_encodings: torch.Tensor) -> torch.Tensor:
    """Seed 000's ``forward``: ``X = X + self.time_encodings[:, :X.shape[1], :].to(X.device)``."""
    X = X + time_encodings[:, : X.shape[1], :].to(X.device)
    return X


# --------------------------------------------------------------------------- 001
def seed_001_c72382e923a91f66(seq_len: int, d_model: int, n=10000.0) -> torch.Tensor:
    """Seed 001 ("LLM study notes"), the pytorch/examples word_language_model buffer.

    Reproduces::

        pe = torch.zeros(seq_len, d_model)
        position = torch.arange(0, seq_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)

    Returns the seq-first ``(L, 1, d)`` float32 buffer.  The ``exp`` argument is a
    float32 product: the Python-double constant ``-log(n)/d`` is used at float32.
    Even ``d_model`` only (odd: the cosine assignment raises).
    """
    pe = torch.zeros(seq_len, d_model)
    position = torch.arange(0, seq_len, dtype=torch.float).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(n) / d_model))
    assert div_term.dtype == torch.float32
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    pe = pe.unsqueeze(0).transpose(0, 1)
    return pe


def seed_001_c72382e923a91f66_forward(x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """The forward of the module seed 001 documents (pytorch/examples, which it links).

    The document stops at the buffer and says it has "exactly the same shape as
    the word embeddings"; pytorch/examples' ``PositionalEncoding.forward`` is
    ``x = x + self.pe[:x.size(0), :]`` followed by dropout (taken as 0 here).
    Seq-first: ``x`` is ``(L, B, d)``.
    """
    x = x + pe[: x.size(0), :]
    return x


# --------------------------------------------------------------------------- 002
def seed_002_c2b1c30ef93e9668(max_length: int, d_model: int, n) -> np.ndarray:
    """Seed 002 ("Positional Encoding", Hunter Phillips): the nested-loop ``gen_pe``.

    Reproduces, with its NumPy/Python-float arithmetic (all float64)::

        pe = np.zeros(max_length*d_model).reshape(max_length, d_model)
        for k in np.arange(max_length):
          for i in np.arange(d_model//2):
            theta = k / (n ** ((2*i)/d_model))
            pe[k, 2*i] = math.sin(theta)
            pe[k, 2*i+1] = math.cos(theta)
        return pe

    Returns a float64 ``(L, d)`` array.  For an odd ``d_model`` the loop stops at
    ``d_model // 2`` pairs and silently leaves the last column 0 (sinpe writes a
    sine there), so use it with even ``d`` only.  The loop is slow: keep L*d small.
    """
    pe = np.zeros(max_length * d_model).reshape(max_length, d_model)
    for k in np.arange(max_length):
        for i in np.arange(d_model // 2):
            theta = k / (n ** ((2 * i) / d_model))
            pe[k, 2 * i] = math.sin(theta)
            pe[k, 2 * i + 1] = math.cos(theta)
    return pe


def seed_002_c2b1c30ef93e9668_torch(max_length: int, d_model: int, n) -> torch.Tensor:
    """Seed 002's vectorised ``gen_pe`` ("the implementation that PyTorch uses").

    Reproduces::

        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(n) / d_model))
        k = torch.arange(0, max_length).unsqueeze(1)
        pe = torch.zeros(max_length, d_model)
        pe[:, 0::2] = torch.sin(k * div_term)
        pe[:, 1::2] = torch.cos(k * div_term)
        pe = pe.unsqueeze(0)

    dtypes as written: ``torch.arange(0, d_model, 2)`` and ``k`` are int64; int64
    times a Python float promotes to the default dtype float32, and int64 ``k``
    times float32 ``div_term`` is float32 (``k`` converted exactly below 2**24).
    So this is the same float32 ``exp`` form as seed 001.  Returns ``(1, L, d)``.
    Even ``d_model`` only.
    """
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(n) / d_model))
    k = torch.arange(0, max_length).unsqueeze(1)
    assert k.dtype == torch.int64 and div_term.dtype == torch.float32
    pe = torch.zeros(max_length, d_model)
    pe[:, 0::2] = torch.sin(k * div_term)
    pe[:, 1::2] = torch.cos(k * div_term)
    pe = pe.unsqueeze(0)
    return pe


class Seed002PositionalEncoding(nn.Module):
    """Seed 002's ``PositionalEncoding`` module, verbatim but for the type hints.

    ``__init__`` builds the buffer with the same int64 ``k`` / int64 ``arange``
    times Python float (-> float32) as the vectorised ``gen_pe``, base 10000.0
    hard-coded as in the document.  ``forward`` is::

        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)

    Use ``dropout=0.0`` (as the document does) to compare values.  Batch-first.
    """

    def __init__(self, d_model: int, dropout: float = 0.1, max_length: int = 5000):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_length, d_model)
        k = torch.arange(0, max_length).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(k * div_term)
        pe[:, 1::2] = torch.cos(k * div_term)
        pe = pe.unsqueeze(0)
        self.register_buffer("pe", pe)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.pe[:, : x.size(1)].requires_grad_(False)
        return self.dropout(x)


# --------------------------------------------------------------------------- 003
def seed_003_c1caa5f3267db948(max_seq_length: int, d_model: int, n=10000) -> torch.Tensor:
    """Seed 003 (transformers_from_scratch notebook): ``pow`` + stack + flatten.

    Reproduces ``PositionalEncoding.forward`` (In [22])::

        even_i = torch.arange(0, self.d_model, 2).float()
        denominator = torch.pow(10000, even_i/self.d_model)
        position = torch.arange(self.max_seq_length).reshape(self.max_seq_length, 1)
        even_pe = torch.sin(position / denominator)
        odd_pe = torch.cos(position/ denominator)
        stacked = torch.stack([even_pe, odd_pe], dim=2)
        pe = torch.flatten(stacked, start_dim=1, end_dim=2)

    ``position`` is int64; int64 / float32 is float32.  Returns ``(L, d)``
    float32.  Even ``d_model`` only: for odd d, stack + flatten gives d + 1
    columns (the notebook's per-column formula does define an odd d, and
    sinpe follows that formula, but this code does not).
    """
    even_i = torch.arange(0, d_model, 2).float()
    denominator = torch.pow(n, even_i / d_model)
    position = torch.arange(max_seq_length).reshape(max_seq_length, 1)
    even_pe = torch.sin(position / denominator)
    odd_pe = torch.cos(position / denominator)
    assert even_pe.dtype == torch.float32
    stacked = torch.stack([even_pe, odd_pe], dim=2)
    pe = torch.flatten(stacked, start_dim=1, end_dim=2)
    return pe


def seed_003_c1caa5f3267db948_forward(x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """Seed 003 stops at the table; adding it is the usual broadcast ``x + pe`` (not in the document)."""
    return x + pe[: x.shape[-2]]


# --------------------------------------------------------------------------- 004
def seed_004_2445c59576344ddd(seq_len: int, d_model: int, n=10000.0) -> torch.Tensor:
    """Seed 004 ("Sinusoidal (Fixed) Positional Encoding"): ``sinusoidal_position_encoding``.

    Reproduces::

        pe = torch.zeros(seq_len, d_model)
        pos = torch.arange(seq_len).unsqueeze(1)
        i = torch.arange(0, d_model, 2)
        div_term = torch.exp(-i / d_model * math.log(10000.0))
        pe[:, 0::2] = torch.sin(pos * div_term)
        pe[:, 1::2] = torch.cos(pos * div_term)
        return pe

    ``i`` is int64; ``-i / d_model`` is true division -> float32, then a float32
    product with ``log(n)``: the ``exp`` argument sees three float32 roundings.
    Returns ``(L, d)`` float32.  Even ``d_model`` only.
    """
    pe = torch.zeros(seq_len, d_model)
    pos = torch.arange(seq_len).unsqueeze(1)
    i = torch.arange(0, d_model, 2)
    div_term = torch.exp(-i / d_model * math.log(n))
    assert div_term.dtype == torch.float32
    pe[:, 0::2] = torch.sin(pos * div_term)
    pe[:, 1::2] = torch.cos(pos * div_term)
    return pe


def seed_004_2445c59576344ddd_forward(x: torch.Tensor, pe: torch.Tensor) -> torch.Tensor:
    """Seed 004's use: ``x = x + pe.unsqueeze(0)  # broadcast pe on batch_size dimension``."""
    x = x + pe.unsqueeze(0)
    return x
