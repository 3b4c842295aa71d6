"""sinpe.torch.patch on diffusers models and pipelines: what holds beyond every model's run.

tests/diffusers runs every model class of diffusers through patch (a stage of its own);
this module holds, on a few tiny models, what that stage does not: a pipeline that
computes its model's RoPE itself (CogVideoX), patched under one handle, its swapped
function acting only inside the pipeline's own calls; the same bits on the kernel path
and the device path (whichever device), and whichever branch diffusers' code takes on a
Mac; a patched model cast to bfloat16 keeping exact float32 tables; the timestep
embedding alone; refusals that change nothing; a patched model under
``torch.inference_mode``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import pytest
from conftest import bits, require, require_torch

torch = require_torch()
diffusers = require("diffusers")
sys.path.insert(0, str(Path(__file__).resolve().parent / "diffusers"))
import dtiny  # noqa: E402
import sinpe.torch as st  # noqa: E402
from sinpe.torch import _tensors  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(torch, a),
                                                                      bits(torch, b))


@pytest.fixture(scope="module")
def cogvideox():
    model, _ = dtiny.build("CogVideoXTransformer3DModel", compare=False)
    from diffusers import CogVideoXDDIMScheduler, CogVideoXPipeline

    return CogVideoXPipeline(tokenizer=None, text_encoder=None, vae=None, transformer=model,
                             scheduler=CogVideoXDDIMScheduler())


def test_a_pipelines_own_rope_is_exact_under_one_handle(cogvideox):
    from diffusers.pipelines.cogvideo import pipeline_cogvideox

    function = pipeline_cogvideox.get_3d_rotary_pos_embed
    args = (96, 128, 13, torch.device("cpu"))
    own = cogvideox._prepare_rotary_positional_embeddings(*args)
    with st.patch(cogvideox) as handle:
        assert "diffusers.pipelines.cogvideo.pipeline_cogvideox.get_3d_rotary_pos_embed" in (
            handle.functions)
        got = cogvideox._prepare_rotary_positional_embeddings(*args)
        again = cogvideox._prepare_rotary_positional_embeddings(*args)
        # outside the pipeline's own calls the function is diffusers' own
        config = cogvideox.transformer.config
        outside = pipeline_cogvideox.get_3d_rotary_pos_embed(
            embed_dim=config.attention_head_dim, crops_coords=((0, 0), (6, 8)),
            grid_size=(6, 8), temporal_size=13)
    exact = cogvideox_rope(cogvideox.transformer.config, *args[:3])
    for g, o, e in zip(got, own, exact):
        assert g.dtype == o.dtype == torch.float32 and g.shape == o.shape
        error = float((g.double() - e).abs().max())
        assert error <= 2.0**-25  # half an ulp of values up to 1 (the float32 rounding)
        assert float((o.double() - e).abs().max()) > 4 * error  # diffusers' float32 angles
    assert all(same(a, b) for a, b in zip(again, got))
    assert all(same(a, b) for a, b in zip(outside, function(
        embed_dim=config.attention_head_dim, crops_coords=((0, 0), (6, 8)), grid_size=(6, 8),
        temporal_size=13)))
    assert pipeline_cogvideox.get_3d_rotary_pos_embed is function  # undone
    assert "_prepare_rotary_positional_embeddings" not in vars(cogvideox)
    assert all(same(a, b) for a, b in zip(cogvideox._prepare_rotary_positional_embeddings(*args),
                                          own))


def cogvideox_rope(config, height, width, frames):
    """CogVideoX 1.0's grid RoPE (diffusers' get_3d_rotary_pos_embed, grid_type
    "linspace"): its float32 grid coordinates and float32 frequencies as diffusers makes
    them, each angle their product in double, cos and sin in double."""
    grid = (height // (8 * config.patch_size), width // (8 * config.patch_size))
    base = (config.sample_height // config.patch_size, config.sample_width // config.patch_size)
    from diffusers.pipelines.cogvideo.pipeline_cogvideox import get_resize_crop_region_for_grid

    (top, left), (bottom, right) = get_resize_crop_region_for_grid(grid, base[1], base[0])
    axes = [torch.linspace(0, frames * (frames - 1) / frames, frames, dtype=torch.float32),
            torch.linspace(top, bottom * (grid[0] - 1) / grid[0], grid[0], dtype=torch.float32),
            torch.linspace(left, right * (grid[1] - 1) / grid[1], grid[1], dtype=torch.float32)]
    dim = config.attention_head_dim
    widths = (dim // 4, dim // 8 * 3, dim // 8 * 3)
    tables = []
    for positions, width in zip(axes, widths):
        freq = 1.0 / (10000 ** (torch.arange(0, width, 2, dtype=torch.float32) / width))
        angle = torch.outer(positions.double(), freq.double())
        tables.append((angle.cos().repeat_interleave(2, 1), angle.sin().repeat_interleave(2, 1)))
    out = []
    for part in (0, 1):
        t, h, w = (tables[a][part] for a in range(3))
        t = t[:, None, None].expand(-1, grid[0], grid[1], -1)
        h = h[None, :, None].expand(frames, -1, grid[1], -1)
        w = w[None, None].expand(frames, grid[0], -1, -1)
        out.append(torch.cat([t, h, w], -1).reshape(frames * grid[0] * grid[1], -1))
    return out


def positional_outputs(model, info):
    """The positional modules' outputs of a forward (by name), recorded by hooks."""
    seen = {}
    from sinpe.torch.diffusers._adapter import positional_modules

    hooks = [module.register_forward_hook(
        lambda m, a, out, name=name: seen.setdefault(name, out))
        for name, module in positional_modules(model)]
    with torch.no_grad():
        model(**info["inputs"])
    for hook in hooks:
        hook.remove()
    return seen


