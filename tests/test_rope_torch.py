"""sinpe.torch's rotary embeddings against the code users run.

* ``transformers`` (the real package, pinned in the test extra): HF's
  ``apply_rotary_pos_emb`` fed sinpe's caches gives ``rope_``'s bits; HF's
  ``LlamaRotaryEmbedding`` caches through ``sinpe.torch.apply_rotary_pos_emb``
  give HF's bits; a tiny randomly initialised ``LlamaForCausalLM`` with the
  patch gives the same logits, bit for bit, in float32 and bfloat16, and the
  same loss and gradients to rounding.
* ``rotary-embedding-torch`` (tests/requirements-nodeps.txt): its ``rotate_half``
  is the interleaved layout, and its rotation agrees with sinpe's within its own
  float32 angle error.
* ``rope_`` in place: the kernel on the CPU and torch's ops (the off-CPU path,
  forced here) give the contract's bits for every dtype, layout, axis, partial
  rotary, scale, positions; the version counter moves; refusals write nothing.
* ``rope`` out of place: same bits, gradcheck and gradgradcheck in float64, the
  backward pass is the transposed rotation.
* On the device path (``SINPE_TORCH_PATH=device``: caches by device operations, within
  half an ulp plus 2**-30 of the exact values) the contract's bits become the contract
  within ``conftest.device_rotation_bound`` of them; positions out of range give NaN
  instead of a ValueError.
* The HF accuracy claims of docs/accuracy.md hold (tests/test_rope_accuracy.py prints
  the table).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import (
    bits,
    by_path,
    count_kernel_rotations,
    device_rotation_bound,
    kernel_path,
    on_device_path,
    require_module,
    require_torch,
    same_or_within_device_bound,
)

import sinpe

torch = require_torch()
import sinpe.torch as st  # noqa: E402
import sinpe.torch._rotation as rt  # noqa: E402
import sinpe.torch._tensors as tensors  # noqa: E402

DTYPES = [torch.float16, torch.bfloat16, torch.float32, torch.float64]


def require(module: str):
    """A peer package the README's test command installs (skipped without it, but
    under CI=true); for transformers' llama module, HF's own apply_rotary_pos_emb is
    put back first: a documentation example may have patched it in this process."""
    found = require_module(module)
    if module.endswith("modeling_llama"):
        found.apply_rotary_pos_emb = HF_APPLY[0]
    return found


# HF's own function, as transformers defines it (before any patch of this session)
HF_APPLY: list = []
try:
    from transformers.models.llama import modeling_llama as _llama

    HF_APPLY.append(_llama.apply_rotary_pos_emb)
except ImportError:
    pass


@pytest.fixture
def torch_path(monkeypatch):
    """sinpe.torch's rotations run as torch ops (the off-CPU path), on the CPU."""
    monkeypatch.setattr(tensors, "_kernel_writes", lambda tensor: False)


def same(a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(torch, a), bits(torch, b))


def rounded_caches(n_positions_or_positions, width, dtype, layout="concatenated", scale=1.0,
                   **kw):
    """sinpe's float64 caches times scale, rounded once to dtype (sinpe.torch's own helper
    is checked against NumPy's rounding in test_round_once_matches_numpy)."""
    if isinstance(n_positions_or_positions, int):
        cos, sin = sinpe.rope(n_positions_or_positions, width, dtype=np.float64, layout=layout,
                              **kw)
    else:
        cos, sin = sinpe.rope(None, width, positions=n_positions_or_positions,
                              dtype=np.float64, layout=layout, **kw)
    return (tensors._round_once(torch.from_numpy(cos * scale), dtype),
            tensors._round_once(torch.from_numpy(sin * scale), dtype))


def rotate_half(x, layout="concatenated"):
    return rt._rotate_half(x, layout)


