"""Starting a ``kip848 serve`` subprocess in tests: its first stdout lines and its gRPC
channel, each within a bounded wait, with the server's stderr in the failure. And
:class:`LoopThread` and :class:`InProcessServer`, for a server run in the test's own process."""

from __future__ import annotations

import asyncio
import gc
import os
import select
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Coroutine
from typing import IO, Any, TypeVar

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from coordinator.core.config import parse_config
from coordinator.runtime import CoordinatorRuntime, ManualClock
from coordinator.runtime.store import MemoryRecordStore
from coordinator.server.app import CoordinatorServer, ServeOptions

START_TIMEOUT_S = 20.0
T = TypeVar("T")


class LoopThread:
    """An asyncio loop in a thread of its own: a server in the test's process, driven from
    blocking test code (every wait bounded)."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = START_TIMEOUT_S) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class InProcessServer:
    """The real gRPC server and runtime (and a Kafka listener with ``kafka``) on 127.0.0.1:0,
    in this process on a :class:`LoopThread`, over ``store`` (a fresh memory store by default)
    with ``settings`` on a manual clock: the test decides when the store is loaded (``loaded``
    False: only at :meth:`load`) and can hold the store's appends."""

    def __init__(
        self,
        settings: dict[str, str] | None = None,
        store: MemoryRecordStore | None = None,
        *,
        kafka: bool = False,
        loaded: bool = True,
    ) -> None:
        self.loop_thread = LoopThread()
        self.store = MemoryRecordStore() if store is None else store

        async def start() -> CoordinatorServer:
            runtime = CoordinatorRuntime(
                config=parse_config(settings or {}), store=self.store, clock=ManualClock(0)
            )
            options = ServeOptions(
                listen="127.0.0.1:0", kafka_listen="127.0.0.1:0" if kafka else None
            )
            server = CoordinatorServer(runtime, options)
            await server.start()
            if loaded:
                await server.load()
            return server

        self.server = self.run(start())
        self.address = self.server.address

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = START_TIMEOUT_S) -> T:
        return self.loop_thread.run(coro, timeout)

    def load(self) -> None:
        self.run(self.server.load())

    def close(self) -> None:
        self.run(self.server.stop(1.0))
        self.loop_thread.close()


def release_client_handles() -> None:
    """Called before a server stops: librdkafka handles (confluent-kafka's Producer, Consumer,
    AdminClient) that a test left in a reference cycle — a ``pytest.raises(...) as info`` keeps
    the test's frame, and so its locals, alive — are destroyed now, while their broker still
    runs, not whenever the collector next runs: until then they retry the stopped server and
    fill stderr with "Connect to ... failed: Connection refused"."""
    if "confluent_kafka" in sys.modules:
        gc.collect()


def read_lines(
    proc: subprocess.Popen[bytes], stdout: IO[bytes], count: int, stderr: Callable[[], str]
) -> list[str]:
    """The first ``count`` lines a starting server prints (bounded wait); its stderr if it
    exits first."""
    deadline = time.monotonic() + START_TIMEOUT_S
    buf = b""
    while buf.count(b"\n") < count:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise AssertionError(f"server did not start (exit {proc.poll()}): {stderr()}")
        ready, _, _ = select.select([stdout], [], [], left)
        if ready:
            buf += os.read(stdout.fileno(), 4096)
    return buf.decode().splitlines()[:count]


def ready(channel: grpc.Channel, proc: subprocess.Popen[bytes], stderr: Callable[[], str]) -> None:
    """Until ``channel`` connects (bounded); a server that exited meanwhile is reported with its
    stderr instead of a bare timeout."""
    try:
        grpc.channel_ready_future(channel).result(timeout=START_TIMEOUT_S)
    except grpc.FutureTimeoutError:
        raise AssertionError(
            f"server not reachable within {START_TIMEOUT_S} s (exit {proc.poll()}): {stderr()}"
        ) from None


def wait_serving(channel: grpc.Channel, stderr: Callable[[], str]) -> None:
    """Until the server's store is loaded: gRPC health says SERVING (NOT_SERVING until loading
    is done; bounded wait). Health, not one of our RPCs: a probe answered
    COORDINATOR_LOAD_IN_PROGRESS would be counted, traced and audited like any request, tests
    that count those would depend on how long loading took, and the reads of the cluster log
    are answered before the coordinator partitions are loaded."""
    health = health_pb2_grpc.HealthStub(channel)
    request = health_pb2.HealthCheckRequest(service="")
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if health.Check(request, timeout=5).status == health_pb2.HealthCheckResponse.SERVING:
            return
        time.sleep(0.02)
    raise AssertionError(f"store never finished loading: {stderr()}")
