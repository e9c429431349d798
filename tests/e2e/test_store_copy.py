"""``kip848 store copy``: one node's SQLite store copied into a PostgreSQL store, from which
nodes serve the same groups, offsets, topics, ACLs and credentials (docs/ha.md, "From one node
to several")."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from conftest import PG_LEASE, ServerProcess, run_cli

from coordinator.analytics.workload import WorkloadOptions, generate
from coordinator.core import codec
from coordinator.core import records as r
from coordinator.runtime.store import PostgresRecordStore, SqliteRecordStore, StoredRecord
from coordinator.runtime.store.postgres_schema import dsn_for_log
from coordinator.security import scram

SECRET = "kip848-secret"  # the tests' PostgreSQL password (tests/pg.py): never printed


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A realistic SQLite store of one node (the workload generator: the real runtime on
    virtual time; classic and consumer groups, offsets, topics), plus an ACL and a SCRAM
    credential, with a retention-trimmed journal: the compacted view holds records the journal
    no longer does."""
    data = tmp_path_factory.mktemp("copy") / "one-node"
    generate(
        str(data),
        WorkloadOptions(seed=3, groups=6, duration_s=600, shards=4, classic_fraction=0.5),
    )
    mech = scram.ScramMechanism.SCRAM_SHA_512
    cred = scram.credential_from_password(mech, "hunter2", b"pepper-salt-16by", 8192)
    value = r.UserScramCredentialValue(
        salt=cred.salt, stored_key=cred.stored_key, server_key=cred.server_key, iterations=8192
    )
    acl = r.AccessControlEntryKey(3, "payments-", 4, "User:alice", "*", 3, 3)
    with SqliteRecordStore.in_data_dir(data) as store:
        last_ms = max(e.timestamp_ms for e in store.journal(1))
        store.append(
            [
                StoredRecord(*codec.encode(rec), None)
                for rec in (r.acl_record(acl, True), r.scram_credential_record("alice", 2, value))
            ],
            timestamp_ms=last_ms + 1,
        )
        assert store.expire_journal(min(e.timestamp_ms for e in store.journal(1)) + 60_000) > 0
    return data


def _dumps(*where: str) -> tuple[list[Any], list[Any], Any]:
    """The store's journal, compacted view (``kip848 dump --output json``) and replay summary."""
    out = []
    for view in (("--journal",), ()):
        p = run_cli("dump", *where, *view, "--output", "json")
        assert p.returncode == 0, p.stderr
        out.append([json.loads(line) for line in p.stdout.splitlines()])
    p = run_cli("replay", *where, "--output", "json")
    assert p.returncode == 0, p.stderr
    summary = json.loads(p.stdout)
    for name in ("data_dir", "store", "load_seconds"):  # where it was read, and how fast
        del summary[name]
    for shard in summary["shards"]:
        del shard["ms"]
    return out[0], out[1], summary


def test_a_copied_store_holds_every_record_and_nodes_serve_it(
    source: Path, pg_server: Any, tmp_path: Path
) -> None:
    data = tmp_path / "one-node"
    shutil.copytree(source, data)
    before = _dumps("--data-dir", str(data))
    assert before[0] and before[1] and before[2]
    dsn = pg_server.fresh_store_dsn()
    p = run_cli("store", "copy", "--data-dir", str(data), "--store", dsn, timeout=120)
    assert p.returncode == 0, p.stderr
    journal, compacted = len(before[0]), len(before[1])
    assert p.stdout == (
        f"Copied the store in {data} into {dsn_for_log(dsn)}: 4 partitions and the cluster "
        f"log, {compacted} compacted records and {journal} journal entries. Start the nodes "
        "with --store.\n"
    )
    assert SECRET not in p.stdout + p.stderr
    # Record for record: the same offsets, times, keys and values in every log, the same
    # state replayed, and each log goes on at the offset the SQLite store would have given.
    assert _dumps("--store", dsn) == before
    with (
        SqliteRecordStore.in_data_dir(data, read_only=True) as one,
        PostgresRecordStore(dsn, read_only=True) as pg,
    ):
        assert one.stats()["logs"].keys() == pg.stats()["logs"].keys()
        for log in one.stats()["logs"]:
            assert pg.last_offset(log) == one.last_offset(log)
            assert (
                pg.stats()["logs"][log]["journal_first_offset"]
                == one.stats()["logs"][log]["journal_first_offset"]
            )
    # A node on the copy serves what the one node served.
    views = []
    for start in (
        lambda: ServerProcess(data),
        lambda: ServerProcess(tmp_path / "node1", "--store", dsn, "--node-id", "1", *PG_LEASE),
    ):
        server = start()
        try:
            views.append(_views(server))
        finally:
            assert server.stop() == 0, server.stderr_text()
    groups, _topics, acls, users = views[0][:4]
    assert len(groups) == 6 and acls and users
    assert views[1] == views[0]


