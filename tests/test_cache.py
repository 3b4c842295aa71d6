"""The cache of made tables: ``add_`` keeps a table asked for twice and only adds it
afterwards.  A kept table must give the bits of one made anew, the cache must stay
within its bounds whatever is asked of it, and threads and ``clear_cache`` must not
disturb each other."""
from __future__ import annotations

import threading

import numpy as np
import pytest

import sinpe
from sinpe import _core
from conftest import UNDER_ASAN, numpy_add as numpy_add_table

MAX_TABLES, MAX_BYTES, MAX_TABLE_BYTES, MIN_TABLE_BYTES = 8, 64 << 20, 16 << 20, 16 << 10


@pytest.fixture(autouse=True)
def empty_cache():
    sinpe.clear_cache()
    yield
    sinpe.clear_cache()


def numpy_add(x, offset=0, scale=1.0, axis=-2):
    """NumPy's x * scale + table, the table made by encode (a store: no cache)."""
    table = sinpe.encode(x.shape[axis], x.shape[-1], offset=offset, dtype=x.dtype)
    return numpy_add_table(x, table[:, None, :] if axis == 0 else table, scale=scale)


def kept():
    return _core._row_cache()


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize("scale", [1.0, 22.627416997969522])
def test_an_add_from_the_cache_has_the_bits_of_one_made_anew(dtype, scale):
    rng = np.random.default_rng(1)
    x = (rng.standard_normal((3, 300, 64)) * 4).astype(dtype)
    want = numpy_add(x, scale=scale, offset=7)
    for call in range(4):  # made per chunk, made and kept, then from the cache twice
        y = x.copy()
        sinpe.add_(y, offset=7, scale=scale)
        np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8), err_msg=f"call {call}")
        assert kept()[0] == (1 if call >= 1 else 0)


def test_positions_inside_a_kept_table_are_taken_from_it():
    x = np.zeros((2, 512, 128), np.float32)
    sinpe.add_(x.copy())
    sinpe.add_(x.copy())
    assert kept() == (1, 512 * 128 * 4)
    for offset, length in [(0, 1), (511, 1), (100, 300), (0, 512)]:
        y = np.zeros((2, length, 128), np.float32)
        sinpe.add_(y, offset=offset)
        np.testing.assert_array_equal(y[0], sinpe.encode(length, 128, offset=offset))
        np.testing.assert_array_equal(y[1], y[0])
    assert kept() == (1, 512 * 128 * 4)  # no other table was made


def test_seq_first_and_batch_first_share_a_kept_table():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((4, 256, 96)).astype(np.float32)
    for _ in range(2):
        sinpe.add_(x.copy())
    seq_first = np.ascontiguousarray(x.transpose(1, 0, 2))
    y = seq_first.copy()
    sinpe.add_(y, axis=0)
    np.testing.assert_array_equal(y, numpy_add(seq_first, axis=0))
    assert kept()[0] == 1


def test_small_one_off_and_oversized_tables_are_not_kept():
    sinpe.add_(np.zeros((2, 8, 64), np.float32))  # 2 KB: cheaper to make than to keep
    sinpe.add_(np.zeros((2, 8, 64), np.float32))
    sinpe.add_(np.zeros((1, 4096, 512), np.float32))  # asked for once
    assert kept() == (0, 0)
    big = np.zeros((1, 4097, 1024), np.float32)  # 16 MB + a row: beyond a table's bound
    sinpe.add_(big)
    sinpe.add_(big)
    assert kept() == (0, 0)
    assert MIN_TABLE_BYTES > 8 * 64 * 4 and 4097 * 1024 * 4 > MAX_TABLE_BYTES


def test_explicit_positions_and_frequencies_are_not_kept():
    x = np.zeros((2, 256, 64), np.float32)
    for _ in range(3):
        sinpe.add_(x, positions=np.arange(512).reshape(2, 256))
        sinpe.add_(x, freq=np.full(32, 0.5))
    assert kept() == (0, 0)


def test_the_cache_keeps_at_most_eight_tables_and_64_mib():
    widths = [1024 + 64 * i for i in range(12)]  # ~8.4 to 11 MB each at L = 2048
    for d in widths:
        x = np.zeros((1, 2048, d), np.float32)
        for _ in range(2):
            sinpe.add_(x)
        tables, nbytes = kept()
        assert tables <= MAX_TABLES and nbytes <= MAX_BYTES
    assert kept()[0] >= 5  # it did keep tables, up to its bounds
    for d in range(64, 64 + 2 * 40, 2):  # many small ones: the slot bound
        x = np.zeros((1, 128, d), np.float32)
        sinpe.add_(x)
        sinpe.add_(x)
        assert kept()[0] <= MAX_TABLES


