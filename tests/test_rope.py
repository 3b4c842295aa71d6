"""rope_: rotary position embeddings applied in place (DESIGN.md section 2), against NumPy.

* Default arithmetic: ``x`` ends bit-identical to NumPy's own
  ``x * C + rotate_half(x) * S``, ``C, S`` being ``sinpe.rope(..., dtype=float64)``
  times ``scale`` rounded once to ``x.dtype``; float16 and bfloat16 (ml_dtypes)
  in NumPy's half arithmetic.  Every route: dtypes, layouts, position axes
  ((B, H, L, D) and (B, L, H, D) with axis=1), positions that broadcast, float
  positions, partial rotary, scale, explicit frequencies, wide heads (several
  frequency tiles), strides and byte order, 1 to 3 threads, out of place, the
  inverse (transposed) rotation, caches given per column (HF's
  apply_rotary_pos_emb).
* ``exact=True``: every element is the exact rotation of x's values by the
  double caches, rounded once; where that rotation lies within
  ``2**-52 * (|a c| + |b s|)`` of a rounding boundary, either neighbour
  (checked with exact rational arithmetic, and against mpmath's rotation by the
  exact angle at long positions, with the caches' own error added).
* Features past ``rotary_dim`` keep their bits; positions and frequencies are
  snapshots even when they live inside ``x``; ``add_`` broadcasts positions
  the same way.
"""
from __future__ import annotations

import math
from fractions import Fraction

import ml_dtypes
import numpy as np
import pytest
from conftest import U64, assert_bits_equal, sinpe_double_bound
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sinpe
from sinpe import _core

BF16 = np.dtype(ml_dtypes.bfloat16)
DTYPES = [np.dtype(np.float16), np.dtype(np.float32), np.dtype(np.float64), BF16]
LAYOUTS = ["concatenated", "interleaved"]


# -- the reference: NumPy's own arithmetic ------------------------------------------------


