"""Inputs that share memory with outputs, or change while a kernel runs.

The kernels run without the GIL and write outputs in place, so an input array
(positions, padding, freq) that aliases an output, or that another thread
writes meanwhile, must not be read by them: sinpe takes private snapshots
first.  Every call here must equal the same call on private copies, bit for
bit, or raise a documented exception with nothing written, and never crash.
The two calls with two outputs are defined as follows: rope's ``cos`` and
``sin`` outputs whose memory overlaps are refused (``ValueError``); no call
takes both ``out=`` and ``embeddings``.
"""
from __future__ import annotations

import os
import threading

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import sinpe
from conftest import assert_bits_equal

DOCUMENTED = (TypeError, ValueError, OverflowError, MemoryError)
_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
PROPERTY = settings(max_examples=300, derandomize=_CI, database=None, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


# ---------------------------------------------------------------------------
# The reported cases

def test_add_positions_inside_the_embeddings_equal_private_copies():
    # the add overwrites the positions' bytes: read after, they would be
    # garbage positions far out of range (a segmentation fault before)
    x = np.zeros((8, 64, 64))
    p = x.reshape(-1)[:512].view(np.int64).reshape(8, 64)
    p[:] = np.arange(64) % 8
    expected = np.zeros((8, 64, 64))
    expected.reshape(-1)[:512].view(np.int64)[:] = p.reshape(-1)
    sinpe.add_(expected, positions=p.copy())
    sinpe.add_(x, positions=p)
    np.testing.assert_array_equal(x.view(np.uint64), expected.view(np.uint64))


def test_encode_at_positions_in_a_row_of_out_equal_private_copies():
    o = np.zeros((64, 64))
    p = o[0]
    p[:] = np.arange(64.0)
    expected = sinpe.encode_at(p.copy(), 64, dtype=np.float64)
    sinpe.encode_at(p, 64, out=o)
    np.testing.assert_array_equal(o, expected)


def test_rope_positions_inside_the_cos_cache_equal_private_copies():
    cos = np.zeros((32, 16))
    sin = np.zeros((32, 16))
    p = cos[:2].reshape(-1)  # 32 float64 positions in the first two rows
    p[:] = np.arange(32.0) * 3
    expected = sinpe.rope(None, 16, positions=p.copy(), dtype=np.float64)
    sinpe.rope(None, 16, positions=p, out=(cos, sin))
    np.testing.assert_array_equal(cos, expected[0])
    np.testing.assert_array_equal(sin, expected[1])


def test_rope_outputs_that_overlap_are_refused_and_untouched():
    buffer = np.zeros(200)
    cos, sin = buffer[:160].reshape(20, 8), buffer[40:].reshape(20, 8)
    with pytest.raises(ValueError, match=r"out\[0\] and out\[1\] share memory"):
        sinpe.rope(20, 8, out=(cos, sin))
    assert not buffer.any()


# ---------------------------------------------------------------------------
# Random aliasing between every pair of array arguments

BUFFER_BYTES = 1 << 12  # small, so that most arguments overlap another


def carve(draw, buffer: np.ndarray, shape: tuple[int, ...], dtype) -> np.ndarray:
    """A C-contiguous view of `shape` and `dtype` at an aligned random place in buffer."""
    dtype = np.dtype(dtype)
    size = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    start = draw(st.integers(0, (BUFFER_BYTES - size) // dtype.itemsize)) * dtype.itemsize
    return np.ndarray(shape, dtype, buffer=buffer, offset=start)


@st.composite
def aliased_calls(draw):
    """(call, arrays): a sinpe call whose array arguments (inputs and outputs)
    are views into one shared byte buffer, at random places (overlapping one
    another or not), holding what was written last."""
    buffer = np.zeros(BUFFER_BYTES, np.uint8)
    kind = draw(st.sampled_from(["add_", "encode_at", "rope", "encode"]))
    d = draw(st.sampled_from([4, 6, 8]))
    rows = draw(st.integers(1, 12))
    dtype = draw(st.sampled_from([np.float32, np.float64, np.float16]))
    arrays: dict[str, np.ndarray] = {}
    names = []
    if kind == "add_":
        names.append(("embeddings", (2, rows, d), dtype))
    elif kind == "rope":
        names += [("cos", (rows, d), dtype), ("sin", (rows, d), dtype)]
    else:
        names.append(("out", (rows, d), dtype))
    if kind != "encode":
        positions_dtype = draw(st.sampled_from([np.int64, np.float64, np.int32]))
        names.append(("positions", (2, rows) if kind == "add_" else (rows,), positions_dtype))
    if kind in ("add_", "encode_at") and draw(st.booleans()):
        names.append(("padding", (2, rows) if kind == "add_" else (rows,), np.bool_))
    if kind != "rope" and draw(st.booleans()):
        names.append(("freq", (d // 2,), np.float64))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    # written in a random order: later arrays overwrite what they overlap
    for name, shape, dt in draw(st.permutations(names)):
        view = carve(draw, buffer, shape, dt)
        if name == "positions":
            view[...] = rng.integers(-50, 50, shape)
        elif name == "padding":
            view[...] = rng.random(shape) < 0.3
        elif name == "freq":
            view[...] = 10.0 ** -rng.uniform(0, 4, shape)
        else:
            view[...] = rng.standard_normal(shape)
        arrays[name] = view
    scale = draw(st.sampled_from([1.0, 2.5]))
    layout = draw(st.sampled_from(["interleaved", "concatenated"]))

    def call(a: dict[str, np.ndarray]):
        extra = {k: a[k] for k in ("padding", "freq") if k in a}
        if kind == "add_":
            return sinpe.add_(a["embeddings"], positions=a["positions"], scale=scale,
                              layout=layout, **extra)
        if kind == "encode_at":
            return sinpe.encode_at(a["positions"], d, out=a["out"], layout=layout, **extra)
        if kind == "rope":
            return sinpe.rope(None, d, positions=a["positions"], out=(a["cos"], a["sin"]),
                              layout=layout)
        return sinpe.encode(rows, d, out=a["out"], layout=layout, **extra)

    return kind, call, arrays, buffer


@PROPERTY
@given(case=aliased_calls())
def test_aliased_arguments_equal_private_copies_or_raise_with_nothing_written(case):
    kind, call, arrays, buffer = case
    private = {name: np.array(view, copy=True) for name, view in arrays.items()}
    try:
        call(private)
        expected_error = None
    except DOCUMENTED as exc:
        expected_error = type(exc)
    before = buffer.copy()
    outputs = [n for n in ("embeddings", "out", "cos", "sin") if n in arrays]
    if kind == "rope" and np.shares_memory(arrays["cos"], arrays["sin"]):
        expected_error = ValueError  # two outputs that overlap are refused
    if expected_error is not None:
        with pytest.raises(expected_error):
            call(arrays)
        assert np.array_equal(buffer, before), "a refused call wrote to memory"
        return
    call(arrays)
    for name in outputs:
        assert_bits_equal(arrays[name], private[name], name)


# ---------------------------------------------------------------------------
# Another thread writes the inputs while a large call runs without the GIL

def scribbling(array: np.ndarray, good: np.ndarray, bad) -> tuple[threading.Thread, threading.Event]:
    stop = threading.Event()

    def scribble():
        while not stop.is_set():
            array[...] = bad
            array[...] = good

    thread = threading.Thread(target=scribble)
    thread.start()
    return thread, stop


def test_positions_written_by_another_thread_during_a_large_add():
    """The snapshot holds, per element, either the good position or the bad
    one: a bad one is refused (ValueError, nothing written), otherwise the
    result is the call on the good positions."""
    positions = np.tile(np.arange(512), (64, 1))
    good = positions.copy()
    expected = sinpe.add_(np.zeros((64, 512, 256), np.float32), positions=good)
    x = np.zeros_like(expected)
    thread, stop = scribbling(positions, good, 2**40)
    try:
        for _ in range(20):
            x[:] = 0
            try:
                sinpe.add_(x, positions=positions)
            except ValueError as exc:
                assert "positions" in str(exc) and not x.any()
            else:
                assert_bits_equal(x, expected)
    finally:
        stop.set()
        thread.join()


def test_freq_written_by_another_thread_during_a_large_encode():
    freq = 10.0 ** -np.linspace(0, 4, 256)
    good = freq.copy()
    expected = sinpe.encode(8192, 512, freq=good)
    thread, stop = scribbling(freq, good, np.nan)
    try:
        for _ in range(10):
            try:
                got = sinpe.encode(8192, 512, freq=freq)
            except ValueError as exc:
                assert "freq" in str(exc)
            else:
                assert_bits_equal(got, expected)
    finally:
        stop.set()
        thread.join()


def test_padding_written_by_another_thread_during_a_large_add():
    """Each row's flag is either value: every row is either added or padded."""
    padding = np.zeros((64, 512), bool)
    positions = np.tile(np.arange(512), (64, 1))
    x0 = np.ones((64, 512, 128), np.float32)
    added = sinpe.add_(x0.copy(), positions=positions, scale=3.0)
    padded = x0 * np.float32(3.0)
    thread, stop = scribbling(padding, False, True)
    try:
        for _ in range(10):
            x = x0.copy()
            sinpe.add_(x, positions=positions, padding=padding, scale=3.0)
            rows_added = (x == added).all(-1)
            rows_padded = (x == padded).all(-1)
            assert (rows_added | rows_padded).all()
    finally:
        stop.set()
        thread.join()
