"""Attention processors that rotate inline: their own code on their device, with each
``cos`` and ``sin`` of the angles they are given exact (Stable Audio 3, Ernie-Image,
AutoencoderSAME: no columns form, the hidden states' values change at every step).

- the stand-in takes that form (``inline``) once its first call is checked;
- every cos and sin it gives is the exact value of the angle given, rounded once
  (against cos and sin in double, rounded to float32: nothing of sinpe);
- the kernel path and the device path (run here on the CPU) give the same bits, and the
  device path reads nothing on the host;
- code that forms its angles itself (a position times a frequency) takes it with that
  arithmetic carried exactly where it starts from an input or from a range the code makes
  (AutoencoderSAME's ``cat(outer(arange(n), inv_freq))``: each cos and sin within half an
  ulp of the module's code run in double), never from values it cannot follow;
- where the angles come from the module's float32 buffers (Kandinsky 6's tables of
  position times frequency, Helios's vectors of frequencies times a grid), they are formed
  again: each value within half an ulp of the module's own code run with those buffers
  made in double (its own float32 angles are not), the same bits on both paths, no host
  read, the buffers the module's own after each call; a table that is not position times
  frequency is not.
"""
from __future__ import annotations

import copy
import math
import sys
from pathlib import Path

import pytest
from conftest import bits, require, require_torch

torch = require_torch()
diffusers = require("diffusers")
sys.path.insert(0, str(Path(__file__).resolve().parent / "diffusers"))
import dtiny  # noqa: E402
from diffusers_battery import _Reads  # noqa: E402
from trig_calls import HALF_ULP, held_to_a_rotary_table, recorded  # noqa: E402

import sinpe.torch as st  # noqa: E402
from sinpe.torch import _tensors  # noqa: E402
from sinpe.torch.patching import _inline  # noqa: E402
from sinpe.torch.patching._exact import ExactCall  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
MODELS = ["StableAudio3DiTModel", "ErnieImageTransformer2DModel", "AutoencoderSAME"]


def processors(model):
    """The model's stand-ins that took the inline form, by where they are held."""
    return {f"{name}.{attribute}": value.call for name, module in model.named_modules()
            for attribute, value in vars(module).items()
            if isinstance(getattr(value, "call", None), ExactCall) and value.call.inline}


def outputs(model, inputs, device_path, monkeypatch):
    monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", device_path)
    with torch.no_grad(), _Reads() as reads:
        out = model(**inputs)
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)], reads


@pytest.mark.parametrize("name", MODELS)
def test_an_inline_rotation_is_served_on_its_device_with_exact_cos_and_sin(name, monkeypatch):
    model, info = dtiny.build(name, compare=False)
    with st.patch(model):
        outputs(model, info["inputs"], False, monkeypatch)  # the first call: checked
        served = processors(model)
        assert served, "no processor took the inline form"
        kernel, _ = outputs(model, info["inputs"], False, monkeypatch)
        device, reads = outputs(model, info["inputs"], True, monkeypatch)
        assert reads.count == 0, "the device path read values on the host"
        assert len(kernel) == len(device)
        for a, b in zip(kernel, device):
            assert a.dtype == b.dtype and torch.equal(bits(torch, a), bits(torch, b))
        # each cos and sin the processors took: the exact value of the angle given
        calls = recorded(monkeypatch)
        outputs(model, info["inputs"], True, monkeypatch)
    values = [(call, mode.pairs) for mode in calls for call in mode.calls]
    assert values
    for (angle, cosine, exact, _), pairs in values:
        assert exact.dtype == angle.dtype == torch.float32
        # (an angle the code formed from a range it makes: with its arithmetic's error)
        low = None if pairs is None else pairs.low(angle)
        wide = angle.double() if low is None else angle.double() + low.double()
        double = wide.cos() if cosine else wide.sin()
        assert float((exact.double() - double).abs().max()) <= HALF_ULP


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_exact_trig_rounds_the_exact_value_once(dtype):
    angles = torch.cat([torch.linspace(-100, 100, 4001), torch.tensor([0.0, 1e-30, 2.0**23 + 0.5,
                                                                         3e7, math.inf])])
    angles = angles.to(dtype)
    for cosine, double in ((True, torch.cos), (False, torch.sin)):
        got = _inline.exact_trig(angles, cosine)
        assert got.dtype == dtype and got.shape == angles.shape
        wide = angles.double()
        inside = wide.abs() <= 2.0**24
        exact = double(wide[inside])
        ulp = torch.finfo(dtype).eps / 2 * exact.abs().clamp(min=2.0**-126)
        assert bool(((got[inside].double() - exact).abs() <= ulp + 2.0**-30).all())
        # beyond the tables' range: the code's own value (NaN for the infinity, as torch's)
        own = torch.cos(angles[~inside]) if cosine else torch.sin(angles[~inside])
        assert torch.equal(got[~inside].isnan(), own.isnan())
        assert torch.equal(got[~inside].nan_to_num(), own.nan_to_num())


