"""SIMD levels: each hot loop is compiled per level and one level runs (the best the
CPU has, or the one ``SINPE_SIMD`` names).  Every level must give the same bits, a
bad ``SINPE_SIMD`` must warn and fall back (never run what the CPU lacks), and
``show_config`` must say which level runs.

The value checks of the suite run at the default level; tests/slow/test_simd_levels.py
runs them again under each other level the CPU has."""
from __future__ import annotations

import hashlib
import itertools
import os
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import sinpe
from sinpe import _core

try:
    import ml_dtypes
except ImportError:  # bfloat16 is optional
    ml_dtypes = None

TESTS = Path(__file__).resolve().parent
LEVEL, AVAILABLE = _core._simd_levels()
ALL_LEVELS = ["baseline", "avx2", "avx512", "avx512_bf16"]


@pytest.fixture
def restore_level():
    yield
    assert _core._select_simd(LEVEL)


def dtypes():
    found = [np.float16, np.float32, np.float64]
    return found + ([ml_dtypes.bfloat16] if ml_dtypes is not None else [])


def outputs():
    """Every path of the hot loops: tables (layouts, schedules, widths that end
    in a lone sine, wide tables, offsets), explicit positions and padding, RoPE
    caches, grids, adds (scales, batch-first and seq-first), in every dtype,
    into plain and strided, byte-swapped memory."""
    rng = np.random.default_rng(7)
    for dtype in dtypes():
        for layout in ("interleaved", "concatenated"):
            yield sinpe.encode(150, 64, dtype=dtype, layout=layout, offset=-37)
            yield sinpe.encode(70, 13, 500000.0, dtype=dtype, layout=layout,
                               schedule="fairseq")
            yield sinpe.rope(130, 48, dtype=dtype, layout=layout, offset=5)[0]
            yield sinpe.rope(130, 48, dtype=dtype, layout=layout, offset=5)[1]
            yield from sinpe.rope(130, 48, dtype=dtype, layout=layout, offset=5, scale=0.9)
        yield sinpe.encode(3, 4100, dtype=dtype)  # wide: step rows made per tile
        yield sinpe.encode(40, 33, dtype=dtype, offset=2**24 - 40)
        yield sinpe.encode_at(np.array([[3, 4, 5, 900], [-7, 0, 1, 2]]), 24, dtype=dtype,
                              padding=np.array([[0, 0, 1, 0], [0, 1, 0, 0]], bool))
        yield sinpe.encode_at(np.array([0.5, 2.0, 1e6 + 0.25]), 24, dtype=dtype)
        yield sinpe.encode_grid((5, 6, 7), 48, dtype=dtype, layout="sines_first")
        strided = np.zeros((90, 2 * 40 + 1), np.dtype(dtype).newbyteorder(">"))[:, 1::2]
        yield sinpe.encode(90, 40, out=strided)
        x = rng.standard_normal((3, 70, 32)).astype(dtype)
        for scale in (1.0, 5.656854249492381):
            yield sinpe.add_(x.copy(), scale=scale)
            yield sinpe.add_(x.transpose(1, 0, 2).copy(), axis=0, scale=scale)
        yield sinpe.add_(x.copy(), positions=rng.integers(0, 500, (3, 70)))
        # rotations: both layouts, axis=1, broadcast positions, partial, scaled, exact,
        # out of place and inverse, given caches, strided and byte-swapped
        q = rng.standard_normal((2, 5, 70, 48)).astype(dtype)
        for layout in ("concatenated", "interleaved"):
            yield sinpe.rope_(q.copy(), offset=-3, layout=layout)
            yield sinpe.rope_(q.copy(), 500000.0, offset=2**20, layout=layout, exact=True)
        yield sinpe.rope_(q.transpose(0, 2, 1, 3).copy(), axis=1, rotary_dim=32, scale=0.75)
        yield sinpe.rope_(q.copy(), positions=rng.integers(0, 900, (2, 1, 70)))
        swapped = np.zeros((2, 5, 70, 97), np.dtype(dtype).newbyteorder(">"))[..., 1::2]
        swapped[...] = q
        yield sinpe.rope_(swapped, offset=9)
        out = np.empty_like(q)
        yield _core._rope_into(out, q, offset=4, inverse=True, scale=1.5)
        yield _core._rotate_by(np.empty_like(q), q, (q[:, :1] * 0.5).astype(dtype), q[:, :1])
        # sections: time, height, width ids (an image's patches, text around them),
        # contiguous and interleaved, both pair layouts, a spread and float position,
        # scaled, exact, out of place, and the caches
        ids = np.arange(70)
        thw = np.stack([np.where(ids < 30, ids, 30), ids % 6 + 30, ids // 6 + 30])
        thw[:, 50:] = np.arange(50, 70) + 10
        thw[1, 0] = 2**24 - 2000  # far from the others: its section's spare row
        thw = thw[:, None, None, :] + np.array([0, 1000])[None, :, None, None]  # (3, 2, 1, 70)
        for layout in ("concatenated", "interleaved"):
            yield sinpe.rope_(q.copy(), positions=thw, sections=(8, 8, 8), layout=layout)
            yield sinpe.rope_(q.copy(), positions=thw, sections=(8, 8, 8), layout=layout,
                              sections_layout="interleaved", exact=True, scale=0.5)
            for cache in sinpe.rope(None, 48, positions=thw[:, :, 0] / 3, sections=(10, 7, 7),
                                    sections_layout="interleaved", layout=layout, dtype=dtype):
                yield cache
        yield sinpe.rope_(swapped, positions=thw, sections=(4, 10, 10), rotary_dim=48)
        yield _core._rope_into(np.empty_like(q), q, positions=thw[:2], sections=(12, 12),
                               inverse=True, freq=np.tile(0.5 ** np.arange(12), 2))


# Bit patterns the 16-bit conversions treat apart: quiet and signalling NaNs of
# both signs and payloads, infinities, zeros, the smallest and largest
# subnormals, the largest finite values; for bfloat16 also the smallest normals
# (their products with the caches are subnormal) and 2**111, 2**112 (where the
# rotations' split rounding of products overflows).
SPECIAL_BITS = {
    "float16": [0x7E00, 0xFE00, 0x7C01, 0xFC01, 0x7FFF, 0x7C00, 0xFC00, 0x0000, 0x8000,
                0x0001, 0x8001, 0x03FF, 0x83FF, 0x7BFF, 0xFBFF],
    "bfloat16": [0x7FC0, 0xFFC0, 0x7F81, 0xFF81, 0x7FFF, 0x7F80, 0xFF80, 0x0000, 0x8000,
                 0x0001, 0x8001, 0x007F, 0x807F, 0x7F7F, 0xFF7F, 0x0080, 0x8080, 0x7700,
                 0xF780],
}


def with_specials(x, rng):
    """x (a 16-bit array) with an eighth of its elements replaced by SPECIAL_BITS."""
    bits = x.view(np.uint16)
    where = rng.random(x.shape) < 0.125
    bits[where] = rng.choice(SPECIAL_BITS[x.dtype.name], size=int(where.sum()))
    return x


def special_outputs():
    """The 16-bit adds and rotations on specials: NaN results (canonical, their sign
    by the NaN rule), infinities, subnormal inputs and results (the hardware
    bfloat16 conversion flushes them), overflow, and ties: an add of half a unit
    of the table's last place, which rounds to even."""
    rng = np.random.default_rng(11)
    for dtype in [d for d in dtypes() if np.dtype(d).itemsize == 2]:
        x = with_specials(rng.standard_normal((3, 40, 64)).astype(dtype), rng)
        for scale in (1.0, 3.0, 0.0):
            yield sinpe.add_(x.copy(), scale=scale)
        table = sinpe.encode(40, 64, dtype=dtype).astype(np.float64)
        half_ulp = 2.0 ** (np.floor(np.log2(np.abs(np.where(table == 0, 1, table)))) - (
            11 if np.dtype(dtype).name == "float16" else 8))
        ties = (half_ulp * rng.choice([-1, 1], table.shape)).astype(dtype)
        yield sinpe.add_(np.broadcast_to(ties, (2, 40, 64)).copy())
        subnormal = np.full((2, 40, 64), 0.0, dtype)
        subnormal.view(np.uint16)[...] = rng.integers(1, 0x7F, subnormal.shape)
        yield sinpe.add_(subnormal, scale=0.5)
        q = with_specials(rng.standard_normal((2, 4, 40, 64)).astype(dtype), rng)
        for layout in ("concatenated", "interleaved"):
            for exact in (False, True):
                yield sinpe.rope_(q.copy(), layout=layout, exact=exact)
                yield sinpe.rope_(q.copy(), offset=3000, layout=layout, exact=exact, scale=1e4)
        cos = with_specials(rng.standard_normal((2, 4, 40, 64)).astype(dtype), rng)
        sin = with_specials(rng.standard_normal((2, 4, 40, 64)).astype(dtype), rng)
        yield _core._rotate_by(np.empty_like(q), q, cos, sin)
        yield _core._rotate_by(np.empty_like(q), q, cos, sin, layout="interleaved")


def fingerprint() -> str:
    digest = hashlib.sha256()
    for a in itertools.chain(outputs(), special_outputs()):
        digest.update(np.ascontiguousarray(a).tobytes())
    return digest.hexdigest()


def test_the_level_in_use_is_the_best_the_cpu_has_and_shown_by_show_config(capsys):
    assert AVAILABLE[0] == "baseline" and set(AVAILABLE) <= set(ALL_LEVELS)
    assert LEVEL == AVAILABLE[-1] or "SINPE_SIMD" in os.environ
    config = sinpe.show_config()
    printed = {line.split()[0]: line.split(None, 1)[1] for line in
               capsys.readouterr().out.splitlines()}
    assert config["simd"] == LEVEL and config["simd_available"] == AVAILABLE
    assert printed["simd"] == LEVEL and printed["simd_available"] == ", ".join(AVAILABLE)
    assert printed["version"] == sinpe.__version__
    assert printed["threads"] == str(sinpe.get_num_threads())
    for key in ("compiler", "platform", "machine", "python"):
        assert printed[key] == config[key]


@pytest.mark.parametrize("level", AVAILABLE)
def test_every_level_gives_the_same_bits(level, restore_level):
    assert _core._select_simd("baseline")
    reference = fingerprint()
    assert _core._select_simd(level)
    assert _core._simd_levels()[0] == level
    assert fingerprint() == reference


def strided_copy(a):
    """a copied into every other element of a wider array: a view the kernels
    take element by element (sinpe_add_elem, sinpe_rotate_elem: the definition)."""
    wide = np.zeros(a.shape[:-1] + (2 * a.shape[-1],), a.dtype)
    view = wide[..., ::2]
    view[...] = a
    return view


@pytest.mark.parametrize("level", AVAILABLE)
def test_the_vector_loops_give_the_element_definitions_bits(level, restore_level):
    """Contiguous rows run the level's vector loops, strided ones the scalar
    definition: the same bits for the adds and rotations of every dtype, default
    and exact, both layouts, given caches, and the 16-bit specials (NaNs by the
    NaN rule; float32 and float64 NaNs are the CPU's and not compared)."""
    assert _core._select_simd(level)
    rng = np.random.default_rng(5)
    # 5 and 7 heads: groups of heads side by side (2, 3 or 4 at each level
    # and type), a remainder of two as a pair and one alone; 40 pairs: whole
    # vectors and a tail at every level
    for dtype, heads in itertools.product(dtypes(), (5, 7)):
        small = np.dtype(dtype).itemsize == 2
        x = rng.standard_normal((1, heads, 37, 80)).astype(dtype)
        if small:
            x = with_specials(x, rng)
        calls = [lambda v: sinpe.add_(v, scale=2.5), lambda v: sinpe.add_(v)]
        for layout in ("concatenated", "interleaved"):
            for exact in (False, True):
                calls.append(lambda v, lo=layout, ex=exact: sinpe.rope_(v, layout=lo, exact=ex))
        for call in calls:
            fast, slow = x.copy(), strided_copy(x)
            assert np.array_equal(call(fast).view(np.uint8), np.ascontiguousarray(call(slow)).view(np.uint8))
        cos, sin = (rng.standard_normal(x.shape).astype(dtype) for _ in range(2))
        if small:
            cos, sin = with_specials(cos, rng), with_specials(sin, rng)
        for layout in ("concatenated", "interleaved"):
            fast = _core._rotate_by(np.empty_like(x), x, cos, sin, layout=layout)
            slow = _core._rotate_by(strided_copy(np.empty_like(x)), strided_copy(x), cos, sin,
                                    layout=layout)
            assert np.array_equal(fast.view(np.uint8), np.ascontiguousarray(slow).view(np.uint8))


def test_the_fingerprint_sees_a_one_ulp_change(restore_level):
    """The battery would catch a level that differs in a single bit."""
    digest = hashlib.sha256()
    for i, a in enumerate(outputs()):
        a = np.ascontiguousarray(a).copy()
        if i == 5:
            a.view(np.uint8)[0] ^= 1
        digest.update(a.tobytes())
    assert digest.hexdigest() != fingerprint()


@pytest.mark.parametrize("level", [lv for lv in ALL_LEVELS if lv not in AVAILABLE])
def test_a_level_the_cpu_lacks_is_refused(level, restore_level):
    assert not _core._select_simd(level)
    assert _core._simd_levels()[0] == AVAILABLE[-1]


def run_with(simd: str, code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SINPE_SIMD": simd}
    return subprocess.run([sys.executable, "-W", "always", "-c", code], capture_output=True,
                          text=True, timeout=120, check=False, env=env, cwd=TESTS)


SHOW = "import sinpe; print(sinpe.show_config(print_it=False)['simd'])"


@pytest.mark.parametrize("level", AVAILABLE)
def test_sinpe_simd_chooses_a_level(level):
    proc = run_with(level, SHOW)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert proc.stdout.strip() == level


@pytest.mark.parametrize("bad", ["avx1024", "AVX2 ", "sse", "0"]
                         + [lv for lv in ALL_LEVELS if lv not in AVAILABLE])
def test_a_bad_sinpe_simd_warns_once_and_runs_the_best_level(bad):
    proc = run_with(bad, SHOW + "; import numpy; assert sinpe.encode(3, 4).shape == (3, 4)")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == AVAILABLE[-1]
    assert proc.stderr.count("RuntimeWarning") == 1, proc.stderr
    assert f"ignoring SINPE_SIMD={bad}" in proc.stderr


def test_select_simd_is_safe_while_other_threads_compute(restore_level):
    """Choosing a level while calls run: each call gives the same bits."""
    import threading
    want = sinpe.encode(3000, 256)
    stop = threading.Event()

    def flip():
        while not stop.is_set():
            for level in AVAILABLE:
                _core._select_simd(level)

    flipper = threading.Thread(target=flip)
    flipper.start()
    try:
        for _ in range(20):
            assert np.array_equal(sinpe.encode(3000, 256), want)
    finally:
        stop.set()
        flipper.join()


def test_no_warning_at_import_without_sinpe_simd():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        proc = subprocess.run([sys.executable, "-W", "error", "-c", "import sinpe"],
                              capture_output=True, text=True, timeout=60, check=False,
                              env={k: v for k, v in os.environ.items() if k != "SINPE_SIMD"},
                              cwd=TESTS)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
