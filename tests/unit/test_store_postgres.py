"""PostgresRecordStore specifics, on a real PostgreSQL (tests/pg.py): creation and refusal,
connections lost while committing, a server restarted or gone. The shared semantics are in
test_store_contract.py."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from pg import PostgresServer

from coordinator.routing import partition_for
from coordinator.runtime.store import (
    PostgresRecordStore,
    StoreAccessError,
    StoreCorruptError,
    StoredRecord,
    StoreError,
    StoreLostError,
    StoreVersionError,
    StoreWriteError,
)
from coordinator.runtime.store.postgres_schema import dsn_for_log

P = 4
G = partition_for("g", P)


def put(key: bytes, value: bytes | None = b"v", group_id: str | None = "g") -> StoredRecord:
    return StoredRecord(key=key, value=value, group_id=group_id)


def keys(store: PostgresRecordStore, log: int = G) -> list[bytes]:
    return [rec.key for _, rec in store.load(log)]


@pytest.fixture
def own_server() -> Iterator[PostgresServer]:
    """A PostgreSQL of this test alone: it gets killed and restarted."""
    server = PostgresServer().start()
    yield server
    server.stop()


def test_a_new_store_is_created_once_with_its_schema(pg_dsn: str) -> None:
    with PostgresRecordStore(pg_dsn, partitions=P) as store:
        assert store.partitions == P
        store.append([put(b"a")], 1)
    with psycopg.connect(pg_dsn) as conn:
        tables = {
            r[0]
            for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            )
        }
        meta = dict(conn.execute("SELECT name, value FROM kip848_meta").fetchall())
        logs = [r[0] for r in conn.execute("SELECT log FROM kip848_logs ORDER BY log")]
    assert {
        "kip848_meta",
        "kip848_logs",
        "kip848_journal",
        "kip848_compacted",
        "kip848_nodes",
        "kip848_controller",
    } < tables
    assert {f"kip848_journal_{n}" for n in ("m1", "0", "1", "2", "3")} < tables  # a table per log
    assert (meta["schema_version"], meta["partitions"]) == ("2", str(P))
    assert logs == [-1, 0, 1, 2, 3]
    # Another opener, asking for another count, gets the store as it is.
    with PostgresRecordStore(pg_dsn, partitions=50) as again:
        assert again.partitions == P and keys(again) == [b"a"]


def test_nodes_starting_together_create_one_store(pg_server: PostgresServer) -> None:
    dsn = pg_server.fresh_store_dsn()
    stores: list[Any] = []
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def open_one() -> None:
        barrier.wait(timeout=30)
        try:
            stores.append(PostgresRecordStore(dsn, partitions=P))
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=open_one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == [] and len(stores) == 4
    ids = set()
    for s in stores:
        ids.add(s._store_id)
        s.close()
    assert len(ids) == 1


def test_partial_or_foreign_tables_are_refused_and_left_alone(pg_dsn: str) -> None:
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kip848_journal (x int)")
    with pytest.raises(StoreCorruptError, match="no kip848_meta: not a complete record store"):
        PostgresRecordStore(pg_dsn)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute("SELECT count(*) FROM kip848_journal").fetchone() == (0,)


def test_a_newer_schema_is_refused(pg_dsn: str) -> None:
    PostgresRecordStore(pg_dsn, partitions=P).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE kip848_meta SET value = '9' WHERE name = 'schema_version'")
    with pytest.raises(StoreVersionError, match="schema version 9; this build understands up to 2"):
        PostgresRecordStore(pg_dsn)


@pytest.mark.parametrize("name", ["schema_version", "partitions"])
def test_a_store_whose_meta_is_not_a_number_is_refused_with_a_message(
    pg_dsn: str, name: str
) -> None:
    """A damaged kip848_meta is refused as a corrupt store (``kip848 serve`` says why and exits
    1), for writers and readers alike, and left as it is: before, int() raised ValueError (a
    traceback)."""
    PostgresRecordStore(pg_dsn, partitions=P).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE kip848_meta SET value = 'two' WHERE name = %s", (name,))
    message = f"is corrupt \\(kip848_meta's {name} is 'two', not a number\\); refusing to use it"
    for read_only in (False, True):
        with pytest.raises(StoreCorruptError, match=message):
            PostgresRecordStore(pg_dsn, read_only=read_only)
    with psycopg.connect(pg_dsn) as conn:
        row = conn.execute("SELECT value FROM kip848_meta WHERE name = %s", (name,)).fetchone()
        assert row == ("two",)


def test_kip848_cluster_refuses_a_store_this_build_does_not_understand(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``kip848 cluster describe|move`` read and write the leases without opening the store:
    they check its schema as ``serve`` and ``dump`` do, and refuse (exit 1, the reason on
    stderr, nothing written) a database without a store, a store written by a newer schema, a
    version-1 store no node has migrated yet, and a damaged kip848_meta. Before, a move into a
    store of version 9 was written (``Partition 0 moves to node 1``, exit 0) and describe
    showed it as this build reads its own."""
    from coordinator.cli import main

    describe = ["cluster", "describe", "--store", pg_dsn]
    move = ["cluster", "move", "--store", pg_dsn, "--partition", "0", "--to", "1"]

    def refused(argv: list[str]) -> str:
        assert main(argv) == 1
        out, err = capsys.readouterr()
        assert out == ""
        return err

    assert refused(describe) == (
        f"kip848 cluster: no record store in the PostgreSQL database {dsn_for_log(pg_dsn)}\n"
    )
    PostgresRecordStore(pg_dsn, partitions=P).close()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO kip848_nodes (node_id, address, started_at, expires_at)"
            " VALUES (1, '127.0.0.1:1', now(), now() + interval '1 hour')"
        )
    assert main(describe) == 0
    capsys.readouterr()
    where = dsn_for_log(pg_dsn)
    for version, message in (
        (
            "9",
            f"record store in {where} was written by schema version 9; this build understands "
            "up to 2; upgrade kip848-coordinator",
        ),
        (
            "1",
            f"record store in {where} is of schema version 1 (one node): a node of this build "
            "migrates it when it starts on it (kip848 serve --store)",
        ),
        (
            "two",
            f"the record store in {where} is corrupt (kip848_meta's schema_version is 'two', "
            "not a number); refusing to use it",
        ),
    ):
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(
                "UPDATE kip848_meta SET value = %s WHERE name = 'schema_version'", (version,)
            )
        for argv in (describe, move):
            assert refused(argv) == f"kip848 cluster: {message}\n", (version, argv)
    with psycopg.connect(pg_dsn) as conn:
        assert (
            conn.execute(
                "SELECT log, target, pinned FROM kip848_logs WHERE target IS NOT NULL OR pinned"
            ).fetchall()
            == []
        )


