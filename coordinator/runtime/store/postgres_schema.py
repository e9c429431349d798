"""The PostgreSQL store's schema: finding it, creating it (once, whoever comes first), and the
URI as it may be logged.

Creation runs in one transaction under an advisory lock, so nodes starting together create the
store once; a database that holds some ``kip848_`` tables but no complete store is refused, never
completed or replaced. Journal and compacted view are LIST-partitioned by log: a partition's
records are a table of their own, read, cut and loaded without touching the others.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote_plus, urlsplit, urlunsplit

from .api import StoreCorruptError, StoreVersionError, log_ids
from .sqlite_schema import package_version


class _PipelineExitNoise(logging.Filter):
    """psycopg logs a WARNING ("error ignored terminating <psycopg.Pipeline [BAD]>") when a
    pipeline block raised and closing the pipeline failed too — a connection PostgreSQL or the
    network dropped. The store raises the block's error as a ``StoreError`` with its cause, and
    the node logs that: the second line only repeats it, without saying what was going on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("error ignored terminating")


logging.getLogger("psycopg").addFilter(_PipelineExitNoise())

if TYPE_CHECKING:
    import psycopg

SCHEMA_VERSION = 2
"""1: the first PostgreSQL store; 2: nodes share partitions (each node's incarnation, the
controller's lease, operator moves, what each leader has loaded). Version 1 is migrated when a
writer opens it (:func:`migrate`)."""
_LOCK_KEY = 0x4B383438  # "K848": pg_advisory_xact_lock while creating

_TABLES = (
    "CREATE TABLE kip848_meta (name text PRIMARY KEY, value text NOT NULL)",
    (
        "CREATE TABLE kip848_logs (log int PRIMARY KEY, expired_through bigint NOT NULL"
        " DEFAULT -1, leader int, leader_epoch bigint NOT NULL DEFAULT 0,"
        " lease_expires_at timestamptz, target int, pinned boolean NOT NULL DEFAULT false,"
        " loaded_epoch bigint NOT NULL DEFAULT 0)"
    ),
    (
        'CREATE TABLE kip848_journal (log int NOT NULL, "offset" bigint NOT NULL,'
        " timestamp_ms bigint NOT NULL, leader_epoch bigint NOT NULL, group_id text,"
        ' key bytea NOT NULL, value bytea, PRIMARY KEY (log, "offset")) PARTITION BY LIST (log)'
    ),
    (
        'CREATE TABLE kip848_compacted (log int NOT NULL, key bytea NOT NULL, "offset" bigint'
        " NOT NULL, group_id text, value bytea NOT NULL, PRIMARY KEY (log, key))"
        " PARTITION BY LIST (log)"
    ),
    (
        "CREATE TABLE kip848_nodes (node_id int PRIMARY KEY, address text NOT NULL,"
        " kafka_address text, started_at timestamptz NOT NULL, expires_at timestamptz NOT NULL,"
        " cluster_offset bigint NOT NULL DEFAULT -1, reachable boolean NOT NULL DEFAULT true,"
        " incarnation text)"
    ),
    (
        "CREATE TABLE kip848_controller (id int PRIMARY KEY CHECK (id = 1), node_id int,"
        " epoch bigint NOT NULL DEFAULT 0, expires_at timestamptz)"
    ),
    "INSERT INTO kip848_controller (id) VALUES (1)",
)

_MIGRATE_1_TO_2 = (
    # First: no append in flight, none until COMMIT (each then reads the new version at its
    # gate, SCHEMA_GATE, and a node of an older build is refused). Every migration does.
    "LOCK TABLE kip848_journal, kip848_compacted IN SHARE MODE",
    "ALTER TABLE kip848_logs ADD COLUMN IF NOT EXISTS pinned boolean NOT NULL DEFAULT false",
    "ALTER TABLE kip848_logs ADD COLUMN IF NOT EXISTS loaded_epoch bigint NOT NULL DEFAULT 0",
    "ALTER TABLE kip848_nodes ADD COLUMN IF NOT EXISTS incarnation text",
    (
        "CREATE TABLE IF NOT EXISTS kip848_controller (id int PRIMARY KEY CHECK (id = 1),"
        " node_id int, epoch bigint NOT NULL DEFAULT 0, expires_at timestamptz)"
    ),
    "INSERT INTO kip848_controller (id) VALUES (1) ON CONFLICT DO NOTHING",
    "UPDATE kip848_meta SET value = '2' WHERE name = 'schema_version'",
)


