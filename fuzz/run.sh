#!/usr/bin/env bash
# Builds fuzz/fuzz_kernels.c with the C kernels (csrc/ without the CPython
# binding) under AddressSanitizer, UndefinedBehaviorSanitizer and
# LeakSanitizer, with the release build's flags, and runs it.
#
#   fuzz/run.sh                       # 180 s; libFuzzer if clang has it, else the plain driver
#   SINPE_FUZZ_SECONDS=600 fuzz/run.sh
#   SINPE_FUZZ_ENGINE=plain fuzz/run.sh    # gcc, seeded random inputs (what CI runs)
#   fuzz/run.sh crash-1234...         # replay inputs (e.g. a crash file libFuzzer wrote)
#
# SINPE_FUZZ_SEED fixes the seed (default 1, so a CI run is reproducible).
# Build and corpus go to build/fuzz/ (ignored by git).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="${SINPE_FUZZ_DIR:-$root/build/fuzz}"
seconds="${SINPE_FUZZ_SECONDS:-180}"
seed="${SINPE_FUZZ_SEED:-1}"
mkdir -p "$out/corpus"

sources=()
for source in "$root"/csrc/*.c; do
  [ "$(basename "$source")" = module.c ] || sources+=("$source")
done
# setup.py's flags (the code paths that ship), plus the sanitizers and -g.
flags=(-O3 -std=c11 -ffp-contract=off -fno-math-errno -g -fno-omit-frame-pointer
       -fsanitize=address,undefined -fno-sanitize-recover=all -pthread -I"$root/csrc")

engine="${SINPE_FUZZ_ENGINE:-}"
if [ -z "$engine" ]; then
  if command -v clang >/dev/null && echo 'int LLVMFuzzerTestOneInput(const char *d, long n){return 0;}' |
       clang -fsanitize=fuzzer -x c - -o "$out/probe" 2>/dev/null; then
    engine=libfuzzer
  else
    engine=plain
  fi
fi

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

if [ "$engine" = libfuzzer ]; then
  # SINPE_FUZZ_LARGE=0: libFuzzer's mutations favour 0xff bytes, which pick
  # the 32 MB size class; it would run a few inputs a second.  The plain
  # driver (CI) draws that class at random, 1 input in 128.
  clang "${flags[@]}" -DSINPE_FUZZ_LARGE=0 -fsanitize=fuzzer "$root/fuzz/fuzz_kernels.c" "${sources[@]}" -lm \
    -o "$out/fuzz_kernels"
  if [ $# -gt 0 ]; then
    exec "$out/fuzz_kernels" "$@"
  fi
  echo "fuzz/run.sh: libFuzzer, ${seconds}s, seed $seed, corpus $out/corpus"
  exec "$out/fuzz_kernels" -max_total_time="$seconds" -seed="$seed" -max_len=256 -timeout=60 \
    -rss_limit_mb=4096 -print_final_stats=1 "$out/corpus"
else
  cc="${CC:-gcc}"
  "$cc" "${flags[@]}" -DSINPE_FUZZ_MAIN "$root/fuzz/fuzz_kernels.c" "${sources[@]}" -lm -o "$out/fuzz_kernels_plain"
  if [ $# -gt 0 ]; then
    exec "$out/fuzz_kernels_plain" "$@"
  fi
  echo "fuzz/run.sh: plain driver ($cc), ${seconds}s, seed $seed"
  exec "$out/fuzz_kernels_plain" "$seconds" "$seed"
fi