def test_a_server_that_takes_no_writes_is_refused_in_one_line(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--store`` reaching a server that takes no writes (a hot standby, which a fail-over
    manager's replica address or a stale DNS name leads to; here
    ``default_transaction_read_only``): a writer — ``kip848 serve`` — is refused with the
    server's reason and a hint (exit 1, one line on stderr), whether it would create the store
    or opens one; nothing is created; a reader (``dump``) still reads it. Before, the
    server's refusal (``ReadOnlySqlTransaction``) escaped as a traceback."""
    from coordinator.cli import main

    standby = pg_dsn + "%20-cdefault_transaction_read_only%3Don"
    where = dsn_for_log(standby)
    hint = "(this server takes no writes: a standby? --store must reach the primary)"
    serve = ["serve", "--listen", "127.0.0.1:0", "--store", standby, "--node-id", "1"]
    for statement in ("CREATE TABLE", "CREATE FUNCTION"):  # no store yet, then a store
        message = (
            f"PostgreSQL store at {where}: cannot execute {statement} in a read-only "
            f"transaction {hint}"
        )
        with pytest.raises(StoreAccessError) as info:
            PostgresRecordStore(standby, partitions=P)
        assert str(info.value) == message
        assert main(serve) == 1
        assert capsys.readouterr().err == (
            f"kip848 serve: cannot open the store in {where}: {message}\n"
        )
        if statement == "CREATE TABLE":
            with psycopg.connect(pg_dsn) as conn:
                assert conn.execute(
                    "SELECT count(*) FROM pg_tables WHERE schemaname = current_schema()"
                ).fetchone() == (0,)
            with PostgresRecordStore(pg_dsn, partitions=P) as store:
                store.append([put(b"a")], 1)
    with PostgresRecordStore(standby, read_only=True) as reader:
        assert keys(reader) == [b"a"]


def test_a_version_1_store_is_migrated_on_open_nothing_lost(pg_dsn: str) -> None:
    """Schema 1 (one node per store: no node incarnations, no controller, no pins, no loaded
    epochs) becomes schema 2 when a writer opens it; its records stay."""
    with PostgresRecordStore(pg_dsn, partitions=P) as store:
        store.append([put(b"a"), put(b"b")], 1)
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("DROP TABLE kip848_controller")
        conn.execute("ALTER TABLE kip848_logs DROP COLUMN pinned, DROP COLUMN loaded_epoch")
        conn.execute("ALTER TABLE kip848_nodes DROP COLUMN incarnation")
        conn.execute("UPDATE kip848_meta SET value = '1' WHERE name = 'schema_version'")
    with PostgresRecordStore(pg_dsn, read_only=True) as old:
        assert keys(old) == [b"a", b"b"]  # read as it is, never migrated by a reader
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            "SELECT value FROM kip848_meta WHERE name = 'schema_version'"
        ).fetchone() == ("1",)
    with PostgresRecordStore(pg_dsn) as store:
        assert keys(store) == [b"a", b"b"]
        store.append([put(b"c")], 2)
    with psycopg.connect(pg_dsn) as conn:
        assert conn.execute(
            "SELECT value FROM kip848_meta WHERE name = 'schema_version'"
        ).fetchone() == ("2",)
        assert conn.execute("SELECT id, node_id, epoch FROM kip848_controller").fetchall() == [
            (1, None, 0)
        ]
        assert conn.execute(
            "SELECT count(*) FROM kip848_logs WHERE NOT pinned AND loaded_epoch = 0"
        ).fetchone() == (P + 1,)


