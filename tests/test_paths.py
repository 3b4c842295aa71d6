"""Every code path of the kernels, against the float64 reference and against each other.

The kernels choose a path per call (csrc/plan/, csrc/exec/, csrc/kernels/rows.c):
one thread or several; feature tiles of 1024 lanes; cached step tables or,
for wide tables (d > 4096), step rows built per tile; plain contiguous loops,
the element-by-element writer (float16, byte-swapped, strided, unaligned),
and streaming stores for out= tables of 64 MB or more (plain stores for new
arrays and for RoPE's two caches); for add_ a tile of the table in the array's dtype, added
batch-first or seq-first.  Each must keep the promise (within 2**-24
of exact for float32), and all must give the same bits for the same element:
DESIGN.md makes every element a pure function of (p, j, d, n), so thread
counts, row ranges, call shapes, dtypes and paths may not change a bit.
No timings here (see sinpe/bench/).
"""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sinpe
from conftest import (
    U32,
    assert_bits_equal,
    double_error_bound,
    numpy_add,
    positions_of,
    require,
    sinpe_double_bound,
    table64,
)

THREAD_COUNTS = (1, 2, 3, 5)


@pytest.fixture
def threads():
    """Set the thread count for a test, restoring it afterwards."""
    before = sinpe.get_num_threads()
    yield sinpe.set_num_threads
    sinpe.set_num_threads(before)


def check_promise(table: np.ndarray, offset: int, n: float = 10000.0, positions=None) -> None:
    """float32: within 2**-24 of exact, i.e. of the reference up to its own error;
    float64: within sinpe's double bound of exact.  Rows are positions
    offset, offset + 1, ... unless `positions` are given."""
    L, d = table.shape
    if positions is None:
        positions = positions_of(offset, L)
    ref = table64(positions, d, n)
    ref_error = double_error_bound(positions, d, n)
    err = np.abs(table.astype(np.float64) - ref)
    if table.dtype == np.float64:
        allowed = sinpe_double_bound(positions, d, n) + ref_error
    else:
        allowed = U32 + ref_error
    worst = np.unravel_index(np.argmax(err - allowed), err.shape)
    assert (err <= allowed).all(), (
        f"{table.dtype} row {worst[0]} col {worst[1]}: error {err[worst]:.3g} > {allowed[worst]:.3g}")


def same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    a, b = np.ascontiguousarray(a), np.ascontiguousarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---------------------------------------------------------------- encode

@pytest.mark.parametrize("L, d, offset", [
    (16, 64, 0),            # the small path: one chunk, cached table
    (1, 1, 0),
    (5, 7, -3),             # odd d: the last column is a sine
    (31, 33, 17),           # crosses a block boundary
    (300, 2500, 12345),     # three feature tiles (1024 lanes each)
    (40, 8193, -70),        # wide table: step rows built per tile, all residues
    (3, 9000, 2**24 - 2),   # wide table, a few residues, at the top of the range
])
def test_encode_paths_keep_the_promise(L, d, offset):
    wide = sinpe.encode(L, d, offset=offset, dtype=np.float64)
    check_promise(wide, offset)
    narrow = sinpe.encode(L, d, offset=offset)
    check_promise(narrow, offset)
    assert same_bits(narrow, wide.astype(np.float32))  # rounded once from the same double
    half = sinpe.encode(L, d, offset=offset, dtype=np.float16)
    assert same_bits(half, wide.astype(np.float16))    # NumPy rounds double -> half once


def test_thread_counts_give_the_same_bits(threads):
    """700 x 512 float32 (1.4 MB) is split into chunks run by helper threads."""
    results = []
    for count in THREAD_COUNTS:
        threads(count)
        results.append(sinpe.encode(700, 512, offset=-333))
        results.append(sinpe.encode(130, 3000, offset=5, dtype=np.float64))
    check_promise(results[0], -333)
    for k in range(2, len(results)):
        assert same_bits(results[k], results[k % 2]), f"thread count {THREAD_COUNTS[k // 2]}"


@pytest.mark.parametrize("d", [64, 1025, 5000])
def test_any_row_range_computed_alone_has_the_same_bits(threads, d):
    """Shards: rows of a table computed alone (any offset, length, thread
    count, through the small or the threaded path) equal the full table's."""
    rng = np.random.default_rng(d)
    first = -1000
    full = sinpe.encode(2100, d, offset=first, dtype=np.float64)
    cuts = sorted({0, 2100, 1, 31, 32, 33, 999, 1000, 1001, *rng.integers(0, 2100, 6).tolist()})
    for count in (1, 3):
        threads(count)
        for lo, hi in zip(cuts, cuts[1:]):
            part = sinpe.encode(hi - lo, d, offset=first + lo, dtype=np.float64)
            assert same_bits(part, full[lo:hi]), (lo, hi, count)


