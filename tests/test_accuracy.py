"""sinpe's numerical promises (DESIGN.md section 1), against the tests' own references.

* float32 output is within 2**-24 of the exact value for every |p| <= 2**24.
  Measured against the float64 reference, whose own error is
  conftest.double_error_bound (|p w| (|ln w| + 3) u + u, derived there), so the
  element-wise test is |f32 - ref| <= 2**-24 + double_error_bound.  The same
  promise is also checked against mpmath, with no allowance for a reference.
* float16 output is the double value rounded once.  Rounding to nearest is
  monotonic, so when float16(ref - e) == float16(ref + e) every real number
  within e of ref rounds to the same float16.  Taking e = the reference's
  error bound + sinpe's double error bound (conftest.sinpe_double_bound), both
  sinpe's double and the exact value lie within e of ref: there sinpe's
  float16 must equal float16(ref) exactly; elsewhere (ref within e of a float16
  rounding boundary) it must be one of the two neighbours.
* float16 and float32 output are bit-identical to sinpe's own float64 output
  cast by NumPy: one rounding from the same double.
* float64 output agrees with mpmath (50 digits, w = n**(-2k/d) from the exact
  n and d) within sinpe_double_bound: |p w| c u + small constant, where
  c = |ln w| + 3 <= ln n + 3 (exponent rounding |ln w| u, pow 2u, product u)
  and the constant is the value error (2 sqrt(2) + 2) u plus, for p < 0, the
  extra product rounding of the restart anchor (conftest, RESTART_ROWS).
"""
from __future__ import annotations

import mpmath
import numpy as np
import pytest

import sinpe
from conftest import (
    MAX_POSITION,
    REFERENCE_TRIG_ULPS,
    U32,
    U64,
    double_error_bound,
    freq64,
    numpy_add,
    positions_of,
    sample_offsets,
    sinpe_double_bound,
    table64,
)

ROWS = 64  # rows per sampled window
DS = [1, 2, 7, 512, 513]
NS = [1.0, 100.0, 10000.0, 2.5, 1e30]


def windows(seed: int, count: int = 6):
    rng = np.random.default_rng(seed)
    return sample_offsets(rng, ROWS, count)


def test_windows_reach_both_ends_and_negative_positions():
    offsets = windows(0)
    positions = np.concatenate([positions_of(o, ROWS) for o in offsets])
    assert positions.min() == -MAX_POSITION and positions.max() == MAX_POSITION
    assert (positions < 0).sum() > ROWS and (np.abs(positions) > 2**23).sum() > ROWS


def test_bounds_are_what_sinpe_exports():
    assert sinpe.MAX_POSITION == MAX_POSITION == 2**24
    assert sinpe.MIN_BASE == 1.0 and sinpe.MAX_BASE == 1e30


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_float32_within_2_pow_minus_24_of_float64_reference(d, n):
    for offset in windows(d):
        positions = positions_of(offset, ROWS)
        ours = sinpe.encode(ROWS, d, n, offset=offset)
        assert ours.dtype == np.float32 and ours.shape == (ROWS, d)
        ref = table64(positions, d, n)
        err = np.abs(ours.astype(np.float64) - ref)
        bound = U32 + double_error_bound(positions, d, n)
        bad = np.argwhere(err > bound)
        assert bad.size == 0, (
            f"offset={offset}: |f32 - ref| = {err[tuple(bad[0])]:.3e} > {bound[tuple(bad[0])]:.3e} "
            f"at (row, col) = {tuple(bad[0])}"
        )


@pytest.mark.parametrize("n", [100.0, 10000.0])
def test_float32_full_table_5000_by_512(n):
    L, d = 5000, 512
    positions = positions_of(0, L)
    err = np.abs(sinpe.encode(L, d, n).astype(np.float64) - table64(positions, d, n))
    assert (err <= U32 + double_error_bound(positions, d, n)).all(), err.max()


@pytest.mark.parametrize("n", NS)
@pytest.mark.parametrize("d", DS)
def test_float16_is_reference_rounded_once(d, n):
    checked = 0
    for offset in windows(d + 1):
        positions = positions_of(offset, ROWS)
        ours = sinpe.encode(ROWS, d, n, offset=offset, dtype=np.float16)
        assert ours.dtype == np.float16 and ours.shape == (ROWS, d)
        ref = table64(positions, d, n)
        e = double_error_bound(positions, d, n) + sinpe_double_bound(positions, d, n)
        lo, hi = (ref - e).astype(np.float16), (ref + e).astype(np.float16)
        certain = lo == hi
        np.testing.assert_array_equal(ours[certain], ref.astype(np.float16)[certain])
        assert ((ours == lo) | (ours == hi)).all()
        checked += certain.sum()
    # the exception must stay rare, or the test above would check nothing
    assert checked >= 0.99 * len(windows(d + 1)) * ROWS * d


