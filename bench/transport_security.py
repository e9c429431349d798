"""What the transport's security costs, end to end (docs/benchmarks.md, "Security: transport";
docs/security.md). bench/security.py measures the authorizer alone, in-process.

    .venv/bin/python bench/transport_security.py            # full run, writes docs/benchmarks.md
    .venv/bin/python bench/transport_security.py --quick    # fast look

1. Steady heartbeats, both protocols, security off (PLAINTEXT, anonymous, no ACLs) against on
   (Kafka: SASL_SSL with SCRAM-SHA-512; gRPC: TLS with a bearer JWT on every call; both with
   ``allow.everyone.if.no.acl.found=false`` and ACLs granting the member's principal its groups
   and topic, so every heartbeat is authorized). The same Python clients drive both; the figure
   judged is the *server's* CPU per heartbeat (``/proc``), which the client's speed does not
   change, against the target: security costs at most 15% per heartbeat. Throughput is shown
   as measured (client-bound here).
2. Join latency: members joining new groups one after another (the join heartbeat's round
   trip), median and p99, off and on, both protocols.
3. A reconnect storm: 2,000 clients open TLS connections to the Kafka listener at once;
   handshakes per second and the server's CPU per handshake.

The members are joined and reconciled over a PLAINTEXT set-up listener as the super user; the
measured load runs on the listener under test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import ssl
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._report import machine, table, write_section
from bench.kafka import Process, join_members

TARGET_COST = 0.15
USER, PASSWORD = "bench", "bench-secret"


def _certs(directory: str) -> tuple[Any, Any, Any]:
    """A CA, the server's certificate and a JWT issuer, made for the run (tests/certs.py,
    tests/jwks.py), never committed."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
    from certs import TestCa
    from jwks import TokenIssuer

    ca = TestCa(directory)
    return ca, ca.server(), TokenIssuer(Path(directory))


def serve(tmp: str, secure: bool, ca: Any, pem: Any, issuer: Any) -> Process:
    """``kip848 serve`` with a PLAINTEXT set-up Kafka listener (INTERNAL) and the measured one
    (LOAD), the gRPC listener plain or TLS; security on: ACLs only (no open resources)."""
    argv = [
        sys.executable,
        "-m",
        "coordinator.cli",
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        os.path.join(tmp, "data"),
        "--log-level",
        "warning",
        "--set",
        "group.consumer.assignment.interval.ms=0",
        "--set",
        "listeners=INTERNAL://127.0.0.1:0,LOAD://127.0.0.1:0",
        "--set",
        "super.users=User:ANONYMOUS;User:admin",
    ]
    if secure:
        argv += [
            "--tls-cert",
            pem.both,
            "--set",
            "listener.security.protocol.map=INTERNAL:PLAINTEXT,LOAD:SASL_SSL,GRPC:SSL",
            "--set",
            "sasl.enabled.mechanisms=SCRAM-SHA-512",
            "--set",
            f"sasl.oauthbearer.jwks.endpoint.url=file://{issuer.path}",
            "--set",
            "allow.everyone.if.no.acl.found=false",
        ]
    else:
        argv += ["--set", "listener.security.protocol.map=INTERNAL:PLAINTEXT,LOAD:PLAINTEXT"]
    proc = Process(argv, 3)
    return proc


def grpc_channel(address: str, secure: bool, ca: Any) -> Any:
    import grpc

    if not secure:
        return grpc.aio.insecure_channel(address)
    return grpc.aio.secure_channel(
        address, grpc.ssl_channel_credentials(Path(ca.ca_file).read_bytes())
    )


async def set_up(address: str, secure: bool, ca: Any, issuer: Any) -> None:
    """The topic, the bench user and its ACLs (as admin)."""
    from coordinator.security import scram
    from kip848.v1 import admin_pb2, admin_pb2_grpc

    metadata = [("authorization", f"Bearer {issuer.token('admin')}")] if secure else []
    async with grpc_channel(address, secure, ca) as channel:
        admin = admin_pb2_grpc.AdminServiceStub(channel)
        for _ in range(200):  # the store may still be loading
            made = await admin.CreateTopics(
                admin_pb2.CreateTopicsRequest(
                    topics=[
                        admin_pb2.CreateTopicsRequest.CreatableTopic(
                            name="bench", num_partitions=32
                        )
                    ]
                ),
                metadata=metadata,
                timeout=10,
            )
            if made.error_code != 14 and made.topics[0].error_code != 14:
                break
            await asyncio.sleep(0.05)
        if not secure:
            return
        salt = b"bench-salt-01234"
        await admin.AlterUserScramCredentials(
            admin_pb2.AlterUserScramCredentialsRequest(
                upsertions=[
                    admin_pb2.AlterUserScramCredentialsRequest.ScramCredentialUpsertion(
                        name=USER,
                        mechanism=2,
                        iterations=4096,
                        salt=salt,
                        salted_password=scram.salted_password(
                            scram.ScramMechanism.SCRAM_SHA_512, PASSWORD, salt, 4096
                        ),
                    )
                ]
            ),
            metadata=metadata,
            timeout=10,
        )
        acls = [
            admin_pb2.AclBinding(
                resource_type=rtype,
                resource_name=name,
                pattern_type=pattern,
                principal=f"User:{USER}",
                host="*",
                operation=3,
                permission_type=3,
            )
            for rtype, name, pattern in ((3, "g", 4), (3, "join-", 4), (2, "bench", 3))
        ]
        await admin.CreateAcls(admin_pb2.CreateAclsRequest(creations=acls), metadata=metadata)


