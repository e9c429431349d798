"""The ``kip848`` command.

* ``serve``: run the coordinator (flags of shared/API.md; Kafka config names and defaults).
* ``topics create|list|delete|add-partitions``, ``groups describe|list``: gRPC clients of a
  running server (``--bootstrap-server``, human tables or ``--output json``).
* ``dump`` / ``replay``: offline on a store (``--data-dir``): records in readable form; load
  into fresh shards, check, summarise (non-zero exit on a corrupt store).
* ``assignors``: delegated to ``assignors.cli``.

Exit codes: 0 ok, 1 failure (server unreachable, error answered, corrupt store), 2 usage or
configuration error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

DEFAULT_LISTEN = "127.0.0.1:9094"
DEFAULT_DATA_DIR = "./var"


class UsageError(Exception):
    """Bad flags or configuration: printed as one clear line, exit 2."""


# ---------------------------------------------------------------- configuration


def read_properties(path: str) -> dict[str, str]:
    """A Java-properties style file: ``name=value`` (or ``name: value``), ``#``/``!`` comments."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read config file {path}: {exc.strerror or exc}") from None
    out: dict[str, str] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        eq = [i for i in (line.find("="), line.find(":")) if i >= 0]
        if not eq:
            raise UsageError(f"{path}:{number}: expected name=value, got {line!r}")
        i = min(eq)
        name, value = line[:i].strip(), line[i + 1 :].strip()
        if not name:
            raise UsageError(f"{path}:{number}: empty config name")
        out[name] = value
    return out


def parse_sets(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise UsageError(f"--set expects NAME=VALUE, got {item!r}")
        out[name.strip()] = value.strip()
    return out


def build_config(config_file: str | None, sets: Sequence[str]) -> Any:
    from coordinator.core.config import ConfigError, parse_config

    settings: dict[str, str] = {}
    if config_file:
        settings.update(read_properties(config_file))
    settings.update(parse_sets(sets))
    try:
        config = parse_config(settings)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    from coordinator.runtime.assignors import AssignorLoadError, make_assignors

    try:
        make_assignors(config.consumer_assignors)
    except AssignorLoadError as exc:
        raise UsageError(f"group.consumer.assignors: {exc}") from None
    return config


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config-file", metavar="FILE", help="Java-properties file of Kafka config names")
    p.add_argument(
        "--set", metavar="NAME=VALUE", action="append", default=[], help="a config (repeatable; wins over the file)"
    )


# ---------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.runtime.store import SqliteRecordStore, StoreError
    from coordinator.server.app import ServeOptions, make_runtime, serve, split_listen

    config = build_config(args.config_file, args.set)
    try:
        split_listen(args.listen)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.max_message_bytes < 1024:
        raise UsageError("--max-message-bytes must be >= 1024")
    if args.journal_retention_ms is not None and args.journal_retention_ms < 0:
        raise UsageError("--journal-retention-ms must be >= 0")
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        Path(args.data_dir).mkdir(parents=True, exist_ok=True)
        store = SqliteRecordStore(args.data_dir, journal_retention_ms=args.journal_retention_ms, sync=args.sync)
    except (StoreError, OSError) as exc:
        print(f"kip848 serve: cannot open the store in {args.data_dir}: {exc}", file=sys.stderr)
        return 1
    runtime = make_runtime(config, store, args.clock)
    options = ServeOptions(listen=args.listen, clock=args.clock, max_message_bytes=args.max_message_bytes)
    return asyncio.run(serve(runtime, options))


# ---------------------------------------------------------------- output helpers


def print_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    cells = [[str(c) for c in headers]] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip())


def print_json(value: Any) -> None:
    print(json.dumps(value, indent=2, sort_keys=False))


def _tid(raw: bytes) -> str:
    from coordinator.core.model import topic_id_from_bytes

    return topic_id_from_bytes(raw) if len(raw) == 16 else raw.hex()


def _err(code: int, message: str | None = None) -> str:
    from coordinator.core.errors import ErrorCode

    try:
        name = ErrorCode(code).name
    except ValueError:
        name = str(code)
    return name if not message else f"{name}: {message}"


