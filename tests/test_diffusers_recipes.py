"""diffusers' positional functions against sinpe's recipes (docs/variants.md, "diffusers").

``RECIPES`` is the single source of the page's diffusers table: each entry's code is run
here (its statements, then its last line as the result) and held against the real
function of diffusers 0.42.1, called with the same inputs; the page must show exactly
this list (``test_the_diffusers_table_is_this_list``; regenerate it with
``python tests/test_diffusers_recipes.py``).

What is held, by where diffusers computes
-----------------------------------------
``x`` is the exact value of the formula for the inputs as given (float32 timesteps and
grids are exact binary numbers), by mpmath at 113 bits, then rounded to float64 (+u/2).

* float64 in diffusers (``freqs_dtype=torch.float64``, the sin-cos tables' omega): both
  double values are within their bounds of ``x``.  diffusers' is not the correctly rounded
  double in places (its frequency and angle are rounded; sinpe's promise is its bound, not
  correct rounding either), so no recipe can match its float64 bits.  Rounded to float32
  (what callers keep: ``.float()``, ``use_real``) the two are the same bits, except where a
  float32 rounding boundary lies within the larger double error of ``x``: the tests allow
  differences there only.
* float32 in diffusers: sinpe's float32 value is ``x`` rounded once, up to sinpe's double
  error (within half the gap between the float32 neighbours of ``x`` plus that error), and
  diffusers' is within its own float32 bound (which shows that the recipe's formula is
  diffusers'); the page's figures show how much farther off diffusers is.

The bounds are derived in tests/reference/exact_pairs.py.
"""
from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import require, require_torch

import sinpe
from reference.exact_pairs import (
    EXP_ULPS,
    POW_ULPS,
    check_double,
    check_rounded,
    check_single,
    check_sinpe,
    complex_parts,
    concatenated,
    interleaved,
    pairs,
    tables,
)

torch = require_torch()
diffusers = require("diffusers")
E = diffusers.models.embeddings

PAGE = Path(__file__).resolve().parents[1] / "docs" / "variants.md"

