"""sinpe.torch's rotary module: ``RotaryEmbedding``, which :mod:`sinpe.torch`
re-exports (use it from there).

``RotaryEmbedding`` stands in for a transformers ``*RotaryEmbedding`` module: the
frequencies and attention factor of the model (transformers' own float32 ones by
default), the angles exact, and the caches in the form the family's module returns
them, looked up in tables kept per layer type, device and dtype
(:mod:`sinpe.torch._rotary_tables`), so that a decoding step costs an index, not a
cos and a sin.  The family's module is found, called and checked against by
:mod:`sinpe.torch._rotary_family`; multi-axis modules (vision-language text models)
take their sections and caches from :mod:`sinpe.torch._multi_axis`.  transformers
is imported lazily, by the functions that need it.
"""
from __future__ import annotations

import functools
import threading
from typing import Any, Optional, cast

import numpy as np
import torch
from torch import nn

import sinpe
from sinpe._rope_types import rope_frequencies
from sinpe.torch import _multi_axis as _vl
from sinpe.torch import _ops
from sinpe.torch import _rotary_family as _family
from sinpe.torch._rotary_tables import (
    Caches,
    Frequencies,
    _Rotary,
    direct_caches,
    empty_caches,
    lookup,
)
from sinpe.torch._tensors import (
    _DTYPES,
    _SUPPORTED,
    _check_dtype,
    _device,
    _device_path,
    _device_path_on,
    _one_torch_thread,
)
from sinpe.torch._verify import FORMS

__all__ = ["RotaryEmbedding"]

_FREQUENCIES = ("model", "exact")


