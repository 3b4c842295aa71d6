"""The ``sinpe`` command line: ``python -m sinpe``, the console script, and ``main(argv)``.

Subprocesses run with cwd = a temporary directory, so the installed package
(with its compiled extension) is imported, not the source tree.
"""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import sysconfig
import types

import numpy as np
import pytest
from conftest import run_python

import sinpe
import sinpe.__main__
from sinpe import cli
from sinpe.cli import main

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def run(*args: str, cwd, code: str | None = None) -> subprocess.CompletedProcess:
    command = ["-c", code] if code else ["-m", "sinpe"]
    return run_python([*command, *args], cwd)


def leftovers(directory) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# -- the default job, --version, --help ----------------------------------------


def test_no_arguments_prints_a_table_and_the_accuracy_summary(tmp_path):
    proc = run(cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"sinpe {sinpe.__version__}: sinpe.encode(6, 8)" in proc.stdout
    assert "0.8415" in proc.stdout  # sin(1), row 1 column 0
    lines = [line for line in proc.stdout.splitlines() if "L=" in line]
    assert len(lines) == 3
    assert all(float(line.split()[0]) <= 1.0 for line in lines)  # in units of 2**-24


def test_accuracy_rows_are_within_the_promise():
    rows = sinpe.__main__.accuracy_rows()
    assert len(rows) == 3 and all(0.0 < units <= 1.0 for _, units in rows)


def test_python_m_sinpe_and_the_console_script_run_the_same_main():
    assert sinpe.__main__.main is cli.main
    scripts = importlib.metadata.entry_points(group="console_scripts")
    assert [ep.value for ep in scripts if ep.name == "sinpe"] == ["sinpe.cli:main"]


def test_installed_console_script_runs(tmp_path):
    script = os.path.join(sysconfig.get_path("scripts"), "sinpe")
    assert os.path.exists(script), f"{script} missing: is sinpe installed (pip install .)?"
    proc = subprocess.run(
        [script, "--version"], cwd=tmp_path, capture_output=True, text=True, check=False
    )
    assert (proc.returncode, proc.stdout.strip()) == (0, version_line())


def version_line() -> str:
    """What --version prints: the version, then show_config's essentials."""
    config = sinpe.show_config(print_it=False)
    line = f"sinpe {sinpe.__version__} ({config['simd_label']} loops, "
    return line + f"{config['threads']} threads, built by {config['compiler']}; " \
        "sinpe.show_config() says more)"


def test_version(tmp_path, capsys):
    proc = run("--version", cwd=tmp_path)
    assert (proc.returncode, proc.stdout.strip()) == (0, version_line())
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == version_line()


@pytest.mark.parametrize(
    "command, expected",
    [
        ([], ["encode", "plot", "demo", "bench", "Exit status"]),
        (["encode"], ["usage: sinpe encode", "--force", "--dtype", "--offset", "atomically"]),
        (["plot"], ["usage: sinpe plot", "--kind", "{heatmap,columns,similarity}", "--cols"]),
        (["demo"], ["usage: sinpe demo", "128, 64"]),
    ],
    ids=["sinpe", "encode", "plot", "demo"],
)
def test_help_describes_each_command(capsys, command, expected):
    with pytest.raises(SystemExit) as exit_info:
        main([*command, "--help"])
    assert exit_info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    for text in expected:
        assert text in out
    assert "sinpe[plot]" not in out  # sinpe is not on an index: that install fails


# -- encode -------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_encode_writes_the_table_as_npy(tmp_path, dtype):
    path = tmp_path / "table.npy"
    status = main(
        ["encode", "40", "12", "-n", "100", "--offset", "-5", "--dtype", dtype, "-o", str(path)]
    )
    assert status == 0
    table = np.load(path)
    assert table.dtype == dtype
    assert np.array_equal(table, sinpe.encode(40, 12, 100.0, offset=-5, dtype=dtype))
    assert leftovers(tmp_path) == []


def test_encode_subprocess_default_dtype_is_float32(tmp_path):
    proc = run("encode", "7", "5", "-o", "pe.npy", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert np.array_equal(np.load(tmp_path / "pe.npy"), sinpe.encode(7, 5))


def test_encode_refuses_to_overwrite_without_force(tmp_path, capsys):
    path = tmp_path / "table.npy"
    path.write_bytes(b"keep me")
    assert main(["encode", "4", "4", "-o", str(path)]) == 1
    assert "exists; use --force" in capsys.readouterr().err
    assert path.read_bytes() == b"keep me"
    assert main(["encode", "4", "4", "-o", str(path), "--force"]) == 0
    assert np.array_equal(np.load(path), sinpe.encode(4, 4))
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["-1", "4"], "L must be >= 0, got L=-1"),
        (["4", "0"], "d must be >= 1"),
        (["4", "4", "-n", "0"], "n must be a finite base"),
        (["4", "4", "--offset", str(2**24)], "beyond the supported bound"),
    ],
    ids=["L", "d", "n", "offset"],
)
def test_encode_bad_values_exit_2_with_sinpes_message_and_write_nothing(
    tmp_path, capsys, args, message
):
    path = tmp_path / "table.npy"
    assert main(["encode", *args, "-o", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("sinpe: error: ") and message in err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "args",
    [
        ["encode", "4", "4"],
        ["encode", "four", "4", "-o", "x.npy"],
        ["plot", "4", "4", "-o", "x.png", "--kind", "pie"],
    ],
    ids=["missing-output", "non-integer", "bad-kind"],
)
def test_usage_errors_exit_2_with_usage(tmp_path, args):
    proc = run(*args, cwd=tmp_path)
    assert proc.returncode == 2
    assert "usage: sinpe" in proc.stderr and "error:" in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("dtype", ["int8", "bogus", "f4"])
def test_encode_dtype_must_be_one_of_three_names(tmp_path, dtype):
    proc = run("encode", "4", "4", "-o", "x.npy", "--dtype", dtype, cwd=tmp_path)
    assert proc.returncode == 2
    assert "usage: sinpe encode" in proc.stderr
    assert (f"argument --dtype: invalid choice: '{dtype}' (choose from "
            in proc.stderr) and "float16" in proc.stderr and "float64" in proc.stderr
    assert "dtype(" not in proc.stderr  # no NumPy repr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("argv", [["encode", "4", "4"],
                                  *(pytest.param(argv, marks=pytest.mark.needs("matplotlib"))
                                    for argv in (["plot", "8", "4"], ["demo"]))])
