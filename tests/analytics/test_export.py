"""``kip848 analytics export``: the journal as Parquet, record for record."""

from __future__ import annotations

import base64
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from builders import stored_journal

from coordinator.analytics.export import ExportError, export_journal, parse_time
from coordinator.analytics.schema import COLUMNS, RECORD_TYPES, SCHEMA, SCHEMA_VERSION, ExportInfo
from coordinator.core import codec
from coordinator.routing import partition_for
from coordinator.runtime.store import SqliteRecordStore


def _journal(store_dir: Path) -> list[Any]:
    """Every log's journal in turn: the order of the export's rows."""
    with SqliteRecordStore(store_dir, read_only=True) as s:
        return stored_journal(s)


def test_every_journal_record_is_one_row_with_its_typed_columns(workload: dict[str, Any]) -> None:
    table = pq.read_table(workload["parquet"])
    assert table.schema.equals(SCHEMA)
    entries = _journal(workload["store"])
    rows = table.to_pylist()
    assert [(r["shard"], r["offset"]) for r in rows] == [
        (None if e.partition == -1 else e.partition, e.offset) for e in entries
    ]
    assert {r["shard"] for r in rows if r["group_id"] is not None} == {
        partition_for(r["group_id"], 4) for r in rows if r["group_id"] is not None
    }
    info = workload["info"]
    assert info.complete and info.rows == len(entries) and info.schema_version == SCHEMA_VERSION
    names = {r["topic_id"]: r["topic"] for r in rows if r["record_type_id"] == 1100}
    seen = set()
    for e, row in zip(entries, rows, strict=True):
        rec = codec.decode(e.key, e.value)
        t = rec.key.TYPE
        seen.add(t)
        assert row["record_type"] == RECORD_TYPES[t] == type(rec.key).__name__.removesuffix("Key")
        assert row["timestamp"].timestamp() * 1000 == pytest.approx(e.timestamp_ms, abs=0.01)
        assert row["tombstone"] is (e.value is None)
        assert row["group_id"] == e.group_id
        v = rec.value
        if t == 8 and v is not None:
            got = {(p["topic_id"], p["partition"]) for p in row["assigned_partitions"]}
            want = {(tid, p) for tid, ps in v.assigned_partitions.items() for p in ps}
            assert got == want
            assert all(names[p["topic_id"]] == p["topic"] for p in row["assigned_partitions"])
            assert row["member_epoch"] == v.member_epoch
            assert row["member_id"] == rec.key.member_id
        elif t == 1 and v is not None:  # the export's own path from the bytes
            expire = v.expire_timestamp_ms * 1000 if v.expire_timestamp_ms >= 0 else None
            assert (
                row["topic"],
                row["partition"],
                row["committed_offset"],
                row["committed_leader_epoch"],
                row["commit_metadata"],
                int(row["commit_timestamp"].timestamp() * 1_000_000),
                None if row["expire_timestamp"] is None else row["expire_timestamp"].timestamp(),
            ) == (
                rec.key.topic,
                rec.key.partition,
                v.offset,
                v.leader_epoch,
                v.metadata,
                v.commit_timestamp_ms * 1000,
                None if expire is None else expire / 1e6,
            )
        elif t == 5 and v is not None:
            assert tuple(row["subscribed_topic_names"]) == v.subscribed_topic_names
            assert row["classic_member"] is (v.classic_member_metadata is not None)
        elif t == 3 and v is not None:
            assert row["group_epoch"] == v.epoch
        elif t == 2 and v is not None:
            assert row["generation"] == v.generation
            assert [m["member_id"] for m in row["classic_members"]] == [
                m.member_id for m in v.members
            ]
    # The generated workload has every kind of record the coordinator writes for groups.
    assert {1, 2, 3, 4, 5, 6, 7, 8, 1100} <= seen
    # Columns a record type does not fill are null.
    for row in rows:
        if row["record_type_id"] == 1:
            assert row["member_id"] is None and row["assigned_partitions"] is None


def test_schema_is_documented_column_by_column() -> None:
    doc = (Path(__file__).parents[2] / "docs" / "analytics.md").read_text()
    for c in COLUMNS:
        assert f"`{c.name}`" in doc, c.name
    assert f"version {SCHEMA_VERSION}" in doc


