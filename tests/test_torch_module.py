"""sinpe.torch: the PositionalEncoding drop-in, encode() and add_() for tensors.

The two seed classes are re-implemented here verbatim (apart from layout):
seed 002 / The Annotated Transformer (batch-first, ``pe`` is ``(1, max_len, d)``)
and seed 001 / pytorch/examples word_language_model (seq-first, ``(max_len, 1, d)``).

Float32 bound between a seed class and sinpe (u = 2**-24, the float32 unit
roundoff; first order; p = position, w = exact frequency <= 1, |ln w| <= ln n):
  c     = fl32(-ln(n) / d)                   relative error <= u
  a     = fl32(2k * c)                       relative error <= 2u (c's and the product's)
  w~    = exp_f32(a) = exp(a)(1 + e)         |e| <= 2u (torch's float32 exp: <= 1 ulp)
          exp(a(1 + t)) = w * exp(t * ln w)  -> relative |ln w| * 2u <= 2u ln n
  th~   = fl32(p * w~)                       p is exact in float32 (< 2**24): +u
  so |th~ - p w| <= p * (2 ln n + 3) * u
  sin/cos in float32 add <= 1 ulp, <= 2u for |value| <= 1 (1.0 has ulp 2u)
  |seed - exact|  <= p (2 ln n + 3) u + 2u;   |sinpe - exact| <= u (DESIGN.md)
For max_len = 5000, n = 1e4 this is about 1.07e5 u = 6.4e-3: the seed recipes
really do drift (~4e-4 measured); sinpe's own accuracy is tested against the
float64 reference with the 2**-24 bound instead.
"""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from conftest import U32, bfloat16_rounded_once, bits, table64

import sinpe


def seed_classes(torch):
    nn = torch.nn

    # Seed 002 (Hunter Phillips, from The Annotated Transformer): batch-first.
    from reference.seeds import Seed002PositionalEncoding as AnnotatedPositionalEncoding

    class WordLanguageModelPositionalEncoding(nn.Module):
        """Seed 001 (pytorch/examples word_language_model/model.py): seq-first."""

        def __init__(self, d_model, dropout=0.1, max_len=5000):
            super().__init__()
            self.dropout = nn.Dropout(p=dropout)
            pe = torch.zeros(max_len, d_model)
            position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
            div_term = torch.exp(
                torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model)
            )
            pe[:, 0::2] = torch.sin(position * div_term)
            pe[:, 1::2] = torch.cos(position * div_term)
            pe = pe.unsqueeze(0).transpose(0, 1)
            self.register_buffer("pe", pe)

        def forward(self, x):
            x = x + self.pe[: x.size(0), :]
            return self.dropout(x)

    return {True: AnnotatedPositionalEncoding, False: WordLanguageModelPositionalEncoding}


def seed_bound(max_position: int, n: float = 10000.0) -> float:
    """|seed class - sinpe| for positions <= max_position (module docstring)."""
    return (max_position * (2.0 * math.log(n) + 3.0) + 3.0) * U32


def embeddings(torch, batch_first, length, d, batch=2, dtype=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (batch, length, d) if batch_first else (length, batch, d)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype or torch.float32)


@pytest.fixture
def st(torch):
    import sinpe.torch as st

    return st


# -- import behaviour ---------------------------------------------------------


