"""The C kernels of rack-aware range placement (assignors/racks_range.py, assignors/_placement.c):
the one part of the build that pyproject.toml does not declare. pip compiles them with gcc and
Python's headers (scripts/bootstrap installs gcc)."""

import hashlib
from pathlib import Path

from setuptools import Extension, setup

SOURCE = "assignors/_placement.c"
# The module carries the SHA-256 of the source it was built from (``_placement.SOURCE``):
# tests/unit/test_placement_native.py fails on a build older than the source beside it.
DIGEST = hashlib.sha256(Path(__file__).parent.joinpath(SOURCE).read_bytes())

setup(
    ext_modules=[
        Extension(
            "assignors._placement",
            sources=[SOURCE],
            define_macros=[("PLACEMENT_SOURCE", f'"{DIGEST.hexdigest()}"')],
            extra_compile_args=["-O2", "-Wall", "-Werror"],
        )
    ]
)
