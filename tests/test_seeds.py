"""sinpe against every seed recipe (tests/reference/seeds.py), element by element.

The recipes form the angle in float32, so they are far less accurate than
sinpe; each comparison is bounded by the recipe's own float32 rounding error,
derived here (not tuned), plus sinpe's promise of 2**-24.

Derivation (U = 2**-24, float32 unit roundoff; u = 2**-53; first order in U):
position p is an exact float32 integer (p < 2**24), w = n**(-2k/d) is the
exact frequency, and a float32 op rounds with relative error <= U.

* The frequency.  Both forms compute w as exp or pow of an argument x with
  |x| = 2k ln(n)/d = |ln w|.  If x carries relative error t, the result is
  w * exp(t ln w): a relative error |ln w| * |t|.
  - ``pow`` form (seeds 000, 003): x enters as the exponent e = fl32(2k / d),
    one rounding, so t <= U (the base n is exact in float32 for the bases
    tested here).  Argument count a = 1.
  - ``exp`` form, seeds 001/002: ``arange(...).float() * (-log(n)/d)``: the
    double constant (log within 1 ulp, a division: <= 3u) is used at float32
    (one rounding) and the product is rounded (one more): t <= 2U + 3u.
  - ``exp`` form, seed 004: ``-i / d_model * log(n)``: the float32 division,
    the float32 use of the double log(n) (<= 2u), the product: t <= 3U + 2u.
  torch's float32 pow/exp are within 1 ulp: relative <= 2U.
* The angle: p * w (or p / denominator) in float32: one more rounding, U.
  So |angle32 - p w| <= |p w| * (|ln w| * (a U + b u) + 2U + U).
* The value: |sin'| = |cos'| <= 1, so the angle error passes to the value, plus
  torch's float32 sin/cos, within 1 ulp: <= U absolute for |value| <= 1.

    recipe_bound(p, w) = |p w| * (|ln w| * (a U + b u) + 3U) + U

It grows with |p w|: for L = 5000, d = 512 it reaches ~8e-4 where the observed
recipe errors peak at ~4e-4 (a ratio of ~0.5: the worst cases of the separate
roundings rarely line up).  sinpe is within U of the exact value, so
|sinpe - recipe| <= recipe_bound + U.

Seed 002's nested-loop ``gen_pe`` is float64 throughout, so it is bounded by
conftest.double_error_bound (value error 1 ulp) + U instead.

For ``add_``: sinpe rounds ``scale * x + PE`` once from double; the recipe
rounds ``x * scale`` (when scale != 1), then ``xs + pe``.  With h(v) = half an
ulp of the float32 result v:
    |y_sinpe - y_recipe| <= recipe_bound + sinpe_double_bound + h(y_sinpe) + h(y_recipe) + h(xs).
"""
from __future__ import annotations

import math

import numpy as np
import pytest

import sinpe
from conftest import (
    U32,
    U64,
    double_error_bound,
    freq64,
    positions_of,
    require,
    sinpe_double_bound,
    table64,
)

torch = require("torch")

from reference import seeds  # noqa: E402  (needs torch)

# (a, b): float32 and float64 roundings that reach the pow/exp argument (docstring).
ARG_ROUNDINGS = {
    "000": (1, 0),
    "001": (2, 3),
    "002": (2, 3),
    "003": (1, 0),
    "004": (3, 2),
}


def recipe_bound(seed: str, L: int, d: int, n: float) -> np.ndarray:
    """Element-wise bound of |recipe - exact| for a float32 recipe (module docstring)."""
    a, b = ARG_ROUNDINGS[seed]
    p = positions_of(0, L).astype(np.float64)[:, None]
    w = freq64(d, n)
    log_w = np.abs(np.log(w))
    return p * w * (log_w * (a * U32 + b * U64) + 3 * U32) + U32


def half_ulp32(v: np.ndarray) -> np.ndarray:
    return np.spacing(np.abs(v).astype(np.float32)).astype(np.float64) / 2


