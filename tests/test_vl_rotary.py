"""Multi-axis RoPE of vision-language models in sinpe.torch, against transformers 5.23.

* Sections: sinpe.torch.RotaryEmbedding finds those of Qwen2-VL's, Qwen2.5-VL's
  (contiguous ``mrope_section``), Qwen3-VL's and Qwen3-VL-MoE's (interleaved) text
  rotary modules
  by calling them, and refuses one whose rows neither rule gives.
* Values: its ``(cos, sin)`` for position_ids of shape ``(3, B, L)`` (and ``(B,
  L)``, ``(1, B, L)``, a decoding step) are, bit for bit, ``rope_cache`` with
  sections of HF's own float32 frequencies, which is ``sinpe.rope`` with sections
  (held against per-section caches in tests/test_rope_sections.py); HF's shapes.
* Accuracy: within half an ulp (float32 and bfloat16) of the exact ``cos(p w)``
  and ``sin(p w)`` of HF's frequencies ``w``, ``p`` the position of each pair's
  own section (tests/test_rope_sections.py's ``section_of``, held against HF's
  ``recomposition_frequencies``), near 2**17 and 2**20; HF's module at least
  100 times further off near 2**17.  docs/accuracy.md's table of it, computed here.
* The vision tower: sinpe's axial stand-in within half an ulp of the exact
  values of the module's frequencies at each patch's row and column;
  ``apply_rotary_pos_emb_vision`` bit for bit HF's (dtype and strides too) for
  float32, bfloat16 and float16 inputs, on the kernel.
* Bad input raises.
* On the device path (``SINPE_TORCH_PATH=device``): the caches within
  ``conftest.same_or_within_device_bound`` of the kernel's, within half an ulp plus
  ``2**-30`` of the exact values, no kernel call, and NaN for positions out of range.
"""
from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import pytest
import test_rope_sections as T
from conftest import (
    U64,
    bits,
    by_path,
    device_excess,
    refused_or_nan,
    require,
    require_module,
    require_torch,
    same_or_within_device_bound,
)

torch = require_torch()
transformers = require("transformers")
import sinpe  # noqa: E402
import sinpe.torch as st  # noqa: E402
from sinpe.torch import _multi_axis  # noqa: E402

ACCURACY_PAGE = Path(__file__).resolve().parents[1] / "docs" / "accuracy.md"


def modeling(family):
    return require_module(f"transformers.models.{family}.modeling_{family}")


# (family, text rotary class, config, sections, sections_layout): realistic text configs
def qwen2_vl():
    return transformers.Qwen2VLTextConfig(
        hidden_size=3584, num_attention_heads=28, max_position_embeddings=32768,
        rope_parameters={"rope_type": "default", "rope_theta": 1e6,
                         "mrope_section": [16, 24, 24]})


def qwen2_5_vl():
    return transformers.Qwen2_5_VLTextConfig(
        hidden_size=3584, num_attention_heads=28, max_position_embeddings=128000,
        rope_scaling={"type": "mrope", "rope_theta": 1e6, "mrope_section": [16, 24, 24]})


def qwen3_vl():
    return transformers.Qwen3VLTextConfig(
        hidden_size=4096, num_attention_heads=32, head_dim=128, max_position_embeddings=262144,
        rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_interleaved": True,
                         "mrope_section": [24, 20, 20]})


def qwen3_vl_moe():
    return transformers.Qwen3VLMoeTextConfig(
        hidden_size=2048, num_attention_heads=32, head_dim=128, max_position_embeddings=262144,
        rope_parameters={"rope_type": "default", "rope_theta": 5e6, "mrope_interleaved": True,
                         "mrope_section": [24, 20, 20]})


TEXT = {
    "qwen2_vl": ("Qwen2VLRotaryEmbedding", qwen2_vl, (16, 24, 24), "contiguous"),
    "qwen2_5_vl": ("Qwen2_5_VLRotaryEmbedding", qwen2_5_vl, (16, 24, 24), "contiguous"),
    "qwen3_vl": ("Qwen3VLTextRotaryEmbedding", qwen3_vl, (24, 20, 20), "interleaved"),
    "qwen3_vl_moe": ("Qwen3VLMoeTextRotaryEmbedding", qwen3_vl_moe, (24, 20, 20), "interleaved"),
}


