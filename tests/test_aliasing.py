"""Inputs that share memory with outputs, or change while a kernel runs.

The kernels run without the GIL and write outputs in place, so an input array
(positions, padding, freq) that aliases an output, or that another thread
writes meanwhile, must not be read by them: sinpe takes private snapshots
first.  Every call here must equal the same call on private copies, bit for
bit, and must never crash.
"""
from __future__ import annotations

import threading

import numpy as np

import sinpe


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


def test_padding_and_freq_inside_the_output_equal_private_copies():
    x = np.ones((4, 16, 8), np.float64)
    pad_bytes = x[0].reshape(-1).view(np.bool_)[: 4 * 16].reshape(4, 16)
    pad_bytes[:] = False
    pad_bytes[:, :3] = True
    padding = pad_bytes.copy()
    expected = x.copy()
    sinpe.add_(expected, positions=np.tile(np.arange(16), (4, 1)), padding=padding)
    sinpe.add_(x, positions=np.tile(np.arange(16), (4, 1)), padding=pad_bytes)
    np.testing.assert_array_equal(x, expected)

    out = np.zeros((64, 8))
    freq = out[0, :4]
    freq[:] = [1.0, 0.1, 0.01, 0.001]
    expected = sinpe.encode(64, 8, freq=freq.copy(), dtype=np.float64)
    sinpe.encode(64, 8, freq=freq, out=out)
    np.testing.assert_array_equal(out, expected)


def test_positions_written_by_another_thread_during_a_large_add():
    """Another thread scribbles out-of-range positions into the array while
    add_ runs without the GIL.  The snapshot holds, per element, either the
    good position or the bad one: a bad one is refused (ValueError, nothing
    written), otherwise the result is the call on the good positions."""
    positions = np.tile(np.arange(512), (64, 1))
    snapshot = positions.copy()
    x = np.zeros((64, 512, 256), np.float32)
    expected = np.zeros_like(x)
    sinpe.add_(expected, positions=snapshot)
    stop = threading.Event()

    def scribble():
        while not stop.is_set():
            positions[:] = 2**40
            positions[:] = snapshot

    writer = threading.Thread(target=scribble)
    writer.start()
    try:
        for _ in range(20):
            x[:] = 0
            try:
                sinpe.add_(x, positions=positions)
            except ValueError as exc:
                assert "positions" in str(exc)
                assert not x.any()
            else:
                np.testing.assert_array_equal(x, expected)
    finally:
        stop.set()
        writer.join()