FENCE_FUNCTION = """
CREATE OR REPLACE FUNCTION kip848_fence(node int, logs int[], epochs bigint[]) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE lost int[];
BEGIN
  -- FOR KEY SHARE: a takeover (which locks these rows FOR UPDATE first) waits for this
  -- transaction, and a takeover already committed is seen here; a renewal of the lease (an
  -- UPDATE of its expiry) does not wait for it.
  PERFORM 1 FROM kip848_logs WHERE log = ANY(logs) ORDER BY log FOR KEY SHARE;
  SELECT array_agg(h.log ORDER BY h.log) INTO lost
    FROM unnest(logs, epochs) AS h(log, epoch) LEFT JOIN kip848_logs l ON l.log = h.log
    WHERE l.leader IS DISTINCT FROM node OR l.leader_epoch IS DISTINCT FROM h.epoch;
  IF lost IS NOT NULL THEN
    RAISE EXCEPTION 'node % does not lead partitions % at the epochs it gave', node, lost
      USING ERRCODE = 'K8F01', DETAIL = array_to_string(lost, ',');
  END IF;
END $$
"""
"""Raises SQLSTATE K8F01 (detail: the partitions, comma-separated) unless ``node`` leads every
partition of ``logs`` at the matching epoch. Created (or replaced) whenever a writer opens the
store."""

CLUSTER_AT_FUNCTION = """
CREATE OR REPLACE FUNCTION kip848_cluster_at(first bigint) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE last bigint;
BEGIN
  -- FOR UPDATE: nodes append to the cluster log one at a time, each only at its end.
  PERFORM 1 FROM kip848_logs WHERE log = -1 FOR UPDATE;
  SELECT greatest((SELECT max("offset") FROM kip848_journal WHERE log = -1),
                  (SELECT expired_through FROM kip848_logs WHERE log = -1)) INTO last;
  IF last + 1 <> first THEN
    RAISE EXCEPTION 'the cluster log ends at offset %, not %: this node is behind', last, first - 1
      USING ERRCODE = 'K8F01', DETAIL = '-1';
  END IF;
END $$
"""
"""Raises K8F01 (detail ``-1``: the cluster log) unless the cluster log's next offset is
``first``: a node appends cluster records only with the cluster state it decided them on up to
date (the log every node follows has no leader; docs/ha.md)."""
FENCED = "K8F01"

SCHEMA_MARK = "kip848 store schema version "
SCHEMA_GATE = (
    f"(SELECT (CASE WHEN value = '{SCHEMA_VERSION}' THEN '1' ELSE '{SCHEMA_MARK}' || value"
    f" || ' is not this build''s {SCHEMA_VERSION}' END)::int FROM kip848_meta"
    " WHERE name = 'schema_version')"
)
"""1 in every append's gate (the statement that writes it) and the write probe's: the store's
schema version as this build's, else the statement fails (an ``int`` cast of a text starting
with :data:`SCHEMA_MARK`, SQLSTATE 22P02; plain SQL, so a newer build's functions cannot
change it) and writes nothing. A migration locks the journal first (``_MIGRATE_1_TO_2``): no
append of an older node is in flight when the version changes, and each one after reads the
new version here."""


def schema_refusal(error: Exception) -> str | None:
    """:data:`SCHEMA_GATE`'s reason in ``error`` (a psycopg error), or None."""
    text = str(error)
    if SCHEMA_MARK not in text:
        return None
    return SCHEMA_MARK + text.partition(SCHEMA_MARK)[2].partition('"')[0]


