"""sinpe.torch.patch on tiny random-init vision-language models: Qwen2-VL, Qwen2.5-VL,
Qwen3-VL and Qwen3-VL-MoE.

Each model (text: hidden size 64, 2 layers, head_dim 16 with three position rows
in sections; vision: hidden size 32, 1-2 blocks, 2x2 patches merged 2x2) reads an
8x12-patch image between text tokens, at 3-D position_ids from its own
``get_rope_index`` (the image's tokens have distinct time, height and width
positions) shifted by 3000, where float32 angles drift:

(a) the patched model's logits are no further from the exact ones than HF's own
    float32 logits are, up to a factor 2 and a floor of 2 ulps of the largest
    logit (tests/test_patch.py's derivation: both are float32 evaluations of the
    same function, HF's with its float32 angles on top).  The exact logits come
    from a float64 copy of HF's model whose rotary modules compute their angles
    in float64 from HF's own float32 frequencies and recombine them by HF's own
    ``recomposition_frequencies``, and whose vision apply function runs in
    float64 (HF's casts to float32): nothing of sinpe in the reference.  The
    weights are drawn 10x larger than transformers' default, so that the
    positions move the logits far more than the noise does.
(b) undo() gives back HF's logits bit for bit, and HF's apply functions.
(c) the text rotary module, the vision rotary module and both apply functions
    were swapped, and on the CPU sinpe's kernel rotates every query and key of
    the text layers and the vision blocks (on the device path, ``SINPE_TORCH_PATH=device``,
    none: device operations alone).
(d) decoding: 8 steps with a KV cache after the image (transformers' positions from
    its rope deltas, time, height and width alike) give the patched model's own
    full-forward logits within twice HF's own gap between the same two
    computations, plus the floor.
(e) refusals: a vision apply function sinpe does not reproduce (one computing in
    the input's dtype, swapped in by the test), caches of other sections than the
    module's (sinpe's section rule swapped by the test), a second patch: each
    raises, and nothing changed.
And: a bfloat16 model (whose frequency buffers ``model.to`` rounded) patches, and
undo gives back its bits.
"""
from __future__ import annotations

import contextlib
import copy

import pytest
from conftest import by_path, require, require_module, require_torch

torch = require_torch()
transformers = require("transformers")
from test_patch import floor, gap, same  # noqa: E402

import sinpe  # noqa: E402
import sinpe.torch as st  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")

IMAGE, VISION_START, VISION_END, VIDEO = 90, 91, 92, 93
SHIFT = 3000  # positions where HF's float32 angles are off by ~2e-4
TEXT = dict(vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
            pad_token_id=0, bos_token_id=1, eos_token_id=2)
TOKENS = dict(image_token_id=IMAGE, video_token_id=VIDEO, vision_start_token_id=VISION_START,
              vision_end_token_id=VISION_END)
PATCHES = dict(patch_size=2, spatial_merge_size=2, temporal_patch_size=2)


