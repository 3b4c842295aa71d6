"""Sphinx extension of sinpe's documentation: what the site reads from the tree at build time.

* ``{filemap}`` lists the files under a folder of the repository with the first
  sentence of each one's leading comment (C) or docstring (Python), so that the
  architecture page's map is the tree as it is, not as it was when the page was
  written.
* The API reference of the C functions (``sinpe._core``) gains their typed
  signatures from the stub that ships with the package (``sinpe/_core.pyi``):
  every overload, with the private aliases they use spelled out.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SKIP_DIRS = {"__pycache__", "build", "dist"}
SKIP_SUFFIXES = {".so", ".pyd", ".o", ".pyc"}
FIRST_SENTENCE = re.compile(r"^(.*?[.!?])(?:\s|$)", re.S)


def first_sentence(text: str, limit: int = 240) -> str:
    """The first sentence of a paragraph of prose, on one line (cut at ``limit``)."""
    paragraph = " ".join(text.strip().split("\n\n", 1)[0].split())
    match = FIRST_SENTENCE.match(paragraph)
    sentence = match.group(1) if match else paragraph
    if len(sentence) > limit:
        sentence = sentence[:limit].rsplit(" ", 1)[0].rstrip(",;:") + " ..."
    return sentence


def c_comment(source: str) -> str:
    """The text of a C file's leading comment (``/* ... */`` or ``//`` lines)."""
    text = source.lstrip()
    if text.startswith("/*"):
        body = text[2:].split("*/", 1)[0]
        lines = [re.sub(r"^\s*\*? ?", "", line) for line in body.splitlines()]
        return "\n".join(lines)
    if text.startswith("//"):
        lines = []
        for line in text.splitlines():
            if not line.startswith("//"):
                break
            lines.append(line[2:].strip())
        return "\n".join(lines)
    return ""


def python_docstring(source: str) -> str:
    try:
        return ast.get_docstring(ast.parse(source)) or ""
    except SyntaxError:
        return ""


def describe(path: Path) -> str:
    """What a source file says it owns: the first sentence of its leading comment."""
    if path.name == "py.typed":
        return "Marks the package as typed (PEP 561): type checkers read its stubs and annotations."
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ""
    if path.suffix in {".c", ".h"}:
        text = c_comment(source)
    elif path.suffix in {".py", ".pyi"}:
        text = python_docstring(source)
    elif path.suffix == ".sh":
        lines = [line.lstrip("#").strip() for line in source.splitlines()[1:]
                 if line.startswith("#")]
        text = "\n".join(lines[:6])
    else:
        text = ""
    return first_sentence(text) if text.strip() else ""


def source_files(folder: Path) -> list[Path]:
    """Every source file under ``folder``, folders' own files before their subfolders'."""
    found = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part in SKIP_DIRS or part.startswith(".") or part.endswith(".egg-info")
               for part in relative.parts):
            continue
        if path.is_file() and path.suffix not in SKIP_SUFFIXES:
            found.append(path)
    return sorted(found, key=lambda p: (len(p.relative_to(folder).parts) > 1,
                                        str(p.parent), p.name))


def file_map(folder: str) -> dict[str, list[tuple[str, str]]]:
    """``{folder relative to the repository: [(file name, description), ...]}``."""
    groups: dict[str, list[tuple[str, str]]] = {}
    for path in source_files(REPO / folder):
        groups.setdefault(path.parent.relative_to(REPO).as_posix(), []).append(
            (path.name, describe(path)))
    return groups


# -- the typed signatures of sinpe._core, from its stub -------------------------------

def stub_signatures(stub: Path) -> dict[str, str]:
    """``{function name: its stub's overloads and the private aliases they use}``."""
    source = stub.read_text(encoding="utf-8")
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    functions: dict[str, list[str]] = {}
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            target = node.targets[0] if isinstance(node, ast.Assign) else node.target
            if isinstance(target, ast.Name) and target.id.startswith("_"):
                aliases[target.id] = ast.get_source_segment(source, node) or ast.unparse(node)
        elif isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            # the stub's own layout, decorators included, its type-checker comments left out
            text = ast.get_source_segment(source, node, padded=True) or ast.unparse(node)
            text = re.sub(r"\s*# type: ignore\S*", "", text)
            decorators = [f"@{ast.unparse(d)}" for d in node.decorator_list]
            functions.setdefault(node.name, []).append("\n".join([*decorators, text]))
    result = {}
    for name, definitions in functions.items():
        text = "\n".join(definitions)
        used = [alias for alias in aliases if re.search(rf"\b{alias}\b", text)]
        result[name] = "\n".join([aliases[a] for a in used] + ([""] if used else []) + definitions)
    return result