# ---------------------------------------------------------------- gRPC clients


def _channel(args: argparse.Namespace) -> Any:
    import grpc

    return grpc.insecure_channel(args.bootstrap_server)


def _call(fn: Any, request: Any, args: argparse.Namespace) -> Any:
    import grpc

    try:
        return fn(request, timeout=args.timeout, metadata=(("client-id", "kip848-cli"),))
    except grpc.RpcError as exc:
        raise SystemExit(_rpc_failed(args, exc)) from None


def _rpc_failed(args: argparse.Namespace, exc: Any) -> int:
    print(f"kip848: {args.bootstrap_server}: {exc.code().name}: {exc.details()}", file=sys.stderr)
    return 1


def cmd_topics(args: argparse.Namespace) -> int:
    from kip848.v1 import admin_pb2, admin_pb2_grpc

    with _channel(args) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        if args.topics_command == "list":
            resp = _call(stub.ListTopics, admin_pb2.ListTopicsRequest(), args)
            if resp.error_code:
                print(f"kip848: {_err(resp.error_code, resp.error_message)}", file=sys.stderr)
                return 1
            rows = [(t.name, _tid(t.topic_id), t.num_partitions) for t in resp.topics]
            if args.output == "json":
                print_json([{"name": n, "topic_id": i, "num_partitions": p} for n, i, p in rows])
            else:
                print_table(("TOPIC", "TOPIC ID", "PARTITIONS"), rows)
            return 0
        if args.topics_command == "create":
            from coordinator.core.model import topic_id_to_bytes

            topic = admin_pb2.CreateTopicsRequest.CreatableTopic(name=args.name, num_partitions=args.partitions)
            if args.topic_id:
                try:
                    topic.topic_id = topic_id_to_bytes(args.topic_id)
                except Exception:  # noqa: BLE001
                    raise UsageError(f"--topic-id must be a base64url topic id (22 chars), got {args.topic_id!r}") from None
            resp = _call(stub.CreateTopics, admin_pb2.CreateTopicsRequest(topics=[topic]), args)
            results = [
                {"name": t.name, "topic_id": _tid(t.topic_id), "num_partitions": t.num_partitions,
                 "error": _err(t.error_code, t.error_message) if t.error_code else None}
                for t in resp.topics
            ]
            return _results(args, resp, results, lambda r: f"Created topic {r['name']} ({r['topic_id']}, {r['num_partitions']} partitions).")
        if args.topics_command == "delete":
            resp = _call(stub.DeleteTopics, admin_pb2.DeleteTopicsRequest(names=args.names), args)
            results = [
                {"name": t.name, "topic_id": _tid(t.topic_id), "error": _err(t.error_code, t.error_message) if t.error_code else None}
                for t in resp.results
            ]
            return _results(args, resp, results, lambda r: f"Deleted topic {r['name']} ({r['topic_id']}).")
        if args.topics_command == "add-partitions":
            req = admin_pb2.CreatePartitionsRequest(
                topics=[admin_pb2.CreatePartitionsRequest.CreatePartitionsTopic(name=args.name, count=args.count)]
            )
            resp = _call(stub.CreatePartitions, req, args)
            results = [
                {"name": t.name, "count": args.count, "error": _err(t.error_code, t.error_message) if t.error_code else None}
                for t in resp.results
            ]
            return _results(args, resp, results, lambda r: f"Topic {r['name']} now has {r['count']} partitions.")
    raise UsageError("topics: choose create, list, delete or add-partitions")


def _results(args: argparse.Namespace, resp: Any, results: list[dict[str, Any]], ok_line: Any) -> int:
    if resp.error_code:
        print(f"kip848: {_err(resp.error_code, resp.error_message)}", file=sys.stderr)
        return 1
    if args.output == "json":
        print_json(results)
    else:
        for r in results:
            if r["error"]:
                print(f"Error for {r['name']}: {r['error']}", file=sys.stderr)
            else:
                print(ok_line(r))
    return 1 if any(r["error"] for r in results) else 0


