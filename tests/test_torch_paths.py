"""sinpe.torch in every deployment path, on every device, and add_'s contract.

* PositionalEncoding under torch.jit.script (and save/load), torch.jit.trace,
  torch.compile(fullgraph=True), torch.export and ONNX export (run by onnx's
  reference evaluator): each gives eager's exact output, for other sequence
  lengths too where the path allows it.
* Default-device contexts: a meta module holds a meta buffer (nothing is
  computed); explicit CPU devices still get the kernel's table.
* add_'s contract: the result has exactly the bits of torch's
  ``t * s + table`` (``t + table`` for s == 1), table = encode(...) in t's
  dtype.  Two paths must keep it: the CPU kernel, and torch's own ops
  (``t.mul_(s).add_(table)``) used off the CPU, forced here on the CPU.
* Errors: documented types only, raised before anything is written.
"""

from __future__ import annotations

import io
import warnings

import numpy as np
import pytest
from conftest import bits, kernel_path

import sinpe

DTYPES = ["float16", "bfloat16", "float32", "float64"]

# torch 2.13 deprecates TorchScript (script, trace, save, load) but runs it.
pytestmark = pytest.mark.filterwarnings(
    r"ignore:`torch\.jit\.\w+` is deprecated:DeprecationWarning"
)


@pytest.fixture
def st(torch):
    import sinpe.torch as st
    from sinpe.torch import _tables

    _tables._TABLES.clear()
    yield st
    _tables._TABLES.clear()


@pytest.fixture
def tables(st):
    """sinpe.torch's module of tables (add_'s device table cache)."""
    from sinpe.torch import _tables

    return _tables


def force_torch_ops(monkeypatch):
    """sinpe.torch writes through torch's ops (the off-CPU path) even on the CPU."""
    from sinpe.torch import _tensors

    monkeypatch.setattr(_tensors, "_kernel_writes", lambda tensor: False)


@pytest.fixture
def torch_path(st, monkeypatch):
    """add_ writes through torch's ops (the off-CPU path) even on the CPU."""
    force_torch_ops(monkeypatch)


def module_and_input(st, torch, batch_first, length=5, d=8, max_len=16, seed=0):
    """An evaluating module (its dropout is the identity, as deployed) and an input."""
    module = st.PositionalEncoding(d, dropout=0.1, max_len=max_len, batch_first=batch_first)
    g = torch.Generator().manual_seed(seed)
    shape = (2, length, d) if batch_first else (length, 2, d)
    return module.eval(), torch.randn(shape, generator=g)


def other_length(torch, x, batch_first, length):
    shape = list(x.shape)
    shape[1 if batch_first else 0] = length
    return torch.randn(shape, generator=torch.Generator().manual_seed(length))


def same_bits(torch, a, b) -> bool:
    return a.dtype == b.dtype and a.shape == b.shape and torch.equal(bits(torch, a), bits(torch, b))


LAYOUTS = pytest.mark.parametrize("batch_first", [True, False], ids=["batch_first", "seq_first"])


# -- deployment paths of PositionalEncoding --------------------------------------------


@LAYOUTS
def test_jit_script_gives_eager_bits_and_survives_save_and_load(st, torch, batch_first):
    module, x = module_and_input(st, torch, batch_first)
    scripted = torch.jit.script(module)
    buffer = io.BytesIO()
    torch.jit.save(scripted, buffer)
    buffer.seek(0)
    loaded = torch.jit.load(buffer)
    longer = other_length(torch, x, batch_first, 11)
    for compiled in (scripted, loaded):
        assert same_bits(torch, compiled(x), module(x))
        assert same_bits(torch, compiled(x, 7), module(x, 7))
        assert same_bits(torch, compiled(longer), module(longer))
    # TorchScript raises torch.jit.Error, carrying the eager ValueError's message.
    with pytest.raises(torch.jit.Error, match=r"ValueError: .*max_len >= 17"):
        scripted(other_length(torch, x, batch_first, 17))


@LAYOUTS
def test_jit_trace_gives_eager_bits_for_other_lengths_without_tracer_warnings(
    st, torch, batch_first
):
    module, x = module_and_input(st, torch, batch_first)
    with warnings.catch_warnings():
        warnings.simplefilter("error", torch.jit.TracerWarning)
        traced = torch.jit.trace(module, (x,))
    assert same_bits(torch, traced(x), module(x))
    # The trace recorded x's size as an operation, as it does for the originals.
    longer = other_length(torch, x, batch_first, 12)
    assert same_bits(torch, traced(longer), module(longer))


