"""sinpe.torch.RotaryEmbedding against transformers' own rotary modules.

* Frequencies: the model's own, bit for bit the float32 ``inv_freq`` and the
  attention factor transformers' module of that family holds (Llama 3.1's
  ``llama3``, Qwen2.5's ``yarn``, DeepSeek-V3's ``yarn`` with mscale, Phi-3's
  ``longrope``, Gemma 3's two layer types, Gemma 4's ``proportional``, OLMo,
  Cohere, GPT-NeoX's partial rotary), after every switch ``dynamic`` and
  ``longrope`` make, call by call, as transformers' module makes them.
* Values: every call's ``(cos, sin)`` are ``sinpe.torch.rope_cache`` of those
  frequencies, times the attention factor, at the call's positions, bit for bit,
  whichever path (a table lookup, a grown table, the direct computation) served
  them; in the family's layout and dtype (OLMo's float32, Cohere's pairs).
* Accuracy: within half an ulp of the exact ``s cos(p w)`` and ``s sin(p w)`` of
  the model's frequencies ``w`` (float64 of HF's float32) at positions up to
  ``2**20``, in float32, bfloat16 and float16 (on the device path,
  ``SINPE_TORCH_PATH=device``: plus ``2**-30`` times the power of two of ``s``), and
  transformers' own module at least 100 times further off near ``2**17`` (float32).
* A decoding step is a lookup (the kernel is not called once the table holds
  the position); tables are sized by the positions asked for (a small first one,
  then powers of two) within their memory cap, past which rows are computed for
  the call with the same bits (the kernel path's; the device path keeps no tables of
  rows); the module works under no_grad and inference_mode,
  has no state to save, and ``.to(dtype)`` cannot round it.  (Other forms, long
  contexts, dtypes of position_ids, the meta device: test_rotary_families.py.)
* Bad input raises before anything changes.
"""
from __future__ import annotations

import copy
import functools
import math
import pickle

import numpy as np
import pytest
from conftest import U64, device_excess, kernel_path, require, require_module, require_torch

import sinpe

torch = require_torch()
import sinpe.torch as st  # noqa: E402
from sinpe.torch import _rotary_family, _rotary_tables  # noqa: E402

pytestmark = pytest.mark.needs("transformers")


def transformers():
    return require("transformers")


def hf_module(config):
    """A new instance of transformers' rotary module for config's family."""
    modeling = require_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    return next(v for k, v in vars(modeling).items()
                if k.endswith("RotaryEmbedding") and "Vision" not in k)(config)


