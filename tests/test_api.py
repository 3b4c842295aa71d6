"""The public surface of DESIGN.md section 2: names, keyword names, kinds, defaults, docs.

Keyword names are part of the contract, so the signatures are compared exactly.
``dtype`` shows as ``dtype=None`` in the text signature: inspect cannot show a
type object as a default, and None means float32 (or ``out.dtype`` with out=).
"""
from __future__ import annotations

import importlib.metadata
import inspect
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import sinpe

P = inspect.Parameter


def params(func):
    return [(p.name, p.kind, p.default) for p in inspect.signature(func).parameters.values()]


def test_encode_signature():
    assert params(sinpe.encode) == [
        ("L", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("d", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("n", P.POSITIONAL_OR_KEYWORD, 10000.0),
        ("offset", P.KEYWORD_ONLY, 0),
        ("dtype", P.KEYWORD_ONLY, None),
        ("out", P.KEYWORD_ONLY, None),
        ("layout", P.KEYWORD_ONLY, "interleaved"),
        ("schedule", P.KEYWORD_ONLY, "paper"),
        ("freq", P.KEYWORD_ONLY, None),
    ]


def test_add_signature():
    assert params(sinpe.add_) == [
        ("embeddings", P.POSITIONAL_OR_KEYWORD, P.empty),
        ("n", P.POSITIONAL_OR_KEYWORD, 10000.0),
        ("offset", P.KEYWORD_ONLY, 0),
        ("axis", P.KEYWORD_ONLY, -2),
        ("scale", P.KEYWORD_ONLY, 1.0),
        ("layout", P.KEYWORD_ONLY, "interleaved"),
        ("schedule", P.KEYWORD_ONLY, "paper"),
        ("freq", P.KEYWORD_ONLY, None),
        ("positions", P.KEYWORD_ONLY, None),
        ("padding", P.KEYWORD_ONLY, None),
    ]


def test_every_keyword_name_is_accepted_as_a_keyword():
    out = np.empty((3, 4), np.float64)
    got = sinpe.encode(L=3, d=4, n=100.0, offset=2, dtype=np.float64, out=out)
    assert got is out
    np.testing.assert_array_equal(out, sinpe.encode(3, 4, 100.0, offset=2, dtype=np.float64))
    x = np.zeros((3, 2, 4), np.float32)
    assert sinpe.add_(embeddings=x, n=100.0, offset=2, axis=0, scale=2.0) is x
    np.testing.assert_array_equal(x[:, 0], sinpe.encode(3, 4, 100.0, offset=2))


def test_defaults_are_what_the_signature_says():
    x = np.ones((2, 5, 6), np.float32)
    y = x.copy()
    sinpe.add_(x)
    sinpe.add_(y, 10000.0, offset=0, axis=-2, scale=1.0)
    np.testing.assert_array_equal(x, y)
    np.testing.assert_array_equal(
        sinpe.encode(5, 6), sinpe.encode(5, 6, 10000.0, offset=0, dtype=np.float32, out=None)
    )


def test_add_returns_the_same_object():
    for x in (np.zeros((2, 3, 4), np.float16), np.zeros((3, 4)), np.zeros((4, 3, 2), np.float32)[::2]):
        assert sinpe.add_(x) is x


def test_version_is_a_str_matching_the_installed_metadata():
    assert isinstance(sinpe.__version__, str)
    assert re.fullmatch(r"\d+\.\d+\.\d+([.+-]?\w+)*", sinpe.__version__)
    assert sinpe.__version__ == importlib.metadata.version("sinpe")


def test_all_names_exist():
    for name in sinpe.__all__:
        assert hasattr(sinpe, name), name
    for name in ("encode", "add_", "set_num_threads", "get_num_threads", "__version__"):
        assert name in sinpe.__all__, name


def test_num_threads_round_trip():
    before = sinpe.get_num_threads()
    assert isinstance(before, int) and before >= 1
    try:
        sinpe.set_num_threads(1)
        assert sinpe.get_num_threads() == 1
        single = sinpe.encode(3000, 64)
        sinpe.set_num_threads(2)
        assert sinpe.get_num_threads() == 2
        np.testing.assert_array_equal(sinpe.encode(3000, 64), single)  # threads change no bit
    finally:
        sinpe.set_num_threads(before)
    assert sinpe.get_num_threads() == before


def test_dtype_codes_are_the_c_apis():
    """_core._dtype_codes: sinpe.h's codes by name, which a tensor's memory carries to the
    extension; each code means its dtype."""
    codes = sinpe._core._dtype_codes
    assert codes == {"float16": 0, "float32": 1, "float64": 2, "bfloat16": 3}
    for name in ("float16", "float32", "float64"):
        x = np.zeros((4, 8), name)
        sinpe._core._add_tensor(x.ctypes.data, x.shape, (8, 1), codes[name], 10000.0, 0, -2, 1.0)
        np.testing.assert_array_equal(x, sinpe.encode(4, 8, dtype=name))


NUMPYDOC_SECTIONS = ["Parameters\n----------\n", "Returns\n-------\n", "Raises\n------\n", "Examples\n--------\n"]


@pytest.mark.parametrize("func", [sinpe.encode, sinpe.add_], ids=lambda f: f.__name__)
def test_docstrings_have_numpydoc_sections(func):
    doc = inspect.getdoc(func)
    assert doc, func
    for section in NUMPYDOC_SECTIONS:
        assert section in doc + "\n", (func.__name__, section)
    parameters = doc.split("Parameters\n----------\n")[1].split("\n\n")[0].split("Returns\n")[0]
    for name in inspect.signature(func).parameters:
        assert re.search(rf"^{name} :", parameters, re.M), (func.__name__, name)
    # the summary line is a sentence, not the text signature
    assert not doc.startswith(func.__name__ + "(")


def test_text_signature_is_not_left_in_the_docstring():
    for func in (sinpe.encode, sinpe.add_):
        assert "--\n" not in func.__doc__.split("\n\n")[0]
        assert func.__text_signature__ is not None


def test_help_on_the_package_works():
    assert "encode" in (sinpe.__doc__ or "")
    assert inspect.getdoc(sinpe._core)


def test_python_m_sinpe_prints_a_table_and_an_accuracy_line(tmp_path):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    proc = subprocess.run(
        [sys.executable, "-m", "sinpe"],
        cwd=tmp_path,  # not the source tree: the installed package must run
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    text = proc.stdout
    assert "error" in text.lower() and "2**-24" in text, text
    # every accuracy row is "<units of 2**-24>  <label>", and keeps the promise
    rows = re.findall(r"^\s+(\d+\.\d+)\s+\S.*$", text, re.M)
    assert rows, text
    assert all(float(units) <= 1.0 for units in rows), text
