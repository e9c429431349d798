"""What authorization costs: steady heartbeats/s and join latency with ACLs off (no ACL, the
default: the authorizer allows without looking) and on (an authenticated principal checked
against a realistic ACL set: its own prefixed grants among 2,000 ACLs of other principals; every
decision after the first answered from the per-principal cache). Target (issue 27): the cost of
security on a heartbeat at most 15%; the row "ACLs on" is judged here. The full TLS + SASL row
is the transport's (bench/loadgen, docs/benchmarks.md "Security: transport").

Heartbeats run in-process through the coordinator's own gRPC method table — the path every call
takes in the coordinator process: proto request -> principal -> service layer (authorization)
-> runtime -> core -> proto response. gRPC's own per-call work is left out, so the relative
cost is an upper bound on what a client sees. Rounds of the variants are interleaved; the
median of the rounds is reported (the machine is shared: its load average is recorded).

    .venv/bin/python bench/security.py [--members 200] [--rounds 5] [--seconds 2] [--joins 300]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    _here = str(Path(__file__).resolve().parent)
    sys.path[:] = [p for p in sys.path if p != _here]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from assignors.uniform import UniformAssignor
from bench._report import machine, table, write_section
from coordinator.core.config import parse_config
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.security.principal import user
from coordinator.server.api import AclSpec, Caller
from coordinator.server.forwarding import ForwardedContext
from coordinator.server.grpc_server import method_table
from coordinator.server.service import CoordinatorService
from coordinator.server.services import ConsumerGroupService, service_descriptors
from kip848.v1 import common_pb2
from kip848.v1 import consumer_group_pb2 as cg

HB = "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"
VARIANTS = ("ACLs off (default)", "ACLs on")
TARGET = 15.0
"""Percent: the cost of security on a steady heartbeat (issue 27)."""
OTHER_ACLS = 2_000
ALICE = user("alice")


def _acls() -> list[AclSpec]:
    """Alice's grants (prefixed: group g*, topic t*) and 2,000 ACLs of other principals on
    other resources (the index the authorizer searches)."""

    def spec(rtype: int, name: str, op: int, principal: str, pattern: int) -> AclSpec:
        return AclSpec(
            resource_type=rtype,
            resource_name=name,
            pattern_type=pattern,
            principal=principal,
            host="*",
            operation=op,
            permission_type=3,
        )

    out = [spec(3, "g", 3, str(ALICE), 4), spec(2, "t", 8, str(ALICE), 4)]
    out += [spec(3, f"team{i}-", 3, f"User:svc{i}", 4) for i in range(OTHER_ACLS // 2)]
    out += [spec(2, f"topic{i}", 4, f"User:svc{i}", 3) for i in range(OTHER_ACLS // 2)]
    return out


async def _setup(variant: str) -> tuple[CoordinatorRuntime, Any, ForwardedContext]:
    rt = CoordinatorRuntime(
        config=parse_config({"group.coordinator.shards": "4"}),
        store=MemoryRecordStore(partitions=4),
        clock=ManualClock(1_000_000),
        assignors=[UniformAssignor()],
    )
    await rt.start()
    service = CoordinatorService(rt)
    admin = Caller(principal=user("admin"))
    from coordinator.core.topics import NewTopic
    from coordinator.server.api import TopicChanges

    await service.create_topics(
        TopicChanges(entries=[NewTopic(name="t", num_partitions=64)]), admin
    )
    if variant == "ACLs on":
        made = await service.create_acls(_acls(), admin)
        assert all(c.error_code == 0 for c in made.value or [])
        assert not service.authorizer.open
    servicer = ConsumerGroupService(service)
    servicer.principal_of = lambda _context: ALICE
    descriptors = {d.name: d for d in service_descriptors()}
    table_ = method_table([(descriptors["ConsumerGroupService"], servicer)])
    context = ForwardedContext((("client-id", "bench"),), "ipv4:127.0.0.1:1", None)
    return rt, table_[HB][1], context


async def _join(hb: Any, context: Any, group: str, member: str) -> Any:
    return await hb(
        cg.ConsumerGroupHeartbeatRequest(
            group_id=group,
            member_id=member,
            member_epoch=0,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=common_pb2.TopicNames(names=["t"]),
            topic_partitions=common_pb2.TopicPartitionsList(),
        ),
        context,
    )


async def _heartbeats(variant: str, members: int, seconds: float) -> float:
    rt, hb, context = await _setup(variant)
    try:
        steady = []
        for i in range(members):  # one member per group: every heartbeat is a steady one
            join = await _join(hb, context, f"g{i}", f"m{i}")
            owned = common_pb2.TopicPartitionsList(
                items=[
                    common_pb2.TopicPartitions(topic_id=tp.topic_id, partitions=tp.partitions)
                    for tp in join.assignment.assigned_topic_partitions
                ]
            )
            request = cg.ConsumerGroupHeartbeatRequest(
                group_id=f"g{i}", member_id=f"m{i}", member_epoch=join.member_epoch
            )
            await hb(
                cg.ConsumerGroupHeartbeatRequest(
                    group_id=f"g{i}",
                    member_id=f"m{i}",
                    member_epoch=join.member_epoch,
                    topic_partitions=owned,
                ),
                context,
            )
            steady.append(request)
        await rt.flush()
        done = 0
        start = time.process_time()  # CPU of this process: other work on the machine is not ours
        deadline = time.perf_counter() + seconds
        while time.perf_counter() < deadline:
            for request in steady:
                resp = await hb(request, context)
                if resp.error_code:
                    raise RuntimeError(f"heartbeat failed: {resp}")
            done += len(steady)
        return done / (time.process_time() - start)
    finally:
        await rt.close()


async def _joins(variant: str, joins: int) -> float:
    """CPU µs per join of a member to a group that has one member already (CPU time of the
    process: the wall time of one join on a shared machine is mostly other processes')."""
    rt, hb, context = await _setup(variant)
    try:
        for i in range(joins):
            await _join(hb, context, f"g{i}", "first")
        await rt.flush()
        start = time.process_time()
        for i in range(joins):
            resp = await _join(hb, context, f"g{i}", "second")
            if resp.error_code:
                raise RuntimeError(f"join failed: {resp}")
        return (time.process_time() - start) / joins * 1e6
    finally:
        await rt.close()


async def _main(args: argparse.Namespace) -> tuple[dict[str, list[float]], dict[str, list[float]]]:
    rates: dict[str, list[float]] = {v: [] for v in VARIANTS}
    joins: dict[str, list[float]] = {v: [] for v in VARIANTS}
    for _ in range(args.rounds):
        for variant in VARIANTS:
            rates[variant].append(await _heartbeats(variant, args.members, args.seconds))
            joins[variant].append(await _joins(variant, args.joins))
    return rates, joins


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--members", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--joins", type=int, default=300)
    ap.add_argument("--no-doc", action="store_true", help="do not write docs/benchmarks.md")
    args = ap.parse_args()
    load_before = os.getloadavg()
    rates, joins = asyncio.run(_main(args))
    load_after = os.getloadavg()
    off_rate = statistics.median(rates[VARIANTS[0]])
    off_join = statistics.median(joins[VARIANTS[0]])
    rows = []
    for variant in VARIANTS:
        rate = statistics.median(rates[variant])
        join = statistics.median(joins[variant])
        cost = (off_rate / rate - 1) * 100  # CPU per heartbeat, relative to off
        rows.append(
            (
                variant,
                f"{rate:,.0f}",
                f"{1e6 / rate:.1f}",
                "—" if variant == VARIANTS[0] else f"{cost:+.1f}% (target ≤ {TARGET:g}%)",
                f"{join:,.0f}",
                "—" if variant == VARIANTS[0] else f"{(join / off_join - 1) * 100:+.1f}%",
            )
        )
    on_cost = (off_rate / statistics.median(rates["ACLs on"]) - 1) * 100
    verdict = "met" if on_cost <= TARGET else "NOT met"
    body = "\n".join(
        [
            "## Security: the authorizer",
            "",
            f"`.venv/bin/python bench/security.py --members {args.members} --rounds "
            f"{args.rounds} --seconds {args.seconds:g} --joins {args.joins}` ({machine()}; "
            f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after: the machine "
            "is shared with other work). Steady heartbeats through the coordinator's own gRPC "
            "method table in-process (no network, no gRPC framing: an upper bound on the "
            "relative cost), CPU time of the process, median of the interleaved rounds. "
            f"*ACLs on*: the caller is User:alice, allowed by prefixed ACLs among {OTHER_ACLS:,} "
            "ACLs of other principals; every heartbeat is authorized (GROUP READ), from the "
            "authorizer's cache after the first. Join: a second member joining a group "
            "(GROUP READ and TOPIC DESCRIBE of its subscription checked; its epoch bump and "
            "target assignment included), CPU time per join.",
            "",
            table(
                (
                    "variant",
                    "heartbeats/s",
                    "µs CPU / heartbeat",
                    "cost per heartbeat",
                    "µs CPU / join",
                    "join cost",
                ),
                rows,
            ),
            "",
            f"Verdict: the authorizer's cost on a steady heartbeat is {on_cost:+.1f}% against "
            f"the {TARGET:g}% target — **{verdict}**. Rounds (heartbeats/s): "
            + "; ".join(f"{v}: {', '.join(f'{r:,.0f}' for r in rates[v])}" for v in VARIANTS)
            + ".",
        ]
    )
    print(body)
    if not args.no_doc:
        write_section("security", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