@pytest.mark.parametrize("name", ["FluxTransformer2DModel", "WanTransformer3DModel",
                                  "UNet2DConditionModel"])
def test_the_same_bits_on_the_kernel_path_and_the_device_path(name, monkeypatch):
    model, info = dtiny.build(name, compare=False)
    with st.patch(model):
        on_cpu = positional_outputs(model, info)
        monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", True)
        on_device = positional_outputs(model, info)
    assert on_cpu and on_cpu.keys() == on_device.keys()
    for key in on_cpu:
        leaves = torch.utils._pytree.tree_leaves
        assert all(same(a, b) for a, b in zip(leaves(on_cpu[key]), leaves(on_device[key]))), key


@pytest.mark.parametrize("device_path", [False, True])
@pytest.mark.parametrize("name", ["FluxTransformer2DModel", "StableAudio3DiTModel",
                                  "Kandinsky6Transformer3DModel"])
def test_a_patched_model_runs_under_inference_mode(name, device_path, monkeypatch):
    """Pipelines run under ``torch.inference_mode``: its tensors have no version counter
    (the device path kept positions by identity and version, and crashed).  The first
    call (checked) and the later ones (kept, columns, inline, tables) give the bits of
    the same calls under ``no_grad``."""
    model, info = dtiny.build(name, compare=False)
    monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", device_path)
    leaves = torch.utils._pytree.tree_leaves
    with st.patch(model):
        with torch.inference_mode():
            first = leaves(model(**info["inputs"]))
            later = leaves(model(**info["inputs"]))
    with st.patch(model):
        with torch.no_grad():
            want = leaves(model(**info["inputs"]))
            again = leaves(model(**info["inputs"]))
    tensors = [(a, b) for a, b in zip(first + later, want + again) if isinstance(a, torch.Tensor)]
    assert tensors and all(same(a, b) for a, b in tensors)


