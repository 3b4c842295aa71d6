#!/usr/bin/env bash
# The same output bits on every platform: builds the C library (csrc/
# without the CPython binding's csrc/python/: csrc/library.sh) and
# scripts/platforms_check.c with the release flags for every toolchain this
# Debian machine has, runs each build, and holds its hash lines against the
# native gcc build's:
#
#   native    gcc, glibc (the reference)
#   clang     clang, glibc
#   musl      musl-gcc, static
#   aarch64   aarch64-linux-gnu-gcc, run under qemu-aarch64
#   windows   x86_64-w64-mingw32-gcc, static, run under wine64
#   portable  gcc -DSINPE_FORCE_PORTABLE=1 (the fallbacks MSVC builds use)
#   baseline, avx2, avx512   native's binary, run with SINPE_SIMD naming that SIMD level
#             (a level the CPU lacks falls back to the best it has; native
#             runs the best, avx512_bf16 where the CPU has it)
#
# Then the C fuzzer briefly with the portable fallbacks (fuzz/run.sh).
# Prints a table (cases, mismatches, two-thread speed-up) and fails on any
# mismatch, crash, failed check inside the driver (thread counts, streaming,
# concurrent callers), or a thread pool that does not speed a large table up.
#
#   scripts/platforms.sh
#   SINPE_PLATFORMS="native aarch64" scripts/platforms.sh   # a subset (native is always built)
#   SINPE_PLATFORMS_INSTALL=1 scripts/platforms.sh          # apt-get what is missing (so does CI=true)
#   SINPE_PLATFORMS_FUZZ_SECONDS=0 scripts/platforms.sh     # no fuzzing (default 30 s)
#
# The speed-up: the driver times a 16 MB float32 table on 1 and 2 threads,
# and beside it plain arithmetic on the caller alone and on the caller plus
# a helper it wakes, which says what the machine gives two threads at that
# moment (a shared or emulated machine may give them little).  A pool is
# missing when sinpe started no helper thread (the driver counts them), or
# when the table gains less than min_speedup while the arithmetic gains at
# least busy_machine; with less than that the figure says nothing, and the
# script only warns.  A short figure is measured again, twice.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
min_speedup=1.25
busy_machine=1.6

packages=(musl-tools gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user gcc-mingw-w64-x86-64 wine64 clang)
install=0
[ "${SINPE_PLATFORMS_INSTALL:-0}" = 1 ] || [ "${CI:-}" = true ] && install=1
if [ "$install" = 1 ]; then
  missing=()
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
  if [ "${#missing[@]}" -gt 0 ]; then
    sudo=()
    [ "$(id -u)" = 0 ] || sudo=(sudo -n)
    echo "platforms.sh: apt-get install ${missing[*]}"
    "${sudo[@]}" apt-get update -qq &&
      DEBIAN_FRONTEND=noninteractive "${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null ||
      { echo "platforms.sh: apt-get failed" >&2; exit 2; }
  fi
fi

work=$(mktemp -d)
wine=/usr/lib/wine/wine64 # the launcher, not on PATH in Debian's wine64
[ -x "$wine" ] || wine=$(command -v wine64 || command -v wine || echo /usr/lib/wine/wine64)
export WINEDEBUG=-all WINEPREFIX="$work/wine"
cleanup() {
  # the wineserver of our private prefix (it lingers a few seconds)
  if [ -d "$WINEPREFIX" ]; then
    local server
    server=$(command -v wineserver || echo /usr/lib/wine/wineserver64)
    [ -x "$server" ] && "$server" -k 2>/dev/null
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# shellcheck source=csrc/library.sh
. "$root/csrc/library.sh"
mapfile -t sources < <(library_sources "$root")
flags=(-O3 -std=c11 -ffp-contract=off -fno-math-errno -I"$root/csrc")

# name: compiler, its own flags, the command that runs a binary (empty: itself)
declare -A cc extra runner
cc[native]=gcc;                   extra[native]="-pthread"
cc[clang]=clang;                  extra[clang]="-pthread"
cc[musl]=musl-gcc;                extra[musl]="-static -pthread"
cc[aarch64]=aarch64-linux-gnu-gcc; extra[aarch64]="-pthread"; runner[aarch64]="qemu-aarch64 -L /usr/aarch64-linux-gnu"
cc[windows]=x86_64-w64-mingw32-gcc; extra[windows]="-static"; runner[windows]="$wine"
cc[portable]=gcc;                 extra[portable]="-DSINPE_FORCE_PORTABLE=1 -pthread"
cc[baseline]=gcc;                 extra[baseline]="-pthread"; runner[baseline]="env SINPE_SIMD=baseline"
cc[avx2]=gcc;                     extra[avx2]="-pthread"; runner[avx2]="env SINPE_SIMD=avx2"
cc[avx512]=gcc;                   extra[avx512]="-pthread"; runner[avx512]="env SINPE_SIMD=avx512"
# The SIMD levels run native's very binary (the same compiler and flags): one build, not four.
declare -A same_build=([baseline]=native [avx2]=native [avx512]=native)
all="native clang musl aarch64 windows portable baseline avx2 avx512"
read -r -a platforms <<<"native ${SINPE_PLATFORMS:-$all}"
# native once, first
mapfile -t platforms < <(printf '%s\n' "${platforms[@]}" | awk '!seen[$0]++')
for p in "${platforms[@]}"; do
  [ -n "${cc[$p]:-}" ] || { echo "platforms.sh: no platform '$p' (there are: $all)" >&2; exit 2; }
done

# What each platform needs to build and run.
needs() {
  local p=$1 tool
  for tool in ${cc[$p]} ${runner[$p]:-}; do
    case "$tool" in -* | *=*) continue ;; esac
    command -v "$tool" >/dev/null 2>&1 || [ -x "$tool" ] || { echo "$tool"; return; }
  done
  if [ "$p" = aarch64 ] && [ ! -d /usr/aarch64-linux-gnu/lib ]; then echo "libc6-dev-arm64-cross"; fi
}

