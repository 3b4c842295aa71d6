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
from conftest import assert_bits_equal, same_or_within_device_bound
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


# -- sinpe.torch.rope_cache ---------------------------------------------------------------

TORCH_DTYPES = {"float16": np.dtype(np.float16), "float32": np.dtype(np.float32),
                "float64": np.dtype(np.float64), "bfloat16": DTYPES[-1]}


@pytest.mark.parametrize("dtype_name", list(TORCH_DTYPES))
def test_rope_cache_is_sinpes_caches_in_a_tensor(torch, dtype_name):
    """Each cache is sinpe.rope's float64 one times scale, rounded once to the dtype:
    the same bits as NumPy's (test_rope.round_once), for range and explicit
    positions given as tensors or arrays, and frequencies given as a tensor (on the
    device path, ``SINPE_TORCH_PATH=device``: within its bound of them,
    conftest.same_or_within_device_bound)."""
    import sinpe.torch as st

    dtype = getattr(torch, dtype_name)
    freq = torch.linspace(1.0, 1e-3, 12, dtype=torch.float64)
    positions = torch.tensor([[3, 2**20 + 1, -7], [0, 1, 2]])
    cases = [
        (dict(L=50, d=24, offset=9, freq=freq, scale=0.75), dict(L=50, d=24, offset=9,
                                                                 freq=freq.numpy())),
        (dict(L=None, d=32, n=500000.0, positions=positions, layout="interleaved"),
         dict(L=None, d=32, n=500000.0, positions=positions.numpy(), layout="interleaved")),
        (dict(L=None, d=24, positions=positions.numpy().astype(np.float64) + 0.5, freq=freq),
         dict(L=None, d=24, positions=positions.numpy() + 0.5, freq=freq.numpy())),
    ]
    for given, plain in cases:
        got = st.rope_cache(**given, dtype=dtype)
        wide = sinpe.rope(**plain, dtype=np.float64)
        scale = given.get("scale", 1.0)
        for g, w in zip(got, wide):
            assert g.dtype is dtype and g.device.type == "cpu" and g.is_contiguous()
            expected = round_once(w * scale, TORCH_DTYPES[dtype_name])
            want = torch.from_numpy(expected.view(  # (NumPy has no bfloat16: by its bits)
                {2: np.int16, 4: np.int32, 8: np.int64}[expected.itemsize])).view(dtype)
            assert same_or_within_device_bound(torch, g, want, scale=scale)


def test_rope_cache_dtype_and_device(torch):
    import sinpe.torch as st

    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        assert st.rope_cache(3, 8)[0].dtype is torch.float64
    finally:
        torch.set_default_dtype(old)
    cos, sin = st.rope_cache(3, 8, device="meta", dtype=torch.bfloat16)
    assert cos.device.type == "meta" and sin.shape == (3, 8)
    with torch.device("meta"):
        assert st.rope_cache(3, 8)[0].device.type == "meta"
    empty = st.rope_cache(0, 8)
    assert empty[0].shape == (0, 8)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(L=4, d=8, dtype="float32"), TypeError, "dtype"),
    (dict(L=4, d=8, dtype="int32"), TypeError, "dtype"),
    (dict(L=4, d=8, device="nowhere"), ValueError, "device"),
    (dict(L=4, d=8, scale=float("nan")), ValueError, "scale"),
    (dict(L=4, d=7), ValueError, "d must be even"),
    (dict(L=-1, d=8), ValueError, "L"),
    (dict(L=2.0, d=8), TypeError, "L"),
    (dict(L=4, d=8, n=0.5), ValueError, "n"),
    (dict(L=4, d=8, offset=2**24), ValueError, "2\\*\\*24|position"),
    (dict(L=None, d=8), ValueError, "positions"),
    (dict(L=4, d=8, positions=[1, 2]), ValueError, "L must be None"),
    (dict(L=None, d=8, positions=[1, 2], offset=3), ValueError, "offset"),
    (dict(L=4, d=8, freq=[1.0, 2.0]), ValueError, "freq"),
    (dict(L=4, d=8, layout="pairs"), ValueError, "layout"),
    (dict(L=2**20, d=2**40), (OverflowError, MemoryError), "large|allocate"),
])
def test_rope_cache_bad_input_raises_before_allocating(torch, kwargs, error, match):
    import sinpe.torch as st

    if kwargs.get("dtype") == "int32":
        kwargs = {**kwargs, "dtype": torch.int32}
    with pytest.raises(error, match=match):
        st.rope_cache(**kwargs)
