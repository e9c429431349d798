"""Checked-in record logs must still replay: they pin the stored format (keys, values, types)
and the replay rules. A log is never regenerated; a format change adds a new log and a
migration, and the old logs keep passing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from builders import stored

from coordinator.cli import main
from coordinator.core import codec
from coordinator.core.commands import SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.core.topics import TopicRegistry
from coordinator.factory import new_shard
from coordinator.runtime.store import SqliteRecordStore, StoredRecord

from .make_record_log import summary

LOGS = sorted((Path(__file__).resolve().parent / "logs").glob("*.jsonl"))


def test_there_are_golden_logs() -> None:
    assert LOGS, "no checked-in record logs"


def _entries(log: Path) -> list[tuple[bytes, bytes | None]]:
    out = []
    for line in log.read_text().splitlines():
        entry = json.loads(line)
        value = entry["value"]
        out.append((entry["key"].encode(), None if value is None else value.encode()))
    return out


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_golden_log_replays_to_the_expected_state(log: Path) -> None:
    """Replayed as a store is loaded: topic records into the registry, the rest into the shard
    (the one the server builds)."""
    from assignors.range import RangeAssignor
    from assignors.uniform import UniformAssignor

    ids = SequentialIds()
    shard = new_shard(
        config=GroupCoordinatorConfig(), assignors=[UniformAssignor(), RangeAssignor()], ids=ids
    )
    registry = TopicRegistry(ids)
    shard.undo.enabled = registry.undo.enabled = False
    entries = _entries(log)
    for key, value in entries:
        record = codec.decode(key, value)
        assert codec.encode(record) == (key, value), "re-encoding changed bytes"
        if record.group_id is None:
            registry.replay(record)
        else:
            shard.replay(record)
    expected = json.loads(log.with_suffix("").with_suffix(".expected.json").read_text())
    assert json.loads(json.dumps(summary(shard, registry), sort_keys=True)) == expected
    assert len(entries) > 20


def _store(tmp_path: Path, log: Path) -> Path:
    """A real store (SQLite) holding the log's records, one batch each."""
    data = tmp_path / "var"
    with SqliteRecordStore.in_data_dir(data) as store:
        for n, (key, value) in enumerate(_entries(log)):
            group_id = codec.decode(key, value).group_id
            store.append([StoredRecord(key, value, group_id)], 1_000 + n)
    return data


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_kip848_replay_and_dump_read_the_golden_log(
    log: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kip848 replay`` loads the store into the shards the server builds and finds it sound;
    ``dump`` prints every record of it."""
    data = _store(tmp_path, log)
    expected = json.loads(log.with_suffix("").with_suffix(".expected.json").read_text())
    assert main(["replay", "--data-dir", str(data), "--output", "json"]) == 0
    replayed = json.loads(capsys.readouterr().out)
    assert (replayed["ok"], replayed["problems"]) == (True, [])
    groups = set(expected["groups"]) | set(expected.get("classic_groups", {}))
    assert replayed["groups"] == len(groups)
    assert replayed["topics"] == len(expected.get("topics", {}))
    with SqliteRecordStore.in_data_dir(data, read_only=True) as store:
        compacted = [(rec.key, rec.value) for rec in stored(store)]
    assert replayed["records"] == len(compacted)
    assert main(["dump", "--data-dir", str(data), "--output", "json"]) == 0
    dumped = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(d["type"], d["key"]) for d in dumped] == [
        _type_and_key(codec.decode(key, value)) for key, value in compacted
    ]
    assert main(["dump", "--data-dir", str(data), "--journal"]) == 0
    journal = capsys.readouterr().out.splitlines()
    assert len(journal) == len(_entries(log))
    assert "<undecodable" not in "\n".join(journal)


def _type_and_key(record: Any) -> tuple[str, dict[str, Any]]:
    from dataclasses import fields

    key = record.key
    return type(key).__name__.removesuffix("Key"), {
        f.name: getattr(key, f.name) for f in fields(key)
    }