def rotate_half(x: np.ndarray, layout: str) -> np.ndarray:
    """HF's rotate_half (concatenated) or GPT-J's rotate_every_two (interleaved)."""
    if layout == "interleaved":
        out = np.empty_like(x)
        out[..., 0::2] = -x[..., 1::2]
        out[..., 1::2] = x[..., 0::2]
        return out
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def round_once(values: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """float64 values rounded once (to nearest even) to dtype.  NumPy rounds
    float64 to float16 directly; bfloat16 goes through a float32 rounded to odd
    (toward zero, last bit set if inexact), whose RNE rounding is the one of the
    double."""
    values = np.asarray(values, np.float64)
    with np.errstate(over="ignore"):  # beyond the type's range: infinities
        return _round_once(values, dtype)


def _round_once(values, dtype):
    if dtype != BF16:
        return values.astype(dtype)
    narrow = values.astype(np.float32)
    inexact = narrow.astype(np.float64) != values
    bits = narrow.view(np.uint32).copy()
    bits -= (inexact & (np.abs(narrow.astype(np.float64)) > np.abs(values))).astype(np.uint32)
    bits |= inexact.astype(np.uint32)
    return bits.view(np.float32).astype(BF16)


def caches(shape, *, n=10000.0, offset=0, axis=-2, positions=None, layout="concatenated",
           freq=None, rotary_dim=None, scale=1.0, inverse=False):
    """sinpe's float64 (cos, sin) times scale, shaped to broadcast against x[..., :r]."""
    ndim, r = len(shape), rotary_dim or shape[-1]
    kw = {"dtype": np.float64, "layout": layout}
    kw.update({"freq": freq} if freq is not None else {"n": n})
    if positions is None:
        axis %= ndim
        cos, sin = sinpe.rope(shape[axis], r, offset=offset, **kw)
        cshape = [1] * ndim
        cshape[axis], cshape[-1] = shape[axis], r
    else:
        positions = np.asarray(positions)
        cos, sin = sinpe.rope(None, r, positions=positions, **kw)
        cshape = [1] * (ndim - 1 - positions.ndim) + list(positions.shape) + [r]
    cos, sin = (cos * scale).reshape(cshape), (sin * scale).reshape(cshape)
    return cos, -sin if inverse else sin


def numpy_rope(x: np.ndarray, **kw) -> np.ndarray:
    """What rope_ must leave in x (a new native array), computed by NumPy."""
    layout = kw.get("layout", "concatenated")
    native = x.astype(x.dtype.newbyteorder("="))
    cos, sin = caches(x.shape, **kw)
    r = cos.shape[-1]
    C, S = round_once(cos, native.dtype), round_once(sin, native.dtype)
    out = native.copy()
    part = native[..., :r]
    with np.errstate(all="ignore"):
        out[..., :r] = part * C + rotate_half(part, layout) * S
    return out


def sample(shape, dtype, seed=0, spread=False):
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(shape)
    if spread:  # magnitudes over many binades, and some exact zeros
        values *= 2.0 ** rng.integers(-12, 12, shape)
        values[rng.random(shape) < 0.02] = 0.0
    return values.astype(dtype)


def native(a: np.ndarray) -> np.ndarray:
    return a.astype(a.dtype.newbyteorder("="))


def check(x: np.ndarray, what: str = "", **kw) -> np.ndarray:
    want = numpy_rope(x, **kw)
    got = sinpe.rope_(x, **{k: v for k, v in kw.items() if k != "inverse"})
    assert got is x
    assert_bits_equal(native(got), want, what)
    return got


# -- default arithmetic, bit for bit ------------------------------------------------------

CASES = {
    "(B, H, L, D)": dict(shape=(2, 3, 37, 16), kw=dict(offset=3)),
    "(B, L, H, D) axis=1": dict(shape=(2, 37, 3, 16), kw=dict(offset=100, axis=1)),
    "(L, D) negative positions": dict(shape=(45, 8), kw=dict(offset=-20, axis=0)),
    "seq-first (L, B, H, D) axis=0": dict(shape=(33, 2, 2, 8), kw=dict(offset=5, axis=0)),
    "partial rotary_dim": dict(shape=(2, 3, 9, 20), kw=dict(rotary_dim=12, offset=7)),
    "scale": dict(shape=(2, 2, 9, 16), kw=dict(scale=1.0 / 3.0, offset=1)),
    "theta 5e5 near 2**20": dict(shape=(1, 2, 40, 64), kw=dict(n=500000.0, offset=2**20 - 20)),
    "near 2**24": dict(shape=(1, 1, 33, 8), kw=dict(offset=2**24 - 32)),
    "freq (Llama 3 style)": dict(
        shape=(2, 2, 9, 16),
        kw=dict(freq=500000.0 ** (-np.arange(0, 16, 2) / 16) / [1, 1, 2, 8, 8, 8, 8, 8])),
    "wide head (3 frequency tiles)": dict(shape=(2, 3, 2200), kw=dict(offset=9)),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("case", sorted(CASES))
def test_default_is_numpys_formula_bit_for_bit(case, dtype, layout):
    shape, kw = CASES[case]["shape"], CASES[case]["kw"]
    check(sample(shape, dtype, spread=True), case, layout=layout, **kw)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_positions_broadcast_against_the_rows(dtype, layout):
    """HF's position_ids[:, None, :] for (B, H, L, D): one rotation per (batch,
    position) shared by the heads; left padding (positions that restart), a
    scalar, and float positions (interpolation) too."""
    rng = np.random.default_rng(1)
    x = sample((3, 4, 21, 16), dtype)
    position_ids = np.stack([np.arange(21), np.arange(21) + 5000,
                             np.maximum(np.arange(21) - 6, 0)])
    check(x.copy(), "position_ids[:, None, :]", positions=position_ids[:, None, :], layout=layout)
    check(x.copy(), "(L,) for every batch and head", positions=np.arange(21) * 3, layout=layout)
    check(x.copy(), "a scalar", positions=np.int64(77), layout=layout)
    check(x.copy(), "full shape, random", positions=rng.integers(-2**24, 2**24, (3, 4, 21)),
          layout=layout)
    check(x.copy(), "float positions", positions=position_ids[:, None, :] / 2.5, layout=layout)
    check(x.copy(), "unsigned", positions=np.arange(21, dtype=np.uint16), layout=layout)


def test_strides_and_byte_order_give_the_contiguous_bits():
    x = sample((4, 6, 10, 32), np.float32, spread=True)
    want = numpy_rope(x, offset=11)
    views = {
        "transposed heads": np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3),
        "negative strides": np.ascontiguousarray(x[::-1, :, ::-1, :])[::-1, :, ::-1, :],
        "gaps": np.pad(x, ((0, 0), (0, 1), (0, 3), (0, 5)))[:, :6, :10, :32],
        "strided features": np.repeat(x, 2, axis=-1)[..., ::2],
        "big-endian": x.astype(">f4"),
    }
    buffer = np.zeros(x.nbytes + 1, np.uint8)  # elements at odd addresses
    views["unaligned"] = buffer[1:].view(np.float32).reshape(x.shape)
    views["unaligned"][...] = x
    for name, view in views.items():
        assert np.array_equal(native(view), x)
        sinpe.rope_(view, offset=11)
        assert_bits_equal(native(view), want, name)


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, BF16], ids=str)
def test_byte_swapped_half_types_and_partial_rotary(dtype):
    x = sample((2, 5, 9, 24), dtype, spread=True)
    want = numpy_rope(x, offset=3, rotary_dim=16, layout="interleaved")
    swapped = x.astype(x.dtype.newbyteorder())
    sinpe.rope_(swapped, offset=3, rotary_dim=16, layout="interleaved")
    assert_bits_equal(native(swapped), want)


