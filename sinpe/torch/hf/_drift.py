"""sinpe.torch.drift: what exact RoPE changes in a loaded transformers model, measured.

Exact RoPE is relative: the same tokens placed at positions ``s .. s + T - 1``
instead of ``0 .. T - 1`` give the same attention scores and the same logits.
transformers forms each angle ``p * w`` in float32, so its caches drift from the
exact rotation as ``p`` grows (about ``p * w * 2**-24``), and the model's outputs
with them.  :func:`drift` places the same tokens at both offsets and reports what
changes, for the model as it is and patched by :func:`sinpe.torch.patch`.

What a position "cannot take" (a ``ValueError`` naming it): a last position
``s + T - 1`` past ``sinpe.MAX_POSITION`` (``2**24``, where sinpe's accuracy
promise ends), and, for the rope types whose frequencies switch with the length
(``dynamic``, ``longrope``), a placement reaching past the switch: there the two
placements use different frequencies by design, so their difference would measure
the switch, not the drift (and transformers' module would change its own state).
Positions past ``max_position_embeddings`` are measured: that is where long-context
use goes, and the drift does not care what the model was trained on.
"""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Optional, Sequence

import numpy as np
from numpy.typing import NDArray
import torch
from torch import nn

import sinpe
from sinpe.torch.hf._adapter import patch_model

KEYS = ("positions", "logits_hf", "logits_sinpe", "kl_hf", "kl_sinpe", "top1_hf",
        "top1_sinpe", "cache_hf", "cache_sinpe")
_SWITCHING = ("dynamic", "longrope")  # rope types whose frequencies follow the length


