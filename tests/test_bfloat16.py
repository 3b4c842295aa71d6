"""bfloat16, a native element type: the double value rounded once (to nearest,
ties to even), in NumPy arrays of ``ml_dtypes.bfloat16`` wherever float16
works, and in torch bfloat16 tensors written in place (no float64 copies).

The reference rounding here is independent of sinpe's: the float64 value is
rounded to float32 *to odd* (truncated, the last bit set when inexact), then
to bfloat16 to nearest-even; float32 has more than two bits beyond
bfloat16's at every magnitude, so the two steps round exactly once.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import sinpe
from conftest import assert_bits_equal, by_path, numpy_add, require

ml_dtypes = require("ml_dtypes")  # NumPy's bfloat16: every test here needs it

BF16 = np.dtype(ml_dtypes.bfloat16)


def bfloat16_rounded_once(values) -> np.ndarray:
    """float64 values rounded once to bfloat16, as an ml_dtypes array."""
    v = np.asarray(values, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        nearest = v.astype(np.float32)
    exact = nearest.astype(np.float64) == v
    toward_zero = np.where(np.abs(nearest.astype(np.float64)) > np.abs(v),
                           np.nextafter(nearest, np.float32(0)), nearest)
    bits = toward_zero.view(np.uint32).astype(np.uint64)
    bits |= (~exact & np.isfinite(v)).astype(np.uint64)  # round to odd
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    rounded[np.isnan(v)] = 0x7FC0
    return rounded.view(BF16)


def test_the_reference_rounding_rounds_ties_to_even_and_beats_double_rounding():
    # 1 + 2**-8 is a tie between 1 and 1 + 2**-7: even is 1
    # 1 + 2**-8 + 2**-30 is above the tie, but rounds to the tie in float32 first
    values = [1 + 2.0**-8, 1 + 2.0**-8 + 2.0**-30, 1 + 3 * 2.0**-8]
    got = bfloat16_rounded_once(values).astype(np.float64)
    assert got.tolist() == [1.0, 1 + 2.0**-7, 1 + 2 * 2.0**-7]
    assert np.float64(np.float32(values[1]).astype(BF16)) == 1.0  # what rounding twice gives


@pytest.mark.parametrize("make", [
    lambda dt: sinpe.encode(300, 70, 500.0, offset=-37, dtype=dt),
    lambda dt: sinpe.encode(40, 33, layout="concatenated", schedule="fairseq", dtype=dt),
    lambda dt: sinpe.encode_at(np.array([[3, -9, 2.5], [2**24, 0, 11]]), 16, dtype=dt),
    lambda dt: sinpe.rope(50, 64, 500000.0, dtype=dt)[0],
    lambda dt: sinpe.rope(None, 64, positions=np.arange(0, 90, 3), layout="interleaved",
                          dtype=dt)[1],
    lambda dt: sinpe.encode_grid((6, 7), 16, layout="sines_first", dtype=dt),
], ids=["encode", "fairseq", "encode_at", "rope-cos", "rope-sin", "grid"])
def test_every_function_writes_bfloat16_as_the_float64_table_rounded_once(make):
    got = make(BF16)
    assert got.dtype == BF16
    assert_bits_equal(got, bfloat16_rounded_once(make(np.float64)))


def test_bfloat16_out_with_any_strides_and_byte_order():
    want = bfloat16_rounded_once(sinpe.encode(64, 24, dtype=np.float64))
    base = np.zeros((64, 60), BF16)
    view = base[::-1, 3:51:2][::-1]
    assert sinpe.encode(64, 24, out=view) is view
    assert_bits_equal(view, want)
    swapped = np.zeros((64, 24), BF16.newbyteorder("S"))
    sinpe.encode(64, 24, out=swapped)
    assert np.array_equal(swapped.view(np.uint16).byteswap(), want.view(np.uint16))


@pytest.mark.parametrize("scale", [1.0, 8.0, 0.1])
def test_add_bfloat16_is_numpy_ml_dtypes_arithmetic(scale):
    x = (np.random.default_rng(1).standard_normal((3, 100, 40)) * 2).astype(BF16)
    want = numpy_add(x, sinpe.encode(100, 40, dtype=BF16)[None], scale)
    sinpe.add_(x, scale=scale)
    assert_bits_equal(x, want)


def test_bfloat16_arrays_are_checked_like_the_others():
    with pytest.raises(ValueError, match="read-only"):
        x = np.zeros((2, 3, 4), BF16)
        x.flags.writeable = False
        sinpe.add_(x)
    shared = np.lib.stride_tricks.as_strided(np.zeros(40, BF16), (5, 8), (4, 2))
    with pytest.raises(ValueError, match="share memory"):
        sinpe.encode(5, 8, out=shared)


def test_sinpe_works_without_ml_dtypes(tmp_path):
    code = textwrap.dedent("""
        import sys
        sys.modules["ml_dtypes"] = None  # import ml_dtypes now fails, as when it is absent
        import numpy as np, sinpe
        x = np.ones((2, 5, 8), np.float32)
        sinpe.add_(x)
        assert np.array_equal(x[0], 1 + sinpe.encode(5, 8))
        try:
            sinpe.encode(3, 4, dtype=np.int16)
        except TypeError as exc:
            print("refused:", exc)
    """)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                            text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "refused: dtype=dtype('int16') is not supported" in result.stdout


# ---------------------------------------------------------------------------
# torch bfloat16: in place, peak memory, Ctrl-C

MEMORY_CHILD = textwrap.dedent(r"""
    import json, resource, sys
    import torch, sinpe.torch
    def peak():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    what = sys.argv[1]
    if what == "encode":
        sinpe.torch.encode(64, 64, dtype=torch.bfloat16)  # pools and caches settle
        before = peak()
        table = sinpe.torch.encode(65536, 1024, dtype=torch.bfloat16)
        growth, output = peak() - before, table.numel() * table.element_size()
    else:
        x = torch.ones(64, 1024, 1024, dtype=torch.bfloat16)  # 128 MiB
        x.add_(0)  # touched: resident before measuring
        before = peak()
        sinpe.torch.add_(x, scale=2.0)
        growth, output = peak() - before, 0
    print(json.dumps({"growth": growth, "output": output}))
