"""Threads: concurrent calls give the serial results bit for bit, the GIL is
released while the kernel runs, and arguments that other code changes during
a call (another thread, or an argument's own __index__) never crash it.

The GIL test counts, instead of timing: the switch interval is set so high
that the interpreter never takes the GIL away from the main thread by force.
A second thread can then run Python code only when the main thread gives
the GIL up by itself, which during a sinpe call means the call released it.
So the counter moves during the calls if and only if the GIL is released;
no threshold, no dependence on the machine's speed or load.
"""
from __future__ import annotations

import gc
import sys
import threading
import time
import warnings

import numpy as np
import pytest

import sinpe

THREADS = 8
ROUNDS = 6

# A free-threaded CPython (3.13t and later) may run without a GIL at all.
GIL_ENABLED = getattr(sys, "_is_gil_enabled", lambda: True)()


def jobs():
    """Independent calls of every kind: (name, function of a fresh array or None)."""
    return [
        ("encode f32", lambda: sinpe.encode(1500, 128)),
        ("encode f64 offset", lambda: sinpe.encode(700, 96, 500.0, offset=-12345, dtype=np.float64)),
        ("encode f16 odd d", lambda: sinpe.encode(2000, 33, dtype=np.float16)),
        ("encode out transposed", lambda: sinpe.encode(900, 64, out=np.empty((64, 900), ">f4").T)),
        ("add_ batch-first", lambda: sinpe.add_(np.ones((4, 500, 64), np.float32), scale=8.0)),
        ("add_ seq-first f64", lambda: sinpe.add_(np.ones((600, 3, 50)), offset=77, axis=0)),
        ("add_ f16 swapped", lambda: sinpe.add_(np.ones((2, 800, 40), np.dtype("f2").newbyteorder()))),
        ("rope_ heads-first", lambda: sinpe.rope_(np.ones((2, 8, 400, 64), np.float32), offset=9)),
        ("rope_ axis=1 exact", lambda: sinpe.rope_(np.ones((2, 400, 8, 64), np.float32), axis=1,
                                                    exact=True)),
        ("rope_ positions", lambda: sinpe.rope_(np.ones((2, 8, 400, 64)),
                                                positions=np.arange(400)[::-1].copy())),
        ("rope_ sections", lambda: sinpe.rope_(
            np.ones((2, 8, 400, 64), np.float32),
            positions=np.stack([np.arange(400), np.arange(400) // 20, np.arange(400) % 20]),
            sections=(12, 10, 10), sections_layout="interleaved")),
    ]


def run_together(work, count=THREADS):
    """work(i) in `count` threads released at once; re-raises the first error."""
    barrier = threading.Barrier(count)
    errors = []

    def main(i):
        try:
            barrier.wait()
            work(i)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=main, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
        assert not t.is_alive(), "a thread is stuck"
    if errors:
        raise errors[0]


def same_bits(a, b):
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def test_concurrent_calls_on_separate_arrays_match_serial():
    serial = {name: job() for name, job in jobs()}
    results = [[] for _ in range(THREADS)]

    def work(i):
        order = jobs()[i % len(serial):] + jobs()[: i % len(serial)]  # each in its own order
        for _ in range(ROUNDS):
            for name, job in order:
                results[i].append((name, job()))

    run_together(work)
    for per_thread in results:
        assert len(per_thread) == ROUNDS * len(serial)
        for name, got in per_thread:
            assert same_bits(got, serial[name]), f"{name} differs from the serial run"


def test_concurrent_calls_on_one_shared_array_match_serial():
    """Many threads encode the same table into one out= array, and add_ into
    disjoint slices of one shared batch: every element ends as in a serial run."""
    expected_table = sinpe.encode(3000, 64, 100.0, offset=5)
    shared_out = np.full((3000, 64), np.nan, np.float32)
    batch = np.ones((THREADS, 800, 48), np.float64)
    expected_batch = batch.copy()
    for i in range(THREADS):
        sinpe.add_(expected_batch[i : i + 1], offset=i * 100, scale=0.5)

    def work(i):
        for _ in range(ROUNDS):
            sinpe.encode(3000, 64, 100.0, offset=5, out=shared_out)
        sinpe.add_(batch[i : i + 1], offset=i * 100, scale=0.5)

    run_together(work)
    assert same_bits(shared_out, expected_table)
    assert same_bits(batch, expected_batch)


@pytest.mark.skipif(not hasattr(sinpe, "set_num_threads"), reason="sinpe.set_num_threads not present")
def test_changing_the_thread_count_during_calls_changes_no_bits():
    serial = {name: job() for name, job in jobs()}
    before = sinpe.get_num_threads()
    stop = threading.Event()

    def churn():
        k = 0
        while not stop.is_set():
            sinpe.set_num_threads(1 + k % 4)
            k += 1
            time.sleep(0.0005)

    changer = threading.Thread(target=churn)
    changer.start()
    try:
        mismatches = []

        def work(i):
            for _ in range(ROUNDS):
                for name, job in jobs():
                    if not same_bits(job(), serial[name]):
                        mismatches.append(name)

        run_together(work, count=4)
    finally:
        stop.set()
        changer.join()
        sinpe.set_num_threads(before)
    assert not mismatches, f"results changed with the thread count: {sorted(set(mismatches))}"


def big_calls():
    """Calls that each run the kernel for a while, with bounded memory."""
    out = np.empty((2048, 1024), np.float32)
    x = np.zeros((4, 512, 1024), np.float32)
    return {
        "encode": lambda: sinpe.encode(2048, 1024),
        "encode out=": lambda: sinpe.encode(2048, 1024, out=out),
        "add_": lambda: sinpe.add_(x, scale=0.5),
        "rope_": lambda: sinpe.rope_(x, offset=3),
    }


@pytest.mark.skipif(not GIL_ENABLED, reason="no GIL in this free-threaded interpreter")
@pytest.mark.parametrize("name", ["encode", "encode out=", "add_", "rope_"])
def test_gil_is_released_while_the_kernel_runs(name):
    call = big_calls()[name]
    call()  # first-call setup (thread pool, caches) outside the count
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0)  # give the GIL back at once: the main thread waits only for us

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)  # never taken from the main thread by force
    counter = threading.Thread(target=count)
    try:
        counter.start()
        during = 0
        deadline = time.perf_counter() + 0.5
        calls = 0
        while time.perf_counter() < deadline or calls < 3:
            before = ticks[0]  # the main thread holds the GIL from here ...
            call()
            during += ticks[0] - before  # ... to here, except inside call()
            calls += 1
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        counter.join()
    assert during > 0, f"no other thread ran during {calls} calls of {name}: the GIL was held"


