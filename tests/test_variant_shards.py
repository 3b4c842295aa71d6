"""The variants' tables cut every way (docs/variants.md), and their bad input.

* Shards: rows computed alone (``offset``, ``encode_at`` subsets, any thread count)
  are bit-identical to the full table, for every variant (hypothesis, derandomized
  under CI like tests/test_properties.py); ``add_`` by every route is NumPy's
  ``x * scale + table``; grids of many bands are each axis's own table.
* Bad input: every new argument, exact exception types, nothing written.

The equivalence table of the codebases' recipes is tests/test_variants.py's.
"""
from __future__ import annotations

import os

import numpy as np
import pytest
from conftest import assert_bits_equal, numpy_add, optional
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sinpe
from reference import variants as V

# ---------------------------------------------------------------------------------------
# Shards: rows computed alone are the rows of the full table, bit for bit
# ---------------------------------------------------------------------------------------
_PROFILE = "ci" if os.environ.get("CI", "").lower() in ("1", "true", "yes") else "dev"
SHARDS = settings(max_examples=int(os.environ.get("SINPE_VARIANT_EXAMPLES", 40)),
                  derandomize=_PROFILE == "ci" or os.environ.get("SINPE_HYPOTHESIS") == "quick",
                  database=None, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow])

variants = st.fixed_dictionaries({
    "layout": st.sampled_from(["interleaved", "concatenated"]),
    "schedule": st.sampled_from(["paper", "fairseq", None]),
    "d": st.integers(1, 80),
    "n": st.sampled_from([10000.0, 2.0, 5e5]),
})


def _kw(v):
    kw = {"layout": v["layout"]}
    if v["schedule"] is None:  # an explicit freq: NTK-like scaled paper frequencies
        kw["freq"] = V.spec_freq(v["d"], v["n"]) * 0.75
    else:
        kw["schedule"], kw["n"] = v["schedule"], v["n"]
    return kw


@SHARDS
@given(v=variants, start=st.integers(-300, 300), data=st.data())
def test_shards_are_bit_identical(v, start, data):
    d, kw = v["d"], _kw(v)
    L = 700
    full = sinpe.encode(L, d, offset=start, **kw)
    lo = data.draw(st.integers(0, L - 1))
    hi = data.draw(st.integers(lo, L))
    assert np.array_equal(sinpe.encode(hi - lo, d, offset=start + lo, **kw), full[lo:hi])
    idx = np.array(data.draw(st.lists(st.integers(0, L - 1), max_size=40)), dtype=np.int64)
    assert np.array_equal(sinpe.encode_at(start + idx, d, **kw), full[idx])
    threads = data.draw(st.integers(1, 4))
    old = sinpe.get_num_threads()
    try:
        sinpe.set_num_threads(threads)
        big = sinpe.encode(4096, d, offset=start, dtype=np.float64, **kw)  # threaded when large
        assert np.array_equal(big[:L].astype(np.float32), full)
        at = sinpe.encode_at(np.arange(start, start + 4096).reshape(64, 64), d, **kw)
        assert np.array_equal(at.reshape(4096, d)[:L], full)
        if "freq" not in kw and d % 2 == 0 and v["layout"] == "concatenated":
            cos, sin = sinpe.rope(4096, d, kw["n"] if v["schedule"] == "paper" else 10000.0,
                                  offset=start)
            part = sinpe.rope(None, d, kw["n"] if v["schedule"] == "paper" else 10000.0,
                              positions=start + idx)
            assert np.array_equal(part[0], cos[idx]) and np.array_equal(part[1], sin[idx])
    finally:
        sinpe.set_num_threads(old)


# bfloat16 is NumPy's only through ml_dtypes: left out only where SINPE_TEST_WITHOUT names it
ml_dtypes = optional("ml_dtypes")
ADD_DTYPES = ["float32", "float64", "float16", ">f4", "<f8", ">f2"] + (["bfloat16"] if ml_dtypes else [])


