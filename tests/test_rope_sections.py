"""Multi-axis RoPE (``sections=``): rope_ and rope against per-section exact caches.

The reference never uses sections: for each section ``s`` it asks
``sinpe.rope(None, r, positions=P[s], dtype=float64)`` (single-axis caches,
themselves held against NumPy and mpmath elsewhere), picks each frequency
pair's columns from its own section's caches by the rule written out here
(``section_of``, itself held against transformers' Qwen2-VL and Qwen3-VL code
in test_rope_sections_torch.py), rounds once to x's dtype, and evaluates
NumPy's ``x * C + rotate_half(x) * S`` in x's arithmetic (``exact=True``: the
float64 rotation rounded once).  rope_ must match it bit for bit: contiguous
(Qwen2-VL), interleaved (Qwen3-VL's [24, 20, 20] and a general S), axial 2-D
with ``freq=``, every dtype, both pair layouts, partial rotary_dim, broadcast
positions, float positions, out of place and inverse, byte-swapped and strided
x, several threads, and one section giving today's single-axis bits.
"""
from __future__ import annotations

import numpy as np
import pytest
import test_rope as R
from conftest import assert_bits_equal

import sinpe
from sinpe import _core

DTYPES = R.DTYPES
LAYOUTS = R.LAYOUTS


# -- the reference ------------------------------------------------------------------------


def section_of(m: int, sections, sections_layout: str = "contiguous") -> np.ndarray:
    """The section of each of the m frequency pairs (docs/multi-axis.md's rule)."""
    S = len(sections)
    if sections_layout == "contiguous":
        return np.repeat(np.arange(S), sections)
    j = np.arange(m)
    of = np.zeros(m, np.intp)
    for s in range(1, S):
        of[(j % S == s) & (j < S * sections[s])] = s
    return of