def test_read_only_never_creates_and_refuses_appends(pg_dsn: str) -> None:
    with pytest.raises(StoreError, match="no record store in the PostgreSQL database"):
        PostgresRecordStore(pg_dsn, read_only=True)
    PostgresRecordStore(pg_dsn, partitions=P).close()
    with (
        PostgresRecordStore(pg_dsn, read_only=True) as store,
        pytest.raises(StoreWriteError, match="read-only"),
    ):
        store.append([put(b"a")], 1)


def test_unreachable_and_bad_credentials_are_access_errors_without_the_password(
    pg_server: PostgresServer,
) -> None:
    from pg import free_port

    nowhere = f"postgresql://kip848:sekrit@127.0.0.1:{free_port()}/x"
    with pytest.raises(StoreAccessError) as info:
        PostgresRecordStore(nowhere, connect_timeout_s=2)
    assert "cannot connect to the PostgreSQL store at postgresql://kip848:***@127.0.0.1" in str(
        info.value
    )
    assert "sekrit" not in str(info.value)
    wrong = pg_server.dsn("postgres").replace("kip848-secret", "wrong-password")
    with pytest.raises(StoreAccessError, match="password authentication failed"):
        PostgresRecordStore(wrong)
    assert dsn_for_log("postgresql://u:p@[::1]:5/d?x=1") == "postgresql://u:***@[::1]:5/d?x=1"