def test_the_mps_branch_gives_the_same_bits(monkeypatch):
    """Wan builds its tables in float32 wherever MPS exists (even for CPU tensors):
    diffusers' own tables differ there, sinpe's are the same bits."""
    model, info = dtiny.build("WanTransformer3DModel", compare=False)
    with st.patch(model):
        want = positional_outputs(model, info)["rope"]
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    mac, _ = dtiny.build("WanTransformer3DModel", compare=False)
    theirs = positional_outputs(mac, info)["rope"]
    with st.patch(mac):
        got = positional_outputs(mac, info)["rope"]
    assert all(same(a, b) for a, b in zip(got, want))
    assert not all(same(a, b) for a, b in zip(theirs, want))  # the float32 branch's


def test_a_patched_model_cast_to_bfloat16_keeps_exact_float32_tables():
    model, info = dtiny.build("WanTransformer3DModel", compare=False)
    with st.patch(model):
        before = positional_outputs(model, info)["rope"]
        model.to(torch.bfloat16)
        feed = {k: (v.bfloat16() if isinstance(v, torch.Tensor) and v.is_floating_point()
                    else v) for k, v in info["inputs"].items()}
        after = positional_outputs(model, {"inputs": feed})["rope"]
    assert all(t.dtype == torch.float32 for t in after)
    assert all(same(a, b) for a, b in zip(after, before))
    own = positional_outputs(model, {"inputs": feed})["rope"]  # undone: diffusers' bf16 tables
    assert all(t.dtype == torch.bfloat16 for t in own)


def test_a_timestep_embedding_alone_is_exact():
    from diffusers.models.embeddings import Timesteps

    module = Timesteps(320, flip_sin_to_cos=True, downscale_freq_shift=0)
    t = torch.tensor([0.5, 17.25, 999.0, 640.125])
    own = module(t)
    with st.patch(module) as handle:
        assert handle.rotary == [""] and handle.caches == {"": "exact, kept"}
        got = module(t)
    half = 160
    freq = torch.exp(-torch.log(torch.tensor(10000.0)) * torch.arange(half, dtype=torch.float32)
                     / half).double()  # diffusers' float32 frequencies
    angle = t.double()[:, None] * freq
    exact = torch.cat([angle.cos(), angle.sin()], -1)  # flip_sin_to_cos: cos first
    assert float((got.double() - exact).abs().max()) <= 2.0**-25 + 2.0**-30
    assert float((own.double() - exact).abs().max()) > 1e-5  # float32 angles near t = 1000


def test_refusals_change_nothing():
    from diffusers import AutoencoderKL

    vae = AutoencoderKL(block_out_channels=(8,), norm_num_groups=4, latent_channels=2)
    with pytest.raises(ValueError, match="has no positional code that sinpe stands in for"):
        st.patch(vae)
    model, _ = dtiny.build("DiTTransformer2DModel", compare=False)
    with pytest.raises(ValueError, match='frequencies="model"'):
        st.patch(model, frequencies="exact")
    assert not any("forward" in vars(m) for m in model.modules())
    with st.patch(model):
        with pytest.raises(ValueError, match="already patched"):
            st.patch(model)
    assert not any("forward" in vars(m) for m in model.modules())


def test_bfloat16_timesteps_are_read_at_every_step():
    """Whether a module reads its inputs' values is seen on values that all differ:
    ``t + 1`` leaves a bfloat16 1000 as it is, and a module that reads the timestep
    must not be kept by the timestep's shape."""
    from diffusers.models.embeddings import Timesteps

    module = Timesteps(256, flip_sin_to_cos=True, downscale_freq_shift=0)
    with st.patch(module):
        first = module(torch.tensor([1000.0], dtype=torch.bfloat16))
        later = module(torch.tensor([500.0], dtype=torch.bfloat16))
        again = module(torch.tensor([500.0], dtype=torch.bfloat16))
    assert not torch.equal(first, later) and torch.equal(later, again)


