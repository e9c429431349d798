"""The group each transactional id commits offsets to (``coordinator/core/transactional_ids.py``):
the component's commands and records, and the runtime's path through the cluster log (written
once, durable, read back from the committed state, kept across a restart)."""

from __future__ import annotations

import pytest
from builders import make_runtime, stored_journal

from coordinator.core import codec
from coordinator.core import records as r
from coordinator.core.commands import Result
from coordinator.core.errors import InvalidRequestError
from coordinator.core.timeline import UndoLog
from coordinator.core.transactional_ids import ClusterTransactionalIds
from coordinator.runtime.store import CLUSTER_LOG, MemoryRecordStore


def test_a_mapping_is_written_only_when_it_changes() -> None:
    ids = ClusterTransactionalIds(UndoLog())
    assert ids.group_of("app-1") is None
    assert ids.map("app-1", "copier") == Result(
        records=[r.transactional_id_group_record("app-1", "copier")], response=True
    )
    assert ids.map("app-1", "copier") == Result(response=False)
    assert ids.map("app-1", "other") == Result(
        records=[r.transactional_id_group_record("app-1", "other")], response=True
    )
    assert ids.map("app-2", "copier").response is True
    assert ids.snapshot() == {"transactional_id_groups": {"app-1": "other", "app-2": "copier"}}
    assert ids.records_of_state() == [
        r.transactional_id_group_record("app-1", "other"),
        r.transactional_id_group_record("app-2", "copier"),
    ]


@pytest.mark.parametrize(
    ("tid", "group", "message"), [("", "g", "transactional id"), ("t", "", "group id")]
)
def test_an_empty_id_is_refused(tid: str, group: str, message: str) -> None:
    ids = ClusterTransactionalIds(UndoLog())
    with pytest.raises(InvalidRequestError, match=message):
        ids.map(tid, group)
    assert len(ids) == 0


def test_replay_and_rollback() -> None:
    undo = UndoLog()
    ids = ClusterTransactionalIds(undo)
    replay = ids.replayers()[r.RecordType.TRANSACTIONAL_ID_GROUP]
    replay(r.transactional_id_group_record("t", "g"))
    mark = undo.mark()
    ids.map("t", "h")
    assert ids.group_of("t") == "h"
    undo.rollback(mark)
    assert ids.group_of("t") == "g"
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
        r.transactional_id_group_record("app-1", "copier")
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
