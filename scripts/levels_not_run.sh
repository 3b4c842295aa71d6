#!/usr/bin/env bash
# The SIMD levels (csrc/kernels/levels/<name>.c) that this CPU cannot run, one line,
# space-separated, as an installed sinpe says (show_config's simd_available), asked
# through the Python given ($1, default python).  A build for this machine alone may
# compile them plainly at -O0 (setup.py's SINPE_BUILD_NOT_RUN): linked, never run.
# Without an installed sinpe it prints nothing (every level is built as usual).
#   scripts/levels_not_run.sh [python]
root=$(cd "$(dirname "$0")/.." && pwd)
python=${1:-python}
runs=$(cd / && "$python" -c 'import sinpe; print(*sinpe.show_config(print_it=False)["simd_available"])' 2>/dev/null) ||
  { echo; exit 0; }
levels=""
for level in "$root"/csrc/kernels/levels/*.c; do
  level=$(basename "$level" .c)
  [[ " $runs " == *" $level "* ]] || levels+="${levels:+ }$level"
done
echo "$levels"
