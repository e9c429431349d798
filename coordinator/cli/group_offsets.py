"""``kip848 groups reset-offsets|delete-offsets``: committed offsets changed by hand, with
Kafka's partition specs (``TOPIC:0,2,4-7``) and reset-offsets CSV."""

from __future__ import annotations

import argparse
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from coordinator.cli.argtypes import INT32_MAX, INT64_MAX, INT64_MIN, int_in, parse_int
from coordinator.cli.errors import CommandFailed, UsageError
from coordinator.cli.group_client import GroupClient
from coordinator.cli.output import print_json, print_table
from coordinator.cli.report import error_name, error_text, print_hints, report
from coordinator.cli.rpc import add_client_flags


def add_actions(gsub: Any) -> None:
    """The ``reset-offsets`` and ``delete-offsets`` actions of ``kip848 groups``."""
    g = gsub.add_parser(
        "reset-offsets",
        help="set the committed offsets of an inactive group",
        description="Refused while the group has members, as in Kafka. Dry run unless --execute. "
        "--to-earliest, --to-latest, --to-datetime and --by-duration read the partitions' logs, "
        "which a coordinator has in front of a broker (--kafka-upstream); there --to-offset and "
        "--shift-by are kept within each log, as Kafka does.",
    )
    add_one_group(g)
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
    how.add_argument(
        "--to-offset",
        type=int_in(0, INT64_MAX),
        metavar="N",
        help="set every partition to N",
    )
    how.add_argument(
        "--shift-by",
        type=int_in(INT64_MIN, INT64_MAX),
        metavar="N",
        help="move each committed offset by N (may be negative; floor 0)",
    )
    how.add_argument(
        "--from-file", metavar="CSV", help="topic,partition,offset lines (Kafka's format)"
    )
    how.add_argument(
        "--to-earliest", action="store_true", help="the first offset in each partition's log"
    )
    how.add_argument(
        "--to-latest", action="store_true", help="the log end offset of each partition"
    )
    how.add_argument(
        "--to-datetime",
        type=parse_datetime,
        metavar="YYYY-MM-DDTHH:mm:SS.sss",
        help="the first record at or after that time (Kafka's format; an optional zone such as "
        "Z or +01:00, else local time); the log end where there is none",
    )
    how.add_argument(
        "--by-duration",
        type=parse_duration,
        metavar="PnDTnHnMnS",
        help="as --to-datetime, for the time that long ago (ISO-8601, e.g. PT30M, P1DT2H)",
    )
    mode = g.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="show the plan only (the default)")
    mode.add_argument("--execute", action="store_true", help="commit the new offsets")
    add_client_flags(g)
    g.set_defaults(group_action=_groups_reset_offsets)
    g = gsub.add_parser(
        "delete-offsets",
        help="delete committed offsets of topics the group no longer subscribes to",
    )
    add_one_group(g)
    g.add_argument(
        "--topic",
        action="append",
        required=True,
        metavar="TOPIC[:PARTITIONS]",
        help="a topic (all its partitions) or TOPIC:0,2,4-7; repeatable",
    )
    add_client_flags(g)
    g.set_defaults(group_action=_groups_delete_offsets)


def add_one_group(g: argparse.ArgumentParser) -> None:
    """One group: ``GROUP`` or ``--group GROUP`` (Kafka's form)."""
    g.add_argument("group_id", nargs="?", metavar="GROUP")
    g.add_argument("--group", dest="group_opt", metavar="GROUP", help="the same as GROUP")


def one_group(args: argparse.Namespace) -> str:
    named = {g for g in (args.group_id, args.group_opt) if g is not None}
    if len(named) != 1:
        raise UsageError(
            f"{args.groups_command}: name one group (GROUP or --group GROUP)"
            + (f", not {len(named)}" if named else "")
        )
    return named.pop()


