"""sinpe.torch's device path: exact positions by device operations alone.

On every device but the CPU, and on the CPU with ``SINPE_TORCH_PATH=device`` (set here
by hand: ``_tensors.DEVICE_PATH_FORCED``), sinpe.torch reads no tensor value on the
host, copies nothing per call and computes nothing in float64 (but a float64 result
asked for, and the double-precision fallback that ``patch`` names).  Held here:

- the exact angle tables (``sinpe/torch/_angles.py``) against mpmath: integer
  positions up to ``2**24`` and real ones, every dtype, within half an ulp of the
  exact value plus the bound derived in the module (the tables' 2**-32 rounding, the
  double angles of the kernel); NaN for positions out of range; the angle limit of
  large frequencies;
- in a dispatch mode, during patched forwards and decoding steps of tiny models of
  every rope form: host reads (``aten._local_scalar_dense``, ``Tensor.numpy``,
  ``Tensor.tolist``) no more than transformers' own forward makes, float64
  operations none;
- a patched model moved to the meta device runs (a host read fails there);
- ``torch.compile(fullgraph=True, dynamic=True)`` of a patched model, the eager values;
- a 10,485,760-position model: patch and its first call within 64 MiB of
  transformers' own;
- the public functions on the device path against the CPU path.
"""
from __future__ import annotations

import math
import os
import sys

import numpy as np
import pytest
from conftest import UNDER_ASAN, require, require_torch

torch = require_torch()
transformers = require("transformers")
import mpmath  # noqa: E402  (a test requirement everywhere)
import sinpe  # noqa: E402
import sinpe.torch as st  # noqa: E402
from sinpe.torch import _angles, _tensors  # noqa: E402
from test_patch import CASES, VOCAB, build  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

mpmath.mp.dps = 40
# sinpe/torch/_angles.py: a table value is within 2**-32 of its double value; a
# rotation by an integer position's two digits adds the error of two tables (a vector
# of norm sqrt(2) * 2**-32 each), a real position's six fraction digits six more, each
# with a rounding back to Q1.31 of the same size.
QUANTIZATION = {"integer": 2 * math.sqrt(2) * 2.0**-32, "real": 14 * math.sqrt(2) * 2.0**-32}


@pytest.fixture
def device_path(monkeypatch):
    """SINPE_TORCH_PATH=device for the test: CPU tensors take the other devices' path."""
    monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", True)


# -- the angle tables against mpmath ---------------------------------------------------------


def half_ulp(value: float, dtype) -> float:
    """Half the spacing of ``dtype``'s values in ``value``'s binade: the most that
    rounding ``value`` to nearest moves it."""
    info = torch.finfo(dtype)
    exponent = math.floor(math.log2(max(abs(value), info.smallest_normal)))
    return 2.0**exponent * info.eps / 2


def exact(position: float, w: float, scale: float = 1.0) -> tuple[float, float]:
    angle = mpmath.mpf(position) * mpmath.mpf(w)
    return float(mpmath.cos(angle) * scale), float(mpmath.sin(angle) * scale)


def bound(value: float, dtype, kind: str, position: float, w: float) -> float:
    """Half an ulp, the tables' rounding and the double angles' (the kernel rounds the
    angle of a table's row once: 2**-53 of it, and of the small rows)."""
    angles = (abs(position) * abs(w) + 1) * 2.0**-52
    return half_ulp(value, dtype) + QUANTIZATION[kind] + angles


POSITIONS = {
    "integer": np.concatenate([np.arange(0, 40), [4095, 4096, 4097, 65535, 2**20, 2**24 - 1,
                                                  2**24, -1, -4096, -(2**24)],
                               np.random.default_rng(0).integers(-2**24, 2**24, 40)]),
    "real": np.concatenate([[0.5, 0.25, -0.75, 999.3, 1e-3, 3e-8, 2**24 - 0.5],
                            np.random.default_rng(1).uniform(-1000, 1000, 30),
                            np.random.default_rng(2).uniform(0, 1, 20)]).astype(np.float32),
}


