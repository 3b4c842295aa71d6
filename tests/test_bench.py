"""The bench's report: its first line says which CPU and SIMD level the figures are from."""
from __future__ import annotations

import sinpe
import sinpe.bench as bench


def test_first_line_names_the_cpu_and_the_simd_level(monkeypatch, capsys):
    monkeypatch.setattr(bench, "_variant_cases", lambda quick: [])  # the header alone
    assert bench.main(["--variants", "--quick"]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith(f"CPU: {bench._cpu_model()},")
    assert f"at {sinpe._core._simd_level}," in first


def test_simd_level_is_one_the_clones_know():
    assert sinpe._core._simd_level in {"AVX-512", "AVX2", "x86-64 baseline",
                                       "portable C (no SIMD clones)"}
