"""An independent, plain-Python calculation of the report's metrics (docs/analytics.md): one
sequential pass over each group's exported records, keeping the group's state as the
coordinator does. The Spark jobs compute the same definitions relationally (windows, array
set operations, joins); the tests require both to agree exactly."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import pyarrow.parquet as pq

from coordinator.analytics import metrics as M

from . import oracle_classic

CAUSE_ORDER = M.CAUSES


def load(path: str) -> list[dict[str, Any]]:
    """The export's rows; columns added after the file was written read as None."""
    from coordinator.analytics.schema import COLUMNS

    rows = pq.read_table(path).to_pylist()
    for r in rows:
        r["ts_ms"] = int(r["timestamp"].timestamp() * 1000 + 0.5)
        for c in COLUMNS:
            r.setdefault(c.name, None)
    return rows


@dataclass
class Result:
    bumps: list[dict[str, Any]] = field(default_factory=list)
    removals: list[dict[str, Any]] = field(default_factory=list)
    intervals: list[dict[str, Any]] = field(default_factory=list)
    restarts: list[dict[str, Any]] = field(default_factory=list)
    commits: dict[tuple[str, str, int], dict[str, int]] = field(default_factory=dict)
    phases: list[dict[str, Any]] = field(default_factory=list)
    """Mixed phases of consumer groups: start and end (None: still mixed) times."""
    downgrades: list[dict[str, Any]] = field(default_factory=list)
    migrations: list[dict[str, Any]] = field(default_factory=list)


def _tps(parts: list[dict[str, Any]] | None) -> set[tuple[str, int]]:
    return {(p["topic"], p["partition"]) for p in parts or ()}


def compute(
    rows: list[dict[str, Any]],
    *,
    session_timeout_ms: int,
    complete: bool,
    bucket_s: int,
    t0_us: int,
) -> Result:
    res = Result()
    by_group: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        if r["group_id"] is not None:
            by_group[r["group_id"]].append(r)
    for gid in sorted(by_group):
        # The group's partition and its Config records of the cluster log (another log).
        grows = sorted(
            (r for r in by_group[gid] if r["record_type_id"] != 1104), key=lambda r: r["offset"]
        )
        configs = _cluster_configs(r for r in by_group[gid] if r["record_type_id"] == 1104)
        _group(gid, grows, res, session_timeout_ms, complete, configs)
        oracle_classic.classic(gid, grows, res, complete)
        _commits(gid, grows, res, bucket_s, t0_us)
    oracle_classic.migrations(res)
    return res


ClusterConfigs = list[tuple[int, int, dict[str, str]]]
"""A group's configs in the cluster log: (time, offset, every override after the record)."""


def _cluster_configs(rows: Any) -> ClusterConfigs:
    out: ClusterConfigs = []
    now: dict[str, str] = {}
    for r in sorted(rows, key=lambda r: r["offset"]):
        now = dict(now)
        if r["config_value"] is None:
            now.pop(r["config_name"], None)
        else:
            now[r["config_name"]] = r["config_value"]
        out.append((r["ts_ms"], r["offset"], now))
    return out


def _group_session(configs: ClusterConfigs, ts: int, partition: int | None) -> int | None:
    """The group's dynamic session timeout at time ``ts``: the cluster log's overrides after
    its latest record at or before ``ts`` when they name any config, else the partition's."""
    earlier = [c for c in configs if c[0] <= ts]
    overrides = max(earlier, key=lambda c: (c[0], c[1]))[2] if earlier else {}
    if not overrides:
        return partition
    value = overrides.get(M.SESSION_TIMEOUT_CONFIG)
    return None if value is None else int(value)


