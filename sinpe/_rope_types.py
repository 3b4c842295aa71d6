"""The frequencies and attention factor of every RoPE type transformers knows, in double.

:func:`rope_frequencies` (exported as ``sinpe.rope_frequencies``) takes HF's own
``rope_parameters`` (a dict, or a transformers config, whose ``rope_parameters``
5.x standardises) and returns the ``r/2`` frequencies and the factor that
multiplies cos and sin.  The formulas are those of transformers'
``modeling_rope_utils`` (its ``ROPE_INIT_FUNCTIONS`` and the models'
``compute_default_rope_parameters``), including their defaults and quirks
(``beta_fast or 32``, a YaRN ``factor`` of None taken from the context lengths,
LongRoPE's default attention factor, ``proportional``'s zero frequencies), but
evaluated in double: HF evaluates them in float32, which costs a few float32
ulps of each frequency.  Pure Python and NumPy: ``r/2`` numbers are not a
kernel, and nothing here imports torch or transformers.

Every power ``theta ** e`` is correctly rounded (in decimal arithmetic of 40
digits, then rounded once to double), not left to the platform's libm: the
frequencies are the same bits everywhere, and plain RoPE's are exactly the ones
``sinpe.rope(n=theta)`` uses.  The Python floats HF computes in Python (the
attention factors, YaRN's correction range, the dynamic base) are computed by
the same expressions, so they are HF's doubles.
"""
from __future__ import annotations

import decimal
import math
import numbers
import operator
from collections.abc import Mapping, Sequence
from typing import Any, Optional

import numpy as np
from numpy.typing import NDArray

__all__ = ["ROPE_TYPES", "rope_frequencies"]

# rope_theta when a dict leaves it out (transformers' RotaryEmbeddingConfigMixin.default_theta)
DEFAULT_THETA = 10000.0