@SHARDS
@given(v=variants, data=st.data())
def test_add_is_numpy_x_times_scale_plus_the_table(v, data):
    """Every add_ route (positions along an axis or per token; positions that
    repeat across sequences, distinct ones, non-integral ones; padding;
    batch-first or seq-first; any dtype, byte order, stride, scale, thread
    count) leaves x bit-identical to NumPy's x * x.dtype.type(scale) + T, T
    the table encode / encode_at gives in x's dtype; padding rows x * scale."""
    d, kw = v["d"], _kw(v)
    B, L = data.draw(st.integers(1, 6)), data.draw(st.integers(1, 70))
    seq_first = data.draw(st.booleans())
    name = data.draw(st.sampled_from(ADD_DTYPES))
    dtype = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
    scale = data.draw(st.sampled_from([1.0, 0.5, 3.0, -2.0, 0.1, float(np.sqrt(d))]))
    kind = data.draw(st.sampled_from(["range", "repeating", "distinct", "padded", "fractional"]))
    strided = data.draw(st.booleans())
    threads = data.draw(st.integers(1, 3))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**32 - 1)))
    shape = (L, B, d) if seq_first else (B, L, d)
    base = (rng.standard_normal(shape[:2] + (2 * d,)) * 3).astype(dtype)
    x = base[..., ::2] if strided else base[..., :d]
    before = x.copy()
    padding = None
    old = sinpe.get_num_threads()
    try:
        sinpe.set_num_threads(threads)
        if kind == "range":
            offset = data.draw(st.integers(-100, 100))
            sinpe.add_(x, axis=0 if seq_first else 1, offset=offset, scale=scale, **kw)
            pe = sinpe.encode(L, d, offset=offset, dtype=dtype, **kw)
            pe = pe[:, None, :] if seq_first else pe[None, :, :]
        else:
            if kind == "distinct":
                positions = rng.integers(-3000, 3000, (B, L))
            elif kind == "fractional":  # interpolated positions, some integral
                positions = np.round(rng.uniform(-40, 40, (B, L)) * 4) / 4
            else:  # left-padded sequences: the same positions shifted per sequence
                positions = np.arange(L)[None, :] - rng.integers(0, 5, (B, 1))
            padding = positions < 0 if kind == "padded" else None
            if seq_first:
                positions = positions.T
                padding = None if padding is None else padding.T
            sinpe.add_(x, positions=positions, padding=padding, scale=scale, **kw)
            pe = sinpe.encode_at(positions, d, padding=padding, dtype=dtype, **kw)
    finally:
        sinpe.set_num_threads(old)
    assert_bits_equal(x, numpy_add(before, pe, scale, padding), f"{kind} {name}")


def test_add_of_a_wide_table_in_place_and_from_rows_made_once():
    d = 2 * 2048 + 6  # wide: frequency tiles, step rows built per tile
    rng = np.random.default_rng(1)
    for positions in (np.tile(np.arange(-3, 37), (4, 1)),    # repeating: one range per window
                      rng.integers(-5000, 5000, (4, 40))):   # distinct: a row each
        x = rng.standard_normal((4, 40, d)).astype(np.float32)
        before = x.copy()
        sinpe.add_(x, positions=positions, layout="concatenated", schedule="fairseq")
        pe = sinpe.encode_at(positions, d, layout="concatenated", schedule="fairseq",
                             dtype=np.float32)
        assert_bits_equal(x, numpy_add(before, pe))