def test_code_that_forms_its_angles_takes_them_exact():
    """A position times a frequency formed here: from an input or from a range the code
    makes, inline with that arithmetic carried exactly (each cosine and sine that of the
    angle in double); from values it cannot follow (``linspace``'s), never inline (its
    run in double forms them)."""
    freq = torch.tensor([1.0, 0.0123])
    seen = {}

    def scaled(x, t):  # reads x's values too: no columns form, no shapes-alone key
        angle = t[:, None] * freq
        seen["cos"] = angle.cos()
        return x * torch.cat([seen["cos"], angle.sin()], -1)

    call = ExactCall(scaled, scaled)
    x, t = torch.rand(3, 4), torch.tensor([1.0, 7.5, 12345.678])
    call(x, t)
    assert call.checked and not call.failed and call.inline and call.followed == [1]
    call(x, t)
    exact = (t.double()[:, None] * freq.double()).cos()
    assert float((seen["cos"].double() - exact).abs().max()) <= HALF_ULP
    scaled(x, t)  # its own: the float32 product's rounding
    assert float((seen["cos"].double() - exact).abs().max()) > 8 * HALF_ULP

    def made_here(x):  # (a range scaled: positions, in double)
        angle = torch.arange(1000.0, 1003.0)[:, None] * 7.3 * freq
        seen["cos"] = angle.cos()
        return x * torch.cat([seen["cos"], angle.sin()], -1)

    call = ExactCall(made_here, made_here)
    call(x)
    assert call.checked and not call.failed and call.inline and call.follows_made
    assert call.followed == []
    call(x)
    exact = ((torch.arange(1000.0, 1003.0).double() * 7.3)[:, None] * freq.double()).cos()
    assert float((seen["cos"].double() - exact).abs().max()) <= HALF_ULP
    made_here(x)
    assert float((seen["cos"].double() - exact).abs().max()) > 8 * HALF_ULP

    def unfollowed(x):
        angle = torch.linspace(0, 2000, 3)[:, None] * 7.3 * freq
        return x * torch.cat([angle.cos(), angle.sin()], -1)

    call = ExactCall(unfollowed, unfollowed)
    call(x)
    assert call.checked and not call.failed and not call.inline


def test_a_processor_given_angles_is_inline_and_keeps_its_gradients():
    def processor(x, angle):
        return x * angle.cos() + x.flip(-1) * angle.sin()

    call = ExactCall(processor, processor)
    x = torch.rand(5, 4, requires_grad=True)
    angle = torch.rand(5, 4) * 50
    out = call(x, angle)
    assert call.checked and call.inline
    out.sum().backward()  # the rotation's gradient: cos and sin are constants of x
    wide = angle.double()
    want = (wide.cos() + wide.sin().flip(-1)).float()
    assert float((x.grad - want).abs().max()) <= 2 * HALF_ULP * 4


# -- float32 tables of angles, looked up by position (Kandinsky 5 and 6)


def kandinsky(kind):
    """One of diffusers' own Kandinsky 6 rotary modules and its arguments: positions far
    enough along for float32 angles to drift."""
    from diffusers.models.transformers import transformer_kandinsky6 as k6

    torch.manual_seed(0)
    if kind == "1d":
        rope = k6.Kandinsky6RoPE1D(16, max_pos=256, freqs_scaling=0.7)
        return rope, (torch.arange(40) * 6 + 11,)
    rope = k6.Kandinsky6RoPE3D((8, 8, 16), max_pos=(128, 128, 128))
    pos = (torch.arange(3) + 100, torch.arange(4) * 9 + 1, torch.arange(5) * 25)
    return rope, (pos, (1.0, 2.0, 2.0))


def on_both_paths(call, args, monkeypatch):
    """The stand-in's outputs on the kernel path (False) and the device path (True): the
    same bits, and the device path reads nothing on the host."""
    got = {}
    for device_path in (False, True):
        monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", device_path)
        with torch.no_grad(), _Reads() as reads:
            got[device_path] = call(*args)
        assert reads.count == 0 or not device_path, "the device path read values on the host"
    leaves = torch.utils._pytree.tree_leaves
    assert len(leaves(got[False])) == len(leaves(got[True]))
    for a, b in zip(leaves(got[False]), leaves(got[True])):
        assert torch.equal(bits(torch, a), bits(torch, b))
    return got


