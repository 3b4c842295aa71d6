"""Shared pieces of sinpe's test suite.

* ``require(name)``, the ``needs(name, ...)`` mark and the ``torch`` fixture:
  the tests' optional requirements (``OPTIONAL``).  A missing one is an error,
  except torch outside ``CI=true`` (a developer may not have it: its tests
  skip) and those that ``SINPE_TEST_WITHOUT`` names: a run that cannot install
  them on purpose (torch has no wheel for that Python here; a wheel's tests on a
  platform that lacks the plotting or notebook stack) says so, and their tests
  skip with that reason.  CI must never go green by skipping the comparisons it
  exists for without having asked to.
* The tests' own float64 reference (deliberately not ``sinpe.reference``, so
  a bug there cannot hide a bug in sinpe) and the error bound of any
  double-precision evaluation of the formula, derived below.
* Helpers to sample rows anywhere in the supported position range.
* sinpe.torch's two paths (the CPU kernel's, and the device path of every other
  device, which ``SINPE_TORCH_PATH=device`` gives CPU tensors too): the
  ``kernel_path`` mark of tests holding what only the kernel's path has (skipped
  in a device-path run), ``by_path`` for what each path does instead, and the
  bounds within which the device path's values keep the kernel's contracts
  (``same_or_within_device_bound``).

Error analysis used throughout (u = 2**-53, the unit roundoff of float64):

For column j of d, with k = j // 2, a double method forms
    e   = fl(-(2k) / d)            (2k and d are exact: one rounding, |de| <= u|e|)
    w~  = pow(n, e)                (libm pow, < 1 ulp: relative <= 2u)
    a~  = fl(p * w~)               (p is an exact integer: one rounding, u)
Since n**(e(1+t)) = w * exp(t * e * ln n) = w * exp(t * ln w), the rounding of
the exponent becomes a relative error |ln w| * u of w.  To first order
    |a~ - p w| <= |p w| * (|ln w| + 2 + 1) * u = |p w| * (|ln w| + 3) * u,
and |ln w| <= ln n.  |sin'| <= 1, so the value inherits this angle error, plus
the rounding of sin/cos itself, and one ulp of a double in [0.5, 1) is
2**-53 = u.  NumPy's float64 sin/cos are not always libm's: NumPy 1.22-1.26
dispatch to SVML on AVX-512 machines, accurate to 4 ulp (measured here: 2.27
ulp on NumPy 1.23.5, where glibc is off by 0.27), so the reference is allowed
REFERENCE_TRIG_ULPS = 4 ulp for that last step.
So the float64 reference is within ``double_error_bound(positions, d, n)``
of the exact value.
"""
from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

# Under the asan stage's sanitized process (scripts/asan.sh preloads the runtime): its
# allocator's quarantine keeps freed memory resident, and it maps terabytes of shadow.
UNDER_ASAN = "libasan" in os.environ.get("LD_PRELOAD", "")

U64 = 2.0**-53  # unit roundoff of float64; also 1 ulp of a double in [0.5, 1)
U32 = 2.0**-24  # unit roundoff of float32; also 1 ulp of a float32 in [0.5, 1)

# sinpe's own double values (before the final rounding to the output dtype).
# DESIGN.md section 1 allows, and csrc/ uses, angle addition with exact
# restarts: p = p0 + r, value = sin(p0 w) cos(r w) + cos(p0 w) sin(r w), the four
# factors evaluated at the double angles fl(p0 w~), fl(r w~), each within
# SINCOS_ERROR of the sin/cos of that double angle.  Against the direct
# evaluation this changes two things:
# * the angle: both products use the same w~, so the w error is still
#   |p w| (|ln w| + 2) u, but two products are rounded instead of one:
#   (|p0| + |r|) w u.  Blocks are aligned to absolute positions, so for p >= 0
#   |p0| + |r| = |p|, while for p < 0 the anchor p0 lies up to B - 1 rows below
#   p and |p0| + |r| <= |p| + 2 (B - 1) for blocks of B rows.  We assume
#   restarts at least every RESTART_ROWS = 64 rows ("every few rows").
# * the value: |sin| + |cos| <= sqrt(2) on each side, so the four factor
#   errors give <= 2 sqrt(2) SINCOS_ERROR, the two products round by <= u/2
#   each and the sum by <= u (half an ulp of a result that may reach 1).
# SINCOS_ERROR is the documented accuracy of the kernel's own vectorised
# sincos (csrc/core/sincos.h: "absolute error below ~4e-16"); a libm sin/cos
# (< 1 ulp = 2**-53 absolute on [-1, 1]) is inside it.
RESTART_ROWS = 64
SINCOS_ERROR = 4e-16
SINPE_VALUE_ERROR = 2.0 * math.sqrt(2.0) * SINCOS_ERROR / U64 + 2.0  # in units of u (~12.2)