def rope_frequencies(
    head_dim: Optional[int],
    rope_parameters: Any = None,
    *,
    max_position_embeddings: Optional[int] = None,
    seq_len: Optional[int] = None,
    layer_type: Optional[str] = None,
) -> tuple[NDArray[np.float64], float]:
    """The RoPE frequencies and attention factor of a transformers rope type, in double.

    Returns ``(freq, attention_scaling)``: ``freq`` a new float64 array of the
    ``r/2`` frequencies (``r`` the rotary width: ``head_dim`` times
    ``partial_rotary_factor``, rounded up to even; ``head_dim`` itself for
    ``proportional``, whose unrotated pairs get frequency 0) and the Python
    float that multiplies cos and sin (1.0 but for ``yarn`` and ``longrope``).
    Pass them on as ``sinpe.rope(..., freq=freq, scale=attention_scaling)``.

    ``rope_parameters`` is None (plain RoPE, ``rope_theta`` 10000), a dict with
    HF's keys (``rope_type``, or the legacy ``type``; ``rope_theta``,
    ``factor``, ``partial_rotary_factor``, ``original_max_position_embeddings``,
    ``attention_factor``, ``beta_fast``, ``beta_slow``, ``mscale``,
    ``mscale_all_dim``, ``truncate``, ``short_factor``, ``long_factor``,
    ``low_freq_factor``, ``high_freq_factor``; others are ignored), or a
    transformers config: then ``head_dim`` (None), ``max_position_embeddings``
    (None) and the parameters come from it, as HF's modules read them.  Types:
    ``default``, ``linear``, ``dynamic``, ``yarn``, ``longrope``, ``llama3``,
    ``proportional``.

    Per-layer-type parameters (Gemma 3's ``{"full_attention": {...},
    "sliding_attention": {...}}``, in a dict or a config) need ``layer_type``
    to name one; a config's ``per_layer_config`` then gives that type's
    ``head_dim`` as HF's functions take it.

    ``seq_len`` is the sequence length HF's module switches on (its
    ``max(position_ids) + 1``): ``dynamic`` scales its base past
    ``max_position_embeddings`` (None: at ``max_position_embeddings``, the
    default base), ``longrope`` takes ``long_factor`` past
    ``original_max_position_embeddings``, else ``short_factor`` (None: the short
    ones, as HF's module starts); other types ignore it.
    ``original_max_position_embeddings`` defaults to ``max_position_embeddings``
    for the types that use it, as HF's standardisation does.  Lengths
    (``max_position_embeddings``, ``original_max_position_embeddings``) may be
    ints or integral floats (HF's configs hold either), of any size.

    Raises ``TypeError`` (a wrong kind of argument, e.g. a ``rope_type`` that is
    not a string) or ``ValueError`` (an unknown type, a missing key, a value out
    of range: ``rope_theta`` below 1, a factor that is not positive and finite, a
    ``dynamic`` factor whose grown base overflows, factor lists of the wrong
    length, a length that is not a whole number), each naming the key.

    >>> import sinpe
    >>> freq, scale = sinpe.rope_frequencies(128, {"rope_type": "yarn", "factor": 4.0,
    ...     "original_max_position_embeddings": 32768, "rope_theta": 1e6})
    >>> freq.shape, round(scale, 6)
    ((64,), 1.138629)
    """
    params, config = _parameters(rope_parameters, layer_type)
    if config is not None:
        if head_dim is None:
            head_dim = _config_head_dim(config, layer_type)
        if max_position_embeddings is None:
            max_position_embeddings = getattr(config, "max_position_embeddings", None)
    if head_dim is None:
        raise ValueError("head_dim is needed (None only with a transformers config, which has it)")
    head_dim = _positive_int(head_dim, "head_dim")
    if max_position_embeddings is not None:
        max_position_embeddings = _length(max_position_embeddings, "max_position_embeddings")
    if seq_len is not None:
        seq_len = _positive_int(seq_len, "seq_len")
    rope_type = params.get("rope_type", params.get("type", "default"))
    if not isinstance(rope_type, str):
        raise TypeError(f"rope_parameters['rope_type'] must be a string (one of "
                        f"{', '.join(ROPE_TYPES)}), got {rope_type!r}")
    if rope_type not in _FORMULAS:
        raise ValueError(f"rope_parameters['rope_type']={rope_type!r} is not a rope type sinpe "
                         f"knows: {', '.join(ROPE_TYPES)}")
    rope = _Parameters(params, rope_type, head_dim, max_position_embeddings, seq_len)
    freq, scaling = _FORMULAS[rope_type](rope)
    return np.asarray(freq, np.float64), float(scaling)


# -- the arguments ------------------------------------------------------------------------


def _parameters(rope_parameters: Any, layer_type: Optional[str]) -> tuple[Mapping[str, Any], Any]:
    """The flat parameter dict of the call, and the config it came from (or None)."""
    config = None
    if rope_parameters is None:
        params: Any = {}
    elif isinstance(rope_parameters, Mapping):
        params = rope_parameters
    elif hasattr(rope_parameters, "rope_parameters"):
        config = rope_parameters
        params = config.rope_parameters
        if not isinstance(params, Mapping) or not params:
            raise ValueError(f"the config ({type(config).__name__}) has no rope_parameters "
                             f"(got {params!r}): the model has no rotary embedding")
    else:
        raise TypeError("rope_parameters must be None, a dict of HF's rope keys or a "
                        f"transformers config, got {type(rope_parameters).__name__}")
    nested = [key for key, value in params.items()
              if isinstance(value, Mapping) or (value is None and key.endswith("attention"))]
    if nested and len(nested) == len(params):  # per layer type
        if layer_type is None:
            raise ValueError(f"rope_parameters are given per layer type ({', '.join(nested)}): "
                             "pass layer_type= to choose one")
        if layer_type not in params:
            raise ValueError(f"layer_type={layer_type!r} is not among the layer types of "
                             f"rope_parameters: {', '.join(nested)}")
        params = params[layer_type]
        if params is None:
            raise ValueError(f"layer_type={layer_type!r} has no rotary embedding "
                             "(its rope_parameters are None)")
    return params, config