@pytest.mark.parametrize("dtype", ["<f4", ">f4", "<f8", ">f8", "<f2", ">f2"])
def test_strided_and_byteswapped_out_match_the_new_array(threads, dtype):
    L, d = 300, 130
    expected = sinpe.encode(L, d, offset=7, dtype=np.dtype(dtype).newbyteorder("="))
    base = np.zeros((2 * L, 3 * d), dtype)
    views = {
        "every other row and third column": base[::2, ::3],
        "negative strides": base[L - 1::-1, d - 1::-1][::-1, ::-1],
        "transposed (column-major)": np.zeros((d, L), dtype).T,
        "offset by one element (unaligned rows)": np.zeros(L * d + 1, dtype)[1:].reshape(L, d),
    }
    for count in (1, 3):
        threads(count)
        for name, out in views.items():
            out[...] = 0
            assert sinpe.encode(L, d, offset=7, out=out) is out
            assert same_bits(out.astype(expected.dtype), expected), (name, count)


def test_unaligned_bytes_out(threads):
    """float32 rows starting at an odd byte address take the generic writer."""
    L, d = 40, 50
    raw = np.zeros(L * d * 4 + 1, np.uint8)
    out = raw[1:].view(np.float32).reshape(L, d)
    assert out.ctypes.data % 4 != 0
    sinpe.encode(L, d, out=out)
    assert same_bits(out, sinpe.encode(L, d))


@pytest.mark.parametrize("d, layout", [(1024, "interleaved"), (1025, "interleaved"),
                                       (1024, "concatenated")])
def test_streaming_stores_for_large_out_match_plain_stores(threads, d, layout):
    """out= of 64 MB is written with streaming stores (with scalar heads and
    tails when rows are not 64-byte aligned, d = 1025); a new array of the
    same table with plain stores: same bits."""
    L = (64 << 20) // (4 * d) + 1
    threads(2)
    out = np.empty((L, d), np.float32)
    sinpe.encode(L, d, offset=-5, out=out, layout=layout)
    fresh = sinpe.encode(L, d, offset=-5, layout=layout)
    assert same_bits(out, fresh)
    rows = np.arange(0, L, L // 7)
    sample = out[rows]
    if layout == "concatenated":  # back to sin/cos pairs for the reference
        half = (d + 1) // 2
        sample = np.stack([sample[:, :half], sample[:, half:]], axis=-1).reshape(len(rows), d)
    check_promise(sample, 0, positions=rows - 5)


# ---------------------------------------------------------------- add_

def expected_add(x: np.ndarray, axis: int, offset: int, scale: float) -> np.ndarray:
    """NumPy's x * x.dtype.type(scale) + T, T broadcast along the batch axes."""
    L, d = x.shape[axis], x.shape[-1]
    pe = sinpe.encode(L, d, offset=offset, dtype=x.dtype.newbyteorder("="))
    shape = [1] * x.ndim
    shape[axis], shape[-1] = L, d
    return numpy_add(x, pe.reshape(shape), scale)


@pytest.mark.parametrize("shape, axis", [
    ((8, 256, 512), -2),      # batch-first, 4 MB: threaded
    ((256, 8, 512), 0),       # seq-first
    ((3, 4, 70, 33), 2),      # two batch axes, odd d
    ((70, 3, 4, 33), 0),
    ((2, 40, 2500), 1),       # several feature tiles
    ((2, 33, 8193), 1),       # wide table
])
@pytest.mark.parametrize("scale", [1.0, 22.627416997969522])
def test_add_paths_match_numpy_arithmetic(threads, shape, axis, scale):
    rng = np.random.default_rng(1)
    x0 = rng.standard_normal(shape).astype(np.float32)
    want = expected_add(x0, axis, 11, scale)
    for count in (1, 2, 3):
        threads(count)
        x = x0.copy()
        assert sinpe.add_(x, offset=11, axis=axis, scale=scale) is x
        assert same_bits(x, want), count


def test_add_float16_float64_and_strided_views(threads):
    rng = np.random.default_rng(2)
    for dtype in (np.float16, np.float64, np.dtype(">f4")):
        base = rng.standard_normal((6, 90, 2 * 70)).astype(dtype)
        x = base[::2, :, ::2]  # non-contiguous features and batch
        want = expected_add(x, 1, -40, 1.0)
        for count in (1, 3):
            threads(count)
            y = x.copy()  # contiguous copy
            view = base.copy()[::2, :, ::2]
            sinpe.add_(y, offset=-40, axis=1)
            sinpe.add_(view, offset=-40, axis=1)
            assert same_bits(y, want) and same_bits(view, want), (dtype, count)


@pytest.mark.parametrize("name", ["float16", "bfloat16"])
@pytest.mark.parametrize("scale", [1.0, 8.0, 0.1, 3e4])
def test_add_16_bit_every_bit_pattern_matches_numpy(threads, name, scale):
    """Contiguous 16-bit adds run a vectorised loop of branch-free conversions:
    every bit pattern of x (subnormals, infinities, NaNs, the largest finite
    values, which 3e4 times overflow) must come out as NumPy's own half
    arithmetic, or ml_dtypes' bfloat16 arithmetic, makes it."""
    if name == "bfloat16":
        dtype = np.dtype(require("ml_dtypes").bfloat16)
    else:
        dtype = np.dtype(np.float16)
    x = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16).view(dtype).reshape(32, 16, 128)
    want = numpy_add(x, sinpe.encode(16, 128, dtype=dtype)[None], scale)
    for count in (1, 2):
        threads(count)
        y = x.copy()
        sinpe.add_(y, scale=scale)
        assert_bits_equal(y, want)


