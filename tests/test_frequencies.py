"""The schedules' frequencies are the correctly rounded ``n ** e``, bit for bit.

sinpe computes ``w_k = n ** e_k`` with its own pow (``csrc/core/pow.h``), not the
platform's libm, so that a table's bits are a function of its arguments alone on
every platform.  ``e_k`` is the double the C code forms (paper ``-(2k) / d``,
fairseq ``-k / max(d // 2 - 1, 1)``, one rounding each), and ``w_k`` must be the
exact ``n ** e_k`` rounded once to the nearest double: mpmath's power at 200 bits,
rounded to 53.  No ``n ** e`` in the domain is exactly a midpoint between two
doubles (a dyadic ``n ** e`` is a power of two), so the 200-bit value rounds the
same way as the exact one.

``sinpe._core._frequencies(n, d, schedule)`` returns a table's frequencies as the
kernels use them.  The comparisons are exact (``==`` on the bits), so a result one
ulp off fails (``test_the_comparison_catches_one_ulp``); ``HARD_CASES`` lie within
``2**-10`` ulp of a midpoint (most within ``2**-19``), where a pow that is merely
within 0.52 ulp (glibc's bound) or has an internal error of ``2**-70`` may round the
wrong way: glibc 2.36's pow does so on 11 of them.
"""
from __future__ import annotations

import functools
import math
import os

import mpmath
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sinpe
from sinpe._core import _frequencies

SCHEDULES = ("paper", "fairseq")
# the bases in use and the ends of the range, then arbitrary ones (fixed, so every
# run checks the same; hypothesis draws more below)
BASES = (1.0, 2.0, 10.0, 10000.0, 500000.0, 1e6, 1e30,
         1.0000000000000002, 3.7, 12345.678, 2.5e7, 6.02214076e23)
_rng = np.random.default_rng(20261123)
BASES += tuple(float(10.0 ** x) for x in _rng.uniform(0.0, 30.0, 3))
# every d up to 48, then widths models use and odd ones
SMALL_WIDTHS = tuple(range(1, 49)) + (64, 100, 255, 512, 1000, 1023, 1024, 4096)

_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PROPERTY = settings(max_examples=150, derandomize=_CI, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])

# (n, d, k, schedule) whose n ** e_k lies closest to a midpoint among all d <= 4096
# (found by scanning every k; the comment: the distance).  sinpe's fast path
# cannot round these; its accurate path decides.
HARD_CASES = (
    (10000.0, 512, 223, "paper"),  # mingw's pow is one ulp off here (2**-10.8 ulp)
    (2.0, 3588, 811, "fairseq"),  # 2**-26.5 ulp
    (2.0, 3648, 756, "fairseq"),  # 2**-21.1 ulp
    (2.0, 3586, 811, "paper"),  # 2**-26.5 ulp
    (2.0, 3095, 349, "paper"),  # 2**-23.3 ulp
    (10.0, 3046, 1451, "fairseq"),  # 2**-23.0 ulp
    (10.0, 2346, 619, "fairseq"),  # 2**-21.5 ulp
    (10.0, 3044, 1451, "paper"),  # 2**-23.0 ulp
    (10.0, 2121, 526, "paper"),  # 2**-21.8 ulp
    (10000.0, 4076, 991, "fairseq"),  # 2**-28.3 ulp
    (10000.0, 962, 257, "fairseq"),  # 2**-22.3 ulp
    (10000.0, 4074, 991, "paper"),  # 2**-28.3 ulp
    (10000.0, 3707, 1274, "paper"),  # 2**-23.0 ulp
    (500000.0, 4040, 1396, "fairseq"),  # 2**-23.5 ulp
    (500000.0, 3184, 1030, "fairseq"),  # 2**-22.9 ulp
    (500000.0, 2721, 71, "paper"),  # 2**-25.3 ulp
    (500000.0, 3347, 1598, "paper"),  # 2**-23.5 ulp
    (1e6, 3652, 1749, "fairseq"),  # 2**-21.4 ulp
    (1e6, 3696, 627, "fairseq"),  # 2**-21.4 ulp
    (1e6, 3650, 1749, "paper"),  # 2**-21.4 ulp
    (1e6, 3694, 627, "paper"),  # 2**-21.4 ulp
    (1e30, 2680, 648, "fairseq"),  # 2**-21.3 ulp
    (1e30, 2000, 349, "fairseq"),  # 2**-19.2 ulp
    (1e30, 3549, 877, "paper"),  # 2**-22.5 ulp
    (1e30, 1339, 324, "paper"),  # 2**-21.3 ulp
)


def exponents(d: int, schedule: str, ks) -> np.ndarray:
    """The doubles e_k of csrc/plan/frequencies.c: step * k exact, one rounding in the division
    (NumPy divides elementwise with IEEE division, as C does)."""
    k = np.asarray(ks, dtype=np.float64)
    if schedule == "paper":
        return -(2.0 * k) / float(d)
    m = d // 2
    return -k / (float(m - 1) if m - 1 > 1 else 1.0)


def frequency_count(d: int, schedule: str) -> int:
    return (d + 1) // 2 if schedule == "paper" else d // 2


@functools.lru_cache(maxsize=None)
def exact_power(n: float, e: float) -> mpmath.mpf:
    with mpmath.workprec(200):
        return mpmath.mpf(n) ** mpmath.mpf(e)


def correctly_rounded(n: float, e: float) -> float:
    # explicitly to nearest (float() would follow the context's rounding mode)
    return mpmath.libmp.to_float(exact_power(n, e)._mpf_, rnd=mpmath.libmp.round_nearest)


