"""Shared e2e fixtures: a real ``kip848 serve`` subprocess on 127.0.0.1:0.

The server prints ``listening on HOST:PORT`` once bound; we read that line (bounded wait) and
talk to it with the generated stubs (sync stubs are fine: the server is another process).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import grpc
import pytest
from serve_support import read_lines, ready, release_client_handles, wait_serving

from kip848.v1 import (
    admin_pb2,
    admin_pb2_grpc,
    common_pb2,
    consumer_group_pb2,
    consumer_group_pb2_grpc,
    testing_pb2,
    testing_pb2_grpc,
)

NO_BATCHING = ("--set", "group.consumer.assignment.interval.ms=0")
"""The stories compute a group's target in the heartbeat that changes it (Kafka before 4.3):
servers start with these flags unless a test asks for ``batching=True`` (Kafka 4.3's default
interval of 1 s; tests/e2e/test_storm.py and test_batching.py)."""
PG_LEASE = ("--set", "coordinator.lease.ms=1500", "--set", "coordinator.heartbeat.interval.ms=150")
"""A node on PostgreSQL restarted after kill -9 waits for its old registration to expire (the
lease, docs/ha.md): a short one keeps the stories quick."""


class ServerProcess:
    def __init__(
        self,
        data_dir: Path,
        *extra: str,
        clock: str = "manual",
        listen: str = "127.0.0.1:0",
        batching: bool = False,
        credentials: grpc.ChannelCredentials | None = None,
        lines: int | None = None,
        prefix: tuple[str, ...] = (),
    ) -> None:
        """``prefix``: a command the server runs under (``unshare ...``)."""
        self.data_dir = data_dir
        self.stderr_path = data_dir.parent / f"{data_dir.name}-serve-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in wait()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [
                *prefix,
                sys.executable,
                "-m",
                "coordinator.cli",
                "serve",
                "--listen",
                listen,
                "--data-dir",
                str(data_dir),
                "--clock",
                clock,
                *(() if batching else NO_BATCHING),
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=env,
        )
        try:
            self._start(lines, extra, credentials)
        except BaseException:
            # A server that did not start in time (or whose start failed a check) is not left
            # running: nothing would stop it, and it would load the machine for the rest of
            # the run.
            self.proc.kill()
            self.proc.wait(timeout=15)
            if getattr(self, "channel", None) is not None:
                self.channel.close()
            if self.proc.stdout:
                self.proc.stdout.close()
            self._stderr.close()
            raise

    def _start(
        self,
        lines: int | None,
        extra: tuple[str, ...],
        credentials: grpc.ChannelCredentials | None,
    ) -> None:
        # `metrics on HOST:PORT` follows `listening on` when --metrics-listen is given
        # (`kafka listening on` lines come between: ``lines`` says how many lines to read).
        self.lines = self._read_lines(lines or (2 if "--metrics-listen" in extra else 1))
        assert self.lines[0].startswith("listening on 127.0.0.1:"), self.lines
        self.address = self.lines[0].removeprefix("listening on ")
        last = self.lines[-1]
        self.metrics_address = (
            last.removeprefix("metrics on ") if last.startswith("metrics") else None
        )
        self.credentials = credentials
        self.channel = (
            grpc.insecure_channel(self.address)
            if credentials is None
            else grpc.secure_channel(self.address, credentials)
        )
        ready(self.channel, self.proc, self.stderr_text)
        self.groups = consumer_group_pb2_grpc.ConsumerGroupServiceStub(self.channel)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.testing = testing_pb2_grpc.TestingServiceStub(self.channel)
        self.wait_loaded()

    def _read_lines(self, count: int) -> list[str]:
        assert self.proc.stdout is not None
        return read_lines(self.proc, self.proc.stdout, count, self.stderr_text)

    def wait_loaded(self) -> None:
        """Until the store is loaded (:func:`serve_support.wait_serving`)."""
        wait_serving(self.channel, self.stderr_text)

    def stderr_text(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    # ------------------------------------------------------------- helpers

    def create_topic(self, name: str, partitions: int) -> bytes:
        resp = self.admin.CreateTopics(
            admin_pb2.CreateTopicsRequest(
                topics=[
                    admin_pb2.CreateTopicsRequest.CreatableTopic(
                        name=name, num_partitions=partitions
                    )
                ]
            ),
            timeout=10,
        )
        assert resp.topics[0].error_code == 0, resp
        return resp.topics[0].topic_id

    def heartbeat(
        self, client_id: str = "client", **fields: object
    ) -> consumer_group_pb2.ConsumerGroupHeartbeatResponse:
        return self.groups.ConsumerGroupHeartbeat(
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(**fields),
            timeout=10,
            metadata=(("client-id", client_id),),
        )

    def describe(self, *group_ids: str) -> consumer_group_pb2.ConsumerGroupDescribeResponse:
        return self.groups.ConsumerGroupDescribe(
            consumer_group_pb2.ConsumerGroupDescribeRequest(group_ids=list(group_ids)), timeout=10
        )

    def wait_group_epoch(self, group_id: str, epoch: int, timeout: float = 5.0) -> None:
        """Until ``group_id`` is at group epoch ``epoch`` (a regex subscription is resolved
        off the heartbeat path, right after the heartbeat that asked for it); bounded."""
        deadline = time.monotonic() + timeout
        while self.describe(group_id).groups[0].group_epoch != epoch:
            assert time.monotonic() < deadline, f"{group_id} never reached epoch {epoch}"
            time.sleep(0.02)

    def advance(self, ms: int) -> testing_pb2.AdvanceTimeResponse:
        return self.testing.AdvanceTime(testing_pb2.AdvanceTimeRequest(ms=ms), timeout=10)

    # ------------------------------------------------------------- lifecycle

    def signal(self, sig: int) -> None:
        self.proc.send_signal(sig)

    def wait(self, timeout: float = 15.0) -> int:
        try:
            return self.proc.wait(timeout=timeout)
        finally:
            self.channel.close()
            if self.proc.stdout:
                self.proc.stdout.close()
            self._stderr.close()

    def stop(self) -> int:
        release_client_handles()
        if self.proc.poll() is None:
            self.signal(signal.SIGTERM)
        return self.wait()

    def kill9(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.wait()


def every_acl(admin: admin_pb2_grpc.AdminServiceStub) -> admin_pb2.DescribeAclsResponse:
    """DescribeAcls with a filter that matches every ACL."""
    any_ = 1
    return admin.DescribeAcls(
        admin_pb2.DescribeAclsRequest(
            filter=admin_pb2.AclFilter(
                resource_type_filter=any_,
                pattern_type_filter=any_,
                operation=any_,
                permission_type=any_,
            )
        ),
        timeout=10,
    )


def run_cli(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``kip848 ARGV...`` in a child process (this checkout first on the path), run to its end
    (bounded by ``timeout``): its exit code, stdout and stderr."""
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    return subprocess.run(
        [sys.executable, "-m", "coordinator.cli", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        check=False,
    )


def join_request(
    group_id: str,
    topics: list[str],
    member_id: str = "",
    rebalance_timeout_ms: int = 30_000,
    **extra: object,
) -> dict:
    return dict(
        group_id=group_id,
        member_id=member_id,
        member_epoch=0,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=common_pb2.TopicNames(names=topics),
        topic_partitions=common_pb2.TopicPartitionsList(),
        **extra,
    )


def owned(*items: tuple[bytes, list[int]]) -> common_pb2.TopicPartitionsList:
    return common_pb2.TopicPartitionsList(
        items=[common_pb2.TopicPartitions(topic_id=t, partitions=ps) for t, ps in items]
    )


ONE_PROCESS: tuple[str, ...] = ()
FRONT_ENDS = ("--grpc-processes", "3")


@pytest.fixture(scope="module")
def grpc_processes() -> tuple[str, ...]:
    """Every story runs twice (``pytest_generate_tests`` gives the values): on one process, and
    with two front ends on the same port. With front ends a test's connection lands on any of
    the three processes; the answers must be the same (tests/e2e/test_frontends.py checks that
    many connections spread over them)."""
    raise AssertionError("parametrised by pytest_generate_tests")


@pytest.fixture(scope="module")
def manual_server(
    tmp_path_factory: pytest.TempPathFactory,
    grpc_processes: tuple[str, ...],
    store_backend: str,
    request: pytest.FixtureRequest,
) -> Iterator[ServerProcess]:
    server = ServerProcess(
        tmp_path_factory.mktemp("manual") / "data",
        *grpc_processes,
        *store_args(store_backend, request),
        clock="manual",
    )
    try:
        yield server
    finally:
        assert server.stop() == 0, server.stderr_text()


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """``@pytest.mark.stores("sqlite", "postgresql")``: the module's stories that start their
    servers with ``start_server`` run on each store (PostgreSQL: the session's, tests/pg.py),
    one process and front ends each. ``@pytest.mark.postgresql_too``: the stories that start
    their servers with ``manual_server``, ``start_server`` or ``store_args`` run one process
    and front ends on SQLite, and one process on PostgreSQL (one run more, not the two of the
    ``stores`` product: the front ends forward the same way over either store)."""
    names = metafunc.fixturenames
    marker = metafunc.definition.get_closest_marker("stores")
    if "grpc_processes" in names:
        grpc_parametrize(metafunc)
    if marker is not None and "store_backend" in names:
        metafunc.parametrize("store_backend", marker.args, scope="module")


def grpc_parametrize(metafunc: pytest.Metafunc) -> None:
    """``grpc_processes`` (with ``store_backend`` under ``postgresql_too``), module-scoped: a
    module's stories share a server per value."""
    if metafunc.definition.get_closest_marker("postgresql_too") is not None:
        metafunc.parametrize(
            ("grpc_processes", "store_backend"),
            [(ONE_PROCESS, "sqlite"), (FRONT_ENDS, "sqlite"), (ONE_PROCESS, "postgresql")],
            ids=["one-process", "front-ends", "postgresql"],
            scope="module",
        )
    else:
        metafunc.parametrize(
            "grpc_processes",
            [ONE_PROCESS, FRONT_ENDS],
            ids=["one-process", "front-ends"],
            scope="module",
        )


@pytest.fixture(scope="module")
def store_backend() -> str:
    return "sqlite"


def store_args(store_backend: str, request: pytest.FixtureRequest) -> tuple[str, ...]:
    """The flags of a server on ``store_backend``: none on SQLite (its ``--data-dir``), a new
    store of the session's PostgreSQL with a short lease otherwise."""
    if store_backend != "postgresql":
        return ()
    return ("--store", request.getfixturevalue("pg_server").fresh_store_dsn(), *PG_LEASE)


@pytest.fixture
def start_server(
    tmp_path: Path,
    grpc_processes: tuple[str, ...],
    store_backend: str,
    request: pytest.FixtureRequest,
) -> Iterator:
    """Factory: start servers on a data dir (on PostgreSQL: a store of their own per data dir,
    the same again for a server restarted on it); stops any still running at the end."""
    started: list[ServerProcess] = []
    stores: dict[Path, tuple[str, ...]] = {}

    def start(data_dir: Path | None = None, *extra: str, clock: str = "manual") -> ServerProcess:
        data_dir = data_dir or tmp_path / "data"
        if store_backend == "postgresql":
            if data_dir not in stores:
                stores[data_dir] = store_args(store_backend, request)
            extra = (*stores[data_dir], *extra)
        server = ServerProcess(data_dir, *grpc_processes, *extra, clock=clock)
        started.append(server)
        return server

    yield start
    for s in started:
        if s.proc.poll() is None:
            s.proc.kill()
            s.wait()


@pytest.fixture(scope="module")
def kafka_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """Tansu + ``kip848 serve --kafka-listen --kafka-upstream`` (``kafka_support.KafkaStack``),
    shared by a module's tests (give each test its own topic and group names). The topic feed
    refreshes every second here, so tests of the interval stay short."""
    from kafka_support import KafkaStack

    stack = KafkaStack(
        tmp_path_factory.mktemp("kafka-stack"), "--set", "kafka.upstream.metadata.max.age.ms=1000"
    )
    try:
        yield stack
    finally:
        assert stack.stop() == 0, stack.server.stderr_text()


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> Iterator:
    """Tansu + ``kip848 serve`` in front of it with the real clients' settings
    (``kafka_clients.STACK_SETTINGS``), shared by a module's tests; a module that needs other
    settings defines its own ``stack``."""
    from kafka_clients import STACK_SETTINGS
    from kafka_support import KafkaStack

    s = KafkaStack(tmp_path_factory.mktemp(request.module.__name__), *STACK_SETTINGS)
    try:
        yield s
    finally:
        assert s.stop() == 0, s.server.stderr_text()


@pytest.fixture
def admin(stack: Any) -> Iterator[Any]:
    """A confluent-kafka AdminClient of ``stack``'s listener."""
    from confluent_kafka.admin import AdminClient

    client = AdminClient({"bootstrap.servers": stack.server.kafka_address})
    yield client
    del client


@pytest.fixture
def fleet(stack: Any, tmp_path: Path) -> Iterator[Any]:
    """Real Kafka clients in child processes (``kafka_clients.Fleet``), closed after the test."""
    from kafka_clients import Fleet

    f = Fleet(stack.server.kafka_address, tmp_path)
    yield f
    f.close()
