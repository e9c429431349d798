"""``kip848``: configuration errors, dump and replay on a small store (offline)."""

from __future__ import annotations

import asyncio
import base64
import json
from pathlib import Path

import pytest

from coordinator.cli import main
from coordinator.core.commands import ConsumerGroupHeartbeat
from coordinator.core.config import parse_config
from coordinator.core.topics import NewTopic
from coordinator.routing import partition_for
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import SqliteRecordStore, StoredRecord
from coordinator.security import scram
from coordinator.security.metadata import ScramUpsertion


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--set", "no.such.config=1"], "kip848 serve: unknown configuration 'no.such.config'"),
        (
            ["--set", "group.consumer.session.timeout.ms=abc"],
            "kip848 serve: invalid value 'abc' for 'group.consumer.session.timeout.ms'",
        ),
        (
            ["--set", "group.coordinator.shards=0"],
            "kip848 serve: invalid value 0 for 'group.coordinator.shards': must be >= 1",
        ),
        (
            ["--set", "group.consumer.heartbeat.interval.ms"],
            "kip848 serve: --set expects NAME=VALUE",
        ),
        (
            ["--set", "group.consumer.assignors=uniform,nope"],
            "kip848 serve: group.consumer.assignors:",
        ),
        (["--listen", "localhost"], "kip848 serve: --listen must be HOST:PORT"),
        (["--config-file", "/nonexistent/x.properties"], "kip848 serve: cannot read config file"),
        (["--grpc-processes", "0"], "kip848 serve: --grpc-processes must be 1..64, got 0"),
        (
            ["--advertised-address", "host"],
            "kip848 serve: --advertised-address must be HOST:PORT, got 'host'",
        ),
        (
            ["--advertised-address", "host:0"],
            "kip848 serve: --advertised-address needs a real port, not 0",
        ),
        (["--grpc-processes", "65"], "kip848 serve: --grpc-processes must be 1..64, got 65"),
    ],
)
def test_serve_refuses_bad_configuration(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, "serve", *argv)
    assert (code, out) == (2, "")
    assert err.startswith(message), err
    assert err.count("\n") == 1


def test_config_file_values_are_validated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "c.properties"
    path.write_text("group.consumer.heartbeat.interval.ms=50000\n")
    code, _out, err = run(capsys, "serve", "--config-file", str(path))
    assert code == 2
    assert "group.consumer.heartbeat.interval.ms must be between" in err


def _small_store(data_dir: Path) -> dict:
    async def build() -> dict:
        store = SqliteRecordStore(data_dir, partitions=2)
        rt = CoordinatorRuntime(
            config=parse_config({"group.coordinator.shards": "2"}),
            store=store,
            clock=ManualClock(0),
        )
        await rt.start()
        await rt.create_topics([NewTopic(name="t", num_partitions=4)])
        for m in ("a", "b"):
            await rt.heartbeat(
                ConsumerGroupHeartbeat(
                    group_id="g",
                    member_id=m,
                    member_epoch=0,
                    rebalance_timeout_ms=1000,
                    subscribed_topic_names=("t",),
                    topic_partitions={},
                )
            )
        await rt.alter_group_configs("g", {"consumer.session.timeout.ms": "50000"})
        snap = rt.snapshot()
        await rt.close()
        return snap

    return asyncio.run(build())


