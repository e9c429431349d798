"""The RecordStore contract, run against every implementation (memory, SQLite, PostgreSQL).

A store is partitioned logs plus the cluster log; most tests here write group "g" (partition
``G`` of the :data:`P` partitions the stores are opened with) and check that log; the tests at
the end check what spans logs. Implementation-specific behaviour (schema versions, corrupt
files, locking, fault-injection hooks) is tested in test_store_sqlite.py, test_store_memory.py
and test_store_postgres.py.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.routing import partition_for
from coordinator.runtime.store import (
    CLUSTER_LOG,
    Fence,
    JournalEntry,
    MemoryRecordStore,
    PostgresRecordStore,
    RecordStore,
    SqliteRecordStore,
    StoredRecord,
    StoreError,
    StoreFencedError,
    StoreWriteError,
    log_of,
)

P = 4
"""Partitions of the stores opened here: groups "h", "a", "b" and "g" are partitions 0..3."""
G = partition_for("g", P)
assert (partition_for("h", P), partition_for("a", P), partition_for("b", P), G) == (0, 1, 2, 3)


def put(key: bytes, value: bytes, group_id: str | None = "g") -> StoredRecord:
    return StoredRecord(key=key, value=value, group_id=group_id)


def tomb(key: bytes, group_id: str | None = "g") -> StoredRecord:
    return StoredRecord(key=key, value=None, group_id=group_id)


def entry(
    offset: int, ts: int, group_id: str | None, key: bytes, value: bytes | None
) -> JournalEntry:
    return JournalEntry(offset, ts, group_id, key, value, log_of(group_id, P))


class MemoryImpl:
    name = "memory"

    def open(self, **kw: Any) -> MemoryRecordStore:
        kw.pop("sync", None)
        kw.setdefault("partitions", P)
        return MemoryRecordStore(**kw)

    def reopen(self, store: Any, **kw: Any) -> MemoryRecordStore:
        return store.reopen()  # the same data: its partition count, whatever kw says

    def another(self, store: Any) -> MemoryRecordStore:
        """Another node's handle on the same store (``store`` stays open)."""
        return MemoryRecordStore(journal_retention_ms=store.journal_retention_ms, _data=store._data)

    def failing_batch(self, store: Any, records: list[StoredRecord]) -> list[StoredRecord]:
        store.fail_next_appends(1, OSError("disk on fire"))
        return records


class SqliteImpl:
    """Each instance owns a directory; ``open`` always opens the same store."""

    name = "sqlite"
    BOOM = b"\x00boom"

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.kw: dict[str, Any] = {}

    def open(self, **kw: Any) -> SqliteRecordStore:
        kw.setdefault("partitions", P)
        self.kw = kw
        return SqliteRecordStore(self.directory, **kw)

    def reopen(self, store: Any, **kw: Any) -> SqliteRecordStore:
        store.close()
        return SqliteRecordStore(self.directory, **{**self.kw, **kw})

    def failing_batch(self, store: Any, records: list[StoredRecord]) -> list[StoredRecord]:
        """A real failure in the middle of the transaction: a trigger (installed through a
        second connection) aborts on the BOOM key after the first records were inserted."""
        import sqlite3

        raw = sqlite3.connect(store.path)
        raw.execute(
            "CREATE TRIGGER IF NOT EXISTS test_boom BEFORE INSERT ON journal"
            f" WHEN NEW.key = x'{self.BOOM.hex()}' BEGIN SELECT RAISE(ABORT, 'disk on fire'); END"
        )
        raw.commit()
        raw.close()
        mid = len(records) // 2 + 1
        return [*records[:mid], put(self.BOOM, b"x"), *records[mid:]]


