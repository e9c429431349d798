"""The ``kip848`` command.

* ``serve``: run the coordinator (flags of shared/API.md; Kafka config names and defaults).
* ``topics create|list|delete|add-partitions``, ``groups list|describe|delete|reset-offsets|
  delete-offsets|validate-regex``, ``configs describe|alter``: gRPC clients of a running server
  (``--bootstrap-server``, human tables or ``--output json``). Errors print the Kafka error
  name, its message and a hint on stderr (docs/operations.md).
* ``dump`` / ``replay``: offline on a store (``--data-dir``): records in readable form; load
  into fresh shards, check, summarise (non-zero exit on a corrupt store).
* ``assignors``: delegated to ``assignors.cli``.

Exit codes: 0 ok, 1 failure (server unreachable, error answered, corrupt store), 2 usage or
configuration error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
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
    p.add_argument(
        "--config-file", metavar="FILE", help="Java-properties file of Kafka config names"
    )
    p.add_argument(
        "--set",
        metavar="NAME=VALUE",
        action="append",
        default=[],
        help="a config (repeatable; wins over the file)",
    )


# ---------------------------------------------------------------- serve


def cmd_serve(args: argparse.Namespace) -> int:
    from coordinator.runtime.store import SqliteRecordStore, StoreError
    from coordinator.server.app import ServeOptions, make_runtime, serve, split_listen
    from coordinator.server.loop import run as run_loop

    config = build_config(args.config_file, args.set)
    try:
        split_listen(args.listen)
        if args.advertised_address is not None:
            _host, port = split_listen(args.advertised_address, "--advertised-address")
            if port == 0:
                raise ValueError("--advertised-address needs a real port, not 0")
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.max_message_bytes < 1024:
        raise UsageError("--max-message-bytes must be >= 1024")
    if args.journal_retention_ms is not None and args.journal_retention_ms < 0:
        raise UsageError("--journal-retention-ms must be >= 0")
    if not 1 <= args.grpc_processes <= MAX_GRPC_PROCESSES:
        raise UsageError(
            f"--grpc-processes must be 1..{MAX_GRPC_PROCESSES}, got {args.grpc_processes}"
        )
    logging.basicConfig(
        level=getattr(logging, args.log_level.upper()),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        Path(args.data_dir).mkdir(parents=True, exist_ok=True)
        store = SqliteRecordStore(
            args.data_dir, journal_retention_ms=args.journal_retention_ms, sync=args.sync
        )
    except (StoreError, OSError) as exc:
        print(f"kip848 serve: cannot open the store in {args.data_dir}: {exc}", file=sys.stderr)
        return 1
    runtime = make_runtime(config, store, args.clock)
    options = ServeOptions(
        listen=args.listen,
        clock=args.clock,
        max_message_bytes=args.max_message_bytes,
        grpc_processes=args.grpc_processes,
        event_loop=args.event_loop,
        log_level=args.log_level,
        advertised=args.advertised_address,
    )
    return run_loop(serve(runtime, options), args.event_loop)


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
    import grpc

    print(f"kip848: {args.bootstrap_server}: {exc.code().name}: {exc.details()}", file=sys.stderr)
    if exc.code() == grpc.StatusCode.UNAVAILABLE:
        print(
            f"  hint: is `kip848 serve` running and listening on {args.bootstrap_server}? "
            "(--bootstrap-server HOST:PORT)",
            file=sys.stderr,
        )
    elif exc.code() == grpc.StatusCode.DEADLINE_EXCEEDED:
        print(
            f"  hint: no answer within {args.timeout} s; raise --timeout or check the server",
            file=sys.stderr,
        )
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

            topic = admin_pb2.CreateTopicsRequest.CreatableTopic(
                name=args.name, num_partitions=args.partitions
            )
            if args.topic_id:
                try:
                    topic.topic_id = topic_id_to_bytes(args.topic_id)
                except Exception:  # noqa: BLE001
                    raise UsageError(
                        f"--topic-id must be a base64url topic id (22 chars), got {args.topic_id!r}"
                    ) from None
            resp = _call(stub.CreateTopics, admin_pb2.CreateTopicsRequest(topics=[topic]), args)
            results = [
                {
                    "name": t.name,
                    "topic_id": _tid(t.topic_id),
                    "num_partitions": t.num_partitions,
                    "error": _err(t.error_code, t.error_message) if t.error_code else None,
                }
                for t in resp.topics
            ]
            return _results(
                args,
                resp,
                results,
                lambda r: (
                    f"Created topic {r['name']} ({r['topic_id']}, {r['num_partitions']} partitions)."
                ),
            )
        if args.topics_command == "delete":
            resp = _call(stub.DeleteTopics, admin_pb2.DeleteTopicsRequest(names=args.names), args)
            results = [
                {
                    "name": t.name,
                    "topic_id": _tid(t.topic_id),
                    "error": _err(t.error_code, t.error_message) if t.error_code else None,
                }
                for t in resp.results
            ]
            return _results(
                args, resp, results, lambda r: f"Deleted topic {r['name']} ({r['topic_id']})."
            )
        if args.topics_command == "add-partitions":
            req = admin_pb2.CreatePartitionsRequest(
                topics=[
                    admin_pb2.CreatePartitionsRequest.CreatePartitionsTopic(
                        name=args.name, count=args.count
                    )
                ]
            )
            resp = _call(stub.CreatePartitions, req, args)
            results = [
                {
                    "name": t.name,
                    "count": args.count,
                    "error": _err(t.error_code, t.error_message) if t.error_code else None,
                }
                for t in resp.results
            ]
            return _results(
                args, resp, results, lambda r: f"Topic {r['name']} now has {r['count']} partitions."
            )
    raise UsageError("topics: choose create, list, delete or add-partitions")


def _results(
    args: argparse.Namespace, resp: Any, results: list[dict[str, Any]], ok_line: Any
) -> int:
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


# ---------------------------------------------------------------- errors with hints

HINTS: dict[str, str] = {
    "GROUP_ID_NOT_FOUND": "see the groups the coordinator knows with `kip848 groups list`",
    "NON_EMPTY_GROUP": "the group still has members; stop its consumers (they leave, or their session times out) and retry",
    "UNKNOWN_MEMBER_ID": "the group has active members; offsets can be changed by hand only while it is empty",
    "STALE_MEMBER_EPOCH": "the member's epoch moved on; a consumer retries with its current epoch",
    "ILLEGAL_GENERATION": "the classic member's generation moved on; it must rejoin",
    "GROUP_SUBSCRIBED_TO_TOPIC": "members still subscribe to this topic; only offsets of topics the group no longer "
    "subscribes to can be deleted",
    "UNKNOWN_TOPIC_OR_PARTITION": "see the registered topics and their partition counts with `kip848 topics list`",
    "UNKNOWN_TOPIC_ID": "see the registered topics and their ids with `kip848 topics list`",
    "INVALID_GROUP_ID": "a group id must not be empty",
    "INVALID_CONFIG": "group configs: consumer.session.timeout.ms and consumer.heartbeat.interval.ms, within the "
    "server's group.consumer.min/max.* bounds, heartbeat interval below the session timeout",
    "INVALID_REGULAR_EXPRESSION": "patterns use RE2 syntax (like Java's, without backreferences or lookaround) and "
    "must match the whole topic name",
    "OFFSET_METADATA_TOO_LARGE": "metadata longer than offset.metadata.max.bytes is refused",
    "COORDINATOR_LOAD_IN_PROGRESS": "the coordinator is still loading its store; retry in a moment",
    "COORDINATOR_NOT_AVAILABLE": "the coordinator could not write its store or is stopping; check its log and retry",
    "INVALID_REQUEST": "the request was refused as malformed; see the message",
}


def _error_name(code: int) -> str:
    from coordinator.core.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)


def report(subject: str, code: int, message: str | None = None, *, hint: bool = True) -> None:
    """One error on stderr: the Kafka error name, its message, and a hint when there is one."""
    name = _error_name(code)
    print(f"kip848: {subject}: {name}" + (f": {message}" if message else ""), file=sys.stderr)
    if hint:
        print_hints([code])


def print_hints(codes: Sequence[int]) -> None:
    """The hints of these errors, each once."""
    for name in dict.fromkeys(_error_name(c) for c in codes):
        if name in HINTS:
            print(f"  hint: {HINTS[name]}", file=sys.stderr)


class CommandFailed(Exception):
    """Already reported on stderr; exit 1."""


# ---------------------------------------------------------------- groups


def _parts_json(items: Any) -> list[dict[str, Any]]:
    return [
        {
            "topic_id": _tid(tp.topic_id),
            "topic_name": tp.topic_name,
            "partitions": list(tp.partitions),
        }
        for tp in items
    ]


def _member_json(m: Any) -> dict[str, Any]:
    return {
        "member_id": m.member_id,
        "instance_id": m.instance_id if m.HasField("instance_id") else None,
        "rack_id": m.rack_id if m.HasField("rack_id") else None,
        "member_epoch": m.member_epoch,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "subscribed_topic_names": list(m.subscribed_topic_names),
        "subscribed_topic_regex": m.subscribed_topic_regex
        if m.HasField("subscribed_topic_regex")
        else None,
        "assignment": _parts_json(m.assignment.topic_partitions),
        "target_assignment": _parts_json(m.target_assignment.topic_partitions),
        "member_type": m.member_type,
    }


def _group_json(g: Any) -> dict[str, Any]:
    return {
        "group_id": g.group_id,
        "error": _err(g.error_code, g.error_message) if g.error_code else None,
        "group_uid": g.group_uid,
        "group_state": g.group_state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "assignor_name": g.assignor_name,
        "members": [_member_json(m) for m in g.members],
    }


def _fmt_parts(items: list[dict[str, Any]]) -> str:
    return (
        ",".join(
            f"{i['topic_name'] or i['topic_id']}:{'/'.join(map(str, i['partitions']))}"
            for i in items
        )
        or "-"
    )


MEMBER_TYPES = {-1: "unknown", 0: "classic", 1: "consumer"}


class _Client:
    """The stubs of one channel and the calls the group commands share."""

    def __init__(self, args: argparse.Namespace, channel: Any) -> None:
        from kip848.v1 import admin_pb2_grpc, consumer_group_pb2_grpc, offsets_pb2_grpc

        self.args = args
        self.admin = admin_pb2_grpc.AdminServiceStub(channel)
        self.groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        self.offsets = offsets_pb2_grpc.OffsetServiceStub(channel)

    def call(self, fn: Any, request: Any) -> Any:
        return _call(fn, request, self.args)

    def describe(self, group_ids: Sequence[str]) -> list[Any]:
        from kip848.v1 import consumer_group_pb2

        resp = self.call(
            self.groups.ConsumerGroupDescribe,
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=group_ids),
        )
        if resp.error_code:
            report("describe", resp.error_code, resp.error_message)
            raise CommandFailed
        return list(resp.groups)

    def listed(self) -> dict[str, Any]:
        from kip848.v1 import admin_pb2

        resp = self.call(self.admin.ListGroups, admin_pb2.ListGroupsRequest())
        if resp.error_code:
            report("list groups", resp.error_code, resp.error_message)
            raise CommandFailed
        return {g.group_id: g for g in resp.groups}

    def topics(self) -> dict[str, int]:
        from kip848.v1 import admin_pb2

        resp = self.call(self.admin.ListTopics, admin_pb2.ListTopicsRequest())
        if resp.error_code:
            report("list topics", resp.error_code, resp.error_message)
            raise CommandFailed
        return {t.name: t.num_partitions for t in resp.topics}

    def committed(
        self, group_id: str, wanted: dict[str, list[int]] | None = None
    ) -> dict[tuple[str, int], Any]:
        """(topic, partition) -> committed partition entry; all of the group's when ``wanted`` is None."""
        from kip848.v1 import common_pb2, offsets_pb2

        group = offsets_pb2.OffsetFetchRequest.Group(group_id=group_id)
        if wanted is not None:
            group.topics.CopyFrom(
                common_pb2.TopicPartitionIndexesList(
                    items=[
                        common_pb2.TopicPartitionIndexes(name=t, partition_indexes=ps)
                        for t, ps in wanted.items()
                    ]
                )
            )
        resp = self.call(self.offsets.OffsetFetch, offsets_pb2.OffsetFetchRequest(groups=[group]))
        code, message = resp.error_code, resp.error_message
        if not code and resp.groups[0].error_code:
            code, message = resp.groups[0].error_code, resp.groups[0].error_message
        if code:
            report(f"fetch offsets of group {group_id}", code, message)
            raise CommandFailed
        out = {}
        for t in resp.groups[0].topics:
            for p in t.partitions:
                if p.error_code:
                    report(
                        f"fetch offset of {t.name}-{p.partition_index}",
                        p.error_code,
                        p.error_message,
                    )
                    raise CommandFailed
                if p.committed_offset >= 0:
                    out[(t.name, p.partition_index)] = p
        return out

    def group_state(self, group_id: str) -> tuple[str, str, int] | None:
        """(type, state, members) of a group, None if the coordinator does not know it."""
        [g] = self.describe([group_id])
        if not g.error_code:
            return "consumer", g.group_state, len(g.members)
        if g.error_code != 69:  # GROUP_ID_NOT_FOUND: maybe a classic or offsets-only group
            report(f"group {group_id}", g.error_code, g.error_message)
            raise CommandFailed
        listed = self.listed().get(group_id)
        return None if listed is None else (listed.group_type, listed.group_state, 0)