def parse_datetime(text: str) -> int:
    """``--to-datetime``: Kafka's ``YYYY-MM-DDTHH:mm:SS.sss`` (seconds and milliseconds may be
    left out; an optional zone: ``Z``, ``+HH:MM``, ``-HHMM``; without one, local time) -> ms since
    the epoch."""
    import datetime as dt

    stripped = text.strip()
    if "T" not in stripped:
        raise argparse.ArgumentTypeError(
            f"expected YYYY-MM-DDTHH:mm:SS.sss (e.g. 2026-11-23T09:30:00.000), got {text!r}"
        )
    try:
        when = dt.datetime.fromisoformat(stripped)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected YYYY-MM-DDTHH:mm:SS.sss (e.g. 2026-11-23T09:30:00.000), got {text!r}"
        ) from None
    return (
        int(when.astimezone().timestamp() * 1000)
        if when.tzinfo is None
        else int(when.timestamp() * 1000)
    )


_DURATION = re.compile(
    r"(?P<sign>[-+]?)P(?:(?P<d>[-+]?\d+)D)?"
    r"(?:T(?:(?P<h>[-+]?\d+)H)?(?:(?P<m>[-+]?\d+)M)?(?:(?P<s>[-+]?\d+)(?:[.,](?P<f>\d{1,9}))?S)?)?",
    re.IGNORECASE,
)


def parse_duration(text: str) -> int:
    """``--by-duration``: an ISO-8601 duration as Java's ``Duration.parse`` reads it
    (``PnDTnHnMnS``: days, hours, minutes, seconds with an optional fraction; each part may be
    signed, and so may the whole) -> milliseconds."""
    stripped = text.strip()
    m = _DURATION.fullmatch(stripped)
    if m is None or not any(m.group(k) for k in "dhms") or (stripped.upper().endswith("T")):
        raise argparse.ArgumentTypeError(
            f"expected an ISO-8601 duration PnDTnHnMnS (e.g. PT30M, P1DT2H), got {text!r}"
        )
    seconds = (
        int(m.group("d") or 0) * 86_400
        + int(m.group("h") or 0) * 3_600
        + int(m.group("m") or 0) * 60
        + int(m.group("s") or 0)
    )
    fraction = int((m.group("f") or "0").ljust(9, "0")[:3])  # milliseconds
    ms = seconds * 1000 + (-fraction if (m.group("s") or "").startswith("-") else fraction)
    return -ms if m.group("sign") == "-" else ms


def _digits(text: str) -> bool:
    return text.isascii() and text.isdigit()


def parse_topic_partitions(spec: str) -> tuple[str, list[int] | None]:
    """``T`` (every partition) or ``T:P[,P...]`` (partitions, ``a-b`` ranges allowed). Each
    partition is in Kafka's INT32 range, and one spec names at most as many partitions as a
    topic can have."""
    from coordinator.core.topics import MAX_PARTITIONS

    topic, sep, rest = spec.rpartition(":") if ":" in spec else (spec, "", "")
    if not topic:
        raise UsageError(f"--topic expects TOPIC or TOPIC:PARTITIONS, got {spec!r}")
    if not sep:
        return topic, None
    ranges: list[tuple[int, int]] = []
    for item in rest.split(","):
        lo, dash, hi = (part.strip() for part in item.partition("-"))
        if not _digits(lo) or (dash and not _digits(hi)):
            raise UsageError(f"--topic {spec!r}: partitions are numbers, e.g. {topic}:0,2,4-7")
        try:
            first = parse_int(lo, 0, INT32_MAX)
            ranges.append((first, parse_int(hi, 0, INT32_MAX) if dash else first))
        except ValueError:
            raise UsageError(
                f"--topic {spec!r}: partitions are in 0..{INT32_MAX} (Kafka's INT32)"
            ) from None
    for first, last in ranges:
        if last < first:
            raise UsageError(f"--topic {spec!r}: the range {first}-{last} is empty (LOW-HIGH)")
    if sum(last - first + 1 for first, last in ranges) > MAX_PARTITIONS:
        raise UsageError(
            f"--topic {spec!r}: names more partitions than a topic can have ({MAX_PARTITIONS})"
        )
    return topic, sorted({p for first, last in ranges for p in range(first, last + 1)})


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
        if partition > INT32_MAX or offset > INT64_MAX:
            raise UsageError(
                f"{path}:{number}: partition must be in 0..{INT32_MAX} (Kafka's INT32) and "
                f"offset in 0..{INT64_MAX} (INT64), got {line!r}"
            )
        if (topic, partition) in out:
            raise UsageError(f"{path}:{number}: {topic}-{partition} appears twice")
        out[(topic, partition)] = offset
    if not out:
        raise UsageError(f"{path}: no offsets in the file")
    return out


