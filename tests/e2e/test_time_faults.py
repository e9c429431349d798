"""A real ``kip848 serve`` stopped with SIGSTOP for longer than the session timeout, then
resumed (#13 item 9): live members, whose heartbeats were waiting while it was stopped, are not
fenced; a member that really went silent is still removed. The coordinator logs the stall."""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import grpc
from conftest import ServerProcess, join_request

from kip848.v1 import consumer_group_pb2

SESSION_MS = 2000
STOPPED_S = 4.0  # twice the session timeout
FENCED = {25, 110}  # UNKNOWN_MEMBER_ID, FENCED_MEMBER_EPOCH


def test_members_are_not_fenced_for_the_coordinators_absence(tmp_path: Path) -> None:
    server = ServerProcess(
        tmp_path / "data",
        "--set",
        "group.consumer.min.session.timeout.ms=500",
        "--set",
        f"group.consumer.session.timeout.ms={SESSION_MS}",
        "--set",
        "group.consumer.min.heartbeat.interval.ms=100",
        "--set",
        "group.consumer.heartbeat.interval.ms=200",
        clock="system",
    )
    try:
        server.create_topic("t", 6)
        live = ["a", "b", "c"]
        epochs: dict[str, int] = {}
        for m in [*live, "silent"]:
            resp = server.heartbeat(**join_request("g", ["t"], member_id=m))
            assert resp.error_code == 0, resp
            epochs[m] = resp.member_epoch
        errors: list[str] = []
        stop = threading.Event()

        def heartbeat_loop(member: str) -> None:
            epoch = epochs[member]
            for _ in range(1000):  # bounded; ends when the test says so
                if stop.is_set():
                    return
                try:
                    resp = server.groups.ConsumerGroupHeartbeat(
                        consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                            group_id="g", member_id=member, member_epoch=epoch
                        ),
                        timeout=20,
                    )
                except grpc.RpcError as exc:
                    errors.append(f"{member}: {exc.code()}")
                    return
                if resp.error_code in FENCED:
                    errors.append(f"{member} fenced: {resp.error_code} {resp.error_message}")
                    return
                if resp.error_code == 0:
                    epoch = resp.member_epoch
                time.sleep(0.2)

        threads = [threading.Thread(target=heartbeat_loop, args=(m,), daemon=True) for m in live]
        for t in threads:
            t.start()
        time.sleep(0.5)
        server.signal(signal.SIGSTOP)
        time.sleep(STOPPED_S)  # heartbeats queue up in the kernel meanwhile
        server.signal(signal.SIGCONT)
        time.sleep(1.0)  # the queued heartbeats are read, the group goes on
        assert not errors, errors
        desc = server.describe("g").groups[0]
        assert sorted(m.member_id for m in desc.members) == [*live, "silent"]
        # The silent member is still removed: what was left of its session, after resuming.
        deadline = time.monotonic() + SESSION_MS / 1000 + 3.0
        while time.monotonic() < deadline:
            members = sorted(m.member_id for m in server.describe("g").groups[0].members)
            if members == live:
                break
            time.sleep(0.1)
        assert members == live
        stop.set()
        for t in threads:
            t.join(timeout=25)
        assert not errors, errors
        assert "did not run for" in server.stderr_text()
    finally:
        server.signal(signal.SIGCONT)
        assert server.stop() == 0, server.stderr_text()
