"""Exact sin and cos of p * w (mpmath), and the error bounds of their evaluations.

For tests/test_diffusers_recipes.py: ``pairs`` gives the exact values of a table's
frequency pairs, and the ``check_*`` functions hold sinpe's and diffusers' (torch's)
values to the bounds derived here.

Bounds (derived, first order; U = 2**-24, u = 2**-53; ``w' = base**(-e)`` the power
before ``linear_factor``, ``p w`` the exact angle, ``|ln w'|`` the exponent's size)
--------------------------------------------------------------------------------------
sinpe's double value (conftest: the kernel's frequency within ``(|ln w'| + 2) u``, the
angle's product ``u``, the value ``SINPE_VALUE_ERROR`` u; the frequencies handed to it
here, ``rope_frequencies(...) / linear_factor`` and NumPy's ``M ** (-k / c)``, are within
the same ``(|ln w'| + 2) u``), plus ``r`` u per rounding of its inputs (``scale * t``):

    |p w| (|ln w'| + 3 + r) u + SINPE_VALUE_ERROR u

torch's double (``1 / base ** fl(e)`` [``/ linear_factor``], then ``pos * w``): the
exponent ``|ln w'|``, pow (SLEEF's 1-ulp kernels) 2, the reciprocal 1, the factor 1,
the product 1; sin and cos (SLEEF, 1 ulp) ``TRIG64_ULPS`` u:

    |p w| (|ln w'| + 4 + r) u + TRIG64_ULPS u

torch's float32, as tests/test_variant_recipes.py counts: a relative error ``(a |ln w'| +
b) U`` of the frequency (``a`` roundings feed the exponent, ``b`` after it, 2 per ulp of
exp or pow), ``U`` the angle's product, ``TRIG_ULPS`` U sin and cos; plus the double terms.

    get_timestep_embedding    fl(fl(fl(-ln M) * i) / (h - shift)), exp, * t [, * scale]
                              a = 3, b = 2 EXP_ULPS [+ 1]
    get_1d_rotary_pos_embed   fl(2k / dim), base ** (base rounded to float32), 1 / .
                              [/ fl(linear_factor)]: a = 1, b = 2 POW_ULPS + 2 [+ 2]
    get_1d_sincos_..._grid    fl(k / (D/2)), 10000 ** ., 1 / .: a = 1, b = 2 POW_ULPS + 1
    (float64 ``pos`` with float32 frequencies: the product in double, sin and cos in
    double, then rounded to float32: u, TRIG64_ULPS u + U/2 instead)

Library accuracy assumed: torch's float32 sin/cos <= 2 ulp, exp and pow <= 3 ulp (its
CPU kernels are SLEEF's 1-ulp ones); float64 sin, cos and pow <= 1 ulp (SLEEF's u10, or
the C library's for a vector's tail).
"""
from __future__ import annotations

import functools
import math

import mpmath
import numpy as np
from conftest import SINPE_VALUE_ERROR, U32, U64

TRIG_ULPS, EXP_ULPS, POW_ULPS, TRIG64_ULPS = 2, 3, 3, 1
U, u = U32, U64

@functools.lru_cache(maxsize=None)
def _exact(positions: bytes, base: float, denom: float, count: int, lf: float, pmul: float):
    P = np.frombuffer(positions)
    s, c = np.empty((P.size, count)), np.empty((P.size, count))
    with mpmath.workprec(113):  # angles up to 1e6: 1e-28 absolute
        mpf = mpmath.mpf
        ws = [mpmath.power(mpf(base), -mpf(k) / mpf(denom)) / mpf(lf) for k in range(count)]
        for i, p in enumerate(P):
            for k, w in enumerate(ws):
                ck, sk = mpmath.cos_sin(mpf(float(p)) * mpf(pmul) * w)
                s[i, k], c[i, k] = float(sk), float(ck)
    return s, c


def pairs(positions, base, denom, count, *, lf=1.0, pmul=1.0):
    """sin, cos of the exact angles p * pmul * base**(-k/denom) / lf (k < count), and the
    bounds' |p w|, |ln w'|, each ``positions.shape + (count,)``."""
    P = np.asarray(positions, dtype=np.float64)
    assert np.all(P >= 0)  # no negative positions here (conftest's RESTART_ROWS term)
    unique, inverse = np.unique(P, return_inverse=True)
    s, c = _exact(unique.tobytes(), base, denom, count, lf, pmul)
    inverse = inverse.reshape(P.shape)
    k = np.arange(count)
    lnw = k / denom * math.log(base)
    pw = np.abs(P[..., None] * pmul) * np.exp(-lnw) / lf
    return s[inverse], c[inverse], pw, np.broadcast_to(lnw, pw.shape)