@pytest.mark.parametrize("threads", [2, 3])
@pytest.mark.parametrize("case", ["heads-first", "axis=1", "positions", "exact bf16"])
def test_threads_give_the_bits_of_one(threads, case):
    """Large enough to run in parallel: the same bits on 1, 2 and 3 threads."""
    calls = {
        "heads-first": (lambda: sample((2, 16, 700, 64), np.float32), dict(offset=3)),
        "axis=1": (lambda: sample((2, 700, 16, 64), np.float32), dict(offset=3, axis=1)),
        "positions": (lambda: sample((2, 16, 700, 64), np.float32),
                      dict(positions=np.stack([np.arange(700), np.arange(700) + 40])[:, None])),
        "exact bf16": (lambda: sample((2, 16, 700, 64), BF16), dict(exact=True, scale=0.75)),
    }
    make, kw = calls[case]
    before = sinpe.get_num_threads()
    try:
        sinpe.set_num_threads(1)
        one = sinpe.rope_(make(), **kw)
        sinpe.set_num_threads(threads)
        many = sinpe.rope_(make(), **kw)
    finally:
        sinpe.set_num_threads(before)
    assert_bits_equal(many, one, case)


def test_features_past_rotary_dim_keep_their_bits():
    """NaN payloads, infinities, signed zeros: untouched, in place and out of place."""
    x = sample((2, 3, 11, 24), np.float32)
    tail = np.array([np.nan, -np.nan, np.inf, -0.0, 0.0, 1e-45, 3.0, -7.5], np.float32)
    bits = tail.view(np.uint32).copy()
    bits[0] |= 0x1234  # a NaN with a payload
    x[..., 16:] = bits.view(np.float32)
    before = x.copy()
    sinpe.rope_(x, rotary_dim=16)
    assert np.array_equal(x[..., 16:].view(np.uint32), before[..., 16:].view(np.uint32))
    out = np.full_like(x, 9.0)
    _core._rope_into(out, before, rotary_dim=16)
    assert np.array_equal(out.view(np.uint32), x.view(np.uint32))


