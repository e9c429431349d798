"""The C kernels of rack-aware range placement (assignors/racks_range.py, assignors/_placement.c):
the one part of the build that pyproject.toml does not declare. pip compiles them with gcc and
Python's headers (scripts/bootstrap installs gcc)."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "assignors._placement",
            sources=["assignors/_placement.c"],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        )
    ]
)
