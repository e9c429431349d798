"""The README's main command, run as written (bound to free ports, data in a temporary
directory): it must serve gRPC and the Kafka protocol on a machine with nothing else running
(it once named an upstream broker that a fresh machine does not have, and exited)."""

from __future__ import annotations

import os
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import grpc
from kafka_support import KafkaClient, request

from kip848.v1 import admin_pb2, admin_pb2_grpc

ROOT = Path(__file__).resolve().parents[2]
START_S = 60.0


def readme_main_command() -> list[str]:
    """The first command of the README's "Two commands" section, after the set-up."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Two commands", 1)[1]
    [first, *_] = re.findall(r"```bash\n(.*?)```", section, re.S)
    command = first.replace("\\\n", " ").strip()
    setup, _, serve = command.partition(" && ")
    assert setup == "bash scripts/bootstrap", command
    return shlex.split(serve)


def test_the_readme_main_command_serves_grpc_and_kafka(tmp_path: Path) -> None:
    argv = readme_main_command()
    assert argv[:2] == [".venv/bin/kip848", "serve"], argv
    assert "--kafka-listen" in argv and "--kafka-upstream" not in argv, argv
    ports = {"127.0.0.1:9094": "127.0.0.1:0", "127.0.0.1:9192": "127.0.0.1:0"}
    args = [ports.get(a, str(tmp_path / "var") if a == "./var" else a) for a in argv[1:]]
    proc = subprocess.Popen(
        [sys.executable, "-m", "coordinator.cli", *args],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT)),
    )
    try:
        assert proc.stdout is not None
        buf = b""
        deadline = time.monotonic() + START_S
        while buf.count(b"\n") < 2 and proc.poll() is None and time.monotonic() < deadline:
            if select.select([proc.stdout], [], [], 0.5)[0]:
                buf += os.read(proc.stdout.fileno(), 4096)
        lines = buf.decode().splitlines()
        assert len(lines) >= 2, (lines, proc.poll())
        assert lines[0].startswith("listening on 127.0.0.1:"), lines
        assert lines[1].startswith("kafka listening on 127.0.0.1:"), lines
        grpc_address = lines[0].removeprefix("listening on ")
        kafka_address = lines[1].removeprefix("kafka listening on ")
        with grpc.insecure_channel(grpc_address) as channel:
            admin = admin_pb2_grpc.AdminServiceStub(channel)
            while code := admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5).error_code:
                assert code == 14 and time.monotonic() < deadline, code  # loading, bounded
                time.sleep(0.05)
        kafka = KafkaClient(kafka_address)
        versions = kafka.call(request(18, 3, client_software_name="t", client_software_version="1"))
        kafka.close()
        assert versions.error_code == 0
        served = {int(k.api_key) for k in versions.api_keys}
        assert {3, 8, 9, 10, 11, 12, 13, 14, 68, 69} <= served  # group APIs and Metadata
        assert (tmp_path / "var").is_dir()
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(30)
    assert rc == 0, proc.stderr.read().decode() if proc.stderr else rc


def test_where_things_are_names_every_package_and_command_module() -> None:
    """The README's table of the tree names every package of ``coordinator/`` and, in the CLI's
    row, every sub-command's module (``coordinator/cluster/`` and PostgreSQL, and five of the
    twelve commands, were missing)."""
    from coordinator.cli.commands import SUBCOMMANDS

    readme = (ROOT / "README.md").read_text()
    table = readme.split("## Where things are", 1)[1].split("\n## ", 1)[0]
    rows = dict(re.findall(r"^\| `([^`]+)` \| (.*) \|$", table, re.M))
    packages = {
        f"coordinator/{p.name}/"
        for p in (ROOT / "coordinator").iterdir()
        if (p / "__init__.py").is_file()
    }
    assert packages - set(rows) == set()
    cli = rows["coordinator/cli/"]
    named = set(re.findall(r"`([a-z_]+)`", cli.split("one module per sub-command:", 1)[1]))
    assert {m.__name__.rpartition(".")[2] for m in SUBCOMMANDS} <= named