class PostgresImpl:
    """Each instance owns a database; ``open`` always opens the same store."""

    name = "postgresql"
    BOOM = SqliteImpl.BOOM

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn
        self.kw: dict[str, Any] = {}

    def open(self, **kw: Any) -> PostgresRecordStore:
        kw.pop("sync", None)
        kw.setdefault("partitions", P)
        self.kw = kw
        return PostgresRecordStore(self.dsn, **kw)

    def reopen(self, store: Any, **kw: Any) -> PostgresRecordStore:
        store.close()
        return PostgresRecordStore(self.dsn, **{**self.kw, **kw})

    def another(self, store: Any) -> PostgresRecordStore:
        """Another node's handle on the same store (``store`` stays open)."""
        return PostgresRecordStore(self.dsn, **self.kw)

    def failing_batch(self, store: Any, records: list[StoredRecord]) -> list[StoredRecord]:
        """A real failure in the middle of the transaction: a trigger aborts on the BOOM key
        after the first records of the batch were inserted."""
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(
                "CREATE OR REPLACE FUNCTION test_boom() RETURNS trigger LANGUAGE plpgsql AS"
                " $$ BEGIN RAISE EXCEPTION 'disk on fire'; END $$"
            )
            conn.execute(
                "CREATE TRIGGER test_boom BEFORE INSERT ON kip848_journal FOR EACH ROW"
                f" WHEN (NEW.key = '\\x{self.BOOM.hex()}'::bytea) EXECUTE FUNCTION test_boom()"
            )
        mid = len(records) // 2 + 1
        return [*records[:mid], put(self.BOOM, b"x"), *records[mid:]]


IMPLS = ["memory", "sqlite", "postgresql"]


@pytest.fixture(params=IMPLS)
def impl(request: pytest.FixtureRequest, tmp_path: Path) -> Any:
    if request.param == "postgresql":
        return PostgresImpl(request.getfixturevalue("pg_dsn"))
    return MemoryImpl() if request.param == "memory" else SqliteImpl(tmp_path / "data")


SHARED_IMPLS = ["memory", "postgresql"]
"""The stores several nodes share (SQLite has one writer: it refuses every fenced append)."""


@pytest.fixture(params=SHARED_IMPLS)
def shared_impl(request: pytest.FixtureRequest) -> Any:
    if request.param == "postgresql":
        return PostgresImpl(request.getfixturevalue("pg_dsn"))
    return MemoryImpl()


@pytest.fixture
def store(impl: Any) -> Iterator[Any]:
    s = impl.open()
    yield s
    s.close()


def loaded(store: Any, log: int = G) -> list[tuple[int, StoredRecord]]:
    return list(store.load(log))


def journal(store: Any, log: int = G, **kw: Any) -> list[JournalEntry]:
    return list(store.journal(log, **kw))


# -- basics ----------------------------------------------------------------------------------


def test_is_a_record_store(store: Any) -> None:
    assert isinstance(store, RecordStore)


def test_empty_store(store: Any) -> None:
    assert store.partitions == P
    for log in (CLUSTER_LOG, *range(P)):
        assert store.last_offset(log) == -1
        assert loaded(store, log) == []
        assert journal(store, log) == []


def test_append_returns_last_offset_and_offsets_are_contiguous(store: Any) -> None:
    assert store.append([put(b"a", b"1")], 10) == {G: 0}
    assert store.append([put(b"b", b"2"), put(b"c", b"3"), put(b"d", b"4")], 11) == {G: 3}
    assert store.last_offset(G) == 3
    assert store.append([put(b"e", b"5")], 12) == {G: 4}
    assert [e.offset for e in journal(store)] == [0, 1, 2, 3, 4]


def test_empty_batch_writes_nothing(store: Any) -> None:
    assert store.append([], 1) == {}
    store.append([put(b"a", b"1")], 2)
    assert store.append([], 3) == {}
    assert journal(store) == [entry(0, 2, "g", b"a", b"1")]


# -- the compacted view -------------------------------------------------------------------------


def test_load_orders_by_offset_of_latest_write(store: Any) -> None:
    store.append([put(b"a", b"a1"), put(b"b", b"b1"), put(b"c", b"c1")], 1)
    store.append([put(b"a", b"a2")], 2)
    store.append([put(b"b", b"b2")], 3)
    assert loaded(store) == [
        (2, put(b"c", b"c1")),
        (3, put(b"a", b"a2")),
        (4, put(b"b", b"b2")),
    ]


def test_tombstone_deletes_key(store: Any) -> None:
    store.append([put(b"a", b"1"), put(b"b", b"2")], 1)
    store.append([tomb(b"a")], 2)
    assert loaded(store) == [(1, put(b"b", b"2"))]


def test_tombstone_of_unknown_key_is_journaled_only(store: Any) -> None:
    store.append([tomb(b"never")], 1)
    assert loaded(store) == []
    assert journal(store) == [entry(0, 1, "g", b"never", None)]


def test_rewrite_after_tombstone(store: Any) -> None:
    store.append([put(b"a", b"1"), put(b"b", b"2")], 1)
    store.append([tomb(b"a")], 2)
    store.append([put(b"a", b"3")], 3)
    assert loaded(store) == [(1, put(b"b", b"2")), (3, put(b"a", b"3"))]