def bits(a: np.ndarray) -> np.ndarray:
    return a.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize])


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
@pytest.mark.parametrize("d", [7, 512])
def test_narrow_output_is_float64_output_rounded_once(dtype, d):
    cases = [(5000, 0)] + [(ROWS, o) for o in windows(d + 2, count=3)]
    for L, offset in cases:
        wide = sinpe.encode(L, d, 10000.0, offset=offset, dtype=np.float64)
        narrow = sinpe.encode(L, d, 10000.0, offset=offset, dtype=dtype)
        np.testing.assert_array_equal(bits(narrow), bits(wide.astype(dtype)))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 2.0, 0.5, -1.0, 0.0, 22.627416997969522, 0.1])
def test_add_is_numpy_x_times_scale_plus_the_table(dtype, scale):
    """add_ leaves x bit-identical to NumPy's x * x.dtype.type(scale) + T, T the
    table in x's dtype (float16: NumPy's half arithmetic)."""
    B, L, d, offset = 3, 200, 33, -100
    rng = np.random.default_rng(7)
    x = (rng.standard_normal((B, L, d)) * 4).astype(dtype)
    expected = numpy_add(x, sinpe.encode(L, d, 100.0, offset=offset, dtype=dtype)[None], scale)
    got = sinpe.add_(x, 100.0, offset=offset, scale=scale)
    assert got is x and x.dtype == dtype
    np.testing.assert_array_equal(bits(x), bits(expected))


# ------------------------------------------------------------------ mpmath
def exact(p: int, j: int, d: int, n: float) -> mpmath.mpf:
    with mpmath.workdps(50):
        w = mpmath.mpf(n) ** (mpmath.mpf(-2 * (j // 2)) / d)
        return mpmath.sin(p * w) if j % 2 == 0 else mpmath.cos(p * w)


MP_CASES = [(512, 10000.0), (513, 100.0), (7, 1.0), (64, 2.0), (33, 1e30)]


@pytest.mark.parametrize("d,n", MP_CASES)
def test_float64_and_float32_against_mpmath(d, n):
    rng = np.random.default_rng(d)
    offsets = [-MAX_POSITION, MAX_POSITION - 15, -40, -9, 0, 100_000, -3_000_001]
    offsets += [int(o) for o in rng.integers(-MAX_POSITION, MAX_POSITION - 15, size=3)]
    cols = sorted(set(rng.choice(d, size=min(d, 12), replace=False).tolist()) | {0, 1, d - 1})
    for offset in offsets:
        positions = positions_of(offset, 16)
        wide = sinpe.encode(16, d, n, offset=offset, dtype=np.float64)
        narrow = sinpe.encode(16, d, n, offset=offset, dtype=np.float32)
        bound = sinpe_double_bound(positions, d, n)
        for i, p in enumerate(positions.tolist()):
            for j in cols:
                truth = exact(p, j, d, n)
                err64 = abs(float(mpmath.mpf(float(wide[i, j])) - truth))
                assert err64 <= bound[i, j], (p, j, err64 / U64, bound[i, j] / U64)
                err32 = abs(float(mpmath.mpf(float(narrow[i, j])) - truth))
                assert err32 <= U32, (p, j, err32)


@pytest.mark.parametrize("d,n", MP_CASES)
def test_reference_itself_within_its_derived_bound(d, n):
    """The float64 reference's bound (conftest) holds against mpmath: the other tests lean on it."""
    rng = np.random.default_rng(d + 1)
    positions = np.concatenate([[-MAX_POSITION, MAX_POSITION, -1, 0, 1],
                                rng.integers(-MAX_POSITION, MAX_POSITION + 1, size=40)])
    ref = table64(positions, d, n)
    bound = double_error_bound(positions, d, n)
    cols = rng.choice(d, size=min(d, 8), replace=False).tolist()
    for i, p in enumerate(positions.tolist()):
        for j in cols:
            err = abs(float(mpmath.mpf(float(ref[i, j])) - exact(p, j, d, n)))
            assert err <= bound[i, j], (p, j, err / U64, bound[i, j] / U64)


def test_odd_d_last_column_is_a_sine():
    """Seed 003's per-column formula: column d - 1 of an odd d is sin(p * n**(-(d-1)/d))."""
    d, n, L = 9, 100.0, 50
    positions = positions_of(1000, L)
    table = sinpe.encode(L, d, n, offset=1000, dtype=np.float64)
    w_last = n ** (-(d - 1) / d)
    # np.power is SVML on NumPy 1.24-1.26 with AVX-512: equal to Python's pow within 4 ulp
    assert abs(freq64(d, n)[-1] - w_last) <= REFERENCE_TRIG_ULPS * 2.0 * U64 * w_last
    bound = (double_error_bound(positions, d, n) + sinpe_double_bound(positions, d, n))[:, -1]
    assert (np.abs(table[:, -1] - np.sin(positions * w_last)) <= bound).all()
    # and it is not the cosine of the same angle (which a pair-based kernel might write)
    assert np.abs(table[:, -1] - np.cos(positions * w_last)).max() > 0.1
