"""The bench's report: its first line says which CPU and SIMD level the figures are from."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sinpe
import sinpe.bench as bench
import sinpe.bench._long_context as bench_long
import sinpe.bench._machine as machine
import sinpe.bench._main as bench_main
import sinpe.bench._rope as bench_rope
import sinpe.bench._rotary as bench_rotary
import sinpe.bench._sections as bench_sections
from conftest import optional, require

REPO = Path(__file__).resolve().parents[1]


def test_first_line_names_the_cpu_and_the_simd_level(monkeypatch, capsys):
    monkeypatch.setattr(bench_main, "_variant_cases", lambda quick: [])  # the header alone
    assert bench.main(["--variants", "--quick"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"CPU: {machine._cpu_model()},")
    assert f"at {machine._simd_label()}," in first
    assert machine._simd_label() in {"AVX-512 with AVX512_BF16", "AVX-512", "AVX2",
                                   "x86-64 baseline (SSE2)", "NEON"}


def test_first_line_names_torchs_level_where_torch_is_loaded(monkeypatch, capsys, torch):
    """Timed against torch, the line says which level torch's ops run at too."""
    monkeypatch.setattr(bench_main, "_hot_path", lambda quick, torch_module: ([], [], []))
    monkeypatch.setattr(bench_main, "_print_hot_path", lambda *a: None)
    assert bench.main(["--hot-path", "--quick"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    level = torch.backends.cpu.get_cpu_capability()
    assert f"at {machine._simd_label()}, torch's ops at {level}, " in first


def test_rope_section_times_every_case_on_one_and_all_threads(monkeypatch, capsys, torch):
    """--rope: one row per case and thread count (the timings stubbed: quick)."""
    import sinpe.bench._pool as pool

    monkeypatch.setattr(bench_main, "blocks_in_turn",
                        lambda timers, *a, **k: {n: 1e-3 for n in timers})
    monkeypatch.setattr(pool, "alternated", lambda ours, theirs, seconds: {"ours": 2e-3,
                                                                           "theirs": 1e-3})
    monkeypatch.setattr(bench_rotary, "first_call",  # (a new process each: one test below)
                        lambda which, length: {"built": 1e-3, "first": 1e-4, "peak": 2**28})
    monkeypatch.setattr(bench_long, "patch_cost",  # (a new process: one test below)
                        lambda: {"seconds": 0.5, "added_mib": 10.0, "model_mib": 400.0})
    monkeypatch.setattr(bench_long, "far_decoding", lambda: {"steps": 32, "same": 32})
    assert bench.main(["--rope", "--quick"]) == 0
    out = capsys.readouterr().out
    threads = sorted({1, sinpe.get_num_threads()})
    for shape, axis, dtype, _ in bench_rope.ROPE_CASES:
        label = f"rope_ {tuple(shape)} {dtype}" + (" axis=1" if axis == 1 else "")
        assert out.count(label + " ") == 2 * len(threads) if label in ALTERNATED else len(
            threads), (label, out)
    assert "HF/sinpe apply" in out
    for dtype in ("float32", "bfloat16", "float16"):  # the decoding step's table
        assert out.count(f"q (1, 32, 1, 128) {dtype} ") == 1, (dtype, out)
    for label in ("prefill of 512 tokens", "decoding step at position 1024"):
        assert out.count(f"small Llama, {label} ") == len(threads), (label, out)
    if optional("transformers") is not None:  # RotaryEmbedding against HF's module
        for label, _ in bench_rotary.CASES + bench_rotary.VL_CASES:
            for dtype in bench_rotary.DTYPES:
                assert out.count(f"{label} {dtype} ") == len(threads), (label, out)
        for length in bench_rotary.FIRST_CALL_LENGTHS:
            assert out.count(f"\n{length:,} ") == 1, (length, out)
        assert "patch at max_position_embeddings 10,485,760 (heads of 128): time" in out
        assert "0.50 s (target 2 s)" in out
        assert "32/32 tokens as the full forward's" in out
    sections = out.split("multi-axis RoPE")[1]
    for shape, dtype in bench_sections.SECTION_CASES:
        assert sections.count(f"rope_ {tuple(shape)} {dtype} ") == len(threads), (shape, out)


@pytest.mark.slow
def test_compiled_section_times_the_small_llama_on_one_and_all_threads(monkeypatch, capsys,
                                                                       torch):
    """--compiled: one row per case and thread count, HF's compiled forward and the
    patched one (the timings stubbed: nothing is compiled)."""
    monkeypatch.setattr(bench_main, "blocks_in_turn",
                        lambda timers, *a, **k: {n: 1e-3 for n in timers})
    assert bench.main(["--compiled", "--quick"]) == 0
    out = capsys.readouterr().out
    if optional("transformers") is None:
        return
    assert "torch.compile(fullgraph=True) of a small Llama" in out
    threads = sorted({1, sinpe.get_num_threads()})
    for label in ("prefill of 512 tokens", "decoding step at position 1024"):
        assert out.count(f"compiled small Llama, {label} ") == len(threads), (label, out)


@pytest.mark.needs("transformers")
def test_the_first_call_case_reports_its_numbers(torch, monkeypatch, capsys):
    """The first-call rows' case, which the bench runs in a new Python: here in this one
    (a new process would spend ~10 s importing torch and transformers)."""
    for which in ("hf", "sinpe"):
        monkeypatch.setattr(sys, "argv", ["-c", which, "131072"])
        exec(compile(bench_rotary._FIRST_CALL, "<first call>", "exec"), {"__name__": "__main__"})
        case = json.loads(capsys.readouterr().out.splitlines()[-1])
        assert set(case) == {"built", "first", "peak"} and case["first"] > 0, case
        assert case["peak"] is None or case["peak"] > 2**20


@pytest.mark.needs("transformers")
def test_patch_at_ten_million_positions_reports_its_cost(torch, monkeypatch, capsys):
    """The long-context rows' patch case, which the bench runs in a new Python: here in
    this one; patch's checks use small tables, whatever max_position_embeddings says."""
    code = bench_long._PATCH.format(config=json.dumps(bench_long.SCOUT))
    namespace = {"__name__": "__main__"}
    try:
        exec(compile(code, "<patch at 10M>", "exec"), namespace)
    finally:  # the swapped apply global is the process's: put HF's back for later tests
        if "handle" in namespace:
            namespace["handle"].undo()
    case = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert set(case) == {"seconds", "added_mib", "model_mib"} and case["seconds"] > 0
    from transformers.models.llama import modeling_llama
    assert modeling_llama.apply_rotary_pos_emb.__module__ == modeling_llama.__name__


@pytest.mark.needs("transformers")
def test_greedy_decoding_near_ten_million_gives_the_full_forwards_tokens(torch):
    """32 decoding steps with a KV cache near position 10**7, patched: each token is the
    one the full forward over the whole sequence picks at that step."""
    assert bench_long.far_decoding() == {"steps": 32, "same": 32}


# rope_ cases of the --rope section that are also timed in alternation with torch's op
ALTERNATED = {f"rope_ (1, 32, 2048, 128) {dtype}" for dtype in ("float32", "bfloat16", "float16")}


def test_alternation_and_neighbour_rows(capsys):
    """Call by call with torch's op: one row per pair and thread count, each with both
    medians; beside a busy neighbour: one row per case, one thread and all."""
    import sinpe.bench._pool as pool
    torch = require("torch")
    threads = sinpe.get_num_threads()
    pairs = pool.add_pairs(torch, [((2, 16, 32), -2), ((16, 2, 32), 0)])
    results = pool.alternation_cases(True, torch, pairs)
    assert sinpe.get_num_threads() == threads
    counts = [1] if threads == 1 else [1, threads]
    for name, _, _ in pairs:
        rows = [r for r in results if r["case"] == name]
        assert [r["threads"] for r in rows] == counts
        assert all(set(r["times"]) == {"ours", "theirs"} and min(r["times"].values()) > 0
                   for r in rows)
    pool.print_alternation(results, "y.add_(pe)", sys.stdout)
    beside = pool.neighbour_cases(True, lambda timers, *a, **k: {n: 1e-3 for n in timers})
    assert [r["case"] for r in beside] == ([] if threads == 1 else [
        "add_ (8, 2048, 1024)", "add_ (16, 64, 768)", "rope_ (1, 32, 2048, 128)"])
    assert sinpe.get_num_threads() == threads
    pool.print_neighbour(beside, sys.stdout)
    text = capsys.readouterr().out
    assert "add_ batch-first (2, 16, 32) bfloat16" in text and "all/1" in text


def test_floor_script_times_every_loop_and_both_formulas_keep_the_float32_promise(tmp_path):
    """scripts/floor.sh (the floor figures of docs/speed.md) builds and runs, and the two
    formulas it times stay within the measured worst the numerics allow (0.6 of
    2**-24, the measured worst being 0.5 today)."""
    if shutil.which("gcc") is None:
        pytest.skip("scripts/floor.sh needs gcc")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}  # not under ASan
    proc = subprocess.run(["bash", str(REPO / "scripts" / "floor.sh"), "64", "3"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300, check=False, env=env)
    assert proc.returncode == 0, proc.stderr
    builds = proc.stdout.split("== ")[1:]
    assert [b.split(" ", 1)[0] for b in builds] == ["no", "FMA"], proc.stdout
    for build in builds:
        for loop in ("fill", "convert", "product", "recurrence/8", "recurrence/32",
                     "its rows only"):
            assert re.search(rf"^  {re.escape(loop)} +[0-9.]+ ms", build, re.MULTILINE), (loop, build)
        errors = re.search(r"worst float32 error \(units of 2\*\*-24\): (.*)", build).group(1)
        worst = [float(v) for v in re.findall(r"(\d+\.\d+)", errors)]
        assert len(worst) == 3 and all(0.0 < w <= 0.6 for w in worst), errors


def test_hot_path_section_times_every_case_on_one_and_all_threads(monkeypatch, capsys):
    """The hot path section (sinpe/bench/_hot.py's, here with small shapes): every add_ shape
    batch-first and seq-first, float32 and bfloat16 through sinpe.torch, on one
    thread and on all, the decode step, and the compute-bound tables."""
    import sinpe.bench._hot as hot
    torch = require("torch")
    monkeypatch.setattr(hot, "ADD_SHAPES", [((2, 16, 32), -2), ((16, 2, 32), 0)])
    monkeypatch.setattr(hot, "TABLES", [(64, 32)])
    monkeypatch.setattr(hot, "ROPE", (64, 16))
    threads = sinpe.get_num_threads()
    results = hot.hot_path_cases(True, torch, seconds=0.02)
    assert sinpe.get_num_threads() == threads
    hot.print_hot_path(results, sys.stdout)
    text = capsys.readouterr().out
    counts = [1] if threads == 1 else [1, threads]
    for case in ("add_ batch-first (2, 16, 32)", "add_ seq-first (16, 2, 32)"):
        for suffix, contenders in (("", {"sinpe", "sinpe.torch", "torch", "numpy"}),
                                   (" bfloat16", {"sinpe.torch", "torch"})):
            rows = [r for r in results if r["case"] == case + suffix]
            assert [r["threads"] for r in rows] == counts
            assert all(set(r["times"]) == contenders for r in rows)
    decode = [r for r in results if r["case"].startswith("decode step")]
    assert len(decode) == 1 and set(decode[0]["times"]) == {"sinpe", "sinpe.torch", "torch", "numpy"}
    for table in ("encode(64, 32, out=)", "rope(64, 16, out=)"):
        row = [r for r in results if r["case"] == table][0]
        assert set(row["times"]) == {f"{k} threads" for k in counts}
        assert table in text
    assert "sinpe/torch" in text and "all/1" in text
