"""sinpe.torch.patch on tiny random-init transformers models of every family it knows.

For each model (hidden size 64, 2 layers, a vocabulary of 96; float32, and
bfloat16 for OLMo), on 40 tokens:

(a) the patched model's logits are no further from the exact ones than HF's own
    float32 logits are, up to a factor 2 and a floor of a few ulps.  The exact
    logits come from a float64 copy of HF's model whose rotary caches the test
    computes in float64 from the HF module's own frequencies and attention factor
    (after HF's forward ran, so that dynamic and longrope switch as HF's do), or,
    for GPT-J and CodeGen, whose sin/cos table the test computes in float64:
    nothing of sinpe in the reference.  Both float32 models are float32
    evaluations of that function (HF's with its float32 angles on top), so their
    distances to it are float32 noise of the same order; the factor 2 covers the
    spread of a maximum of such noise, the floor (2 ulps of the largest logit)
    logits that happen to round alike.  The reference's frequencies are the
    model's float32 ones (a bfloat16 model's buffers were rounded by model.to).
    The weights are drawn 10x larger than transformers' default, so that the
    positions move the logits far more than the noise does.
(b) 32 decoding steps with a KV cache (after an 8-token prompt) give the patched
    model's own full-forward logits within twice HF's own gap between the same
    two computations, plus the floor (for dynamic and longrope HF's caches change
    with the length by design: the gap is HF's, and sinpe must follow it).
(c) undo() gives back HF's logits bit for bit, and the apply globals.
(d) an apply function is recognised by what it does (Cohere's in Llama's place), one
    that no form reproduces stays HF's; refusals: caches sinpe cannot make, a model
    without rotary embeddings or on the meta device, a second patch, bad arguments:
    each raises, and nothing changed.  Copies and pickles carry no patch.
And: an unpatched model of a patched family keeps its bits (the globals are
shared); model.to(dtype) between patch and undo; the context manager; sinpe.torch
does not import transformers; on the CPU, sinpe's kernel rotates every query and key
of a patched model (prefill and decoding step).
"""
from __future__ import annotations

import copy
import io
import subprocess
import sys

import pytest
from conftest import (
    bits,
    by_path,
    count_kernel_rotations,
    require,
    require_module,
    require_torch,
)

torch = require_torch()
transformers = require("transformers")
import sinpe.torch as st  # noqa: E402

VOCAB, PROMPT, LENGTH = 96, 8, 40
TOKENS = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2)
DECODER = dict(TOKENS, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
               num_attention_heads=4, num_key_value_heads=2)


def rope(kind, **extra):
    return {"rope_type": kind, "rope_theta": 10000.0, **extra}


def deepseek(interleave):
    return transformers.DeepseekV3Config(
        **TOKENS, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=4, n_routed_experts=4,
        n_group=2, topk_group=1, num_experts_per_tok=2, first_k_dense_replace=1,
        kv_lora_rank=16, q_lora_rank=24, qk_rope_head_dim=8, qk_nope_head_dim=8,
        v_head_dim=16, rope_interleave=interleave, max_position_embeddings=64,
        experts_implementation="eager")  # torch._grouped_mm has no float64 (the reference)


def gptj_like(config_class):
    return config_class(**TOKENS, n_embd=64, n_layer=2, n_head=4, rotary_dim=8, n_positions=64)