def _config_head_dim(config: Any, layer_type: Optional[str]) -> Any:
    """HF's rule: ``head_dim`` or ``hidden_size // num_attention_heads``, of the layer
    type's own config where the config has one per layer type (Gemma 4)."""
    if layer_type is not None:
        try:
            config = config.per_layer_config[layer_type]
        except (AttributeError, KeyError, IndexError, TypeError, ValueError):
            pass
    head_dim = getattr(config, "head_dim", None)
    if head_dim:
        return head_dim
    try:
        return config.hidden_size // config.num_attention_heads
    except AttributeError:
        raise ValueError(f"the config ({type(config).__name__}) has neither head_dim nor "
                         "hidden_size and num_attention_heads: pass head_dim") from None


def _positive_int(value: Any, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an int, got {value!r}")
    number = operator.index(value)
    if number < 1:
        raise ValueError(f"{name} must be >= 1, got {name}={number}")
    return number


def _length(value: Any, name: str) -> int:
    """A context length of a config: an int, or a float holding a whole number (HF's
    configs keep what the JSON said), >= 1 and of any size a float can hold."""
    if isinstance(value, bool) or not isinstance(value, (numbers.Integral, numbers.Real)):
        raise TypeError(f"{name} must be an int, got {value!r}")
    if not isinstance(value, numbers.Integral):
        number = float(value)
        if not number.is_integer():
            raise ValueError(f"{name} must be a whole number of positions, got {value!r}")
        value = int(number)
    length = operator.index(value)
    if length < 1:
        raise ValueError(f"{name} must be >= 1, got {name}={length}")
    try:
        float(length)  # HF's formulas divide by it in floats
    except OverflowError:
        raise ValueError(f"{name}={length} is too large for a float") from None
    return length


def _real(value: Any, name: str, *, positive: bool = False) -> float:
    """A finite real of rope_parameters (``> 0`` with positive)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"rope_parameters[{name!r}] must be a number, got {value!r}")
    number = float(value)
    if not math.isfinite(number) or (positive and number <= 0.0):
        need = "positive and finite" if positive else "finite"
        raise ValueError(f"rope_parameters[{name!r}] must be {need}, got {number!r}")
    return number


class _Parameters:
    """One call's parameters, read the way HF's functions read them."""

    def __init__(self, params: Mapping[str, Any], rope_type: str, head_dim: int,
                 max_position_embeddings: Optional[int], seq_len: Optional[int]) -> None:
        self.params = params
        self.rope_type = rope_type
        self.head_dim = head_dim
        self.max_position_embeddings = max_position_embeddings
        self.seq_len = seq_len
        self.theta = _real(params.get("rope_theta", DEFAULT_THETA), "rope_theta", positive=True)
        if self.theta < 1.0:  # a base below 1 turns the frequencies' decay upside down
            raise ValueError(f"rope_parameters['rope_theta'] must be >= 1 (the base of the "
                             f"frequencies), got {self.theta!r}")
        partial = params.get("partial_rotary_factor", 1.0)
        self.partial = 1.0 if partial is None else _real(partial, "partial_rotary_factor",
                                                          positive=True)
        if self.partial > 1.0:
            raise ValueError("rope_parameters['partial_rotary_factor'] must be in (0, 1], got "
                             f"{self.partial!r}")
        self.dim = int(head_dim * self.partial)  # HF's rotary width, before rounding up
        if self.dim < 1:
            raise ValueError(f"head_dim={head_dim} times partial_rotary_factor={self.partial} "
                             "leaves no feature to rotate")

    def required(self, key: str) -> Any:
        if key not in self.params or self.params[key] is None:
            raise ValueError(f"rope_parameters[{key!r}] is required for rope_type "
                             f"{self.rope_type!r}")
        return self.params[key]

    def factor(self, optional: bool = False) -> Optional[float]:
        value = self.params.get("factor") if optional else self.required("factor")
        return None if value is None else _real(value, "factor", positive=True)

    def need_max_position_embeddings(self, why: str) -> int:
        if self.max_position_embeddings is None:
            raise ValueError(f"max_position_embeddings is needed for rope_type "
                             f"{self.rope_type!r} ({why})")
        return self.max_position_embeddings

    def original_max_position_embeddings(self) -> int:
        value = self.params.get("original_max_position_embeddings")
        if value is None:  # HF's standardisation: the trained length is the current one
            return self.need_max_position_embeddings(
                "as original_max_position_embeddings, which rope_parameters leaves out")
        return _length(value, "rope_parameters['original_max_position_embeddings']")

    def exponents(self, dim: Optional[int] = None, count: Optional[int] = None) -> NDArray[np.float64]:
        """HF's ``arange(0, dim, 2) / dim``: the exponents 2k/dim of the base."""
        dim = self.dim if dim is None else dim
        count = len(range(0, dim, 2)) if count is None else count
        return np.arange(0, 2 * count, 2, dtype=np.float64) / dim

    def powers(self, base: Optional[float] = None) -> NDArray[np.float64]:
        """``base ** -(2k/dim)``: the default frequencies, correctly rounded."""
        return _power(self.theta if base is None else base, -self.exponents())


_DECIMAL = decimal.Context(prec=40)


def _power(base: float, exponents: NDArray[np.float64]) -> NDArray[np.float64]:
    """``base ** exponents``, each correctly rounded: exp(e ln base) to 40 digits
    (decimal's ln and exp are correctly rounded; the product's rounding is 1e-40
    relative), then rounded once to double, whose rounding it cannot change but
    within 1e-38 of a midpoint between doubles."""
    log_base = _DECIMAL.ln(decimal.Decimal(base))
    return np.array([1.0 if e == 0 else
                     float(_DECIMAL.exp(_DECIMAL.multiply(decimal.Decimal(float(e)), log_base)))
                     for e in exponents], np.float64)


# -- the formulas (modeling_rope_utils.py's, in double) -----------------------------------


def _default(rope: _Parameters) -> tuple[NDArray[np.float64], float]:
    return rope.powers(), 1.0


def _linear(rope: _Parameters) -> tuple[NDArray[np.float64], float]:
    factor = rope.factor()
    assert factor is not None
    return rope.powers() / factor, 1.0


def _dynamic(rope: _Parameters) -> tuple[NDArray[np.float64], float]:
    """NTK scaling: the base grows with the sequence past max_position_embeddings."""
    factor = rope.factor()
    assert factor is not None
    trained = rope.need_max_position_embeddings("the length past which the base grows")
    # HF's rule: a missing seq_len (the module at construction) is the trained length
    seq_len = max(trained if rope.seq_len is None else rope.seq_len, trained)
    if rope.dim <= 2:
        raise ValueError(f"rope_type 'dynamic' needs a rotary width above 2 (its exponent "
                         f"dim / (dim - 2)), got {rope.dim}")
    try:
        base = rope.theta * ((factor * seq_len / trained) - (factor - 1)) ** (rope.dim
                                                                          / (rope.dim - 2))
    except OverflowError:
        base = math.inf
    if not (math.isfinite(base) and base >= 1.0):
        raise ValueError(f"rope_parameters['factor']={factor!r} makes dynamic NTK's base "
                         f"{base!r} at seq_len={seq_len} (rope_theta * (factor * seq_len / "
                         "max_position_embeddings - factor + 1) ** (dim / (dim - 2))): it must "
                         "be a finite number >= 1")
    return rope.powers(base), 1.0


def _mscale(scale: float, mscale: float = 1.0) -> float:
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def _yarn(rope: _Parameters) -> tuple[NDArray[np.float64], float]:
    params = rope.params
    factor = rope.factor(optional=True)
    original = rope.original_max_position_embeddings()
    if factor is None:  # DeepSeek-V3's convention: the ratio of the context lengths
        factor = rope.need_max_position_embeddings("factor is None: the ratio of the "
                                                   "context lengths") / original
    attention_factor = params.get("attention_factor")
    mscale = params.get("mscale")
    mscale_all_dim = params.get("mscale_all_dim")
    mscale = None if mscale is None else _real(mscale, "mscale")
    mscale_all_dim = None if mscale_all_dim is None else _real(mscale_all_dim, "mscale_all_dim")
    if attention_factor is None:
        if mscale and mscale_all_dim:
            attention_factor = float(_mscale(factor, mscale) / _mscale(factor, mscale_all_dim))
        else:
            attention_factor = _mscale(factor)
    else:
        attention_factor = _real(attention_factor, "attention_factor", positive=True)
    # HF: `or`, so that 0 and None both take the paper's values
    beta_fast = _real(params.get("beta_fast") or 32, "beta_fast", positive=True)
    beta_slow = _real(params.get("beta_slow") or 1, "beta_slow", positive=True)
    truncate = params.get("truncate", True)
    if not isinstance(truncate, (bool, np.bool_)):
        raise TypeError(f"rope_parameters['truncate'] must be a bool, got {truncate!r}")
    dim, base = rope.dim, rope.theta
    if dim % 2:
        raise ValueError(f"rope_type 'yarn' needs an even rotary width, got {dim} (head_dim "
                         f"{rope.head_dim} times partial_rotary_factor {rope.partial})")
    if base == 1.0:
        raise ValueError("rope_type 'yarn' needs rope_theta != 1 (its correction range "
                         "divides by log(rope_theta))")
    low, high = _correction_range(dim, base, original, beta_fast, beta_slow, bool(truncate))
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0.0, 1.0)
    extrapolation = 1.0 - ramp
    pos_freqs = _power(base, rope.exponents())
    inv_freq_extrapolation = 1.0 / pos_freqs
    inv_freq_interpolation = 1.0 / (factor * pos_freqs)
    freq = (inv_freq_interpolation * (1.0 - extrapolation)
            + inv_freq_extrapolation * extrapolation)
    return np.asarray(freq, np.float64), attention_factor  # (NumPy 1.x's stubs lose the dtype)