def add_stub_signature(app, what, name, obj, options, lines):  # noqa: ARG001
    if what != "function" or getattr(obj, "__module__", None) != "sinpe._core":
        return
    signatures = app.env.sinpe_stub_signatures
    short = name.rsplit(".", 1)[-1]
    if short not in signatures:
        return
    lines += ["", ".. rubric:: Typed signature (the package's stub, ``sinpe/_core.pyi``)", "",
              ".. code-block:: python", ""]
    lines += ["   " + line if line else "" for line in signatures[short].splitlines()]
    lines.append("")


def one_line_signature(app, what, name, obj, options, signature, return_annotation):  # noqa: ARG001
    """The C functions' text signatures as ``inspect`` reads them, on one line.

    Their ``__text_signature__`` wraps long signatures over lines and starts with
    CPython's ``$module, /``; ``inspect.signature`` removes both.
    """
    if what == "function" and getattr(obj, "__module__", None) == "sinpe._core":
        import inspect

        return str(inspect.signature(obj)), return_annotation
    return None


def whole_literals(extract):
    """autosummary's one-line summaries, never cut inside an inline literal.

    autosummary cuts a summary at the first ``". "``, and checks the whole first
    paragraph, not the cut, for broken markup: ``pe[i] . pe[j]`` in a first sentence
    would end it inside the literal.  Such a cut takes the whole first paragraph.
    """

    def extract_summary(doc, settings):
        summary = extract(doc, settings)
        if summary.count("``") % 2:
            lines = [line.strip() for line in doc]
            start = next(i for i, line in enumerate(lines) if line)
            end = next((i for i in range(start, len(lines)) if not lines[i]), len(lines))
            summary = " ".join(lines[start:end])
        return summary

    return extract_summary


PARAMETER = re.compile(r"^\*{0,2}\w+(?:, \*{0,2}\w+)*(?: :.*)?$")


def prose_out_of_parameters(app, what, name, obj, options, lines):  # noqa: ARG001
    """A paragraph of prose among the Parameters (not a ``name : type`` entry) moves
    up, before the section: numpydoc would read its first line as a parameter's name.
    """
    try:
        start = next(i for i in range(len(lines) - 1)
                     if lines[i].strip() == "Parameters" and set(lines[i + 1].strip()) == {"-"})
    except StopIteration:
        return
    end = next((i for i in range(start + 2, len(lines) - 1)
                if lines[i] and set(lines[i + 1].strip()) == {"-"}), len(lines))
    moved, kept, i = [], [], start + 2
    while i < end:
        line = lines[i]
        if line and not line[0].isspace() and not PARAMETER.match(line):
            paragraph_end = next((j for j in range(i, end) if not lines[j].strip()), end)
            moved += lines[i:paragraph_end] + [""]
            i = paragraph_end
        else:
            kept.append(line)
            i += 1
    if moved:
        lines[start:end] = moved + lines[start:start + 2] + kept


def load_stub(app):
    import sinpe

    stub = Path(sinpe.__file__).with_name("_core.pyi")
    app.env.sinpe_stub_signatures = stub_signatures(stub) if stub.exists() else {}


def setup(app):
    from docutils import nodes
    from docutils.parsers.rst import Directive

    class FileMap(Directive):
        """``{filemap} FOLDER``: the folder's files, each with its first sentence."""

        required_arguments = 1

        def run(self):
            env = self.state.document.settings.env
            sections = []
            for folder, files in file_map(self.arguments[0]).items():
                items = nodes.bullet_list()
                for name, description in files:
                    env.note_dependency(str(REPO / folder / name))
                    paragraph = nodes.paragraph()
                    paragraph += nodes.literal(text=name)
                    if description:
                        paragraph += nodes.Text(": " + description)
                    item = nodes.list_item()
                    item += paragraph
                    items += item
                title = nodes.paragraph()
                title += nodes.strong(text=folder + "/")
                sections += [title, items]
            return sections

    from sphinx.ext import autosummary

    autosummary.extract_summary = whole_literals(autosummary.extract_summary)
    app.add_directive("filemap", FileMap)
    app.connect("builder-inited", load_stub)
    app.connect("autodoc-process-docstring", prose_out_of_parameters, priority=400)
    app.connect("autodoc-process-docstring", add_stub_signature, priority=600)
    # before numpydoc's handler, which returns the text signature as it is
    app.connect("autodoc-process-signature", one_line_signature, priority=400)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
