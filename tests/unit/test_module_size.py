"""No module of ours over 900 lines outside generated code: a module that long has a seam to
split along (Kafka's own split of the group coordinator is the model). Every Python file git
tracks counts, except the generated protobuf modules and the tests (tests/, client/tests/:
stories and tables, read one test at a time).

EXCEPTIONS lists the modules someone is splitting right now, each with who: remove a line when
its module is split (the test fails on an exception that no longer needs to be one)."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 900
EXCEPTIONS: dict[str, str] = {}


def measured() -> dict[str, int]:
    names = subprocess.run(
        ["git", "ls-files", "*.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    sizes = {}
    for name in names:
        path = ROOT / name
        if "_pb2" in path.name or name.startswith(("tests/", "client/tests/")) or not path.exists():
            continue
        sizes[name] = len(path.read_text().splitlines())
    return sizes


def test_no_module_is_over_the_limit() -> None:
    sizes = measured()
    assert len(sizes) > 200
    over = {name: n for name, n in sizes.items() if n > LIMIT and name not in EXCEPTIONS}
    assert not over, f"over {LIMIT} lines: {over}"


def test_every_exception_is_still_needed() -> None:
    sizes = measured()
    stale = {name: sizes.get(name) for name in EXCEPTIONS if sizes.get(name, 0) <= LIMIT}
    assert not stale, f"split (remove from EXCEPTIONS): {stale}"
