"""``python -m sinpe``: the ``sinpe`` command line (see ``sinpe.cli``).

With no arguments it prints a small table and sinpe's float32 error against
the float64 recipe; ``python -m sinpe --help`` lists the commands.
"""

import sys

from sinpe.cli import accuracy_rows, main

__all__ = ["accuracy_rows", "main"]

if __name__ == "__main__":
    sys.exit(main())