def test_a_password_given_as_a_uri_parameter_is_not_logged() -> None:
    """libpq also takes the password (and the client key's passphrase) as URI parameters."""
    assert dsn_for_log("postgresql://u@h/d?sslmode=require&password=s3cret&sslpassword=k3y") == (
        "postgresql://u@h/d?sslmode=require&password=***&sslpassword=***"
    )
    assert dsn_for_log("postgresql://u:p@h/d?pass%77ord=s3cret") == (
        "postgresql://u:***@h/d?pass%77ord=***"
    )
    assert dsn_for_log("postgresql://u@h/d?connect_timeout=3") == (
        "postgresql://u@h/d?connect_timeout=3"
    )


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresql://kip848:pa%zzsecret@127.0.0.1:1/db",  # a '%' not percent-encoded
        "postgresql://kip848:50%secret@127.0.0.1:1/db",
        "postgresql://kip848@127.0.0.1:1/db?password=pa%zzsecret",
        "postgresql://kip848@127.0.0.1:1/db?sslmode=require&sslpassword=pa%zzsecret",
    ],
)
def test_a_password_libpq_cannot_parse_is_not_echoed_in_the_error(dsn: str) -> None:
    """libpq refuses a URI whose password holds a '%' that is not percent-encoded by quoting
    the token, password and all ("invalid percent-encoded token: ..."): the store's and the
    leases' errors (what ``kip848 serve`` prints and logs) show it as ``***``. Before, the
    password appeared in them."""
    from coordinator.runtime.store.postgres_leases import PostgresLeases

    with pytest.raises(StoreAccessError) as info:
        PostgresRecordStore(dsn, connect_timeout_s=1)
    message = str(info.value)
    assert "invalid percent-encoded token" in message and "***" in message, message
    assert "secret" not in message, message
    leases = PostgresLeases(dsn, where=dsn_for_log(dsn), connect_timeout_s=1)
    with pytest.raises(StoreError) as lease_info:
        leases.state()
    assert "secret" not in str(lease_info.value) and "***" in str(lease_info.value)