def test_within_one_batch_the_last_write_wins(store: Any) -> None:
    store.append([put(b"a", b"1"), tomb(b"a"), put(b"b", b"1"), tomb(b"c")], 1)
    store.append([tomb(b"b"), put(b"b", b"2"), put(b"c", b"1"), put(b"c", b"2")], 2)
    assert loaded(store) == [(5, put(b"b", b"2")), (7, put(b"c", b"2"))]


def test_bytes_round_trip_exactly(store: Any) -> None:
    records = [
        put(b"", b"empty key"),
        put(b"\x00\xff\x00", b""),  # an empty value is a value, not a tombstone
        put(b"k", b"\x00" * 3, group_id=None),  # cluster-level record (topic registry)
        put(b"\xe2\x82\xac", "v€".encode(), group_id="grüppe-€"),
    ]
    store.append(records, 1)
    everything = [rec for log in (CLUSTER_LOG, *range(P)) for _, rec in loaded(store, log)]
    assert sorted(everything, key=records.index) == records
    assert [rec for _, rec in loaded(store)][:2] == records[:2]
    assert loaded(store, CLUSTER_LOG) == [(0, records[2])]
    assert loaded(store, partition_for("grüppe-€", P))[-1] == (
        0 if partition_for("grüppe-€", P) != G else 2,
        records[3],
    )


# -- the journal -------------------------------------------------------------------------------


def test_journal_has_every_record_with_its_timestamp(store: Any) -> None:
    store.append([put(b"a", b"1"), put(b"b", b"2")], 100)
    store.append([tomb(b"a")], 200)
    store.append([put(b"a", b"3")], 300)
    assert journal(store) == [
        entry(0, 100, "g", b"a", b"1"),
        entry(1, 100, "g", b"b", b"2"),
        entry(2, 200, "g", b"a", None),
        entry(3, 300, "g", b"a", b"3"),
    ]
    assert [e.partition for e in journal(store)] == [G] * 4
    assert [e.offset for e in journal(store, from_offset=1, to_offset=3)] == [1, 2]
    assert [e.offset for e in journal(store, from_offset=2)] == [2, 3]
    assert journal(store, from_offset=4) == []
    assert journal(store, from_offset=3, to_offset=3) == []


def test_expire_journal_cuts_a_prefix_and_keeps_the_compacted_view(store: Any) -> None:
    store.append([put(b"a", b"1")], 100)
    store.append([put(b"b", b"1")], 300)
    store.append([put(b"c", b"1")], 150)  # a clock step back: kept while 300 is kept
    store.append([put(b"d", b"1")], 400)
    before = loaded(store)
    assert store.expire_journal(100) == 0  # strictly older only
    assert store.expire_journal(250) == 1
    assert [e.offset for e in journal(store)] == [1, 2, 3]
    assert journal(store, from_offset=0, to_offset=2) == [entry(1, 300, "g", b"b", b"1")]
    assert loaded(store) == before
    assert store.expire_journal(250) == 0
    assert store.expire_journal(350) == 2
    assert [e.offset for e in journal(store)] == [3]
    assert store.expire_journal(10_000) == 1
    assert journal(store) == []
    assert loaded(store) == before
    assert store.last_offset(G) == 3


def test_offsets_are_not_reused_after_everything_expired(impl: Any) -> None:
    store = impl.open()
    store.append([put(b"a", b"1"), tomb(b"a")], 1)
    assert store.expire_journal(2) == 2
    assert loaded(store) == [] and journal(store) == []
    store = impl.reopen(store)
    assert store.last_offset(G) == 1
    assert store.append([put(b"b", b"1")], 3) == {G: 2}
    store.close()


def test_apply_retention(impl: Any) -> None:
    store = impl.open(journal_retention_ms=1000)
    store.append([put(b"a", b"1")], 1000)
    store.append([put(b"b", b"1")], 2000)
    assert store.apply_retention(now_ms=2000) == 0  # 1000 is not older than 2000 - 1000
    assert store.apply_retention(now_ms=2001) == 1
    assert [e.offset for e in journal(store)] == [1]
    store.close()
    unlimited = impl.open()
    assert unlimited.journal_retention_ms is None
    assert unlimited.apply_retention(now_ms=10**12) == 0
    unlimited.close()