def _resolve_partitions(
    c: GroupClient, group_id: str, specs: Sequence[tuple[str, list[int] | None]], all_topics: bool
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
    for topic, partitions in specs:
        if partitions is None:
            registry = registry if registry is not None else c.topics()
            if topic not in registry:
                report(f"topic {topic}", 3, f"The topic '{topic}' does not exist.")
                raise CommandFailed
            partitions = list(range(registry[topic]))
        out[topic] = sorted(set(out.get(topic, [])) | set(partitions))
    return out


def _groups_reset_offsets(args: argparse.Namespace, c: GroupClient) -> int:
    from kip848.v1 import offsets_pb2

    gid = one_group(args)
    if args.from_file is None and not args.topic and not args.all_topics:
        raise UsageError(
            "reset-offsets: name the partitions with --topic T[:P] (repeatable), --all-topics, or --from-file"
        )
    if args.from_file is not None and (args.topic or args.all_topics):
        raise UsageError(
            "reset-offsets: --from-file names its own partitions; drop --topic/--all-topics"
        )
    specs = [parse_topic_partitions(spec) for spec in args.topic]
    wanted = read_offsets_csv(args.from_file) if args.from_file is not None else {}
    state = c.group_state(gid)
    if state is not None and state[1] not in ("Empty", "Dead"):
        _kind, state_name, members = state
        print(
            f"kip848: cannot reset the offsets of group '{gid}': it is {state_name}"
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
        partitions: dict[str, list[int]] = {}
        for topic, p in sorted(wanted):
            partitions.setdefault(topic, []).append(p)
    else:
        partitions = _resolve_partitions(c, gid, specs, args.all_topics)
    if not partitions:
        print(f"kip848: group '{gid}' has no committed offsets to reset.", file=sys.stderr)
        return 1
    current = c.committed(gid, partitions)
    logs = _log_targets(args, c, [(t, p) for t, ps in partitions.items() for p in ps])
    if logs is None:
        return 1
    bounds, targets = logs
    plan: list[tuple[str, int, int | None, int]] = []
    unshiftable = []
    for topic, ps in partitions.items():
        for p in ps:
            entry = current.get((topic, p))
            before = entry.committed_offset if entry is not None else None
            if args.from_file is not None:
                after = wanted[(topic, p)]
            elif targets is not None:
                after = targets[(topic, p)]
            elif args.to_offset is not None:
                after = _within(bounds, topic, p, args.to_offset)
            elif before is None:
                unshiftable.append(f"{topic}-{p}")
                continue
            else:
                after = max(0, before + args.shift_by)
                if after > INT64_MAX:
                    raise UsageError(
                        f"reset-offsets: {topic}-{p} at {before} shifted by {args.shift_by} "
                        f"passes the largest offset ({INT64_MAX})"
                    )
                after = _within(bounds, topic, p, after)
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
        resp = c.call_group(gid, lambda node: node.offsets.OffsetCommit, req)
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
            "error": error_text(*errors[(t, p)]) if (t, p) in errors else None,
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


Bounds = dict[tuple[str, int], tuple[int, int]]


def _log_targets(
    args: argparse.Namespace, c: GroupClient, keys: list[tuple[str, int]]
) -> tuple[Bounds | None, dict[tuple[str, int], int] | None] | None:
    """What the partitions' logs say, from the upstream broker (``AdminService.ListOffsets``):
    each partition's (log start, log end) offsets — None when the coordinator keeps no logs —
    and, for ``--to-earliest``/``--to-latest``/``--to-datetime``/``--by-duration``, each one's
    new offset (a time past the last record: the log end, as Kafka). None (reported) when those
    need logs the coordinator does not have, or the broker answered a partition with an error."""
    from coordinator.cli.group_client import EARLIEST, LATEST

    at: int | None = None
    if args.to_datetime is not None:
        at = args.to_datetime
    elif args.by_duration is not None:
        at = int(time.time() * 1000) - args.by_duration
    if at is not None:
        at = max(0, at)  # before 1970: every record is newer (negative times name log ends)
    from_logs = args.to_earliest or args.to_latest or at is not None
    if not from_logs and args.to_offset is None and args.shift_by is None:
        return None, None
    start = c.log_offsets(keys, EARLIEST)
    if start is None:
        if not from_logs:
            return None, None  # no logs: --to-offset/--shift-by are taken as they are
        flag = next(
            f
            for f, on in (
                ("--to-earliest", args.to_earliest),
                ("--to-latest", args.to_latest),
                ("--to-datetime", args.to_datetime is not None),
                ("--by-duration", args.by_duration is not None),
            )
            if on
        )
        print(
            f"kip848: reset-offsets {flag} reads the partitions' logs, and this coordinator has "
            "none: it runs without an upstream broker (--kafka-upstream).",
            file=sys.stderr,
        )
        print(
            "  hint: set the offsets with --to-offset N, --shift-by N or --from-file",
            file=sys.stderr,
        )
        return None
    end = c.log_offsets(keys, LATEST)
    found = c.log_offsets(keys, at) if at is not None else None
    assert end is not None
    failed = [
        (key, answer)
        for answers in (start, end, found or {})
        for key, answer in answers.items()
        if answer.error_code
    ]
    missing = [key for key in keys if key not in start or key not in end]
    if failed or missing:
        seen = set()
        for (topic, partition), answer in sorted(failed, key=lambda x: x[0]):
            if (topic, partition) not in seen:
                seen.add((topic, partition))
                report(
                    f"log offsets of {topic}-{partition}",
                    answer.error_code,
                    answer.error_message,
                    hint=False,
                )
        for topic, partition in missing:
            report(
                f"log offsets of {topic}-{partition}", 3, "The broker did not answer.", hint=False
            )
        print_hints([answer.error_code for _k, answer in failed])
        return None
    bounds = {key: (start[key].offset, end[key].offset) for key in keys}
    if args.to_earliest:
        return bounds, {key: lo for key, (lo, _hi) in bounds.items()}
    if args.to_latest:
        return bounds, {key: hi for key, (_lo, hi) in bounds.items()}
    if found is not None:
        return bounds, {
            key: found[key].offset if found[key].offset >= 0 else bounds[key][1] for key in keys
        }
    return bounds, None


def _within(bounds: Bounds | None, topic: str, partition: int, offset: int) -> int:
    """``offset`` kept within the partition's log (Kafka's reset-offsets: a note, then the
    nearest end); as it is when the coordinator has no logs."""
    if bounds is None:
        return offset
    lo, hi = bounds[(topic, partition)]
    if offset < lo:
        print(
            f"kip848: new offset ({offset}) is lower than the earliest offset of "
            f"{topic}-{partition}; it will be set to {lo}.",
            file=sys.stderr,
        )
        return lo
    if offset > hi:
        print(
            f"kip848: new offset ({offset}) is higher than the latest offset of "
            f"{topic}-{partition}; it will be set to {hi}.",
            file=sys.stderr,
        )
        return hi
    return offset


def _groups_delete_offsets(args: argparse.Namespace, c: GroupClient) -> int:
    from kip848.v1 import offsets_pb2

    gid = one_group(args)
    specs = [parse_topic_partitions(spec) for spec in args.topic]
    partitions = _resolve_partitions(c, gid, specs, False)
    req = offsets_pb2.OffsetDeleteRequest(
        group_id=gid,
        topics=[
            offsets_pb2.OffsetDeleteRequest.Topic(name=t, partition_indexes=ps)
            for t, ps in partitions.items()
        ],
    )
    resp = c.call_group(gid, lambda node: node.offsets.OffsetDelete, req)
    if resp.error_code:
        report(f"delete offsets of group {gid}", resp.error_code, resp.error_message)
        return 1
    rows = [
        {
            "topic": t.name,
            "partition": p.partition_index,
            "error": error_text(p.error_code, p.error_message) if p.error_code else None,
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
                (r["topic"], r["partition"], error_name(p.error_code) if r["error"] else "deleted")
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