def test_add_agrees_with_encode(threads):
    """add_ on zeros gives exactly the encode table: one generator feeds both."""
    for count in (1, 2):
        threads(count)
        x = np.zeros((4, 600, 96), np.float32)
        sinpe.add_(x, offset=3)
        table = sinpe.encode(600, 96, offset=3)
        assert all(same_bits(x[b], table) for b in range(4))


# ---------------------------------------------------------------- threads API

def test_set_num_threads_validates_its_argument(threads):
    before = sinpe.get_num_threads()
    for bad, exc in [(0, ValueError), (-1, ValueError), (sinpe.MAX_THREADS + 1, ValueError),
                     ("2", TypeError), (2.0, TypeError), (True, TypeError), (None, TypeError)]:
        with pytest.raises(exc, match="threads"):
            sinpe.set_num_threads(bad)
    assert sinpe.get_num_threads() == before
    threads(np.int64(3))
    assert sinpe.get_num_threads() == 3


def run_python(code: str, env_threads: str | None, cwd) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("SINPE_NUM_THREADS", None)
    if env_threads is not None:
        env["SINPE_NUM_THREADS"] = env_threads
    # cwd: not the source tree, whose uncompiled sinpe/ would shadow the installed one
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=120)


def test_environment_variable_sets_the_default(tmp_path):
    code = "import sinpe; print(sinpe.get_num_threads())"
    assert run_python(code, "3", tmp_path).stdout.strip() == "3"
    default = run_python(code, None, tmp_path).stdout.strip()
    assert int(default) == len(os.sched_getaffinity(0))
    bad = run_python("import warnings; warnings.simplefilter('error')\n" + code, "lots", tmp_path)
    assert "SINPE_NUM_THREADS" in bad.stderr and "RuntimeWarning" in bad.stderr
    ignored = run_python(code, "0", tmp_path)
    assert ignored.stdout.strip() == default and "SINPE_NUM_THREADS=0" in ignored.stderr


def test_pool_survives_fork(tmp_path):
    """A child forked after the pool started (multiprocessing, DataLoader
    workers) must not wait for helper threads that do not exist there."""
    code = """
        import os, sys, numpy as np, sinpe
        sinpe.set_num_threads(2)
        parent = sinpe.encode(1000, 512)          # starts the helper thread
        pid = os.fork()
        if pid == 0:
            child = sinpe.encode(1000, 512)       # threaded again, in the child
            os._exit(0 if child.tobytes() == parent.tobytes() else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """
    result = run_python(code, None, tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "0"


def test_table_cache_churn_from_many_threads():
    """Eight Python threads cycle through more (n, d) tables than the cache
    holds, so tables are evicted while other calls still use them."""
    import threading

    failures = []

    def work(seed: int) -> None:
        for k in range(60):
            n, d = 2.0 + (7 * k + seed) % 13, 64 * (1 + (k + seed) % 40)
            first = sinpe.encode(40, d, n, offset=seed)
            if not same_bits(first, sinpe.encode(40, d, n, offset=seed)):
                failures.append((seed, k))

    workers = [threading.Thread(target=work, args=(seed,)) for seed in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert not failures
    check_promise(sinpe.encode(40, 64 * 40, 3.0), 0, n=3.0)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "bfloat16"])
@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("d", [64, 37, 2 * 600])
def test_two_blocks_per_pass_are_the_rows_made_one_by_one(dtype, layout, d):
    """Range positions (and explicit ones that count up) make two whole 32-row
    blocks per pass over the steps; positions that count down make each row
    alone.  Same bits, whatever the block alignment (offset), the odd width,
    the frequency tiles, the format of out= or the thread count."""
    dtype = np.dtype(dtype) if dtype != "bfloat16" else np.dtype(require("ml_dtypes").bfloat16)
    before = sinpe.get_num_threads()
    try:
        for threads, offset in ((1, 0), (2, 5), (1, -37), (2, 64)):
            sinpe.set_num_threads(threads)
            L = 300 if d < 1000 else 200
            positions = np.arange(offset, offset + L)
            alone = sinpe.encode_at(positions[::-1], d, dtype=dtype, layout=layout)[::-1]
            what = f"threads={threads} offset={offset}"
            assert_bits_equal(sinpe.encode(L, d, dtype=dtype, layout=layout, offset=offset),
                              alone, what)
            assert_bits_equal(sinpe.encode_at(positions, d, dtype=dtype, layout=layout),
                              alone, what + " explicit, counting up")
            swapped = np.empty((L, d), dtype.newbyteorder())
            sinpe.encode(L, d, layout=layout, offset=offset, out=swapped)
            assert_bits_equal(swapped.astype(dtype), alone, what + " swapped")
    finally:
        sinpe.set_num_threads(before)
