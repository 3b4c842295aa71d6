"""Builds the sinpe._core extension; metadata lives in pyproject.toml."""
import copy
import os
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy
from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

# Portable flags only: a wheel must run on any x86-64/aarch64, so no
# -march=native; the SIMD loops are compiled per level and chosen at run time
# (csrc/kernels/levels/*.c, csrc/kernels/dispatch.c).  No contraction of
# a*b+c into an FMA (-ffp-contract=off, MSVC's /fp:precise), so every path
# gives the same bits.
FLAGS = {
    "unix": ["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno"],
    "mingw32": ["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno"],
    "msvc": ["/O2", "/std:c11", "/fp:precise"],
}


# No debug information unless CFLAGS asks for it (scripts/asan.sh does; CFLAGS=-g for a
# debugger's line numbers): Python's own flags carry -g, which makes GCC half again as
# slow on a SIMD level file, for the same machine code.
if not any(flag.startswith("-g") and flag != "-g0" for flag in os.environ.get("CFLAGS", "").split()):
    for kind in ("unix", "mingw32"):
        FLAGS[kind] = FLAGS[kind] + ["-g0"]


def simd_levels():
    """(name, CPU features) of each SIMD level in sinpe.h's SINPE_SIMD_LIST, in order."""
    text = Path("csrc/sinpe.h").read_text()
    start = text.index("#define SINPE_SIMD_LIST(X)")
    body = text[start:text.index("\n\n", start)]
    return [(name, set(re.findall(r"SINPE_CPU_(\w+)", cpu)))
            for name, cpu in re.findall(r"X\(\w+, (\w+), ([^)]*)\)", body)]


def msvc_arch(cpu):
    """MSVC's /arch: flag for the widest instructions among a level's CPU features, or None."""
    for feature, flag in (("AVX512", "/arch:AVX512"), ("AVX2", "/arch:AVX2")):
        if feature in cpu:
            return flag
    return None


# Each SIMD level's source file and its CPU features.
LEVELS = {f"csrc/kernels/levels/{name}.c": cpu for name, cpu in simd_levels()}

# GCC and Clang get a level file's instructions from its pragmas; MSVC has
# no such pragma and needs the flag on the file.
LEVEL_FLAGS = {
    "msvc": {source: [msvc_arch(cpu)] for source, cpu in LEVELS.items() if msvc_arch(cpu)},
}


def build_jobs():
    """How many files to compile at once: SINPE_BUILD_JOBS, else the CPUs this process may use."""
    jobs = os.environ.get("SINPE_BUILD_JOBS")
    if jobs:
        return max(1, int(jobs))
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def compile_in_parallel(compiler, jobs, slow_first):
    """Make a distutils compiler build its objects `jobs` at a time.

    setuptools compiles one extension's sources one after another, and sinpe is
    one extension of about forty files: on a machine of several cores most of
    them would idle.  This is CCompiler.compile with its loop over the objects
    run on a thread pool (each object is a compiler process of its own).  Only
    for compilers that implement _compile (GCC, Clang, MinGW); MSVC's compile
    is its own and stays as it is.  The sources in `slow_first` start first: a
    long file started last would leave the other cores idle at the end.
    """

    # SINPE_BUILD_NOT_RUN: SIMD levels this machine will not run (scripts/levels_not_run.sh),
    # whose files are compiled at -O0 and without the -fsanitize flags CFLAGS may give:
    # linked, never run (scripts/asan.sh; .ci/run's builds for other Pythons).  A sanitized
    # level file takes minutes to compile, an optimised one most of a minute.
    unsanitized = {f"csrc/kernels/levels/{name}.c"
                   for name in os.environ.get("SINPE_BUILD_NOT_RUN", "").split()}
    plain = copy.copy(compiler)
    plain.compiler_so = [arg for arg in compiler.compiler_so
                         if not arg.startswith(("-fsanitize", "-fno-sanitize"))]

    def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=False,
                extra_preargs=None, extra_postargs=None, depends=None):
        macros, objects, extra_postargs, pp_opts, build = compiler._setup_compile(
            output_dir, macros, include_dirs, sources, depends, extra_postargs)
        cc_args = compiler._get_cc_args(pp_opts, debug, extra_preargs)

        def one(obj):
            src, ext = build[obj]
            if Path(src).as_posix() in unsanitized:
                plain._compile(obj, src, ext, cc_args, extra_postargs + ["-O0"], pp_opts)
            else:
                compiler._compile(obj, src, ext, cc_args, extra_postargs, pp_opts)

        with ThreadPoolExecutor(jobs) as pool:
            # list() so that the first failure is raised here
            list(pool.map(one, sorted((obj for obj in objects if obj in build),
                                      key=lambda obj: Path(build[obj][0]).as_posix() not in slow_first)))
        return objects  # all of them, as CCompiler.compile does, built now or before

    compiler.compile = compile


class BuildExt(build_ext):
    """Flags by compiler type, the per-file flags of the SIMD levels, and a parallel compile."""

    def build_extension(self, ext):
        kind = self.compiler.compiler_type
        jobs = build_jobs()
        if kind in ("unix", "mingw32") and jobs > 1:
            # the SIMD level files compile every kernel once more each: seconds, not tenths
            compile_in_parallel(self.compiler, jobs, LEVELS)
        ext.extra_compile_args = FLAGS.get(kind, FLAGS["unix"])
        per_file = LEVEL_FLAGS.get(kind, {})
        if "msvc" == kind and self.plat_name in ("win-arm64", "win32"):
            per_file = {}  # no x86-64 levels to build there
        for source, flags in per_file.items():
            if source in ext.sources:
                ext.sources = [s for s in ext.sources if s != source]
                ext.extra_objects = list(ext.extra_objects or []) + self.compiler.compile(
                    [source], output_dir=self.build_temp, macros=ext.define_macros,
                    include_dirs=ext.include_dirs, extra_postargs=ext.extra_compile_args + flags,
                    depends=ext.depends, debug=self.debug)
        super().build_extension(ext)


def tree(pattern):
    """The files of csrc/ and its folders, as forward-slash paths on every OS."""
    return sorted(path.as_posix() for path in Path("csrc").rglob(pattern))


core = Extension(
    "sinpe._core",
    sources=tree("*.c"),
    # headers too, so that changing one rebuilds the files that include it
    depends=tree("*.h"),
    include_dirs=["csrc", numpy.get_include()],
    define_macros=[("NPY_TARGET_VERSION", "NPY_1_23_API_VERSION")],
)

setup(ext_modules=[core], cmdclass={"build_ext": BuildExt})
