"""sinpe's apply functions against transformers' own, family by family.

* ``sinpe.torch.apply_rotary_pos_emb`` (transformers 5's signature: the fifth
  positional argument is ``unsqueeze_dim``; partial caches; ``k=None``; mixed
  dtypes) gives the bits, dtype, shape and strides of the HF function it stands
  for: Llama's for full-width caches, GPT-NeoX's for narrower ones.
* Each form of ``sinpe.torch.patching._forms`` (what ``sinpe.torch.patch`` swaps in) gives
  the result of every family's own function it stands for, on random layouts of
  the query and key (transposed, sliced, size-1 dimensions, as attention modules
  make them), every dtype pair of tensors and caches, caches of HF's layout and
  others; on the kernel's path (the CPU) and on torch's (forced).  Strides are
  compared too: the same values with other strides can take other paths in the
  attention's matmul.
* The kernel does write the results in the layouts models use (else the claims
  above would hold by torch's expression alone); on the device path
  (``SINPE_TORCH_PATH=device``) no form calls it.
"""
from __future__ import annotations

import random

import pytest
from conftest import bits, by_path, count_kernel_rotations, require_module, require_torch

torch = require_torch()
import sinpe.torch as st  # noqa: E402
import sinpe.torch._tensors as tensors  # noqa: E402
import sinpe.torch.patching._checks as checks  # noqa: E402
import sinpe.torch.patching._forms as forms  # noqa: E402


def modeling(family: str):
    return require_module(f"transformers.models.{family}.modeling_{family}")


def same(got, want) -> bool:
    """Bits, dtype, shape and strides; tuples element by element; None is None."""
    if isinstance(want, tuple):
        return isinstance(got, tuple) and len(got) == len(want) and all(
            same(g, w) for g, w in zip(got, want))
    if want is None or got is None:
        return got is want
    return (got.dtype == want.dtype and got.shape == want.shape
            and got.stride() == want.stride() and torch.equal(bits(torch, got), bits(torch, want)))


@pytest.fixture(params=["kernel", "torch"])
def path(request, monkeypatch):
    """sinpe's kernel (CPU tensors), or torch's ops as on other devices (forced)."""
    if request.param == "torch":
        monkeypatch.setattr(tensors, "_kernel_writes", lambda tensor: False)
    return request.param


def random_layout(shape, rng, dtype):
    """A tensor of ``shape`` whose memory is laid out in a random order of its leading
    dimensions, sometimes a slice of wider rows (attention's views)."""
    order = list(range(len(shape) - 1))
    rng.shuffle(order)
    order.append(len(shape) - 1)
    memory = [shape[d] for d in order]
    extra = rng.choice([0, 0, 4])
    memory[-1] += extra
    base = torch.randn(memory, generator=torch.Generator().manual_seed(rng.randrange(2**31)))
    base = base.to(dtype)[..., : shape[-1]]
    return base.permute([order.index(d) for d in range(len(shape))])


def random_caches(shape, rng, dtype):
    """HF's layout (fresh, contiguous) mostly; sometimes another order of the same values."""
    if rng.random() < 0.25:
        return random_layout(shape, rng, dtype)
    return torch.randn(shape, generator=torch.Generator().manual_seed(rng.randrange(2**31))
                       ).to(dtype)


DTYPES = [torch.float32, torch.bfloat16, torch.float16, torch.float64]

FORM = {form.name: form.function for form in forms.FORMS}

