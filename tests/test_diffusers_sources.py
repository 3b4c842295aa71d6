"""Modules that return angles for attention processors to take the cosine of (Stable
Audio 3's rotary module, Ernie-Image's embedder): their outputs the model's own, bit for
bit, each kept with the rounding error of its float32 arithmetic, so that the
processors' stand-ins take the cosine and sine of the angle in double.

- ``patch`` finds them by their code (a table formed by ``outer`` or ``einsum``, no
  cosine) and checks them at their first call; ``undo`` gives their forward back;
- a patched tiny Stable Audio 3 model's processors take each cos and sin within half an
  ulp of the angles its rotary module forms in double (its float32 frequencies), where
  diffusers' own are more than eight times that off; both paths give the same bits and
  the device path reads nothing on the host;
- Ernie-Image's embedder, at positions far enough along for float32 products to drift:
  each angle plus its error within ``2**-40`` of the product in double;
- an element written in place after the module returned loses its error (every
  element, for a tensor made under ``torch.inference_mode``, which has no version);
- a module whose outputs are not angles formed by a product is refused, with a reason,
  and gives its own outputs.
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
from diffusers_battery import _Reads  # noqa: E402
from trig_calls import held_to_a_rotary_table, recorded  # noqa: E402

import sinpe.torch as st  # noqa: E402
from sinpe.torch import _tensors  # noqa: E402
from sinpe.torch.patching import _pairs  # noqa: E402
from sinpe.torch.patching._sources import AngleSource  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_a_processor_given_a_modules_angles_takes_them_in_double(monkeypatch):
    model, info = dtiny.build("StableAudio3DiTModel", compare=False)
    source = model.rotary_pos_emb
    forward = source.forward
    with st.patch(model) as handle:
        assert handle.caches["rotary_pos_emb"] == "angles and their errors"
        with torch.no_grad():
            model(**info["inputs"])  # the first calls: checked
        assert source.forward.call.checked and not source.forward.call.failed
        modes = recorded(monkeypatch)
        got = {}
        for device_path in (False, True):
            monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", device_path)
            with torch.no_grad(), _Reads() as reads:
                got[device_path] = model(**info["inputs"])[0]
            assert reads.count == 0 or not device_path, "the device path read on the host"
        assert torch.equal(bits(torch, got[False]), bits(torch, got[True]))
    assert source.forward == forward  # undone
    # cos and sin of each rotation (queries and keys, two of each where the attention is
    # differential) in each block, on each path
    rotations = sum(4 if block.self_attn.use_differential else 2
                    for block in model.transformer_blocks)
    held_to_a_rotary_table(modes, source.inv_freq, 2 * rotations * 2)


def ernie():
    from diffusers.models.transformers.transformer_ernie_image import ErnieImageEmbedND3

    embed = ErnieImageEmbedND3(dim=96, theta=256, axes_dim=(32, 32, 32))
    ids = torch.stack([torch.zeros(300), torch.arange(300.0) + 1000, torch.arange(300.0) * 7],
                      -1)[None]
    return embed, ids


def test_an_einsum_of_ids_and_frequencies_is_kept_with_its_error():
    embed, ids = ernie()
    call = AngleSource(embed.forward, embed.forward)
    out = call(ids)
    assert call.checked and not call.failed
    assert torch.equal(out, embed(ids))  # the module's own values, bit for bit
    low = _pairs.given_low(out)
    omegas = [1.0 / (256 ** (torch.arange(0, 32, 2, dtype=torch.float32) / 32))] * 3
    table = torch.cat([ids[..., i].double()[..., None] * omegas[i].double() for i in range(3)],
                      -1).unsqueeze(2)
    want = torch.stack([table, table], -1).reshape(*table.shape[:-1], -1)
    carried = (out.double() + low.double() - want).abs()
    plain = (out.double() - want).abs()
    assert float((carried / want.abs().clamp(min=1e-30)).max()) <= 2.0**-40
    assert float(plain.max()) > 2.0**-30 * 2**10


@pytest.mark.parametrize("inference", [False, True])
def test_an_angle_written_after_it_was_given_loses_its_error(inference):
    embed, ids = ernie()
    call = AngleSource(embed.forward, embed.forward)
    with torch.inference_mode(inference):
        out = call(ids)
        assert bool((_pairs.given_low(out) != 0).any())
        out[0, :10] = 1.0
        low = _pairs.given_low(out)
    assert bool((low[0, :10] == 0).all()) and bool((low[0, 10:] != 0).any())


def test_a_module_that_forms_no_angles_is_refused():
    freq = torch.tensor([1.0, 0.01])

    def growth(t):  # a product spread into a table, then no angle: its exponential
        return torch.outer(t, freq).exp()

    call = AngleSource(growth, growth)
    reasons = []
    call.on_failure = reasons.append
    t = torch.arange(5.0) * 1.7
    assert torch.equal(call(t), growth(t))
    assert call.failed and reasons == [call.failed]
    assert "returns no angles it forms by a product" in call.failed
