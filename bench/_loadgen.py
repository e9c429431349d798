"""Building the C load generators of ``bench/loadgen/`` (gcc + libnghttp2).

``scripts/bench`` installs their Debian packages (gcc, libnghttp2-dev). A generator is rebuilt
when its source or the shared ``h2client.h`` is newer than the binary.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

LOADGEN = Path(__file__).resolve().parent / "loadgen"


def build(name: str) -> str:
    """Path of ``bench/loadgen/build/NAME``, compiled from ``bench/loadgen/NAME.c`` if needed."""
    source = LOADGEN / f"{name}.c"
    binary = LOADGEN / "build" / name
    newest = max(p.stat().st_mtime for p in (source, LOADGEN / "h2client.h"))
    if not binary.exists() or binary.stat().st_mtime < newest:
        binary.parent.mkdir(exist_ok=True)
        done = subprocess.run(
            ["gcc", "-O2", "-Wall", "-o", str(binary), str(source), "-lnghttp2"],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode:
            raise SystemExit(
                f"cannot build bench/loadgen/{name}.c (run scripts/bench, which installs gcc and "
                f"libnghttp2-dev):\n{done.stderr}"
            )
    return str(binary)