MAX_POSITION = 2**24  # DESIGN.md section 1: the promise holds for |p| <= 2**24


# The tests' optional requirements, by the name pip installs them under (the
# test extra, the README's torch pin, tests/requirements-nodeps.txt), each with
# the module that proves it present.  SINPE_TEST_WITHOUT takes these names.
OPTIONAL = {
    "torch": "torch",
    "x-transformers": "x_transformers",
    "transformers": "transformers",
    "diffusers": "diffusers",
    "rotary-embedding-torch": "rotary_embedding_torch",
    "positional-encodings": "positional_encodings",
    "onnx": "onnx",
    "onnxscript": "onnxscript",
    "ml_dtypes": "ml_dtypes",
    "mpmath": "mpmath",
    "matplotlib": "matplotlib",
    "scikit-learn": "sklearn",
    "mypy": "mypy",
    "mktestdocs": "mktestdocs",
    "nbclient": "nbclient",
    "nbformat": "nbformat",
    "ipykernel": "ipykernel",
    "scipy": "scipy",
}


def allowed_missing() -> set[str]:
    """The requirements SINPE_TEST_WITHOUT (names split by spaces or commas) lets this run lack."""
    return set(re.split(r"[\s,]+", os.environ.get("SINPE_TEST_WITHOUT", "").strip())) - {""}


def pytest_configure(config):
    unknown = sorted(allowed_missing() - OPTIONAL.keys())
    if unknown:  # a misspelt name would otherwise allow nothing, silently
        raise pytest.UsageError(
            f"SINPE_TEST_WITHOUT names {unknown}, which are not optional test requirements; "
            f"known: {', '.join(OPTIONAL)}"
        )
    config.addinivalue_line(
        "markers", "needs(*names): optional test requirements the test uses (conftest.OPTIONAL)"
    )
    config.addinivalue_line(
        "markers", "kernel_path(reason): holds what only sinpe.torch's CPU kernel path has; "
        "skipped with SINPE_TORCH_PATH=device (conftest.kernel_path)"
    )


def pytest_collection_modifyitems(config, items):
    if not DEVICE_PATH_RUN:
        return
    for item in items:
        mark = item.get_closest_marker("kernel_path")
        if mark is not None:
            item.add_marker(pytest.mark.skip(reason=mark.kwargs["reason"]))


def pytest_report_header(config):
    allowed = sorted(allowed_missing())
    if not allowed:
        return None
    absent = [name for name in allowed if not _installed(OPTIONAL[name])]
    return (f"SINPE_TEST_WITHOUT={' '.join(allowed)}: the tests that need "
            f"{', '.join(absent) or 'none of them'} (not installed) skip")


def require(name: str, who: str | None = None):
    """Import the optional test requirement `name` (a key of OPTIONAL) and return its
    module.  When it is not installed: skip if SINPE_TEST_WITHOUT names it, or if it is
    torch and this is not CI (``CI=true``); fail otherwise.  Works at module level."""
    module = OPTIONAL[name]
    whom = f" (for {who})" if who else _for_whom()
    if _installed(module):
        return importlib.import_module(module)  # installed but broken: its error shows
    if name in allowed_missing():
        pytest.skip(f"{name} is not installed, and SINPE_TEST_WITHOUT says this run may lack it"
                    f"{whom}", allow_module_level=True)
    if name == "torch" and os.environ.get("CI", "").lower() != "true":
        pytest.skip(f"torch is not installed (pip install torch==2.13.0){whom}",
                    allow_module_level=True)
    install = "torch==2.13.0" if name == "torch" else f'".[{_extra_of(name)}]"'
    pytest.fail(
        f"{name} cannot be imported (no module {module!r}){' and CI=true' if name == 'torch' else ''}: "
        f"`pip install {install}`, or name it in SINPE_TEST_WITHOUT for a run that cannot install it",
        pytrace=False,
    )


