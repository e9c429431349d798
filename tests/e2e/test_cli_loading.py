"""``kip848`` right after a coordinator starts: while the store loads, every request answers
COORDINATOR_LOAD_IN_PROGRESS; the CLI retries within ``--timeout`` instead of failing at once.

The server is the real gRPC server and runtime, run in this process so the test decides when
loading ends (``CoordinatorServer.load``), which a subprocess with a big store would leave to
chance."""

from __future__ import annotations

import time
from collections.abc import Iterator

import grpc
import pytest
from serve_support import InProcessServer

from coordinator.cli import main
from kip848.v1 import admin_pb2, admin_pb2_grpc


def load_after(server: InProcessServer, seconds: float) -> None:
    """Load the server's store ``seconds`` from now."""
    loop = server.loop_thread.loop
    loop.call_soon_threadsafe(
        lambda: loop.call_later(seconds, lambda: loop.create_task(server.server.load()))
    )


@pytest.fixture
def loading() -> Iterator[InProcessServer]:
    """A coordinator serving on 127.0.0.1:0 whose store is loaded only when the test says."""
    server = InProcessServer(loaded=False)
    try:
        yield server
    finally:
        server.close()


def test_the_cli_waits_for_the_load_within_its_timeout(
    loading: InProcessServer, capsys: pytest.CaptureFixture[str]
) -> None:
    with grpc.insecure_channel(loading.address) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        assert stub.ListTopics(admin_pb2.ListTopicsRequest(), timeout=5).error_code == 14
    load_after(loading, 0.8)
    started = time.monotonic()
    code = main(
        ["topics", "create", "orders", "--partitions", "3", "--bootstrap-server", loading.address]
    )
    waited = time.monotonic() - started
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    assert out.startswith("Created topic orders (") and out.endswith(", 3 partitions).\n")
    assert 0.7 <= waited < 5, waited
    assert main(["topics", "list", "--output", "json", "--bootstrap-server", loading.address]) == 0
    assert '"name": "orders"' in capsys.readouterr().out


def test_the_cli_gives_up_when_its_timeout_runs_out(
    loading: InProcessServer, capsys: pytest.CaptureFixture[str]
) -> None:
    started = time.monotonic()
    code = main(["groups", "list", "--timeout", "0.6", "--bootstrap-server", loading.address])
    waited = time.monotonic() - started
    assert code == 1
    # The cluster's nodes are asked first (every node's groups are listed): that is what waits.
    assert capsys.readouterr() == (
        "",
        "kip848: describe cluster: COORDINATOR_LOAD_IN_PROGRESS: The coordinator is loading and "
        "hence "
        "can't process requests.\n"
        "  hint: the coordinator is still loading its store; retry in a moment\n",
    )
    assert 0.3 <= waited < 3, waited