@functools.cache
def families():
    tf = transformers()
    short = [1.0 + 0.01 * k for k in range(48)]
    long = [1.0 + 1.5 * k for k in range(48)]
    return {
        "llama3.1 llama3": (tf.LlamaConfig(
            hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
            rope_theta=500000.0, rope_scaling={
                "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}), None),
        "qwen2.5 yarn": (tf.Qwen2Config(
            hidden_size=5120, num_attention_heads=40, max_position_embeddings=131072,
            rope_theta=1000000.0, rope_scaling={"rope_type": "yarn", "factor": 4.0,
                                                "original_max_position_embeddings": 32768}),
            None),
        "deepseek-v3 yarn": (tf.DeepseekV3Config(
            hidden_size=7168, num_attention_heads=128, qk_rope_head_dim=64,
            max_position_embeddings=163840, rope_scaling={
                "rope_type": "yarn", "factor": 40.0, "mscale": 1.0, "mscale_all_dim": 1.0,
                "beta_fast": 32, "beta_slow": 1, "original_max_position_embeddings": 4096}),
            None),
        "phi3 longrope": (tf.Phi3Config(
            hidden_size=3072, num_attention_heads=32, max_position_embeddings=131072,
            original_max_position_embeddings=4096,
            rope_scaling={"type": "longrope", "short_factor": short, "long_factor": long}),
            None),
        "gemma3 full": (tf.Gemma3TextConfig(head_dim=128, rope_parameters={
            "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}),
            "full_attention"),
        "gemma4 proportional": (tf.Gemma4TextConfig(hidden_size=128, num_attention_heads=2,
                                                    head_dim=32, global_head_dim=64),
                                "full_attention"),
        "olmo": (tf.OlmoConfig(hidden_size=256, num_attention_heads=4), None),
        "cohere": (tf.CohereConfig(hidden_size=256, num_attention_heads=4), None),
        "gpt-neox partial": (tf.GPTNeoXConfig(hidden_size=256, num_attention_heads=4,
                                              rotary_pct=0.25), None),
    }


def freq_of(hf, layer_type=None):
    prefix = "" if layer_type is None else f"{layer_type}_"
    return (getattr(hf, f"{prefix}inv_freq").double().numpy(),
            getattr(hf, f"{prefix}attention_scaling"))


def call(module, x, position_ids, layer_type):
    return module(x, position_ids) if layer_type is None else module(x, position_ids, layer_type)


def want(position_ids, freq, scaling, dtype, layout="concatenated"):
    return st.rope_cache(None, 2 * len(freq), positions=position_ids, freq=freq, scale=scaling,
                         dtype=dtype, layout=layout)


def assert_same(got, expected, what=""):
    for g, w in zip(got, expected):
        assert g.dtype == w.dtype and g.shape == w.shape, (what, g.dtype, w.dtype, g.shape)
        assert torch.equal(g, w), what


POSITIONS = {
    "decode": lambda: torch.tensor([[2047]]),
    "prefill": lambda: torch.arange(300)[None],
    "batched left padding": lambda: torch.stack([torch.arange(40), torch.arange(40) - 7]).clamp(
        min=0),
    "non-contiguous": lambda: torch.tensor([[5, 3, 900, 3, 17], [0, 0, 1, 1, 2]])[:, ::2],
    "negative": lambda: torch.tensor([[-3, 0, 7]]),
    "one axis": lambda: torch.arange(16),
    "int32": lambda: torch.arange(5, 12, dtype=torch.int32)[None],
    "float": lambda: torch.tensor([[0.5, 3.0, 1e5 + 0.25]]),
}


@pytest.mark.parametrize("name", list(families()))
def test_the_models_frequencies_and_caches_bit_for_bit(name):
    config, layer_type = families()[name]
    hf = hf_module(config)
    module = st.RotaryEmbedding(config)
    assert module.state_dict() == {} and list(module.buffers()) == []
    freq, scaling = freq_of(hf, layer_type)
    rotary = module._rotary_of(layer_type)
    assert np.array_equal(rotary.freq, freq) and rotary.scaling == scaling
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.zeros(2, 3, dtype=dtype)
        for where, positions in POSITIONS.items():
            position_ids = positions()
            hf_cos, _ = call(hf, x, position_ids.float(), layer_type)
            freq, scaling = freq_of(hf, layer_type)  # after longrope's switch
            got = call(module, x, position_ids, layer_type)
            layout = "interleaved" if name == "cohere" else "concatenated"
            assert_same(got, want(position_ids, freq, scaling, hf_cos.dtype, layout),
                        f"{name} {dtype} {where}")


def exact_caches(position_ids, freq, scaling):
    """s cos(p w), s sin(p w) in float64 (concatenated), and a bound of their error:
    the angle rounded once (|p w| u) and NumPy's cos/sin (4 u), times s, and the
    product by s (u)."""
    p = position_ids.double().numpy()[..., None]
    w = np.concatenate([freq, freq])
    angle = p * w
    error = scaling * (np.abs(angle) + 4.0) * U64 + U64
    return scaling * np.cos(angle), scaling * np.sin(angle), error


def sinpe_error(position_ids, freq, scaling):
    """sinpe's double before its rounding: p = p0 + r from an anchor at most 63 rows
    away (two products rounded), its sincos and the sum (conftest's
    SINPE_VALUE_ERROR, 12.2 u), times s and its product."""
    p = np.abs(position_ids.double().numpy())[..., None]
    w = np.concatenate([freq, freq])
    return scaling * ((p + 126.0) * w + 12.2) * U64 + U64


HALF_ULP = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


def half_ulp(values, dtype):
    """Half an ulp of |values| in dtype (normal numbers; the smallest subnormal spacing
    below)."""
    tiny = {torch.float32: 2.0**-149, torch.bfloat16: 2.0**-133, torch.float16: 2.0**-24}[dtype]
    magnitude = np.abs(values)
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    return np.maximum(2.0**exponent * HALF_ULP[dtype], tiny / 2)


ACCURACY_TYPES = ["llama3.1 llama3", "qwen2.5 yarn", "phi3 longrope", "gemma3 full"]
LONG = torch.cat([torch.arange(2**17 - 8, 2**17 + 8), torch.arange(2**20 - 8, 2**20 + 8),
                  torch.arange(0, 4)])[None]


@pytest.mark.parametrize("name", ACCURACY_TYPES)
def test_within_half_an_ulp_at_long_positions(name):
    config, layer_type = families()[name]
    module = st.RotaryEmbedding(config)
    hf = hf_module(config)
    call(hf, torch.zeros(1), LONG, layer_type)  # longrope: the long factors at these lengths
    freq, scaling = freq_of(hf, layer_type)
    cos, sin, error = exact_caches(LONG, freq, scaling)
    slack = error + sinpe_error(LONG, freq, scaling)
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        got = call(module, torch.zeros(1, dtype=dtype), LONG, layer_type)
        for g, exact in zip(got, (cos, sin)):
            g = g.double().numpy()
            bound = half_ulp(np.abs(exact) + slack, dtype) + slack + device_excess(scaling)
            assert (np.abs(g - exact) <= bound).all(), (name, dtype)


def test_transformers_is_100_times_further_off_near_2_17():
    near = torch.arange(2**17 - 8, 2**17 + 8)[None]
    for name in ACCURACY_TYPES:
        config, layer_type = families()[name]
        hf = hf_module(config)
        hf_cos, hf_sin = call(hf, torch.zeros(1), near, layer_type)
        freq, scaling = freq_of(hf, layer_type)
        cos, sin, _ = exact_caches(near, freq, scaling)
        ours = call(st.RotaryEmbedding(config), torch.zeros(1), near, layer_type)
        hf_error = max(np.abs(hf_cos.double().numpy() - cos).max(),
                       np.abs(hf_sin.double().numpy() - sin).max())
        our_error = max(np.abs(ours[0].double().numpy() - cos).max(),
                        np.abs(ours[1].double().numpy() - sin).max())
        assert hf_error >= 100 * our_error, (name, hf_error, our_error)


def run_side_by_side(config, lengths, dtype=torch.float32):
    """Calls of prefills (0 .. n - 1) and decoding steps (n - 1 alone), transformers'
    module and sinpe's in turn: each of sinpe's results must be rope_cache of the
    frequencies and factor transformers' module holds after the same call."""
    hf, module = hf_module(config), st.RotaryEmbedding(config)
    x = torch.zeros(1, dtype=dtype)
    for n in lengths:
        for position_ids in (torch.arange(n)[None], torch.tensor([[n - 1]])):
            hf(x, position_ids)
            freq, scaling = freq_of(hf)
            assert_same(module(x, position_ids), want(position_ids, freq, scaling, dtype),
                        f"n={n}")
    return module


def test_dynamic_switches_as_transformers():
    tf = transformers()
    config = tf.LlamaConfig(hidden_size=64, num_attention_heads=2, max_position_embeddings=64,
                            rope_scaling={"rope_type": "dynamic", "factor": 3.0})
    module = run_side_by_side(config, [10, 64, 65, 100, 80, 30, 120, 64, 63, 10, 200])
    assert module._rotary_of(None).max_seq_len_cached == 200


def test_longrope_switches_as_transformers():
    tf = transformers()
    config = tf.Phi3Config(hidden_size=64, num_attention_heads=2, max_position_embeddings=512,
                           original_max_position_embeddings=64, rope_scaling={
                               "type": "longrope", "short_factor": [1.0 + k for k in range(16)],
                               "long_factor": [2.0 + 3 * k for k in range(16)]})
    module = run_side_by_side(config, [10, 64, 65, 300, 64, 1000], torch.bfloat16)
    hf, x = hf_module(config), torch.zeros(1)
    for positions in ([[3.0, 63.0]], [[3.0, 63.5]]):  # max + 1 = 64.5 > 64: the long factors
        position_ids = torch.tensor(positions)
        hf(x, position_ids)
        assert_same(module(x, position_ids), want(position_ids, *freq_of(hf), torch.float32))


def small_config(**kw):
    return transformers().LlamaConfig(hidden_size=64, num_attention_heads=4,
                                      max_position_embeddings=64, **kw)


@kernel_path("tables of rows, grown with the positions asked for, and their lookups",
             "keeps no tables of rows: fixed angle tables serve every position")
def test_tables_grow_with_the_positions_asked_for_and_a_step_is_a_lookup(monkeypatch):
    module = st.RotaryEmbedding(small_config())  # max_position_embeddings 64: not a size
    rotary = module._rotary_of(None)
    x = torch.zeros(1)

    def rows():
        return {key[2]: table[0].shape[0] for key, table in rotary.tables.items()}

    module(x, torch.tensor([[3]]))
    assert rows() == {torch.float32: _rotary_tables.MIN_ROWS}  # a small first table
    module(x, torch.tensor([[_rotary_tables.MIN_ROWS]]))
    assert rows() == {torch.float32: 2 * _rotary_tables.MIN_ROWS}  # doubled
    module(x, torch.arange(5000)[None])
    assert rows() == {torch.float32: 8192}  # the next power of two above 4999
    module(torch.zeros(1, dtype=torch.float16), torch.tensor([[5]]))
    assert rows() == {torch.float32: 8192, torch.float16: _rotary_tables.MIN_ROWS}

    def no_kernel(*args, **kwargs):
        raise AssertionError("a position the table holds was computed")

    monkeypatch.setattr(_rotary_tables, "rope_cache", no_kernel)
    monkeypatch.setattr(sinpe, "rope", no_kernel)
    for position in (0, 63, 8191):
        cos, _ = module(x, torch.tensor([[position]]))
        assert cos.shape == (1, 1, 16)
    monkeypatch.undo()
    # past the memory cap of a table (here shrunk to 2 KiB: 16 rows of 2 x 16 float32):
    # computed for the call, the same values, the kept table as it was
    monkeypatch.setattr(_rotary_tables, "TABLE_BYTES", 1 << 11)
    far = torch.tensor([[5, 100000]])
    assert_same(module(x, far), want(far, rotary.freq, 1.0, torch.float32))
    assert rows()[torch.float32] == 8192
    fresh = st.RotaryEmbedding(small_config())
    assert_same(fresh(x, far), want(far, rotary.freq, 1.0, torch.float32))
    assert_same(fresh(x, torch.tensor([[15]])), want(torch.tensor([[15]]), rotary.freq, 1.0,
                                                     torch.float32))
    assert {key[2]: t[0].shape[0] for key, t in fresh._rotary_of(None).tables.items()} == {
        torch.float32: 16}  # the cap's rows, not MIN_ROWS


def test_no_grad_inference_mode_and_no_state():
    module = st.RotaryEmbedding(small_config())
    x = torch.zeros(1, requires_grad=True)
    with torch.inference_mode():
        inside = module(x.detach(), torch.arange(10)[None])
    outside = module(x, torch.arange(10)[None])
    assert inside[0].is_inference() and not outside[0].is_inference()
    assert not outside[0].requires_grad and torch.equal(inside[0], outside[0])
    (outside[0].sum() * x).backward()  # usable in a graph
    hf = hf_module(small_config())
    module.load_state_dict(hf.state_dict(), strict=True)  # both empty
    before = module.inv_freq.clone()
    module.to(torch.bfloat16)  # nothing to round: no buffers
    assert torch.equal(module.inv_freq, before) and torch.equal(
        module(torch.zeros(1), torch.arange(10)[None])[0], outside[0])


def test_copies_and_pickles_give_the_same_caches():
    module = st.RotaryEmbedding(small_config(rope_scaling={"rope_type": "dynamic",
                                                           "factor": 2.0}))
    x, position_ids = torch.zeros(1), torch.arange(100)[None]  # grown: dynamic's state
    before = module(x, position_ids)
    for copied in (copy.deepcopy(module), pickle.loads(pickle.dumps(module))):
        assert_same(copied(x, position_ids), before)
        assert copied._rotary_of(None).max_seq_len_cached == 100


def test_a_model_with_sinpes_module_gives_hfs_logits():
    tf = transformers()
    config = tf.LlamaConfig(vocab_size=100, hidden_size=64, intermediate_size=128,
                            num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=256)
    torch.manual_seed(0)
    model = tf.LlamaForCausalLM(config).eval()
    ids = torch.randint(0, 100, (2, 50))
    with torch.no_grad():
        before = model(ids).logits
        model.model.rotary_emb = st.RotaryEmbedding.from_module(model.model.rotary_emb)
        after = model(ids).logits
    # the caches differ by HF's float32 angle error (below 2**-17 at 50 positions)
    assert torch.allclose(after, before, atol=1e-4, rtol=0) and not torch.equal(after, before)


def test_layer_types():
    config, _ = families()["gemma3 full"]
    both = st.RotaryEmbedding(config)
    x, position_ids = torch.zeros(1), torch.arange(20)[None]
    for layer_type in ("full_attention", "sliding_attention"):
        one = st.RotaryEmbedding(config, layer_type=layer_type)
        assert_same(both(x, position_ids, layer_type), one(x, position_ids))
        assert_same(one(x, position_ids, layer_type), one(x, position_ids))
    with pytest.raises(ValueError, match="layer_type"):
        both(x, position_ids)
    with pytest.raises(ValueError, match="'global'"):
        both(x, position_ids, "global")
    with pytest.raises(ValueError, match="layer_type"):
        st.RotaryEmbedding(config, layer_type="global")
    with pytest.raises(ValueError, match="serves"):
        st.RotaryEmbedding(config, layer_type="full_attention")(x, position_ids,
                                                                "sliding_attention")
    with pytest.raises(AttributeError):  # as transformers' module of several layer types
        _ = both.inv_freq


def test_exact_frequencies_and_without_transformers(monkeypatch):
    config, _ = families()["qwen2.5 yarn"]
    freq, scaling = sinpe.rope_frequencies(None, config)
    exact = st.RotaryEmbedding(config, frequencies="exact")
    position_ids = torch.arange(2**17 - 4, 2**17 + 4)[None]
    assert_same(exact(torch.zeros(1), position_ids), want(position_ids, freq, scaling,
                                                          torch.float32))
    # no family module (transformers absent, or a config of another library): the
    # double frequencies rounded to float32, which transformers' are within a few ulps of
    monkeypatch.setattr(_rotary_family, "family_module", lambda config: None)
    fallback = st.RotaryEmbedding(config)
    hf_freq, hf_scaling = freq_of(hf_module(config))
    assert np.array_equal(fallback.inv_freq.double().numpy(),
                          freq.astype(np.float32).astype(np.float64))
    assert np.allclose(fallback.inv_freq.double().numpy(), hf_freq, rtol=8 * 2.0**-24, atol=0)
    assert fallback.attention_scaling == hf_scaling == scaling


def test_from_a_module_cast_by_model_to():
    config, _ = families()["llama3.1 llama3"]
    hf = hf_module(config).to(torch.bfloat16)  # model.to(dtype) rounds HF's inv_freq buffers
    module = st.RotaryEmbedding.from_module(hf)
    assert torch.equal(module.inv_freq, hf_module(config).inv_freq)  # recomputed, float32


def bad_calls():
    tf = transformers()
    dynamic = tf.LlamaConfig(hidden_size=64, num_attention_heads=4, max_position_embeddings=64,
                             rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    x, ids = torch.zeros(1), torch.arange(4)[None]
    broken = tf.LlamaConfig()  # a config changed after its validation
    broken.rope_parameters = {"rope_type": "linear", "rope_theta": 10000.0}
    return [
        (lambda: st.RotaryEmbedding(dynamic, frequencies="fast"), ValueError, "frequencies"),
        (lambda: st.RotaryEmbedding(dynamic, layout="pairs"), ValueError, "layout"),
        (lambda: st.RotaryEmbedding(dynamic, output_dtype=torch.int32), TypeError, "dtype"),
        (lambda: st.RotaryEmbedding(dynamic, device="nowhere"), ValueError, "device"),
        (lambda: st.RotaryEmbedding(broken), ValueError, "factor"),
        (lambda: st.RotaryEmbedding(tf.GPT2Config()), ValueError, "rope_parameters"),
        (lambda: st.RotaryEmbedding.from_module(torch.nn.Linear(2, 2)), TypeError, "module"),
        (lambda: st.RotaryEmbedding(dynamic)([0.0], ids), TypeError, "x"),
        (lambda: st.RotaryEmbedding(dynamic)(torch.zeros(1, dtype=torch.int64), ids), TypeError,
         "dtype"),
        (lambda: st.RotaryEmbedding(dynamic)(x, [[0, 1]]), TypeError, "position_ids"),
        (lambda: st.RotaryEmbedding(dynamic)(x, ids > 1), TypeError, "position_ids"),
        (lambda: st.RotaryEmbedding(dynamic)(x, ids, "full_attention"), ValueError, "serves"),
        (lambda: st.RotaryEmbedding(dynamic)(x, torch.tensor([[2**24 + 1]])), ValueError,
         "MAX_POSITION"),
    ]


def test_bad_input_raises_before_anything_changes():
    for make, error, match in bad_calls():
        with pytest.raises(error, match=match):
            make()
    tf = transformers()
    module = st.RotaryEmbedding(tf.LlamaConfig(
        hidden_size=64, num_attention_heads=4, max_position_embeddings=64,
        rope_scaling={"rope_type": "dynamic", "factor": 2.0}))
    rotary = module._rotary_of(None)
    with pytest.raises(ValueError, match="MAX_POSITION"):  # would grow dynamic's state
        module(torch.zeros(1), torch.tensor([[5, 2**25]]))
    assert rotary.max_seq_len_cached == 64 and rotary.current is None and not rotary.tables
    assert math.isfinite(module.attention_scaling)