def test_a_commit_whose_answer_was_lost_is_resolved_by_asking_postgresql(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connection breaks right after COMMIT reached the server: the transaction committed,
    and the append says so (txid_status), instead of an unknown outcome."""
    store = PostgresRecordStore(pg_dsn, partitions=P)
    store.append([put(b"a")], 1)
    conn = store._conn
    assert conn is not None
    real = conn.execute

    def commit_then_break(query: Any, *args: Any, **kw: Any) -> Any:
        if query == "COMMIT":
            real(query, *args, **kw)
            conn.pgconn.finish()  # the answer is lost with the connection
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(query, *args, **kw)

    monkeypatch.setattr(conn, "execute", commit_then_break)
    assert store.append([put(b"b")], 2) == {G: 1}
    assert store._conn is not conn  # reconnected
    assert store.append([put(b"c")], 3) == {G: 2}
    assert keys(store) == [b"a", b"b", b"c"]
    store.close()


def test_a_commit_that_never_reached_the_server_is_a_known_failure(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = PostgresRecordStore(pg_dsn, partitions=P)
    store.append([put(b"a")], 1)
    conn = store._conn
    assert conn is not None
    real = conn.execute

    def break_before_commit(query: Any, *args: Any, **kw: Any) -> Any:
        if query == "COMMIT":
            conn.pgconn.finish()  # the server aborts the open transaction
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real(query, *args, **kw)

    monkeypatch.setattr(conn, "execute", break_before_commit)
    with pytest.raises(StoreWriteError, match="did not commit") as info:
        store.append([put(b"b")], 2)
    assert info.value.outcome_unknown is False
    assert store.append([put(b"c")], 3) == {G: 1}  # the offset the failed batch would have had
    assert keys(store) == [b"a", b"c"]
    store.close()


def test_a_transaction_id_given_out_again_after_a_crash_is_not_taken_for_the_batch(
    pg_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL crashed during the batch's COMMIT before any of the transaction reached its
    write-ahead log: crash recovery gives its transaction id out again, and another
    transaction, committed since, has it — ``txid_status`` says "committed". The batch did
    not commit (its rows are not there): the append fails, as any batch whose COMMIT did not
    land, and the next batch takes its offset. Before, the append counted as committed: its
    requests were acknowledged and their records lost (the HA chaos rehearsal's acknowledged
    commits missing after PostgreSQL was killed -9)."""
    store = PostgresRecordStore(pg_dsn, partitions=P)
    store.append([put(b"a")], 1)
    with psycopg.connect(pg_dsn, autocommit=True) as other, other.transaction():
        (reused,) = other.execute("SELECT txid_current()").fetchone()  # committed
    conn = store._conn
    assert conn is not None
    real_write, real_execute = store._write, conn.execute

    def write_with_a_reused_id(c: Any, rows: Any) -> int:
        real_write(c, rows)
        return int(reused)

    def lost_before_commit(query: Any, *args: Any, **kw: Any) -> Any:
        if query == "COMMIT":
            conn.pgconn.finish()  # the server aborts the open transaction
            raise psycopg.OperationalError("server closed the connection unexpectedly")
        return real_execute(query, *args, **kw)

    monkeypatch.setattr(store, "_write", write_with_a_reused_id)
    monkeypatch.setattr(conn, "execute", lost_before_commit)
    with pytest.raises(StoreWriteError, match="did not commit") as info:
        store.append([put(b"b")], 2)
    assert info.value.outcome_unknown is False
    monkeypatch.undo()
    assert store.append([put(b"c")], 3) == {G: 1}  # the offset the failed batch would have had
    assert keys(store) == [b"a", b"c"]
    store.close()


def test_appends_go_on_after_postgresql_restarts(own_server: PostgresServer) -> None:
    dsn = own_server.fresh_store_dsn()
    store = PostgresRecordStore(dsn, partitions=P, connect_timeout_s=2)
    store.append([put(b"a")], 1)
    own_server.restart(crash=True)  # a crash: recovery from its write-ahead log
    store.append([put(b"b")], 2)  # a new connection
    assert keys(store) == [b"a", b"b"]
    own_server.kill()
    with pytest.raises(StoreWriteError) as info:
        store.append([put(b"c")], 3)
    assert info.value.outcome_unknown is False  # nothing was sent: known
    with pytest.raises(StoreWriteError):
        store.probe_write()
    own_server.restart()
    store.probe_write()
    assert store.append([put(b"c")], 4) == {G: 2}
    store.close()
    with PostgresRecordStore(dsn, read_only=True) as reader:
        assert keys(reader) == [b"a", b"b", b"c"]


def test_reads_go_on_when_the_idle_readers_went_stale(pg_dsn: str) -> None:
    """PostgreSQL restarted (here: ended their sessions) since the store's last reads: every
    idle reader kept for the next read is stale. The next reads (a partition's load, the next
    offset of a partition taken over: what a node does first after an outage of PostgreSQL)
    run on new connections rather than fail, each once, and cost a take-over."""
    store = PostgresRecordStore(pg_dsn, partitions=P)
    store.append([put(b"a")], 1)
    reads = [store.load_rows(G) for _ in range(3)]  # three at once: three idle readers after
    assert [len(list(rows)) for rows in reads] == [1, 1, 1]
    pids = [conn.info.backend_pid for conn in store._readers]
    assert len(pids) == 3
    with psycopg.connect(pg_dsn, autocommit=True) as admin:
        ended = admin.execute(
            "SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS t(pid)", (pids,)
        ).fetchall()
    assert ended == [(True,)] * 3
    assert keys(store) == [b"a"]
    assert store.adopt(G) == 1  # its next offset, read on a new connection too
    store.close()


def test_a_store_replaced_under_a_running_server_is_lost(pg_dsn: str) -> None:
    store = PostgresRecordStore(pg_dsn, partitions=P)
    store.check_identity()
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute("UPDATE kip848_meta SET value = 'another' WHERE name = 'store_id'")
    with pytest.raises(StoreLostError, match="no longer the one this server opened"):
        store.check_identity()
    with pytest.raises(StoreLostError):
        store.append([put(b"a")], 1)
    with pytest.raises(StoreError, match="nothing to rescue"):
        store.rescue()
    store.close()


# -- leases and fencing -------------------------------------------------------------------------


def test_leases_move_only_when_free_or_expired_and_fence_the_old_leader(pg_dsn: str) -> None:
    """Node 1 leads partition G; while its lease lasts node 2 cannot take it; once it expired
    node 2 takes it at the next epoch, and node 1's appends to it are refused from then on
    (nothing written), while node 2's go through; the journal says who wrote what."""
    import time

    from coordinator.runtime.store import Fence, StoreFencedError
    from coordinator.runtime.store.postgres_leases import PostgresLeases

    a = PostgresRecordStore(pg_dsn, partitions=P)
    b = PostgresRecordStore(pg_dsn, partitions=P)
    leases = PostgresLeases(pg_dsn, where="test")
    assert leases.acquire(1, [G, 0], lease_ms=300) == {G: 1, 0: 1}
    assert leases.acquire(2, [G], lease_ms=300) == {}  # held
    a.append([put(b"a1")], 1, fence=Fence(1, {G: 1}))
    with pytest.raises(StoreFencedError) as info:  # node 2 does not lead it
        b.append([put(b"b0")], 1, fence=Fence(2, {G: 1}))
    assert info.value.partitions == {G}
    assert leases.renew(1, {G: 1, 0: 1}, lease_ms=300) == {G, 0}
    time.sleep(0.5)  # node 1 missed its renewals: its leases expired
    assert leases.acquire(2, [G], lease_ms=10_000) == {G: 2}
    assert leases.renew(1, {G: 1, 0: 1}, lease_ms=300) == {0}  # G is lost, 0 nobody wanted
    with pytest.raises(StoreFencedError) as info:
        a.append([put(b"a2"), put(b"h", group_id="h")], 2, fence=Fence(1, {G: 1, 0: 1}))
    assert info.value.partitions == {G} and info.value.outcome_unknown is False
    b._next_offset[G] = 1  # b's view of the log: it loaded it after taking it over
    assert b.append([put(b"b1")], 3, fence=Fence(2, {G: 2})) == {G: 1}
    epochs = [(e.key, e.leader_epoch) for e in b.journal(G)]
    assert epochs == [(b"a1", 1), (b"b1", 2)]
    assert [e.offset for e in b.journal(0)] == []  # the refused batch left nothing anywhere
    assert [
        (lease.partition, lease.leader, lease.epoch)
        for lease in leases.leases()
        if lease.partition in (0, G)
    ] == sorted([(0, 1, 1), (G, 2, 2)])
    leases.release(2, {G: 2})
    assert leases.acquire(1, [G], lease_ms=1000) == {G: 3}  # free at once, the epoch moves on
    leases.set_target(G, 2)
    leases.release(1, {G: 3})
    assert leases.acquire(1, [G], lease_ms=1000) == {}  # targeted at node 2
    assert leases.acquire(2, [G], lease_ms=1000) == {G: 4}
    for closable in (a, b, leases):
        closable.close()


def test_a_takeover_waits_for_the_append_that_holds_the_lease(pg_dsn: str) -> None:
    """The fence locks the lease row FOR SHARE in the append's transaction: a takeover
    started meanwhile waits until the append committed, so the new leader loads it."""
    import time

    from coordinator.runtime.store.postgres_leases import PostgresLeases

    store = PostgresRecordStore(pg_dsn, partitions=P)
    leases = PostgresLeases(pg_dsn, where="test")
    assert leases.acquire(1, [G], lease_ms=1) == {G: 1}
    time.sleep(0.05)  # expired: anyone may take it
    conn = psycopg.connect(pg_dsn, autocommit=True)
    conn.execute("BEGIN")
    conn.execute("SELECT kip848_fence(1, ARRAY[%s]::int[], ARRAY[1]::bigint[])", (G,))
    taken: list[dict[int, int]] = []
    thief = threading.Thread(target=lambda: taken.append(leases.acquire(2, [G], lease_ms=1000)))
    thief.start()
    thief.join(timeout=1.0)
    assert thief.is_alive() and taken == []  # waiting for the fenced transaction
    conn.execute("COMMIT")
    thief.join(timeout=10)
    assert taken == [{G: 2}]
    conn.close()
    store.close()
    leases.close()


def _tcp_settings(conn: psycopg.Connection[Any]) -> tuple[int, int, int, int, int]:
    """What the kernel does about a silent peer on this connection's socket: keepalive on,
    idle seconds, probe interval, probe count, user timeout (ms)."""
    import os
    import socket

    sock = socket.socket(fileno=os.dup(conn.pgconn.socket))
    try:
        return (
            sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT),
            sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT),
        )
    finally:
        sock.close()


