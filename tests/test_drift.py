"""sinpe.torch.drift against the test's own computation of the same quantities.

Tiny random-init models of Llama (and Llama with YaRN, whose attention factor is not 1),
Qwen2 and Gemma 3 (two layer types, two frequency sets), float32, and a bfloat16
Llama; query and key weights drawn large, so that the positions move the logits.
For each:

(a) the logits of the same ids at ``position_ids = s + arange(T)`` and ``arange(T)``,
    computed here with the model, as it is and inside ``sinpe.torch.patch``: drift's
    largest change and top-1 share are those numbers exactly (the same forward passes
    on the same inputs give the same bits); its mean KL is the test's own NumPy
    evaluation within the rounding of two float64 sums of the same terms.
(b) the caches: the rotary module called here at ``s .. s + T - 1`` (HF's, then
    patched), against a float64 reference made here from the module's own float32
    frequencies and attention factor (``cos(p * w)``, ``cat(a, a)``): drift reports
    that largest difference, and sinpe's caches are within half an ulp of the output
    dtype of the exact values, element by element.  Half an ulp: rounding a real value
    ``v`` once to a binary format with ``m`` significant bits errs by at most
    ``2**(floor(log2|v|) - m)``, which ``np.spacing`` of ``|v|`` in the format, halved,
    is (float32, m = 24: ``2**-25`` for values in [0.5, 1), ``2**-24`` for [1, 2),
    YaRN's attention factor above 1; bfloat16, m = 8: ``2**-9`` in [0.5, 1)).  Beyond
    that, sinpe's double angle may differ from NumPy's ``p * w`` by its own rounding,
    up to ``|p w| * 2**-52`` (angle addition across a block restart), and ``cos``
    moves by at most as much: ``(|p w| + 4) * 2**-53`` covers it with the reference's
    own trigonometric rounding.  HF's caches are not: at ``2**20`` they are ~1e-2 off.
    On the device path (``SINPE_TORCH_PATH=device``) sinpe's caches are within half an
    ulp plus ``2**-30`` (times the attention factor's power of two) of the exact values:
    ``conftest.device_excess``.
(c) afterwards the model's parameters and buffers (non-persistent ones too) have their
    bits, its outputs too, its training flag is as it was, the modeling module's apply
    function is HF's again and the rotary module has no sinpe forward.
(d) bad arguments raise TypeError/ValueError before any forward pass and any patch;
    positions a model cannot take (past 2**24, past a dynamic or longrope switch) name
    the offset; the last position 2**24 itself is measured.
"""
from __future__ import annotations

import contextlib

import numpy as np
import pytest
from conftest import bits, device_excess, require, require_torch

torch = require_torch()
transformers = require("transformers")
import sinpe.torch as st  # noqa: E402
from sinpe.torch.hf import _drift  # noqa: E402

VOCAB, T = 96, 24
POSITIONS = [2**10, 2**20]
U53 = 2.0**-53
TOKENS = dict(vocab_size=VOCAB, pad_token_id=0, bos_token_id=1, eos_token_id=2)
SHAPE = dict(TOKENS, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
             num_attention_heads=2, num_key_value_heads=2, head_dim=32)
LLAMA = dict(SHAPE, rope_parameters={"rope_type": "default", "rope_theta": 500000.0})
CASES = {
    "llama": lambda: transformers.LlamaConfig(**LLAMA),
    "llama-yarn": lambda: transformers.LlamaConfig(
        **SHAPE, max_position_embeddings=256, rope_parameters={
            "rope_type": "yarn", "rope_theta": 500000.0, "factor": 4.0,
            "original_max_position_embeddings": 64}),
    "qwen2": lambda: transformers.Qwen2Config(**SHAPE),
    "gemma3": lambda: transformers.Gemma3TextConfig(
        **SHAPE, sliding_window=8, layer_types=["sliding_attention", "full_attention"]),
    "llama-bfloat16": lambda: transformers.LlamaConfig(**LLAMA),
}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def build(name):
    torch.manual_seed(0)
    config = CASES[name]()
    dtype = torch.bfloat16 if name.endswith("bfloat16") else torch.float32
    model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    with torch.no_grad():  # sharp attention: the positions move the logits
        for module in model.modules():
            for projection in ("q_proj", "k_proj"):
                if hasattr(module, projection):
                    getattr(module, projection).weight.mul_(8)
    return model.eval()


