"""examples/work-distribution runs unattended: workers added, killed and stopped; every unit
ends owned exactly once and no unit is ever owned by two workers."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DEMO = Path(__file__).resolve().parents[2] / "examples" / "work-distribution" / "demo.py"


def test_demo_hands_units_off_incrementally() -> None:
    out = subprocess.run(
        [
            sys.executable,
            str(DEMO),
            "--headless",
            "--workers",
            "3",
            "--units",
            "12",
            "--script",
            "3:add,5:kill,7:stop,15:quit",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=DEMO.parent,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert "units owned at the end: 12/12" in lines, out.stdout
    assert "units owned by two workers at once: 0" in lines, out.stdout
    assert any("killed (kill -9)" in line for line in lines), out.stdout
    assert any(re.search(r"w\d revoked", line) for line in lines), out.stdout
    handoffs = int(re.search(r"hand-offs: (\d+)", out.stdout).group(1))
    assert handoffs >= 6, out.stdout  # the newcomer's share, the stopped and the killed worker's
