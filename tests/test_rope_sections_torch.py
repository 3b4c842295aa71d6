"""Multi-axis RoPE in sinpe.torch: ``rope_`` and ``rope`` with ``sections=``.

* The section rule (tests/test_rope_sections.py's ``section_of``, which that
  file's reference uses) is transformers' own: Qwen2-VL's and Qwen3-VL's
  ``recomposition_frequencies`` (transformers 5.23, the test extra's pin) put
  each section's index where the rule says.
* ``rope_`` in place and ``rope`` out of place, on the kernel and on torch's ops
  (the off-CPU path, forced here), give the contract's bits in every dtype:
  per-section float64 caches rounded once, then torch's ``t * C +
  rotate_half(t) * S`` (float64 and ``exact=True``: the float64 rotation rounded
  once); ``position_ids`` given as a tensor of shape ``(3, B, L)``.
* ``rope``'s backward pass is the transposed rotation: gradcheck and
  gradgradcheck in float64, and a float32 gradient with the contract's bits.
* On the device path (``SINPE_TORCH_PATH=device``) the contract's bits become the
  contract within ``conftest.device_rotation_bound`` of them (test_rope_torch.py).
"""
from __future__ import annotations

import numpy as np
import pytest
import test_rope_sections as T
from conftest import bits, require_module, require_torch, same_or_within_device_bound

torch = require_torch()
import sinpe.torch as st  # noqa: E402
import sinpe.torch._tensors as tensors  # noqa: E402
from test_rope_torch import rotated_by  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(torch, a), bits(torch, b))


@pytest.mark.needs("transformers")
@pytest.mark.parametrize("model, sections, rule", [
    ("qwen2_vl", [16, 24, 24], "contiguous"),
    ("qwen2_vl", [2, 3, 3], "contiguous"),
    ("qwen3_vl", [24, 20, 20], "interleaved"),
    ("qwen3_vl", [4, 2, 2], "interleaved"),
])
def test_the_section_rule_is_transformers(model, sections, rule):
    """HF's recomposition of (3, ..., m) frequencies whose values are their section's
    index: its first half is the section of each pair."""
    module = require_module(f"transformers.models.{model}.modeling_{model}")
    rotary = {"qwen2_vl": "Qwen2VLRotaryEmbedding",
              "qwen3_vl": "Qwen3VLTextRotaryEmbedding"}[model]
    m = sum(sections)
    stub = type("Stub", (), {"mrope_section": sections})()
    indices = torch.arange(3, dtype=torch.float32)[:, None, None].expand(3, 1, m).clone()
    picked = getattr(module, rotary).recomposition_frequencies(stub, indices)
    assert picked.shape[-1] == 2 * m
    assert picked[0, :m].long().tolist() == T.section_of(m, sections, rule).tolist()


def contract(x, positions, sections, inverse=False, exact=False, **kw):
    """The contract's bits: tests/test_rope_sections.py's per-section caches, rounded
    once by sinpe.torch's own _round_once (held against NumPy's in test_rope_torch.py),
    then torch's formula; and how far the device path may lie from them
    (test_rope_torch.rotated_by)."""
    cos, sin = T.section_caches(positions.numpy(), kw.get("rotary_dim") or x.shape[-1],
                                sections, kw.get("sections_layout", "contiguous"),
                                kw.get("layout", "concatenated"),
                                **{k: kw[k] for k in ("n", "freq") if k in kw})
    rows = cos.shape[:-1]
    shape = (1,) * (x.dim() - 1 - len(rows)) + rows + (cos.shape[-1],)
    scale = kw.get("scale", 1.0)
    cos, sin = (cos * scale).reshape(shape), (sin * scale).reshape(shape)
    sin = -sin if inverse else sin
    return rotated_by(x, cos, sin, kw.get("layout", "concatenated"), exact, scale)


def keeps_contract(got, x, positions, sections, inverse=False, **kw) -> bool:
    """``got`` is the contract's rotation of ``x`` (its bits on the kernel path, within the
    device path's bound of them on the device path)."""
    want, bound = contract(x, positions, sections, inverse, **kw)
    return same_or_within_device_bound(torch, got, want, bound)