def test_every_connection_notices_a_server_gone_silent_within_seconds(pg_dsn: str) -> None:
    """A PostgreSQL whose machine vanished (a failover that moved its address, a network cut)
    sends no reset: with the kernel's defaults a connection waits for it for minutes to hours
    (keepalive probes after 2 hours idle; unacknowledged data retried for about 15 minutes),
    and the node's writer, reader, lease and LISTEN connections with it. Each of them has
    keepalive probes after 5 s idle, 3 of them 2 s apart, and a 10 s timeout for data not
    acknowledged (before: 7200 s, 75 s, 9, no user timeout), unless the URI sets its own
    (which wins)."""
    from coordinator.runtime.store.postgres_leases import PostgresLeases

    expected = (1, 5, 2, 3, 10_000)
    with PostgresRecordStore(pg_dsn, partitions=P) as store:
        assert _tcp_settings(store._conn) == expected
        reader = store._connect(read=True)
        try:
            assert _tcp_settings(reader) == expected
        finally:
            reader.close()
    leases = PostgresLeases(pg_dsn, where="test")
    try:
        assert _tcp_settings(leases._connection()) == expected
    finally:
        leases._connection().close()
    own = pg_dsn + ("&" if "?" in pg_dsn else "?") + "keepalives_idle=30&tcp_user_timeout=0"
    with PostgresRecordStore(own, partitions=P) as store:
        assert _tcp_settings(store._conn) == (1, 30, 2, 3, 0)


