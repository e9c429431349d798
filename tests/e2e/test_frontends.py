"""``kip848 serve --grpc-processes N``: front-end processes sharing the listen port.

Every connection lands on one of the N processes (the kernel picks); whichever it is, the
answers must be the coordinator's own. The tests open many separate connections so that
some land on front ends, then check that every connection sees the same state, the same
errors and the same health, that the coordinator's log counts forwarded calls, and the
lifecycle: SIGTERM stops everything with exit 0, ``kill -9`` of the coordinator takes the
front ends down, a busy port is refused.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import time
from pathlib import Path

import grpc
import pytest
from conftest import ServerProcess, join_request, run_cli
from grpc_health.v1 import health_pb2, health_pb2_grpc

from kip848.v1 import (
    common_pb2,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    testing_pb2,
    testing_pb2_grpc,
)

CONNECTIONS = 12
HEARTBEAT = "/kip848.v1.ConsumerGroupService/ConsumerGroupHeartbeat"


def children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        out += [int(c) for c in (task / "children").read_text().split()]
    return out


def running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def connections(address: str, n: int = CONNECTIONS) -> list[grpc.Channel]:
    # A local subchannel pool per channel: one TCP connection each, not one shared.
    return [
        grpc.insecure_channel(address, options=[("grpc.use_local_subchannel_pool", 1)])
        for _ in range(n)
    ]


@pytest.fixture
def server3(tmp_path: Path):
    server = ServerProcess(tmp_path / "data", "--grpc-processes", "3")
    yield server
    if server.proc.poll() is None:
        server.stop()


def test_every_connection_gets_the_coordinators_answers_and_shutdown_is_clean(
    server3: ServerProcess,
) -> None:
    frontends = children(server3.proc.pid)
    cmdlines = [Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") for pid in frontends]
    assert len(frontends) == 2, cmdlines
    assert all(b"coordinator.server.frontend" in c for c in cmdlines), cmdlines
    server3.create_topic("orders", 12)
    chans = connections(server3.address)
    stubs = [consumer_group_pb2_grpc.ConsumerGroupServiceStub(ch) for ch in chans]

    # One member per connection joins, each with its own client id.
    state: dict[int, tuple[str, int, common_pb2.TopicPartitionsList]] = {}
    for i, stub in enumerate(stubs):
        r = stub.ConsumerGroupHeartbeat(
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(**join_request("g", ["orders"])),
            timeout=10,
            metadata=(("client-id", f"client-{i}"),),
        )
        assert (r.error_code, r.HasField("error_message")) == (0, False), r
        state[i] = (
            r.member_id,
            r.member_epoch,
            common_pb2.TopicPartitionsList(items=r.assignment.assigned_topic_partitions),
        )
    assert len({m for m, _, _ in state.values()}) == CONNECTIONS

    # Reconcile (bounded): each member heartbeats through its own connection until stable.
    for _round in range(20):
        changed = False
        for i, stub in enumerate(stubs):
            member_id, epoch, owned = state[i]
            r = stub.ConsumerGroupHeartbeat(
                consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                    group_id="g", member_id=member_id, member_epoch=epoch, topic_partitions=owned
                ),
                timeout=10,
                metadata=(("client-id", f"client-{i}"),),
            )
            assert r.error_code == 0, r
            if r.HasField("assignment"):
                owned = common_pb2.TopicPartitionsList(items=r.assignment.assigned_topic_partitions)
                changed = True
            changed |= r.member_epoch != epoch
            state[i] = (member_id, r.member_epoch, owned)
        if not changed:
            break
    else:
        raise AssertionError("the group did not converge in 20 rounds")

    # Every connection describes the very same group; client ids (set on every heartbeat, as
    # in Kafka) came through whichever process.
    described = [
        stub.ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["g"]), timeout=10
        )
        for stub in stubs
    ]
    assert len({d.SerializeToString(deterministic=True) for d in described}) == 1
    group = described[0].groups[0]
    assert (group.error_code, group.group_state, len(group.members)) == (0, "Stable", CONNECTIONS)
    client_of = {m.member_id: m.client_id for m in group.members}
    assert client_of == {state[i][0]: f"client-{i}" for i in range(CONNECTIONS)}
    owned = sorted(
        p for m in group.members for tp in m.assignment.topic_partitions for p in tp.partitions
    )
    assert owned == list(range(12))

    # TestingService, health, and transport-level errors: the same on every connection.
    now = {
        testing_pb2_grpc.TestingServiceStub(ch)
        .AdvanceTime(testing_pb2.AdvanceTimeRequest(ms=0), timeout=10)
        .now_ms
        for ch in chans
    }
    assert len(now) == 1
    health = {
        health_pb2_grpc.HealthStub(ch)
        .Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
        .status
        for ch in chans
    }
    assert health == {health_pb2.HealthCheckResponse.SERVING}
    for ch in chans:
        raw = ch.unary_unary(HEARTBEAT, request_serializer=None, response_deserializer=None)
        with pytest.raises(grpc.RpcError) as err:
            raw(b"\xff\xff\xff", timeout=10)
        assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert err.value.details().startswith("Undecodable request:")
        missing = ch.unary_unary(
            "/kip848.v1.ConsumerGroupService/NoSuchMethod",
            request_serializer=None,
            response_deserializer=None,
        )
        with pytest.raises(grpc.RpcError) as err:
            missing(b"", timeout=10)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
    for ch in chans:
        ch.close()

    assert server3.stop() == 0
    log = server3.stderr_text()
    forwarded = [
        int(n)
        for n in re.findall(
            r"Front end \d stopped \(exit code 0\) after forwarding (\d+) calls", log
        )
    ]
    assert len(forwarded) == 2, log
    assert sum(forwarded) > 0, log  # 12 connections over 3 processes: some went through front ends
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in frontends) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(pid) for pid in frontends)


def test_front_ends_exit_when_the_coordinator_is_killed(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", "--grpc-processes", "2")
    frontends = children(server.proc.pid)
    assert len(frontends) == 1
    server.kill9()
    deadline = time.monotonic() + 10
    while any(running(pid) for pid in frontends) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(running(pid) for pid in frontends), "a front end outlived its coordinator"


def serve_with_a_busy_port(tmp_path: Path, *argv: str) -> tuple[int, str]:
    """``kip848 serve ARGV`` with ``{busy}`` in ARGV replaced by a port another socket listens
    on: refused with exit 1 before announcing anything (``listening on`` means ready). The
    port and the server's stderr."""
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = run_cli(
            "serve", "--data-dir", str(tmp_path / "data"), *(a.format(busy=port) for a in argv)
        )
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    return port, done.stderr


