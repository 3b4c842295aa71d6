"""sinpe.torch's rotary module: ``RotaryEmbedding``, which :mod:`sinpe.torch`
re-exports (use it from there).

``RotaryEmbedding`` stands in for a transformers ``*RotaryEmbedding`` module: the
frequencies and attention factor of the model (transformers' own float32 ones by
default), the angles exact, and the ``(cos, sin)`` rows looked up in a table kept
per layer type, device and dtype (made by :func:`sinpe.torch._caches.rope_cache`),
so that a decoding step costs an index, not a cos and a sin.  Multi-axis modules
(vision-language text models) take their sections and caches from
:mod:`sinpe.torch._multi_axis`.  transformers is imported lazily, by the functions
that need it.
"""
from __future__ import annotations

import copy
import importlib
import math
import threading
from collections import OrderedDict
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray
import torch
from torch import nn

import sinpe
from sinpe._rope_types import rope_frequencies
from sinpe.torch import _multi_axis as _vl
from sinpe.torch import _ops
from sinpe.torch._caches import rope_cache
from sinpe.torch._tensors import _DTYPES, _SUPPORTED, _check_dtype, _device

# A table covers positions 0 .. rows - 1 of one frequency set, in one dtype on one
# device.  It grows geometrically as positions need, at first to the model's
# max_position_embeddings, and at most to twice that or to this many bytes
# (cos and sin together), whichever is more; positions past that, negative
# ones, non-integral ones and frequencies that change call by call (dynamic
# NTK past the trained length) are computed for the call alone, with the same
# bits (a row's values depend only on its position and the frequencies).
TABLE_BYTES = 64 << 20
TABLES_KEPT = 8  # per layer type, least recently used out


# -- the rotary module --------------------------------------------------------------------

_FREQUENCIES = ("model", "exact")