def test_the_least_recently_used_table_goes_first():
    tables = [np.zeros((1, 1024, 64 + 2 * i), np.float32) for i in range(9)]
    for x in tables[:8]:
        sinpe.add_(x)
        sinpe.add_(x)
    assert kept()[0] == 8
    sinpe.add_(tables[0])  # now the most recent
    sinpe.add_(tables[8])
    sinpe.add_(tables[8])  # evicts tables[1], not tables[0]
    before = kept()
    sinpe.add_(tables[0])  # a hit: nothing made
    assert kept() == before
    sinpe.add_(tables[1])  # a miss, asked for before: made and kept again
    assert kept()[0] == 8


@pytest.mark.skipif(UNDER_ASAN, reason="ASan's allocator keeps freed tables resident (its "
                    "quarantine); under ASan the tables come from malloc, not the pages measured here")
def test_memory_stays_flat_over_many_tables(tmp_path):
    """The process's resident memory stays within the cache's bound while ever
    new tables are asked for (each twice), and falls back after clear_cache."""
    import resource

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * resource.getpagesize()

    x = np.zeros((1, 1024, 2048), np.float32)  # 8 MB tables
    sinpe.add_(x)
    before = rss()
    for offset in range(0, 40 * 1024, 1024):
        sinpe.add_(x, offset=offset)
        sinpe.add_(x, offset=offset)
    grown = rss() - before
    assert grown <= MAX_BYTES + (16 << 20), grown / 2**20
    sinpe.clear_cache()
    assert kept() == (0, 0)
    assert rss() - before <= 16 << 20


def test_threads_adding_and_clearing_at_once_get_the_bits_of_one_thread():
    rng = np.random.default_rng(3)
    shapes = [(2, 300, 64), (3, 200, 128), (1, 700, 96)]
    xs = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    wants = [numpy_add(x, offset=5) for x in xs]
    errors = []

    def adder(k):
        try:
            for _ in range(60):
                i = k % len(xs)
                y = xs[i].copy()
                sinpe.add_(y, offset=5)
                if not np.array_equal(y, wants[i]):
                    errors.append(i)
                k += 1
        except Exception as exc:  # pragma: no cover - reported below
            errors.append(exc)

    def clearer():
        for _ in range(200):
            sinpe.clear_cache()

    threads = [threading.Thread(target=adder, args=(k,)) for k in range(4)]
    threads.append(threading.Thread(target=clearer))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    tables, nbytes = kept()
    assert tables <= MAX_TABLES and nbytes <= MAX_BYTES