def run_python(code: str, tmp_path) -> subprocess.CompletedProcess:
    # cwd = tmp_path so the uncompiled source tree is not first on sys.path.
    return subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_import_sinpe_does_not_import_torch(tmp_path):
    proc = run_python("import sys, sinpe; print('torch' in sys.modules)", tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"


def test_import_sinpe_torch_without_torch_names_the_install_command(tmp_path):
    # A None entry in sys.modules makes `import torch` raise ImportError, as if absent.
    code = "import sys; sys.modules['torch'] = None\nimport sinpe.torch"
    proc = run_python(code, tmp_path)
    assert proc.returncode != 0
    assert "ImportError: sinpe.torch needs PyTorch" in proc.stderr
    assert "pip install torch==2.13.0" in proc.stderr


# -- PositionalEncoding: buffer -------------------------------------------------


@pytest.mark.parametrize(
    "batch_first, shape", [(True, (1, 50, 6)), (False, (50, 1, 6))], ids=["batch", "seq"]
)
def test_buffer_named_pe_has_the_originals_shape(st, torch, batch_first, shape):
    module = st.PositionalEncoding(6, max_len=50, batch_first=batch_first)
    assert list(module.state_dict()) == ["pe"]
    assert tuple(module.pe.shape) == shape
    assert module.pe.dtype == torch.float32  # what the originals register


def test_buffer_is_sinpe_table_within_2_pow_minus_24_of_reference(st, torch):
    module = st.PositionalEncoding(64, max_len=5000)
    table = module.pe[0].numpy()
    assert np.array_equal(table, sinpe.encode(5000, 64))
    assert np.abs(table - table64(np.arange(5000), 64, 1e4)).max() <= U32


def test_buffer_filled_by_sinpe_out_into_its_own_memory_not_torch_math(st, torch, monkeypatch):
    def forbidden(*args, **kwargs):
        raise AssertionError("the table must not be computed by torch math")

    for name in ("sin", "cos", "exp", "pow", "arange"):
        monkeypatch.setattr(torch, name, forbidden)
    targets = []
    real_encode = sinpe.encode

    def spy(L, d, n=10000.0, **kwargs):
        out = kwargs.get("out")
        if out is not None:
            targets.append(out.__array_interface__["data"][0])
        return real_encode(L, d, n, **kwargs)

    monkeypatch.setattr(sinpe, "encode", spy)
    module = st.PositionalEncoding(16, max_len=40, batch_first=False)
    assert targets == [module.pe.data_ptr()]
    assert module.pe[7, 0, 0].item() == real_encode(8, 16)[7, 0]


@pytest.mark.parametrize("dtype", ["float16", "float64"])
def test_buffer_dtype_argument_rounds_once_from_double(st, torch, dtype):
    module = st.PositionalEncoding(10, max_len=300, dtype=getattr(torch, dtype))
    assert module.pe.dtype == getattr(torch, dtype)
    assert np.array_equal(module.pe[0].numpy(), sinpe.encode(300, 10, dtype=dtype))


def test_buffer_bfloat16_is_float64_table_rounded_once(st, torch):
    module = st.PositionalEncoding(10, max_len=300, dtype=torch.bfloat16)
    expected = bfloat16_rounded_once(torch, sinpe.encode(300, 10, dtype=np.float64))
    assert torch.equal(bits(torch, module.pe[0]), bits(torch, expected))


def test_base_n_is_used(st):
    module = st.PositionalEncoding(4, max_len=10, n=100.0)
    assert np.array_equal(module.pe[0].numpy(), sinpe.encode(10, 4, 100.0))


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"d_model": 0}, "d_model must be >= 1"),
        ({"d_model": 4, "max_len": -1}, "max_len must be in"),
        ({"d_model": 4, "max_len": 2**24 + 2}, "max_len must be in"),
        ({"d_model": 4, "n": 0.5}, "n must be"),
    ],
)
def test_bad_constructor_arguments_raise_value_error(st, kwargs, match):
    with pytest.raises(ValueError, match=match):
        st.PositionalEncoding(**kwargs)


# -- PositionalEncoding: the seed classes ------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False], ids=["annotated", "word_language_model"])
def test_seed_state_dict_loads_strict_and_reproduces_the_seed_exactly(st, torch, batch_first):
    seed = seed_classes(torch)[batch_first](32, 0.0, 200)
    module = st.PositionalEncoding(32, dropout=0.0, max_len=200, batch_first=batch_first)
    result = module.load_state_dict(seed.state_dict(), strict=True)
    assert not result.missing_keys and not result.unexpected_keys
    x = embeddings(torch, batch_first, 120, 32)
    assert torch.equal(module(x), seed(x))


@pytest.mark.parametrize("batch_first", [True, False], ids=["annotated", "word_language_model"])
def test_sinpe_state_dict_loads_strict_into_the_seed_class(st, torch, batch_first):
    seed = seed_classes(torch)[batch_first](32, 0.0, 200)
    module = st.PositionalEncoding(32, dropout=0.0, max_len=200, batch_first=batch_first)
    seed.load_state_dict(module.state_dict(), strict=True)
    assert torch.equal(seed.pe, module.pe)


