"""``kip848 dump`` and ``kip848 replay``: offline on a store (``--data-dir``). ``dump`` prints
its records in readable form; ``replay`` loads them into fresh shards, checks the state and
summarises (non-zero exit on a corrupt store)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from coordinator.cli.config import DEFAULT_DATA_DIR, add_config_flags, build_config
from coordinator.cli.output import print_json, print_table
from coordinator.cli.registry import Commands


def register(commands: Commands) -> None:
    p = commands.add("dump", cmd_dump, help="print the records of a store (offline)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    p.add_argument(
        "--journal", action="store_true", help="the whole journal (default: the compacted view)"
    )
    p.add_argument("--output", choices=("text", "json"), default="text")

    p = commands.add(
        "replay", cmd_replay, help="load a store into fresh shards, check it, summarise (offline)"
    )
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    add_config_flags(p)
    p.add_argument("--output", choices=("table", "json"), default="table")


def open_read_only(data_dir: str) -> Any:
    from coordinator.runtime.store import SqliteRecordStore

    return SqliteRecordStore(data_dir, read_only=True)


def cmd_dump(args: argparse.Namespace) -> int:
    from coordinator.core import codec
    from coordinator.runtime.store import StoreError

    try:
        store = open_read_only(args.data_dir)
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
                text = codec.describe(codec.decode(key, value))
            except Exception as exc:  # noqa: BLE001 - show what we can of a corrupt record
                text = f"<undecodable: {exc}>"
            if args.output == "json":
                item: dict[str, Any] = {"offset": offset, "record": text}
                if ts is not None:
                    item["timestamp_ms"] = ts
                print(json.dumps(item))
            else:
                print(f"{offset}\t{ts}\t{text}" if ts is not None else f"{offset}\t{text}")
    return 0


def check_state(shards: Sequence[Any], registry: Any) -> list[str]:
    """Invariants of a loaded state; returns the problems found (empty = fine)."""
    from coordinator.core.commands import SequentialIds
    from coordinator.core.shard import GroupCoordinatorShard

    problems: list[str] = []
    for i, shard in enumerate(shards):
        # Replaying the canonical records of the state must rebuild exactly the state.
        fresh = GroupCoordinatorShard(
            config=shard.config, assignors=list(shard.assignors.values()), ids=SequentialIds()
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
    from coordinator.core.shard import GroupCoordinatorShard
    from coordinator.core.topics import TopicRegistry
    from coordinator.runtime.assignors import make_assignors
    from coordinator.runtime.loader import load_into
    from coordinator.runtime.store import StoreError

    config = build_config(args.config_file, args.set)
    try:
        store = open_read_only(args.data_dir)
    except StoreError as exc:
        print(f"kip848 replay: {exc}", file=sys.stderr)
        return 1
    assignors = make_assignors(config.consumer_assignors)
    ids = SequentialIds()
    shards = [
        GroupCoordinatorShard(config=config, assignors=assignors, ids=ids)
        for _ in range(config.shards)
    ]
    registry = TopicRegistry(ids)
    started = time.perf_counter()
    with store:
        try:
            stats = load_into(store, shards, registry)
        except Exception as exc:  # noqa: BLE001 - a corrupt store
            print(f"kip848 replay: the store in {args.data_dir} is corrupt: {exc}", file=sys.stderr)
            return 1
    load_s = time.perf_counter() - started
    problems = check_state(shards, registry)
    members = sum(len(g.members) for s in shards for g in s.groups.values())
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
