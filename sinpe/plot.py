"""The pictures the positional-encoding tutorials draw, one call each.

Needs matplotlib (``pip install "matplotlib>=3.6"``).  Every function takes a
table (a NumPy array or tensor of shape ``(L, d)``, or the ``(1, L, d)`` /
``(L, 1, d)`` buffer of a ``PositionalEncoding`` module).  As matplotlib
recommends for library plotting functions, ``ax=`` draws into an Axes you
already have (and the function returns that Axes); without it the function
makes a new :class:`matplotlib.figure.Figure` and returns it:

- in Jupyter, a returned figure shows inline when it is a cell's last
  expression, or with ``display(fig)``, without ``%matplotlib`` or pyplot;
- with pyplot imported and a GUI backend, the figure is pyplot's, so
  ``plt.show()`` shows it (close it with ``plt.close(fig)``);
- otherwise (headless, Agg, the notebook's inline backend) pyplot never holds
  it, so figures made in a loop are freed like any object.  sinpe never
  imports pyplot itself.

>>> import sinpe, sinpe.plot
>>> fig = sinpe.plot.heatmap(sinpe.encode(128, 64))
>>> fig.savefig("pe.png")
"""

from __future__ import annotations

import io
import sys
from collections.abc import Sequence
from typing import Any, overload

import numpy as np
from numpy.typing import NDArray

try:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        'sinpe.plot needs matplotlib, which is not installed: pip install "matplotlib>=3.6"'
    ) from exc

__all__ = ["columns", "drift", "heatmap", "similarity"]


class _Figure(Figure):
    """A Figure that IPython displays as a PNG (its rich display protocol).

    A figure made without pyplot has no backend for a notebook to show, so
    Jupyter would print its repr as text; ``_repr_png_`` is what IPython asks
    any object for.
    """

    def _repr_png_(self) -> bytes:
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


def _new_figure(figsize: tuple[float, float]) -> Figure:
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is None:  # never import pyplot ourselves: it would pick a backend
        return _Figure(figsize=figsize, layout="constrained")
    figure: Figure = pyplot.figure(figsize=figsize, layout="constrained", FigureClass=_Figure)
    if getattr(figure.canvas, "required_interactive_framework", None) is None:
        # Agg, or the notebook's inline backend: plt.show() cannot open a window,
        # so pyplot must not keep the figure (no pile-up in loops, and no second
        # inline copy next to the returned figure's own display).
        pyplot.close(figure)
    return figure


def _axes(ax: Axes | None, figsize: tuple[float, float]) -> Axes:
    return _new_figure(figsize).add_subplot() if ax is None else ax


def _result(ax: Axes, given: Axes | None) -> Figure | Axes:
    if given is not None:
        return given
    figure = ax.get_figure()
    assert isinstance(figure, Figure)
    return figure


def _table(pe: Any) -> NDArray[np.float64]:
    """A float64 ``(L, d)`` view of ``pe``: ndarray, tensor (any device/dtype), or module buffer."""
    if hasattr(pe, "detach"):  # a torch tensor; bfloat16 has no NumPy twin, so widen first
        pe = pe.detach().cpu().double().numpy()
    table = np.asarray(pe, dtype=np.float64)
    if table.ndim == 3 and 1 in table.shape[:2]:
        # (1, L, d) batch-first or (L, 1, d) seq-first buffer
        table = table.reshape(-1, table.shape[-1])
    if table.ndim != 2:
        raise ValueError(
            f"pe must be an (L, d) table (or a (1, L, d) / (L, 1, d) buffer), got shape {table.shape}"
        )
    if table.size == 0:
        raise ValueError(f"pe is empty (shape {table.shape}): nothing to plot")
    return table


def _integer_ticks_if_few(ax: Any, d: int, L: int) -> None:
    # As The Implemented Transformer's small heatmap: label every dimension/position.
    if d < 10:
        ax.set_xticks(range(d))
    if L < 20:
        ax.set_yticks(range(L))


