# The C library without Python, for the scripts that build it alone (fuzz/run.sh,
# scripts/platforms.sh): every .c file under csrc/ but the CPython binding's folder,
# csrc/python/, the only one that includes Python.h.  Sourced; then
#   mapfile -t sources < <(library_sources "$root")
library_sources() { # $1: the repository root; prints one path a line, sorted
  find "$1/csrc" -name '*.c' -not -path "$1/csrc/python/*" | LC_ALL=C sort
}