def test_out_of_place_equals_in_place_and_the_inverse_is_the_transpose():
    x = sample((2, 4, 50, 32), np.float32)
    for kw in (dict(offset=5), dict(positions=np.arange(50)[::-1].copy(), layout="interleaved"),
               dict(scale=0.5, rotary_dim=24)):
        out = np.empty_like(x)
        _core._rope_into(out, x, **kw)
        assert_bits_equal(out, sinpe.rope_(x.copy(), **kw), str(kw))
        back = np.empty_like(x)
        _core._rope_into(back, x, inverse=True, **kw)
        assert_bits_equal(back, numpy_rope(x, inverse=True, **kw), f"inverse {kw}")
    # in float64, the inverse undoes the rotation (a rotation's transpose is its inverse)
    x64 = sample((3, 40, 16), np.float64)
    y = np.empty_like(x64)
    _core._rope_into(y, x64, offset=2**20, n=500000.0)
    z = np.empty_like(x64)
    _core._rope_into(z, y, offset=2**20, n=500000.0, inverse=True)
    np.testing.assert_allclose(z, x64, rtol=0, atol=4 * U64 * 8)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_given_caches_are_hf_formula_per_column(dtype, layout):
    """_rotate_by (sinpe.torch.apply_rotary_pos_emb's kernel): any cos/sin, each
    column its own value, broadcast as HF's unsqueeze(1) does."""
    rng = np.random.default_rng(3)
    q = sample((2, 4, 9, 16), dtype, spread=True)
    cos = rng.standard_normal((2, 1, 9, 16)).astype(dtype)
    sin = rng.standard_normal((2, 1, 9, 16)).astype(dtype)
    with np.errstate(all="ignore"):
        want = q * cos + rotate_half(q, layout) * sin
    out = np.full_like(q, 5.0)
    _core._rotate_by(out, q, cos, sin, layout=layout)
    assert_bits_equal(out, want)
    out2 = np.full_like(q, 5.0)  # strided, byte-swapped caches: the element path
    _core._rotate_by(out2, q, cos.astype(cos.dtype.newbyteorder())[..., :],
                     np.repeat(sin, 2, axis=-1)[..., ::2], layout=layout)
    assert_bits_equal(out2, want)


def test_rows_rotated_alone_equal_the_same_rows_of_the_whole():
    """Positions are absolute: any slice of the sequence, rotated alone with its
    offset, has the bits of the same rows rotated together, on every tile size."""
    x = sample((2, 2, 300, 16), np.float32)
    whole = sinpe.rope_(x.copy(), offset=-77)
    for start, stop in [(0, 1), (5, 37), (31, 33), (100, 300), (299, 300)]:
        part = sinpe.rope_(x[:, :, start:stop].copy(), offset=-77 + start)
        assert_bits_equal(part, whole[:, :, start:stop], f"rows {start}..{stop}")
        alone = sinpe.rope_(x[:, :, start:stop].copy(),
                            positions=np.arange(start, stop)[None, None] - 77)
        assert_bits_equal(alone, whole[:, :, start:stop], f"positions {start}..{stop}")


def test_positions_and_frequencies_inside_x_are_snapshots():
    """positions= and freq= that are views of x's own memory: the result is the
    same as with private copies (the kernel never reads what it wrote)."""
    x = sample((2, 40, 8), np.float64)
    x[0, :, :] = np.arange(40 * 8).reshape(40, 8) % 37  # integral values: positions
    positions = x[0, :, 0]
    want = numpy_rope(x, positions=positions.copy())
    sinpe.rope_(x, positions=positions)
    assert_bits_equal(x, want, "positions inside x")
    y = sample((3, 6, 8), np.float64)
    y[0, 0, :4] = [1.0, 0.5, 0.25, 0.125]
    freq = y[0, 0, :4]
    want = numpy_rope(y, freq=freq.copy(), offset=2)
    sinpe.rope_(y, freq=freq, offset=2)
    assert_bits_equal(y, want, "freq inside x")


