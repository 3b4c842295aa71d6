"""Every bad call of DESIGN.md section 2 / issue 2: the exact exception, a message naming
the argument (and its value where it has one), and nothing written.

NumPy's conventions decide the type: a wrong kind of argument is a TypeError,
a wrong value a ValueError, a size that cannot be represented or allocated an
OverflowError or MemoryError.  ``pytest.raises(T)`` also accepts subclasses of
T, so each case checks ``type(exc) is T`` too (MemoryError excepted: NumPy's
allocator raises its documented subclass ``numpy._core._exceptions._ArrayMemoryError``).

Every failing call is given a sentinel-filled ``out`` (for ``encode``) or its
``embeddings``; their bytes must be identical afterwards.
"""
from __future__ import annotations

import re

import numpy as np
import pytest

import sinpe

B = sinpe.MAX_POSITION  # 2**24
L, D = 4, 6


def fresh_out(dtype=np.float32, shape=(L, D)):
    out = np.empty(shape, dtype)
    out[...] = -7.0
    return out


def fresh_x(dtype=np.float32, shape=(2, L, D)):
    x = np.arange(np.prod(shape), dtype=np.float64).reshape(shape).astype(dtype)
    return x


def assert_fails(exc, pattern, func, *watched):
    """func() raises exactly exc with pattern in its message; watched arrays are bit-identical."""
    before = [w.copy().tobytes() for w in watched]
    with pytest.raises(exc, match=pattern) as info:
        func()
    if exc is MemoryError:
        assert isinstance(info.value, MemoryError)
    else:
        assert type(info.value) is exc, f"{type(info.value).__name__}: {info.value}"
    for w, b in zip(watched, before):
        assert w.tobytes() == b, "a failed call wrote into its array"
    return info.value


def exact(text: str) -> str:
    return re.escape(text)


# ------------------------------------------------------------------ encode: TypeError
ENCODE_TYPE_ERRORS = [
    # (kwargs for encode beyond out, message pattern)
    (dict(L=4.0, d=D), r"\bL\b"),
    (dict(L=np.float64(4), d=D), r"\bL\b"),
    (dict(L="4", d=D), r"\bL\b"),
    (dict(L=None, d=D), r"\bL\b"),
    (dict(L=[4], d=D), r"\bL\b"),
    (dict(L=L, d=6.0), r"\bd\b"),
    (dict(L=L, d="6"), r"\bd\b"),
    (dict(L=L, d=D, n="100"), r"\bn\b"),
    (dict(L=L, d=D, n=1j), r"\bn\b"),
    (dict(L=L, d=D, n=np.complex128(100)), r"\bn\b"),
    (dict(L=L, d=D, n=None), r"\bn\b"),
    (dict(L=L, d=D, offset=1.5), r"\boffset\b"),
    (dict(L=L, d=D, offset="2"), r"\boffset\b"),
    (dict(L=L, d=D, offset=np.float32(2)), r"\boffset\b"),
]


@pytest.mark.parametrize("kwargs,pattern", ENCODE_TYPE_ERRORS)
def test_encode_wrong_kind_of_argument_is_type_error(kwargs, pattern):
    out = fresh_out()
    assert_fails(TypeError, pattern, lambda: sinpe.encode(**kwargs, out=out), out)
    assert_fails(TypeError, pattern, lambda: sinpe.encode(**kwargs))


UNSUPPORTED_DTYPES = [np.int32, "i8", np.uint16, bool, np.bool_, complex, "c8", object, "U3", "S2", "M8[s]", np.longdouble]


@pytest.mark.parametrize("dtype", UNSUPPORTED_DTYPES, ids=str)
def test_encode_unsupported_dtype_is_type_error(dtype):
    if np.dtype(dtype) == np.float64:  # longdouble is double on some platforms
        pytest.skip("longdouble is float64 here")
    assert_fails(TypeError, r"\bdtype\b", lambda: sinpe.encode(L, D, dtype=dtype))
    out = fresh_out()
    assert_fails(TypeError, r"\bdtype\b", lambda: sinpe.encode(L, D, dtype=dtype, out=out), out)


