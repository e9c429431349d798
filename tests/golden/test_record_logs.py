"""Checked-in record logs must still replay: they pin the stored format (keys, values, types)
and the replay rules. A log is never regenerated; a format change adds a new log and a
migration, and the old logs keep passing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from coordinator.core import codec
from coordinator.core.commands import SequentialIds
from coordinator.core.config import GroupCoordinatorConfig
from coordinator.factory import new_shard

from .make_record_log import summary

LOGS = sorted((Path(__file__).resolve().parent / "logs").glob("*.jsonl"))


def test_there_are_golden_logs() -> None:
    assert LOGS, "no checked-in record logs"


@pytest.mark.parametrize("log", LOGS, ids=lambda p: p.stem)
def test_golden_log_replays_to_the_expected_state(log: Path) -> None:
    from assignors.range import RangeAssignor
    from assignors.uniform import UniformAssignor

    shard = new_shard(
        config=GroupCoordinatorConfig(),
        assignors=[UniformAssignor(), RangeAssignor()],
        ids=SequentialIds(),
    )
    shard.undo.enabled = False
    lines = log.read_text().splitlines()
    for line in lines:
        entry = json.loads(line)
        key, value = entry["key"].encode(), entry["value"]
        record = codec.decode(key, None if value is None else value.encode())
        assert codec.encode(record) == (key, None if value is None else value.encode()), (
            "re-encoding changed bytes"
        )
        shard.replay(record)
    expected = json.loads(log.with_suffix("").with_suffix(".expected.json").read_text())
    assert json.loads(json.dumps(summary(shard), sort_keys=True)) == expected
    assert len(lines) > 20
