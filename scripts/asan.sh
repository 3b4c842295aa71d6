#!/usr/bin/env bash
# Builds sinpe._core with AddressSanitizer + UndefinedBehaviorSanitizer into a
# copy of the source tree (the normal build is never touched) and runs the
# test suite against it with the ASan runtime preloaded into Python.  Any
# sanitizer report aborts the process, so the run fails.
#
#   scripts/asan.sh                 # the whole suite
#   scripts/asan.sh -k threads -x   # extra arguments go to pytest
#
# Needs gcc and, in the active Python: numpy>=2, setuptools and the test
# dependencies (pip install ".[test]" torch==2.13.0).  SINPE_ASAN_DIR picks
# the build directory (default: a fresh temporary one).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${SINPE_ASAN_DIR:-$(mktemp -d)/sinpe-asan}
mkdir -p "$build"

# Copy the whole tree (tests read examples/, docs, configuration), but no
# build products: a normal _core .so would shadow the sanitized one.
(cd "$root" && tar --exclude='./.git' --exclude='*.so' --exclude='__pycache__' --exclude='./build' \
    --exclude='*.egg-info' --exclude='./.venv' --exclude='./.hypothesis' --exclude='./.pytest_cache' \
    --exclude='./.mypy_cache' -cf - .) |
  (cd "$build" && tar -xf -)

cd "$build"
# The interpreter itself, not a wrapper script (a pyenv shim is bash, and a
# preloaded ASan runtime in bash reports bash's own leaks and breaks it).
python=$(python -c 'import sys; print(sys.executable)')
sanitize="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g"
# The SIMD levels this CPU cannot run are never run here: their files are compiled
# without the sanitizers, at -O0 (a sanitized level file takes about 100 s to compile).
# Which ones, an installed sinpe says (the CI venv has this tree's); without one, every
# level is sanitized.
unsanitized=$("$root/scripts/levels_not_run.sh" "$python")
echo "asan.sh: building sinpe._core in $build with $sanitize${unsanitized:+ (not the levels this CPU cannot run: $unsanitized)}"
CC=gcc CFLAGS="$sanitize" LDFLAGS="$sanitize" SINPE_BUILD_NOT_RUN="$unsanitized" \
  "$python" setup.py -q build_ext --inplace >build.log 2>&1 || { cat build.log; exit 1; }

# The ASan runtime must be the first library in the process (Python itself
# is not instrumented), so it is preloaded; libstdc++ with it, or ASan's
# __cxa_throw interceptor finds no real __cxa_throw and aborts on the first
# C++ exception of a pybind11 module (matplotlib's ft2font).  Options, and why:
# - detect_leaks=0: LeakSanitizer at exit reports every allocation CPython,
#   NumPy and torch keep until the end by design (thousands of records, none
#   ours).  Leaks are covered elsewhere: tests/test_leaks.py (refcounts,
#   tracemalloc, RSS), scripts/valgrind.sh (definite leaks with sinpe frames)
#   and fuzz/ (the C kernels alone, where LeakSanitizer is on).
# - allocator_may_return_null=1: a request beyond memory must give NULL (and
#   so MemoryError, which the tests expect) rather than an ASan abort.
# - log_path: reports go to files as well as killing the process, because a
#   process that dies inside pytest's output capture (or a test's child
#   process) takes its stderr with it.  Any report found fails the run.
# - PYTHONMALLOC=malloc: Python objects come from ASan's malloc too, so an
#   overrun of a tuple or a string is caught, not hidden in a pymalloc arena.
logs="$build/sanitizer-logs"
rm -rf "$logs" && mkdir -p "$logs"
export LD_PRELOAD="$(gcc -print-file-name=libasan.so) $(gcc -print-file-name=libstdc++.so)${LD_PRELOAD:+ $LD_PRELOAD}"
export ASAN_OPTIONS="detect_leaks=0:allocator_may_return_null=1:halt_on_error=1:log_path=$logs/asan${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$logs/ubsan${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"
export PYTHONMALLOC=malloc
export PYTHONPATH="$build${PYTHONPATH:+:$PYTHONPATH}"

"$python" - <<'PY'
import os, sinpe._core as core
assert core.__file__.startswith(os.environ["PYTHONPATH"].split(":")[0]), core.__file__
print("asan.sh: testing", core.__file__)
PY
status=0
# --capture=sys: pytest captures Python's sys.stdout/stderr only, so a report
# the sanitizer runtime writes to file descriptor 2 before halting reaches
# this script's output even when log_path is not honoured (UBSan's is not,
# with the ASan runtime preloaded).
"$python" -m pytest --capture=sys "$@" || status=$?

# Warnings ("failed to allocate 0x... bytes" under allocator_may_return_null)
# are expected; errors are not.
reports=$(grep -lE "ERROR: (AddressSanitizer|LeakSanitizer)|runtime error:|CHECK failed" "$logs"/* 2>/dev/null || true)
if [ -n "$reports" ]; then
  for report in $reports; do echo "== $report"; cat "$report"; done
  echo "asan.sh: sanitizer reports above" >&2
  exit 1
fi
echo "asan.sh: no sanitizer reports; pytest exit status $status"
exit "$status"