def _group_json(g: Any) -> dict[str, Any]:
    def parts(items: Any) -> list[dict[str, Any]]:
        return [
            {"topic_id": _tid(tp.topic_id), "topic_name": tp.topic_name, "partitions": list(tp.partitions)}
            for tp in items
        ]

    return {
        "group_id": g.group_id,
        "error": _err(g.error_code, g.error_message) if g.error_code else None,
        "group_uid": g.group_uid,
        "group_state": g.group_state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "assignor_name": g.assignor_name,
        "members": [
            {
                "member_id": m.member_id,
                "instance_id": m.instance_id if m.HasField("instance_id") else None,
                "rack_id": m.rack_id if m.HasField("rack_id") else None,
                "member_epoch": m.member_epoch,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "subscribed_topic_names": list(m.subscribed_topic_names),
                "subscribed_topic_regex": m.subscribed_topic_regex if m.HasField("subscribed_topic_regex") else None,
                "assignment": parts(m.assignment.topic_partitions),
                "target_assignment": parts(m.target_assignment.topic_partitions),
                "member_type": m.member_type,
            }
            for m in g.members
        ],
    }


def _fmt_parts(items: list[dict[str, Any]]) -> str:
    return ",".join(f"{i['topic_name'] or i['topic_id']}:{'/'.join(map(str, i['partitions']))}" for i in items) or "-"


def cmd_groups(args: argparse.Namespace) -> int:
    from kip848.v1 import admin_pb2, admin_pb2_grpc, consumer_group_pb2, consumer_group_pb2_grpc

    with _channel(args) as channel:
        if args.groups_command == "list":
            resp = _call(admin_pb2_grpc.AdminServiceStub(channel).ListGroups, admin_pb2.ListGroupsRequest(), args)
            rows = [(g.group_id, g.group_type, g.group_state) for g in resp.groups]
            if args.output == "json":
                print_json([{"group_id": a, "group_type": b, "group_state": c} for a, b, c in rows])
            else:
                print_table(("GROUP", "TYPE", "STATE"), rows)
            return 1 if resp.error_code else 0
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        resp = _call(stub.ConsumerGroupDescribe, consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=args.group_ids), args)
    groups = [_group_json(g) for g in resp.groups]
    if args.output == "json":
        print_json(groups)
    else:
        for i, g in enumerate(groups):
            if i:
                print()
            if g["error"]:
                print(f"Group {g['group_id']}: {g['error']}", file=sys.stderr)
                continue
            print(
                f"GROUP {g['group_id']}  uid {g['group_uid']}  state {g['group_state']}  epoch {g['group_epoch']}"
                f"  assignment epoch {g['assignment_epoch']}  assignor {g['assignor_name']}"
            )
            print_table(
                ("MEMBER", "EPOCH", "CLIENT", "HOST", "SUBSCRIPTION", "ASSIGNED", "TARGET"),
                [
                    (
                        m["member_id"], m["member_epoch"], m["client_id"] or "-", m["client_host"] or "-",
                        ",".join(m["subscribed_topic_names"]) or m["subscribed_topic_regex"] or "-",
                        _fmt_parts(m["assignment"]), _fmt_parts(m["target_assignment"]),
                    )
                    for m in g["members"]
                ],
            )
    return 1 if resp.error_code or any(g["error"] for g in groups) else 0


# ---------------------------------------------------------------- offline: dump / replay


def _open_read_only(data_dir: str) -> Any:
    from coordinator.runtime.store import SqliteRecordStore

    return SqliteRecordStore(data_dir, read_only=True)


