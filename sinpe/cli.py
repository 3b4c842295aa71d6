"""The ``sinpe`` command (also ``python -m sinpe``).

    sinpe                       a small table and sinpe's float32 error (the default job)
    sinpe demo -o pe.png        the L=128, d=64 heatmap, plus the accuracy summary
    sinpe encode L D -o t.npy   the table as a .npy file, written atomically
    sinpe plot L D -o pe.png    a heatmap, columns or similarity figure
    sinpe drift PATH            what exact RoPE changes in a transformers model
                                (sinpe.torch.drift; needs torch and transformers)
    sinpe bench ...             timings (sinpe.bench), arguments passed through

Exit status: 0 success; 1 the output could not be written (it exists and
``--force`` was not given, or an I/O or memory error); 2 bad arguments (usage
errors, an output path that is a directory, and sinpe's own
ValueError/TypeError, printed as they are) or a command this installation
cannot run (matplotlib or sinpe.bench missing).
matplotlib, the benchmarks, torch and transformers are imported only by the
commands that use them.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import tempfile
from collections.abc import Sequence
from typing import Any, BinaryIO, Callable

import numpy as np
from numpy.typing import NDArray

import sinpe

USAGE_ERROR = 2
WRITE_ERROR = 1


class CommandError(Exception):
    """An error to report on stderr as ``sinpe: error: ...`` with an exit status."""

    def __init__(self, message: str, status: int = USAGE_ERROR) -> None:
        super().__init__(message)
        self.status = status


def accuracy_rows() -> list[tuple[str, float]]:
    """Max |sinpe float32 - float64 reference| for a few tables, in units of 2**-24."""
    from sinpe.reference import table_float64

    cases = [
        ("L=5000, d=512 (the usual buffer)", 5000, 512, 0),
        ("L=1024, d=512 at positions 2**24-1023 .. 2**24", 1024, 512, sinpe.MAX_POSITION - 1023),
        ("L=1024, d=513 at positions -2**24 ..", 1024, 513, -sinpe.MAX_POSITION),
    ]
    rows = []
    for label, L, d, offset in cases:
        error = np.abs(sinpe.encode(L, d, offset=offset) - table_float64(L, d, offset=offset)).max()
        rows.append((label, float(error) / 2.0**-24))
    return rows


def print_accuracy() -> None:
    print("max |float32 error| vs the float64 reference, in units of 2**-24 (promise: <= 1)")
    for label, units in accuracy_rows():
        print(f"  {units:6.3f}  {label}")


def summary() -> None:
    """The default job: a small table and the accuracy summary."""
    with np.printoptions(precision=4, suppress=True, linewidth=100):
        print(f"sinpe {sinpe.__version__}: sinpe.encode(6, 8)")
        print(sinpe.encode(6, 8))
    print()
    print_accuracy()
    print("\nMore: sinpe --help (encode to .npy, plot, demo, bench)")


# -- writing files ------------------------------------------------------------


def write_atomically(path: str, write: Callable[[BinaryIO], None], *, force: bool) -> None:
    """Write ``path`` through a temporary file in its directory, then rename.

    Readers never see a half-written file.  Without ``force`` an existing
    ``path`` is never replaced, even one created while we were writing: the
    temporary file is hard-linked to ``path``, which fails if it exists.
    """
    if os.path.isdir(path):  # --force could not help: a directory is never replaced
        raise CommandError(f"{path} is a directory; -o needs a file name")
    if not force and os.path.lexists(path):
        raise CommandError(f"{path} exists; use --force to overwrite it", WRITE_ERROR)
    directory = os.path.dirname(os.path.abspath(path))
    try:
        fd, temporary = tempfile.mkstemp(
            dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp"
        )
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}", WRITE_ERROR) from exc
    try:
        with os.fdopen(fd, "wb") as stream:
            write(stream)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets, not tables
        if force:
            os.replace(temporary, path)
        else:
            _link_no_clobber(temporary, path)
    except OSError as exc:
        raise CommandError(f"cannot write {path}: {exc.strerror or exc}", WRITE_ERROR) from exc
    finally:
        if os.path.lexists(temporary):
            os.unlink(temporary)


def _link_no_clobber(temporary: str, path: str) -> None:
    try:
        os.link(temporary, path)
    except FileExistsError:
        raise CommandError(f"{path} exists; use --force to overwrite it", WRITE_ERROR) from None
    except OSError:
        # No hard links on this filesystem: fall back to check-then-rename.
        if os.path.lexists(path):
            raise CommandError(f"{path} exists; use --force to overwrite it", WRITE_ERROR) from None
        os.replace(temporary, path)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _table(args: argparse.Namespace, dtype: Any = None) -> NDArray[Any]:
    try:
        return sinpe.encode(args.L, args.D, args.n, offset=args.offset, dtype=dtype)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from exc
    except OverflowError as exc:  # L * D too large to represent: still a bad argument
        raise CommandError(f"OverflowError: {exc}") from exc
    except MemoryError as exc:
        raise CommandError(f"MemoryError: {exc}", WRITE_ERROR) from exc


def _plot_module() -> Any:
    try:
        import sinpe.plot
    except ImportError as exc:
        raise CommandError(str(exc)) from exc
    return sinpe.plot


def _save_figure(figure: Any, path: str, *, force: bool) -> None:
    extension = os.path.splitext(path)[1].lstrip(".").lower() or "png"
    if extension not in figure.canvas.get_supported_filetypes():
        supported = ", ".join(sorted(figure.canvas.get_supported_filetypes()))
        raise CommandError(
            f"-o {path}: unknown image format {extension!r} (use one of {supported})"
        )
    write_atomically(path, lambda stream: figure.savefig(stream, format=extension), force=force)


# -- commands -------------------------------------------------------------------


def cmd_encode(args: argparse.Namespace) -> int:
    table = _table(args, dtype=args.dtype)
    write_atomically(
        args.output, lambda stream: np.save(stream, table, allow_pickle=False), force=args.force
    )
    print(f"wrote {args.output}: ({args.L}, {args.D}) {table.dtype}", file=sys.stderr)
    return 0


def cmd_plot(args: argparse.Namespace) -> int:
    plot = _plot_module()
    table = _table(args)
    if args.kind == "heatmap":
        figure = plot.heatmap(table, offset=args.offset)
    elif args.kind == "columns":
        try:
            figure = plot.columns(table, cols=args.cols, offset=args.offset)
        except ValueError as exc:
            raise CommandError(f"--cols: {exc}") from exc
    else:
        figure = plot.similarity(table, offset=args.offset)
    _save_figure(figure, args.output, force=args.force)
    print(f"wrote {args.output}: {args.kind} of ({args.L}, {args.D})", file=sys.stderr)
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    plot = _plot_module()
    L, d = 128, 64
    figure = plot.heatmap(sinpe.encode(L, d), title=f"sinpe.encode({L}, {d})")
    _save_figure(figure, args.output, force=True)
    print(
        f"sinpe {sinpe.__version__}: wrote the ({L}, {d}) positional encoding heatmap to {args.output}"
    )
    print_accuracy()
    return 0


def cmd_drift(args: argparse.Namespace) -> int:
    try:
        # by name, as sinpe.bench: mypy then reads no torch where torch is not installed
        helper = importlib.import_module("sinpe.torch.hf._drift_cli")
        importlib.import_module("transformers")  # drift's models are transformers models
    except ImportError as exc:
        raise CommandError(f"sinpe drift needs torch and transformers: {exc}") from exc
    drift = importlib.import_module("sinpe.torch").drift

    plot = _plot_module() if args.output else None  # before the work: matplotlib present?
    if args.output and not args.force and os.path.lexists(args.output):
        raise CommandError(f"{args.output} exists; use --force to overwrite it", WRITE_ERROR)
    try:
        model, random_weights = helper.load(args.path, args.dtype, args.seed)

        def progress(line: str) -> None:
            print(f"sinpe drift: {line}", file=sys.stderr, flush=True)

        result = drift(model, positions=args.positions, tokens=args.tokens, seed=args.seed,
                       progress=progress)
    except (ValueError, TypeError) as exc:
        raise CommandError(str(exc)) from exc
    name = type(model).__name__
    limit = getattr(model.config.get_text_config(), "max_position_embeddings", None)
    notes = []
    if random_weights:
        notes.append(f"random weights (built from {args.path}, seed {args.seed}): a trained "
                     "model's sharper attention moves more with the same drift, so random "
                     "weights understate the effect")
    if isinstance(limit, int) and max(args.positions) + args.tokens > limit:
        notes.append(f"offsets past the model's max_position_embeddings ({limit}) are "
                     "measured all the same: the drift does not depend on training")
    if args.json:
        print(json.dumps({"model": name, "path": args.path, "dtype": args.dtype,
                          "tokens": args.tokens, "seed": args.seed,
                          "random_weights": random_weights,
                          "max_position_embeddings": limit, **result}))
    else:
        print(helper.table(result, f"sinpe drift: {name} from {args.path} ({args.dtype}), "
                           f"{args.tokens} random tokens (seed {args.seed})", notes))
    if plot is not None:
        figure = plot.drift(result, title=f"{name} ({args.dtype}): the same tokens at offset s")
        _save_figure(figure, args.output, force=args.force)
        print(f"wrote {args.output}", file=sys.stderr)
    return 0


def cmd_bench(argv: Sequence[str]) -> int:
    try:
        bench = importlib.import_module("sinpe.bench")
    except ModuleNotFoundError as exc:
        if exc.name != "sinpe.bench":
            raise  # sinpe.bench exists but imports something missing: a real error
        raise CommandError(
            "the benchmarks (sinpe.bench) are not part of this installation"
        ) from exc
    status = bench.main(list(argv))
    return int(status or 0)


# -- parsing ----------------------------------------------------------------------


def version_line() -> str:
    """The version and show_config's essentials, on one line (bug reports)."""
    config = sinpe.show_config(print_it=False)
    return (f"sinpe {config['version']} ({config['simd_label']} loops, {config['threads']} "
            f"threads, built by {config['compiler']}; sinpe.show_config() says more)")