class KafkaConn:
    """An asyncio Kafka connection: TLS and SCRAM-SHA-512 sign-in when secure."""

    async def open(self, address: str, secure: bool, ca: Any) -> KafkaConn:
        host, _, port = address.rpartition(":")
        context = ssl.create_default_context(cafile=ca.ca_file) if secure else None
        self.reader, self.writer = await asyncio.open_connection(
            host, int(port), ssl=context, server_hostname="localhost" if secure else None
        )
        self.correlation = 0
        if secure:
            from coordinator.server.kafka.upstream import sasl_client

            await sasl_client.sign_in(self.request, "SCRAM-SHA-512", USER, PASSWORD)
        return self

    async def request(self, entity: Any) -> Any:
        from coordinator.server.kafka import wire

        self.correlation += 1
        frame = wire.request_frame(entity, self.correlation, "bench")
        self.writer.write(struct.pack(">i", len(frame)) + frame)
        size = struct.unpack(">i", await self.reader.readexactly(4))[0]
        data = await self.reader.readexactly(size)
        cls = type(entity)
        key, version = int(cls.__api_key__), int(cls.__version__)
        pos = 4 + (1 if wire.response_header_flexible(key, version) else 0)
        return wire.decode_response(key, version, data, pos)

    async def pipeline(self, frames: list[bytes], seconds: float, window: int) -> int:
        """Send ``frames`` round and round, ``window`` in flight, for ``seconds``; answers."""
        answered = 0
        sent = 0
        end = time.monotonic() + seconds
        while sent < window:
            self.writer.write(frames[sent % len(frames)])
            sent += 1
        while time.monotonic() < end:
            size = struct.unpack(">i", await self.reader.readexactly(4))[0]
            await self.reader.readexactly(size)
            answered += 1
            self.writer.write(frames[sent % len(frames)])
            sent += 1
        for _ in range(sent - answered):
            size = struct.unpack(">i", await self.reader.readexactly(4))[0]
            await self.reader.readexactly(size)
        return answered

    def close(self) -> None:
        self.writer.close()


def kafka_frames(members: list[tuple[str, str, int]]) -> list[bytes]:
    from bench.kafka import heartbeat_frame

    return [heartbeat_frame(g, m, e) for g, m, e in members]


async def kafka_load(
    address: str, secure: bool, ca: Any, frames: list[bytes], seconds: float, connections: int
) -> int:
    conns = [await KafkaConn().open(address, secure, ca) for _ in range(connections)]
    share = [frames[i::connections] for i in range(connections)]
    try:
        counts = await asyncio.gather(
            *(c.pipeline(f, seconds, 8) for c, f in zip(conns, share, strict=True))
        )
    finally:
        for c in conns:
            c.close()
    return sum(counts)


async def grpc_load(
    address: str,
    secure: bool,
    ca: Any,
    issuer: Any,
    members: list[tuple[str, str, int]],
    seconds: float,
    tasks: int,
) -> int:
    from kip848.v1 import consumer_group_pb2, consumer_group_pb2_grpc

    metadata = [("authorization", f"Bearer {issuer.token(USER)}")] if secure else []
    async with grpc_channel(address, secure, ca) as channel:
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        requests = [
            consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                group_id=g, member_id=m, member_epoch=e
            )
            for g, m, e in members
        ]
        end = time.monotonic() + seconds

        async def worker(i: int) -> int:
            done = 0
            while time.monotonic() < end:
                reply = await stub.ConsumerGroupHeartbeat(
                    requests[(i + done * tasks) % len(requests)], metadata=metadata, timeout=10
                )
                assert reply.error_code == 0, reply
                done += 1
            return done

        return sum(await asyncio.gather(*(worker(i) for i in range(tasks))))


