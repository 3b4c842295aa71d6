"""The scripts in examples/ run headless and produce what they promise, so they cannot rot."""

from __future__ import annotations

import subprocess
from pathlib import Path

import numpy as np
from conftest import require, run_python

require("matplotlib")
import matplotlib.image  # noqa: E402

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_script(name: str, *args: str, cwd: Path) -> subprocess.CompletedProcess:
    return run_python([str(EXAMPLES / name), *args], cwd)


def test_tutorial_figures_writes_every_figure_as_a_non_trivial_png(tmp_path):
    outdir = tmp_path / "figures"
    proc = run_script("tutorial_figures.py", str(outdir), "--dpi", "50", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    expected = {
        "columns_6-9_of_60x32.png",
        "heatmap_128x8.png",
        "heatmap_10x4_n100.png",
        "heatmap_1000x512.png",
        "similarity_128x64.png",
    }
    assert {p.name for p in outdir.iterdir()} == expected
    assert len(proc.stdout.splitlines()) == len(expected)
    for name in expected:
        pixels = matplotlib.image.imread(outdir / name)
        rgb = (pixels[..., :3] * 255).round().astype(np.uint8).reshape(-1, 3)
        colours = len(np.unique(rgb, axis=0))
        assert colours > 20, (name, colours)  # a plot, not a blank or one-colour image


def test_typed_usage_example_runs(tmp_path):
    proc = run_script("typed_usage.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[1] == "float32 float64 float16"
