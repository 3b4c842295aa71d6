"""Figures in Jupyter, for real: notebooks executed in a fresh ipykernel (nbclient).

* examples/tutorial_figures.ipynb redraws the tutorials' figures: every cell that
  draws must leave exactly one image/png output (scikit-learn is in the slow
  extra with Jupyter's packages, so the t-SNE cell draws too).

Both start a kernel: marked slow (CI's slow stage, with the slow extra installed); the
packages are required when a test runs, so that the default run collects this module
without them.
* A notebook written here pins the display rules of sinpe.plot: a figure that
  is a cell's last expression or passed to display() shows as a PNG without
  pyplot; with pyplot imported (the inline backend) it shows once, not twice;
  pyplot holds no figure after a loop; ``ax=`` draws into the user's figure.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow,  # the kernel draws with matplotlib and scikit-learn (the t-SNE)
              pytest.mark.needs("nbformat", "nbclient", "ipykernel", "matplotlib", "scikit-learn")]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "tutorial_figures.ipynb"


@pytest.fixture
def kernel_env(monkeypatch):
    # A fresh kernel as Jupyter starts it: its own backend choice (not the
    # suite's Agg), and "python" in the kernelspec resolving to this interpreter.
    monkeypatch.delenv("MPLBACKEND", raising=False)
    monkeypatch.setenv("PATH", os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def execute(nb, cwd: Path):
    from nbclient import NotebookClient

    NotebookClient(nb, timeout=300, kernel_name="python3",
                   resources={"metadata": {"path": str(cwd)}}).execute()
    return nb


def pngs(cell) -> list[str]:
    return [o.output_type for o in cell.outputs if "image/png" in o.get("data", {})]


def test_tutorial_notebook_shows_every_figure_inline(kernel_env, tmp_path):
    import nbformat

    nb = execute(nbformat.read(EXAMPLE, as_version=4), tmp_path)
    drawing = [c for c in nb.cells
               if c.cell_type == "code" and ("sinpe.plot." in c.source or "TSNE" in c.source)]
    assert len(drawing) == 6  # three heatmaps, the columns, the similarity, the t-SNE
    for cell in drawing:
        assert len(pngs(cell)) == 1, (cell.source, cell.outputs)
        assert not any(o.output_type == "stream" for o in cell.outputs), cell.outputs


def test_display_rules_in_a_fresh_kernel(kernel_env, tmp_path):
    sources = [
        "import sinpe, sinpe.plot\nsinpe.plot.heatmap(sinpe.encode(128, 64))",
        "fig = sinpe.plot.columns(sinpe.encode(60, 32))\ndisplay(fig)",
        "import sys\n'matplotlib.pyplot' in sys.modules",
        "import matplotlib.pyplot as plt\nsinpe.plot.similarity(sinpe.encode(32, 16))",
        "for i in range(30):\n    sinpe.plot.heatmap(sinpe.encode(8, 4))\nplt.get_fignums()",
        "fig, (left, right) = plt.subplots(1, 2)\n"
        "sinpe.plot.heatmap(sinpe.encode(8, 4), ax=left) is left",
    ]
    import nbformat

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    cells = execute(nb, tmp_path).cells
    texts = [[o["data"]["text/plain"] for o in c.outputs if o.output_type == "execute_result"]
             for c in cells]
    assert pngs(cells[0]) == ["execute_result"]  # the last expression, as an image
    assert pngs(cells[1]) == ["display_data"]
    assert texts[2] == ["False"]  # shown without sinpe importing pyplot
    assert pngs(cells[3]) == ["execute_result"]  # once: the inline backend adds no copy
    assert pngs(cells[4]) == [] and texts[4] == ["[]"]  # nothing piles up in pyplot
    assert pngs(cells[5]) == ["display_data"] and texts[5] == ["True"]  # the user's figure
