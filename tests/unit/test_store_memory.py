"""MemoryRecordStore's test hooks (its semantics are checked by test_store_contract.py)."""

from __future__ import annotations

import threading

import pytest

from coordinator.runtime.store import MemoryRecordStore, StoredRecord, StoreWriteError, log_of

LOG = log_of("g", MemoryRecordStore().partitions)


def put(key: bytes, value: bytes = b"v") -> StoredRecord:
    return StoredRecord(key=key, value=value, group_id="g")


def keys(store: MemoryRecordStore) -> list[bytes]:
    return [rec.key for _, rec in store.load(LOG)]


def test_fail_next_appends() -> None:
    store = MemoryRecordStore()
    cause = ConnectionError("nfs went away")
    store.fail_next_appends(2, cause)
    assert store.append([], 1) == {}  # an empty batch writes nothing, so cannot fail
    for _ in range(2):
        with pytest.raises(StoreWriteError, match="nfs went away") as info:
            store.append([put(b"a")], 1)
        assert info.value.__cause__ is cause
        assert info.value.outcome_unknown is False
    assert store.last_offset(LOG) == -1 and keys(store) == []
    assert store.append([put(b"a")], 2) == {LOG: 0}
    assert store.batch_sizes == [1]


def test_default_fault_is_an_os_error() -> None:
    store = MemoryRecordStore()
    store.fail_next_appends()
    with pytest.raises(StoreWriteError) as info:
        store.append([put(b"a")], 1)
    assert isinstance(info.value.__cause__, OSError)


def test_fault_with_unknown_outcome_writes_then_stops_the_store() -> None:
    store = MemoryRecordStore()
    store.fail_next_appends(outcome_unknown=True)
    with pytest.raises(StoreWriteError) as info:
        store.append([put(b"a")], 1)
    assert info.value.outcome_unknown is True
    assert store.failed
    with pytest.raises(StoreWriteError, match="failed earlier"):
        store.append([put(b"b")], 2)
    restarted = store.reopen()
    assert keys(restarted) == [b"a"]  # the batch did reach the store
    assert restarted.append([put(b"b")], 2) == {LOG: 1}


def test_hold_appends_blocks_the_writer_until_released() -> None:
    store = MemoryRecordStore()
    store.hold_appends()
    done = threading.Event()
    result: list[dict[int, int]] = []

    def writer() -> None:
        result.append(store.append([put(b"a"), put(b"b")], 1))
        done.set()

    thread = threading.Thread(target=writer)
    thread.start()
    assert not done.wait(0.05)
    assert store.last_offset(LOG) == -1 and keys(store) == []
    store.release_appends()
    assert done.wait(5)
    thread.join(5)
    assert result == [{LOG: 1}] and keys(store) == [b"a", b"b"]


def test_reopen_is_a_restart_over_the_same_data() -> None:
    store = MemoryRecordStore(journal_retention_ms=5)
    store.append([put(b"a"), put(b"b")], 1)
    store.append([put(b"c")], 2)
    restarted = store.reopen()
    with pytest.raises(StoreWriteError, match="closed"):
        store.append([put(b"x")], 3)
    assert keys(restarted) == [b"a", b"b", b"c"]
    assert restarted.last_offset(LOG) == 2
    assert restarted.journal_retention_ms == 5
    assert restarted.batch_sizes == []  # per process, not durable


def test_group_commit_is_visible_in_batch_sizes() -> None:
    store = MemoryRecordStore()
    store.append([put(b"a")], 1)
    store.append([put(b"b"), put(b"c"), put(b"d")], 2)
    assert store.batch_sizes == [1, 3]


def test_fenced_appends_write_only_under_the_current_leader() -> None:
    from coordinator.runtime.store import Fence, StoreFencedError

    store = MemoryRecordStore()
    store.set_leader(LOG, 1, 3)
    assert store.append([put(b"a")], 1, fence=Fence(1, {LOG: 3})) == {LOG: 0}
    store.set_leader(LOG, 2, 4)  # taken over
    with pytest.raises(StoreFencedError) as info:
        store.append([put(b"b")], 2, fence=Fence(1, {LOG: 3}))
    assert info.value.partitions == {LOG}
    assert store.append([put(b"c")], 3, fence=Fence(2, {LOG: 4})) == {LOG: 1}
    assert [(e.key, e.leader_epoch) for e in store.journal(LOG)] == [(b"a", 3), (b"c", 4)]