def sinpe_double(pw, lnw, r=0):
    return pw * (lnw + 3 + r) * u + SINPE_VALUE_ERROR * u


def torch_double(pw, lnw, r=0):
    return pw * (lnw + 4 + r) * u + TRIG64_ULPS * u


def torch_single(pw, lnw, a, b, angle_in_double=False):
    double = pw * (lnw + 4) * u + 2 * u  # the roundings in double (-math.log(M), x itself)
    if angle_in_double:
        return pw * (a * lnw + b) * U + pw * u + TRIG64_ULPS * u + U / 2 + double
    return pw * (a * lnw + b + 1) * U + TRIG_ULPS * U + double


def half_gap32(x):
    """Half the gap between the float32 neighbours of x (0 where x is a float32): the error
    of x rounded once to float32."""
    f = x.astype(np.float32)
    above = f.astype(np.float64) > x
    other = np.where(above, np.nextafter(f, np.float32(-np.inf)),
                     np.nextafter(f, np.float32(np.inf)))
    gap = np.abs(f.astype(np.float64) - other.astype(np.float64))
    return np.where(f.astype(np.float64) == x, 0.0, gap / 2)


def assert_within(err, bound, what):
    if err.size == 0:
        return
    worst = np.unravel_index(np.argmax(err - bound), err.shape)
    assert np.all(err <= bound), (
        f"{what}: error {err[worst]:.3g} > bound {bound[worst]:.3g} at {worst}")


def check_sinpe(got, x, pw, lnw, r=0):
    """sinpe's float32 ``got`` is x rounded once (up to sinpe's double error); its error."""
    assert got.dtype == np.float32 and got.shape == x.shape
    err = np.abs(got.astype(np.float64) - x)
    assert_within(err, half_gap32(x) + sinpe_double(pw, lnw, r) + u, "sinpe")
    return err.max()


def check_single(got, theirs, x, pw, lnw, r, a, b, angle_in_double=False):
    """sinpe's float32 ``got`` is x rounded once (check_sinpe); diffusers' float32 ``theirs``
    is within its float32 bound.  Returns (sinpe's, diffusers') largest errors."""
    assert got.dtype == theirs.dtype == np.float32 and got.shape == theirs.shape == x.shape
    err = check_sinpe(got, x, pw, lnw, r)
    drift = np.abs(theirs.astype(np.float64) - x)
    assert_within(drift, torch_single(pw, lnw, a, b, angle_in_double) + u, "diffusers")
    return err, drift.max()


def check_double(got, theirs, x, pw, lnw, r_sinpe=0, r_torch=0):
    """Both float64 values within their bounds of x."""
    assert got.dtype == theirs.dtype == np.float64 and got.shape == theirs.shape == x.shape
    assert_within(np.abs(got - x), sinpe_double(pw, lnw, r_sinpe) + u, "sinpe")
    assert_within(np.abs(theirs - x), torch_double(pw, lnw, r_torch) + u, "diffusers")


def check_rounded(got, theirs, x, pw, lnw, r_sinpe=0, r_torch=0):
    """Two float32 roundings of double values within R (the larger double error) of x: the
    same bits, but where a rounding boundary lies within R of x.  Rounding is monotone, so
    both are then between the roundings of x - R and x + R (several float32 ulps apart for
    values near 0, whose ulps are finer than the double errors).  Returns how many differ."""
    assert got.dtype == theirs.dtype == np.float32 and got.shape == theirs.shape == x.shape
    differ = got != theirs
    room = np.maximum(sinpe_double(pw, lnw, r_sinpe), torch_double(pw, lnw, r_torch))[differ]
    room += 2 * u  # x's rounding to float64, and that of x -+ room
    lo, hi = (x[differ] - room).astype(np.float32), (x[differ] + room).astype(np.float32)
    assert np.all(lo != hi), "bits differ where no rounding boundary is near"
    for value in (got[differ], theirs[differ]):
        assert np.all((lo <= value) & (value <= hi)), "a rounding beyond the double errors"
    return int(differ.sum())


def complex_parts(z):
    return np.ascontiguousarray(z.real), np.ascontiguousarray(z.imag)


def sincos(s, c, odd=False):
    """[sin | cos] (and a zero column), for the values and the bounds' |p w| and |ln w'|."""
    zero = [np.zeros(s.shape[:-1] + (1,))] if odd else []
    return np.concatenate([s, c, *zero], axis=-1)


def tables(s, c, pw, lnw, odd=False):
    """The exact [sin | cos] table and its |p w|, |ln w'| in the same columns."""
    return sincos(s, c, odd), sincos(pw, pw, odd), sincos(lnw, lnw, odd)


def interleaved(a):
    return np.repeat(a, 2, axis=-1)


def concatenated(a):
    return np.concatenate([a, a], axis=-1)
