"""Where the table goes: ``out=`` of any layout, ``offset``, odd ``d``, ``L = 0``, dtype spellings.

The expected values are always sinpe's own C-contiguous table of the same
dtype: these tests are about layout, so every comparison is bit-exact, and
elements of a bigger buffer that ``out`` does not cover must stay untouched.
"""
from __future__ import annotations

import numpy as np
import pytest

import sinpe
from conftest import double_error_bound, numpy_add, positions_of, sinpe_double_bound, table64

DTYPES = [np.float16, np.float32, np.float64]
L, D = 70, 13  # 70 rows cross several restart blocks; odd d


def bits(a: np.ndarray) -> np.ndarray:
    a = a.astype(a.dtype.newbyteorder("="), copy=False)
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


def sentinel_buffer(shape, dtype):
    buf = np.empty(shape, dtype)
    buf[...] = -7.0  # no encoding value is -7
    return buf


def expected(dtype, rows=L, d=D, n=10000.0, offset=0):
    return sinpe.encode(rows, d, n, offset=offset, dtype=dtype)


def assert_same_bits(actual, want):
    np.testing.assert_array_equal(bits(np.asarray(actual)), bits(np.asarray(want)))


@pytest.mark.parametrize("dtype", DTYPES)
def test_new_array_is_c_contiguous_owned_and_writeable(dtype):
    t = sinpe.encode(L, D, dtype=dtype)
    assert t.shape == (L, D) and t.dtype == dtype
    assert t.flags.c_contiguous and t.flags.writeable and t.flags.owndata