def test_since_until_cut_by_record_time(workload: dict[str, Any], tmp_path: Path) -> None:
    entries = _journal(workload["store"])
    times = sorted(e.timestamp_ms for e in entries)  # the logs one after the other
    mid, end = times[len(times) // 2], times[3 * len(times) // 4]
    assert mid < end
    r = export_journal(workload["store"], tmp_path / "cut.parquet", since_ms=mid, until_ms=end)
    got = [row["offset"] for row in pq.read_table(tmp_path / "cut.parquet").to_pylist()]
    assert got == [e.offset for e in entries if mid <= e.timestamp_ms < end]  # in log order
    assert not r.info.complete and r.info.since_ms == mid and r.info.until_ms == end
    assert r.info.first_offset == got[0] and r.info.last_offset == got[-1]
    assert parse_time("2026-11-23T00:00:00Z") == 1_795_392_000_000
    assert parse_time("2026-11-23T01:00:00+01:00") == 1_795_392_000_000
    assert parse_time("1795392000000") == 1_795_392_000_000
    with pytest.raises(ValueError, match="not a time"):
        parse_time("yesterday")


def test_missing_foreign_and_corrupt_stores_give_clear_errors(tmp_path: Path) -> None:
    with pytest.raises(ExportError, match="no record store at"):
        export_journal(tmp_path / "nothing", tmp_path / "a.parquet")
    foreign = tmp_path / "foreign"
    foreign.mkdir()
    sqlite3.connect(foreign / "coordinator.db").execute("CREATE TABLE t (x)").connection.commit()
    with pytest.raises(ExportError, match="not a kip848 record store"):
        export_journal(foreign, tmp_path / "b.parquet")
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "coordinator.db").write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(ExportError, match="corrupt|not a kip848"):
        export_journal(garbage, tmp_path / "c.parquet")
    assert not list(tmp_path.glob("*.parquet*"))  # nothing half-written


