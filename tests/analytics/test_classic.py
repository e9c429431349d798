"""Classic groups in the report, exact numbers for known scenarios through the real runtime on
virtual time (the workload generator's Driver and client models), checked against the
plain-Python oracle: an eager group's rolling restart, and an upgrade with its mixed phase."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from coordinator.analytics.clients import ClassicConsumer, Consumer
from coordinator.analytics.export import export_journal
from coordinator.analytics.workload import START_MS, Driver

from .test_metrics import _compare, _ms, restart_each

pytestmark = [pytest.mark.spark, pytest.mark.timeout(1200)]


def _classic_members(d: Driver, **kw: Any) -> list[ClassicConsumer]:
    """Three eager (range) classic consumers of a 6-partition topic, joining 1 s apart."""
    cs = [
        ClassicConsumer(d, "g", ("t",), client_id=f"c{i}", commit_interval_ms=10**9, **kw)
        for i in range(3)
    ]
    for i, c in enumerate(cs):
        c.start(START_MS + 1_000 * i)
    return cs


def _rolling_restart_store(path: Path) -> None:
    """The eager group settles; then each member in turn leaves (LeaveGroup) and comes back
    8 s later under a new member id, 20 s apart. Members heartbeat every 3 s and send SyncGroup
    200 ms after their JoinGroup answer; the initial rebalance delay is Kafka's 3 s."""

    async def run() -> None:
        d = Driver(str(path), seed=3, shards=1)
        await d.start()
        await d.create_topic("t", 6)
        cs = _classic_members(d, sync_delay_ms=200)
        await d.run(START_MS + 40_000)
        restart_each(d, cs, lambda i, c: c.start(d.now + 8_000))
        await d.run(START_MS + 120_000)
        await d.close()

    asyncio.run(run())


def test_eager_rolling_restart_exact_numbers(spark: Any, tmp_path: Path) -> None:
    _rolling_restart_store(tmp_path / "s")
    export_journal(tmp_path / "s", tmp_path / "j.parquet")
    got, want = _compare(spark, tmp_path / "j.parquet")
    rows = sorted(got["rebalances"], key=lambda r: r["offset"])
    assert {(r["group_type"], r["protocol"]) for r in rows} == {("classic", "eager")}
    summary = [
        (
            r["group_epoch"],
            _ms(r["timestamp"]) - START_MS,
            r["cause"][len("member_") :],
            len(r["members_joined"]),
            len(r["members_removed"]),
            r["members_before"],
            r["members_after"],
            r["members_stopped"],
            r["partitions_moved"],
            r["partitions_newly_assigned"],
            r["join_ms"],
            r["sync_ms"],
            r["time_to_converge_ms"],
            r["unowned_partition_ms"],
        )
        for r in rows
    ]
    # generation, start, cause, joined, removed, members before, after, stopped, partitions
    # moved, newly assigned, join phase, sync phase, time to converge (ms), unowned (p-ms)
    assert summary == [
        # The three join 1 s apart: the initial delay (3 s) runs twice, as members keep
        # arriving (KIP-134); the leader syncs 200 ms later. Nothing was owned: nothing unowned.
        (1, 0, "joined", 3, 0, 0, 3, 0, 0, 6, 6_000, 200, 6_200, 0),
        # c0 leaves at 40 s; the others hear it at their next heartbeat (42 s) and rejoin. Eager:
        # both give up everything, so all 6 partitions are unowned until the generation is
        # Stable (2.4 s): 14.4 partition-seconds. Its 2 partitions go to the others (newly
        # assigned), and range moves one partition between them.
        (2, 40_000, "left", 0, 1, 3, 2, 2, 1, 2, 2_200, 200, 2_400, 14_400),
        # c0 is back at 48 s under a new member id (a join: range moves 3 partitions to it).
        (3, 48_000, "joined", 1, 0, 2, 3, 2, 3, 0, 400, 200, 600, 3_600),
        (4, 60_000, "left", 0, 1, 3, 2, 2, 0, 2, 600, 200, 800, 4_800),
        (5, 68_000, "joined", 1, 0, 2, 3, 2, 2, 0, 1_800, 200, 2_000, 12_000),
        (6, 80_000, "left", 0, 1, 3, 2, 2, 1, 2, 2_000, 200, 2_200, 13_200),
        (7, 88_000, "joined", 1, 0, 2, 3, 2, 3, 0, 200, 200, 400, 2_400),
    ]
    # Eager: every rebalance stops every member, and each of the 6 partitions is unowned for
    # the whole rebalance (the oracle agrees on every field, above).
    for r in rows[1:]:
        assert r["unowned_partition_ms"] == 6 * r["time_to_converge_ms"]
        assert r["partitions_unowned"] == 6
    assert sum(r["unowned_partition_seconds"] for r in rows) == pytest.approx(50.4)
    assert [b["group_epoch"] for b in want.bumps] == list(range(1, 8))
    removals = sorted((r["timestamp"], r["reason"]) for r in got["member_removals"])
    assert [(_ms(t) - START_MS, why) for t, why in removals] == [
        (40_000, "member_left"),
        (60_000, "member_left"),
        (80_000, "member_left"),
    ]