def ids_for(seed=3):
    return torch.randint(3, VOCAB, (1, T), generator=torch.Generator().manual_seed(seed))


# -- the test's own computation -----------------------------------------------------------


def logits_at(model, ids, s):
    positions = s + torch.arange(ids.shape[1])[None]
    return model(input_ids=ids, position_ids=positions, use_cache=False).logits.double()


def rotary_calls(model):
    """(module, layer type) pairs of the model's text rotary module."""
    module = model.model.rotary_emb
    return [(module, t) for t in getattr(module, "layer_types", [None])]


def attention_scaling(module, layer_type):
    return getattr(module, f"{layer_type}_attention_scaling" if layer_type
                   else "attention_scaling")


def exact_caches(module, layer_type, positions):
    prefix = f"{layer_type}_" if layer_type else ""
    w = getattr(module, f"{prefix}original_inv_freq").double().numpy()
    scaling = attention_scaling(module, layer_type)
    angles = positions.double().numpy()[..., None] * w
    emb = np.concatenate([angles, angles], -1)
    return np.cos(emb) * scaling, np.sin(emb) * scaling, np.abs(emb)


def caches_at(module, layer_type, s, dtype):
    positions = s + torch.arange(T)[None]
    x = torch.zeros(1, dtype=dtype)
    got = module(x, positions) if layer_type is None else module(x, positions, layer_type)
    return got, exact_caches(module, layer_type, positions)


def kl_numpy(reference, shifted):
    """The mean KL, and the scale of its rounding: per token, V + |lse_p| + |lse_q| +
    sum_v p_v (|x_v| + |y_v|) for logits x, y (their log-sum-exps lse)."""
    x, y = reference.numpy(), shifted.numpy()
    lse_x = np.logaddexp.reduce(x, axis=-1, keepdims=True)
    lse_y = np.logaddexp.reduce(y, axis=-1, keepdims=True)
    log_p, log_q = x - lse_x, y - lse_y
    p = np.exp(log_p)
    scale = (x.shape[-1] + np.abs(lse_x) + np.abs(lse_y))[..., 0] + (p * (np.abs(x) + np.abs(y))).sum(-1)
    return (p * (log_p - log_q)).sum(-1).mean(), scale.mean()


def measure(model, ids, positions, dtype):
    """What drift should report, and each cache's error beyond its half-ulp bound."""
    out = {key: [] for key in _drift.KEYS}
    out["positions"], out["kl_scale"], excess = list(positions), [], []
    for mode in ("sinpe", "hf"):
        with (st.patch(model) if mode == "sinpe" else contextlib.nullcontext()), torch.no_grad():
            reference = logits_at(model, ids, 0)
            for s in positions:
                shifted = logits_at(model, ids, s)
                kl, scale = kl_numpy(reference, shifted)
                out[f"logits_{mode}"].append(float((shifted - reference).abs().max()))
                out[f"kl_{mode}"].append(float(kl))
                out["kl_scale"].append(float(scale))
                same = reference.argmax(-1) == shifted.argmax(-1)
                out[f"top1_{mode}"].append(float(same.double().mean()))
                error = 0.0
                for module, layer_type in rotary_calls(model):
                    got, (cos, sin, angle) = caches_at(module, layer_type, s, dtype)
                    for value, exact in zip(got, (cos, sin)):
                        diff = np.abs(value.double().numpy() - exact)
                        error = max(error, float(diff.max()))
                        if mode == "sinpe":
                            half_ulp = np.spacing(np.abs(exact).astype(
                                np.float32 if dtype == torch.float32 else np.float64))
                            if dtype == torch.bfloat16:  # 8 significant bits, not 53
                                half_ulp = np.ldexp(1.0, np.frexp(np.abs(exact))[1] - 8)
                            bound = half_ulp / 2 + (angle + 4) * U53 + device_excess(
                                attention_scaling(module, layer_type))
                            excess.append(float((diff - bound).max()))
                out[f"cache_{mode}"].append(error)
    return out, excess


@pytest.fixture(scope="module", params=sorted(CASES))
def case(request):
    name = request.param
    model = build(name)
    dtype = next(model.parameters()).dtype
    ids = ids_for()
    got = st.drift(model, ids, positions=POSITIONS)
    want, excess = measure(model, ids, POSITIONS, dtype)
    return name, model, got, want, excess