@overload
def heatmap(
    pe: Any,
    *,
    ax: None = None,
    offset: int = 0,
    title: str = "Positional Encoding",
    cmap: str = "viridis",
    figsize: tuple[float, float] = (6.4, 4.8),
) -> Figure: ...
@overload
def heatmap(
    pe: Any,
    *,
    ax: Axes,
    offset: int = 0,
    title: str = "Positional Encoding",
    cmap: str = "viridis",
    figsize: tuple[float, float] = (6.4, 4.8),
) -> Axes: ...
def heatmap(
    pe: Any,
    *,
    ax: Axes | None = None,
    offset: int = 0,
    title: str = "Positional Encoding",
    cmap: str = "viridis",
    figsize: tuple[float, float] = (6.4, 4.8),
) -> Figure | Axes:
    """Position (rows, top to bottom) against encoding dimension, with a colorbar.

    The tutorials' heatmap (``plt.imshow(pe, aspect="auto")``).  ``offset``
    labels the first row's position.  Returns a new Figure, or ``ax`` if given
    (``figsize`` is then unused).
    """
    table = _table(pe)
    L, d = table.shape
    # A table's colours span [-1, 1] whatever its size, so heatmaps compare;
    # embeddings plus the table may reach further.
    limit = max(1.0, float(np.abs(table).max()))
    axes = _axes(ax, figsize)
    image = axes.imshow(
        table,
        aspect="auto",
        cmap=cmap,
        interpolation="nearest",
        vmin=-limit,
        vmax=limit,
        extent=(-0.5, d - 0.5, offset + L - 0.5, offset - 0.5),
    )
    axes.set_title(title)
    axes.set_xlabel("Encoding Dimension")
    axes.set_ylabel("Position Index")
    if offset == 0:
        _integer_ticks_if_few(axes, d, L)
    _colorbar(image, axes)
    return _result(axes, ax)


def _colorbar(image: Any, axes: Axes) -> None:
    figure = axes.get_figure()
    assert figure is not None
    figure.colorbar(image, ax=axes)


@overload
def columns(
    pe: Any,
    cols: Sequence[int] = (6, 7, 8, 9),
    *,
    ax: None = None,
    offset: int = 0,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 2.5),
) -> Figure: ...
@overload
def columns(
    pe: Any,
    cols: Sequence[int] = (6, 7, 8, 9),
    *,
    ax: Axes,
    offset: int = 0,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 2.5),
) -> Axes: ...
def columns(
    pe: Any,
    cols: Sequence[int] = (6, 7, 8, 9),
    *,
    ax: Axes | None = None,
    offset: int = 0,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 2.5),
) -> Figure | Axes:
    """Selected columns against position, one line each (d2l's plot of columns 6..9).

    Returns a new Figure, or ``ax`` if given.
    """
    table = _table(pe)
    L, d = table.shape
    cols = [int(c) for c in cols]
    bad = [c for c in cols if not 0 <= c < d]
    if not cols or bad:
        raise ValueError(f"cols must be column indices in 0 .. {d - 1}, got {cols}")
    positions = np.arange(offset, offset + L)
    axes = _axes(ax, figsize)
    styles = ["-", "--", "-.", ":"]
    for i, c in enumerate(cols):
        axes.plot(positions, table[:, c], styles[i % len(styles)], label=f"Col {c}")
    axes.set_xlabel("Row (position)")
    axes.set_xlim(positions[0], positions[-1])
    axes.grid(True)
    axes.legend()
    if title:
        axes.set_title(title)
    return _result(axes, ax)


@overload
def similarity(
    pe: Any,
    *,
    ax: None = None,
    offset: int = 0,
    normalize: bool = False,
    title: str | None = None,
    cmap: str = "viridis",
    figsize: tuple[float, float] = (5.6, 4.8),
) -> Figure: ...
@overload
def similarity(
    pe: Any,
    *,
    ax: Axes,
    offset: int = 0,
    normalize: bool = False,
    title: str | None = None,
    cmap: str = "viridis",
    figsize: tuple[float, float] = (5.6, 4.8),
) -> Axes: ...
def similarity(
    pe: Any,
    *,
    ax: Axes | None = None,
    offset: int = 0,
    normalize: bool = False,
    title: str | None = None,
    cmap: str = "viridis",
    figsize: tuple[float, float] = (5.6, 4.8),
) -> Figure | Axes:
    """Dot products ``pe[i] . pe[j]`` between every pair of positions, with a colorbar.

    Each pair of columns contributes ``cos((i - j) w)``, so the picture depends
    on ``i - j`` only: a band along the diagonal, which is how the encoding
    carries relative distance.  ``normalize=True`` divides by ``|pe[i]| |pe[j]|``
    (cosine similarity).  Returns a new Figure, or ``ax`` if given.
    """
    table = _table(pe)
    L = table.shape[0]
    gram = table @ table.T
    if normalize:
        norms = np.linalg.norm(table, axis=1)
        gram = gram / np.maximum(np.outer(norms, norms), np.finfo(np.float64).tiny)
    axes = _axes(ax, figsize)
    extent = (offset - 0.5, offset + L - 0.5, offset + L - 0.5, offset - 0.5)
    image = axes.imshow(gram, cmap=cmap, interpolation="nearest", extent=extent)
    axes.set_xlabel("Position")
    axes.set_ylabel("Position")
    axes.set_title(
        title or ("Cosine similarity" if normalize else "Dot product") + " between positions"
    )
    _colorbar(image, axes)
    return _result(axes, ax)


