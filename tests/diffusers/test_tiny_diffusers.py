"""The tiny-model builder of tests/diffusers/dtiny, on a few diffusers model classes.

Checks what the suites built on it rely on: the classes with positional code are found by
the code-walk rule, and a class without any is not, although its code names classes that
have some (the rule walks what an instance holds, not every class its code could build);
build() gives a float32 eval-mode model, seeded, whose info["inputs"] run to finite
outputs, with real-valued timesteps (0.5 and 999.0); the positional configuration (rope
axes, thetas, per-head widths, patch and sample sizes) is the default config's while the
heads, layers and widths shrink; the derived-positional check sees a timestep sinusoid
that shrank with a width; and build() leaves the session's warning filters, diffusers'
verbosity, torch's thread count and its random state as it found them.
Representatives: Flux (rope from ids, packed tokens), Wan (rope tables at __init__, video),
QwenImage (complex rope), HunyuanVideo (video rope), PixArt and DiT (sin-cos tables,
timestep embeddings), UNet2DConditionModel (timestep embedding only, legacy head naming);
and a few classes served by rules of other kinds (SERVED_BY: a pipeline-computed rotary
table, a documented 6-D input, per-frame timesteps, forward-time config repairs), with the
docstring-shape reader on its own.

(Named test_tiny_diffusers.py, not test_tiny_models.py: tests/families has a file of that
name, and two test modules of one basename in folders without __init__.py cannot be
collected in one session.)
"""
from __future__ import annotations

import warnings

import pytest
from conftest import require, require_torch

torch = require_torch()
diffusers = require("diffusers")
import dtiny  # noqa: E402  (needs diffusers)
from dtiny.codewalk import static_sites  # noqa: E402
from dtiny.defaults import default_kwargs, instantiate_default  # noqa: E402
from dtiny.keys import positional  # noqa: E402
from dtiny.probe import tensors  # noqa: E402
from dtiny.shrink import HEADS  # noqa: E402

REPRESENTATIVES = {  # class -> kinds its positional code must have
    "FluxTransformer2DModel": {"rope", "timestep"},
    "WanTransformer3DModel": {"rope", "timestep"},
    "QwenImageTransformer2DModel": {"rope", "timestep"},
    "HunyuanVideoTransformer3DModel": {"rope", "timestep"},
    "PixArtTransformer2DModel": {"sincos", "timestep"},
    "DiTTransformer2DModel": {"sincos", "timestep"},
    "UNet2DConditionModel": {"timestep"},
}
# model classes of the installed diffusers with no positional code (VAEs without a timestep
# embedding); AutoencoderKL's code names classes that have some (get_down_block can build
# any UNet block), so only the walk of what an instance holds leaves it out
NOT_POSITIONAL = ["AutoencoderKL", "AutoencoderKLWan", "AutoencoderTiny"]
FOUND_AT_LEAST = 90  # 101 found with diffusers 0.42.1


@pytest.fixture(scope="module")
def built():
    """build(name) once per class for the module's tests."""
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = dtiny.build(name)
        return cache[name]
    return get


def test_positional_classes():
    found = dtiny.positional_classes()
    assert len(found) >= FOUND_AT_LEAST
    assert found == sorted(set(found))
    assert set(REPRESENTATIVES) <= set(found)
    assert set(found) <= set(dtiny.model_classes())
    for name, kinds in REPRESENTATIVES.items():
        assert kinds <= set(dtiny.positional_kinds(name)["kinds"]), name
    assert "rope" not in dtiny.positional_kinds("UNet2DConditionModel")["kinds"]


@pytest.mark.parametrize("name", NOT_POSITIONAL)
def test_not_positional(name):
    assert name in dtiny.model_classes() and name not in dtiny.positional_classes()
    assert dtiny.positional_kinds(name)["kinds"] == []


def test_instance_walk_matters():
    # AutoencoderKL's code names classes with positional code (the static walk finds
    # timestep and sin-cos sites), so it is built and its instance walked: it holds none
    cls = dtiny.model_classes()["AutoencoderKL"]
    assert {kind for kind in static_sites(cls).values()} & {"timestep", "sincos"}
    result = dtiny.positional_kinds("AutoencoderKL")
    assert result["tree"] == "tiny" and result["kinds"] == []


@pytest.mark.parametrize("name", sorted(REPRESENTATIVES))
def test_builds_and_runs(built, name):
    model, info = built(name)
    cls = dtiny.model_classes()[name]
    assert type(model) is cls and not model.training
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    assert info["forward_ok"], info["error"]
    assert info["class"] == name and set(REPRESENTATIVES[name]) <= set(info["kinds"])
    inputs = info["inputs"]
    timestep = next(v for k, v in inputs.items() if k in ("timestep", "timesteps", "t"))
    assert timestep.is_floating_point() and set(timestep.tolist()) <= {0.5, 999.0}
    assert 0.5 in timestep.tolist()
    with torch.no_grad():
        outputs = tensors(model(**inputs))
    assert outputs and all(torch.isfinite(t).all() for t in outputs)
    assert info["finite"] is True
    assert sum(p.numel() for p in model.parameters()) == info["params"] < 10_000_000


