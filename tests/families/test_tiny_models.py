"""The tiny-model builder of tests/families/tiny, on a few families.

Checks what the suites built on it rely on: the RoPE families are found; build()
gives a float32 eval-mode model, seeded, whose info["inputs"] run (of the requested
length, token ids inside the vocabulary and off the special ids); the rotary embedding
is the family's own: per-head widths, rope parameters and the rotary module's
frequencies equal those of the default config, while the heads, layers and vocabulary
shrink; and build() leaves the session's warning filters, transformers' verbosity,
torch's thread count and its random state as it found them.  Representatives: Llama
(the plain form), Qwen2-VL (a composite config: text and vision rotary modules), gpt-oss
(yarn, an explicit head_dim), DeepSeek-V3 (MLA: a rotary head width of its own).
"""
from __future__ import annotations

import warnings

import pytest
from conftest import require, require_torch

torch = require_torch()
transformers = require("transformers")
from tiny import HEADS, SEQ, VOCAB, build, rope_families  # noqa: E402  (needs transformers)

REPRESENTATIVES = ["llama", "qwen2_vl", "gpt_oss", "deepseek_v3"]


@pytest.fixture(scope="module")
def built():
    """build(family) once per family for the module's tests."""
    cache = {}

    def get(family):
        if family not in cache:
            cache[family] = build(family)
        return cache[family]
    return get


def configs(config):
    """config and its sub-configs."""
    out = [config]
    for value in vars(config).values():
        if isinstance(value, transformers.PreTrainedConfig):
            out += configs(value)
    return out


def head_width(c):
    hd = getattr(c, "head_dim", None)
    return hd if hd else c.hidden_size // c.num_attention_heads


def test_rope_families():
    families = rope_families()
    assert len(families) >= 200
    assert families == sorted(set(families))
    assert set(REPRESENTATIVES) <= set(families)
    assert "bert" not in families  # absolute positions: no rotary embedding


def test_llama(built):
    model, config, info = built("llama")
    assert isinstance(model, transformers.LlamaForCausalLM) and not model.training
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert info["forward_ok"] and info["kind"] == "text+position_ids" and info["position_ids"]
    assert info["rope_check"] == []
    inputs = info["inputs"]
    assert inputs["input_ids"].shape == (1, SEQ)
    assert torch.equal(inputs["position_ids"], torch.arange(SEQ)[None])
    with torch.no_grad():
        logits = model(**inputs).logits
    assert logits.shape == (1, SEQ, config.vocab_size) and torch.isfinite(logits).all()
    # far positions too (the probe records it)
    assert info["big_positions"] == "ok"


@pytest.mark.parametrize("family", REPRESENTATIVES)
def test_rope_kept(built, family):
    model, config, info = built(family)
    assert info["forward_ok"] and info["rope_check"] == [], info["rope_check"]
    assert info["config_from"] == "config"
    default = type(config)()
    text, text0 = config.get_text_config(), default.get_text_config()
    assert head_width(text) == head_width(text0)
    assert text.rope_parameters == text0.rope_parameters
    assert text.max_position_embeddings == text0.max_position_embeddings
    for key in ("qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim"):  # MLA
        assert getattr(text, key, None) == getattr(text0, key, None)
    # shrunk: fewer heads, layers and tokens
    assert text.num_attention_heads <= HEADS < text0.num_attention_heads
    assert text.num_hidden_layers < text0.num_hidden_layers
    assert text.vocab_size <= VOCAB < text0.vocab_size
    assert sum(p.numel() for p in model.parameters()) < 5_000_000
    # each rotary module has the frequencies its default (sub-)config gives it
    defaults = {type(c): c for c in configs(default)}
    rotary = [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")
              and isinstance(getattr(m, "config", None), transformers.PreTrainedConfig)]
    assert any(m.config is text for m in rotary)
    for m in rotary:
        reference = type(m)(config=defaults[type(m.config)])
        assert torch.equal(m.inv_freq, reference.inv_freq)
        assert getattr(m, "attention_scaling", 1.0) == getattr(reference, "attention_scaling", 1.0)


@pytest.mark.parametrize("family", REPRESENTATIVES)
def test_ids_inside_vocabulary(built, family):
    model, config, info = built(family)
    ids = info["inputs"]["input_ids"]
    assert ids.dtype == torch.int64 and ids.shape == (1, SEQ)
    assert 0 <= ids.min() and ids.max() < model.get_input_embeddings().num_embeddings
    text = config.get_text_config()
    special = set()
    for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
        value = getattr(text, key, None)
        special |= set(value) if isinstance(value, list) else {value}
    assert not special & set(ids.flatten().tolist())


def test_length_and_seed():
    model, _, info = build("llama", length=8)
    assert info["inputs"]["input_ids"].shape == (1, 8)
    assert torch.equal(info["inputs"]["position_ids"], torch.arange(8)[None])
    with torch.no_grad():
        assert model(**info["inputs"]).logits.shape[1] == 8
    again, _, info_again = build("llama", length=8)
    other, _, _ = build("llama", seed=1, length=8)
    weights = [dict(m.named_parameters()) for m in (model, again, other)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])
    assert torch.equal(info["inputs"]["input_ids"], info_again["inputs"]["input_ids"])


def test_session_state_kept():
    filters = list(warnings.filters)
    verbosity = transformers.utils.logging.get_verbosity()
    threads = torch.get_num_threads()
    rng = torch.get_rng_state()
    build("llama")
    assert warnings.filters == filters
    assert transformers.utils.logging.get_verbosity() == verbosity
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), rng)