def test_an_expanded_timestep_is_taken_as_it_is():
    """A pipeline passes ``t.expand(batch)``: a stride of 0."""
    from diffusers.models.embeddings import Timesteps

    module = Timesteps(64, flip_sin_to_cos=False, downscale_freq_shift=1)
    t = torch.tensor(500.0)
    with st.patch(module):
        got = [module(t.expand(3)), module(t.expand(3)), module((t + 1).expand(3))]
    assert torch.equal(got[0], got[1]) and got[0].shape == (3, 64)
    assert not torch.equal(got[0], got[2])


@pytest.mark.parametrize("device_path", [False, True])
@pytest.mark.parametrize("empty_first", [True, False])
def test_an_empty_timestep_changes_nothing_after_it(empty_first, device_path, monkeypatch):
    """A call with no timesteps gives an empty embedding and shows nothing of how the
    module reads values: it must not pass the first call's check for the calls after it
    (kept by shape alone, it once served the zero timestep's table to every later call)."""
    from diffusers.models.embeddings import Timesteps

    monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", device_path)
    module, own = (Timesteps(32, flip_sin_to_cos=True, downscale_freq_shift=0)
                   for _ in range(2))
    empty, values = torch.zeros(0), torch.tensor([3.0, 500.0, 999.0])
    with st.patch(module):
        calls = [empty, values] if empty_first else [values, empty]
        for t in calls + [values + 1]:
            got, want = module(t), own(t)
            assert got.shape == want.shape and got.dtype == want.dtype
            assert not t.numel() or float((got - want).abs().max()) < 1e-3  # (float32 drift)


@pytest.mark.parametrize("device_path", [False, True])
def test_position_ids_beside_a_tensor_read_for_its_dtype_are_learned(device_path, monkeypatch):
    """Anima's ``rotary_emb(x, position_ids)``: ``x`` gives the dtype alone, the ids are
    ``(1, N)`` made anew by every forward. Learned as columns (each id a row), it serves
    any N exactly, by device operations on the device path: no call kept by identity."""
    monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", device_path)
    model, info = dtiny.build("AnimaTextConditioner", compare=False)
    rotary = next(m for n, m in model.named_modules() if n.endswith("rotary_emb"))
    freq = rotary.inv_freq.double()
    x = torch.zeros(2, 4, 128)
    with st.patch(model):
        model(**info["inputs"])
        assert vars(rotary)["forward"].call.columns is not None
        for n in (4, 16, 300):
            ids = torch.arange(n)[None] + 7
            cos, sin = rotary(x, ids)
            angle = torch.cat([ids.double()[..., None] * freq] * 2, -1)
            assert cos.shape == (1, n, 2 * len(freq)) and cos.dtype == torch.float32
            for got, exact in ((cos, angle.cos()), (sin, angle.sin())):
                assert float((got.double() - exact).abs().max()) <= 2.0**-25 + 2.0**-30


def test_tables_made_on_the_mac_branch_are_made_again_on_the_float64_one(monkeypatch):
    """Wan built where MPS exists has float32 tables, off by their float32 angles at
    long positions: the first-call check allows for its constructor's angles, and the
    stand-in gives the float64 branch's bits."""
    import warnings

    from diffusers.models.transformers.transformer_wan import WanRotaryPosEmbed

    latent = torch.zeros(1, 16, 3, 32, 32)
    plain = WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    with st.patch(plain):
        want = plain(latent)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: True)
    mac = WanRotaryPosEmbed(128, (1, 2, 2), 1024)
    monkeypatch.undo()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with st.patch(mac) as handle:
            got = mac(latent)
    assert handle.kept == {}
    assert all(same(a, b) for a, b in zip(got, want))


@pytest.mark.parametrize("name", ["FluxTransformer2DModel", "WanTransformer3DModel"])
@pytest.mark.slow
def test_a_patched_model_compiles_fullgraph_after_its_first_call(name):
    """After one eager call of a grid, the stand-ins trace: kept tables as constants of
    the graph, learned columns as device operations; the compiled model gives the eager
    bits."""
    model, info = dtiny.build(name, compare=False)
    inputs = info["inputs"]
    later = {k: (v * 0.5 + 3.25 if "timestep" in k else v) for k, v in inputs.items()}
    with torch.no_grad(), st.patch(model):
        eager = [model(**feed)[0] for feed in (inputs, later)]
        torch._dynamo.reset()
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        got = [compiled(**feed)[0] for feed in (inputs, later)]
    assert all(torch.equal(g, e) for g, e in zip(got, eager))