def test_a_busy_port_is_refused(tmp_path: Path) -> None:
    port, stderr = serve_with_a_busy_port(
        tmp_path, "--listen", "127.0.0.1:{busy}", "--grpc-processes", "2"
    )
    assert (
        f"kip848 serve: cannot listen on 127.0.0.1:{port}: address 127.0.0.1:{port} is already in use"
        in stderr
    )


def test_a_busy_metrics_port_is_refused_before_listening(tmp_path: Path) -> None:
    """The listeners already bound are closed again, and the reason given."""
    port, stderr = serve_with_a_busy_port(
        tmp_path,
        "--listen",
        "127.0.0.1:0",
        "--kafka-listen",
        "127.0.0.1:0",
        "--metrics-listen",
        "127.0.0.1:{busy}",
    )
    assert (
        f"kip848 serve: cannot serve metrics on 127.0.0.1:{port}: [Errno 98] Address already in use"
        in stderr
    ), stderr


def test_sigint_to_the_process_group_stops_cleanly(tmp_path: Path) -> None:
    """Ctrl-C reaches every process of the group; front ends leave the shutdown to the coordinator."""
    server = ServerProcess(tmp_path / "data", "--grpc-processes", "2")
    frontends = children(server.proc.pid)
    server.create_topic("t", 1)
    for pid in (server.proc.pid, *frontends):
        os.kill(pid, signal.SIGINT)
    assert server.wait() == 0, server.stderr_text()
    assert "after forwarding" in server.stderr_text()


def test_a_front_end_that_dies_is_restarted_and_the_others_keep_serving(tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", "--grpc-processes", "3")
    try:
        first = children(server.proc.pid)
        assert len(first) == 2
        server.create_topic("t", 4)
        os.kill(first[0], signal.SIGKILL)
        deadline = time.monotonic() + 10
        while Path(f"/proc/{first[0]}").exists() and time.monotonic() < deadline:
            time.sleep(0.02)  # until reaped: a zombie's other threads may still hold its socket
        # Gone (connections it held, or had not yet accepted, were reset: clients reconnect).
        # The coordinator and the other front end serve every new connection.
        for ch in connections(server.address, 6):
            stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(ch)
            r = stub.ConsumerGroupDescribe(
                consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=["none"]), timeout=10
            )
            assert r.groups[0].error_code == 69  # GROUP_ID_NOT_FOUND: answered, not UNAVAILABLE
            ch.close()
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            now = children(server.proc.pid)
            if (
                len(now) == 2
                and first[0] not in now
                and "Front end 1 restarted" in server.stderr_text()
            ):
                break
            time.sleep(0.1)
        else:
            raise AssertionError(f"front end 1 was not restarted: {server.stderr_text()}")
        assert first[1] in now
        assert re.search(
            r"Front end 1 \(pid \d+\) exited unexpectedly \(exit code -9\)", server.stderr_text()
        )
        # The restarted one serves like the others.
        for ch in connections(server.address, 9):
            health = health_pb2_grpc.HealthStub(ch).Check(
                health_pb2.HealthCheckRequest(service=""), timeout=10
            )
            assert health.status == health_pb2.HealthCheckResponse.SERVING
            ch.close()
    finally:
        assert server.stop() == 0, server.stderr_text()
    assert len(re.findall(r"Front end \d stopped \(exit code 0\)", server.stderr_text())) == 2


def test_restart_on_the_same_port_right_after_kill_9(tmp_path: Path) -> None:
    """A supervisor restarts a killed coordinator at once: the port its front ends held is
    free again a moment later, and the new server waits for that moment."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    for attempt in range(3):
        server = ServerProcess(
            tmp_path / "data", "--grpc-processes", "2", listen=f"127.0.0.1:{port}"
        )
        assert server.address == f"127.0.0.1:{port}"
        if attempt:
            assert server.describe("g").groups[0].error_code == 0  # state survived the kills
        else:
            server.create_topic("t", 2)
            r = server.heartbeat(**join_request("g", ["t"]))
            assert r.error_code == 0, r
        server.kill9()
