"""The plain-Python oracle for classic groups and migrations (docs/analytics.md, "Classic
groups" and ``migrations``): one sequential pass over each group's GroupMetadata records,
keeping the previous generation's members and each partition's pending release, written apart
from the Spark jobs of ``coordinator/analytics/classic.py`` and ``migrations.py``."""

from __future__ import annotations

from typing import Any

from coordinator.analytics import metrics as M

LEFT_OR_SESSION = M.LEFT_OR_SESSION
REPLACED = M.REPLACED

ORDER = (
    "downgraded_from_consumer_group",
    "member_joined",
    "member_rejoined",
    "subscription_changed",
    "topic_metadata_changed",
    "static_member_restart",
    M.FENCED_SESSION,
    M.FENCED_REBALANCE,
    M.LEFT,
    M.LEFT_OR_SESSION,
)


def _ms(t: Any) -> int | None:
    return None if t is None else int(t.timestamp() * 1000 + 0.5)


def _owners(members: list[dict[str, Any]]) -> dict[tuple[str, int], str]:
    return {
        (p["topic"], p["partition"]): m["member_id"]
        for m in members
        for p in m["assigned_partitions"] or ()
    }


def classic(gid: str, rows: list[dict[str, Any]], res: Any, complete: bool) -> None:
    """Appends the group's classic rebalances, intervals, removals and restarts to ``res``
    (``rows``: the group's records in offset order)."""
    cooperative = any(
        r["record_type_id"] == 2 and r["classic_rebalance_protocol"] == "cooperative" for r in rows
    )
    protocol = "cooperative" if cooperative else "eager"
    prev: dict[str, Any] | None = None
    last_relevant: dict[str, Any] | None = None  # the previous type-2 or type-3 tombstone row
    pending: dict[tuple[str, int], dict[str, Any]] = {}  # partition -> its release
    bumps: dict[int, dict[str, Any]] = {}  # offset -> the rebalance row
    for r in rows:
        t = r["record_type_id"]
        if t == 3 and r["tombstone"]:
            last_relevant = r
            continue
        if t != 2:
            continue
        downgrade = (
            last_relevant is not None
            and last_relevant["record_type_id"] == 3
            and last_relevant["ts_ms"] == r["ts_ms"]
        )
        last_relevant = r
        if r["tombstone"]:
            prev = None
            continue
        first = prev is None
        before = [] if prev is None else list(prev["classic_members"] or ())
        after = list(r["classic_members"] or ())
        before_ids = [m["member_id"] for m in before]
        after_ids = [m["member_id"] for m in after]
        pairs: dict[str, str] = {}  # old member -> its static successor
        for o in before:
            inst = o["instance_id"]
            if inst is None or o["member_id"] in after_ids:
                continue
            for n in after:
                if n["instance_id"] == inst and n["member_id"] not in before_ids:
                    pairs[o["member_id"]] = n["member_id"]
                    break
        e = r["ts_ms"]
        if r["rebalance_preparing_at"] is not None:
            removals = [
                (x["member_id"], x["reason"], _ms(x["removed_at"]))
                for x in r["classic_removed_members"] or ()
            ]
        else:
            removals = [
                (m, LEFT_OR_SESSION, e) for m in before_ids if m not in after_ids and m not in pairs
            ] + [(old, REPLACED, e) for old in pairs]
        is_rebalance = (not first and r["generation"] > prev["generation"]) or (  # type: ignore[index]
            first and not downgrade and (complete or r["generation"] <= 1)
        )
        by_id = {m["member_id"]: m for m in before}
        if not is_rebalance:
            removals = [(old, REPLACED, e) for old in pairs]
        for mid, reason, at in removals:
            res.removals.append(
                {
                    "group_id": gid,
                    "group_type": "classic",
                    "member_id": mid,
                    "offset": r["offset"],
                    "reason": reason,
                    "removed_ms": at,
                    "replaced_by": pairs.get(mid) if reason == REPLACED else None,
                    "instance_id": by_id.get(mid, {}).get("instance_id"),
                    "session_timeout_ms": by_id.get(mid, {}).get("session_timeout_ms"),
                }
            )
        for old, new in pairs.items():
            at = next((x[2] for x in removals if x[0] == old and x[1] == REPLACED), e)
            res.restarts.append(
                {
                    "group_id": gid,
                    "group_type": "classic",
                    "old_member_id": old,
                    "new_member_id": new,
                    "downtime_ms": None,
                    "rejoined_ms": at,
                }
            )
        if downgrade:
            res.downgrades.append(
                {
                    "group_id": gid,
                    "offset": r["offset"],
                    "ts_ms": e,
                    "generation": r["generation"],
                    "members_converted": len(after),
                }
            )
        if is_rebalance:
            _rebalance(gid, r, prev, before, after, pairs, removals, protocol, pending, bumps, res)
        prev = r


