"""Leaks: every entry point, succeeding and failing, thousands of times.

Three independent meters, each catching what the others miss:
- sys.getrefcount of every argument and result: a missing Py_DECREF of an
  argument (or an extra Py_INCREF of a result) grows it by one per call;
- tracemalloc: Python objects and NumPy array data (NumPy reports its data
  allocations to tracemalloc) that are never freed;
- the process's resident memory (/proc/self/statm): the kernel's own
  malloc'd scratch, which tracemalloc does not see.
"""
from __future__ import annotations

import gc
import os
import resource
import sys
import tracemalloc

import numpy as np
import pytest
from conftest import UNDER_ASAN

import sinpe

# scripts/valgrind.sh sets fewer: valgrind's own leak check needs only a few
# calls per path, and the thresholds below then cannot fail (they need 3000).
CALLS = int(os.environ.get("SINPE_LEAK_CALLS", 3000))


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize()


def fails(exc_type, call):
    def run():
        try:
            call()
        except exc_type:
            return
        raise AssertionError(f"expected {exc_type.__name__}")
    return run


def entry_points():
    """(name, call, objects whose reference counts must not move)."""
    f32, f64 = np.dtype(np.float32), np.dtype(np.float64)
    base, offset, big_offset, scale = 10000.0, 7, 2**40, 1.5
    out64 = np.empty((40, 64))
    out_t = np.empty((64, 40), np.float16).T
    x32 = np.zeros((2, 40, 64), np.float32)
    x16 = np.zeros((40, 2, 63), np.dtype(np.float16).newbyteorder())
    x_ro = np.zeros((2, 3, 4), np.float32)
    x_ro.flags.writeable = False
    x_int = np.zeros((2, 3, 4), np.int32)
    not_array = [[0.0] * 4] * 3
    out32 = np.zeros_like(x32)
    positions = np.arange(40)[None, :] + np.array([[0], [100]])  # (2, 40): broadcast over nothing
    freq = np.full(32, 0.25)
    # (3, 2, 40) time, height, width ids: three sections of the 32 pairs
    p3 = np.stack([positions, positions // 5, positions % 5])
    sections, bad_sections, float_sections = [8, 12, 12], [8, 12, 13], [8.0, 12, 12]
    interleaved, qwen3 = "interleaved", (12, 10, 10)
    bad_n, bad_dtype, bad_shape_out = float("nan"), np.dtype(np.int16), np.empty((3, 5))
    points = [
        ("encode float32", lambda: sinpe.encode(40, 64, base, offset=offset, dtype=f32), [f32, base]),
        ("encode float16 by name", lambda: sinpe.encode(33, 7, dtype="float16"), []),
        ("encode out=", lambda: sinpe.encode(40, 64, out=out64, dtype=f64), [out64, f64]),
        ("encode out= transposed", lambda: sinpe.encode(40, 64, out=out_t), [out_t]),
        ("add_ float32", lambda: sinpe.add_(x32, base, offset=offset, scale=scale), [x32, base, scale]),
        ("add_ swapped float16 axis=0", lambda: sinpe.add_(x16, axis=0), [x16]),
        ("encode bad n", fails(ValueError, lambda: sinpe.encode(4, 4, bad_n)), [bad_n]),
        ("encode bad dtype", fails(TypeError, lambda: sinpe.encode(4, 4, dtype=bad_dtype)), [bad_dtype]),
        ("encode dtype not understood", fails(TypeError, lambda: sinpe.encode(4, 4, dtype="nope")), []),
        ("encode out wrong shape", fails(ValueError, lambda: sinpe.encode(3, 4, out=bad_shape_out)),
         [bad_shape_out]),
        ("encode out dtype mismatch", fails(TypeError, lambda: sinpe.encode(40, 64, out=out64, dtype=f32)),
         [out64, f32]),
        ("encode offset beyond bound", fails(ValueError, lambda: sinpe.encode(4, 4, offset=big_offset)),
         [big_offset]),
        ("encode L*d overflow", fails(OverflowError, lambda: sinpe.encode(2**24, 2**40)), []),
        ("encode beyond memory", fails(MemoryError, lambda: sinpe.encode(2**24, 2**20, dtype=f64)), [f64]),
        ("encode L float", fails(TypeError, lambda: sinpe.encode(4.0, 4)), []),
        ("add_ read-only", fails(ValueError, lambda: sinpe.add_(x_ro)), [x_ro]),
        ("add_ int array", fails(TypeError, lambda: sinpe.add_(x_int)), [x_int]),
        ("add_ list", fails(TypeError, lambda: sinpe.add_(not_array)), [not_array]),
        ("add_ bad axis", fails(ValueError, lambda: sinpe.add_(x32, axis=5)), [x32]),
        ("add_ bad scale", fails(ValueError, lambda: sinpe.add_(x32, scale=bad_n)), [x32, bad_n]),
        ("add_ unknown keyword", fails(TypeError, lambda: sinpe.add_(x32, axes=0)), [x32]),
        ("rope_ float32", lambda: sinpe.rope_(x32, base, offset=offset, scale=scale), [x32, base, scale]),
        ("rope_ positions broadcast", lambda: sinpe.rope_(x32, positions=positions), [x32, positions]),
        ("rope_ exact swapped float16", lambda: sinpe.rope_(x16[..., :62], axis=0, exact=True), [x16]),
        ("rope_ out of place, inverse", lambda: sinpe._core._rope_into(out32, x32, inverse=True),
         [out32, x32]),
        ("rope_ given caches", lambda: sinpe._core._rotate_by(out32, x32, x32, x32[:1]), [out32, x32]),
        ("rope_ checks only", lambda: sinpe._core._rope_into(None, x32, freq=freq), [x32, freq]),
        ("rope_ odd rotary_dim", fails(ValueError, lambda: sinpe.rope_(x32, rotary_dim=3)), [x32]),
        ("rope_ positions not broadcasting", fails(ValueError, lambda: sinpe.rope_(x32, positions=freq)),
         [x32, freq]),
        ("rope_ read-only", fails(ValueError, lambda: sinpe.rope_(x_ro)), [x_ro]),
        ("rope_ int array", fails(TypeError, lambda: sinpe.rope_(x_int)), [x_int]),
        ("rope_ sections", lambda: sinpe.rope_(x32, positions=p3, sections=sections), [x32, p3, sections]),
        ("rope_ sections interleaved out of place, inverse",
         lambda: sinpe._core._rope_into(out32, x32, positions=p3, sections=qwen3,
                                        sections_layout=interleaved, inverse=True),
         [out32, x32, p3, qwen3, interleaved]),
        ("rope caches with sections", lambda: sinpe.rope(None, 64, positions=p3, sections=sections),
         [p3, sections]),
        ("rope_ sections not summing", fails(ValueError, lambda: sinpe.rope_(x32, positions=p3,
                                                                           sections=bad_sections)),
         [x32, p3, bad_sections]),
        ("rope_ sections without positions", fails(ValueError, lambda: sinpe.rope_(x32, sections=sections)),
         [x32, sections]),
        ("rope_ sections wrong leading axis", fails(ValueError, lambda: sinpe.rope_(
            x32, positions=positions, sections=sections)), [x32, positions, sections]),
        ("rope_ sections of floats", fails(TypeError, lambda: sinpe.rope_(x32, positions=p3,
                                                                        sections=float_sections)),
         [x32, p3, float_sections]),
    ]
    if hasattr(sinpe, "set_num_threads"):
        threads = sinpe.get_num_threads()
        points += [
            ("set/get_num_threads", lambda: sinpe.set_num_threads(sinpe.get_num_threads()), []),
            ("set_num_threads(0)", fails(ValueError, lambda: sinpe.set_num_threads(0)), []),
            ("set_num_threads('x')", fails(TypeError, lambda: sinpe.set_num_threads("x")), []),
        ]
        assert threads >= 1
    return points


POINTS = entry_points()


@pytest.mark.parametrize("name, call, watched", POINTS, ids=[p[0] for p in POINTS])
def test_reference_counts_stay_flat(name, call, watched):
    """The objects that exist before the test are frozen (gc.freeze), as in
    test_traced_memory_stays_flat: the collections then look only at what the calls
    made (a cycle among those that holds a watched object is still found), in
    microseconds instead of a tenth of a second each beside torch's objects."""
    call()
    gc.freeze()
    try:
        gc.collect()
        before = [sys.getrefcount(o) for o in watched]
        for _ in range(CALLS):
            result = call()
            if result is not None:
                # a new array is owned by `result` and the getrefcount argument
                # only; out= / add_ return their argument, owned once more
                assert sys.getrefcount(result) <= 2 or any(result is o for o in watched)
            del result
        gc.collect()
        after = [sys.getrefcount(o) for o in watched]
    finally:
        gc.unfreeze()
    assert after == before, f"{name}: reference counts {before} -> {after} after {CALLS} calls"


def test_new_arrays_have_exactly_one_owner():
    for dtype in (np.float16, np.float32, np.float64):
        out = sinpe.encode(5, 6, dtype=dtype)
        assert sys.getrefcount(out) == 2  # `out` and the argument of getrefcount
        assert out.base is None and out.flags.owndata


@pytest.mark.parametrize("name, call, watched", POINTS, ids=[p[0] for p in POINTS])
def test_traced_memory_stays_flat(name, call, watched):
    """Python objects and NumPy data: a leak of one 32-byte object per call
    is 96 KB over a window of calls, three times the allowance.  Two windows,
    and the smaller growth counts: a leak grows both, while a cache or free
    list that fills once (seen under ASan: ~250 small objects, however many
    calls) grows at most one.  The objects that exist before the test are frozen
    (gc.freeze): the collections below then look at what the calls made alone, and
    take microseconds instead of a tenth of a second each beside torch's and
    transformers' objects."""
    gc.freeze()
    tracemalloc.start()
    try:
        for _ in range(200):  # caches, free lists and lazy imports settle
            call()
        growth = []
        for _window in range(2):
            gc.collect()
            start, _ = tracemalloc.get_traced_memory()
            for _ in range(CALLS):
                call()
            gc.collect()
            growth.append(tracemalloc.get_traced_memory()[0] - start)
    finally:
        tracemalloc.stop()
        gc.unfreeze()
    assert min(growth) < 32 * 1024, f"{name}: traced memory grew by {growth} bytes per {CALLS} calls"


@pytest.mark.skipif(UNDER_ASAN, reason="ASan's quarantine keeps freed memory resident by design")
def test_resident_memory_stays_flat():
    """The kernel's scratch for d=1024 is a few hundred KB per call; leaked,
    it would be hundreds of MB over this loop of 1000.  The allowance (32 MiB) is
    far above allocator noise and far below any per-call leak of scratch."""
    for _, call, _ in POINTS:
        for _ in range(100):
            call()
    wide = np.zeros((2, 40, 1024), np.float32)
    gc.collect()
    start = rss_bytes()
    for _ in range(CALLS // 3):
        sinpe.encode(40, 1024)
        sinpe.add_(wide)
        for _, call, _ in POINTS:
            call()
    gc.collect()
    grown = rss_bytes() - start
    assert grown < 32 * 2**20, f"resident memory grew by {grown / 2**20:.1f} MiB"
