"""Ctrl-C during a very large encode: KeyboardInterrupt, promptly, nothing
leaked, no half-written table reachable.

Each case runs in a child process (a signal is process-wide, and a failure
must not take the test session with it).  The child makes the SIGINT arrive
while the kernel runs, without timing: its switch interval is huge, so a
helper thread waiting for the GIL gets it only when the main thread gives
it up by itself, i.e. inside the sinpe call; the helper then sends SIGINT to
the process, exactly as a terminal's Ctrl-C does.  How far the kernel got is
measured, not timed: rows still holding NaN in out=, and the peak resident
memory for a new table (a kernel that ran on would have touched all of it).
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from conftest import require_torch

CHILD = textwrap.dedent(r"""
    import gc, json, os, resource, signal, sys, threading, time, tracemalloc
    import numpy as np, sinpe

    # Python's own Ctrl-C handler, as in a terminal: a shell that started this run in the
    # background (a script's `&`) leaves SIGINT ignored, and Python keeps an ignored signal
    signal.signal(signal.SIGINT, signal.default_int_handler)

    mode, L, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    report = {}
    if sys.argv[4:] == ["team"]:  # on torch's OpenMP threads (sinpe/_openmp.py)
        import sinpe.torch
        report["team"] = sinpe._core._sharing_openmp()

    go = [False]

    def interrupt_inside_next_call():
        # the helper sees go[0] only when it next gets the GIL: inside the call
        def fire():
            while not go[0]:
                time.sleep(0)      # hand the GIL back; the main thread never does by force
            os.kill(os.getpid(), signal.SIGINT)
        sys.setswitchinterval(1000.0)
        helper = threading.Thread(target=fire, daemon=True)
        helper.start()
        return helper

    def peak_rss():
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    sinpe.encode(64, 64)  # pool, caches and lazy imports settle first
    if mode == "new":
        tracemalloc.start()
        traced_before = tracemalloc.get_traced_memory()[0]
        peak_before = peak_rss()
        helper = interrupt_inside_next_call()
        start = time.perf_counter()
        try:
            go[0] = True
            table = sinpe.encode(L, d)
            report["outcome"] = "completed"
            del table
        except KeyboardInterrupt:
            report["outcome"] = "KeyboardInterrupt"
        report["seconds"] = time.perf_counter() - start
        helper.join()
        gc.collect()
        report["traced_growth"] = tracemalloc.get_traced_memory()[0] - traced_before
        report["peak_rss_growth"] = peak_rss() - peak_before
    elif mode == "rope":
        # a rotation is all or nothing: it runs to its end, then Python raises
        x = np.random.default_rng(0).standard_normal((L, d), np.float32).reshape(1, 16, -1, d)
        want = sinpe.rope_(x.copy(), offset=3)
        helper = interrupt_inside_next_call()
        try:
            go[0] = True
            sinpe.rope_(x, offset=3)
            report["outcome"] = "completed"
            time.sleep(0)
        except KeyboardInterrupt:
            report["outcome"] = "KeyboardInterrupt"
        helper.join()
        sys.setswitchinterval(0.005)
        report["all_rotated"] = bool(np.array_equal(x, want))
    else:
        out = np.full((L, d), np.nan, np.float32)
        refs = sys.getrefcount(out)
        helper = interrupt_inside_next_call()
        try:
            go[0] = True
            sinpe.encode(L, d, out=out)
            report["outcome"] = "completed"
        except KeyboardInterrupt:
            report["outcome"] = "KeyboardInterrupt"
        helper.join()
        sys.setswitchinterval(0.005)
        report["rows_untouched"] = int(np.isnan(out).all(axis=1).sum())
        report["refcount_change"] = sys.getrefcount(out) - refs
        # The pool must be idle again: a different table into the same
        # array comes out exact (a helper still writing the cancelled call
        # would leave n=10000 rows among these n=500 ones).
        sinpe.encode(L, d, 500.0, out=out)
        report["refill_exact"] = bool(np.array_equal(out, sinpe.encode(L, d, 500.0)))
    # The process is fine afterwards: a normal call, and a second Ctrl-C works too.
    report["after"] = float(sinpe.encode(2, 2)[1, 0])
    print(json.dumps(report))
""")


def run_child(mode, L, d, cwd, *extra):
    # cwd: not the source tree, whose uncompiled sinpe/ would shadow the installed one
    result = subprocess.run([sys.executable, "-c", CHILD, mode, str(L), str(d), *extra],
                            capture_output=True, text=True, timeout=300, cwd=cwd)
    assert result.returncode == 0, f"child failed ({result.returncode}):\n{result.stdout}\n{result.stderr}"
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_ctrl_c_stops_a_huge_encode_and_frees_the_table(tmp_path):
    """A 4 GiB float32 table (2**20 x 1024): interrupted at its start, the
    call raises KeyboardInterrupt, the array is gone (tracemalloc sees NumPy's
    allocations), and the process never held more than a small part of it."""
    L, d = 2**20, 1024
    table_bytes = L * d * 4
    report = run_child("new", L, d, tmp_path)
    assert report["outcome"] == "KeyboardInterrupt", report
    assert report["traced_growth"] < 2**20, f"{report['traced_growth']} bytes still allocated: {report}"
    assert report["peak_rss_growth"] < table_bytes // 4, f"the kernel ran on after Ctrl-C: {report}"
    assert report["after"] == pytest.approx(0.8414709848, abs=1e-7)


def test_ctrl_c_stops_encode_into_out_and_leaves_the_pool_idle(tmp_path):
    """512 MiB out= array of NaN: after Ctrl-C most rows were never written,
    `out` is still owned only by the caller, and the next call is exact."""
    L, d = 2**17, 1024
    report = run_child("out", L, d, tmp_path)
    assert report["outcome"] == "KeyboardInterrupt", report
    assert report["rows_untouched"] > L // 2, f"the kernel ran on after Ctrl-C: {report}"
    assert report["refcount_change"] == 0, report
    assert report["refill_exact"], report
    assert report["after"] == pytest.approx(0.8414709848, abs=1e-7)


def test_ctrl_c_during_rope_lets_it_finish_then_raises(tmp_path):
    """A rotation takes no cancel callback (as add_): all or nothing.  Ctrl-C
    during a 128 MiB rope_ arrives, the rotation completes (every row rotated,
    as a second, uninterrupted call rotates them), and KeyboardInterrupt is
    raised once the call returns."""
    L, d = 2**18, 128
    report = run_child("rope", L, d, tmp_path)
    assert report["outcome"] == "KeyboardInterrupt", report
    assert report["all_rotated"], report
    assert report["after"] == pytest.approx(0.8414709848, abs=1e-7)


@pytest.mark.slow
def test_ctrl_c_on_torchs_threads_stops_encode_into_out_and_leaves_them_idle(tmp_path):
    """The same on torch's OpenMP threads, which sinpe.torch shares where torch
    runs on GNU libgomp: the team stops taking chunks, and the next call is exact."""
    require_torch()
    from sinpe._openmp import torch_openmp_library
    import torch
    if torch_openmp_library(torch) is None:
        pytest.skip("torch runs on no GNU OpenMP runtime here")
    L, d = 2**17, 1024
    report = run_child("out", L, d, tmp_path, "team")
    assert report["team"], report
    assert report["outcome"] == "KeyboardInterrupt", report
    assert report["rows_untouched"] > L // 2, f"the kernel ran on after Ctrl-C: {report}"
    assert report["refcount_change"] == 0, report
    assert report["refill_exact"], report
