"""``kip848 topics create|list|delete|add-partitions``: the coordinator's topic registry."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coordinator.cli.argtypes import INT32_MAX, int_in
from coordinator.cli.errors import UsageError
from coordinator.cli.output import print_json, print_table, topic_id_text
from coordinator.cli.registry import Commands
from coordinator.cli.report import error_text
from coordinator.cli.rpc import add_client_flags, call, channel


def add_write_timeout_flag(p: argparse.ArgumentParser) -> None:
    """``--timeout-ms``: the request's ``timeout_ms`` (Kafka's ``timeoutMs``) of a topic change."""
    p.add_argument(
        "--timeout-ms",
        type=int_in(0, INT32_MAX),
        default=None,
        metavar="MS",
        help="how long the coordinator waits for the change to be written to its store; past "
        "it the request is answered REQUEST_TIMED_OUT and the change may still land (default: "
        "the coordinator's offsets.commit.timeout.ms; 0: no wait). Must be below --timeout",
    )


def register(commands: Commands) -> None:
    p = commands.add("topics", cmd_topics, help="the topic registry of a running coordinator")
    tsub = p.add_subparsers(dest="topics_command", metavar="ACTION", required=True)
    t = tsub.add_parser(
        "create", help="register a topic with its partition count (and, optionally, its id)"
    )
    t.add_argument("name")
    t.add_argument(
        "--partitions",
        type=int_in(1, INT32_MAX),
        required=True,
        metavar="N",
        help="its number of partitions",
    )
    t.add_argument("--topic-id", default=None, help="base64url id (default: a random one)")
    t.add_argument(
        "--replica-racks",
        default=None,
        metavar="SPEC",
        help="the racks of the partitions' replicas, for rack-aware assignment: entries "
        "separated by ';', each a ','-separated list of racks, given to partitions 0, 1, 2... "
        "in turn and repeating (e.g. 'a,b;b,c;c,a'; an empty entry: unknown racks)",
    )
    _add_validate_flag(t)
    add_write_timeout_flag(t)
    add_client_flags(t)
    t = tsub.add_parser("list", help="every registered topic: name, id, partitions (racks)")
    add_client_flags(t)
    t = tsub.add_parser(
        "delete", help="delete topics (their committed offsets in every group go with them)"
    )
    t.add_argument("names", nargs="+", metavar="NAME")
    add_write_timeout_flag(t)
    add_client_flags(t)
    t = tsub.add_parser("add-partitions", help="raise a topic's partition count (it never shrinks)")
    t.add_argument("name")
    t.add_argument(
        "--count",
        type=int_in(1, INT32_MAX),
        required=True,
        metavar="N",
        help="the new total number of partitions",
    )
    _add_validate_flag(t)
    add_write_timeout_flag(t)
    add_client_flags(t)


def _add_validate_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--validate-only",
        action="store_true",
        help="check the change as the coordinator would make it, change nothing",
    )


def write_timeout(args: argparse.Namespace) -> dict[str, int]:
    """The request's ``timeout_ms`` field when ``--timeout-ms`` is given (else the server's
    bound); one the command would not wait for (``--timeout``) is refused."""
    timeout_ms = getattr(args, "timeout_ms", None)
    if timeout_ms is None:
        return {}
    if timeout_ms >= args.timeout * 1000:
        raise UsageError(
            f"--timeout-ms {timeout_ms} must be below --timeout ({args.timeout:g} s): the "
            "command would give up before the coordinator answers"
        )
    return {"timeout_ms": timeout_ms}


def cmd_topics(args: argparse.Namespace) -> int:
    from kip848.v1 import admin_pb2, admin_pb2_grpc

    bound = write_timeout(args)
    with channel(args) as ch:
        stub = admin_pb2_grpc.AdminServiceStub(ch)
        if args.topics_command == "list":
            resp = call(stub.ListTopics, admin_pb2.ListTopicsRequest(), args)
            if resp.error_code:
                print(f"kip848: {error_text(resp.error_code, resp.error_message)}", file=sys.stderr)
                return 1
            # Replica racks are shown only when known (a RACKS column, a replica_racks key).
            racked = any(t.replica_racks for t in resp.topics)
            if args.output == "json":
                print_json([_listed_json(t) for t in resp.topics])
            elif racked:
                print_table(
                    ("TOPIC", "TOPIC ID", "PARTITIONS", "RACKS"),
                    [
                        (t.name, topic_id_text(t.topic_id), t.num_partitions, _racks_text(t))
                        for t in resp.topics
                    ],
                )
            else:
                print_table(
                    ("TOPIC", "TOPIC ID", "PARTITIONS"),
                    [(t.name, topic_id_text(t.topic_id), t.num_partitions) for t in resp.topics],
                )
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
            if args.replica_racks is not None:
                for racks, partitions in parse_replica_racks(
                    args.replica_racks, args.partitions
                ).items():
                    topic.replica_racks.add(partitions=partitions, racks=racks)
            resp = call(
                stub.CreateTopics,
                admin_pb2.CreateTopicsRequest(
                    topics=[topic], validate_only=args.validate_only, **bound
                ),
                args,
            )
            results = [
                {
                    "name": t.name,
                    "topic_id": topic_id_text(t.topic_id),
                    "num_partitions": t.num_partitions,
                    "error": error_text(t.error_code, t.error_message) if t.error_code else None,
                }
                for t in resp.topics
            ]
            return _results(
                args,
                resp,
                results,
                lambda r: (
                    f"Validated topic {r['name']} ({r['num_partitions']} partitions; nothing"
                    " created)."
                    if args.validate_only
                    else f"Created topic {r['name']} ({r['topic_id']}, {r['num_partitions']}"
                    " partitions)."
                ),
            )
        if args.topics_command == "delete":
            resp = call(
                stub.DeleteTopics, admin_pb2.DeleteTopicsRequest(names=args.names, **bound), args
            )
            results = [
                {
                    "name": t.name,
                    "topic_id": topic_id_text(t.topic_id),
                    "error": error_text(t.error_code, t.error_message) if t.error_code else None,
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
                ],
                validate_only=args.validate_only,
                **bound,
            )
            resp = call(stub.CreatePartitions, req, args)
            results = [
                {
                    "name": t.name,
                    "count": args.count,
                    "error": error_text(t.error_code, t.error_message) if t.error_code else None,
                }
                for t in resp.results
            ]
            return _results(
                args,
                resp,
                results,
                lambda r: (
                    f"Validated: topic {r['name']} can have {r['count']} partitions (nothing"
                    " changed)."
                    if args.validate_only
                    else f"Topic {r['name']} now has {r['count']} partitions."
                ),
            )
    raise UsageError("topics: choose create, list, delete or add-partitions")


def parse_replica_racks(spec: str, partitions: int) -> dict[tuple[str, ...], list[int]]:
    """``--replica-racks``: the entries (';'), each a list of racks (','), given to the
    partitions in turn and repeating -> {racks: partitions}; empty entries (unknown racks)
    are left out."""
    entries = [
        tuple(sorted({r.strip() for r in e.split(",") if r.strip()})) for e in spec.split(";")
    ]
    if not any(entries):
        raise UsageError(f"--replica-racks names no rack: {spec!r}")
    out: dict[tuple[str, ...], list[int]] = {}
    for p in range(partitions):
        racks = entries[p % len(entries)]
        if racks:
            out.setdefault(racks, []).append(p)
    return out


def _listed_json(t: Any) -> dict[str, Any]:
    item: dict[str, Any] = {
        "name": t.name,
        "topic_id": topic_id_text(t.topic_id),
        "num_partitions": t.num_partitions,
    }
    if t.replica_racks:
        item["replica_racks"] = [
            {"partitions": list(e.partitions), "racks": list(e.racks)} for e in t.replica_racks
        ]
    return item


def _racks_text(t: Any) -> str:
    """The racks holding the topic's replicas, or '-' when unknown."""
    return ",".join(sorted({r for e in t.replica_racks for r in e.racks})) or "-"


def _results(
    args: argparse.Namespace, resp: Any, results: list[dict[str, Any]], ok_line: Any
) -> int:
    if resp.error_code:
        print(f"kip848: {error_text(resp.error_code, resp.error_message)}", file=sys.stderr)
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
