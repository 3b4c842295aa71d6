"""One layer type's rope in :class:`sinpe.torch.RotaryEmbedding`: its frequencies,
transformers' switches of them, the tables kept of them, and the caches of a call
in each form a transformers module returns (:data:`sinpe.torch._verify.FORMS`).

A table covers positions ``0 .. rows - 1`` of one frequency set, in one dtype on
one device.  It is sized by the positions calls ask for, never by the model's
``max_position_embeddings``: at first the next power of two above the largest
position asked for (at least :data:`MIN_ROWS`), then doubled (or more) when a
call goes past it, up to :data:`TABLE_BYTES` of memory (cos and sin together).
Positions past that, negative or non-integral ones, and frequencies that change
from call to call (``dynamic`` NTK past the trained length) are computed for the
call alone, with the same bits: a row's values depend only on its position and
the frequencies.

On the device path (every device but the CPU, and the CPU with
``SINPE_TORCH_PATH=device``) no table of rows is kept: the caches are made by device
operations from the exact angle tables of :mod:`sinpe.torch._angles` (a few MiB
per frequency set, the same at any context length), with no host read of the
positions (but ``dynamic``'s, as transformers' own module reads them).

Every form is served from sinpe's values: ``"concatenated"`` and
``"interleaved"`` are :func:`sinpe.torch._caches.rope_cache`'s layouts;
``"half"`` is the concatenated table's first half, made contiguous once;
``"complex"`` is one float32 table of ``(cos, sin)`` pairs (an interleaved cos
table whose odd columns take the sines), viewed as complex64 after the row gather.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any, Callable, Optional, Union

import numpy as np
from numpy.typing import NDArray
import torch

from sinpe._rope_types import rope_frequencies
from sinpe.torch import _multi_axis as _vl
from sinpe.torch._angles import AngleTables, pair_caches
from sinpe.torch._caches import rope_cache
from sinpe.torch._tensors import _empty

# The memory a kept table may take (cos and sin together, or a complex table): a
# Llama 3.1 context of 131072 positions of head 128 in float32.  Positions past it
# are computed call by call.
TABLE_BYTES = 128 << 20
# The rows of a first table at least: a decoding step then grows it rarely.  Small
# enough that a first decoding step's table (head 128) is one thread's work: a first
# call that wakes sinpe's thread pool costs ~6 ms more, once per process.
MIN_ROWS = 256
TABLES_KEPT = 8  # per layer type, least recently used out

Caches = Union[tuple[torch.Tensor, torch.Tensor], torch.Tensor]
Frequencies = tuple[NDArray[np.float64], float]
# transformers' frequencies at a sequence length (None: as its module starts)
HFFrequencies = Callable[[Optional[float]], Frequencies]


class _Rotary:
    """The rope of one layer type (None: the config's only one): its frequencies at
    construction, HF's switches, the form of its caches and the tables of the
    frequency sets that last.

    ``exact``: :func:`sinpe.rope_frequencies` of the layer type as its module starts;
    ``model``: the model's own float32 frequencies and factor (transformers' module's);
    ``hf_frequencies``: transformers' function of a sequence length (None without
    transformers: sinpe's frequencies rounded to float32 then); ``rope_type``: the
    type whose switches the module makes (its module's own where it has one).
    """

    def __init__(self, config: Any, layer_type: Optional[str], frequencies: str,
                 rope_type: str, exact: Frequencies, model: Frequencies,
                 hf_frequencies: Optional[HFFrequencies]) -> None:
        self.config = config
        self.layer_type = layer_type
        self.frequencies = frequencies
        self.rope_type = rope_type
        self.hf_frequencies = hf_frequencies
        params = (config.rope_parameters if layer_type is None
                  else config.rope_parameters[layer_type])
        trained = getattr(config, "max_position_embeddings", None)  # checked by sinpe's
        self.trained: Optional[int] = None if trained is None else int(trained)
        self.max_seq_len_cached: Optional[float] = self.trained
        original = params.get("original_max_position_embeddings", self.trained)
        self.original: Optional[int] = None if original is None else int(original)
        self.model = model
        self.freq, self.scaling = exact if frequencies == "exact" else model
        # what forward returns (set by the module once it has seen transformers')
        self.form = "concatenated"
        self.sections: Optional[tuple[int, ...]] = None
        self.sections_layout: Optional[str] = None
        # dynamic's frequencies past the trained length (None: the first ones) and
        # longrope's long ones (made when first needed, as HF makes them)
        self.current: Optional[NDArray[np.float64]] = None
        self.long: Optional[NDArray[np.float64]] = None
        self.tables: OrderedDict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = (
            OrderedDict())
        # the device path's exact angles per frequency set ("init", "long", and dynamic's
        # latest), and each device's row of the positions per pair (sections)
        self.angles: OrderedDict[Any, AngleTables] = OrderedDict()
        self.rows: dict[torch.device, torch.Tensor] = {}

    @property
    def width(self) -> int:
        """The rotary width r: two columns per frequency."""
        return 2 * len(self.freq)

    def _compute(self, seq_len: float) -> NDArray[np.float64]:
        """The frequencies at seq_len (dynamic's grown ones, longrope's long ones)."""
        if self.frequencies == "model" and self.hf_frequencies is not None:
            return self.hf_frequencies(seq_len)[0]
        freq, _ = rope_frequencies(None, self.config, seq_len=math.ceil(seq_len),
                                   layer_type=self.layer_type)
        if self.frequencies == "model":  # transformers' are float32
            freq = freq.astype(np.float32).astype(np.float64)
        return freq

    def select(self, seq_len: float) -> tuple[Optional[str], NDArray[np.float64], float]:
        """The frequencies for a call whose positions reach seq_len - 1, and the key of
        their table (None: they do not last beyond this call).  HF's
        dynamic_rope_update: longrope's long factors past the trained length,
        dynamic's frequencies recomputed when the sequence grows past what they
        were made for, and reset below the trained length."""
        if self.rope_type == "longrope" and self.original is not None and seq_len > self.original:
            if self.long is None:
                self.long = self._compute(self.original + 1)
            return "long", self.long, self.scaling
        if self.rope_type == "dynamic" and self.trained is not None:
            cached = self.max_seq_len_cached
            assert cached is not None
            if seq_len > cached:
                self.current = self._compute(seq_len)
                self.max_seq_len_cached = seq_len
            if seq_len < self.trained and cached > self.trained:
                self.current = None
                self.max_seq_len_cached = self.trained
            if self.current is not None:
                return None, self.current, self.scaling
        return "init", self.freq, self.scaling

    def table(self, key: str, freq: NDArray[np.float64], scaling: float, need: int,
              dtype: torch.dtype, device: torch.device
              ) -> Optional[tuple[torch.Tensor, torch.Tensor]]:
        """The table of a frequency set covering rows 0 .. need - 1 (grown if it is
        shorter), or None where it would pass :data:`TABLE_BYTES` or the frequency
        set's switch."""
        index = (key, device, dtype)
        tables = self.tables.get(index)
        if tables is not None and tables[0].shape[0] >= need:
            self.tables.move_to_end(index)
            return tables
        limit = TABLE_BYTES // row_bytes(self.width, self.form, dtype)
        if key == "init" and self.rope_type in ("longrope", "dynamic"):
            # the first set serves positions below the length it switches at
            switch = self.original if self.rope_type == "longrope" else self.trained
            limit = min(limit, switch or limit)
        if need > limit:
            return None
        rows = max(MIN_ROWS, 1 << (need - 1).bit_length(),
                   2 * (tables[0].shape[0] if tables is not None else 0))
        made = make_table(min(rows, limit), freq, scaling, self.form, dtype, device)
        self.tables[index] = made
        self.tables.move_to_end(index)
        while len(self.tables) > TABLES_KEPT:
            self.tables.popitem(last=False)
        return made


    # -- the device path: device operations only

    def angle_tables(self, key: Any, freq: NDArray[np.float64], scaling: float) -> AngleTables:
        """The exact angle tables of a frequency set ("init", "long"; dynamic's sets by
        their values: the last two kept)."""
        if key is None:
            key = ("dynamic", freq.tobytes())
        tables = self.angles.get(key)
        if tables is None:
            tables = AngleTables(freq, scaling)
            self.angles[key] = tables
            dynamic = [k for k in self.angles if isinstance(k, tuple)]
            for old in dynamic[:-2]:
                del self.angles[old]
        return tables

    def prepare(self, device: torch.device) -> None:
        """Makes ``device``'s angle tables of the frequency sets that last (the first
        ones; longrope's long ones) and its rows of sections, as the first call on
        the device would: compiled code finds them made."""
        self.angle_tables("init", self.freq, self.scaling).on(device)
        if self.rope_type == "longrope" and self.original is not None:
            if self.long is None:
                self.long = self._compute(self.original + 1)
            self.angle_tables("long", self.long, self.scaling).on(device)
        if self.sections is not None:
            self.rows_on(device)

    def rows_on(self, device: torch.device) -> torch.Tensor:
        """The row of multi-axis ``position_ids`` each frequency pair takes, on ``device``."""
        rows = self.rows.get(device)
        if rows is None:
            assert self.sections is not None and self.sections_layout is not None
            made = _vl.pair_rows(self.sections, self.sections_layout)
            rows = torch.from_numpy(made).to(device)
            self.rows[device] = rows
        return rows

    def device_caches(self, position_ids: torch.Tensor, dtype: torch.dtype,
                      device: torch.device, frequencies: Optional[Frequencies] = None) -> Caches:
        """The caches at ``position_ids`` in this rope's form on ``device``, by device
        operations alone.  ``frequencies``: dynamic's set for this call (``select``'s);
        longrope's switch is a ``torch.where`` on ``max(position_ids) + 1`` between
        the two sets, both computed, as transformers traces it."""
        ids = position_ids if position_ids.device == device else position_ids.to(device)
        per_pair = self.sections is not None
        if per_pair:  # (S, B, L) -> (B, L, m): each pair's own position
            ids = _vl.broadcast_rows(ids).index_select(0, self.rows_on(device)).movedim(0, -1)
        values_dtype = torch.float32 if self.form == "complex" else dtype
        if frequencies is not None:
            freq, scaling = frequencies
            values = self.angle_tables(None, freq, scaling).values(ids, values_dtype, per_pair)
        else:
            values = self.angle_tables("init", self.freq, self.scaling).values(
                ids, values_dtype, per_pair)
            if self.rope_type == "longrope" and self.original is not None:
                if self.long is None:
                    self.long = self._compute(self.original + 1)
                long = self.angle_tables("long", self.long, self.scaling).values(
                    ids, values_dtype, per_pair)
                top = position_ids.max()  # (integers widened: uint8's max + 1 wraps)
                top = top if top.is_floating_point() else top.long()
                values = torch.where(top + 1 > self.original, long, values)
        return pair_caches(values, self.form)


def row_bytes(width: int, form: str, dtype: torch.dtype) -> int:
    """The bytes a table takes per position."""
    if form == "complex":
        return width * 4  # float32 (cos, sin) pairs
    return 2 * (width // 2 if form == "half" else width) * dtype.itemsize


def make_table(rows: int, freq: NDArray[np.float64], scaling: float, form: str,
               dtype: torch.dtype, device: torch.device
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The kept table of positions 0 .. rows - 1 in ``form`` (a complex form's one
    float32 table twice); on the meta device, its shapes alone."""
    if device.type == "meta":
        if form == "complex":
            pairs = _empty((rows, 2 * len(freq)), torch.float32, device)
            return pairs, pairs
        cos, sin = empty_caches((rows,), 2 * len(freq), form, dtype, device)
        return cos, sin
    with torch.inference_mode(False):  # an ordinary tensor, usable in any mode
        return _form_of(rope_cache(rows, 2 * len(freq), freq=freq, scale=scaling,
                                   layout=_layout_of(form), dtype=_real_dtype(form, dtype),
                                   device=device), form)


def direct_caches(position_ids: torch.Tensor, freq: NDArray[np.float64], scaling: float,
                  form: str, dtype: torch.dtype, device: torch.device) -> Caches:
    """A call's caches at ``position_ids``, computed for it alone (on the meta device,
    their shapes alone)."""
    if device.type == "meta":
        return empty_caches(tuple(position_ids.shape), 2 * len(freq), form, dtype, device)
    made = rope_cache(None, 2 * len(freq), positions=position_ids, freq=freq, scale=scaling,
                      layout=_layout_of(form), dtype=_real_dtype(form, dtype), device=device)
    return _complex(_form_of(made, form)[0]) if form == "complex" else _form_of(made, form)


def lookup(tables: tuple[torch.Tensor, torch.Tensor], ids: torch.Tensor, form: str) -> Caches:
    """The rows ``ids`` of kept tables, in ``form``, by a row gather, whose indices are
    int32 or int64."""
    if ids.dtype is not torch.int64 and ids.dtype is not torch.int32:
        ids = ids.long()  # int8, int16, uint8 positions
    if form == "complex":
        return _complex(torch.embedding(tables[0], ids))
    return torch.embedding(tables[0], ids), torch.embedding(tables[1], ids)


def empty_caches(shape: tuple[int, ...], width: int, form: str, dtype: torch.dtype,
                 device: torch.device) -> Caches:
    """Caches of positions of ``shape`` holding no values: for no positions, or on
    the meta device (shapes and dtypes without a kernel call)."""
    if form == "complex":
        return _empty((*shape, width // 2), torch.complex64, device)
    columns = width // 2 if form == "half" else width
    return (_empty((*shape, columns), dtype, device), _empty((*shape, columns), dtype, device))


def _layout_of(form: str) -> str:
    """The layout of rope_cache a form is cut from."""
    return "interleaved" if form == "complex" else "concatenated" if form == "half" else form


def _real_dtype(form: str, dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if form == "complex" else dtype


def _form_of(made: tuple[torch.Tensor, torch.Tensor], form: str
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """rope_cache's ``(cos, sin)`` in ``form``: half's first halves made contiguous;
    complex's interleaved cos with the sines in its odd columns (twice)."""
    cos, sin = made
    if form == "half":
        half = cos.shape[-1] // 2
        return cos[..., :half].contiguous(), sin[..., :half].contiguous()
    if form == "complex":
        cos[..., 1::2] = sin[..., 1::2]
        return cos, cos
    return cos, sin


def _complex(pairs: torch.Tensor) -> torch.Tensor:
    """Rows of ``(cos, sin)`` pairs as complex64 ``cos + i sin``, without a copy."""
    return torch.view_as_complex(pairs.view(*pairs.shape[:-1], pairs.shape[-1] // 2, 2))