def _group(
    gid: str,
    rows: list[dict[str, Any]],
    res: Result,
    default_session: int,
    complete: bool,
    configs: ClusterConfigs,
) -> None:
    members: dict[str, dict[str, Any]] = {}
    last8: dict[str, tuple[int, str, int]] = {}
    last_active: dict[str, int] = {}
    ever5: dict[str, bool] = {}
    session_cfg: int | None = None
    epoch: int | None = None
    seen3 = False
    classic_gone_ts: int | None = None
    seq = 0  # ConsumerGroupMetadata records so far
    bump_of_seq: dict[int, dict[str, Any]] = {}
    seg: dict[str, Any] = _new_seg(0)
    open_bumps: list[dict[str, Any]] = []
    target: dict[str, set[tuple[str, int]]] = {}
    owned: dict[str, set[tuple[str, int]]] = {}
    pending_release: dict[tuple[str, int], tuple[int, str, int]] = {}
    replacing_members: set[str] = set()
    ever7: set[str] = set()  # members with a target record so far
    seg_moves: dict[int, dict[tuple[str, int], list[str | None]]] = defaultdict(dict)
    n = len(rows)
    for i, r in enumerate(rows):
        t, tomb, ts = r["record_type_id"], r["tombstone"], r["ts_ms"]
        mid = r["member_id"]
        if t == 1016 and r["config_name"] == M.SESSION_TIMEOUT_CONFIG:
            session_cfg = None if r["config_value"] is None else int(r["config_value"])
        elif t == 2:
            if tomb:
                classic_gone_ts = ts
                seg["classic_tombstone"] = True
        elif t in (4, 16):
            seg["partition_metadata" if t == 4 else "regex"] = True
        elif t == 5:
            prev = members.get(mid)
            if tomb and prev is not None:
                # Look ahead: replaced by a new incarnation of the same static member (same
                # instance, same time), or the consumer group ends now (conversion)?
                inst = prev["instance_id"]
                nxt = next((x for x in rows[i + 1 :] if x["record_type_id"] == 5), None)
                replaced = (
                    inst is not None
                    and nxt is not None
                    and not nxt["tombstone"]
                    and nxt["instance_id"] == inst
                    and nxt["member_id"] != mid
                    and nxt["ts_ms"] == ts
                    and nxt["member_id"] not in members
                )
                nxt3 = next((x for x in rows[i + 1 :] if x["record_type_id"] == 3), None)
                converted = nxt3 is not None and nxt3["tombstone"] and nxt3["ts_ms"] == ts
                s = (
                    prev["classic_sto"]
                    or _group_session(configs, ts, session_cfg)
                    or default_session
                )
                l8 = last8.get(mid)
                if replaced:
                    reason = M.REPLACED
                elif converted:
                    reason = M.CONVERTED
                elif l8 and l8[1] == "UNREVOKED_PARTITIONS" and ts >= l8[0] + prev["rt"]:
                    reason = M.FENCED_REBALANCE
                elif l8 and l8[2] == -2 and ts >= l8[0] + s:
                    reason = M.FENCED_SESSION
                elif mid in last_active and last_active[mid] > ts - s:
                    reason = M.LEFT
                else:
                    reason = M.LEFT_OR_SESSION
                mixed = prev["classic"] or any(m["classic"] for k, m in members.items() if k != mid)
                res.removals.append(
                    {
                        "group_id": gid,
                        "group_type": "mixed" if mixed else "consumer",
                        "member_id": mid,
                        "offset": r["offset"],
                        "reason": reason,
                        "session_timeout_ms": s,
                    }
                )
                if replaced:
                    res.restarts.append(
                        {
                            "group_id": gid,
                            "group_type": "mixed" if mixed else "consumer",
                            "instance_id": inst,
                            "old_member_id": mid,
                            "new_member_id": nxt["member_id"],  # type: ignore[index]
                            "downtime_ms": ts - l8[0] if l8 and l8[2] == -2 else None,
                        }
                    )
                elif not converted:
                    seg["removed"].append((mid, reason))
                del members[mid]
                last8.pop(mid, None)
            elif not tomb:
                info = {
                    "instance_id": r["instance_id"],
                    "names": tuple(r["subscribed_topic_names"] or ()),
                    "regex": r["subscribed_topic_regex"] or "",
                    "assignor": r["server_assignor"] or "",
                    "rt": r["rebalance_timeout_ms"],
                    "classic_sto": r["classic_session_timeout_ms"],
                    "classic": bool(r["classic_member"]),
                }
                if prev is None:
                    replacing = (
                        bool(res.restarts)
                        and res.restarts[-1]["new_member_id"] == mid
                        and res.restarts[-1]["group_id"] == gid
                    )
                    if replacing:
                        replacing_members.add(mid)
                    elif classic_gone_ts != ts or not r["classic_member"]:
                        seg["joined"].append(mid)
                    else:  # converted by an upgrade: it was a member of the classic group
                        seg["members_before"] += 1
                elif (prev["names"], prev["regex"]) != (info["names"], info["regex"]):
                    seg["subscription_changed"].append(mid)
                elif prev["assignor"] != info["assignor"]:
                    seg["assignor_changed"].append(mid)
                members[mid] = info
                last_active[mid] = ts
            ever5[mid] = True
            mixed_now = any(m["classic"] for m in members.values())
            if mixed_now and (
                not res.phases
                or res.phases[-1]["group_id"] != gid
                or (res.phases[-1]["end_ms"] is not None)
            ):
                res.phases.append({"group_id": gid, "start_ms": ts, "end_ms": None})
            elif (
                not mixed_now
                and res.phases
                and res.phases[-1]["group_id"] == gid
                and (res.phases[-1]["end_ms"] is None)
            ):
                res.phases[-1]["end_ms"] = ts
        elif t == 7:
            new = set() if tomb else _tps(r["target_partitions"])
            old = target.get(mid, set())
            # A static member's new incarnation takes over its predecessor's target with its
            # very first target record (not a move); a later rejoin under its id moves as any.
            first = mid not in ever7
            ever7.add(mid)
            if not tomb and not (first and mid in replacing_members):
                moves = seg_moves[seq]
                for tp in old - new:
                    moves.setdefault(tp, [None, None])[0] = mid
                for tp in new - old:
                    moves.setdefault(tp, [None, None])[1] = mid
            if tomb:
                target.pop(mid, None)
            else:
                target[mid] = new
        elif t == 8:
            new = (
                set()
                if tomb
                else _tps(r["assigned_partitions"]) | _tps(r["pending_revocation_partitions"])
            )
            old = owned.get(mid, set())
            attr = seq + 1 if tomb else seq
            for tp in sorted(old - new):
                pending_release[tp] = (ts, mid, attr)
            for tp in sorted(new - old):
                rel = pending_release.pop(tp, None)
                if rel is not None:
                    res.intervals.append(
                        {
                            "group_id": gid,
                            "topic": tp[0],
                            "partition": tp[1],
                            "seconds": (ts - rel[0]) / 1000.0,
                            "released_by": rel[1],
                            "owned_again_by": mid,
                            "_seq": rel[2],
                            "group_epoch": None,  # the bump is known later
                            "group_type": "consumer",
                        }
                    )
            if tomb:
                owned.pop(mid, None)
            else:
                owned[mid] = new
                last8[mid] = (ts, r["member_state"], r["member_epoch"])
                last_active[mid] = ts
        elif t == 3:
            seq += 1
            prev_epoch = epoch
            if tomb:
                for b in open_bumps:
                    b["outcome"] = "group_deleted"
                open_bumps = []
                epoch = None
            else:
                e = r["group_epoch"]
                created = prev_epoch is None
                migrated = seg["classic_tombstone"]
                if (not created and e > prev_epoch) or (
                    created and (seen3 or complete or e <= 1 or migrated)
                ):
                    b = _bump(gid, r, prev_epoch, seg, members)
                    res.bumps.append(b)
                    bump_of_seq[seq] = b
                    open_bumps.append(b)
                epoch = e
            seen3 = True
            seg = _new_seg(len(members))
        # Stable after this row?
        if (
            epoch is not None
            and open_bumps
            and all(
                mid_ in last8 and last8[mid_][1] == "STABLE" and last8[mid_][2] == epoch
                for mid_ in members
            )
        ):
            for b in open_bumps:
                b["outcome"] = "converged" if epoch == b["group_epoch"] else "superseded"
                b["time_to_converge_ms"] = ts - b["ts_ms"]
            open_bumps = []
        if i == n - 1:
            for b in open_bumps:
                b["outcome"] = "in_progress"
    for s, moves in seg_moves.items():
        b = bump_of_seq.get(s)
        if b is None:
            continue
        b["partitions_moved"] = sum(1 for f, to in moves.values() if f and to)
        b["partitions_newly_assigned"] = sum(1 for f, to in moves.values() if not f and to)
        b["partitions_unassigned"] = sum(1 for f, to in moves.values() if f and not to)
        b["members_stopped"] = len({f for f, _to in moves.values() if f})
    for iv in res.intervals:
        if iv["group_id"] == gid:
            b = bump_of_seq.get(iv["_seq"])
            if b is not None:
                iv["group_epoch"] = b["group_epoch"]
                iv["group_type"] = b["group_type"]
                if iv["seconds"] > 0:
                    b["unowned_partition_seconds"] += iv["seconds"]
                    b["partitions_unowned"] += 1