def test_encode_unknown_dtype_spelling_is_type_error():
    assert_fails(TypeError, r"\bdtype\b.*not understood", lambda: sinpe.encode(L, D, dtype="float33"))


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, bool, np.complex64, np.complex128, object, "M8[s]"], ids=str)
def test_encode_out_of_unsupported_dtype_is_type_error(dtype):
    out = np.zeros((L, D), dtype)
    assert_fails(TypeError, r"\bout\b", lambda: sinpe.encode(L, D, out=out), out)


def test_encode_out_not_an_array_is_type_error():
    out = [[0.0] * D for _ in range(L)]
    assert_fails(TypeError, r"\bout\b", lambda: sinpe.encode(L, D, out=out))
    assert out == [[0.0] * D for _ in range(L)]


def test_encode_out_torch_tensor_is_type_error_pointing_at_numpy(torch):
    t = torch.full((L, D), -7.0)
    assert_fails(TypeError, r"\bout\b.*numpy\(\)", lambda: sinpe.encode(L, D, out=t))
    assert (t == -7.0).all()


def test_encode_dtype_disagreeing_with_out_is_type_error():
    out = fresh_out(np.float32)
    assert_fails(TypeError, r"\bdtype\b", lambda: sinpe.encode(L, D, dtype=np.float64, out=out), out)
    out16 = fresh_out(np.float16)
    assert_fails(TypeError, r"\bdtype\b", lambda: sinpe.encode(L, D, dtype="f4", out=out16), out16)


def test_encode_keyword_only_arguments_and_unknown_keywords():
    out = fresh_out()
    assert_fails(TypeError, "positional", lambda: sinpe.encode(L, D, 100.0, 3), out)
    assert_fails(TypeError, "positional", lambda: sinpe.encode(L, D, 100.0, 0, np.float32, out), out)
    assert_fails(TypeError, "base", lambda: sinpe.encode(L, D, base=100.0, out=out), out)
    assert_fails(TypeError, r"\bL\b|argument", lambda: sinpe.encode(d=D, out=out), out)


# ------------------------------------------------------------------ encode: ValueError
ENCODE_VALUE_ERRORS = [
    (dict(L=-1, d=D), exact("L=-1")),
    (dict(L=-(2**40), d=D), exact(f"L={-(2**40)}")),
    (dict(L=L, d=0), exact("d=0")),
    (dict(L=L, d=-3), exact("d=-3")),
    (dict(L=L, d=D, n=float("nan")), exact("n=nan")),
    (dict(L=L, d=D, n=float("inf")), exact("n=inf")),
    (dict(L=L, d=D, n=float("-inf")), exact("n=-inf")),
    (dict(L=L, d=D, n=0.0), exact("n=0.0")),
    (dict(L=L, d=D, n=-10000.0), exact("n=-10000.0")),
    (dict(L=L, d=D, n=0.5), exact("n=0.5")),  # n < 1: frequencies above 1 rad/position
    (dict(L=L, d=D, n=np.nextafter(1.0, 0.0)), r"\bn=0\.9999"),
    (dict(L=L, d=D, n=1e31), exact("n=1e+31")),
    (dict(L=L, d=D, n=np.nextafter(1e30, np.inf)), r"\bn=1\.0000000000000\d*e\+30"),
    (dict(L=L, d=D, n=1e300), exact("n=1e+300")),
    # positions beyond +-2**24: the first row, the last row, both ends
    (dict(L=L, d=D, offset=B + 1), exact(f"offset={B + 1}")),
    (dict(L=L, d=D, offset=-B - 1), exact(f"offset={-B - 1}")),
    (dict(L=L, d=D, offset=B - L + 2), exact(f"offset={B - L + 2}")),  # last row is 2**24 + 1
    (dict(L=L, d=D, offset=2**40), exact(f"offset={2**40}")),
    (dict(L=L, d=D, offset=-(2**63)), exact(f"offset={-(2**63)}")),
    (dict(L=L, d=D, offset=2**63 - 1), exact(f"offset={2**63 - 1}")),
]


@pytest.mark.parametrize("kwargs,pattern", ENCODE_VALUE_ERRORS)
def test_encode_wrong_value_is_value_error(kwargs, pattern):
    out = fresh_out()
    assert_fails(ValueError, pattern, lambda: sinpe.encode(**kwargs, out=out), out)
    assert_fails(ValueError, pattern, lambda: sinpe.encode(**kwargs))


