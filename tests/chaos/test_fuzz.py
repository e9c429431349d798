"""CI fuzz run (#13): 20,000 seeded random requests against a real ``kip848 serve`` — 0 crashes,
0 hangs, every answer a documented in-band Kafka code — then a clean stop and ``kip848 replay``
of the store. Longer runs: ``python -m chaos.fuzz`` (see fuzz.py)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import grpc
import pytest

from kip848.v1 import admin_pb2, admin_pb2_grpc

from . import fuzz
from .killloop import replay
from .server import start_subprocess

REQUESTS = 20_000
SEED = int(os.environ.get("KIP848_FUZZ_SEED", "848"))


@pytest.mark.slow
def test_fuzz_real_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    server = start_subprocess(data, *fuzz.SERVER_FLAGS)
    try:
        report = asyncio.run(fuzz.run(server.address, REQUESTS, seed=SEED, concurrency=32))
        assert report.failures == [], "\n".join(report.failures[:20])
        assert report.requests == REQUESTS
        assert report.seconds < 120, report.seconds  # bounded: 0 hangs
        assert report.garbage > 50  # undecodable bytes were sent and refused in-band
        # The fuzz reached deep: members joined and heartbeated, offsets were committed, classic
        # members joined (clean answers, not only refusals).
        for rpc, least in (
            ("ConsumerGroupHeartbeat", 500),
            ("OffsetCommit", 100),
            ("JoinGroup", 10),
        ):
            assert report.clean[rpc] >= least, (rpc, report.clean)
        with grpc.insecure_channel(server.address) as channel:
            topics = admin_pb2_grpc.AdminServiceStub(channel).ListTopics(
                admin_pb2.ListTopicsRequest(), timeout=10
            )
    finally:
        status = server.stop()
    log = server.stderr()
    assert status == 0, log[-3000:]
    assert "Traceback" not in log and "Unexpected error" not in log, log[-3000:]
    summary = replay(data)
    assert summary["ok"] is True and summary["problems"] == [], summary
    assert summary["topics"] == len(topics.topics)
