"""The layering holds by itself: import-linter's contracts (``[tool.importlinter]`` in
pyproject.toml, run by ``scripts/test`` after mypy) pass on the tree, and each one catches the
violation it exists for (a copy of the packages with one bad module per contract).

The contracts replace the hand-written purity test: the core, the legacy bridge, the security
model and the shard factory import nothing that does IO, reads a clock, draws randomness or
logs; the runtime's driver and what runs it on virtual time (the harness, the simulator's
world) do no IO either (they may log: the driver writes the core's events once durable); the
core never names the bridge; the layers point one way (runtime < server < cli, observability <
server, the Kafka listener's upstream side < the listener); the client stands alone; no import
cycles. What imports cannot show — a call to ``open``, ``print``, ``input``, ``exec`` or
``eval`` in a pure module — is checked here too.
"""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LINT = Path(sys.executable).parent / "lint-imports"
PURE = ["coordinator/core", "legacy_bridge", "coordinator/security"]
PURE_MODULES = [
    "coordinator/factory.py",
    "coordinator/harness.py",
    "coordinator/virtual.py",
    "coordinator/runtime/driver.py",
    "coordinator/runtime/own_commands.py",
    "coordinator/runtime/timing.py",
    "coordinator/runtime/turns.py",
    "coordinator/runtime/requests.py",
]
PACKAGES = {  # top-level package -> where it lives
    "coordinator": ROOT / "coordinator",
    "assignors": ROOT / "assignors",
    "legacy_bridge": ROOT / "legacy_bridge",
    "kip848": ROOT / "client" / "src" / "kip848",
}

# What the hand-written purity test refused; every pure contract must forbid each.
IMPURE = [
    "asyncio", "grpc", "socket", "sqlite3", "threading", "random", "time", "os", "datetime",
    "uuid", "ulid", "secrets", "subprocess", "io", "pathlib", "logging",
]  # fmt: skip
PURE_CONTRACTS = ["core-pure", "bridge-pure", "security-pure", "factory-pure"]

# contract id -> (a module added to the copy, its source): one violation each.
VIOLATIONS = {
    "core-pure": ("coordinator/core/bad_clock.py", "import time\n"),
    "bridge-pure": ("legacy_bridge/bad_runtime.py", "from coordinator.runtime import clock\n"),
    "security-pure": ("coordinator/security/bad_server.py", "import coordinator.server.api\n"),
    "factory-pure": ("coordinator/bad_factory_dep.py", "import socket\n"),
    "driver-sans-io": ("coordinator/runtime/bad_driver_dep.py", "import threading\n"),
    "runtime-below-server": ("coordinator/runtime/bad_up.py", "import coordinator.server.api\n"),
    "server-below-cli": ("coordinator/server/bad_cli.py", "import coordinator.cli.output\n"),
    "observability-below-server": (
        "coordinator/observability/bad_server.py",
        "from coordinator.server import rpc\n",
    ),
    "observability-wired-in-once": (
        "coordinator/server/bad_metrics.py",
        "from coordinator.observability import metrics\n",
    ),
    "h2-without-forwarding": ("coordinator/server/h2_extra.py", "from . import forwarding\n"),
    "kafka-upstream-below-listener": (
        "coordinator/server/kafka/upstream/bad_listener.py",
        "from ..listener import KafkaConnection\n",
    ),
    "client-alone": ("kip848/client/bad_core.py", "import coordinator.core.errors\n"),
    "member-sans-io": ("kip848/client/types_extra.py", "import asyncio\n"),
    "no-cycles": ("assignors/bad_cycle.py", "import assignors.api\n"),
}
# The factory's and the member's violations need an import from the checked module itself.
IMPORTED_BY = {
    "factory-pure": ("coordinator/factory.py", "from coordinator import bad_factory_dep\n"),
    "driver-sans-io": ("coordinator/runtime/driver.py", "from . import bad_driver_dep\n"),
    "member-sans-io": ("kip848/client/types.py", "from . import types_extra\n"),
    "no-cycles": ("assignors/api.py", "from assignors import bad_cycle\n"),
    "h2-without-forwarding": ("coordinator/server/h2grpc.py", "from . import h2_extra\n"),
}


def config() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]


def lint(cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    return subprocess.run(
        [str(LINT), "--config", str(cwd / "pyproject.toml"), "--no-cache"],
        cwd=cwd, env=dict(env, COLUMNS="400"), capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_the_contracts_hold() -> None:
    out = lint(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Contracts: {len(config()['contracts'])} kept, 0 broken." in out.stdout


def test_every_pure_contract_forbids_what_the_purity_test_refused() -> None:
    contracts = {c["id"]: c for c in config()["contracts"]}
    for cid in PURE_CONTRACTS:
        missing = sorted(set(IMPURE) - set(contracts[cid]["forbidden_modules"]))
        assert not missing, f"{cid} does not forbid {missing}"
    sans_io = set(IMPURE) - {"logging"}  # the driver writes the core's events once durable
    missing = sorted(sans_io - set(contracts["driver-sans-io"]["forbidden_modules"]))
    assert not missing, f"driver-sans-io does not forbid {missing}"
    assert set(VIOLATIONS) == set(contracts), "every contract has its violation below"


def test_each_contract_catches_its_violation(tmp_path: Path) -> None:
    for name, path in PACKAGES.items():
        shutil.copytree(path, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    for path, source in VIOLATIONS.values():
        (tmp_path / path).write_text(source)
    for path, line in IMPORTED_BY.values():
        (tmp_path / path).write_text((tmp_path / path).read_text() + line)
    out = lint(tmp_path, tmp_path)
    assert out.returncode == 1, out.stdout + out.stderr
    names = {c["id"]: c["name"] for c in config()["contracts"]}
    text = re.sub(r"\s+", " ", out.stdout)
    for cid in VIOLATIONS:
        assert f"{names[cid]} BROKEN" in text, (cid, out.stdout)
    assert f"Contracts: 0 kept, {len(VIOLATIONS)} broken." in text


def _pure_files() -> list[Path]:
    files = [p for d in PURE for p in (ROOT / d).rglob("*.py")]
    return sorted(files + [ROOT / m for m in PURE_MODULES])


@pytest.mark.parametrize("path", _pure_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_pure_modules_call_no_io_builtin(path: Path) -> None:
    calls = [
        f"line {n.lineno}: {n.func.id}()"
        for n in ast.walk(ast.parse(path.read_text()))
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in {"open", "input", "print", "exec", "eval", "breakpoint"}
    ]
    assert not calls, f"{path.relative_to(ROOT)} calls {calls}"