def in_double(rope, args):
    """The module's own code with its tables made in double from its float32 frequencies
    (row 1 of each): the angles formed in double, cos and sin in double."""
    twin = copy.deepcopy(rope)
    for name, table in rope.named_buffers():
        rows = torch.arange(table.shape[0], dtype=torch.float64)
        twin.register_buffer(name, rows[:, None] * table[1].double(), persistent=False)
    with torch.no_grad():
        return twin(*args)


@pytest.mark.parametrize("kind", ["1d", "3d"])
def test_a_float32_table_of_angles_is_formed_again_exactly_with_no_host_read(kind, monkeypatch):
    rope, args = kandinsky(kind)
    tables = {name: (table, table.clone()) for name, table in rope.named_buffers()}
    call = ExactCall(rope.forward, rope.forward)
    call(*args)  # the first call: checked, learned
    assert call.checked and not call.failed and call.inline and call.tables is not None
    exact = in_double(rope, args)
    got = on_both_paths(call, args, monkeypatch)
    assert got[False].dtype == torch.float32 and got[False].shape == exact.shape
    assert float((got[False].double() - exact).abs().max()) <= HALF_ULP
    # the module's own float32 angles are off by more (what this form changes)
    with torch.no_grad():
        own = rope(*args)
    assert float((own.double() - exact).abs().max()) > 8 * HALF_ULP
    # its tables are its own again after each call
    for name, table in rope.named_buffers():
        assert table is tables[name][0] and torch.equal(table, tables[name][1])
    # a model cast to bfloat16 (its tables with it) keeps the exact float32 values
    rope.to(torch.bfloat16)
    with torch.no_grad():
        assert torch.equal(bits(torch, call(*args)), bits(torch, got[False]))


def test_a_table_that_is_not_position_times_frequency_is_not_formed_again():
    rope, args = kandinsky("3d")
    with torch.no_grad():
        rope.angles_0[101, 2] += 1e-3  # (a row the positions look up)
    call = ExactCall(rope.forward, rope.forward)
    call(*args)
    assert call.checked and not call.failed and call.inline and call.tables is None


def test_vectors_of_frequencies_times_a_grid_are_formed_again_exactly(monkeypatch):
    """Helios's rotary module: float32 vectors of frequencies times a grid of positions (an
    einsum, the frequencies along the first axis), cos and sin exact at each step."""
    from diffusers.models.transformers.transformer_helios import HeliosRotaryPosEmbed

    rope = HeliosRotaryPosEmbed((8, 8, 8), 10000.0)
    frames = torch.tensor([[0, 1, 2, 900]])
    args = (frames, 3, 5, torch.device("cpu"))
    call = ExactCall(rope.forward, rope.forward)
    call(*args)
    assert call.checked and not call.failed and call.inline and call.tables is not None
    # in double: the module's own einsum of its float32 frequencies (as doubles) and the grid
    grid_y, grid_x = (g.double() for g in rope._get_spatial_meshgrid(3, 5, "cpu"))
    grids = (frames.double()[:, :, None, None].expand(1, 4, 3, 5), grid_y.expand(1, 4, 3, 5),
             grid_x.expand(1, 4, 3, 5))
    parts = [rope.get_frequency_batched(base.double(), grid) for base, grid in zip(
        (rope.freqs_base_t, rope.freqs_base_y, rope.freqs_base_x), grids)]
    exact = torch.cat([c for c, _ in parts] + [s for _, s in parts], 0).permute(1, 0, 2, 3, 4)
    got = on_both_paths(call, args, monkeypatch)
    assert float((got[False].double() - exact).abs().max()) <= HALF_ULP
    assert float((rope(*args).double() - exact).abs().max()) > 8 * HALF_ULP


@pytest.mark.parametrize("modality", ["video", "audio"])
@pytest.mark.parametrize("rope_type", ["interleaved", "split"])
def test_angles_formed_from_float32_coordinates_are_exact(modality, rope_type, monkeypatch):
    """LTX-2's rotary modules form each angle from the float32 coordinates they are given
    (a midpoint, over a base, times 2 minus 1, times a float32 frequency: five roundings
    before the cosine) with no buffer to form again: that arithmetic is carried exactly."""
    from diffusers.models.transformers.transformer_ltx2 import LTX2AudioVideoRotaryPosEmbed

    rope = LTX2AudioVideoRotaryPosEmbed(dim=64 if modality == "video" else 32,
                                        modality=modality, rope_type=rope_type,
                                        num_attention_heads=2)
    cpu = torch.device("cpu")
    coords = (rope.prepare_video_coords(2, 3, 6, 5, device=cpu, fps=24.0)
              if modality == "video" else rope.prepare_audio_coords(2, 7, device=cpu))
    call = ExactCall(rope.forward, rope.forward)
    call(coords)
    assert call.checked and not call.failed and call.inline and call.followed == [0]
    with torch.no_grad():  # the module's own code in double: its float32 frequencies
        # (made in float64 and rounded, as the model does), the coordinates' arithmetic
        exact = copy.deepcopy(rope).double()(coords.double())
        own = rope(coords)
    got = on_both_paths(call, (coords,), monkeypatch)
    for mine, want, theirs in zip(got[False], exact, own):
        assert mine.dtype == torch.float32 and mine.shape == want.shape
        assert float((mine.double() - want).abs().max()) <= HALF_ULP
        assert float((theirs.double() - want).abs().max()) > 8 * HALF_ULP