def _rebalance(
    gid: str,
    r: dict[str, Any],
    prev: dict[str, Any] | None,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    pairs: dict[str, str],
    removals: list[tuple[str, str, int | None]],
    protocol: str,
    pending: dict[tuple[str, int], dict[str, Any]],
    bumps: dict[int, dict[str, Any]],
    res: Any,
) -> None:
    e = r["ts_ms"]
    start = _ms(r["rebalance_preparing_at"])
    completing = _ms(r["rebalance_completing_at"])
    before_ids = [m["member_id"] for m in before]
    after_ids = [m["member_id"] for m in after]
    joined = sorted(m for m in after_ids if m not in before_ids and m not in pairs.values())
    removed = sorted((m, why) for m, why, _at in removals if why != REPLACED)
    subs_before = {m["member_id"]: m["subscribed_topic_names"] for m in before}
    sub_changed = sorted(
        m["member_id"]
        for m in after
        if m["member_id"] in subs_before
        and subs_before[m["member_id"]] != m["subscribed_topic_names"]
    )
    own_before, own_after = _owners(before), _owners(after)
    moved = newly = unassigned = 0
    moved_list = []
    stopped: set[str] = set()
    eager = protocol == "eager"
    rel_at = start if start is not None else e
    released: list[tuple[tuple[str, int], int, str]] = []
    for tp in sorted(set(own_before) | set(own_after)):
        frm = own_before.get(tp)
        to = own_after.get(tp)
        mapped = pairs.get(frm, frm) if frm is not None else None
        live = mapped is not None and mapped in after_ids
        kept = live and to == mapped
        if live and to is not None and not kept:
            moved += 1
            moved_list.append((tp[0], tp[1], frm, to))
        if to is not None and not live:
            newly += 1
        if live and to is None:
            unassigned += 1
        if live and (eager or not kept):
            stopped.add(mapped)  # type: ignore[arg-type]
        if frm is not None and (eager or not kept):
            if eager:
                at = rel_at
            elif not live:
                at = next((x[2] for x in removals if x[0] == frm), None) or rel_at
            else:
                at = e
            released.append((tp, at, frm))
    recorded = r["rebalance_cause"]
    if recorded == "member_rejoined" and "metadata" in (r["rebalance_client_reason"] or "").lower():
        recorded = "topic_metadata_changed"
    reasons = {why for _m, why in removed}
    flags = {
        "downgraded_from_consumer_group": recorded == "downgraded_from_consumer_group",
        "member_joined": bool(joined),
        "member_rejoined": recorded == "member_rejoined",
        "subscription_changed": bool(sub_changed) or recorded == "subscription_changed",
        "topic_metadata_changed": recorded == "topic_metadata_changed",
        "static_member_restart": bool(pairs) or recorded == "static_member_restart",
        **{reason: reason in reasons for reason in ORDER[6:]},
    }
    causes = ([recorded] if recorded else []) + [c for c in ORDER if flags[c] and c != recorded]
    b = {
        "group_id": gid,
        "group_type": "classic",
        "protocol": protocol,
        "group_epoch": r["generation"],
        "previous_epoch": None if prev is None else prev["generation"],
        "offset": r["offset"],
        "ts_ms": start if start is not None else e,
        "cause": causes[0] if causes else M.UNKNOWN_CAUSE,
        "causes": causes,
        "members_joined": joined,
        "members_removed": removed,
        "members_before": len(before),
        "members_after": len(after),
        "members_stopped": len(stopped),
        "partitions_moved": moved,
        "partitions_newly_assigned": newly,
        "partitions_unassigned": unassigned,
        "unowned_partition_seconds": 0.0,
        "partitions_unowned": 0,
        "outcome": "converged",
        "time_to_converge_ms": None if start is None else e - start,
        "join_ms": None if start is None or completing is None else completing - start,
        "sync_ms": None if completing is None else e - completing,
    }
    res.bumps.append(b)
    bumps[r["offset"]] = b
    # This record's releases (at the rebalance's start, or its end) come before its
    # acquisitions (its end): an acquisition closes the partition's latest release.
    for tp, at, frm in released:
        pending[tp] = {"ts": at, "by": frm, "generation": r["generation"], "bump": r["offset"]}
    for tp in sorted(own_after):
        frm = own_before.get(tp)
        mapped = pairs.get(frm, frm) if frm is not None else None
        live = mapped is not None and mapped in after_ids
        kept = live and own_after[tp] == mapped
        if not (eager or not kept):
            continue
        rel = pending.pop(tp, None)
        if rel is None:
            continue
        iv = {
            "group_id": gid,
            "group_type": "classic",
            "topic": tp[0],
            "partition": tp[1],
            "seconds": (e - rel["ts"]) / 1000.0,
            "released_by": rel["by"],
            "owned_again_by": own_after[tp],
            "group_epoch": rel["generation"],
        }
        res.intervals.append(iv)
        if e - rel["ts"] > 0:
            owner = bumps[rel["bump"]]  # the rebalance that released it
            owner["unowned_partition_seconds"] += (e - rel["ts"]) / 1000.0
            owner["partitions_unowned"] += 1