def test_a_pipeline_on_a_dropped_connection_leaves_no_psycopg_warning(
    pg_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection dropped inside a pipeline block (the leases' and the offsets' reads use
    them): the block's error is the store's to report (a StoreError with its cause); psycopg's
    own "error ignored terminating <psycopg.Pipeline [BAD]>" WARNING, which only repeats it, is
    filtered out (it was logged on every lease connection cut). Other psycopg lines stay."""
    import coordinator.runtime.store.postgres_schema  # noqa: F401 - installs the filter

    with (
        psycopg.connect(pg_dsn, autocommit=True) as conn,
        psycopg.connect(pg_dsn, autocommit=True) as admin,
    ):
        pid = conn.info.backend_pid
        with caplog.at_level(logging.WARNING, logger="psycopg"):
            with pytest.raises(psycopg.OperationalError), conn.pipeline():
                conn.execute("SELECT 1")
                admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
                conn.execute("SELECT pg_sleep(0)").fetchall()
            logging.getLogger("psycopg").warning("another psycopg warning")
    assert [r.getMessage() for r in caplog.records if r.name == "psycopg"] == [
        "another psycopg warning"
    ]


def test_an_earlier_process_leaving_does_not_free_the_controller_its_node_id_holds_now(
    pg_dsn: str,
) -> None:
    """Node 1's first process (incarnation ``old``) was the controller; cut off past its
    registration, it was replaced by a second process with id 1 (``new``), which became the
    controller once the first one's lease ran out. The first one stopping then (SIGTERM, its
    connection back) unregisters only itself: the controller's lease stays the second one's,
    at its epoch. Before, its ``unregister`` freed the controller's lease of node 1, whoever
    held it, and the second process lost it until its next heartbeat (a controller change
    for nothing, another node may take it meanwhile)."""
    from coordinator.runtime.store.postgres_leases import PostgresLeases

    PostgresRecordStore(pg_dsn, partitions=P).close()
    leases = PostgresLeases(pg_dsn, where="test")
    try:

        def tick(incarnation: str, controller_epoch: int | None) -> int | None:
            return leases.tick(
                1,
                incarnation,
                {},
                60_000,
                controller_epoch=controller_epoch,
                cluster_offset=-1,
                loaded={},
            ).controller_epoch

        def controller() -> tuple[Any, ...]:
            with psycopg.connect(pg_dsn) as conn:
                row = conn.execute(
                    "SELECT node_id, epoch, expires_at > clock_timestamp() FROM kip848_controller"
                ).fetchone()
                assert row is not None
                return tuple(row)

        assert leases.register(1, "old", "127.0.0.1:1", None, 60_000) is None
        assert tick("old", None) == 1
        with psycopg.connect(pg_dsn, autocommit=True) as conn:  # cut off past its lease
            conn.execute("UPDATE kip848_nodes SET expires_at = clock_timestamp() - interval '1s'")
            conn.execute("UPDATE kip848_controller SET expires_at = clock_timestamp()")
        assert leases.register(1, "new", "127.0.0.1:2", None, 60_000) is None
        assert tick("new", None) == 2
        leases.unregister(1, "old")
        assert controller() == (1, 2, True)
        assert tick("new", 2) == 2
        leases.unregister(1, "new")  # the second one leaving frees it
        assert controller() == (None, 2, None)
    finally:
        leases.close()


def test_schema_changed_stops_a_node_at_any_other_version_than_its_own() -> None:
    """The check a node's heartbeat runs on the version it read (the pure seam): its own goes
    on; a newer one names both versions and says to upgrade; an older or unreadable one (no
    build migrates down) says the store is not the one it opened."""
    from coordinator.runtime.store.postgres_schema import SCHEMA_VERSION, schema_changed

    assert SCHEMA_VERSION == 2
    assert schema_changed(2) is None
    assert schema_changed(3) == (
        "the store in PostgreSQL is at schema version 3, newer than this build's 2 (a node of "
        "a newer build migrated it); this node can neither read nor write it: upgrade this "
        "node to that build"
    )
    assert schema_changed(1) == (
        "the store in PostgreSQL is at schema version 1, not the 2 this node opened it at "
        "(restored from a backup of an older schema, or kip848_meta edited): it is not the "
        "store this node opened"
    )
    assert schema_changed(-1) == (
        "the store in PostgreSQL is at no readable schema version, not the 2 this node opened "
        "it at (restored from a backup of an older schema, or kip848_meta edited): it is not "
        "the store this node opened"
    )


def test_a_store_migrated_by_a_newer_build_under_an_open_writer_takes_none_of_its_writes(
    pg_dsn: str,
) -> None:
    """A writer of this build opened the store; a newer build's migration (the journal locked,
    then the version set) runs under it. Its appends, fenced or not, and its write probe are
    refused with the versions (nothing written), and a heartbeat's read carries the new
    version (one column more of a statement the tick already runs); a version set back to 2
    lets it write again, one not a number reads as -1. Before, the appends landed in the layout
    the newer build no longer has."""
    from coordinator.runtime.store import Fence
    from coordinator.runtime.store.postgres_leases import PostgresLeases

    store = PostgresRecordStore(pg_dsn, partitions=P)
    leases = PostgresLeases(pg_dsn, where="test")
    assert leases.acquire(1, [G], lease_ms=10_000) == {G: 1}
    assert store.append([put(b"k0")], 1, fence=Fence(1, {G: 1})) == {G: 0}

    def set_version(value: str) -> None:
        with psycopg.connect(pg_dsn) as conn:
            conn.execute("LOCK TABLE kip848_journal, kip848_compacted IN SHARE MODE")
            conn.execute(
                "UPDATE kip848_meta SET value = %s WHERE name = 'schema_version'", (value,)
            )

    set_version("3")
    refused = (
        f"append to {dsn_for_log(pg_dsn)} refused: kip848 store schema version 3 is not this "
        "build's 2"
    )
    for fence in (Fence(1, {G: 1}), None):
        with pytest.raises(StoreWriteError) as info:
            store.append([put(b"k1")], 2, fence=fence)
        assert str(info.value) == refused
    with pytest.raises(StoreWriteError) as info:
        store.probe_write()
    assert str(info.value) == (
        f"write probe of {dsn_for_log(pg_dsn)} failed: kip848 store schema version 3 is not "
        "this build's 2"
    )
    assert leases.state().schema_version == 3
    assert [e.key for e in store.journal(G)] == [b"k0"]
    set_version("x")
    assert leases.state().schema_version == -1
    set_version("2")
    assert leases.state().schema_version == 2
    store.probe_write()
    assert store.append([put(b"k1")], 2, fence=Fence(1, {G: 1})) == {G: 1}
    assert [e.key for e in store.journal(G)] == [b"k0", b"k1"]
    store.close()
    leases.close()