# (what to get, the code that gets it): names as diffusers' parameters; docs/variants.md
RECIPES = [
    ("`get_timestep_embedding(t, d, flip_sin_to_cos, 1, scale, M)`, "
     "`Timesteps(d, flip_sin_to_cos, 1, scale)(t)` with `M = 10000`",
     'sinpe.encode_at(scale * np.asarray(t, np.float64), d, M, layout="concatenated", '
     'schedule="fairseq")'),
    ("the same with `downscale_freq_shift=0` and an even `d`",
     'sinpe.encode_at(scale * np.asarray(t, np.float64), d, M, layout="concatenated")'),
    ("the same with any `downscale_freq_shift=shift`",
     'sinpe.encode_at(scale * np.asarray(t, np.float64), d, layout="concatenated", '
     'freq=M ** (-np.arange(d // 2) / (d // 2 - shift)))'),
    ("`flip_sin_to_cos=True`: the table `pe` of a row above",
     'pe[:, np.r_[d // 2:d // 2 * 2, :d // 2, d // 2 * 2:d]]'),
    ("`get_1d_sincos_pos_embed_from_grid(D, pos)`",
     'sinpe.encode_at(pos.reshape(-1), D, layout="concatenated", dtype=np.float64)'),
    ("the same with `flip_sin_to_cos=True`: the table `pe` above",
     'pe[:, np.r_[D // 2:D, :D // 2]]'),
    ("the positions of `get_2d_sincos_pos_embed` along an axis of `g` cells",
     'np.arange(g, dtype=np.float32) / np.float32(g / base_size) / '
     'np.float32(interpolation_scale)'),
    ("`get_2d_sincos_pos_embed(D, (gh, gw), base_size=base_size, "
     "interpolation_scale=interpolation_scale)`, `ph`, `pw` its positions",
     'np.concatenate([sinpe.encode_at(np.tile(pw, gh), D // 2, layout="concatenated", '
     'dtype=np.float64), sinpe.encode_at(np.repeat(ph, gw), D // 2, layout="concatenated", '
     'dtype=np.float64)], axis=1)'),
    ("`get_2d_sincos_pos_embed(D, g, base_size=g)`",
     'sinpe.encode_grid((g, g), D, layout="concatenated", order=(1, 0), '
     'dtype=np.float64).reshape(g * g, D)'),
    ("the same with `cls_token=True, extra_tokens=k`, `k > 0`: the table `pe` above",
     'np.concatenate([np.zeros((k, D)), pe])'),
    ("the positions of `get_3d_sincos_pos_embed` along an axis of `g` cells, "
     "`s` its interpolation scale",
     'np.arange(g, dtype=np.float32) / np.float32(s)'),
    ("`get_3d_sincos_pos_embed(D, (W, H), T, ...)`, `pt`, `ph`, `pw` its positions",
     'gt, gh, gw = np.meshgrid(pt, ph, pw, indexing="ij"); np.concatenate(['
     'sinpe.encode_at(gt, D // 4, layout="concatenated", dtype=np.float64), '
     'sinpe.encode_at(gw, 3 * D // 8, layout="concatenated", dtype=np.float64), '
     'sinpe.encode_at(gh, 3 * D // 8, layout="concatenated", dtype=np.float64)], '
     'axis=-1).reshape(T, H * W, D)'),
    ("`get_3d_sincos_pos_embed(D, (W, H), T)`",
     'sinpe.encode_grid((T, H, W), D, layout="concatenated", '
     'split=(D // 4, 3 * D // 8, 3 * D // 8), order=(0, 2, 1), '
     'dtype=np.float64).reshape(T, H * W, D)'),
    ("`get_1d_rotary_pos_embed(dim, pos, theta, use_real=True)`",
     'sinpe.rope(None, dim, theta, positions=pos, layout="interleaved")'),
    ("the same with `linear_factor`, `ntk_factor`",
     'sinpe.rope(None, dim, positions=pos, layout="interleaved", freq=sinpe.rope_frequencies('
     'dim, {"rope_theta": theta * ntk_factor})[0] / linear_factor)'),
    ("the same with `repeat_interleave_real=False`",
     'sinpe.rope(None, dim, positions=pos, layout="concatenated", freq=sinpe.rope_frequencies('
     'dim, {"rope_theta": theta * ntk_factor})[0] / linear_factor)'),
    ("the same with `use_real=False` (complex64; complex128: `dtype=np.float64`)",
     'cos, sin = sinpe.rope(None, dim, positions=pos, dtype=dtype, freq=sinpe.rope_frequencies('
     'dim, {"rope_theta": theta * ntk_factor})[0] / linear_factor); '
     'cos[:, :dim // 2] + 1j * sin[:, :dim // 2]'),
    ("`get_2d_rotary_pos_embed(D, crops_coords, (gh, gw))`, `grid_h`, `grid_w` its grids",
     'sinpe.rope(None, D, positions=np.stack([np.tile(grid_w, gh), np.repeat(grid_h, gw)]), '
     'freq=np.tile(sinpe.rope_frequencies(D // 2)[0], 2), sections=(D // 4, D // 4), '
     'layout="interleaved")'),
    ("the same with `use_real=False`",
     'cos, sin = sinpe.rope(None, D, positions=np.stack([np.tile(grid_w, gh), '
     'np.repeat(grid_h, gw)]), freq=np.tile(sinpe.rope_frequencies(D // 2)[0], 2), '
     'sections=(D // 4, D // 4), layout="interleaved"); cos[:, ::2] + 1j * sin[:, ::2]'),
    ("`get_2d_rotary_pos_embed_lumina(D, len_h, len_w, linear_factor, ntk_factor)`",
     'cos, sin = sinpe.rope(None, D, positions=np.stack(np.meshgrid(np.arange(len_h), '
     'np.arange(len_w), indexing="ij")), freq=np.repeat(sinpe.rope_frequencies(D // 2, '
     '{"rope_theta": 10000.0 * ntk_factor})[0] / linear_factor, 2), sections=(D // 4, D // 4), '
     'sections_layout="interleaved"); cos[..., :D // 2] + 1j * sin[..., :D // 2]'),
    ("`get_3d_rotary_pos_embed(D, crops_coords, (gh, gw), T, theta)`, `grid_t`, `grid_h`, "
     "`grid_w` its grids",
     'sinpe.rope(None, D, positions=np.stack(np.meshgrid(grid_t, grid_h, grid_w, '
     'indexing="ij")).reshape(3, -1), freq=np.concatenate([sinpe.rope_frequencies(r, '
     '{"rope_theta": theta})[0] for r in (D // 4, D // 8 * 3, D // 8 * 3)]), '
     'sections=(D // 8, D // 16 * 3, D // 16 * 3), layout="interleaved")'),
    ("`get_3d_rotary_pos_embed_allegro(D, ..., interpolation_scale, theta)`: each axis, "
     "`grid` the grid it returns, `s` its scale",
     'sinpe.rope(None, D // 3, theta, positions=grid / s, layout="concatenated")'),
]
def run(index: int, **names):
    """Run RECIPES[index]'s code with ``names``: its statements, then its last line's value."""
    tree = ast.parse(RECIPES[index][1])
    namespace = {"np": np, "sinpe": sinpe, **names}
    *body, last = tree.body
    exec(compile(ast.Module(body, []), "<recipe>", "exec"), namespace)  # noqa: S102
    return eval(compile(ast.Expression(last.value), "<recipe>", "eval"), namespace)  # noqa: S307


def table() -> str:
    rows = ["| to get (diffusers 0.42.1) | call |", "|---|---|"]
    rows += [f"| {label} | `{code}` |" for label, code in RECIPES]
    return "\n".join(rows)


def test_the_diffusers_table_is_this_list():
    text = PAGE.read_text()
    section = text.split("## 7. diffusers", 1)[1]
    assert table() in section, "regenerate with: python tests/test_diffusers_recipes.py"


def test_every_recipe_is_run():
    source = Path(__file__).read_text()
    used = {int(i) for i in re.findall(r"\brun\((\d+)", source)}
    assert used == set(range(len(RECIPES)))