@dataclass
class _Rotary:
    """A text rotary module of the model, one layer type of it, and its exact caches'
    recipe: the float32 frequencies transformers computes for the config (a new module
    of the same class; those the model was trained with, even where ``model.to(dtype)``
    has rounded the module's own buffer), the attention factor, and the layout of the
    module's output (``cat(a, a)``, pairs ``a0 a0 a1 a1 ...``, or complex ``freqs_cis``)."""

    name: str
    module: nn.Module
    layer_type: Optional[str]
    freq: NDArray[np.float64]  # float64 values of the float32 frequencies
    scaling: float
    layout: str = "concatenated"

    def __call__(self, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        args = (x, position_ids) if self.layer_type is None else (x, position_ids, self.layer_type)
        out = self.module(*args)
        if isinstance(out, torch.Tensor) and out.is_complex():
            return out.real, out.imag
        return tuple(out[:2])

    def exact(self, positions: torch.Tensor,
              layout: str) -> tuple[NDArray[np.float64], NDArray[np.float64]]:
        angles = positions.double().cpu().numpy()[..., None] * self.freq
        cos, sin = np.cos(angles) * self.scaling, np.sin(angles) * self.scaling
        if layout == "concatenated":
            return np.concatenate([cos, cos], -1), np.concatenate([sin, sin], -1)
        if layout == "interleaved":
            return np.repeat(cos, 2, -1), np.repeat(sin, 2, -1)
        return cos, sin  # "complex": one value per pair

    def error(self, x: torch.Tensor, positions: torch.Tensor) -> float:
        """max |cos - exact|, |sin - exact| of the module's output at ``positions``."""
        got = self(x, positions)
        want = self.exact(positions, self.layout)
        return max(float(np.abs(g.double().cpu().numpy() - w).max()) for g, w in zip(got, want))


def drift(model: nn.Module, input_ids: Optional[torch.Tensor] = None, *,
          positions: Sequence[int] = (2**10, 2**14, 2**17, 2**20), tokens: int = 128,
          seed: int = 0, progress: Optional[Callable[[str], None]] = None
          ) -> dict[str, list[Any]]:
    """The same tokens at two offsets: what the model's RoPE changes, and what sinpe's does.

    Exact RoPE keeps attention, and so the logits, the same when a sequence moves
    from positions ``0 .. T - 1`` to ``s .. s + T - 1``.  For each offset ``s`` in
    ``positions`` this runs ``model`` (a loaded transformers model with logits, e.g.
    a ``*ForCausalLM``) on the same ``input_ids`` at ``position_ids = s + arange(T)``
    and at ``arange(T)``, as it is (``"hf"``) and patched by
    :func:`sinpe.torch.patch` (``"sinpe"``, undone afterwards), and measures:

    - ``logits``: the largest ``|logits at s - logits at 0|``;
    - ``kl``: the mean over tokens of ``KL(p_0 || p_s)`` between the next-token
      distributions at the two placements (in float64, nats), and ``top1``: the
      share of tokens whose most likely next token is the same at both;
    - ``cache``: the largest ``|cos - exact|`` and ``|sin - exact|`` of the model's
      rotary modules' output at positions ``s .. s + T - 1`` (every layer type),
      the exact values from the frequencies transformers computes for the config in
      float32 (those the model was trained with), the angles and the attention
      factor in double.

    Parameters
    ----------
    model : torch.nn.Module
        A transformers model whose text RoPE comes from a ``*RotaryEmbedding``
        module, and which ``sinpe.torch.patch`` patches.  It is run in eval mode
        under ``torch.no_grad`` and left as it was (its training flag restored;
        parameters, buffers and outputs bit for bit).
    input_ids : torch.Tensor, optional
        Token ids, of shape ``(T,)`` or ``(B, T)``; default ``tokens`` random ids
        from ``seed`` (uniform over the input embedding's rows).
    positions : sequence of int
        The offsets ``s`` (``s >= 0``); ``s + T - 1`` at most ``sinpe.MAX_POSITION``,
        and short of the frequency switch of ``dynamic`` and ``longrope`` rope types
        (past it the two placements use other frequencies by design).
    tokens : int
        How many random ids when ``input_ids`` is None.
    seed : int
        Seed of the random ids (a generator of its own: torch's global one is untouched).
    progress : callable, optional
        Called with a short line before each forward pass (``sinpe drift`` prints it).

    Returns
    -------
    dict
        Lists, one entry per offset: ``positions``, ``logits_hf``, ``logits_sinpe``,
        ``kl_hf``, ``kl_sinpe``, ``top1_hf``, ``top1_sinpe``, ``cache_hf``,
        ``cache_sinpe`` (floats).

    Raises
    ------
    TypeError, ValueError
        Before any forward pass, for a model that is not a transformers model with a
        text rotary module, bad ids, offsets or counts, a position the model cannot
        take (above), or a model ``sinpe.torch.patch`` refuses (its message).

    Examples
    --------
    >>> import torch, transformers, sinpe.torch
    >>> config = transformers.LlamaConfig(vocab_size=64, hidden_size=64, intermediate_size=64,
    ...                                   num_hidden_layers=1, num_attention_heads=2)
    >>> torch.manual_seed(0) and None
    >>> model = transformers.LlamaForCausalLM(config)
    >>> result = sinpe.torch.drift(model, positions=[2**17], tokens=16)
    >>> sorted(result)
    ['cache_hf', 'cache_sinpe', 'kl_hf', 'kl_sinpe', 'logits_hf', 'logits_sinpe', 'positions', 'top1_hf', 'top1_sinpe']
    >>> result["cache_sinpe"][0] <= 2**-25 < result["cache_hf"][0]
    True
    """
    rotaries, embedding = _check_model(model)
    ids = _check_ids(input_ids, tokens, seed, embedding)
    offsets = _check_positions(positions, ids.shape[-1], model)
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a callable or None, got {type(progress).__name__}")
    total = 2 * (len(offsets) + 1)
    count = iter(range(1, total + 1))

    def say(line: str) -> None:
        if progress is not None:
            progress(f"[{next(count)}/{total}] {line}")

    training = model.training
    result: dict[str, list[Any]] = {key: [] for key in KEYS}
    result["positions"] = list(offsets)
    try:
        model.eval()
        with torch.no_grad():
            x = torch.zeros(1, dtype=embedding.weight.dtype, device=embedding.weight.device)
            base = _arange(ids, 0)
            for rotary in rotaries:
                rotary.layout = _layout(rotary, x, base)
            handle = patch_model(model, "model")  # refuses before it changes anything
            try:
                _measure(model, ids, offsets, rotaries, x, "sinpe", result, say)
            finally:
                handle.undo()
            _measure(model, ids, offsets, rotaries, x, "hf", result, say)
    finally:
        model.train(training)
    return result


def _measure(model: nn.Module, ids: torch.Tensor, offsets: list[int], rotaries: list[_Rotary],
             x: torch.Tensor, mode: str, result: dict[str, list[Any]],
             say: Callable[[str], None]) -> None:
    who = "patched by sinpe" if mode == "sinpe" else "as loaded (hf)"
    say(f"{who}: positions 0..{ids.shape[-1] - 1}")
    reference = _logits(model, ids, 0)
    log_p = torch.log_softmax(reference, -1)
    for s in offsets:
        say(f"{who}: positions {s}..{s + ids.shape[-1] - 1}")
        shifted = _logits(model, ids, s)
        log_q = torch.log_softmax(shifted, -1)
        kl = (log_p.exp() * (log_p - log_q)).sum(-1)
        same = reference.argmax(-1) == shifted.argmax(-1)
        result[f"logits_{mode}"].append(float((shifted - reference).abs().max()))
        result[f"kl_{mode}"].append(float(kl.mean()))
        result[f"top1_{mode}"].append(float(same.double().mean()))
        at = _arange(ids, s)
        result[f"cache_{mode}"].append(max(r.error(x, at) for r in rotaries))


def _logits(model: nn.Module, ids: torch.Tensor, offset: int) -> torch.Tensor:
    out = model(input_ids=ids, position_ids=_arange(ids, offset), use_cache=False)
    logits = getattr(out, "logits", None)
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"drift needs a model whose output has logits (a *ForCausalLM); "
                        f"{type(model).__name__} returned {type(out).__name__}")
    return logits.double()


