"""sinpe.plot.drift: drift's measurements against the offset, one panel a quantity.

The lines carry the numbers given (x the offsets, y each list; zeros left off a log
axis), shares stay linear, ``ax=`` draws one quantity into a given Axes, and a result
without the lists a quantity needs is a ValueError naming them.
"""
from __future__ import annotations

import numpy as np
import pytest
from conftest import require

require("matplotlib")
from matplotlib.axes import Axes  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

import sinpe.plot

RESULT = {"positions": [1024, 16384, 131072], "logits_hf": [1e-3, 2e-2, 0.15],
          "logits_sinpe": [6e-5, 0.0, 7e-5], "top1_hf": [1.0, 1.0, 0.9],
          "top1_sinpe": [1.0, 1.0, 1.0]}


def test_each_quantity_is_a_panel_with_the_numbers():
    fig = sinpe.plot.drift(RESULT, ["logits", "top1"], title="tiny")
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    logits, top1 = fig.axes
    hf, ours = logits.get_lines()
    assert list(hf.get_xdata()) == RESULT["positions"] and list(hf.get_ydata()) == RESULT["logits_hf"]
    assert list(ours.get_xdata()) == [1024, 131072]  # the zero cannot sit on a log axis
    assert logits.get_yscale() == "log" and logits.get_xscale() == "log"
    assert top1.get_yscale() == "linear" and list(top1.get_lines()[0].get_ydata()) == [1, 1, 0.9]
    assert fig.get_suptitle() == "tiny"


def test_ax_draws_one_quantity_into_it():
    fig = Figure()
    ax = fig.add_subplot()
    assert sinpe.plot.drift(RESULT, "logits", ax=ax, title="t") is ax
    assert isinstance(ax, Axes) and len(ax.get_lines()) == 2 and ax.get_title() == "t"
    with pytest.raises(ValueError, match="with ax=, draw one quantity"):
        sinpe.plot.drift(RESULT, ["logits", "top1"], ax=ax)


@pytest.mark.parametrize("result, quantities, missing", [
    (RESULT, ["kl"], "kl_hf"),
    ({k: v for k, v in RESULT.items() if k != "positions"}, ["logits"], "positions"),
    (RESULT, [], "at least one quantity"),
])
def test_missing_lists_are_named(result, quantities, missing):
    with pytest.raises(ValueError, match=missing):
        sinpe.plot.drift(result, quantities)


def test_the_figure_renders(tmp_path):
    sinpe.plot.drift(RESULT, ["logits"]).savefig(tmp_path / "d.png")
    assert (tmp_path / "d.png").stat().st_size > 1000
    assert np.isfinite(RESULT["logits_hf"]).all()
