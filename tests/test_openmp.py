"""sinpe.torch runs large calls on torch's own OpenMP threads (GNU libgomp):
the bits are those of sinpe's own threads, sharing can be undone, a library
that is not a loaded OpenMP runtime is refused and changes nothing, a forked
child goes back to sinpe's own threads, and SINPE_OWN_THREADS=1 keeps them.
The speed this is for (a loop alternating torch's ops and sinpe's) is
measured by ``python -m sinpe.bench --hot-path``, not here."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from conftest import require_torch

import sinpe
from sinpe import _core

torch = require_torch()
import sinpe.torch as st  # noqa: E402
from sinpe._openmp import torch_openmp_library  # noqa: E402

LIBRARY = torch_openmp_library(torch)
# torch's Linux wheels run their ops on a bundled libgomp: there sinpe must share it
LINUX_OPENMP = (sys.platform.startswith("linux")
                and "ATen parallel backend: OpenMP" in torch.__config__.parallel_info())
needs_library = pytest.mark.skipif(LIBRARY is None and not LINUX_OPENMP,
                                   reason="torch runs on no GNU OpenMP runtime here")


@pytest.fixture
def shared_then_restored():
    """Sharing torch's runtime during the test, the state before it afterwards."""
    before = _core._sharing_openmp()
    threads = sinpe.get_num_threads()
    _core._share_openmp(LIBRARY)
    yield
    sinpe.set_num_threads(threads)
    _core._share_openmp(LIBRARY if before else None)


def test_importing_sinpe_torch_shares_torchs_runtime_on_linux():
    if not LINUX_OPENMP:
        pytest.skip("torch's ops do not run on OpenMP threads here")
    assert LIBRARY is not None and os.path.basename(LIBRARY).startswith("libgomp")
    assert _core._sharing_openmp()
    assert sinpe.show_config(print_it=False)["thread_pool"] == "torch's OpenMP threads"


def calls():
    """Large calls of every kind that split into chunks (name, function of nothing)."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((8, 512, 256), np.float32)
    q = rng.standard_normal((2, 8, 700, 64), np.float32)
    t = torch.from_numpy(rng.standard_normal((4, 8, 300, 128), np.float32)).to(torch.bfloat16)
    return [
        ("encode", lambda: sinpe.encode(3000, 256)),
        ("encode f16 offset", lambda: sinpe.encode(2500, 96, 500.0, offset=-77, dtype=np.float16)),
        ("add_", lambda: sinpe.add_(x.copy(), scale=3.0)),
        ("add_ seq-first", lambda: sinpe.add_(x.copy(), axis=0)),
        ("rope_", lambda: sinpe.rope_(q.copy(), offset=11)),
        ("rope_ exact", lambda: sinpe.rope_(q.copy(), exact=True)),
        ("sinpe.torch.rope_ bfloat16", lambda: st.rope_(t.clone()).view(torch.int16).numpy()),
        ("sinpe.torch.add_ bfloat16", lambda: st.add_(t.clone()).view(torch.int16).numpy()),
    ]


@needs_library
@pytest.mark.parametrize("threads", [2, 3, 5])
def test_calls_on_the_shared_team_have_the_bits_of_sinpes_own_threads(shared_then_restored,
                                                                     threads):
    sinpe.set_num_threads(1)
    alone = [(name, fn()) for name, fn in calls()]
    sinpe.set_num_threads(threads)
    for _ in range(3):
        _core._share_openmp(LIBRARY)
        assert _core._sharing_openmp()
        shared = [fn() for _, fn in calls()]
        _core._share_openmp(None)
        assert not _core._sharing_openmp()
        own = [fn() for _, fn in calls()]
        for (name, want), got_shared, got_own in zip(alone, shared, own):
            assert got_shared.tobytes() == want.tobytes(), name
            assert got_own.tobytes() == want.tobytes(), name


@needs_library
def test_sharing_again_and_undoing_it_are_idempotent(shared_then_restored):
    for _ in range(10):  # the same runtime is kept once, however often it is shared
        _core._share_openmp(LIBRARY)
    assert _core._sharing_openmp()
    _core._share_openmp(None)
    _core._share_openmp(None)
    assert not _core._sharing_openmp()
    assert sinpe.show_config(print_it=False)["thread_pool"] == "sinpe's own threads"


@pytest.mark.parametrize("library, error, match", [
    (3, TypeError, "library must be a str or None"),
    (b"libgomp.so.1", TypeError, "library must be a str or None"),
    ("no-such-library.so", ValueError, "library='no-such-library.so'"),
    ("libm.so.6", ValueError, "GOMP_parallel"),  # loaded, but no OpenMP runtime
    ("lib\0gomp", ValueError, "null"),
])
def test_a_library_that_is_not_a_loaded_openmp_runtime_is_refused(shared_then_restored,
                                                                  library, error, match):
    for before in (LIBRARY, None):
        _core._share_openmp(before)
        with pytest.raises(error, match=match):
            _core._share_openmp(library)
        assert _core._sharing_openmp() == (before is not None)  # nothing changed


FORKED = textwrap.dedent(r"""
    import os, sys, numpy as np, sinpe, torch, sinpe.torch
    from sinpe import _core
    assert _core._sharing_openmp()
    sinpe.set_num_threads(2)
    want = sinpe.encode(4000, 256)
    sinpe.add_(np.zeros((8, 512, 256), np.float32))  # the team has run a call
    pid = os.fork()
    if pid == 0:
        # libgomp's threads do not exist here: a call must not wait for them
        ok = not _core._sharing_openmp() and np.array_equal(sinpe.encode(4000, 256), want)
        os._exit(0 if ok else 3)
    _, status = os.waitpid(pid, 0)
    print("child", os.waitstatus_to_exitcode(status))
    print("parent", _core._sharing_openmp() and np.array_equal(sinpe.encode(4000, 256), want))
""")


@needs_library
@pytest.mark.skipif(not hasattr(os, "fork"), reason="no fork here")
@pytest.mark.slow
def test_a_forked_child_goes_back_to_sinpes_own_threads(tmp_path):
    result = subprocess.run([sys.executable, "-c", FORKED], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["child", "0", "parent", "True"], result.stdout


@needs_library
@pytest.mark.slow
def test_sinpe_own_threads_in_the_environment_keeps_sinpes_threads(tmp_path):
    code = "import sinpe.torch; from sinpe import _core; print(_core._sharing_openmp())"
    for value, want in (("1", "False"), ("0", "True")):
        env = dict(os.environ, SINPE_OWN_THREADS=value)
        result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                timeout=120, cwd=tmp_path, env=env)
        assert result.returncode == 0, result.stderr
        assert result.stdout.strip() == want
