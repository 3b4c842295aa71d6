#!/bin/bash
# The vector conversions of the 16-bit formats (csrc/kernels/vec.h) at every
# x86-64 SIMD level this CPU has, against float16.h's scalar definitions for
# all 2**32 floats and all 2**16 16-bit values (scripts/convert_check.c).
# Run by hand after changing csrc/kernels/vec.h, csrc/kernels/isa/ or float16.h;
# 1-2 minutes a level.
#   bash scripts/convert.sh [LEVEL...]   (default: every level the CPU has)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ "$(uname -m)" = x86_64 ] || { echo "convert.sh: x86-64 only (elsewhere the loops use float16.h)"; exit 0; }
lscpu | grep -m1 'Model name' || true

# level: the level file's macros (csrc/kernels/levels/) and the instructions its pragma enables
declare -A flags cpu
flags[baseline]=""
flags[avx2]="-DSINPE_ISA_AVX2=1 -mavx2 -mf16c"
flags[avx512]="-DSINPE_ISA_AVX512=1 -mavx2 -mf16c -mavx512f -mavx512bw -mavx512dq -mavx512vl"
flags[avx512_bf16]="${flags[avx512]} -DSINPE_ISA_BF16=1 -mavx512bf16"
cpu[baseline]=sse2
cpu[avx2]="avx2 f16c"
cpu[avx512]="avx512f avx512bw avx512dq avx512vl"
cpu[avx512_bf16]="avx512f avx512bw avx512dq avx512vl avx512_bf16"

levels=("$@")
[ ${#levels[@]} -gt 0 ] || levels=(baseline avx2 avx512 avx512_bf16)
status=0
for level in "${levels[@]}"; do
    [ -n "${cpu[$level]:-}" ] || { echo "convert.sh: no level '$level'" >&2; exit 2; }
    missing=
    for f in ${cpu[$level]}; do grep -qw "$f" /proc/cpuinfo || missing="$missing $f"; done
    if [ -n "$missing" ]; then
        echo "$level: skipped, the CPU lacks$missing"
        continue
    fi
    common=(-O2 -std=c11 -ffp-contract=off -fno-math-errno -I"$root/csrc")
    # shellcheck disable=SC2086  # flags are words
    gcc "${common[@]}" ${flags[$level]} -c -o "$work/level.o" "$root/scripts/convert_level.c"
    gcc "${common[@]}" -o "$work/check" "$root/scripts/convert_check.c" "$work/level.o" -lm
    "$work/check" "$level" || status=1
done
exit $status