@pytest.mark.parametrize("force", [False, True])
def test_output_that_is_a_directory_exits_2_whatever_force_says(tmp_path, capsys, argv, force):
    directory = tmp_path / "out"
    directory.mkdir()
    argv = [*argv, "-o", str(directory)] + (["--force"] if force and argv[0] != "demo" else [])
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"sinpe: error: {directory} is a directory; -o needs a file name\n"
    assert list(directory.iterdir()) == [] and sorted(tmp_path.iterdir()) == [directory]


def test_encode_into_missing_directory_exits_1(tmp_path, capsys):
    assert main(["encode", "4", "4", "-o", str(tmp_path / "no" / "t.npy")]) == 1
    assert "cannot write" in capsys.readouterr().err


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "table.npy"
    path.write_bytes(b"old")

    def save_half_then_fail(stream, table, **kwargs):
        stream.write(b"\x93NUMPY partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "save", save_half_then_fail)
    assert main(["encode", "4", "4", "-o", str(path), "--force"]) == 1
    assert path.read_bytes() == b"old"
    assert leftovers(tmp_path) == []


def test_no_clobber_holds_for_a_file_created_while_writing(tmp_path):
    path = tmp_path / "table.npy"

    def write_while_someone_else_creates_the_file(stream):
        stream.write(b"ours")
        path.write_bytes(b"theirs")

    with pytest.raises(cli.CommandError, match="exists") as info:
        cli.write_atomically(str(path), write_while_someone_else_creates_the_file, force=False)
    assert info.value.status == 1
    assert path.read_bytes() == b"theirs"
    assert leftovers(tmp_path) == []


def test_written_file_gets_ordinary_permissions(tmp_path):
    path = tmp_path / "table.npy"
    assert main(["encode", "2", "2", "-o", str(path)]) == 0
    mask = os.umask(0)
    os.umask(mask)
    assert path.stat().st_mode & 0o777 == 0o666 & ~mask


# -- plot and demo -----------------------------------------------------------------------


@pytest.mark.needs("matplotlib")
@pytest.mark.parametrize("kind", ["heatmap", "columns", "similarity"])
def test_plot_writes_each_kind_as_png(tmp_path, kind):
    path = tmp_path / f"{kind}.png"
    assert main(["plot", "60", "32", "-o", str(path), "--kind", kind]) == 0
    data = path.read_bytes()
    assert data.startswith(PNG_SIGNATURE) and len(data) > 10_000
    assert leftovers(tmp_path) == []


@pytest.mark.needs("matplotlib")
def test_plot_other_format_from_extension(tmp_path):
    path = tmp_path / "pe.svg"
    assert main(["plot", "10", "4", "-n", "100", "-o", str(path)]) == 0
    assert b"<svg" in path.read_bytes()[:2000]


@pytest.mark.needs("matplotlib")
def test_plot_refuses_to_overwrite_without_force(tmp_path):
    path = tmp_path / "pe.png"
    path.write_bytes(b"keep")
    assert main(["plot", "8", "4", "-o", str(path)]) == 1
    assert path.read_bytes() == b"keep"
    assert main(["plot", "8", "4", "-o", str(path), "--force"]) == 0
    assert path.read_bytes().startswith(PNG_SIGNATURE)


@pytest.mark.needs("matplotlib")
@pytest.mark.parametrize(
    "args, message",
    [
        (["--kind", "columns", "--cols", "40"], "--cols: cols must be column indices in 0 .. 7"),
        (["-o", "pe.xyz"], "unknown image format 'xyz'"),
        (["-n", "-3"], "n must be a finite base"),
    ],
    ids=["cols", "format", "n"],
)
def test_plot_bad_arguments_exit_2(tmp_path, monkeypatch, capsys, args, message):
    monkeypatch.chdir(tmp_path)
    argv = ["plot", "8", "8", *args]
    if "-o" not in argv:
        argv += ["-o", "pe.png"]
    assert main(argv) == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_plot_without_matplotlib_exits_2_saying_how_to_install(tmp_path):
    code = (
        "import sys; sys.modules['matplotlib'] = None\n"
        "from sinpe.cli import main\n"
        "sys.exit(main(['plot', '8', '4', '-o', 'pe.png']))\n"
    )
    proc = run(cwd=tmp_path, code=code)
    assert proc.returncode == 2
    assert 'pip install "matplotlib>=3.6"' in proc.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.needs("matplotlib")
def test_demo_writes_the_128_by_64_heatmap_and_prints_the_accuracy(tmp_path):
    proc = run("demo", "-o", "pe.png", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "(128, 64) positional encoding heatmap to pe.png" in proc.stdout
    assert "units of 2**-24" in proc.stdout
    first = (tmp_path / "pe.png").read_bytes()
    assert first.startswith(PNG_SIGNATURE) and len(first) > 10_000
    # The demo is rerunnable: it replaces its own picture.
    assert main(["demo", "-o", str(tmp_path / "pe.png")]) == 0


# -- bench ------------------------------------------------------------------------------


def test_bench_passes_its_arguments_through(monkeypatch):
    seen = []
    fake = types.ModuleType("sinpe.bench")
    fake.main = lambda argv: seen.append(argv) or 3
    monkeypatch.setitem(sys.modules, "sinpe.bench", fake)
    assert main(["bench", "--help", "-L", "5000"]) == 3
    assert seen == [["--help", "-L", "5000"]]


def test_bench_missing_exits_2_with_a_clear_message(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sinpe.bench", None)  # as if the module did not exist
    assert main(["bench"]) == 2
    assert "sinpe.bench" in capsys.readouterr().err
