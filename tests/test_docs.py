"""The documentation runs: docstring examples, README.md and docs/ code blocks.

* Every docstring example in sinpe's modules, the compiled ``sinpe._core``
  included, passes as a plain doctest (no option flags: what ``help()`` shows
  is what NumPy prints).
* Every ```python block of README.md and docs/**/*.md runs as it stands, in a fresh
  namespace and an empty directory, as a reader would paste it; blocks that use
  torch, transformers or diffusers need them (conftest.require).  mktestdocs extracts the
  blocks.  The code of the site's figures (``.. plot::`` directives) runs too.  The
  blocks that assert what only sinpe.torch's CPU kernel path has (KERNEL_PATH_BLOCKS)
  are skipped with ``SINPE_TORCH_PATH=device``.
* Every line of the command-line page's example block runs, and writes what it names.
* The API reference (docs/reference/) lists every public name of sinpe, sinpe.torch
  and sinpe.plot: a new public name without a page fails here.
* The README is a front door of at most 250 lines whose relative links (and those of
  docs/) reach files and headings that exist; the test command it gives .ci/run is the
  one docs/testing.md shows.
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
import textwrap
from pathlib import Path

import pytest
from conftest import kernel_path, require, require_module

grab_code_blocks = require("mktestdocs").grab_code_blocks

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "_build" not in p.relative_to(DOCS).parts)
DOCUMENTS = [REPO / "README.md", *PAGES]


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


# the modules whose examples patch a transformers model: test_patch_docstring_examples
PATCHING = ["sinpe.torch._patch"]


def test_torch_docstring_examples(torch, tmp_path):
    hf = set(package("sinpe.torch.hf")) | set(PATCHING)
    tests = [t for name in package("sinpe.torch") if name not in hf for t in doctests(name)]
    assert {"sinpe.torch._rope.rope_", "sinpe.torch._rope.rope",
            "sinpe.torch._caches.rope_cache"} <= {t.name for t in tests}
    for test in tests:
        run_doctest(test, tmp_path)


@pytest.mark.needs("transformers")
def test_patch_docstring_examples(torch, tmp_path):
    # sinpe.torch.patch, on a transformers model
    tests = [t for name in package("sinpe.torch.hf") + PATCHING for t in doctests(name)]
    assert "sinpe.torch._patch.patch" in {t.name for t in tests}
    for test in tests:
        run_doctest(test, tmp_path)


# -- code blocks in README.md and docs/ ---------------------------------------------------

# matplotlib's plot directive, inside a MyST {eval-rst} block: its options, then its code
PLOT = re.compile(r"^```\{eval-rst\}\n\.\. plot::\n((?:   :[^\n]*\n)*)\n(.*?)^```", re.M | re.S)
PLOT_PRE_CODE = "import numpy as np\nimport matplotlib.pyplot as plt\n"  # docs/conf.py's


def name_of(document: Path) -> str:
    return document.relative_to(REPO).as_posix()


def plot_blocks(text: str) -> list[str]:
    return [PLOT_PRE_CODE + textwrap.dedent(m.group(2)) for m in PLOT.finditer(text)]


# Blocks that assert what only sinpe.torch's CPU kernel path has, by id: the line that
# asserts it, what it holds and what the device path does instead (conftest.kernel_path).
KERNEL_PATH_BLOCKS = {
    "docs/drift.md-0": (
        "assert max(result[\"cache_sinpe\"]) <= 2**-25",
        "caches' half an ulp from the exact values",
        "keeps half an ulp plus 2**-30"),
    "docs/transformers.md-2": (
        "assert len(rotary) == 1",
        "custom op in an exported graph",
        "exports device operations alone, no op of sinpe's"),
    "docs/variants.md-0": (
        "assert torch.equal(C, cos) and torch.equal(S, sin)",
        "caches, bit for bit the float64 values rounded once",
        "keeps half an ulp plus 2**-30: about 1.5% of float32 values differ in the last "
        "bit"),
}


def python_blocks() -> list:
    """Each block and the directory it runs in: a code block in an empty one (a reader's),
    a figure's code in its page's directory, as the plot directive runs it (it reads the
    page's generated data, docs/_generated/, by a relative path).  KERNEL_PATH_BLOCKS'
    are marked kernel_path."""
    params = []
    for document in DOCUMENTS:
        text = document.read_text()
        for number, block in enumerate(grab_code_blocks(text, lang="python")):
            name = f"{name_of(document)}-{number}"
            marks = ([kernel_path(*KERNEL_PATH_BLOCKS[name][1:])]
                     if name in KERNEL_PATH_BLOCKS else [])
            params.append(pytest.param(block, None, id=name, marks=marks))
        for number, block in enumerate(plot_blocks(text)):
            params.append(pytest.param(block, document.parent,
                                       id=f"{name_of(document)}-plot-{number}"))
    return params


BLOCKS = python_blocks()


def test_every_python_block_is_found():
    # the README's examples: NumPy, PyTorch, a transformers model patched
    assert sum(1 for p in BLOCKS if p.id.startswith("README.md")) == 3
    # the guides' examples, moved from the README, and the site's figures
    assert sum(1 for p in BLOCKS if p.id.startswith("docs/") and "-plot-" not in p.id) >= 17
    assert sum(1 for p in BLOCKS if "-plot-" in p.id) == 10  # 3 on the drift page, 1 on
    # the diffusers evidence page
    # the blocks skipped on the device path are those that assert the kernel path's facts
    blocks = {p.id: p.values[0] for p in BLOCKS}
    for name, (line, _, _) in KERNEL_PATH_BLOCKS.items():
        assert line in blocks.get(name, ""), (name, line)


@pytest.mark.parametrize("block, directory", BLOCKS)
def test_python_block_runs(block, directory, tmp_path, monkeypatch):
    if re.search(r"^\s*(import|from) torch\b|sinpe\.torch", block, re.M):
        require("torch")
    if re.search(r"^\s*import .*\btransformers\b", block, re.M):
        require_module("transformers")
    if re.search(r"^\s*(import|from) diffusers\b", block, re.M):
        require_module("diffusers")
    monkeypatch.chdir(directory or tmp_path)
    require("matplotlib")
    import matplotlib.pyplot as plt

    try:
        exec(compile(block, "<documentation block>", "exec"), {"__name__": "__main__"})  # noqa: S102
    finally:
        plt.close("all")
    for name in re.findall(r'savefig\("([^"]+)"\)', block):
        assert (tmp_path / name).stat().st_size > 1000, name


# -- the command-line page's examples ---------------------------------------------------


def command_lines() -> list[str]:
    block = (DOCS / "cli.md").read_text().split("```sh\n", 1)[1].split("```", 1)[0]
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
            r"NOTES\.md", r"sinpe\[plot\]", r"sinpe machines", r"/work/"]


@pytest.mark.parametrize("document", DOCUMENTS, ids=name_of)
def test_documents_have_no_internal_references(document):
    text = document.read_text()
    found = [m.group(0) for pattern in INTERNAL for m in re.finditer(pattern, text, re.I)]
    assert found == []



# -- the README as a front door, links that lead somewhere ---------------------------------


def test_readme_is_a_front_door():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) <= 250
    for section in ("## Install and run", "## Test", "## NumPy", "## PyTorch", "## transformers",
                    "## Accuracy", "## Speed", "## Documentation"):
        assert f"\n{section}\n" in text, section
    # how to build the site, with the command docs/testing.md gives
    assert 'pip install ".[docs]" torch==2.13.0' in text
    assert "sphinx-build -W --keep-going -n -b html docs docs/_build/html" in text


def test_the_test_command_is_the_same_everywhere():
    readme = (REPO / "README.md").read_text()
    command = readme.split("<!-- test-command -->\n```\n", 1)[1].split("\n", 1)[0]
    assert command.startswith('pip install ".[test]" torch==2.13.0')
    assert f"```\n{command}\n```" in (DOCS / "testing.md").read_text()


HEADING = re.compile(r"^(#{1,6}) (.+)$", re.M)
LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's (and MyST's) anchor of a heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(document: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", document.read_text(), flags=re.M | re.S)
    return {slug(m.group(2)) for m in HEADING.finditer(text)}


@pytest.mark.parametrize("document", DOCUMENTS, ids=name_of)
def test_relative_links_lead_somewhere(document):
    text = re.sub(r"^```.*?^```", "", document.read_text(), flags=re.M | re.S)
    broken = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # a URL: not checked (no network)
        path, _, anchor = target.partition("#")
        where = (document.parent / path).resolve() if path else document
        if not where.exists() or (anchor and where.suffix == ".md" and anchor not in anchors(where)):
            broken.append(target)
    assert broken == []


# -- the API reference covers the public names ----------------------------------------------

REFERENCE = DOCS / "reference"


def documented_names() -> set[str]:
    """Every name the reference pages document: autosummary entries and py:data directives,
    qualified by the module the page declares (``.. module::``)."""
    names = set()
    for page in REFERENCE.glob("*.md"):
        text = page.read_text()
        module = re.search(r"^\.\. module:: (\S+)", text, re.M)
        if module is None:
            continue
        for block in re.findall(r"^\.\. autosummary::\n((?:   .*\n|\n)*)", text, re.M):
            names |= {f"{module.group(1)}.{line.strip()}" for line in block.splitlines()
                      if line.strip() and not line.strip().startswith(":")}
        names |= {f"{module.group(1)}.{name}"
                  for name in re.findall(r"^```\{py:data\} (\S+)", text, re.M)}
    return names


def public_names(module_name: str) -> set[str]:
    module = importlib.import_module(module_name)
    return {f"{module_name}.{name}" for name in module.__all__}


def test_the_api_reference_lists_every_public_name_of_sinpe():
    require("matplotlib")  # sinpe.plot imports it

    documented = documented_names()
    assert public_names("sinpe") - documented == set()
    assert public_names("sinpe.plot") - documented == set()
    # and nothing that is not public (a name removed from __all__, or misspelled)
    assert {n for n in documented if not n.startswith("sinpe.torch.")} == (
        public_names("sinpe") | public_names("sinpe.plot"))


def test_the_api_reference_lists_every_public_name_of_sinpe_torch(torch):
    documented = documented_names()
    subpackages = ("sinpe.torch.hf", "sinpe.torch.patching")
    own = {n for n in documented if n.startswith(tuple(f"{p}." for p in subpackages))}
    assert public_names("sinpe.torch") == {
        n for n in documented if n.startswith("sinpe.torch.")} - own
    # each subpackage's own names; those sinpe.torch exports (the same objects) are
    # documented there
    import sinpe.torch

    for name in subpackages:
        module = importlib.import_module(name)
        exported = {f"{name}.{n}" for n in module.__all__
                    if getattr(sinpe.torch, n, None) is getattr(module, n)}
        assert public_names(name) - exported == {n for n in own if n.startswith(name + ".")}
