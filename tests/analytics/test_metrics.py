"""The Spark jobs against an independent plain-Python calculation (tests/analytics/oracle.py)
on a generated workload, and exact numbers for a scripted scenario."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.analytics import metrics as M
from coordinator.analytics.export import export_journal
from coordinator.analytics.report import read_info

from . import oracle

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]


def _ms(t: Any) -> int:
    return int(t.timestamp() * 1000 + 0.5)


def _params(path: Path) -> tuple[M.Params, list[dict[str, Any]]]:
    info = read_info(path)
    rows = oracle.load(str(path))
    first = min(r["ts_ms"] for r in rows)
    last = max(r["ts_ms"] for r in rows)
    b = M.bucket_seconds(last - first)
    size = b * 1_000_000
    return (
        M.Params(
            session_timeout_ms=info.session_timeout_ms,
            complete=info.complete,
            bucket_s=b,
            t0_us=first * 1000 // size * size,
        ),
        rows,
    )


def _spark_tables(spark: Any, path: Path, params: M.Params) -> dict[str, list[dict[str, Any]]]:
    frames = M.compute(spark, spark.read.parquet(str(path)), params)
    return {
        name: [r.asDict(recursive=True) for r in frames[name].collect()]
        for name in (
            "rebalances",
            "member_removals",
            "unowned_intervals",
            "commit_rate",
            "static_restarts",
            "migrations",
        )
    }


def _oracle(rows: list[dict[str, Any]], params: M.Params) -> oracle.Result:
    return oracle.compute(
        rows,
        session_timeout_ms=params.session_timeout_ms,
        complete=params.complete,
        bucket_s=params.bucket_s,
        t0_us=params.t0_us,
    )


def _compare(spark: Any, path: Path) -> tuple[dict[str, list[dict[str, Any]]], oracle.Result]:
    params, rows = _params(path)
    got = _spark_tables(spark, path, params)
    want = _oracle(rows, params)
    # Rebalances: every field of every bump.
    spark_bumps = {
        (r["group_id"], r["offset"]): {
            "group_type": r["group_type"],
            "protocol": r["protocol"],
            "timestamp": _ms(r["timestamp"]),
            "members_before": r["members_before"],
            "members_stopped": r["members_stopped"],
            "join_ms": r["join_ms"],
            "sync_ms": r["sync_ms"],
            "group_epoch": r["group_epoch"],
            "previous_epoch": r["previous_epoch"],
            "cause": r["cause"],
            "causes": r["causes"],
            "members_joined": r["members_joined"],
            "members_removed": [(m["member_id"], m["reason"]) for m in r["members_removed"]],
            "members_after": r["members_after"],
            "partitions_moved": r["partitions_moved"],
            "partitions_newly_assigned": r["partitions_newly_assigned"],
            "partitions_unassigned": r["partitions_unassigned"],
            "unowned_partition_seconds": round(r["unowned_partition_seconds"], 3),
            "partitions_unowned": r["partitions_unowned"],
            "outcome": r["outcome"],
            "time_to_converge_ms": r["time_to_converge_ms"],
        }
        for r in got["rebalances"]
    }
    oracle_bumps = {
        (b["group_id"], b["offset"]): {
            "group_type": b["group_type"],
            "protocol": b["protocol"],
            "timestamp": b["ts_ms"],
            "members_before": b["members_before"],
            "members_stopped": b["members_stopped"],
            "join_ms": b.get("join_ms"),
            "sync_ms": b.get("sync_ms"),
            "group_epoch": b["group_epoch"],
            "previous_epoch": b["previous_epoch"],
            "cause": b["cause"],
            "causes": b["causes"],
            "members_joined": b["members_joined"],
            "members_removed": [tuple(x) for x in b["members_removed"]],
            "members_after": b["members_after"],
            "partitions_moved": b["partitions_moved"],
            "partitions_newly_assigned": b["partitions_newly_assigned"],
            "partitions_unassigned": b["partitions_unassigned"],
            "unowned_partition_seconds": round(b["unowned_partition_seconds"], 3),
            "partitions_unowned": b["partitions_unowned"],
            "outcome": b["outcome"],
            "time_to_converge_ms": b["time_to_converge_ms"]
            if b["outcome"] in ("converged", "superseded")
            else None,
        }
        for b in want.bumps
    }
    assert sorted(spark_bumps) == sorted(oracle_bumps)
    for key in sorted(oracle_bumps):
        assert spark_bumps[key] == oracle_bumps[key], key
    removal = ("group_id", "group_type", "member_id", "offset", "reason", "session_timeout_ms")
    assert sorted(tuple(r[k] for k in removal) for r in got["member_removals"]) == sorted(
        tuple(r[k] for k in removal) for r in want.removals
    )
    assert sorted(
        (
            r["group_id"],
            r["group_type"],
            r["topic"],
            r["partition"],
            round(r["seconds"], 3),
            r["released_by"],
            r["owned_again_by"],
            r["group_epoch"],
        )
        for r in got["unowned_intervals"]
    ) == sorted(
        (
            r["group_id"],
            r["group_type"],
            r["topic"],
            r["partition"],
            round(r["seconds"], 3),
            r["released_by"],
            r["owned_again_by"],
            r["group_epoch"],
        )
        for r in want.intervals
    )
    assert _commits(got["commit_rate"]) == want.commits
    assert sorted(
        (r["group_id"], r["group_type"], r["old_member_id"], r["new_member_id"], r["downtime_ms"])
        for r in got["static_restarts"]
    ) == sorted(
        (r["group_id"], r["group_type"], r["old_member_id"], r["new_member_id"], r["downtime_ms"])
        for r in want.restarts
    )

    def ms_or_none(t: Any) -> int | None:
        return None if t is None else _ms(t)

    assert sorted(
        (
            r["group_id"],
            r["direction"],
            r["offset"],
            _ms(r["timestamp"]),
            r["generation"],
            r["members_converted"],
            ms_or_none(r["mixed_started_at"]),
            ms_or_none(r["mixed_ended_at"]),
            r["mixed_outcome"],
            r["rebalances"],
            r["partitions_moved"],
            round(r["unowned_partition_seconds"], 3),
        )
        for r in got["migrations"]
    ) == sorted(
        (
            m["group_id"],
            m["direction"],
            m["offset"],
            m["ts_ms"],
            m["generation"],
            m["members_converted"],
            m["mixed_started_ms"],
            m["mixed_ended_ms"],
            m["mixed_outcome"],
            m["rebalances"],
            m["partitions_moved"],
            m["unowned_partition_seconds"],
        )
        for m in want.migrations
    )
    return got, want


def _commits(rows: list[dict[str, Any]]) -> dict[tuple[str, str, int], dict[str, int]]:
    return {
        (r["group_id"], r["topic"], int(r["bucket_start"].timestamp() * 1_000_000)): {
            "commits": r["commits"],
            "partitions": r["partitions"],
            "offset_delta": r["offset_delta"],
            "committed_total": r["committed_total"],
        }
        for r in rows
    }


def test_spark_equals_plain_python_on_a_generated_workload(
    spark: Any, workload: dict[str, Any]
) -> None:
    got, want = _compare(spark, workload["parquet"])
    causes = {b["cause"] for b in want.bumps}
    reasons = {r["reason"] for r in want.removals}
    # The workload exercises what the metrics distinguish (so the comparison means something):
    # consumer, mixed and classic groups, eager and cooperative, upgrades and a downgrade.
    assert {"member_joined", "migrated_from_classic", "member_rejoined"} <= causes, causes
    assert "downgraded_from_consumer_group" in causes, causes
    assert M.FENCED_REBALANCE in reasons and M.REPLACED in reasons, reasons
    classic = [b for b in want.bumps if b["group_type"] == "classic"]
    assert {b["group_type"] for b in want.bumps} == {"consumer", "mixed", "classic"}
    assert {b["protocol"] for b in classic} == {"eager", "cooperative"}
    assert {r["reason"] for r in want.removals if r["group_type"] == "classic"} >= {
        M.LEFT,
        M.FENCED_SESSION,
        M.FENCED_REBALANCE,
    }
    assert all(b["time_to_converge_ms"] is not None for b in classic)
    assert sum(b["unowned_partition_seconds"] for b in classic) > 0
    assert {m["direction"] for m in want.migrations} == {"upgrade", "downgrade"}
    assert len(want.bumps) > 50 and len(want.intervals) > 50 and len(want.commits) > 100
    assert any(b["partitions_moved"] > 0 for b in want.bumps)


# ---------------------------------------------------------------------------- a known scenario


def _rolling_restart_store(path: Path) -> None:
    """3 dynamic members of a group on one 6-partition topic join 10 s apart and settle; then
    each in turn leaves (epoch -1) and rejoins 8 s later under a new member id, 20 s apart. Clients
    acknowledge a new assignment 100 ms after receiving it and heartbeat every 5 s."""
    from coordinator.analytics.workload import START_MS, Consumer, Driver

    async def run() -> None:
        d = Driver(str(path), seed=3, shards=1)
        await d.start()
        await d.create_topic("t", 6)
        cs = [
            Consumer(d, "g", ("t",), client_id=f"c{i}", ack_delay_ms=100, commit_interval_ms=10**9)
            for i in range(3)
        ]
        for i, c in enumerate(cs):
            c.start(START_MS + 10_000 * i)
        await d.run(START_MS + 40_000)
        restart_each(d, cs, lambda i, c: c.start(d.now + 8_000))
        await d.run(START_MS + 120_000)
        await d.close()

    asyncio.run(run())


def restart_each(
    d: Any, members: list[Any], back: Callable[[int, Any], None], *, from_s: int = 40
) -> None:
    """From ``from_s`` seconds of virtual time, every 20 s, the next member leaves;
    ``back(i, member)`` then brings it (or its replacement) back."""
    from coordinator.analytics.workload import START_MS

    for i, c in enumerate(members):

        async def restart(i: int = i, c: Any = c) -> None:
            await c.leave()
            back(i, c)

        d.at(START_MS + from_s * 1000 + 20_000 * i, restart)


def test_three_member_rolling_restart_exact_numbers(spark: Any, tmp_path: Path) -> None:
    _rolling_restart_store(tmp_path / "s")
    export_journal(tmp_path / "s", tmp_path / "j.parquet")
    got, want = _compare(spark, tmp_path / "j.parquet")
    bumps = sorted(got["rebalances"], key=lambda r: r["offset"])
    summary = [
        (
            b["group_epoch"],
            b["cause"],
            len(b["members_joined"]),
            len(b["members_removed"]),
            b["members_after"],
            b["partitions_moved"],
            b["partitions_newly_assigned"],
            b["partitions_unowned"],
            b["outcome"],
        )
        for b in bumps
    ]
    assert summary == [
        # Three joins: 6, then 2 move to the second member, then 2 more to the third.
        (1, "member_joined", 1, 0, 1, 0, 6, 0, "converged"),
        (2, "member_joined", 1, 0, 2, 3, 0, 3, "converged"),
        (3, "member_joined", 1, 0, 3, 2, 0, 2, "converged"),
        # Each restart: a leave (its 2 partitions go to the others, nothing moves between live
        # members), then the join 8 s later (2 partitions move to the new member).
        (4, "member_left", 0, 1, 2, 0, 2, 2, "converged"),
        (5, "member_joined", 1, 0, 3, 2, 0, 2, "converged"),
        (6, "member_left", 0, 1, 2, 0, 2, 2, "converged"),
        (7, "member_joined", 1, 0, 3, 2, 0, 2, "converged"),
        (8, "member_left", 0, 1, 2, 0, 2, 2, "converged"),
        (9, "member_joined", 1, 0, 3, 2, 0, 2, "converged"),
    ]
    # Unowned partition-seconds: a leaver's partitions wait for the next heartbeat of the
    # others (at most one heartbeat interval, 5 s); moved partitions wait for the new owner's
    # acknowledgement round trip after the old owner released them.
    total = sum(b["unowned_partition_seconds"] for b in bumps)
    assert total == pytest.approx(sum(b["unowned_partition_seconds"] for b in want.bumps))
    assert 0 < total < 9 * 6 * 5


def test_an_export_without_the_commit_links_gives_the_same_commit_rate(
    spark: Any, workload: dict[str, Any], tmp_path: Path
) -> None:
    """An export written before ``previous_committed_offset`` and ``previous_commit_at`` (they
    read as null) takes the other path, each partition's buckets in order: the same commit
    rate as the plain-Python calculation."""
    import pyarrow.parquet as pq

    from coordinator.analytics.common import ms

    old = tmp_path / "old.parquet"
    links = ["previous_committed_offset", "previous_commit_at"]
    table = pq.read_table(workload["parquet"]).drop_columns(links)
    with pq.ParquetWriter(old, table.schema) as w:
        w.write_table(table)
        w.add_key_value_metadata(pq.read_metadata(workload["parquet"]).metadata)
    params, rows = _params(old)
    journals = {
        p: M.conform(spark.read.parquet(str(p))).withColumn("ts_ms", ms())
        for p in (workload["parquet"], old)
    }
    assert M.has_column(journals[workload["parquet"]], links[0])
    assert not M.has_column(journals[old], links[0])
    types = spark.createDataFrame([], "group_id string, group_type string, protocol string")
    rate = M._typed(M._commit_rate(journals[old], params), types).drop("protocol")
    got = _commits([r.asDict() for r in rate.collect()])
    want = _oracle(rows, params).commits
    assert got == want
    # Buckets where several partitions advanced, and partitions committed across buckets.
    assert max(c["partitions"] for c in want.values()) > 1
    assert sum(c["offset_delta"] > 0 for c in want.values()) > 100


V1_EXPORT = Path(__file__).parents[1] / "golden" / "exports" / "v1_workload.parquet"
"""An export of schema version 1 (one log, CRC-32 shards; none of the columns added since),
written by the build before coordinator partitions (d4b9fc3^) from its own workload generator
(seed 7, 6 groups, half of them classic, 900 s, 12 events per group and hour): never to be
regenerated, it pins what older exports hold."""


def test_a_version_1_export_gives_the_oracles_tables(spark: Any) -> None:
    """Every table of a version 1 export as the plain-Python calculation makes it (the
    columns added since read as null: classic generations without their phases, the commit
    rate from each partition's buckets in order)."""
    assert read_info(V1_EXPORT).schema_version == 1
    got, want = _compare(spark, V1_EXPORT)
    assert {b["group_type"] for b in want.bumps} == {"consumer", "mixed", "classic"}
    assert len(want.bumps) == len(got["rebalances"]) == 44
    assert len(want.commits) == len(got["commit_rate"]) == 447
    assert {m["direction"] for m in want.migrations} == {"upgrade"}
    classic = [r for r in got["rebalances"] if r["group_type"] == "classic"]
    assert classic and all(r["join_ms"] is None for r in classic)


# ------------------------------------------------ the session timeout a group's configs set

SESSION = M.SESSION_TIMEOUT_CONFIG
HEARTBEAT = "consumer.heartbeat.interval.ms"
Script = Callable[[Callable[..., None], Callable[..., None]], None]


def _config_store(path: Path, legacy: dict[str, str], script: Script) -> dict[str, str]:
    """A store written by the runtime (minimum session timeout 10 s, default 45 s) whose groups
    have dynamic session timeouts: ``legacy`` (group -> session timeout) written into the
    groups' partition 60 s before the start, as an earlier version kept them (GroupConfig
    records; the runtime moves them into the cluster log when it loads the store); then
    ``script(consumer, alter)`` schedules, at seconds after the start,
    ``consumer(name, group, at, crash=t)`` (joins alone at ``at``; crashes at ``t``, so the
    coordinator removes it one session timeout after its last heartbeat; ``leave=t``: leaves
    at ``t``) and ``alter(group, at, {name: value or None})`` (through the runtime: the
    cluster log). Returns the consumers' member ids."""
    from coordinator.analytics.workload import START_MS, Consumer, Driver
    from coordinator.core import codec
    from coordinator.core import records as r
    from coordinator.runtime.store import SqliteRecordStore, StoredRecord

    with SqliteRecordStore(path, sync="off", partitions=1) as store:
        for group, value in legacy.items():
            key, data = codec.encode(r.group_config_record(group, SESSION, value))
            store.append([StoredRecord(key, data, group)], START_MS - 60_000)
    members: dict[str, Any] = {}

    async def run() -> None:
        settings = {"group.consumer.min.session.timeout.ms": "10000"}
        d = Driver(str(path), seed=4, shards=1, settings=settings)
        await d.start()
        await d.create_topic("t", 2)

        def consumer(name: str, group: str, at: int, *, crash: int = 0, leave: int = 0) -> None:
            c = Consumer(d, group, ("t",), client_id=name, commit_interval_ms=10**9)
            members[name] = c
            c.start(START_MS + at * 1000)

            async def end() -> None:
                if crash:
                    c.crash()
                else:
                    await c.leave()

            d.at(START_MS + (crash or leave) * 1000, end)

        def alter(group: str, at: int, changes: dict[str, str | None]) -> None:
            async def go() -> None:
                await d.runtime.alter_group_configs(group, changes)

            d.at(START_MS + at * 1000, go)

        script(consumer, alter)
        await d.run(START_MS + 200_000)
        await d.close()

    asyncio.run(run())
    return {name: c.member_id for name, c in members.items()}


def _configs_and_removals(
    spark: Any, path: Path
) -> tuple[list[tuple[Any, ...]], list[tuple[float, dict[str, Any]]], dict[str, int]]:
    """The export's config records (type, shard, group, name, value, seconds after the start;
    in the export's order), the member removals the Spark jobs find (equal to the oracle's) by
    time (seconds after the start, the row without its timestamp), and each removed member's
    tombstone offset."""
    from coordinator.analytics.workload import START_MS

    export_journal(path / "s", path / "j.parquet")
    rows = oracle.load(str(path / "j.parquet"))
    configs = [
        (r["record_type"], r["shard"], r["group_id"], r["config_name"], r["config_value"])
        + ((r["ts_ms"] - START_MS) / 1000,)
        for r in rows
        if r["record_type_id"] in (1016, 1104)
    ]
    got, _ = _compare(spark, path / "j.parquet")
    removals = sorted(
        ((_ms(r.pop("timestamp")) - START_MS) / 1000, r) for r in got["member_removals"]
    )
    offsets = {
        r["member_id"]: r["offset"] for r in rows if r["record_type_id"] == 5 and r["tombstone"]
    }
    return configs, removals, offsets


def _removal_rows(
    ids: dict[str, str], offsets: dict[str, int], expected: list[tuple[Any, ...]]
) -> list[tuple[float, dict[str, Any]]]:
    """``expected`` (member, group, removed at, reason, session timeout) as whole rows."""
    return [
        (
            at,
            {
                "group_id": group,
                "group_type": "consumer",
                "member_id": ids[name],
                "instance_id": None,
                "offset": offsets[ids[name]],
                "reason": reason,
                "classic_member": False,
                "replaced_by": None,
                "session_timeout_ms": session,
            },
        )
        for name, group, at, reason, session in expected
    ]


def test_removals_are_judged_with_the_session_timeout_of_the_group_configs(
    spark: Any, tmp_path: Path
) -> None:
    """A member's removal is judged with the group's dynamic session timeout in force when it
    was removed, from the cluster log's Config records (by time) and an earlier version's
    GroupConfig records of the group's partition: a crashed member removed one (short)
    session timeout after its last heartbeat is no "member_left" as the server's default would
    make it. Group a's override (10 s) is only in the cluster log; b's (20 s) was in its
    partition and moved at the load, then altered to 10 s, then reset to the default."""

    def script(consumer: Callable[..., None], alter: Callable[..., None]) -> None:
        alter("a", 0, {SESSION: "10000"})
        consumer("a1", "a", 1, crash=7)
        consumer("b1", "b", 1, crash=7)
        alter("b", 60, {SESSION: "10000"})
        consumer("b2", "b", 70, crash=76)
        alter("b", 120, {SESSION: None})
        consumer("b3", "b", 130, leave=145)

    ids = _config_store(tmp_path / "s", {"b": "20000"}, script)
    configs, removals, offsets = _configs_and_removals(spark, tmp_path)
    # The journal (the cluster log, then the partition): b's GroupConfig moved to the cluster
    # log at the load (its Config and the partition's tombstone in one batch), the alterations.
    assert configs == [
        ("Config", None, "b", SESSION, "20000", 0.0),
        ("Config", None, "a", SESSION, "10000", 0.0),
        ("Config", None, "b", SESSION, "10000", 60.0),
        ("Config", None, "b", SESSION, None, 120.0),
        ("GroupConfig", 0, "b", SESSION, "20000", -60.0),
        ("GroupConfig", 0, "b", SESSION, None, 0.0),
    ]
    # Removed one session timeout after the last heartbeat (every 5 s from the
    # acknowledgement 50 ms after the join); b3 left.
    assert removals == _removal_rows(
        ids,
        offsets,
        [
            ("a1", "a", 16.05, M.LEFT_OR_SESSION, 10_000),
            ("b1", "b", 26.05, M.LEFT_OR_SESSION, 20_000),
            ("b2", "b", 85.05, M.LEFT_OR_SESSION, 10_000),
            ("b3", "b", 145.0, M.LEFT, 45_000),
        ],
    )


def test_a_group_named_by_the_cluster_log_ignores_its_partitions_session_timeout(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Until an earlier version's GroupConfig records move to the cluster log (here the move
    fails every attempt), they count for a group of which the cluster log names no config; once
    the cluster log names one (another config), the coordinator reads the group's configs from
    the cluster log only, and so does the analysis: c's partition-held 20 s counts for c1, the
    default 45 s for c2 and c3 after c's heartbeat interval is set in the cluster log."""
    from coordinator.runtime import partitions

    monkeypatch.setattr(partitions, "MIGRATION_ATTEMPTS", 0)

    def script(consumer: Callable[..., None], alter: Callable[..., None]) -> None:
        consumer("c1", "c", 1, crash=7)
        alter("c", 60, {HEARTBEAT: "6000"})
        consumer("c2", "c", 70, crash=76)
        consumer("c3", "c", 130, leave=155)

    ids = _config_store(tmp_path / "s", {"c": "20000"}, script)
    configs, removals, offsets = _configs_and_removals(spark, tmp_path)
    assert configs == [
        ("Config", None, "c", HEARTBEAT, "6000", 60.0),
        ("GroupConfig", 0, "c", SESSION, "20000", -60.0),
    ]
    # c2 heartbeats every 6 s from 70.05 and crashed before the second: removed 45 s after
    # 70.05. c3 left 25 s after its last record: under 45 s, not under the partition's 20 s.
    assert removals == _removal_rows(
        ids,
        offsets,
        [
            ("c1", "c", 26.05, M.LEFT_OR_SESSION, 20_000),
            ("c2", "c", 115.05, M.LEFT_OR_SESSION, 45_000),
            ("c3", "c", 155.0, M.LEFT, 45_000),
        ],
    )