def cmd_dump(args: argparse.Namespace) -> int:
    from coordinator.core import codec
    from coordinator.runtime.store import StoreError

    try:
        store = _open_read_only(args.data_dir)
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
        fresh = GroupCoordinatorShard(config=shard.config, assignors=list(shard.assignors.values()), ids=SequentialIds())
        fresh.undo.enabled = False
        try:
            for rec in shard.records_of_state():
                fresh.replay(rec)
            if fresh.snapshot() != shard.snapshot():
                problems.append(f"shard {i}: the state does not survive a replay of its own records")
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
                                problems.append(f"group {gid}: partition {topic_id}-{p} owned by {other} and {mid}")
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
        store = _open_read_only(args.data_dir)
    except StoreError as exc:
        print(f"kip848 replay: {exc}", file=sys.stderr)
        return 1
    assignors = make_assignors(config.consumer_assignors)
    ids = SequentialIds()
    shards = [GroupCoordinatorShard(config=config, assignors=assignors, ids=ids) for _ in range(config.shards)]
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
            {"shard": s.shard, "records": s.records, "groups": s.groups, "ms": round(s.seconds * 1e3, 1)}
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
        print_table(("SHARD", "RECORDS", "GROUPS", "LOAD MS"), [(s.shard, s.records, s.groups, f"{s.seconds * 1e3:.1f}") for s in stats.shards])
        for p in problems:
            print(f"PROBLEM: {p}")
        print("OK" if not problems else f"{len(problems)} problem(s) found")
    return 0 if not problems else 1


# ---------------------------------------------------------------- parser


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="kip848", description="A KIP-848 consumer group coordinator over gRPC.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("serve", help="run the coordinator")
    p.add_argument("--listen", default=DEFAULT_LISTEN, metavar="HOST:PORT", help="bind address (port 0: any free port)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR", help="where the record store lives")
    _add_config_flags(p)
    p.add_argument("--clock", choices=("system", "manual"), default="system", help="manual: TestingService.AdvanceTime")
    p.add_argument("--max-message-bytes", type=int, default=16 * 1024 * 1024, metavar="N")
    p.add_argument("--journal-retention-ms", type=int, default=None, metavar="MS", help="journal retention (default: keep)")
    p.add_argument("--sync", choices=("full", "normal"), default="full", help="SQLite durability (full: fsync per batch)")
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.set_defaults(func=cmd_serve)

    def client(p: argparse.ArgumentParser) -> None:
        p.add_argument("--bootstrap-server", default=DEFAULT_LISTEN, metavar="HOST:PORT")
        p.add_argument("--output", choices=("table", "json"), default="table")
        p.add_argument("--timeout", type=float, default=10.0, metavar="SECONDS")

    p = sub.add_parser("topics", help="the topic registry of a running coordinator")
    tsub = p.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    t = tsub.add_parser("create")
    t.add_argument("name")
    t.add_argument("--partitions", type=int, required=True)
    t.add_argument("--topic-id", default=None, help="base64url id (default: a random one)")
    client(t)
    t = tsub.add_parser("list")
    client(t)
    t = tsub.add_parser("delete")
    t.add_argument("names", nargs="+")
    client(t)
    t = tsub.add_parser("add-partitions")
    t.add_argument("name")
    t.add_argument("--count", type=int, required=True, help="the new total number of partitions")
    client(t)
    p.set_defaults(func=cmd_topics)

    p = sub.add_parser("groups", help="consumer groups of a running coordinator")
    gsub = p.add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    g = gsub.add_parser("describe")
    g.add_argument("group_ids", nargs="+", metavar="GROUP")
    client(g)
    g = gsub.add_parser("list")
    client(g)
    p.set_defaults(func=cmd_groups)

    p = sub.add_parser("dump", help="print the records of a store (offline)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    p.add_argument("--journal", action="store_true", help="the whole journal (default: the compacted view)")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser("replay", help="load a store into fresh shards, check it, summarise (offline)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    _add_config_flags(p)
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_replay)

    sub.add_parser("assignors", help="list and inspect partition assignors", add_help=False)
    sub.add_parser("simulate", help="deterministic simulation / exhaustive exploration (see docs/simulation.md)", add_help=False)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "assignors":
        from assignors.cli import main as assignors_main

        return assignors_main(argv[1:])
    if argv and argv[0] == "simulate":
        from coordinator.sim.cli import main as simulate_main

        return simulate_main(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args))
    except UsageError as exc:
        print(f"kip848 {args.command}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # e.g. `kip848 dump | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


if __name__ == "__main__":
    raise SystemExit(main())
