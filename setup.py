"""Builds the sinpe._core extension; metadata lives in pyproject.toml."""
from glob import glob

import numpy
from setuptools import Extension, setup

# Portable flags only: a wheel must run on any x86-64/aarch64, so no
# -march=native.  -ffp-contract=off keeps a*b+c*d from being fused
# differently in different loops, so every path gives the same bits.
compile_args = ["-O3", "-std=c11", "-ffp-contract=off", "-fno-math-errno"]

core = Extension(
    "sinpe._core",
    sources=[
        "csrc/module.c",
        "csrc/args.c",
        "csrc/plan.c",
        "csrc/run.c",
        "csrc/rows.c",
        "csrc/table.c",
        "csrc/threads.c",
    ],
    # headers too, so that changing one rebuilds the files that include it
    depends=sorted(glob("csrc/*.h")),
    include_dirs=["csrc", numpy.get_include()],
    define_macros=[("NPY_TARGET_VERSION", "NPY_1_23_API_VERSION")],
    extra_compile_args=compile_args,
)

setup(ext_modules=[core])