@pytest.mark.parametrize(
    "rows,offset",
    [(B + 2, 0), (2 * B + 2, -B), (2, B), (10, -B - 5), (2**62, 0), (2**62, -B)],
)
def test_encode_rows_reaching_beyond_the_bound_is_value_error(rows, offset):
    # too many rows for the range: named by L, its value, and the offset
    assert_fails(ValueError, rf"\bL=|offset={offset}", lambda: sinpe.encode(rows, 1, offset=offset))


def test_encode_rows_exactly_at_the_bound_are_accepted():
    assert sinpe.encode(1, 2, offset=B).shape == (1, 2)
    assert sinpe.encode(1, 2, offset=-B).shape == (1, 2)
    assert sinpe.encode(L, 2, offset=B - L + 1).shape == (L, 2)
    assert sinpe.encode(2, 2, n=1.0).shape == (2, 2)
    assert sinpe.encode(2, 2, n=1e30).shape == (2, 2)


@pytest.mark.parametrize("shape", [(L + 1, D), (L, D + 1), (D, L), (L * D,), (1, L, D), (L, D, 1), ()])
def test_encode_out_of_wrong_shape_is_value_error(shape):
    out = fresh_out(shape=shape)
    assert_fails(ValueError, r"\bout\b.*shape", lambda: sinpe.encode(L, D, out=out), out)


def test_encode_read_only_out_is_value_error():
    out = fresh_out()
    out.setflags(write=False)
    assert_fails(ValueError, r"\bout\b.*read-only", lambda: sinpe.encode(L, D, out=out), out)
    row = np.full(D, -7.0, np.float32)
    broadcast = np.broadcast_to(row, (L, D))
    assert_fails(ValueError, r"\bout\b.*read-only", lambda: sinpe.encode(L, D, out=broadcast), row)
    frozen = np.frombuffer(bytes(4 * L * D), np.float32).reshape(L, D)
    assert_fails(ValueError, r"\bout\b.*read-only", lambda: sinpe.encode(L, D, out=frozen), frozen)


# ------------------------------------------------------------------ encode: sizes
@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (dict(L=2**64, d=D), exact(f"L={2**64}")),
        (dict(L=L, d=2**63), exact(f"d={2**63}")),
        (dict(L=L, d=2**62), r"\bd=4611686018427387904\b"),  # L * d * 4 bytes overflows
        (dict(L=2, d=2**61, dtype=np.float16), r"\bd=2305843009213693952\b"),
        (dict(L=L, d=D, offset=2**70), exact(f"offset={2**70}")),  # not a 64-bit integer
    ],
)
def test_encode_unrepresentable_size_is_overflow_error(kwargs, pattern):
    assert_fails(OverflowError, pattern, lambda: sinpe.encode(**kwargs))


def test_encode_unrepresentable_zero_row_table_is_overflow_or_memory_error():
    """(0, 2**62) float32 has no elements, but NumPy cannot represent its shape either.

    DESIGN.md: a table that cannot be represented is an OverflowError (or
    MemoryError) whose message names the argument and value."""
    with pytest.raises((OverflowError, MemoryError)) as info:
        sinpe.encode(0, 2**62)
    assert re.search(r"\bd\b.*4611686018427387904|4611686018427387904.*\bd\b", str(info.value)), info.value


@pytest.mark.parametrize(
    "rows,d,dtype",
    [(L, 2**46, np.float32), (1, 2**61, np.float16), (2**20, 2**38, np.float64)],
)
def test_encode_unallocatable_table_is_memory_error(rows, d, dtype):
    # far beyond any address space (>= 2**50 bytes), so even with overcommit malloc fails
    assert_fails(MemoryError, str(d), lambda: sinpe.encode(rows, d, dtype=dtype))


# ------------------------------------------------------------------ add_: TypeError
def test_add_list_or_tuple_embeddings_is_type_error():
    x = [[0.0] * D for _ in range(L)]
    assert_fails(TypeError, r"\bembeddings\b", lambda: sinpe.add_(x))
    assert x == [[0.0] * D for _ in range(L)]
    assert_fails(TypeError, r"\bembeddings\b", lambda: sinpe.add_(tuple(map(tuple, x))))
    assert_fails(TypeError, r"\bembeddings\b", lambda: sinpe.add_(np.float32(1.0)))
    assert_fails(TypeError, r"\bembeddings\b", lambda: sinpe.add_(3.0))