# (family, HF function name, sinpe's form, the caches' width as a fraction of the head:
# 1 (all features rotate), 2 (half as wide: partial rotary, or the frequencies once))
FORMS = [
    *[(family, "apply_rotary_pos_emb", "llama", (1,))
      for family in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "gemma3", "phi",
                     "deepseek_v3", "starcoder2", "mixtral", "granite", "qwen2_moe")],
    ("gpt_neox", "apply_rotary_pos_emb", "neox", (1, 2)),
    ("phi3", "apply_rotary_pos_emb", "neox", (1, 2)),
    ("olmo", "apply_rotary_pos_emb", "cast_back", (1,)),
    ("cohere", "apply_rotary_pos_emb", "interleaved_float", (1,)),
    ("esm", "apply_rotary_pos_emb", "float_then_cast", (1,)),
    ("modernbert", "apply_rotary_pos_emb", "float_then_cast", (1,)),
    ("hunyuan_vl", "apply_rotary_pos_emb", "all_float_then_cast", (1,)),
    ("glm", "apply_rotary_pos_emb", "pairwise_partial", (1, 2)),
    ("helium", "apply_rotary_pos_emb", "pairwise", (1,)),
    ("ernie4_5", "apply_rotary_pos_emb", "pairwise_float", (1,)),
    ("gpt_oss", "apply_rotary_pos_emb", "half_width", (2,)),
    ("openai_privacy_filter", "apply_rotary_pos_emb", "half_width_interleaved", (2,)),
    ("blt", "apply_rotary_pos_emb", "interleaved", (1,)),
    ("deepseek_v3", "apply_rotary_pos_emb_interleave", "deinterleave", (1,)),
    ("qwen2_vl", "apply_rotary_pos_emb_vision", "vision", (1,)),
]


@pytest.mark.parametrize("family, name, form_name, widths", FORMS,
                         ids=[f"{f}.{n}" for f, n, _, _ in FORMS])
def test_each_form_gives_its_familys_result(family, name, form_name, widths, path):
    """sinpe.torch.patch recognises the family's function as this form, and on random
    layouts, dtypes and shapes (not patch's probes) the form (``adapted`` to the
    function's signature) gives its result."""
    hf = getattr(modeling(family), name)
    assert checks.recognise_function(hf, torch.device("cpu")).form.name == form_name
    form = checks.adapted(FORM[form_name], hf)
    assert form is not None
    vision = name.endswith("vision")
    rng = random.Random(f"{family}.{name}")
    for _ in range(24):
        head = rng.choice([8, 16])
        width = head // rng.choice(widths)
        batch, length, heads = rng.choice([1, 2]), rng.choice([1, 3]), rng.choice([1, 3])
        dtype, cache_dtype = rng.choice(DTYPES), rng.choice(DTYPES)
        unsqueeze_dim = rng.choice([1, 2])  # (B, H, L, D) or (B, L, H, D)
        q_shape = [batch, heads, length, head] if unsqueeze_dim == 1 else [
            batch, length, heads, head]
        k_shape = list(q_shape)
        k_shape[unsqueeze_dim] = rng.choice([1, heads])
        q, k = random_layout(q_shape, rng, dtype), random_layout(k_shape, rng, dtype)
        cos = random_caches([batch, length, width], rng, cache_dtype)
        sin = random_caches([batch, length, width], rng, cache_dtype)
        if vision:  # (N, H, D) patches, (N, r) caches
            q, k, cos, sin = q[0], k[0], cos[0], sin[0]
            kwargs = {}
        else:
            kwargs = {"unsqueeze_dim": unsqueeze_dim}
        want = hf(q, k, cos, sin, **kwargs)
        got = form(q, k, cos, sin, **kwargs)
        assert same(got, want), (q.shape, q.stride(), k.shape, k.stride(), width, dtype,
                                 cache_dtype, unsqueeze_dim)


