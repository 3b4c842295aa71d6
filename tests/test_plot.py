"""sinpe.plot: each figure shows the right data and renders to a non-trivial PNG;
``ax=`` draws into a given Axes; figures display in Jupyter, show with
``plt.show()`` under a GUI backend, and are never held by pyplot otherwise.
(tests/test_notebooks.py runs them in a real Jupyter kernel.)

matplotlib is in the ``test`` extra: these tests skip only where SINPE_TEST_WITHOUT
names it (conftest.require).
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from conftest import require, run_python

require("matplotlib")
import matplotlib.image  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import sinpe
import sinpe.plot


def render(fig: Figure) -> np.ndarray:
    """The figure as a PNG, decoded back to an (H, W, 4) uint8 array."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=60)
    assert buffer.getvalue()[:8] == b"\x89PNG\r\n\x1a\n"
    buffer.seek(0)
    return (matplotlib.image.imread(buffer, format="png") * 255).round().astype(np.uint8)


def distinct_colours(pixels: np.ndarray) -> int:
    return len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0))


def coloured_fraction(pixels: np.ndarray) -> float:
    """Share of pixels that are neither white nor grey (text, axes)."""
    rgb = pixels[..., :3].astype(int)
    return float(((rgb.max(axis=-1) - rgb.min(axis=-1)) > 30).mean())


def test_heatmap_shows_the_table_with_colorbar_and_renders():
    table = sinpe.encode(128, 64)
    fig = sinpe.plot.heatmap(table)
    assert isinstance(fig, Figure)
    main, colorbar = fig.axes  # the plot and its colorbar
    assert np.array_equal(main.images[0].get_array(), table)
    assert main.get_xlabel() == "Encoding Dimension" and main.get_ylabel() == "Position Index"
    assert colorbar.get_ylim() == (-1.0, 1.0)
    pixels = render(fig)
    assert distinct_colours(pixels) > 200  # a colormap's worth of shades, not a blank frame
    assert coloured_fraction(pixels) > 0.5  # the table fills most of the figure


def test_heatmap_small_table_labels_every_position_and_dimension():
    fig = sinpe.plot.heatmap(sinpe.encode(10, 4, 100.0))
    ax = fig.axes[0]
    assert list(ax.get_xticks()) == [0, 1, 2, 3]
    assert list(ax.get_yticks()) == list(range(10))


def test_columns_plots_each_selected_column_against_position():
    table = sinpe.encode(60, 32)
    fig = sinpe.plot.columns(table, cols=range(6, 10))
    ax = fig.axes[0]
    assert len(ax.lines) == 4
    for line, c in zip(ax.lines, range(6, 10)):
        assert np.array_equal(line.get_xdata(), np.arange(60))
        assert np.array_equal(line.get_ydata(), table[:, c])
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [f"Col {c}" for c in range(6, 10)]
    pixels = render(fig)
    assert distinct_colours(pixels) > 50  # four coloured, anti-aliased curves
    assert 0.01 < coloured_fraction(pixels) < 0.5  # lines on a white background


def test_columns_rejects_out_of_range_column():
    with pytest.raises(ValueError, match=r"cols must be column indices in 0 \.\. 7"):
        sinpe.plot.columns(sinpe.encode(10, 8), cols=[2, 8])


def test_similarity_shows_dot_products_banded_along_the_diagonal():
    table = sinpe.encode(128, 64)
    fig = sinpe.plot.similarity(table)
    gram = np.asarray(fig.axes[0].images[0].get_array())
    assert np.allclose(gram, table.astype(np.float64) @ table.T.astype(np.float64))
    # Depends on i - j only: each diagonal is constant (d/2 on the main one).
    assert np.allclose(np.diag(gram), 32.0, atol=1e-5)
    assert np.allclose(np.diag(gram, 5), gram[0, 5], atol=1e-5)
    pixels = render(fig)
    assert distinct_colours(pixels) > 200
    assert coloured_fraction(pixels) > 0.5


def test_similarity_normalized_is_cosine_similarity():
    fig = sinpe.plot.similarity(sinpe.encode(20, 8), normalize=True)
    gram = np.asarray(fig.axes[0].images[0].get_array())
    assert np.allclose(np.diag(gram), 1.0) and gram.max() <= 1.0 + 1e-12


def test_plots_accept_module_buffers_and_bfloat16_tensors(torch):
    import sinpe.torch

    table = sinpe.encode(50, 8)
    for batch_first in (True, False):
        module = sinpe.torch.PositionalEncoding(8, max_len=50, batch_first=batch_first)
        fig = sinpe.plot.heatmap(module.pe)
        assert np.array_equal(fig.axes[0].images[0].get_array(), table)
    bf16 = sinpe.torch.encode(50, 8, dtype=torch.bfloat16)
    fig = sinpe.plot.columns(bf16, cols=[0])
    assert np.array_equal(fig.axes[0].lines[0].get_ydata(), bf16[:, 0].double().numpy())