def test_round_once_matches_numpy():
    ml_dtypes = pytest.importorskip("ml_dtypes")
    rng = np.random.default_rng(0)
    values = rng.standard_normal(20000) * 2.0 ** rng.integers(-30, 30, 20000)
    values[:4] = [0.0, -0.0, 1 + 2**-9 + 2**-40, 1 + 2**-9]  # ties broken by the low bits
    got = tensors._round_once(torch.from_numpy(values), torch.float16).numpy()
    with np.errstate(over="ignore"):  # beyond float16: infinities, as torch gives
        want16 = values.astype(np.float16)
    assert np.array_equal(got.view(np.uint16), want16.view(np.uint16))
    got = tensors._round_once(torch.from_numpy(values), torch.bfloat16).view(torch.int16).numpy()
    import test_rope
    want = test_rope.round_once(values, np.dtype(ml_dtypes.bfloat16)).view(np.int16)
    assert np.array_equal(got, want)


# -- HF transformers -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
def test_hf_apply_rotary_pos_emb_with_sinpe_caches_is_rope_(dtype):
    llama = require("transformers.models.llama.modeling_llama")
    B, H, L, D = 2, 4, 33, 64
    position_ids = torch.stack([torch.arange(L), torch.arange(L) + 8191 - L])
    q = torch.randn(B, H, L, D).to(dtype)
    k = torch.randn(B, 2, L, D).to(dtype)
    cos, sin = rounded_caches(position_ids.numpy(), D, dtype)
    want_q, want_k = llama.apply_rotary_pos_emb(q, k, cos, sin)
    for x, want in ((q, want_q), (k, want_k)):
        got = st.rope_(x.clone(), positions=position_ids[:, None, :])
        bound = device_rotation_bound(torch, x, cos[:, None], sin[:, None], rotate_half(x))
        assert same_or_within_device_bound(torch, got, want, bound)
    got_q = sinpe.rope_(q.clone().float().numpy(), positions=position_ids.numpy()[:, None, :])
    if dtype is torch.float32:  # (NumPy's rope_: the kernel on every path)
        assert np.array_equal(got_q, want_q.numpy())


