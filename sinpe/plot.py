"""The pictures the positional-encoding tutorials draw, one call each.

Needs matplotlib (``pip install sinpe[plot]``).  Every function takes a table
(a NumPy array or tensor of shape ``(L, d)``, or the ``(1, L, d)`` /
``(L, 1, d)`` buffer of a ``PositionalEncoding`` module) and returns a new
:class:`matplotlib.figure.Figure`.  They use matplotlib's object-oriented API
only: no pyplot, so no global figure state and no GUI backend; save with
``fig.savefig("pe.png")``, or let a notebook display the returned figure.

>>> import sinpe, sinpe.plot
>>> sinpe.plot.heatmap(sinpe.encode(128, 64)).savefig("pe.png")  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from numpy.typing import NDArray

try:
    from matplotlib.figure import Figure
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise ImportError(
        "sinpe.plot needs matplotlib, which is not installed: pip install sinpe[plot]"
    ) from exc

__all__ = ["columns", "heatmap", "similarity"]


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
    # As seed 002 does: label every dimension/position when there are only a few.
    if d < 10:
        ax.set_xticks(range(d))
    if L < 20:
        ax.set_yticks(range(L))


def heatmap(
    pe: Any,
    *,
    offset: int = 0,
    title: str = "Positional Encoding",
    cmap: str = "viridis",
    figsize: tuple[float, float] = (6.4, 4.8),
) -> Figure:
    """Position (rows, top to bottom) against encoding dimension, with a colorbar.

    The heatmap of seeds 001 and 002 (``plt.imshow(pe, aspect="auto")``).
    ``offset`` labels the first row's position.
    """
    table = _table(pe)
    L, d = table.shape
    # A table's colours span [-1, 1] whatever its size, so heatmaps compare;
    # embeddings plus the table may reach further.
    limit = max(1.0, float(np.abs(table).max()))
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    image = ax.imshow(
        table,
        aspect="auto",
        cmap=cmap,
        interpolation="nearest",
        vmin=-limit,
        vmax=limit,
        extent=(-0.5, d - 0.5, offset + L - 0.5, offset - 0.5),
    )
    ax.set_title(title)
    ax.set_xlabel("Encoding Dimension")
    ax.set_ylabel("Position Index")
    if offset == 0:
        _integer_ticks_if_few(ax, d, L)
    fig.colorbar(image, ax=ax)
    return fig


def columns(
    pe: Any,
    cols: Sequence[int] = (6, 7, 8, 9),
    *,
    offset: int = 0,
    title: str | None = None,
    figsize: tuple[float, float] = (6.0, 2.5),
) -> Figure:
    """Selected columns against position, one line each (seed 000's d2l plot of columns 6..9)."""
    table = _table(pe)
    L, d = table.shape
    cols = [int(c) for c in cols]
    bad = [c for c in cols if not 0 <= c < d]
    if not cols or bad:
        raise ValueError(f"cols must be column indices in 0 .. {d - 1}, got {cols}")
    positions = np.arange(offset, offset + L)
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    styles = ["-", "--", "-.", ":"]
    for i, c in enumerate(cols):
        ax.plot(positions, table[:, c], styles[i % len(styles)], label=f"Col {c}")
    ax.set_xlabel("Row (position)")
    ax.set_xlim(positions[0], positions[-1])
    ax.grid(True)
    ax.legend()
    if title:
        ax.set_title(title)
    return fig


def similarity(
    pe: Any,
    *,
    offset: int = 0,
    normalize: bool = False,
    title: str | None = None,
    cmap: str = "viridis",
    figsize: tuple[float, float] = (5.6, 4.8),
) -> Figure:
    """Dot products ``pe[i] . pe[j]`` between every pair of positions, with a colorbar.

    Each pair of columns contributes ``cos((i - j) w)``, so the picture depends
    on ``i - j`` only: a band along the diagonal, which is how the encoding
    carries relative distance.  ``normalize=True`` divides by ``|pe[i]| |pe[j]|``
    (cosine similarity).
    """
    table = _table(pe)
    L = table.shape[0]
    gram = table @ table.T
    if normalize:
        norms = np.linalg.norm(table, axis=1)
        gram = gram / np.maximum(np.outer(norms, norms), np.finfo(np.float64).tiny)
    fig = Figure(figsize=figsize, layout="constrained")
    ax = fig.add_subplot()
    extent = (offset - 0.5, offset + L - 0.5, offset + L - 0.5, offset - 0.5)
    image = ax.imshow(gram, cmap=cmap, interpolation="nearest", extent=extent)
    ax.set_xlabel("Position")
    ax.set_ylabel("Position")
    ax.set_title(
        title or ("Cosine similarity" if normalize else "Dot product") + " between positions"
    )
    fig.colorbar(image, ax=ax)
    return fig
