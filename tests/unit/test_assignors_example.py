"""The example plugin package (examples/roundrobin-assignor): installed the way pip would install
it, it is found through its entry point, listed by ``kip848 assignors list``, passes the
conformance kit, and its own test suite passes."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from assignors.cli import main as cli_main
from assignors.conformance import run_conformance
from assignors.registry import load_assignors

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "roundrobin-assignor"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:  # type: ignore[type-arg]
    """The example's dist-info (name, version, entry points from its pyproject) on sys.path."""
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    info = tmp_path / f"{project['name'].replace('-', '_')}-{project['version']}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {project['name']}\nVersion: {project['version']}\n"
    )
    lines = [f"{k} = {v}" for k, v in project["entry-points"]["kip848.assignors"].items()]
    (info / "entry_points.txt").write_text("[kip848.assignors]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(EXAMPLE / "src"))
    return project


def test_found_through_its_entry_point(installed: dict) -> None:  # type: ignore[type-arg]
    uniform, roundrobin = load_assignors(["uniform", "roundrobin"])
    assert (uniform.name, roundrobin.name) == ("uniform", "roundrobin")
    assert type(roundrobin).__module__ == "kip848_roundrobin"


def test_listed_with_its_package(installed: dict, capsys: pytest.CaptureFixture[str]) -> None:  # type: ignore[type-arg]
    assert cli_main(["list"]) == 0
    out = capsys.readouterr().out
    source = f"entry point {installed['name']} {installed['version']}"
    assert f"roundrobin  {source}  Deals partitions round robin over the subscribers;" in out


def test_passes_the_conformance_kit(installed: dict) -> None:  # type: ignore[type-arg]
    report = run_conformance("roundrobin", examples=60)
    assert report.ok, report.render()
    assert report.figures.homogeneous_unbalanced == 0  # balanced when homogeneous
    assert report.figures.leave_lost_homogeneous > 0  # not sticky: a figure, not a failure


def test_its_own_test_suite_passes() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
        cwd=EXAMPLE,
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert "4 passed" in out.stdout