@LAYOUTS
def test_torch_compile_fullgraph_gives_eager_bits(st, torch, batch_first):
    module, x = module_and_input(st, torch, batch_first)
    compiled = torch.compile(module, fullgraph=True)
    assert same_bits(torch, compiled(x), module(x))
    assert same_bits(torch, compiled(x, offset=3), module(x, offset=3))
    # fullgraph allows no raise inside the graph: torch reports it with our message.
    with pytest.raises(torch._dynamo.exc.Unsupported, match="max_len >= 17"):
        compiled(other_length(torch, x, batch_first, 17))


@LAYOUTS
def test_torch_export_with_dynamic_length_gives_eager_bits(st, torch, batch_first):
    module, x = module_and_input(st, torch, batch_first)
    seq = torch.export.Dim("seq", max=module.max_len)
    program = torch.export.export(module, (x,), dynamic_shapes=({1 if batch_first else 0: seq},))
    assert same_bits(torch, program.state_dict["pe"], module.pe)  # the buffer, not torch math
    run = program.module()
    for length in (1, 5, 16):
        y = other_length(torch, x, batch_first, length)
        assert same_bits(torch, run(y), module(y))
    with_offset = torch.export.export(module, (x,), {"offset": 3})
    assert same_bits(torch, with_offset.module()(x, offset=3), module(x, offset=3))


@pytest.mark.filterwarnings(  # raised inside torch's exporter
    r"ignore:`isinstance\(treespec, LeafSpec\)` is deprecated:FutureWarning"
)
@pytest.mark.needs("onnx", "onnxscript")  # onnxscript: torch's ONNX exporter imports it
def test_onnx_export_runs_with_the_table_as_initializer(st, torch):
    import onnx
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    module, x = module_and_input(st, torch, True)
    seq = torch.export.Dim("seq", max=module.max_len)
    program = torch.onnx.export(module, (x,), dynamic_shapes=({1: seq},), dynamo=True,
                                verbose=False)
    model = program.model_proto
    onnx.checker.check_model(model)
    initializers = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    tables = [a for a in initializers.values() if a.shape == tuple(module.pe.shape)]
    assert len(tables) == 1 and np.array_equal(tables[0], module.pe.numpy())
    evaluator = ReferenceEvaluator(model)
    for length in (5, 9):
        y = other_length(torch, x, True, length)
        (out,) = evaluator.run(None, {model.graph.input[0].name: y.numpy()})
        assert same_bits(torch, torch.from_numpy(out), module(y))


# -- devices of PositionalEncoding and encode -------------------------------------------


@pytest.fixture
def encode_calls(monkeypatch):
    """Records (L, d, data address of out= or None) of every sinpe.encode call."""
    calls = []
    real = sinpe.encode

    def spy(L, d, *args, **kwargs):
        out = kwargs.get("out")
        calls.append((L, d, None if out is None else out.__array_interface__["data"][0]))
        return real(L, d, *args, **kwargs)

    monkeypatch.setattr(sinpe, "encode", spy)
    return calls


@pytest.mark.parametrize("how", ["with torch.device", "set_default_device", "device="])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_module_built_on_meta_holds_a_meta_buffer_and_computes_no_table(
    st, torch, encode_calls, how, dtype
):
    dtype = getattr(torch, dtype)
    if how == "with torch.device":
        with torch.device("meta"):
            module = st.PositionalEncoding(64, max_len=5000, batch_first=False, dtype=dtype)
    elif how == "set_default_device":
        torch.set_default_device("meta")
        try:
            module = st.PositionalEncoding(64, max_len=5000, batch_first=False, dtype=dtype)
        finally:
            torch.set_default_device(None)
    else:
        module = st.PositionalEncoding(64, max_len=5000, batch_first=False, dtype=dtype,
                                       device="meta")
    assert module.pe.device.type == "meta"
    assert module.pe.shape == (5000, 1, 64) and module.pe.dtype == dtype
    assert encode_calls and all(d < 64 or L < 5000 for L, d, _ in encode_calls)  # checks only
    assert module(torch.empty(7, 2, 64, device="meta", dtype=dtype)).shape == (7, 2, 64)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_meta_module_to_empty_then_reset_parameters_equals_a_cpu_module(st, torch, dtype):
    dtype = getattr(torch, dtype)
    with torch.device("meta"):
        module = st.PositionalEncoding(24, max_len=300, dtype=dtype)
    module.to_empty(device="cpu")
    module.reset_parameters()
    cpu = st.PositionalEncoding(24, max_len=300, dtype=dtype)
    assert module.pe.device.type == "cpu" and same_bits(torch, module.pe, cpu.pe)


