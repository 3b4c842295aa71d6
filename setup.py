"""Builds the sinpe._core extension; metadata lives in pyproject.toml."""
import re
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


# GCC and Clang get a level file's instructions from its pragmas; MSVC has
# no such pragma and needs the flag on the file.
LEVEL_FLAGS = {
    "msvc": {f"csrc/kernels/levels/{name}.c": [msvc_arch(cpu)] for name, cpu in simd_levels()
             if msvc_arch(cpu)},
}


class BuildExt(build_ext):
    """Flags by compiler type, and the per-file flags of the SIMD levels."""

    def build_extension(self, ext):
        kind = self.compiler.compiler_type
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