def test_angles_a_processor_forms_from_a_range_are_exact(monkeypatch):
    """AutoencoderSAME's attention processor forms ``cat(outer(arange(n), inv_freq))`` in
    every call and rotates with it (its attention after the cosines runs in float32): each
    cos and sin it then takes is within half an ulp of that angle in double (the module's
    float32 frequencies), where its own are not; both paths the same bits, no host read."""
    from diffusers.models.autoencoders.autoencoder_same import SAMEAttention

    torch.manual_seed(0)
    attn = SAMEAttention(dim=64, dim_heads=32, use_differential=False)
    torch.nn.init.normal_(attn.to_out.weight)  # (zero-initialised: outputs would be 0)
    processor = attn.processor
    hidden = torch.randn(1, 300, 64)
    call = ExactCall(processor, processor)
    call(attn, hidden)
    assert call.checked and not call.failed and call.inline and call.follows_made
    modes = recorded(monkeypatch)
    on_both_paths(call, (attn, hidden), monkeypatch)
    # cos and sin of the queries' and the keys' rotation, on each path
    held_to_a_rotary_table(modes, attn.rope.inv_freq, 8)


def test_float32_arithmetic_is_carried_to_far_below_its_rounding():
    """Sums, differences, products and quotients of followed values, with each other,
    with float32 tensors and with Python numbers (taken in double), through reshapes,
    stacks and slices, and of ranges spread into tables: hi + lo within 2**-40 (relative)
    of the same code in double, where float32 is off by more than 2**-26; a value written
    in place is no longer followed."""
    from sinpe.torch.patching._pairs import MADE, Pairs

    torch.manual_seed(1)
    x = torch.rand(500) * 200 - 100
    y = torch.rand(500) * 3 + 0.1
    codes = [lambda a, b: (a / 20 + b) * 0.1, lambda a, b: 1 - a / b,
             lambda a, b: 3.7 / b - a * 2,
             lambda a, b: ((a[:, None] * 2 - 1) * b[None, :5]).transpose(0, 1).flatten(),
             lambda a, b: torch.stack([a / 7, b / 3], -1).reshape(-1) * math.pi,
             lambda a, b: -(a * b) + a.chunk(2)[0].repeat(2)]
    for code in codes:
        pairs = Pairs([(0, x), (1, y)])
        with _inline.ExactTrig(pairs=pairs):
            out = code(x, y)
        low = pairs.low(out)
        want = code(x.double(), y.double())
        assert low is not None and pairs.used == {0, 1}
        carried = (out.double() + low.double() - want).abs() / want.abs()
        plain = (out.double() - want).abs() / want.abs()
        assert float(carried.max()) <= 2.0**-40 < 2.0**-26 < float(plain.max())
    # a range the code makes (of floats, or integers cast), scaled and spread into a
    # table; a power of it (frequencies) is the code's own
    pairs = Pairs([], made=True)
    with _inline.ExactTrig(pairs=pairs):
        t = torch.arange(5000, 5500, dtype=torch.float32)
        n = torch.arange(5000, 5500)[:250].float()
        powered = 10000 ** (t / 5500)
        tables = [torch.outer(t, y), t[:, None] * y, (t * math.pi)[:, None] * y,
                  torch.outer(n, y[:7])]
    assert pairs.low(powered) is None
    wide = torch.arange(5000, 5500, dtype=torch.float64)
    for out, factor in zip(tables, (wide, wide, wide * math.pi, wide[:250])):
        low = pairs.low(out)
        want = factor[:, None] * y.double()[:out.shape[1]]
        assert low is not None and pairs.used == {MADE}
        carried = (out.double() + low.double() - want).abs() / want.abs()
        plain = (out.double() - want).abs() / want.abs()
        assert float(carried.max()) <= 2.0**-40 < 2.0**-26 < float(plain.max())
    for inference in (False, True):  # (an inference tensor has no version counter)
        with torch.inference_mode(inference):
            source = x.clone()
            pairs = Pairs([(0, source)])
            with _inline.ExactTrig(pairs=pairs):
                value = source / 3
                assert pairs.low(value) is not None
                value[0] = 1.0
                assert pairs.low(value) is None
                whole = source / 7
                view = whole[1:]
                assert pairs.low(view) is not None
                whole.mul_(2)
                assert pairs.low(view) is None