def test_append_applies_retention_by_itself(impl: Any) -> None:
    """With a retention, append expires the journal using its batch timestamp as now, at most
    once per min(retention, 1 min) and only after its batch is written."""
    store = impl.open(journal_retention_ms=1000)
    for i, ts in enumerate([0, 500, 1500, 1600]):
        store.append([put(b"%d" % i, b"v")], ts)
    # t=1500 expired t=0 (older than 500); t=1600 came too soon after to expire t=500.
    assert [e.timestamp_ms for e in journal(store)] == [500, 1500, 1600]
    store.append([put(b"4", b"v")], 2600)  # expires everything older than 1600
    assert [e.timestamp_ms for e in journal(store)] == [1600, 2600]
    assert [rec.key for _, rec in loaded(store)] == [b"0", b"1", b"2", b"3", b"4"]
    assert store.last_offset(G) == 4
    store.close()


# -- atomicity and validation -----------------------------------------------------------------


def test_failed_batch_leaves_nothing(impl: Any) -> None:
    """In no log: a batch that spans logs fails whole."""
    store = impl.open()
    store.append([put(b"a", b"1"), put(b"b", b"1"), put(b"t", b"1", group_id=None)], 1)
    batch = impl.failing_batch(
        store,
        [
            put(b"x", b"1", group_id="h"),
            put(b"a", b"2"),
            tomb(b"b"),
            put(b"t", b"2", group_id=None),
            put(b"c", b"1"),
        ],
    )
    with pytest.raises(StoreWriteError) as info:
        store.append(batch, 2)
    assert "disk on fire" in str(info.value)
    assert info.value.__cause__ is not None
    assert info.value.outcome_unknown is False
    assert (store.last_offset(G), store.last_offset(0), store.last_offset(CLUSTER_LOG)) == (
        1,
        -1,
        0,
    )
    assert loaded(store) == [(0, put(b"a", b"1")), (1, put(b"b", b"1"))]
    assert loaded(store, 0) == []
    assert loaded(store, CLUSTER_LOG) == [(0, put(b"t", b"1", group_id=None))]
    assert [e.offset for e in journal(store)] == [0, 1]
    assert journal(store, 0) == []
    # The store goes on; the next batch takes the offsets the failed one would have taken.
    assert store.append([put(b"c", b"2")], 3) == {G: 2}
    store = impl.reopen(store)
    assert loaded(store) == [(0, put(b"a", b"1")), (1, put(b"b", b"1")), (2, put(b"c", b"2"))]
    store.close()


@pytest.mark.parametrize(
    ("records", "timestamp_ms", "message"),
    [
        ([StoredRecord(key="a", value=b"1", group_id="g")], 1, "key must be bytes"),  # type: ignore[arg-type]
        ([StoredRecord(key=b"a", value="1", group_id="g")], 1, "value must be bytes"),  # type: ignore[arg-type]
        ([StoredRecord(key=b"a", value=b"1", group_id=7)], 1, "group_id must be str"),  # type: ignore[arg-type]
        ([(b"a", b"1", "g")], 1, "not a StoredRecord"),
        ([put(b"a", b"1")], 1.5, "timestamp_ms must be an int"),
        ([put(b"a", b"1")], True, "timestamp_ms must be an int"),
    ],
)
def test_invalid_batch_is_refused_whole(
    store: Any, records: list[Any], timestamp_ms: Any, message: str
) -> None:
    with pytest.raises(StoreWriteError, match=message):
        store.append([put(b"ok", b"1"), *records], timestamp_ms)
    assert store.last_offset(G) == -1
    assert journal(store) == []


def test_closed_store_refuses_everything(impl: Any) -> None:
    store = impl.open()
    store.append([put(b"a", b"1")], 1)
    store.close()
    store.close()  # idempotent
    with pytest.raises(StoreWriteError, match="closed"):
        store.append([put(b"b", b"1")], 2)
    with pytest.raises(StoreError, match="closed"):
        store.load(G)
    with pytest.raises(StoreError, match="closed"):
        store.journal(G)


# -- persistence, snapshots, threads ------------------------------------------------------------


def test_reopen_keeps_everything(impl: Any) -> None:
    store = impl.open()
    store.append([put(b"a", b"1"), put(b"b", b"1", group_id=None)], 1)
    store.append([tomb(b"a"), put(b"c", b"1"), put(b"e", b"1")], 2)
    logs = (CLUSTER_LOG, *range(P))
    views = {log: loaded(store, log) for log in logs}
    journals = {log: journal(store, log) for log in logs}
    store = impl.reopen(store)
    assert store.partitions == P
    assert {log: loaded(store, log) for log in logs} == views
    assert {log: journal(store, log) for log in logs} == journals
    assert (store.last_offset(G), store.last_offset(CLUSTER_LOG)) == (3, 0)
    assert store.append([put(b"d", b"1"), put(b"b", b"2", group_id=None)], 3) == {
        G: 4,
        CLUSTER_LOG: 1,
    }
    store.close()


