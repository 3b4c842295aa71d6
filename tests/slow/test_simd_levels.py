"""The suite's value checks at every other SIMD level the CPU has.

In tests/slow (a CI stage of its own, ``pytest -n 2 -m slow``; the README's command leaves
this folder out): six test files again in a pytest process of their own under each other
level, a minute here.  tests/test_simd.py holds every level's output against the
baseline's bit for bit; this runs the value checks themselves at each level.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sinpe import _core

pytestmark = pytest.mark.slow  # (a stage of its own: -m slow)

TESTS = Path(__file__).resolve().parents[1]
LEVEL, AVAILABLE = _core._simd_levels()


VALUE_CHECKS = ["test_accuracy.py", "test_properties.py", "test_paths.py", "test_out.py",
                "test_bfloat16.py", "test_variants.py", "test_variant_shards.py"]


def same_loops(a: str, b: str) -> bool:
    """avx512_bf16 is avx512's loops with another bfloat16 narrowing."""
    return {a, b} == {"avx512", "avx512_bf16"}


OTHER_LEVELS = [lv for lv in AVAILABLE if lv != LEVEL and not same_loops(lv, LEVEL)]


@pytest.fixture(scope="module")
def value_check_runs(request, tmp_path_factory):
    """The value checks' runs at every other level the session will test, started at
    once: each is a pytest process that mostly waits on one core, so side by side
    they take the time of one.  {level: (process, its output file)}."""
    wanted = [item.callspec.params["level"] for item in request.session.items
              if getattr(item, "originalname", None) == "test_value_checks_pass_at_every_other_level"]
    paths = [str(TESTS / name) for name in VALUE_CHECKS]
    runs = {}
    for level in dict.fromkeys(wanted):
        cwd = tmp_path_factory.mktemp(f"value-checks-{level}")  # not a source tree: the installed sinpe
        output = open(cwd / "output.txt", "w+")  # a file: a pipe nobody reads would fill and stall
        process = subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
             f"--rootdir={TESTS.parent}", *paths],
            cwd=cwd, env={**os.environ, "SINPE_SIMD": level}, stdout=output,
            stderr=subprocess.STDOUT)
        runs[level] = (process, output)
    yield runs
    for process, output in runs.values():
        if process.poll() is None:  # the session stopped early (-x, Ctrl-C)
            process.kill()
        process.wait()
        output.close()


@pytest.mark.parametrize("level", OTHER_LEVELS)
def test_value_checks_pass_at_every_other_level(level, value_check_runs):
    """The suite's value checks again, under SINPE_SIMD=level (the rest of the
    suite runs at the default level).  Of avx512 and avx512_bf16 only the one in
    use: they differ in the bfloat16 narrowing alone, which the fingerprints
    above hold to the baseline's bits (and scripts/convert.sh to float16.h's for
    every float)."""
    process, output = value_check_runs[level]
    returncode = process.wait(timeout=900)  # past it, the fixture's teardown kills the run
    output.seek(0)
    text = output.read()
    assert returncode == 0, text[-6000:]
    assert " passed" in text.strip().splitlines()[-1]
