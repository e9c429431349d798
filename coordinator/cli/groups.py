"""``kip848 groups list|describe|delete|validate-regex`` (``reset-offsets`` and ``delete-offsets``:
``coordinator.cli.group_offsets``), as Kafka's ``kafka-consumer-groups.sh`` does them."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from coordinator.cli import group_offsets
from coordinator.cli.errors import CommandFailed, UsageError
from coordinator.cli.group_client import GroupClient
from coordinator.cli.output import dash, print_json, print_table, split_values, topic_id_text
from coordinator.cli.registry import Commands
from coordinator.cli.report import error_text, print_hints, report
from coordinator.cli.rpc import add_client_flags, channel


def register(commands: Commands) -> None:
    p = commands.add(
        "groups", cmd_groups, help="groups and their committed offsets on a running coordinator"
    )
    gsub = p.add_subparsers(dest="groups_command", metavar="ACTION", required=True)
    g = gsub.add_parser("list", help="list groups (consumer, classic, offsets-only)")
    g.add_argument(
        "--state",
        action="append",
        nargs="?",
        const="",
        default=[],
        metavar="STATE",
        help="only groups in this state (case-insensitive; repeatable or comma-separated; "
        f"{', '.join(GROUP_STATES)}); without a value, no filter (the STATE column is always shown)",
    )
    g.add_argument(
        "--type",
        action="append",
        default=[],
        metavar="TYPE",
        help="only groups of this type (case-insensitive; repeatable or comma-separated; "
        f"{', '.join(GROUP_TYPES)})",
    )
    add_client_flags(g)
    g.set_defaults(group_action=_groups_list)
    g = gsub.add_parser(
        "describe",
        help="state, members and committed offsets of groups",
        description="Groups: GROUP... and/or --group GROUP (repeatable), or --all-groups. "
        "With no section flag: --state and --members.",
    )
    add_group_selection(g, all_groups=True)
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
        help="members: id, epoch, type, client, host, instance and partition count "
        "(with --verbose also subscription, assignment and target)",
    )
    g.add_argument(
        "--offsets",
        dest="show_offsets",
        action="store_true",
        help="committed offsets, with the member that owns each partition",
    )
    g.add_argument(
        "--verbose",
        action="store_true",
        help="with --members: each member's rack, how many of its partitions have a replica in "
        "its rack, its subscription, assignment and target assignment",
    )
    add_client_flags(g)
    g.set_defaults(group_action=_groups_describe)
    g = gsub.add_parser(
        "delete",
        help="delete empty groups with their committed offsets",
        description="Groups: GROUP... and/or --group GROUP (repeatable), or --all-groups.",
    )
    add_group_selection(g, all_groups=True)
    add_client_flags(g)
    g.set_defaults(group_action=_groups_delete)
    group_offsets.add_actions(gsub)
    g = gsub.add_parser(
        "validate-regex",
        help="check a subscription regex (RE2, full match) and show what it matches",
    )
    g.add_argument("pattern", metavar="PATTERN")
    add_client_flags(g)
    g.set_defaults(group_action=_groups_validate_regex)


# Kafka's group states and types (GroupState, GroupType), as ListGroups filters take them.
GROUP_STATES = (
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
    "NotReady",
)
GROUP_TYPES = ("classic", "consumer", "share", "streams")


def add_group_selection(g: argparse.ArgumentParser, *, all_groups: bool) -> None:
    """``GROUP...`` and/or ``--group GROUP`` (repeatable; Kafka's form), or ``--all-groups``."""
    g.add_argument("group_ids", nargs="*", metavar="GROUP")
    g.add_argument(
        "--group",
        dest="group_opts",
        action="append",
        default=[],
        metavar="GROUP",
        help="a group (repeatable; the same as naming it)",
    )
    if all_groups:
        g.add_argument(
            "--all-groups", action="store_true", help="every group the coordinator knows"
        )


def selected_groups(args: argparse.Namespace, c: GroupClient | None = None) -> list[str]:
    """The groups named (positional and ``--group``, in order, each once) or, with
    ``--all-groups``, every group the coordinator lists (sorted)."""
    named = list(dict.fromkeys([*args.group_ids, *args.group_opts]))
    if getattr(args, "all_groups", False):
        if named:
            raise UsageError(
                f"{args.groups_command}: --all-groups and group names exclude each other"
            )
        assert c is not None
        return sorted(c.listed())
    if not named:
        raise UsageError(
            f"{args.groups_command}: name the groups (GROUP... or --group GROUP)"
            + (" or give --all-groups" if hasattr(args, "all_groups") else "")
        )
    return named


def checked_values(values: list[str], known: tuple[str, ...], what: str) -> list[str]:
    """Comma-separated/repeated filter values, each one of ``known`` (case-insensitive, as
    Kafka's tool parses them); an unknown one is a usage error, not an empty answer."""
    out = split_values(values)
    lower = {k.lower() for k in known}
    bad = [v for v in out if v.lower() not in lower]
    if bad:
        raise UsageError(
            f"list: invalid {what} {', '.join(map(repr, bad))}; valid {what}s are: {', '.join(known)}"
        )
    return out


def _parts_json(items: Any) -> list[dict[str, Any]]:
    return [
        {
            "topic_id": topic_id_text(tp.topic_id),
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


def _group_json(g: Any, group_id: str = "") -> dict[str, Any]:
    """One described group; every group has the same keys: a group that is not a consumer
    group, or is not found, has None where it has no value (and its error)."""
    if g is None or g.error_code:
        return {
            "group_id": g.group_id if g is not None else group_id,
            "group_type": None,
            "error": error_text(g.error_code, g.error_message) if g is not None else None,
            "group_uid": None,
            "group_state": None,
            "group_epoch": None,
            "assignment_epoch": None,
            "assignor_name": None,
            "members": [],
        }
    return {
        "group_id": g.group_id,
        "group_type": "consumer",
        "error": None,
        "group_uid": g.group_uid,
        "group_state": g.group_state,
        "group_epoch": g.group_epoch,
        "assignment_epoch": g.assignment_epoch,
        "assignor_name": g.assignor_name,
        "members": [_member_json(m) for m in g.members],
    }


def _classic_group_json(d: Any) -> dict[str, Any]:
    """A classic group (DescribeGroups) with the keys of a consumer group's: ``group_epoch`` is
    its generation, ``assignor_name`` its protocol (assignor), each member's ``member_epoch``
    the generation too; subscriptions and assignments are read from the members' embedded
    consumer protocol (another protocol type shows none)."""
    return {
        "group_id": d.group_id,
        "group_type": "classic",
        "error": None,
        "group_uid": None,
        "group_state": d.group_state,
        "group_epoch": d.generation_id,
        "assignment_epoch": None,
        "assignor_name": d.protocol_data or None,
        "members": [_classic_member_json(x, d) for x in d.members],
    }


def _classic_member_json(x: Any, d: Any) -> dict[str, Any]:
    from legacy_bridge.protocol import ProtocolError, decode_assignment, decode_subscription

    topics: list[str] = []
    rack = None
    assigned: list[dict[str, Any]] = []
    if d.protocol_type == "consumer":
        try:
            if x.member_metadata:
                subscription = decode_subscription(x.member_metadata)
                topics, rack = list(subscription.topics), subscription.rack_id
            if x.member_assignment:
                assigned = [
                    {"topic_id": None, "topic_name": topic, "partitions": list(partitions)}
                    for topic, partitions in decode_assignment(
                        x.member_assignment
                    ).assigned_partitions
                ]
        except ProtocolError:
            pass  # a client's bytes that do not parse: shown without them
    return {
        "member_id": x.member_id,
        "instance_id": x.group_instance_id if x.HasField("group_instance_id") else None,
        "rack_id": rack,
        "member_epoch": d.generation_id,
        "client_id": x.client_id,
        "client_host": x.client_host,
        "subscribed_topic_names": topics,
        "subscribed_topic_regex": None,
        "assignment": assigned,
        "target_assignment": [],
        "member_type": 0,
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


def cmd_groups(args: argparse.Namespace) -> int:
    try:
        with channel(args) as ch:
            client = GroupClient(args, ch)
            try:
                return int(args.group_action(args, client))
            finally:
                client.close()
    except CommandFailed:
        return 1


def _groups_list(args: argparse.Namespace, c: GroupClient) -> int:
    from kip848.v1 import admin_pb2

    req = admin_pb2.ListGroupsRequest(
        states_filter=checked_values(args.state, GROUP_STATES, "state"),
        types_filter=checked_values(args.type, GROUP_TYPES, "type"),
    )
    resp = c.list_groups(req)
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
                "log_end_offset": None,  # filled by _add_lag when the coordinator has logs
                "lag": None,
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


def _groups_describe(args: argparse.Namespace, c: GroupClient) -> int:
    sections = {s for s in ("state", "members", "offsets") if getattr(args, f"show_{s}")} or {
        "state",
        "members",
    }
    failed = False
    out = []
    for g in c.describe(selected_groups(args, c)):
        group = _group_json(g)
        if g.error_code == 69:  # not a consumer group: a classic or offsets-only group?
            listed = c.listed().get(g.group_id)
            # A classic group with a protocol is described by DescribeGroups; an offsets-only
            # (simple) group has none and nothing more to describe than its listing.
            if listed is not None and listed.group_type == "classic" and listed.protocol_type:
                described = c.describe_classic(g.group_id)
                group = (
                    _classic_group_json(described)
                    if not described.error_code
                    else _group_json(None, g.group_id)
                    | {"group_type": listed.group_type, "group_state": listed.group_state}
                )
            elif listed is not None:
                group = _group_json(None, g.group_id) | {
                    "group_type": listed.group_type,
                    "group_state": listed.group_state,
                }
        if group["error"]:
            report(f"group {g.group_id}", g.error_code, g.error_message)
            failed = True
        if "offsets" in sections:
            group["offsets"] = (
                [] if group["error"] else _offset_rows(group, c.committed(g.group_id))
            )
        if "members" not in sections:
            group["member_count"] = len(group.pop("members"))
        if "state" not in sections:
            group = {
                k: v for k, v in group.items() if k in ("group_id", "error", "members", "offsets")
            }
        out.append(group)
    if "members" in sections and args.verbose:
        _add_rack_local(c, out)
    logs = False
    if "offsets" in sections:
        logs, lag_failed = _add_lag(c, out)
        failed = failed or lag_failed
    if args.output == "json":
        print_json(out)
        return 1 if failed else 0
    found = [group for group in out if not group["error"]]
    for i, group in enumerate(found):
        if i:
            print()
        _print_group(group, sections, args.verbose, logs)
    return 1 if failed else 0


def _add_rack_local(c: GroupClient, groups: list[dict[str, Any]]) -> None:
    """Each member's ``rack_local_partitions``: how many of its assigned partitions have a
    replica in its rack (None: no rack, or no replica racks known for its topics)."""
    members = [m for g in groups for m in g.get("members", ())]
    racks = c.topic_racks() if any(m["rack_id"] for m in members) else {}
    for m in members:
        rack, local = m["rack_id"], None
        if rack is not None and any(i["topic_name"] in racks for i in m["assignment"]):
            local = sum(
                1
                for i in m["assignment"]
                for p in i["partitions"]
                if rack in racks.get(i["topic_name"], {}).get(p, ())
            )
        m["rack_local_partitions"] = local


def _add_lag(c: GroupClient, groups: list[dict[str, Any]]) -> tuple[bool, bool]:
    """Each offset row's log end offset and lag (log end offset - committed offset), from the
    upstream broker's logs (one ListOffsets for every row). A log end below the committed
    offset gives no lag (LAG "-", null in JSON) and a warning on stderr: the upstream's
    watermarks are wrong (Tansu's memory engine reports a high watermark of 1) or the log was
    truncated under the group. Returns (whether the coordinator has logs — it runs with
    ``--kafka-upstream`` —, whether a partition's answer was an error, reported on stderr)."""
    from coordinator.cli.group_client import LATEST

    rows = [row for g in groups for row in g.get("offsets", ())]
    ends = c.log_offsets(dict.fromkeys((r["topic"], r["partition"]) for r in rows), LATEST)
    if ends is None:
        return False, False
    failed: dict[tuple[str, int], Any] = {}
    for row in rows:
        key = (row["topic"], row["partition"])
        answer = ends.get(key)
        if answer is None or answer.error_code:
            if answer is not None:
                failed[key] = answer
            continue
        row["log_end_offset"] = answer.offset
        committed = row["committed_offset"]
        if committed is not None and answer.offset < committed:
            print(
                f"kip848: warning: {row['topic']}-{row['partition']}: the log end offset "
                f"{answer.offset} is below the committed offset {committed} (the upstream's "
                "watermarks are wrong, or its log was truncated): no LAG shown",
                file=sys.stderr,
            )
        elif committed is not None:
            row["lag"] = answer.offset - committed
    for (topic, partition), answer in sorted(failed.items()):
        report(
            f"log end offset of {topic}-{partition}",
            answer.error_code,
            answer.error_message,
            hint=False,
        )
    return True, bool(failed)


def _print_group(g: dict[str, Any], sections: set[str], verbose: bool, logs: bool) -> None:
    """A header line (the state, with --state), then each section after a blank line; the
    offsets with LOG-END-OFFSET and LAG when the coordinator has logs (``logs``)."""
    if "state" not in sections:
        print(f"GROUP {g['group_id']}")
    elif g["group_type"] == "consumer":
        members = g.get("member_count", len(g.get("members", ())))
        print(
            f"GROUP {g['group_id']}  uid {g['group_uid']}  state {g['group_state']}  epoch {g['group_epoch']}"
            f"  assignment epoch {g['assignment_epoch']}  assignor {g['assignor_name']}  members {members}"
        )
    elif g["group_type"] == "classic" and g["group_epoch"] is not None:
        members = g.get("member_count", len(g.get("members", ())))
        print(
            f"GROUP {g['group_id']}  type classic  state {g['group_state']}  generation {g['group_epoch']}"
            f"  assignor {g['assignor_name'] or '-'}  members {members}"
        )
    else:
        print(
            f"GROUP {g['group_id']}  type {g['group_type']}  state {g['group_state']}  (no consumer-protocol members)"
        )
    if "members" in sections:
        print()
        if not g["members"]:
            print("(no members)")
        elif verbose:
            print_table(
                MEMBER_COLUMNS + ("RACK", "RACK-LOCAL", "SUBSCRIPTION", "ASSIGNED", "TARGET"),
                [
                    _member_row(m)
                    + (
                        dash(m["rack_id"]),
                        _fmt_rack_local(m),
                        _fmt_subscription(m),
                        _fmt_parts(m["assignment"]),
                        _fmt_parts(m["target_assignment"]),
                    )
                    for m in g["members"]
                ],
            )
        else:
            print_table(
                MEMBER_COLUMNS + ("#PARTITIONS",),
                [
                    _member_row(m) + (sum(len(i["partitions"]) for i in m["assignment"]),)
                    for m in g["members"]
                ],
            )
    if "offsets" in sections:
        print()
        if g["offsets"]:
            lag = ("LOG-END-OFFSET", "LAG") if logs else ()
            print_table(
                ("TOPIC", "PARTITION", "COMMITTED-OFFSET")
                + lag
                + ("LEADER-EPOCH", "METADATA", "MEMBER", "HOST", "CLIENT"),
                [
                    (r["topic"], r["partition"], dash(r["committed_offset"]))
                    + ((dash(r["log_end_offset"]), dash(r["lag"])) if logs else ())
                    + (
                        dash(
                            None
                            if r["committed_leader_epoch"] == -1
                            else r["committed_leader_epoch"]
                        ),
                        dash(r["metadata"]),
                        dash(r["member_id"]),
                        dash(r["client_host"]),
                        dash(r["client_id"]),
                    )
                    for r in g["offsets"]
                ],
            )
        else:
            print("(no committed offsets)")


MEMBER_COLUMNS = ("MEMBER", "EPOCH", "TYPE", "CLIENT", "HOST", "INSTANCE")


def _fmt_rack_local(m: dict[str, Any]) -> str:
    """'local/assigned' partitions, or '-' when unknown."""
    local = m.get("rack_local_partitions")
    if local is None:
        return "-"
    return f"{local}/{sum(len(i['partitions']) for i in m['assignment'])}"


def _member_row(m: dict[str, Any]) -> tuple[Any, ...]:
    return (
        m["member_id"],
        m["member_epoch"],
        MEMBER_TYPES.get(m["member_type"], m["member_type"]),
        m["client_id"] or "-",
        m["client_host"] or "-",
        m["instance_id"] or "-",
    )


def _fmt_subscription(m: dict[str, Any]) -> str:
    regex = [f"/{m['subscribed_topic_regex']}/"] if m["subscribed_topic_regex"] else []
    return ",".join(m["subscribed_topic_names"] + regex) or "-"


def _groups_delete(args: argparse.Namespace, c: GroupClient) -> int:

    resp = c.delete_groups(selected_groups(args, c))
    if resp.error_code:
        report("delete groups", resp.error_code, resp.error_message)
        return 1
    results = [
        {
            "group_id": r.group_id,
            "error": error_text(r.error_code, r.error_message) if r.error_code else None,
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


def _groups_validate_regex(args: argparse.Namespace, c: GroupClient) -> int:
    """KIP-848's ``--validate-regex``: compile the pattern exactly as the coordinator does
    (RE2, full match) and show which registered topics it matches now."""
    from coordinator.core.errors import CoordinatorError
    from coordinator.core.regex import resolve_regex

    try:
        matched = sorted(resolve_regex(args.pattern, c.topics()))
    except CoordinatorError as exc:
        if args.output == "json":
            print_json(
                {
                    "pattern": args.pattern,
                    "valid": False,
                    "error": error_text(exc.code, exc.message),
                }
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