class RotaryEmbedding(nn.Module):
    """A transformers rotary-embedding module, with sinpe's exact cos and sin.

    ``RotaryEmbedding(config)`` stands in for the ``*RotaryEmbedding`` module of
    the model that ``config`` (a transformers config) configures:
    ``forward(x, position_ids)`` (``forward(x, position_ids, layer_type)`` for
    configs with rope parameters per layer type, as Gemma 3's module) returns
    ``(cos, sin)`` of shape ``position_ids.shape + (r,)`` in ``x.dtype`` on
    ``x.device`` (the family's own rules where they differ: OLMo's float32,
    Cohere's pairwise layout), ``r`` the rotary width, the attention factor
    applied: what the model's module returns, for every rope type
    (``default``, ``linear``, ``dynamic``, ``yarn``, ``longrope``, ``llama3``,
    ``proportional``), with ``dynamic``'s and ``longrope``'s switches on
    ``max(position_ids) + 1`` made as transformers makes them.

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
    - Speed: the rows are looked up in a table kept per layer type, device
      and dtype, made by sinpe's kernel (on the CPU, then moved once) and
      grown on demand: at first to ``config.max_position_embeddings``.
      Positions beyond twice that (or beyond 64 MiB of table), negative or
      non-integral ones, and ``dynamic``'s frequencies past the trained length
      (which change from call to call) are computed for the call, with the
      same values.

    ``layer_type`` picks one layer type of a per-layer-type config (then
    ``forward`` needs none); ``layout`` (``"concatenated"``: HF's
    ``cat(freqs, freqs)``; ``"interleaved"``: Cohere's ``repeat_interleave``)
    and ``output_dtype`` (a fixed dtype instead of ``x.dtype``) default to the
    family's module, found from the config (its ``modeling_*`` module's
    rotary class, called once on four positions to see what it returns), else
    to ``"concatenated"`` and ``x.dtype``.  ``device`` is accepted as
    transformers' modules take it; tables are made on ``x.device`` when first
    needed.

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

    Raises ``TypeError``/``ValueError`` for a config it cannot serve (no
    ``rope_parameters``, an unknown rope type or bad values, as
    :func:`sinpe.rope_frequencies`; sections sinpe's rules cannot give), and in
    ``forward`` for a non-tensor or boolean ``position_ids``, an unsupported
    ``x.dtype``, a layer type the module does not have, positions past
    ``sinpe.MAX_POSITION``, or multi-axis ``position_ids`` of another shape.
    """

    def __init__(self, config: Any, device: Any = None, *, frequencies: str = "model",
                 layer_type: Optional[str] = None, layout: Optional[str] = None,
                 output_dtype: Optional[torch.dtype] = None) -> None:
        super().__init__()
        _check_choice(frequencies, "frequencies", _FREQUENCIES)
        if device is not None:
            _device(device)
        config = _text_config(config)
        hf = _family_module(config)
        self._setup(config, hf, frequencies, layer_type, layout, output_dtype)

    @classmethod
    def from_module(cls, module: nn.Module, *, frequencies: str = "model",
                    layer_type: Optional[str] = None) -> RotaryEmbedding:
        """The stand-in for ``module``, a transformers rotary module (e.g. a model's
        ``model.rotary_emb``): its config, rope type and attention factor, its own
        float32 frequencies (its ``original_inv_freq``; recomputed from the config
        by transformers' functions if ``model.to(dtype)`` has cast them), the layout
        and dtype its forward returns (seen on a copy of it: the module itself is
        not called or changed)."""
        _check_choice(frequencies, "frequencies", _FREQUENCIES)
        config = getattr(module, "config", None)
        if not isinstance(module, nn.Module) or config is None:
            raise TypeError(f"module must be a transformers rotary module (an nn.Module with a "
                            f"config), got {type(module).__name__}")
        self = cls.__new__(cls)
        nn.Module.__init__(self)
        self._setup(config, copy.deepcopy(module), frequencies, layer_type, None, None)
        return self

    # -- construction

    def _setup(self, config: Any, hf: Optional[nn.Module], frequencies: str,
               layer_type: Optional[str], layout: Optional[str],
               output_dtype: Optional[torch.dtype]) -> None:
        config = _text_config(config)
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
        types: list[Optional[str]] = (
            [layer_type] if layer_type is not None
            else [t for t in per_type if params[t] is not None] if per_type else [None])
        self.config = config
        self.frequencies = frequencies
        self.layer_type = layer_type
        self._per_type = bool(per_type) and layer_type is None
        self._lock = threading.Lock()
        self._rotaries = {t: _Rotary(config, hf, frequencies, t) for t in types}
        first = next(iter(self._rotaries.values()))
        self.rope_type: Any = ({t: r.rope_type for t, r in self._rotaries.items()}
                               if self._per_type else first.rope_type)
        seen_layout, seen_dtype = _probe(hf, types[0]) if hf is not None else (None, None)
        self.layout = layout if layout is not None else seen_layout or "concatenated"
        _check_choice(self.layout, "layout", ("concatenated", "interleaved"))
        self.output_dtype = (_check_dtype(output_dtype) if output_dtype is not None
                             else seen_dtype)
        # multi-axis RoPE (Qwen2-VL's, Qwen3-VL's): the sections the family's module uses
        width = 2 * len(first.freq)
        self.sections, self.sections_layout = (
            (None, None) if len(types) != 1 or types[0] is not None
            else _vl.module_sections(hf, width, self.layout) if hf is not None
            else _vl.config_sections(config, width))

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
        width = 2 * len(next(iter(self._rotaries.values())).freq)
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
                layer_type: Optional[str] = None) -> tuple[torch.Tensor, torch.Tensor]:
        rotary = self._rotary_of(layer_type)
        if _ops.is_compiling():  # torch.compile, torch.export: one custom op, no .item()
            traced = _ops.rotary_forward(self, rotary, x, position_ids)
            if traced is not None:  # (None: dynamic, whose state moves: HF's breaks the graph)
                return traced
        if not isinstance(x, torch.Tensor):
            raise TypeError(f"x must be a torch.Tensor, got {type(x).__name__}")
        dtype = self.output_dtype if self.output_dtype is not None else x.dtype
        if dtype not in _DTYPES:
            raise TypeError(f"x must have dtype {_SUPPORTED} (the caches' dtype), "
                            f"got {x.dtype}")
        if not isinstance(position_ids, torch.Tensor):
            raise TypeError("position_ids must be a torch.Tensor, got "
                            f"{type(position_ids).__name__}")
        if position_ids.dtype is torch.bool or position_ids.is_complex():
            raise TypeError(f"position_ids must be integer or real, got {position_ids.dtype}")
        if self.sections is not None:
            return self._forward_sections(rotary, position_ids, dtype, x.device)
        device = x.device
        count = position_ids.numel()
        if count == 0:
            shape = (*position_ids.shape, 2 * len(rotary.freq))
            return (torch.empty(shape, dtype=dtype, device=device),
                    torch.empty(shape, dtype=dtype, device=device))
        integral = not position_ids.is_floating_point()
        if count == 1:
            lo = hi = position_ids.item()
        else:
            low, high = torch.aminmax(position_ids)
            lo, hi = low.item(), high.item()
        if not -sinpe.MAX_POSITION <= lo <= hi <= sinpe.MAX_POSITION:  # before any state moves
            raise ValueError(f"position_ids must lie within +-sinpe.MAX_POSITION = "
                             f"{sinpe.MAX_POSITION}, got {lo} .. {hi}")
        with self._lock:
            key, freq, scaling = rotary.select(hi + 1)  # HF's max(position_ids) + 1
            cos_table = sin_table = None
            if key is not None and integral and lo >= 0:
                tables = rotary.table(key, freq, scaling, int(hi) + 1, self.layout, dtype, device)
                if tables is not None:
                    cos_table, sin_table = tables
        if cos_table is None or sin_table is None:
            return rope_cache(None, 2 * len(freq), positions=position_ids, freq=freq,
                              scale=scaling, layout=self.layout, dtype=dtype, device=device)
        ids = position_ids if position_ids.device == device else position_ids.to(device)
        # a row gather: the fastest copy of rows measured here (index_select,
        # indexing and slices cost more for one position and for 2048)
        return torch.embedding(cos_table, ids), torch.embedding(sin_table, ids)

    def _forward_sections(self, rotary: _Rotary, position_ids: torch.Tensor,
                          dtype: torch.dtype, device: torch.device
                          ) -> tuple[torch.Tensor, torch.Tensor]:
        """Multi-axis RoPE: ``(cos, sin)`` of shape ``(B, L, r)`` for ``position_ids`` of
        shape ``(3, B, L)`` (or ``(B, L)``, every axis alike, as transformers' modules
        broadcast them), computed for the call
        (see :func:`sinpe.torch._multi_axis.section_caches`)."""
        assert self.sections is not None and self.sections_layout is not None
        ids = _vl.broadcast_rows(position_ids)
        freq, scaling = rotary.freq, rotary.scaling
        if rotary.rope_type in ("dynamic", "longrope") and ids.numel():
            low, high = torch.aminmax(ids)
            lo, hi = low.item(), high.item()
            if not -sinpe.MAX_POSITION <= lo <= hi <= sinpe.MAX_POSITION:
                raise ValueError(f"position_ids must lie within +-sinpe.MAX_POSITION = "
                                 f"{sinpe.MAX_POSITION}, got {lo} .. {hi}")
            with self._lock:
                _, freq, scaling = rotary.select(hi + 1)  # HF's max(position_ids) + 1
        return _vl.section_caches(ids, freq, scaling, self.sections, self.sections_layout,
                                  self.layout, dtype, device)

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
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(repr(c) for c in choices)}, "
                         f"got {name}={value!r}")


