"""Typing: the stubs match the extension, mypy --strict accepts the public API, and
``inspect.signature`` / ``help()`` show real signatures for every public function."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sinpe
import sinpe._core
import sinpe.cli

REPO = Path(__file__).resolve().parents[1]
STUB = REPO / "sinpe" / "_core.pyi"

# Each line is a misuse the stubs must catch; the comment is mypy's error code.
MISUSE = """\
import numpy as np
from numpy.typing import NDArray
import sinpe

half: NDArray[np.float16] = sinpe.encode(4, 8)  # assignment
sinpe.encode(4.0, 8)  # call-overload
sinpe.encode(4, 8, 10000.0, 0)  # call-overload
sinpe.encode(4, 8, offsets=1)  # call-overload
sinpe.add_([[0.0]])  # type-var
sinpe.set_num_threads(threads=2)  # call-arg
text: str = sinpe.get_num_threads()  # assignment
"""


def stub_functions() -> dict[str, list[ast.FunctionDef]]:
    functions: dict[str, list[ast.FunctionDef]] = {}
    for node in ast.parse(STUB.read_text()).body:
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_"):
            functions.setdefault(node.name, []).append(node)
    return functions


def stub_constants() -> set[str]:
    return {
        node.target.id
        for node in ast.parse(STUB.read_text()).body
        if isinstance(node, ast.AnnAssign)
        and isinstance(node.target, ast.Name)
        and not node.target.id.startswith("_")
    }


def public_runtime_names() -> set[str]:
    return {name for name in dir(sinpe._core) if not name.startswith("_")}


def test_stub_declares_exactly_the_extensions_public_names():
    assert set(stub_functions()) | stub_constants() == public_runtime_names()


@pytest.mark.parametrize("name", sorted(n for n in dir(sinpe._core) if not n.startswith("_")))
def test_stub_signatures_match_the_runtime_text_signatures(name):
    runtime = getattr(sinpe._core, name)
    if not callable(runtime):
        assert name in stub_constants()
        return
    signature = inspect.signature(runtime)
    expected = [(p.name, p.kind, p.default) for p in signature.parameters.values()]
    for overload in stub_functions()[name]:
        args = overload.args
        kinds = (
            [(a, inspect.Parameter.POSITIONAL_ONLY) for a in args.posonlyargs]
            + [(a, inspect.Parameter.POSITIONAL_OR_KEYWORD) for a in args.args]
            + [(a, inspect.Parameter.KEYWORD_ONLY) for a in args.kwonlyargs]
        )
        positional_defaults = [None] * (
            len(args.posonlyargs) + len(args.args) - len(args.defaults)
        ) + list(args.defaults)
        defaults = positional_defaults + list(args.kw_defaults)
        stub = []
        for (arg, kind), default in zip(kinds, defaults):
            value = inspect.Parameter.empty if default is None else ast.literal_eval(default)
            stub.append((arg.arg, kind, value))
        # A required keyword in an overload (dtype=, out=) is still optional at runtime.
        assert [s[:2] for s in stub] == [e[:2] for e in expected], ast.unparse(overload)
        for (_, _, stub_default), (_, _, runtime_default) in zip(stub, expected):
            if stub_default is not inspect.Parameter.empty:
                assert stub_default == runtime_default


def test_py_typed_and_stub_ship_with_the_installed_package():
    package = Path(sinpe.__file__).parent
    assert (package / "py.typed").exists()
    assert (package / "_core.pyi").exists()


@pytest.mark.needs("mypy")
@pytest.mark.slow
def test_mypy_strict_accepts_the_api_and_catches_misuse(tmp_path, pytestconfig):
    """One mypy run: the example and the package modules must be clean, and every
    line of the misuse file must be flagged.  sinpe/torch/ is left out (loading
    torch's stubs costs ~10 s on a cold cache, a third of the suite's time budget;
    ``mypy --strict sinpe/torch`` reports 26 errors of its internal modules today)."""
    misuse = tmp_path / "misuse.py"
    misuse.write_text(MISUSE)
    cache_provider = getattr(pytestconfig, "cache", None)  # absent under -p no:cacheprovider
    cache = cache_provider.mkdir("mypy") if cache_provider else tmp_path / "cache"
    files = ["examples/typed_usage.py", "sinpe/plot.py", "sinpe/cli.py"]
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--show-error-codes", "--no-pretty"]
        + ["--cache-dir", str(cache), *files, str(misuse)],
        cwd=REPO,  # type-check this tree's sinpe package (stubs included), however installed
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**os.environ, "MYPYPATH": ""},
    )
    errors = [line for line in proc.stdout.splitlines() if ": error:" in line]
    # By file name: a warm mypy cache may report the misuse module at an earlier tmp path.
    elsewhere = [line for line in errors if not line.split(":")[0].endswith("misuse.py")]
    assert elsewhere == [], proc.stdout
    flagged = {}
    for line in errors:
        number = int(line.split(":")[1])
        flagged.setdefault(number, set()).add(line.rsplit("[", 1)[-1].rstrip("]"))
    lines = MISUSE.splitlines()
    for number, text in enumerate(lines, start=1):
        if "  # " in text:
            code = text.rsplit("  # ", 1)[1]
            assert code in flagged.get(number, set()), (text, proc.stdout)
    assert proc.returncode == 1


def public_callables():
    import sinpe.plot  # matplotlib and torch: the test's needs mark and fixture
    import sinpe.torch

    modules = {
        "sinpe": (sinpe, [n for n in sinpe.__all__ if callable(getattr(sinpe, n))]),
        "sinpe.plot": (sinpe.plot, sinpe.plot.__all__),
        "sinpe.cli": (sinpe.cli, ["main"]),
        "sinpe.torch": (sys.modules["sinpe.torch"], sys.modules["sinpe.torch"].__all__),
    }
    for module_name, (module, names) in modules.items():
        for name in names:
            yield f"{module_name}.{name}", getattr(module, name)


EXPECTED_PARAMETERS = {
    "sinpe.encode": ["L", "d", "n", "offset", "dtype", "out", "layout", "schedule", "freq"],
    "sinpe.add_": ["embeddings", "n", "offset", "axis", "scale", "layout", "schedule", "freq",
                   "positions", "padding"],
    "sinpe.encode_at": ["positions", "d", "n", "dtype", "out", "layout", "schedule", "freq",
                        "padding"],
    "sinpe.rope": ["L", "d", "n", "offset", "positions", "dtype", "out", "layout", "freq",
                   "scale", "sections", "sections_layout"],
    "sinpe.encode_grid": ["shape", "d", "n", "dtype", "out", "layout", "schedule", "split",
                          "order"],
    "sinpe.rope_": ["x", "n", "offset", "axis", "positions", "layout", "freq", "rotary_dim",
                    "scale", "exact", "sections", "sections_layout"],
    "sinpe.torch.rope_": ["tensor", "n", "offset", "axis", "positions", "layout", "freq",
                          "rotary_dim", "scale", "exact", "sections", "sections_layout"],
    "sinpe.torch.rope": ["tensor", "n", "offset", "axis", "positions", "layout", "freq",
                         "rotary_dim", "scale", "exact", "sections", "sections_layout"],
    "sinpe.torch.apply_rotary_pos_emb": ["q", "k", "cos", "sin", "unsqueeze_dim",
                                         "position_ids"],
    "sinpe.torch.patch": ["model", "frequencies"],
    "sinpe.rope_frequencies": ["head_dim", "rope_parameters", "max_position_embeddings",
                               "seq_len", "layer_type"],
    "sinpe.torch.rope_cache": ["L", "d", "n", "offset", "positions", "layout", "freq", "scale",
                               "dtype", "device", "sections", "sections_layout"],
    "sinpe.torch.apply_rotary_pos_emb_vision": ["q", "k", "cos", "sin"],
    "sinpe.torch.RotaryEmbedding": ["config", "device", "frequencies", "layer_type", "layout",
                                    "output_dtype"],
    "sinpe.set_num_threads": ["threads"],
    "sinpe.get_num_threads": [],
    "sinpe.torch.encode": ["L", "d", "n", "offset", "dtype", "device"],
    "sinpe.torch.add_": ["tensor", "n", "offset", "axis", "scale"],
    "sinpe.torch.PositionalEncoding": [
        "d_model",
        "dropout",
        "max_len",
        "n",
        "batch_first",
        "device",
        "dtype",
    ],
}


@pytest.mark.needs("matplotlib")
def test_every_public_function_has_a_real_signature_and_docstring(torch, capsys):
    seen = set()
    for qualified, function in public_callables():
        signature = inspect.signature(function)  # raises ValueError without a text signature
        names = list(signature.parameters)
        assert "args" not in names and "kwargs" not in names, qualified
        if qualified in EXPECTED_PARAMETERS:
            assert names == EXPECTED_PARAMETERS[qualified], qualified
            seen.add(qualified)
        assert inspect.getdoc(function), qualified
        help(function)
        assert str(signature).split("(")[0] in capsys.readouterr().out
    assert seen == set(EXPECTED_PARAMETERS)
    assert (
        inspect.signature(sinpe.encode).parameters["offset"].kind is inspect.Parameter.KEYWORD_ONLY
    )
