"""``kip848 dump`` and ``kip848 replay``: offline on a store (``--data-dir``). ``dump`` prints
its records in readable form; ``replay`` loads them into fresh shards, checks the state and
summarises (non-zero exit on a corrupt store)."""

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
from coordinator.cli.output import print_json, print_table
from coordinator.cli.registry import Commands

if TYPE_CHECKING:
    from coordinator.core.topics import TopicRegistry
    from coordinator.factory import Shard


def register(commands: Commands) -> None:
    p = commands.add("dump", cmd_dump, help="print the records of a store (offline)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    p.add_argument(
        "--journal", action="store_true", help="the whole journal (default: the compacted view)"
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    add_accept_lost_wal(p)

    p = commands.add(
        "replay", cmd_replay, help="load a store into fresh shards, check it, summarise (offline)"
    )
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    add_config_flags(p)
    p.add_argument("--output", choices=("table", "json"), default="table")
    add_accept_lost_wal(p)


def add_accept_lost_wal(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--accept-lost-wal",
        action="store_true",
        help="use a store whose write-ahead log went missing after an unclean shutdown, as its "
        "main file holds it (the log's commits are lost; refused without this flag)",
    )


def open_read_only(data_dir: str, accept_lost_wal: bool = False) -> Any:
    from coordinator.runtime.store import SqliteRecordStore

    return SqliteRecordStore.in_data_dir(data_dir, read_only=True, accept_lost_wal=accept_lost_wal)


def cmd_dump(args: argparse.Namespace) -> int:
    from coordinator.core import codec
    from coordinator.runtime.store import StoreError

    try:
        store = open_read_only(args.data_dir, args.accept_lost_wal)
    except StoreError as exc:
        print(f"kip848 dump: {exc}", file=sys.stderr)
        return 1
    with store:
        if args.journal:
            rows = ((e.offset, e.timestamp_ms, e.key, e.value) for e in store.journal())
        else:
            rows = ((o, None, r.key, r.value) for o, r in store.load())
        for offset, ts, key, value in rows:
            try:
                record = codec.decode(key, value)
            except Exception as exc:  # noqa: BLE001 - show what we can of a corrupt record
                record, problem = None, f"<undecodable: {exc}>"
            if args.output == "json":
                item: dict[str, Any] = {"offset": offset}
                if ts is not None:
                    item["timestamp_ms"] = ts
                if record is None:
                    item["error"] = problem
                else:
                    item |= record_json(record)
                print(json.dumps(item))
            else:
                text = codec.describe(record) if record is not None else problem
                print(f"{offset}\t{ts}\t{text}" if ts is not None else f"{offset}\t{text}")
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
    """Dataclasses as objects, sets sorted, tuples as lists, bytes as base64, enums by name."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: json_value(getattr(value, f.name)) for f in dataclasses.fields(value)}
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
        store = open_read_only(args.data_dir, args.accept_lost_wal)
    except StoreError as exc:
        print(f"kip848 replay: {exc}", file=sys.stderr)
        return 1
    assignors = make_assignors(config.consumer_assignors)
    ids = SequentialIds()
    shards = [new_shard(config=config, assignors=assignors, ids=ids) for _ in range(config.shards)]
    registry, _security = new_cluster(ids)
    started = time.perf_counter()
    with store:
        try:
            stats = load_into(store, shards, registry)
        except Exception as exc:  # noqa: BLE001 - a corrupt store
            print(f"kip848 replay: the store in {args.data_dir} is corrupt: {exc}", file=sys.stderr)
            return 1
    load_s = time.perf_counter() - started
    problems = check_state(shards, registry)
    members = sum(len(g.members) for s in shards for g in s.groups.values()) + sum(
        len(g.members) for s in shards for g in s.classic_groups.values()
    )
    summary = {
        "data_dir": args.data_dir,
        "records": stats.records,
        "last_offset": stats.last_offset,
        "topics": stats.topics,
        "groups": stats.groups,
        "members": members,
        "load_seconds": round(load_s, 3),
        "shards": [
            {
                "shard": s.shard,
                "records": s.records,
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
            f"Replayed {stats.records} records (last offset {stats.last_offset}): {stats.topics} topics, "
            f"{stats.groups} groups, {members} members in {load_s:.3f} s."
        )
        print_table(
            ("SHARD", "RECORDS", "GROUPS", "LOAD MS"),
            [(s.shard, s.records, s.groups, f"{s.seconds * 1e3:.1f}") for s in stats.shards],
        )
        for p in problems:
            print(f"PROBLEM: {p}")
        print("OK" if not problems else f"{len(problems)} problem(s) found")
    return 0 if not problems else 1