def _arange(ids: torch.Tensor, offset: int) -> torch.Tensor:
    T = ids.shape[-1]
    return (offset + torch.arange(T, device=ids.device)).expand(ids.shape[0], T)


def _layout(rotary: _Rotary, x: torch.Tensor, positions: torch.Tensor) -> str:
    """The layout of the module's output: the one the exact values fit at the first
    positions, where transformers' float32 angles are still within ~1e-6 and a wrong
    layout is off by O(1).  Refuses an output none fits."""
    cos, _ = rotary(x, positions)
    width = cos.shape[-1]
    candidates = (["concatenated", "interleaved"] if width == 2 * len(rotary.freq)
                  else ["complex"] if width == len(rotary.freq) else [])
    errors = {}
    for layout in candidates:
        want, _ = rotary.exact(positions, layout)
        errors[layout] = float(np.abs(cos.double().cpu().numpy() - want).max())
    best = min(errors, key=errors.__getitem__, default=None)
    if best is None or errors[best] > 0.01 * max(rotary.scaling, 1.0):
        raise ValueError(
            f"drift: the rotary module {rotary.name} ({type(rotary.module).__name__}) returns "
            f"caches of width {width} that are not cos/sin of its {len(rotary.freq)} "
            "frequencies in any layout drift knows (cat(a, a), pairs, complex)")
    return best


# -- checks ---------------------------------------------------------------------------------


def _check_model(model: Any) -> tuple[list[_Rotary], nn.Embedding]:
    if not isinstance(model, nn.Module) or getattr(model, "config", None) is None:
        raise TypeError(f"model must be a loaded transformers model (an nn.Module with a "
                        f"config), got {type(model).__name__}")
    get = getattr(model, "get_input_embeddings", None)
    embedding = get() if callable(get) else None
    if not isinstance(embedding, nn.Embedding):
        raise TypeError(f"drift needs a model with token embeddings (get_input_embeddings()); "
                        f"{type(model).__name__} has none")
    rotaries = [r for name, module in model.named_modules() for r in _rotaries_of(name, module)]
    if not rotaries:
        raise ValueError(f"drift: {type(model).__name__} has no text rotary module (a "
                         "*RotaryEmbedding with forward(x, position_ids)) to measure")
    return rotaries, embedding


def _rotaries_of(name: str, module: nn.Module) -> list[_Rotary]:
    """The layer types of ``module`` if it is a transformers text rotary module."""
    if not type(module).__name__.endswith("RotaryEmbedding"):
        return []
    parameters = list(inspect.signature(type(module).forward).parameters)
    if parameters[1:3] != ["x", "position_ids"]:
        return []  # a vision tower's module: other inputs
    config = getattr(module, "config", None)
    try:
        fresh = type(module)(config)  # the float32 frequencies of the config
    except Exception as exc:  # noqa: BLE001 - any failure: say which module, and why
        raise ValueError(f"drift: cannot rebuild the rotary module {name} "
                         f"({type(module).__name__}) from its config: {exc}") from exc
    types = getattr(module, "layer_types", None)
    layer_types: list[Optional[str]] = (
        [t for t in types if isinstance(getattr(fresh, f"{t}_inv_freq", None), torch.Tensor)]
        if isinstance(types, (list, tuple)) else [None])
    found = []
    for layer_type in layer_types:
        prefix = "" if layer_type is None else f"{layer_type}_"
        freq = getattr(fresh, f"{prefix}original_inv_freq", getattr(fresh, f"{prefix}inv_freq"))
        scaling = float(getattr(fresh, f"{prefix}attention_scaling", 1.0))
        found.append(_Rotary(name or type(module).__name__, module, layer_type,
                             freq.detach().double().cpu().numpy(), scaling))
    return found