def _new_seg(members: int) -> dict[str, Any]:
    """What the commands after a ConsumerGroupMetadata record change, up to the next one."""
    return {
        "members_before": members,
        "joined": [],
        "removed": [],
        "subscription_changed": [],
        "assignor_changed": [],
        "classic_tombstone": False,
        "partition_metadata": False,
        "regex": False,
    }


def _bump(
    gid: str,
    r: dict[str, Any],
    prev: int | None,
    seg: dict[str, Any],
    members: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    reasons = {reason for _m, reason in seg["removed"]}
    change = bool(
        seg["joined"] or seg["removed"] or seg["subscription_changed"] or seg["assignor_changed"]
    )
    flags = {
        "migrated_from_classic": seg["classic_tombstone"],
        "member_joined": bool(seg["joined"]) and not seg["classic_tombstone"],
        M.FENCED_SESSION: M.FENCED_SESSION in reasons,
        M.FENCED_REBALANCE: M.FENCED_REBALANCE in reasons,
        M.LEFT: M.LEFT in reasons,
        M.LEFT_OR_SESSION: M.LEFT_OR_SESSION in reasons,
        "subscription_changed": bool(seg["subscription_changed"]),
        "assignor_changed": bool(seg["assignor_changed"]),
        "regex_resolution_changed": not change and not seg["classic_tombstone"] and seg["regex"],
        "topic_metadata_changed": not change
        and not seg["classic_tombstone"]
        and not seg["regex"]
        and seg["partition_metadata"],
    }
    causes = [c for c in CAUSE_ORDER if flags[c]]
    return {
        "group_id": gid,
        "group_epoch": r["group_epoch"],
        "previous_epoch": prev,
        "offset": r["offset"],
        "ts_ms": r["ts_ms"],
        "cause": causes[0] if causes else M.UNKNOWN_CAUSE,
        "causes": causes,
        "members_joined": sorted(seg["joined"]),
        "members_removed": sorted(seg["removed"]),
        "group_type": "mixed" if any(m["classic"] for m in members.values()) else "consumer",
        "protocol": "consumer",
        "members_before": seg["members_before"],
        "members_after": len(members),
        "members_stopped": 0,
        "partitions_moved": 0,
        "partitions_newly_assigned": 0,
        "partitions_unassigned": 0,
        "unowned_partition_seconds": 0.0,
        "partitions_unowned": 0,
        "outcome": None,
        "time_to_converge_ms": None,
    }


def _commits(gid: str, rows: list[dict[str, Any]], res: Result, bucket_s: int, t0_us: int) -> None:
    last: dict[tuple[str, int], int] = {}
    size = bucket_s * 1_000_000
    per: dict[tuple[str, int], dict[str, Any]] = {}
    for r in rows:
        if r["record_type_id"] != 1 or r["tombstone"]:
            continue
        key = (r["topic"], r["partition"])
        b = (r["ts_ms"] * 1000 - t0_us) // size * size + t0_us
        agg = per.setdefault(
            (r["topic"], b), {"commits": 0, "offset_delta": 0, "base": 0, "partitions": set()}
        )
        agg["commits"] += 1
        agg["partitions"].add(r["partition"])
        if key in last:
            agg["offset_delta"] += r["committed_offset"] - last[key]
        else:
            agg["base"] += r["committed_offset"]
        last[key] = r["committed_offset"]
    totals: dict[str, int] = defaultdict(int)
    for topic, b in sorted(per):
        agg = per[(topic, b)]
        totals[topic] += agg["base"] + agg["offset_delta"]
        res.commits[(gid, topic, b)] = {
            "commits": agg["commits"],
            "partitions": len(agg["partitions"]),
            "offset_delta": agg["offset_delta"],
            "committed_total": totals[topic],
        }