def _tables(dsn: str) -> dict[str, int]:
    """The rows of each of the store's record tables (nothing: the database holds no store)."""
    import psycopg

    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        names = [
            row[0]
            for row in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
                " AND tablename IN ('kip848_journal', 'kip848_compacted')"
            ).fetchall()
        ]
        return {
            name: conn.execute(f"SELECT count(*) FROM {name}").fetchone()[0]  # type: ignore[index]
            for name in sorted(names)
        }


def _records(dsn: str) -> list[Any]:
    """Every log's journal and compacted view, as the PostgreSQL store reads them."""
    with PostgresRecordStore(dsn, read_only=True) as pg:
        return [(log, list(pg.journal(log)), list(pg.load(log))) for log in pg.stats()["logs"]]


def _copy(data: Path, dsn: str, *more: str) -> tuple[int, str, str]:
    p = run_cli("store", "copy", "--data-dir", str(data), "--store", dsn, *more, timeout=120)
    assert SECRET not in p.stdout + p.stderr and "Traceback" not in p.stderr
    return p.returncode, p.stdout, p.stderr


def test_a_copy_that_could_lose_or_mix_records_is_refused_and_changes_nothing(
    source: Path, pg_server: Any, tmp_path: Path
) -> None:
    data = tmp_path / "one-node"
    shutil.copytree(source, data)
    # A server still running on the SQLite store: it could write after the copy read.
    dsn = pg_server.fresh_store_dsn()
    server = ServerProcess(data)
    try:
        code, out, err = _copy(data, dsn)
    finally:
        assert server.stop() == 0, server.stderr_text()
    assert (code, out, len(err.splitlines())) == (1, "", 1)
    assert err.startswith("kip848 store copy: ") and "coordinator.db.lock" in err
    assert _tables(dsn) == {}
    # Into a store some node used (here: the copy's own result), or one of other partitions.
    assert _copy(data, dsn)[0] == 0
    copied = _records(dsn)
    code, out, err = _copy(data, dsn)
    assert (code, out) == (1, "")
    assert err == (
        f"kip848 store copy: the PostgreSQL store at {dsn_for_log(dsn)} is in use (it holds "
        "records, or nodes have registered or led partitions there): a store is copied only "
        "into one no node has used; nothing was changed\n"
    )
    assert _records(dsn) == copied
    other = pg_server.fresh_store_dsn()
    PostgresRecordStore(other, partitions=8).close()
    code, out, err = _copy(data, other)
    assert (code, out) == (1, "")
    assert err == (
        f"kip848 store copy: the PostgreSQL store at {dsn_for_log(other)} has 8 coordinator "
        "partitions and the SQLite store 4: a group's records would be in another partition "
        "than the one it hashes to; copy into a new database\n"
    )
    assert _tables(other) == {"kip848_compacted": 0, "kip848_journal": 0}
    # Not a PostgreSQL URI (usage), PostgreSQL out of reach.
    p = run_cli("store", "copy", "--data-dir", str(data), "--store", "sqlite:///x")
    assert (p.returncode, p.stdout) == (2, "")
    assert "--store takes a postgresql:// URI, got 'sqlite:///x'" in p.stderr
    code, out, err = _copy(data, f"postgresql://kip848:{SECRET}@127.0.0.1:1/none")
    assert (code, out, len(err.splitlines())) == (1, "", 1)
    assert err.startswith("kip848 store copy: cannot connect to the PostgreSQL store at ")