def _extra_of(name: str) -> str:
    """The extra of pyproject.toml that requires `name` (test, when none names it)."""
    text = (Path(__file__).resolve().parents[1] / "pyproject.toml").read_text()
    for extra, requirements in re.findall(r"^(\w+) = \[(.*?)\]", text, re.M | re.S):
        if re.search(rf'"{re.escape(name)}\b', requirements):
            return extra
    return "test"


def _installed(module: str) -> bool:
    """Whether the module is installed: found, and not merely a namespace package (tests/ is
    on sys.path, so without diffusers installed `import diffusers` would find the folder
    tests/diffusers, which has no __init__.py on purpose, as an empty namespace package)."""
    spec = importlib.util.find_spec(module)
    return spec is not None and spec.origin not in (None, "namespace")


def _for_whom() -> str:
    """" (for tests/test_x.py)" when require is called by a test module's own code: pytest
    reports a module-level skip at the line that raised it, here in conftest."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    path = frame.f_globals.get("__file__", "") if frame is not None else ""
    return f" (for tests/{os.path.basename(path)})" if os.path.basename(path).startswith("test_") else ""


def optional(name: str):
    """Like require, but None (no skip) when the requirement is absent and
    SINPE_TEST_WITHOUT names it: for a module where only some cases need it."""
    if name in allowed_missing() and not _installed(OPTIONAL[name]):
        return None
    return require(name)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    # torch first: a package that needs torch (x-transformers) is not installed without it
    needs = ["torch"] if "torch" in getattr(item, "fixturenames", ()) else []
    needs += [name for mark in item.iter_markers("needs") for name in mark.args]
    for name in needs:
        require(name, f"tests/{item.path.name}")


@pytest.fixture(scope="session")
def torch():
    return require("torch")


@pytest.fixture(scope="module")
def one_torch_thread(torch):
    """torch on one thread for a module of tiny models: a second thread only costs
    (waits; on a loaded machine a lot)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def require_module(dotted: str):
    """Import a module of an optional test requirement by its import name
    ("transformers.models.llama.modeling_llama"): require()'s rules for the package."""
    top = dotted.split(".")[0]
    require(next(name for name, module in OPTIONAL.items() if module == top))
    return importlib.import_module(dotted)


def require_torch():
    return require("torch")


def freq64(d: int, n: float) -> np.ndarray:
    """w for every column j of d (pairs share a frequency), float64, as DESIGN.md says."""
    k = np.arange(d) // 2
    return np.power(np.float64(n), -(2.0 * k) / d)


def table64(positions, d: int, n: float) -> np.ndarray:
    """Float64 reference: row i is position positions[i]; sin on even, cos on odd columns."""
    p = np.asarray(positions, dtype=np.float64)[:, None]
    angles = p * freq64(d, n)
    even = (np.arange(d) % 2) == 0
    return np.where(even, np.sin(angles), np.cos(angles))


# NumPy's documented worst case for its vectorised float64 sin/cos (SVML).
REFERENCE_TRIG_ULPS = 4.0


def double_error_bound(
    positions, d: int, n: float, value_error: float = REFERENCE_TRIG_ULPS
) -> np.ndarray:
    """Absolute error bound of a direct double-precision evaluation (module docstring).

    ``value_error`` is the error of the final sin/cos evaluation in units of u
    (REFERENCE_TRIG_ULPS for NumPy's ``np.sin``/``np.cos``, 1 for a libm call).
    """
    p = np.abs(np.asarray(positions, dtype=np.float64))[:, None]
    w = freq64(d, n)
    return p * w * (np.abs(np.log(w)) + 3.0) * U64 + value_error * U64


def sinpe_double_bound(positions, d: int, n: float) -> np.ndarray:
    """Bound of |sinpe's double value - exact|, element-wise (see RESTART_ROWS above)."""
    p = np.abs(np.asarray(positions, dtype=np.float64))[:, None]
    w = freq64(d, n)
    split = np.where(np.asarray(positions)[:, None] < 0, 2.0 * (RESTART_ROWS - 1), 0.0)
    return (p * (np.abs(np.log(w)) + 3.0) + split) * w * U64 + SINPE_VALUE_ERROR * U64