@pytest.mark.skipif(not GIL_ENABLED, reason="no GIL in this free-threaded interpreter")
def test_gil_test_detects_a_call_that_holds_the_gil():
    """The counting method itself: a long C call that keeps the GIL
    (sorting a big array does) lets the counter make no progress at all."""
    data = np.random.default_rng(0).random(2_000_000)
    ticks = [0]
    stop = threading.Event()

    def count():
        while not stop.is_set():
            ticks[0] += 1
            time.sleep(0)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1000.0)
    counter = threading.Thread(target=count)
    try:
        counter.start()
        before = ticks[0]
        for _ in range(5):
            sum(data[:100_000].tolist())  # pure Python work, GIL held throughout
        during = ticks[0] - before
    finally:
        stop.set()
        sys.setswitchinterval(interval)
        counter.join()
    assert during == 0


# -- arguments that change during a call ------------------------------------------------
# encode_grid reads its shape=, split= and order= lists item by item, calling each item's
# __index__ (Python code) in between; another thread may change the lists meanwhile.  A
# call must read one consistent copy: it equals a serial call on some state the lists
# went through, or raises a clean TypeError/ValueError (entries that do not fit together),
# and never crashes.

GRID_D = 12
GRID_SHAPES = [[3, 5], [2, 4, 3], [7]]
GRID_SPLITS = [[6, 6], [4, 4, 4], [8, 4], [12]]
GRID_ORDERS = [[1, 0], [0, 1, 2], [2, 0, 1], [0]]


def grid_results():
    """Every outcome a call may have: {(shape, split, order): table} for the states that fit."""
    results = {}
    for shape in GRID_SHAPES:
        for split in GRID_SPLITS:
            for order in GRID_ORDERS:
                if len(shape) == len(split) == len(order):
                    results[tuple(shape), tuple(split), tuple(order)] = sinpe.encode_grid(
                        tuple(shape), GRID_D, split=tuple(split), order=tuple(order))
    return results


