"""sinpe.rope_frequencies against transformers' own functions, on real configs.

Each realistic config (Llama 3.1's ``llama3``, Qwen2.5's ``yarn``, DeepSeek-V3's
``yarn`` with ``mscale``, Phi-3 128k's ``longrope`` on both sides of its switch,
``dynamic`` below and above the trained length, ``linear``, Gemma 4's
``proportional``, plain RoPE with and without partial rotary) is built as the
transformers config class of its model, and transformers' ``ROPE_INIT_FUNCTIONS``
(or the family module's ``compute_default_rope_parameters``) compute its
``inv_freq`` and attention factor.  sinpe's frequencies must be within the
error of transformers' float32 evaluation (per rope type) and the
attention factor the same double.

The bound of transformers' float32 evaluation error, per rope type, is derived in
:func:`sinpe.torch._verify.frequency_error` (the rotary module checks a family's
frequencies with it too).
"""
from __future__ import annotations

import functools
import math
import subprocess
import sys

import numpy as np
import pytest
from conftest import require, require_module, require_torch

import sinpe

require_torch()
from sinpe.torch._verify import frequency_error  # noqa: E402  (the bound, derived there)

U = 2.0**-24

pytestmark = pytest.mark.needs("torch", "transformers")


def _phi3_factors():
    rng = np.random.default_rng(3)  # Phi-3 128k has 48 of each, short near 1, long up to ~60
    return [float(v) for v in 1.0 + 0.1 * rng.random(48)], [
        float(v) for v in 1.0 + 60.0 * rng.random(48)]


