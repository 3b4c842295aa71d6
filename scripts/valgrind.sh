#!/usr/bin/env bash
# Runs a representative subset of the test suite under valgrind memcheck and
# fails on any invalid read, write or free anywhere in the process, on any
# use of uninitialised memory inside sinpe, and on any definitely lost block
# allocated through sinpe's code.  Uses the installed sinpe (pip install .
# or -e .; with CFLAGS=-g, its reports name sinpe's lines) and the active Python.  About 10-15 minutes on 2 cores.
#
#   scripts/valgrind.sh                              # the default subset
#   scripts/valgrind.sh tests/test_out.py -k strided # other tests / pytest args
#
# PYTHONMALLOC=malloc: every Python object comes from malloc, so valgrind
# sees each one (pymalloc's arenas would hide overruns and confuse the leak
# check).  The log is kept (SINPE_VALGRIND_LOG, default a temporary file).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=$(python -c 'import sys; print(sys.executable)')
work=$(mktemp -d)
log="${SINPE_VALGRIND_LOG:-$work/valgrind.log}"

if [ $# -eq 0 ]; then
  # Not the GIL tests: valgrind runs one thread at a time and switches only
  # now and then, so the counting thread may never run during a call that
  # released the GIL (they failed under valgrind before and after this change).
  set -- "$root/tests/test_adversarial.py" "$root/tests/test_leaks.py" "$root/tests/test_threads.py" \
         "$root/tests/test_properties.py" -k "not gil_is_released"
fi

# Fewer repetitions than the default run: under valgrind each call costs
# ~50x, and valgrind's own leak check needs only a few calls per path.
export SINPE_LEAK_CALLS="${SINPE_LEAK_CALLS:-100}"
export SINPE_HYPOTHESIS="${SINPE_HYPOTHESIS:-quick}"
export PYTHONMALLOC=malloc

echo "valgrind.sh: $python, log $log"
status=0
# From an empty directory: `python -m pytest` puts the working directory on
# sys.path, and the source tree's sinpe/ (without the compiled _core) must
# not shadow the installed one.
(cd "$work" && valgrind --tool=memcheck --suppressions="$root/scripts/valgrind.supp" \
    --leak-check=full --show-leak-kinds=definite --errors-for-leak-kinds=definite \
    --num-callers=40 --fullpath-after= --log-file="$log" \
    "$python" -m pytest -p no:cacheprovider --rootdir "$root" -q "$@") || status=$?

check=0
"$python" - "$log" <<'PY' || check=$?
import re, sys

text = open(sys.argv[1]).read()
# valgrind separates records with an empty "==pid== " line
records = [r for r in re.split(r"\n==\d+== \n", text) if r.strip()]
# sinpe's sources (--fullpath-after= gives full source paths) and its extension, not other
# packages' _core modules (scipy's pybind11 modules leak at import)
ours = re.compile(r"\bcsrc/|\bsinpe/_core\.cpython|\bsinpe_\w+ \(")
invalid, uninit, leaked = [], [], []
for record in records:
    lines = [re.sub(r"^==\d+== ", "", l) for l in record.splitlines()]
    head = next((l for l in lines if l.strip()), "")
    if re.match(r"(Invalid (read|write|free)|Mismatched free|Source and destination overlap)", head):
        invalid.append(record)
    elif re.match(r"(Conditional jump|Use of uninitialised|Syscall param)", head) and ours.search(record):
        uninit.append(record)
    elif "definitely lost" in head and ours.search(record):
        # tracemalloc's own bookkeeping (a traceback entry it keeps for a
        # block sinpe's call allocated) is CPython's, not a block of ours
        first = next((l for l in lines if l.strip().startswith("by ")), "")
        if not re.search(r"(raw_malloc|traceback_new) \(.*_tracemalloc\.c", first):
            leaked.append(record)
summary = re.findall(r"ERROR SUMMARY: .*", text)
lost = re.findall(r"definitely lost: .*", text)
print("valgrind.sh:", summary[-1] if summary else "no ERROR SUMMARY (did valgrind run?)")
print("valgrind.sh: process-wide", lost[-1] if lost else "definitely lost: (none reported)")
print(f"valgrind.sh: invalid accesses: {len(invalid)}, uninitialised values in sinpe: {len(uninit)}, "
      f"definite leaks through sinpe: {len(leaked)}")
for record in invalid + uninit + leaked:
    print(record, "\n")
sys.exit(1 if (invalid or uninit or leaked or not summary) else 0)
PY
if [ "$status" -ne 0 ]; then
  echo "valgrind.sh: pytest failed under valgrind (status $status)" >&2
fi
[ "$check" -eq 0 ] && [ "$status" -eq 0 ]
