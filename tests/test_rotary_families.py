"""sinpe.torch.RotaryEmbedding for every form of transformers' rotary modules, at every
context length, against transformers' own modules.

* Forms: the ``(cos, sin)`` pair concatenated (Llama, Qwen2, Gemma 3, Phi-3) or
  interleaved (Cohere), in ``x.dtype`` or float32 (OLMo, LFM3); the "half" pair of
  GPT-OSS, OpenAI's privacy filter and DeepSeek-V4 (each frequency once); Llama 4's
  and DeepSeek-V2's complex64 ``freqs_cis``.  ``RotaryEmbedding(config)`` returns the
  family module's shapes and dtypes, its values within the float32 rounding of
  transformers' angles (:func:`sinpe.torch._verify.tolerance`) at small and large
  positions, and bit for bit sinpe's exact caches of the module's own frequencies
  in that form (made here from ``rope_cache`` by the test's own slicing).
* Configs built as transformers' config classes build them, with small head counts;
  where sinpe cannot serve one the ValueError names the config key or the module
  (HunYuan-VL without sections, MusicFlamingo's other forward, LFM3 without
  attention layers) and sinpe's checks of the rope parameters come before
  transformers' code runs.
* Long context: a 10M-context config keeps a table of the positions asked for, not
  of ``max_position_embeddings`` (on the kernel path; the device path keeps no tables of
  rows); positions past ``sinpe.MAX_POSITION`` are refused naming them (on the device
  path, which does not read them on the host: NaN caches there).  Every integer dtype
  of ``position_ids`` works; on the meta device forward makes no kernel call.
"""
from __future__ import annotations

import functools
import types

import pytest
from conftest import (
    MAX_POSITION,
    kernel_path,
    on_device_path,
    require,
    require_module,
    require_torch,
)

import sinpe

torch = require_torch()
import sinpe.torch as st  # noqa: E402
from sinpe.torch import _rotary_tables  # noqa: E402
from sinpe.torch._verify import tolerance  # noqa: E402

pytestmark = pytest.mark.needs("transformers")

LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "rope_theta": 500000.0}
SCOUT = {**LLAMA3, "factor": 16.0, "high_freq_factor": 1.0}  # Llama 4 Scout's (low == high)


def tf():
    return require("transformers")


def hf_class(config, name):
    modeling = require_module(type(config).__module__.replace(".configuration_", ".modeling_"))
    return getattr(modeling, name)


@functools.cache
def families():
    """name -> (config, layer type, transformers' module class name, form, fixed dtype)."""
    t = tf()
    short = [1.0 + 0.02 * k for k in range(32)]
    long = [1.0 + 1.5 * k for k in range(32)]
    return {
        "llama": (t.LlamaConfig(hidden_size=256, num_attention_heads=2,
                                max_position_embeddings=131072, rope_parameters=LLAMA3),
                  None, "LlamaRotaryEmbedding", "concatenated", None),
        "qwen2 yarn": (t.Qwen2Config(hidden_size=256, num_attention_heads=2,
                                     max_position_embeddings=131072, rope_parameters={
                                         "rope_type": "yarn", "factor": 4.0, "rope_theta": 1e6,
                                         "original_max_position_embeddings": 32768}),
                       None, "Qwen2RotaryEmbedding", "concatenated", None),
        "gemma3": (t.Gemma3TextConfig(hidden_size=128, num_attention_heads=2, head_dim=64,
                                      rope_parameters={
                                          "full_attention": {"rope_type": "linear",
                                                             "factor": 8.0, "rope_theta": 1e6},
                                          "sliding_attention": {"rope_type": "default",
                                                                "rope_theta": 10000.0}}),
                   "full_attention", "Gemma3RotaryEmbedding", "concatenated", None),
        "phi3 longrope": (t.Phi3Config(hidden_size=128, num_attention_heads=2,
                                       max_position_embeddings=131072,
                                       original_max_position_embeddings=4096, rope_scaling={
                                           "type": "longrope", "short_factor": short,
                                           "long_factor": long}),
                          None, "Phi3RotaryEmbedding", "concatenated", None),
        "cohere": (t.CohereConfig(hidden_size=128, num_attention_heads=2), None,
                   "CohereRotaryEmbedding", "interleaved", None),
        "olmo": (t.OlmoConfig(hidden_size=128, num_attention_heads=2), None,
                 "OlmoRotaryEmbedding", "concatenated", torch.float32),
        "gpt_oss": (t.GptOssConfig(hidden_size=128, num_attention_heads=2,
                                   num_key_value_heads=1, head_dim=64),
                    None, "GptOssRotaryEmbedding", "half", None),
        "openai_privacy_filter": (t.OpenAIPrivacyFilterConfig(
            hidden_size=128, num_attention_heads=2, num_key_value_heads=1, head_dim=64),
            None, "OpenAIPrivacyFilterRotaryEmbedding", "half", None),
        "deepseek_v4": (t.DeepseekV4Config(hidden_size=128, num_attention_heads=2, head_dim=128),
                        "compress", "DeepseekV4RotaryEmbedding", "half", None),
        "llama4 scout": (t.Llama4TextConfig(hidden_size=256, num_attention_heads=2,
                                            num_key_value_heads=1, head_dim=128,
                                            max_position_embeddings=10_485_760,
                                            rope_parameters=SCOUT),
                         None, "Llama4TextRotaryEmbedding", "complex", torch.complex64),
        "deepseek_v2": (t.DeepseekV2Config(hidden_size=128, num_attention_heads=2,
                                           qk_rope_head_dim=64, head_dim=64),
                        None, "DeepseekV2RotaryEmbedding", "complex", torch.complex64),
        "lfm3 full layers only": (t.Lfm3Config(num_hidden_layers=3, hidden_size=256,
                                               num_attention_heads=2, num_key_value_heads=1,
                                               head_dim=128),
                                  "full_attention", "Lfm3RotaryEmbedding", "concatenated",
                                  torch.float32),
    }


