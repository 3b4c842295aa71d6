#!/bin/bash
# One core's floor for a float32 table (see scripts/floor.c): the fill, a
# conversion alone, sinpe's product formula and the three-term recurrence,
# each built as sinpe is (no FMA contraction) and again with FMA.
#   bash scripts/floor.sh [ROWS [ROUNDS]]     (default 5000 rows of 512, 41 rounds)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
lscpu | grep -m1 'Model name' || true
# The SIMD level sinpe's clones would pick here (generic tuning, as theirs);
# elsewhere the compiler's default, and FMA where the target has it.
simd= fma=
if [ "$(uname -m)" = x86_64 ]; then
    simd=-mavx2 fma=-mfma
    grep -q avx512f /proc/cpuinfo 2>/dev/null && simd=-mavx512f
fi
for variant in "no FMA:-ffp-contract=off" "FMA:$fma -ffp-contract=fast"; do
    name=${variant%%:*}
    flags=${variant#*:}
    # shellcheck disable=SC2086  # flags are words (or none)
    gcc -O3 $simd $flags -std=c11 -D_POSIX_C_SOURCE=200809L \
        -o "$work/floor" "$here/floor.c" -lm
    echo "== $name ($simd $flags)"
    if command -v taskset >/dev/null; then
        taskset -c 0 "$work/floor" "$@"
    else
        "$work/floor" "$@"
    fi
done