def _split_values(values: Sequence[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def cmd_groups(args: argparse.Namespace) -> int:
    handlers = {
        "list": _groups_list,
        "describe": _groups_describe,
        "delete": _groups_delete,
        "reset-offsets": _groups_reset_offsets,
        "delete-offsets": _groups_delete_offsets,
        "validate-regex": _groups_validate_regex,
    }
    try:
        with _channel(args) as channel:
            return handlers[args.groups_command](args, _Client(args, channel))
    except CommandFailed:
        return 1


def _groups_list(args: argparse.Namespace, c: _Client) -> int:
    from kip848.v1 import admin_pb2

    req = admin_pb2.ListGroupsRequest(
        states_filter=_split_values(args.state), types_filter=_split_values(args.type)
    )
    resp = c.call(c.admin.ListGroups, req)
    if resp.error_code:
        report("list groups", resp.error_code, resp.error_message)
        return 1
    rows = [(g.group_id, g.group_type, g.group_state, g.protocol_type) for g in resp.groups]
    if args.output == "json":
        print_json(
            [
                {"group_id": a, "group_type": b, "group_state": c_, "protocol_type": d}
                for a, b, c_, d in rows
            ]
        )
    else:
        print_table(
            ("GROUP", "TYPE", "STATE", "PROTOCOL"), [(a, b, c_, d or "-") for a, b, c_, d in rows]
        )
    return 0


def _offset_rows(
    group: dict[str, Any], committed: dict[tuple[str, int], Any]
) -> list[dict[str, Any]]:
    """Committed offsets plus assigned partitions without one, each with its owner (if any)."""
    owners: dict[tuple[str, int], dict[str, Any]] = {}
    for m in group.get("members", []):
        for item in m["assignment"]:
            for p in item["partitions"]:
                owners[(item["topic_name"], p)] = m
    rows = []
    for topic, partition in sorted(set(committed) | set(owners)):
        entry = committed.get((topic, partition))
        owner = owners.get((topic, partition))
        rows.append(
            {
                "topic": topic,
                "partition": partition,
                "committed_offset": entry.committed_offset if entry is not None else None,
                "committed_leader_epoch": entry.committed_leader_epoch
                if entry is not None
                else None,
                "metadata": entry.metadata if entry is not None else None,
                "member_id": owner["member_id"] if owner else None,
                "client_host": owner["client_host"] if owner else None,
                "client_id": owner["client_id"] if owner else None,
            }
        )
    return rows


def _groups_describe(args: argparse.Namespace, c: _Client) -> int:
    sections = {s for s in ("state", "members", "offsets") if getattr(args, f"show_{s}")} or {
        "state",
        "members",
    }
    failed = False
    out = []
    for g in c.describe(args.group_ids):
        group = _group_json(g)
        if g.error_code == 69:  # not a consumer group: a classic or offsets-only group?
            listed = c.listed().get(g.group_id)
            if listed is not None:
                group = {
                    "group_id": g.group_id,
                    "error": None,
                    "group_type": listed.group_type,
                    "group_state": listed.group_state,
                    "members": [],
                }
        if group["error"]:
            report(f"group {g.group_id}", g.error_code, g.error_message)
            failed = True
            continue
        if "offsets" in sections:
            group["offsets"] = _offset_rows(group, c.committed(g.group_id))
        if "members" not in sections:
            group["member_count"] = len(group.pop("members"))
        if "state" not in sections:
            group = {
                k: v for k, v in group.items() if k in ("group_id", "error", "members", "offsets")
            }
        out.append(group)
    if args.output == "json":
        print_json(out)
        return 1 if failed else 0
    for i, group in enumerate(out):
        if i:
            print()
        _print_group(group, sections)
    return 1 if failed else 0


def _print_group(g: dict[str, Any], sections: set[str]) -> None:
    """A header line (the state, with --state), then each section after a blank line."""
    if "state" not in sections:
        print(f"GROUP {g['group_id']}")
    elif "group_uid" in g:
        members = g.get("member_count", len(g.get("members", ())))
        print(
            f"GROUP {g['group_id']}  uid {g['group_uid']}  state {g['group_state']}  epoch {g['group_epoch']}"
            f"  assignment epoch {g['assignment_epoch']}  assignor {g['assignor_name']}  members {members}"
        )
    else:
        print(
            f"GROUP {g['group_id']}  type {g['group_type']}  state {g['group_state']}  (no consumer-protocol members)"
        )
    if "members" in sections:
        print()
        if g["members"]:
            print_table(
                (
                    "MEMBER",
                    "EPOCH",
                    "TYPE",
                    "CLIENT",
                    "HOST",
                    "INSTANCE",
                    "SUBSCRIPTION",
                    "ASSIGNED",
                    "TARGET",
                ),
                [
                    (
                        m["member_id"],
                        m["member_epoch"],
                        MEMBER_TYPES.get(m["member_type"], m["member_type"]),
                        m["client_id"] or "-",
                        m["client_host"] or "-",
                        m["instance_id"] or "-",
                        _fmt_subscription(m),
                        _fmt_parts(m["assignment"]),
                        _fmt_parts(m["target_assignment"]),
                    )
                    for m in g["members"]
                ],
            )
        else:
            print("(no members)")
    if "offsets" in sections:
        print()
        if g["offsets"]:
            print_table(
                (
                    "TOPIC",
                    "PARTITION",
                    "COMMITTED-OFFSET",
                    "LEADER-EPOCH",
                    "METADATA",
                    "MEMBER",
                    "HOST",
                    "CLIENT",
                ),
                [
                    (
                        r["topic"],
                        r["partition"],
                        _dash(r["committed_offset"]),
                        _dash(
                            None
                            if r["committed_leader_epoch"] == -1
                            else r["committed_leader_epoch"]
                        ),
                        _dash(r["metadata"]),
                        _dash(r["member_id"]),
                        _dash(r["client_host"]),
                        _dash(r["client_id"]),
                    )
                    for r in g["offsets"]
                ],
            )
        else:
            print("(no committed offsets)")


def _dash(value: Any) -> Any:
    return "-" if value is None or value == "" else value


def _fmt_subscription(m: dict[str, Any]) -> str:
    regex = [f"/{m['subscribed_topic_regex']}/"] if m["subscribed_topic_regex"] else []
    return ",".join(m["subscribed_topic_names"] + regex) or "-"


def _groups_delete(args: argparse.Namespace, c: _Client) -> int:
    from kip848.v1 import admin_pb2

    resp = c.call(c.admin.DeleteGroups, admin_pb2.DeleteGroupsRequest(group_ids=args.group_ids))
    if resp.error_code:
        report("delete groups", resp.error_code, resp.error_message)
        return 1
    results = [
        {
            "group_id": r.group_id,
            "error": _err(r.error_code, r.error_message) if r.error_code else None,
        }
        for r in resp.results
    ]
    if args.output == "json":
        print_json(results)
    for r in resp.results:
        if r.error_code:
            report(f"delete group {r.group_id}", r.error_code, r.error_message, hint=False)
        elif args.output != "json":
            print(f"Deleted group {r.group_id} (and its committed offsets).")
    print_hints([r.error_code for r in resp.results if r.error_code])
    return 1 if any(r.error_code for r in resp.results) else 0


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """``T`` (every partition) or ``T:P[,P...]`` (partitions, ``a-b`` ranges allowed)."""
    topic, sep, rest = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not topic:
        raise UsageError(f"--topic expects TOPIC or TOPIC:PARTITIONS, got {spec!r}")
    if not sep:
        return topic, None
    partitions: list[int] = []
    try:
        for item in rest.split(","):
            lo, dash, hi = item.strip().partition("-")
            partitions.extend(range(int(lo), int(hi) + 1) if dash else [int(lo)])
    except ValueError:
        raise UsageError(
            f"--topic {spec!r}: partitions are numbers, e.g. {topic}:0,2,4-7"
        ) from None
    if not partitions or any(p < 0 for p in partitions):
        raise UsageError(f"--topic {spec!r}: partitions are numbers >= 0")
    return topic, sorted(set(partitions))


def read_offsets_csv(path: str) -> dict[tuple[str, int], int]:
    """Kafka's reset-offsets file: ``topic,partition,offset`` per line (blank lines and ``#``
    comments skipped; an optional ``topic,partition,offset`` header)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    out: dict[tuple[str, int], int] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if (
            not line
            or line.startswith("#")
            or line.replace(" ", "").lower() == "topic,partition,offset"
        ):
            continue
        cells = [c.strip() for c in line.split(",")]
        try:
            if len(cells) != 3 or not cells[0]:
                raise ValueError
            topic, partition, offset = cells[0], int(cells[1]), int(cells[2])
        except ValueError:
            raise UsageError(
                f"{path}:{number}: expected topic,partition,offset, got {line!r}"
            ) from None
        if partition < 0 or offset < 0:
            raise UsageError(f"{path}:{number}: partition and offset must be >= 0, got {line!r}")
        if (topic, partition) in out:
            raise UsageError(f"{path}:{number}: {topic}-{partition} appears twice")
        out[(topic, partition)] = offset
    if not out:
        raise UsageError(f"{path}: no offsets in the file")
    return out


def _resolve_partitions(
    c: _Client, group_id: str, specs: Sequence[str], all_topics: bool
) -> dict[str, list[int]]:
    """Topic -> partitions named by ``--topic`` specs (a bare topic: all its partitions) or,
    with ``--all-topics``, every partition the group has an offset for."""
    if all_topics:
        out: dict[str, list[int]] = {}
        for topic, partition in sorted(c.committed(group_id)):
            out.setdefault(topic, []).append(partition)
        return out
    registry = None
    out = {}
    for spec in specs:
        topic, partitions = parse_topic_partitions(spec)
        if partitions is None:
            registry = registry if registry is not None else c.topics()
            if topic not in registry:
                report(f"topic {topic}", 3, f"The topic '{topic}' does not exist.")
                raise CommandFailed
            partitions = list(range(registry[topic]))
        out[topic] = sorted(set(out.get(topic, [])) | set(partitions))
    return out


def _groups_reset_offsets(args: argparse.Namespace, c: _Client) -> int:
    from kip848.v1 import offsets_pb2

    gid = args.group_id
    if args.from_file is None and not args.topic and not args.all_topics:
        raise UsageError(
            "reset-offsets: name the partitions with --topic T[:P] (repeatable), --all-topics, or --from-file"
        )
    if args.from_file is not None and (args.topic or args.all_topics):
        raise UsageError(
            "reset-offsets: --from-file names its own partitions; drop --topic/--all-topics"
        )
    if args.to_offset is not None and args.to_offset < 0:
        raise UsageError("reset-offsets: --to-offset must be >= 0")
    state = c.group_state(gid)
    if state is not None and state[1] not in ("Empty", "Dead"):
        _kind, current, members = state
        print(
            f"kip848: cannot reset the offsets of group '{gid}': it is {current}"
            + (f" with {members} member(s)" if members else "")
            + ". Offsets can be reset only while the group is inactive (Empty), as in Kafka.",
            file=sys.stderr,
        )
        print(
            "  hint: stop the group's consumers (they leave, or their session times out), check with "
            f"`kip848 groups describe {gid} --state`, then run this again",
            file=sys.stderr,
        )
        return 1
    if args.from_file is not None:
        wanted = read_offsets_csv(args.from_file)
        partitions: dict[str, list[int]] = {}
        for topic, p in sorted(wanted):
            partitions.setdefault(topic, []).append(p)
    else:
        partitions = _resolve_partitions(c, gid, args.topic, args.all_topics)
    if not partitions:
        print(f"kip848: group '{gid}' has no committed offsets to reset.", file=sys.stderr)
        return 1
    current = c.committed(gid, partitions)
    plan: list[tuple[str, int, int | None, int]] = []
    unshiftable = []
    for topic, ps in partitions.items():
        for p in ps:
            entry = current.get((topic, p))
            before = entry.committed_offset if entry is not None else None
            if args.from_file is not None:
                after = wanted[(topic, p)]
            elif args.to_offset is not None:
                after = args.to_offset
            elif before is None:
                unshiftable.append(f"{topic}-{p}")
                continue
            else:
                after = max(0, before + args.shift_by)
            plan.append((topic, p, before, after))
    if unshiftable:
        print(
            f"kip848: cannot shift partitions without a committed offset: {', '.join(unshiftable)}",
            file=sys.stderr,
        )
        print("  hint: set them with --to-offset N (or a --from-file CSV) instead", file=sys.stderr)
        return 1
    executed = args.execute
    errors: dict[tuple[str, int], tuple[int, str | None]] = {}
    if executed:
        req = offsets_pb2.OffsetCommitRequest(group_id=gid)  # epoch -1: an admin commit
        by_topic: dict[str, list[tuple[int, int]]] = {}
        for topic, p, _before, after in plan:
            by_topic.setdefault(topic, []).append((p, after))
        for topic, items in by_topic.items():
            req.topics.add(
                name=topic,
                partitions=[
                    offsets_pb2.OffsetCommitRequest.Partition(partition_index=p, committed_offset=o)
                    for p, o in items
                ],
            )
        resp = c.call(c.offsets.OffsetCommit, req)
        if resp.error_code:
            report(f"reset offsets of group {gid}", resp.error_code, resp.error_message)
            return 1
        for t in resp.topics:
            for p in t.partitions:
                if p.error_code:
                    errors[(t.name, p.partition_index)] = (p.error_code, p.error_message)
    rows = [
        {
            "group_id": gid,
            "topic": t,
            "partition": p,
            "current_offset": before,
            "new_offset": after,
            "error": _err(*errors[(t, p)]) if (t, p) in errors else None,
        }
        for t, p, before, after in plan
    ]
    if args.output == "json":
        print_json({"group_id": gid, "executed": executed, "partitions": rows})
    else:
        print_table(
            ("GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "NEW-OFFSET")
            + (("STATUS",) if executed else ()),
            [
                (
                    r["group_id"],
                    r["topic"],
                    r["partition"],
                    "-" if r["current_offset"] is None else r["current_offset"],
                    r["new_offset"],
                )
                + ((r["error"] or "reset",) if executed else ())
                for r in rows
            ],
        )
        if not executed:
            note = "" if args.dry_run else " (the default; add --execute to apply)"
            print(f"Dry run{note}: nothing was changed.")
    for (t, p), (code, message) in sorted(errors.items()):
        report(f"reset {t}-{p}", code, message, hint=False)
    print_hints([code for code, _m in errors.values()])
    return 1 if errors else 0


def _groups_delete_offsets(args: argparse.Namespace, c: _Client) -> int:
    from kip848.v1 import offsets_pb2

    gid = args.group_id
    partitions = _resolve_partitions(c, gid, args.topic, False)
    req = offsets_pb2.OffsetDeleteRequest(
        group_id=gid,
        topics=[
            offsets_pb2.OffsetDeleteRequest.Topic(name=t, partition_indexes=ps)
            for t, ps in partitions.items()
        ],
    )
    resp = c.call(c.offsets.OffsetDelete, req)
    if resp.error_code:
        report(f"delete offsets of group {gid}", resp.error_code, resp.error_message)
        return 1
    rows = [
        {
            "topic": t.name,
            "partition": p.partition_index,
            "error": _err(p.error_code, p.error_message) if p.error_code else None,
        }
        for t in resp.topics
        for p in t.partitions
    ]
    if args.output == "json":
        print_json({"group_id": gid, "partitions": rows})
    else:
        print_table(
            ("TOPIC", "PARTITION", "STATUS"),
            [
                (r["topic"], r["partition"], _error_name(p.error_code) if r["error"] else "deleted")
                for r, p in zip(rows, (p for t in resp.topics for p in t.partitions), strict=True)
            ],
        )
    failed = [(t.name, p) for t in resp.topics for p in t.partitions if p.error_code]
    for topic, p in failed:
        report(
            f"delete offset {topic}-{p.partition_index}", p.error_code, p.error_message, hint=False
        )
    print_hints([p.error_code for _t, p in failed])
    return 1 if failed else 0


def _groups_validate_regex(args: argparse.Namespace, c: _Client) -> int:
    """KIP-848's ``--validate-regex``: compile the pattern exactly as the coordinator does
    (RE2, full match) and show which registered topics it matches now."""
    from coordinator.core.errors import CoordinatorError
    from coordinator.core.regex import resolve_regex

    try:
        matched = sorted(resolve_regex(args.pattern, c.topics()))
    except CoordinatorError as exc:
        if args.output == "json":
            print_json(
                {"pattern": args.pattern, "valid": False, "error": _err(exc.code, exc.message)}
            )
        report("validate-regex", exc.code, exc.message)
        return 1
    if args.output == "json":
        print_json({"pattern": args.pattern, "valid": True, "matched_topics": matched})
    else:
        print(f"The regular expression `{args.pattern}` is valid (RE2 syntax, full match).")
        print(f"It matches {len(matched)} of the registered topics" + (":" if matched else "."))
        for name in matched:
            print(f"  {name}")
    return 0


# ---------------------------------------------------------------- configs


def _parse_config_pairs(values: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in _split_values(values):
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise UsageError(f"--add-config expects NAME=VALUE[,NAME=VALUE...], got {item!r}")
        out[name.strip()] = value.strip()
    return out


def cmd_configs(args: argparse.Namespace) -> int:
    from kip848.v1 import admin_pb2, admin_pb2_grpc

    group_resource = 16
    with _channel(args) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        if args.configs_command == "describe":
            Desc = admin_pb2.DescribeConfigsRequest
            resp = _call(
                stub.DescribeConfigs,
                Desc(
                    resources=[
                        Desc.Resource(resource_type=group_resource, resource_name=args.group)
                    ],
                    include_documentation=True,
                ),
                args,
            )
            code, message = resp.error_code, resp.error_message
            if not code and resp.results[0].error_code:
                code, message = resp.results[0].error_code, resp.results[0].error_message
            if code:
                report(f"describe configs of group {args.group}", code, message)
                return 1
            sources = {8: "group override", 5: "server default"}
            rows = [
                {
                    "name": cfg.name,
                    "value": cfg.value,
                    "source": sources.get(cfg.config_source, str(cfg.config_source)),
                    "documentation": cfg.documentation,
                }
                for cfg in resp.results[0].configs
            ]
            if args.output == "json":
                print_json({"group_id": args.group, "configs": rows})
            else:
                print_table(
                    ("NAME", "VALUE", "SOURCE"),
                    [(r["name"], r["value"], r["source"]) for r in rows],
                )
            return 0
        sets = _parse_config_pairs(args.add_config)
        deletes = _split_values(args.delete_config)
        if not sets and not deletes:
            raise UsageError(
                "configs alter: give --add-config NAME=VALUE and/or --delete-config NAME"
            )
        both = sorted(set(sets) & set(deletes))
        if both:
            raise UsageError(f"configs alter: {', '.join(both)} both added and deleted")
        Alter = admin_pb2.IncrementalAlterConfigsRequest
        configs = [
            Alter.AlterableConfig(name=n, config_operation=0, value=v) for n, v in sets.items()
        ]
        configs += [Alter.AlterableConfig(name=n, config_operation=1) for n in deletes]
        resp = _call(
            stub.IncrementalAlterConfigs,
            Alter(
                resources=[
                    Alter.Resource(
                        resource_type=group_resource, resource_name=args.group, configs=configs
                    )
                ],
                validate_only=args.validate_only,
            ),
            args,
        )
        code, message = resp.error_code, resp.error_message
        if not code and resp.responses[0].error_code:
            code, message = resp.responses[0].error_code, resp.responses[0].error_message
        if args.output == "json":
            print_json(
                {
                    "group_id": args.group,
                    "set": sets,
                    "deleted": deletes,
                    "validate_only": args.validate_only,
                    "error": _err(code, message) if code else None,
                }
            )
        if code:
            report(f"alter configs of group {args.group}", code, message)
            return 1
        if args.output != "json":
            verb = "Validated (nothing changed)" if args.validate_only else "Altered"
            changes = [f"{n}={v}" for n, v in sets.items()] + [
                f"{n} (back to the server default)" for n in deletes
            ]
            print(
                f"{verb} configs of group {args.group}: {', '.join(changes)}. Members see the change on their next heartbeat."
            )
        return 0


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
        store = _open_read_only(args.data_dir)
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


# ---------------------------------------------------------------- parser


MAX_GRPC_PROCESSES = 64


def _processes(text: str) -> int:
    """``--grpc-processes``: a number, or ``auto`` (the CPUs this process may run on)."""
    if text == "auto":
        return max(1, min(MAX_GRPC_PROCESSES, len(os.sched_getaffinity(0))))
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number or 'auto', got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kip848", description="A KIP-848 consumer group coordinator over gRPC."
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    p = sub.add_parser("serve", help="run the coordinator")
    p.add_argument(
        "--listen",
        default=DEFAULT_LISTEN,
        metavar="HOST:PORT",
        help="bind address (port 0: any free port)",
    )
    p.add_argument(
        "--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR", help="where the record store lives"
    )
    _add_config_flags(p)
    p.add_argument(
        "--clock",
        choices=("system", "manual"),
        default="system",
        help="manual: TestingService.AdvanceTime",
    )
    p.add_argument("--max-message-bytes", type=int, default=16 * 1024 * 1024, metavar="N")
    p.add_argument(
        "--journal-retention-ms",
        type=int,
        default=None,
        metavar="MS",
        help="journal retention (default: keep)",
    )
    p.add_argument(
        "--sync",
        choices=("full", "normal"),
        default="full",
        help="SQLite durability (full: fsync per batch)",
    )
    p.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    p.add_argument(
        "--grpc-processes",
        type=_processes,
        default=1,
        metavar="N|auto",
        help="processes serving gRPC on the listen port (1: this one; N > 1 adds N-1 front ends "
        "that forward to it, for more cores; auto: one per usable CPU)",
    )
    p.add_argument(
        "--event-loop",
        choices=("uvloop", "asyncio"),
        default="uvloop",
        help="the server's event loop",
    )
    p.add_argument(
        "--advertised-address",
        default=None,
        metavar="HOST:PORT",
        help="the address FindCoordinator answers (default: the listen address; a wildcard host "
        "becomes this machine's name)",
    )
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

    p = sub.add_parser("groups", help="groups and their committed offsets on a running coordinator")
    gsub = p.add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    g = gsub.add_parser("list", help="list groups (consumer, classic, offsets-only)")
    g.add_argument(
        "--state",
        action="append",
        default=[],
        metavar="STATE",
        help="only groups in this state (case-insensitive; repeatable or comma-separated)",
    )
    g.add_argument(
        "--type",
        action="append",
        default=[],
        metavar="TYPE",
        help="only groups of this type: consumer, classic (case-insensitive; repeatable or comma-separated)",
    )
    client(g)
    g = gsub.add_parser(
        "describe",
        help="state, members and committed offsets of groups",
        description="With no section flag: --state and --members.",
    )
    g.add_argument("group_ids", nargs="+", metavar="GROUP")
    g.add_argument(
        "--state",
        dest="show_state",
        action="store_true",
        help="the group's state, epochs and assignor",
    )
    g.add_argument(
        "--members",
        dest="show_members",
        action="store_true",
        help="members, their assignments and targets",
    )
    g.add_argument(
        "--offsets",
        dest="show_offsets",
        action="store_true",
        help="committed offsets, with the member that owns each partition",
    )
    client(g)
    g = gsub.add_parser("delete", help="delete empty groups with their committed offsets")
    g.add_argument("group_ids", nargs="+", metavar="GROUP")
    client(g)
    g = gsub.add_parser(
        "reset-offsets",
        help="set the committed offsets of an inactive group",
        description="Refused while the group has members, as in Kafka. Dry run unless --execute.",
    )
    g.add_argument("group_id", metavar="GROUP")
    g.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC[:PARTITIONS]",
        help="a topic (all its partitions) or TOPIC:0,2,4-7; repeatable",
    )
    g.add_argument(
        "--all-topics", action="store_true", help="every partition the group has an offset for"
    )
    how = g.add_mutually_exclusive_group(required=True)
    how.add_argument("--to-offset", type=int, metavar="N", help="set every partition to N")
    how.add_argument(
        "--shift-by",
        type=int,
        metavar="N",
        help="move each committed offset by N (may be negative; floor 0)",
    )
    how.add_argument(
        "--from-file", metavar="CSV", help="topic,partition,offset lines (Kafka's format)"
    )
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    client(g)
    g = gsub.add_parser(
        "delete-offsets",
        help="delete committed offsets of topics the group no longer subscribes to",
    )
    g.add_argument("group_id", metavar="GROUP")
    g.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:PARTITIONS]",
        help="a topic (all its partitions) or TOPIC:0,2,4-7; repeatable",
    )
    client(g)
    g = gsub.add_parser(
        "validate-regex",
        help="check a subscription regex (RE2, full match) and show what it matches",
    )
    g.add_argument("pattern", metavar="PATTERN")
    client(g)
    p.set_defaults(func=cmd_groups)

    p = sub.add_parser(
        "configs",
        help="dynamic group configs (consumer.session.timeout.ms, consumer.heartbeat.interval.ms)",
    )
    csub = p.add_subparsers(dest="configs_command", metavar="ACTION", required=True)
    g = csub.add_parser("describe", help="effective group configs and where they come from")
    g.add_argument("--group", required=True, metavar="GROUP")
    client(g)
    g = csub.add_parser("alter", help="set or delete (revert to the server default) group configs")
    g.add_argument("--group", required=True, metavar="GROUP")
    g.add_argument("--add-config", action="append", default=[], metavar="NAME=VALUE[,NAME=VALUE]")
    g.add_argument("--delete-config", action="append", default=[], metavar="NAME[,NAME]")
    g.add_argument("--validate-only", action="store_true", help="check, change nothing")
    client(g)
    p.set_defaults(func=cmd_configs)

    p = sub.add_parser("dump", help="print the records of a store (offline)")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    p.add_argument(
        "--journal", action="store_true", help="the whole journal (default: the compacted view)"
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(func=cmd_dump)

    p = sub.add_parser(
        "replay", help="load a store into fresh shards, check it, summarise (offline)"
    )
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, metavar="DIR")
    _add_config_flags(p)
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.set_defaults(func=cmd_replay)

    sub.add_parser("assignors", help="list and inspect partition assignors", add_help=False)
    sub.add_parser(
        "simulate",
        help="deterministic simulation / exhaustive exploration (see docs/simulation.md)",
        add_help=False,
    )
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