""")


@pytest.mark.parametrize("what", ["encode", "add_"])
@pytest.mark.slow
def test_torch_bfloat16_peak_memory_is_the_output_plus_a_few_megabytes(torch, what, tmp_path):
    result = subprocess.run([sys.executable, "-c", MEMORY_CHILD, what], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    # a float64 copy of either would be 512 MiB; tiles and scratch are a few MB
    assert report["growth"] <= report["output"] + (8 << 20), report


CTRL_C_CHILD = textwrap.dedent(r"""
    import json, os, signal, sys, threading, time
    import torch, sinpe.torch
    # Python's own Ctrl-C handler, as in a terminal: a shell that started this run in the
    # background (a script's `&`) leaves SIGINT ignored, and Python keeps an ignored signal
    signal.signal(signal.SIGINT, signal.default_int_handler)
    x = torch.ones(64, 512, 1024, dtype=torch.bfloat16)
    want = x * 2.0 + sinpe.torch.encode(512, 1024, dtype=torch.bfloat16)
    go = [False]
    def fire():
        # The GIL comes back to this thread only when the main thread gives it
        # up: inside the call, maybe in a torch op before the kernel; a few ms
        # later the main thread is in the kernel, which runs far longer.
        while not go[0]:
            time.sleep(0)
        time.sleep(0.005)
        os.kill(os.getpid(), signal.SIGINT)
    sys.setswitchinterval(1000.0)
    helper = threading.Thread(target=fire, daemon=True)
    helper.start()
    outcome = "completed"
    try:
        go[0] = True
        sinpe.torch.add_(x, scale=2.0)
        time.sleep(0.5)  # the interrupt, if it came during the add, is raised by now
    except KeyboardInterrupt:
        outcome = "KeyboardInterrupt"
    helper.join()
    batches = sum(bool(torch.equal(x[b], want[b])) for b in range(64))
    print(json.dumps({"outcome": outcome, "batches_added": batches}))
""")


@pytest.mark.slow
def test_ctrl_c_during_a_torch_bfloat16_add_leaves_it_all_added(torch, tmp_path):
    """An add is all or nothing: Ctrl-C is raised after it, never halfway.  (On the
    device path torch's two in-place ops hold the interrupt until both are done: it
    comes before them, none added, or after, all added.)"""
    result = subprocess.run([sys.executable, "-c", CTRL_C_CHILD], cwd=tmp_path,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["outcome"] == "KeyboardInterrupt"
    assert report["batches_added"] in by_path(kernel=(64,), device=(0, 64))