async def kafka_joins(address: str, secure: bool, ca: Any, count: int, tag: str) -> list[float]:
    from coordinator.server.kafka import wire

    conn = await KafkaConn().open(address, secure, ca)
    out = []
    try:
        for i in range(count):
            started = time.perf_counter()
            reply = await conn.request(
                wire.build(
                    wire.request_class(68, 1),
                    group_id=f"join-{tag}-{i}",
                    member_id=f"joiner-{tag}-{i:04d}-xxxxxxxxxxx",
                    member_epoch=0,
                    rebalance_timeout=60_000,
                    subscribed_topic_names=["bench"],
                    subscribed_topic_regex="",
                    topic_partitions=[],
                )
            )
            out.append(time.perf_counter() - started)
            assert reply.error_code == 0, reply
    finally:
        conn.close()
    return out


async def grpc_joins(
    address: str, secure: bool, ca: Any, issuer: Any, count: int, tag: str
) -> list[float]:
    from kip848.v1 import common_pb2, consumer_group_pb2, consumer_group_pb2_grpc

    metadata = [("authorization", f"Bearer {issuer.token(USER)}")] if secure else []
    out = []
    async with grpc_channel(address, secure, ca) as channel:
        stub = consumer_group_pb2_grpc.ConsumerGroupServiceStub(channel)
        for i in range(count):
            started = time.perf_counter()
            reply = await stub.ConsumerGroupHeartbeat(
                consumer_group_pb2.ConsumerGroupHeartbeatRequest(
                    group_id=f"join-{tag}-{i}",
                    member_id=f"joiner-{tag}-{i:04d}-xxxxxxxxxxx",
                    member_epoch=0,
                    rebalance_timeout_ms=60_000,
                    subscribed_topic_names=common_pb2.TopicNames(names=["bench"]),
                    topic_partitions=common_pb2.TopicPartitionsList(),
                ),
                metadata=metadata,
                timeout=10,
            )
            out.append(time.perf_counter() - started)
            assert reply.error_code == 0, reply
    return out


def _ms(values: list[float], q: float) -> str:
    ordered = sorted(values)
    return f"{ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000:.2f}"


def run_configuration(
    secure: bool, members: int, seconds: float, joins: int, certs: tuple[Any, Any, Any]
) -> dict[str, Any]:
    ca, pem, issuer = certs
    with tempfile.TemporaryDirectory(prefix="kip848-bench-transport-") as tmp:
        server = serve(tmp, secure, ca, pem, issuer)
        try:
            grpc_address, internal, load = server.lines
            asyncio.run(set_up(grpc_address, secure, ca, issuer))
            steady = join_members(internal, None, members)
            out: dict[str, Any] = {}
            frames = kafka_frames(steady)
            cpu0 = server.cpu_s()
            started = time.monotonic()
            calls = asyncio.run(kafka_load(load, secure, ca, frames, seconds, 4))
            out["kafka"] = (
                calls / (time.monotonic() - started),
                (server.cpu_s() - cpu0) / calls * 1e6,
            )
            cpu0 = server.cpu_s()
            started = time.monotonic()
            calls = asyncio.run(grpc_load(grpc_address, secure, ca, issuer, steady, seconds, 32))
            out["grpc"] = (
                calls / (time.monotonic() - started),
                (server.cpu_s() - cpu0) / calls * 1e6,
            )
            tag = "on" if secure else "off"
            out["kafka_join"] = asyncio.run(kafka_joins(load, secure, ca, joins, f"k{tag}"))
            out["grpc_join"] = asyncio.run(
                grpc_joins(grpc_address, secure, ca, issuer, joins, f"g{tag}")
            )
            if secure:
                out["storm"] = asyncio.run(storm(load, ca, server))
        finally:
            server.stop()
    return out


