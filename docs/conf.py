"""Sphinx configuration of sinpe's documentation site.

Build it from the repository root with sinpe, torch and the docs extra installed::

    pip install ".[docs]" torch==2.13.0
    sphinx-build -W --keep-going -n -b html docs docs/_build/html

Pages are Markdown (MyST).  The API reference is generated from the docstrings
(autodoc, autosummary, numpydoc) and the type stubs (sinpe/_core.pyi); the figures
are drawn by sinpe's own code during the build (matplotlib's plot directive); the
architecture page's file map is read from the source tree (_ext/sinpe_docs.py).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

import sinpe

DOCS = Path(__file__).resolve().parent
sys.path.insert(0, str(DOCS / "_ext"))
os.environ.setdefault("MPLBACKEND", "Agg")

project = "sinpe"
author = "sinpe's authors"
copyright = "sinpe's authors, MIT License"  # noqa: A001
version = release = sinpe.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.autosummary",
    "numpydoc",
    "matplotlib.sphinxext.plot_directive",
    "sinpe_docs",
]

source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
root_doc = "index"
exclude_patterns = ["_build", "_templates", "Thumbs.db", ".DS_Store"]
templates_path = ["_templates"]
nitpicky = True
smartquotes = False  # code-like text (file descriptions, "--") stays as written

# -- MyST: GitHub's Markdown, with its heading anchors, so the same links work there
myst_heading_anchors = 4
myst_enable_extensions = ["colon_fence", "dollarmath"]

# -- the API reference
autosummary_generate = True
autosummary_imported_members = True
autodoc_typehints = "none"          # the types are in the docstrings and the stubs' block
autodoc_inherit_docstrings = False  # torch.nn.Module's text is not sinpe's
numpydoc_show_class_members = False
numpydoc_xref_param_type = False
numpydoc_validation_checks: set[str] = set()
add_module_names = True

# -- figures drawn by the build (```{plot}``` blocks run sinpe's code)
plot_include_source = True
plot_html_show_source_link = False
plot_html_show_formats = False
plot_formats = [("png", 110)]
plot_rcparams = {"figure.figsize": (7.0, 4.0)}
plot_pre_code = "import numpy as np\nimport matplotlib.pyplot as plt\n"

# -- HTML: pydata-sphinx-theme, as NumPy's and SciPy's sites; nothing fetched at build time
html_theme = "pydata_sphinx_theme"
html_title = f"sinpe {release}"
html_static_path: list[str] = []
html_theme_options = {
    "navigation_with_keys": False,
    "show_toc_level": 2,
    "secondary_sidebar_items": ["page-toc"],
    "footer_start": ["copyright"],
    "footer_end": ["sphinx-version"],
}
html_sidebars = {"index": []}
html_show_sourcelink = False
