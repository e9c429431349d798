"""The group each transactional id commits offsets to (``coordinator/core/transactional_ids.py``):
the component's commands and records, and the runtime's path through the cluster log (written
once, durable, read back from the committed state, kept across a restart)."""

from __future__ import annotations

import orjson
import pytest
from builders import START_MS, make_runtime, stored_journal

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import Result
from coordinator.core.config import parse_config
from coordinator.core.errors import InvalidRequestError
from coordinator.core.timeline import UndoLog
from coordinator.core.transactional_ids import ClusterTransactionalIds
from coordinator.runtime.store import CLUSTER_LOG, MemoryRecordStore

EXPIRY = {
    "transactional.id.expiration.ms": "10000",
    "transaction.remove.expired.transaction.cleanup.interval.ms": "1000",
}


def _ids(undo: UndoLog | None = None) -> ClusterTransactionalIds:
    """Expiration 10 s, cleanup interval 1 s."""
    return ClusterTransactionalIds(UndoLog() if undo is None else undo, parse_config(EXPIRY))


def test_a_mapping_is_written_when_it_changes_and_when_its_activity_is_an_interval_old() -> None:
    ids = _ids()
    assert ids.group_of("app-1") is None
    assert ids.map("app-1", "copier", 5_000) == Result(
        records=[r.transactional_id_group_record("app-1", "copier", 5_000)], response=True
    )
    assert ids.map("app-1", "copier", 5_999) == Result(response=False)
    # Its activity a cleanup interval old: written again (the group unchanged: False).
    assert ids.map("app-1", "copier", 6_000) == Result(
        records=[r.transactional_id_group_record("app-1", "copier", 6_000)], response=False
    )
    assert ids.map("app-1", "other", 6_001) == Result(
        records=[r.transactional_id_group_record("app-1", "other", 6_001)], response=True
    )
    assert ids.map("app-2", "copier", 6_002).response is True
    assert ids.snapshot() == {
        "transactional_id_groups": {
            "app-1": r.TransactionalIdGroupValue(group_id="other", active_ms=6_001),
            "app-2": r.TransactionalIdGroupValue(group_id="copier", active_ms=6_002),
        }
    }
    assert ids.mapped() == [("app-1", "other"), ("app-2", "copier")]
    assert ids.records_of_state() == [
        r.transactional_id_group_record("app-1", "other", 6_001),
        r.transactional_id_group_record("app-2", "copier", 6_002),
    ]


def test_expiry_removes_the_named_ids_inactive_for_the_expiration_plus_an_interval() -> None:
    """Activity is written to within a cleanup interval (1 s), so an id expires once its
    recorded activity is 10 s + 1 s old: never sooner than 10 s after its last activity. A
    record from before ``active_ms`` existed (-1) starts counting at the first check naming
    it; ids not named (the caller's node does not serve them, or they hold a transaction)
    and ids not mapped are left alone."""
    undo = UndoLog()
    ids = _ids(undo)
    replay = ids.replayers()[r.RecordType.TRANSACTIONAL_ID_GROUP]
    ids.map("idle", "g", 0)
    ids.map("busy", "g", 0)
    ids.map("active", "g", 5_000)
    replay(r.transactional_id_group_record("legacy", "h"))  # written by an older build
    assert ids.expire(["idle", "active", "legacy", "unknown"], 10_999) == Result(
        records=[r.transactional_id_group_record("legacy", "h", 10_999)], response=[]
    )
    assert ids.expire(["idle", "active", "legacy", "idle"], 11_000) == Result(
        records=[r.transactional_id_group_record("idle", None)], response=["idle"]
    )
    assert ids.expire(["active", "legacy"], 15_999) == Result(response=[])
    assert ids.expire(["legacy", "active"], 16_000) == Result(
        records=[r.transactional_id_group_record("active", None)], response=["active"]
    )
    assert ids.expire(["legacy"], 21_998) == Result(response=[])
    assert ids.expire(["legacy"], 21_999) == Result(
        records=[r.transactional_id_group_record("legacy", None)], response=["legacy"]
    )
    assert ids.mapped() == [("busy", "g")]  # never named: stays, however old
    # An expired id mapped again is a new mapping.
    assert ids.map("idle", "g", 30_000).response is True


@pytest.mark.parametrize(
    ("tid", "group", "message"), [("", "g", "transactional id"), ("t", "", "group id")]
)
def test_an_empty_id_is_refused(tid: str, group: str, message: str) -> None:
    ids = _ids()
    with pytest.raises(InvalidRequestError, match=message):
        ids.map(tid, group, 0)
    assert len(ids) == 0


def test_replay_and_rollback() -> None:
    undo = UndoLog()
    ids = _ids(undo)
    replay = ids.replayers()[r.RecordType.TRANSACTIONAL_ID_GROUP]
    replay(r.transactional_id_group_record("t", "g", 7))
    mark = undo.mark()
    ids.map("t", "h", 8)
    assert ids.group_of("t") == "h"
    ids.expire(["t"], 100_000)
    assert ids.group_of("t") is None
    undo.rollback(mark)
    assert ids.group_of("t") == "g"
    assert ids.records_of_state() == [r.transactional_id_group_record("t", "g", 7)]
    replay(r.transactional_id_group_record("t", None))
    assert ids.group_of("t") is None


async def test_the_runtime_writes_a_mapping_once_to_the_cluster_log() -> None:
    store = MemoryRecordStore(partitions=3)
    rt = make_runtime(store)
    await rt.start()
    assert rt.transactional_id_group("app-1") is None
    assert await rt.map_transactional_id("app-1", "copier") is True
    assert await rt.map_transactional_id("app-1", "copier") is False
    assert rt.transactional_id_group("app-1") == "copier"
    assert await rt.latest_transactional_id_group("app-1") == "copier"
    assert [codec.decode(e.key, e.value) for e in store.journal(CLUSTER_LOG)] == [
        r.transactional_id_group_record("app-1", "copier", START_MS)
    ]
    written = stored_journal(store)
    await rt.close()

    reopened = store.reopen()
    rt2 = make_runtime(reopened)
    await rt2.start()
    assert rt2.transactional_id_group("app-1") == "copier"
    assert await rt2.map_transactional_id("app-1", "copier") is False
    assert stored_journal(reopened) == written
    await rt2.close()


def test_a_record_stored_before_its_activity_time_existed_decodes_as_unknown() -> None:
    """The codec stays compatible with stored records: ``[version, group]`` (no activity
    time) decodes with ``active_ms`` -1, which expiry counts from its first check."""
    key = codec.encode_key(r.TransactionalIdGroupKey("app-1"))
    assert codec.decode(key, orjson.dumps([codec.VALUE_VERSION, "copier"])) == (
        r.transactional_id_group_record("app-1", "copier")
    )
    assert codec.encode(r.transactional_id_group_record("app-1", "copier", 42)) == (
        key,
        orjson.dumps([codec.VALUE_VERSION, "copier", 42]),
    )