# What each quantity of sinpe.torch.drift's result is, for the axis label.
_DRIFT_LABELS = {
    "logits": "max |logits at s - logits at 0|",
    "kl": "mean KL(p at 0 || p at s), nats",
    "top1": "share of top-1 tokens kept",
    "cache": "max |cos, sin - exact|",
    "scores": "max |score at s - score at 0|",
}


@overload
def drift(
    result: Any,
    quantities: Sequence[str] = ("logits", "kl", "cache"),
    *,
    ax: None = None,
    title: str | None = None,
    figsize: tuple[float, float] | None = None,
) -> Figure: ...
@overload
def drift(
    result: Any,
    quantities: Sequence[str] = ("logits",),
    *,
    ax: Axes,
    title: str | None = None,
    figsize: tuple[float, float] | None = None,
) -> Axes: ...
def drift(
    result: Any,
    quantities: Sequence[str] = ("logits", "kl", "cache"),
    *,
    ax: Axes | None = None,
    title: str | None = None,
    figsize: tuple[float, float] | None = None,
) -> Figure | Axes:
    """What moving the same tokens to offset ``s`` changes, against ``s``: transformers'
    RoPE and sinpe's, one panel per quantity.

    ``result`` is :func:`sinpe.torch.drift`'s dict (or any mapping with the same
    shape: ``positions`` and, for each quantity ``q``, lists ``q_hf`` and
    ``q_sinpe``, e.g. the measurements behind the documentation's figures).
    Offsets are drawn on a base-2 log axis, the quantities on a log axis (linear
    for shares: ``top1``, and names starting ``accuracy``); a value of 0 cannot be
    drawn on a log axis and is left out.  With ``ax``, draws the one quantity into
    it and returns ``ax``; otherwise returns a new Figure.

    >>> import sinpe.plot
    >>> result = {"positions": [1024, 131072], "logits_hf": [1.6e-3, 0.15],
    ...           "logits_sinpe": [6.6e-5, 6.0e-5]}
    >>> fig = sinpe.plot.drift(result, ["logits"])
    >>> fig.savefig("drift.png")
    """
    names = [str(q) for q in ([quantities] if isinstance(quantities, str) else quantities)]
    missing = [f"{q}_{who}" for q in names for who in ("hf", "sinpe")
               if f"{q}_{who}" not in result]
    if not names:
        raise ValueError("quantities must name at least one quantity (logits, kl, top1, cache)")
    if missing or "positions" not in result:
        raise ValueError(f"result must have 'positions' and, for quantities {names}, "
                         f"lists q_hf and q_sinpe; missing {missing or ['positions']}")
    if ax is not None and len(names) != 1:
        raise ValueError(f"with ax=, draw one quantity, got {names}")
    positions = np.asarray(result["positions"], dtype=np.float64)
    figure = None
    if ax is None:
        figure = _new_figure(figsize or (4.0 * len(names), 3.4))
        panels = list(np.atleast_1d(figure.subplots(1, len(names))))
    else:
        panels = [ax]
    for axes, name in zip(panels, names):
        share = name == "top1" or name.startswith("accuracy")
        for who, label, style in (("hf", "transformers", "o-"), ("sinpe", "sinpe", "s-")):
            values = np.asarray(result[f"{name}_{who}"], dtype=np.float64)
            keep = np.ones(values.shape, bool) if share else values > 0
            axes.plot(positions[keep], values[keep], style, label=label)
        axes.set_xscale("log", base=2)
        if not share:
            axes.set_yscale("log")
        axes.set_xlabel("offset s of the same tokens")
        axes.set_ylabel(_DRIFT_LABELS.get(name, name))
        axes.grid(True, which="major", alpha=0.4)
        axes.legend()
    if ax is not None:
        if title:
            ax.set_title(title)
        return ax
    assert figure is not None
    if title:
        figure.suptitle(title)
    return figure
