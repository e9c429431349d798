"""A real ``kip848 serve`` when its disk misbehaves (#13 items 6-7):

* the disk fills up (a real tmpfs filled by another file): commits are refused in-band with
  COORDINATOR_NOT_AVAILABLE, gRPC health says NOT_SERVING, reads go on; once space is freed the
  coordinator serves again by itself (health SERVING, commits accepted) and a restart has every
  acknowledged commit;
* the data directory is deleted under the running server: the next commit is refused, health
  says NOT_SERVING, the log says so loudly, and the restart comes up with every acknowledged
  offset (the store was rescued from the files the server still held open), never empty.
"""

from __future__ import annotations

import errno
import shutil
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from conftest import ServerProcess
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kip848.v1 import admin_pb2, offsets_pb2, offsets_pb2_grpc

OC = offsets_pb2.OffsetCommitRequest
COORDINATOR_NOT_AVAILABLE = 15


def commit(
    server: ServerProcess, group: str, offsets: dict[int, int], metadata: str = ""
) -> offsets_pb2.OffsetCommitResponse:
    req = OC(
        group_id=group,
        topics=[
            OC.Topic(
                name="t",
                partitions=[
                    OC.Partition(partition_index=p, committed_offset=o, committed_metadata=metadata)
                    for p, o in offsets.items()
                ],
            )
        ],
    )
    return offsets_pb2_grpc.OffsetServiceStub(server.channel).OffsetCommit(req, timeout=10)


def codes(resp: offsets_pb2.OffsetCommitResponse) -> set[int]:
    return {p.error_code for t in resp.topics for p in t.partitions}


def fetch(server: ServerProcess, group: str) -> dict[int, int]:
    resp = offsets_pb2_grpc.OffsetServiceStub(server.channel).OffsetFetch(
        offsets_pb2.OffsetFetchRequest(
            groups=[offsets_pb2.OffsetFetchRequest.Group(group_id=group)]
        ),
        timeout=10,
    )
    [g] = resp.groups
    assert g.error_code == 0, g
    return {p.partition_index: p.committed_offset for t in g.topics for p in t.partitions}


def health(server: ServerProcess) -> int:
    stub = health_pb2_grpc.HealthStub(server.channel)
    return stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=5).status


def wait_health(server: ServerProcess, status: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if health(server) == status:
            return
        time.sleep(0.05)
    raise AssertionError(f"health never became {status}; log:\n{server.stderr_text()}")


def fill(directory: Path) -> Path:
    """Fill the file system holding ``directory`` with another file, as a full disk is."""
    filler = directory / "filler"
    chunk = b"\0" * 65536
    with open(filler, "wb") as f:
        for _ in range(100_000):  # bounded: the tmpfs holds a few MiB
            try:
                f.write(chunk)
                f.flush()
            except OSError as exc:
                assert exc.errno == errno.ENOSPC
                break
    return filler


def test_full_disk_refuses_commits_in_band_and_recovers_by_itself(
    tmpfs: Callable[..., Any],
) -> None:
    fs = tmpfs(size_kib=4096)
    server = ServerProcess(fs.point / "data", clock="manual")
    try:
        server.create_topic("t", 50)
        assert codes(commit(server, "g", {p: 100 + p for p in range(50)})) == {0}
        wait_health(server, health_pb2.HealthCheckResponse.SERVING)

        filler = fill(fs.point)
        big = "m" * 4000  # 50 x 4 KB of metadata: needs room the disk no longer has
        refused = commit(server, "g", dict.fromkeys(range(50), 500), metadata=big)
        assert codes(refused) == {COORDINATOR_NOT_AVAILABLE}
        message = refused.topics[0].partitions[0].error_message
        assert "no space left on the device" in message, message
        wait_health(server, health_pb2.HealthCheckResponse.NOT_SERVING)
        assert fetch(server, "g") == {p: 100 + p for p in range(50)}  # reads still answered
        assert codes(commit(server, "g", {0: 600}, metadata=big)) == {COORDINATOR_NOT_AVAILABLE}

        filler.unlink()  # space freed: no restart needed
        wait_health(server, health_pb2.HealthCheckResponse.SERVING)
        assert codes(commit(server, "g", dict.fromkeys(range(50), 700), metadata=big)) == {0}
        assert "accepts writes again" in server.stderr_text()
    finally:
        assert server.stop() == 0, server.stderr_text()
    again = ServerProcess(fs.point / "data", clock="manual")
    try:
        assert fetch(again, "g") == dict.fromkeys(range(50), 700)
    finally:
        assert again.stop() == 0


def test_deleted_data_dir_stops_acknowledging_and_restart_is_not_empty(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = ServerProcess(data, clock="manual")
    try:
        server.create_topic("t", 4)
        for i in range(20):
            assert codes(commit(server, "g", {i % 4: i})) == {0}
        acked = {0: 16, 1: 17, 2: 18, 3: 19}
        shutil.rmtree(data)
        refused = commit(server, "g", {0: 1000})
        assert codes(refused) == {COORDINATOR_NOT_AVAILABLE}
        assert "no longer the one on disk" in refused.topics[0].partitions[0].error_message
        wait_health(server, health_pb2.HealthCheckResponse.NOT_SERVING)
        later = commit(server, "g", {1: 2000})
        assert codes(later) == {COORDINATOR_NOT_AVAILABLE}
        assert (
            later.topics[0]
            .partitions[0]
            .error_message.startswith("The coordinator stopped serving: the record store at ")
        )
        for _ in range(100):  # the rescue runs on the writer thread; bounded wait
            if "Rescued every acknowledged record" in server.stderr_text():
                break
            time.sleep(0.05)
        log = server.stderr_text()
        assert "CRITICAL" in log and f"its data directory {data} was deleted" in log
        assert f"Rescued every acknowledged record of the lost store to {data}" in log
    finally:
        assert server.stop() == 0, server.stderr_text()
    again = ServerProcess(data, clock="manual")
    try:
        assert fetch(again, "g") == acked  # every acknowledged offset, none refused
        topics = again.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10).topics
        assert [t.name for t in topics] == ["t"]
    finally:
        assert again.stop() == 0


def test_health_is_served_while_the_store_is_lost(tmp_path: Path) -> None:
    """gRPC itself keeps answering (health, reads as errors) rather than hanging."""
    data = tmp_path / "data"
    server = ServerProcess(data, clock="manual")
    try:
        shutil.rmtree(data)
        wait_health(server, health_pb2.HealthCheckResponse.NOT_SERVING)  # noticed while idle
        try:
            resp = server.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10)
        except grpc.RpcError as exc:  # pragma: no cover - the assertion explains
            raise AssertionError(f"an in-band answer was expected: {exc}") from exc
        assert resp.error_code == COORDINATOR_NOT_AVAILABLE
    finally:
        assert server.stop() == 0, server.stderr_text()