def _upgrade_store(path: Path) -> None:
    """The eager classic group settles; at 40 s a KIP-848 consumer joins it (an upgrade: the
    three classic members become members of a consumer group, which is mixed); from 60 s the
    classic members restart, 20 s apart, as KIP-848 consumers 5 s after they leave, and the
    mixed phase ends when the last one has left. Consumers acknowledge a new assignment 100 ms
    after they get it and heartbeat every 5 s."""

    async def run() -> None:
        d = Driver(str(path), seed=5, shards=1)
        await d.start()
        await d.create_topic("t", 6)
        cs = _classic_members(d)
        await d.run(START_MS + 40_000)

        def consumer(i: int) -> Consumer:
            return Consumer(
                d, "g", ("t",), client_id=f"k{i}", ack_delay_ms=100, commit_interval_ms=10**9
            )

        consumer(0).start(START_MS + 40_000)
        # A classic member's restart is a KIP-848 consumer's start, 5 s after it left.
        restart_each(d, cs, lambda i, c: consumer(i + 1).start(d.now + 5_000), from_s=60)
        await d.run(START_MS + 150_000)
        await d.close()

    asyncio.run(run())


def test_upgrade_and_its_mixed_phase_exact_numbers(spark: Any, tmp_path: Path) -> None:
    _upgrade_store(tmp_path / "s")
    export_journal(tmp_path / "s", tmp_path / "j.parquet")
    got, want = _compare(spark, tmp_path / "j.parquet")
    rows = sorted(got["rebalances"], key=lambda r: (r["timestamp"], r["offset"]))
    summary = [
        (
            r["group_type"],
            r["group_epoch"],
            _ms(r["timestamp"]) - START_MS,
            r["cause"],
            r["members_before"],
            r["members_after"],
            r["unowned_partition_ms"],
            r["time_to_converge_ms"],
        )
        for r in rows
    ]
    assert summary == [
        ("classic", 1, 0, "member_joined", 0, 3, 0, 6_000),
        # The upgrade: the consumer group is created at epoch = generation 1 with the three
        # classic members owning what they had (nothing moves); the consumer's join bumps it.
        ("mixed", 1, 40_000, "migrated_from_classic", 3, 3, 0, 0),
        ("mixed", 2, 40_000, "member_joined", 3, 4, 3_000, 5_000),
        ("mixed", 3, 60_000, "member_left", 4, 3, 3_100, 3_000),
        ("mixed", 4, 65_000, "member_joined", 3, 4, 4_000, 5_000),
        ("mixed", 5, 80_000, "member_left", 4, 3, 1_100, 1_000),
        ("mixed", 6, 85_000, "member_joined", 3, 4, 3_000, 5_000),
        # The last classic member leaves: the group is a plain consumer group again.
        ("consumer", 7, 100_000, "member_left", 4, 3, 100, 200),
        ("consumer", 8, 105_000, "member_joined", 3, 4, 4_700, 5_000),
    ]
    (m,) = got["migrations"]
    assert (
        m["direction"],
        _ms(m["timestamp"]) - START_MS,
        m["generation"],
        m["members_converted"],
        _ms(m["mixed_started_at"]) - START_MS,
        _ms(m["mixed_ended_at"]) - START_MS,
        m["mixed_ms"],
        m["mixed_outcome"],
        m["rebalances"],
        m["partitions_moved"],
        m["unowned_partition_ms"],
    ) == ("upgrade", 40_000, 1, 3, 40_000, 100_000, 60_000, "completed", 7, 3, 14_300)
    # The cost is the mixed phase's rebalances, the one that ended it included.
    assert m["unowned_partition_ms"] == sum(r[6] for r in summary[1:8])
    assert len(want.migrations) == 1