@functools.cache
def text(family):
    """(HF's module, sinpe's module, config) of a family's text rotary embedding."""
    name, make, _, _ = TEXT[family]
    config = make()
    return getattr(modeling(family), name)(config), st.RotaryEmbedding(config), config


def same(a, b) -> bool:
    return (a.dtype == b.dtype and a.shape == b.shape and a.stride() == b.stride()
            and torch.equal(bits(torch, a), bits(torch, b)))


def thw(start, length, batch=1):
    """(3, batch, length) positions from ``start``: time, height and width all differ
    (an image's patches: one time, rows and columns counted from the image's start)."""
    steps = torch.arange(length)
    rows = torch.stack([torch.full_like(steps, start), start + steps // 5, start + steps % 5 + 7])
    return rows[:, None, :].expand(3, batch, length) + torch.arange(batch)[None, :, None]


# -- sections ------------------------------------------------------------------------------


@pytest.mark.parametrize("family", list(TEXT))
def test_the_sections_are_the_modules(family):
    _, module, config = text(family)
    _, _, sections, layout = TEXT[family]
    assert (module.sections, module.sections_layout) == (sections, layout)
    # without transformers' module: the config's keys say the same
    assert _multi_axis.config_sections(config, 128) == (sections, layout)
    # a whole VL config stands for its text config
    whole = {"qwen2_vl": transformers.Qwen2VLConfig, "qwen2_5_vl": transformers.Qwen2_5_VLConfig,
             "qwen3_vl": transformers.Qwen3VLConfig,
             "qwen3_vl_moe": transformers.Qwen3VLMoeConfig}[family](text_config=config.to_dict())
    assert st.RotaryEmbedding(whole).sections == sections


def test_a_module_whose_rows_neither_rule_gives_is_refused():
    """Four chunks of mrope_section: HF's i % 3 gives the fourth to the time row again."""
    config = transformers.Qwen2VLTextConfig(hidden_size=64, num_attention_heads=4,
                                            rope_parameters={"rope_type": "default",
                                                             "mrope_section": [1, 2, 3, 2]})
    hf = modeling("qwen2_vl").Qwen2VLRotaryEmbedding(config)
    with pytest.raises(ValueError, match=r"rows \[0, 1, 1, 2, 2, 2, 0, 0\].*cannot stand in"):
        st.RotaryEmbedding.from_module(hf)


# -- values ------------------------------------------------------------------------------


POSITIONS = {
    "image": lambda: thw(40, 30, batch=2),
    "decoding step": lambda: thw(1000, 1)[:, :, :1],
    "text (B, L)": lambda: torch.arange(5, 25)[None],
    "text (1, B, L)": lambda: torch.arange(3, 9)[None, None],
    "float": lambda: thw(7, 6).double() + 0.25,
}


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_caches_are_rope_cache_with_sections_of_the_models_frequencies(family):
    hf, module, _ = text(family)
    freq = hf.inv_freq.double().numpy()
    _, _, sections, layout = TEXT[family]
    for dtype in (torch.float32, torch.bfloat16):
        x = torch.zeros(1, dtype=dtype)
        for where, make in POSITIONS.items():
            position_ids = make()
            got = module(x, position_ids)
            rows = position_ids.expand(3, -1, -1)  # HF's broadcast of (B, L) and (1, B, L)
            want = st.rope_cache(None, 128, positions=rows, freq=freq, sections=sections,
                                 sections_layout=layout, dtype=dtype)
            hf_cos, _ = hf(x, position_ids.float())
            for g, w in zip(got, want):
                assert same(g.contiguous(), w) and g.shape == hf_cos.shape, (where, dtype)
    # rope_cache with sections is sinpe.rope with sections
    rows = thw(3, 9)
    cos, sin = sinpe.rope(None, 128, positions=rows.numpy(), freq=freq, sections=sections,
                          sections_layout=layout)
    want = st.rope_cache(None, 128, positions=rows, freq=freq, sections=torch.tensor(sections),
                         sections_layout=layout, dtype=torch.float32)
    for got, kernel in zip(want, (torch.from_numpy(cos), torch.from_numpy(sin))):
        assert got.stride() == kernel.stride()
        assert same_or_within_device_bound(torch, got, kernel)


def test_decoding_step_runs_one_kernel_call(monkeypatch):
    """A decoding step's caches come from one sinpe.rope call (no per-axis tables); on
    the device path from none (device operations alone)."""
    _, module, _ = text("qwen2_vl")
    calls = []
    rope = sinpe.rope
    monkeypatch.setattr(sinpe, "rope", lambda *a, **k: (calls.append(k), rope(*a, **k))[1])
    module(torch.zeros(1), thw(100, 1))
    assert [call["sections"] for call in calls] == by_path(kernel=[(16, 24, 24)], device=[])


# -- accuracy ------------------------------------------------------------------------------


HALF_ULP = {torch.float32: 2.0**-24, torch.bfloat16: 2.0**-8}
TINY = {torch.float32: 2.0**-149, torch.bfloat16: 2.0**-133}


def half_ulp(values, dtype):
    """Half an ulp of |values| in dtype (the smallest subnormal spacing below normals)."""
    magnitude = np.abs(values)
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    return np.maximum(2.0**exponent * HALF_ULP[dtype], TINY[dtype] / 2)


def column_positions(position_ids, sections, layout):
    """(B, L, r): the position each column's pair takes (its section's row)."""
    of = T.section_of(sum(sections), sections, layout)
    return np.moveaxis(position_ids.double().numpy()[np.concatenate([of, of])], 0, -1)


def exact_caches(p, freq):
    """cos(p w), sin(p w) in float64 per column, and a bound of their error: the angle
    rounded once (|p w| u) and NumPy's cos/sin (4 u); and of sinpe's double before its
    one rounding: an anchor at most 63 rows away (two products rounded) and its sincos
    and sum (conftest's SINPE_VALUE_ERROR, 12.2 u), as tests/test_rotary_embedding.py."""
    w = np.concatenate([freq, freq])
    angle = p * w
    slack = (np.abs(angle) + 4.0) * U64 + ((np.abs(p) + 126.0) * w + 12.2) * U64
    return np.cos(angle), np.sin(angle), slack


NEAR = {17: 2**17 - 20, 20: 2**20 - 20}


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_within_half_an_ulp_near_2_17_and_2_20(family):
    hf, module, _ = text(family)
    _, _, sections, layout = TEXT[family]
    freq = hf.inv_freq.double().numpy()
    for start in NEAR.values():
        position_ids = thw(start, 40)
        cos, sin, slack = exact_caches(column_positions(position_ids, sections, layout), freq)
        for dtype in (torch.float32, torch.bfloat16):
            got = module(torch.zeros(1, dtype=dtype), position_ids)
            for g, exact in zip(got, (cos, sin)):
                bound = half_ulp(np.abs(exact) + slack, dtype) + slack + device_excess()
                assert (np.abs(g.double().numpy() - exact) <= bound).all(), (dtype, start)


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen3_vl"])
def test_transformers_is_100_times_further_off_near_2_17(family):
    hf, module, _ = text(family)
    _, _, sections, layout = TEXT[family]
    position_ids = thw(NEAR[17], 40)
    cos, sin, _ = exact_caches(column_positions(position_ids, sections, layout),
                               hf.inv_freq.double().numpy())
    x = torch.zeros(1)

    def error(caches):
        return max(float(np.abs(c.double().numpy() - e).max()) for c, e in zip(caches, (cos, sin)))

    assert error(hf(x, position_ids)) >= 100 * error(module(x, position_ids))


# docs/accuracy.md's table: each row a model's text config and a position p of an image's token,
# whose (time, height, width) are (p, p + 12, p + 30); each column the largest absolute error
# over the (cos, sin) columns its rotary module returns in float32, against the exact values
# of HF's float32 frequencies at each pair's own position, in mpmath at 40 digits.
TABLE_MODELS = [("Qwen2-VL / Qwen2.5-VL 7B", "qwen2_vl"), ("Qwen3-VL 8B", "qwen3_vl")]
TABLE_POSITIONS = [2**17 - 1, 2**20 - 1]  # (p = 2**17 would make HF's time angles exact)
TABLE_HEADER = ("| model (text rotary module) | position p | transformers' float32 module | "
                "`sinpe.torch.RotaryEmbedding` |\n|---|---|---|---|")


@functools.cache
def table_errors():
    import mpmath

    mpmath.mp.dps = 40
    found = {}
    x = torch.zeros(1)
    for label, family in TABLE_MODELS:
        hf, module, _ = text(family)
        _, _, sections, layout = TEXT[family]
        freq = hf.inv_freq.double().numpy()
        position_ids = torch.tensor([[[p] for p in TABLE_POSITIONS]]).reshape(1, 1, -1)
        position_ids = position_ids + torch.tensor([0, 12, 30])[:, None, None]
        results = {"hf": hf(x, position_ids), "sinpe": module(x, position_ids)}
        p = column_positions(position_ids, sections, layout)
        for i, start in enumerate(TABLE_POSITIONS):
            angles = [mpmath.mpf(float(a)) * mpmath.mpf(float(w))
                      for a, w in zip(p[0, i], np.concatenate([freq, freq]))]
            cos = np.array([float(mpmath.cos(a)) for a in angles])
            sin = np.array([float(mpmath.sin(a)) for a in angles])
            found[label, start] = {
                name: max(float(np.abs(c[0, i].double().numpy() - cos).max()),
                          float(np.abs(s[0, i].double().numpy() - sin).max()))
                for name, (c, s) in results.items()}
    return found


def accuracy_table() -> str:
    lines = [TABLE_HEADER]
    for label, _ in TABLE_MODELS:
        for p in TABLE_POSITIONS:
            e = table_errors()[label, p]
            lines.append(f"| {label} | {p} = 2**{p.bit_length()} - 1 | {e['hf']:.1e} | "
                         f"{e['sinpe']:.1e} |")
    return "\n".join(lines)


def test_the_accuracy_page_holds_the_computed_table():
    table = accuracy_table()
    assert table in ACCURACY_PAGE.read_text(), (
        f"docs/accuracy.md's table is stale; it should read:\n{table}")


def test_the_claims_of_the_table():
    for e in table_errors().values():
        # half an ulp of float32 values below 1 (the device path: plus 2**-30)
        assert e["sinpe"] <= 2.0**-25 + device_excess()
        assert e["hf"] >= 100 * e["sinpe"]


# -- the vision tower ------------------------------------------------------------------------


VISION = {"qwen2_vl": ("Qwen2VLVisionRotaryEmbedding", transformers.Qwen2VLVisionConfig,
                       dict(embed_dim=1280, num_heads=16)),
          "qwen3_vl": ("Qwen3VLVisionRotaryEmbedding", transformers.Qwen3VLVisionConfig,
                       dict(hidden_size=1152, num_heads=16))}


@pytest.mark.parametrize("family", list(VISION))
def test_the_vision_stand_in_is_exact_at_each_patchs_row_and_column(family):
    name, make, sizes = VISION[family]
    hf = getattr(modeling(family), name)(make(**sizes))
    axial = _multi_axis.AxialRotary(hf)
    steps = torch.arange(300)
    patches = torch.stack([steps // 17 * 31, steps % 17 * 43 + 1000], dim=1)  # (N, 2)
    got = axial(torch.zeros(1, dtype=torch.bfloat16), patches)
    want = hf(torch.zeros(1, dtype=torch.bfloat16), patches)
    assert [(g.shape, g.dtype) for g in got] == [(w.shape, w.dtype) for w in want]
    quarter = hf.inv_freq.double().numpy()
    # pairs 0 .. r/4 - 1 at the row, r/4 .. r/2 - 1 at the column, the same frequencies
    p = np.repeat(patches.double().numpy(), len(quarter), axis=1)
    p = np.concatenate([p, p], axis=1)
    cos, sin, slack = exact_caches(p, np.concatenate([quarter, quarter]))
    for g, exact in zip(got, (cos, sin)):
        bound = half_ulp(np.abs(exact) + slack, torch.float32) + slack + device_excess()
        assert (np.abs(g.double().numpy() - exact) <= bound).all()
    with pytest.raises(ValueError, match=r"shape \(N, 2\)"):
        axial(torch.zeros(1), patches.T)


def qkv_views(patches, heads, width, dtype, generator):
    """q and k as a vision attention makes them: views of one fused projection."""
    fused = torch.randn(patches, 3 * heads * width, generator=generator).to(dtype)
    return fused.reshape(patches, 3, heads, width).permute(1, 0, 2, 3).unbind(0)[:2]


@pytest.mark.parametrize("family", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"])
def test_apply_rotary_pos_emb_vision_gives_hfs_bits(family, monkeypatch):
    hf_apply = modeling(family).apply_rotary_pos_emb_vision
    generator = torch.Generator().manual_seed(0)
    calls = []
    rotate_by = sinpe._core._rotate_by
    monkeypatch.setattr(sinpe._core, "_rotate_by",
                        lambda *a, **k: (calls.append(1), rotate_by(*a, **k))[1])
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for cache_dtype in {torch.float32, dtype}:
            for patches in (37, 1):
                q, k = qkv_views(patches, 3, 16, dtype, generator)
                cos, sin = (torch.randn(patches, 16, generator=generator).to(cache_dtype)
                            for _ in range(2))
                for args in ((q, k), (q.contiguous(), k.contiguous())):
                    calls.clear()
                    got = st.apply_rotary_pos_emb_vision(*args, cos, sin)
                    want = hf_apply(*args, cos, sin)
                    assert all(same(g, w) for g, w in zip(got, want)), (dtype, cache_dtype)
                    # the query and the key on the kernel (on the device path: none)
                    assert len(calls) == by_path(kernel=2, device=0)


def test_apply_rotary_pos_emb_vision_is_differentiable():
    hf_apply = modeling("qwen2_vl").apply_rotary_pos_emb_vision
    generator = torch.Generator().manual_seed(1)
    q, k = (t.detach().requires_grad_() for t in qkv_views(5, 2, 8, torch.float64, generator))
    cos, sin = (torch.randn(5, 8, generator=generator, dtype=torch.float64) for _ in range(2))
    grads = []
    for apply in (st.apply_rotary_pos_emb_vision, hf_apply):
        q_embed, k_embed = apply(q, k, cos, sin)
        grads.append(torch.autograd.grad((q_embed.square().sum() + k_embed.sum()), (q, k)))
    for g, w in zip(*grads):
        assert torch.allclose(g, w, rtol=1e-6, atol=1e-6)


# -- bad input -------------------------------------------------------------------------------


def test_bad_position_ids_raise():
    _, module, _ = text("qwen2_vl")
    x = torch.zeros(1)
    for shape in ((4, 1, 5), (2, 1, 5), (5,), (1, 1, 1, 5)):
        with pytest.raises(ValueError, match=r"position_ids must have shape \(3, B, L\)"):
            module(x, torch.zeros(shape, dtype=torch.long))
    refused_or_nan(torch, lambda: module(x, torch.full((3, 1, 2), 2**25)), "MAX_POSITION")
    with pytest.raises(TypeError, match="position_ids must be integer or real"):
        module(x, torch.zeros((3, 1, 2), dtype=torch.bool))
    with pytest.raises(ValueError, match="leading axis of length 3"):
        st.rope_cache(None, 16, positions=torch.zeros(2, 1, 4), sections=(2, 3, 3))
    with pytest.raises(ValueError, match="8 pairs"):
        st.rope_cache(None, 16, positions=torch.zeros(3, 1, 4), sections=(2, 3, 2))
    with pytest.raises(ValueError, match="sections_layout is given without sections"):
        st.rope_cache(None, 16, positions=torch.zeros(1, 4), sections_layout="interleaved")
    with pytest.raises(ValueError, match="vision tower's.*'axial'"):
        st.RotaryEmbedding(transformers.Qwen2VLVisionConfig())


if __name__ == "__main__":
    print(accuracy_table())