def test_add_torch_tensor_is_type_error_pointing_at_numpy(torch):
    t = torch.zeros(2, L, D)
    assert_fails(TypeError, r"\bembeddings\b.*numpy\(\)", lambda: sinpe.add_(t))
    assert (t == 0).all()


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, bool, np.complex64, np.complex128, object, "U2", "M8[s]"], ids=str)
def test_add_unsupported_dtype_is_type_error(dtype):
    x = np.zeros((2, L, D), dtype)
    assert_fails(TypeError, r"\bembeddings\b", lambda: sinpe.add_(x), x)


ADD_TYPE_ERRORS = [
    (dict(n="100"), r"\bn\b"),
    (dict(n=1j), r"\bn\b"),
    (dict(n=None), r"\bn\b"),
    (dict(scale="2"), r"\bscale\b"),
    (dict(scale=2j), r"\bscale\b"),
    (dict(scale=None), r"\bscale\b"),
    (dict(axis=1.0), r"\baxis\b"),
    (dict(axis="0"), r"\baxis\b"),
    (dict(axis=None), r"\baxis\b"),
    (dict(offset=0.5), r"\boffset\b"),
    (dict(offset="1"), r"\boffset\b"),
]


@pytest.mark.parametrize("kwargs,pattern", ADD_TYPE_ERRORS)
def test_add_wrong_kind_of_argument_is_type_error(kwargs, pattern):
    x = fresh_x()
    assert_fails(TypeError, pattern, lambda: sinpe.add_(x, **kwargs), x)


def test_add_keyword_only_arguments():
    x = fresh_x()
    assert_fails(TypeError, "positional", lambda: sinpe.add_(x, 100.0, 0), x)
    assert_fails(TypeError, "scal", lambda: sinpe.add_(x, scaling=2.0), x)


# ------------------------------------------------------------------ add_: ValueError
ADD_VALUE_ERRORS = [
    ((2, L, D), dict(axis=3), exact("axis=3")),
    ((2, L, D), dict(axis=-4), exact("axis=-4")),
    ((2, L, D), dict(axis=2**40), exact(f"axis={2**40}")),
    ((2, L, D), dict(axis=2), r"axis=2\b.*feature"),
    ((2, L, D), dict(axis=-1), r"axis=-1\b.*feature"),
    ((L, D), dict(axis=1), r"axis=1\b.*feature"),
    ((2, L, D), dict(scale=float("nan")), exact("scale=nan")),
    ((2, L, D), dict(scale=float("inf")), exact("scale=inf")),
    ((2, L, D), dict(scale=float("-inf")), exact("scale=-inf")),
    ((2, L, D), dict(n=float("nan")), exact("n=nan")),
    ((2, L, D), dict(n=0.5), exact("n=0.5")),
    ((2, L, D), dict(n=0.0), exact("n=0.0")),
    ((2, L, D), dict(n=1e31), exact("n=1e+31")),
    ((2, L, D), dict(offset=B + 1), exact(f"offset={B + 1}")),
    ((2, L, D), dict(offset=-B - 1), exact(f"offset={-B - 1}")),
    ((2, L, D), dict(offset=B - L + 2), exact(f"offset={B - L + 2}")),  # last row at 2**24 + 1
    ((L, 2, D), dict(offset=B - L + 2, axis=0), exact(f"offset={B - L + 2}")),
    ((2, L, D), dict(offset=-(2**62)), exact(f"offset={-(2**62)}")),
]


