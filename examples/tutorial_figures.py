"""Redraw the figures of the positional-encoding tutorials with sinpe, as PNG files.

    python examples/tutorial_figures.py OUTDIR   # needs matplotlib>=3.6

Writes one PNG per figure into OUTDIR and prints what it wrote:

- "Deep Learning - Positional Encoding" (d2l's plot): columns 6..9 of the
  (60, 32) table against position.
- "LLM study notes: Positional Encoding": the (128, 8) heatmap.  Its t-SNE of
  the rows needs scikit-learn: examples/tutorial_figures.ipynb draws it.
- "The Implemented Transformer": the (10, 4) heatmap with n = 100, and the
  (1000, 512) heatmap with n = 10000.
- similarity: dot products between positions of the (128, 64) table, each
  depending on the distance between positions only.

The other tutorials print tables and draw nothing.  The notebook
examples/tutorial_figures.ipynb draws the same figures inline.
tests/test_examples.py runs this script.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import sinpe
import sinpe.plot

# (file name, what the tutorial drew, the call that draws it with sinpe)
FIGURES = [
    (
        "columns_6-9_of_60x32.png",
        "Deep Learning - Positional Encoding: columns 6..9 against position, (60, 32)",
        lambda: sinpe.plot.columns(sinpe.encode(60, 32), cols=[6, 7, 8, 9]),
    ),
    (
        "heatmap_128x8.png",
        "LLM study notes: heatmap of the (128, 8) table",
        lambda: sinpe.plot.heatmap(sinpe.encode(128, 8)),
    ),
    (
        "heatmap_10x4_n100.png",
        "The Implemented Transformer: heatmap of the (10, 4) table, n = 100",
        lambda: sinpe.plot.heatmap(sinpe.encode(10, 4, 100.0)),
    ),
    (
        "heatmap_1000x512.png",
        "The Implemented Transformer: heatmap of the (1000, 512) table",
        lambda: sinpe.plot.heatmap(sinpe.encode(1000, 512)),
    ),
    (
        "similarity_128x64.png",
        "dot products between positions, (128, 64)",
        lambda: sinpe.plot.similarity(sinpe.encode(128, 64)),
    ),
]


def main(argv: Sequence[str] | None = None) -> list[str]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("outdir", help="directory for the PNGs (created if missing)")
    parser.add_argument("--dpi", type=int, default=100)
    args = parser.parse_args(argv)
    os.makedirs(args.outdir, exist_ok=True)
    written = []
    for name, what, draw in FIGURES:
        path = os.path.join(args.outdir, name)
        draw().savefig(path, dpi=args.dpi)
        print(f"{path}  ({what})")
        written.append(path)
    return written


if __name__ == "__main__":
    main()