@pytest.mark.parametrize("batch_first", [True, False], ids=["annotated", "word_language_model"])
def test_forward_agrees_with_seed_class_within_float32_bound(st, torch, batch_first):
    max_len, d = 5000, 64
    seed = seed_classes(torch)[batch_first](d, 0.0, max_len)
    module = st.PositionalEncoding(d, dropout=0.0, max_len=max_len, batch_first=batch_first)
    x = embeddings(torch, batch_first, max_len, d)
    ours, theirs = module(x), seed(x)
    # Each output is x + pe rounded once; |x + pe| < 8 here, so each rounding
    # is <= 2**-22 and the two together add at most 2**-21.
    assert x.abs().max().item() < 7.0
    bound = seed_bound(max_len - 1) + 2.0**-21
    assert (ours - theirs).abs().max().item() <= bound
    # And sinpe is the more accurate of the two (the point of the exercise).
    exact = table64(np.arange(max_len), d, 1e4)
    ours_pe = module.pe.reshape(max_len, d).numpy()
    theirs_pe = seed.pe.reshape(max_len, d).numpy()
    assert np.abs(ours_pe - exact).max() <= U32 < np.abs(theirs_pe - exact).max()


# -- PositionalEncoding: forward ---------------------------------------------------


@pytest.mark.parametrize("batch_first", [True, False])
def test_forward_adds_the_rows_for_offset(st, torch, batch_first):
    module = st.PositionalEncoding(8, dropout=0.0, max_len=64, batch_first=batch_first)
    x = embeddings(torch, batch_first, 5, 8)
    out = module(x, offset=7)
    table = torch.from_numpy(sinpe.encode(5, 8, offset=7))
    expected = x + (table.unsqueeze(0) if batch_first else table.unsqueeze(1))
    assert torch.equal(out, expected)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_forward_keeps_input_dtype_and_casts_the_exact_table_once(st, torch, dtype):
    dtype = getattr(torch, dtype)
    module = st.PositionalEncoding(16, dropout=0.0, max_len=100)
    x = embeddings(torch, True, 100, 16, dtype=dtype)
    out = module(x)
    assert out.dtype == dtype
    table32 = torch.from_numpy(sinpe.encode(100, 16))  # exact to 2**-24
    assert torch.equal(out, x + table32.to(dtype))
    # The cast table is within half an ulp of the target type (+ the float32
    # table's own 2**-24) of the exact values: it was never computed in half.
    half_ulp = {torch.float16: 2.0**-11, torch.bfloat16: 2.0**-8}.get(dtype, 0.0)
    exact = table64(np.arange(100), 16, 1e4)
    cast = table32.to(dtype).to(torch.float64).numpy()
    assert np.abs(cast - exact).max() <= half_ulp + U32


def test_forward_past_max_len_raises_value_error_naming_max_len(st, torch):
    module = st.PositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError, match="max_len >= 11"):
        module(torch.zeros(1, 11, 8))
    with pytest.raises(ValueError, match=r"offset=3 \.\. 10"):
        module(torch.zeros(1, 8, 8), offset=3)
    with pytest.raises(ValueError, match="offset=-1"):
        module(torch.zeros(1, 2, 8), offset=-1)
    assert module(torch.zeros(1, 10, 8)).shape == (1, 10, 8)  # exactly max_len is fine


def test_forward_rejects_wrong_rank_or_width(st, torch):
    module = st.PositionalEncoding(8, max_len=10)
    with pytest.raises(ValueError, match=r"3-D \(batch, seq, d_model\)"):
        module(torch.zeros(4, 8))
    with pytest.raises(ValueError, match="d_model=8"):
        module(torch.zeros(1, 4, 6))


def test_dropout_applies_in_training_only(st, torch):
    module = st.PositionalEncoding(8, dropout=0.5, max_len=100)
    x = torch.ones(4, 100, 8)
    torch.manual_seed(0)
    trained = module(x)
    assert (trained == 0).float().mean().item() > 0.3
    module.eval()
    assert torch.equal(module(x), x + module.pe[:, :100])


def test_gradient_flows_to_input_not_to_buffer(st, torch):
    module = st.PositionalEncoding(8, dropout=0.0, max_len=10)
    x = torch.randn(2, 10, 8, requires_grad=True)
    module(x).sum().backward()
    assert torch.equal(x.grad, torch.ones_like(x))
    assert not module.pe.requires_grad and list(module.parameters()) == []