@pytest.mark.parametrize("shape,kwargs,pattern", ADD_VALUE_ERRORS)
def test_add_wrong_value_is_value_error(shape, kwargs, pattern):
    x = fresh_x(shape=shape)
    assert_fails(ValueError, pattern, lambda: sinpe.add_(x, **kwargs), x)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_add_one_dimensional_or_scalar_embeddings_is_value_error(dtype):
    x = fresh_x(dtype, shape=(D,))
    assert_fails(ValueError, r"\bembeddings\b.*ndim=1", lambda: sinpe.add_(x), x)
    assert_fails(ValueError, r"\bembeddings\b", lambda: sinpe.add_(x, axis=0), x)
    s = np.zeros((), dtype)
    assert_fails(ValueError, r"\bembeddings\b.*ndim=0", lambda: sinpe.add_(s), s)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_add_read_only_embeddings_is_value_error(dtype):
    x = fresh_x(dtype)
    x.setflags(write=False)
    assert_fails(ValueError, r"\bembeddings\b.*read-only", lambda: sinpe.add_(x), x)
    base = fresh_x(dtype, shape=(L, D))
    broadcast = np.broadcast_to(base, (3, L, D))
    assert_fails(ValueError, r"\bembeddings\b.*read-only", lambda: sinpe.add_(broadcast), base)


# Writeable views whose elements share memory: an in-place write would hit the
# same bytes several times (add_ would add the table more than once).
def _overlapping_views(dtype):
    from numpy.lib.stride_tricks import as_strided

    base = fresh_x(dtype, shape=(4 * L * D,))
    item = base.itemsize
    return base, [
        as_strided(base, (L, D), (0, item)),  # every row is row 0
        as_strided(base, (L, D), (item, item)),  # rows shifted by one element
        as_strided(base, (2, L, D), (0, D * item, item)),  # a broadcast batch
        as_strided(base, (L, D), (D * item, 0)),  # every column is column 0
    ]


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_encode_out_with_shared_elements_is_value_error(dtype):
    base, views = _overlapping_views(dtype)
    for view in views[:2] + views[3:]:
        assert view.flags.writeable
        assert_fails(ValueError, r"\bout\b.*share memory", lambda: sinpe.encode(L, D, out=view), base)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_add_embeddings_with_shared_elements_is_value_error(dtype):
    base, views = _overlapping_views(dtype)
    for view in views:
        assert_fails(ValueError, r"\bembeddings\b.*share memory", lambda: sinpe.add_(view, axis=-2), base)


def test_views_numpy_makes_are_not_mistaken_for_overlapping():
    """The overlap test is sufficient, not exact: every layout NumPy produces must pass it."""
    block = np.zeros((6, 5, 8), np.float32)
    for view in [block, block.T, block[::-1, ::2, 1:], block.transpose(1, 0, 2), block[:, :1], block[:, 2:3, ::-3]]:
        assert sinpe.add_(view, axis=0 if view.shape[0] > 1 else 1) is view
    for out in [np.zeros((8, 5)).T, np.zeros((5, 16))[:, ::2], np.zeros((1, 8)), np.zeros((0, 8))]:
        assert sinpe.encode(*out.shape, out=out) is out


def test_add_too_many_positions_is_value_error():
    x = np.zeros((B + 2, 0), np.float32)  # positions 0 .. 2**24 + 1, no memory needed
    assert_fails(ValueError, r"embeddings\.shape\[axis\]=16777218", lambda: sinpe.add_(x, axis=0))


@pytest.mark.parametrize("kwargs,pattern", [(dict(offset=2**70), exact(f"offset={2**70}")), (dict(axis=2**70), exact(f"axis={2**70}"))])
def test_add_integer_beyond_64_bits_is_overflow_error(kwargs, pattern):
    x = fresh_x()
    assert_fails(OverflowError, pattern, lambda: sinpe.add_(x, **kwargs), x)



# ---------------------------------------------------------------------------
# One rule for integer arguments, NumPy's: a bool is not an integer (NumPy
# refuses np.zeros(True) and axis=True with TypeError), everywhere alike.

@pytest.mark.parametrize("flag", [True, False, np.True_], ids=["True", "False", "np.True_"])
@pytest.mark.parametrize("call, name", [
    (lambda b: sinpe.encode(b, 4), "L"),
    (lambda b: sinpe.encode(4, b), "d"),
    (lambda b: sinpe.encode(4, 4, offset=b), "offset"),
    (lambda b: sinpe.add_(np.zeros((2, 3, 4)), axis=b), "axis"),
    (lambda b: sinpe.add_(np.zeros((2, 3, 4)), offset=b), "offset"),
    (lambda b: sinpe.encode_at([1, 2], b), "d"),
    (lambda b: sinpe.rope(b, 4), "L"),
    (lambda b: sinpe.encode_grid((b, 3), 4), "shape"),
    (lambda b: sinpe.encode_grid((2, 3), 4, split=(b, 3)), "split"),
    (lambda b: sinpe.encode_grid((2, 3), 4, order=(b, 0)), "order"),
    (lambda b: sinpe.set_num_threads(b), "threads"),
], ids=["L", "d", "offset", "axis", "add-offset", "encode_at-d", "rope-L", "shape", "split",
        "order", "threads"])