@pytest.mark.parametrize("kind", ["integer", "real"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("scale", [1.0, 1.25])
@pytest.mark.parametrize("forced", [False, True], ids=["cpu-kernel", "device-operations"])
def test_angles_are_exact_values_rounded_once(kind, dtype, scale, forced, monkeypatch):
    monkeypatch.setattr(_tensors, "DEVICE_PATH_FORCED", forced)
    freq = _angles.schedule_frequencies(10000.0, 64)
    tables = _angles.AngleTables(freq, scale)
    positions = POSITIONS[kind]
    got = tables.values(torch.from_numpy(positions), dtype).double().numpy()
    assert got.shape == (len(positions), 32, 2)
    worst = 0.0
    for i, p in enumerate(positions):
        for j in (0, 1, 5, 13, 31):
            for k, value in enumerate(exact(float(p), float(freq[j]), scale)):
                if dtype is torch.float64:
                    allowed = (abs(float(p)) * freq[j] + 8) * 2.0**-51
                else:
                    allowed = bound(value, dtype, kind, float(p), float(freq[j]))
                error = abs(got[i, j, k] - value)
                worst = max(worst, error / allowed)
                assert error <= allowed, (p, j, k, got[i, j, k], value)
    assert worst > 0.1  # the bound is not loose by orders of magnitude


def test_angles_of_fractions_are_exact_to_two_to_the_minus_49():
    """A float32 fraction below 2**-25 has bits under 2**-48: read to 2**-49."""
    tables = _angles.AngleTables(np.array([1000.0]))
    p = np.float32(3e-9)
    got = tables.values(torch.tensor([p]), torch.float64)[0, 0].numpy()
    want = exact(float(p), 1000.0)
    assert abs(got[1] - want[1]) <= 1000.0 * 2.0**-49 + 2.0**-52


def test_positions_out_of_range_give_nan_and_never_index_out_of_the_tables():
    tables = _angles.AngleTables(_angles.schedule_frequencies(10000.0, 8))
    limit = sinpe.MAX_POSITION
    for dtype in (torch.int64, torch.int32):
        positions = torch.tensor([limit, -limit, 5], dtype=torch.int64).to(dtype)
        assert torch.isfinite(tables.values(positions, torch.float32)).all()
    far = torch.tensor([limit + 1, -limit - 1, 2**62, -(2**63), 2**63 - 1])
    assert torch.isnan(tables.values(far, torch.float32)).all()
    real = torch.tensor([float(limit) + 2, math.inf, -math.inf, math.nan, 1e30])
    assert torch.isnan(tables.values(real, torch.float32)).all()


@pytest.mark.parametrize("top", [1000.0, 2 * np.pi * 1e4])
def test_large_frequencies_serve_positions_up_to_the_kernels_angle_limit(top):
    """The positions the kernel itself takes at that frequency (its angles, with the
    reach of its blocks, within 2**26 radians): Stable Audio 3's 2*pi*1e4 serves fewer
    positions than one digit of the tables holds."""
    freq = np.array([top, 1.0])
    tables = _angles.AngleTables(freq)
    sinpe.rope(None, 4, positions=np.array([tables.limit]), freq=freq)
    with pytest.raises(ValueError, match="2\\*\\*26"):
        sinpe.rope(None, 4, positions=np.array([tables.limit + 1]), freq=freq)
    ok, beyond = tables.values(torch.tensor([tables.limit, tables.limit + 1]), torch.float32)
    assert torch.isfinite(ok).all() and torch.isnan(beyond).all()
    assert np.allclose(ok.double().numpy(), np.array([exact(tables.limit, top),
                                                      exact(tables.limit, 1.0)]), atol=1e-6)


def test_negative_positions_negate_the_sine_of_the_magnitude():
    tables = _angles.AngleTables(_angles.schedule_frequencies(500.0, 16))
    positions = torch.tensor([3, 70000, 2**23 + 5])
    plus = tables.values(positions, torch.float32)
    minus = tables.values(-positions, torch.float32)
    assert torch.equal(minus[..., 0], plus[..., 0]) and torch.equal(minus[..., 1], -plus[..., 1])


def test_per_pair_positions_take_each_pairs_own_position():
    tables = _angles.AngleTables(_angles.schedule_frequencies(10000.0, 8))
    rows = torch.tensor([[0, 7, 100, 2**20], [5, 5, 5, 5]])
    got = tables.values(rows, torch.float32, per_pair=True)
    for b in range(2):
        for j in range(4):
            single = tables.values(rows[b, j : j + 1], torch.float32)[0, j]
            assert torch.equal(got[b, j], single)


# -- host reads and float64 in a patched model's forward -------------------------------------


class Counted(TorchDispatchMode):
    """Counts host reads (``aten._local_scalar_dense``: ``.item()``, ``bool()``,
    ``int()`` of a tensor) and operations on float64 (or complex128) tensors; and,
    by wrapping them, ``Tensor.numpy`` and ``Tensor.tolist`` (no dispatch of their own)."""

    def __init__(self):
        super().__init__()
        self.reads: list[str] = []
        self.double: list[str] = []
        monkeypatch = pytest.MonkeyPatch()
        for name in ("numpy", "tolist"):
            original = getattr(torch.Tensor, name)

            def counted(tensor, *args, _original=original, _name=name, **kwargs):
                self.reads.append(_name)
                return _original(tensor, *args, **kwargs)
            monkeypatch.setattr(torch.Tensor, name, counted)
        self._monkeypatch = monkeypatch

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._local_scalar_dense.default:
            self.reads.append(str(func))
        leaves = torch.utils._pytree.tree_leaves((args, kwargs, out))
        if any(isinstance(t, torch.Tensor) and t.dtype in (torch.float64, torch.complex128)
               for t in leaves):
            self.double.append(str(func))
        return out

    def __exit__(self, *exc):
        out = super().__exit__(*exc)
        self._monkeypatch.undo()
        return out


def counts(model, ids):
    """Host reads and float64 operations of a forward of ``ids`` and of one decoding
    step after it."""
    with torch.no_grad():
        with Counted() as forward:
            out = model(ids, use_cache=True)
        past = out.past_key_values
        with Counted() as step:
            model(ids[:, -1:], past_key_values=past, use_cache=True)
    return forward, step


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_patched_forward_reads_no_more_and_computes_no_float64(name, device_path,
                                                                 one_torch_thread):
    model = build(name)
    ids = torch.randint(3, VOCAB, (1, 12), generator=torch.Generator().manual_seed(3))
    hf_forward, hf_step = counts(model, ids)
    with st.patch(model) as handle:
        forward, step = counts(model, ids)
    assert handle.double_precision == []
    # no more reads than transformers' own forward (its own code's: DeepSeek's
    # routing reads counts): sinpe adds none, and for dynamic rope, where transformers'
    # module reads max(position_ids) twice, sinpe's stand-in reads it once
    assert len(forward.reads) <= len(hf_forward.reads), (forward.reads, hf_forward.reads)
    assert len(step.reads) <= len(hf_step.reads), (step.reads, hf_step.reads)
    if "dynamic" not in name:
        assert (len(forward.reads), len(step.reads)) == (len(hf_forward.reads),
                                                         len(hf_step.reads))
    assert forward.double == hf_forward.double == [] and step.double == []


# -- every form of the rotary module ----------------------------------------------------------


def test_every_form_reads_nothing_and_stays_within_the_bound_of_the_kernels(device_path):
    """RotaryEmbedding on the device path for each family of test_rotary_families (every
    form, rope type and multi-axis sections): no host read but dynamic's, no float64,
    HF's shapes, dtypes and contiguity, each value within one ulp of the kernel path's
    plus 2**-29 (both are within half an ulp plus 2**-30 of the exact value)."""
    from test_rotary_families import families

    for name, (config, layer_type, _, form, fixed) in families().items():
        if isinstance(config, Exception):
            continue
        rotary = st.RotaryEmbedding(config, layer_type=layer_type)
        sections = rotary.sections is not None
        shape = (3, 2, 6) if sections else (2, 6)
        ids = torch.arange(12).reshape(2, 6) * 37 + 2**20
        ids = ids.expand(3, 2, 6) if sections else ids
        for dtype in (torch.float32, torch.bfloat16):
            x = torch.zeros(1, dtype=dtype)
            with Counted() as counted:
                got = rotary(x, ids)
            _tensors.DEVICE_PATH_FORCED = False
            want = rotary(x, ids)
            _tensors.DEVICE_PATH_FORCED = True
            if rotary.rope_type != "dynamic":
                assert counted.reads == [], name
            assert counted.double == [], name
            got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
            for g, w in zip(got, want):
                assert (g.shape, g.dtype) == (w.shape, w.dtype) and g.is_contiguous(), name
                g, w = (torch.view_as_real(t) if t.is_complex() else t for t in (g, w))
                ulp = torch.finfo(w.dtype).eps * w.double().abs().clamp(min=2.0**-126)
                assert ((g.double() - w.double()).abs() <= ulp + 2.0**-29).all(), (name, shape)


# -- a model on fake CUDA tensors, compiled, at 10M positions --------------------------------

@pytest.mark.parametrize("name", ["llama", "llama-yarn", "phi3-longrope", "gemma3", "gptj"])
def test_a_patched_model_runs_on_the_meta_device(name, one_torch_thread):
    """Meta tensors have no values: any host read of one raises.  A model patched on the
    CPU, then moved to the meta device (a device other than the CPU: the device path),
    runs a forward and a decoding step, as transformers' own does there.  (Fake CUDA
    tensors would say the same on a CUDA build of torch; the CPU build refuses some
    of their operations, transformers' own included.)"""
    model = build(name)
    handle = st.patch(model)
    ids = torch.randint(3, VOCAB, (1, 12), device="meta")
    with torch.no_grad():
        model.to("meta")
        out = model(ids, use_cache=True)
        step = model(ids[:, -1:], past_key_values=out.past_key_values, use_cache=True)
    handle.undo()
    assert out.logits.shape == (1, 12, VOCAB) and out.logits.device.type == "meta"
    assert step.logits.shape == (1, 1, VOCAB)


@pytest.mark.slow
def test_compiles_fullgraph_with_dynamic_shapes_and_the_eager_values(device_path):
    """The device path's rotary module traces as plain device operations: one graph
    (fullgraph) for every length (dynamic shapes), the eager values.  (tests/slow/test_compile.py
    compiles whole patched models; with SINPE_TORCH_PATH=device it does so on this path.)"""
    config = transformers.LlamaConfig(
        hidden_size=64, num_attention_heads=4, max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192})
    rotary = st.RotaryEmbedding(config)
    x = torch.zeros(1, dtype=torch.bfloat16)
    torch._dynamo.reset()
    compiled = torch.compile(rotary, fullgraph=True, dynamic=True, backend="aot_eager")
    for positions in (torch.arange(12)[None], torch.arange(2**20, 2**20 + 40)[None],
                      torch.tensor([[2**24 - 1]])):
        for got, want in zip(compiled(x, positions), rotary(x, positions)):
            assert torch.equal(got, want)


def _resident() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")
@pytest.mark.skipif(UNDER_ASAN, reason="ASan's quarantine keeps freed memory resident: the "
                    "pages measured here are not the tables' (the other stages measure them)")
def test_a_ten_million_position_model_costs_what_transformers_costs(device_path,
                                                                   one_torch_thread):
    """patch and the first call of a 10,485,760-position model (head 128) at position
    10**7: within 64 MiB of transformers' own first call (the angle tables, a few MiB,
    the same at any context length)."""
    config = transformers.LlamaConfig(vocab_size=96, hidden_size=256, intermediate_size=64,
                                      num_hidden_layers=1, num_attention_heads=2,
                                      max_position_embeddings=10_485_760)
    model = transformers.LlamaForCausalLM(config).eval()
    ids = torch.randint(3, 96, (1, 16), generator=torch.Generator().manual_seed(0))
    far = ids * 0 + 10_000_000
    with torch.no_grad():
        model(ids, position_ids=far)  # torch's own first-call costs, out of the count
        before = _resident()
        model(ids, position_ids=far)
        hf = _resident() - before
        before = _resident()
        with st.patch(model):
            model(ids, position_ids=far)
            patched = _resident() - before
    assert patched - hf <= 64 << 20, (patched, hf)


def test_attention_scores_do_not_move_with_the_offset(device_path):
    """Llama 3.1's rope (head 128): the attention scores of the same queries and keys
    (unit variance) placed at 0.. and at 2**20.. or 2**23.. differ by float32 noise on
    the device path (< 1e-5); transformers' float32 module moves them by 4e-2 and 0.3."""
    from transformers.models.llama.modeling_llama import (LlamaRotaryEmbedding,
                                                          apply_rotary_pos_emb)

    config = transformers.LlamaConfig(
        hidden_size=4096, num_attention_heads=32, max_position_embeddings=131072,
        rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                         "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192})
    generator = torch.Generator().manual_seed(0)
    q, k = (torch.randn(1, 8, 64, 128, generator=generator) for _ in range(2))

    def scores(rotary, start):
        cos, sin = rotary(q, torch.arange(start, start + 64)[None])
        q_rotated, k_rotated = apply_rotary_pos_emb(q, k, cos, sin)
        return q_rotated @ k_rotated.transpose(-1, -2) / math.sqrt(128)

    ours, hf = st.RotaryEmbedding(config), LlamaRotaryEmbedding(config)
    for start, hf_moves in ((2**20, 1e-2), (2**23, 1e-1)):
        assert float((scores(ours, start) - scores(ours, 0)).abs().max()) < 1e-5
        assert float((scores(hf, start) - scores(hf, 0)).abs().max()) > hf_moves
