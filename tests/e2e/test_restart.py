"""End-to-end restarts: graceful (SIGTERM) and brutal (kill -9 during a stream of changes)."""

from __future__ import annotations

import signal
import threading
import time

import grpc
import pytest
from conftest import ServerProcess, join_request, owned

from kip848.v1 import admin_pb2
from kip848.v1 import consumer_group_pb2 as cg

pytestmark = pytest.mark.stores("sqlite", "postgresql")

Alter = admin_pb2.IncrementalAlterConfigsRequest
Desc = admin_pb2.DescribeConfigsRequest


def test_sigterm_exits_zero_and_state_survives(start_server, tmp_path) -> None:
    server: ServerProcess = start_server(tmp_path / "data")
    t = server.create_topic("orders", 2)
    join = server.heartbeat(**join_request("g", ["orders"]))
    server.heartbeat(
        group_id="g", member_id=join.member_id, member_epoch=1, topic_partitions=owned((t, [0, 1]))
    )
    before = server.describe("g")
    server.signal(signal.SIGTERM)
    assert server.wait() == 0
    log = server.stderr_text()
    assert "Shutting down." in log and "Stopped." in log

    again: ServerProcess = start_server(tmp_path / "data")
    assert again.describe("g") == before
    assert "Loaded shard" in again.stderr_text()
    again.signal(signal.SIGINT)
    assert again.wait() == 0


def _steady_group(server: ServerProcess, group: str, topic_id: bytes, members: list[str]) -> None:
    """Join ``members`` and heartbeat until every one is reconciled (bounded)."""
    epochs: dict[str, int] = {}
    owned_by: dict[str, list[int]] = {}
    for m in members:
        resp = server.heartbeat(**join_request(group, ["t"], member_id=m))
        assert resp.error_code == 0, resp
        epochs[m] = resp.member_epoch
        owned_by[m] = [p for tp in resp.assignment.assigned_topic_partitions for p in tp.partitions]
    for _ in range(20):
        for m in members:
            resp = server.heartbeat(
                group_id=group,
                member_id=m,
                member_epoch=epochs[m],
                topic_partitions=owned((topic_id, owned_by[m])),
            )
            assert resp.error_code == 0, resp
            epochs[m] = resp.member_epoch
            if resp.HasField("assignment"):
                owned_by[m] = [
                    p for tp in resp.assignment.assigned_topic_partitions for p in tp.partitions
                ]
        desc = server.describe(group).groups[0]
        if desc.group_state == "Stable" and all(
            x.member_epoch == desc.group_epoch for x in desc.members
        ):
            # one more round so every member has reported what it owns
            for m in members:
                server.heartbeat(
                    group_id=group,
                    member_id=m,
                    member_epoch=epochs[m],
                    topic_partitions=owned((topic_id, owned_by[m])),
                )
            return
    raise AssertionError(f"group {group} never became stable")


def test_kill9_during_a_stream_keeps_every_acknowledged_change(start_server, tmp_path) -> None:
    server: ServerProcess = start_server(tmp_path / "data", clock="system")
    t = server.create_topic("t", 8)
    groups = {"g-a": ["a1"], "g-b": ["b1", "b2"], "g-c": ["c1", "c2", "c3"]}
    for group, members in groups.items():
        _steady_group(server, group, t, members)
    state_before = server.describe(*groups)
    assert all(g.error_code == 0 and g.group_state == "Stable" for g in state_before.groups)

    acked_topics: list[str] = []
    acked_configs: list[tuple[str, str]] = []
    stop = threading.Event()
    errors: list[BaseException] = []

    def stream(worker: int) -> None:
        epochs = {
            m: next(
                x.member_epoch for g in state_before.groups for x in g.members if x.member_id == m
            )
            for ms in groups.values()
            for m in ms
        }
        try:
            for i in range(100_000):
                if stop.is_set():
                    return
                group = list(groups)[i % len(groups)]
                for m in groups[group]:
                    r = server.heartbeat(group_id=group, member_id=m, member_epoch=epochs[m])
                    assert r.error_code == 0, r
                if i % 3 == 0:
                    name = f"new-{worker}-{i}"
                    resp = server.admin.CreateTopics(
                        admin_pb2.CreateTopicsRequest(
                            topics=[
                                admin_pb2.CreateTopicsRequest.CreatableTopic(
                                    name=name, num_partitions=1
                                )
                            ]
                        ),
                        timeout=5,
                    )
                    assert resp.topics[0].error_code == 0, resp
                    acked_topics.append(name)
                else:
                    cfg_group, value = f"cfg-{worker}-{i}", str(5000 + i % 1000)
                    resp = server.admin.IncrementalAlterConfigs(
                        Alter(
                            resources=[
                                Alter.Resource(
                                    resource_type=16,
                                    resource_name=cfg_group,
                                    configs=[
                                        Alter.AlterableConfig(
                                            name="consumer.heartbeat.interval.ms",
                                            config_operation=0,
                                            value=value,
                                        )
                                    ],
                                )
                            ]
                        ),
                        timeout=5,
                    )
                    assert resp.responses[0].error_code == 0, resp
                    acked_configs.append((cfg_group, value))
        except grpc.RpcError:
            return  # the server died under us: expected
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=stream, args=(w,), daemon=True) for w in range(4)]
    for th in threads:
        th.start()
    deadline = time.monotonic() + 20
    while (
        len(acked_topics) + len(acked_configs) < 60 and time.monotonic() < deadline and not errors
    ):
        time.sleep(0.02)
    server.kill9()  # in the middle of the stream
    stop.set()
    for th in threads:
        th.join(timeout=10)
    assert not errors, errors
    assert len(acked_topics) + len(acked_configs) >= 60

    again: ServerProcess = start_server(tmp_path / "data", clock="system")
    # The groups are exactly as they were (steady heartbeats write nothing).
    assert again.describe(*groups) == state_before
    topics = {
        x.name for x in again.admin.ListTopics(admin_pb2.ListTopicsRequest(), timeout=10).topics
    }
    assert set(acked_topics) <= topics
    assert "t" in topics
    for cfg_group, value in acked_configs:
        got = again.admin.DescribeConfigs(
            Desc(
                resources=[
                    Desc.Resource(
                        resource_type=16,
                        resource_name=cfg_group,
                        configuration_keys=Desc.ConfigurationKeys(
                            names=["consumer.heartbeat.interval.ms"]
                        ),
                    )
                ]
            ),
            timeout=10,
        )
        assert [(c.name, c.value, c.config_source) for c in got.results[0].configs] == [
            ("consumer.heartbeat.interval.ms", value, 8)
        ], cfg_group
    # And the members carry on where they were.
    for g in state_before.groups:
        for m in g.members:
            r = again.heartbeat(
                group_id=g.group_id, member_id=m.member_id, member_epoch=m.member_epoch
            )
            assert r == cg.ConsumerGroupHeartbeatResponse(
                member_id=m.member_id, member_epoch=m.member_epoch, heartbeat_interval_ms=5000
            )
    assert again.stop() == 0