@SHARDS
@given(v=variants, shape=st.lists(st.integers(1, 9), min_size=1, max_size=3))
def test_grid_chunks_are_shards(v, shape):
    r = len(shape)
    d = r * max(1, v["d"] // r)
    kw = {"layout": v["layout"], "schedule": v["schedule"] or "paper", "n": v["n"]}
    g = sinpe.encode_grid(shape, d, **kw)
    c = d // r
    for a in range(r):
        line = sinpe.encode(shape[a], c, **kw)
        index = [0] * r
        index[a] = slice(None)
        assert np.array_equal(g[tuple(index)][:, a * c:(a + 1) * c], line)


# ---------------------------------------------------------------------------------------
# Bad input: the exact exception, nothing written
# ---------------------------------------------------------------------------------------
BAD = [
    (lambda o: sinpe.encode(4, 8, layout="half", out=o), ValueError, "layout"),
    (lambda o: sinpe.encode(4, 8, layout=1, out=o), TypeError, "layout"),
    (lambda o: sinpe.encode(4, 8, schedule="t2t", out=o), ValueError, "schedule"),
    (lambda o: sinpe.encode(4, 8, freq=[1.0, 0.1, 0.01], out=o), ValueError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=np.ones((2, 2)), out=o), ValueError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=[1, 0.1, np.nan, 0.0], out=o), ValueError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=[1, -0.1, 0.0, 0.0], out=o), ValueError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=[1 + 1j] * 4, out=o), TypeError, "freq"),
    (lambda o: sinpe.encode(4, 8, freq=["a"] * 4, out=o), TypeError, "freq"),
    (lambda o: sinpe.encode(4, 8, offset=2**24 - 3, freq=[5.0] * 4, out=o), ValueError,
     "angle"),
    (lambda o: sinpe.encode(4, 8, freq=[1.0] * 4, schedule="paper", out=o), ValueError,
     "exclusive"),
    (lambda o: sinpe.encode(4, 8, 100.0, freq=[1.0] * 4, out=o), ValueError, "exclusive"),
    (lambda o: sinpe.encode_at([1.5, 2], 8, out=o[:2]), None, None),  # a good call: sanity
    (lambda o: sinpe.encode_at([[1, 2]], 8, out=o[:2]), ValueError, "shape"),
    (lambda o: sinpe.encode_at([True, False], 8, out=o[:2]), TypeError, "positions"),
    (lambda o: sinpe.encode_at(["1", "2"], 8, out=o[:2]), TypeError, "positions"),
    (lambda o: sinpe.encode_at([1j, 2], 8, out=o[:2]), TypeError, "positions"),
    (lambda o: sinpe.encode_at([0, 2**24 + 1], 8, out=o[:2]), ValueError, "positions"),
    (lambda o: sinpe.encode_at(np.array([0, 2**63], np.uint64), 8, out=o[:2]), ValueError,
     "positions"),
    (lambda o: sinpe.encode_at([0.0, np.inf], 8, out=o[:2]), ValueError, "positions"),
    (lambda o: sinpe.encode_at([0.0, np.nan], 8, out=o[:2]), ValueError, "positions"),
    (lambda o: sinpe.encode_at([0, 1], 8, padding=[0, 1], out=o[:2]), TypeError, "padding"),
    (lambda o: sinpe.encode_at([0, 1], 8, padding=[True], out=o[:2]), ValueError, "padding"),
    (lambda o: sinpe.rope(2, 8, out=(o[:2], o[2:])), None, None),
    (lambda o: sinpe.rope(2, 7, out=(o[:2, :7], o[2:, :7])), ValueError, "even"),
    (lambda o: sinpe.rope(2, 8, out=o), TypeError, "tuple"),
    (lambda o: sinpe.rope(2, 8, out=(o[:2], o[:2])), ValueError, "share memory"),
    (lambda o: sinpe.rope(2, 8, out=(o[:2], o[1:3])), ValueError, "share memory"),
    (lambda o: sinpe.rope(2, 8, positions=[1, 2], out=(o[:2], o[2:])), ValueError, "None"),
    (lambda o: sinpe.rope(None, 8, offset=1, positions=[1, 2], out=(o[:2], o[2:])),
     ValueError, "exclusive"),
    (lambda o: sinpe.rope(None, 8, out=(o[:2], o[2:])), ValueError, "positions"),
    (lambda o: sinpe.rope(2, 8, layout="half", out=(o[:2], o[2:])), ValueError, "layout"),
    (lambda o: sinpe.rope(2, 8, freq=[1.0] * 3, out=(o[:2], o[2:])), ValueError, "freq"),
    (lambda o: sinpe.encode_grid((2, 2), 8, out=o.reshape(2, 2, 8)), None, None),
    (lambda o: sinpe.encode_grid((2, 2), 8, split=(3, 3), out=o.reshape(2, 2, 8)), ValueError,
     "split"),
    (lambda o: sinpe.encode_grid((2, 2), 8, split=(8, 0), out=o.reshape(2, 2, 8)), ValueError,
     "split"),
    (lambda o: sinpe.encode_grid((2, 2), 8, split=(8,), out=o.reshape(2, 2, 8)), ValueError,
     "split"),
    (lambda o: sinpe.encode_grid((2, 2), 8, order=(0, 0), out=o.reshape(2, 2, 8)), ValueError,
     "order"),
    (lambda o: sinpe.encode_grid((2, 2), 8, order=(0, 2), out=o.reshape(2, 2, 8)), ValueError,
     "order"),
    (lambda o: sinpe.encode_grid((2, 2), 7, out=o.reshape(2, 2, 8)[..., :7]), ValueError,
     "split"),
    (lambda o: sinpe.encode_grid((2, -2), 8, out=o.reshape(2, 2, 8)), ValueError, "shape"),
    (lambda o: sinpe.encode_grid(4, 8, out=o.reshape(4, 8)), TypeError, "shape"),
    (lambda o: sinpe.encode_grid((2.0, 2), 8, out=o.reshape(2, 2, 8)), TypeError, "shape"),
    (lambda o: sinpe.encode_grid((), 8), ValueError, "shape"),
    (lambda o: sinpe.encode_grid((2, 2), 8, out=o.reshape(4, 8)), ValueError, "shape"),
    (lambda o: sinpe.add_(o, layout="x"), ValueError, "layout"),
    (lambda o: sinpe.add_(o, positions=np.arange(3)), ValueError, "positions"),
    (lambda o: sinpe.add_(o, positions=np.arange(4), offset=1), ValueError, "exclusive"),
    (lambda o: sinpe.add_(o, positions=np.arange(4.0) + 0.5, padding=np.ones(3, bool)),
     ValueError, "padding"),
    (lambda o: sinpe.add_(o, padding=np.ones(4, np.int8)), TypeError, "padding"),
    (lambda o: sinpe.add_(o, positions=[0, 1, 2, 2**25]), ValueError, "positions"),
    (lambda o: sinpe.add_(o, freq=[1e9] * 4), ValueError, "angle"),
    (lambda o: sinpe.add_(o, schedule="fairseq", scale=np.inf), ValueError, "scale"),
]