def section_caches(P, r, sections, sections_layout="contiguous", layout="concatenated", **kw):
    """float64 (cos, sin) of shape P.shape[1:] + (r,): each pair's two columns from
    sinpe.rope of its own section's positions alone."""
    P = np.asarray(P)
    per = [sinpe.rope(None, r, positions=P[s], dtype=np.float64, layout=layout, **kw)
           for s in range(len(sections))]
    of = section_of(r // 2, sections, sections_layout)
    column = np.concatenate([of, of]) if layout == "concatenated" else np.repeat(of, 2)
    caches = []
    for k in range(2):
        stacked = np.stack([c[k] for c in per])  # (S, *rows, r)
        index = np.broadcast_to(column, (1,) + stacked.shape[1:])
        caches.append(np.take_along_axis(stacked, index, axis=0)[0])
    return caches[0], caches[1]


def numpy_rope(x, positions, sections, *, sections_layout="contiguous", layout="concatenated",
               rotary_dim=None, scale=1.0, inverse=False, exact=False, **kw):
    """What rope_ with sections must leave in x (a new native array)."""
    native = R.native(x)
    r = rotary_dim or x.shape[-1]
    cos, sin = section_caches(positions, r, sections, sections_layout, layout, **kw)
    rows = cos.shape[:-1]
    shape = (1,) * (x.ndim - 1 - len(rows)) + rows + (r,)
    cos, sin = (cos * scale).reshape(shape), (sin * scale).reshape(shape)
    sin = -sin if inverse else sin
    out = native.copy()
    part = native[..., :r]
    with np.errstate(all="ignore"):
        if exact:
            wide = part.astype(np.float64)
            out[..., :r] = R.round_once(wide * cos + R.rotate_half(wide, layout) * sin, x.dtype)
        else:
            C, S = R.round_once(cos, native.dtype), R.round_once(sin, native.dtype)
            out[..., :r] = part * C + R.rotate_half(part, layout) * S
    return out


def check(x, positions, sections, what="", **kw):
    want = numpy_rope(x, positions, sections, **kw)
    got = sinpe.rope_(x, positions=positions, sections=sections, **kw)
    assert got is x
    assert_bits_equal(R.native(got), want, what)


def qwen2vl_positions(batch=2, image=(4, 6), text_before=3, text_after=7):
    """(3, batch, L) time, height, width ids as Qwen2-VL's get_rope_index makes them:
    text before an image (t = h = w counting up), the image's patches (t fixed, h and w
    over the grid), text after it continuing from the largest id + 1; each sequence of
    the batch shifted so that they differ."""
    gh, gw = image
    t = np.concatenate([np.arange(text_before), np.full(gh * gw, text_before)])
    h = np.concatenate([np.arange(text_before), text_before + np.repeat(np.arange(gh), gw)])
    w = np.concatenate([np.arange(text_before), text_before + np.tile(np.arange(gw), gh)])
    start = max(t.max(), h.max(), w.max()) + 1
    after = start + np.arange(text_after)
    ids = np.stack([np.concatenate([a, after]) for a in (t, h, w)])  # (3, L)
    return np.stack([ids + 11 * b for b in range(batch)], axis=1)  # (3, batch, L)


# -- the rule -------------------------------------------------------------------------------


def test_interleaved_rule_is_qwen3_vls_for_three_rows():
    """Qwen3-VL's rule written out for [24, 20, 20] of 64 pairs: height at j % 3 == 1,
    width at j % 3 == 2 below 60, time elsewhere (the last four pairs too)."""
    of = section_of(64, (24, 20, 20), "interleaved")
    j = np.arange(64)
    want = np.where((j % 3 == 1) & (j < 60), 1, np.where((j % 3 == 2) & (j < 60), 2, 0))
    assert np.array_equal(of, want)
    assert np.bincount(of).tolist() == [24, 20, 20]


def test_caches_with_sections_are_the_per_section_caches():
    """sinpe.rope(None, d, positions=P, sections=...) against the per-section
    construction, in every dtype (rounded once from the float64 caches) and both
    pair layouts; the rows are P.shape[1:]."""
    P = qwen2vl_positions()
    for sections, rule in [((4, 6, 6), "contiguous"), ((6, 5, 5), "interleaved"),
                           ((16,), "contiguous")]:
        Ps = P[: len(sections)]
        for layout in LAYOUTS:
            want = section_caches(Ps, 32, sections, rule, layout)
            for dtype in DTYPES:
                got = sinpe.rope(None, 32, positions=Ps, sections=sections, sections_layout=rule,
                                 layout=layout, dtype=dtype)
                for g, w in zip(got, want, strict=True):
                    assert g.shape == P.shape[1:] + (32,)
                    assert_bits_equal(g, R.round_once(w, np.dtype(dtype)), f"{sections} {layout}")
    # float positions, explicit frequencies, out= of another byte order and strides
    freq = np.concatenate([0.5 ** np.arange(4), 0.5 ** np.arange(4)])
    Pf = np.stack([np.linspace(-3.5, 40.25, 9), np.arange(9.0), np.full(9, 2.5)])
    want = section_caches(Pf, 16, (4, 2, 2), freq=freq)
    outs = tuple(np.zeros((9, 33), ">f4")[:, ::2][:, :16] for _ in range(2))
    got = sinpe.rope(None, 16, positions=Pf, sections=(4, 2, 2), freq=freq, out=outs)
    for g, w in zip(got, want, strict=True):
        assert_bits_equal(R.native(g), w.astype(np.float32))
    # scale (an attention factor) multiplies the float64 caches before the one rounding,
    # with sections as without: each pair is its section's scaled caches, rounded once
    for dtype in DTYPES:
        scaled = section_caches(P, 32, (6, 5, 5), "interleaved", scale=0.75)
        got = sinpe.rope(None, 32, positions=P, sections=(6, 5, 5), sections_layout="interleaved",
                         scale=0.75, dtype=dtype)
        for g, w in zip(got, scaled, strict=True):
            assert_bits_equal(g, R.round_once(w, np.dtype(dtype)), f"scaled {dtype}")


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_contiguous_sections_qwen2_vl(dtype, layout):
    """Qwen2-VL's mrope_section [16, 24, 24] on heads of 128, (3, B, L) ids broadcast
    over the heads as (3, B, 1, L), and the same with a partial rotary_dim."""
    P = qwen2vl_positions()
    x = R.sample((2, 3, P.shape[-1], 128), dtype, spread=True)
    check(x.copy(), P[:, :, None, :], (16, 24, 24), "mrope_section", layout=layout)
    check(x.copy(), P[:, :, None, :], (8, 12, 12), "partial", layout=layout, rotary_dim=64,
          n=1e6)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_interleaved_sections_qwen3_vl_and_general(dtype, layout):
    P = qwen2vl_positions(batch=1)
    x = R.sample((1, 2, P.shape[-1], 128), dtype, spread=True)
    check(x.copy(), P[:, :, None, :], (24, 20, 20), "Qwen3-VL", layout=layout,
          sections_layout="interleaved", n=5e6)
    # S = 4 rows: pairs j % 4 == s below 4 * sections[s], row 0 the rest
    P4 = np.stack([P[0, 0], P[1, 0], P[2, 0], P[0, 0][::-1] * 3])
    x4 = R.sample((2, P4.shape[-1], 40), dtype, spread=True, seed=2)
    check(x4, P4[:, None, :], (8, 4, 4, 4), "S=4", layout=layout,
          sections_layout="interleaved")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_axial_2d_vision_rope_with_freq(dtype):
    """Qwen2-VL's vision tower: the first half of the pairs at the patch's row, the
    second half at its column, the same frequencies in each half: sections=(r/4, r/4)
    with freq twice.  (N, H, D) patches with (2, N, 1) positions."""
    gh, gw, d = 6, 5, 80
    inv_freq = 1.0 / 10000.0 ** (np.arange(0, d // 2, 2) / (d // 2))  # HF's dim = head_dim/2
    freq = np.concatenate([inv_freq, inv_freq])
    rows, cols = np.divmod(np.arange(gh * gw), gw)
    P = np.stack([rows, cols])[:, :, None]  # (2, N, 1) against (N, H)
    x = R.sample((gh * gw, 4, d), dtype, spread=True)
    check(x, P, (d // 4, d // 4), "axial", freq=freq)


def test_one_section_is_todays_rope():
    """sections=(r/2,) with positions (1, ...) gives the single-axis bits."""
    P = np.stack([np.arange(50) * 3 - 20, np.arange(50)])[:, None, :]
    for kw in ({}, dict(layout="interleaved", rotary_dim=16, scale=0.5), dict(exact=True)):
        x = R.sample((2, 3, 50, 32), np.float32, spread=True)
        r = kw.get("rotary_dim", 32)
        want = sinpe.rope_(x.copy(), positions=P, **kw)
        assert_bits_equal(sinpe.rope_(x, positions=P[None], sections=(r // 2,), **kw), want,
                          str(kw))


def test_text_tokens_have_the_single_axis_bits():
    """Every section at one position (a text-only prompt, a decoding step): the bits
    of rope_ at that position alone, for any sections; integral and not, in place,
    out of place, and the caches."""
    p = np.stack([np.arange(300) + 5, np.arange(300)[::-1] * 7])[:, None, :]  # (2, 1, 300)
    for positions in (p, p + 0.25):
        x = R.sample((2, 3, 300, 64), np.float32, spread=True)
        three = np.stack([positions] * 3)
        for kw in (dict(sections=(8, 12, 12)),
                   dict(sections=(12, 10, 10), sections_layout="interleaved", exact=True)):
            want = sinpe.rope_(x.copy(), positions=positions, exact=kw.get("exact", False))
            assert_bits_equal(sinpe.rope_(x.copy(), positions=three, **kw), want, str(kw))
        out = np.empty_like(x)
        _core._rope_into(out, x, positions=three, sections=(8, 12, 12), inverse=True)
        assert_bits_equal(out, numpy_rope(x, three, (8, 12, 12), inverse=True))
        for got, want in zip(sinpe.rope(None, 64, positions=three[:, :, 0], sections=(8, 12, 12)),
                             sinpe.rope(None, 64, positions=positions[:, 0]), strict=True):
            assert_bits_equal(got, want)


def test_decoding_steps_and_one_row_windows():
    """One token per sequence (a decoding step: a window of one row, the heads of a
    position in one call), a window's last single row, and heads that do not lie at
    one stride."""
    P = np.array([[40, 7], [40, 3], [40, 5]])[:, :, None, None]  # (3, B, 1, 1): text, image
    x = R.sample((2, 5, 1, 32), np.float32, spread=True)
    for layout in LAYOUTS:
        check(x.copy(), P, (4, 6, 6), layout, layout=layout)
        check(x.copy(), P, (6, 5, 5), layout, layout=layout, sections_layout="interleaved")
    check(x.transpose(1, 0, 2, 3).copy().transpose(1, 0, 2, 3), P, (4, 6, 6), "heads first")
    check(np.pad(x, ((0, 0), (0, 1), (0, 0), (0, 0)))[:, ::2], P, (4, 6, 6), "strided heads")
    cos, sin = sinpe.rope(None, 32, positions=P[:, :, 0, 0], sections=(4, 6, 6))
    want = section_caches(P[:, :, 0, 0], 32, (4, 6, 6))
    assert_bits_equal(cos, want[0].astype(np.float32))
    assert_bits_equal(sin, want[1].astype(np.float32))
    # on two threads, 225 rows are cut in windows of 32 and a last one of one row
    ids = np.stack([np.arange(225), np.arange(225) // 15, np.arange(225) % 15])[:, None, None]
    before = sinpe.get_num_threads()
    try:
        sinpe.set_num_threads(2)
        check(R.sample((1, 8, 225, 64), np.float32), ids, (8, 12, 12), "a last window of 1 row")
    finally:
        sinpe.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, R.BF16], ids=str)
def test_exact_is_the_float64_rotation_rounded_once(dtype):
    P = qwen2vl_positions()
    x = R.sample((2, 2, P.shape[-1], 64), dtype, spread=True)
    for rule, sections in [("contiguous", (8, 12, 12)), ("interleaved", (12, 10, 10))]:
        check(x.copy(), P[:, :, None, :], sections, rule, sections_layout=rule, exact=True,
              scale=0.75, n=5e5)


def test_out_of_place_and_inverse():
    """_rope_into (sinpe.torch.rope's kernel): out of place equals in place, inverse is
    the transposed rotation (sin negated), columns past rotary_dim copied."""
    P = qwen2vl_positions()
    x = R.sample((2, 3, P.shape[-1], 48), np.float32, spread=True)
    for kw in (dict(sections=(4, 10, 6), rotary_dim=40),
               dict(sections=(8, 8, 8), sections_layout="interleaved", layout="interleaved",
                    scale=1.5)):
        out = np.full_like(x, 7.0)
        _core._rope_into(out, x, positions=P[:, :, None], **kw)
        assert_bits_equal(out, sinpe.rope_(x.copy(), positions=P[:, :, None], **kw), str(kw))
        back = np.full_like(x, 7.0)
        _core._rope_into(back, x, positions=P[:, :, None], inverse=True, **kw)
        sections = kw.pop("sections")
        assert_bits_equal(back, numpy_rope(x, P[:, :, None], sections, inverse=True, **kw))


def test_byte_swapped_strided_and_float_positions():
    P = qwen2vl_positions().astype(np.float64)
    P[:, 1, 4:9] += 0.375  # interpolated positions: each section's own direct sincos
    x = R.sample((2, 3, P.shape[-1], 32), np.float32, spread=True)
    want = numpy_rope(x, P[:, :, None], (4, 6, 6))
    views = {
        "big-endian": x.astype(">f4"),
        "heads transposed": np.ascontiguousarray(x.transpose(0, 2, 1, 3)).transpose(0, 2, 1, 3),
        "negative strides": np.ascontiguousarray(x[:, ::-1, ::-1])[:, ::-1, ::-1],
        "strided features": np.repeat(x, 2, axis=-1)[..., ::2],
    }
    for name, view in views.items():
        sinpe.rope_(view, positions=P[:, :, None], sections=(4, 6, 6))
        assert_bits_equal(R.native(view), want, name)


def test_positions_that_differ_by_head_and_fall_outside_one_range():
    """Every row its own positions (no two heads alike), spread too far to share a
    range of cache rows: each section's spare row."""
    rng = np.random.default_rng(4)
    P = rng.integers(-2**24, 2**24, (3, 2, 3, 30))
    x = R.sample((2, 3, 30, 16), np.float64, spread=True)
    check(x, P, (3, 3, 2), "spread", sections_layout="interleaved")


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_give_the_bits_of_one(threads):
    """Above the parallel threshold (2 MB): windows cut into parts per thread."""
    L = 700
    P = np.stack([np.arange(L), np.arange(L) // 25, np.arange(L) % 25])[:, None, None, :]
    kw = dict(positions=P, sections=(8, 12, 12), layout="interleaved")
    x = R.sample((2, 16, L, 64), np.float32)
    before = sinpe.get_num_threads()
    try:
        sinpe.set_num_threads(1)
        one = sinpe.rope_(x.copy(), **kw)
        sinpe.set_num_threads(threads)
        many = sinpe.rope_(x.copy(), **kw)
    finally:
        sinpe.set_num_threads(before)
    assert_bits_equal(many, one)
    assert_bits_equal(one, numpy_rope(x, P, (8, 12, 12), layout="interleaved"))
