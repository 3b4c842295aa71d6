"""Positional modules learned as columns of cos and sin (device operations, no host read
per step), in the forms diffusers' models take beyond the plain one:

- a Gaussian Fourier projection's random, negative, frequencies (UNet1D, Stable Audio);
- float64 outputs (SkyReels-V2's timestep projection computes and returns float64);
- ``(B, N, axes)`` ids whose outputs put a singleton axis between the rows (PRX);
- constant columns beside the embedding (Chroma's table made at construction, the
  zero guidance's cos and sin);

and what must not be taken for a constant (a column that follows the positions without
a sine: a probe of one row would show one value; a step beyond the probes' positions).  Each on both paths: the device path
(every device but the CPU, run here on the CPU) and the CPU kernel, which give the same
bits; the device path reads nothing on the host.
"""
from __future__ import annotations

import contextlib
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

import sinpe.torch as st  # noqa: E402
from sinpe.torch import _tensors  # noqa: E402
from sinpe.torch.patching import _columns  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")
HALF_ULP = 2.0**-25 + 2.0**-30  # half a float32 ulp of values up to 1, and the promise's 2**-30


def module_of(model, suffix):
    return next(m for n, m in model.named_modules() if n.endswith(suffix))


def served(module):
    """The stand-in serving ``module``'s forward."""
    return vars(module)["forward"].call


@contextlib.contextmanager
def learned(name, suffix):
    """The tiny ``name`` patched, after its first forward: its module at ``suffix``,
    which must be served as columns."""
    model, info = dtiny.build(name, compare=False)
    module = module_of(model, suffix)
    with st.patch(model):
        model(**info["inputs"])
        assert served(module).columns is not None
        yield module


def on_both_paths(module, calls, monkeypatch):
    """``module`` on each call, on the kernel path and the device path: the outputs (the
    same bits on both) and the host reads of the device path's calls."""
    outputs = {}
    for device_path in (False, True):
        monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", device_path)
        with torch.no_grad(), _Reads() as reads:
            outputs[device_path] = [module(*call) for call in calls]
    for a, b in zip(outputs[False], outputs[True]):
        for x, y in zip(torch.utils._pytree.tree_leaves(a), torch.utils._pytree.tree_leaves(b)):
            assert x.dtype == y.dtype and x.shape == y.shape
            assert torch.equal(bits(torch, x), bits(torch, y))
    assert reads.count == 0, "the device path read values on the host"
    return outputs[True]


@pytest.mark.parametrize("name", ["UNet1DModel", "StableAudioDiTModel"])
def test_a_fourier_projection_with_negative_frequencies(name, monkeypatch):
    with learned(name, "time_proj") as projection:
        weight = projection.weight.double()
        assert bool((weight < 0).any())  # (random frequencies: some negative)
        times = [torch.tensor([0.25, 17.5, 999.0]), torch.tensor([3.0])]
        for t, got in zip(times, on_both_paths(projection, [(t,) for t in times], monkeypatch)):
            angle = t.double()[:, None] * weight * 2 * math.pi
            want = projection.__class__.forward(projection, t)  # its own, for the layout
            exact = torch.cat([angle.sin(), angle.cos()], -1)
            if not torch.equal(want.double().argmax(-1), exact.argmax(-1)):
                exact = torch.cat([angle.cos(), angle.sin()], -1)  # flip_sin_to_cos
            assert got.dtype == torch.float32 and got.shape == exact.shape
            assert float((got.double() - exact).abs().max()) <= HALF_ULP


def test_float64_outputs_stay_float64(monkeypatch):
    with learned("SkyReelsV2Transformer3DModel", "timesteps_proj") as projection:
        times = [torch.tensor([0.5, 640.25]), torch.tensor([999.0, 1.0, 7.0])]
        for t, got in zip(times, on_both_paths(projection, [(t,) for t in times], monkeypatch)):
            own = projection.__class__.forward(projection, t)  # diffusers' float64 code
            assert got.dtype == own.dtype == torch.float64 and got.shape == own.shape
            # (the tables' float64 digits and diffusers' double rounding: far below 2**-30)
            assert float((got - own).abs().max()) <= 2.0**-40