def recipe_table(seed: str, L: int, d: int, n: float) -> np.ndarray:
    """The recipe's (L, d) table as float64 numbers (exactly the float32 values)."""
    if seed == "000":
        t = seeds.seed_000_052a39587cece21b(L, d, n)
        assert t.shape == (1, L, d)
        t = t[0]
    elif seed == "001":
        t = seeds.seed_001_c72382e923a91f66(L, d, n)
        assert t.shape == (L, 1, d)
        t = t[:, 0, :]
    elif seed == "002":
        t = seeds.seed_002_c2b1c30ef93e9668_torch(L, d, n)
        assert t.shape == (1, L, d)
        t = t[0]
    elif seed == "003":
        t = seeds.seed_003_c1caa5f3267db948(L, d, n)
    elif seed == "004":
        t = seeds.seed_004_2445c59576344ddd(L, d, n)
    else:
        raise AssertionError(seed)
    assert t.dtype == torch.float32 and tuple(t.shape) == (L, d)
    return t.numpy().astype(np.float64)


def assert_within(actual, expected, bound, what: str) -> float:
    """Element-wise |actual - expected| <= bound; returns max(error / bound)."""
    err = np.abs(np.asarray(actual, np.float64) - np.asarray(expected, np.float64))
    ratio = err / bound
    worst = np.unravel_index(np.argmax(ratio), ratio.shape)
    assert ratio[worst] <= 1.0, (
        f"{what}: error {err[worst]:.3e} exceeds the derived bound {bound[worst]:.3e} "
        f"at index {worst}"
    )
    return float(ratio[worst])


SEEDS = ["000", "001", "002", "003", "004"]
# (L, d, n): the usual 5000 x 512 buffer, seed 002's base 100, the documents'
# own small examples, and a long thin table where float32 angles are far off.
TABLE_CASES = [
    (5000, 512, 10000.0),
    (5000, 512, 100.0),
    (10, 4, 100.0),  # seed 002's example
    (128, 8, 10000.0),  # seed 001's example
    (12, 512, 10000.0),  # seed 003's example
    (65536, 16, 10000.0),
    (300, 20, 2.0),
]


@pytest.mark.parametrize("L,d,n", TABLE_CASES)
@pytest.mark.parametrize("seed", SEEDS)
def test_encode_matches_recipe_within_float32_rounding(seed, L, d, n):
    recipe = recipe_table(seed, L, d, n)
    ours = sinpe.encode(L, d, n)
    assert_within(ours, recipe, recipe_bound(seed, L, d, n) + U32, f"seed {seed} (L={L}, d={d}, n={n})")


@pytest.mark.parametrize("L,d,n", [(10, 4, 100), (200, 64, 100), (50, 512, 10000)])
def test_encode_matches_seed_002_nested_loop(L, d, n):
    """The float64 loop recipe is nearly exact: only sinpe's float32 rounding remains."""
    recipe = seeds.seed_002_c2b1c30ef93e9668(L, d, n)
    assert recipe.dtype == np.float64 and recipe.shape == (L, d)
    bound = double_error_bound(positions_of(0, L), d, n) + U32
    assert_within(sinpe.encode(L, d, n), recipe, bound, "seed 002 loop")
    # and in float64 sinpe agrees with it to double rounding of both
    bound64 = double_error_bound(positions_of(0, L), d, n) + sinpe_double_bound(positions_of(0, L), d, n)
    assert_within(sinpe.encode(L, d, n, dtype=np.float64), recipe, bound64, "seed 002 loop, float64")


def test_seed_002_module_buffer_is_its_vectorised_gen_pe():
    """The module's buffer and gen_pe(.., n=10000) are the same program: identical bits."""
    module = seeds.Seed002PositionalEncoding(64, dropout=0.0, max_length=300)
    gen = seeds.seed_002_c2b1c30ef93e9668_torch(300, 64, 10000)
    assert torch.equal(module.pe, gen)


