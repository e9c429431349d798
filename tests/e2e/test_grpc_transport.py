"""``kip848 serve --grpc-transport grpcio``: the coordinator served by grpc.aio instead of the
default server (ours on libnghttp2, coordinator/server/h2grpc.py, which every other e2e test
uses) answers a real grpcio client alike: a join and its assignment, a describe, health, and a
clean stop."""

from __future__ import annotations

from pathlib import Path

from conftest import ServerProcess, join_request
from grpc_health.v1 import health_pb2, health_pb2_grpc


def test_a_member_joins_through_grpc_aio(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", "--grpc-transport", "grpcio")
    try:
        topic_id = server.create_topic("orders", 4)
        joined = server.heartbeat(**join_request("g", ["orders"], member_id="A"))
        assert (joined.error_code, joined.member_epoch) == (0, 1)
        assert [
            (bytes(t.topic_id), sorted(t.partitions))
            for t in joined.assignment.assigned_topic_partitions
        ] == [(bytes(topic_id), [0, 1, 2, 3])]
        described = server.describe("g")
        assert [
            (g.group_id, g.group_epoch, [m.member_id for m in g.members]) for g in described.groups
        ] == [("g", 1, ["A"])]
        health = health_pb2_grpc.HealthStub(server.channel).Check(
            health_pb2.HealthCheckRequest(service=""), timeout=5
        )
        assert health.status == health_pb2.HealthCheckResponse.SERVING
    finally:
        assert server.stop() == 0, server.stderr_text()