def schema_changed(version: int) -> str | None:
    """Why a running node must stop when its heartbeat reads the store at schema ``version``
    (it opened the store at this build's :data:`SCHEMA_VERSION`), or None (the same). Newer:
    a node of a newer build migrated it, and this build neither reads nor writes that layout.
    Older (or unreadable, -1): not the store this node opened (no build migrates down; a
    restore from a backup of an older schema, or ``kip848_meta`` edited by hand)."""
    if version == SCHEMA_VERSION:
        return None
    if version > SCHEMA_VERSION:
        return (
            f"the store in PostgreSQL is at schema version {version}, newer than this build's "
            f"{SCHEMA_VERSION} (a node of a newer build migrated it); this node can neither "
            f"read nor write it: upgrade this node to that build"
        )
    shown = "no readable schema version" if version < 0 else f"schema version {version}"
    return (
        f"the store in PostgreSQL is at {shown}, not the {SCHEMA_VERSION} this node opened it "
        "at (restored from a backup of an older schema, or kip848_meta edited): it is not "
        "the store this node opened"
    )


def ensure_fence_function(conn: psycopg.Connection[Any]) -> None:
    """(Re)create ``kip848_fence`` under the creation lock: nodes opening the store together
    would otherwise update its catalog row at once ("tuple concurrently updated")."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        conn.execute(FENCE_FUNCTION)
        conn.execute(CLUSTER_AT_FUNCTION)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def migrate(conn: psycopg.Connection[Any], meta: dict[str, str]) -> dict[str, str]:
    """Bring a version-1 store to the current schema (one transaction, under the creation lock;
    a store another node migrated meanwhile is left as it is). Returns its meta."""
    if int(meta["schema_version"]) >= SCHEMA_VERSION:
        return meta
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        for stmt in _MIGRATE_1_TO_2:
            conn.execute(stmt)
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return dict(conn.execute("SELECT name, value FROM kip848_meta").fetchall())


SECRET_PARAMETERS = frozenset({"password", "sslpassword"})
"""libpq's URI parameters that are secrets (the password, the client key's passphrase)."""


def dsn_for_log(dsn: str) -> str:
    """The URI without its secrets (for messages and logs): the password, given in the user
    part or as a ``password=`` parameter, and ``sslpassword=`` are shown as ``***``."""
    try:
        parts = urlsplit(dsn)
        port = parts.port if parts.password is not None else None
    except ValueError:
        return "<unparsable PostgreSQL URI>"
    netloc = parts.netloc
    if parts.password is not None:
        host = parts.hostname or ""
        if ":" in host:
            host = f"[{host}]"
        netloc = f"{parts.username or ''}:***@{host}" + (f":{port}" if port else "")
    query = "&".join(
        f"{name}=***" if unquote_plus(name).strip() in SECRET_PARAMETERS else item
        for item in parts.query.split("&")
        for name in (item.partition("=")[0],)
    )
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


DEAD_PEER: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 10_000,
}
"""libpq's TCP settings of every connection to the store (:func:`connect_options`): a server
gone without a word (its machine down, a failover that moved its address, a network cut: no
answer, no reset) is noticed within about 11 s of silence (keepalive probes after 5 s idle, 3
of them 2 s apart) or 10 s of a write not acknowledged, and the connection fails and is made
again, where the kernel's defaults wait about 15 minutes; a server that is there but slow (a
COMMIT held by synchronous replication, a lock) answers the probes and is waited for."""


def connect_options(dsn: str) -> dict[str, Any]:
    """:data:`DEAD_PEER`'s settings the URI does not give itself (the URI's own win)."""
    import psycopg
    from psycopg.conninfo import conninfo_to_dict

    try:
        given = conninfo_to_dict(dsn)
    except psycopg.Error:  # connect reports what is wrong with it
        given = {}
    return {name: value for name, value in DEAD_PEER.items() if name not in given}


def scrub(text: str, dsn: str) -> str:
    """``text`` (a libpq error) without the URI's secrets: libpq quotes the token it cannot
    parse ("invalid percent-encoded token: ..."), a password with a stray ``%`` included. Each
    secret, as written in the URI and decoded, is shown as ``***``."""
    secrets: set[str] = set()
    userinfo = dsn.partition("://")[2].partition("/")[0].rpartition("@")[0]
    if ":" in userinfo:
        secrets.add(userinfo.partition(":")[2])
    query = dsn.partition("?")[2].partition("#")[0]
    for item in query.split("&"):
        name, _, value = item.partition("=")
        if unquote_plus(name).strip() in SECRET_PARAMETERS:
            secrets.add(value)
    for secret in sorted(secrets | {unquote_plus(x) for x in secrets}, key=len, reverse=True):
        if secret:
            text = text.replace(secret, "***")
    return text


def read_meta(conn: psycopg.Connection[Any], where: str) -> dict[str, str] | None:
    """The store's meta rows; None when the database holds no store at all (no ``kip848_``
    table). Raises :class:`StoreCorruptError` for a partial or foreign one."""
    tables = {
        row[0]
        for row in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = current_schema()"
            " AND tablename LIKE 'kip848%%'"
        ).fetchall()
    }
    if not tables:
        return None
    if "kip848_meta" not in tables:
        raise StoreCorruptError(
            f"the PostgreSQL database {where} holds kip848 tables ({', '.join(sorted(tables))}) "
            "but no kip848_meta: not a complete record store; refusing to use it"
        )
    meta = dict(conn.execute("SELECT name, value FROM kip848_meta").fetchall())
    missing = {"schema_version", "partitions", "store_id"} - set(meta)
    if missing:
        raise StoreCorruptError(
            f"the record store in {where} is incomplete (kip848_meta lacks "
            f"{', '.join(sorted(missing))}); refusing to use it"
        )
    for name in ("schema_version", "partitions"):
        try:
            int(meta[name])
        except ValueError:
            raise StoreCorruptError(
                f"the record store in {where} is corrupt (kip848_meta's {name} is "
                f"{meta[name][:40]!r}, not a number); refusing to use it"
            ) from None
    return meta


def check_version(meta: dict[str, str], where: str) -> int:
    """The schema version of a store's meta (:func:`read_meta`'s); raises
    :class:`StoreVersionError` for a newer one than this build's (written by a newer build:
    nothing here may read or write it) and :class:`StoreCorruptError` for one below 1."""
    version = int(meta.get("schema_version", "0"))
    if version > SCHEMA_VERSION:
        raise StoreVersionError(
            f"record store in {where} was written by schema version {version}; this "
            f"build understands up to {SCHEMA_VERSION}; upgrade kip848-coordinator"
        )
    if version < 1:
        raise StoreCorruptError(f"record store in {where} has no valid schema_version")
    return version


def create_schema(conn: psycopg.Connection[Any], where: str, partitions: int) -> dict[str, str]:
    """Create the store (one transaction, under an advisory lock; if another node created it
    meanwhile, use that one). Returns its meta."""
    conn.execute("BEGIN")
    try:
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
        meta = read_meta(conn, where)
        if meta is not None:  # another node was first
            conn.execute("COMMIT")
            return meta
        with conn.pipeline():  # some 200 statements: one round trip
            for stmt in _TABLES:
                conn.execute(stmt)
            for log in log_ids(partitions):
                name = f"m{-log}" if log < 0 else str(log)  # the cluster log: kip848_journal_m1
                conn.execute(
                    f"CREATE TABLE kip848_journal_{name} PARTITION OF kip848_journal"
                    f" FOR VALUES IN ({log})"
                )
                conn.execute(
                    f"CREATE TABLE kip848_compacted_{name} PARTITION OF kip848_compacted"
                    f" FOR VALUES IN ({log})"
                )
        conn.execute(
            "INSERT INTO kip848_logs (log) SELECT generate_series(%s::int, %s::int)",
            (log_ids(partitions).start, partitions - 1),
        )
        meta = {
            "schema_version": str(SCHEMA_VERSION),
            "partitions": str(partitions),
            "store_id": str(uuid.uuid4()),
            "created_at_ms": str(int(time.time() * 1000)),
            "created_by": package_version(),
            "write_probe": "0",
        }
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO kip848_meta (name, value) VALUES (%s, %s)", list(meta.items())
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    return meta