def _correction_range(dim: int, base: float, original: float, beta_fast: float,
                      beta_slow: float, truncate: bool) -> tuple[float, float]:
    """YaRN's range of pairs that blend interpolation and extrapolation (HF's
    find_correction_range and linear_ramp_factor's guard, in Python floats as HF's)."""
    def correction_dim(rotations: float) -> float:
        return (dim * math.log(original / (rotations * 2 * math.pi))) / (2 * math.log(base))

    low, high = correction_dim(beta_fast), correction_dim(beta_slow)
    if truncate:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # HF: prevents a division by zero
    return low, high


def yarn_correction_range(dim: int, theta: float, params: Mapping[str, Any]
                          ) -> tuple[float, float]:
    """YaRN's correction range of a rotary width ``dim`` and base ``theta`` for HF's
    ``rope_parameters`` (``original_max_position_embeddings``, ``beta_fast``,
    ``beta_slow``, ``truncate``), as :func:`rope_frequencies` uses it."""
    return _correction_range(dim, theta, float(params["original_max_position_embeddings"]),
                             float(params.get("beta_fast") or 32),
                             float(params.get("beta_slow") or 1),
                             bool(params.get("truncate", True)))


def _factor_list(rope: _Parameters, key: str) -> NDArray[np.float64]:
    value = rope.required(key)
    count = len(range(0, rope.dim, 2))
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (Sequence, np.ndarray)):
        raise TypeError(f"rope_parameters[{key!r}] must be a list of {count} numbers, "
                        f"got {type(value).__name__}")
    if len(value) != count:
        raise ValueError(f"rope_parameters[{key!r}] must have {count} entries (one per "
                         f"frequency of the rotary width {rope.dim}), got {len(value)}")
    return np.array([_real(v, key, positive=True) for v in value], np.float64)


