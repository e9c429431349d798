"""``kip848 dump`` and ``kip848 replay``: offline on a store (``--data-dir``). ``dump`` prints
its records in readable form, log by log (the cluster log, then the partitions); ``replay``
loads them into fresh shards (one per coordinator partition), checks the state and summarises
(non-zero exit on a corrupt store)."""

from __future__ import annotations

import argparse
import base64
import dataclasses
import enum
import json
import sys
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from coordinator.cli.config import DEFAULT_DATA_DIR, add_config_flags, build_config
from coordinator.cli.errors import UsageError
from coordinator.cli.output import print_json, print_table
from coordinator.cli.registry import Commands

if TYPE_CHECKING:
    from coordinator.core.topics import TopicRegistry
    from coordinator.factory import Shard


def register(commands: Commands) -> None:
    p = commands.add("dump", cmd_dump, help="print the records of a store (offline)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    add_store_flag(p)
    p.add_argument(
        "--journal", action="store_true", help="the whole journal (default: the compacted view)"
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    add_accept_lost_wal(p)

    p = commands.add(
        "replay", cmd_replay, help="load a store into fresh shards, check it, summarise (offline)"
    )
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    add_store_flag(p)
    add_config_flags(p)
    p.add_argument("--output", choices=("table", "json"), default="table")
    add_accept_lost_wal(p)


def add_store_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        default=None,
        metavar="URI",
        help="a PostgreSQL store (postgresql://user:password@host:port/db) instead of the "
        "SQLite store in --data-dir",
    )


def store_location(args: argparse.Namespace) -> str:
    """What the messages call the store: the data directory, or the URI without password."""
    if getattr(args, "store", None):
        from coordinator.runtime.store.postgres_schema import dsn_for_log

        return dsn_for_log(args.store)
    return str(args.data_dir)


def check_store_uri(args: argparse.Namespace) -> None:
    """A ``--store`` given must be a ``postgresql://`` URI (:class:`UsageError` otherwise)."""
    from coordinator.runtime.store.postgres import is_postgres_dsn

    spec = getattr(args, "store", None)
    if spec and not is_postgres_dsn(spec):
        raise UsageError(f"--store takes a postgresql:// URI, got {spec!r}")


def open_store(args: argparse.Namespace, *, read_only: bool, **options: Any) -> Any:
    """The store the command's flags name: ``--store postgresql://...`` or the SQLite store in
    ``--data-dir`` (``options`` go to its constructor)."""
    from coordinator.runtime.store import PostgresRecordStore, SqliteRecordStore

    check_store_uri(args)
    spec = getattr(args, "store", None)
    if spec:
        options.pop("sync", None)
        options.pop("accept_lost_wal", None)
        return PostgresRecordStore(spec, read_only=read_only, **options)
    return SqliteRecordStore.in_data_dir(args.data_dir, read_only=read_only, **options)


def add_accept_lost_wal(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--accept-lost-wal",
        action="store_true",
        help="use a store whose write-ahead log went missing after an unclean shutdown, as its "
        "main file holds it (the log's commits are lost; refused without this flag)",
    )


def cmd_dump(args: argparse.Namespace) -> int:
    from coordinator.core import codec
    from coordinator.runtime.store import StoreError, log_ids

    try:
        store = open_store(args, read_only=True, accept_lost_wal=args.accept_lost_wal)
    except StoreError as exc:
        print(f"kip848 dump: {exc}", file=sys.stderr)
        return 1
    with store:
        logs = log_ids(store.partitions)
        if args.journal:
            rows = (
                (e.partition, e.offset, e.timestamp_ms, e.key, e.value)
                for log in logs
                for e in store.journal(log)
            )
        else:
            rows = ((log, o, None, r.key, r.value) for log in logs for o, r in store.load(log))
        for partition, offset, ts, key, value in rows:
            try:
                record = codec.decode(key, value)
            except Exception as exc:  # noqa: BLE001 - show what we can of a corrupt record
                record, problem = None, f"<undecodable: {exc}>"
            if args.output == "json":
                item: dict[str, Any] = {"partition": partition, "offset": offset}
                if ts is not None:
                    item["timestamp_ms"] = ts
                if record is None:
                    item["error"] = problem
                else:
                    item |= record_json(record)
                print(json.dumps(item))
            else:
                text = codec.describe(record) if record is not None else problem
                where = f"{partition}/{offset}"
                print(f"{where}\t{ts}\t{text}" if ts is not None else f"{where}\t{text}")
    return 0


def record_json(record: Any) -> dict[str, Any]:
    """A record as JSON values: its type (Kafka's record name), key fields and value fields
    (``None`` for a tombstone)."""
    return {
        "type": type(record.key).__name__.removesuffix("Key"),
        "key": json_value(record.key),
        "value": None if record.value is None else json_value(record.value),
    }


def json_value(value: Any) -> Any:
    """Dataclasses as objects, sets sorted, tuples as lists, bytes as base64, enums by name;
    a secret field (the salted SCRAM keys: ``records.SECRET``) as ``<hidden>``, as the text
    output hides it."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {
            f.name: "<hidden>" if f.metadata.get("secret") else json_value(getattr(value, f.name))
            for f in dataclasses.fields(value)
        }
    if isinstance(value, enum.Enum):
        return value.name
    if isinstance(value, bytes):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, Mapping):
        return {str(k): json_value(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, (set, frozenset)):
        return sorted(json_value(v) for v in value)
    if isinstance(value, (list, tuple)):
        return [json_value(v) for v in value]
    return value


def check_state(shards: Sequence[Shard], registry: TopicRegistry) -> list[str]:
    """Invariants of a loaded state; returns the problems found (empty = fine)."""
    from coordinator.core.commands import SequentialIds
    from coordinator.factory import new_shard

    problems: list[str] = []
    for i, shard in enumerate(shards):
        # Replaying the canonical records of the state must rebuild exactly the state.
        fresh = new_shard(
            config=shard.config,
            assignors=list(shard.groups.assignors.values()),
            ids=SequentialIds(),
            topics=registry.image(),
        )
        fresh.undo.enabled = False
        try:
            for rec in shard.records_of_state():
                fresh.replay(rec)
            if fresh.snapshot() != shard.snapshot():
                problems.append(
                    f"shard {i}: the state does not survive a replay of its own records"
                )
        except Exception as exc:  # noqa: BLE001
            problems.append(f"shard {i}: replaying its records fails: {exc!r}")
        for gid in sorted(shard.groups):
            group = shard.groups[gid]
            owners: dict[tuple[str, int], str] = {}
            for mid in sorted(group.members):
                m = group.members[mid]
                for assignment in (m.assigned_partitions, m.partitions_pending_revocation):
                    for topic_id, partitions in assignment.items():
                        for p in partitions:
                            other = owners.setdefault((topic_id, p), mid)
                            if other != mid:
                                problems.append(
                                    f"group {gid}: partition {topic_id}-{p} owned by {other} and {mid}"
                                )
    return problems


def cmd_replay(args: argparse.Namespace) -> int:
    from coordinator.core.commands import SequentialIds
    from coordinator.factory import new_cluster, new_shard
    from coordinator.runtime.assignors import make_assignors
    from coordinator.runtime.loader import load_into
    from coordinator.runtime.store import StoreError

    config = build_config(args.config_file, args.set, args.server_properties)
    try:
        store = open_store(args, read_only=True, accept_lost_wal=args.accept_lost_wal)
    except StoreError as exc:
        print(f"kip848 replay: {exc}", file=sys.stderr)
        return 1
    assignors = make_assignors(config.consumer_assignors)
    ids = SequentialIds()
    shards = [
        new_shard(config=config, assignors=assignors, ids=ids) for _ in range(store.partitions)
    ]
    registry, _security = new_cluster(ids)
    started = time.perf_counter()
    with store:
        try:
            stats = load_into(store, shards, registry)
        except Exception as exc:  # noqa: BLE001 - a corrupt store
            print(
                f"kip848 replay: the store in {store_location(args)} is corrupt: {exc}",
                file=sys.stderr,
            )
            return 1
    load_s = time.perf_counter() - started
    problems = check_state(shards, registry)
    members = sum(len(g.members) for s in shards for g in s.groups.values()) + sum(
        len(g.members) for s in shards for g in s.classic_groups.values()
    )
    summary = {
        "data_dir": args.data_dir,
        "store": store_location(args),
        "records": stats.records,
        "partitions": len(shards),
        "last_offset": stats.last_offset,
        "topics": stats.topics,
        "groups": stats.groups,
        "members": members,
        "load_seconds": round(load_s, 3),
        "shards": [
            {
                "shard": s.shard,
                "records": s.records,
                "last_offset": s.last_offset,
                "groups": s.groups,
                "ms": round(s.seconds * 1e3, 1),
            }
            for s in stats.shards
        ],
        "problems": problems,
        "ok": not problems,
    }
    if args.output == "json":
        print_json(summary)
    else:
        print(
            f"Replayed {stats.records} records ({len(shards)} partitions; the cluster log's last "
            f"offset {stats.last_offset}): {stats.topics} topics, {stats.groups} groups, "
            f"{members} members in {load_s:.3f} s."
        )
        print_table(
            ("PARTITION", "RECORDS", "LAST OFFSET", "GROUPS", "LOAD MS"),
            [
                (s.shard, s.records, s.last_offset, s.groups, f"{s.seconds * 1e3:.1f}")
                for s in stats.shards
            ],
        )
        for p in problems:
            print(f"PROBLEM: {p}")
        print("OK" if not problems else f"{len(problems)} problem(s) found")
    return 0 if not problems else 1