class _Version(argparse.Action):
    """--version, printed unwrapped (argparse's own action wraps long lines)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: "str | None" = None) -> None:
        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sinpe",
        description="Sinusoidal positional encodings from sinpe's C kernels. "
        "With no command: print a small table and sinpe's float32 error.",
        epilog="Exit status: 0 ok; 1 output not written (exists without --force, I/O or "
        "memory error); 2 bad arguments, or a command unavailable in this installation.",
    )
    parser.add_argument("--version", action=_Version, nargs=0,
                        help="show the version and what this installation runs, then exit")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    def table_arguments(sub: argparse.ArgumentParser) -> None:
        sub.add_argument("L", type=int, help="number of positions (rows)")
        sub.add_argument("D", type=int, help="number of features (columns), d_model")
        sub.add_argument("-n", type=float, default=10000.0, help="base of the wavelengths (10000)")
        sub.add_argument("--offset", type=int, default=0, help="position of the first row (0)")
        sub.add_argument(
            "-o", "--output", required=True, help="file to write (refused if it exists)"
        )
        sub.add_argument("--force", action="store_true", help="overwrite OUTPUT if it exists")

    encode = commands.add_parser(
        "encode",
        help="write the (L, D) table to a .npy file",
        description="Write the (L, D) table to a .npy file (numpy.load reads it), atomically: "
        "a temporary file in the same directory, then a rename.",
    )
    table_arguments(encode)
    encode.add_argument(
        "--dtype",
        default="float32",
        choices=("float16", "float32", "float64"),
        help="element type (default float32)",
    )
    encode.set_defaults(run=cmd_encode)

    plot = commands.add_parser(
        "plot",
        help="draw the table (needs matplotlib>=3.6)",
        description="Draw the (L, D) table to an image (format from the extension: "
        "png, pdf, svg, ...), atomically.",
    )
    table_arguments(plot)
    plot.add_argument(
        "--kind",
        choices=("heatmap", "columns", "similarity"),
        default="heatmap",
        help="position x dimension heatmap (default), columns against position, "
        "or dot products between positions",
    )
    plot.add_argument(
        "--cols",
        type=int,
        nargs="+",
        default=[6, 7, 8, 9],
        metavar="J",
        help="columns for --kind columns (default 6 7 8 9)",
    )
    plot.set_defaults(run=cmd_plot)

    demo = commands.add_parser(
        "demo",
        help="write the L=128, d=64 heatmap and print the accuracy summary",
        description="Write the heatmap of sinpe.encode(128, 64) to OUTPUT (replacing it) "
        "and print sinpe's float32 error against the float64 reference. "
        "Needs matplotlib>=3.6.",
    )
    demo.add_argument("-o", "--output", default="pe.png", help="image to write (pe.png)")
    demo.set_defaults(run=cmd_demo)

    drift = commands.add_parser(
        "drift",
        help="the same tokens at two offsets: what transformers' RoPE and sinpe's change "
        "in a model's logits (needs torch and transformers)",
        description="Place the same tokens at positions 0.. and s.. in a transformers model "
        "and print what changes (max |logit change|, mean KL, top-1 agreement, the rotary "
        "caches' error), for the model as it is and patched by sinpe.torch.patch: "
        "sinpe.torch.drift. Exact RoPE changes nothing.",
    )
    drift.add_argument("path", metavar="PATH",
                       help="a model directory (save_pretrained's; read offline), or a "
                       "config.json (random weights: they understate the effect)")
    drift.add_argument("--positions", type=int, nargs="+", metavar="S",
                       default=[2**10, 2**14, 2**17, 2**20],
                       help="the offsets s (default 1024 16384 131072 1048576)")
    drift.add_argument("--tokens", type=int, default=128, help="random tokens (default 128)")
    drift.add_argument("--seed", type=int, default=0,
                       help="seed of the tokens and of random weights (default 0)")
    drift.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                       help="the model's dtype (default float32)")
    drift.add_argument("--json", action="store_true",
                       help="print the measurements as JSON instead of a table")
    drift.add_argument("-o", "--output", help="also draw them to this image (png, pdf, ...)")
    drift.add_argument("--force", action="store_true", help="overwrite OUTPUT if it exists")
    drift.set_defaults(run=cmd_drift)

    commands.add_parser(
        "bench",
        help="time sinpe against the tutorials' recipes (arguments go to sinpe.bench; "
        "sinpe bench --help for its own)",
        add_help=False,
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``sinpe`` command line and return its exit status.

    Usage errors found by argparse raise ``SystemExit(2)`` after printing the
    usage, as argparse does; every other failure is printed to stderr and
    returned as 1 or 2 (see the module docstring).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] == "bench":
            return cmd_bench(argv[1:])  # bench parses its own arguments, --help included
        args = build_parser().parse_args(argv)
        if args.command is None:
            summary()
            return 0
        status: int = args.run(args)
        return status
    except CommandError as exc:
        print(f"sinpe: error: {exc}", file=sys.stderr)
        return exc.status