def assert_correctly_rounded(n: float, es: np.ndarray, got: np.ndarray) -> int:
    """got[i] == the correctly rounded n ** es[i], bit for bit.  Returns the count."""
    assert got.dtype == np.float64 and got.shape == es.shape
    want = np.array([correctly_rounded(n, float(e)) for e in es], dtype=np.float64)
    bad = np.flatnonzero(got.view(np.uint64) != want.view(np.uint64))
    assert bad.size == 0, (
        f"n={n!r}: {bad.size} of {es.size} frequencies are not n ** e correctly rounded, "
        f"first e={float(es[bad[0]])!r}: got {float(got[bad[0]]).hex()}, "
        f"want {float(want[bad[0]]).hex()}")
    return es.size


def ulps_from_midpoint(n: float, e: float) -> float:
    """How far the exact n ** e lies from the nearest midpoint between doubles, in
    ulps of its rounding (0: on a midpoint, 0.5: on a double)."""
    c = correctly_rounded(n, e)
    with mpmath.workprec(200):
        return float(0.5 - abs((exact_power(n, e) - c) / math.ulp(c)))


# ---------------------------------------------------------------------------

def test_the_comparison_catches_one_ulp():
    es = exponents(64, "paper", range(32))
    good = _frequencies(10000.0, 64)
    assert assert_correctly_rounded(10000.0, es, good) == 32
    for i in (1, 17, 31):
        for toward in (0.0, 2.0):
            bad = good.copy()
            bad[i] = np.nextafter(bad[i], toward)
            with pytest.raises(AssertionError, match="not n \\*\\* e correctly rounded"):
                assert_correctly_rounded(10000.0, es, bad)


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("n", BASES)
def test_every_frequency_of_small_and_common_widths(n, schedule):
    checked = 0
    for d in SMALL_WIDTHS:
        count = frequency_count(d, schedule)
        got = _frequencies(n, d, schedule)
        assert got.shape == (count,)
        checked += assert_correctly_rounded(n, exponents(d, schedule, range(count)), got)
    assert checked == sum(frequency_count(d, schedule) for d in SMALL_WIDTHS)


@pytest.mark.parametrize("n, d, k, schedule", HARD_CASES)
def test_values_next_to_a_midpoint(n, d, k, schedule):
    e = float(exponents(d, schedule, [k])[0])
    # the case is what it claims: a wrong rounding is one sloppy step away
    assert ulps_from_midpoint(n, e) < 2.0**-10
    assert_correctly_rounded(n, np.array([e]), _frequencies(n, d, schedule)[k:k + 1])


@pytest.mark.parametrize("n, d, schedule", [
    (10000.0, 2**20, "paper"), (10000.0, 2**20, "fairseq"), (2.0, 2**20 + 1, "paper"),
    (1e30, 2**20 + 2, "fairseq"), (500000.0, 2**24, "paper"),
])
def test_large_widths_sampled(n, d, schedule):
    got = _frequencies(n, d, schedule)
    count = frequency_count(d, schedule)
    assert got.shape == (count,)
    rng = np.random.default_rng(d)
    ks = np.unique(np.concatenate([np.arange(64), np.arange(count - 64, count),
                                   rng.integers(0, count, 400)]))
    assert_correctly_rounded(n, exponents(d, schedule, ks), got[ks])
    # the ends: 1, and for fairseq exactly 1/n (e = -1)
    assert got[0] == 1.0
    if schedule == "fairseq":
        assert got[-1] == 1.0 / n


@PROPERTY
@given(n=st.floats(min_value=1.0, max_value=1e30) | st.sampled_from(BASES),
       d=st.integers(min_value=1, max_value=70000), schedule=st.sampled_from(SCHEDULES),
       picks=st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=8))
def test_any_base_and_width(n, d, schedule, picks):
    count = frequency_count(d, schedule)
    got = _frequencies(n, d, schedule)
    assert got.shape == (count,)
    if count == 0:
        return
    ks = np.unique([min(int(p * count), count - 1) for p in picks] + [count - 1])
    assert_correctly_rounded(n, exponents(d, schedule, ks), got[ks])


def test_exact_powers_are_exact():
    # dyadic exponents: (2**64) ** (-2k/128) = 2**-k; 4 ** (-k/2) = 2**-k (fairseq,
    # d = 6: max(3 - 1, 1) = 2).  (2**40, d = 80 would not do: -2k/80 is rounded.)
    assert np.array_equal(_frequencies(2.0**64, 128), 2.0 ** -np.arange(64))
    assert np.array_equal(_frequencies(4.0, 6, "fairseq"), [1.0, 0.5, 0.25])
    assert np.array_equal(_frequencies(1.0, 33), np.ones(17))
    assert np.array_equal(_frequencies(1e30, 2, "fairseq"), [1.0])


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_tables_use_these_frequencies(schedule):
    for n, d in ((10000.0, 63), (500000.0, 512), (1e30, 4100)):
        w = _frequencies(n, d, schedule)
        table = sinpe.encode(40, d, n, offset=-7, schedule=schedule, dtype=np.float64)
        assert np.array_equal(table, sinpe.encode(40, d, offset=-7, freq=w, dtype=np.float64))


def test_bad_arguments_fail_as_encode_does():
    with pytest.raises(ValueError, match="n must be a finite base"):
        _frequencies(0.5, 8)
    with pytest.raises(ValueError, match="n must be a finite base"):
        _frequencies(float("nan"), 8)
    with pytest.raises(ValueError, match="d must be >= 1"):
        _frequencies(10000.0, 0)
    with pytest.raises(TypeError, match="d must be an integer"):
        _frequencies(10000.0, 8.0)
    with pytest.raises(ValueError, match="schedule must be 'paper' or 'fairseq'"):
        _frequencies(10000.0, 8, "rope")
    assert _frequencies(10000.0, 1, "fairseq").shape == (0,)