@functools.cache
def configs():
    """(name, config, seq_len, layer_type): realistic configs of every rope type."""
    tf = require("transformers")
    short, long = _phi3_factors()
    phi3 = tf.Phi3Config(hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
                         original_max_position_embeddings=4096,
                         rope_scaling={"type": "longrope", "short_factor": short,
                                       "long_factor": long})
    dynamic = tf.LlamaConfig(hidden_size=4096, num_attention_heads=32, max_position_embeddings=4096,
                             rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    return [
        ("llama3.1 llama3", tf.LlamaConfig(
            hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
            rope_theta=500000.0, rope_scaling={
                "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}), None, None),
        ("qwen2.5 yarn", tf.Qwen2Config(
            hidden_size=5120, num_attention_heads=40, max_position_embeddings=131072,
            rope_theta=1000000.0, rope_scaling={
                "rope_type": "yarn", "factor": 4.0,
                "original_max_position_embeddings": 32768}), None, None),
        ("deepseek-v3 yarn mscale", tf.DeepseekV3Config(
            hidden_size=7168, num_attention_heads=128, qk_rope_head_dim=64,
            max_position_embeddings=163840, rope_theta=10000.0, rope_scaling={
                "rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096}),
         None, None),
        ("yarn attention_factor", tf.LlamaConfig(
            hidden_size=2048, num_attention_heads=16, max_position_embeddings=65536,
            rope_scaling={"rope_type": "yarn", "factor": 16.0, "attention_factor": 0.8,
                          "original_max_position_embeddings": 4096}), None, None),
        ("phi3-128k longrope short", phi3, 4096, None),
        ("phi3-128k longrope long", phi3, 4097, None),
        ("dynamic below", dynamic, 1000, None),
        ("dynamic above", dynamic, 10000, None),
        ("llama4 scout llama3", tf.Llama4TextConfig(  # low == high: no band to smooth
            hidden_size=5120, num_attention_heads=40, head_dim=128,
            max_position_embeddings=10485760, rope_parameters={
                "rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0,
                "high_freq_factor": 1.0, "original_max_position_embeddings": 8192,
                "rope_theta": 500000.0}), None, None),
        ("linear", tf.LlamaConfig(hidden_size=4096, num_attention_heads=32,
                                  rope_scaling={"rope_type": "linear", "factor": 4.0}), None, None),
        ("gemma4 proportional", tf.Gemma4TextConfig(), None, "full_attention"),
        ("llama default", tf.LlamaConfig(hidden_size=4096, num_attention_heads=32,
                                         rope_theta=500000.0), None, None),
        ("gpt-neox partial default", tf.GPTNeoXConfig(hidden_size=2560, num_attention_heads=32,
                                                      rotary_pct=0.25), None, None),
    ]


CONFIG_NAMES = ["llama3.1 llama3", "llama4 scout llama3", "qwen2.5 yarn", "deepseek-v3 yarn mscale",
                "yarn attention_factor", "phi3-128k longrope short", "phi3-128k longrope long",
                "dynamic below", "dynamic above", "linear", "gemma4 proportional",
                "llama default", "gpt-neox partial default"]


def config_named(name):
    return next(c for c in configs() if c[0] == name)


def hf_frequencies(config, seq_len, layer_type):
    """transformers' inv_freq (float64 of its float32) and attention factor, by the
    function its rotary module calls."""
    rope = require_module("transformers.modeling_rope_utils")
    params = config.rope_parameters if layer_type is None else config.rope_parameters[layer_type]
    kwargs = {} if layer_type is None else {"layer_type": layer_type}
    if params["rope_type"] == "default":
        modeling = require_module(type(config).__module__.replace(".configuration_", ".modeling_"))
        module = next(v for k, v in vars(modeling).items() if k.endswith("RotaryEmbedding"))
        inv_freq, scaling = module.compute_default_rope_parameters(config, **kwargs)
    else:
        if seq_len is not None:
            kwargs["seq_len"] = seq_len
        inv_freq, scaling = rope.ROPE_INIT_FUNCTIONS[params["rope_type"]](config, **kwargs)
    return inv_freq.double().numpy(), scaling


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_frequencies_and_attention_factor_are_transformers_in_double(name):
    _, config, seq_len, layer_type = config_named(name)
    want, want_scaling = hf_frequencies(config, seq_len, layer_type)
    freq, scaling = sinpe.rope_frequencies(None, config, seq_len=seq_len, layer_type=layer_type)
    assert freq.dtype == np.float64 and freq.shape == want.shape
    assert scaling == want_scaling and type(scaling) is float
    params = config.rope_parameters if layer_type is None else config.rope_parameters[layer_type]
    head_dim = (config.per_layer_config[layer_type].head_dim if layer_type
                else getattr(config, "head_dim", None)
                or config.hidden_size // config.num_attention_heads)
    bound = frequency_error(params, head_dim, freq, config.max_position_embeddings)
    worst = np.abs(freq - want) / np.where(bound > 0, bound, 1.0)
    assert (freq[bound == 0] == want[bound == 0]).all()  # proportional's zeros
    assert worst.max() <= 1.0, (name, int(worst.argmax()), freq[worst.argmax()],
                                want[worst.argmax()])


def test_the_switches_of_dynamic_and_longrope():
    _, phi3, _, _ = config_named("phi3-128k longrope long")
    short, long = _phi3_factors()
    at = {n: sinpe.rope_frequencies(None, phi3, seq_len=n)[0] for n in (1, 4096, 4097, 131072)}
    assert np.array_equal(at[1], at[4096]) and np.array_equal(at[4097], at[131072])
    assert np.allclose(at[4096] * short, at[4097] * long, rtol=1e-15)
    _, dynamic, _, _ = config_named("dynamic above")
    below = [sinpe.rope_frequencies(None, dynamic, seq_len=n)[0] for n in (1, 4096)]
    default = sinpe.rope_frequencies(128, {"rope_theta": 10000.0})[0]
    assert np.array_equal(below[0], default) and np.array_equal(below[1], default)
    grown = [sinpe.rope_frequencies(None, dynamic, seq_len=n)[0] for n in (4097, 8192, 100000)]
    assert (grown[0][1:] < default[1:]).all() and (grown[2][1:] < grown[1][1:]).all()


def test_without_seq_len_as_transformers_module_starts():
    """seq_len None: longrope's short factors and dynamic's base at the trained length,
    as transformers' functions take a missing seq_len (its modules' construction)."""
    rope = require_module("transformers.modeling_rope_utils")
    for name in ("phi3-128k longrope long", "dynamic above"):
        _, config, _, _ = config_named(name)
        function = rope.ROPE_INIT_FUNCTIONS[config.rope_parameters["rope_type"]]
        want = function(config)[0].double().numpy()
        freq, _ = sinpe.rope_frequencies(None, config)
        trained = config.max_position_embeddings
        switch = config.rope_parameters.get("original_max_position_embeddings", trained)
        assert np.array_equal(freq, sinpe.rope_frequencies(None, config, seq_len=switch)[0])
        head_dim = config.hidden_size // config.num_attention_heads
        bound = frequency_error(config.rope_parameters, head_dim, freq, trained)
        assert (np.abs(freq - want) <= bound).all(), name


def test_lengths_are_ints_or_whole_floats_of_any_size():
    """HF's configs hold lengths as the JSON gave them (MusicFlamingo's 1200.0); a
    length only divides, so any size gives the ratio's numbers."""
    yarn = {**YARN, "factor": None}  # the factor is max_position_embeddings / original
    for length in (2**40, 10**30, 2.0**40):
        freq, scaling = sinpe.rope_frequencies(64, yarn, max_position_embeddings=length)
        assert scaling == 0.1 * math.log(length / 4096) + 1.0 and np.isfinite(freq).all()
    whole = sinpe.rope_frequencies(64, {**yarn, "original_max_position_embeddings": 4096.0},
                                   max_position_embeddings=65536.0)
    ints = sinpe.rope_frequencies(64, yarn, max_position_embeddings=65536)
    assert np.array_equal(whole[0], ints[0]) and whole[1] == ints[1]


def test_a_dict_gives_the_configs_numbers():
    _, config, _, _ = config_named("qwen2.5 yarn")
    params = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768,
              "rope_theta": 1000000.0}  # legacy "type"
    got = sinpe.rope_frequencies(128, params)
    want = sinpe.rope_frequencies(None, config)
    assert np.array_equal(got[0], want[0]) and got[1] == want[1]
    # original_max_position_embeddings defaults to max_position_embeddings (HF's rule)
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
              "high_freq_factor": 4.0, "rope_theta": 500000.0}
    a = sinpe.rope_frequencies(128, llama3, max_position_embeddings=8192)[0]
    b = sinpe.rope_frequencies(128, {**llama3, "original_max_position_embeddings": 8192})[0]
    assert np.array_equal(a, b)
    # None is plain RoPE, theta 10000, the frequencies sinpe.rope uses for n
    freq, scaling = sinpe.rope_frequencies(64)
    cos, _ = sinpe.rope(3, 64, dtype=np.float64, offset=5)
    assert scaling == 1.0 and np.array_equal(sinpe.rope(3, 64, freq=freq, dtype=np.float64,
                                                        offset=5)[0], cos)


def test_layer_types_are_chosen_by_name():
    tf = require("transformers")
    config = tf.Gemma3TextConfig(rope_parameters={
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}})
    full, _ = sinpe.rope_frequencies(None, config, layer_type="full_attention")
    sliding, _ = sinpe.rope_frequencies(None, config, layer_type="sliding_attention")
    head_dim = config.head_dim
    assert np.array_equal(full, sinpe.rope_frequencies(head_dim, {"rope_type": "linear",
                          "factor": 8.0, "rope_theta": 1e6})[0])
    assert np.array_equal(sliding, sinpe.rope_frequencies(head_dim)[0])
    with pytest.raises(ValueError, match="layer_type"):
        sinpe.rope_frequencies(None, config)
    with pytest.raises(ValueError, match="layer_type='global'"):
        sinpe.rope_frequencies(None, config, layer_type="global")
    with pytest.raises(ValueError, match="layer_type"):
        sinpe.rope_frequencies(64, dict(config.rope_parameters))


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 4096}
LONGROPE = {"rope_type": "longrope", "short_factor": [1.0] * 32, "long_factor": [2.0] * 32,
            "original_max_position_embeddings": 4096, "factor": 32.0}
BAD = [
    # (head_dim, parameters, keywords, error, what the message names)
    (64, {"rope_type": "ntk"}, {}, ValueError, "rope_type"),
    (64, {"type": "su"}, {}, ValueError, "rope_type"),
    (64, "yarn", {}, TypeError, "rope_parameters"),
    (64, [("rope_type", "yarn")], {}, TypeError, "rope_parameters"),
    (0, None, {}, ValueError, "head_dim"),
    (-2, None, {}, ValueError, "head_dim"),
    (64.0, None, {}, TypeError, "head_dim"),
    (True, None, {}, TypeError, "head_dim"),
    (None, None, {}, ValueError, "head_dim"),
    (64, {"rope_theta": -1.0}, {}, ValueError, "rope_theta"),
    (64, {"rope_theta": float("nan")}, {}, ValueError, "rope_theta"),
    (64, {"rope_theta": "1e4"}, {}, TypeError, "rope_theta"),
    (64, {"rope_theta": 1e-300}, {}, ValueError, "rope_theta"),
    (64, {"rope_theta": 0.5, "rope_type": "linear", "factor": 2.0}, {}, ValueError,
     "rope_theta"),
    (128, {**LLAMA3, "rope_theta": 0.99}, {}, ValueError, "rope_theta"),
    (64, {"rope_type": ["yarn"]}, {}, TypeError, "rope_type"),
    (64, {"rope_type": None}, {}, TypeError, "rope_type"),
    (64, {"partial_rotary_factor": 1.5}, {}, ValueError, "partial_rotary_factor"),
    (64, {"partial_rotary_factor": 0.0}, {}, ValueError, "partial_rotary_factor"),
    (64, {"partial_rotary_factor": 0.01}, {}, ValueError, "head_dim"),
    (64, {"rope_type": "linear"}, {}, ValueError, "'factor'"),
    (64, {"rope_type": "linear", "factor": -2.0}, {}, ValueError, "'factor'"),
    (64, {"rope_type": "linear", "factor": 0.0}, {}, ValueError, "'factor'"),
    (64, {"rope_type": "linear", "factor": float("inf")}, {}, ValueError, "'factor'"),
    (64, {"rope_type": "dynamic", "factor": 2.0}, {"seq_len": 10}, ValueError,
     "max_position_embeddings"),
    (64, {"rope_type": "dynamic", "factor": 1e300}, {"max_position_embeddings": 100}, ValueError,
     "'factor'"),
    (64, {"rope_type": "dynamic", "factor": 1e300}, {"max_position_embeddings": 100,
                                                     "seq_len": 200}, ValueError, "'factor'"),
    (64, {"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 100,
                                                   "seq_len": 0}, ValueError, "seq_len"),
    (64, {"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 100,
                                                   "seq_len": 5.0}, TypeError, "seq_len"),
    (2, {"rope_type": "dynamic", "factor": 2.0}, {"max_position_embeddings": 100,
                                                  "seq_len": 5}, ValueError, "dim"),
    (64, {"rope_type": "yarn", "factor": 4.0}, {}, ValueError,
     "original_max_position_embeddings"),
    (64, {**YARN, "original_max_position_embeddings": 0}, {}, ValueError,
     "original_max_position_embeddings"),
    (64, {**YARN, "original_max_position_embeddings": 4096.5}, {}, ValueError,
     "original_max_position_embeddings"),
    (64, {**YARN, "original_max_position_embeddings": "4096"}, {}, TypeError,
     "original_max_position_embeddings"),
    (64, {**YARN, "factor": None}, {}, ValueError, "max_position_embeddings"),
    (64, {**YARN, "attention_factor": -1.0}, {}, ValueError, "attention_factor"),
    (64, {**YARN, "beta_fast": -32.0}, {}, ValueError, "beta_fast"),
    (64, {**YARN, "beta_slow": float("nan")}, {}, ValueError, "beta_slow"),
    (64, {**YARN, "mscale": "1"}, {}, TypeError, "mscale"),
    (64, {**YARN, "mscale_all_dim": float("inf")}, {}, ValueError, "mscale_all_dim"),
    (64, {**YARN, "truncate": "yes"}, {}, TypeError, "truncate"),
    (64, {**YARN, "rope_theta": 1.0}, {}, ValueError, "rope_theta"),
    (62, {**YARN, "partial_rotary_factor": 0.5}, {}, ValueError, "even"),
    (64, {**LONGROPE, "short_factor": [1.0] * 31}, {"seq_len": 5}, ValueError, "short_factor"),
    (64, {**LONGROPE, "long_factor": [2.0] * 33}, {"seq_len": 5}, ValueError, "long_factor"),
    (64, {**LONGROPE, "long_factor": "2.0"}, {"seq_len": 5}, TypeError, "long_factor"),
    (64, {**LONGROPE, "short_factor": [1.0] * 31 + [0.0]}, {"seq_len": 5}, ValueError,
     "short_factor"),
    (64, {**LONGROPE, "long_factor": [2.0] * 31 + [None]}, {"seq_len": 5}, TypeError,
     "long_factor"),
    (64, {k: v for k, v in LONGROPE.items() if k != "long_factor"}, {"seq_len": 5}, ValueError,
     "long_factor"),
    (64, {**LONGROPE, "factor": None}, {"seq_len": 5}, ValueError, "max_position_embeddings"),
    (128, {k: v for k, v in LLAMA3.items() if k != "low_freq_factor"}, {}, ValueError,
     "low_freq_factor"),
    (128, {**LLAMA3, "factor": float("nan")}, {}, ValueError, "'factor'"),
    (64, {"rope_type": "proportional", "factor": -1.0}, {}, ValueError, "'factor'"),
    (64, None, {"max_position_embeddings": -5}, ValueError, "max_position_embeddings"),
    (64, None, {"max_position_embeddings": 1200.5}, ValueError, "max_position_embeddings"),
    (64, None, {"max_position_embeddings": float("inf")}, ValueError,
     "max_position_embeddings"),
    (64, None, {"max_position_embeddings": "1200"}, TypeError, "max_position_embeddings"),
    (64, {**YARN, "factor": None}, {"max_position_embeddings": 10**400}, ValueError,
     "max_position_embeddings"),
]


@pytest.mark.parametrize("head_dim, params, kwargs, error, names", BAD,
                         ids=[f"{i}-{b[4]}" for i, b in enumerate(BAD)])
def test_bad_input_raises_naming_the_key_and_changes_nothing(head_dim, params, kwargs, error,
                                                            names):
    before = None if not isinstance(params, dict) else repr(params)
    with pytest.raises(error, match=names):
        sinpe.rope_frequencies(head_dim, params, **kwargs)
    assert before is None or repr(params) == before  # the caller's dict is untouched


def test_a_config_without_rotary_embedding_raises():
    class Config:
        rope_parameters = None
        max_position_embeddings = 10

    with pytest.raises(ValueError, match="no rope_parameters"):
        sinpe.rope_frequencies(None, Config())


def test_sinpe_does_not_import_torch_for_it(tmp_path):
    code = ("import sys, sinpe\nsinpe.rope_frequencies(64, {'rope_type': 'yarn', 'factor': 4.0,"
            " 'original_max_position_embeddings': 4096})\n"
            "print('torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, check=True).stdout
    assert out.split() == ["False", "False"]