def test_logits_and_top1_are_the_tests_own_forward_passes(case):
    name, _, got, want, _ = case
    for key in ("positions", "logits_hf", "logits_sinpe", "top1_hf", "top1_sinpe"):
        assert got[key] == want[key], (name, key)
    assert set(got) == set(_drift.KEYS)


def test_kl_is_the_tests_own_evaluation(case):
    name, _, got, want, _ = case
    # two float64 evaluations of KL = sum_v p_v (x_v - y_v) - lse_x + lse_y per token:
    # a log-sum-exp of V terms is within (V + |lse|) ulps (the sum of V exponentials,
    # relative V u, then the log), each log-softmax value within (|x_v| + |lse|) u, and
    # p_v sums to 1: the two differ by at most a few times the scale kl_numpy gives
    for i, (a, b) in enumerate(zip(got["kl_sinpe"] + got["kl_hf"],
                                   want["kl_sinpe"] + want["kl_hf"])):
        tolerance = 4 * U53 * want["kl_scale"][i]
        assert abs(a - b) <= tolerance, (name, i, a, b, tolerance)


def test_caches_are_the_tests_own_comparison_and_sinpe_is_within_half_an_ulp(case):
    name, _, got, want, excess = case
    for key in ("cache_hf", "cache_sinpe"):
        np.testing.assert_allclose(got[key], want[key], rtol=0, atol=4 * U53, err_msg=name)
    assert max(excess) <= 0, (name, max(excess))
    if not name.endswith("bfloat16"):  # HF's float32 angles: far beyond it at 2**20
        assert got["cache_hf"][-1] > 1000 * got["cache_sinpe"][-1], name


def test_the_drift_shows_in_hf_and_not_in_sinpe(case):
    name, _, got, _, _ = case
    if name.endswith("bfloat16"):
        return  # bfloat16's own rounding of the caches moves both alike
    assert got["logits_sinpe"][-1] < got["logits_hf"][-1] / 10, name


def snapshot(model):
    state = {f"p:{k}": bits(torch, v.detach()).clone() for k, v in model.named_parameters()}
    state.update({f"b:{k}": bits(torch, v).clone() for k, v in model.named_buffers()})
    return state


def test_the_model_is_unchanged_afterwards():
    from transformers.models.llama import modeling_llama

    model = build("llama")
    apply = modeling_llama.apply_rotary_pos_emb
    ids = ids_for()
    model.train()
    before, logits = snapshot(model), model(ids).logits
    st.drift(model, ids, positions=[2**17])
    after = snapshot(model)
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert model.training
    assert torch.equal(bits(torch, model(ids).logits), bits(torch, logits))
    assert modeling_llama.apply_rotary_pos_emb is apply
    assert "forward" not in vars(model.model.rotary_emb)
    model.eval()
    st.drift(model, ids, positions=[2**10])
    assert not model.training


def test_random_ids_come_from_the_seed_and_leave_torchs_generator_alone():
    model = build("llama")
    state = torch.random.get_rng_state()
    a = st.drift(model, positions=[2**17], tokens=8, seed=5)
    assert torch.equal(torch.random.get_rng_state(), state)
    ids = torch.randint(0, VOCAB, (1, 8), generator=torch.Generator().manual_seed(5))
    assert st.drift(model, ids, positions=[2**17]) == a
    assert st.drift(model, positions=[2**17], tokens=8, seed=6) != a


def test_the_last_position_is_max_position():
    model = build("llama")
    got = st.drift(model, ids_for()[:, :8], positions=[2**24 - 7])
    assert got["cache_sinpe"][0] <= 2.0**-25 + (2**24 + 4) * U53
    with pytest.raises(ValueError, match=r"positions\[0\] = 16777210.*2\*\*24"):
        st.drift(model, ids_for()[:, :8], positions=[2**24 - 6])


# -- bad arguments: before any work -----------------------------------------------------------


@pytest.fixture(scope="module")
def watched():
    """A model that counts its forward passes."""
    model = build("llama")
    calls = []
    model.register_forward_pre_hook(lambda *args: calls.append(1))
    return model, calls


