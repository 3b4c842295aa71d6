"""Adversarial sizes and values: a clear exception naming the argument,
nothing written, and the process alive afterwards.

"Exceeds memory" cases ask for at least 2**47 bytes: the whole user address
space of x86-64/aarch64 (47/48-bit), so the allocation fails on any machine
and under any overcommit policy; a smaller "too big" table could be granted
by an overcommitting kernel and then fill the disk of swap.
"""
from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import UNDER_ASAN

import sinpe
from sinpe.reference import table_float64

BOUND = sinpe.MAX_POSITION
DOCUMENTED = (TypeError, ValueError, OverflowError, MemoryError)
FLOAT_DTYPES = (np.float16, np.float32, np.float64)


def still_works():
    """After the failure the module still computes the right table."""
    out = sinpe.encode(3, 4, dtype=np.float64)
    np.testing.assert_allclose(out, table_float64(3, 4), atol=1e-15)


def raises_naming(exc_type, call, *names):
    with pytest.raises(exc_type) as info:
        call()
    message = str(info.value)
    assert any(name in message for name in names), f"message {message!r} names none of {names}"
    still_works()
    return message


# ---------------------------------------------------------------------------
# Sizes

@pytest.mark.parametrize("dtype", FLOAT_DTYPES)
@pytest.mark.parametrize("L, d", [
    (2**24, 2**40),          # L * d * itemsize > 2**63
    (1, 2**62),              # d * itemsize > 2**63
    (2**24, 2**63 - 1),      # d is the largest Py_ssize_t
    (3, 2**61 + 1),
])
def test_table_size_overflowing_ssize_t_raises_overflow_error(L, d, dtype):
    raises_naming(OverflowError, lambda: sinpe.encode(L, d, dtype=dtype), f"L={L}", f"d={d}")


@pytest.mark.parametrize("L, d", [(2**63, 1), (1, 2**63), (2**64 + 1, 2**64 + 1), (1, 10**30)])
def test_sizes_beyond_64_bits_raise_overflow_error(L, d):
    raises_naming(OverflowError, lambda: sinpe.encode(L, d), "L=", "d=")


@pytest.mark.parametrize("L, d, dtype", [
    (2**24, 2**20, np.float64),   # 128 TiB
    (2**24, 2**21, np.float32),   # 128 TiB
    (2**24, 2**22, np.float16),   # 128 TiB
    (2**24, 2**23, np.float64),   # 1 PiB
])
def test_table_beyond_the_address_space_raises_memory_error(L, d, dtype):
    with pytest.raises((MemoryError, OverflowError)):
        sinpe.encode(L, d, dtype=dtype)
    still_works()


@pytest.mark.parametrize("L, d", [(0, 2**62), (0, 2**63 - 1)])
def test_empty_table_of_unrepresentable_width_names_d(L, d):
    """Zero rows of 2**62 columns: NumPy cannot hold the shape either; the
    error must still name the argument, as every sinpe error does."""
    raises_naming(DOCUMENTED, lambda: sinpe.encode(L, d), f"d={d}")


def test_zero_rows_or_zero_batch_is_fine():
    assert sinpe.encode(0, 7).shape == (0, 7)
    for shape, axis in [((0, 5, 4), -2), ((3, 0, 4), -2), ((5, 0, 4), 0), ((2, 3, 0), -2)]:
        x = np.full(shape, 7.0, np.float32)
        assert sinpe.add_(x, axis=axis) is x
        assert (x == 7.0).all()


def test_sixty_four_axes_add():
    """NumPy 2 allows 64 axes (NumPy 1: 32); the batch odometer must cope."""
    ndim = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32
    x = np.zeros((1,) * (ndim - 3) + (2, 5, 6), np.float64)
    sinpe.add_(x, axis=-2)
    np.testing.assert_allclose(x.reshape(2, 5, 6), np.broadcast_to(table_float64(5, 6), (2, 5, 6)),
                               atol=1e-13)


@pytest.mark.skipif(UNDER_ASAN, reason="RLIMIT_AS cannot be set under ASan (it maps terabytes of shadow)")
def test_wide_short_table_does_not_need_many_times_its_size(tmp_path):
    """encode(1, 2**24, float16) is a 32 MiB table.  With 2 GiB of address
    space to spare it must succeed: scratch proportional to 32 rows of
    doubles (4.6 GB here) turns a small table into a MemoryError."""
    code = textwrap.dedent("""
        import resource, numpy as np, sinpe
        sinpe.encode(2, 8)  # everything lazily loaded is loaded
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * resource.getpagesize()
        limit = used + 2 * 2**30
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
        try:
            out = sinpe.encode(1, 2**24, dtype=np.float16)
        except MemoryError as e:
            print("MemoryError", e)
        else:
            print("ok", out.shape)
    """)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                            cwd=tmp_path)  # not the source tree: its sinpe/ has no compiled _core
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("ok"), result.stdout + result.stderr