# ---------------------------------------------------------------------------------------
# get_timestep_embedding, Timesteps: float32 in diffusers
# ---------------------------------------------------------------------------------------
STEPS = np.array([0.0, 0.5, 1.0, 2.25, 37.0, 101.7, 500.25, 640.1, 999.0, 999.3], np.float32)
UNIT = np.linspace(0.0, 1.0, 11, dtype=np.float32)  # flow matching: t in [0, 1], scale 1000


@pytest.mark.parametrize("d", [9, 65, 320])
@pytest.mark.parametrize("shift", [0, 1])
@pytest.mark.parametrize("scale, t", [(1.0, STEPS), (0.25, STEPS), (1000.0, UNIT)],
                         ids=["scale1", "scale0.25", "scale1000"])
@pytest.mark.parametrize("M", [10000, 1000])
def test_timestep_embedding(d, shift, scale, t, M):
    h = d // 2
    x, pw, lnw = tables(*pairs(t, M, h - shift, h, pmul=scale), odd=d % 2 == 1)
    r, a, b = (scale != 1.0), 3, 2 * EXP_ULPS + (scale != 1.0)
    perm = np.r_[h:2 * h, :h, 2 * h:d]
    names = {"t": t, "d": d, "M": M, "scale": scale, "shift": shift}
    recipes = [run(2, **names)]  # any shift; the schedules where they apply:
    recipes += [run(0, **names)] if shift == 1 else []
    recipes += [run(1, **names)] if shift == 0 and d % 2 == 0 else []
    for flip in (False, True):
        theirs = E.get_timestep_embedding(torch.from_numpy(t), d, flip, shift, scale, M).numpy()
        if M == 10000:  # the module is the function with max_period 10000
            module = E.Timesteps(d, flip, shift, scale)(torch.from_numpy(t)).numpy()
            assert np.array_equal(module, theirs)
        for got in recipes:
            if flip:
                got = run(3, pe=got, d=d)
            cols = perm if flip else slice(None)
            check_single(got, theirs, x[:, cols], pw[:, cols], lnw[:, cols], r, a, b)
            assert np.all(got[:, 2 * h:] == 0) and np.all(theirs[:, 2 * h:] == 0)


def test_timestep_embedding_of_width_2_or_3_is_nan_where_the_fairseq_schedule_is_defined():
    # h - shift = 0: diffusers' exponent is 0/0; sinpe's fairseq schedule takes w_0 = 1
    t = np.array([0.0, 1.0, 2.5], np.float32)
    for d in (2, 3):
        assert torch.isnan(E.get_timestep_embedding(torch.from_numpy(t), d)[:, :2]).all()
        pe = run(0, t=t, d=d, M=10000, scale=1.0)
        assert np.array_equal(pe[:, :2], sinpe.encode_at(t, 2, freq=[1.0], layout="concatenated"))


# ---------------------------------------------------------------------------------------
# The sin-cos tables: omega in float64 (float32 on mps and npu, or with dtype=)
# ---------------------------------------------------------------------------------------
GRID_1D = np.array([0, 0.5, 1, 2.75, 7, 31.5, 63, 100.25, 191, 255.5], np.float32)