async def storm(address: str, ca: Any, server: Process, clients: int = 2000) -> tuple[float, float]:
    """``clients`` TLS connections opened at once (handshake only); (handshakes/s, server CPU
    µs per handshake)."""
    host, _, port = address.rpartition(":")
    context = ssl.create_default_context(cafile=ca.ca_file)
    gate = asyncio.Semaphore(500)

    async def one() -> None:
        async with gate:
            _reader, writer = await asyncio.open_connection(
                host, int(port), ssl=context, server_hostname="localhost"
            )
            writer.close()

    cpu0 = server.cpu_s()
    started = time.monotonic()
    await asyncio.gather(*(one() for _ in range(clients)))
    wall = time.monotonic() - started
    return clients / wall, (server.cpu_s() - cpu0) / clients * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeat", type=int, default=None)
    args = ap.parse_args()
    members, seconds, joins, repeat = (64, 3.0, 30, 1) if args.quick else (128, 8.0, 100, 3)
    if args.repeat:
        repeat = args.repeat
    load = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="kip848-bench-certs-") as directory:
        certs = _certs(directory)
        runs = {False: [], True: []}  # type: dict[bool, list[dict[str, Any]]]
        for _ in range(repeat):
            for secure in (False, True):  # paired rounds
                runs[secure].append(run_configuration(secure, members, seconds, joins, certs))
    rows = []
    for protocol in ("kafka", "grpc"):
        off = statistics.median(r[protocol][1] for r in runs[False])
        on = statistics.median(r[protocol][1] for r in runs[True])
        rate_off = statistics.median(r[protocol][0] for r in runs[False])
        rate_on = statistics.median(r[protocol][0] for r in runs[True])
        cost = on / off - 1
        ratios = sorted(
            a[protocol][1] / b[protocol][1] - 1
            for a, b in zip(runs[True], runs[False], strict=True)
        )
        rows.append(
            (
                protocol,
                f"{off:.1f}",
                f"{on:.1f}",
                f"{cost * 100:+.1f}% (rounds {ratios[0] * 100:+.0f}…{ratios[-1] * 100:+.0f}%)",
                f"≤ {TARGET_COST * 100:.0f}%: {'met' if cost <= TARGET_COST else 'NOT met'}",
                f"{rate_off:,.0f} / {rate_on:,.0f}",
            )
        )
    join_rows = []
    for protocol in ("kafka_join", "grpc_join"):
        off_all = [x for r in runs[False] for x in r[protocol]]
        on_all = [x for r in runs[True] for x in r[protocol]]
        join_rows.append(
            (
                protocol.removesuffix("_join"),
                f"{_ms(off_all, 0.5)} / {_ms(off_all, 0.99)}",
                f"{_ms(on_all, 0.5)} / {_ms(on_all, 0.99)}",
            )
        )
    storms = [r["storm"] for r in runs[True]]
    rate = statistics.median(s[0] for s in storms)
    cpu = statistics.median(s[1] for s in storms)
    body = "\n".join(
        [
            "## Security: transport — TLS + SASL/SCRAM + ACLs on vs off (bench/transport_security.py)",
            "",
            f"{machine()}; load average before the run {load[0]:.2f} {load[1]:.2f} "
            f"{load[2]:.2f} (the machine is shared with other work; figures are medians of "
            f"{repeat} paired rounds). {members} members in groups of 8, steady heartbeats "
            f"for {seconds:.0f} s per protocol, pipelined (Kafka: 4 connections x 8 in "
            "flight; gRPC: 32 concurrent calls on one channel), from Python clients in one "
            "process: the throughput is the client's; the judged figure is the server's CPU "
            "per heartbeat. On: Kafka SASL_SSL with SCRAM-SHA-512, gRPC TLS with a bearer JWT "
            "on every call, allow.everyone.if.no.acl.found=false with prefixed ACLs granting "
            "the member's principal its groups and topic (every heartbeat authorized). Off: "
            "PLAINTEXT, anonymous, no ACLs. Over TLS the Kafka listener writes the answers "
            "of one loop turn at once (one TLS record), the PLAINTEXT path each answer with "
            "a write of its own: with pipelining clients that is why the secured Kafka path "
            "can cost less per heartbeat than the open one.",
            "",
            table(
                [
                    "protocol",
                    "server CPU µs/heartbeat off",
                    "on",
                    "cost",
                    "target",
                    "heartbeats/s off / on (client-bound)",
                ],
                rows,
            ),
            "",
            f"Join latency (the join heartbeat's round trip, {joins} joins to new groups one "
            "after another, per round), ms:",
            "",
            table(["protocol", "off median / p99", "on median / p99"], join_rows),
            "",
            "Reconnect storm: 2,000 clients open TLS connections to the SASL_SSL Kafka "
            "listener at once (at most 500 handshakes in flight from the client; handshake "
            f"only, P-256 ECDSA certificate): {rate:,.0f} handshakes/s, "
            f"{cpu:,.0f} µs of server CPU per handshake — about {1e6 / cpu:,.0f} handshakes "
            "per second of one core for the server alone; the storm's rate is bound by the "
            "Python clients, whose side of each handshake runs on the same two cores.",
        ]
    )
    print(body)
    if not args.quick:
        write_section("security-transport", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