# -- encode ---------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_encode_tensor_equals_sinpe_encode(st, torch, dtype):
    t = st.encode(33, 12, 500.0, offset=-7, dtype=getattr(torch, dtype))
    assert t.dtype == getattr(torch, dtype) and t.device.type == "cpu"
    assert np.array_equal(t.numpy(), sinpe.encode(33, 12, 500.0, offset=-7, dtype=dtype))


def test_encode_bfloat16_rounds_once_from_float64(st, torch):
    t = st.encode(2000, 64, dtype=torch.bfloat16)
    assert t.dtype == torch.bfloat16
    expected = bfloat16_rounded_once(torch, sinpe.encode(2000, 64, dtype="float64"))
    assert torch.equal(bits(torch, t), bits(torch, expected))


def test_bfloat16_reference_rounds_once_where_torch_rounds_twice(torch):
    # 1 + 2**-8 + 2**-30 is just above the halfway point between the bfloat16
    # neighbours 1 and 1 + 2**-7: rounded once it goes up; through float32
    # (which drops the 2**-30) it is an exact tie and goes to even, down.
    value = np.array([1.0 + 2.0**-8 + 2.0**-30])
    assert bfloat16_rounded_once(torch, value).item() == 1.0 + 2.0**-7
    assert torch.from_numpy(value).to(torch.bfloat16).item() == 1.0


def test_encode_honours_device(st, torch):
    t = st.encode(3, 4, device="meta")
    assert t.device.type == "meta" and t.shape == (3, 4)


def test_encode_errors_are_sinpes(st, torch):
    with pytest.raises(ValueError, match="L must be >= 0"):
        st.encode(-1, 4)
    with pytest.raises(TypeError, match="dtype must be"):
        st.encode(2, 4, dtype=torch.int32)
    with pytest.raises(TypeError, match="torch.dtype"):
        st.encode(2, 4, dtype="float32")


# -- add_ -----------------------------------------------------------------------------


@pytest.mark.parametrize("axis", [-2, 0])
def test_add_matches_numpy_add_in_place(st, torch, axis):
    x = torch.randn(6, 5, 8)
    expected = x.numpy().copy()
    sinpe.add_(expected, 100.0, offset=3, axis=axis, scale=2.0)
    assert st.add_(x, 100.0, offset=3, axis=axis, scale=2.0) is x
    assert np.array_equal(x.numpy(), expected)


def test_add_into_non_contiguous_view(st, torch):
    base = torch.zeros(5, 8, 4)
    view = base.transpose(0, 1)  # (8, 5, 4): positions along axis -2 with a big stride
    st.add_(view)
    assert torch.equal(base.transpose(0, 1)[0], torch.from_numpy(sinpe.encode(5, 4)))


def test_add_bumps_the_autograd_version_so_saved_tensors_are_checked(st, torch):
    w = torch.ones(2, 3, 4, requires_grad=True)
    x = torch.randn(2, 3, 4)
    y = (w * x).sum()  # saves x for the backward pass
    version = x._version
    st.add_(x)
    assert x._version > version
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda t: [[0.0]], TypeError, "torch.Tensor"),
        (lambda t: t.zeros(2, 3, dtype=t.int32), TypeError, "must have dtype"),
        (lambda t: t.zeros(2, 3, requires_grad=True), ValueError, "requires grad"),
        (lambda t: t.zeros(1, 3, 4).expand(2, 3, 4), ValueError, "share memory"),
    ],
    ids=["list", "int", "grad", "expanded"],
)
def test_add_rejects_what_it_cannot_change_in_place(st, torch, make, error, match):
    with pytest.raises(error, match=match):
        st.add_(make(torch))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_add_bad_offset_raises_and_writes_nothing(st, torch, dtype):
    x = torch.zeros(3, 4, 8, dtype=getattr(torch, dtype))
    with pytest.raises(ValueError, match="beyond the supported bound"):
        st.add_(x, offset=2**24 - 2)
    assert not x.any()


def test_module_help_documents_max_len_and_dtypes(st):
    doc = st.PositionalEncoding.__doc__
    assert "past ``max_len`` raise ``ValueError``" in " ".join(doc.split())
    assert "bfloat16" in doc
    assert Path(st.__file__).parts[-2:] == ("torch", "__init__.py")