def test_an_undecodable_record_names_its_offset(tmp_path: Path) -> None:
    from coordinator.runtime.store import StoredRecord

    store = SqliteRecordStore(tmp_path / "s")
    good = codec.encode(codec.decode(b'[1100,"t"]', b'[0,"AAAAAAAAAAAAAAAAAAAAAQ",3]'))
    store.append([StoredRecord(good[0], good[1], None)], 1000)
    store.append([StoredRecord(b'[3,"g"]', b"[0,{not json", "g")], 2000)
    store.close()
    with pytest.raises(ExportError, match="offset 0 of log 3 does not decode"):
        export_journal(tmp_path / "s", tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()
    assert not (tmp_path / "x.parquet.partial").exists()


@pytest.mark.parametrize(
    ("key", "value"),
    [
        (b'[1,"g","t",0]', b"[0,5,0]"),  # a value too short
        (b'[1,"g","t",0]', b'[0,5,0,"",1000,-1'),  # a truncated value
        (b'[1,"g","t","0"]', b'[0,5,0,"",1000,-1]'),  # the partition a string
        (b'[1,"g","t",0,9]', b'[0,5,0,"",1000,-1]'),  # a field too many
        (b'[1,"g","t",0', None),  # a truncated key
    ],
)
def test_an_undecodable_offset_commit_names_its_offset(
    tmp_path: Path, key: bytes, value: bytes | None
) -> None:
    """Offset commits are read straight from their bytes; ones that are not exactly the
    codec's layout go to the codec, which says why they do not decode."""
    from coordinator.runtime.store import StoredRecord

    store = SqliteRecordStore(tmp_path / "s")
    good = codec.encode(codec.decode(b'[1,"g","t",0]', b'[0,5,0,"",1000,-1]'))
    store.append([StoredRecord(good[0], good[1], "g")], 1000)
    store.append([StoredRecord(key, value, "g")], 2000)
    store.close()
    with pytest.raises(ExportError, match="offset 1 of log 3 does not decode"):
        export_journal(tmp_path / "s", tmp_path / "x.parquet")
    assert not (tmp_path / "x.parquet").exists()


def test_rack_local_partitions_of_each_current_assignment(tmp_path: Path) -> None:
    """Counted against the member's rack (its member metadata) and the partition racks of the
    Topic records read before; null without a rack, or without racks for its topics."""
    from coordinator.core import records as r
    from coordinator.core.model import ConsumerGroupMember
    from coordinator.runtime.store import StoredRecord

    racked, plain = "AAAAAAAAAAAAAAAAAAAAAQ", "AAAAAAAAAAAAAAAAAAAAAg"
    a, b = frozenset({"a"}), frozenset({"b"})
    members = [
        ConsumerGroupMember(
            member_id="m1", rack_id="a", assigned_partitions={racked: frozenset({0, 1, 2})}
        ),
        ConsumerGroupMember(
            member_id="m2", rack_id="b", assigned_partitions={plain: frozenset({0})}
        ),
        ConsumerGroupMember(member_id="m3", assigned_partitions={racked: frozenset({3})}),
    ]
    records = [
        r.topic_record("racked", racked, 4, {0: a, 1: b, 2: a, 3: b}),
        r.topic_record("plain", plain, 1),
        *(r.member_metadata_record("g", m) for m in members),
        *(r.current_assignment_record("g", m) for m in members),
    ]
    store = SqliteRecordStore(tmp_path / "s")
    for i, rec in enumerate(records):
        key, value = codec.encode(rec)
        store.append([StoredRecord(key, value, rec.group_id)], 1000 * (i + 1))
    store.close()
    export_journal(tmp_path / "s", tmp_path / "x.parquet")
    rows = pq.read_table(tmp_path / "x.parquet").to_pylist()
    assert [(row["member_id"], row["rack_local_partitions"]) for row in rows[-3:]] == [
        ("m1", 2),
        ("m2", None),  # its topic has no racks
        ("m3", None),  # no rack
    ]
    assert [row["rack_id"] for row in rows[2:5]] == ["a", "b", None]


def test_retention_trim_is_warned_and_the_export_is_partial(tmp_path: Path) -> None:
    from coordinator.runtime.store import StoredRecord

    store = SqliteRecordStore(tmp_path / "s")
    for i in range(5):
        key, value = codec.encode(codec.decode(b'[3,"g"]', f'[0,{i + 1},"cgp_1"]'.encode()))
        store.append([StoredRecord(key, value, "g")], 1000 * (i + 1))
    assert store.expire_journal(2500) == 2  # offsets 0 and 1 of g's partition are gone
    store.close()
    warnings: list[str] = []
    r = export_journal(tmp_path / "s", tmp_path / "x.parquet", since_ms=0, warn=warnings.append)
    assert len(warnings) == 1 and "offsets 0..1 are gone" in warnings[0]
    assert r.info.journal_first_offset == 2 and not r.info.complete
    assert [row["offset"] for row in pq.read_table(tmp_path / "x.parquet").to_pylist()] == [2, 3, 4]
    info = ExportInfo.from_metadata(pq.read_metadata(tmp_path / "x.parquet").metadata)
    assert info.warnings == tuple(warnings)
    # A range that starts after the trimmed part is whole: no warning.
    warnings.clear()
    r = export_journal(tmp_path / "s", tmp_path / "y.parquet", since_ms=3000, warn=warnings.append)
    assert warnings == [] and r.info.rows == 3


def test_export_is_safe_while_the_store_is_open_for_writing(tmp_path: Path) -> None:
    from coordinator.runtime.store import StoredRecord

    store = SqliteRecordStore(tmp_path / "s")  # holds the writer lock, like a running server
    key, value = codec.encode(codec.decode(b'[3,"g"]', b'[0,1,"cgp_1"]'))
    store.append([StoredRecord(key, value, "g")], 1000)
    r = export_journal(tmp_path / "s", tmp_path / "x.parquet")
    store.append([StoredRecord(key, value, "g")], 2000)  # the writer is undisturbed
    store.close()
    assert r.info.rows == 1


def kip848_export(*args: str, timeout: int = 60) -> subprocess.CompletedProcess[str]:
    """``kip848 analytics export`` with ``args``, in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", "analytics", "export", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_cli_export_progress_and_exit_codes(workload: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "j.parquet"
    store = str(workload["store"])
    p = kip848_export("--data-dir", store, "--out", str(out), "--progress", "always", timeout=120)
    assert p.returncode == 0, p.stderr
    assert f"Exported {workload['info'].rows} records" in p.stdout
    assert "exporting journal" in p.stderr and f"{workload['info'].rows}/" in p.stderr
    assert pq.read_metadata(out).num_rows == workload["info"].rows
    p = kip848_export("--data-dir", str(tmp_path / "none"), "--out", str(out))
    assert p.returncode == 1 and "no record store at" in p.stderr and "Traceback" not in p.stderr
    p = kip848_export("--data-dir", store, "--out", str(out), "--since", "soon")
    assert p.returncode == 2 and "not a time" in p.stderr


def test_acls_and_credentials_are_exported_without_secrets(tmp_path: Path) -> None:
    from coordinator.core import records as r
    from coordinator.runtime.store import StoredRecord
    from coordinator.security import scram

    mech = scram.ScramMechanism.SCRAM_SHA_512
    cred = scram.credential_from_password(mech, "hunter2", b"pepper-salt-16by", 8192)
    value = r.UserScramCredentialValue(
        salt=cred.salt, stored_key=cred.stored_key, server_key=cred.server_key, iterations=8192
    )
    acl = r.AccessControlEntryKey(3, "payments-", 4, "User:alice", "*", 3, 3)
    records = [
        r.acl_record(acl, True),
        r.scram_credential_record("alice", 2, value),
        r.scram_credential_record("alice", 2, None),
    ]
    store_dir = tmp_path / "store"
    with SqliteRecordStore(store_dir) as store:
        store.append(
            [StoredRecord(*codec.encode(rec), None) for rec in records], timestamp_ms=1_000
        )
    export_journal(store_dir, tmp_path / "sec.parquet")
    rows = pq.read_table(tmp_path / "sec.parquet").to_pylist()
    picked = [
        {k: v for k, v in row.items() if v is not None and (k.startswith(("acl_", "scram_")))}
        for row in rows
    ]
    assert [row["record_type"] for row in rows] == [
        "AccessControlEntry",
        "UserScramCredential",
        "UserScramCredential",
    ]
    assert picked == [
        {
            "acl_resource_type": "GROUP",
            "acl_resource_name": "payments-",
            "acl_pattern_type": "PREFIXED",
            "acl_principal": "User:alice",
            "acl_host": "*",
            "acl_operation": "READ",
            "acl_permission_type": "ALLOW",
        },
        {"scram_user": "alice", "scram_mechanism": "SCRAM-SHA-512", "scram_iterations": 8192},
        {"scram_user": "alice", "scram_mechanism": "SCRAM-SHA-512"},
    ]
    data = (tmp_path / "sec.parquet").read_bytes()
    for secret in (cred.salt, cred.stored_key, cred.server_key):
        for form in (secret, secret.hex().encode(), base64.b64encode(secret)):
            assert form not in data


def test_partitions_decoded_in_several_processes_give_the_same_file(
    workload: dict[str, Any], tmp_path: Path
) -> None:
    """Big journals are decoded by a process per partition log at a time: the same rows, in
    the same order, with the same metadata as decoding them all in this process; a record
    that does not decode is named as well, and nothing is left behind either way."""
    one = export_journal(workload["store"], tmp_path / "one.parquet", workers=1)
    two = export_journal(workload["store"], tmp_path / "two.parquet", workers=2)
    assert pq.read_table(tmp_path / "two.parquet").equals(pq.read_table(tmp_path / "one.parquet"))
    assert two.info.rows == one.info.rows == workload["info"].rows
    assert (two.info.first_offset, two.info.last_offset) == (
        one.info.first_offset,
        one.info.last_offset,
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.parquet", "two.parquet"]

    from coordinator.runtime.store import StoredRecord

    store = SqliteRecordStore(tmp_path / "s")
    good = codec.encode(codec.decode(b'[1,"g","t",0]', b'[0,5,0,"",1000,-1]'))
    store.append([StoredRecord(good[0], good[1], "g")], 1000)
    store.append([StoredRecord(b'[1,"h","t",0]', b'[0,5,0,"",1000,-1]', "h")], 1000)
    store.append([StoredRecord(b'[3,"g"]', b"[0,{not json", "g")], 2000)
    store.close()
    with pytest.raises(ExportError, match="offset 1 of log 3 does not decode"):
        export_journal(tmp_path / "s", tmp_path / "x.parquet", workers=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one.parquet", "s", "two.parquet"]
    with pytest.raises(ExportError, match="workers must be 1 or more"):
        export_journal(tmp_path / "s", tmp_path / "x.parquet", workers=0)


def transaction_row(epoch: int, state: str) -> tuple[Any, ...]:
    """The exported row (the columns the test below reads) of a GroupTransaction record of
    app-1's transaction, producer 4000 at ``epoch``, in group grp, in ``state``."""
    return ("GroupTransaction", "grp", False, None, None, None, 4000, epoch, "app-1", state, None)


def test_transaction_records_are_exported_with_their_columns(tmp_path: Path) -> None:
    """The records the core writes for transactional offsets (a transaction committed, one
    aborted) and the cluster-level transactional id mapping: one row each, typed."""
    from coordinator.core import records as r
    from coordinator.core.offsets import OffsetCommitPartition, OffsetCommitTopic, TxnOffsetCommit
    from coordinator.core.records import TransactionState
    from coordinator.core.transactions import EndTxn
    from coordinator.harness import Harness
    from coordinator.runtime.store import StoredRecord

    h = Harness()
    h.create_topic("in", 2)
    written: list[r.Record] = [
        r.transactional_id_group_record("app-1", "grp"),
        r.transactional_id_group_record("app-1", None),
    ]
    for epoch, offset, commit in ((0, 10, True), (1, 20, False)):
        req = TxnOffsetCommit(
            transactional_id="app-1",
            group_id="grp",
            producer_id=4000,
            producer_epoch=epoch,
            generation_id=-1,
            member_id="",
            topics=(
                OffsetCommitTopic(
                    name="in",
                    partitions=(OffsetCommitPartition(partition_index=1, committed_offset=offset),),
                ),
            ),
        )
        written += h.run(lambda s, req=req: s.txn_offset_commit(req, h.now_ms)).records
        state = TransactionState.PREPARE_COMMIT if commit else TransactionState.PREPARE_ABORT
        for step in (state, None):
            cmd = EndTxn(producer_id=4000, producer_epoch=epoch, commit=commit, state=step)
            written += h.run(lambda s, cmd=cmd: s.end_transaction(cmd, h.now_ms)).records
    store_dir = tmp_path / "store"
    with SqliteRecordStore(store_dir) as store:
        encoded = [StoredRecord(*codec.encode(rec), rec.group_id) for rec in written]
        store.append(encoded, timestamp_ms=1_000)
    export_journal(store_dir, tmp_path / "txn.parquet")
    rows = pq.read_table(tmp_path / "txn.parquet").to_pylist()
    wanted = (
        "record_type",
        "group_id",
        "tombstone",
        "topic",
        "partition",
        "committed_offset",
        "producer_id",
        "producer_epoch",
        "transactional_id",
        "transaction_state",
        "transaction_group_id",
    )
    assert [tuple(row[k] for k in wanted) for row in rows] == [
        ("TransactionalIdGroup", None, False, None, None, None, None, None, "app-1", None, "grp"),
        ("TransactionalIdGroup", None, True, None, None, None, None, None, "app-1", None, None),
        # The committed transaction: pending, its end forwarded, committed.
        transaction_row(0, "Ongoing"),
        ("TxnOffsetCommit", "grp", False, "in", 1, 10, 4000, 0, None, None, None),
        transaction_row(0, "PrepareCommit"),
        ("OffsetCommit", "grp", False, "in", 1, 10, None, None, None, None, None),
        ("TxnOffsetCommit", "grp", True, "in", 1, None, 4000, None, None, None, None),
        ("GroupTransaction", "grp", True, None, None, None, 4000, None, None, None, None),
        # The aborted one: its pending offset dropped, the committed one stays.
        transaction_row(1, "Ongoing"),
        ("TxnOffsetCommit", "grp", False, "in", 1, 20, 4000, 1, None, None, None),
        transaction_row(1, "PrepareAbort"),
        ("TxnOffsetCommit", "grp", True, "in", 1, None, 4000, None, None, None, None),
        # ... and its record a fence of the older epochs (epoch 0's end left none).
        transaction_row(0, "CompleteAbort"),
    ]
    assert [row["record_type_id"] for row in rows] == [rec.key.TYPE for rec in written]
