"""RoPE caches times a scale (YaRN's and LongRoPE's attention factor), rounded once.

``sinpe.rope(..., scale=s)`` must be ``sinpe.rope(..., dtype=float64)`` times ``s``
in double, rounded once to the output dtype: the reference multiplies sinpe's
own float64 caches by ``s`` in NumPy float64 (one rounding, the product's) and
rounds that once to the dtype (test_rope.round_once), so the two agree bit for
bit on every route (range and explicit positions, integral or not, both layouts,
every dtype, strided outputs).
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import assert_bits_equal
from test_rope import DTYPES, LAYOUTS, round_once

import sinpe

SCALES = [1.0, 1.0 / 3.0, 1.2079441541679836, 0.1, 2.0**-30, 3.0e4]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", LAYOUTS)
def test_caches_times_scale_rounded_once(dtype, layout):
    freq = np.geomspace(1.0, 1e-4, 24)
    routes = {
        "range": dict(L=300, offset=-40),
        "positions": dict(L=None, positions=np.array([[0, 7, 2**20], [5, -3, 2**24]])),
        "reals": dict(L=None, positions=np.array([0.5, 1e6 + 0.25, -3.75])),
    }
    for scale in SCALES:
        for route, kw in routes.items():
            for given in ({}, {"freq": freq}):
                d = 48 if given else 64
                wide = sinpe.rope(d=d, dtype=np.float64, layout=layout, **given, **kw)
                got = sinpe.rope(d=d, dtype=dtype, layout=layout, scale=scale, **given, **kw)
                for g, w, name in zip(got, wide, ("cos", "sin")):
                    assert_bits_equal(g, round_once(w * scale, dtype),
                                      f"{name} {route} scale={scale} {given and 'freq'}")


def test_scale_into_strided_and_byte_swapped_outputs():
    scale = 0.7071067811865476
    wide = sinpe.rope(50, 32, dtype=np.float64, offset=3)
    for dtype in (np.dtype(">f4"), np.dtype("<f2")):
        big = np.zeros((50, 64), dtype), np.zeros((50, 64), dtype)
        cos, sin = (b[:, ::2] for b in big)
        sinpe.rope(50, 32, offset=3, scale=scale, out=(cos, sin))
        for g, w in zip((cos, sin), wide):
            assert_bits_equal(g.astype(dtype.newbyteorder("=")),
                              round_once(w * scale, dtype.newbyteorder("=")))
        assert not big[0][:, 1::2].any() and not big[1][:, 1::2].any()  # untouched


def test_scale_one_is_the_default_bit_for_bit():
    for a, b in zip(sinpe.rope(100, 64, offset=7), sinpe.rope(100, 64, offset=7, scale=1.0)):
        assert_bits_equal(a, b)


def test_a_bad_scale_raises_before_anything_is_written():
    out = np.full((4, 8), 7.0, np.float32), np.full((4, 8), 7.0, np.float32)
    for bad, error in ((float("nan"), ValueError), (float("inf"), ValueError),
                       ("2", TypeError), (1j, TypeError)):
        with pytest.raises(error, match="scale"):
            sinpe.rope(4, 8, scale=bad, out=out)
        assert (out[0] == 7).all() and (out[1] == 7).all()
