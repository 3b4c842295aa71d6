"""``python -m sinpe.bench``: the timings (see :mod:`sinpe.bench`)."""
import sys

from sinpe.bench._main import main

if __name__ == "__main__":
    sys.exit(main())
