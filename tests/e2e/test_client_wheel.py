"""The client distribution on its own: the ``kip848-client`` wheel that ``scripts/bootstrap``
builds into ``client/dist`` installs offline into a fresh virtualenv holding nothing else of
ours, and the README's hello-member example, run there, joins a group on a real
``kip848 serve``.

The wheel must match the sources (``client/src``) file for file: if this fails after an edit
of the client, run ``bash scripts/bootstrap`` again.
"""

from __future__ import annotations

import email
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import ServerProcess

ROOT = Path(__file__).resolve().parents[2]
DIST = ROOT / "client" / "dist"
SOURCES = ROOT / "client" / "src"
OURS = ("coordinator", "assignors", "legacy_bridge", "bench")


def hello_member(readme: Path) -> str:
    [code] = re.findall(r"## Hello, member.*?```python\n(.*?)```", readme.read_text(), re.S)
    return code


def the_wheel() -> Path:
    wheels = sorted(DIST.glob("kip848_client-*.whl"))
    assert len(wheels) == 1, f"expected one client wheel in {DIST} (run scripts/bootstrap)"
    return wheels[0]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without anything that would reach our sources or another index."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "PYTHON", "VIRTUAL_ENV"))
    }
    return dict(env, PIP_CONFIG_FILE=os.devnull, **extra)


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh virtualenv with the client wheel installed from client/dist only."""
    home = tmp_path_factory.mktemp("client-venv")
    subprocess.run(
        [sys.executable, "-m", "venv", str(home / "venv")],
        check=True,
        timeout=120,
        cwd=home,
        env=clean_env(),
    )
    python = home / "venv" / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "--quiet", "--isolated", "--no-index",
         "--find-links", str(DIST), "kip848-client"],
        check=True, timeout=300, cwd=home, env=clean_env(),
    )  # fmt: skip
    return python


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    s = ServerProcess(tmp_path_factory.mktemp("client-wheel") / "data", clock="system")
    try:
        yield s
    finally:
        assert s.stop() == 0, s.stderr_text()


def test_the_wheel_is_the_sources_and_needs_only_grpcio_and_protobuf() -> None:
    with zipfile.ZipFile(the_wheel()) as wheel:
        names = set(wheel.namelist())
        [info] = {n.split("/")[0] for n in names if ".dist-info/" in n}
        metadata = email.message_from_bytes(wheel.read(f"{info}/METADATA"))
        shipped = {n for n in names if not n.startswith(info)}
        sources = {
            p.relative_to(SOURCES).as_posix(): p.read_bytes()
            for p in SOURCES.rglob("*")
            if p.is_file() and p.suffix in (".py", ".pyi", ".typed")
        }
        assert shipped == set(sources), "the wheel is stale: run scripts/bootstrap"
        for name, data in sources.items():
            assert wheel.read(name) == data, f"{name} differs: run scripts/bootstrap"
    assert {name.split("/")[0] for name in shipped} == {"kip848"}
    assert "kip848/v1/consumer_group_pb2_grpc.pyi" in shipped and "kip848/py.typed" in shipped
    requires = [r for r in metadata.get_all("Requires-Dist") or [] if "extra ==" not in r]
    assert sorted(re.split(r"[<>=~ ;]", r)[0] for r in requires) == ["grpcio", "protobuf"]
    assert metadata["Version"] == _source_version()


def _source_version() -> str:
    text = (SOURCES / "kip848" / "client" / "__init__.py").read_text()
    [version] = re.findall(r'^__version__ = "([^"]+)"$', text, re.M)
    return version


def test_the_fresh_venv_holds_the_client_and_its_two_dependencies_only(venv: Path) -> None:
    listed = subprocess.run(
        [str(venv), "-m", "pip", "list", "--isolated", "--format", "json"],
        check=True, capture_output=True, text=True, timeout=60, env=clean_env(),
    )  # fmt: skip
    installed = {re.sub(r"[-_.]+", "-", d["name"]).lower() for d in json.loads(listed.stdout)}
    installed -= {"pip", "setuptools"}  # what venv puts in every virtualenv
    assert installed == {"kip848-client", "grpcio", "protobuf", "typing-extensions"}
    probe = (
        "import importlib.util, kip848.client, kip848.v1.consumer_group_pb2_grpc;"
        f"print([m for m in {OURS!r} if importlib.util.find_spec(m)], kip848.client.__file__)"
    )
    out = subprocess.run(
        [str(venv), "-c", probe], check=True, capture_output=True, text=True, timeout=60,
        cwd=venv.parent.parent, env=clean_env(),
    ).stdout.split()  # fmt: skip
    assert out[0] == "[]", out  # no coordinator, assignors, legacy_bridge to import
    assert out[1].startswith(str(venv.parent.parent)), out  # the venv's copy, not our sources


def test_the_hello_member_example_runs_from_the_wheel(venv: Path, server: ServerProcess) -> None:
    code = hello_member(ROOT / "client" / "README.md")
    assert code == hello_member(ROOT / "README.md"), "the two READMEs show the same example"
    assert len([line for line in code.splitlines() if line.strip()]) <= 20
    server.create_topic("orders", 3)
    code = code.replace("127.0.0.1:9094", server.address).replace("sleep(30)", "sleep(0)")
    out = subprocess.run(
        [str(venv), "-c", code], capture_output=True, text=True, timeout=60, check=True,
        cwd=venv.parent.parent, env=clean_env(),
    )  # fmt: skip
    lines = out.stdout.splitlines()
    assert lines == [
        "assigned ['orders-0', 'orders-1', 'orders-2']",
        "revoked ['orders-0', 'orders-1', 'orders-2']",
    ], out