@pytest.mark.parametrize("case", range(len(BAD)))
def test_bad_input_raises_and_writes_nothing(case):
    call, error, words = BAD[case]
    o = np.full((4, 8), 7.0, dtype=np.float32)
    if error is None:
        call(o)
        assert not np.all(o == 7.0)
        return
    with pytest.raises(error, match=words):
        call(o)
    assert np.all(o == 7.0)


def test_bad_input_on_fresh_arrays_raises_before_allocating():
    with pytest.raises(OverflowError):
        sinpe.encode_at(np.zeros(2**20), 2**62, layout="concatenated")
    with pytest.raises(OverflowError):
        sinpe.encode_grid((2**24, 2**24, 2**24), 2**30, split=(2**29, 2**28, 2**28))
    with pytest.raises(TypeError, match="dtype"):
        sinpe.encode_at([1], 4, dtype=np.int32)
    with pytest.raises(TypeError, match="dtype"):
        sinpe.rope(1, 4, out=(np.zeros((1, 4)), np.zeros((1, 4))), dtype=np.float32)
    with pytest.raises(ValueError, match="read-only"):
        a = np.zeros((2, 4))
        a.flags.writeable = False
        sinpe.encode_grid((2,), 4, out=a)



@pytest.mark.parametrize("shape", [(1, 5), (33, 3), (5, 1, 14, 47), (1, 200)])
def test_grid_axis_with_a_lone_row_in_a_block_repeats_its_own_row(shape):
    """A position alone in its 32-row block with many copies after it (an axis
    of length 1, or 33) is made once and copied to every copy."""
    d = 8 * len(shape)
    g = sinpe.encode_grid(shape, d, dtype=np.float64)
    c = d // len(shape)
    for a in range(len(shape)):
        line = sinpe.encode(shape[a], c, dtype=np.float64)
        moved = np.moveaxis(g[..., a * c:(a + 1) * c], a, 0)
        assert np.array_equal(moved, np.broadcast_to(line.reshape((shape[a],) + (1,) * (len(shape) - 1) + (c,)), moved.shape))