class RotaryEmbedding(nn.Module):
    """A transformers rotary-embedding module, with sinpe's exact cos and sin.

    ``RotaryEmbedding(config)`` stands in for the ``*RotaryEmbedding`` module of
    the model that ``config`` (a transformers config) configures:
    ``forward(x, position_ids)`` (``forward(x, position_ids, layer_type)`` for
    configs with rope parameters per layer type, as Gemma 3's module) returns
    what the model's module returns, with HF's shapes and dtypes, on
    ``x.device``, the attention factor applied, for every rope type
    (``default``, ``linear``, ``dynamic``, ``yarn``, ``longrope``, ``llama3``,
    ``proportional``), with ``dynamic``'s and ``longrope``'s switches on
    ``max(position_ids) + 1`` made as transformers makes them.  The forms
    (``layout``), found by calling the family's module once:

    - ``"concatenated"``: ``(cos, sin)`` of shape ``position_ids.shape + (r,)``,
      HF's ``cat(freqs, freqs)`` (Llama and most families); ``"interleaved"``:
      each value twice in a row (Cohere's ``repeat_interleave``);
    - ``"half"``: ``(cos, sin)`` of width ``r/2``, each frequency once (GPT-OSS,
      DeepSeek-V4);
    - ``"complex"``: one complex64 ``freqs_cis = cos + i sin`` of width ``r/2``
      (Llama 4's and DeepSeek-V2's ``torch.polar``), whatever ``x.dtype``;

    in ``x.dtype`` or the family's fixed dtype (OLMo's and LFM3's float32).
    ``r`` is the rotary width.

    - Frequencies: ``frequencies="model"`` (default) uses the model's own, the
      float32 ``inv_freq`` transformers computes for the config (by its own
      functions and the family's module, bit for bit; without transformers,
      :func:`sinpe.rope_frequencies` rounded to float32, which may differ from
      transformers' in the last bits); ``"exact"`` uses
      :func:`sinpe.rope_frequencies` in double.
    - Angles: always exact, ``p * w`` in double; cos and sin times the
      attention factor in double, rounded once to the output dtype.
      transformers forms the angle in float32 (off by ``2e-3`` at position
      ``2**17``).
    - Tables: the rows are looked up in a table kept per layer type, device
      and dtype, made by sinpe's kernel (on the CPU, then moved once), sized by
      the positions asked for, never by ``max_position_embeddings``: the first
      covers the next power of two above the largest position (at least
      ``MIN_ROWS`` = 256), and it doubles as calls go further, up to
      ``TABLE_BYTES`` (128 MiB, cos and sin together) per table.  A config may
      say any ``max_position_embeddings``: a 10M-context model's first
      decoding steps cost what an 8k one's cost.  Positions past the cap,
      negative or non-integral ones, and ``dynamic``'s frequencies past the
      trained length (which change from call to call) are computed for the
      call, with the same values.

    The construction checks sinpe's caches against a new module of the family
    (form, shape, dtype, device, and values within the float32 rounding of
    transformers' angles, on a few positions short of any switch), and with
    ``frequencies="exact"`` that the module computes the config's rope type
    with frequencies within their float32 error of sinpe's.

    ``layer_type`` picks one layer type of a per-layer-type config (then
    ``forward`` needs none; the layer types served are those the family's module
    holds, e.g. LFM3's attention layers); ``layout`` (one of the forms above) and
    ``output_dtype`` (a fixed dtype instead of ``x.dtype``) default to the
    family's module, else to ``"concatenated"`` and ``x.dtype``.  ``device`` is
    accepted as transformers' modules take it; tables are made on ``x.device``
    when first needed.  It can be built under ``torch.device("meta")`` (the
    frequencies are read on the CPU); on the meta device ``forward`` returns
    meta tensors of the right shapes and dtypes.

    The module has no parameters and no buffers: ``state_dict()`` is empty, as
    transformers' (its ``inv_freq`` is not persistent), ``model.to(dtype)``
    cannot round its frequencies, and ``model.to(device)`` moves nothing (new
    tables are made on the new device).  ``inv_freq`` and
    ``attention_scaling`` are there to read (one layer type).
    :meth:`from_module` builds it from a transformers module itself.

    Multi-axis RoPE (vision-language text models: Qwen2-VL's and Qwen2.5-VL's
    ``mrope_section``, Qwen3-VL's interleaved one; a whole VL config stands for
    its ``text_config``): ``forward(x, position_ids)`` takes ``position_ids`` of
    shape ``(3, B, L)`` (time, height and width positions; ``(B, L)`` counts for
    all three, as transformers broadcasts it) and returns ``(cos, sin)`` of shape
    ``(B, L, r)``, each frequency pair's angle exact from its section's row: the
    model's ``recomposition_frequencies`` done by one kernel call
    (``sinpe.rope(..., sections=)``: per call, which on a decoding step costs
    less than gathering sections from kept tables).  ``sections`` and
    ``sections_layout`` say which (None for single-axis modules); they are
    those of the family's module, seen by calling it (else the config's
    ``mrope_section`` and ``mrope_interleaved``).

    Raises ``TypeError``/``ValueError`` for a config it cannot serve, naming the
    config key or what differs: sinpe's checks of the rope parameters first (no
    ``rope_parameters``, an unknown rope type or bad values, as
    :func:`sinpe.rope_frequencies`), then transformers' failures to build or call
    the family's module, a module whose forward sinpe cannot stand in for
    (another signature, another form, sections sinpe's rules cannot give, caches
    the check above refuses); and in ``forward`` for a non-tensor or boolean
    ``position_ids``, an unsupported ``x.dtype``, a layer type the module does
    not have, positions past ``sinpe.MAX_POSITION`` (the message names them), or
    multi-axis ``position_ids`` of another shape.  ``position_ids`` may have any
    integer dtype (int8 to int64, uint8) or be real.

    >>> import torch, transformers, sinpe.torch
    >>> config = transformers.LlamaConfig(hidden_size=64, num_attention_heads=4,
    ...                                   max_position_embeddings=10_485_760)
    >>> rotary = sinpe.torch.RotaryEmbedding(config)
    >>> cos, sin = rotary(torch.zeros(1, dtype=torch.bfloat16), torch.tensor([[5]]))
    >>> cos.shape, cos.dtype
    (torch.Size([1, 1, 16]), torch.bfloat16)
    """

    def __init__(self, config: Any, device: Any = None, *, frequencies: str = "model",
                 layer_type: Optional[str] = None, layout: Optional[str] = None,
                 output_dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        _check_choice(frequencies, "frequencies", _FREQUENCIES)
        if layout is not None:
            _check_choice(layout, "layout", FORMS)
        if output_dtype is not None and output_dtype is not torch.complex64:
            _check_dtype(output_dtype)
        place = None if device is None else _device(device)
        config = _text_config(config)
        types, per_type = _config_layer_types(config, layer_type)
        exact = _sinpes_frequencies(config, types)  # sinpe's checks, before transformers'
        with torch.device("cpu"):  # transformers' module is read on the CPU (meta too)
            hf = _family.family_module(config)
            self._setup(config, hf, hf, frequencies, layer_type, types, per_type, exact,
                        layout, output_dtype)
        self.prepare(place)

    def prepare(self, device: Any = None) -> None:
        """Makes the exact angle tables of the device path on ``device`` (a torch
        device other than the CPU, or the CPU with ``SINPE_TORCH_PATH=device``; None:
        the CPU where that is set, else nothing), as the first call on the device
        would: a few MiB per frequency set, made by the kernel and moved once.
        ``torch.compile`` finds them made (it cannot make them while it traces).
        The constructor prepares its ``device``, :func:`sinpe.torch.patch` the
        model's."""
        place = torch.device("cpu") if device is None else _device(device)
        if not _device_path_on(place):
            return
        for rotary in self._rotaries.values():
            rotary.prepare(place)

    @classmethod
    def from_module(cls, module: nn.Module, *, frequencies: str = "model",
                    layer_type: Optional[str] = None) -> RotaryEmbedding:
        """The stand-in for ``module``, a transformers rotary module (e.g. a model's
        ``model.rotary_emb``): its config, rope type and attention factor, its own
        float32 frequencies (its ``original_inv_freq``; a new module's of its class
        and config if ``model.to(dtype)`` has cast them or it is on the meta
        device), the form and dtype its forward returns, checked as the
        constructor checks (on a new module of its class and config: the module
        itself is not called or changed)."""
        _check_choice(frequencies, "frequencies", _FREQUENCIES)
        config = getattr(module, "config", None)
        if not isinstance(module, nn.Module) or config is None:
            raise TypeError(f"module must be a transformers rotary module (an nn.Module with a "
                            f"config), got {type(module).__name__}")
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        config = _text_config(config)
        types, per_type = _config_layer_types(config, layer_type)
        exact = _sinpes_frequencies(config, types)
        with torch.device("cpu"):
            hf = _family.rebuilt(module)
            self._setup(config, hf, module, frequencies, layer_type, types, per_type, exact,
                        None, None)
        return self

    # -- construction

    def _setup(self, config: Any, hf: Optional[nn.Module], own: Optional[nn.Module],
               frequencies: str, layer_type: Optional[str], types: list[Optional[str]],
               per_type: bool, exact: dict[Optional[str], Frequencies],
               layout: Optional[str], output_dtype: Optional[torch.dtype]) -> None:
        """The rotaries of ``types`` (restricted to those ``hf``, the family's module,
        holds), their form, and the checks against ``hf``; ``own``: the module whose
        frequencies are the model's (``hf`` itself, or the module ``from_module`` was
        given)."""
        if hf is not None:
            types = _held_types(config, hf, layer_type, types)
        self.config = config
        self.frequencies = frequencies
        self.layer_type = layer_type
        self._per_type = per_type and layer_type is None
        self._lock = threading.Lock()
        self._rotaries = {t: _rotary(config, hf, own, frequencies, t, exact[t]) for t in types}
        first = self._rotaries[types[0]]
        self.rope_type: Any = ({t: r.rope_type for t, r in self._rotaries.items()}
                               if self._per_type else first.rope_type)
        form, fixed = _family.probe(hf, types[0], first.width) if hf is not None else (None, None)
        self.layout = layout or form or "concatenated"
        if self.layout == "complex":
            if output_dtype not in (None, torch.complex64):
                raise ValueError(f"output_dtype={output_dtype}: the complex form's caches are "
                                 "torch.complex64")
            output_dtype = torch.complex64
        elif fixed is torch.complex64 or output_dtype is torch.complex64:
            raise ValueError(f"output_dtype=torch.complex64 needs layout='complex' (the form of "
                             f"freqs_cis), not layout={self.layout!r}")
        self.output_dtype = output_dtype if output_dtype is not None else fixed
        # multi-axis RoPE (Qwen2-VL's, Qwen3-VL's): the sections the family's module uses
        for t, rotary in self._rotaries.items():
            rotary.form = self.layout
            rotary.sections, rotary.sections_layout = (
                _module_sections(hf, rotary.width, form or "concatenated", t) if hf is not None
                else _vl.config_sections(config, rotary.width) if t is None else (None, None))
            if rotary.sections is not None and self.layout not in ("concatenated",
                                                                   "interleaved"):
                raise ValueError(f"layout={self.layout!r}: multi-axis caches (sections "
                                 f"{rotary.sections}) come concatenated or interleaved")
        self.sections, self.sections_layout = first.sections, first.sections_layout
        if hf is not None:  # sinpe's caches of the model's frequencies against the module's
            with _one_torch_thread():
                _family.check_caches(hf, functools.partial(self._model_caches, form, fixed),
                                     types)
            if frequencies == "exact":
                for t, rotary in self._rotaries.items():
                    _family.check_exact(hf, config, t, rotary.freq, rotary.model[0])

    def _model_caches(self, form: Optional[str], fixed: Optional[torch.dtype], x: torch.Tensor,
                      position_ids: torch.Tensor, layer_type: Optional[str]) -> Caches:
        """The caches of the model's frequencies at ``position_ids``, computed for the
        call, in the family module's form and dtype: what the construction checks."""
        rotary = self._rotaries[layer_type]
        freq, scaling = rotary.model
        dtype = fixed if fixed is not None else x.dtype
        if rotary.sections is not None and rotary.sections_layout is not None:
            return _vl.section_caches(_vl.broadcast_rows(position_ids), freq, scaling,
                                      rotary.sections, rotary.sections_layout,
                                      form or "concatenated", dtype, x.device)
        return direct_caches(position_ids, freq, scaling, form or "concatenated", dtype,
                             x.device)

    # -- what HF's module has

    @property
    def inv_freq(self) -> torch.Tensor:
        """The frequencies in use at construction, float32 (one layer type)."""
        return torch.from_numpy(self._single().freq.astype(np.float32))

    @property
    def attention_scaling(self) -> float:
        return self._single().scaling

    @property
    def max_seq_len_cached(self) -> Optional[float]:
        """dynamic's state, as transformers' module keeps it (one layer type)."""
        return self._single().max_seq_len_cached

    @property
    def original_max_seq_len(self) -> Optional[int]:
        return self._single().trained

    def _single(self) -> _Rotary:
        if len(self._rotaries) != 1:
            raise AttributeError("this module holds several layer types "
                                 f"({list(self._rotaries)}): build one with layer_type=")
        return next(iter(self._rotaries.values()))

    # copy.deepcopy and pickle (of a model holding the module, or a patched one): the
    # lock is not copied, each copy gets its own
    def __getstate__(self) -> dict[str, Any]:
        state = self.__dict__.copy()
        state.pop("_lock", None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # type: ignore[no-untyped-call]
        self._lock = threading.Lock()

    def extra_repr(self) -> str:
        width = next(iter(self._rotaries.values())).width
        dtype = "x.dtype" if self.output_dtype is None else str(self.output_dtype)
        sections = ("" if self.sections is None else
                    f", sections={self.sections}, sections_layout={self.sections_layout!r}")
        return (f"rope_type={self.rope_type!r}, rotary_dim={width}, "
                f"frequencies={self.frequencies!r}, layout={self.layout!r}, dtype={dtype}"
                + sections)

    # -- forward

    # (no torch.no_grad(): nothing here records a graph, the tables require no grad;
    # the decorator would cost a decoding step a third of its time)
    def forward(self, x: torch.Tensor, position_ids: torch.Tensor,
                layer_type: Optional[str] = None) -> Caches:
        rotary = self._rotary_of(layer_type)
        if _ops.is_compiling():  # torch.compile, torch.export: one custom op, no .item()
            traced = _ops.rotary_forward(self, rotary, x, position_ids)
            if traced is not None:  # (None: dynamic, whose state moves: HF's breaks the graph)
                return traced
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        dtype = self.output_dtype
        if dtype is None:
            dtype = x.dtype
            if dtype not in _DTYPES:
                raise TypeError(f"x must have dtype {_SUPPORTED} (the caches' dtype), "
                                f"got {x.dtype}")
        if not isinstance(position_ids, torch.Tensor):
            raise TypeError("position_ids must be a torch.Tensor, got "
                            f"{type(position_ids).__name__}")
        if position_ids.dtype is torch.bool or position_ids.is_complex():
            raise TypeError(f"position_ids must be integer or real, got {position_ids.dtype}")
        device = x.device
        if _device_path(x):  # device operations only: no host read of the positions
            return self._device_forward(rotary, position_ids, dtype, device)
        # Everything below is the eager path of (rotary, x, position_ids, dtype) on the
        # CPU.
        if rotary.sections is not None:
            return self._forward_sections(rotary, position_ids, dtype, device)
        count = position_ids.numel()
        if count == 0:
            return empty_caches(tuple(position_ids.shape), rotary.width, rotary.form, dtype,
                                device)
        integral = not position_ids.is_floating_point()
        try:
            if count == 1:
                lo = hi = position_ids.item()
            else:
                low, high = torch.aminmax(position_ids)
                lo, hi = low.item(), high.item()
        except (RuntimeError, NotImplementedError):
            if position_ids.is_meta:
                return self._meta_caches(rotary, position_ids, dtype)
            raise
        if not -sinpe.MAX_POSITION <= lo <= hi <= sinpe.MAX_POSITION:  # before any state moves
            _refuse_positions(lo, hi)
        with self._lock:
            key, freq, scaling = rotary.select(hi + 1)  # HF's max(position_ids) + 1
            tables = None
            if key is not None and integral and lo >= 0:
                tables = rotary.table(key, freq, scaling, int(hi) + 1, dtype, device)
        if tables is None:
            return direct_caches(position_ids, freq, scaling, rotary.form, dtype, device)
        ids = position_ids if position_ids.device == device else position_ids.to(device)
        if rotary.form == "concatenated" or rotary.form == "interleaved":
            try:
                # a row gather: the fastest copy of rows measured here (index_select,
                # indexing and slices cost more for one position and for 2048)
                return torch.embedding(tables[0], ids), torch.embedding(tables[1], ids)
            except RuntimeError:  # int8, int16, uint8 indices: lookup converts them
                pass
        return lookup(tables, ids, rotary.form)

    def _device_forward(self, rotary: _Rotary, position_ids: torch.Tensor, dtype: torch.dtype,
                        device: torch.device) -> Caches:
        """The caches by device operations alone (:meth:`_Rotary.device_caches`).
        ``dynamic`` reads ``max(position_ids)`` on the host, as transformers' module
        does, to follow its frequencies; nothing else is read."""
        frequencies = None
        if (rotary.rope_type == "dynamic" and rotary.trained is not None
                and position_ids.numel() and not position_ids.is_meta and device.type != "meta"):
            if _ops.is_compiling():  # frequencies that follow the lengths: not traced (a
                # graph break, as transformers' module breaks there too)
                return _untraced_forward(self, rotary, position_ids, dtype, device)
            high = position_ids.max().item()  # (transformers' dynamic_rope_update reads it)
            if not -sinpe.MAX_POSITION <= high <= sinpe.MAX_POSITION:
                _refuse_positions(position_ids.min().item(), high)
            with self._lock:
                key, freq, scaling = rotary.select(high + 1)
            if key is None:
                frequencies = (freq, scaling)
        return rotary.device_caches(position_ids, dtype, device, frequencies)

    def _meta_caches(self, rotary: _Rotary, position_ids: torch.Tensor,
                     dtype: torch.dtype) -> Caches:
        """On the meta device: the caches' shapes and dtypes, no values, no kernel."""
        shape = tuple(position_ids.shape)
        if rotary.sections is not None:
            shape = tuple(_vl.broadcast_rows(position_ids).shape[1:])
        return empty_caches(shape, rotary.width, rotary.form, dtype, torch.device("meta"))

    def _forward_sections(self, rotary: _Rotary, position_ids: torch.Tensor,
                          dtype: torch.dtype, device: torch.device
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Multi-axis RoPE: ``(cos, sin)`` of shape ``(B, L, r)`` for ``position_ids`` of
        shape ``(3, B, L)`` (or ``(B, L)``, every axis alike, as transformers' modules
        broadcast them), computed for the call
        (see :func:`sinpe.torch._multi_axis.section_caches`)."""
        assert rotary.sections is not None and rotary.sections_layout is not None
        if position_ids.is_meta or device.type == "meta":  # (sections: pairs)
            return cast(tuple[torch.Tensor, torch.Tensor],
                        self._meta_caches(rotary, position_ids, dtype))
        ids = _vl.broadcast_rows(position_ids)
        freq, scaling = rotary.freq, rotary.scaling
        if rotary.rope_type in ("dynamic", "longrope") and ids.numel():
            low, high = torch.aminmax(ids)
            lo, hi = low.item(), high.item()
            if not -sinpe.MAX_POSITION <= lo <= hi <= sinpe.MAX_POSITION:
                _refuse_positions(lo, hi)
            with self._lock:
                _, freq, scaling = rotary.select(hi + 1)  # HF's max(position_ids) + 1
        return _vl.section_caches(ids, freq, scaling, rotary.sections, rotary.sections_layout,
                                  rotary.form, dtype, device)

    def _rotary_of(self, layer_type: Optional[str]) -> _Rotary:
        if layer_type is None or not self._per_type:
            if self._per_type:
                raise ValueError("this module holds several layer types "
                                 f"({list(self._rotaries)}): forward needs layer_type")
            if layer_type is not None and layer_type != self.layer_type:
                raise ValueError(f"layer_type={layer_type!r}: this module serves "
                                 f"{self.layer_type!r}")
            return next(iter(self._rotaries.values()))
        try:
            return self._rotaries[layer_type]
        except KeyError:
            raise ValueError(f"layer_type={layer_type!r} is not among this module's layer "
                             f"types: {list(self._rotaries)}") from None


@torch.compiler.disable  # type: ignore[untyped-decorator]
def _untraced_forward(module: RotaryEmbedding, rotary: _Rotary, position_ids: torch.Tensor,
                      dtype: torch.dtype, device: torch.device) -> Caches:
    """:meth:`RotaryEmbedding._device_forward` outside the compiled graph (dynamic rope's
    frequencies change with the lengths seen, and their tables are made eagerly)."""
    return module._device_forward(rotary, position_ids, dtype, device)


def _refuse_positions(lo: Any, hi: Any) -> None:
    far = hi if abs(hi) >= abs(lo) else lo
    raise ValueError(f"position_ids must lie within +-sinpe.MAX_POSITION = {sinpe.MAX_POSITION} "
                     f"(sinpe's promise of exact values), got position {far} (positions "
                     f"{lo} .. {hi})")


def _text_config(config: Any) -> Any:
    """A vision-language model's text config for its whole config (Qwen2-VL's top-level
    config has no rope_parameters, its text_config has them); any other config as is."""
    if getattr(config, "rope_parameters", None) is None:
        get_text_config = getattr(config, "get_text_config", None)
        text = get_text_config() if callable(get_text_config) else None
        if text is not None and text is not config and getattr(text, "rope_parameters", None):
            return text
    return config


def _check_choice(value: Any, name: str, choices: tuple[str, ...]) -> None:
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, "
                         f"got {name}={value!r}")


def _config_layer_types(config: Any, layer_type: Optional[str]
                        ) -> tuple[list[Optional[str]], bool]:
    """The layer types of the config's rope parameters the module serves (``[None]``:
    parameters not per layer type), and whether the parameters are per layer type."""
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or not params:
        raise ValueError(f"config ({type(config).__name__}) has no rope_parameters (got "
                         f"{params!r}): the model has no rotary embedding")
    if params.get("rope_type") == "axial":
        raise ValueError(f"config ({type(config).__name__}) is a vision tower's, whose rope "
                         "type 'axial' RotaryEmbedding does not serve (it serves text rotary "
                         "modules); sinpe.torch.patch(model) replaces the vision tower's")
    per_type = [key for key, value in params.items()
                if isinstance(value, dict) or (value is None and key.endswith("attention"))]
    per_type = per_type if len(per_type) == len(params) else []
    if layer_type is not None and layer_type not in per_type:
        raise ValueError(f"layer_type={layer_type!r}: the config's rope_parameters are "
                         + (f"per layer type {per_type}" if per_type else "not per layer type"))
    if layer_type is not None:
        return [layer_type], True
    if per_type:
        return [t for t in per_type if params[t] is not None], True
    return [None], False


def _sinpes_frequencies(config: Any, types: list[Optional[str]]
                        ) -> dict[Optional[str], Frequencies]:
    """sinpe's frequencies of each layer type as transformers' module starts: its
    checks of every key and value, with its messages, before transformers' code runs."""
    return {t: rope_frequencies(None, config, layer_type=t) for t in types}


def _held_types(config: Any, hf: nn.Module, layer_type: Optional[str],
                types: list[Optional[str]]) -> list[Optional[str]]:
    """``types`` restricted to the layer types the family's module holds rope for (LFM3's
    module: those of the config's ``layer_types``, not every key of its rope_parameters)."""
    held = _family.layer_types(hf)
    if held is None or types == [None]:
        return types
    name = type(hf).__name__
    if layer_type is not None and layer_type not in held:
        raise ValueError(f"layer_type={layer_type!r}: transformers' {name} holds rope for the "
                         f"layer types {held} only (those of the config's layer_types)")
    served: list[Optional[str]] = [t for t in types if t in held]
    if not served:
        used = sorted(set(getattr(config, "layer_types", None) or []))
        raise ValueError(f"config ({type(config).__name__}): its layer_types {used} use none of "
                         f"the layer types of its rope_parameters ({types}), so transformers' "
                         f"{name} holds no rope: nothing to stand in for")
    return served


def _rotary(config: Any, hf: Optional[nn.Module], own: Optional[nn.Module], frequencies: str,
            layer_type: Optional[str], exact: Frequencies) -> _Rotary:
    """One layer type's rope: the model's frequencies (``own``'s float32 ones, else the
    family module's, else transformers' function's; without transformers sinpe's
    rounded to float32) and the switches of the module's rope type."""
    params = (config.rope_parameters if layer_type is None
              else config.rope_parameters[layer_type])
    kind = params.get("rope_type", params.get("type", "default"))
    if hf is None:
        model = exact[0].astype(np.float32).astype(np.float64), exact[1]
        return _Rotary(config, layer_type, frequencies, kind, exact, model, None)
    kind = _family.rope_type(hf, layer_type) or kind
    hf_frequencies = functools.partial(_family.hf_frequencies, hf, config, kind, layer_type)
    model = ((own is not None and _family.own_frequencies(own, layer_type))
             or _family.own_frequencies(hf, layer_type) or hf_frequencies(None))
    return _Rotary(config, layer_type, frequencies, kind, exact, model, hf_frequencies)


def _module_sections(hf: nn.Module, width: int, form: str, layer_type: Optional[str]
                     ) -> tuple[Optional[tuple[int, ...]], Optional[str]]:
    """The family module's sections (multi-axis RoPE) of a layer type, found by calling
    it; its failures a ValueError naming it."""
    section = getattr(hf, "mrope_section", None)
    if section is None or (isinstance(section, dict) and section.get(layer_type) is None):
        return None, None
    if form not in ("concatenated", "interleaved"):
        raise ValueError(f"transformers' {type(hf).__name__} returns multi-axis caches in the "
                         f"{form!r} form: sinpe cannot stand in for it")
    try:
        return _vl.module_sections(hf, width, form, layer_type)
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"transformers' {type(hf).__name__} fails on multi-axis position_ids "
                         f"with this config (rope_parameters['mrope_section']="
                         f"{getattr(hf, 'mrope_section', None)}): {exc!r}") from exc