def test_load_and_journal_are_snapshots(store: Any) -> None:
    store.append([put(b"a", b"1"), put(b"b", b"1")], 1)
    view = store.load(G)
    log = store.journal(G)
    first = next(view)
    store.append([put(b"c", b"1"), tomb(b"b")], 2)
    assert [first, *view] == [(0, put(b"a", b"1")), (1, put(b"b", b"1"))]
    assert [e.offset for e in log] == [0, 1]


def test_concurrent_appends_are_serialised(store: Any) -> None:
    n_threads, n_batches, size = 4, 25, 5

    def writer(t: int) -> None:
        for b in range(n_batches):
            recs = [put(f"{t}/{b}/{i}".encode(), b"v") for i in range(size)]
            last = store.append(recs, b)
            assert (last[G] + 1) % size == 0

    threads = [threading.Thread(target=writer, args=(t,)) for t in range(n_threads)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=30)
        assert not th.is_alive()
    entries = journal(store)
    assert [e.offset for e in entries] == list(range(n_threads * n_batches * size))
    for i in range(0, len(entries), size):  # every batch contiguous and whole
        chunk = entries[i : i + size]
        assert len({e.key.rsplit(b"/", 1)[0] for e in chunk}) == 1
        assert [e.key.rsplit(b"/", 1)[1] for e in chunk] == [b"0", b"1", b"2", b"3", b"4"]
    assert len(loaded(store)) == n_threads * n_batches * size


def test_stats(store: Any) -> None:
    store.append([put(b"a", b"12", group_id="g1"), put(b"bb", b"3", group_id="a")], 1)
    store.append([tomb(b"a", group_id="g1"), put(b"c", b"", group_id=None)], 2)
    stats = store.stats()
    assert stats["implementation"] in ("memory", "sqlite", "postgresql")
    assert {
        k: stats[k]
        for k in (
            "partitions",
            "journal_entries",
            "journal_tombstones",
            "journal_bytes",
            "compacted_records",
            "compacted_groups",
            "compacted_key_bytes",
            "compacted_value_bytes",
        )
    } == {
        "partitions": P,
        "journal_entries": 4,
        "journal_tombstones": 1,
        "journal_bytes": 1 + 2 + 2 + 1 + 1 + 1,
        "compacted_records": 2,
        "compacted_groups": 1,
        "compacted_key_bytes": 3,
        "compacted_value_bytes": 1,
    }
    g1 = partition_for("g1", P)
    empty = {
        "last_offset": -1,
        "journal_first_offset": None,
        "journal_entries": 0,
        "compacted_records": 0,
    }
    assert stats["logs"] == {
        CLUSTER_LOG: {
            "last_offset": 0,
            "journal_first_offset": 0,
            "journal_entries": 1,
            "compacted_records": 1,
        },
        0: empty,
        1: {
            "last_offset": 0,
            "journal_first_offset": 0,
            "journal_entries": 1,
            "compacted_records": 1,
        },
        g1: {
            "last_offset": 1,
            "journal_first_offset": 0,
            "journal_entries": 2,
            "compacted_records": 0,
        },
        3: empty,
    }


# -- across logs ------------------------------------------------------------------------------


def test_each_log_has_its_own_offsets_and_views(store: Any) -> None:
    assert store.append(
        [put(b"k", b"g1"), put(b"k", b"h1", "h"), put(b"t", b"c1", None), put(b"k", b"g2")], 5
    ) == {G: 1, 0: 0, CLUSTER_LOG: 0}
    assert store.append([put(b"k", b"a1", "a"), tomb(b"k", "h")], 6) == {1: 0, 0: 1}
    # The same key in two logs is two keys: a tombstone in one leaves the other.
    assert loaded(store) == [(1, put(b"k", b"g2"))]
    assert loaded(store, 0) == []
    assert loaded(store, 1) == [(0, put(b"k", b"a1", "a"))]
    assert loaded(store, CLUSTER_LOG) == [(0, put(b"t", b"c1", None))]
    assert journal(store, 0) == [entry(0, 5, "h", b"k", b"h1"), entry(1, 6, "h", b"k", None)]
    assert [e.partition for e in journal(store, CLUSTER_LOG)] == [CLUSTER_LOG]
    assert [store.last_offset(log) for log in (CLUSTER_LOG, 0, 1, 2, 3)] == [0, 1, 0, -1, 1]