@pytest.mark.parametrize("D", [8, 64, 1152])
def test_1d_sincos_pos_embed_from_grid(D):
    pos = GRID_1D
    x, pw, lnw = tables(*pairs(pos, 10000.0, D / 2, D // 2))
    perm = np.r_[D // 2:D, :D // 2]
    for flip in (False, True):
        theirs = E.get_1d_sincos_pos_embed_from_grid(D, torch.from_numpy(pos),
                                                     flip_sin_to_cos=flip).numpy()
        got = run(4, pos=pos, D=D)
        cols = perm if flip else slice(None)
        if flip:
            got = run(5, pe=got, D=D)
        check_double(got, theirs, x[:, cols], pw[:, cols], lnw[:, cols])
        check_rounded(got.astype(np.float32), theirs.astype(np.float32), x[:, cols],
                      pw[:, cols], lnw[:, cols])
    # mps and npu: omega, the angles, sin and cos in float32 (dtype=torch.float32 on the CPU)
    theirs = E.get_1d_sincos_pos_embed_from_grid(D, torch.from_numpy(pos), dtype=torch.float32)
    check_single(run(4, pos=pos, D=D).astype(np.float32), theirs.numpy(), x, pw, lnw, 0,
                 1, 2 * POW_ULPS + 1)


def test_diffusers_float64_values_are_not_the_exact_ones_rounded():
    # the reason no recipe can be diffusers' float64 bits: they are not a function of the
    # exact value (check_double holds them to their bound)
    x = tables(*pairs(GRID_1D, 10000.0, 576, 576))[0]
    theirs = E.get_1d_sincos_pos_embed_from_grid(1152, torch.from_numpy(GRID_1D)).numpy()
    assert np.any(theirs != x)
    s, c = pairs(SAMPLED, 10000.0, 64, 64)[:2]
    theirs = E.get_1d_rotary_pos_embed(128, torch.from_numpy(SAMPLED), freqs_dtype=torch.float64)
    assert np.any(theirs.numpy().real != c) and np.any(theirs.numpy().imag != s)


def sincos_2d_exact(ph, pw, D):
    """The exact table of get_2d_sincos_pos_embed: the column positions' half, then the rows'."""
    gh, gw = ph.size, pw.size
    w = tables(*pairs(np.tile(pw, gh), 10000.0, D / 4, D // 4))
    h = tables(*pairs(np.repeat(ph, gw), 10000.0, D / 4, D // 4))
    return [np.concatenate([a, b], axis=1) for a, b in zip(w, h)]


@pytest.mark.parametrize("D", [16, 384])
@pytest.mark.parametrize("grid_size", [5, (3, 7)])
@pytest.mark.parametrize("base_size, interpolation_scale",
                         [(16, 1.0), (4, 1.0), (64, 2.0), (10, 3.3)])
def test_2d_sincos_pos_embed(D, grid_size, base_size, interpolation_scale):
    gh, gw = (grid_size, grid_size) if isinstance(grid_size, int) else grid_size
    scales = {"base_size": base_size, "interpolation_scale": interpolation_scale}
    theirs = E.get_2d_sincos_pos_embed(D, grid_size, **scales)
    ph, pw = run(6, g=gh, **scales), run(6, g=gw, **scales)
    got = run(7, D=D, gh=gh, gw=gw, ph=ph, pw=pw)
    x, pwx, lnw = sincos_2d_exact(ph, pw, D)
    check_double(got, theirs.numpy(), x, pwx, lnw)
    check_rounded(got.astype(np.float32), theirs.float().numpy(), x, pwx, lnw)
    # cls_token adds extra_tokens zero rows, and only with cls_token (then in float64)
    for cls_token, k in ((True, 0), (True, 1), (True, 4), (False, 2)):
        with_cls = E.get_2d_sincos_pos_embed(D, grid_size, cls_token, k, **scales).numpy()
        if cls_token and k:
            assert np.array_equal(with_cls, run(9, pe=theirs.numpy(), k=k, D=D))
            assert np.array_equal(run(9, pe=got, k=k, D=D)[k:], got)
        else:
            assert np.array_equal(with_cls, theirs.numpy())


@pytest.mark.parametrize("D", [16, 1152])
@pytest.mark.parametrize("g", [1, 6])
def test_2d_sincos_pos_embed_at_its_base_size_is_the_grid_table(D, g):
    theirs = E.get_2d_sincos_pos_embed(D, g, base_size=g)
    got = run(8, g=g, D=D)
    grid = np.arange(g, dtype=np.float32)
    assert np.array_equal(got, run(7, D=D, gh=g, gw=g, ph=grid, pw=grid))
    x, pw, lnw = sincos_2d_exact(grid, grid, D)
    check_double(got, theirs.numpy(), x, pw, lnw)
    # PatchEmbed's buffer: the table of its grid at its own base size, in float32
    embed = E.PatchEmbed(height=2 * g, width=2 * g, patch_size=2, in_channels=1, embed_dim=D)
    check_rounded(got.astype(np.float32), embed.pos_embed[0].numpy(), x, pw, lnw)


def test_the_output_type_is_not_used():
    for output_type in ("pt", "np"):
        assert isinstance(E.get_2d_sincos_pos_embed(8, 2, output_type=output_type), torch.Tensor)
        assert isinstance(E.get_3d_sincos_pos_embed(16, 2, 2, output_type=output_type),
                          torch.Tensor)


@pytest.mark.parametrize("D", [16, 64])
@pytest.mark.parametrize("spatial_size", [3, (4, 2)])
@pytest.mark.parametrize("T", [1, 5])
@pytest.mark.parametrize("ss, ts", [(1.0, 1.0), (1.875, 1.0), (0.5, 3.0)])
def test_3d_sincos_pos_embed(D, spatial_size, T, ss, ts):
    W, H = (spatial_size, spatial_size) if isinstance(spatial_size, int) else spatial_size
    theirs = E.get_3d_sincos_pos_embed(D, spatial_size, T, ss, ts).numpy()
    pt, ph, pw = run(10, g=T, s=ts), run(10, g=H, s=ss), run(10, g=W, s=ss)
    got = run(11, D=D, T=T, H=H, W=W, pt=pt, ph=ph, pw=pw)
    if ss == ts == 1.0:
        assert np.array_equal(got, run(12, D=D, T=T, H=H, W=W))
    # rows (t, h, w) with w fastest; columns [t: D/4 | w: 3D/8 | h: 3D/8]
    blocks = [tables(*pairs(p, 10000.0, width / 2, width // 2)) for p, width in (
        (np.repeat(pt, H * W), D // 4), (np.tile(pw, T * H), 3 * D // 8),
        (np.tile(np.repeat(ph, W), T), 3 * D // 8))]
    x, pwx, lnw = (np.concatenate(parts, axis=1).reshape(T, H * W, D) for parts in zip(*blocks))
    check_double(got, theirs, x, pwx, lnw)
    check_rounded(got.astype(np.float32), theirs.astype(np.float32), x, pwx, lnw)


# ---------------------------------------------------------------------------------------
# The rotary tables: float32 by default, float64 with freqs_dtype=torch.float64
# ---------------------------------------------------------------------------------------
def rope_single(lf):
    """get_1d_rotary_pos_embed's float32 frequency: (a, b) as reference/exact_pairs.py counts."""
    return 1, 2 * POW_ULPS + 2 + 2 * (lf != 1.0)


SAMPLED = np.array([0, 1, 2, 3, 100, 1023, 1024, 2047, 4095, 4096, 8191, 12345], np.int64)
FRACTIONAL = np.array([0, 0.25, 1.5, 3.75, 99.5, 1023.3, 2047.9, 4095.5, 6000.125, 8191.7])
POSITIONS = {  # diffusers' pos argument, the positions
    "int": (24, np.arange(24)),
    "int64 tensor": (torch.from_numpy(SAMPLED), SAMPLED),
    "float32 tensor": (torch.from_numpy(FRACTIONAL.astype(np.float32)),
                       FRACTIONAL.astype(np.float32)),
    "float64 array": (FRACTIONAL, FRACTIONAL),
}


@pytest.mark.parametrize("dim", [16, 128])
@pytest.mark.parametrize("kind", list(POSITIONS))
@pytest.mark.parametrize("theta, linear_factor, ntk_factor",
                         [(10000.0, 1.0, 1.0), (10000.0, 2.0, 1.0), (256.0, 1.0, 4.0),
                          (10000.0, 0.5, 2.5)])
def test_1d_rotary_pos_embed(dim, kind, theta, linear_factor, ntk_factor):
    arg, pos = POSITIONS[kind]
    factors = {"linear_factor": linear_factor, "ntk_factor": ntk_factor}
    names = {"dim": dim, "pos": pos, "theta": theta, **factors}
    s, c, pw, lnw = pairs(pos, theta * ntk_factor, dim / 2, dim // 2, lf=linear_factor)
    plain = linear_factor == ntk_factor == 1.0
    if plain:  # rope_frequencies(dim, theta) are the frequencies of rope(n=theta)
        for got, again in zip(run(13, **names), run(14, **names)):
            assert np.array_equal(got, again)
    r_torch = linear_factor != 1.0
    for freqs_dtype in (torch.float32, torch.float64):
        in_double = freqs_dtype == torch.float64
        for use_real, layout, recipe in ((True, interleaved, run(14, **names)),
                                         (True, concatenated, run(15, **names)),
                                         (False, None, None)):
            theirs = E.get_1d_rotary_pos_embed(dim, arg, theta, use_real, linear_factor,
                                               ntk_factor, layout is interleaved, freqs_dtype)
            if use_real:
                results = zip(recipe, [t.numpy() for t in theirs])
                exact = [layout(c), layout(s)]
                pwx, lnwx = layout(pw), layout(lnw)
            else:  # complex: complex128 when the angles are (a float64 pos promotes them)
                theirs = theirs.numpy()
                dtype = np.float64 if theirs.dtype == np.complex128 else np.float32
                got = run(16, dtype=dtype, **names)
                assert got.dtype == theirs.dtype
                results = zip(complex_parts(got), complex_parts(theirs))
                exact, pwx, lnwx = [c, s], pw, lnw
            for (got, them), x in zip(results, exact):
                if in_double and got.dtype == np.float64:
                    check_double(got, them, x, pwx, lnwx, 0, r_torch)
                    got, them = got.astype(np.float32), them.astype(np.float32)
                if in_double:
                    check_rounded(got, them, x, pwx, lnwx, 0, r_torch)
                    check_sinpe(got, x, pwx, lnwx)
                elif them.dtype == np.float64:  # float32 frequencies, angles in double
                    check_single(got.astype(np.float32), them.astype(np.float32), x, pwx, lnwx,
                                 0, *rope_single(linear_factor), angle_in_double=True)
                else:
                    check_single(got, them, x, pwx, lnwx, 0, *rope_single(linear_factor))


def linspace(start, stop, g):
    """The float32 grid diffusers' rotary functions make along an axis of g cells."""
    return torch.linspace(start, stop * (g - 1) / g, g, dtype=torch.float32).numpy()


CROPS = [(((0, 0), (8, 8)), (8, 8)), (((0, 0), (3, 5)), (3, 5)),
         (((0.5, 1.25), (12.3, 7.9)), (6, 4))]


@pytest.mark.parametrize("D", [16, 88])
@pytest.mark.parametrize("crops_coords, grid_size", CROPS)
def test_2d_rotary_pos_embed(D, crops_coords, grid_size):
    (top, left), (bottom, right) = crops_coords
    gh, gw = grid_size
    grid_h, grid_w = linspace(top, bottom, gh), linspace(left, right, gw)
    if crops_coords[0] == (0, 0) and crops_coords[1] == grid_size:
        assert np.array_equal(grid_h, np.arange(gh)) and np.array_equal(grid_w, np.arange(gw))
    names = {"D": D, "gh": gh, "gw": gw, "grid_h": grid_h, "grid_w": grid_w}
    # the column positions' half (diffusers' emb_h), then the rows'
    w = pairs(np.tile(grid_w, gh), 10000.0, D / 4, D // 4)
    h = pairs(np.repeat(grid_h, gw), 10000.0, D / 4, D // 4)
    s, c, pw, lnw = (np.concatenate([a, b], axis=1) for a, b in zip(w, h))
    theirs = E.get_2d_rotary_pos_embed(D, crops_coords, grid_size, use_real=True)
    for got, them, x in zip(run(17, **names), theirs, (c, s)):
        check_single(got, them.numpy(), interleaved(x), interleaved(pw), interleaved(lnw), 0,
                     *rope_single(1.0))
    theirs = E.get_2d_rotary_pos_embed(D, crops_coords, grid_size, use_real=False).numpy()
    for got, them, x in zip(complex_parts(run(18, **names)), complex_parts(theirs), (c, s)):
        check_single(got, them, x, pw, lnw, 0, *rope_single(1.0))


@pytest.mark.parametrize("D", [16, 96])
@pytest.mark.parametrize("len_h, len_w", [(4, 6), (24, 17)])
@pytest.mark.parametrize("linear_factor, ntk_factor", [(1.0, 1.0), (2.0, 1.0), (1.0, 3.0)])
def test_2d_rotary_pos_embed_lumina(D, len_h, len_w, linear_factor, ntk_factor):
    theirs = E.get_2d_rotary_pos_embed_lumina(D, len_h, len_w, linear_factor, ntk_factor)
    got = run(19, D=D, len_h=len_h, len_w=len_w, linear_factor=linear_factor,
              ntk_factor=ntk_factor)
    # (len_h, len_w, D/2): even columns the row's angles, odd ones the column's, pair by pair
    h = pairs(np.arange(len_h), 10000.0 * ntk_factor, D / 4, D // 4, lf=linear_factor)
    w = pairs(np.arange(len_w), 10000.0 * ntk_factor, D / 4, D // 4, lf=linear_factor)
    shape = (len_h, len_w, D // 4, 2)
    s, c, pw, lnw = (np.stack(np.broadcast_arrays(a[:, None], b[None, :]), -1).reshape(
        shape[:2] + (D // 2,)) for a, b in zip(h, w))
    for got, them, x in zip(complex_parts(got), complex_parts(theirs.numpy()), (c, s)):
        check_single(got, them, x, pw, lnw, 0, *rope_single(linear_factor))


@pytest.mark.parametrize("D", [16, 64])
@pytest.mark.parametrize("theta", [10000.0, 256.0])
@pytest.mark.parametrize("grid_type", ["linspace", "slice"])
@pytest.mark.parametrize("crops_coords, grid_size, T",
                         [(((0, 0), (6, 4)), (6, 4), 3), (((0.5, 1.25), (12.3, 7.9)), (6, 4), 5)])
def test_3d_rotary_pos_embed(D, theta, grid_type, crops_coords, grid_size, T):
    (top, left), (bottom, right) = crops_coords
    gh, gw = grid_size
    theirs = E.get_3d_rotary_pos_embed(D, crops_coords, grid_size, T, theta,
                                       grid_type=grid_type, max_size=(9, 7))
    if grid_type == "linspace":
        grids = linspace(0, T, T), linspace(top, bottom, gh), linspace(left, right, gw)
        assert np.array_equal(grids[0], np.arange(T))  # 0 .. T-1, exactly
    else:
        grids = np.arange(T), np.arange(gh), np.arange(gw)
    got = run(20, D=D, theta=theta, grid_t=grids[0], grid_h=grids[1], grid_w=grids[2])
    # rows (t, h, w) with w fastest; columns [t: D/4 | h: 3D/8 | w: 3D/8], each interleaved
    grid_t, grid_h, grid_w = grids
    blocks = [pairs(p, theta, width / 2, width // 2) for p, width in (
        (np.repeat(grid_t, gh * gw), D // 4), (np.tile(np.repeat(grid_h, gw), T), D // 8 * 3),
        (np.tile(grid_w, T * gh), D // 8 * 3))]
    s, c, pw, lnw = (np.concatenate([interleaved(b) for b in parts], axis=1)
                     for parts in zip(*blocks))
    for got_, them, x in zip(got, theirs, (c, s)):
        check_single(got_, them.numpy(), x, pw, lnw, 0, *rope_single(1.0))


@pytest.mark.parametrize("D", [24, 96])
@pytest.mark.parametrize("crops_coords, grid_size, T",
                         [(((0, 0), (6, 4)), (6, 4), 3), (((0.5, 1.25), (12.3, 7.9)), (6, 4), 5)])
@pytest.mark.parametrize("scales", [(1.0, 1.0, 1.0), (2.0, 0.5, 1.5)])
def test_3d_rotary_pos_embed_allegro(D, crops_coords, grid_size, T, scales):
    theta = 10000.0
    theirs = E.get_3d_rotary_pos_embed_allegro(D, crops_coords, grid_size, T, scales, theta)
    for axis, s in enumerate(scales):
        grid = theirs[3 + axis].numpy()
        positions = grid / np.float32(s)  # the float32 quotient diffusers uses
        assert np.array_equal(positions, (theirs[3 + axis] / s).numpy())
        got = run(21, D=D, theta=theta, grid=grid, s=s)
        sn, cs, pw, lnw = pairs(positions, theta, D / 6, D // 6)
        for got_, them, x in zip(got, theirs[axis], (cs, sn)):
            check_single(got_, them.numpy(), concatenated(x), concatenated(pw),
                         concatenated(lnw), 0, *rope_single(1.0))


# ---------------------------------------------------------------------------------------
# The page's figures: diffusers' float32 drift and the float64 paths' bits
# ---------------------------------------------------------------------------------------
def reference(positions, w):
    """float64 sin, cos of p * w: within |p w| (|ln w| + 3) u + 4 u of exact (conftest), below
    1e-11 here, far below the figures' two digits."""
    angle = np.asarray(positions, dtype=np.float64)[..., None] * w
    return np.sin(angle), np.cos(angle)


def paper(width, base=10000.0):
    return base ** (-np.arange(0, width, 2) / width)


def largest(got, want):
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max())


@functools.lru_cache(maxsize=None)
def drift_figures():
    """(what, diffusers' largest error, sinpe's) for float32 paths of models' sizes."""
    rows = []
    t = np.arange(0, 1000, 0.5, dtype=np.float32)
    unit = np.linspace(0, 1, 1001, dtype=np.float32)
    for label, d, flip, shift, scale, steps in (
            ("`Timesteps(320, True, 0)`, t = 0, 0.5, .., 999.5", 320, True, 0, 1, t),
            ("`get_timestep_embedding(t, 256)`, t = 0, 0.5, .., 999.5", 256, False, 1, 1, t),
            ("`Timesteps(256, True, 0, scale=1000)`, t = 0, 0.001, .., 1", 256, True, 0, 1000,
             unit)):
        w = 10000.0 ** (-np.arange(d // 2) / (d // 2 - shift))
        s, c = reference(steps.astype(np.float64) * scale, w)  # (NumPy 1 kept float32)
        want = np.concatenate([c, s] if flip else [s, c], axis=1)
        theirs = E.Timesteps(d, flip, shift, scale)(torch.from_numpy(steps))
        got = run(3, pe=run(2, t=steps, d=d, M=10000, scale=scale, shift=shift), d=d) if flip \
            else run(0, t=steps, d=d, M=10000, scale=scale)
        rows.append((label, largest(theirs, want), largest(got, want)))
    for dim in (56, 128):
        s, c = reference(np.arange(4096), paper(dim))
        theirs = E.get_1d_rotary_pos_embed(dim, 4096, use_real=True)[0]
        got = run(13, dim=dim, pos=np.arange(4096), theta=10000.0)[0]
        rows.append((f"`get_1d_rotary_pos_embed({dim}, 4096, use_real=True)`",
                     largest(theirs, interleaved(c)), largest(got, interleaved(c))))
    pos = np.arange(192, dtype=np.float32) / np.float32(3)  # SD3's grid: 192 cells, base 64
    s, c = reference(pos, paper(768))
    theirs = E.get_1d_sincos_pos_embed_from_grid(768, torch.from_numpy(pos), dtype=torch.float32)
    rows.append(("`get_1d_sincos_pos_embed_from_grid(768, pos, dtype=torch.float32)` (mps, npu), "
                 "SD3's positions `arange(192) / 3`", largest(theirs, np.concatenate([s, c], 1)),
                 largest(run(4, pos=pos, D=768).astype(np.float32), np.concatenate([s, c], 1))))
    # SD3's grid (192 cells, base 64) is formed in float32, then used in float64
    s, c = reference(np.arange(192) / 3, paper(768))
    theirs = E.get_1d_sincos_pos_embed_from_grid(768, torch.from_numpy(pos))
    rows.append(("`get_2d_sincos_pos_embed(1536, 192, base_size=64)` (SD3), its 1-D halves "
                 "against the exact positions `i / 3`", largest(theirs, np.concatenate([s, c], 1)),
                 largest(run(4, pos=np.arange(192) / 3, D=768).astype(np.float32),
                         np.concatenate([s, c], 1))))
    g, grid = 64, np.arange(64)
    D = 88
    c = np.concatenate([reference(np.tile(grid, g), paper(D // 2))[1],
                        reference(np.repeat(grid, g), paper(D // 2))[1]], axis=1)
    theirs = E.get_2d_rotary_pos_embed(D, ((0, 0), (g, g)), (g, g))[0]
    got = run(17, D=D, gh=g, gw=g, grid_h=grid, grid_w=grid)[0]
    rows.append(("`get_2d_rotary_pos_embed(88, ((0, 0), (64, 64)), (64, 64))`",
                 largest(theirs, interleaved(c)), largest(got, interleaved(c))))
    D = 96
    ch, cw = reference(grid, paper(D // 2))[1][:, None], reference(grid, paper(D // 2))[1][None]
    c = np.stack(np.broadcast_arrays(ch, cw), -1).reshape(g, g, D // 2)
    theirs = E.get_2d_rotary_pos_embed_lumina(D, g, g).real
    got = run(19, D=D, len_h=g, len_w=g, linear_factor=1.0, ntk_factor=1.0).real
    rows.append(("`get_2d_rotary_pos_embed_lumina(96, 64, 64)`", largest(theirs, c),
                 largest(got, c)))
    D, T, gh, gw = 64, 13, 30, 45
    parts = ((np.repeat(np.arange(T), gh * gw), 16), (np.tile(np.repeat(np.arange(gh), gw), T), 24),
             (np.tile(np.arange(gw), T * gh), 24))
    c = np.concatenate([interleaved(reference(p, paper(r))[1]) for p, r in parts], axis=1)
    theirs = E.get_3d_rotary_pos_embed(D, ((0, 0), (gh, gw)), (gh, gw), T)[0]
    got = run(20, D=D, theta=10000.0, grid_t=np.arange(T), grid_h=np.arange(gh),
              grid_w=np.arange(gw))[0]
    rows.append(("`get_3d_rotary_pos_embed(64, ((0, 0), (30, 45)), (30, 45), 13)`",
                 largest(theirs, c), largest(got, c)))
    theirs = E.get_3d_rotary_pos_embed_allegro(96, ((0, 0), (40, 72)), (40, 72), 22)
    errors = [(largest(theirs[a][0], concatenated(reference(theirs[3 + a], paper(32))[1])),
               largest(run(21, D=96, theta=10000.0, grid=theirs[3 + a].numpy(), s=1.0)[0],
                       concatenated(reference(theirs[3 + a], paper(32))[1]))) for a in range(3)]
    rows.append(("`get_3d_rotary_pos_embed_allegro(96, ((0, 0), (40, 72)), (40, 72), 22)`",
                 max(e[0] for e in errors), max(e[1] for e in errors)))
    return rows


def bits_figures():
    """(what, its float64 values against sinpe's, float32 elements whose bits differ from
    sinpe's, all) for float64 paths."""
    rows = []

    def doubles(got, theirs):
        differ = got != theirs
        return f"{differ.mean():.0%} differ, by up to {np.abs(got - theirs).max():.1e}"

    for dim in (16, 56):  # Flux's axes
        theirs = E.get_1d_rotary_pos_embed(dim, 4096, use_real=True, freqs_dtype=torch.float64)
        got = run(13, dim=dim, pos=np.arange(4096), theta=10000.0)
        rows.append((f"`get_1d_rotary_pos_embed({dim}, 4096, use_real=True, "
                     "freqs_dtype=torch.float64)`", "not returned",
                     sum(int((a != b.numpy()).sum()) for a, b in zip(got, theirs)),
                     2 * got[0].size))
    names = {"dim": 56, "pos": np.arange(4096), "theta": 10000.0, "linear_factor": 1.0,
             "ntk_factor": 1.0}
    theirs = complex_parts(E.get_1d_rotary_pos_embed(56, 4096, freqs_dtype=torch.float64).numpy())
    got = complex_parts(run(16, dtype=np.float64, **names))
    rows.append(("`get_1d_rotary_pos_embed(56, 4096, freqs_dtype=torch.float64)` (complex128)",
                 doubles(np.stack(got), np.stack(theirs)),
                 sum(int((a.astype(np.float32) != b.astype(np.float32)).sum())
                     for a, b in zip(got, theirs)), 2 * got[0].size))
    theirs = E.get_2d_sincos_pos_embed(1152, 32, base_size=32).numpy()
    grid = np.arange(32, dtype=np.float32)
    got = run(7, D=1152, gh=32, gw=32, ph=grid, pw=grid)
    rows.append(("`get_2d_sincos_pos_embed(1152, 32, base_size=32)`, and `.float()`",
                 doubles(got, theirs),
                 int((got.astype(np.float32) != theirs.astype(np.float32)).sum()), got.size))
    dim, L, theta = 128, 32768, 1e6
    theirs = E.get_1d_rotary_pos_embed(dim, L, theta, use_real=True, freqs_dtype=torch.float64)
    got = run(13, dim=dim, pos=np.arange(L), theta=theta)
    differ = 0
    for a, b, which in zip(got, theirs, (1, 0)):
        rows_ = np.unique(np.nonzero(a != b.numpy())[0])  # held to the boundaries below
        exact = pairs(rows_, theta, dim / 2, dim // 2)
        x, pw, lnw = (interleaved(v) for v in (exact[which],) + exact[2:])
        differ += check_rounded(a[rows_], b.numpy()[rows_], x, pw, lnw)
    rows.append(("`get_1d_rotary_pos_embed(128, 32768, 1e6, use_real=True, "
                 "freqs_dtype=torch.float64)`", "not returned", differ, 2 * got[0].size))
    return rows


def figure_tables() -> str:
    drift = ["| diffusers, float32 | diffusers' largest error | sinpe's |", "|---|---|---|"]
    drift += [f"| {label} | {theirs:.1e} | {ours:.1e} |" for label, theirs, ours in drift_figures()]
    bits = ["| diffusers, float64 | its float64 values against sinpe's | float32 elements whose "
            "bits differ | of |", "|---|---|---|---|"]
    bits += [f"| {label} | {f64} | {n} | {total} |" for label, f64, n, total in bits_figures()]
    return "\n".join(drift) + "\n\n" + "\n".join(bits)


def test_the_figures_are_the_pages():
    text = PAGE.read_text().split("## 7. diffusers", 1)[1]
    for block in figure_tables().split("\n\n"):
        assert block in text, "regenerate with: python tests/test_diffusers_recipes.py"


def test_diffusers_float32_drift_is_far_beyond_sinpes_rounding():
    for label, theirs, ours in drift_figures():
        assert ours <= 2.0**-25 + 1e-11, label  # half an ulp of [0.5, 1), the reference's error
        assert theirs > 10 * ours, label


if __name__ == "__main__":
    print(table())
    print()
    print(figure_tables())