POSITION_IDS = torch.from_numpy(T.qwen2vl_positions())  # (3, B, L)
CALLS = {
    "Qwen2-VL": ((16, 24, 24), dict()),
    "Qwen3-VL interleaved pairs, scale": (
        (24, 20, 20), dict(sections_layout="interleaved", layout="interleaved", scale=0.8)),
    "partial, exact": ((4, 6, 6), dict(rotary_dim=32, exact=True, n=1e6)),
}


@pytest.mark.parametrize("path", ["kernel", "torch ops"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_rope_with_sections_gives_the_contract_bits(call, dtype, path, monkeypatch):
    if path == "torch ops":
        monkeypatch.setattr(tensors, "_kernel_writes", lambda tensor: False)
    sections, kw = CALLS[call]
    positions = POSITION_IDS[:, :, None, :]  # over the heads of (B, H, L, D)
    x = torch.randn(2, 3, POSITION_IDS.shape[-1], 128 if "partial" not in call else 48)
    x = x.to(dtype)
    t = x.clone()
    version = t._version
    assert st.rope_(t, positions=positions, sections=sections, **kw) is t
    assert keeps_contract(t, x, positions, sections, **kw), call
    assert t._version > version
    before = x.clone()
    y = st.rope(x, positions=positions, sections=torch.tensor(sections), **kw)
    assert same(y, t) and same(x, before)


@pytest.mark.parametrize("path", ["kernel", "torch ops"])
def test_rope_with_sections_backward_is_the_transposed_rotation(path, monkeypatch):
    if path == "torch ops":
        monkeypatch.setattr(tensors, "_kernel_writes", lambda tensor: False)
    positions = POSITION_IDS[:, :1, None, :9]
    kw = dict(positions=positions, sections=(3, 3, 2), sections_layout="interleaved",
              scale=0.75, rotary_dim=16)
    x = torch.randn(1, 2, 9, 20, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: st.rope(t, **kw), (x,))
    assert torch.autograd.gradgradcheck(lambda t: st.rope(t, **kw), (x,))
    g = torch.randn(1, 2, 9, 20)
    xf = torch.randn(1, 2, 9, 20, requires_grad=True)
    st.rope(xf, **kw).backward(g)
    args = {k: v for k, v in kw.items() if k not in ("positions", "sections")}
    assert keeps_contract(xf.grad, g, positions, (3, 3, 2), inverse=True, **args)


@pytest.mark.parametrize("path", ["kernel", "torch ops"])
def test_bad_sections_raise_before_anything_is_written(path, monkeypatch):
    if path == "torch ops":
        monkeypatch.setattr(tensors, "_kernel_writes", lambda tensor: False)
    x = torch.randn(2, 3, 5, 16)
    before = x.clone()
    for kw, words in [
        (dict(sections=(2, 3, 3)), "positions"),
        (dict(positions=torch.zeros(2, 5, dtype=torch.long), sections=(2, 3, 3)),
         "leading axis"),
        (dict(positions=torch.zeros(3, 5, dtype=torch.long), sections=(2, 3, 2)), "sum|count"),
        (dict(positions=torch.zeros(3, 5, dtype=torch.long), sections=(2, 3, 3),
              sections_layout="diagonal"), "sections_layout"),
        (dict(positions=torch.zeros(3, 5, dtype=torch.long), sections=torch.tensor([2.0, 6.0])),
         "sections"),
    ]:
        error = TypeError if isinstance(kw.get("sections"), torch.Tensor) else ValueError
        with pytest.raises(error, match=words):
            st.rope_(x, **kw)
        with pytest.raises(error, match=words):
            st.rope(x, **kw)
        assert same(x, before)


def test_numpy_and_torch_positions_give_the_same_bits():
    x = torch.randn(1, 2, POSITION_IDS.shape[-1], 64)
    a = st.rope(x, positions=POSITION_IDS[:, :1, None, :], sections=(8, 12, 12))
    b = st.rope(x, positions=np.asarray(POSITION_IDS[:, :1, None, :]), sections=[8, 12, 12])
    assert same(a, b)