def test_angles_moved_after_their_arithmetic_are_formed_again():
    """LongCat-AudioDiT's rotary module concatenates ``outer(steps, inv_freq)`` with itself
    before the cosine: the angles are formed again through the move (the product of
    the model's float32 frequencies and the positions, in double), not taken as the
    float32 products the concatenation holds."""
    from diffusers.models.transformers.transformer_longcat_audio_dit import (
        AudioDiTRotaryEmbedding,
    )
    from sinpe.torch.patching._exact import ExactCall

    rope = AudioDiTRotaryEmbedding(64, max_position_embeddings=3000)
    twin = AudioDiTRotaryEmbedding(64, max_position_embeddings=3000)  # (its own cache)
    hidden = torch.zeros(1, 2500, 64)
    call = ExactCall(rope.forward, twin.forward)
    got = call(hidden)
    assert call.checked and not call.failed and not call.by_value
    inv_freq = 1.0 / (rope.base ** (torch.arange(0, 64, 2).float() / 64))  # (float32)
    angle = torch.outer(torch.arange(2500, dtype=torch.float64), inv_freq.double())
    angle = torch.cat((angle, angle), -1)
    half_ulp = 2.0**-25 + 2.0**-30
    with torch.no_grad():
        own = rope(hidden)
    for mine, theirs, exact in zip(got, own, (angle.cos(), angle.sin())):
        assert float((mine.double() - exact).abs().max()) <= half_ulp
        assert float((theirs.double() - exact).abs().max()) > 8 * half_ulp


def test_an_angle_written_in_place_after_its_arithmetic_is_taken_as_written():
    """Ideogram 4 copies one axis's table of angles and writes the other axes' columns
    into the copy in place: the copy's values are what was written, not the arithmetic
    that made what was copied."""
    from sinpe.torch.patching._taint import ExactAngles

    freq = torch.tensor([1.0, 0.5, 0.25])

    def code(n):
        pos = torch.arange(n, dtype=torch.float32)
        first, second = pos[:, None] * freq, (pos[:, None] + 1000.0) * freq
        mixed = first.clone()
        mixed[:, 1] = second[:, 1]
        return torch.cat((mixed, mixed), -1).cos()

    with ExactAngles(layouts=True):
        got = code(5)
    assert float((got - code(5).double()).abs().max()) <= 2.0**-20


def exact_where_its_own_drifts(got, own, exact):
    """Each output within half an ulp (plus 2**-30) of the code's run in double
    (``exact``), where the code's own float32 outputs are more than eight times that off."""
    half_ulp = 2.0**-25 + 2.0**-30
    for mine, theirs, want in zip(got, own, exact, strict=True):
        assert want.dtype == torch.float64
        assert float((mine.double() - want).abs().max()) <= half_ulp
        assert float((theirs.double() - want).abs().max()) > 8 * half_ulp


def test_angles_looked_up_in_a_table_made_in_the_forward_are_formed_again():
    """CogView4's rotary module makes ``outer(arange(256), inv_freq)`` tables in its
    forward, looks rows up by index, expands and concatenates them before the cosine:
    the rows are those of the table formed again, in double."""
    from torch.overrides import TorchFunctionMode

    from diffusers.models.transformers.transformer_cogview4 import CogView4RotaryPosEmbed
    from sinpe.torch.patching._exact import ExactCall

    class OuterInDouble(TorchFunctionMode):  # the module's own code, its tables in double
        def __torch_function__(self, func, types, args=(), kwargs=None):
            if func is torch.outer:
                args = tuple(a.double() for a in args)
            return func(*args, **(kwargs or {}))

    rope = CogView4RotaryPosEmbed(dim=64, patch_size=2, rope_axes_dim=(256, 256))
    hidden = torch.zeros(1, 4, 96, 80)
    call = ExactCall(rope.forward, rope.forward)
    got = call(hidden)
    assert call.checked and not call.failed and not call.by_value
    with torch.no_grad(), OuterInDouble():
        exact = rope(hidden)
    with torch.no_grad():
        own = rope(hidden)
    exact_where_its_own_drifts(got, own, exact)


