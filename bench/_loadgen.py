"""Building the C load generators of ``bench/loadgen/`` (gcc, and libnghttp2 for the gRPC ones).

``scripts/bench`` installs their Debian packages (gcc, libnghttp2-dev). A generator is rebuilt
when its source or one of the shared headers (``bench/loadgen/*.h``) is newer than the binary.
The Kafka-protocol generators (``kafkahb``, ``kafkastorm``) need nothing beyond libc.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

LOADGEN = Path(__file__).resolve().parent / "loadgen"


def build(name: str, *, libs: tuple[str, ...] = ("-lnghttp2",)) -> str:
    """Path of ``bench/loadgen/build/NAME``, compiled from ``bench/loadgen/NAME.c`` if needed
    and linked with ``libs`` (none for a generator that uses only libc)."""
    source = LOADGEN / f"{name}.c"
    binary = LOADGEN / "build" / name
    newest = max(p.stat().st_mtime for p in (source, *LOADGEN.glob("*.h")))
    if not binary.exists() or binary.stat().st_mtime < newest:
        binary.parent.mkdir(exist_ok=True)
        done = subprocess.run(
            ["gcc", "-O2", "-Wall", "-o", str(binary), str(source), *libs],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(
                f"cannot build bench/loadgen/{name}.c (run scripts/bench, which installs gcc"
                f"{' and libnghttp2-dev' if libs else ''}):\n{done.stderr}"
            )
    return str(binary)
