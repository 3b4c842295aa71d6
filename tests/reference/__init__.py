"""Re-implementations of the seed documents' recipes (``../shared/seeds/``), one per document.

Each function in :mod:`reference.seeds` is named after its document's file and
reproduces the document's PyTorch (or NumPy) code with the same operations and
dtypes, so sinpe is checked against what users actually run today.
"""