def numpy_add(x: np.ndarray, table: np.ndarray, scale: float = 1.0, padding=None) -> np.ndarray:
    """What ``add_`` must leave in ``x``, computed by NumPy itself (DESIGN section 1).

    ``x * x.dtype.type(scale) + table`` (``x + table`` when ``scale == 1``), in
    ``x``'s own arithmetic, where ``table`` is sinpe's table in ``x.dtype``
    already broadcast against ``x``; rows flagged by ``padding`` (shape
    ``x.shape[:-1]``) get ``x * scale`` only.  Returns a new array of ``x``'s
    dtype (byte order included).
    """
    native = x.astype(x.dtype.newbyteorder("=")) if not x.dtype.isnative else x
    table = np.asarray(table).astype(native.dtype)
    with np.errstate(all="ignore"):
        scaled = native * native.dtype.type(scale) if scale != 1 else native.copy()
        out = scaled + table
    if padding is not None:
        out = np.where(np.asarray(padding)[..., None], scaled, out)
    return out.astype(x.dtype)


def bits_of(a: np.ndarray) -> np.ndarray:
    """The elements' bit patterns (native order), to compare arrays bit for bit (NaNs too)."""
    native = np.ascontiguousarray(a).astype(a.dtype.newbyteorder("="))
    return native.view({2: np.uint16, 4: np.uint32, 8: np.uint64}[native.dtype.itemsize])