@pytest.mark.parametrize("seed", SEEDS)
def test_sinpe_is_closer_to_float64_than_the_recipe(seed):
    L, d, n = 5000, 512, 10000.0
    exact = table64(positions_of(0, L), d, n)
    recipe_error = np.abs(recipe_table(seed, L, d, n) - exact).max()
    sinpe_error = np.abs(sinpe.encode(L, d, n).astype(np.float64) - exact).max()
    assert sinpe_error <= U32 + double_error_bound([L - 1], d, n).max()
    assert sinpe_error < recipe_error / 100, (sinpe_error, recipe_error)


# ------------------------------------------------------------------ add_ vs forward
def recipe_forward(seed: str, xs, L: int, d: int, n: float, seq_first: bool):
    """Run the seed's forward on xs (a torch tensor) laid out as the seed expects.

    xs is seq-first (L, B, d) if seq_first else batch-first (B, L, d); recipes
    of the other layout see a transposed view and their result is transposed back.
    """
    batch_first = xs.transpose(0, 1) if seq_first else xs
    if seed == "000":
        buf = seeds.seed_000_052a39587cece21b(L + 7, d, n)  # a longer buffer, sliced
        y = seeds.seed_000_052a39587cece21b_forward(batch_first, buf)
    elif seed == "002":
        module = seeds.Seed002PositionalEncoding(d, dropout=0.0, max_length=L + 7)
        y = module(batch_first)
    elif seed == "004":
        y = seeds.seed_004_2445c59576344ddd_forward(batch_first, seeds.seed_004_2445c59576344ddd(L, d, n))
    elif seed == "003":
        y = seeds.seed_003_c1caa5f3267db948_forward(batch_first, seeds.seed_003_c1caa5f3267db948(L + 7, d, n))
    elif seed == "001":
        seq = batch_first.transpose(0, 1)
        y = seeds.seed_001_c72382e923a91f66_forward(seq, seeds.seed_001_c72382e923a91f66(L + 7, d, n))
        y = y.transpose(0, 1)
    else:
        raise AssertionError(seed)
    y = y.transpose(0, 1) if seq_first else y
    assert y.dtype == torch.float32 and tuple(y.shape) == tuple(xs.shape)
    return y.detach().numpy()


ADD_CASES = [(2, 5000, 512), (3, 37, 10)]


@pytest.mark.parametrize("scale_name", ["1", "sqrt_d"])
@pytest.mark.parametrize("seq_first", [False, True], ids=["batch_first", "seq_first"])
@pytest.mark.parametrize("B,L,d", ADD_CASES)
@pytest.mark.parametrize("seed", SEEDS)
def test_add_matches_recipe_forward(seed, B, L, d, seq_first, scale_name):
    n = 10000.0  # seed 002's module hard-codes this base
    scale = 1.0 if scale_name == "1" else math.sqrt(d)
    rng = np.random.default_rng(B * 1000 + L + d)
    shape = (L, B, d) if seq_first else (B, L, d)
    x = rng.standard_normal(shape).astype(np.float32)

    xs = torch.from_numpy(x.copy())
    if scale != 1.0:
        xs = xs * scale  # how Transformer embeddings apply sqrt(d_model): float32
    expected = recipe_forward(seed, xs, L, d, n, seq_first)

    target = x.copy()
    result = sinpe.add_(target, n, axis=0 if seq_first else -2, scale=scale)
    assert result is target

    # Both sides compute x * float32(scale) in float32 (the same product) and add
    # a float32 table: they differ by the tables (the recipe's error, sinpe's
    # double error and its rounding to float32) and each sum's own rounding.
    table = sinpe.encode(L, d, n)
    table_bound = (recipe_bound(seed, L, d, n) + sinpe_double_bound(positions_of(0, L), d, n)
                   + half_ulp32(table))  # (L, d)
    table_bound = table_bound[:, None, :] if seq_first else table_bound[None, :, :]
    bound = table_bound + half_ulp32(target) + half_ulp32(expected)
    assert_within(target, expected, bound, f"add_ vs seed {seed} forward")