def _check_ids(input_ids: Any, tokens: Any, seed: Any, embedding: nn.Embedding) -> torch.Tensor:
    _check_int(seed, "seed")
    vocab = embedding.num_embeddings
    device = embedding.weight.device
    if input_ids is None:
        _check_int(tokens, "tokens")
        if tokens < 1:
            raise ValueError(f"tokens must be at least 1, got {tokens}")
        generator = torch.Generator().manual_seed(seed)
        return torch.randint(0, vocab, (1, tokens), generator=generator).to(device)
    if not isinstance(input_ids, torch.Tensor):
        raise TypeError(f"input_ids must be a torch.Tensor of token ids or None, got "
                        f"{type(input_ids).__name__}")
    if input_ids.dtype.is_floating_point or input_ids.is_complex() or input_ids.dtype == torch.bool:
        raise TypeError(f"input_ids must hold integer token ids, got {input_ids.dtype}")
    if input_ids.dim() not in (1, 2) or input_ids.shape[-1] == 0 or input_ids.numel() == 0:
        raise ValueError(f"input_ids must have shape (T,) or (B, T) with T >= 1, got "
                         f"{tuple(input_ids.shape)}")
    low, high = int(input_ids.min()), int(input_ids.max())
    if low < 0 or high >= vocab:
        raise ValueError(f"input_ids must lie in 0..{vocab - 1} (the model's vocabulary), got "
                         f"{low}..{high}")
    ids = input_ids.reshape(-1, input_ids.shape[-1]).long()
    return ids.to(device)


def _check_int(value: Any, name: str) -> None:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")


def _check_positions(positions: Any, T: int, model: nn.Module) -> list[int]:
    if isinstance(positions, (str, bytes)) or not isinstance(positions, Sequence):
        raise TypeError(f"positions must be a sequence of ints, got {type(positions).__name__}")
    if len(positions) == 0:
        raise ValueError("positions must name at least one offset")
    offsets = []
    switch = _switch_length(model)
    for i, s in enumerate(positions):
        _check_int(s, f"positions[{i}]")
        s = int(s)
        if s < 0:
            raise ValueError(f"positions[{i}] = {s}: offsets must be >= 0")
        if s + T - 1 > sinpe.MAX_POSITION:
            raise ValueError(
                f"positions[{i}] = {s}: its last position {s} + {T} - 1 lies past "
                f"sinpe.MAX_POSITION = 2**24, where sinpe's accuracy promise ends")
        if switch is not None and s + T > switch[0]:
            raise ValueError(
                f"positions[{i}] = {s}: the model's {switch[1]} rope changes its frequencies "
                f"past {switch[0]} positions, so the tokens at {s}..{s + T - 1} and at "
                f"0..{T - 1} would use different frequencies by design; drift measures "
                f"offsets with s + T <= {switch[0]}")
        offsets.append(s)
    if switch is not None and T > switch[0]:
        raise ValueError(f"input_ids: {T} tokens reach past the {switch[1]} rope's switch at "
                         f"{switch[0]} positions")
    return offsets


def _switch_length(model: nn.Module) -> Optional[tuple[int, str]]:
    """The shortest length past which a rope type of the model switches frequencies
    (as transformers' ``dynamic_rope_update``: ``dynamic`` past the module's
    ``max_seq_len_cached``, ``longrope`` past ``original_max_position_embeddings``)."""
    found = []
    for module in model.modules():
        kinds = getattr(module, "rope_type", None)
        if not type(module).__name__.endswith("RotaryEmbedding") or kinds is None:
            continue
        config = getattr(module, "config", None)
        params = getattr(config, "rope_parameters", None) or {}
        for layer_type, kind in (kinds.items() if isinstance(kinds, dict) else [(None, kinds)]):
            if not any(name in str(kind) for name in _SWITCHING):
                continue
            if "dynamic" in str(kind):
                limit = getattr(module, f"{layer_type}_max_seq_len_cached" if layer_type else
                                "max_seq_len_cached", getattr(module, "max_seq_len_cached", None))
            else:
                own = params.get(layer_type, params) if layer_type else params
                limit = own.get("original_max_position_embeddings")
            if limit is not None:
                found.append((int(limit), str(kind)))
    return min(found) if found else None
