"""The abuse cases of #13 items 1-4 against a real ``kip848 serve``: each request now has a
bounded cost — refused before any work, in-band, and the server stays responsive and small."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import grpc
from conftest import ServerProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kip848.v1 import admin_pb2, offsets_pb2, offsets_pb2_grpc
from kip848.v1 import consumer_group_pb2 as cg

OC = offsets_pb2.OffsetCommitRequest


def rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def test_huge_regexes_are_refused_before_compiling(tmp_path: Path) -> None:
    """Item 1: sixty heartbeats with different valid 700 KB regexes took 1.2 GB."""
    server = ServerProcess(tmp_path / "data")
    try:
        before = rss_bytes(server.proc.pid)
        for i in range(60):
            pattern = f"t{i}(" + "|".join(f"x{j}" for j in range(100_000)) + ")"
            assert len(pattern) > 680_000
            resp = server.heartbeat(
                group_id="no-such-group",
                member_id="m",
                member_epoch=5,
                subscribed_topic_regex=pattern,
            )
            assert resp.error_code == 128, resp
            assert resp.error_message.startswith("SubscribedTopicRegex is ")
            assert resp.error_message.endswith(
                "bytes long; at most 32767 are allowed (group.consumer.regex.max.bytes)."
            )
        assert rss_bytes(server.proc.pid) - before < 100 * 1024 * 1024
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_a_million_partitions_in_one_commit_are_refused_at_once(tmp_path: Path) -> None:
    """Item 2: one OffsetCommit naming 1,000,000 partitions took 69 s and stalled everyone."""
    server = ServerProcess(tmp_path / "data")
    try:
        server.create_topic("t", 10)
        request = OC(
            group_id="g",
            topics=[
                OC.Topic(
                    name="t",
                    partitions=[OC.Partition(partition_index=i) for i in range(1_000_000)],
                )
            ],
        )
        other = grpc.insecure_channel(server.address)  # another caller, on its own connection
        health = health_pb2_grpc.HealthStub(other)
        slowest: list[float] = []
        done = threading.Event()

        def probe() -> None:  # other callers keep being answered meanwhile
            for _ in range(500):  # bounded
                if done.is_set():
                    return
                t = time.monotonic()
                health.Check(health_pb2.HealthCheckRequest(), timeout=30)
                slowest.append(time.monotonic() - t)
                time.sleep(0.02)

        prober = threading.Thread(target=probe, daemon=True)
        prober.start()
        start = time.monotonic()
        resp = offsets_pb2_grpc.OffsetServiceStub(server.channel).OffsetCommit(request, timeout=60)
        took = time.monotonic() - start
        done.set()
        prober.join(timeout=30)
        other.close()
        assert resp == offsets_pb2.OffsetCommitResponse(
            error_code=42,
            error_message="The request names 1000000 partitions; at most 10000 are allowed in "
            "one request (group.coordinator.request.max.partitions).",
        )
        assert took < 15, took  # the transfer and parse of ~8 MB; no work on a partition
        assert slowest and max(slowest) < 5, max(slowest)
        listed = server.admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
        assert list(listed.groups) == []  # nothing was stored
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_huge_group_ids_are_refused_and_list_groups_keeps_working(tmp_path: Path) -> None:
    """Item 3: forty commits with 1 MB group ids made ListGroups fail for ever."""
    server = ServerProcess(tmp_path / "data")
    try:
        server.create_topic("t", 1)
        offsets = offsets_pb2_grpc.OffsetServiceStub(server.channel)
        for i in range(40):
            resp = offsets.OffsetCommit(
                OC(
                    group_id=f"{i}-" + "g" * 1_000_000,
                    topics=[OC.Topic(name="t", partitions=[OC.Partition(committed_offset=1)])],
                ),
                timeout=30,
            )
            [part] = resp.topics[0].partitions
            assert part.error_code == 24 and "group.coordinator.identifier.max.bytes" in (
                part.error_message
            )
        ok = offsets.OffsetCommit(
            OC(group_id="fine", topics=[OC.Topic(name="t", partitions=[OC.Partition()])]),
            timeout=10,
        )
        assert ok.topics[0].partitions[0].error_code == 0
        listed = server.admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
        assert (listed.error_code, [g.group_id for g in listed.groups]) == (0, ["fine"])
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_an_answer_over_the_message_size_is_explained_in_band(tmp_path: Path) -> None:
    """Item 4: a response over the maximum message size logged a traceback and the caller got
    RESOURCE_EXHAUSTED with nothing explaining which limit."""
    server = ServerProcess(tmp_path / "data", "--max-message-bytes", "4096")
    try:
        server.create_topic("t", 1)
        offsets = offsets_pb2_grpc.OffsetServiceStub(server.channel)
        for i in range(200):
            offsets.OffsetCommit(
                OC(
                    group_id=f"group-{i:05d}",
                    topics=[OC.Topic(name="t", partitions=[OC.Partition()])],
                ),
                timeout=10,
            )
        listed = server.admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10)
        assert listed.error_code == 42 and list(listed.groups) == []
        assert "more than the largest message this server sends (4096 bytes" in (
            listed.error_message
        )
        described = server.groups.ConsumerGroupDescribe(
            cg.ConsumerGroupDescribeRequest(group_ids=[f"group-{i:05d}" for i in range(200)]),
            timeout=10,
        )
        assert described.error_code == 42 and "describe fewer groups" in described.error_message
        assert "Traceback" not in server.stderr_text()
    finally:
        assert server.stop() == 0, server.stderr_text()


def test_groups_list_takes_answers_over_grpcs_client_default(tmp_path: Path) -> None:
    """`kip848 groups list` of more than 4 MiB (gRPC's default client limit) works: the server
    bounds its answers by --max-message-bytes, the CLI takes what it sends."""
    import json
    import os
    import subprocess
    import sys

    server = ServerProcess(tmp_path / "data")
    try:
        server.create_topic("t", 1)
        offsets = offsets_pb2_grpc.OffsetServiceStub(server.channel)
        names = [f"{i:05d}-" + "g" * 1000 for i in range(4300)]  # 1,006 bytes each
        futures = [
            offsets.OffsetCommit.future(
                OC(group_id=n, topics=[OC.Topic(name="t", partitions=[OC.Partition()])]),
                timeout=60,
            )
            for n in names
        ]
        assert all(f.result().topics[0].partitions[0].error_code == 0 for f in futures)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "coordinator.cli",
                "groups",
                "list",
                "--bootstrap-server",
                server.address,
                "--output",
                "json",
                "--timeout",
                "60",
            ],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ),
            check=False,
        )
        assert out.returncode == 0, out.stderr
        listed = json.loads(out.stdout)
        assert len(out.stdout) > 4 * 1024 * 1024
        assert sorted(g["group_id"] for g in listed) == sorted(names)
    finally:
        assert server.stop() == 0, server.stderr_text()