def test_meta_module_loads_a_state_dict_with_assign(st, torch):
    with torch.device("meta"):
        module = st.PositionalEncoding(16, max_len=40)
    cpu = st.PositionalEncoding(16, max_len=40)
    module.load_state_dict(cpu.state_dict(), strict=True, assign=True)
    assert same_bits(torch, module.pe, cpu.pe)


def test_reset_parameters_rewrites_the_table_in_place(st, torch):
    module = st.PositionalEncoding(16, max_len=40, batch_first=False)
    table = module.pe.clone()
    address = module.pe.data_ptr()
    module.pe.zero_()
    module.reset_parameters()
    assert module.pe.data_ptr() == address and same_bits(torch, module.pe, table)


@kernel_path("writes into the buffer's own memory",
             "copies rows of its kept table into the buffer")
def test_reset_parameters_has_the_kernel_write_the_buffer(st, torch, encode_calls):
    module = st.PositionalEncoding(16, max_len=40, batch_first=False)
    address = module.pe.data_ptr()
    module.reset_parameters()
    assert encode_calls[-1] == (40, 16, address)


def test_explicit_cpu_device_inside_a_meta_context_gets_the_kernel_table(st, torch):
    with torch.device("meta"):
        module = st.PositionalEncoding(16, max_len=40, device="cpu")
        table = st.encode(40, 16, device="cpu")
        default = st.encode(40, 16)
    expected = torch.from_numpy(sinpe.encode(40, 16))
    assert same_bits(torch, module.pe[0], expected) and same_bits(torch, table, expected)
    assert default.device.type == "meta" and default.shape == (40, 16)


def test_module_follows_the_default_dtype_like_the_originals(st, torch):
    from reference.seeds import Seed002PositionalEncoding

    before = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        module = st.PositionalEncoding(8, max_len=20)
        seed = Seed002PositionalEncoding(8, 0.1, 20)
    finally:
        torch.set_default_dtype(before)
    assert module.pe.dtype == seed.pe.dtype == torch.float64
    assert same_bits(torch, module.pe[0], torch.from_numpy(sinpe.encode(20, 8, dtype="f8")))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float64"])
def test_encode_meta_validates_like_the_cpu(st, torch, dtype):
    dtype = getattr(torch, dtype)
    assert st.encode(3, 4, dtype=dtype, device="meta").dtype == dtype
    for device in ("meta", "cpu"):
        with pytest.raises(ValueError, match="beyond the supported bound"):
            st.encode(10, 4, offset=2**24 - 2, dtype=dtype, device=device)
        with pytest.raises(ValueError, match="d must be >= 1"):
            st.encode(10, 0, dtype=dtype, device=device)


def test_device_errors_are_value_errors(st, torch):
    with pytest.raises(ValueError, match="not a torch device"):
        st.encode(2, 2, device="no-such-device")
    if not torch.cuda.is_available():  # built on the CPU, then the move fails
        with pytest.raises(ValueError, match="cannot place the table on device cuda"):
            st.encode(2, 2, device="cuda")
        with pytest.raises(ValueError, match="cannot place the table"):
            st.PositionalEncoding(2, max_len=3, device="cuda")


def test_tables_too_large_raise_overflow_or_memory_error(st, torch):
    with pytest.raises(MemoryError):
        st.encode(2**24, 2**20, dtype=torch.bfloat16)  # 32 TiB
    with pytest.raises(OverflowError):
        st.encode(2**24, 2**62, dtype=torch.bfloat16, device="meta")
    with pytest.raises(MemoryError):
        st.PositionalEncoding(2**40, max_len=5000)


# -- add_: the contract, on both paths -------------------------------------------------


CASES = [((3, 37, 24), -2), ((37, 3, 24), 0), ((2, 3, 37, 9), 2)]
SCALES = [1.0, 512**0.5, 0.1]


def contract(st, torch, x, offset, axis, scale):
    """torch's own ``x * scale + table`` (``x + table`` for scale == 1), out of place."""
    position_axis = axis % x.dim()
    L, d = x.shape[position_axis], x.shape[-1]
    shape = [1] * x.dim()
    shape[position_axis], shape[-1] = L, d
    table = st.encode(L, d, offset=offset, dtype=x.dtype).view(shape)
    return x + table if scale == 1.0 else x * scale + table