def test_empty_arrays_are_returned_unchanged():
    for shape in [(0, 4, 8), (2, 0, 8), (2, 3, 0, 8)]:
        x = np.zeros(shape, np.float32)
        assert sinpe.rope_(x) is x
    assert sinpe.rope_(np.zeros((2, 0, 8)), positions=np.zeros((2, 0))).shape == (2, 0, 8)


def test_add_broadcasts_positions_the_same_way():
    x = sample((2, 3, 9, 16), np.float32)
    positions = np.stack([np.arange(9), np.arange(9) + 100])[:, None, :]
    want = sinpe.add_(x.copy(), positions=np.broadcast_to(positions, (2, 3, 9)).copy())
    got = sinpe.add_(x.copy(), positions=positions)
    assert_bits_equal(got, want)
    assert_bits_equal(sinpe.add_(x.copy(), positions=np.arange(9)),
                      sinpe.add_(x.copy(), offset=0))


# -- exact=True ------------------------------------------------------------------------------

FORMATS = {np.dtype(np.float32): (24, -125), np.dtype(np.float16): (11, -13), BF16: (8, -125)}


def spacing(v: Fraction, precision: int, emin: int) -> Fraction:
    """The distance between the format's neighbours around v (v != 0): 2**(e - p),
    e the frexp exponent of |v| (2**(e-1) <= |v| < 2**e), at least emin (subnormals)."""
    e = math.frexp(float(abs(v)))[1]
    while Fraction(2) ** (e - 1) > abs(v):
        e -= 1
    while Fraction(2) ** e <= abs(v):
        e += 1
    return Fraction(2) ** (max(e, emin) - precision)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", [np.dtype(np.float32), np.dtype(np.float16), BF16], ids=str)
def test_exact_is_the_correctly_rounded_rotation(dtype, layout):
    """Against exact rational arithmetic: |got - v| <= spacing(v)/2 + eps, and got
    is the correctly rounded v unless v lies within eps of a midpoint."""
    precision, emin = FORMATS[dtype]
    x = sample((2, 3, 6, 16), dtype, spread=True, seed=5)
    offset, n, scale = 2**20 - 3, 500000.0, 0.8
    got = sinpe.rope_(x.copy(), offset=offset, n=n, scale=scale, exact=True, layout=layout)
    cos, sin = caches(x.shape, offset=offset, n=n, scale=scale, layout=layout)
    cos, sin = np.broadcast_to(cos, x.shape), np.broadcast_to(sin, x.shape)
    partner = rotate_half(x.astype(np.float64), layout)
    xs = x.astype(np.float64)
    near_midpoints = 0
    for index in np.ndindex(x.shape):
        a, w = Fraction(float(xs[index])), Fraction(float(partner[index]))
        c, s = Fraction(float(cos[index])), Fraction(float(sin[index]))
        v = a * c + w * s
        eps = Fraction(2) ** -52 * (abs(a * c) + abs(w * s))
        g = Fraction(float(got[index]))
        if v == 0:
            assert g == 0, index
            continue
        ulp = spacing(v, precision, emin)
        assert abs(g - v) <= ulp / 2 + eps, (index, float(g), float(v))
        q = v / ulp
        rounded = round(q) * ulp  # to nearest, ties to even
        to_midpoint = abs(q - (math.floor(q) + Fraction(1, 2))) * ulp
        if g != rounded:
            assert to_midpoint <= eps, (index, float(g), float(rounded))
            near_midpoints += 1
    assert near_midpoints <= 2