def test_a_log_that_does_not_exist_is_refused(store: Any) -> None:
    for bad in (P, -2, 1.0, "0"):
        with pytest.raises(ValueError, match="no log"):
            store.load(bad)
        with pytest.raises(ValueError, match="no log"):
            store.journal(bad)
        with pytest.raises(ValueError, match="no log"):
            store.last_offset(bad)


def test_the_partition_count_is_the_one_the_store_was_created_with(impl: Any) -> None:
    store = impl.open()
    store.append([put(b"a", b"1")], 1)
    store = impl.reopen(store, partitions=P + 3)
    assert store.partitions == P
    assert loaded(store) == [(0, put(b"a", b"1"))]
    store.close()


def test_retention_cuts_each_log_on_its_own(store: Any) -> None:
    store.append([put(b"a", b"1"), put(b"b", b"1", "h")], 100)
    store.append([put(b"c", b"1", "h")], 200)
    store.append([put(b"d", b"1")], 300)
    assert store.expire_journal(250) == 3
    assert [e.offset for e in journal(store)] == [1]
    assert journal(store, 0) == []
    assert store.append([put(b"e", b"1", "h")], 400) == {0: 2}  # offsets go on
    assert [rec.key for _, rec in loaded(store, 0)] == [b"b", b"c", b"e"]


# -- the cluster log shared by several nodes ---------------------------------------------------


def test_a_fenced_append_to_the_cluster_log_lands_only_at_the_logs_end(shared_impl: Any) -> None:
    """The cluster log has no leader: a fenced append to it is accepted only at the log's end
    as this handle last wrote or adopted it. A node behind (or ahead) is refused with
    StoreFencedError naming the cluster log, nothing of the batch written, until it adopts the
    log's end; a refused append moves nothing."""
    a = shared_impl.open()
    b = shared_impl.another(a)
    try:

        def c(key: bytes) -> StoredRecord:
            return put(key, b"v", group_id=None)

        assert a.append([c(b"a0")], 1, fence=Fence(1, {})) == {CLUSTER_LOG: 0}
        for _ in range(2):  # refused again while it has not caught up
            with pytest.raises(StoreFencedError) as info:
                b.append([c(b"b0"), c(b"b1")], 2, fence=Fence(2, {}))
            assert info.value.partitions == frozenset({CLUSTER_LOG})
        assert [e.key for e in journal(b, CLUSTER_LOG)] == [b"a0"]

        assert b.adopt(CLUSTER_LOG, 1) == 1  # caught up with the log's end
        assert b.append([c(b"b0"), c(b"b1")], 3, fence=Fence(2, {})) == {CLUSTER_LOG: 2}
        with pytest.raises(StoreFencedError) as info:  # now a is behind
            a.append([c(b"a1")], 4, fence=Fence(1, {}))
        assert info.value.partitions == frozenset({CLUSTER_LOG})
        assert a.adopt(CLUSTER_LOG) == 3  # None: the log's end as the store says now
        assert a.append([c(b"a1")], 5, fence=Fence(1, {})) == {CLUSTER_LOG: 3}

        assert b.adopt(CLUSTER_LOG, 9) == 9  # a claim past the end is refused as well
        with pytest.raises(StoreFencedError) as info:
            b.append([c(b"b2")], 6, fence=Fence(2, {}))
        assert info.value.partitions == frozenset({CLUSTER_LOG})
        assert [(e.offset, e.key) for e in journal(b, CLUSTER_LOG)] == [
            (0, b"a0"),
            (1, b"b0"),
            (2, b"b1"),
            (3, b"a1"),
        ]
        assert [(o, r.key) for o, r in loaded(b, CLUSTER_LOG)] == [
            (0, b"a0"),
            (1, b"b0"),
            (2, b"b1"),
            (3, b"a1"),
        ]
    finally:
        b.close()
        a.close()


# -- a model check ----------------------------------------------------------------------------

