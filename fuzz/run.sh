#!/usr/bin/env bash
# Builds the fuzz target with the C library (csrc/ without the CPython
# binding's csrc/python/: csrc/library.sh) under AddressSanitizer,
# UndefinedBehaviorSanitizer and LeakSanitizer, with the release build's
# flags, and runs it:
#   kernels   fuzz/fuzz_kernels.c   sinpe_run (sinpe.h), every knob of the plan: tables, adds,
#                                   RoPE caches, grids, positions, padding, frequencies,
#                                   dtypes, strides, inputs inside outputs, threads, cancel
#             fuzz/fuzz_pick.h      the call an input describes
#             fuzz/fuzz_checks.h    the checks: bytes, values, companions, identities, aliasing
#             fuzz/fuzz_model.h     what sinpe.h promises: valid calls, values, add arithmetic
#             fuzz/fuzz_common.h    input reader, element formats, memory layouts
#   fuzz/driver.c                   the plain driver, linked with a target (fuzz/fuzz_target.h)
#                                   in place of libFuzzer
#
#   fuzz/run.sh                       # 180 s; libFuzzer if clang has it, else the plain driver
#   SINPE_FUZZ_SECONDS=600 fuzz/run.sh
#   SINPE_FUZZ_ENGINE=plain fuzz/run.sh    # gcc, seeded random inputs (what CI runs: 60 s)
#   fuzz/run.sh crash-1234...         # replay inputs (e.g. a crash file libFuzzer wrote)
#   SINPE_FUZZ_TARGETS="kernels ..." fuzz/run.sh   # the targets to run (fuzz/fuzz_NAME.c; default kernels),
#                                     # the time split evenly between them
#
# SINPE_FUZZ_SEED fixes the seed (default 1, so a CI run is reproducible).
# SINPE_FUZZ_CFLAGS: more compiler flags, appended to the kernels' and the
# targets' (scripts/platforms.sh: -DSINPE_FORCE_PORTABLE=1, MSVC's fallbacks).
# Build and corpora (one per target) go to build/fuzz/ (ignored by git).
# Every target runs even if an earlier one fails; the exit status is the
# first failure's.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out="${SINPE_FUZZ_DIR:-$root/build/fuzz}"
seconds="${SINPE_FUZZ_SECONDS:-180}"
seed="${SINPE_FUZZ_SEED:-1}"
read -r -a targets <<<"${SINPE_FUZZ_TARGETS:-kernels}"
for target in "${targets[@]}"; do
  [ -f "$root/fuzz/fuzz_$target.c" ] || { echo "fuzz/run.sh: no target '$target' (fuzz/fuzz_$target.c; there is kernels)" >&2; exit 2; }