@pytest.mark.parametrize("theta", [10000.0, 500000.0])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sinpe_apply_rotary_pos_emb_is_hf_bit_for_bit(dtype, theta):
    """HF's own caches (LlamaRotaryEmbedding), any layout of q and k (HF's
    transposed projections, GQA), caches that do not repeat their halves."""
    llama = require("transformers.models.llama.modeling_llama")
    from transformers import LlamaConfig
    config = LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=4096, rope_theta=theta)
    rotary = llama.LlamaRotaryEmbedding(config)
    B, L, H, D = 2, 19, 4, 64
    q = torch.randn(B, L, H * D).to(dtype).view(B, L, H, D).transpose(1, 2)
    k = torch.randn(B, L, 2 * D).to(dtype).view(B, L, 2, D).transpose(1, 2)
    position_ids = torch.stack([torch.arange(L) + 3000, torch.arange(L)])
    cos, sin = rotary(q, position_ids)
    for c, s in [(cos, sin), (torch.randn_like(cos.float()).to(dtype),
                              torch.randn_like(sin.float()).to(dtype))]:
        want = llama.apply_rotary_pos_emb(q, k, c, s)
        got = st.apply_rotary_pos_emb(q, k, c, s)
        for g, w in zip(got, want):
            assert same(g, w) and g.stride() == w.stride()
    # unsqueeze_dim=2: (B, L, H, D) queries
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)
    want = llama.apply_rotary_pos_emb(qt, kt, cos, sin, unsqueeze_dim=2)
    got = st.apply_rotary_pos_emb(qt, kt, cos, sin, unsqueeze_dim=2)
    assert all(same(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_decoding_step_is_one_kernel_call_with_hfs_bits(dtype, monkeypatch):
    """A decoding step's query and key ((B, H, 1, D), transposed from the projections'
    (B, 1, H, D)) are rotated by one kernel call on the tensors' memory, with HF's bits,
    dtype and strides; k=None, a negative unsqueeze_dim; and where the kernel declines
    (caches sliced out of a longer cache: strides other than a new tensor's, which
    change HF's result's strides), the general path gives HF's result.  On the device
    path: HF's bits, by device operations alone (no kernel call)."""
    llama = require("transformers.models.llama.modeling_llama")
    g = torch.Generator().manual_seed(11)
    q = torch.randn(2, 1, 4 * 64, generator=g).to(dtype).view(2, 1, 4, 64).transpose(1, 2)
    k = torch.randn(2, 1, 2 * 64, generator=g).to(dtype).view(2, 1, 2, 64).transpose(1, 2)
    cos, sin = (torch.randn(2, 1, 64, generator=g).to(dtype) for _ in range(2))
    calls = count_kernel_rotations(monkeypatch)
    for args in [(q, k, cos, sin), (q, None, cos, sin), (q, k, cos, sin, -3)]:
        calls.clear()
        got = st.apply_rotary_pos_emb(*args)
        assert len(calls) == by_path(kernel=1 if args[1] is None else 2, device=0)
        want = llama.apply_rotary_pos_emb(q, k, *args[2:])  # HF's takes no k=None
        assert got[1] is None if args[1] is None else same(got[1], want[1])
        assert same(got[0], want[0]) and all(
            o.stride() == w.stride() for o, w in zip(got, want) if o is not None)
    long_cos, long_sin = (torch.randn(2, 9, 64, generator=g).to(dtype) for _ in range(2))
    c, s = long_cos[:, 4:5], long_sin[:, 4:5]  # strides (9 * 64, 64, 1): not a new tensor's
    want = llama.apply_rotary_pos_emb(q, k, c, s)
    got = st.apply_rotary_pos_emb(q, k, c, s)
    assert all(same(o, w) and o.stride() == w.stride() for w, o in zip(want, got))


def test_apply_rotary_pos_emb_under_vmap_and_functionalize_is_hfs():
    """Tensors without memory of their own (vmap's batched tensors raise from
    data_ptr, functionalized ones have address 0) never reach the kernel's memory
    path: HF's expression computes them."""
    llama = require("transformers.models.llama.modeling_llama")
    q, k = torch.randn(3, 2, 4, 1, 8), torch.randn(3, 2, 1, 1, 8)
    cos, sin = torch.randn(3, 2, 1, 8), torch.randn(3, 2, 1, 8)
    for transform, args in ((torch.func.vmap, (q, k, cos, sin)),
                            (torch.func.functionalize, (q[0], k[0], cos[0], sin[0]))):
        def ours(q, k, cos, sin):
            return st.apply_rotary_pos_emb(q, k, cos, sin)

        def hf(q, k, cos, sin):
            return llama.apply_rotary_pos_emb(q, k, cos, sin)

        got, want = transform(ours)(*args), transform(hf)(*args)
        assert all(same(o, w) for o, w in zip(got, want))


def test_apply_rotary_pos_emb_falls_back_to_hf_where_the_kernel_does_not_apply(torch_path):
    llama = require("transformers.models.llama.modeling_llama")
    q = torch.randn(2, 4, 5, 8, dtype=torch.bfloat16)
    cases = [
        (q, torch.randn(2, 5, 8), torch.randn(2, 5, 8)),  # float32 caches: torch promotes
        (q[..., :7], torch.randn(2, 5, 7, dtype=torch.bfloat16),
         torch.randn(2, 5, 7, dtype=torch.bfloat16)),  # odd head dimension
        (q, torch.randn(3, 2, 5, 8, dtype=torch.bfloat16)[:, :1],  # caches enlarge the result
         torch.randn(3, 1, 5, 8, dtype=torch.bfloat16)),
    ]
    for x, c, s in cases:
        want = llama.apply_rotary_pos_emb(x, x, c, s)
        got = st.apply_rotary_pos_emb(x, x, c, s)
        assert all(same(g, w) for g, w in zip(got, want))


def test_apply_rotary_pos_emb_gradients():
    llama = require("transformers.models.llama.modeling_llama")
    q = torch.randn(2, 3, 5, 8, dtype=torch.float64, requires_grad=True)
    k = torch.randn(2, 1, 5, 8, dtype=torch.float64, requires_grad=True)
    cos = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    sin = torch.randn(2, 5, 8, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(st.apply_rotary_pos_emb, (q, k, cos, sin))
    grads = []
    for f in (llama.apply_rotary_pos_emb, st.apply_rotary_pos_emb):
        out_q, out_k = f(q, k, cos, sin)
        grads.append(torch.autograd.grad((out_q.square().sum() + out_k.sum()), (q, k, cos, sin)))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=1e-14, atol=1e-14)


def tiny_llama(dtype):
    transformers = require("transformers")
    config = transformers.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128,
                                      num_hidden_layers=2, num_attention_heads=4,
                                      num_key_value_heads=2, max_position_embeddings=512,
                                      rope_theta=10000.0)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_patched_llama_gives_the_same_logits_bit_for_bit(dtype, monkeypatch):
    llama = require("transformers.models.llama.modeling_llama")
    model = tiny_llama(dtype).eval()
    ids = torch.randint(0, 128, (2, 23), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids).logits
        assert llama.apply_rotary_pos_emb is not st.apply_rotary_pos_emb
        monkeypatch.setattr(llama, "apply_rotary_pos_emb", st.apply_rotary_pos_emb)
        got = model(ids).logits
    assert same(got, want)


def test_patched_llama_trains_like_the_original(monkeypatch):
    """With autograd (training): the same loss bit for bit (the forward pass is
    HF's bits), gradients equal to rounding (backward by torch's ops)."""
    llama = require("transformers.models.llama.modeling_llama")
    ids = torch.randint(0, 128, (2, 17), generator=torch.Generator().manual_seed(2))
    results = []
    for patched in (False, True):
        if patched:
            monkeypatch.setattr(llama, "apply_rotary_pos_emb", st.apply_rotary_pos_emb)
        model = tiny_llama(torch.float32).train()
        loss = model(ids, labels=ids).loss
        loss.backward()
        results.append((loss.detach(), [p.grad.clone() for p in model.parameters()]))
    assert same(results[0][0], results[1][0])
    for a, b in zip(results[0][1], results[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


# -- rotary-embedding-torch ------------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rotary_embedding_torch_interleaved_layout(dtype):
    """Its rotate_half is the interleaved pairing: its formula fed sinpe's
    caches is rope_(layout='interleaved'), bit for bit; its own rotation (angles
    in float32) agrees within its float32 angle error."""
    ret = require("rotary_embedding_torch")
    L, dim = 300, 32
    x = torch.randn(2, 3, L, dim).to(dtype)
    cos, sin = rounded_caches(L, dim, dtype, layout="interleaved", offset=40)
    rotated = ret.rotary_embedding_torch.rotate_half(x)
    want = x * cos + rotated * sin
    bound = device_rotation_bound(torch, x, cos, sin, rotated)
    assert same_or_within_device_bound(torch, st.rope_(x.clone(), offset=40,
                                                       layout="interleaved"), want, bound)
    if dtype is torch.float32:
        rotary = ret.RotaryEmbedding(dim)
        theirs = rotary.rotate_queries_or_keys(x, offset=40)
        ours = st.rope_(x.clone(), offset=40, layout="interleaved")
        # float32 angles up to 340 rad: ulp(340) / 2 = 1.5e-5, times |a| + |b|
        bound = 2 * 1.6e-5 * x.abs().max().item() + 1e-6
        assert (theirs - ours).abs().max().item() < bound


# -- rope_ and rope: the contract on every path ------------------------------------------


CALLS = {
    "(B, H, L, D)": ((2, 3, 21, 16), dict(offset=5)),
    "(B, L, H, D) axis=1": ((2, 21, 3, 16), dict(offset=5, axis=1)),
    "partial, interleaved": ((2, 3, 21, 24), dict(rotary_dim=16, layout="interleaved")),
    "scale and theta": ((2, 3, 21, 16), dict(n=500000.0, scale=0.7, offset=2**20)),
    "positions (B, 1, L)": ((2, 3, 21, 16), dict(positions=torch.tensor(
        [list(range(21)), list(range(100, 121))])[:, None, :])),
    "freq": ((2, 3, 21, 16), dict(freq=torch.linspace(1.0, 1e-4, 8, dtype=torch.float64))),
    "exact": ((2, 3, 21, 16), dict(exact=True, scale=1.25, offset=3)),
}


def contract(x, kw, inverse=False):
    """The contract's bits, from NumPy's formula in tests/test_rope.py, and how far the
    device path may lie from them (``rotated_by``)."""
    import test_rope
    args = {k: (v.numpy() if isinstance(v, torch.Tensor) else v) for k, v in kw.items()}
    exact = args.pop("exact", False)
    cos, sin = test_rope.caches(tuple(x.shape), inverse=inverse, **args)
    return rotated_by(x, cos, sin, args.get("layout", "concatenated"), exact,
                      args.get("scale", 1.0))


def rotated_by(x, cos, sin, layout, exact, scale):
    """``x`` rotated as the contract says by sinpe's float64 caches ``cos``, ``sin``
    (NumPy arrays, times ``scale``, broadcasting against ``x[..., :r]``): the caches
    rounded once to x's dtype, then torch's ``t * C + rotate_half(t) * S`` (float64 and
    ``exact``: the float64 rotation rounded once); and how far the device path may lie
    from it, element-wise (conftest.device_rotation_bound on the rotated features, 0 on
    the others)."""
    r = cos.shape[-1]
    part = x[..., :r]
    out = x.clone()
    if exact or x.dtype is torch.float64:
        wide = part.double()
        c, s = torch.from_numpy(cos), torch.from_numpy(sin)
        out[..., :r] = tensors._round_once(wide * c + rotate_half(wide, layout) * s, x.dtype)
    else:
        c, s = (tensors._round_once(torch.from_numpy(a), x.dtype) for a in (cos, sin))
        out[..., :r] = part * c + rotate_half(part, layout) * s
    bound = torch.zeros(x.shape, dtype=torch.float64)
    bound[..., :r] = device_rotation_bound(torch, part, c, s, rotate_half(part, layout), scale)
    return out, bound


def keeps_contract(got, x, kw, inverse=False) -> bool:
    """``got`` is the contract's rotation of ``x`` (its bits on the kernel path, within the
    device path's bound of them on the device path)."""
    want, bound = contract(x, kw, inverse)
    return same_or_within_device_bound(torch, got, want, bound)


@pytest.mark.parametrize("path", ["kernel", "torch ops"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("call", sorted(CALLS))
def test_rope_in_place_gives_the_contract_bits(call, dtype, path, monkeypatch):
    if path == "torch ops":
        monkeypatch.setattr(tensors, "_kernel_writes", lambda tensor: False)
    shape, kw = CALLS[call]
    x = torch.randn(shape).to(dtype)
    t = x.clone()
    version = t._version
    assert st.rope_(t, **kw) is t
    assert keeps_contract(t, x, kw), call
    assert t._version > version
    before = x.clone()
    y = st.rope(x, **kw)  # out of place: the same bits, x untouched
    assert same(y, t) and same(x, before)


@pytest.mark.parametrize("path", ["kernel", "torch ops"])
@pytest.mark.slow
def test_rope_backward_is_the_transposed_rotation(path, monkeypatch):
    if path == "torch ops":
        monkeypatch.setattr(tensors, "_kernel_writes", lambda tensor: False)
    kw = dict(offset=2**20, n=500000.0, scale=0.75, rotary_dim=12)
    x = torch.randn(2, 3, 9, 16, dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(lambda t: st.rope(t, **kw), (x,))
    assert torch.autograd.gradgradcheck(lambda t: st.rope(t, **kw), (x,))
    g = torch.randn(2, 3, 9, 16, dtype=torch.float32)
    xf = torch.randn(2, 3, 9, 16, requires_grad=True)
    st.rope(xf, **kw).backward(g)
    assert keeps_contract(xf.grad, g, kw, inverse=True)
    # an expanded gradient (zero strides) is read as it is
    xe = torch.randn(2, 3, 9, 16, requires_grad=True)
    st.rope(xe, **kw).sum().backward()
    assert keeps_contract(xe.grad, torch.ones(2, 3, 9, 16), kw, inverse=True)


def test_rope_trains_a_parameter():
    w = torch.nn.Parameter(torch.randn(1, 2, 6, 8))
    opt = torch.optim.SGD([w], lr=0.1)
    target = torch.randn(1, 2, 6, 8)
    for _ in range(3):
        opt.zero_grad()
        loss = (st.rope(w, offset=3) - target).square().sum()
        loss.backward()
        opt.step()
    assert w.grad is not None and torch.isfinite(w.grad).all()


def test_rope_in_place_on_views_and_inference_tensors():
    x = torch.randn(2, 8, 3, 16)
    q = x.transpose(1, 2)  # (B, H, L, D) view of (B, L, H, D) memory
    before = q.clone()
    st.rope_(q, offset=4)
    assert keeps_contract(q.contiguous(), before, dict(offset=4))
    with torch.inference_mode():
        t = torch.randn(1, 2, 3, 8)
        before = t.clone()
        st.rope_(t, offset=1)
        assert keeps_contract(t, before, dict(offset=1))
    view = torch.randn(2, 5, 8, dtype=torch.complex64).conj().imag
    assert view.is_neg()  # memory the kernel cannot address: torch's ops write it
    before = view.clone()
    st.rope_(view, offset=2)
    assert keeps_contract(view.clone(), before, dict(offset=2))


REFUSALS = [
    (lambda: st.rope_([1.0, 2.0]), TypeError, "tensor"),
    (lambda: st.rope_(torch.zeros(2, 4, dtype=torch.int32)), TypeError, "dtype"),
    (lambda: st.rope_(torch.zeros(2, 4).to_sparse()), TypeError, "strided"),
    (lambda: st.rope_(torch.zeros(2, 4, requires_grad=True)), ValueError, "requires grad"),
    (lambda: st.rope_(torch.zeros(1, 4).expand(3, 4)), ValueError, "share memory"),
    (lambda: st.rope_(torch.zeros(2, 5)), ValueError, "odd"),
    (lambda: st.rope_(torch.zeros(2, 8), rotary_dim=10), ValueError, "rotary_dim"),
    (lambda: st.rope_(torch.zeros(2, 3, 8), axis=2), ValueError, "feature axis"),
    (lambda: st.rope_(torch.zeros(2, 3, 8), positions=torch.arange(2)), ValueError,
     "broadcast"),
    (lambda: st.rope_(torch.zeros(2, 8), positions=torch.tensor([0, 2**24 + 1])), ValueError,
     "positions"),
    (lambda: st.rope_(torch.zeros(2, 8), freq=torch.ones(3)), ValueError, "freq"),
    (lambda: st.rope(torch.zeros(2, 8), exact=1), TypeError, "exact"),
]


def refusal_cases() -> list:
    """REFUSALS' indices; that of positions beyond MAX_POSITION (read on the host) holds
    the kernel path alone (test_positions_out_of_range_are_refused_or_rotate_to_nan)."""
    positions = kernel_path("refusal of positions beyond MAX_POSITION (read on the host)",
                            "rotates them to NaN")
    return [pytest.param(case, marks=positions) if words == "positions" else case
            for case, (_, _, words) in enumerate(REFUSALS)]


@pytest.mark.parametrize("path", ["kernel", "torch ops"])
@pytest.mark.parametrize("case", refusal_cases())
def test_refusals_raise_documented_errors(case, path, monkeypatch):
    if path == "torch ops":
        monkeypatch.setattr(tensors, "_kernel_writes", lambda tensor: False)
    call, error, words = REFUSALS[case]
    with pytest.raises(error, match=words) as info:
        call()
    assert type(info.value) is error


def test_inference_tensor_outside_inference_mode_is_refused_unchanged():
    with torch.inference_mode():
        t = torch.ones(2, 8)
    with pytest.raises(ValueError, match="inference"):
        st.rope_(t)
    assert (t == 1).all()


def test_positions_out_of_range_are_refused_or_rotate_to_nan():
    """Beyond +-MAX_POSITION: the kernel path reads the positions and refuses them
    (REFUSALS); the device path reads none on the host: its caches there are NaN, and so
    is what they rotate, the other rows the contract's."""
    x = torch.ones(3, 8)
    positions = torch.tensor([0, 2**24 + 1, -(2**24) - 1])
    if not on_device_path():
        with pytest.raises(ValueError, match="positions"):
            st.rope(x, positions=positions)
        return
    for got in (st.rope(x, positions=positions), st.rope_(x.clone(), positions=positions)):
        assert keeps_contract(got[:1], x[:1], dict(positions=positions[:1]))
        assert got[1:].isnan().all()
