"""The core, the legacy bridge and the security model are pure: no IO, asyncio, grpc, wall clock, randomness or
logging (the core returns log events; the runtime writes them once durable).

Every import in every module of coordinator/core and legacy_bridge, and of the shard factory and
the harness that put them together (including imports inside functions), must come from an
allow-list of side-effect-free modules. Dependencies point one way: the bridge imports the core,
never the reverse.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PURE_PACKAGES = [
    ROOT / "coordinator" / "core",
    ROOT / "legacy_bridge",
    ROOT / "coordinator" / "security",
]
PURE_MODULES = [ROOT / "coordinator" / "factory.py", ROOT / "coordinator" / "harness.py"]

ALLOWED = {
    # standard library, side-effect free
    "__future__",
    "abc",
    "base64",
    "bisect",
    "collections",
    "dataclasses",
    "enum",
    "functools",
    "hashlib",
    "heapq",
    "hmac",
    "itertools",
    "math",
    "operator",
    "re",
    "struct",
    "typing",
    "types",
    "zlib",
    # third-party pure computation
    "re2",
    "orjson",
    # our own pure modules
    "coordinator",
    "assignors.api",
    "assignors.validation",
    "assignors.uniform",
    "assignors.range",
    "legacy_bridge",
}
FORBIDDEN_EXAMPLES = [
    "asyncio",
    "grpc",
    "socket",
    "sqlite3",
    "threading",
    "random",
    "time",
    "os",
    "datetime",
    "uuid",
    "ulid",
    "secrets",
    "subprocess",
    "io",
    "pathlib",
    "logging",
]


def _imports(path: Path) -> list[tuple[int, str]]:
    tree = ast.parse(path.read_text(), filename=str(path))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # relative import inside the package
                continue
            out.append((node.lineno, node.module or ""))
    return out


def _allowed(module: str) -> bool:
    if module in ("coordinator.factory", "coordinator.harness"):
        return True  # pure too (checked here), and they only compose the core and the bridge
    if module.startswith("coordinator.") and not module.startswith(
        ("coordinator.core", "coordinator.security")
    ):
        return False  # the core may not reach into runtime/server/cli
    return any(module == a or module.startswith(a + ".") for a in ALLOWED)


def _modules() -> list[Path]:
    packages = [p for pkg in PURE_PACKAGES if pkg.exists() for p in pkg.rglob("*.py")]
    return sorted(packages + PURE_MODULES)


@pytest.mark.parametrize(
    "path", sorted((ROOT / "coordinator" / "core").rglob("*.py")), ids=lambda p: p.name
)
def test_the_core_does_not_depend_on_the_bridge_or_the_factory(path: Path) -> None:
    """The bridge plugs into the core (ClassicGroupSupport); the core never names it, nor the
    security model (which is built on the core's records)."""
    bad = [
        f"line {line}: import {mod}"
        for line, mod in _imports(path)
        if mod.startswith(("legacy_bridge", "coordinator.security"))
        or mod in ("coordinator.factory", "coordinator.harness")
    ]
    assert not bad, f"{path.relative_to(ROOT)} imports {bad}"


def test_there_is_something_to_check() -> None:
    assert len(_modules()) >= 10


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_imports_only_pure_modules(path: Path) -> None:
    bad = [f"line {line}: import {mod}" for line, mod in _imports(path) if not _allowed(mod)]
    assert not bad, f"{path.relative_to(ROOT)} imports impure modules: {bad}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_module_does_not_open_files_or_read_the_clock(path: Path) -> None:
    tree = ast.parse(path.read_text())
    calls = [
        n.func.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Name)
        and n.func.id in {"open", "input", "print", "exec", "eval"}
    ]
    assert not calls, f"{path.relative_to(ROOT)} calls {calls}"


@pytest.mark.parametrize("module", FORBIDDEN_EXAMPLES)
def test_allow_list_rejects_io_clock_and_random_modules(module: str) -> None:
    assert not _allowed(module)
    assert not _allowed(module + ".sub")


def test_allow_list_rejects_runtime_and_server() -> None:
    assert not _allowed("coordinator.runtime.store")
    assert not _allowed("coordinator.server")
    assert _allowed("coordinator.core.records")