# name -> (config, dtype)
CASES = {
    "llama": lambda: transformers.LlamaConfig(**DECODER),
    "llama-llama3": lambda: transformers.LlamaConfig(
        **DECODER, max_position_embeddings=128, rope_parameters=rope(
            "llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
            original_max_position_embeddings=16)),
    "llama-yarn": lambda: transformers.LlamaConfig(
        **DECODER, max_position_embeddings=64, rope_parameters=rope("yarn", factor=4.0)),
    "llama-linear": lambda: transformers.LlamaConfig(
        **DECODER, rope_parameters=rope("linear", factor=2.0)),
    "llama-dynamic": lambda: transformers.LlamaConfig(
        **DECODER, max_position_embeddings=16, rope_parameters=rope("dynamic", factor=2.0)),
    "mistral": lambda: transformers.MistralConfig(**DECODER),
    "qwen2": lambda: transformers.Qwen2Config(**DECODER),
    "qwen3": lambda: transformers.Qwen3Config(**DECODER, head_dim=16),
    "gemma": lambda: transformers.GemmaConfig(**DECODER, head_dim=16),
    "gemma2": lambda: transformers.Gemma2Config(**DECODER, head_dim=16),
    "gemma3": lambda: transformers.Gemma3TextConfig(**DECODER, head_dim=16,
                                                    sliding_window=16),
    "phi3-longrope": lambda: transformers.Phi3Config(
        **DECODER, max_position_embeddings=64, original_max_position_embeddings=16,
        rope_parameters=rope("longrope", partial_rotary_factor=0.5,
                             short_factor=[1.0, 1.1, 1.2, 1.5],
                             long_factor=[1.0, 2.0, 4.0, 8.0])),
    "gpt_neox": lambda: transformers.GPTNeoXConfig(
        **{k: v for k, v in DECODER.items() if k != "num_key_value_heads"}, rotary_pct=0.5),
    "phi": lambda: transformers.PhiConfig(**DECODER, partial_rotary_factor=0.5),
    "gptj": lambda: gptj_like(transformers.GPTJConfig),
    "codegen": lambda: gptj_like(transformers.CodeGenConfig),
    "cohere": lambda: transformers.CohereConfig(**DECODER),
    "olmo": lambda: transformers.OlmoConfig(**DECODER),
    "olmo-bfloat16": lambda: transformers.OlmoConfig(**DECODER),
    "glm": lambda: transformers.GlmConfig(**DECODER, head_dim=16),
    "deepseek_v3": lambda: deepseek(False),
    "deepseek_v3-interleave": lambda: deepseek(True),
}


def build(name, seed=0):
    torch.manual_seed(seed)
    config = CASES[name]()
    # weights 10x transformers' default scale: attention that depends on the positions
    # (at the default, their effect on the logits is 5e-3, bfloat16's noise 3e-3)
    config.initializer_range = 0.2
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    return model.to(torch.bfloat16) if name.endswith("bfloat16") else model


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(torch, a), bits(torch, b))


def gap(a, b) -> float:
    return float((a.double() - b.double()).abs().max())


def decode(model, ids):
    """The prompt's logits, then one decoding step per token with the KV cache."""
    out = model(ids[:, :PROMPT], use_cache=True)
    steps, past = [out.logits], out.past_key_values
    for t in range(PROMPT, ids.shape[1]):
        out = model(ids[:, t : t + 1], past_key_values=past, use_cache=True)
        steps.append(out.logits)
        past = out.past_key_values
    return torch.cat(steps, dim=1)


def exact_reference(model):
    """A float64 copy of ``model`` whose rotary caches (or GPT-J tables) the test makes
    in float64 from HF's own frequencies: the exact function both float32 models
    approximate."""
    reference = copy.deepcopy(model).double()
    for name, module in list(reference.named_modules()):
        if type(module).__name__.endswith("RotaryEmbedding"):
            # a new module: float32 frequencies (model.to(bfloat16) rounded the model's),
            # dynamic rope's state as at the start (the model's moved with its calls)
            fresh = type(module)(module.config).double()
            parent, _, child = name.rpartition(".")
            setattr(reference.get_submodule(parent), child, fresh)
            fresh.forward = exact_forward(fresh)
        elif isinstance(getattr(module, "embed_positions", None), torch.Tensor):
            rows, width = module.embed_positions.shape  # GPT-J's create_sinusoidal_positions
            inv_freq = 1.0 / (10000 ** (torch.arange(0, width, 2, dtype=torch.int64) / width))
            angles = torch.arange(rows, dtype=torch.float64)[:, None] * inv_freq.double()
            module.embed_positions = torch.cat((angles.sin(), angles.cos()), dim=1)
    return reference