BAD = {
    "model a string": (TypeError, r"model must be", dict(model="llama")),
    "model without config": (TypeError, r"model must be", dict(model=torch.nn.Linear(2, 2))),
    "ids a list": (TypeError, r"input_ids must be a torch.Tensor", dict(input_ids=[1, 2])),
    "ids float": (TypeError, r"input_ids must hold integer", dict(input_ids=torch.ones(1, 4))),
    "ids bool": (TypeError, r"input_ids must hold integer",
                 dict(input_ids=torch.ones(1, 4, dtype=torch.bool))),
    "ids 3-D": (ValueError, r"shape \(T,\) or \(B, T\)",
                dict(input_ids=torch.ones(1, 1, 4, dtype=torch.long))),
    "ids empty": (ValueError, r"T >= 1", dict(input_ids=torch.ones(1, 0, dtype=torch.long))),
    "ids past the vocabulary": (ValueError, r"0\.\.95",
                                dict(input_ids=torch.tensor([[1, VOCAB]]))),
    "ids negative": (ValueError, r"0\.\.95", dict(input_ids=torch.tensor([-1, 2]))),
    "positions an int": (TypeError, r"positions must be a sequence", dict(positions=1024)),
    "positions a string": (TypeError, r"positions must be a sequence", dict(positions="1024")),
    "positions empty": (ValueError, r"at least one", dict(positions=[])),
    "position a float": (TypeError, r"positions\[1\] must be an int",
                         dict(positions=[1024, 2.0**17])),
    "position a bool": (TypeError, r"positions\[0\] must be an int", dict(positions=[True])),
    "position negative": (ValueError, r"positions\[0\] = -1", dict(positions=[-1])),
    "position past 2**24": (ValueError, r"positions\[1\] = 16777216.*MAX_POSITION",
                            dict(positions=[1024, 2**24])),
    "tokens 0": (ValueError, r"tokens must be at least 1", dict(tokens=0)),
    "tokens a float": (TypeError, r"tokens must be an int", dict(tokens=8.0)),
    "tokens a bool": (TypeError, r"tokens must be an int", dict(tokens=True)),
    "seed a float": (TypeError, r"seed must be an int", dict(seed=0.5)),
    "progress not callable": (TypeError, r"progress must be a callable", dict(progress=3)),
}


@pytest.mark.parametrize("bad", sorted(BAD))
def test_bad_arguments_raise_before_any_work(bad, watched):
    model, calls = watched
    error, message, kwargs = BAD[bad]
    kwargs = dict(kwargs)
    target = kwargs.pop("model", model)
    before = snapshot(model)
    with pytest.raises(error, match=message):
        st.drift(target, **kwargs)
    assert calls == []
    assert "forward" not in vars(model.model.rotary_emb)  # never patched
    assert all(torch.equal(v, snapshot(model)[k]) for k, v in before.items())


@pytest.mark.parametrize("rope", [
    {"rope_type": "dynamic", "factor": 2.0},
    {"rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [2.0] * 16,
     "original_max_position_embeddings": 64},
], ids=["dynamic", "longrope"])
def test_positions_past_a_frequency_switch_are_refused(rope):
    config = transformers.LlamaConfig(**SHAPE, max_position_embeddings=64 if
                                      rope["rope_type"] == "dynamic" else 256,
                                      rope_parameters={"rope_theta": 10000.0, **rope})
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = ids_for()[:, :8]
    with pytest.raises(ValueError, match=rf"positions\[1\] = 57: the model's {rope['rope_type']}"
                                         r" rope changes its frequencies past 64"):
        st.drift(model, ids, positions=[56, 57])
    got = st.drift(model, ids, positions=[56])  # 56 + 8 = 64 positions: short of the switch
    # half an ulp of the largest float32 value below the attention factor (longrope's > 1)
    scaling = model.model.rotary_emb.attention_scaling
    largest = np.nextafter(np.float32(scaling), np.float32(0))
    assert got["cache_sinpe"][0] <= np.spacing(largest) / 2 + 70 * U53 + device_excess(scaling)


def test_a_model_without_a_rotary_module_is_refused():
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=32, n_layer=1, n_head=2, n_positions=64))
    with pytest.raises(ValueError, match=r"GPT2LMHeadModel has no text rotary module"):
        st.drift(model, positions=[8], tokens=4)