keys = st.sampled_from([b"a", b"b", b"c", b"d", b""])
records = st.builds(
    StoredRecord,
    key=keys,
    value=st.one_of(st.none(), st.binary(max_size=8)),
    group_id=st.sampled_from(["g", "h", "a", None]),
)
ops = st.lists(
    st.one_of(
        st.tuples(st.just("append"), st.lists(records, max_size=6)),
        st.tuples(st.just("expire"), st.integers(0, 40)),
        st.tuples(st.just("reopen"), st.none()),
    ),
    max_size=25,
)
MODEL_LOGS = (CLUSTER_LOG, 0, 1, G)


def check_against_model(it: Any, program: Sequence[tuple[str, Any]]) -> None:
    store = it.open(sync="normal") if it.name == "sqlite" else it.open()
    logs: dict[int, list[JournalEntry]] = {log: [] for log in MODEL_LOGS}
    clock = 0
    try:
        for op, arg in program:
            if op == "append":
                clock += 1
                last = store.append(arg, clock)
                for r in arg:
                    log = logs[log_of(r.group_id, P)]
                    log.append(
                        JournalEntry(
                            len(log), clock, r.group_id, r.key, r.value, log_of(r.group_id, P)
                        )
                    )
                written = {log_of(r.group_id, P) for r in arg}
                assert last == {log: len(logs[log]) - 1 for log in written}
            elif op == "expire":
                expected = 0
                for log in MODEL_LOGS:
                    live = journal(store, log)
                    expected += next(
                        (i for i, e in enumerate(live) if e.timestamp_ms >= arg), len(live)
                    )
                assert store.expire_journal(arg) == expected
            else:
                store = it.reopen(store)
            for log_id, log in logs.items():
                view: dict[bytes, tuple[int, StoredRecord]] = {}
                for e in log:
                    view.pop(e.key, None)
                    if e.value is not None:
                        view[e.key] = (e.offset, StoredRecord(e.key, e.value, e.group_id))
                assert loaded(store, log_id) == list(view.values())
                remaining = journal(store, log_id)
                assert remaining == log[len(log) - len(remaining) :]
                assert store.last_offset(log_id) == len(log) - 1
    finally:
        store.close()


def model_impl(name: str, directory: Path) -> Any:
    return MemoryImpl() if name == "memory" else SqliteImpl(directory)


@pytest.mark.parametrize("impl_name", ["memory", "sqlite"])
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=ops)
def test_matches_a_model(impl_name: str, program: list[tuple[str, Any]]) -> None:
    directory = Path(tempfile.mkdtemp(prefix="store-model-"))
    try:
        check_against_model(model_impl(impl_name, directory), program)
    finally:
        shutil.rmtree(directory, ignore_errors=True)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(program=ops)
def test_postgresql_matches_a_model(pg_server: Any, program: list[tuple[str, Any]]) -> None:
    """As test_matches_a_model, a new schema for every program (fewer: each costs a store)."""
    check_against_model(PostgresImpl(pg_server.fresh_store_dsn()), program)


def test_load_rows_is_the_compacted_view_as_tuples(store: Any) -> None:
    store.append([put(b"a", b"a1"), put(b"b", b"b1", group_id="g"), put(b"c", b"c1")], 1)
    store.append([put(b"a", b"a2"), StoredRecord(b"c", None, "g")], 2)
    rows = [row for chunk in store.load_rows(G) for row in chunk]
    assert rows == [(off, rec.key, rec.value, rec.group_id) for off, rec in store.load(G)]
    assert [(k, v, g) for _o, k, v, g in rows] == [(b"b", b"b1", "g"), (b"a", b"a2", "g")]
    assert all(isinstance(chunk, list) and chunk for chunk in store.load_rows(G))


def snapshot(store: Any, log: int = G) -> tuple[int, list[tuple[int, bytes, bytes, Any]]]:
    end, chunks = store.load_snapshot(log)
    return end, [row for chunk in chunks for row in chunk]


def test_load_snapshot_reports_the_logs_end_past_tombstones_and_expired_entries(
    store: Any,
) -> None:
    """``load_snapshot``: the compacted view and the log's last offset as of it, which is past
    the view's last record once the newest records were tombstones, and stays so once
    retention removed them from the journal (a reader then knows the view holds the log up to
    there, and reads the journal from the next offset)."""
    assert snapshot(store) == (-1, [])
    store.append([put(b"t", b"1"), put(b"u", b"1")], 1)
    assert snapshot(store) == (1, [(0, b"t", b"1", "g"), (1, b"u", b"1", "g")])
    store.append([tomb(b"u")], 2)
    store.append([put(b"t", b"2"), tomb(b"t")], 3)  # overwritten, then deleted
    store.append([tomb(b"never")], 4)  # a tombstone of no live key
    expected = (5, [])
    assert snapshot(store) == expected
    assert store.expire_journal(10) == 6 and journal(store) == []
    assert snapshot(store) == expected
    store.append([put(b"v", b"1")], 11)
    assert snapshot(store) == (6, [(6, b"v", b"1", "g")])
    assert snapshot(store, (G + 1) % P) == (-1, [])  # each log its own end
    assert snapshot(store, CLUSTER_LOG) == (-1, [])