def exact_forward(module):
    """HF's rotary forward in float64: its frequencies and attention factor after its
    own forward ran (dynamic and longrope switch there), the angles in float64."""
    hf_forward = module.forward
    pairwise = type(module).__module__.endswith("modeling_cohere")

    def forward(x, position_ids, *layer):
        hf_forward(x, position_ids, *layer)
        prefix = f"{layer[0]}_" if layer else ""
        inv_freq = getattr(module, f"{prefix}inv_freq").double()
        scaling = getattr(module, f"{prefix}attention_scaling")
        freqs = position_ids[..., None].double() * inv_freq
        emb = freqs.repeat_interleave(2, dim=-1) if pairwise else torch.cat((freqs, freqs), -1)
        return emb.cos() * scaling, emb.sin() * scaling

    return forward


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module", params=sorted(CASES))
def run(request, one_torch_thread):
    """HF's model, its exact float64 reference, and the same model patched then undone."""
    name = request.param
    model = build(name)
    ids = torch.randint(3, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(7))
    with torch.no_grad():
        hf, hf_decoded = model(ids).logits, decode(model, ids)
        reference = exact_reference(model)(ids).logits
        handle = st.patch(model)
        try:
            patched, patched_decoded = model(ids).logits, decode(model, ids)
        finally:
            handle.undo()
        undone = model(ids).logits
    return dict(name=name, hf=hf, hf_decoded=hf_decoded, reference=reference, patched=patched,
                patched_decoded=patched_decoded, undone=undone, handle=handle)


def floor(logits, dtype) -> float:
    """Two ulps (of ``dtype``) of the largest logit."""
    return 2 * torch.finfo(dtype).eps * float(logits.abs().max())


def test_patched_logits_are_as_close_to_exact_as_hfs(run):
    hf_error = gap(run["hf"], run["reference"])
    patched_error = gap(run["patched"], run["reference"])
    bound = 2 * hf_error + floor(run["reference"], run["hf"].dtype)
    assert patched_error <= bound, (patched_error, hf_error)
    if run["hf"].dtype == torch.float32:  # the caches did change: exact vs HF's float32 angles
        assert not same(run["patched"], run["hf"])


def test_decoding_with_a_kv_cache_gives_the_full_forwards_logits(run):
    hf_gap = gap(run["hf_decoded"], run["hf"])
    patched_gap = gap(run["patched_decoded"], run["patched"])
    assert patched_gap <= 2 * hf_gap + floor(run["patched"], run["patched"].dtype), (
        patched_gap, hf_gap)


def test_undo_restores_hfs_bits(run):
    assert same(run["undone"], run["hf"])
    assert not run["handle"].active
    for qualname in run["handle"].functions:
        module_name, name = qualname.rsplit(".", 1)
        function = getattr(require_module(module_name), name)
        assert function.__module__ == module_name  # HF's own again, not sinpe's


@pytest.fixture(scope="module")
def llama_pair(one_torch_thread):
    """Two Llama models (different weights) and their HF logits."""
    ids = torch.randint(3, VOCAB, (2, 23), generator=torch.Generator().manual_seed(8))
    models = [build("llama", seed) for seed in (0, 1)]
    with torch.no_grad():
        return models, ids, [m(ids).logits for m in models]


def test_an_unpatched_model_of_the_family_keeps_its_bits(llama_pair):
    """patch swaps the modeling module's global, which the other model runs too: with
    HF's caches it gives HF's bits; only the patched model's caches change."""
    (patched, other), ids, (before, other_before) = llama_pair
    llama = require_module("transformers.models.llama.modeling_llama")
    hf_apply = llama.apply_rotary_pos_emb
    with torch.no_grad(), st.patch(patched) as handle:
        assert llama.apply_rotary_pos_emb is not hf_apply
        assert same(other(ids).logits, other_before)
        assert not same(patched(ids).logits, before)
        second = st.patch(other)  # both patched: the global is swapped once, counted
        second.undo()
        assert llama.apply_rotary_pos_emb is not hf_apply  # the first patch still holds it
        assert handle.active and not second.active
        assert same(other(ids).logits, other_before)
    assert llama.apply_rotary_pos_emb is hf_apply
    with torch.no_grad():
        assert same(patched(ids).logits, before)