def test_a_decoding_loop_one_row_per_call_gets_the_table_rows():
    """Calls that write rows of a single block reuse the block's anchors from an
    earlier call (tables keep those of two blocks); every row must still be the
    table's, whichever thread asked first and whichever blocks came between."""
    table = sinpe.encode(3000, 512)
    positions = list(range(990, 1100)) + [5, 2999, 1000, 6, 1001]
    errors = []

    def decode(order):
        x = np.zeros((1, 1, 512), np.float32)
        for p in order:
            x[...] = 0
            sinpe.add_(x, offset=p)
            if not np.array_equal(x[0, 0], table[p]):
                errors.append(p)
            y = sinpe.encode(1, 512, offset=p)
            if not np.array_equal(y[0], table[p]):
                errors.append(("encode", p))

    decode(positions)
    threads = [threading.Thread(target=decode, args=(positions[k::3] * 3,)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_explicit_positions_inside_a_kept_table_are_added_from_it():
    """add_(positions=) uses a kept table that holds every position it is given
    (it never keeps one for them): the bits of a made table, padding respected."""
    rng = np.random.default_rng(4)
    x = rng.standard_normal((6, 200, 64)).astype(np.float32)
    for _ in range(2):
        sinpe.add_(x.copy())  # keeps the table of positions 0 .. 199
    assert kept()[0] == 1
    table = sinpe.encode(400, 64)
    positions = rng.integers(0, 200, (6, 200))
    positions[2] = np.arange(200) - 9  # left padding: the negative rows are padded
    padding = positions < 0
    y = x.copy()
    sinpe.add_(y, positions=positions, padding=padding)
    want = np.where(padding[..., None], x, x + table[np.clip(positions, 0, None)])
    np.testing.assert_array_equal(y, want)
    far = positions + 150  # beyond the kept table: made per window instead
    z = x.copy()
    sinpe.add_(z, positions=far)
    np.testing.assert_array_equal(z, x + table[far])
    assert kept()[0] == 1


def rotate_made_anew(x, **kw):
    """rope_ of a copy with an empty cache: its rows made per chunk."""
    sinpe.clear_cache()
    y = x.copy()
    sinpe.rope_(y, **kw)
    sinpe.clear_cache()
    return y


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(
    "kw",
    [{}, {"layout": "interleaved"}, {"scale": 0.8}, {"exact": True}, {"rotary_dim": 32},
     {"n": 500000.0, "scale": 1.25, "layout": "interleaved"}],
    ids=["plain", "interleaved", "scaled", "exact", "partial", "base-scaled-interleaved"],
)
def test_a_rotation_from_the_cache_has_the_bits_of_one_made_anew(dtype, kw):
    """rope_ keeps its rows (scaled as it rotates by them) when asked for them twice;
    a rotation from them has the bits of one whose rows were made per chunk."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((2, 4, 300, 64)) * 4).astype(dtype)
    want = rotate_made_anew(x, offset=9, **kw)
    for call in range(4):  # made per chunk, made and kept, then from the cache twice
        y = x.copy()
        sinpe.rope_(y, offset=9, **kw)
        np.testing.assert_array_equal(y.view(np.uint8), want.view(np.uint8), err_msg=f"call {call}")
        assert kept()[0] == (1 if call >= 1 else 0)


@pytest.mark.parametrize("threads", [1, 2])
def test_rotations_inside_a_kept_table_are_taken_from_it(threads):
    """Offsets and lengths inside a kept table use it, at any thread count; rope_'s
    rows, an add's table and another scale or base are different tables."""
    rng = np.random.default_rng(6)
    x = rng.standard_normal((2, 8, 512, 128)).astype(np.float32)
    parts = [(0, 1), (511, 1), (100, 300), (0, 512), (17, 64)]
    others = [{"scale": 0.5}, {"n": 500000.0}, {"exact": True}]
    before = sinpe.get_num_threads()
    sinpe.set_num_threads(threads)
    try:
        want = {(o, n): rotate_made_anew(np.ascontiguousarray(x[:, :, :n]), offset=o)
                for o, n in parts}
        want_others = [rotate_made_anew(x, **kw) for kw in others]
        for _ in range(2):
            sinpe.rope_(x.copy())
        assert kept() == (1, 512 * 128 * 4)
        for offset, length in parts:
            y = x[:, :, :length].copy()
            sinpe.rope_(y, offset=offset)
            np.testing.assert_array_equal(y, want[offset, length],
                                          err_msg=f"offset {offset} length {length}")
            assert kept() == (1, 512 * 128 * 4)  # no other table was made
        table = np.ascontiguousarray(x[0, 0])
        for _ in range(2):
            sinpe.add_(table.copy())
        assert kept()[0] == 2
        for kw, w in zip(others, want_others):
            for _ in range(3):
                y = x.copy()
                sinpe.rope_(y, **kw)
                np.testing.assert_array_equal(y, w, err_msg=str(kw))
    finally:
        sinpe.set_num_threads(before)
    assert kept()[0] == 5


def test_explicit_positions_frequencies_and_sections_keep_no_rotation_rows():
    x = np.zeros((2, 4, 256, 64), np.float32)
    positions = np.arange(256)
    for _ in range(3):
        sinpe.rope_(x, positions=positions)
        sinpe.rope_(x, freq=np.full(32, 0.5))
        sinpe.rope_(x, positions=np.stack([positions] * 3), sections=[8, 12, 12])
    assert kept() == (0, 0)


@pytest.mark.parametrize("dtype", [np.float16, np.float32])
def test_the_inverse_rotation_keeps_rows_of_its_own(dtype):
    """sinpe.torch's backward rotates by the negated sines (inverse=True): its kept
    rows are not the forward's, and each keeps the bits of its rows made anew."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((2, 4, 256, 64)).astype(dtype)
    sinpe.clear_cache()
    forward, inverse = np.empty_like(x), np.empty_like(x)
    _core._rope_into(forward, x, offset=3)
    _core._rope_into(inverse, x, offset=3, inverse=True)
    assert not np.array_equal(forward, inverse)
    for call in range(3):
        y, z = np.empty_like(x), np.empty_like(x)
        _core._rope_into(y, x, offset=3)
        _core._rope_into(z, x, offset=3, inverse=True)
        np.testing.assert_array_equal(y, forward, err_msg=f"call {call}")
        np.testing.assert_array_equal(z, inverse, err_msg=f"call {call}")
    assert kept()[0] == 2