done
# the time split between the targets (at least 1 s each)
share=$(( seconds / ${#targets[@]} ))
[ "$share" -ge 1 ] || share=1

# shellcheck source=csrc/library.sh
. "$root/csrc/library.sh"
mapfile -t sources < <(library_sources "$root")
# setup.py's flags (the code paths that ship), plus the sanitizers and -g.
flags=(-O3 -std=c11 -ffp-contract=off -fno-math-errno -g -fno-omit-frame-pointer
       -fsanitize=address,undefined -fno-sanitize-recover=all -pthread -I"$root/csrc")
read -r -a extra_flags <<<"${SINPE_FUZZ_CFLAGS:-}"
flags+=(${extra_flags[@]+"${extra_flags[@]}"})

engine="${SINPE_FUZZ_ENGINE:-}"
mkdir -p "$out"
if [ -z "$engine" ]; then
  if command -v clang >/dev/null && echo 'int LLVMFuzzerTestOneInput(const char *d, long n){return 0;}' |
       clang -fsanitize=fuzzer -x c - -o "$out/probe" 2>/dev/null; then
    engine=libfuzzer
  else
    engine=plain
  fi
fi

export ASAN_OPTIONS="detect_leaks=1:allocator_may_return_null=1:halt_on_error=1${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
# abort_on_error: the plain driver prints the input on SIGABRT (gcc's UBSan
# runtime calls no death callback)
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:abort_on_error=1${UBSAN_OPTIONS:+:$UBSAN_OPTIONS}"

# The kernels are compiled once per engine and linked into every target;
# a target is its .c file, which includes the fuzz/*.h it needs.
objects="$out/objects-$engine"
rm -rf "$objects"
mkdir -p "$objects"
if [ "$engine" = libfuzzer ]; then
  cc=clang
  # SINPE_FUZZ_LARGE=0: libFuzzer's mutations favour 0xff bytes, which pick
  # the largest size class; it would run a few inputs a second.  The plain
  # driver (CI) draws that class at random, rarely.
  kernel_flags=(-fsanitize=fuzzer-no-link)
  target_flags=(-DSINPE_FUZZ_LARGE=0 -fsanitize=fuzzer)
else
  cc="${CC:-gcc}"
  kernel_flags=()
  target_flags=("$root/fuzz/driver.c")
fi
# one object per source, named by its path under csrc/ (two folders may hold a file of one
# name); as many compilers at a time as there are CPUs (sanitized -O3 builds take minutes)
compilers=$(nproc 2>/dev/null || echo 1)
running=()
built=0
compile() { # $1: source, $2: object, then the flags
  local source=$1 object=$2
  shift 2
  "$cc" "$@" -c "$source" -o "$object" &
  running+=($!)
  if [ "${#running[@]}" -ge "$compilers" ]; then
    wait "${running[0]}" || built=1
    running=("${running[@]:1}")
  fi
}
wait_compilers() {
  for pid in ${running[@]+"${running[@]}"}; do wait "$pid" || built=1; done
  running=()
  [ "$built" -eq 0 ] || { echo "fuzz/run.sh: the library did not compile" >&2; exit 1; }
}
object_of() { local object=${1#"$root/csrc/"}; echo "$2/${object//\//_}.o"; }

# A run executes one SIMD level's loops (csrc/kernels/levels/<name>.c): the best this CPU
# has, or the one SINPE_SIMD names.  That level's file is compiled with the sanitizers,
# the others plainly at -O0 (linked, never run): a sanitized -O3 build of one level file
# takes about 100 s here, of the rest a few seconds.  The level is asked of the library
# itself, built plainly first with a probe that prints it.
plain="$out/objects-unsanitized"
rm -rf "$plain"
mkdir -p "$plain"
plain_flags=(-O0 -std=c11 -ffp-contract=off -fno-math-errno -pthread -I"$root/csrc"
             ${extra_flags[@]+"${extra_flags[@]}"})
for source in "${sources[@]}"; do
  compile "$source" "$(object_of "$source" "$plain")" "${plain_flags[@]}"
done
wait_compilers
printf '#include "kernels/kernels.h"\n#include <stdio.h>\nint main(void) { puts(sinpe_dispatch_name(sinpe_dispatch_level())); return 0; }\n' >"$plain/probe.c"
"$cc" "${plain_flags[@]}" "$plain/probe.c" "$plain"/*.o -lm -o "$plain/probe"
level=$("$plain/probe")
echo "fuzz/run.sh: the $level level runs here: its loops sanitized, the other levels' plain"
# (the level's file first: the longest compile, beside which the others run)
chosen="$root/csrc/kernels/levels/$level.c"
ordered=("$chosen")
for source in "${sources[@]}"; do [ "$source" = "$chosen" ] || ordered+=("$source"); done
for source in "${ordered[@]}"; do
  if [[ "$source" == */kernels/levels/*.c && "$source" != "$chosen" ]]; then
    cp "$(object_of "$source" "$plain")" "$(object_of "$source" "$objects")"
  else
    compile "$source" "$(object_of "$source" "$objects")" "${flags[@]}" \
      ${kernel_flags[@]+"${kernel_flags[@]}"}
  fi
done
wait_compilers

run_target() {
  local target=$1
  shift
  local binary="$out/fuzz_$target-$engine"
  rm -f "$binary"
  "$cc" "${flags[@]}" "$root/fuzz/fuzz_$target.c" "${target_flags[@]}" "$objects"/*.o -lm -o "$binary" || return
  if [ $# -gt 0 ]; then
    "$binary" "$@"
  elif [ "$engine" = libfuzzer ]; then
    mkdir -p "$out/corpus/$target"
    echo "fuzz/run.sh: $target: libFuzzer, ${share}s, seed $seed, corpus $out/corpus/$target"
    "$binary" -max_total_time="$share" -seed="$seed" -max_len=256 -timeout=60 \
      -rss_limit_mb=4096 -print_final_stats=1 "$out/corpus/$target"
  else
    echo "fuzz/run.sh: $target: plain driver ($cc), ${share}s, seed $seed"
    "$binary" "$share" "$seed"
  fi
}

status=0
for target in "${targets[@]}"; do
  code=0
  run_target "$target" "$@" || code=$?
  if [ "$code" -ne 0 ]; then
    echo "fuzz/run.sh: $target FAILED (exit status $code)" >&2
    [ "$status" -ne 0 ] || status=$code
  fi
done
exit "$status"