def test_default_dtype_is_float32():
    assert sinpe.encode(3, 4).dtype == np.float32
    assert sinpe.encode(3, 4, dtype=None).dtype == np.float32


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_every_other_row_and_column(dtype):
    big = sentinel_buffer((2 * L, 2 * D + 1), dtype)
    out = big[::2, 1::2]
    assert out.shape == (L, D) and not out.flags.c_contiguous
    assert sinpe.encode(L, D, out=out) is out
    assert_same_bits(out, expected(dtype))
    untouched = np.ones(big.shape, bool)
    untouched[::2, 1::2] = False
    assert (big[untouched] == -7.0).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_transposed(dtype):
    out = np.empty((D, L), dtype).T
    assert out.flags.f_contiguous and not out.flags.c_contiguous
    assert sinpe.encode(L, D, out=out) is out
    assert_same_bits(out, expected(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_negative_strides(dtype):
    big = sentinel_buffer((L + 2, D + 2), dtype)
    out = big[-2:0:-1, -2:0:-1]
    assert out.shape == (L, D) and out.strides[0] < 0 and out.strides[1] < 0
    assert sinpe.encode(L, D, out=out) is out
    assert_same_bits(out, expected(dtype))
    assert (big[0] == -7).all() and (big[-1] == -7).all()
    assert (big[:, 0] == -7).all() and (big[:, -1] == -7).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_memmap(dtype, tmp_path):
    path = tmp_path / "pe.bin"
    mm = np.memmap(path, dtype=dtype, mode="w+", shape=(L, D))
    assert sinpe.encode(L, D, out=mm) is mm
    mm.flush()
    del mm
    on_disk = np.fromfile(path, dtype=dtype).reshape(L, D)
    assert_same_bits(on_disk, expected(dtype))


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_non_native_byte_order(dtype):
    swapped = np.dtype(dtype).newbyteorder("S")
    out = np.empty((L, D), swapped)
    assert not out.dtype.isnative
    assert sinpe.encode(L, D, out=out) is out
    assert out.dtype == swapped
    assert_same_bits(out, expected(dtype))  # bits() reads it in native order


def test_out_big_endian_f4_spelling():
    out = np.empty((L, D), ">f4")
    sinpe.encode(L, D, 100.0, offset=5, out=out)
    assert_same_bits(out, expected(np.float32, n=100.0, offset=5))


@pytest.mark.parametrize("dtype", DTYPES)
def test_out_dtype_follows_out_and_explicit_matching_dtype_is_accepted(dtype):
    out = np.empty((L, D), dtype)
    assert sinpe.encode(L, D, out=out) is out
    assert_same_bits(out, expected(dtype))
    out2 = np.empty((L, D), dtype)
    assert sinpe.encode(L, D, dtype=dtype, out=out2) is out2
    assert_same_bits(out2, out)


def test_out_torch_buffers_hold_the_table(torch):
    t = torch.empty(L, D)
    out = t.numpy()
    assert sinpe.encode(L, D, out=out) is out
    assert torch.equal(t, torch.from_numpy(expected(np.float32)))

    # seed 000's batch-first (1, L, d) buffer and seed 001's seq-first (L, 1, d)
    batch_first = torch.zeros(1, L, D)
    sinpe.encode(L, D, out=batch_first[0].numpy())
    assert torch.equal(batch_first[0], torch.from_numpy(expected(np.float32)))
    seq_first = torch.zeros(L, 3, D, dtype=torch.float64)
    sinpe.encode(L, D, out=seq_first[:, 1, :].numpy())
    assert torch.equal(seq_first[:, 1, :], torch.from_numpy(expected(np.float64)))
    assert (seq_first[:, 0, :] == 0).all() and (seq_first[:, 2, :] == 0).all()

    half = torch.empty(D, L, dtype=torch.float16).t()  # a transposed half tensor
    sinpe.encode(L, D, out=half.numpy())
    assert torch.equal(half, torch.from_numpy(expected(np.float16)))


# ------------------------------------------------------------------ offset, odd d, L = 0
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("start,rows", [(-50, 10), (0, 33), (31, 2), (-1, 3), (17, 64), (200, 1)])
def test_offset_rows_equal_rows_of_a_bigger_table(dtype, start, rows):
    big = sinpe.encode(400, D, 100.0, offset=-100, dtype=dtype)
    part = sinpe.encode(rows, D, 100.0, offset=start, dtype=dtype)
    assert_same_bits(part, big[start + 100 : start + 100 + rows])


def test_offset_at_the_ends_of_the_range_equal_rows_of_a_bigger_table():
    top = sinpe.MAX_POSITION
    big = sinpe.encode(100, 8, offset=top - 99)
    assert_same_bits(sinpe.encode(1, 8, offset=top), big[-1:])
    assert_same_bits(sinpe.encode(7, 8, offset=top - 40), big[59:66])
    low = sinpe.encode(100, 8, offset=-top)
    assert_same_bits(sinpe.encode(1, 8, offset=-top), low[:1])


def test_offset_with_out():
    out = np.empty((D, 10), np.float64).T
    sinpe.encode(10, D, offset=-3, out=out)
    assert_same_bits(out, sinpe.encode(20, D, offset=-10, dtype=np.float64)[7:17])


@pytest.mark.parametrize("d", [1, 3, 13])
def test_odd_d_last_column_is_a_sine(d):
    positions = positions_of(-20, 60)
    table = sinpe.encode(60, d, offset=-20, dtype=np.float64)
    ref = table64(positions, d, 10000.0)  # the tests' reference: sin on even columns
    bound = double_error_bound(positions, d, 10000.0) + sinpe_double_bound(positions, d, 10000.0)
    assert (np.abs(table - ref) <= bound).all()
    assert (np.abs(table[:, -1] - np.sin(positions * 10000.0 ** (-(d - 1) / d))) <= bound[:, -1]).all()
    if d == 1:  # the single column is sin(p * n**0) = sin(p)
        assert (np.abs(table[:, 0] - np.sin(positions)) <= bound[:, 0]).all()


@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_rows(dtype):
    t = sinpe.encode(0, D, dtype=dtype)
    assert t.shape == (0, D) and t.dtype == dtype
    out = np.empty((0, D), dtype)
    assert sinpe.encode(0, D, out=out) is out
    top = sinpe.encode(0, D, offset=sinpe.MAX_POSITION, dtype=dtype)
    assert top.shape == (0, D)


def test_zero_rows_add_is_a_no_op():
    x = np.empty((4, 0, 6), np.float32)
    assert sinpe.add_(x) is x


# ------------------------------------------------------------------ dtype spellings
@pytest.mark.parametrize(
    "spelling,want",
    [
        ("f4", np.float32),
        (np.float32, np.float32),
        ("float32", np.float32),
        ("<f4" if np.little_endian else ">f4", np.float32),
        (np.dtype("float16"), np.float16),
        ("f2", np.float16),
        ("half", np.float16),
        (np.float16, np.float16),
        (float, np.float64),
        ("d", np.float64),
        ("float64", np.float64),
        (np.double, np.float64),
    ],
)
def test_dtype_spellings(spelling, want):
    t = sinpe.encode(L, D, dtype=spelling)
    assert t.dtype == want
    assert_same_bits(t, sinpe.encode(L, D, dtype=np.dtype(want)))


# ------------------------------------------------------------------ add_ layouts
def add_reference(x: np.ndarray, axis: int, n=10000.0, offset=0, scale=1.0) -> np.ndarray:
    """NumPy's x * x.dtype.type(scale) + T (native byte order), T sinpe's table
    in x's dtype broadcast along the batch axes: the tests here are about
    memory layouts, test_accuracy about the arithmetic itself."""
    pos_axis = axis % x.ndim
    native = x.dtype.newbyteorder("=")
    table = sinpe.encode(x.shape[pos_axis], x.shape[-1], n, offset=offset, dtype=native)
    shape = [1] * x.ndim
    shape[pos_axis], shape[-1] = table.shape
    return numpy_add(x.astype(native), table.reshape(shape), scale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_strided_transposed_negative_views(dtype):
    rng = np.random.default_rng(3)
    base = rng.standard_normal((10, L, 2 * D)).astype(dtype)
    cases = [
        (lambda b: b[::2, :, ::2], -2),  # strided batch and features
        (lambda b: b[:, ::-1, :D], -2),  # negative position stride
        (lambda b: np.swapaxes(b[:, :, :D], 0, 1), 0),  # seq-first view of batch-first memory
        (lambda b: b[:, :, :D].transpose(1, 0, 2)[:, ::3], 0),
        (lambda b: b[:, :, ::-1][:, :, :D].transpose(2, 1, 0).transpose(1, 2, 0), 0),
    ]
    for make, axis in cases:
        x = base.copy()
        view = make(x)
        want = add_reference(view, axis, n=100.0, offset=-5, scale=0.5)
        before = x.copy()
        assert sinpe.add_(view, 100.0, offset=-5, axis=axis, scale=0.5) is view
        assert_same_bits(view, want)
        mask = np.ones(x.shape, bool)  # elements outside the view are untouched
        make(mask)[...] = False
        assert_same_bits(x[mask], before[mask])


@pytest.mark.parametrize("dtype", DTYPES)
def test_add_non_native_byte_order(dtype):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((3, L, D)).astype(np.dtype(dtype).newbyteorder("S"))
    want = add_reference(x, -2, scale=2.0)
    assert sinpe.add_(x, scale=2.0) is x
    assert_same_bits(x, want)


@pytest.mark.parametrize("axis", [1, 2])
def test_add_4d_batch_axes_on_both_sides_of_positions(axis):
    rng = np.random.default_rng(5)
    shape = [2, 3, 4, D]
    shape[axis] = L
    x = rng.standard_normal(shape).astype(np.float32)  # (B, L, H, d) or (B, H, L, d)
    want = add_reference(x, axis)
    assert sinpe.add_(x, axis=axis) is x
    assert_same_bits(x, want)


def test_add_torch_tensor_in_place(torch):
    t = torch.randn(2, L, D)
    want = add_reference(t.numpy(), -2, scale=2.0)
    sinpe.add_(t.numpy(), scale=2.0)
    assert torch.equal(t, torch.from_numpy(want))


def test_add_memmap(tmp_path):
    mm = np.memmap(tmp_path / "x.bin", dtype=np.float32, mode="w+", shape=(L, 2, D))
    mm[...] = 1.0
    assert sinpe.add_(mm, axis=0) is mm
    mm.flush()
    on_disk = np.fromfile(tmp_path / "x.bin", dtype=np.float32).reshape(L, 2, D)
    assert_same_bits(on_disk, add_reference(np.ones((L, 2, D), np.float32), 0))