@pytest.mark.parametrize("dtype", [np.float32, np.float16, BF16], ids=str)
def test_exact_against_mpmath_at_long_positions(dtype):
    """Against the rotation by the exact angle p * n**(-2k/r) (mpmath, 40 digits):
    half an ulp, plus eps, plus the double caches' own error times |a| + |b|."""
    mpmath = pytest.importorskip("mpmath")
    mpmath.mp.dps = 40
    precision, emin = FORMATS[np.dtype(dtype)]
    r, n = 16, 500000.0
    positions = np.array([0, 1, 8191, 2**20, 2**24 - 1, -(2**23) - 5])
    x = sample((len(positions), r), dtype, seed=9)
    got = sinpe.rope_(x.copy(), positions=positions, n=n, exact=True)
    cache_error = sinpe_double_bound(positions, r, n)[:, 0::2]  # per position and pair
    half = r // 2
    for i, p in enumerate(positions):
        for k in range(half):
            theta = mpmath.mpf(int(p)) * mpmath.power(mpmath.mpf(n), mpmath.mpf(-2 * k) / r)
            a, b = mpmath.mpf(float(x[i, k])), mpmath.mpf(float(x[i, k + half]))
            exact = (a * mpmath.cos(theta) - b * mpmath.sin(theta),
                     b * mpmath.cos(theta) + a * mpmath.sin(theta))
            for j, v in zip((k, k + half), exact):
                slack = (abs(float(a)) + abs(float(b))) * (cache_error[i, k] + 2.0**-52)
                ulp = float(spacing(Fraction(float(v)), precision, emin)) if v != 0 else 0.0
                assert abs(float(got[i, j]) - float(v)) <= ulp / 2 + slack, (p, k, j)


# -- random calls (hypothesis) ---------------------------------------------------------------

PROFILE = settings(max_examples=120, deadline=None, derandomize=True,
                   suppress_health_check=[HealthCheck.too_slow])


@PROFILE
@given(data=st.data())
def test_random_calls_are_numpys_formula(data):
    ndim = data.draw(st.integers(2, 4))
    shape = tuple(data.draw(st.lists(st.integers(1, 7), min_size=ndim - 1, max_size=ndim - 1)))
    d = 2 * data.draw(st.integers(1, 40)) + data.draw(st.sampled_from([0, 0, 1]))
    shape = shape + (d,)
    dtype = data.draw(st.sampled_from(DTYPES))
    kw: dict = {"layout": data.draw(st.sampled_from(LAYOUTS))}
    if d % 2 or data.draw(st.booleans()):
        kw["rotary_dim"] = 2 * data.draw(st.integers(1, d // 2))
    r = kw.get("rotary_dim", d)
    if data.draw(st.booleans()):
        kw["scale"] = data.draw(st.sampled_from([0.5, 1.0 / 3.0, 2.0, 1e-3, 0.0]))
    if data.draw(st.booleans()):
        axis = data.draw(st.integers(0, ndim - 2))
        kw["axis"] = axis - ndim if data.draw(st.booleans()) else axis
        kw["offset"] = data.draw(st.integers(-2**24, 2**24 - shape[axis] + 1))
    else:
        rows = shape[:-1]
        pshape = tuple(1 if data.draw(st.booleans()) else s for s in rows)
        pshape = pshape[data.draw(st.integers(0, len(pshape))):]
        kw["positions"] = np.asarray(
            data.draw(st.lists(st.integers(-2**24, 2**24), min_size=int(np.prod(pshape)),
                               max_size=int(np.prod(pshape))))).reshape(pshape)
    if data.draw(st.integers(0, 4)) == 0:
        kw["freq"] = np.asarray(data.draw(st.lists(st.floats(0, 1), min_size=r // 2,
                                                   max_size=r // 2)))
    x = sample(shape, dtype, seed=data.draw(st.integers(0, 2**16)), spread=True)
    if data.draw(st.booleans()):
        x = x.astype(x.dtype.newbyteorder())
    if "freq" in kw:
        most = np.max(np.abs(kw["positions"])) if "positions" in kw else \
            max(abs(kw["offset"]), abs(kw["offset"] + shape[kw["axis"]] - 1))
        if np.max(kw["freq"]) * (most + 32) > sinpe.MAX_POSITION * 4:
            with pytest.raises(ValueError, match="freq"):
                sinpe.rope_(x, **kw)
            return
    check(x, str(kw), **kw)
