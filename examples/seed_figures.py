"""Reproduce the figures of the seed documents (../shared/seeds) with sinpe.

    python examples/seed_figures.py OUTDIR      # needs matplotlib: pip install sinpe[plot]

Writes one PNG per figure into OUTDIR and prints what it wrote:

- seed 000 (d2l): columns 6..9 of the (60, 32) table against position.
- seed 001 (pytorch/examples): the (128, 8) heatmap, n = 10000.  Its t-SNE
  picture needs scikit-learn; the similarity plot below shows the same
  periodic structure without it.
- seed 002 (The Implemented Transformer): the (10, 4) heatmap with n = 100,
  and the (1000, 512) heatmap with n = 10000.
- similarity: dot products between positions of the (128, 64) table, each
  depending on the distance between positions only.

Seeds 003 and 004 print tables and draw nothing; the test suite checks
their recipes' values instead.  tests/test_examples.py runs this script.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Sequence

import sinpe
import sinpe.plot

# (file name, what the seed drew, the call that draws it with sinpe)
FIGURES = [
    (
        "seed000_columns_6-9_of_60x32.png",
        "seed 000: columns 6..9 against position, (60, 32)",
        lambda: sinpe.plot.columns(sinpe.encode(60, 32), cols=[6, 7, 8, 9]),
    ),
    (
        "seed001_heatmap_128x8.png",
        "seed 001: heatmap of the (128, 8) table",
        lambda: sinpe.plot.heatmap(sinpe.encode(128, 8)),
    ),
    (
        "seed002_heatmap_10x4_n100.png",
        "seed 002: heatmap of the (10, 4) table, n = 100",
        lambda: sinpe.plot.heatmap(sinpe.encode(10, 4, 100.0)),
    ),
    (
        "seed002_heatmap_1000x512.png",
        "seed 002: heatmap of the (1000, 512) table",
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