# ---------------------------------------------------------------------------
# Positions at and beyond the bound, both signs

def test_positions_at_the_bound_meet_the_float32_promise():
    """Rows at p = +-2**24 against mpmath: within 2**-24 of the exact value."""
    import mpmath  # in the test extra: missing is an error, not a skip
    d, n = 64, 10000.0
    for offset in (BOUND, -BOUND):
        row = sinpe.encode(1, d, n, offset=offset, dtype=np.float32)[0].astype(np.float64)
        with mpmath.workdps(40):
            for j in range(d):
                w = mpmath.mpf(n) ** (-mpmath.mpf(2 * (j // 2)) / d)
                exact = (mpmath.sin if j % 2 == 0 else mpmath.cos)(offset * w)
                assert abs(row[j] - float(exact)) <= 2.0**-24, (offset, j, row[j], exact)


def test_every_position_in_the_bound_in_one_call():
    """offset=-2**24 and L=2**25+1 reaches exactly +2**24: allowed."""
    out = sinpe.encode(2 * BOUND + 1, 1, offset=-BOUND, dtype=np.float16)
    ends = np.concatenate([out[:3], out[-3:]]).astype(np.float64)
    ref = np.concatenate([table_float64(3, 1, offset=-BOUND), table_float64(3, 1, offset=BOUND - 2)])
    np.testing.assert_allclose(ends, ref, atol=2.0**-11)


@pytest.mark.parametrize("L, offset", [
    (1, BOUND + 1), (1, -BOUND - 1), (2, BOUND), (2 * BOUND + 2, -BOUND),
    (BOUND + 2, 0), (1, 2**62), (1, -(2**62)), (2**40, -(2**30)),
])
def test_positions_beyond_the_bound_raise_value_error(L, offset):
    raises_naming(ValueError, lambda: sinpe.encode(L, 4, offset=offset), f"offset={offset}", f"L={L}")


@pytest.mark.parametrize("offset", [2**63, -(2**63) - 1, 10**40])
def test_offset_beyond_64_bits_raises_overflow_error(offset):
    raises_naming(OverflowError, lambda: sinpe.encode(1, 4, offset=offset), "offset")
    x = np.ones((2, 3, 4), np.float32)
    raises_naming(OverflowError, lambda: sinpe.add_(x, offset=offset), "offset")
    assert (x == 1).all()


@pytest.mark.parametrize("rows, offset, ok", [
    (2, BOUND - 1, True), (2, BOUND, False), (1, -BOUND, True), (1, -BOUND - 1, False),
])
def test_add_positions_at_and_beyond_the_bound(rows, offset, ok):
    x = np.ones((3, rows, 4), np.float32)
    if ok:
        sinpe.add_(x, offset=offset)
        ref = 1.0 + table_float64(rows, 4, offset=offset)
        np.testing.assert_allclose(x, np.broadcast_to(ref, x.shape), atol=2.0**-22)
    else:
        raises_naming(ValueError, lambda: sinpe.add_(x, offset=offset), f"offset={offset}")
        assert (x == 1).all()


def test_add_position_axis_longer_than_the_bound_writes_nothing():
    """2**25 + 2 positions without the memory for them: refused whole.

    A zero-width feature axis needs no memory and reaches the position check; a
    zero-stride view of the same length is refused too (its rows share memory),
    and its base stays untouched either way."""
    empty = np.zeros((2 * BOUND + 2, 0), np.float32)
    raises_naming(ValueError, lambda: sinpe.add_(empty, offset=-BOUND), "embeddings.shape[axis]", "offset")
    base = np.zeros(3, np.float32)
    x = np.lib.stride_tricks.as_strided(base, shape=(2 * BOUND + 2, 3), strides=(0, 4), writeable=True)
    raises_naming(ValueError, lambda: sinpe.add_(x, offset=-BOUND), "embeddings")
    assert (base == 0).all()


# ---------------------------------------------------------------------------
# Bases and other numbers

BAD_BASES = [0, 0.0, -1, -1.0, float("nan"), float("inf"), -float("inf"), 1e-300, 1e300, 0.999,
             np.float64("nan"), np.float32(0.5)]


@pytest.mark.parametrize("n", BAD_BASES, ids=repr)
def test_bad_base_raises_value_error_naming_n(n):
    raises_naming(ValueError, lambda: sinpe.encode(2, 4, n), "n=")
    out = np.full((2, 4), 3.0)
    raises_naming(ValueError, lambda: sinpe.encode(2, 4, n, out=out), "n=")
    assert (out == 3.0).all()
    x = np.full((2, 2, 4), 3.0, np.float32)
    raises_naming(ValueError, lambda: sinpe.add_(x, n), "n=")
    assert (x == 3.0).all()


@pytest.mark.parametrize("n, exc", [
    ("10000", TypeError), (b"1", TypeError), (1 + 0j, TypeError), (np.complex128(2), TypeError),
    (None, TypeError), ([2.0], TypeError), (10**400, OverflowError),
])
def test_base_of_the_wrong_kind(n, exc):
    raises_naming(exc, lambda: sinpe.encode(2, 4, n), "n")
    x = np.zeros((2, 2, 4))
    raises_naming(exc, lambda: sinpe.add_(x, n), "n")
    assert (x == 0).all()


@pytest.mark.parametrize("n", [1, 1.0, 1e30, np.float32(10000), np.int64(7), 10000])
def test_base_at_the_limits_works(n):
    out = sinpe.encode(40, 6, n, dtype=np.float64)
    np.testing.assert_allclose(out, table_float64(40, 6, float(n)), atol=1e-13)


@pytest.mark.parametrize("L, d, exc, name", [
    (-1, 4, ValueError, "L="), (4, 0, ValueError, "d="), (4, -1, ValueError, "d="),
    (2.0, 4, TypeError, "L"), (4, 2.5, TypeError, "d"), ("3", 4, TypeError, "L"),
    (None, 4, TypeError, "L"), (4, np.float64(4), TypeError, "d"), (-(2**70), 4, OverflowError, "L"),
])
def test_bad_sizes(L, d, exc, name):
    raises_naming(exc, lambda: sinpe.encode(L, d), name)


@pytest.mark.parametrize("scale", [float("nan"), float("inf"), -float("inf")])
def test_non_finite_scale_raises_and_writes_nothing(scale):
    x = np.full((2, 3, 4), 2.0, np.float16)
    raises_naming(ValueError, lambda: sinpe.add_(x, scale=scale), "scale")
    assert (x == 2.0).all()


@pytest.mark.parametrize("axis, exc", [(2, ValueError), (-1, ValueError), (3, ValueError), (-4, ValueError),
                                       (2**63, OverflowError), (1.0, TypeError), ("0", TypeError)])
def test_bad_axis_raises_and_writes_nothing(axis, exc):
    x = np.full((2, 3, 4), 2.0, np.float32)
    raises_naming(exc, lambda: sinpe.add_(x, axis=axis), "axis")
    assert (x == 2.0).all()


@pytest.mark.parametrize("make, exc", [
    (lambda: [[0.0] * 4] * 3, TypeError),
    (lambda: np.zeros((3, 4), np.int32), TypeError),
    (lambda: np.zeros((3, 4), np.complex128), TypeError),
    (lambda: np.zeros((3, 4), bool), TypeError),
    (lambda: np.zeros((3, 4), object), TypeError),
    (lambda: np.zeros((3, 4), np.longdouble), TypeError),
    (lambda: np.zeros((3, 4), "f4,f4"), TypeError),
    (lambda: np.broadcast_to(np.zeros(4, np.float32), (3, 4)), ValueError),
    (lambda: np.zeros(4, np.float32), ValueError),
    (lambda: np.float32(1.0), TypeError),
    (lambda: np.zeros((), np.float32), ValueError),
    (lambda: np.zeros((3, 4)).view(type("Sub", (np.ndarray,), {})), None),  # a subclass: fine
])
def test_add_on_what_is_not_a_writeable_float_array(make, exc):
    x = make()
    before = np.array(x, copy=True) if isinstance(x, np.ndarray) else None
    if exc is None:
        assert sinpe.add_(x) is x
        return
    raises_naming(exc, lambda: sinpe.add_(x), "embeddings")
    if before is not None:
        assert np.array_equal(np.asarray(x), before)


@pytest.mark.parametrize("make, exc", [
    (lambda: np.zeros((3, 4), np.int16), TypeError),
    (lambda: np.zeros((3, 5)), ValueError),
    (lambda: np.zeros((4, 3)), ValueError),
    (lambda: np.zeros((3, 4, 1)), ValueError),
    (lambda: np.zeros(12), ValueError),
    (lambda: np.broadcast_to(np.zeros(4), (3, 4)), ValueError),
    (lambda: [[0.0] * 4] * 3, TypeError),
])
def test_encode_out_of_the_wrong_kind(make, exc):
    out = make()
    raises_naming(exc, lambda: sinpe.encode(3, 4, out=out), "out")
    if isinstance(out, np.ndarray):
        assert not np.asarray(out).any()


@pytest.mark.parametrize("dtype", ["int32", "complex64", "bool", "object", "U3", "M8[s]", "not a dtype", 3.5])
def test_encode_unsupported_dtype(dtype):
    raises_naming(TypeError, lambda: sinpe.encode(2, 3, dtype=dtype), "dtype")