def assert_bits_equal(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    """Bit identity, element by element, except that a NaN only has to be a NaN
    (NumPy, torch and ml_dtypes disagree on NaN payloads in the 16-bit types)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (what, got.dtype, want.dtype)
    got_nan = np.isnan(np.asarray(got, dtype=np.float64))
    want_nan = np.isnan(np.asarray(want, dtype=np.float64))
    assert np.array_equal(got_nan, want_nan), f"{what}: NaNs differ"
    g, w = bits_of(got), bits_of(want)
    bad = (g != w) & ~want_nan
    assert not bad.any(), (
        f"{what}: {int(bad.sum())} of {bad.size} elements differ in their bits, first at "
        f"{np.argwhere(bad)[0].tolist()}: got {got[tuple(np.argwhere(bad)[0])]!r}, "
        f"want {want[tuple(np.argwhere(bad)[0])]!r}"
    )


def positions_of(offset: int, L: int) -> np.ndarray:
    return np.arange(offset, offset + L, dtype=np.int64)


def sample_offsets(rng: np.random.Generator, L: int, count: int) -> list[int]:
    """Offsets of L-row windows covering both ends of +-2**24, zero, and random spots."""
    fixed = [
        -MAX_POSITION,  # first window starts at the lowest supported position
        MAX_POSITION - L + 1,  # last window ends exactly at 2**24
        -L // 2,  # straddles zero
        0,
        4096 - L // 2,
        -(2**20),
    ]
    lo, hi = -MAX_POSITION, MAX_POSITION - L + 1
    return fixed + [int(o) for o in rng.integers(lo, hi + 1, size=count)]


def run_python(argv, cwd, env=None) -> subprocess.CompletedProcess[str]:
    """Run this interpreter with argv in cwd (a tmp dir, so the installed sinpe is
    imported, not the source tree's uncompiled one), headless (Agg) unless ``env``
    (added to the environment) says otherwise."""
    return subprocess.run(
        [sys.executable, *argv],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "MPLBACKEND": "Agg", **(env or {})},
    )


# -- the kernel's rotations, counted ---------------------------------------------------------


def count_kernel_rotations(monkeypatch) -> list:
    """A list that gets the layout of each rotation sinpe's kernel computes through
    sinpe.torch's private entries from now on: one per ``_rotate_by`` call, and one per
    tensor of an ``_apply_rotary`` call that wrote (a decoding step's query and key in
    one call)."""
    import sinpe

    rotations: list = []
    rotate_by, apply_rotary = sinpe._core._rotate_by, sinpe._core._apply_rotary

    def counted_rotate_by(*args, **kwargs):
        rotations.append(kwargs.get("layout", "concatenated"))
        return rotate_by(*args, **kwargs)

    def counted_apply_rotary(*args):
        done = apply_rotary(*args)
        if done:
            layout = "interleaved" if args[7] == 0 else "concatenated"  # sinpe_layout codes
            rotations.extend([layout] * (1 if args[2] is None else 2))
        return done

    monkeypatch.setattr(sinpe._core, "_rotate_by", counted_rotate_by)
    monkeypatch.setattr(sinpe._core, "_apply_rotary", counted_apply_rotary)
    return rotations


# -- exact comparisons of tensors ---------------------------------------------------------


def bits(torch, tensor):
    """The tensor's bits as integers of its width, for exact comparisons."""
    return tensor.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[tensor.element_size()])


def bfloat16_rounded_once(torch, values: np.ndarray):
    """float64 values rounded once (to nearest, ties to even) to bfloat16.

    torch's float64 -> bfloat16 conversion goes through float32 and can round
    twice.  Here the 8 significant bits are rounded in float64 (np.rint: ties
    to even); the result is exact in float32 and in bfloat16.
    """
    values = np.asarray(values, dtype=np.float64)
    tiny = np.abs(values[values != 0])
    assert tiny.size == 0 or tiny.min() >= 2.0**-126  # normal bfloat16 numbers only
    mantissa, exponent = np.frexp(values)  # values = mantissa * 2**exponent, 0.5 <= |m| < 1
    rounded = np.ldexp(np.rint(np.ldexp(mantissa, 8)), exponent - 8)
    return torch.from_numpy(rounded.astype(np.float32)).to(torch.bfloat16)


# -- sinpe.torch's two paths --------------------------------------------------------------
#
# CPU tensors take the kernel path (sinpe's C kernel writes them: caches and tables are the
# exact double values rounded once, positions are read on the host and refused beyond
# MAX_POSITION, the rotary module keeps tables of rows); every other device takes the device
# path (sinpe/torch/_angles.py: device operations alone), and CPU tensors too in a run with
# SINPE_TORCH_PATH=device (read at import; in the process, _tensors.DEVICE_PATH_FORCED).
# The suite runs on either.  A test of what only the kernel path has carries kernel_path(...)
# and is skipped in a device-path run; one whose claim the device path meets otherwise (NaN
# for positions out of range, no kernel call at all) expects by_path(kernel=..., device=...);
# a test of a contract both keep compares through same_or_within_device_bound: the kernel's
# bits, or the device path's bound.

DEVICE_PATH_RUN = os.environ.get("SINPE_TORCH_PATH", "") == "device"


def kernel_path(holds: str, device_path: str):
    """The mark of a test (or a parametrization) that holds ``holds``, something only
    sinpe.torch's CPU kernel path has, skipped in a run with SINPE_TORCH_PATH=device with
    the reason "holds the CPU kernel's own <holds> (the device path <device_path>)"."""
    return pytest.mark.kernel_path(
        reason=f"holds the CPU kernel's own {holds} (the device path {device_path})")


def on_device_path() -> bool:
    """Whether sinpe.torch serves CPU tensors by its device path (a run with
    SINPE_TORCH_PATH=device; in the process, ``_tensors.DEVICE_PATH_FORCED``)."""
    from sinpe.torch import _tensors

    return bool(_tensors.DEVICE_PATH_FORCED)


def by_path(kernel, device):
    """What a test expects on the path it runs on: ``kernel`` on the kernel path,
    ``device`` on the device path."""
    return device if on_device_path() else kernel


# The device path's values (sinpe/torch/_angles.py): each is within half an ulp of its
# dtype plus DEVICE_EXCESS of the exact value (the tables' Q1.31 rounding; the kernel's,
# within half an ulp); the attention factor ``scale``'s mantissa is folded into the tables,
# its power of two applied exactly at the end, so the excess scales by that power of two.
DEVICE_EXCESS = 2.0**-30


def device_excess(scale: float = 1.0) -> float:
    """How much further than half an ulp from the exact value a cache value of sinpe.torch
    times ``scale`` may lie on the path the test runs: 0 on the kernel path,
    ``DEVICE_EXCESS`` times the power of two of ``scale`` (2**e for scale = m 2**e, m in
    (0.5, 1], as _angles splits it) on the device path."""
    if not on_device_path():
        return 0.0
    mantissa, exponent = math.frexp(abs(scale))
    return math.ldexp(DEVICE_EXCESS, exponent - 1 if mantissa == 0.5 else exponent)


def _spacing(torch, dtype):
    """(eps, tiny) of ``dtype``: one ulp of 1, and the smallest spacing of its values
    (below its normal numbers), so that one ulp of ``v`` is at most
    ``eps * |v| + tiny`` and rounding ``v`` moves it by at most half that."""
    info = torch.finfo(dtype)
    return info.eps, info.eps * info.smallest_normal


def device_cache_bound(torch, want, scale: float = 1.0):
    """How far (element-wise, float64) the device path's cache value may lie from the
    kernel's ``want`` (caches times ``scale``, in their dtype): the kernel's is within half
    an ulp of the exact value, the device path's within half an ulp plus
    ``device_excess(scale)``, so they differ by at most one ulp of the dtype plus twice the
    excess (which also covers the kernel's double error, below 2**-49)."""
    eps, tiny = _spacing(torch, want.dtype)
    return eps * want.double().abs() + tiny + 2 * device_excess(scale)


def device_rotation_bound(torch, x, cos, sin, rotated, scale: float = 1.0):
    """How far (element-wise, float64) the device path's ``x * C + rotated * S`` may lie
    from the kernel's, where ``cos``, ``sin`` are the kernel's caches (times ``scale``)
    and ``rotated`` is ``rotate_half(x)`` of the layout.

    Each cache value may move by ``device_cache_bound`` (d_c, d_s).  Evaluated in the
    caches' dtype (x's; float64 for exact rotations), each of the three roundings (the two
    products, the sum) of two values that differ by D differs by at most D plus one ulp
    of the larger, so with e, t the dtype's ``_spacing`` and
    ``A = |x| (|C| + d_c) + |rot x| (|S| + d_s)`` (the largest sum):
        |x| d_c + |rot x| d_s + 2 e (1 + e) A + 3 t
    (torch's 16-bit ops round through float32: within the (1 + e)).  Caches wider than x
    (the exact rotation, in float64) add the one rounding of the result to x's dtype:
    ``e_x (1 + e)**2 A + t_x``.
    """
    d_c = device_cache_bound(torch, cos, scale)
    d_s = device_cache_bound(torch, sin, scale)
    ax, ar = x.double().abs(), rotated.double().abs()
    largest = ax * (cos.double().abs() + d_c) + ar * (sin.double().abs() + d_s)
    eps, tiny = _spacing(torch, cos.dtype)
    bound = ax * d_c + ar * d_s + 2 * eps * (1 + eps) * largest + 3 * tiny
    if cos.dtype != x.dtype:
        eps_x, tiny_x = _spacing(torch, x.dtype)
        bound = bound + eps_x * (1 + eps) ** 2 * largest + tiny_x
    return bound


def same_or_within_device_bound(torch, got, want, bound=None, scale: float = 1.0) -> bool:
    """``got`` against the kernel's ``want`` (a cache of sinpe.torch, or a value computed
    from its caches): the same dtype and shape, and on the kernel path the same bits; on
    the device path NaN where ``want`` is NaN and ``|got - want| <= bound`` element-wise
    (default: ``device_cache_bound(torch, want, scale)``; a rotation's:
    ``device_rotation_bound``)."""
    if got.dtype != want.dtype or got.shape != want.shape:
        return False
    if not on_device_path():
        return torch.equal(bits(torch, got.contiguous()), bits(torch, want.contiguous()))
    if bound is None:
        bound = device_cache_bound(torch, want, scale)
    g, w = got.double(), want.double()
    nan = w.isnan()
    if not torch.equal(g.isnan(), nan):
        return False
    return bool(((g - w).abs() <= bound)[~nan].all())


def refused_or_nan(torch, call, match: str) -> None:
    """Positions beyond +-MAX_POSITION alone: ``call()`` raises sinpe's ValueError
    (matching ``match``) on the kernel path, which reads them on the host; on the device
    path, which reads none, every value of the tensors it returns is NaN."""
    if not on_device_path():
        with pytest.raises(ValueError, match=match):
            call()
        return
    got = call()
    for tensor in got if isinstance(got, (tuple, list)) else (got,):
        assert isinstance(tensor, torch.Tensor) and tensor.isnan().all(), tensor