def test_ids_with_a_batch_axis_and_a_singleton_axis_in_the_outputs(monkeypatch):
    """PRX: ``(B, N, axes)`` ids, outputs ``(B, 1, N, d, 2, 2)`` (a heads axis), any B, N."""
    with learned("PRXTransformer2DModel", "pe_embedder") as embedder:
        ids = [torch.rand(b, n, 2) * 64 for b, n in ((1, 5), (3, 7))]
        for i, got in zip(ids, on_both_paths(embedder, [(i,) for i in ids], monkeypatch)):
            own = embedder.__class__.forward(embedder, i)  # diffusers': float64 angles, once
            assert got.shape == own.shape == (i.shape[0], 1, i.shape[1], *own.shape[3:])
            assert float((got.double() - own.double()).abs().max()) <= 2 * HALF_ULP


def test_constant_columns_beside_the_embedding(monkeypatch):
    """Chroma: the timestep's table, the zero guidance's, and a table made at construction
    (``mod_proj``), repeated over its rows."""
    with learned("ChromaTransformer2DModel", "time_text_embed") as embedder:
        assert len(served(embedder).columns.constants)  # more than zeros and ones
        times = [torch.tensor([250.0, 999.5]), torch.tensor([1.0, 3.0, 5.0])]
        for t, got in zip(times, on_both_paths(embedder, [(t,) for t in times], monkeypatch)):
            own = embedder.__class__.forward(embedder, t)  # its float32 drift: ~1e-4 at most
            assert got.shape == own.shape and float((got - own).abs().max()) < 1e-3


@pytest.mark.parametrize("rows", [1, 3])
def test_a_column_that_follows_the_positions_is_no_constant(rows):
    freq = torch.tensor([1.0, 0.25])

    def embedding(t):
        angle = t[:, None] * freq
        return torch.cat([angle.sin(), t[:, None] * 0.5, angle.cos()], -1)

    def padded(t):
        angle = t[:, None] * freq
        return torch.cat([angle.sin(), torch.full_like(t[:, None], 0.5), angle.cos()], -1)

    def stepped(t):  # (constant for every position below 1000)
        angle = t[:, None] * freq
        return torch.cat([angle.sin(), (t[:, None] > 1000).to(t.dtype), angle.cos()], -1)

    t = torch.arange(rows, dtype=torch.float32) + 2
    assert _columns.learn(embedding, (t,), {}, [torch.float32]) is None
    assert _columns.learn(stepped, (t,), {}, [torch.float32]) is None
    form = _columns.learn(padded, (t,), {}, [torch.float32])
    assert form is not None and list(form.constants) == [0.5]
    later = torch.tensor([0.5, 9.0, 100.25])
    assert torch.equal(form(later), padded(later.double()).float())


def test_a_frequency_whose_tables_serve_fewer_positions(monkeypatch):
    """Stable Audio 3's timestep features: frequencies up to 2*pi*1e4, whose angles stay
    within the tables' 2**26 radians up to |t| 1068 alone.  Learned, exact, on both
    paths; beyond that, the CPU computes the exact outputs by value (no NaN), where a
    device gives NaN (no host read can check)."""
    with learned("StableAudio3DiTModel", "timestep_features") as features:
        limit = served(features).columns.angles.limit
        assert 1000 <= limit < 4096
        # (B, 1), as the model calls it
        times = [torch.tensor([[0.0], [0.5], [1.0]]), torch.tensor([[0.031], [1000.0]])]
        for t, got in zip(times, on_both_paths(features, [(t,) for t in times], monkeypatch)):
            own = features.__class__.forward(features, t)  # float32 angles: 2pi*1e4*t drifts
            ramp = torch.linspace(0.0, 1.0, own.shape[-1] // 2, dtype=torch.float32)
            freqs = torch.exp(ramp * (math.log(1e4) - math.log(0.5)) + math.log(0.5))
            angle = t.double() * (freqs.double() * 2.0 * math.pi)  # (its float32 frequencies)
            exact = torch.cat([angle.cos(), angle.sin()], -1)
            assert got.shape == own.shape
            assert float((got.double() - exact).abs().max()) <= HALF_ULP
        monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", False)
        beyond = torch.tensor([[limit + 10.0]])
        got = features(beyond)
        angle = beyond.double() * (freqs.double() * 2.0 * math.pi)
        exact = torch.cat([angle.cos(), angle.sin()], -1)  # (its own float32: ulps of 8 rad)
        assert float((got.double() - exact).abs().max()) <= HALF_ULP