binary() { # $1: platform (wine runs only what is named .exe)
  local built=${same_build[$1]:-$1}
  if [ "$built" = windows ]; then echo "$work/$built/check.exe"; else echo "$work/$built/check"; fi
}

build() { # $1: platform
  local p=$1
  mkdir -p "$work/$p"
  # shellcheck disable=SC2086  # extra: words
  "${cc[$p]}" "${flags[@]}" ${extra[$p]} -o "$(binary "$p")" "$root/scripts/platforms_check.c" \
    "${sources[@]}" -lm >"$work/$p/build.log" 2>&1
}

run() { # $1: platform, then the driver's arguments; stdout without CRs (Windows)
  local p=$1
  shift
  # shellcheck disable=SC2086  # runner: words
  timeout 600 ${runner[$p]:-} "$(binary "$p")" "$@" 2>>"$work/$p/stderr" | tr -d '\r'
  return "${PIPESTATUS[0]}"
}

status=0
declare -A result
echo "platforms.sh: building ${platforms[*]} (2 at a time)"
start=$SECONDS
for p in "${platforms[@]}"; do
  lacking=$(needs "$p")
  if [ -n "$lacking" ]; then
    result[$p]="skipped: no $lacking"
    continue
  fi
  mkdir -p "$work/$p"
  [ -z "${same_build[$p]:-}" ] || continue
  # at most two builds at once: the machine is shared
  while [ "$(jobs -rp | wc -l)" -ge 2 ]; do wait -n; done
  (build "$p"; echo $? >"$work/$p.built") &
done
wait
for p in "${!same_build[@]}"; do
  [ ! -f "$work/${same_build[$p]}.built" ] || cp "$work/${same_build[$p]}.built" "$work/$p.built"
done
echo "platforms.sh: built in $((SECONDS - start))s"

hashes() { grep -E '^[^ #]+ [0-9a-f]{16}$' "$1"; }

# No fused multiply-add may reach an x86 build: every level must round each
# product (GCC 12 once fused an interleaved add/subtract of products into
# vfmsubadd under -ffp-contract=off, which changed the AVX-512 loops' bits).
fused() { # $1: platform; prints the count of FMA instructions, or nothing
  case "$1" in aarch64) return ;; esac
  command -v objdump >/dev/null || return
  objdump -d "$(binary "$1")" 2>/dev/null | grep -cE $'\t''vfn?m(add|sub)'
}

for p in "${platforms[@]}"; do
  [ -z "${result[$p]:-}" ] || continue
  if [ "$(cat "$work/$p.built")" != 0 ]; then
    echo "--- $p: build failed:"
    cat "$work/${same_build[$p]:-$p}/build.log"
    result[$p]="build failed"
    continue
  fi
  fmas=$(fused "$p")
  if [ -n "$fmas" ] && [ "$fmas" != 0 ]; then
    result[$p]="$fmas fused multiply-adds in the build"
    continue
  fi
  start=$SECONDS
  run "$p" >"$work/$p/out" 2>>"$work/$p/stderr" # with bash's own report of a crash
  code=$?
  took=$((SECONDS - start))
  echo "platforms.sh: $p ran in ${took}s (exit status $code)"
  # what went to stderr, but wine's notes on making its prefix
  grep -v -E '^wine: (created the configuration|configuration in|failed to open .*rundll32)' \
    "$work/$p/stderr" 2>/dev/null | sed "s/^/  $p: /" | head -20
  case $code in
    0) result[$p]=ok ;;
    1) result[$p]="driver checks failed" ;;
    3) result[$p]="crashed (a Windows exception)" ;;
    124) result[$p]="timed out" ;;
    12[5-9] | 1[3-9]?) result[$p]="crashed (signal $((code - 128)))" ;;
    *) result[$p]="failed (exit status $code)" ;;
  esac
  # a run that stopped early without saying so
  [ "$code" != 0 ] || grep -q '^# done' "$work/$p/out" || result[$p]="output incomplete"