def test_an_apply_function_is_recognised_by_what_it_does(llama_pair, monkeypatch):
    """Llama's global replaced by Cohere's (interleaved pairs in float32, the same
    signature): patch recognises Cohere's form, not Llama's, and the model gives Cohere's
    function's result with sinpe's caches, bit for bit."""
    (model, _), ids, _ = llama_pair
    llama = require_module("transformers.models.llama.modeling_llama")
    cohere = require_module("transformers.models.cohere.modeling_cohere")
    monkeypatch.setattr(llama, "apply_rotary_pos_emb", cohere.apply_rotary_pos_emb)
    with torch.no_grad():
        with st.patch(model) as handle:
            patched = model(ids).logits
            cos, sin = model.model.rotary_emb(torch.zeros(1, dtype=torch.float32),
                                              torch.arange(ids.shape[1])[None])
        assert handle.forms == {
            "transformers.models.llama.modeling_llama.apply_rotary_pos_emb": "interleaved_float"}
        assert llama.apply_rotary_pos_emb is cohere.apply_rotary_pos_emb  # put back
        rotary = model.model.rotary_emb  # HF's function, sinpe's caches: the same bits
        monkeypatch.setattr(rotary, "forward", lambda x, position_ids: (cos, sin))
        assert same(model(ids).logits, patched)


def test_keeps_an_apply_function_it_does_not_reproduce(llama_pair, monkeypatch):
    """A function no form gives the result of stays transformers' own (the handle says
    so); the model's caches are sinpe's all the same."""
    (model, _), ids, (before, _) = llama_pair
    llama = require_module("transformers.models.llama.modeling_llama")

    def halves(q, k, cos, sin, unsqueeze_dim=1):  # not RoPE: no form reproduces it
        cos, sin = cos.unsqueeze(unsqueeze_dim), sin.unsqueeze(unsqueeze_dim)
        return q * cos, k * sin

    halves.__module__ = llama.__name__  # as if transformers' own
    monkeypatch.setattr(llama, "apply_rotary_pos_emb", halves)
    with torch.no_grad(), st.patch(model) as handle:
        assert llama.apply_rotary_pos_emb is halves
        assert handle.functions == [] and handle.rotary == ["model.rotary_emb"]
        qualname = "transformers.models.llama.modeling_llama.apply_rotary_pos_emb"
        assert "no form of sinpe gives its result" in handle.kept[qualname]
    monkeypatch.undo()
    with torch.no_grad():
        assert same(model(ids).logits, before)


def test_frequencies_changed_after_loading_are_the_models(llama_pair):
    """The model's rotary module no longer gives what its config says (its frequencies
    scaled after loading).  sinpe's rotary module, made from the config, cannot stand for
    it; the module's own forward in double precision does (its frequencies, the angles
    exact), and patch uses that.  With frequencies="exact" (the config's, in double)
    nothing can: patch refuses, naming the module and what differed, nothing changed."""
    (model, _), ids, (before, _) = llama_pair
    rotary = model.model.rotary_emb
    saved = rotary.inv_freq.clone()
    positions = torch.arange(2**17, 2**17 + 40)[None]
    x = torch.zeros(1, dtype=torch.float32)
    try:
        rotary.inv_freq.mul_(1.5)
        with torch.no_grad():
            hf_cos, _ = rotary(x, positions)
            with st.patch(model):
                cos, _ = rotary(x, positions)
            hf_changed = model(ids).logits
        angles = positions[..., None].double() * rotary.inv_freq.double()
        exact = torch.cat((angles, angles), dim=-1).cos()
        assert gap(cos, exact) <= 2.0**-24  # rounded once
        assert gap(hf_cos, exact) > 1e-4  # HF's float32 angles at 2**17
        with pytest.raises(ValueError, match=r"refuses the llama family: the rotary module "
                           r"model\.rotary_emb \(LlamaRotaryEmbedding\) \(as the model holds "
                           r"it.*not changed"):
            st.patch(model, frequencies="exact")
        assert "forward" not in vars(rotary)
        with torch.no_grad():
            assert same(model(ids).logits, hf_changed)
    finally:
        rotary.inv_freq.copy_(saved)
    with torch.no_grad():
        assert same(model(ids).logits, before)


def test_refuses_a_second_patch_until_undone(llama_pair):
    (model, _), _, _ = llama_pair
    handle = st.patch(model)
    try:
        with pytest.raises(ValueError, match="already patched"):
            st.patch(model)
        with pytest.raises(ValueError, match="already patched"):
            st.patch(model.model)  # the same rotary module, through the inner model
    finally:
        handle.undo()
    handle.undo()  # a second undo does nothing
    st.patch(model).undo()


def test_bad_arguments_raise_before_anything_changes(llama_pair):
    (model, _), _, _ = llama_pair
    with pytest.raises(TypeError, match="model must be a torch.nn.Module"):
        st.patch("llama")
    with pytest.raises(ValueError, match="frequencies must be"):
        st.patch(model, frequencies="float32")
    with pytest.raises(TypeError):
        st.patch(model, "exact")  # keyword-only
    assert "forward" not in vars(model.model.rotary_emb)