def test_load_snapshot_is_one_snapshot(store: Any) -> None:
    """The end and the view are read at the call, together: appends after it are in
    neither."""
    store.append([put(b"a", b"1"), put(b"b", b"1")], 1)
    end, chunks = store.load_snapshot(G)
    store.append([put(b"c", b"1"), tomb(b"b")], 2)
    assert (end, [row for chunk in chunks for row in chunk]) == (
        1,
        [(0, b"a", b"1", "g"), (1, b"b", b"1", "g")],
    )
    assert snapshot(store) == (3, [(0, b"a", b"1", "g"), (2, b"c", b"1", "g")])


def test_load_snapshot_after_reopening_keeps_the_end(impl: Any) -> None:
    """A store opened after the tombstones expired (a node started later) reports the same
    end: offsets are never reused."""
    store = impl.open()
    store.append([put(b"t", b"1"), put(b"u", b"1")], 1)
    store.append([tomb(b"u")], 2)
    store.expire_journal(10)
    store = impl.reopen(store)
    try:
        assert snapshot(store) == (2, [(0, b"t", b"1", "g")])
    finally:
        store.close()


G2 = next(g for g in (f"g{i}" for i in range(100)) if partition_for(g, P) == G)
"""A second group of partition G."""
ODD = b"\x00\xff\xfe',\\]\n"
"""Bytes no store may change: NUL, invalid UTF-8, quote, comma, backslash, bracket."""


def _groups_of_view(store: Any) -> list[tuple[str | None, int, int, bytes]]:
    """load_groups as the compacted view says it must be."""
    groups: dict[str | None, list[Any]] = {}
    for off, rec in store.load(G):
        g = groups.setdefault(rec.group_id, [0, -1, []])
        g[0] += 1
        g[1] = off
        g[2] += [rec.key, rec.value]
    return [
        (gid, n, last, b"[" + b",".join(parts) + b"]") for gid, (n, last, parts) in groups.items()
    ]


def _write_two_groups(store: Any) -> None:
    store.append([put(b"a", b"a1"), put(b"x", ODD, G2), put(b"b", b"b1"), put(ODD, b"o")], 1)
    store.append([put(b"a", b"a2"), tomb(b"b"), put(b"y", b"y1", G2)], 2)


def test_load_groups_is_the_compacted_view_a_group_at_a_time(store: Any) -> None:
    _write_two_groups(store)
    chunks = list(store.load_groups(G))
    assert all(isinstance(chunk, list) and chunk for chunk in chunks)
    groups = [tuple(g) for chunk in chunks for g in chunk]
    assert groups == [
        (G2, 2, 6, b"[x," + ODD + b",y,y1]"),  # its first record comes first
        ("g", 2, 4, b"[" + ODD + b",o,a,a2]"),
    ]
    assert groups == _groups_of_view(store)
    assert list(store.load_groups(CLUSTER_LOG)) == []


def test_sqlite_load_groups_joined_out_of_order_reads_the_rows(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite before 3.44 does not promise group_concat's order: a group joined out of order
    makes the partition read row by row (here: every group joined backwards)."""
    from coordinator.runtime.store import sqlite

    store = SqliteRecordStore(tmp_path / "data", partitions=P)
    _write_two_groups(store)
    expected = _groups_of_view(store)
    backwards = sqlite._GROUPS.replace(
        "FROM compacted WHERE pos BETWEEN ? AND ?",
        "FROM (SELECT * FROM compacted WHERE pos BETWEEN ? AND ? ORDER BY pos DESC)",
    )
    assert backwards != sqlite._GROUPS
    monkeypatch.setattr(sqlite, "_GROUPS", backwards)
    base, top = sqlite.pos_range(G)
    conn = store._read()
    joined = conn.execute(backwards, (base, base, top)).fetchall()
    conn.close()
    assert not all(sqlite._ascending(row[4]) for row in joined)  # joined out of order indeed
    assert [tuple(g) for chunk in store.load_groups(G) for g in chunk] == expected
    store.close()