done

at_least() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }

# The table: hash lines against native's; the speed-up, measured again (up
# to twice more) when it falls short.
reference="$work/native/out"
notes=()
echo
printf '%-9s %6s %11s %9s %8s  %s\n' platform cases mismatches speed-up machine result
for p in "${platforms[@]}"; do
  cases=- mismatches=- speedup=- machine=- problems=()
  [ "${result[$p]}" = ok ] || problems+=("${result[$p]}")
  if [ -s "$work/$p/out" ] && [ -s "$reference" ]; then
    cases=$(hashes "$work/$p/out" | wc -l)
    # the reference's cases that differ here, or are missing (a crash part way)
    awk 'NR == FNR { ref[$1] = $2; next } { here[$1] = $2 }
         END { for (k in ref) if (!(k in here)) print "missing", k; else if (here[k] != ref[k]) print "differs", k }' \
      <(hashes "$reference") <(hashes "$work/$p/out") | sort >"$work/$p/mismatched"
    mismatches=$(grep -c '^differs' "$work/$p/mismatched")
    missing=$(grep -c '^missing' "$work/$p/mismatched")
    [ "$p" = native ] && mismatches=reference
    [ "$mismatches" = 0 ] || [ "$p" = native ] || problems+=("$mismatches hash mismatches")
    [ "$missing" = 0 ] || problems+=("missing cases: $missing")
  fi
  # a run that crashed before the timing: the timing alone
  if [ -f "$(binary "$p")" ]; then
    grep -q '^# speedup' "$work/$p/out" || run "$p" --timing >>"$work/$p/out" 2>>"$work/$p/stderr"
  fi
  if grep -q '^# speedup' "$work/$p/out" 2>/dev/null; then
    for attempt in 1 2 3; do
      line=$(grep '^# speedup' "$work/$p/out" | sort -k3,3 -g | tail -1) # the best so far
      speedup=$(awk '{ print $3 }' <<<"$line")
      machine=$(awk '{ print $5 }' <<<"$line")
      helpers=$(awk '{ print $7 }' <<<"$line")
      [ "$helpers" = 0 ] || at_least "$speedup" "$min_speedup" || [ "$attempt" = 3 ] && break
      run "$p" --timing >>"$work/$p/out"
    done
    if [ "$helpers" = 0 ]; then
      problems+=("no thread pool: sinpe started no helper thread (2 threads ${speedup}x)")
    elif ! at_least "$speedup" "$min_speedup"; then
      if at_least "$machine" "$busy_machine"; then
        problems+=("no thread pool: 2 threads ${speedup}x while the machine gives them ${machine}x")
      else
        notes+=("warning: $p's speed-up ${speedup}x not judged: the machine gave 2 threads of arithmetic only ${machine}x")
      fi
    fi
  elif [ "${result[$p]}" = ok ]; then
    problems+=("no speed-up line")
  fi
  verdict=ok
  if [ "${#problems[@]}" -gt 0 ]; then
    verdict=$(printf '%s; ' "${problems[@]}")
    verdict=${verdict%; }
    case "$verdict" in skipped*) [ "$install" = 1 ] && status=1 ;; *) status=1 ;; esac
  fi
  [ "$speedup" = - ] || speedup=${speedup}x machine=${machine}x
  printf '%-9s %6s %11s %9s %8s  %s\n' "$p" "$cases" "$mismatches" "$speedup" "$machine" "$verdict"
done
for p in "${platforms[@]}"; do
  [ "$p" != native ] || continue
  for kind in differs missing; do
    list=$(awk -v k="$kind" '$1 == k { printf "%s ", $2 }' "$work/$p/mismatched" 2>/dev/null)
    [ -z "$list" ] || notes+=("$p: $kind: $list")
  done
done
[ "${#notes[@]}" -eq 0 ] || printf '  %s\n' "${notes[@]}"

# The fuzzer on the portable fallbacks (sanitizers, the plain driver).
seconds=${SINPE_PLATFORMS_FUZZ_SECONDS:-30}
if [ "$seconds" -gt 0 ]; then
  echo
  echo "platforms.sh: fuzz/run.sh with -DSINPE_FORCE_PORTABLE=1 for ${seconds}s"
  if SINPE_FUZZ_ENGINE=plain SINPE_FUZZ_SECONDS=$seconds SINPE_FUZZ_CFLAGS=-DSINPE_FORCE_PORTABLE=1 \
    SINPE_FUZZ_DIR="$work/fuzz" "$root/fuzz/run.sh"; then
    echo "fuzz (portable): ok"
  else
    echo "fuzz (portable): FAILED"
    status=1
  fi
fi
exit "$status"