@pytest.mark.parametrize("shape", [(5,), (2, 3, 4), (0, 4)])
def test_plots_reject_tables_that_are_not_2d(shape):
    with pytest.raises(ValueError, match="pe "):
        sinpe.plot.heatmap(np.zeros(shape))


def test_plots_leave_pyplot_state_alone():
    import matplotlib.pyplot as plt

    before = plt.get_fignums()
    figures = [
        sinpe.plot.heatmap(sinpe.encode(8, 4)),
        sinpe.plot.columns(sinpe.encode(8, 4), cols=[1]),
        sinpe.plot.similarity(sinpe.encode(8, 4)),
    ]
    assert plt.get_fignums() == before
    assert all(fig.canvas is not None for fig in figures)


SUPPORT = Path(__file__).resolve().parent / "support"
DRAW_ALL = (
    "import sinpe, sinpe.plot\n"
    "figures = [sinpe.plot.heatmap(sinpe.encode(16, 8)),\n"
    "           sinpe.plot.columns(sinpe.encode(16, 8), cols=[1]),\n"
    "           sinpe.plot.similarity(sinpe.encode(16, 8))]\n"
)


def test_plotting_imports_no_pyplot_and_needs_no_display(tmp_path):
    code = (
        "import os, sys, sinpe, sinpe.plot\n"
        "os.environ.pop('DISPLAY', None)\n"
        "sinpe.plot.heatmap(sinpe.encode(16, 8)).savefig('pe.png')\n"
        "print('matplotlib.pyplot' in sys.modules)\n"
    )
    proc = run_python(["-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "False"
    assert (tmp_path / "pe.png").stat().st_size > 1000


def test_import_without_matplotlib_says_how_to_install(tmp_path):
    proc = run_python(["-c", "import sys; sys.modules['matplotlib'] = None\nimport sinpe.plot"],
                      tmp_path)
    assert proc.returncode != 0
    assert "ImportError: sinpe.plot needs matplotlib" in proc.stderr
    assert 'pip install "matplotlib>=3.6"' in proc.stderr


@pytest.mark.parametrize("draw", ["heatmap", "columns", "similarity"])
def test_figures_display_as_png_in_jupyter(draw):
    # IPython shows any object with _repr_png_ as an image, pyplot or not.
    fig = getattr(sinpe.plot, draw)(sinpe.encode(16, 16))
    png = fig._repr_png_()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pixels = matplotlib.image.imread(io.BytesIO(png), format="png")
    assert pixels.shape[0] > 100 and pixels.shape[1] > 100


@pytest.mark.parametrize("draw", ["heatmap", "columns", "similarity"])
def test_ax_draws_into_the_given_axes_and_returns_it(draw):
    fig = Figure()
    left, right = fig.subplots(1, 2)
    table = sinpe.encode(16, 16)
    result = getattr(sinpe.plot, draw)(table, ax=right)
    assert result is right
    assert not left.has_data() and right.has_data()
    expected = table @ table.T.astype(np.float64) if draw == "similarity" else table
    if draw == "columns":
        assert np.array_equal(right.lines[0].get_ydata(), table[:, 6])
    else:
        assert np.allclose(right.images[0].get_array(), expected)
    colorbars = 1 if draw != "columns" else 0  # drawn into the same figure, beside ax
    assert len(fig.axes) == 2 + colorbars


def test_with_pyplot_headless_figures_are_not_held_by_pyplot(tmp_path):
    # Agg cannot show a window: pyplot must not collect figures made in a loop
    # (it warns past 20 open figures, an error here, and keeps every one alive).
    code = (
        "import warnings; warnings.simplefilter('error')\n"
        "import matplotlib.pyplot as plt, sinpe, sinpe.plot\n"
        "for i in range(21):\n"
        "    sinpe.plot.heatmap(sinpe.encode(8, 4))\n"
        "print(plt.get_backend().lower(), plt.get_fignums())\n"
    )
    proc = run_python(["-c", code], tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["agg", "[]"]


def test_with_a_gui_backend_plt_show_shows_every_figure(tmp_path):
    # A script: import pyplot, draw, plt.show().  The fake GUI backend "shows" a
    # figure by saving it as shown-<number>.png.
    code = "import matplotlib.pyplot as plt\n" + DRAW_ALL + (
        "print(plt.get_fignums())\n"
        "plt.show()\n"
    )
    proc = run_python(["-c", code], tmp_path, env={
        "MPLBACKEND": "module://fake_gui_backend", "PYTHONPATH": str(SUPPORT)})
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[1, 2, 3]"
    shown = sorted(p.name for p in tmp_path.glob("shown-*.png"))
    assert shown == ["shown-1.png", "shown-2.png", "shown-3.png"]
    for name in shown:
        pixels = matplotlib.image.imread(tmp_path / name)
        assert distinct_colours((pixels * 255).astype(np.uint8)) > 20  # a plot, not blank