def test_positions_the_code_makes_from_ranges_are_formed_in_double():
    """LTX-Video's rotary module makes its grid from ``arange``s, scales each axis in
    place (``grid[:, 0:1] = grid[:, 0:1] * scale / base``), then ``* 2 - 1``: those
    positions are formed in double (its own float32 ones drift by up to 4e-4 in the
    cosines at this size), the frequencies it makes by a power of a ``linspace`` stay its
    float32 values."""
    from torch.overrides import TorchFunctionMode

    from diffusers.models.transformers.transformer_ltx import LTXVideoRotaryPosEmbed
    from sinpe.torch.patching._exact import ExactCall

    class RangesInDouble(TorchFunctionMode):  # the module's own code, its ranges in double
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if func is torch.arange:
                kwargs["dtype"] = torch.float64
            return func(*args, **kwargs)

    rope = LTXVideoRotaryPosEmbed(dim=96)
    args = (torch.zeros(1, 8 * 40 * 48, 96), 8, 40, 48, (20 / 25.0, 32, 32))
    call = ExactCall(rope.forward, rope.forward)
    got = call(*args)
    assert call.checked and not call.failed and not call.by_value
    with torch.no_grad(), RangesInDouble():
        exact = rope(*args)
    with torch.no_grad():
        own = rope(*args)
    exact_where_its_own_drifts(got, own, exact)


def test_frequencies_made_from_a_range_by_a_power_stay_the_models():
    """A range's powers (``10000 ** (-arange(0, d, 2) / d)``) are frequencies: the code's
    own float32 values, times positions in double; not frequencies in double."""
    from sinpe.torch.patching._exact import ExactCall

    def table(n):
        freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float32) / 8)
        return torch.outer(torch.arange(n, dtype=torch.float32), freq).cos()

    call = ExactCall(table, table)
    got = call(3000)
    assert call.checked and not call.failed
    positions = torch.arange(3000, dtype=torch.float64)[:, None]
    own_freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float32) / 8)
    double_freq = 10000.0 ** (-torch.arange(0, 8, 2, dtype=torch.float64) / 8)
    half_ulp = 2.0**-25 + 2.0**-30
    assert float((got.double() - (positions * own_freq.double()).cos()).abs().max()) <= half_ulp
    assert float((got.double() - (positions * double_freq).cos()).abs().max()) > 8 * half_ulp


def test_a_range_written_in_place_by_another_function_takes_the_codes_values():
    """An exponential of a range taken in place (``x.mul_(c).exp_()``: frequencies) gives
    the code's own float32 values, in the double run too; a clamp in place of positions
    keeps them exact."""
    from sinpe.torch.patching._taint import ExactAngles

    def code():
        freq = torch.arange(0, 8, 2, dtype=torch.float32)
        freq.mul_(-1.3).exp_()
        positions = torch.arange(3000, dtype=torch.float32)
        positions.clamp_(max=2500.0)
        return torch.outer(positions, freq).cos()

    with ExactAngles(layouts=True):
        got = code()
    freq = torch.arange(0, 8, 2, dtype=torch.float32).mul_(-1.3).exp_()
    positions = torch.arange(3000, dtype=torch.float64).clamp(max=2500.0)
    assert got.dtype == torch.float64
    assert float((got - (positions[:, None] * freq.double()).cos()).abs().max()) <= 2.0**-50