# Grids of several bands (a band holds about 256 KB of rows): rows assembled
# from per-group tiles (plain rows) and rows written group by group (swapped
# bytes, strided columns) are each axis's own table, bit for bit, on any
# number of threads.
GRID_CASES = [((3, 40, 70), 96, "interleaved"),         # bands: spans of axis 1
              ((2, 5, 33, 17), 100, "concatenated"),    # odd column counts per group
              ((12, 30), 2 * 2048 + 8, "interleaved"),  # groups of more than one frequency tile
              ((7, 900), 64, "sines_first")]


def _grid_from_axes(shape, d, dtype, layout):
    """Each axis's own encode, put where the grid's columns for it go."""
    r = len(shape)
    want = np.empty(tuple(shape) + (d,), dtype)
    c = d // r
    for a in range(r):
        flat = "interleaved" if layout == "interleaved" else "concatenated"
        line = sinpe.encode(shape[a], c, dtype=dtype, layout=flat)
        line = line.reshape(tuple(shape[k] if k == a else 1 for k in range(r)) + (c,))
        if layout == "sines_first":  # every axis's sines first, then every axis's cosines
            h = c // 2
            want[..., a * h:(a + 1) * h] = line[..., :h]
            want[..., d // 2 + a * h:d // 2 + (a + 1) * h] = line[..., h:]
        else:
            want[..., a * c:(a + 1) * c] = line
    return want


@pytest.mark.parametrize("shape, d, layout", GRID_CASES)
@pytest.mark.parametrize(
    "dtype", [np.float32, np.float64, ml_dtypes.bfloat16 if ml_dtypes else
               pytest.param(None, marks=pytest.mark.needs("ml_dtypes"), id="bfloat16")]
)
def test_grid_of_many_bands_is_each_axis_table_on_every_path(shape, d, layout, dtype):
    want = _grid_from_axes(shape, d, dtype, layout)
    before = sinpe.get_num_threads()
    try:
        for threads in (1, 2):
            sinpe.set_num_threads(threads)
            assert_bits_equal(sinpe.encode_grid(shape, d, dtype=dtype, layout=layout), want,
                              f"new array, {threads} threads")
            swapped = np.empty(want.shape, np.dtype(dtype).newbyteorder())
            sinpe.encode_grid(shape, d, layout=layout, out=swapped)
            assert_bits_equal(swapped.astype(dtype), want, f"swapped bytes, {threads} threads")
            wide = np.zeros(tuple(shape) + (2 * d,), dtype)
            sinpe.encode_grid(shape, d, layout=layout, out=wide[..., ::2])
            assert_bits_equal(wide[..., ::2], want, f"strided columns, {threads} threads")
            assert not wide[..., 1::2].any()
    finally:
        sinpe.set_num_threads(before)
