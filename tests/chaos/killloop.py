"""Kill -9 loop: a real server under a workload of acknowledged writes is SIGKILLed at a random
moment, restarted on the same store, checked, and loaded again — many times.

What "0 acknowledged writes lost" means here, checked after every restart:

* **Offsets.** Each writer owns a group and commits increasing offsets to random partitions;
  for every partition the restarted server's committed offset is at least the highest one
  acknowledged, and at most the highest one sent (a commit cut off by the kill may or may not
  have landed; nothing else may appear).
* **Topics.** Every acknowledged topic creation exists.
* **Members.** Every acknowledged join of a consumer group member exists, with the epoch it was
  acknowledged with (members join once and never heartbeat again; the session timeout is an
  hour).

After the last cycle the server is stopped cleanly and ``kip848 replay`` must accept the store.

Run longer than CI does: ``cd tests && ../.venv/bin/python -m chaos.killloop --cycles 500``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kip848.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
)

from .server import ForkServer, Server, env, start_subprocess

TOPIC = "soak"
PARTITIONS = 16
WRITERS = 6
SERVER_FLAGS = (
    "--set",
    "group.consumer.max.session.timeout.ms=3600000",
    "--set",
    "group.consumer.session.timeout.ms=3600000",
)
CALL_TIMEOUT_S = 20.0
OC = offsets_pb2.OffsetCommitRequest


@dataclass
class Ledger:
    """What the servers acknowledged (and what was sent), across all cycles."""

    acked: dict[tuple[str, int], int] = field(default_factory=dict)
    sent: dict[tuple[str, int], int] = field(default_factory=dict)
    topics: set[str] = field(default_factory=set)
    members: dict[str, int] = field(default_factory=dict)  # member id -> acknowledged epoch
    next_offset: dict[str, int] = field(default_factory=dict)
    acked_writes: int = 0  # partition-offsets acknowledged
    acked_topics: int = 0
    acked_joins: int = 0


@dataclass
class Report:
    cycles: int
    acked_writes: int
    acked_topics: int
    acked_joins: int
    lost: list[str]
    seconds: float
    replay: dict[str, object]


async def wait_loaded(channel: grpc.aio.Channel) -> None:
    """Until the store is loaded: gRPC health says SERVING (NOT_SERVING until then). Not
    ListTopics: the cluster log's reads are answered once it is loaded, before the coordinator
    partitions are."""
    health = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service="")
    for _ in range(3000):  # bounded: 30 s
        try:
            resp = await health.Check(request, timeout=5)
            if resp.status == health_pb2.HealthCheckResponse.SERVING:
                return
        except grpc.aio.AioRpcError:
            pass
        await asyncio.sleep(0.01)
    raise AssertionError("the store never finished loading")


async def check(channel: grpc.aio.Channel, ledger: Ledger) -> list[str]:
    """Everything acknowledged so far is there; returns what is missing (empty: all good)."""
    lost: list[str] = []
    offsets = offsets_pb2_grpc.OffsetServiceStub(channel)
    groups = sorted({g for g, _ in ledger.acked})
    if groups:
        resp = await offsets.OffsetFetch(
            offsets_pb2.OffsetFetchRequest(
                groups=[offsets_pb2.OffsetFetchRequest.Group(group_id=g) for g in groups]
            ),
            timeout=CALL_TIMEOUT_S,
        )
        found = {
            (g.group_id, p.partition_index): p.committed_offset
            for g in resp.groups
            for t in g.topics
            for p in t.partitions
        }
        for key, acked in ledger.acked.items():
            got = found.get(key, -1)
            if got < acked:
                lost.append(f"offset {key}: acknowledged {acked}, found {got}")
            elif got > ledger.sent[key]:
                lost.append(f"offset {key}: {got} was never sent (max {ledger.sent[key]})")
    names = {
        t.name
        for t in (
            await admin_pb2_grpc.AdminServiceStub(channel).ListTopics(
                admin_pb2.ListTopicsRequest(), timeout=CALL_TIMEOUT_S
            )
        ).topics
    }
    lost += [f"topic {t} acknowledged, missing" for t in sorted(ledger.topics - names)]
    if ledger.members:
        desc = await consumer_group_pb2_grpc.ConsumerGroupServiceStub(
            channel
        ).ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["soak-cg"]),
            timeout=CALL_TIMEOUT_S,
        )
        epochs = {m.member_id: m.member_epoch for g in desc.groups for m in g.members}
        for member, epoch in ledger.members.items():
            if epochs.get(member) != epoch:
                lost.append(
                    f"member {member}: acknowledged epoch {epoch}, found {epochs.get(member)}"
                )
    return lost


async def writer(
    channel: grpc.aio.Channel, ledger: Ledger, w: int, rng: random.Random, stop: asyncio.Event
) -> None:
    offsets = offsets_pb2_grpc.OffsetServiceStub(channel)
    group = f"soak-{w}"
    for _ in range(1_000_000):  # bounded; ends at stop (or when the server dies)
        if stop.is_set():
            return
        value = ledger.next_offset.get(group, 0)
        ledger.next_offset[group] = value + 1
        parts = rng.sample(range(PARTITIONS), rng.randint(1, PARTITIONS))
        for p in parts:
            ledger.sent[(group, p)] = max(ledger.sent.get((group, p), -1), value)
        req = OC(
            group_id=group,
            topics=[
                OC.Topic(
                    name=TOPIC,
                    partitions=[
                        OC.Partition(partition_index=p, committed_offset=value) for p in parts
                    ],
                )
            ],
        )
        try:
            resp = await offsets.OffsetCommit(req, timeout=CALL_TIMEOUT_S)
        except grpc.aio.AioRpcError:
            return  # killed under us
        for t in resp.topics:
            for part in t.partitions:
                if part.error_code == 0:
                    key = (group, part.partition_index)
                    ledger.acked[key] = max(ledger.acked.get(key, -1), value)
                    ledger.acked_writes += 1
                elif part.error_code not in (14, 15):  # loading / stopping: retriable
                    raise AssertionError(f"commit refused: {part}")


async def admin_writer(
    channel: grpc.aio.Channel, ledger: Ledger, cycle: int, stop: asyncio.Event
) -> None:
    admin = admin_pb2_grpc.AdminServiceStub(channel)
    groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
    for n in range(1_000_000):  # bounded; ends at stop (or when the server dies)
        if stop.is_set():
            return
        try:
            if n % 2 == 0:
                name = f"soak-t-{cycle}-{n}"
                resp = await admin.CreateTopics(
                    admin_pb2.CreateTopicsRequest(
                        topics=[
                            admin_pb2.CreateTopicsRequest.CreatableTopic(
                                name=name, num_partitions=1
                            )
                        ]
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
                if resp.topics[0].error_code == 0:
                    ledger.topics.add(name)
                    ledger.acked_topics += 1
            else:
                member = f"m-{cycle}-{n}"
                hb = await groups.ConsumerGroupHeartbeat(
                    consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                        group_id="soak-cg",
                        member_id=member,
                        member_epoch=0,
                        rebalance_timeout_ms=60_000,
                        subscribed_topic_names=common_pb2.TopicNames(names=[TOPIC]),
                        topic_partitions=common_pb2.TopicPartitionsList(),
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
                if hb.error_code == 0:
                    ledger.members[member] = hb.member_epoch
                    ledger.acked_joins += 1
        except grpc.aio.AioRpcError:
            return  # killed under us
        await asyncio.sleep(0.01)


async def one_cycle(
    server: Server, ledger: Ledger, cycle: int, rng: random.Random, min_s: float, max_s: float
) -> list[str]:
    """Check what earlier cycles acknowledged, then load the server and kill it mid-stream."""
    async with grpc.aio.insecure_channel(server.address) as channel:
        await wait_loaded(channel)
        lost = await check(channel, ledger)
        if cycle == 0:
            await admin_pb2_grpc.AdminServiceStub(channel).CreateTopics(
                admin_pb2.CreateTopicsRequest(
                    topics=[
                        admin_pb2.CreateTopicsRequest.CreatableTopic(
                            name=TOPIC, num_partitions=PARTITIONS
                        )
                    ]
                ),
                timeout=CALL_TIMEOUT_S,
            )
        stop = asyncio.Event()
        tasks = [
            asyncio.create_task(writer(channel, ledger, w, random.Random(rng.random()), stop))
            for w in range(WRITERS)
        ]
        tasks.append(asyncio.create_task(admin_writer(channel, ledger, cycle, stop)))
        await asyncio.sleep(rng.uniform(min_s, max_s))
        server.kill9()  # in the middle of the stream
        stop.set()
        done, pending = await asyncio.wait(tasks, timeout=CALL_TIMEOUT_S + 5)
        assert not pending, "writers hung after the kill"
        for t in done:
            t.result()  # an unexpected refusal fails the run
    return lost


def replay(data_dir: Path) -> dict[str, object]:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "coordinator.cli",
            "replay",
            "--data-dir",
            str(data_dir),
            "--output",
            "json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env(),
        check=False,
    )
    if out.returncode != 0:
        raise AssertionError(f"kip848 replay refused the store: {out.stderr}")
    return json.loads(out.stdout)  # type: ignore[no-any-return]


async def run(
    data_dir: Path,
    cycles: int,
    start: Callable[[Path], Server],
    *,
    seed: int = 0,
    min_s: float = 0.1,
    max_s: float = 0.5,
    log: Callable[[str], None] = lambda _: None,
) -> Report:
    rng = random.Random(seed)
    ledger = Ledger()
    lost: list[str] = []
    began = time.monotonic()
    for cycle in range(cycles):
        server = start(data_dir)
        try:
            found = await one_cycle(server, ledger, cycle, rng, min_s, max_s)
        except BaseException:
            server.kill_quietly()  # never leave a server behind
            raise
        lost += [f"cycle {cycle}: {x}" for x in found]
        log(
            f"cycle {cycle + 1}/{cycles}: {ledger.acked_writes} partition-offsets, "
            f"{ledger.acked_topics} topics, {ledger.acked_joins} joins acknowledged so far; "
            f"lost {len(lost)}"
        )
    server = start(data_dir)  # the last check, then a clean stop and an offline replay
    try:
        async with grpc.aio.insecure_channel(server.address) as channel:
            await wait_loaded(channel)
            lost += [f"final: {x}" for x in await check(channel, ledger)]
    finally:
        status = server.stop()
    assert status == 0, server.stderr()
    return Report(
        cycles=cycles,
        acked_writes=ledger.acked_writes,
        acked_topics=ledger.acked_topics,
        acked_joins=ledger.acked_joins,
        lost=lost,
        seconds=time.monotonic() - began,
        replay=replay(data_dir),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--cycles", type=int, default=500)
    p.add_argument("--seed", type=int, default=int(time.time()))
    p.add_argument("--data-dir", type=Path, default=None, help="default: a temporary directory")
    p.add_argument(
        "--launcher",
        choices=("fork", "subprocess"),
        default="fork",
        help="fork: children of a fork server (fast restarts); subprocess: kip848 serve each time",
    )
    p.add_argument("--min-load-s", type=float, default=0.1)
    p.add_argument("--max-load-s", type=float, default=1.0)
    args = p.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kip848-soak-") as tmp:
        data_dir = args.data_dir or Path(tmp) / "data"
        print(f"seed {args.seed}, store {data_dir}", flush=True)
        fork = ForkServer() if args.launcher == "fork" else None
        try:
            starter = (
                (lambda d: fork.start(d, *SERVER_FLAGS))
                if fork is not None
                else (lambda d: start_subprocess(d, *SERVER_FLAGS))
            )
            report = asyncio.run(
                run(
                    data_dir,
                    args.cycles,
                    starter,
                    seed=args.seed,
                    min_s=args.min_load_s,
                    max_s=args.max_load_s,
                    log=lambda line: print(line, flush=True),
                )
            )
        finally:
            if fork is not None:
                fork.close()
    print(
        f"{report.cycles} kill -9 cycles in {report.seconds:.0f} s: {report.acked_writes} "
        f"partition-offset writes, {report.acked_topics} topics, {report.acked_joins} joins "
        f"acknowledged; {len(report.lost)} lost; replay ok={report.replay.get('ok')}"
    )
    for line in report.lost[:50]:
        print("LOST", line)
    return 0 if not report.lost and report.replay.get("ok") else 1


if __name__ == "__main__":
    sys.exit(main())