# -- one layer type's frequencies, switches and tables ------------------------------------


class _Rotary:
    """The rope of one layer type (None: the config's only one): its frequencies at
    construction, HF's switches, and the tables of the frequency sets that last."""

    def __init__(self, config: Any, hf: Optional[nn.Module], frequencies: str,
                 layer_type: Optional[str]) -> None:
        self.config = config
        self.hf = hf
        self.frequencies = frequencies
        self.layer_type = layer_type
        params = config.rope_parameters if layer_type is None else config.rope_parameters[layer_type]
        self.rope_type = params.get("rope_type", params.get("type", "default"))
        trained = getattr(config, "max_position_embeddings", None)
        self.trained: Optional[int] = trained if isinstance(trained, int) else None
        self.max_seq_len_cached: Optional[float] = self.trained
        self.original = params.get("original_max_position_embeddings", self.trained)
        # dynamic's frequencies past the trained length (None: the first ones) and
        # longrope's long ones (made when first needed, as HF makes them)
        self.current: Optional[NDArray[np.float64]] = None
        self.long: Optional[NDArray[np.float64]] = None
        self.freq, self.scaling = self._initial()
        self.tables: OrderedDict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = (
            OrderedDict())

    def _initial(self) -> tuple[NDArray[np.float64], float]:
        """HF's module at construction: seq_len None (dynamic: the trained length;
        longrope: the short factors).  sinpe's own formulas run first, also for the
        model's frequencies: they check every key and value, with their messages."""
        exact = self._compute(None, exact=True)
        if self.frequencies == "exact":
            return exact
        if self.hf is not None:
            prefix = "" if self.layer_type is None else f"{self.layer_type}_"
            buffer = getattr(self.hf, f"{prefix}original_inv_freq", None)
            scaling = getattr(self.hf, f"{prefix}attention_scaling", None)
            if (isinstance(buffer, torch.Tensor) and buffer.dtype is torch.float32
                    and isinstance(scaling, (int, float))):
                return buffer.detach().to("cpu", torch.float64).numpy(), float(scaling)
        return self._compute(None)

    def _compute(self, seq_len: Optional[float], exact: bool = False
                 ) -> tuple[NDArray[np.float64], float]:
        """The frequencies at seq_len (None: at construction, as HF's module calls its
        init function)."""
        exact = exact or self.frequencies == "exact"
        if not exact and self.hf is not None:
            return _hf_frequencies(self.hf, self.config, self.rope_type, self.layer_type, seq_len)
        if seq_len is None:  # what HF's functions take for a missing seq_len
            seq_len = {"dynamic": self.trained, "longrope": self.original}.get(self.rope_type)
        freq, scaling = rope_frequencies(
            None, self.config, seq_len=None if seq_len is None else math.ceil(seq_len),
            layer_type=self.layer_type)
        if not exact:  # transformers' are float32
            freq = freq.astype(np.float32).astype(np.float64)
        return freq, scaling

    def select(self, seq_len: float) -> tuple[Optional[str], NDArray[np.float64], float]:
        """The frequencies for a call whose positions reach seq_len - 1, and the key of
        their table (None: they do not last beyond this call).  HF's
        dynamic_rope_update: longrope's long factors past the trained length,
        dynamic's frequencies recomputed when the sequence grows past what they
        were made for, and reset below the trained length."""
        if self.rope_type == "longrope" and self.original is not None and seq_len > self.original:
            if self.long is None:
                self.long = self._compute(self.original + 1)[0]
            return "long", self.long, self.scaling
        if self.rope_type == "dynamic" and self.trained is not None:
            cached = self.max_seq_len_cached
            assert cached is not None
            if seq_len > cached:
                self.current = self._compute(seq_len)[0]
                self.max_seq_len_cached = seq_len
            if seq_len < self.trained and cached > self.trained:
                self.current = None
                self.max_seq_len_cached = self.trained
            if self.current is not None:
                return None, self.current, self.scaling
        return "init", self.freq, self.scaling

    def table(self, key: str, freq: NDArray[np.float64], scaling: float, need: int, layout: str,
              dtype: torch.dtype, device: torch.device
              ) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """The (cos, sin) table of a frequency set covering rows 0 .. need - 1 (grown
        if it is shorter), or None where the table would pass its limit."""
        index = (key, device, dtype)
        tables = self.tables.get(index)
        if tables is not None and tables[0].shape[0] >= need:
            self.tables.move_to_end(index)
            return tables
        width = 2 * len(freq)
        row_bytes = 2 * width * dtype.itemsize
        limit = max(2 * (self.trained or 0), TABLE_BYTES // row_bytes)
        if key == "init" and self.rope_type in ("longrope", "dynamic"):
            # the first set serves positions below the length it switches at
            limit = (self.original if self.rope_type == "longrope" else self.trained) or limit
        if need > limit:
            return None
        rows = max(need, self.trained or 0, 2 * (tables[0].shape[0] if tables else 0))
        rows = min(rows, limit)
        with torch.inference_mode(False):  # an ordinary tensor, usable in any mode
            made = rope_cache(rows, width, freq=freq, scale=scaling, layout=layout,
                              dtype=dtype, device=device)
        self.tables[index] = made
        self.tables.move_to_end(index)
        while len(self.tables) > TABLES_KEPT:
            self.tables.popitem(last=False)
        return made


# -- transformers (imported when needed) --------------------------------------------------


def _family_module(config: Any) -> Optional[nn.Module]:
    """A new instance of the rotary module of the model family that ``config``
    configures (its ``modeling_*`` module's ``*RotaryEmbedding`` class that computes
    default frequencies, vision ones left out), or None without transformers or
    without such a class."""
    name = type(config).__module__
    if not name.startswith("transformers.models.") or ".configuration_" not in name:
        return None
    try:
        modeling = importlib.import_module(name.replace(".configuration_", ".modeling_"))
    except ImportError:
        return None
    for attribute, value in vars(modeling).items():
        if (attribute.endswith("RotaryEmbedding") and "Vision" not in attribute
                and isinstance(value, type) and issubclass(value, nn.Module)
                and value.__module__ == modeling.__name__
                and hasattr(value, "compute_default_rope_parameters")):
            try:
                module: nn.Module = value(config)
            except (TypeError, KeyError, AttributeError, ValueError):
                continue  # another class of the file (a text config for a vision one, ...)
            return module
    return None


def _hf_frequencies(hf: nn.Module, config: Any, rope_type: str, layer_type: Optional[str],
                    seq_len: Optional[float]) -> tuple[NDArray[np.float64], float]:
    """transformers' own frequencies (float32, as float64) and attention factor, by
    the function its module calls: ROPE_INIT_FUNCTIONS, or the family's
    compute_default_rope_parameters; seq_len as its dynamic_rope_update passes it
    (a tensor)."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    function: Any = (getattr(type(hf), "compute_default_rope_parameters", None)
                     if rope_type == "default" else ROPE_INIT_FUNCTIONS.get(rope_type))
    if function is None:
        raise ValueError(f"rope_type {rope_type!r}: {type(hf).__name__} has no "
                         "compute_default_rope_parameters" if rope_type == "default" else
                         f"rope_type {rope_type!r} is not one transformers knows")
    kwargs: dict[str, Any] = {} if layer_type is None else {"layer_type": layer_type}
    if seq_len is not None and rope_type != "default":
        kwargs["seq_len"] = torch.tensor(seq_len) if rope_type == "dynamic" else seq_len
    inv_freq, scaling = function(config, **kwargs)
    return inv_freq.detach().to("cpu", torch.float64).numpy(), float(scaling)


def _probe(hf: nn.Module, layer_type: Optional[str]) -> tuple[Optional[str], Optional[torch.dtype]]:
    """The layout and fixed output dtype of a transformers rotary module's forward,
    seen on positions 0..3 of a float64 x: ("interleaved" when each pair of
    columns repeats a value, else "concatenated"; None when it returns x's dtype)."""
    x = torch.zeros(1, dtype=torch.float64)
    position_ids = torch.arange(4)[None]
    args = (x, position_ids) if layer_type is None else (x, position_ids, layer_type)
    with torch.no_grad():
        result = hf(*args)
    if not (isinstance(result, tuple) and len(result) == 2
            and all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in result)):
        raise ValueError(f"{type(hf).__name__}'s forward does not return (cos, sin) of shape "
                         "position_ids.shape + (rotary_dim,): sinpe cannot stand in for it")
    cos = result[0][0, 1].double()
    half = cos.shape[-1] // 2
    interleaved = bool(torch.equal(cos[0::2], cos[1::2])) and not bool(
        torch.equal(cos[:half], cos[half:]))
    fixed = None if result[0].dtype is torch.float64 else result[0].dtype
    return ("interleaved" if interleaved else "concatenated"), fixed