def test_a_bool_is_not_an_integer_anywhere(call, name, flag):
    before = sinpe.get_num_threads()
    with pytest.raises(TypeError, match=rf"\b{name} must be an integer, not (numpy\.)?bool"):
        call(flag)
    assert sinpe.get_num_threads() == before


# ------------------------------------------------------------------ rope_
# rope_(x, ...): every bad call raises before anything is written, and x keeps
# its bytes.  x is (2, L, D) float32 unless the case gives a shape.
ROPE_TYPE_ERRORS = [
    (dict(n="100"), r"\bn\b"),
    (dict(n=1j), r"\bn\b"),
    (dict(scale="2"), r"\bscale\b"),
    (dict(scale=2j), r"\bscale\b"),
    (dict(scale=None), r"\bscale\b"),
    (dict(axis=1.0), r"\baxis\b"),
    (dict(offset=0.5), r"\boffset\b"),
    (dict(rotary_dim=4.0), r"\brotary_dim\b"),
    (dict(rotary_dim=True), r"\brotary_dim\b"),
    (dict(exact=1), r"\bexact\b"),
    (dict(exact="yes"), r"\bexact\b"),
    (dict(layout=1), r"\blayout\b"),
    (dict(positions=[[0.5j] * L] * 2), r"\bpositions\b"),
    (dict(positions=np.zeros((2, L), bool)), r"\bpositions\b"),
    (dict(freq=["a"] * (D // 2)), r"\bfreq\b"),
    (dict(freq=np.zeros(D // 2, complex)), r"\bfreq\b"),
]


@pytest.mark.parametrize("kwargs,pattern", ROPE_TYPE_ERRORS)
def test_rope_wrong_kind_of_argument_is_type_error(kwargs, pattern):
    x = fresh_x()
    assert_fails(TypeError, pattern, lambda: sinpe.rope_(x, **kwargs), x)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.uint8, bool, np.complex64, object], ids=str)
def test_rope_integer_or_other_dtype_is_type_error(dtype):
    x = np.zeros((2, L, D), dtype)
    assert_fails(TypeError, r"\bx\b.*dtype", lambda: sinpe.rope_(x), x)
    assert_fails(TypeError, r"\bx\b", lambda: sinpe.rope_(x.tolist()))


ROPE_VALUE_ERRORS = [
    ((2, L, D), dict(rotary_dim=5), exact("rotary_dim=5")),  # odd
    ((2, L, D), dict(rotary_dim=D + 2), exact(f"rotary_dim={D + 2}")),  # too large
    ((2, L, D), dict(rotary_dim=0), exact("rotary_dim=0")),
    ((2, L, D), dict(rotary_dim=-2), exact("rotary_dim=-2")),
    ((2, L, 7), {}, r"x\.shape\[-1\]=7 is odd"),  # an odd head dimension
    ((2, L, 1), dict(rotary_dim=2), exact("rotary_dim=2")),
    ((2, L, D), dict(axis=2), r"axis=2\b.*feature"),
    ((2, L, D), dict(axis=-1), r"axis=-1\b.*feature"),
    ((2, L, D), dict(axis=3), exact("axis=3")),
    ((2, L, D), dict(axis=-4), exact("axis=-4")),
    ((2, L, D), dict(positions=np.zeros((3, L))), r"positions has shape \(3, 4\).*broadcast"),
    ((2, L, D), dict(positions=np.zeros((L + 1,))), r"positions.*broadcast"),
    ((2, L, D), dict(positions=np.zeros((1, 2, L))), r"positions.*broadcast"),
    ((2, L, D), dict(positions=[0, 1, 2, B + 1]), r"positions.*16777217"),
    ((2, L, D), dict(positions=[0.0, 1.0, np.nan, 2.0]), r"positions.*nan"),
    ((2, L, D), dict(positions=[0, 1, 2, 3], offset=0), r"offset and positions"),
    ((2, L, D), dict(positions=[0, 1, 2, 3], axis=1), r"axis and positions"),
    ((2, L, D), dict(offset=B - L + 2), exact(f"offset={B - L + 2}")),
    ((L, 2, D), dict(offset=-B - 1, axis=0), exact(f"offset={-B - 1}")),
    ((2, L, D), dict(freq=np.ones(D // 2 + 1)), r"freq has 4 entries; rotary_dim=6"),
    ((2, L, D), dict(freq=np.ones(2), rotary_dim=6), r"freq has 2 entries"),
    ((2, L, D), dict(freq=np.ones((1, D // 2))), r"freq must be 1-D"),
    ((2, L, D), dict(freq=[1.0, -1.0, 1.0]), r"freq.*>= 0"),
    ((2, L, D), dict(freq=[1e9] * 3), r"freq.*radians"),
    ((2, L, D), dict(freq=[1.0] * 3, n=100.0), r"freq and n are exclusive"),
    ((2, L, D), dict(n=0.5), exact("n=0.5")),
    ((2, L, D), dict(n=float("nan")), exact("n=nan")),
    ((2, L, D), dict(scale=float("inf")), exact("scale=inf")),
    ((2, L, D), dict(scale=float("nan")), exact("scale=nan")),
    ((2, L, D), dict(layout="sines_first"), r"layout"),
    ((2, L, D), dict(layout="half"), r"layout"),
]


@pytest.mark.parametrize("shape,kwargs,pattern", ROPE_VALUE_ERRORS)
def test_rope_wrong_value_is_value_error(shape, kwargs, pattern):
    x = fresh_x(shape=shape)
    assert_fails(ValueError, pattern, lambda: sinpe.rope_(x, **kwargs), x)


def test_rope_read_only_overlapping_or_one_dimensional_x_is_value_error():
    x = fresh_x()
    x.setflags(write=False)
    assert_fails(ValueError, r"\bx\b.*read-only", lambda: sinpe.rope_(x), x)
    base, views = _overlapping_views(np.float32)
    for view in views:
        assert_fails(ValueError, r"\bx\b.*share memory", lambda: sinpe.rope_(view), base)
    v = fresh_x(shape=(D,))
    assert_fails(ValueError, r"\bx\b.*ndim=1", lambda: sinpe.rope_(v), v)


@pytest.mark.parametrize("kwargs,pattern", [(dict(offset=2**70), exact(f"offset={2**70}")),
                                            (dict(rotary_dim=2**70), exact(f"rotary_dim={2**70}"))])
def test_rope_integer_beyond_64_bits_is_overflow_error(kwargs, pattern):
    x = fresh_x()
    assert_fails(OverflowError, pattern, lambda: sinpe.rope_(x, **kwargs), x)


@pytest.mark.parametrize("name", ["axis", "offset", "rotary_dim"])
def test_rope_a_bool_is_not_an_integer(name):
    x = fresh_x()
    assert_fails(TypeError, rf"\b{name} must be an integer, not bool",
                 lambda: sinpe.rope_(x, **{name: True}), x)


def test_add_positions_that_do_not_broadcast_is_value_error():
    x = fresh_x()
    assert_fails(ValueError, r"positions has shape \(3,\).*embeddings\.shape\[:-1\] = \(2, 4\)",
                 lambda: sinpe.add_(x, positions=np.arange(3)), x)
    assert_fails(ValueError, r"positions.*broadcast", lambda: sinpe.add_(x, positions=np.zeros((3, 1))), x)


# ------------------------------------------------------------------ sections
# rope_/rope with sections=: x is (2, L, 8) float32 (4 frequency pairs) and
# positions (3, 2, L) unless the case says otherwise; nothing is written.
SECTIONS_D = 8
P3 = np.zeros((3, 2, L), np.int64)
SECTIONS_ERRORS = [
    (ValueError, dict(sections=(1, 2, 1)), r"sections need positions="),
    (ValueError, dict(sections=(1, 2, 1), positions=P3[:2]),
     exact("positions has shape (2, 2, 4); with sections=(1, 2, 1) it needs a leading axis of "
           "length 3")),
    (ValueError, dict(sections=(1, 2, 1), positions=np.zeros(L)), r"positions has shape \(4,\)"),
    (ValueError, dict(sections=(1, 2, 1), positions=np.int64(3)), r"positions has shape \(\)"),
    (ValueError, dict(sections=(1, 2, 2), positions=P3),
     exact("sections=(1, 2, 2) count 5 frequency pairs in all; x.shape[-1] // 2 = 4")),
    (ValueError, dict(sections=(1, 1), positions=P3[:2], rotary_dim=6),
     exact("sections=(1, 1) count 2 frequency pairs in all; rotary_dim // 2 = 3")),
    (ValueError, dict(sections=(-1, 3, 2), positions=P3), exact("sections[0]=-1")),
    (ValueError, dict(sections=(), positions=P3), r"sections=\(\) must have 1 to 64 entries"),
    (ValueError, dict(sections=(0,) * 65, positions=P3), r"1 to 64 entries"),
    (ValueError, dict(sections=(2, 1, 1), positions=P3, sections_layout="diagonal"),
     exact("sections_layout must be 'contiguous' or 'interleaved', got "
           "sections_layout='diagonal'")),
    (ValueError, dict(sections_layout="interleaved", positions=P3[0]),
     exact("sections_layout is given without sections")),
    (ValueError, dict(sections=(1, 2, 1), positions=P3, sections_layout="interleaved"),
     exact("which gives section 1 1 pairs, not sections[1]=2")),
    (ValueError, dict(sections=(1, 2, 1), positions=np.zeros((3, 3, L))),
     r"each positions\[s\] has shape \(3, 4\), which does not broadcast against "
     r"x\.shape\[:-1\] = \(2, 4\)"),
    (ValueError, dict(sections=(1, 2, 1), positions=P3, offset=2), r"offset and positions"),
    (ValueError, dict(sections=(2, 2), positions=np.full((2, 2, L), 2.0**24 + 1)),
     r"positions.*16777217"),
    (TypeError, dict(sections=4, positions=P3), r"sections must be a sequence of integers"),
    (TypeError, dict(sections="112", positions=P3), r"sections must be a sequence of integers"),
    (TypeError, dict(sections=(1.0, 2, 1), positions=P3), r"sections\[0\] must be an integer"),
    (TypeError, dict(sections=(1, True, 2), positions=P3), r"sections\[1\] must be an integer"),
    (TypeError, dict(sections=(2, 2), positions=P3[:2], sections_layout=1),
     r"sections_layout must be a str"),
    (OverflowError, dict(sections=(2**70, 1), positions=P3[:2]), exact(f"sections[0]={2**70}")),
]


@pytest.mark.parametrize("error,kwargs,pattern", SECTIONS_ERRORS)
def test_rope_bad_sections_raise_before_anything_is_written(error, kwargs, pattern):
    x = fresh_x(shape=(2, L, SECTIONS_D))
    assert_fails(error, pattern, lambda: sinpe.rope_(x, **kwargs), x)
    out = np.full_like(x, 7.0)
    assert_fails(error, pattern, lambda: sinpe._core._rope_into(out, x.copy(), **kwargs), out)
    assert_fails(error, pattern, lambda: sinpe._core._rope_into(None, x, **kwargs), x)


@pytest.mark.parametrize("kwargs,pattern", [
    (dict(L=3, sections=(1, 2, 1)), r"sections need L=None and positions="),
    (dict(L=None, positions=P3[0], sections=(1, 2, 1)), r"positions has shape \(2, 4\)"),
    (dict(L=None, positions=P3, sections=(1, 2, 2)), exact("d // 2 = 4")),
    (dict(L=None, positions=P3, sections=(1, 2, 1), sections_layout="interleaved"),
     r"interleaved"),
    (dict(L=None, positions=P3[0], sections_layout="contiguous"), r"without sections"),
])
def test_rope_caches_bad_sections_are_value_errors(kwargs, pattern):
    outs = (fresh_out(shape=(2, L, SECTIONS_D)), fresh_out(shape=(2, L, SECTIONS_D)))
    rest = {k: v for k, v in kwargs.items() if k != "L"}
    assert_fails(ValueError, pattern,
                 lambda: sinpe.rope(kwargs["L"], SECTIONS_D, out=outs, **rest), *outs)
