"""Property tests: any call either gives the documented result (encode: the
float64 reference within the promise; add_: NumPy's x * x.dtype.type(scale)
+ T, bit for bit) or raises the documented exception, and never touches a
byte it does not address.

Arrays are built by hand inside a random byte buffer (``np.ndarray(buffer=,
offset=, strides=)``): axes in any memory order, gaps between elements,
negative strides, misaligned starts, both byte orders.  After every call the
bytes outside the view must be unchanged (a stray write shows up here even
when it lands in memory the allocator owns), and after a failed call the
whole buffer must be bit-identical.

Profiles (``SINPE_HYPOTHESIS=<name>``; CI=true selects ``ci``):
  ci    derandomized, no example database: the same examples on every run.
  dev   the default locally: random, with the .hypothesis/ database.
  long  by hand, minutes:  SINPE_HYPOTHESIS=long pytest tests/test_properties.py
  quick 25 examples each, derandomized: for scripts/valgrind.sh.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

import sinpe
from sinpe.reference import table_float64
from conftest import assert_bits_equal, numpy_add

_COMMON = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True)
settings.register_profile("sinpe-ci", max_examples=300, derandomize=True, database=None, **_COMMON)
settings.register_profile("sinpe-dev", max_examples=300, **_COMMON)
settings.register_profile("sinpe-long", max_examples=20000, **_COMMON)
# scripts/valgrind.sh: a few examples of each test, the same on every run
settings.register_profile("sinpe-quick", max_examples=25, derandomize=True, database=None, **_COMMON)
_default_profile = "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"
PROFILE = settings.get_profile("sinpe-" + os.environ.get("SINPE_HYPOTHESIS", _default_profile))

BOUND = sinpe.MAX_POSITION
DOCUMENTED = (TypeError, ValueError, OverflowError, MemoryError)
FLOAT_DTYPES = ("float16", "float32", "float64")
# Not float16/32/64: each must be refused with TypeError, whatever its itemsize.
BAD_DTYPES = ("int8", "int32", "uint16", "int64", "bool", "complex64", "complex128", "longdouble")
MANTISSA = {2: 10, 4: 23, 8: 52}
SMALLEST = {2: 2.0**-24, 4: 2.0**-149, 8: 2.0**-1074}


# ---------------------------------------------------------------------------
# Error bounds, derived (DESIGN.md "Numerics"), not tuned.

def pe_error(p):
    """Bound on |double-precision PE - exact| for the NumPy reference and for any
    honest double method: the angle p*w carries at most a few roundings of
    2**-53 |p| w each (w <= 1 since n >= 1), sin/cos and a rotation's
    products a few 2**-53 more.  2**-52 (|p| + 256) covers both with margin."""
    return 2.0**-52 * (np.abs(np.asarray(p, np.float64)) + 256.0)


def half_ulp(magnitude, itemsize):
    """Half a unit in the last place of the output dtype at this magnitude."""
    return np.maximum(magnitude * 2.0 ** -(MANTISSA[itemsize] + 1), SMALLEST[itemsize] / 2)


def encode_tolerance(ref, p, itemsize):
    err = pe_error(p)
    if itemsize == 4:  # the promise: 2**-24 of the exact value, which is within err of ref
        return 2.0**-24 + err
    # rounded once from a double within err of exact: half an ulp of the result, both errors
    return half_ulp(np.abs(ref) + 2 * err, itemsize) + 2 * err


def assert_close(out, ref, tol, what):
    got = out.astype(np.float64)
    finite = np.isfinite(ref)
    # nan/inf in x propagate: they must come out exactly as the reference rounds them
    np.testing.assert_array_equal(got[~finite], ref[~finite].astype(out.dtype).astype(np.float64))
    with np.errstate(invalid="ignore"):
        err = np.abs(got - ref)
    bad = finite & ~(err <= tol)
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{what}: {bad.sum()} elements off; first at {i}: got {got[i]!r}, "
            f"reference {ref[i]!r}, error {err[i]:.3g} > tolerance {np.broadcast_to(tol, ref.shape)[i]:.3g}"
        )


# ---------------------------------------------------------------------------
# Arrays laid out anywhere inside a guarded byte buffer.

class Strided:
    """A view into a random bytearray plus the mask of the bytes it addresses."""

    def __init__(self, shape, dtype, order, gaps, signs, misalign, guard, seed):
        dtype = np.dtype(dtype)
        size = dtype.itemsize
        strides = [0] * len(shape)
        step = size
        for axis in reversed(order):  # order[0] is the outermost axis in memory
            strides[axis] = step * gaps[axis]
            step = strides[axis] * max(shape[axis], 1)
        strides = [s * sign for s, sign in zip(strides, signs)]
        low = sum(s * (n - 1) for s, n in zip(strides, shape) if s < 0 and n > 0)
        high = sum(s * (n - 1) for s, n in zip(strides, shape) if s > 0 and n > 0)
        self.offset = guard + misalign - low
        self.buffer = bytearray(np.random.default_rng(seed).bytes(self.offset + high + size + guard))
        self.array = np.ndarray(shape, dtype, buffer=self.buffer, offset=self.offset, strides=strides)
        self.mask = np.zeros(len(self.buffer), bool)
        if 0 not in shape:
            index = np.indices(shape).reshape(len(shape), -1)
            starts = self.offset + (np.array(strides)[:, None] * index).sum(axis=0)
            for b in range(size):
                self.mask[starts + b] = True

    def snapshot(self):
        return np.frombuffer(bytes(self.buffer), np.uint8)

    def assert_outside_unchanged(self, before):
        now = np.frombuffer(bytes(self.buffer), np.uint8)
        changed = np.flatnonzero((now != before) & ~self.mask)
        assert changed.size == 0, f"wrote {changed.size} bytes outside the array, first at {changed[0]}"


@st.composite
def strided(draw, shape, dtype):
    ndim = len(shape)
    size = np.dtype(dtype).itemsize
    return Strided(
        shape,
        dtype,
        order=draw(st.permutations(range(ndim))),
        gaps=[draw(st.sampled_from([1, 1, 1, 2, 3])) for _ in range(ndim)],
        signs=[draw(st.sampled_from([1, 1, -1])) for _ in range(ndim)],
        misalign=draw(st.sampled_from([0, 0, 0] + list(range(1, size)))),
        guard=draw(st.sampled_from([0, 8, 64])),
        seed=draw(st.integers(0, 2**32 - 1)),
    )


def spelled(draw, name):
    """A dtype spelling with a byte order: the name, a np type, or '<f4' / '>f4'."""
    dtype = np.dtype(name)
    order = draw(st.sampled_from(["=", "=", "<", ">"]))
    if order != "=" and dtype.itemsize > 1:
        dtype = dtype.newbyteorder(order)
    return dtype


# ---------------------------------------------------------------------------
# Arguments: mostly valid, each kind of invalid value some of the time.
# Every drawn value carries the set of exceptions the contract allows for it.

VALID = frozenset()


def rarely(draw, weight=6):
    """True about once in weight + 1 draws.  Hypothesis leans towards the
    first element of sampled_from, so "valid" sits first and is most common."""
    return draw(st.sampled_from([False] * weight + [True]))


@st.composite
def bases(draw):
    if rarely(draw):
        return draw(st.sampled_from([0.0, -1.0, 0.5, 1e-300, 1e300, 1.5e30, float("nan"),
                                     float("inf"), -float("inf")])), {ValueError}
    value = draw(st.one_of(
        st.sampled_from([1.0, 2.0, 10000.0, 1e30, 10000, 500000.0]),
        st.floats(0.0, 30.0).map(lambda e: 10.0**e),
    ))
    return value, VALID


@st.composite
def offsets(draw, rows):
    """An offset, and the exceptions it calls for with this many rows."""
    kind = draw(st.sampled_from(["small"] * 4 + ["any"] * 4 + ["edge", "edge", "beyond", "overflow"]))
    if kind == "overflow":
        offset = draw(st.sampled_from([2**63, -(2**63) - 1, 2**100]))
        return offset, {OverflowError}
    if kind == "beyond":
        offset = draw(st.sampled_from([-BOUND - 1, BOUND + 1, 2**62, -(2**62)]))
    elif kind == "edge":  # the first or last row right at the bound, or one past it
        offset = draw(st.sampled_from([BOUND - rows + 1, -BOUND, BOUND - rows + 2, BOUND]))
    elif kind == "small":
        offset = draw(st.integers(-100, 100))
    else:
        offset = draw(st.integers(-BOUND, BOUND))
    fits = -BOUND <= offset and offset + max(rows, 1) - 1 <= BOUND
    if offset > BOUND or offset < -BOUND:
        fits = False
    return offset, (VALID if fits else {ValueError})


def thread_counts():
    if hasattr(sinpe, "set_num_threads"):
        return st.sampled_from([None, 1, 2, 3, 4])
    return st.just(None)


def with_threads(count, call):
    if count is None:
        return call()
    before = sinpe.get_num_threads()
    sinpe.set_num_threads(count)
    try:
        return call()
    finally:
        sinpe.set_num_threads(before)


def expect(errors, call):
    """Runs call; returns its result, or None if it raised an allowed error."""
    try:
        result = call()
    except MemoryError:
        event("MemoryError")
        return None  # always allowed
    except DOCUMENTED as exc:
        assert errors, f"a valid call raised {type(exc).__name__}: {exc}"
        assert type(exc) in errors, f"expected one of {errors}, got {type(exc).__name__}: {exc}"
        assert str(exc), "the message must say what was wrong"
        event(f"raised {type(exc).__name__}")
        return None
    assert not errors, f"an invalid call (should raise {errors}) returned"
    event("valid")
    return result


def sizes():
    # Mostly small; sometimes past a 32-row block boundary; odd d often.
    return st.one_of(st.integers(0, 5), st.integers(6, 40), st.integers(41, 300))


# ---------------------------------------------------------------------------

@PROFILE
@given(data=st.data())
def test_encode_new_array_matches_reference_or_raises(data):
    draw = data.draw
    rows, cols = draw(sizes()), draw(st.one_of(st.integers(1, 9), st.integers(10, 70)))
    errors = set()
    if rarely(draw):
        rows, cols = draw(st.sampled_from([(-1, cols), (rows, 0), (rows, -3)]))
        errors.add(ValueError)
    n, n_errors = draw(bases())
    offset, offset_errors = draw(offsets(rows))
    name = draw(st.sampled_from(BAD_DTYPES if rarely(draw) else FLOAT_DTYPES))
    dtype = spelled(draw, name)
    errors |= n_errors | offset_errors | ({TypeError} if name in BAD_DTYPES else set())
    if not errors and rows * cols > 20000:
        cols = 20000 // rows
    threads = draw(thread_counts())

    out = expect(errors, lambda: with_threads(
        threads, lambda: sinpe.encode(rows, cols, n, offset=offset, dtype=dtype)))
    if out is None:
        return
    assert out.shape == (rows, cols) and out.dtype == dtype and out.flags.c_contiguous
    ref = table_float64(rows, cols, float(n), offset)
    p = np.arange(offset, offset + rows)[:, None]
    assert_close(out, ref, encode_tolerance(ref, p, dtype.itemsize), "encode")


@PROFILE
@given(data=st.data())
def test_encode_out_matches_reference_and_writes_nothing_else(data):
    draw = data.draw
    rows, cols = draw(sizes()), draw(st.one_of(st.integers(1, 9), st.integers(10, 40)))
    name = draw(st.sampled_from(BAD_DTYPES if rarely(draw) else FLOAT_DTYPES))
    dtype = spelled(draw, name)
    errors = {TypeError} if name in BAD_DTYPES else set()
    shape = (rows, cols)
    kind = draw(st.sampled_from(["ok"] * 10 + ["shape", "read-only"]))
    if kind == "shape":
        shape = draw(st.sampled_from([(rows + 1, cols), (rows, cols + 1), (rows,), (1, rows, cols)]))
        errors.add(ValueError)
    view = draw(strided(shape, dtype))
    out = view.array
    if kind == "read-only":
        out.flags.writeable = False
        errors.add(ValueError)
    dtype_arg = None
    if rarely(draw, 3):
        other = draw(st.sampled_from(FLOAT_DTYPES))
        dtype_arg = spelled(draw, other)
        if dtype_arg != dtype:
            errors.add(TypeError)
    n, n_errors = draw(bases())
    offset, offset_errors = draw(offsets(rows))
    errors |= n_errors | offset_errors
    threads = draw(thread_counts())

    before = view.snapshot()
    result = expect(errors, lambda: with_threads(
        threads, lambda: sinpe.encode(rows, cols, n, offset=offset, dtype=dtype_arg, out=out)))
    if result is None:
        assert np.array_equal(view.snapshot(), before), "a failed encode changed out"
        return
    assert result is out
    view.assert_outside_unchanged(before)
    ref = table_float64(rows, cols, float(n), offset)
    p = np.arange(offset, offset + rows)[:, None]
    assert_close(out, ref, encode_tolerance(ref, p, dtype.itemsize), "encode(out=)")


@PROFILE
@given(data=st.data())
def test_add_matches_reference_or_leaves_input_bit_identical(data):
    draw = data.draw
    ndim = draw(st.sampled_from([3, 2, 4, 3, 2, 3, 2, 1]))
    shape = [draw(st.one_of(st.integers(0, 3), st.integers(4, 9))) for _ in range(ndim)]
    name = draw(st.sampled_from(BAD_DTYPES if rarely(draw) else FLOAT_DTYPES))
    dtype = spelled(draw, name)
    errors = {TypeError} if name in BAD_DTYPES else set()
    if ndim < 2:
        errors.add(ValueError)
    positional = [a for a in range(-ndim, ndim - 1) if a % ndim != ndim - 1] or [0]
    axis = draw(st.sampled_from(positional) if not rarely(draw) else st.integers(-ndim - 2, ndim + 1))
    axis_ok = -ndim <= axis < ndim and axis % ndim != ndim - 1
    if axis_ok and ndim >= 2 and draw(st.booleans()):
        shape[axis] = draw(sizes())  # a long position axis, past block boundaries
    if not axis_ok:
        errors.add(ValueError)
    while np.prod(shape) > 5000:
        shape[int(np.argmax(shape))] //= 2
    rows = shape[axis] if axis_ok and ndim >= 2 else 1
    view = draw(strided(tuple(shape), dtype))
    x = view.array
    if name in FLOAT_DTYPES:
        rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
        values = rng.uniform(-100, 100, x.shape)
        if rarely(draw) and values.size:
            values.flat[rng.integers(0, values.size, 3)] = [np.nan, np.inf, -0.0]
        x[...] = values
    if rarely(draw, 10):
        x.flags.writeable = False
        errors.add(ValueError)
    n, n_errors = draw(bases())
    offset, offset_errors = draw(offsets(rows))
    if rarely(draw):
        scale = draw(st.sampled_from([float("nan"), float("inf"), -float("inf")]))
    else:
        scale = draw(st.one_of(
            st.sampled_from([1.0, 0.0, -1.0, float(np.sqrt(shape[-1] or 1)), 1]),
            st.floats(-10, 10),
        ))
    if not np.isfinite(scale):
        errors.add(ValueError)
    errors |= n_errors | offset_errors
    threads = draw(thread_counts())

    before = view.snapshot()
    x0 = x.copy()
    result = expect(errors, lambda: with_threads(
        threads, lambda: sinpe.add_(x, n, offset=offset, axis=axis, scale=scale)))
    if result is None:
        assert np.array_equal(view.snapshot(), before), "a failed add_ changed its input"
        return
    assert result is x
    view.assert_outside_unchanged(before)
    if x.size == 0:
        return
    pos_axis = axis % ndim
    pe_shape = [1] * ndim
    pe_shape[pos_axis], pe_shape[-1] = x.shape[pos_axis], x.shape[-1]
    table = sinpe.encode(x.shape[pos_axis], x.shape[-1], n, offset=offset, dtype=x.dtype)
    assert_bits_equal(x, numpy_add(x0, table.reshape(pe_shape), scale), "add_")


@PROFILE
@given(rows=st.integers(1, 70), cols=st.integers(1, 33), n=st.floats(1.0, 1e30),
       offset=st.one_of(st.integers(-100, 100), st.integers(-BOUND, BOUND - 70)), data=st.data())
def test_rows_do_not_depend_on_the_call_that_made_them(rows, cols, n, offset, data):
    """DESIGN: every element is a pure function of (p, j, d, n); a table
    built in two pieces has the same bits as the whole."""
    split = data.draw(st.integers(0, rows))
    whole = sinpe.encode(rows, cols, n, offset=offset, dtype=np.float64)
    head = sinpe.encode(split, cols, n, offset=offset, dtype=np.float64)
    tail = sinpe.encode(rows - split, cols, n, offset=offset + split, dtype=np.float64)
    np.testing.assert_array_equal(np.concatenate([head, tail]), whole)


def test_profile_is_reproducible_in_ci():
    """CI must see the same examples every run: derandomized, no database."""
    ci = settings.get_profile("sinpe-ci")
    assert ci.derandomize and ci.database is None
    if os.environ.get("CI", "").lower() in ("1", "true", "yes") and "SINPE_HYPOTHESIS" not in os.environ:
        assert PROFILE is ci


if __name__ == "__main__":  # pragma: no cover
    pytest.main([__file__])