def migrations(res: Any) -> None:
    """The ``migrations`` rows from the rebalances, downgrades and mixed phases found."""
    rows = [
        {
            "group_id": b["group_id"],
            "direction": "upgrade",
            "offset": b["offset"],
            "ts_ms": b["ts_ms"],
            "generation": b["group_epoch"],
            "members_converted": b["members_after"],
        }
        for b in res.bumps
        if "migrated_from_classic" in b["causes"]
    ] + [{**d, "direction": "downgrade"} for d in res.downgrades]
    for m in rows:
        gid, at = m["group_id"], m["ts_ms"]
        phases = [p for p in res.phases if p["group_id"] == gid]
        if m["direction"] == "upgrade":
            phase = next((p for p in phases if p["start_ms"] == at), None)
        else:
            phase = next((p for p in phases if p["end_ms"] == at), None)
        start = None if phase is None else phase["start_ms"]
        end = None if phase is None else phase["end_ms"]
        if phase is None:
            outcome = "unknown"
        elif end is None:
            outcome = "in_progress"
        elif any(d["group_id"] == gid and d["ts_ms"] == end for d in res.downgrades):
            outcome = "downgraded"
        else:
            outcome = "completed"
        cost = [
            b
            for b in res.bumps
            if b["group_id"] == gid
            and (
                (
                    start is not None
                    and b["group_type"] != "classic"
                    and start <= b["ts_ms"]
                    and (end is None or b["ts_ms"] <= end)
                )
                or (
                    m["direction"] == "downgrade"
                    and b["group_type"] == "classic"
                    and "downgraded_from_consumer_group" in b["causes"]
                    and b["ts_ms"] == at
                )
            )
        ]
        res.migrations.append(
            {
                **m,
                "mixed_started_ms": start,
                "mixed_ended_ms": end,
                "mixed_outcome": outcome,
                "rebalances": len(cost),
                "partitions_moved": sum(b["partitions_moved"] for b in cost),
                "unowned_partition_seconds": round(
                    sum(b["unowned_partition_seconds"] for b in cost), 3
                ),
            }
        )
