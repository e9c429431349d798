"""``kip848 replay`` and ``dump`` on a store holding a classic group (#12 item 4): they load it
into the same shards the server runs (the legacy bridge's), instead of refusing the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from builders import classic_record

from coordinator.cli import main
from coordinator.core import codec
from coordinator.runtime.store import SqliteRecordStore, StoredRecord


def test_replay_and_dump_accept_classic_groups(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = tmp_path / "var"
    key, value = codec.encode(classic_record())
    with SqliteRecordStore.in_data_dir(data) as store:
        store.append([StoredRecord(key, value, "grp")], 1)
    assert main(["replay", "--data-dir", str(data), "--output", "json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert (summary["ok"], summary["problems"], summary["records"]) == (True, [], 1)
    # The classic group and its two members are counted (they are groups and members too).
    assert (summary["groups"], summary["members"]) == (1, 2)
    assert main(["dump", "--data-dir", str(data), "--output", "json"]) == 0
    [line] = capsys.readouterr().out.splitlines()
    assert json.loads(line)["type"] == "GroupMetadata"
