"""The documentation runs: docstring examples, README.md and docs/ code blocks.

* Every docstring example in sinpe's modules, the compiled ``sinpe._core``
  included, passes as a plain doctest (no option flags: what ``help()`` shows
  is what NumPy prints).
* Every ```python block of README.md and docs/*.md runs as it stands, in a fresh
  namespace and an empty directory, as a reader would paste it; blocks that use
  torch need it (conftest.require).  mktestdocs extracts the blocks.
* Every line of the README's "Command line" block runs, and writes what it names.
* The README and docs/ speak to a stranger with a clone: no internal references,
  no install command that cannot work.
"""
from __future__ import annotations

import doctest
import importlib
import io
import os
import pkgutil
import re
import shlex
import subprocess
import sysconfig
from pathlib import Path

import pytest
from conftest import require, require_module

grab_code_blocks = require("mktestdocs").grab_code_blocks

REPO = Path(__file__).resolve().parents[1]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def package(name: str) -> list[str]:
    """A package and every module under it, by name."""
    root = importlib.import_module(name)
    return [name, *(m.name for m in pkgutil.walk_packages(root.__path__, f"{name}."))]


MODULES = ["sinpe", "sinpe._core", "sinpe._rope_types", "sinpe.plot", "sinpe.cli",
           "sinpe.reference", *package("sinpe.bench"), "sinpe.__main__"]
# sinpe.torch needs torch: test_torch_docstring_examples, test_patch_docstring_examples


def doctests(module_name: str) -> list[doctest.DocTest]:
    module = importlib.import_module(module_name)
    return [t for t in doctest.DocTestFinder(exclude_empty=True).find(module) if t.examples]


DOCTESTS = {t.name: t for name in MODULES for t in doctests(name)}

def run_doctest(test: doctest.DocTest, cwd: Path) -> None:
    report = io.StringIO()
    runner = doctest.DocTestRunner(optionflags=0)
    old = os.getcwd()
    os.chdir(cwd)  # examples may write files (fig.savefig("pe.png"))
    try:
        results = runner.run(test, out=report.write, clear_globs=True)
    finally:
        os.chdir(old)
    assert results.failed == 0, report.getvalue()
    assert results.attempted == len(test.examples)


def test_the_extensions_docstrings_are_covered():
    assert {"sinpe._core.encode", "sinpe._core.add_", "sinpe._core.encode_at",
            "sinpe._core.rope", "sinpe._core.encode_grid", "sinpe.plot"} <= set(DOCTESTS)


@pytest.mark.parametrize("name", sorted(DOCTESTS))
def test_docstring_examples(name, tmp_path):
    run_doctest(DOCTESTS[name], tmp_path)


def test_torch_docstring_examples(torch, tmp_path):
    hf = package("sinpe.torch.hf")  # test_patch_docstring_examples
    tests = [t for name in package("sinpe.torch") if name not in hf for t in doctests(name)]
    assert {"sinpe.torch._rope.rope_", "sinpe.torch._rope.rope",
            "sinpe.torch._caches.rope_cache"} <= {t.name for t in tests}
    for test in tests:
        run_doctest(test, tmp_path)


@pytest.mark.needs("transformers")
def test_patch_docstring_examples(torch, tmp_path):
    # sinpe.torch.patch, on a transformers model
    tests = [t for name in package("sinpe.torch.hf") for t in doctests(name)]
    assert "sinpe.torch.hf._patch.patch" in {t.name for t in tests}
    for test in tests:
        run_doctest(test, tmp_path)


# -- code blocks in README.md and docs/ ---------------------------------------------------


def python_blocks() -> list:
    params = []
    for document in DOCUMENTS:
        for number, block in enumerate(grab_code_blocks(document.read_text(), lang="python")):
            params.append(pytest.param(block, id=f"{document.name}-{number}"))
    return params


BLOCKS = python_blocks()


def test_every_python_block_is_found():
    # the README's examples: intro, torch drop-in, deployment paths, tensors, out=, rotary
    # embeddings (NumPy, torch, the HF patch, multi-axis), rope types in a transformers
    # model, sinpe.torch.patch, vision-language models, plots, plots with ax=, show_config
    assert sum(1 for p in BLOCKS if p.id.startswith("README.md")) == 15


@pytest.mark.parametrize("block", BLOCKS)
def test_python_block_runs(block, tmp_path, monkeypatch):
    if re.search(r"^\s*(import|from) torch\b|sinpe\.torch", block, re.M):
        require("torch")
    if re.search(r"^\s*import .*\btransformers\b", block, re.M):
        require_module("transformers")
    monkeypatch.chdir(tmp_path)
    require("matplotlib")
    import matplotlib.pyplot as plt

    try:
        exec(compile(block, "<README block>", "exec"), {"__name__": "__main__"})  # noqa: S102
    finally:
        plt.close("all")
    for name in re.findall(r'savefig\("([^"]+)"\)', block):
        assert (tmp_path / name).stat().st_size > 1000, name


# -- the README's command-line examples ------------------------------------------------


def command_lines() -> list[str]:
    section = (REPO / "README.md").read_text().split("## Command line", 1)[1]
    block = section.split("```sh\n", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]


def test_command_line_block_is_found():
    assert len(command_lines()) >= 8


@pytest.mark.parametrize("line", command_lines())
def test_command_line_example_runs(line, tmp_path):
    path = sysconfig.get_path("scripts") + os.pathsep + os.environ["PATH"]
    proc = subprocess.run(shlex.split(line), cwd=tmp_path, capture_output=True, text=True,
                          timeout=120, check=False,
                          env={**os.environ, "PATH": path, "MPLBACKEND": "Agg"})
    assert proc.returncode == 0, proc.stderr
    words = shlex.split(line)
    if "-o" in words:
        assert (tmp_path / words[words.index("-o") + 1]).stat().st_size > 100


# -- words a stranger cannot use ----------------------------------------------------------

INTERNAL = [r"\bseeds?\b", r"\bissues? \d", r"issue\b", r"\.\./shared", r"DESIGN\.md",
            r"sinpe\[plot\]", r"sinpe machines"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: p.name)
def test_documents_have_no_internal_references(document):
    text = document.read_text()
    found = [m.group(0) for pattern in INTERNAL for m in re.finditer(pattern, text, re.I)]
    assert found == []

