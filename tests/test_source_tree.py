"""Importing sinpe where its extension was never built says how to fix it.

From a clone, Python imports the source tree's ``sinpe/`` (no compiled
``_core``) ahead of the installed package; a bare ModuleNotFoundError for
``sinpe._core`` would leave a new user guessing.  These tests copy the Python
files alone, so they hold however this checkout was built.
"""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from conftest import run_python

PACKAGE = Path(__file__).resolve().parents[1] / "sinpe"
# Python as a user starts it in a source tree, the current directory first on sys.path
# (cibuildwheel's test environment sets PYTHONSAFEPATH=1, which leaves it out).
AS_IN_A_CLONE = {"PYTHONSAFEPATH": ""}


def unbuilt_copy(root: Path, *, source_tree: bool) -> Path:
    shutil.copytree(PACKAGE, root / "sinpe", ignore=shutil.ignore_patterns("*.so", "*.pyd"))
    if source_tree:
        (root / "setup.py").write_text("")
    return root


@pytest.mark.parametrize("argv", [["-c", "import sinpe"], ["-m", "sinpe"], ["-m", "sinpe.bench"]],
                         ids=["import", "python -m sinpe", "python -m sinpe.bench"])
def test_unbuilt_source_tree_raises_importerror_with_the_fix(tmp_path, argv):
    proc = run_python(argv, unbuilt_copy(tmp_path, source_tree=True), AS_IN_A_CLONE)
    assert proc.returncode == 1
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: sinpe's compiled extension sinpe._core is missing")
    assert f"from its source tree ({tmp_path})" in last
    assert "`pip install .`" in last and "`pip install -e .`" in last
    assert "another directory" in last
    assert "ModuleNotFoundError" not in proc.stderr


def test_incomplete_installation_says_reinstall(tmp_path):
    proc = run_python(["-c", "import sinpe"], unbuilt_copy(tmp_path, source_tree=False), AS_IN_A_CLONE)
    assert proc.returncode == 1
    assert "installation is incomplete" in proc.stderr
    assert "`pip install --force-reinstall .`" in proc.stderr