def rope(sections, **extra):
    return {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": sections, **extra}


def config(family):
    """A tiny config of the family (text head_dim 16: 8 frequency pairs in 3 sections;
    Qwen3-VL-MoE's text model with 4 experts)."""
    if family == "qwen2_vl":
        return transformers.Qwen2VLConfig(
            text_config=dict(TEXT, rope_parameters=rope([2, 3, 3])), **TOKENS,
            vision_config=dict(PATCHES, depth=1, embed_dim=32, hidden_size=64, num_heads=2,
                               mlp_ratio=2))
    if family == "qwen2_5_vl":
        return transformers.Qwen2_5_VLConfig(
            text_config=dict(TEXT, rope_parameters=rope([2, 3, 3])), **TOKENS,
            vision_config=dict(PATCHES, depth=2, hidden_size=32, out_hidden_size=64,
                               intermediate_size=64, num_heads=2, window_size=4,
                               fullatt_block_indexes=[1]))
    text = dict(TEXT, head_dim=16, rope_parameters=rope([4, 2, 2], mrope_interleaved=True))
    extra = {}
    if family == "qwen3_vl_moe":
        text.update(num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
        extra["experts_implementation"] = "eager"  # torch._grouped_mm has no float64
    return getattr(transformers, CONFIGS[family])(
        text_config=text, **TOKENS, **extra,
        vision_config=dict(PATCHES, depth=2, hidden_size=32, out_hidden_size=64,
                           intermediate_size=64, num_heads=2, num_position_embeddings=16,
                           deepstack_visual_indexes=[0]))


FAMILIES = ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"]
CONFIGS = {"qwen3_vl": "Qwen3VLConfig", "qwen3_vl_moe": "Qwen3VLMoeConfig"}
MODELS = {"qwen2_vl": "Qwen2VLForConditionalGeneration",
          "qwen2_5_vl": "Qwen2_5_VLForConditionalGeneration",
          "qwen3_vl": "Qwen3VLForConditionalGeneration",
          "qwen3_vl_moe": "Qwen3VLMoeForConditionalGeneration"}


def modeling(family):
    return require_module(f"transformers.models.{family}.modeling_{family}")


def build(family):
    torch.manual_seed(0)
    cfg = config(family)
    # weights 10x transformers' default scale: attention that depends on the positions
    cfg.initializer_range = cfg.text_config.initializer_range = 0.2
    cfg.vision_config.initializer_range = 0.2
    return getattr(transformers, MODELS[family])(cfg).eval()


def inputs(model, grid=(1, 8, 12)):
    """Text, an image of ``grid`` patches (t, h, w) between vision start and end tokens,
    more text; 3-D position_ids from the model's get_rope_index, shifted."""
    vision = model.config.vision_config
    generator = torch.Generator().manual_seed(3)
    t, h, w = grid
    width = vision.in_channels * vision.temporal_patch_size * vision.patch_size ** 2
    pixel_values = torch.randn(t * h * w, width, generator=generator)
    image_tokens = t * h * w // vision.spatial_merge_size ** 2
    text = torch.randint(3, 80, (1, 30), generator=generator)
    ids = torch.cat([text[:, :5], torch.tensor([[VISION_START]]),
                     torch.full((1, image_tokens), IMAGE), torch.tensor([[VISION_END]]),
                     text[:, 5:]], dim=1)
    mm_token_type_ids = (ids == IMAGE).int()
    grid_thw = torch.tensor([grid])
    position_ids, _ = model.model.get_rope_index(ids, mm_token_type_ids, image_grid_thw=grid_thw)
    return dict(input_ids=ids, pixel_values=pixel_values, image_grid_thw=grid_thw,
                mm_token_type_ids=mm_token_type_ids, position_ids=position_ids + SHIFT)


def exact_reference(model, family):
    """A float64 copy of ``model``: rotary angles in float64 from HF's float32
    frequencies, recombined by HF's own recomposition_frequencies; and the float64
    vision apply function to run it with (see ``float64_vision_apply``)."""
    reference = copy.deepcopy(model).double()
    for name, module in list(reference.named_modules()):
        if type(module).__name__.endswith("RotaryEmbedding"):
            fresh = type(module)(module.config).double()  # float32 frequencies, widened
            parent, _, child = name.rpartition(".")
            setattr(reference.get_submodule(parent), child, fresh)
            fresh.forward = exact_forward(fresh)
    return reference


def exact_forward(module):
    def forward(x, position_ids):
        if position_ids.dim() == 2 and position_ids.shape[-1] != 2:  # text (B, L)
            position_ids = position_ids.expand(3, -1, -1)
        freqs = position_ids[..., None].double() * module.inv_freq.double()
        scaling = module.attention_scaling
        return (module.recomposition_frequencies(freqs.cos() * scaling),
                module.recomposition_frequencies(freqs.sin() * scaling))

    return forward


@contextlib.contextmanager
def float64_vision_apply(family):
    """HF's vision apply function computes in float32 whatever its input: for the float64
    reference, the same formula in the input's dtype."""
    source = modeling(family)
    original = source.apply_rotary_pos_emb_vision

    def apply(q, k, cos, sin):
        cos, sin = cos.unsqueeze(-2), sin.unsqueeze(-2)
        return (q * cos + source.rotate_half(q) * sin, k * cos + source.rotate_half(k) * sin)

    source.apply_rotary_pos_emb_vision = apply
    try:
        yield
    finally:
        source.apply_rotary_pos_emb_vision = original


@pytest.fixture(scope="module", params=FAMILIES)
def run(request):
    """HF's model, its exact float64 reference, and the same model patched then undone,
    with the kernel calls of the patched forward counted."""
    family = request.param
    model = build(family)
    feed = inputs(model)
    hf_apply = {name: getattr(modeling(family), name)
                for name in ("apply_rotary_pos_emb", "apply_rotary_pos_emb_vision")}
    calls = []
    rotate_by = sinpe._core._rotate_by

    def counted(*args, **kwargs):
        calls.append(1)
        return rotate_by(*args, **kwargs)

    with torch.no_grad():
        hf = model(**feed).logits
        with float64_vision_apply(family):
            double = {k: v.double() if k == "pixel_values" else v for k, v in feed.items()}
            reference = exact_reference(model, family)(**double).logits
        handle = st.patch(model)
        try:
            sinpe._core._rotate_by = counted
            patched = model(**feed).logits
        finally:
            sinpe._core._rotate_by = rotate_by
            handle.undo()
        undone = model(**feed).logits
    return dict(family=family, model=model, hf=hf, reference=reference, patched=patched,
                undone=undone, handle=handle, hf_apply=hf_apply, calls=len(calls))


def test_patched_logits_are_as_close_to_exact_as_hfs(run):
    hf_error = gap(run["hf"], run["reference"])
    patched_error = gap(run["patched"], run["reference"])
    bound = 2 * hf_error + floor(run["reference"], torch.float32)
    assert patched_error <= bound, (patched_error, hf_error)
    assert not same(run["patched"], run["hf"])  # the caches did change


def test_undo_restores_hfs_bits_and_functions(run):
    assert same(run["undone"], run["hf"])
    assert not run["handle"].active
    for name, function in run["hf_apply"].items():
        assert getattr(modeling(run["family"]), name) is function


def test_both_towers_were_patched_and_the_kernel_rotates_them(run):
    handle, family = run["handle"], run["family"]
    source = f"transformers.models.{family}.modeling_{family}"
    assert handle.families == [family]
    assert handle.functions == [f"{source}.apply_rotary_pos_emb",
                                f"{source}.apply_rotary_pos_emb_vision"]
    assert sorted(handle.rotary) == ["model.language_model.rotary_emb",
                                     "model.visual.rotary_pos_emb"]
    config = run["model"].config
    # a query and a key per text layer and per vision block (on the device path: none)
    rotated = 2 * (config.text_config.num_hidden_layers + config.vision_config.depth)
    assert run["calls"] == by_path(kernel=rotated, device=0)


def decode(model, feed, prompt):
    """The logits of the first ``prompt`` tokens (with the image), then one decoding
    step per further token with the KV cache; and the full forward's logits."""
    ids = feed["input_ids"]
    image = {k: feed[k] for k in ("pixel_values", "image_grid_thw")}
    out = model(input_ids=ids[:, :prompt], mm_token_type_ids=feed["mm_token_type_ids"][:, :prompt],
                use_cache=True, **image)
    steps, past = [out.logits], out.past_key_values
    for t in range(prompt, ids.shape[1]):
        out = model(input_ids=ids[:, t : t + 1], past_key_values=past, use_cache=True)
        steps.append(out.logits)
        past = out.past_key_values
    full = model(input_ids=ids, mm_token_type_ids=feed["mm_token_type_ids"], **image).logits
    return torch.cat(steps, dim=1), full


@pytest.mark.parametrize("family", FAMILIES)
def test_decoding_with_a_kv_cache_gives_the_full_forwards_logits(family):
    model = build(family)
    feed = inputs(model)
    prompt = feed["input_ids"].shape[1] - 8
    with torch.no_grad():
        hf_decoded, hf_full = decode(model, feed, prompt)
        with st.patch(model):
            patched_decoded, patched_full = decode(model, feed, prompt)
    hf_gap, patched_gap = gap(hf_decoded, hf_full), gap(patched_decoded, patched_full)
    assert patched_gap <= 2 * hf_gap + floor(patched_full, torch.float32), (patched_gap, hf_gap)


def test_caches_of_other_sections_fail_the_check(monkeypatch):
    """sinpe's rotary module made with Qwen2-VL's contiguous rule for Qwen3-VL's
    interleaved module: the check at (3, B, L) positions whose rows differ rejects it, and
    patch serves the module by its own forward in double precision instead, whose caches
    are the module's within the rounding of HF's float32 angles."""
    from sinpe.torch import _multi_axis
    from sinpe.torch.patching._double import DoubleForward

    model = build("qwen3_vl")
    rotary = model.model.language_model.rotary_emb
    found = _multi_axis.module_sections
    monkeypatch.setattr(_multi_axis, "module_sections",
                        lambda *args: (found(*args)[0], "contiguous"))
    positions = torch.stack([torch.arange(30), torch.arange(30) // 3, torch.arange(30) % 5])
    positions = positions[:, None].expand(3, 2, 30)
    x = torch.zeros(1)
    with torch.no_grad():
        want = rotary(x, positions)
        with st.patch(model) as handle:
            assert isinstance(vars(rotary)["forward"].call, DoubleForward)
            got = rotary(x, positions)
    assert "model.language_model.rotary_emb" in handle.rotary
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        assert float((g - w).abs().max()) <= 30 * 2.0**-24 + 2.0**-22


def test_a_bfloat16_model_patches_and_undo_gives_back_its_bits():
    model = build("qwen2_5_vl").to(torch.bfloat16)
    feed = inputs(model)
    feed["pixel_values"] = feed["pixel_values"].bfloat16()
    with torch.no_grad():
        before = model(**feed).logits
        with st.patch(model) as handle:
            patched = model(**feed).logits
        after = model(**feed).logits
    assert handle.rotary and patched.dtype == torch.bfloat16 and bool(patched.isfinite().all())
    assert same(after, before)


def test_keeps_a_vision_apply_function_it_does_not_reproduce(monkeypatch):
    """qwen2_vl's vision function replaced by one computing in the input's dtype (no
    float32 round trip): no form of sinpe gives its bits for bfloat16 inputs, so it stays
    (the handle says why) while both rotary modules give sinpe's caches."""
    model = build("qwen2_vl").to(torch.bfloat16)
    source = modeling("qwen2_vl")
    llama_apply = source.apply_rotary_pos_emb

    def in_input_dtype(q, k, cos, sin):
        return llama_apply(q, k, cos.to(q.dtype), sin.to(q.dtype), unsqueeze_dim=-2)

    in_input_dtype.__module__ = source.__name__  # as if transformers' own
    monkeypatch.setattr(source, "apply_rotary_pos_emb_vision", in_input_dtype)
    qualname = "transformers.models.qwen2_vl.modeling_qwen2_vl.apply_rotary_pos_emb_vision"
    with st.patch(model) as handle:
        assert source.apply_rotary_pos_emb_vision is in_input_dtype
        assert "no form of sinpe gives its result" in handle.kept[qualname]
        assert qualname not in handle.functions
        assert sorted(handle.rotary) == ["model.language_model.rotary_emb",
                                         "model.visual.rotary_pos_emb"]
    assert source.apply_rotary_pos_emb is llama_apply
    assert "forward" not in vars(model.model.language_model.rotary_emb)


def test_refuses_a_second_patch_until_undone():
    model = build("qwen3_vl")
    with st.patch(model):
        with pytest.raises(ValueError, match="already patched"):
            st.patch(model)
        with pytest.raises(ValueError, match="already patched"):
            st.patch(model.model.visual)  # the vision tower's rotary module alone
    st.patch(model.model.visual).undo()  # the vision tower alone is a model patch knows