def call(module, x, position_ids, layer_type):
    return module(x, position_ids) if layer_type is None else module(x, position_ids, layer_type)


def freq_of(hf, layer_type):
    prefix = "" if layer_type is None else f"{layer_type}_"
    return (getattr(hf, f"{prefix}inv_freq").double().numpy(),
            float(getattr(hf, f"{prefix}attention_scaling")))


def in_form(position_ids, freq, scaling, form, dtype):
    """sinpe's exact caches of ``freq`` in a form, cut here from rope_cache's tables."""
    width = 2 * len(freq)
    layout = "interleaved" if form == "interleaved" else "concatenated"
    cos, sin = st.rope_cache(None, width, positions=position_ids, freq=freq, scale=scaling,
                             layout=layout, dtype=torch.float32 if form == "complex" else dtype)
    if form == "complex":
        return torch.complex(cos[..., : width // 2], sin[..., : width // 2])
    if form == "half":
        return cos[..., : width // 2], sin[..., : width // 2]
    return cos, sin


def parts(caches):
    """The real tensors of caches: cos and sin, or freqs_cis' real and imaginary parts."""
    if isinstance(caches, torch.Tensor):
        assert caches.is_complex()
        return [caches.real, caches.imag]
    assert isinstance(caches, tuple) and len(caches) == 2
    return list(caches)


def assert_stands_for(got, want, position_ids, hf, layer_type, what):
    """got has want's form, shapes, dtypes and device, values within the float32
    rounding of transformers' angles at these positions."""
    assert type(got) is type(want), what
    inv_freq = torch.from_numpy(freq_of(hf, layer_type)[0])
    scaling = freq_of(hf, layer_type)[1]
    for g, w in zip(parts(got), parts(want)):
        assert (g.shape, g.dtype, g.device) == (w.shape, w.dtype, w.device), what
        bound = tolerance(position_ids, inv_freq, scaling, w.dtype)
        assert bool(((g.double() - w.double()).abs() <= bound).all()), what


def assert_bits(got, want, what):
    for g, w in zip(parts(got), parts(want)):
        assert g.dtype == w.dtype and g.shape == w.shape, what
        assert torch.equal(g, w), what


POSITIONS = {
    "prefill": lambda: torch.arange(40)[None],
    "two rows": lambda: torch.stack([torch.arange(30), torch.arange(30).flip(0)]),
    "decode": lambda: torch.tensor([[5]]),
    "large": lambda: torch.tensor([[4097, 100_000, 2**20 + 3, 3]]),
    "largest": lambda: torch.tensor([[MAX_POSITION]]),
}


@pytest.mark.parametrize("name", list(families()))
def test_every_form_is_the_family_modules(name):
    config, layer_type, cls, form, fixed = families()[name]
    module = st.RotaryEmbedding(config)
    assert (module.layout, module.output_dtype) == (form, fixed)
    hf = hf_class(config, cls)(config)
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.zeros(1, 3, dtype=dtype)
        for where, positions in POSITIONS.items():
            position_ids = positions()
            want = call(hf, x, position_ids, layer_type)  # (longrope: switches here too)
            got = call(module, x, position_ids, layer_type)
            what = f"{name} {dtype} {where}"
            assert_stands_for(got, want, position_ids, hf, layer_type, what)
            freq, scaling = freq_of(hf, layer_type)
            assert_bits(got, in_form(position_ids, freq, scaling, form,
                                     fixed if fixed is not None else dtype), what)


@pytest.mark.parametrize("name", ["gpt_oss", "llama4 scout", "deepseek_v4", "cohere"])
def test_from_module_and_exact_frequencies_in_every_form(name):
    config, layer_type, cls, form, fixed = families()[name]
    hf = hf_class(config, cls)(config)
    position_ids = torch.tensor([[0, 7, 33, 4096]])
    x = torch.zeros(1, dtype=torch.bfloat16)
    assert_bits(call(st.RotaryEmbedding.from_module(hf), x, position_ids, layer_type),
                call(st.RotaryEmbedding(config), x, position_ids, layer_type), name)
    exact = st.RotaryEmbedding(config, frequencies="exact")
    freq, scaling = sinpe.rope_frequencies(None, config, layer_type=layer_type)
    assert_bits(call(exact, x, position_ids, layer_type),
                in_form(position_ids, freq, scaling, form, fixed or torch.bfloat16), name)


def test_a_module_sinpe_cannot_reproduce_is_refused_naming_it(monkeypatch):
    """A family module whose forward computes other caches than its frequencies give,
    or (frequencies="exact") other frequencies than sinpe's formula of its rope type."""
    config, _, cls, _, _ = families()["llama"]
    family = hf_class(config, cls)
    forward = family.forward

    def doubled(self, x, position_ids):
        cos, sin = forward(self, x, position_ids * 2)
        return cos, sin

    monkeypatch.setattr(family, "forward", doubled)
    with pytest.raises(ValueError, match="LlamaRotaryEmbedding: it gives cos that sinpe"):
        st.RotaryEmbedding(config)
    monkeypatch.undo()
    default = tf().LlamaConfig(hidden_size=128, num_attention_heads=2)
    compute = family.compute_default_rope_parameters

    def slower(config, **kwargs):
        inv_freq, scaling = compute(config, **kwargs)
        return inv_freq * (1 + 2.0**-12), scaling

    monkeypatch.setattr(family, "compute_default_rope_parameters", staticmethod(slower))
    st.RotaryEmbedding(default)  # the model's own frequencies: served
    with pytest.raises(ValueError, match="LlamaRotaryEmbedding computes other frequencies"):
        st.RotaryEmbedding(default, frequencies="exact")


# -- configs sinpe cannot serve, and sinpe's messages first ----------------------------------


def broken(config, **changes):
    """A config changed after transformers validated it (as users edit them)."""
    config.rope_parameters = {**config.rope_parameters, **changes}
    return config


def refusals():
    t = tf()
    small = functools.partial(t.LlamaConfig, hidden_size=128, num_attention_heads=2)
    phi3 = functools.partial(t.Phi3Config, hidden_size=128, num_attention_heads=2,
                             max_position_embeddings=512, original_max_position_embeddings=64,
                             rope_scaling={"type": "longrope", "short_factor": [1.0] * 32,
                                           "long_factor": [2.0] * 32})
    return [
        ("hunyuan_vl", lambda: t.HunYuanVLTextConfig(hidden_size=256, num_attention_heads=2,
                                                     head_dim=128),
         ValueError, r"HunYuanVLRotaryEmbedding .*rope_parameters\['mrope_section'\] is None"),
        ("musicflamingo", t.MusicFlamingoConfig, ValueError,
         r"MusicFlamingoRotaryEmbedding.forward\(self, timestamps.*does not take \(x, "
         r"position_ids\)"),
        ("lfm3 without attention", lambda: t.Lfm3Config(num_hidden_layers=2, hidden_size=256,
                                                        num_attention_heads=2, head_dim=128),
         ValueError, r"layer_types \['conv'\]"),
        ("head_dim", lambda: small(head_dim=-2), ValueError, "head_dim"),
        ("short_factor", lambda: broken(phi3(), short_factor=[1.0] * 5), ValueError,
         "short_factor"),
        ("rope_type list", lambda: broken(small(), rope_type=["yarn"]), TypeError, "rope_type"),
        ("dynamic factor", lambda: broken(small(), rope_type="dynamic", factor=1e300),
         ValueError, "'factor'"),
        ("rope_theta", lambda: broken(small(), rope_theta=1e-300), ValueError, "rope_theta"),
        ("max_position_embeddings", lambda: plain_config(1200.5), ValueError,
         "max_position_embeddings"),
    ]


@pytest.mark.parametrize("case", refusals(), ids=lambda case: case[0])
def test_what_sinpe_cannot_serve_raises_naming_the_key(case, monkeypatch):
    _, make, error, match = case
    config = make()
    with pytest.raises(error, match=match):
        st.RotaryEmbedding(config)
    if error is ValueError and case[0] not in ("hunyuan_vl", "musicflamingo",
                                               "lfm3 without attention"):
        # sinpe's own check: transformers' module is not built
        from sinpe.torch import _rotary_family

        def unbuilt(config):
            raise AssertionError("transformers' module was built before sinpe's checks")

        monkeypatch.setattr(_rotary_family, "family_module", unbuilt)
        with pytest.raises(error, match=match):
            st.RotaryEmbedding(config)


def test_lfm3_serves_the_layer_types_its_module_holds():
    config, _, _, _, _ = families()["lfm3 full layers only"]
    module = st.RotaryEmbedding(config)
    x, position_ids = torch.zeros(1), torch.arange(4)[None]
    assert list(module._rotaries) == ["full_attention"]
    assert module(x, position_ids, "full_attention")[0].shape == (1, 4, 128)
    with pytest.raises(ValueError, match="layer_type='sliding_attention'"):
        module(x, position_ids, "sliding_attention")
    with pytest.raises(ValueError, match="layer_type='sliding_attention'"):
        st.RotaryEmbedding(config, layer_type="sliding_attention")


def plain_config(max_position_embeddings, **params):
    """A config of no transformers family (served without a module): any value."""
    return types.SimpleNamespace(
        head_dim=64, max_position_embeddings=max_position_embeddings,
        rope_parameters={"rope_type": "dynamic", "factor": 2.0, "rope_theta": 1e4, **params})


def test_float_max_position_embeddings_as_transformers_accepts():
    """MusicFlamingo's config says 1200.0 (its rope_theta); a whole float is that length."""
    music = tf().MusicFlamingoConfig()
    assert music.max_position_embeddings == 1200.0
    freq, _ = sinpe.rope_frequencies(None, music)
    head_dim = music.head_dim
    assert (freq == sinpe.rope_frequencies(head_dim, music.rope_parameters,
                                           max_position_embeddings=1200)[0]).all()
    as_float, as_int = st.RotaryEmbedding(plain_config(1200.0)), st.RotaryEmbedding(
        plain_config(1200))
    assert as_float.original_max_seq_len == 1200
    x = torch.zeros(1)
    for position_ids in (torch.arange(1200)[None], torch.arange(1300)[None],  # dynamic grows
                         torch.tensor([[5]])):
        assert_bits(as_float(x, position_ids), as_int(x, position_ids), "dynamic's switch")


# -- any context length --------------------------------------------------------------------


@kernel_path("tables of rows, grown with the positions asked for",
             "keeps no tables of rows: fixed angle tables serve every position")
@pytest.mark.parametrize("name, length", [("llama", 10_485_760), ("llama", 2**40),
                                          ("llama4 scout", 10_485_760)])
def test_a_long_context_keeps_the_table_of_the_positions_asked_for(name, length):
    config, _, _, _, _ = families()[name]
    config.max_position_embeddings = length
    module = st.RotaryEmbedding(config)
    rotary = module._rotary_of(None)
    module(torch.zeros(1), torch.tensor([[5]]))  # a decoding step at position 5
    (table, _), = rotary.tables.values()
    assert table.shape[0] == _rotary_tables.MIN_ROWS
    module(torch.zeros(1), torch.tensor([[70_000]]))
    (table, _), = rotary.tables.values()
    assert table.shape[0] == 131072  # the next power of two above the position


def test_positions_past_the_promise_are_refused_naming_them():
    config, _, _, _, _ = families()["llama"]
    module = st.RotaryEmbedding(config)
    x = torch.zeros(1)
    assert module(x, torch.tensor([[MAX_POSITION, -MAX_POSITION]]))[0].shape == (1, 2, 128)
    for far in (MAX_POSITION + 1, -MAX_POSITION - 1):
        if on_device_path():  # not read on the host: NaN at that position alone
            got = module(x, torch.tensor([[5, far]]))
            for g, n in zip(got, module(x, torch.tensor([[5]]))):
                assert torch.equal(g[:, :1], n) and g[:, 1].isnan().all()
            continue
        with pytest.raises(ValueError, match=f"position {far} "):
            module(x, torch.tensor([[5, far]]))
    assert not module._rotary_of(None).tables  # nothing kept for the refused calls


INTEGERS = [torch.int8, torch.int16, torch.int32, torch.int64, torch.uint8]


@pytest.mark.parametrize("name", ["llama", "gpt_oss", "llama4 scout", "phi3 longrope"])
def test_every_integer_dtype_of_position_ids(name):
    config, layer_type, cls, _, _ = families()[name]
    module = st.RotaryEmbedding(config)
    hf = hf_class(config, cls)(config)
    positions = torch.tensor([[0, 5, 100, 127], [3, 2, 1, 0]])
    x = torch.zeros(1, dtype=torch.bfloat16)
    want = call(module, x, positions, layer_type)
    for dtype in INTEGERS:
        position_ids = positions.to(dtype)
        got = call(module, x, position_ids, layer_type)
        assert_bits(got, want, f"{name} {dtype}")
        # transformers takes them too, but switches longrope on max + 1 in their own dtype
        # (int8: 127 + 1 = -128; uint8: 4096 wraps to 0): compared at int64 positions
        assert parts(call(hf, x, position_ids, layer_type))[0].shape == parts(got)[0].shape
        assert_stands_for(got, call(hf, x, positions, layer_type), positions, hf, layer_type,
                          f"{name} {dtype}")


# -- the meta device -----------------------------------------------------------------------


def test_meta_device_shapes_without_a_kernel(monkeypatch):
    t = tf()
    vl = t.Qwen2VLTextConfig(hidden_size=256, num_attention_heads=2, rope_parameters={
        "rope_type": "default", "rope_theta": 1e6, "mrope_section": [16, 24, 24]})
    modules = {name: (st.RotaryEmbedding(families()[name][0]), families()[name][1])
               for name in ("llama", "gpt_oss", "llama4 scout", "cohere")}
    modules["qwen2-vl"] = (st.RotaryEmbedding(vl), None)

    def no_kernel(*args, **kwargs):
        raise AssertionError("a kernel ran for the meta device")

    monkeypatch.setattr(sinpe, "rope", no_kernel)
    monkeypatch.setattr(_rotary_tables, "rope_cache", no_kernel)
    x = torch.empty(2, 7, 16, dtype=torch.bfloat16, device="meta")
    for name, (module, layer_type) in modules.items():
        for position_ids in (torch.arange(7).expand(2, 7), torch.empty(2, 7, dtype=torch.int64,
                                                                       device="meta")):
            caches = call(module, x, position_ids, layer_type)
            width = module._rotary_of(layer_type).width
            columns = width // 2 if module.layout in ("half", "complex") else width
            dtype = module.output_dtype or torch.bfloat16
            for part in ([caches] if isinstance(caches, torch.Tensor) else caches):
                assert part.is_meta and part.dtype == dtype, name
                assert part.shape == (2, 7, columns), name


def test_built_under_the_meta_device():
    config, _, cls, _, _ = families()["llama4 scout"]
    with torch.device("meta"):
        module = st.RotaryEmbedding(config)
        meta_hf = hf_class(config, cls)(config)
        from_meta = st.RotaryEmbedding.from_module(meta_hf)
    assert meta_hf.inv_freq.is_meta
    position_ids, x = torch.arange(9)[None], torch.zeros(1)
    want = st.RotaryEmbedding(config)(x, position_ids)
    assert_bits(module(x, position_ids), want, "built under meta")
    assert_bits(from_meta(x, position_ids), want, "from a meta module")