def _longrope(rope: _Parameters) -> tuple[NDArray[np.float64], float]:
    params = rope.params
    long_factor = _factor_list(rope, "long_factor")
    short_factor = _factor_list(rope, "short_factor")
    original = rope.original_max_position_embeddings()
    factor = rope.factor(optional=True)
    if factor is None:  # Phi-3's convention: the ratio of the context lengths
        factor = rope.need_max_position_embeddings("factor is None: the ratio of the "
                                                   "context lengths") / original
    attention_factor = params.get("attention_factor")
    if attention_factor is None:
        if factor <= 1.0:
            attention_factor = 1.0
        elif original == 1:
            raise ValueError("rope_parameters['original_max_position_embeddings'] must be above "
                             "1 for LongRoPE's default attention factor (it divides by its log)")
        else:
            attention_factor = math.sqrt(1 + math.log(factor) / math.log(original))
    else:
        attention_factor = _real(attention_factor, "attention_factor", positive=True)
    # HF's rule: a missing seq_len (the module at construction) takes the short factors
    seq_len = rope.seq_len
    ext_factors = long_factor if seq_len is not None and seq_len > original else short_factor
    return 1.0 / (ext_factors * _power(rope.theta, rope.exponents())), attention_factor


def _llama3(rope: _Parameters) -> tuple[NDArray[np.float64], float]:
    factor = rope.factor()
    assert factor is not None
    low_freq_factor = _real(rope.required("low_freq_factor"), "low_freq_factor", positive=True)
    high_freq_factor = _real(rope.required("high_freq_factor"), "high_freq_factor",
                             positive=True)
    # high_freq_factor <= low_freq_factor (Llama 4 Scout's 1.0 and 1.0): transformers warns
    # and computes, with no pair between the bands to smooth
    old_context_len = rope.original_max_position_embeddings()
    inv_freq = rope.powers()
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * math.pi / inv_freq
    inv_freq_llama = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    with np.errstate(divide="ignore", invalid="ignore"):  # (no medium band: not used)
        smooth_factor = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor
                                                                         - low_freq_factor)
        smoothed = (1 - smooth_factor) * inv_freq_llama / factor + smooth_factor * inv_freq_llama
    is_medium = ~(wavelen < high_freq_wavelen) & ~(wavelen > low_freq_wavelen)
    return np.where(is_medium, smoothed, inv_freq_llama), 1.0


def _proportional(rope: _Parameters) -> tuple[NDArray[np.float64], float]:
    """Gemma 4's global layers: the first pairs rotate with exponents over the whole
    head_dim, the rest get frequency 0 (they keep their values)."""
    factor = rope.params.get("factor", 1.0)
    factor = 1.0 if factor is None else _real(factor, "factor", positive=True)
    head_dim = rope.head_dim
    rope_angles = int(rope.partial * head_dim // 2)
    rotated = _power(rope.theta, -rope.exponents(head_dim, rope_angles))
    nope_angles = head_dim // 2 - rope_angles
    if nope_angles > 0:
        rotated = np.concatenate([rotated, np.zeros(nope_angles)])
    if rotated.size == 0:
        raise ValueError(f"rope_type 'proportional' with head_dim={head_dim} has no pair to "
                         "rotate")
    return rotated / factor, 1.0


# The one table of rope types: each name transformers gives a type, and its formula.
# ROPE_TYPES, the names alone, is read from it, so a new type is one entry here.
_FORMULAS = {"default": _default, "linear": _linear, "dynamic": _dynamic, "yarn": _yarn,
             "longrope": _longrope, "llama3": _llama3, "proportional": _proportional}
ROPE_TYPES = tuple(_FORMULAS)