@pytest.mark.parametrize("name", sorted(REPRESENTATIVES))
def test_positional_config_kept(built, name):
    _, info = built(name)
    cls = dtiny.model_classes()[name]
    default, tiny = default_kwargs(cls), info["config"]
    changed = [k for k in tiny if positional(k) and tiny[k] != default.get(k)]
    if name == "UNet2DConditionModel":
        # its attention_head_dim counts heads (num_attention_heads is None): no rope width
        assert changed == ["attention_head_dim"] and default["num_attention_heads"] is None
        assert all("head count" in note for note in info["changed"])
    else:
        assert changed == [] and info["changed"] == []
        assert tiny["num_attention_heads"] <= HEADS < default["num_attention_heads"]
    # shrunk: far fewer parameters than the default (counted on the meta device)
    big, _, _ = instantiate_default(cls, device="meta")
    assert info["params"] * 20 < sum(p.numel() for p in big.parameters())


def test_derived_positional_changes(built):
    # UNet2DConditionModel's timestep sinusoid is as wide as its first block: it shrank
    _, info = built("UNet2DConditionModel")
    assert "time_proj.num_channels: 320 -> 32" in info["derived"]
    # Flux's rope and timestep modules keep every setting
    _, info = built("FluxTransformer2DModel")
    assert info["derived"] == []


# classes whose forward needs a rule of a kind the representatives do not: a rotary table
# the pipeline computes (caller), the main input in its documented shape (a patchified 6-D
# input), per-frame timesteps, forward-time config repairs (a missing rope axis) with a text
# encoder's layers stacked by a config list
SERVED_BY = {
    "LuminaNextDiT2DModel": "image_rotary_emb",
    "JoyImageEditPlusTransformer3DModel": "shape_list",
    "AnyFlowFARTransformer3DModel": "r_timestep",
    "HiDreamImageTransformer2DModel": "encoder_hidden_states_llama3",
}


@pytest.mark.parametrize("name", sorted(SERVED_BY))
def test_served_by_rules(built, name):
    model, info = built(name)
    assert info["forward_ok"], info["error"]
    assert info["finite"] is True
    assert SERVED_BY[name] in info["inputs"]
    with torch.no_grad():
        assert all(torch.isfinite(t).all() for t in tensors(model(**info["inputs"])))
    if name == "AnyFlowFARTransformer3DModel":  # one timestep per frame, for both timesteps
        frames = info["inputs"]["hidden_states"].shape[1]
        assert info["inputs"]["timestep"].shape == info["inputs"]["r_timestep"].shape == (2, frames)
    if name == "LuminaNextDiT2DModel":  # the table the pipeline computes, made again on call
        table = info["remake"]["image_rotary_emb"]()
        assert torch.equal(table, info["inputs"]["image_rotary_emb"])
    if name == "HiDreamImageTransformer2DModel":  # the default's rope misses an axis: repaired
        assert any("axes_dims_rope" in note for note in info["changed"])


def test_docstring_shapes():
    from dtiny.docshapes import bind, doc_shapes, evaluate
    cls = dtiny.model_classes()["BriaFibo2Transformer2DModel"]
    dims = doc_shapes(cls)["encoder_hidden_states"]
    assert dims == ("batch_size", "1 + len(injection_layer_ids)", "text_len", "cap_feat_dim")
    config = {"injection_layer_ids": (0,), "cap_feat_dim": 32}
    env = {"batch": 2, "text": 4}
    assert [evaluate(d, env, config) for d in dims] == [2, 2, 4, 32]
    # names of an expression are solved from the main input's shape
    bound = bind(("B", "2C + 4", "T + 1", "H", "W"), (2, 36, 3, 4, 4), {})
    assert (bound["c"], bound["t"]) == (16, 2)
    assert evaluate("C", {}, {}, bound) == 16 and evaluate("D", {}, {}, bound) is None


def test_seed():
    model, info = dtiny.build("WanTransformer3DModel", compare=False)
    again, info_again = dtiny.build("WanTransformer3DModel", compare=False)
    other, _ = dtiny.build("WanTransformer3DModel", seed=1, compare=False)
    weights = [dict(m.named_parameters()) for m in (model, again, other)]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert not all(torch.equal(weights[0][k], weights[2][k]) for k in weights[0])
    assert all(torch.equal(v, info_again["inputs"][k]) for k, v in info["inputs"].items()
               if isinstance(v, torch.Tensor))


def test_session_state_kept():
    filters = list(warnings.filters)
    verbosity = diffusers.utils.logging.get_verbosity()
    threads = torch.get_num_threads()
    rng = torch.get_rng_state()
    dtiny.build("DiTTransformer2DModel", compare=False)
    assert warnings.filters == filters
    assert diffusers.utils.logging.get_verbosity() == verbosity
    assert torch.get_num_threads() == threads
    assert torch.equal(torch.get_rng_state(), rng)