def sample(torch, shape, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (4.0 * torch.randn(shape, generator=g, dtype=torch.float64)).to(dtype)


def check_contract(st, torch, dtype, shape, axis, scale):
    x = sample(torch, shape, getattr(torch, dtype))
    expected = contract(st, torch, x, 5, axis, scale)
    assert st.add_(x, offset=5, axis=axis, scale=scale) is x
    assert same_bits(torch, x, expected), f"{(x != expected).sum().item()} elements differ"


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("shape, axis", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_by_the_kernel_gives_the_contract_bits(st, torch, dtype, shape, axis, scale):
    check_contract(st, torch, dtype, shape, axis, scale)


@pytest.mark.parametrize("scale", SCALES)
@pytest.mark.parametrize("shape, axis", CASES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_add_by_torch_ops_gives_the_contract_bits(st, torch, torch_path, dtype, shape, axis,
                                                 scale):
    check_contract(st, torch, dtype, shape, axis, scale)


def test_add_by_torch_ops_does_not_hand_the_tensor_to_the_kernel(st, torch, torch_path,
                                                                 monkeypatch):
    arrays = []
    real = sinpe.add_

    def spy(array, *args, **kwargs):
        arrays.append(array.size)
        return real(array, *args, **kwargs)

    monkeypatch.setattr(sinpe, "add_", spy)
    x = torch.randn(2, 6, 4)
    version = x._version
    st.add_(x)
    assert arrays == [0]  # only the argument check, on an array without elements
    assert x._version > version


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_add_to_a_negative_view_writes_the_negated_memory(st, torch, dtype):
    memory = sample(torch, (2, 9, 6), getattr(torch, dtype))
    before = memory.clone()
    view = torch._neg_view(memory)
    assert view.is_neg()
    expected = contract(st, torch, view.resolve_neg(), 0, -2, 2.0)
    assert st.add_(view, scale=2.0) is view
    assert same_bits(torch, view.resolve_neg(), expected)
    assert same_bits(torch, memory, -expected) and not torch.equal(memory, before)


def test_add_under_vmap_writes_every_sample(st, torch):
    # vmap's batched tensors have no memory NumPy can see: torch's ops write them.
    x = sample(torch, (3, 2, 5, 4), torch.float32)
    expected = contract(st, torch, x, 7, -2, 0.5)
    torch.vmap(lambda sample: st.add_(sample, offset=7, scale=0.5))(x)
    assert same_bits(torch, x, expected)


def test_add_inside_inference_mode_changes_inference_tensors(st, torch):
    with torch.inference_mode():
        x = torch.zeros(2, 5, 4)
        assert st.add_(x) is x
        assert same_bits(torch, x[1], st.encode(5, 4))


def test_add_meta_tensor_keeps_its_shape(st, torch):
    x = torch.empty(2, 5, 4, device="meta", dtype=torch.bfloat16)
    assert st.add_(x, offset=3, scale=2.0) is x and x.shape == (2, 5, 4)
    with pytest.raises(ValueError, match="beyond the supported bound"):
        st.add_(x, offset=2**24)


# -- add_: the device table cache -------------------------------------------------------


def count_tables(tables, monkeypatch):
    built = []
    real = tables._table

    def spy(L, d, n, offset, dtype, device):
        built.append((L, d, offset, dtype, device.type))
        return real(L, d, n, offset, dtype, device)

    monkeypatch.setattr(tables, "_table", spy)
    return built


def test_add_off_the_cpu_reuses_one_table_per_device_and_arguments(st, tables, torch,
                                                                   torch_path, monkeypatch):
    built = count_tables(tables, monkeypatch)
    for _ in range(3):
        st.add_(torch.zeros(2, 5, 4))
    assert built == [(tables.MIN_ROWS, 4, 0, torch.float32, "cpu")]
    st.add_(torch.zeros(2, 5, 4), offset=1)  # other rows of the same table
    assert len(built) == 1
    st.add_(torch.zeros(2, 5, 4, dtype=torch.float64))  # other dtype
    st.add_(torch.zeros(2, 5, 4), 500.0)  # other base
    st.add_(torch.empty(2, 5, 4, device="meta"))  # other device
    assert len(built) == 4 and len(tables._TABLES) == 4
    x = torch.zeros(3, 5, 4)  # another batch, the same table
    st.add_(x)
    assert len(built) == 4 and same_bits(torch, x[2], st.encode(5, 4))


def test_a_decoding_loop_grows_the_table_by_doubling(st, tables, torch, torch_path,
                                                     monkeypatch):
    built = count_tables(tables, monkeypatch)
    for offset in range(0, 1000):  # one position per step, as a decoding loop adds
        x = torch.zeros(1, 1, 8)
        st.add_(x, offset=offset)
        assert same_bits(torch, x[0], torch.from_numpy(sinpe.encode(1, 8, offset=offset)))
    assert [rows for rows, *_ in built] == [64, 128, 256, 512, 1024]


def test_device_table_cache_is_bounded_least_recently_used_first(st, tables, torch, torch_path,
                                                                 monkeypatch):
    built = count_tables(tables, monkeypatch)
    monkeypatch.setattr(tables, "_TABLES", tables._TableCache(max_tables=2, max_bytes=1000))
    cpu = torch.device("cpu")
    for n in (100.0, 200.0, 100.0, 300.0):  # 100 is used again before 300 arrives: 200 goes
        st.add_(torch.zeros(1, 5, 4), n)
    assert len(tables._TABLES) == 2 and len(built) == 3
    st.add_(torch.zeros(1, 5, 4), 100.0)
    assert len(built) == 3  # still kept
    st.add_(torch.zeros(1, 5, 4), 200.0)
    assert len(built) == 4  # was evicted
    st.add_(torch.zeros(1, 60, 4))  # 960 bytes: fits alone, pushes out the rest
    assert tables._TABLES.nbytes(cpu) <= 1000 and len(tables._TABLES) == 1
    x = torch.zeros(1, 300, 4)  # 4800 bytes: made by device operations, never kept
    st.add_(x)
    assert len(built) == 5 and tables._TABLES.nbytes(cpu) <= 1000
    assert len(tables._TABLES) == 1
    exact = torch.from_numpy(sinpe.encode(300, 4, dtype=np.float64))
    assert ((x[0].double() - exact).abs() <= half_ulp(torch, exact) + 2.0**-30).all()


def half_ulp(torch, exact):
    """Half the float32 spacing at each value of a float64 tensor."""
    f32 = exact.float()
    return (f32.nextafter(f32 + 1).double() - f32.double()).abs() / 2


# -- add_: errors --------------------------------------------------------------------------


def inference_tensor(torch):
    with torch.inference_mode():
        return torch.ones(2, 3, 4)


# name: (make the tensor, add_'s keywords, error type, message)
REFUSALS = {
    "inference tensor": (inference_tensor, {}, ValueError, "inference tensor"),
    "requires grad": (lambda t: t.ones(2, 3, 4, requires_grad=True), {}, ValueError,
                      "requires grad"),
    "expanded": (lambda t: t.ones(1, 3, 4).expand(2, 3, 4), {}, ValueError, "share memory"),
    "integer": (lambda t: t.ones(2, 3, 4, dtype=t.int32), {}, TypeError, "must have dtype"),
    "sparse": (lambda t: t.ones(2, 3, 4).to_sparse(), {}, TypeError, "strided"),
    "one axis": (lambda t: t.ones(4), {}, ValueError, "at least 2 axes"),
    "feature axis": (lambda t: t.ones(2, 3, 4), {"axis": 2}, ValueError, "feature axis"),
    "axis range": (lambda t: t.ones(2, 3, 4), {"axis": 3}, ValueError, "out of range"),
    "offset": (lambda t: t.ones(2, 3, 4), {"offset": 2**24 - 1}, ValueError, "beyond"),
    "float offset": (lambda t: t.ones(2, 3, 4), {"offset": 1.0}, TypeError, "offset"),
    "huge offset": (lambda t: t.ones(2, 3, 4), {"offset": 2**70}, OverflowError, "offset"),
    "scale": (lambda t: t.ones(2, 3, 4), {"scale": float("inf")}, ValueError, "scale"),
    "base": (lambda t: t.ones(2, 3, 4), {"n": 0.5}, ValueError, "n must be"),
}


@pytest.mark.parametrize("path", ["kernel", "torch ops"])
@pytest.mark.parametrize("case", list(REFUSALS))
def test_add_refuses_with_documented_errors_and_writes_nothing(st, torch, monkeypatch, path,
                                                              case):
    if path == "torch ops":
        force_torch_ops(monkeypatch)
    make, kwargs, error, match = REFUSALS[case]
    tensor = make(torch)
    values = tensor.detach().to_dense().clone()
    version = None if tensor.is_inference() else tensor._version
    with pytest.raises(error, match=match):
        st.add_(tensor, **kwargs)
    assert torch.equal(tensor.detach().to_dense(), values)
    assert version is None or tensor._version == version