def test_a_copy_that_fails_midway_commits_nothing_and_can_be_run_again(
    source: Path, pg_server: Any, tmp_path: Path
) -> None:
    import psycopg

    data = tmp_path / "one-node"
    shutil.copytree(source, data)
    dsn = pg_server.fresh_store_dsn()
    PostgresRecordStore(dsn, partitions=4).close()
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute(
            "CREATE FUNCTION fail_copy() RETURNS trigger LANGUAGE plpgsql AS"
            " $$ BEGIN RAISE EXCEPTION 'injected failure at offset %', NEW.\"offset\"; END $$"
        )
        conn.execute(
            "CREATE TRIGGER fail_copy BEFORE INSERT ON kip848_compacted FOR EACH ROW"
            " WHEN (NEW.log = 3) EXECUTE FUNCTION fail_copy()"
        )
    code, out, err = _copy(data, dsn)
    assert (code, out, len(err.splitlines())) == (1, "", 1)
    assert err.startswith(
        f"kip848 store copy: copying into the PostgreSQL store at {dsn_for_log(dsn)} failed "
        "(nothing was committed): injected failure at offset "
    )
    assert _tables(dsn) == {"kip848_compacted": 0, "kip848_journal": 0}
    with psycopg.connect(dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute("DROP TRIGGER fail_copy ON kip848_compacted")
    assert _copy(data, dsn)[0] == 0
    assert _dumps("--store", dsn) == _dumps("--data-dir", str(data))


def _views(server: ServerProcess) -> tuple[Any, ...]:
    """What a node serves of the store: groups (described with offsets and members), topics,
    ACLs and SCRAM users."""
    views: list[Any] = []
    for command in (("groups", "list"), ("topics", "list"), ("acls", "list"), ("users", "list")):
        p = run_cli(*command, "--bootstrap-server", server.address, "--output", "json")
        assert p.returncode == 0, p.stderr
        views.append(json.loads(p.stdout))
    for group in sorted(g["group_id"] for g in views[0]):
        q = run_cli(
            "groups", "describe", group, "--offsets", "--members",
            "--bootstrap-server", server.address, "--output", "json",
        )  # fmt: skip
        assert q.returncode == 0, q.stderr
        views.append(json.loads(q.stdout))
    return tuple(views)


def _copy_back(dsn: str, data: Path) -> tuple[int, str, str]:
    return _copy(data, dsn, "--to", "sqlite")


def _on_postgres(source: Path, pg_server: Any, tmp_path: Path) -> tuple[Path, str]:
    """The one node's store (a copy of ``source`` in ``tmp_path``) and a PostgreSQL store it
    was copied into."""
    data = tmp_path / "one-node"
    shutil.copytree(source, data)
    dsn = pg_server.fresh_store_dsn()
    assert _copy(data, dsn)[0] == 0
    return data, dsn


def test_several_nodes_store_copied_back_into_sqlite_serves_the_same_and_goes_on(
    source: Path, pg_server: Any, tmp_path: Path
) -> None:
    # One node's store copied into PostgreSQL, where a node then writes records of its own
    # (a topic, a group's offsets: the cluster log and a partition, with leader epochs).
    data, dsn = _on_postgres(source, pg_server, tmp_path)
    node = ServerProcess(tmp_path / "node1", "--store", dsn, "--node-id", "1", *PG_LEASE)
    try:
        p = run_cli("topics", "create", "added-on-pg", "--partitions", "3",
                    "--bootstrap-server", node.address)  # fmt: skip
        assert p.returncode == 0, p.stderr
        p = run_cli("groups", "reset-offsets", "made-on-pg", "--topic", "added-on-pg",
                    "--to-offset", "7", "--execute", "--bootstrap-server", node.address)  # fmt: skip
        assert p.returncode == 0, p.stderr
        on_pg = _views(node)
    finally:
        assert node.stop() == 0, node.stderr_text()
    assert any(t["name"] == "added-on-pg" for t in on_pg[1])
    assert "made-on-pg" in {g["group_id"] for g in on_pg[0]}
    back = tmp_path / "back"
    code, out, err = _copy_back(dsn, back)
    assert (code, err) == (0, ""), err
    before = _dumps("--store", dsn)
    journal, compacted = len(before[0]), len(before[1])
    assert out == (
        f"Copied the store at {dsn_for_log(dsn)} into {back}: 4 partitions and the cluster "
        f"log, {compacted} compacted records and {journal} journal entries. Start the one "
        "node with --data-dir; do not start nodes on the PostgreSQL store again.\n"
    )
    # Record for record, the expired prefix included, and each log goes on where it would
    # have on PostgreSQL; the store is only read.
    assert _dumps("--data-dir", str(back)) == before
    with (
        SqliteRecordStore.in_data_dir(back, read_only=True) as one,
        PostgresRecordStore(dsn, read_only=True) as pg,
    ):
        logs = one.stats()["logs"]
        assert logs.keys() == pg.stats()["logs"].keys()
        for log, info in logs.items():
            assert one.last_offset(log) == pg.last_offset(log)
            assert info["journal_first_offset"] == pg.stats()["logs"][log]["journal_first_offset"]
        assert logs[1]["journal_first_offset"] > 0  # the retention-trimmed prefix came along
    assert _dumps("--store", dsn) == before
    # One node on the copy serves what the PostgreSQL node served, and appends after it.
    server = ServerProcess(back)
    try:
        assert _views(server) == on_pg
        p = run_cli("topics", "create", "added-after", "--partitions", "1",
                    "--bootstrap-server", server.address)  # fmt: skip
        assert p.returncode == 0, p.stderr
    finally:
        assert server.stop() == 0, server.stderr_text()
    with SqliteRecordStore.in_data_dir(back, read_only=True) as one:
        added = list(one.journal(-1))[-1]
        assert added.offset == logs[-1]["last_offset"] + 1
        assert b"added-after" in added.key and added.value


def test_a_copy_back_that_could_lose_or_mix_records_is_refused_and_changes_nothing(
    source: Path, pg_server: Any, tmp_path: Path
) -> None:
    data, dsn = _on_postgres(source, pg_server, tmp_path)
    copied = _records(dsn)
    back = tmp_path / "back"
    # A node running on the store: it could append while the copy reads.
    node = ServerProcess(tmp_path / "node1", "--store", dsn, "--node-id", "1", *PG_LEASE)
    try:
        code, out, err = _copy_back(dsn, back)
    finally:
        assert node.stop() == 0, node.stderr_text()
    assert (code, out) == (1, "")
    assert err.startswith(
        f"kip848 store copy: the PostgreSQL store at {dsn_for_log(dsn)} is in use by node 1 "
        "(registered or leading partitions): stop every node first (a node killed without "
        "stopping holds the store for its lease, here "
    )
    assert err.endswith(" s more); nothing was changed\n")
    assert not back.exists()
    assert _records(dsn) == copied
    # Into a data directory whose store holds records (here: the one node's own).
    code, out, err = _copy_back(dsn, data)
    assert (code, out) == (1, "")
    assert err == (
        f"kip848 store copy: the SQLite store at {data / 'coordinator.db'} holds records: a "
        "store is copied only into a data directory that holds none; nothing was changed\n"
    )
    assert _dumps("--data-dir", str(data)) == _dumps("--store", dsn)
    # A database that holds no store; PostgreSQL out of reach; not a PostgreSQL URI.
    empty = pg_server.fresh_store_dsn()
    code, out, err = _copy_back(empty, back)
    assert (code, out, len(err.splitlines())) == (1, "", 1)
    assert err.startswith("kip848 store copy: ") and "no record store" in err
    assert _tables(empty) == {} and not back.exists()
    code, out, err = _copy_back(f"postgresql://kip848:{SECRET}@127.0.0.1:1/none", back)
    assert (code, out, len(err.splitlines())) == (1, "", 1)
    assert err.startswith("kip848 store copy: cannot connect to the PostgreSQL store at ")
    p = run_cli("store", "copy", "--to", "sqlite", "--store", "sqlite:///x", "--data-dir", "d")
    assert (p.returncode, p.stdout) == (2, "")
    assert "--store takes a postgresql:// URI, got 'sqlite:///x'" in p.stderr
    p = run_cli("store", "copy", "--to", "sqlite", "--store", dsn, "--data-dir", str(back),
                "--accept-lost-wal")  # fmt: skip
    assert (p.returncode, p.stdout) == (2, "")
    assert p.stderr == (
        "kip848 store copy: --accept-lost-wal is for a SQLite store copied from (--to postgresql)\n"
    )
    # Into an empty store of another partition count: its groups would hash elsewhere.
    other = tmp_path / "other"
    SqliteRecordStore.in_data_dir(other, partitions=8).close()
    code, out, err = _copy_back(dsn, other)
    assert (code, out) == (1, "")
    assert err == (
        f"kip848 store copy: the SQLite store at {other / 'coordinator.db'} has 8 coordinator "
        "partitions and the PostgreSQL store 4: a group's records would be in another "
        "partition than the one it hashes to; copy into a new data directory\n"
    )
    # A copy that fails midway (an injected SQLite failure) commits nothing; run again, it
    # copies everything.
    SqliteRecordStore.in_data_dir(back, partitions=4).close()
    with sqlite3.connect(back / "coordinator.db") as conn:
        conn.execute(
            "CREATE TRIGGER fail_copy BEFORE INSERT ON compacted WHEN NEW.log = 3"
            " BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
        )
    code, out, err = _copy_back(dsn, back)
    assert (code, out) == (1, "")
    assert err == (
        f"kip848 store copy: copying into the SQLite store at {back / 'coordinator.db'} failed "
        "(nothing was committed): injected failure\n"
    )
    with sqlite3.connect(back / "coordinator.db") as conn:
        assert conn.execute("SELECT count(*) FROM journal").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM compacted").fetchone() == (0,)
        conn.execute("DROP TRIGGER fail_copy")
    assert _copy_back(dsn, back)[0] == 0
    assert _dumps("--data-dir", str(back)) == _dumps("--store", dsn)