@pytest.mark.parametrize("family", ["gptj", "codegen"])
def test_gptj_form_gives_its_familys_result(family, path):
    """``apply_rotary_pos_emb(tensor, sin, cos)`` on ``(B, L, H, r)`` slices of the
    heads (partial rotary) or whole heads, with half-width caches, mixed dtypes
    (CodeGen's float32 table with a bfloat16 model)."""
    hf = modeling(family).apply_rotary_pos_emb
    rng = random.Random(family)
    for _ in range(24):
        head = rng.choice([8, 16])
        width = rng.choice([head, head // 2])
        batch, length, heads = rng.choice([1, 2]), rng.choice([1, 3]), rng.choice([1, 3])
        dtype, cache_dtype = rng.choice(DTYPES), rng.choice(DTYPES)
        tensor = random_layout([batch, length, heads, head], rng, dtype)[..., :width]
        sincos = random_caches([batch, length, width], rng, cache_dtype)
        sin, cos = torch.split(sincos, width // 2, dim=-1)
        assert same(FORM["gptj"](tensor, sin, cos), hf(tensor, sin, cos)), (
            tensor.shape, tensor.stride(), dtype, cache_dtype)


def test_apply_rotary_pos_emb_takes_transformers_5_arguments(path):
    llama, neox = modeling("llama"), modeling("gpt_neox")
    g = torch.Generator().manual_seed(0)
    q = torch.randn(2, 5, 4, 16, generator=g)  # (B, L, H, D): unsqueeze_dim=2
    k = torch.randn(2, 5, 2, 16, generator=g)
    cos, sin = torch.randn(2, 5, 16, generator=g), torch.randn(2, 5, 16, generator=g)
    want = llama.apply_rotary_pos_emb(q, k, cos, sin, 2)
    assert same(st.apply_rotary_pos_emb(q, k, cos, sin, 2), want)  # fifth positional
    assert same(st.apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=2,
                                        position_ids=torch.arange(5)), want)
    # k=None: the query's rotation and None
    assert same(st.apply_rotary_pos_emb(q, None, cos, sin, 2), (want[0], None))
    # partial caches: GPT-NeoX's result (its torch.cat: contiguous)
    qt, kt = q.transpose(1, 2), k.transpose(1, 2)
    want = neox.apply_rotary_pos_emb(qt, kt, cos[..., :8], sin[..., :8])
    assert same(st.apply_rotary_pos_emb(qt, kt, cos[..., :8], sin[..., :8]), want)
    # mixed dtypes: float32 caches, bfloat16 q and k give HF's float32 result
    qb, kb = qt.bfloat16(), kt.bfloat16()
    want = llama.apply_rotary_pos_emb(qb, kb, cos, sin)
    assert want[0].dtype == torch.float32
    assert same(st.apply_rotary_pos_emb(qb, kb, cos, sin), want)
    # float16 q with bfloat16 caches: both widen to float32; caches of two dtypes
    want = llama.apply_rotary_pos_emb(qt.half(), kt.half(), cos.bfloat16(), sin.bfloat16())
    assert same(st.apply_rotary_pos_emb(qt.half(), kt.half(), cos.bfloat16(), sin.bfloat16()),
                want)
    want = llama.apply_rotary_pos_emb(qb, kb, cos, sin.bfloat16())
    assert same(st.apply_rotary_pos_emb(qb, kb, cos, sin.bfloat16()), want)


@pytest.mark.parametrize("value", [torch.arange(3), None, 1.0, True, "1"])
def test_apply_rotary_pos_emb_refuses_an_unsqueeze_dim_that_is_not_an_int(value):
    q = torch.randn(1, 2, 3, 8)
    before = q.clone()
    with pytest.raises(TypeError, match="unsqueeze_dim must be an int"):
        st.apply_rotary_pos_emb(q, q, torch.randn(1, 3, 8), torch.randn(1, 3, 8), value)
    assert torch.equal(q, before)


def test_apply_rotary_pos_emb_partial_and_mixed_dtypes_are_differentiable():
    """With autograd: HF's values and gradients (both by torch's ops here)."""
    neox = modeling("gpt_neox")
    g = torch.Generator().manual_seed(3)
    results = []
    for f in (neox.apply_rotary_pos_emb, st.apply_rotary_pos_emb):
        q = torch.randn(2, 3, 5, 16, generator=torch.Generator().manual_seed(4),
                        dtype=torch.float64, requires_grad=True)
        cos = torch.randn(2, 5, 8, generator=g).requires_grad_()
        sin = torch.randn(2, 5, 8, generator=g).requires_grad_()
        out_q, out_k = f(q, q, cos.double(), sin.double())
        (out_q.square().sum() + out_k.sum()).backward()
        results.append((out_q.detach(), q.grad))
        g = torch.Generator().manual_seed(3)
    assert same(results[1][0], results[0][0])
    torch.testing.assert_close(results[1][1], results[0][1], rtol=1e-14, atol=1e-14)


KERNEL_CASES = [
    ("llama", lambda q, k, c, s: FORM["llama"](q, k, c, s), 16),
    ("neox", lambda q, k, c, s: FORM["neox"](q, k, c, s), 8),
    ("cast_back", lambda q, k, c, s: FORM["cast_back"](q, k, c.float(), s.float()), 16),
    ("interleaved_float", lambda q, k, c, s: FORM["interleaved_float"](q, k, c, s), 16),
    ("float_then_cast", lambda q, k, c, s: FORM["float_then_cast"](q, k, c, s), 16),
    ("pairwise_partial", lambda q, k, c, s: FORM["pairwise_partial"](q, k, c, s), 8),
    ("pairwise", lambda q, k, c, s: FORM["pairwise"](q, k, c, s), 16),
    ("half_width", lambda q, k, c, s: FORM["half_width"](q, k, c, s), 8),
    ("deinterleave", lambda q, k, c, s: FORM["deinterleave"](q, k, c, s), 16),
    ("single", lambda q, k, c, s: (FORM["single"](q, c, s),), 16),
    ("gptj", lambda q, k, c, s: (FORM["gptj"](q.transpose(1, 2)[..., :8], s[..., :4],
                                              c[..., :4]),), 8),
]


@pytest.mark.parametrize("name, form, width", KERNEL_CASES, ids=[c[0] for c in KERNEL_CASES])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("length", [1, 7])
def test_the_kernel_writes_every_form_in_the_layouts_models_use(name, form, width, dtype,
                                                                 length, monkeypatch):
    """A prefill and a decoding step, as attention modules lay them out: the kernel
    computes each result (a rotation per tensor: one call each, or one call for a
    decoding step's query and key), torch's expression none.  On the device path: device
    operations alone, no kernel call."""
    calls = count_kernel_rotations(monkeypatch)
    g = torch.Generator().manual_seed(5)
    q = torch.randn(2, length, 4, 16, generator=g).to(dtype).transpose(1, 2)
    k = torch.randn(2, length, 1, 16, generator=g).to(dtype).transpose(1, 2)
    cos = torch.randn(2, length, width, generator=g).to(dtype)
    sin = torch.randn(2, length, width, generator=g).to(dtype)
    results = form(q, k, cos, sin)
    assert len(calls) == by_path(kernel=len(results), device=0)


def test_an_output_by_address_whose_size_would_overflow_is_declined():
    """The decoding step passes its new outputs by address alone, shaped as
    their sources; a source claiming more elements than memory has (only a
    caller of the private binding can) is declined, nothing written, as every
    other case the kernel does not take."""
    from sinpe import _core

    code = tensors._DTYPE_CODES[torch.float32]
    cos, sin = (torch.randn(1, 1, 8) for _ in range(2))
    out = torch.zeros(1, 1, 1, 8)
    huge = (out.data_ptr(), (2**40, 2**40, 1, 8), (2**40 * 8, 8, 8, 1), code)
    memory = lambda t: (t.data_ptr(), t.shape, t.stride(), code)  # noqa: E731
    assert _core._apply_rotary(out.data_ptr(), huge, None, None, memory(cos), memory(sin), 1,
                               1) is False
    assert not out.any()
    q = torch.randn(1, 1, 1, 8)
    assert _core._apply_rotary(out.data_ptr(), memory(q), None, None, memory(cos), memory(sin),
                               1, 1) is True
    assert torch.equal(out, modeling("llama").apply_rotary_pos_emb(q, q, cos, sin, 1)[0])


def test_caches_whose_size_would_overflow_are_declined():
    """The caches must have a new tensor's strides; a cache claiming more
    elements than memory has (only a caller of the private binding can) is
    declined, nothing written, its strides compared without overflowing."""
    from sinpe import _core

    code = tensors._DTYPE_CODES[torch.float32]
    memory = lambda t: (t.data_ptr(), t.shape, t.stride(), code)  # noqa: E731
    cos = torch.randn(1, 1, 8)
    huge = (cos.data_ptr(), (2**40, 2**40, 8), (2**40 * 8, 8, 1), code)
    q, out = torch.randn(1, 1, 1, 8), torch.zeros(1, 1, 1, 8)
    assert _core._apply_rotary(out.data_ptr(), memory(q), None, None, huge, huge, 1, 1) is False
    assert not out.any()