class ClearsItsList:
    """An integer whose __index__ (run while sinpe reads the list it sits in) empties
    that list and frees what the list held."""

    def __init__(self, value, victim):
        self.value, self.victim = value, victim

    def __index__(self):
        self.victim.clear()
        gc.collect()
        return self.value


def test_a_list_emptied_by_its_own_item_is_read_as_it_was():
    want = sinpe.encode_grid((3, 5), GRID_D, split=(8, 4), order=(1, 0))
    shape, split, order = [], [], []
    shape += [ClearsItsList(3, shape), ClearsItsList(5, shape)]
    split += [ClearsItsList(8, split), 4]
    order += [ClearsItsList(1, order), 0]
    got = sinpe.encode_grid(shape, GRID_D, split=split, order=order)
    assert shape == split == order == []
    assert same_bits(got, want)


class Yields:
    """An integer whose __index__ lets other threads run (with a GIL: gives it up)."""

    def __init__(self, value):
        self.value = value

    def __index__(self):
        time.sleep(0)
        return self.value


def test_grid_lists_changed_by_other_threads_give_a_serial_result_or_a_clean_error():
    results = grid_results()
    shape, split, order = list(GRID_SHAPES[0]), list(GRID_SPLITS[0]), list(GRID_ORDERS[0])
    stop = threading.Event()

    def mutate(target, states):
        k = 0
        while not stop.is_set():
            state = states[k % len(states)]
            step = k % 4
            if step == 0:
                target[:] = state
            elif step == 1:
                target.clear()
                target.extend(state)
            elif step == 2:
                target.append(1)  # one entry too many: a clean error, or read before it
                del target[-1]
            else:  # other threads may run while each entry is read
                target[:] = [Yields(x) for x in state]
            k += 1
            if k % 64 == 0:
                time.sleep(0)

    mutators = [threading.Thread(target=mutate, args=a)
                for a in ((shape, GRID_SHAPES), (split, GRID_SPLITS), (order, GRID_ORDERS))]
    outcomes = {"result": 0, "error": 0}
    bad = []

    def call(i):
        # 400 calls, and more while none has read fitting lists yet (on a loaded machine
        # the three mutators may rarely stand at fitting states together), up to a minute
        deadline = time.monotonic() + 60
        done = 0
        while done < 400 or (outcomes["result"] == 0 and time.monotonic() < deadline):
            done += 1
            try:
                got = sinpe.encode_grid(shape, GRID_D, split=split, order=order)
            except (TypeError, ValueError) as exc:  # entries that do not fit together
                outcomes["error"] += 1
                assert "split" in str(exc) or "order" in str(exc) or "shape" in str(exc), exc
                continue
            outcomes["result"] += 1
            if not any(same_bits(got, want) for want in results.values()):
                bad.append(got.shape)

    for m in mutators:
        m.start()
    try:
        run_together(call, count=4)
    finally:
        stop.set()
        for m in mutators:
            m.join()
    assert not bad, f"results that no serial call gives: shapes {bad[:5]}"
    assert outcomes["result"] > 0, outcomes  # some calls did read fitting lists


def test_an_out_array_reshaped_during_the_call_is_written_as_it_was_checked():
    """rope(out=(a, b), dtype=...): converting dtype= for b runs Python code, which here
    sets a.shape (freeing NumPy's copy of a's shape and strides) and makes new arrays that
    NumPy may give that memory.  The call writes a as it was when checked."""
    L, d = 64, 16
    want = sinpe.rope(L, d)
    b = np.zeros((L, d), np.float32)
    a = np.zeros((L, d), np.float32)
    keep = []
    reads = [0]

    class ReshapesA:
        @property
        def dtype(self):
            reads[0] += 1
            if reads[0] == 2:  # after a was checked and its view taken
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore", DeprecationWarning)  # NumPy >= 2.5
                    try:
                        a.shape = (L * d,)
                    except AttributeError:  # a NumPy that no longer lets .shape be set
                        pytest.skip("this NumPy cannot set an array's shape in place")
                big = np.zeros(1 << 22, np.float32)
                keep.extend(np.lib.stride_tricks.as_strided(big, (L, d), (1 << 14, 4))
                            for _ in range(8))
            return np.dtype(np.float32)

    cos, sin = sinpe.rope(L, d, out=(a, b), dtype=ReshapesA())
    assert reads[0] == 2 and a.shape == (L * d,)
    assert same_bits(cos.reshape(L, d), want[0]) and same_bits(sin, want[1])
    assert all(not k.any() for k in keep)