def test_dump_and_replay(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "var"
    _small_store(data)
    code, out, _ = run(capsys, "dump", "--data-dir", str(data))
    lines = out.splitlines()
    assert code == 0
    assert lines[0].startswith("-1/0\tTopic(name='t') -> TopicValue(")  # the cluster log first
    assert lines[1] == (  # the group's config is the cluster log's
        "-1/1\tConfig(resource_type=32, resource_name='g', name='consumer.session.timeout.ms')"
        " -> ConfigValue(value='50000')"
    )
    g = partition_for("g", 2)
    assert all(line.startswith(f"{g}/") for line in lines[2:])  # then g's partition
    code, out, _ = run(capsys, "dump", "--data-dir", str(data), "--output", "json")
    records = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and len(records) == len(lines)
    topic_id = records[0]["value"]["topic_id"]
    assert records[0] == {
        "partition": -1,
        "offset": 0,
        "type": "Topic",
        "key": {"name": "t"},
        "value": {"topic_id": topic_id, "num_partitions": 4, "partition_racks": {}},
    }
    assert records[1] == {
        "partition": -1,
        "offset": 1,
        "type": "Config",
        "key": {"resource_type": 32, "resource_name": "g", "name": "consumer.session.timeout.ms"},
        "value": {"value": "50000"},
    }
    targets = {
        r["key"]["member_id"]: r["value"]
        for r in records
        if r["type"] == "ConsumerGroupTargetAssignmentMember"
    }
    assert targets == {
        "a": {"topic_partitions": {topic_id: [0, 1]}},
        "b": {"topic_partitions": {topic_id: [2, 3]}},
    }
    code, out, _ = run(capsys, "dump", "--data-dir", str(data), "--journal", "--output", "json")
    entries = [json.loads(line) for line in out.splitlines()]
    assert code == 0 and [(e["partition"], e["offset"]) for e in entries] == [(-1, 0), (-1, 1)] + [
        (g, n) for n in range(len(entries) - 2)
    ]
    assert len(entries) > len(lines)  # the journal keeps overwritten records too
    assert all(isinstance(e["timestamp_ms"], int) and "type" in e for e in entries)

    code, out, _ = run(capsys, "replay", "--data-dir", str(data), "--output", "json")
    summary = json.loads(out)
    assert code == 0
    assert {
        k: summary[k] for k in ("records", "topics", "groups", "members", "problems", "ok")
    } == {
        "records": len(lines),
        "topics": 1,
        "groups": 1,
        "members": 2,
        "problems": [],
        "ok": True,
    }
    code, out, _ = run(capsys, "replay", "--data-dir", str(data))
    assert code == 0 and out.splitlines()[-1] == "OK"


def test_replay_refuses_a_corrupt_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = tmp_path / "var"
    _small_store(data)
    with SqliteRecordStore(data) as store:
        store.append([StoredRecord(b'[5,"g","x"]', b"not json", "g")], 1)
    code, out, err = run(capsys, "replay", "--data-dir", str(data))
    assert code == 1 and out == ""
    assert err.startswith(f"kip848 replay: the store in {data} is corrupt: cannot decode record")


def test_dump_shows_an_undecodable_record(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "var"
    _small_store(data)
    with SqliteRecordStore(data) as store:
        store.append([StoredRecord(b'[5,"g","x"]', b"not json", "g")], 1)
    code, out, _ = run(capsys, "dump", "--data-dir", str(data), "--output", "json")
    last = json.loads(out.splitlines()[-1])
    assert code == 0
    assert last["error"].startswith('<undecodable: cannot decode record key=b\'[5,"g","x"]\'')
    assert set(last) == {"partition", "offset", "error"}


def test_dump_never_shows_the_salted_scram_keys(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The salted keys allow an offline guess of a password: neither output shows them (the
    JSON one printed them as base64), in the compacted view and the journal alike."""
    data = tmp_path / "var"
    salt = b"sixteen-byte-slt"
    salted = scram.salted_password(scram.ScramMechanism.SCRAM_SHA_256, "pw", salt, 4096)
    credential = scram.credential_from_salted_password(
        scram.ScramMechanism.SCRAM_SHA_256, salt, salted, 4096
    )

    async def build() -> None:
        rt = CoordinatorRuntime(
            config=parse_config({}), store=SqliteRecordStore(data), clock=ManualClock(0)
        )
        await rt.start()
        upsert = ScramUpsertion(
            name="alice", mechanism=1, iterations=4096, salt=salt, salted_password=salted
        )
        assert [r.error_code for r in await rt.alter_scram_credentials([], [upsert])] == [0]
        await rt.close()

    asyncio.run(build())
    secrets = [
        base64.b64encode(v).decode() for v in (salt, credential.stored_key, credential.server_key)
    ]
    for view in ((), ("--journal",)):
        code, out, _ = run(capsys, "dump", "--data-dir", str(data), "--output", "json", *view)
        assert code == 0
        [record] = [json.loads(line) for line in out.splitlines() if "Scram" in line]
        assert record["value"] == {
            "salt": "<hidden>",
            "stored_key": "<hidden>",
            "server_key": "<hidden>",
            "iterations": 4096,
        }
        code, text, _ = run(capsys, "dump", "--data-dir", str(data), *view)
        assert code == 0 and "<salted keys hidden>" in text
        assert not [s for s in secrets if s in out or s in text]


def test_replay_of_a_missing_store(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _out, err = run(capsys, "replay", "--data-dir", str(tmp_path / "none"))
    assert code == 1 and err.startswith("kip848 replay:")


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert (exit_.value.code, capsys.readouterr().out) == (
        0,
        f"kip848 {version('kip848-coordinator')}\n",
    )
    with pytest.raises(SystemExit):
        main(["topics", "--help"])
    listed = [  # an action's line: indented 4 (its wrapped help is indented further)
        line.split()[0]
        for line in capsys.readouterr().out.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    ]
    assert listed == ["create", "list", "delete", "add-partitions"]


def test_a_wildcard_listen_host_is_advertised_as_this_machines_name() -> None:
    import socket

    from coordinator.server.app import CoordinatorServer, ServeOptions

    for listen, expected in [
        ("0.0.0.0:9094", socket.getfqdn()),
        ("[::]:9094", socket.getfqdn()),
        ("10.1.2.3:9094", "10.1.2.3"),
        ("[::1]:9094", "::1"),
    ]:
        server = CoordinatorServer.__new__(CoordinatorServer)  # no gRPC server needed for this
        server.options, server.host, server.port = (
            ServeOptions(listen=listen),
            listen.rpartition(":")[0],
            9094,
        )
        assert server.advertised_address() == (expected, 9094), listen
    server.options = ServeOptions(listen="0.0.0.0:9094", advertised="[fd00::1]:443")
    assert server.advertised_address() == ("fd00::1", 443)


def test_grpc_processes_auto_is_one_per_usable_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    import os

    from coordinator.cli.serve import grpc_processes

    assert grpc_processes("auto") == max(1, min(64, len(os.sched_getaffinity(0))))
    assert grpc_processes("3") == 3
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--grpc-processes", "many"])
    assert exit_.value.code == 2
    assert (
        "argument --grpc-processes: expected a number or 'auto', got 'many'"
        in capsys.readouterr().err
    )