def test_refuses_models_without_rotary_embeddings():
    torch.manual_seed(0)
    gpt2 = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        **TOKENS, n_embd=32, n_layer=1, n_head=2, n_positions=32))
    with pytest.raises(ValueError, match="has no rotary position embedding"):
        st.patch(gpt2)


def test_refuses_a_model_on_the_meta_device():
    with torch.device("meta"):
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**DECODER))
    with pytest.raises(ValueError, match="meta device"):
        st.patch(model)
    assert "forward" not in vars(model.model.rotary_emb)


def test_undo_after_model_to_follows_the_models_dtype():
    """GPT-J's tables are buffers: model.to(float64) between patch and undo converts
    sinpe's; undo puts back HF's, converted the same way."""
    model = build("gptj")
    hf_tables = [a.attn.embed_positions for a in model.transformer.h]
    handle = st.patch(model)
    model.double()
    handle.undo()
    for block, table in zip(model.transformer.h, hf_tables):
        assert same(block.attn.embed_positions, table.double())


@pytest.mark.slow
def test_sinpe_torch_does_not_import_transformers(tmp_path):
    """patch reaches transformers through the model's own modules only."""
    code = ("import sys, sinpe.torch\n"
            "print(callable(sinpe.torch.patch), 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=tmp_path, timeout=120, check=True).stdout
    assert out.split() == ["True", "False"]


def test_exact_frequencies_reach_the_rotary_module(llama_pair):
    """frequencies="exact": the rotary module's caches use sinpe.rope_frequencies' double
    frequencies (RotaryEmbedding's option), and undo still gives back HF's bits."""
    (model, _), ids, (before, _) = llama_pair
    rotary = model.model.rotary_emb
    positions = torch.arange(40)[None]
    x = torch.zeros(1, 40, 8)
    with torch.no_grad(), st.patch(model, frequencies="exact"):
        cos, _ = rotary(x, positions)
        want, _ = st.RotaryEmbedding.from_module(rotary, frequencies="exact")(x, positions)
        assert same(cos, want)
        model(ids)
    with torch.no_grad():
        assert same(model(ids).logits, before)


@pytest.mark.parametrize("name", ["llama", "gptj"])
def test_copies_and_pickles_of_a_patched_model_carry_no_patch(name, one_torch_thread):
    """copy.deepcopy and pickle (torch.save) of a patched model give HF's model: its
    rotary modules' forward (GPT-J: its sin/cos tables) HF's own, the logits HF's bits;
    patching the copy and undoing that patch also give them back."""
    model = build(name)
    ids = torch.randint(3, VOCAB, (1, 40), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        before = model(ids).logits
        with st.patch(model):
            patched = model(ids).logits
            twin = copy.deepcopy(model)
            buffer = io.BytesIO()
            torch.save(model, buffer)
            buffer.seek(0)
            loaded = torch.load(buffer, weights_only=False)
            assert not same(patched, before)
            for copied in (twin, loaded):
                assert same(copied(ids).logits, before)
                with st.patch(copied):
                    assert same(copied(ids).logits, patched)
                assert same(copied(ids).logits, before)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_kernel_rotates_every_query_and_key_of_a_patched_model(name, one_torch_thread,
                                                                    monkeypatch):
    """On the CPU, in a prefill and in a decoding step: one kernel call per query and
    key of each layer (the layouts attention makes are the kernel's, not torch's
    fallback).  On the device path: device operations alone, no kernel call."""
    calls = count_kernel_rotations(monkeypatch)
    model = build(name)
    ids = torch.randint(3, VOCAB, (1, 10), generator=torch.Generator().manual_seed(9))
    per_layer = by_path(kernel=2, device=0)
    with torch.no_grad(), st.patch(model):
        calls.clear()  # (patch's own checks ran the kernel too)
        out = model(ids[:, :9], use_cache=True)
        assert len(calls) == per_layer * model.config.num_hidden_layers
        calls.clear()
        model(ids[:, 9:], past_key_values=out.past_key_values, use_cache=True)
        assert len(calls) == per_layer * model.config.num_hidden_layers
