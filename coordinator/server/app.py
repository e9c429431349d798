"""``kip848 serve``: the grpc.aio server around the runtime.

Start-up: open the store, bind ``--listen`` (port 0 picks a free port), start serving, print
``listening on HOST:PORT`` on stdout, then load the store in the background (requests meanwhile
get COORDINATOR_LOAD_IN_PROGRESS; health says NOT_SERVING until loading is done).
Shutdown on SIGTERM/SIGINT: health NOT_SERVING, stop accepting, let in-flight calls finish
(their writes become durable), flush, close the store, exit 0.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import sys
from dataclasses import dataclass

import grpc
from grpc_health.v1 import health, health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection
from kip848.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    classic_group_pb2,
    classic_group_pb2_grpc,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    offsets_pb2,
    offsets_pb2_grpc,
    testing_pb2,
    testing_pb2_grpc,
)

from coordinator.core.config import GroupCoordinatorConfig
from coordinator.runtime import CoordinatorRuntime, ManualClock, SystemClock
from coordinator.runtime.store import RecordStore

from .classic_service import ClassicGroupService
from .services import AdminService, ConsumerGroupService, OffsetService, TestingService

log = logging.getLogger("kip848.server")

DEFAULT_MAX_MESSAGE_BYTES = 16 * 1024 * 1024
SHUTDOWN_GRACE_S = 10.0


@dataclass(frozen=True, slots=True, kw_only=True)
class ServeOptions:
    listen: str = "127.0.0.1:9094"
    clock: str = "system"
    max_message_bytes: int = DEFAULT_MAX_MESSAGE_BYTES


def split_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` or ``[V6]:PORT`` -> (host, port). Raises ValueError with a clear message."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--listen must be HOST:PORT, got {listen!r}")
    try:
        number = int(port)
    except ValueError:
        raise ValueError(f"--listen port must be a number, got {port!r}") from None
    if not 0 <= number <= 65535:
        raise ValueError(f"--listen port must be 0..65535, got {number}")
    return host, number


class CoordinatorServer:
    """The runtime plus its gRPC server. ``start()`` binds and serves; ``load()`` loads the
    store; ``stop()`` shuts down gracefully."""

    def __init__(self, runtime: CoordinatorRuntime, options: ServeOptions) -> None:
        self.runtime = runtime
        self.options = options
        self.host, _ = split_listen(options.listen)
        self.port = 0
        size = options.max_message_bytes
        self.server = grpc.aio.server(
            options=[
                ("grpc.max_send_message_length", size),
                ("grpc.max_receive_message_length", size),
                ("grpc.so_reuseport", 0),
            ]
        )
        self.health = health.aio.HealthServicer()
        consumer_group_pb2_grpc.add_ConsumerGroupServiceServicer_to_server(ConsumerGroupService(runtime), self.server)
        admin_pb2_grpc.add_AdminServiceServicer_to_server(AdminService(runtime), self.server)
        offsets_pb2_grpc.add_OffsetServiceServicer_to_server(OffsetService(runtime), self.server)
        classic = ClassicGroupService(runtime, lambda: (self.host.strip("[]"), self.port))
        classic_group_pb2_grpc.add_ClassicGroupServiceServicer_to_server(classic, self.server)
        services = [
            consumer_group_pb2.DESCRIPTOR.services_by_name["ConsumerGroupService"].full_name,
            admin_pb2.DESCRIPTOR.services_by_name["AdminService"].full_name,
            offsets_pb2.DESCRIPTOR.services_by_name["OffsetService"].full_name,
            classic_group_pb2.DESCRIPTOR.services_by_name["ClassicGroupService"].full_name,
        ]
        if isinstance(runtime.clock, ManualClock):
            testing_pb2_grpc.add_TestingServiceServicer_to_server(TestingService(runtime), self.server)
            services.append(testing_pb2.DESCRIPTOR.services_by_name["TestingService"].full_name)
        health_pb2_grpc.add_HealthServicer_to_server(self.health, self.server)
        self.service_names = services
        reflection.enable_server_reflection(
            [*services, health_pb2.DESCRIPTOR.services_by_name["Health"].full_name, reflection.SERVICE_NAME],
            self.server,
        )

    async def start(self) -> int:
        for name in ("", *self.service_names):
            await self.health.set(name, health_pb2.HealthCheckResponse.NOT_SERVING)
        self.port = self.server.add_insecure_port(self.options.listen)
        await self.server.start()
        return self.port

    @property
    def address(self) -> str:
        host = f"[{self.host.strip('[]')}]" if ":" in self.host.strip("[]") else self.host
        return f"{host}:{self.port}"

    async def load(self) -> None:
        await self.runtime.start()
        for name in ("", *self.service_names):
            await self.health.set(name, health_pb2.HealthCheckResponse.SERVING)

    async def stop(self, grace_s: float = SHUTDOWN_GRACE_S) -> None:
        await self.health.enter_graceful_shutdown()
        self.runtime.release_parked()  # parked JoinGroup/SyncGroup answered, not left to the grace
        await self.server.stop(grace_s)  # stop accepting; in-flight calls finish
        await self.runtime.close()  # flush pending writes, close the store


def make_runtime(config: GroupCoordinatorConfig, store: RecordStore, clock: str) -> CoordinatorRuntime:
    return CoordinatorRuntime(config=config, store=store, clock=ManualClock() if clock == "manual" else SystemClock())


async def serve(runtime: CoordinatorRuntime, options: ServeOptions) -> int:
    """Run until SIGTERM/SIGINT. Returns the process exit code."""
    server = CoordinatorServer(runtime, options)
    try:
        await server.start()
    except RuntimeError as exc:
        print(f"kip848 serve: cannot listen on {options.listen}: {exc}", file=sys.stderr)
        await runtime.close()
        return 1
    print(f"listening on {server.address}", flush=True)
    log.info("Listening on %s (clock %s, %d shards).", server.address, options.clock, runtime.shard_count)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    load_task = loop.create_task(server.load())
    stop_task = loop.create_task(stop.wait())
    code = 0
    await asyncio.wait([load_task, stop_task], return_when=asyncio.FIRST_COMPLETED)
    if load_task.done() and load_task.exception() is not None:
        exc = load_task.exception()
        log.critical("Loading the store failed: %r", exc, exc_info=exc)
        code = 1
    elif not stop.is_set():
        await stop_task
    log.info("Shutting down.")
    if not load_task.done():
        load_task.cancel()
        try:
            await load_task
        except (asyncio.CancelledError, Exception) as exc:  # noqa: BLE001 - shutting down anyway
            log.debug("Loading interrupted by shutdown: %r", exc)
    stop_task.cancel()
    await server.stop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.remove_signal_handler(sig)
    log.info("Stopped.")
    return code
